"""``tensorlayout opencl``: devices, a round trip through a real image, a convolution on images."""

from __future__ import annotations

import time

import numpy as np

from .. import _backend
from ..errors import AlgorithmError, ConvolutionError, LayoutError, OpenCLUnavailable, short
from ..image import image_layout
from ._common import (check_array_size, dtype_arg, image_arguments, integer, no_action, nonneg, positive,
                      print_json, shape_arg)


def _image_dtype(args):
    """--dtype (any spelling of float32 / float16), with the old --half as an alias of --dtype float16."""
    dt = dtype_arg(args.dtype or "float32", "--dtype", ("float32", "float16"))
    if args.half and args.dtype is not None and dt != np.float16:
        raise LayoutError(f"--half is not allowed with --dtype = {short(args.dtype)!r}: --half means --dtype float16")
    return np.dtype(np.float16) if args.half else dt


def _add_dtype(p):
    p.add_argument("--dtype", default=None,
                   help="image channel type: float32 (fp32; CL_FLOAT, default) or float16 (fp16, half; "
                        "CL_HALF_FLOAT)")
    p.add_argument("--half", action="store_true", help="the old spelling of --dtype float16")
    p.add_argument("--device", default=None, help="index or name substring (default: first device)")
    p.add_argument("--json", action="store_true", help="print JSON")


def register(sub) -> None:
    p = sub.add_parser("opencl", help="real OpenCL images: devices, round trips, convolution")
    osub = p.add_subparsers(dest="opencl_command", metavar="ACTION")
    p.set_defaults(func=no_action(p))

    d = osub.add_parser("devices", help="list OpenCL devices with image limits and half support")
    d.add_argument("--json", action="store_true", help="print JSON")
    d.set_defaults(func=_devices)

    r = osub.add_parser("roundtrip", help="buffer -> image -> buffer on the device, compared with NumPy")
    image_arguments(r, "image type, e.g. IN_OUT_CHANNEL, CONV2D_FILTER, WINOGRAD_FILTER (case-insensitive)",
                    "buffer shape, comma separated (e.g. 1,7,9,5)", "NHWC (default) or NCHW for activations")
    _add_dtype(r)
    r.set_defaults(func=_roundtrip)

    c = osub.add_parser("conv", help="a random conv2d on images, checked against float64")
    c.add_argument("--shape", "--input", dest="shape", default="1,32,28,28", metavar="N,C,H,W",
                   help="input shape N,C,H,W (--input is the old spelling; default %(default)s)")
    c.add_argument("--out-channels", type=positive, default=32, help="output channels K (default %(default)s)")
    c.add_argument("--kernel", type=positive, default=3,
                   help="square kernel size (default %(default)s; Winograd needs 3)")
    c.add_argument("--padding", type=nonneg, default=1, help="zero padding on each side (default %(default)s)")
    c.add_argument("--algorithm", type=str.lower, default="winograd", choices=("winograd", "direct"),
                   help="winograd or direct (default %(default)s)")
    c.add_argument("--tile", type=integer, default=None, help="Winograd output tile: 2, 4 or 6")
    _add_dtype(c)
    c.set_defaults(func=_conv)


def _devices(args) -> int:
    from ..opencl import list_devices

    infos = list_devices()
    if args.json:
        print_json([i.__dict__ for i in infos])
    else:
        for i in infos:
            print(i.describe())
    return 0


def _image_bytes(queue, img):
    from ..opencl import image_dtype
    from ..opencl._device import cl as _cl

    cl = _cl()

    w, h = img.shape
    out = np.empty((h, w, 4), image_dtype(img))
    cl.enqueue_copy(queue, out, img, origin=(0, 0), region=(w, h)).wait()
    return out


def _roundtrip(args) -> int:
    from ..image import from_image, to_image
    from ..opencl import from_cl_image, get_context, to_cl_image

    shape = shape_arg(args.shape, "--shape")
    dtype = _image_dtype(args)
    kw = dict(layout=args.layout, filter_format=args.filter_format, tile=args.tile)
    lay = image_layout(args.kind, shape, **kw)         # checks the kind, the shape and the options
    check_array_size("--shape", shape, 8)
    h, w, _ = lay.physical_shape
    check_array_size("--shape", (h, w, 4), 8)
    cctx = get_context(args.device)
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    img = to_cl_image(cctx.queue, a, args.kind, dtype=dtype, **kw)
    ref = to_image(a, args.kind, dtype=dtype, **kw)
    same_img = np.array_equal(_image_bytes(cctx.queue, img).view(np.uint8), ref.view(np.uint8))
    back = from_cl_image(cctx.queue, img, args.kind, shape, **kw)
    want = np.ascontiguousarray(from_image(ref, args.kind, shape, **kw))
    same_back = np.array_equal(np.ascontiguousarray(back).view(np.uint8), want.view(np.uint8))
    ctype = "CL_HALF_FLOAT" if dtype == np.float16 else "CL_FLOAT"
    if args.json:
        print_json({"device": cctx.info.name, "platform": cctx.info.platform, "kind": lay.name,
                    "shape": list(shape), "image": list(img.shape), "channel_type": ctype,
                    "image_identical": bool(same_img), "buffer_identical": bool(same_back)})
        return 0 if same_img and same_back else 1
    print(f"device: {cctx.info.name} ({cctx.info.platform})")
    print(f"{lay.name} {tuple(shape)} -> image [{img.shape[0]}, {img.shape[1]}] {ctype}")
    print(f"image bytes identical to the NumPy path: {'yes' if same_img else 'NO'}")
    print(f"buffer read back identical to the NumPy path: {'yes' if same_back else 'NO'}")
    return 0 if same_img and same_back else 1


