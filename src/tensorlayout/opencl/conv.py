"""Convolution on OpenCL images: a direct kernel and MACE's three-stage Winograd pipeline.

Direct: IN_OUT_CHANNEL input x CONV2D_FILTER (+ ARGUMENT bias) -> IN_OUT_CHANNEL output,
one work-item per output pixel (four output channels).

Winograd F(m x m, 3 x 3), T = m + 2, tiles = N * ceil(OH / m) * ceil(OW / m)::

    input   IN_OUT_CHANNEL (N, H, W, C)          [q(C) * W, N * H]
      | B^T d B per tile and 4 channels
    V       IN_OUT_HEIGHT  (T*T, C, tiles, 1)    [tiles, T*T * q(C)]
      | per t: M_t = U_t . V_t   (U: WINOGRAD_FILTER [q(C), O * T*T])
    M       IN_OUT_HEIGHT  (T*T, O, tiles, 1)    [tiles, T*T * q(O)]
      | A^T m A + bias per tile and 4 channels
    output  IN_OUT_CHANNEL (N, OH, OW, O)        [q(O) * OW, N * OH]

The transforms are ``tensorlayout.winograd.transforms(m, 3)`` (MACE's G for m = 2, 4, 6),
compiled into the kernels as straight-line code.
"""

from __future__ import annotations

import numpy as np

from ..errors import (
    AlgorithmError,
    ConvolutionError,
    DeviceLimitError,
    LayoutError,
    ShapeError,
    check_array,
    check_choice,
    check_nonneg_int,
    check_positive_int,
    check_shape,
)
from ..image import _image_dtype, image_shape
from ._device import cl, context_of, get_context
from .transfer import _round_up, empty_image, from_cl_image, image_dtype, to_cl_image

__all__ = ["conv2d", "conv2d_direct_image", "conv2d_winograd_image", "winograd_image_shapes",
           "WINOGRAD_TILES"]

#: Output tile sizes m of F(m x m, 3 x 3) the image pipeline runs.
WINOGRAD_TILES = (2, 4, 6)
_TILES_PER_ITEM = 4


def _q(x):
    return (x + 3) // 4


def _pair(name, value):
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ConvolutionError(f"{name} = {value!r} is not allowed: give one integer or two (h, w)")
        return tuple(check_nonneg_int(f"{name}[{i}]", v) for i, v in enumerate(value))
    v = check_nonneg_int(name, value)
    return v, v


def _literal(c: float) -> str:
    return f"{float(np.float32(c)).hex()}f"


def _product(coef, terms) -> str:
    parts = []
    for c, t in zip(coef, terms):
        c = float(np.float32(c))
        if c == 0.0:
            continue
        if c == 1.0:
            parts.append(f"+ {t}")
        elif c == -1.0:
            parts.append(f"- {t}")
        else:
            parts.append(f"+ {_literal(c)} * {t}")
    if not parts:
        return "(float4)(0.0f)"
    s = " ".join(parts)
    return s[2:] if s.startswith("+ ") else "-" + s[2:]


def _sandwich(L, src, dst, tmp) -> list[str]:
    """Straight-line code for dst = L . src . L^T on float4 arrays (L: rows x cols)."""
    rows, cols = L.shape
    lines = []
    for i in range(rows):
        for j in range(cols):
            lines.append(f"const float4 {tmp}_{i}_{j} = {_product(L[i], [f'{src}[{k}][{j}]' for k in range(cols)])};")
    for i in range(rows):
        for j in range(rows):
            lines.append(f"{dst}[{i}][{j}] = {_product(L[j], [f'{tmp}_{i}_{k}' for k in range(cols)])};")
    return lines


def _kernel(cctx, name, dtype, m=None, mid_dtype=None):
    opts = [f"-DIMG_HALF={int(np.dtype(dtype) == np.float16)}"]
    if m is None:
        return cctx.kernel("conv.cl", name, tuple(opts))
    opts.append(f"-DMID_HALF={int(np.dtype(mid_dtype) == np.float16)}")
    # The transforms go in as source text rather than -D options (quoting differs by driver).
    return cctx.kernel(f"conv.cl:wino{m}", name, tuple(opts), source=_wino_source(m))


