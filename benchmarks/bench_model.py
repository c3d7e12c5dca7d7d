"""Whole networks: tensorlayout's CPU runtime against onnxruntime, same model, same threads.

Networks: ResNet-18, VGG-11 and MobileNetV2 (torchvision's architectures written in plain
PyTorch, random weights, exported with torch.onnx.export) at 224 x 224, batch 1, float32.
Both runtimes get ``--threads`` threads (onnxruntime: intra-op threads, one inter-op
thread; tensorlayout: numba's pool and BLAS).  Each runtime runs twice untimed first.  In
each of ``--rounds`` rounds the two take turns (which goes first alternates) and each is
timed once on the same input.  The table shows the median time over rounds, the spread
(lowest - highest), and the ratio onnxruntime time / tensorlayout time per round as its
median [lowest - highest] (above 1: tensorlayout faster).  The outputs are compared:
relative L2 error and top-1 class.

    python benchmarks/bench_model.py [--threads 2] [--rounds 7] [--size 224] [--nets resnet18,vgg11]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

NETS = ("resnet18", "vgg11", "mobilenet_v2")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--nets", default=",".join(NETS))
    args = ap.parse_args()

    import onnxruntime as ort

    from tensorlayout.model import load, zoo
    from tensorlayout.backends.cpu import threads_limit

    print(f"machine: {platform.processor() or platform.machine()}, threads: {args.threads}, "
          f"onnxruntime {ort.__version__}, numpy {np.__version__}, input 1x3x{args.size}x{args.size}, "
          f"{args.rounds} rounds")
    head = (f"{'network':13s} {'ort ms':>8s} {'spread':>13s} {'ours ms':>8s} {'spread':>13s} "
            f"{'ratio':>6s} {'[low - high]':>13s} {'rel L2':>8s} {'top-1':>6s}  convolutions")
    print(head)
    print("-" * len(head))
    for name in args.nets.split(","):
        data, _ = zoo.export(name, size=args.size)
        model = load(data)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
        feed = {sess.get_inputs()[0].name: x}

        def ours():
            with threads_limit(args.threads):
                return model.run(x)

        def theirs():
            return sess.run(None, feed)[0]

        for _ in range(2):
            y, r = ours(), theirs()
        t_ours, t_ort = [], []
        for k in range(args.rounds):
            order = (ours, theirs) if k % 2 == 0 else (theirs, ours)
            for fn in order:
                t0 = time.perf_counter()
                fn()
                (t_ours if fn is ours else t_ort).append(time.perf_counter() - t0)
        t_ours, t_ort = np.array(t_ours) * 1e3, np.array(t_ort) * 1e3
        ratio = t_ort / t_ours
        err = float(np.linalg.norm(y.astype(np.float64) - r) / np.linalg.norm(r.astype(np.float64)))
        algs = {}
        for s in model.steps:
            if s.node.op == "Conv":
                algs[s.info["algorithm"]] = algs.get(s.info["algorithm"], 0) + 1
        conv = ", ".join(f"{n} {a}" for a, n in sorted(algs.items(), key=lambda kv: -kv[1]))
        print(f"{name:13s} {np.median(t_ort):8.1f} {t_ort.min():6.1f}-{t_ort.max():<6.1f} "
              f"{np.median(t_ours):8.1f} {t_ours.min():6.1f}-{t_ours.max():<6.1f} "
              f"{np.median(ratio):6.2f} {ratio.min():6.2f}-{ratio.max():<6.2f} {err:8.1e} "
              f"{'same' if np.argmax(y) == np.argmax(r) else 'DIFF':>6s}  {conv}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
