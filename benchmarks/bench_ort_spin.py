"""How long onnxruntime's worker threads keep a core busy after one of its calls returns.

Loads one network of ``tensorlayout.model.zoo`` into an onnxruntime session (``--threads``
intra-op threads, one inter-op thread, all graph optimisations), calls it a few times, then
for each of ``--rounds`` rounds: waits 0.3 s (the workers park), calls it once, and reads
the processor time the session's own threads (those that appeared when it was created) have
used since the call returned, every half millisecond for 100 ms.  It prints that time at a
few moments after the return; a thread that spins for the whole span uses as much
processor time as wall time.  ``--ort-spin stop`` sets onnxruntime's
``session.force_spinning_stop`` (its threads stop spinning when a call returns), ``off`` its
``session.intra_op.allow_spinning`` 0.  Linux only (per-thread clocks).

    python benchmarks/bench_ort_spin.py [--net resnet18:96] [--threads 2] [--ort-spin stop]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peers  # noqa: E402

MOMENTS_MS = (1, 2, 5, 10, 20, 50, 99)


def _thread_clock(tid: int) -> int:
    """The clock id of thread ``tid``'s processor time (Linux's per-thread CPU clock)."""
    return (~tid << 3) | 6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet18:96", help="NAME:SIZE of a zoo network")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ort-spin", choices=tuple(_peers.ORT_SPIN_CONFIG), default="on")
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        print("per-thread processor clocks are read on Linux only")
        return 2
    if args.threads < 1 or args.rounds < 1 or ":" not in args.net:
        print("--threads and --rounds: at least 1; --net: NAME:SIZE")
        return 2
    import onnxruntime as ort

    from tensorlayout.model import zoo

    name, size = args.net.split(":")
    data, _ = zoo.export(name, size=int(size))
    x = np.random.default_rng(0).standard_normal((1, 3, int(size), int(size))).astype(np.float32)
    before = set(os.listdir("/proc/self/task"))
    opts = _peers.ort_options(ort, args.threads, args.ort_spin)
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    for _ in range(5):
        sess.run(None, feed)
    workers = [int(t) for t in set(os.listdir("/proc/self/task")) - before]

    def used() -> float:
        return sum(time.clock_gettime(_thread_clock(t)) for t in workers)

    print(f"# python benchmarks/bench_ort_spin.py --net {args.net} --threads {args.threads} "
          f"--ort-spin {args.ort_spin}")
    print(f"onnxruntime {ort.__version__}, {len(workers)} threads of its own; processor ms "
          f"they used by each wall ms after a call returned")
    print("round  " + "  ".join(f"{m:>5d}" for m in MOMENTS_MS))
    for r in range(args.rounds):
        time.sleep(0.3)
        sess.run(None, feed)
        t0, c0, points = time.perf_counter(), used(), []
        while (elapsed := time.perf_counter() - t0) < 0.1:
            points.append((elapsed * 1e3, (used() - c0) * 1e3))
            time.sleep(0.0005)
        row = [max([c for e, c in points if e <= m], default=0.0) for m in MOMENTS_MS]
        print(f"{r:5d}  " + "  ".join(f"{c:5.1f}" for c in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
