"""Time the Winograd engine's tiles and schedules per layer, to choose the auto rule's
and the engine's defaults (not a goal benchmark: it has no peer).

For each layer and thread count: every tile F(2,3), F(4,3), F(6,3) with the default
Tuning (the native engine), the split schedule forced (``s``), small blocks (``t``,
``b``) and BLAS from Python threads (``B``); PyTorch and im2col; and a one-shot conv2d's
plan alone (``U2`` ... ``U6``: the weight transform into the packed panels and the plan's
setup, what each one-shot call pays before convolving).  Times are
the median of ``--repeat`` rounds of the best of 3 calls, in ms.

    python benchmarks/sweep_engine.py [--threads 2,16] [--repeat 5] [--layers 64@224,512@7]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

LAYERS = {"64@224": (64, 64, 224), "64>128@112": (64, 128, 112), "128@112": (128, 128, 112),
          "128>256@56": (128, 256, 56), "256@56": (256, 256, 56), "256>512@28": (256, 512, 28),
          "512@28": (512, 512, 28), "512@14": (512, 512, 14), "64@56": (64, 64, 56),
          "128@28": (128, 128, 28), "256@14": (256, 256, 14), "512@7": (512, 512, 7)}


def best_of(f, n=3):
    f()
    b = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        f()
        b = min(b, time.perf_counter() - t)
    return b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--layers", default=",".join(LAYERS))
    args = ap.parse_args()
    try:
        import numba

        numba.set_num_threads(max(int(t) for t in args.threads.split(",")))
    except ImportError:
        pass
    from tensorlayout.winograd import Tuning, plan_conv2d

    print(f"machine: {platform.processor() or platform.machine()}")
    rng = np.random.default_rng(0)
    for nt in (int(t) for t in args.threads.split(",")):
        print(f"\nthreads {nt}")
        for name in args.layers.split(","):
            C, K, H = LAYERS[name]
            x = rng.standard_normal((1, C, H, H)).astype(np.float32)
            w = (rng.standard_normal((K, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
            runs = {}
            variants = {"": Tuning(threads=nt),
                        "s": Tuning(threads=nt, min_block_tiles=1 << 20),
                        "t": Tuning(threads=nt, min_block_tiles=8),
                        "b": Tuning(threads=nt, block_bytes=1 << 20, min_block_tiles=32),
                        "B": Tuning(threads=nt, gemm="blas")}
            for m in (2, 4, 6):
                for label, tun in variants.items():
                    p = plan_conv2d(x.shape, w, padding=1, algorithm=f"winograd:{m}", tuning=tun)
                    runs[f"F{m}{label}"] = (p, p.schedule().mode)
            import torch

            torch.set_num_threads(nt)
            xt, wt_ = torch.from_numpy(x), torch.from_numpy(w)

            class _T:
                def __call__(self, _x):
                    return torch.nn.functional.conv2d(xt, wt_, padding=1)
            runs["torch"] = (_T(), "")
            p = plan_conv2d(x.shape, w, padding=1, algorithm="im2col", tuning=Tuning(threads=nt))
            runs["im2col"] = (p, "")
            times = {k: [] for k in runs}
            wt = {m: [] for m in (2, 4, 6)}
            for _ in range(args.repeat):
                for k, (p, _) in runs.items():
                    t0 = time.perf_counter()
                    while time.perf_counter() - t0 < 0.02:
                        pass
                    times[k].append(best_of(lambda: p(x)))
                for m in (2, 4, 6):
                    wt[m].append(best_of(lambda: plan_conv2d(
                        x.shape, w, padding=1, algorithm=f"winograd:{m}", weights="per-call",
                        tuning=Tuning(threads=nt))))
            med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
            best = min(med, key=med.get)
            cells = " ".join(f"{k}={v:.2f}{'*' if k == best else ''}({runs[k][1][:1]})"
                             for k, v in med.items())
            wts = " ".join(f"U{m}={float(np.median(v)) * 1e3:.2f}" for m, v in wt.items())
            print(f"{name:11s} {cells} | {wts}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
