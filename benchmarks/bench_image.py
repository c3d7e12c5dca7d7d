"""Buffer <-> RGBA image conversion speed, as a ratio against numpy.copyto of the same bytes.

For a 32 MiB float32 tensor of every image type (and both sources of the
activation types), time ``to_image`` (buffer -> image) and ``from_image``
(image -> buffer) and divide the time of one ``numpy.copyto`` of a 32 MiB
float32 array, measured in the same run: 1.0 means as fast as a plain copy.
Goal: >= 0.6 for IN_OUT_CHANNEL (NHWC and NCHW), >= 0.4 for every other type.

Two figures per direction: into an existing array (``out=``, the same work as
``copyto`` into an existing array) and into a new one, against ``numpy.copy``
(a new array plus the copy), since the first touch of fresh pages costs as
much as the copy itself on a small machine.  Times are the best of
``--repeat`` runs; the ``copyto`` baseline is measured again next to each case, so
that load from other processes on a shared machine hits both sides of a ratio alike.
The headline is the ``out=`` column: it is the same work as ``copyto``.

Run: ``python benchmarks/bench_image.py [--repeat 7] [--numpy]``
(``--numpy`` turns the compiled copy off, to see the NumPy-only figures).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

from tensorlayout import _copy
from tensorlayout.image import from_image, image_shape, to_image

MiB = 1 << 20

# (label, kind, shape in the buffer format, keyword arguments); every tensor is about 32 MiB.
CASES = [
    ("IN_OUT_CHANNEL  NHWC", "IN_OUT_CHANNEL", (1, 128, 128, 512), {}),
    ("IN_OUT_CHANNEL  NCHW", "IN_OUT_CHANNEL", (1, 512, 128, 128), {"layout": "NCHW"}),
    ("IN_OUT_HEIGHT   NHWC", "IN_OUT_HEIGHT", (1, 128, 128, 512), {}),
    ("IN_OUT_HEIGHT   NCHW", "IN_OUT_HEIGHT", (1, 512, 128, 128), {"layout": "NCHW"}),
    ("IN_OUT_WIDTH    NHWC", "IN_OUT_WIDTH", (1, 128, 128, 512), {}),
    ("IN_OUT_WIDTH    NCHW", "IN_OUT_WIDTH", (1, 512, 128, 128), {"layout": "NCHW"}),
    ("ARGUMENT        W", "ARGUMENT", (8 * MiB,), {}),
    ("CONV2D_FILTER   OIHW", "CONV2D_FILTER", (1024, 896, 3, 3), {}),
    ("CONV2D_FILTER   HWOI", "CONV2D_FILTER", (3, 3, 1024, 896), {"filter_format": "HWOI"}),
    ("DW_CONV2D_FILTER MIHW", "DW_CONV2D_FILTER", (1, 932064, 3, 3), {}),
    ("DW_CONV2D_FILTER HWIM", "DW_CONV2D_FILTER", (3, 3, 932064, 1), {"filter_format": "HWIM"}),
    ("WEIGHT_HEIGHT   OIHW", "WEIGHT_HEIGHT", (1024, 896, 3, 3), {}),
    ("WEIGHT_WIDTH    OIHW", "WEIGHT_WIDTH", (1024, 896, 3, 3), {}),
]


def best_time(fn, repeat):
    fn()  # warm-up (compilation, first touch)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--numpy", action="store_true", help="NumPy copy only (no numba)")
    args = ap.parse_args(argv)
    if args.numpy:
        os.environ["TENSORLAYOUT_NUMPY_COPY"] = "1"
    engine = _copy.engine()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs; "
          f"Python {platform.python_version()}, NumPy {np.__version__}; copy engine: {engine}")

    n = 8 * MiB
    a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    b = np.empty_like(a)
    t_copy = best_time(lambda: np.copyto(b, a), args.repeat)
    t_new = best_time(lambda: np.copy(a), args.repeat)
    print(f"baseline numpy.copyto of 32 MiB float32 into an existing array: {t_copy * 1e3:.2f} ms "
          f"({2 * a.nbytes / t_copy / 1e9:.1f} GB/s counting read and write); "
          f"numpy.copy (new array): {t_new * 1e3:.2f} ms")
    print()
    print(f"{'':<22} {'':<20} {'':<16} {'buffer -> image (ratio)':^25} {'image -> buffer (ratio)':^25}")
    header = (f"{'type / source':<22} {'shape':<20} {'image [W, H]':<16} "
              f"{'out=':>12} {'new':>12} {'out=':>12} {'new':>12}")
    print(header)
    print("-" * len(header))
    worst = {}
    for label, kind, shape, kw in CASES:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        t_copy = best_time(lambda: np.copyto(b, a), args.repeat)
        t_new = best_time(lambda: np.copy(a), args.repeat)
        scale = a.nbytes / x.nbytes  # normalise to exactly 32 MiB
        img = to_image(x, kind, max_size=None, **kw)
        img_out = np.empty_like(img)
        x_out = np.empty_like(x)
        t_to = best_time(lambda: to_image(x, kind, max_size=None, out=img_out, **kw), args.repeat)
        t_to_new = best_time(lambda: to_image(x, kind, max_size=None, **kw), args.repeat)
        t_from = best_time(lambda: from_image(img, kind, shape, out=x_out, **kw), args.repeat)
        t_from_new = best_time(lambda: from_image(img, kind, shape, **kw), args.repeat)
        ratios = (t_copy / (t_to * scale), t_new / (t_to_new * scale),
                  t_copy / (t_from * scale), t_new / (t_from_new * scale))
        if not (np.array_equal(from_image(img, kind, shape, **kw), x) and np.array_equal(img_out, img)):
            print(f"{label}: round trip is not exact", file=sys.stderr)
            return 1
        w, h = image_shape(kind, shape, **kw)
        times = (t_to, t_to_new, t_from, t_from_new)
        cells = " ".join(f"{t * 1e3:5.1f}ms {r:4.2f}" for t, r in zip(times, ratios))
        print(f"{label:<22} {str(shape).replace(' ', ''):<20} {f'[{w}, {h}]':<16} {cells}")
        worst[label] = min(ratios[0], ratios[2])
    print()
    missed = [label for label, v in worst.items()
              if v < (0.6 if label.startswith("IN_OUT_CHANNEL") else 0.4)]
    print("goal (out= ratios >= 0.6 for IN_OUT_CHANNEL, >= 0.4 for the others, both directions): "
          + ("met" if not missed else "missed by " + ", ".join(s.strip() for s in missed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