def _conv(args) -> int:
    from ..opencl import conv2d, get_context

    n, c, h, w = shape_arg(args.shape, "--shape", 4, "N,C,H,W")
    k = args.kernel
    if args.algorithm == "winograd" and k != 3:
        raise AlgorithmError(f"--kernel = {k} is not allowed with --algorithm winograd: Winograd on "
                             "images takes 3x3 kernels (use --algorithm direct)")
    if h + 2 * args.padding < k or w + 2 * args.padding < k:
        raise ConvolutionError(f"--kernel = {k} is not allowed: it does not fit the {h}x{w} input "
                               f"with padding {args.padding}")
    oh, ow = h + 2 * args.padding - k + 1, w + 2 * args.padding - k + 1
    for what, size in (("--shape", (n, c, h + 2 * args.padding, w + 2 * args.padding)),
                       ("--out-channels", (n, args.out_channels, oh, ow)),
                       ("--kernel", (args.out_channels, c, k, k))):
        check_array_size(what, size, 8)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((args.out_channels, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(args.out_channels).astype(np.float32)
    dtype = _image_dtype(args)
    cctx = get_context(args.device)
    conv2d(x, wt, b, padding=args.padding, algorithm=args.algorithm, tile=args.tile,
           dtype=dtype, device=cctx)   # build the kernels
    t = time.perf_counter()
    y = conv2d(x, wt, b, padding=args.padding, algorithm=args.algorithm, tile=args.tile,
           dtype=dtype, device=cctx)
    dt = time.perf_counter() - t
    ref = _conv_ref(x, wt, b, args.padding)
    err = np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref)
    if args.json:
        print_json({"device": cctx.info.name, "platform": cctx.info.platform, "algorithm": args.algorithm,
                    "tile": args.tile, "input": [n, c, h, w], "weights": list(wt.shape),
                    "output": list(y.shape), "dtype": np.dtype(dtype).name,
                    "rel_l2_error_vs_float64_direct": float(f"{err:.3g}"), "ms": round(dt * 1e3, 3)})
        return 0
    print(f"device: {cctx.info.name} ({cctx.info.platform})")
    print(f"conv2d {args.algorithm}{'' if args.tile is None else f' tile {args.tile}'} "
          f"x {tuple(x.shape)} w {tuple(wt.shape)} pad {args.padding} -> {tuple(y.shape)} "
          f"{np.dtype(dtype).name} images")
    print(f"relative L2 error against float64 direct convolution: {err:.2e}")
    print(f"time (with host transfers): {dt * 1e3:.2f} ms")
    return 0


def _conv_ref(x, w, b, p):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    w = w.astype(np.float64)
    O, _, KH, KW = w.shape
    OH, OW = x.shape[2] - KH + 1, x.shape[3] - KW + 1
    y = np.zeros((x.shape[0], O, OH, OW))
    for kh in range(KH):
        for kw in range(KW):
            y += np.einsum("nchw,oc->nohw", x[:, :, kh:kh + OH, kw:kw + OW], w[:, :, kh, kw])
    return y + b[None, :, None, None]


def demo(tour) -> None:
    tour.section("OpenCL: tensors in real RGBA images")
    if not _backend.has_pyopencl():
        tour.print("PyOpenCL is not installed, so this part is skipped "
                   "(pip install 'tensorlayout[opencl]').")
        return
    from ..image import to_image
    from ..opencl import conv2d, from_cl_image, get_context, to_cl_image

    try:
        cctx = get_context()
    except OpenCLUnavailable as exc:
        tour.print(f"No OpenCL device, so this part is skipped: {exc}.")
        return
    info = cctx.info
    tour.print(f"Device: {info.name} on {info.platform} ({info.kind}); images up to "
               f"{info.max_image_size[0]} x {info.max_image_size[1]} pixels, "
               f"half images {'supported' if info.half_images else 'not supported'}.")
    x = np.arange(2 * 3 * 5 * 6, dtype=np.float32).reshape(2, 6, 3, 5)   # NCHW
    q = cctx.queue
    img = to_cl_image(q, x, "IN_OUT_CHANNEL", layout="NCHW")
    ref = to_image(x, "IN_OUT_CHANNEL", layout="NCHW")
    same = np.array_equal(_image_bytes(q, img), ref)
    back = from_cl_image(q, img, "IN_OUT_CHANNEL", x.shape, layout="NCHW")
    tour.print(f"An NCHW tensor {x.shape} went into an IN_OUT_CHANNEL image of "
               f"[{img.shape[0]}, {img.shape[1]}] pixels by an OpenCL kernel:")
    tour.print(f"  image identical to the NumPy path, byte for byte: {'yes' if same else 'NO'}; "
               f"read back exactly: {'yes' if np.array_equal(back, x) else 'NO'}.")
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    ws = (rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32)
    ref = _conv_ref(xs, ws, np.zeros(8), 1)
    for alg, tile in (("direct", None), ("winograd", 2), ("winograd", 4)):
        y = conv2d(xs, ws, None, padding=1, algorithm=alg, tile=tile, dtype=np.float32, device=cctx)
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        name = alg if tile is None else f"{alg} F({tile}x{tile},3x3)"
        tour.print(f"  conv2d {name:<22} on images, {xs.shape} -> {y.shape}: "
                   f"relative error {err:.1e} against float64")
