"""Error and speed of every Winograd tile side by side, on a few canonical 3x3 layers.

For each layer (batch 1, float32, padding 1) and each algorithm (F(2,3), F(4,3), F(6,3),
im2col), the time of one call as a ratio against torch.nn.functional.conv2d on the same
2 threads (above 1: faster than PyTorch), and the relative L2 error against float64
direct convolution.  Rounds alternate between the libraries, each turn starting with a
short busy wait so that PyTorch's spinning workers do not slow the next call; the median
over rounds is shown.  The filter transform (done once per layer) is not timed.

    python benchmarks/bench_tiles.py [--threads 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

LAYERS = [("vgg conv1_2", 64, 64, 224), ("vgg conv2_2", 128, 128, 112),
          ("vgg conv3_x", 256, 256, 56), ("vgg conv4_x", 512, 512, 28),
          ("vgg conv5_x", 512, 512, 14)]
ALGORITHMS = ("winograd:2", "winograd:4", "winograd:6", "im2col")


def _busy(seconds=0.02):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _best(fn, n=3):
    fn()
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import torch

    from tensorlayout.winograd import plan_conv2d

    torch.set_num_threads(args.threads)
    try:  # the engine takes its thread count from numba's setting
        import numba

        numba.set_num_threads(args.threads)
    except ImportError:
        pass
    print(f"machine: {platform.machine()}, threads: {args.threads}, torch {torch.__version__}")
    head = "".join(f"{a:>22}" for a in ALGORITHMS)
    print(f"{'layer':14}{'torch ms':>9}{head}")
    print(f"{'':23}" + "".join(f"{'ratio     error':>22}" for _ in ALGORITHMS))
    rng = np.random.default_rng(0)
    for name, c, k, hw in LAYERS:
        x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
        w = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), padding=1).numpy()
        plans = {a: plan_conv2d(x.shape, w, padding=1, algorithm=a) for a in ALGORITHMS}
        errs = {a: float(np.linalg.norm(plans[a](x) - ref) / np.linalg.norm(ref)) for a in ALGORITHMS}
        ratios = {a: [] for a in ALGORITHMS}
        t_torch = []
        for _ in range(args.rounds):
            _busy()
            tt = _best(lambda: torch.nn.functional.conv2d(xt, wt, padding=1))
            t_torch.append(tt)
            for a in ALGORITHMS:
                _busy()
                ratios[a].append(tt / _best(lambda: plans[a](x)))
        cells = "".join(f"{np.median(ratios[a]):>13.2f}{errs[a]:>9.1e}" for a in ALGORITHMS)
        print(f"{name:14}{np.median(t_torch) * 1e3:>9.2f}{cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
