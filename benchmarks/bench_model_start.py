"""A fresh process's first runs of a network on the CPU runtime: the time of each of the
first ``--runs`` inferences, the first one counted from the start of ``load``.

While numba compiles a kernel that its cache does not hold yet, the runtime takes the
kernel's NumPy path (``tensorlayout._jit``); this shows how long that lasts.  Each network
runs in a new Python process (so nothing is warm but what the disk caches hold), started
by this script, which prints: the load time, the first inference, each later one, and the
seconds from the start of the process until the runs are at full speed (within 10% of the
median of the last ten).

    python benchmarks/bench_model_start.py [--nets mobilenet_v3_small,resnet18] [--size 96]
                                           [--runs 50] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def child(name, size, runs, threads, data_path):
    t_start = time.perf_counter()
    import numpy as np

    from tensorlayout.model import load

    t0 = time.perf_counter()
    model = load(data_path)
    t_load = time.perf_counter() - t0
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    times, stamps = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        model.run(x, threads=threads)
        times.append(time.perf_counter() - t0)
        stamps.append(time.perf_counter() - t_start)
    print(json.dumps({"load": t_load, "times": times, "stamps": stamps}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default="mobilenet_v3_small,resnet18")
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("NAME", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.size, args.runs, args.threads, args.child[1])
        return 0
    import os
    import tempfile

    import numpy as np

    from tensorlayout.model import zoo

    print(f"size {args.size}, {args.runs} runs, {args.threads} threads; ms per run, each "
          "network in a fresh process")
    for name in args.nets.split(","):
        data, _ = zoo.export(name, size=args.size)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, f"{name}.onnx")
            with open(path, "wb") as f:
                f.write(data)
            out = subprocess.run([sys.executable, __file__, "--child", name, path, "--size",
                                  str(args.size), "--runs", str(args.runs), "--threads",
                                  str(args.threads)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        t = np.array(r["times"]) * 1e3
        full = float(np.median(t[-10:]))
        settled = next((i for i in range(len(t)) if (t[i:] <= 1.1 * full).all()), len(t) - 1)
        print(f"{name}: load {r['load']:.2f} s, first inference {t[0]:.1f} ms "
              f"(first result {r['load'] + t[0] / 1e3:.2f} s after load began), full speed "
              f"{full:.2f} ms from run {settled + 1}, {r['stamps'][settled]:.1f} s into the process")
        print("  " + " ".join(f"{v:.1f}" for v in t))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
