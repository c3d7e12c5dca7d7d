"""The CPU backend's algorithms for one convolution layer, side by side, each layer alone
(its weights in the cache; in a network they come from memory, and the thresholds of
``tensorlayout.schedule.winograd`` were set on whole networks with ``bench_setting.py``).

Contestants, each on the same float32 input and weights, the weights prepared before
timing (packed, or transformed for Winograd), the bias and a ReLU inside the timed call:

* shifted   :class:`tensorlayout.backends.cpu_kernels.Shifted` (one GEMM per tap over the
            input dealt into its stride phases; the dealing is inside the timed call);
* im2col    :class:`tensorlayout.backends.cpu_kernels.Im2col` (the unfolding inside);
* F(2,3), F(4,3)  the Winograd engine's plan (``plan_conv2d(..., algorithm="winograd:m")``,
            input and output transforms inside; ReLU not applied: Winograd's figure is
            slightly flattered);

all on the same native workers, ``--threads`` of them.  The contestants take turns in each
round (each turn the best of ``--inner`` calls); figures are medians over ``--rounds``
rounds with the lowest and highest round in brackets, and the ratio is the baseline's
time over the contestant's in the same round (baseline: Winograd with the engine's own
tile).  Every result is checked against
a float64 convolution first.  Layers are the 3 x 3 stride-1 layers of SqueezeNet 1.1,
ResNet-18 and VGG-11 at 96^2 and 224^2 inputs (``--layers C,H,O;...`` for others).

    python benchmarks/bench_cpu_conv.py [--threads 2] [--rounds 5] [--layers 16,23,64;...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "src"))

LAYERS = [  # (C, H = W, O): 3 x 3, stride 1, padding 1
    (16, 23, 64), (32, 11, 128), (48, 5, 192), (64, 5, 256),        # SqueezeNet 96^2
    (16, 55, 64), (32, 27, 128), (48, 13, 192), (64, 13, 256),      # SqueezeNet 224^2
    (64, 24, 64), (128, 12, 128), (256, 6, 256), (512, 3, 512),     # ResNet-18 96^2
    (64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512),    # ResNet-18 224^2
]


def _reference(x, w, b):
    """float64 3 x 3 convolution, padding 1, with bias."""
    N, C, H, W = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((N, w.shape[0], H, W))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i:i + H, j:j + W], w[:, :, i, j])
    return y + b[None, :, None, None]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inner", type=int, default=20, help="calls per turn (best counts)")
    ap.add_argument("--layers", help="C,H,O;C,H,O;... (3x3, stride 1, padding 1)")
    args = ap.parse_args()
    os.environ.setdefault("TENSORLAYOUT_COMPILE", "wait")
    from tensorlayout.backends import cpu_kernels as K
    from tensorlayout.backends.cpu import threads_limit
    from tensorlayout.schedule.winograd import SHIFT_MAX_MACS
    from tensorlayout.winograd import choose_algorithm, plan_conv2d

    if not K.ready():
        print("the compiled kernels are not available here (numba / llvmlite)")
        return 1
    layers = LAYERS if not args.layers else [tuple(int(v) for v in s.split(","))
                                             for s in args.layers.split(";")]
    nt = args.threads
    print(f"# python benchmarks/bench_cpu_conv.py --threads {nt} --rounds {args.rounds}"
          + (f" --layers '{args.layers}'" if args.layers else ""))
    print(f"threads {nt}; {args.rounds} rounds of best-of-{args.inner}; ratio = baseline "
          "(Winograd, the engine's tile) time / contestant's; SHIFT_MAX_MACS "
          f"{SHIFT_MAX_MACS / 1e6:.0f}M")
    print(f"{'layer':>16} {'MACs':>6}  " + "  ".join(
        f"{n:>22}" for n in ("shifted", "im2col", "F(2,3)", "F(4,3)")))
    relu = (1, 0.0, 0.0)
    with threads_limit(nt):
        for C, H, O in layers:
            rng = np.random.default_rng(C * H + O)
            x = rng.standard_normal((1, C, H, H)).astype(np.float32)
            w = (rng.standard_normal((O, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
            b = rng.standard_normal(O).astype(np.float32)
            geo = (x.shape, (1, 1), (1, 1), (1, 1), (H, H))
            runs = {"shifted": K.Shifted(w, b, relu, *geo), "im2col": K.Im2col(w, b, relu, *geo)}
            for m in (2, 4):
                runs[f"F({m},3)"] = plan_conv2d(x.shape, w, b, padding=1,
                                                algorithm=f"winograd:{m}")
            ref = _reference(x, w, b)
            for name, f in runs.items():
                y = f(x, nt=nt) if name in ("shifted", "im2col") else f(x)
                want = np.maximum(ref, 0) if name in ("shifted", "im2col") else ref
                err = np.linalg.norm(y - want) / np.linalg.norm(want)
                if not err <= 1e-5:
                    print(f"{name} on {C},{H},{O}: relative L2 {err:.1e} > 1e-5")
                    return 1
            tile = choose_algorithm(x.shape, w.shape, padding=1)[1] or 2
            base = f"F({tile},3)"
            times = {n: [] for n in runs}
            for _ in range(args.rounds):
                for name, f in runs.items():
                    call = (lambda f=f: f(x, nt=nt)) if name in ("shifted", "im2col") else (
                        lambda f=f: f(x))
                    best = np.inf
                    for _ in range(args.inner):
                        t = time.perf_counter()
                        call()
                        best = min(best, time.perf_counter() - t)
                    times[name].append(best)
            t = {n: np.array(v) for n, v in times.items()}
            cells = []
            for name in runs:
                r = t[base] / t[name]
                cells.append(f"{np.median(t[name]) * 1e6:7.0f}us {np.median(r):4.2f}x"
                             f"[{r.min():4.2f}-{r.max():4.2f}]")
            macs = 9 * C * O * H * H
            print(f"{C:>4}@{H:>2}x{H:<2}->{O:<4} {macs / 1e6:5.1f}M  " + "  ".join(
                f"{c:>22}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
