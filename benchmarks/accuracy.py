"""Relative L2 error of every algorithm (float32) against float64 direct convolution.

Canonical layers of REFERENCE.md section 3 (VGG-16 and ResNet-50 3x3, batch 1, padding 1),
plus a 5x5 layer for F(4,5).  Inputs are standard normal, weights scaled by 1/sqrt(fan-in).
The float64 reference is tensorlayout's direct algorithm in float64 (checked against
PyTorch in the tests).  ``--full`` runs the large early layers too (slower).

    python benchmarks/accuracy.py [--full]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

LAYERS = [
    ("vgg 64->64@224", 64, 64, 224), ("vgg 128->128@112", 128, 128, 112),
    ("vgg 256->256@56", 256, 256, 56), ("vgg 512->512@28", 512, 512, 28),
    ("vgg 512->512@14", 512, 512, 14), ("resnet 64@56", 64, 64, 56),
    ("resnet 128@28", 128, 128, 28), ("resnet 256@14", 256, 256, 14),
    ("resnet 512@7", 512, 512, 7),
]
ALGS = ["direct", "im2col", "winograd:2", "winograd:4", "winograd:6"]
GOAL = {"winograd:2": 4.8e-7 * 1.5, "winograd:4": 2.8e-6 * 1.5, "winograd:6": 5.9e-6 * 1.5,
        "winograd:4 (5x5)": 5.9e-6 * 1.5}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true")
    args = ap.parse_args()
    from tensorlayout.winograd import conv2d

    layers = LAYERS if args.full else [L for L in LAYERS if L[3] <= 56]
    rng = np.random.default_rng(0)
    print(f"{'layer':18s}" + "".join(f"{a:>12s}" for a in ALGS))
    worst = {a: 0.0 for a in ALGS}
    for name, C, K, H in layers:
        x = rng.standard_normal((1, C, H, H))
        w = rng.standard_normal((K, C, 3, 3)) / math.sqrt(9 * C)
        ref = conv2d(x, w, padding=1, algorithm="direct")
        row = f"{name:18s}"
        for a in ALGS:
            y = conv2d(x.astype(np.float32), w.astype(np.float32), padding=1, algorithm=a)
            e = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
            worst[a] = max(worst[a], e)
            row += f"{e:12.2e}"
        print(row, flush=True)
    x = rng.standard_normal((1, 128, 56, 56))
    w = rng.standard_normal((128, 128, 5, 5)) / math.sqrt(25 * 128)
    ref = conv2d(x, w, padding=2, algorithm="direct")
    y = conv2d(x.astype(np.float32), w.astype(np.float32), padding=2, algorithm="winograd:4")
    e45 = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    print(f"\nF(4,5) on 128->128@56 (5x5): {e45:.2e}")
    worst["winograd:4 (5x5)"] = e45
    print("\nworst error vs goal (1.5x REFERENCE.md's figures):")
    for a, lim in GOAL.items():
        print(f"  {a:18s} {worst[a]:.2e} <= {lim:.2e}: {'met' if worst[a] <= lim else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
