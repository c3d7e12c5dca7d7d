"""Winograd, im2col and auto against torch.nn.functional.conv2d on the CPU, same threads.

Layers: the VGG-16 3x3 layers with C >= 64 and the ResNet-50 stride-1 3x3 layers
(REFERENCE.md section 3), batch 1, float32, padding 1.  In each of ``--repeat`` rounds the
libraries take turns, so that both see the same machine load; a turn starts with 20 ms of
busy waiting (PyTorch's OpenMP workers keep spinning for a while after a call and would
otherwise slow down whichever library runs next; a sleep instead lets the cores clock
down), then one untimed call, then three back-to-back calls of which the best counts.
Ratios are torch_time / our_time per round (above 1: faster than PyTorch); the table
shows the median time over rounds, the median ratio and, in brackets, the lowest and
highest ratio of the rounds.  The filter transform
(done once per layer by a plan) is reported separately.  Errors are relative L2 against
float64 direct convolution (PyTorch in float64).

    python benchmarks/bench_conv.py [--threads 2] [--repeat 7] [--quick]
"""

from __future__ import annotations

import argparse
import math
import platform
import time

import numpy as np

LAYERS = [
    ("vgg conv1_2", 64, 64, 224), ("vgg conv2_1", 64, 128, 112), ("vgg conv2_2", 128, 128, 112),
    ("vgg conv3_1", 128, 256, 56), ("vgg conv3_x", 256, 256, 56), ("vgg conv4_1", 256, 512, 28),
    ("vgg conv4_x", 512, 512, 28), ("vgg conv5_x", 512, 512, 14),
    ("resnet 64@56", 64, 64, 56), ("resnet 128@28", 128, 128, 28),
    ("resnet 256@14", 256, 256, 14), ("resnet 512@7", 512, 512, 7),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="first layer of each kind only")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    try:
        import numba

        numba.set_num_threads(args.threads)
    except ImportError:
        pass
    from tensorlayout.winograd import plan_conv2d

    print(f"machine: {platform.processor() or platform.machine()}, threads: {args.threads}, "
          f"torch {torch.__version__}, numpy {np.__version__}")
    head = (f"{'layer':15s} {'torch ms':>9s} {'wino ms':>8s} {'tile':>6s} {'ratio':>6s} "
            f"{'spread':>11s} {'err':>8s} {'im2col':>7s} {'err':>8s} {'auto':>16s} {'ratio':>6s} "
            f"{'spread':>11s} {'U ms':>7s} {'torch err':>9s}")
    print(head)
    print("-" * len(head))
    rng = np.random.default_rng(0)
    vgg_ratios, all_auto = [], []
    layers = LAYERS if not args.quick else [LAYERS[0], LAYERS[4], LAYERS[-1]]
    for name, C, K, H in layers:
        x = rng.standard_normal((1, C, H, H)).astype(np.float32)
        w = (rng.standard_normal((K, C, 3, 3)) / math.sqrt(9 * C)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32) * 0.1
        xt, wt, bt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), bt.double(), padding=1).numpy()

        def err(y):
            return float(np.linalg.norm(np.asarray(y, np.float64) - ref) / np.linalg.norm(ref))

        t0 = time.perf_counter()
        wino = plan_conv2d(x.shape, w, b, padding=1, algorithm="winograd")   # default tile
        t_u = time.perf_counter() - t0
        tile = wino.info.tile
        i2c = plan_conv2d(x.shape, w, b, padding=1, algorithm="im2col")
        auto = plan_conv2d(x.shape, w, b, padding=1, algorithm="auto")
        runs = {
            "torch": lambda: torch.nn.functional.conv2d(xt, wt, bt, padding=1),
            "wino": lambda: wino(x), "im2col": lambda: i2c(x), "auto": lambda: auto(x),
        }
        outs = {k: f() for k, f in runs.items()}          # warm-up (and compilation)
        times = {k: [] for k in runs}
        for _ in range(args.repeat):              # rounds, libraries taking turns
            for k, f in runs.items():
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 0.02:
                    pass                          # let the previous library's workers park
                f()                               # one untimed call to get warm again
                best = float("inf")
                for _ in range(3):                # then back-to-back calls, best kept
                    t = time.perf_counter()
                    f()
                    best = min(best, time.perf_counter() - t)
                times[k].append(best)
        med = {k: float(np.median(v)) for k, v in times.items()}
        tt = np.array(times["torch"])

        def ratio(k):
            r = tt / np.array(times[k])
            return float(np.median(r)), float(r.min()), float(r.max())

        r_w, r_i, r_a = ratio("wino"), ratio("im2col"), ratio("auto")
        if name.startswith("vgg"):
            vgg_ratios.append(r_w[0])
        all_auto.append(r_a[0])
        spread = f"[{r_w[1]:.2f}-{r_w[2]:.2f}]"
        aspread = f"[{r_a[1]:.2f}-{r_a[2]:.2f}]"
        print(f"{name:15s} {med['torch'] * 1e3:9.2f} {med['wino'] * 1e3:8.2f} "
              f"{'F(%d,3)' % tile:>6s} {r_w[0]:6.2f} {spread:>11s} {err(outs['wino']):8.1e} "
              f"{r_i[0]:7.2f} {err(outs['im2col']):8.1e} {auto.info.name:>16s} {r_a[0]:6.2f} "
              f"{aspread:>11s} {t_u * 1e3:7.1f} {err(outs['torch'].numpy()):9.1e}", flush=True)
    gm = math.exp(sum(map(math.log, vgg_ratios)) / max(1, len(vgg_ratios)))
    print(f"\ngeometric mean of Winograd/PyTorch speed over the VGG layers: {gm:.2f}x "
          f"(goal >= 1.5x: {'met' if gm >= 1.5 else 'not met'})")
    print(f"slowest auto layer (median ratio): {min(all_auto):.2f}x PyTorch "
          f"(goal >= 0.9x: {'met' if min(all_auto) >= 0.9 else 'not met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