_WINO_SRC: dict = {}


def _wino_source(m: int) -> str:
    got = _WINO_SRC.get(m)
    if got is None:
        from ._device import _read_source
        from ..winograd import transforms

        AT, _, BT = transforms(m, 3).as_float(np.float32)
        inp = " \\\n    ".join(_sandwich(BT, "d", "u", "tb"))
        outp = " \\\n    ".join(_sandwich(AT, "m", "y", "ta"))
        head = (f"#define WINO_M {m}\n#define TPI {_TILES_PER_ITEM}\n"
                f"#define WINO_INPUT_TRANSFORM \\\n    {inp}\n"
                f"#define WINO_OUTPUT_TRANSFORM \\\n    {outp}\n")
        got = head + _read_source("conv.cl")
        _WINO_SRC[m] = got
    return got


def _check_image_of(name, image, kind, shape, tile=None):
    pcl = cl()
    if not isinstance(image, pcl.Image):
        raise LayoutError(f"{name} = {image!r} is not allowed: it must be a pyopencl.Image")
    want = image_shape(kind, shape, tile=tile)
    if tuple(image.shape) != want:
        raise ShapeError(f"{name} is {image.shape[0]} x {image.shape[1]} pixels: a {kind} image of "
                         f"shape {tuple(shape)} is [{want[0]}, {want[1]}] (width, height)")
    return image_dtype(image)


def _launch(queue, kernel, gw, gh, *args, local=(16, 4)):
    lx, ly = local
    return kernel(queue, (_round_up(gw, lx), _round_up(gh, ly)), (lx, ly), *args)


def _bias_args(queue, bias, O, dtype):
    if bias is None:
        return empty_image(queue, 1, 1, dtype), np.int32(0)
    _check_image_of("bias", bias, "ARGUMENT", (O,))
    return bias, np.int32(1)


def conv2d_direct_image(queue, image, shape, filter_image, filter_shape, bias=None, *,
                        padding=0, stride=1):
    """Direct convolution on images; returns ``(output_image, output_shape)`` (NHWC).

    ``image`` is an IN_OUT_CHANNEL image of the NHWC tensor ``shape``, ``filter_image``
    a CONV2D_FILTER image of the OIHW weights ``filter_shape``, ``bias`` an optional
    ARGUMENT image of O values.  The output is an IN_OUT_CHANNEL image of
    (N, OH, OW, O) with the input's channel type.  Any kernel size, stride and padding.

    >>> from tensorlayout.opencl import get_context, to_cl_image, conv2d_direct_image
    >>> q = get_context().queue
    >>> x = to_cl_image(q, np.ones((1, 4, 4, 3), np.float32), "IN_OUT_CHANNEL")
    >>> f = to_cl_image(q, np.ones((2, 3, 3, 3), np.float32), "CONV2D_FILTER")
    >>> out, oshape = conv2d_direct_image(q, x, (1, 4, 4, 3), f, (2, 3, 3, 3), padding=1)
    >>> oshape
    (1, 4, 4, 2)
    """
    cctx = context_of(queue)
    queue = cctx.queue if queue is cctx else queue
    N, H, W, C = check_shape("shape", shape, rank=4)
    O, I, KH, KW = check_shape("filter_shape", filter_shape, rank=4)
    if I != C:
        raise ConvolutionError(f"filter_shape = {tuple(filter_shape)} has I = {I} input channels: "
                               f"the input has C = {C}")
    ph, pw = _pair("padding", padding)
    sh, sw = (check_positive_int(f"stride[{i}]", s) for i, s in enumerate(_pair("stride", stride)))
    OH, OW = (H + 2 * ph - KH) // sh + 1, (W + 2 * pw - KW) // sw + 1
    if H + 2 * ph < KH or W + 2 * pw < KW:
        raise ConvolutionError(f"a {KH}x{KW} kernel does not fit the padded input "
                               f"{H + 2 * ph}x{W + 2 * pw}")
    dt = _check_image_of("image", image, "IN_OUT_CHANNEL", shape)
    _check_image_of("filter_image", filter_image, "CONV2D_FILTER", filter_shape)
    out_shape = (N, OH, OW, O)
    ow_, oh_ = image_shape("IN_OUT_CHANNEL", out_shape)
    cctx.check_image(ow_, oh_, dt)
    bias_img, has_bias = _bias_args(queue, bias, O, dt)
    out = empty_image(queue, ow_, oh_, dt)
    i32 = np.int32
    _launch(queue, _kernel(cctx, "conv2d_direct", dt), ow_, oh_, image, filter_image, bias_img, out,
            i32(N), i32(H), i32(W), i32(C), i32(OH), i32(OW), i32(O), i32(KH), i32(KW),
            i32(sh), i32(sw), i32(ph), i32(pw), has_bias)
    return out, out_shape


