"""How long the native workers poll before parking, on whole networks run after idle gaps.

A process that runs a network now and then (a frame every 100 ms) finds its cores idle; a
worker parked in the kernel then wakes slowly at every layer.  For each network this
loads it once and, for each gap, times rounds of: sleep the gap, then the best of
``--inner`` runs, alternately with the workers' poll at ``a`` and at ``b`` time-stamp ticks
(``tensorlayout.backends.cpu_bound.SPIN_TICKS``, which a bound run reads at each call;
its default is ``tensorlayout.winograd._pool.SPIN_TICKS``); it prints the medians
and the median ratio A / B per gap (above 1: B faster).  No other runtime is in the
process.

    python benchmarks/bench_spin.py 300000 3000000 --nets resnet18:96,squeezenet1_1:224
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=int, nargs="?", default=300_000,
                    help="poll A, time-stamp ticks (default 300000)")
    ap.add_argument("b", type=int, nargs="?", default=3_000_000,
                    help="poll B, time-stamp ticks (default 3000000)")
    ap.add_argument("--nets", default="resnet18:96,squeezenet1_1:224",
                    help="comma-separated NAME:SIZE of tensorlayout.model.zoo networks")
    ap.add_argument("--gaps", default="0,10,100", help="idle gaps before a round, ms")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--inner", type=int, default=3, help="runs per round (best counts)")
    args = ap.parse_args()
    if min(args.a, args.b) < 0 or args.threads < 1 or args.rounds < 1 or args.inner < 1:
        print("a, b: at least 0; --threads, --rounds, --inner: at least 1")
        return 2
    os.environ.setdefault("TENSORLAYOUT_COMPILE", "wait")
    from tensorlayout.backends import cpu_bound
    from tensorlayout.model import load, zoo

    gaps = [float(g) / 1e3 for g in args.gaps.split(",")]
    print(f"# python benchmarks/bench_spin.py {args.a} {args.b} --nets {args.nets} "
          f"--gaps {args.gaps} --threads {args.threads} --rounds {args.rounds}")
    print(f"{'network':>22}  {'gap ms':>6}  {'A ms':>7}  {'B ms':>7}  {'A / B':>6} [spread]")
    for spec in args.nets.split(","):
        name, size = spec.split(":")
        data, _ = zoo.export(name, size=int(size))
        model = load(data)
        x = np.random.default_rng(0).standard_normal((1, 3, int(size), int(size))).astype(
            np.float32)
        for _ in range(5):
            model.run(x, threads=args.threads)
        for gap in gaps:
            got = {args.a: [], args.b: []}
            for r in range(args.rounds):
                for ticks in ((args.a, args.b) if r % 2 == 0 else (args.b, args.a)):
                    cpu_bound.SPIN_TICKS = ticks
                    time.sleep(gap)
                    best = float("inf")
                    for _ in range(args.inner):
                        t = time.perf_counter()
                        model.run(x, threads=args.threads)
                        best = min(best, time.perf_counter() - t)
                    got[ticks].append(best)
            a, b = np.array(got[args.a]), np.array(got[args.b])
            q = a / b
            print(f"{spec:>22}  {gap * 1e3:6.0f}  {np.median(a) * 1e3:7.3f}  "
                  f"{np.median(b) * 1e3:7.3f}  {np.median(q):6.3f} [{q.min():.2f}-{q.max():.2f}]",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
