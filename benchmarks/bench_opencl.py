"""OpenCL images on the device: buffer <-> image kernels against a plain buffer copy, and
Winograd against direct convolution on images.

Every time is an OpenCL profiling event (start to end on the device), the median of
several runs after a warm-up.  Ratios:

- transfer: (time of enqueue_copy buffer -> buffer of the same bytes) / (transfer time),
  so 1.0 means as fast as a copy; the goal is >= 0.5.  A staged transfer (the default on
  CPU devices) is a kernel and an image copy: its time runs from the first command's
  start to the last one's end;
- convolution: direct time / Winograd time (the three Winograd kernels summed; the filter
  transform is done once beforehand and not counted), > 1 means Winograd is faster.

Usage: python benchmarks/bench_opencl.py [--device SPEC] [--quick] [--path direct|staged] [--no-conv]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np

try:
    import pyopencl as cl
except ImportError:  # pragma: no cover
    print("bench_opencl: PyOpenCL is not installed (pip install 'tensorlayout[opencl]'); skipped")
    sys.exit(0)

from tensorlayout.errors import DeviceLimitError, OpenCLUnavailable
from tensorlayout.opencl import (choose_path, conv2d_direct_image, conv2d_winograd_image, empty_image,
                                 enqueue_buffer_to_image, enqueue_image_to_buffer, get_context,
                                 to_cl_image)
from tensorlayout.image import image_shape


def event_ms(ev) -> float:
    """Device time of one event, or of a list of events: first start to last end."""
    evs = ev if isinstance(ev, list) else [ev]
    evs[-1].wait()
    return (evs[-1].profile.end - evs[0].profile.start) * 1e-6


def median_ms(fn, runs: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    return float(np.median([fn() for _ in range(runs)]))


def copy_ms(q, ctx, nbytes, runs):
    a = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    cl.enqueue_fill_buffer(q, a, np.float32(1), 0, nbytes).wait()
    return median_ms(lambda: event_ms(cl.enqueue_copy(q, b, a, byte_count=nbytes)), runs)


def bench_transfers(cctx, runs, path=None, only=None):
    q, ctx = cctx.queue, cctx.context
    rows = []
    cases = [
        ("IN_OUT_CHANNEL", "NHWC", (1, 512, 128, 128), {}),
        ("IN_OUT_CHANNEL", "NCHW", (1, 128, 512, 128), {"layout": "NCHW"}),
        ("CONV2D_FILTER", "OIHW", (1024, 512, 3, 3), {}),
    ]
    for dtype in (np.float32, np.float16):
        for kind, fmt, shape, kw in cases:
            if only and only != np.dtype(dtype).name:
                continue
            n = int(np.prod(shape))
            nbytes = n * np.dtype(dtype).itemsize
            w, h = image_shape(kind, shape, **kw)
            try:
                cctx.check_image(w, h, dtype)
            except (DeviceLimitError, OpenCLUnavailable) as exc:
                rows.append((kind, fmt, dtype, shape, nbytes, None, None, None, str(exc)))
                continue
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
            host = np.random.default_rng(0).standard_normal(n).astype(dtype)
            cl.enqueue_copy(q, buf, host).wait()
            img = empty_image(q, w, h, dtype)
            base = copy_ms(q, ctx, nbytes, runs)
            t_in = median_ms(lambda: event_ms(enqueue_buffer_to_image(
                q, buf, img, kind, shape, buffer_dtype=dtype, path=path, all_events=True, **kw)), runs)
            t_out = median_ms(lambda: event_ms(enqueue_image_to_buffer(
                q, img, buf, kind, shape, path=path, all_events=True, **kw)), runs)
            rows.append((kind, fmt, dtype, shape, nbytes, base, t_in, t_out, ""))
    return rows


LAYERS = [  # (name, N, C, H, W, O), 3x3, pad 1
    ("VGG conv3 256@56", 1, 256, 56, 56, 256),
    ("ResNet 128@28", 1, 128, 28, 28, 128),
    ("ResNet 256@14", 1, 256, 14, 14, 256),
    ("VGG conv4 512@28", 1, 512, 28, 28, 512),
    ("small 32@64", 1, 32, 64, 64, 32),
]


def bench_conv(cctx, runs, quick):
    q = cctx.queue
    rows = []
    layers = LAYERS[1:3] if quick else LAYERS
    rng = np.random.default_rng(1)
    for name, N, C, H, W, O in layers:
        x = rng.standard_normal((N, H, W, C)).astype(np.float32)
        wt = (rng.standard_normal((O, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
        xi = to_cl_image(q, x, "IN_OUT_CHANNEL")
        fi = to_cl_image(q, wt, "CONV2D_FILTER")

        def direct():
            t = time.perf_counter()
            out, _ = conv2d_direct_image(q, xi, x.shape, fi, wt.shape, padding=1)
            q.finish()
            return (time.perf_counter() - t) * 1e3

        t_direct = median_ms(direct, runs, warmup=1)
        flops = 2.0 * N * H * W * O * C * 9
        res = [name, t_direct, flops / t_direct * 1e-6]
        for tile in (2, 4, 6):
            try:
                ui = to_cl_image(q, wt, "WINOGRAD_FILTER", tile=tile)

                def wino():
                    t = time.perf_counter()
                    conv2d_winograd_image(q, xi, x.shape, ui, wt.shape, tile=tile, padding=1)
                    q.finish()
                    return (time.perf_counter() - t) * 1e3

                res.append(median_ms(wino, runs, warmup=1))
            except DeviceLimitError:
                res.append(None)
        rows.append(res)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="index or name substring (default: first device)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="fewer conv layers")
    ap.add_argument("--path", choices=("direct", "staged"), default=None,
                    help="transfer path (default: the device's, see choose_path)")
    ap.add_argument("--dtype", choices=("float32", "float16"), default=None, help="only this dtype")
    ap.add_argument("--no-conv", action="store_true", help="transfers only")
    args = ap.parse_args(argv)
    try:
        cctx = get_context(args.device)
    except OpenCLUnavailable as exc:
        print(f"bench_opencl: skipped: {exc}")
        return 0
    info = cctx.info
    print(f"device: {info.name} ({info.platform}; {info.kind}, {info.compute_units} compute units, "
          f"images up to {info.max_image_size[0]}x{info.max_image_size[1]})")
    print(f"host: {platform.node()} {platform.machine()}, Python {platform.python_version()}, "
          f"PyOpenCL {cl.VERSION_TEXT}")
    print()
    path = args.path or choose_path(cctx)
    print(f"buffer <-> image, 32 MiB activations and a 1024x512x3x3 filter, {path} path "
          "(ratio = copy time / transfer time; goal >= 0.5)")
    print(f"{'type':<15} {'src':<5} {'dtype':<8} {'MiB':>6} {'copy ms':>8} {'to img ms':>9} "
          f"{'ratio':>6} {'to buf ms':>9} {'ratio':>6}")
    for kind, fmt, dtype, shape, nbytes, base, t_in, t_out, note in bench_transfers(cctx, args.runs, path, args.dtype):
        dn = np.dtype(dtype).name
        if base is None:
            print(f"{kind:<15} {fmt:<5} {dn:<8} {nbytes / 2**20:6.1f}  skipped: {note}")
            continue
        print(f"{kind:<15} {fmt:<5} {dn:<8} {nbytes / 2**20:6.1f} {base:8.3f} {t_in:9.3f} "
              f"{base / t_in:6.2f} {t_out:9.3f} {base / t_out:6.2f}")
    if args.no_conv:
        return 0
    print()
    print("3x3 conv, pad 1, float32 images: wall time per call (ms), median; "
          "ratio = direct / Winograd")
    print(f"{'layer':<18} {'direct':>8} {'GFLOP/s':>8} {'F(2,3)':>8} {'ratio':>6} {'F(4,3)':>8} "
          f"{'ratio':>6} {'F(6,3)':>8} {'ratio':>6}")
    for name, td, gf, *tw in bench_conv(cctx, max(3, args.runs // 2), args.quick):
        cells = "".join(f" {'n/a':>8} {'':>6}" if t is None else f" {t:8.2f} {td / t:6.2f}" for t in tw)
        print(f"{name:<18} {td:8.2f} {gf:8.1f}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