def winograd_image_shapes(shape, out_channels: int, tile: int, padding=1) -> dict:
    """Image sizes ``(width, height)`` at each step of the Winograd pipeline.

    >>> winograd_image_shapes((1, 8, 8, 16), 32, 2)
    {'input': (32, 8), 'V': (16, 64), 'U': (4, 512), 'M': (16, 128), 'output': (64, 8)}
    """
    N, H, W, C = check_shape("shape", shape, rank=4)
    O = check_positive_int("out_channels", out_channels)
    if tile not in WINOGRAD_TILES:
        raise AlgorithmError(f"tile = {tile!r} is not allowed: the image pipeline runs tiles {WINOGRAD_TILES}")
    ph, pw = _pair("padding", padding)
    OH, OW = H + 2 * ph - 2, W + 2 * pw - 2
    if OH < 1 or OW < 1:
        raise ConvolutionError(f"a 3x3 kernel does not fit the padded input {H + 2 * ph}x{W + 2 * pw}")
    T2 = (tile + 2) ** 2
    tiles = N * -(-OH // tile) * -(-OW // tile)
    return {
        "input": image_shape("IN_OUT_CHANNEL", (N, H, W, C)),
        "V": image_shape("IN_OUT_HEIGHT", (T2, C, tiles, 1)),
        "U": image_shape("WINOGRAD_FILTER", (O, C, 3, 3), tile=tile),
        "M": image_shape("IN_OUT_HEIGHT", (T2, O, tiles, 1)),
        "output": image_shape("IN_OUT_CHANNEL", (N, OH, OW, O)),
    }


def conv2d_winograd_image(queue, image, shape, filter_image, filter_shape, bias=None, *,
                          tile, padding=1, mid_dtype=None):
    """Winograd F(tile x tile, 3 x 3) on images; returns ``(output_image, output_shape)``.

    ``filter_image`` is the WINOGRAD_FILTER image of the 3x3 OIHW weights
    ``filter_shape`` for this ``tile`` (2, 4 or 6); stride 1, top/left padding
    ``padding``.  Intermediate images are checked against the device limits before
    anything is allocated (DeviceLimitError: try a smaller tile or the direct kernel).
    ``mid_dtype`` is the channel type of the V and M images: by default the input's
    for tiles 2 and 4 (as MACE stores them), and float32 for tile 6, whose input
    transform (B^T rows up to 32x larger with MACE's G) overflows half.  A NaN or Inf in
    the input image spreads over its whole tile here; :func:`conv2d` checks its arrays
    and runs the direct kernel for them.

    >>> from tensorlayout.opencl import get_context, to_cl_image, conv2d_winograd_image
    >>> q = get_context().queue
    >>> x = to_cl_image(q, np.ones((1, 4, 4, 3), np.float32), "IN_OUT_CHANNEL")
    >>> u = to_cl_image(q, np.ones((2, 3, 3, 3), np.float32), "WINOGRAD_FILTER", tile=2)
    >>> out, oshape = conv2d_winograd_image(q, x, (1, 4, 4, 3), u, (2, 3, 3, 3), tile=2)
    >>> oshape
    (1, 4, 4, 2)
    """
    cctx = context_of(queue)
    queue = cctx.queue if queue is cctx else queue
    N, H, W, C = check_shape("shape", shape, rank=4)
    O, I, KH, KW = check_shape("filter_shape", filter_shape, rank=4)
    if (KH, KW) != (3, 3):
        raise AlgorithmError(f"filter_shape = {tuple(filter_shape)}: the Winograd pipeline runs 3x3 kernels only")
    if I != C:
        raise ConvolutionError(f"filter_shape = {tuple(filter_shape)} has I = {I} input channels: "
                               f"the input has C = {C}")
    sizes = winograd_image_shapes(shape, O, tile, padding)
    ph, pw = _pair("padding", padding)
    dt = _check_image_of("image", image, "IN_OUT_CHANNEL", shape)
    _check_image_of("filter_image", filter_image, "WINOGRAD_FILTER", filter_shape, tile=tile)
    if mid_dtype is None:
        mid_dtype = np.float32 if tile == 6 else dt
    mid = _image_dtype(mid_dtype)
    for name in ("V", "M", "output"):
        try:
            cctx.check_image(*sizes[name], dt if name == "output" else mid)
        except DeviceLimitError as exc:
            raise DeviceLimitError(f"Winograd tile {tile}: the {name} image {sizes[name]} does not fit: "
                                   f"{exc}; use a smaller tile or the direct kernel") from None
    OH, OW = H + 2 * ph - 2, W + 2 * pw - 2
    th, tw = -(-OH // tile), -(-OW // tile)
    tiles = N * th * tw
    T2 = (tile + 2) ** 2
    bias_img, has_bias = _bias_args(queue, bias, O, dt)
    V = empty_image(queue, *sizes["V"], mid)
    M = empty_image(queue, *sizes["M"], mid)
    out = empty_image(queue, *sizes["output"], dt)
    i32 = np.int32
    kern = lambda name: _kernel(cctx, name, dt, tile, mid)  # noqa: E731
    _launch(queue, kern("wino_input"), tiles, _q(C), image, V, i32(N), i32(H), i32(W), i32(C),
            i32(th), i32(tw), i32(ph), i32(pw), local=(16, 1))
    _launch(queue, kern("wino_matmul"), -(-tiles // _TILES_PER_ITEM), T2 * _q(O), V, filter_image, M,
            i32(C), i32(O), i32(tiles), local=(8, 4))
    _launch(queue, kern("wino_output"), tiles, _q(O), M, bias_img, out, i32(N), i32(OH), i32(OW),
            i32(O), i32(th), i32(tw), has_bias, local=(16, 1))
    return out, (N, OH, OW, O)


def conv2d(x, w, bias=None, padding=0, algorithm="winograd", tile=None, dtype=np.float32,
           device=None, *, stride=1):
    """2-D convolution on an OpenCL device through RGBA images; NumPy NCHW in, NCHW out.

    ``x`` (N, C, H, W), ``w`` (O, C, KH, KW), ``bias`` (O,) or None.  The input goes
    into an IN_OUT_CHANNEL image straight from NCHW, the weights into a CONV2D_FILTER
    (direct) or WINOGRAD_FILTER (Winograd) image, the bias into an ARGUMENT image, all of
    channel type ``dtype`` (float32 or float16; arithmetic is float32 either way).
    ``algorithm="winograd"`` needs a 3x3 kernel and stride 1; ``tile`` 2, 4 or 6, or
    None for the largest of 4 and 2 whose images fit the device.  Returns an array of
    ``dtype``.

    Non-finite values follow PyTorch's semantics, as on the CPU: the result is as if the
    input were explicitly zero-padded and every product of the kernel window taken, so a
    NaN or Inf weight makes NaN wherever it meets a padded zero (a NaN weight: its whole
    output channel), and a NaN input reaches only the outputs whose window covers it.
    Winograd would spread a non-finite input over its whole tile, so when ``x``, ``w`` or
    ``bias`` (in the image's channel type) holds NaN or Inf the direct kernel runs instead.

    >>> import numpy as np
    >>> from tensorlayout.opencl import conv2d
    >>> x = np.ones((1, 1, 4, 4), np.float32); w = np.ones((1, 1, 3, 3), np.float32)
    >>> conv2d(x, w, padding=1, tile=2)[0, 0]
    array([[4., 6., 6., 4.],
           [6., 9., 9., 6.],
           [6., 9., 9., 6.],
           [4., 6., 6., 4.]], dtype=float32)
    """
    check_choice("algorithm", algorithm, ("winograd", "direct"))
    x = check_array("x", x, rank=4)
    w = check_array("w", w, rank=4)
    dt = _image_dtype(dtype)
    N, C, H, W = x.shape
    O, I, KH, KW = w.shape
    if I != C:
        raise ConvolutionError(f"w has shape {w.shape}: its I = {I} must equal x's C = {C}")
    if bias is not None:
        bias = check_array("bias", bias, rank=1)
        if bias.shape[0] != O:
            raise ConvolutionError(f"bias has shape {bias.shape}: it needs O = {O} values")
    ph, pw = _pair("padding", padding)
    cctx = get_context(device)
    shape = (N, H, W, C)
    if algorithm == "winograd":
        if (KH, KW) != (3, 3):
            raise AlgorithmError(f"w has shape {w.shape}: algorithm='winograd' needs a 3x3 kernel "
                                 "(use algorithm='direct')")
        if _pair("stride", stride) != (1, 1):
            raise AlgorithmError(f"stride = {stride!r}: algorithm='winograd' needs stride 1")
        if tile is None:
            tile = _pick_tile(cctx, shape, O, (ph, pw), dt)
        sizes = winograd_image_shapes(shape, O, tile, (ph, pw))
        for name, (iw, ih) in sizes.items():
            try:
                cctx.check_image(iw, ih, dt)
            except DeviceLimitError as exc:
                raise DeviceLimitError(f"Winograd tile {tile}: the {name} image {(iw, ih)} does not "
                                       f"fit: {exc}; use a smaller tile or algorithm='direct'") from None
    else:
        if tile is not None:
            raise LayoutError(f"tile = {tile!r} is not allowed with algorithm='direct'")
        cctx.check_image(*image_shape("IN_OUT_CHANNEL", shape), dt)
        cctx.check_image(*image_shape("CONV2D_FILTER", w.shape), dt)
    if algorithm == "winograd" and not _all_finite(dt, x, w, bias):
        algorithm, tile = "direct", None     # Winograd spreads NaN/Inf over whole tiles
    q = cctx.queue
    xi = to_cl_image(q, x, "IN_OUT_CHANNEL", dtype=dt, layout="NCHW")
    bi = None if bias is None else to_cl_image(q, bias, "ARGUMENT", dtype=dt)
    if algorithm == "winograd":
        wi = to_cl_image(q, w, "WINOGRAD_FILTER", dtype=dt, tile=tile)
        out, oshape = conv2d_winograd_image(q, xi, shape, wi, w.shape, bi, tile=tile, padding=(ph, pw))
    else:
        wi = to_cl_image(q, w, "CONV2D_FILTER", dtype=dt)
        out, oshape = conv2d_direct_image(q, xi, shape, wi, w.shape, bi, padding=(ph, pw), stride=stride)
    N, OH, OW, O = oshape
    return from_cl_image(q, out, "IN_OUT_CHANNEL", (N, O, OH, OW), layout="NCHW")


def _all_finite(dt, *arrays) -> bool:
    """True when every array holds only finite values once stored in channel type ``dt``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return all(a is None or bool(np.isfinite(np.asarray(a).astype(dt, copy=False)).all())
                   for a in arrays)


def _pick_tile(cctx, shape, O, padding, dt) -> int:
    last = None
    for tile in (4, 2):
        sizes = winograd_image_shapes(shape, O, tile, padding)
        try:
            for iw, ih in sizes.values():
                cctx.check_image(iw, ih, dt)
        except DeviceLimitError as exc:
            last = exc
            continue
        return tile
    raise DeviceLimitError(f"no Winograd tile fits the device: {last}; use algorithm='direct'")
