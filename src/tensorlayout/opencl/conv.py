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
compiled into the kernels as straight-line code.  The kernels' pixel addresses are macros
generated from the image types' rows (:data:`tensorlayout.image.ROWS`) into
``pixels.cl`` (:func:`pixel_macros`).

Public functions check their arguments once, then run unchecked internals.
"""

from __future__ import annotations

import functools

import re

import numpy as np

from .. import _checks
from .._checks import (check_array, check_choice, check_positive_int, check_shape, image_dtype,
                       keyword_only, pair, q, renamed)
from ..errors import (AlgorithmError, ConvolutionError, DeviceLimitError, DTypeError, LayoutError,
                      ShapeError)
from ..image import ImageType, ROWS, layout_of
from ..winograd.auto import image_mid_dtype, image_tile
from ._device import cl, context_of, get_context, read_source
from . import transfer
from .transfer import empty_image, read_image, write_image

__all__ = ["conv2d", "conv2d_direct_image", "conv2d_winograd_image", "winograd_image_shapes",
           "WINOGRAD_TILES", "pixel_macros", "wino_source"]

#: Output tile sizes m of F(m x m, 3 x 3) the image pipeline runs.
WINOGRAD_TILES = (2, 4, 6)
_TILES_PER_ITEM = 4


def _literal(c: float) -> str:
    return f"{float(np.float32(c)).hex()}f"


def _product(coef, terms) -> str:
    """C source of sum(coef[i] * terms[i]) in float32, zero terms left out."""
    signed = {1.0: "+ {}", -1.0: "- {}"}
    text = " ".join(signed.get(c, "+ " + _literal(c) + " * {}").format(t)
                    for c, t in ((float(np.float32(c)), t) for c, t in zip(coef, terms)) if c)
    if not text:
        return "(float4)(0.0f)"
    return text[2:] if text.startswith("+") else "-" + text[2:]


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


def _c_formula(formula: str) -> str:
    """A row's formula as a C macro body: every name parenthesised, q() as TL_Q()."""
    return re.sub(r"\b([A-Za-z_]\w*)\b(\s*\()?",
                  lambda m: "TL_Q(" if m.group(2) else f"({m.group(1)})", formula)


def pixel_macros() -> str:
    """The C macros ``PIXEL_<TYPE>(indices, sizes)``: the pixel ``(int2)(x, y)`` of an element of
    each image type in its default buffer format, generated from :data:`tensorlayout.image.ROWS`
    (the text of ``opencl/pixels.cl``).

    >>> print(pixel_macros().splitlines()[-9])
    #define PIXEL_IN_OUT_CHANNEL(n, h, w, c4, N, H, W, C) ((int2)((c4)*(W) + (w), (n)*(H) + (h)))
    """
    lines = ["/* The pixel (x, y) of an element of every image type, in its default buffer format.",
             " * Generated from tensorlayout.image.ROWS by tensorlayout.opencl.conv.pixel_macros():",
             " * edit the rows, not this file.  Arguments: the element's indices in the buffer's",
             " * order (the lane dimension's index as its group of four, d4 = d / 4), then the sizes.",
             " */", "", "#define TL_Q(x) (((x) + 3) / 4)", ""]
    for (kind, fmt), r in ROWS.items():
        if fmt is not None:
            continue
        dims = r.transform.logical((1, 1, 3, 3), 2)[0] if r.transform else tuple(r.formats[0].lower())
        sizes, idx = r.symbols(dims)
        lines.append(f"#define PIXEL_{kind.name}({', '.join(idx + sizes)}) "
                     f"((int2)({_c_formula(r.x)}, {_c_formula(r.y)}))")
    return "\n".join(lines) + "\n"


def _kernel(cctx, name, dtype, m=None, mid_dtype=None):
    opts = [f"-DIMG_HALF={int(np.dtype(dtype) == np.float16)}"]
    if m is None:
        return cctx.kernel("conv.cl", name, tuple(opts))
    opts.append(f"-DMID_HALF={int(np.dtype(mid_dtype) == np.float16)}")
    # The transforms go in as source text rather than -D options (quoting differs by driver).
    return cctx.kernel(f"conv.cl:wino{m}", name, tuple(opts), source=wino_source(m))


def _transform_defines(m: int) -> str:
    """``#define WINO_M m`` and two macros of straight-line OpenCL for F(m, 3)'s input
    transform (``WINO_INPUT_TRANSFORM``: d -> u, Bᵀ d B) and output transform
    (``WINO_OUTPUT_TRANSFORM``: m -> y, Aᵀ m A) on float4 arrays."""
    from ..winograd.transforms import transforms

    AT, _, BT = transforms(m, 3).as_float(np.float32)
    inp = " \\\n    ".join(_sandwich(BT, "d", "u", "tb"))
    outp = " \\\n    ".join(_sandwich(AT, "m", "y", "ta"))
    return (f"#define WINO_M {m}\n#define WINO_INPUT_TRANSFORM \\\n    {inp}\n"
            f"#define WINO_OUTPUT_TRANSFORM \\\n    {outp}\n")


@functools.lru_cache(maxsize=None)
def wino_source(m: int) -> str:
    """conv.cl with F(m, 3)'s transforms prepended: the program of the Winograd stages, which
    single convolutions and :class:`~tensorlayout.model.OpenCLSession` networks both run."""
    return _transform_defines(m) + read_source("conv.cl")


def _size(kind: str, shape, tile=None) -> tuple:
    """(width, height) of a checked shape in the type's default buffer format."""
    kind = ImageType[kind]
    h, w, _ = layout_of(kind, ROWS[(kind, None)].formats[0], tuple(shape), tile).physical_shape
    return w, h


def _check_image_of(name, image, kind, shape, tile=None):
    pcl = cl()
    if not isinstance(image, pcl.Image):
        raise LayoutError(f"{name} = {image!r} is not allowed: it must be a pyopencl.Image")
    want = _size(kind, shape, tile)
    if tuple(image.shape) != want:
        raise ShapeError(f"{name} is {image.shape[0]} x {image.shape[1]} pixels: a {kind} image of "
                         f"shape {tuple(shape)} is [{want[0]}, {want[1]}] (width, height)")
    return transfer.image_dtype(image)


def _launch(queue, kernel, gw, gh, *args, local=(16, 4)):
    lx, ly = local
    return kernel(queue, (_checks.round_up(gw, lx), _checks.round_up(gh, ly)), (lx, ly), *args)


def _bias_args(queue, bias, O, dtype):
    if bias is None:
        return empty_image(queue, 1, 1, dtype), np.int32(0)
    _check_image_of("bias", bias, "ARGUMENT", (O,))
    return bias, np.int32(1)


def _queue(queue):
    cctx = context_of(queue)
    return cctx, (cctx.queue if queue is cctx else queue)


def _check_direct(shape, filter_shape, padding, stride):
    """Checked ``(shape, filter_shape, padding, stride, out_shape)`` of a direct convolution."""
    return _geometry(check_shape("shape", shape, rank=4),
                     check_shape("filter_shape", filter_shape, rank=4), padding, stride)


def _check_channels(filter_shape, C):
    """The filter's input channels I must be the input's C."""
    if filter_shape[1] != C:
        raise ConvolutionError(f"filter_shape = {filter_shape} has I = {filter_shape[1]} input "
                               f"channels: the input has C = {C}")


def _geometry(shape, filter_shape, padding, stride):
    """:func:`_check_direct` for shapes already checked."""
    N, H, W, C = shape
    O, I, KH, KW = filter_shape
    _check_channels(filter_shape, C)
    ph, pw = pair("padding", padding, minimum=0)
    sh, sw = pair("stride", stride)
    if H + 2 * ph < KH or W + 2 * pw < KW:
        raise ConvolutionError(f"a {KH}x{KW} kernel does not fit the padded input "
                               f"{H + 2 * ph}x{W + 2 * pw}")
    out_shape = (N, (H + 2 * ph - KH) // sh + 1, (W + 2 * pw - KW) // sw + 1, O)
    return shape, filter_shape, (ph, pw), (sh, sw), out_shape


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
    cctx, queue = _queue(queue)
    shape, filter_shape, pad, st, out_shape = _check_direct(shape, filter_shape, padding, stride)
    dt = _check_image_of("image", image, "IN_OUT_CHANNEL", shape)
    _check_image_of("filter_image", filter_image, "CONV2D_FILTER", filter_shape)
    cctx.check_image(*_size("IN_OUT_CHANNEL", out_shape), dt)
    return _direct(cctx, queue, image, shape, filter_image, filter_shape, bias, pad, st,
                   out_shape, dt), out_shape


def _direct(cctx, queue, image, shape, filter_image, filter_shape, bias, pad, st, out_shape, dt):
    """The direct kernel on checked arguments; returns the output image."""
    N, H, W, C = shape
    O, _, KH, KW = filter_shape
    _, OH, OW, _ = out_shape
    ow_, oh_ = _size("IN_OUT_CHANNEL", out_shape)
    bias_img, has_bias = _bias_args(queue, bias, O, dt)
    out = empty_image(queue, ow_, oh_, dt)
    i32 = np.int32
    _launch(queue, _kernel(cctx, "conv2d_direct", dt), ow_, oh_, image, filter_image, bias_img, out,
            i32(N), i32(H), i32(W), i32(C), i32(OH), i32(OW), i32(O), i32(KH), i32(KW),
            i32(st[0]), i32(st[1]), i32(pad[0]), i32(pad[1]), has_bias)
    return out


def winograd_image_shapes(shape, out_channels: int, tile: int, padding=1) -> dict:
    """Image sizes ``(width, height)`` at each step of the Winograd pipeline.

    >>> winograd_image_shapes((1, 8, 8, 16), 32, 2)
    {'input': (32, 8), 'V': (16, 64), 'U': (4, 512), 'M': (16, 128), 'output': (64, 8)}
    """
    shape = check_shape("shape", shape, rank=4)
    O = check_positive_int("out_channels", out_channels)
    _check_tile(tile)
    return _wino_sizes(shape, O, tile, pair("padding", padding, minimum=0))


def _check_tile(tile):
    if tile not in WINOGRAD_TILES:
        raise AlgorithmError(f"tile = {tile!r} is not allowed: the image pipeline runs tiles {WINOGRAD_TILES}")


def _wino_sizes(shape, O, tile, pad) -> dict:
    N, H, W, C = shape
    ph, pw = pad
    OH, OW = H + 2 * ph - 2, W + 2 * pw - 2
    if OH < 1 or OW < 1:
        raise ConvolutionError(f"a 3x3 kernel does not fit the padded input {H + 2 * ph}x{W + 2 * pw}")
    T2 = (tile + 2) ** 2
    tiles = N * -(-OH // tile) * -(-OW // tile)
    return {
        "input": _size("IN_OUT_CHANNEL", shape),
        "V": _size("IN_OUT_HEIGHT", (T2, C, tiles, 1)),
        "U": _size("WINOGRAD_FILTER", (O, C, 3, 3), tile),
        "M": _size("IN_OUT_HEIGHT", (T2, O, tiles, 1)),
        "output": _size("IN_OUT_CHANNEL", (N, OH, OW, O)),
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
    cctx, queue = _queue(queue)
    N, H, W, C = shape = check_shape("shape", shape, rank=4)
    O, I, KH, KW = filter_shape = check_shape("filter_shape", filter_shape, rank=4)
    if (KH, KW) != (3, 3):
        raise AlgorithmError(f"filter_shape = {filter_shape}: the Winograd pipeline runs 3x3 kernels only")
    _check_channels(filter_shape, C)
    _check_tile(tile)
    pad = pair("padding", padding, minimum=0)
    sizes = _wino_sizes(shape, O, tile, pad)
    dt = _check_image_of("image", image, "IN_OUT_CHANNEL", shape)
    _check_image_of("filter_image", filter_image, "WINOGRAD_FILTER", filter_shape, tile=tile)
    mid = image_mid_dtype(tile, dt) if mid_dtype is None else image_dtype(mid_dtype, "mid_dtype")
    _check_fits(cctx, sizes, tile, dt, mid, "the direct kernel")
    return _winograd(cctx, queue, image, shape, filter_image, O, bias, tile, pad, sizes, dt, mid)


def _check_fits(cctx, sizes, tile, dt, mid, other):
    """DeviceLimitError naming the step whose image the device cannot hold."""
    for name in ("V", "M", "output") if mid is not None else tuple(sizes):
        try:
            cctx.check_image(*sizes[name], mid if name in ("V", "M") and mid is not None else dt)
        except DeviceLimitError as exc:
            raise DeviceLimitError(f"Winograd tile {tile}: the {name} image {sizes[name]} does not "
                                   f"fit: {exc}; use a smaller tile or {other}") from None


def _winograd(cctx, queue, image, shape, filter_image, O, bias, tile, pad, sizes, dt, mid):
    """The three Winograd kernels on checked arguments; returns ``(output image, shape)``."""
    N, H, W, C = shape
    ph, pw = pad
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
    _launch(queue, kern("wino_input"), tiles, q(C), image, V, i32(N), i32(H), i32(W), i32(C),
            i32(th), i32(tw), i32(ph), i32(pw), local=(16, 1))
    _launch(queue, kern(f"wino_matmul_{_TILES_PER_ITEM}x1"), -(-tiles // _TILES_PER_ITEM), T2 * q(O), V, filter_image, M,
            i32(C), i32(O), i32(tiles), i32(1), local=(8, 4))
    _launch(queue, kern("wino_output"), tiles, q(O), M, bias_img, out, i32(OH), i32(OW), i32(O),
            i32(th), i32(tw), i32(tiles), i32(1), has_bias, i32(0), np.float32(0), np.float32(0),
            local=(16, 1))
    return out, (N, OH, OW, O)


#: tensorlayout.opencl.conv2d's parameters after ``bias`` in their old positional order.
_OLD_ORDER = ("padding", "algorithm", "tile", "dtype", "device")


def conv2d(x, w, bias=None, *args, padding=0, stride=1, algorithm="winograd", tile=None,
           dtype=np.float32, device=None):
    """2-D convolution on an OpenCL device through RGBA images; NumPy NCHW in, NCHW out.

    ``x`` (N, C, H, W), ``w`` (O, C, KH, KW), ``bias`` (O,) or None; everything after
    ``bias`` is keyword-only, in the same order as :func:`tensorlayout.conv2d`.  The input
    goes into an IN_OUT_CHANNEL image straight from NCHW, the weights into a CONV2D_FILTER
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
    keyword_only("tensorlayout.opencl.conv2d", args, _OLD_ORDER)
    check_choice("algorithm", algorithm, ("winograd", "direct"))
    x, w = (_float_array(n, a, 4) for n, a in (("x", x), ("w", w)))
    dt = image_dtype(dtype)
    N, C, H, W = check_shape("x.shape", x.shape)
    O, I, KH, KW = check_shape("w.shape", w.shape)
    if I != C:
        raise ConvolutionError(f"w has shape {w.shape}: its I = {I} must equal x's C = {C}")
    if bias is not None:
        bias = _float_array("bias", bias, 1)
        if bias.shape[0] != O:
            raise ConvolutionError(f"bias has shape {bias.shape}: it needs O = {O} values")
    with renamed({"shape": "x.shape", "filter_shape": "w.shape"}, "tensorlayout.opencl.conv2d"):
        shape, fshape, pad, st, out_shape = _geometry((N, H, W, C), (O, I, KH, KW), padding, stride)
    cctx = get_context(device)
    if algorithm == "winograd":
        if (KH, KW) != (3, 3):
            raise AlgorithmError(f"w has shape {w.shape}: algorithm='winograd' needs a 3x3 kernel "
                                 "(use algorithm='direct')")
        if st != (1, 1):
            raise AlgorithmError(f"stride = {stride!r}: algorithm='winograd' needs stride 1")
        if tile is None:
            tile = _pick_tile(cctx, shape, O, pad, dt)
        _check_tile(tile)
        sizes = _wino_sizes(shape, O, tile, pad)
        _check_fits(cctx, sizes, tile, dt, None, "algorithm='direct'")
    else:
        if tile is not None:
            raise LayoutError(f"tile = {tile!r} is not allowed with algorithm='direct'")
        cctx.check_image(*_size("IN_OUT_CHANNEL", shape), dt)
        cctx.check_image(*_size("CONV2D_FILTER", fshape), dt)
    if algorithm == "winograd" and not _all_finite(dt, x, w, bias):
        algorithm, tile = "direct", None     # Winograd spreads NaN/Inf over whole tiles
    qu = cctx.queue
    act = ImageType.IN_OUT_CHANNEL
    xi = write_image(cctx, qu, x, layout_of(act, "NCHW", (N, C, H, W), None), dt)
    bi = None if bias is None else write_image(
        cctx, qu, bias, layout_of(ImageType.ARGUMENT, "W", (O,), None), dt)
    if algorithm == "winograd":
        wi = write_image(cctx, qu, w, layout_of(ImageType.WINOGRAD_FILTER, "OIHW", fshape, tile), dt,
                         tile=tile)
        mid = image_mid_dtype(tile, dt)
        _check_fits(cctx, sizes, tile, dt, mid, "algorithm='direct'")
        out, oshape = _winograd(cctx, qu, xi, shape, wi, O, bi, tile, pad, sizes, dt, mid)
    else:
        wi = write_image(cctx, qu, w, layout_of(ImageType.CONV2D_FILTER, "OIHW", fshape, None), dt)
        cctx.check_image(*_size("IN_OUT_CHANNEL", out_shape), dt)
        out = _direct(cctx, qu, xi, shape, wi, fshape, bi, pad, st, out_shape, dt)
        oshape = out_shape
    N, OH, OW, O = oshape
    return read_image(cctx, qu, out, layout_of(act, "NCHW", (N, O, OH, OW), None))


def _float_array(name, array, rank):
    array = check_array(name, array, rank=rank)
    if array.dtype.kind != "f":
        raise DTypeError(f"{name} has dtype {array.dtype}: an image is built from floating-point data")
    return array


def _all_finite(dt, *arrays) -> bool:
    """True when every array holds only finite values once stored in channel type ``dt``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return all(a is None or bool(np.isfinite(np.asarray(a).astype(dt, copy=False)).all())
                   for a in arrays)


def _pick_tile(cctx, shape, O, padding, dt) -> int:
    """The image pipeline's tile rule (:func:`tensorlayout.winograd.auto.image_tile`) for a
    convolution that asked for Winograd: the largest tile whose images this device holds."""
    sizes = {}

    def past_limit(tile):
        sizes[tile] = _wino_sizes(shape, O, tile, padding)
        bad = []
        for name, (iw, ih) in sizes[tile].items():
            try:
                cctx.check_image(iw, ih, dt)
            except DeviceLimitError:
                bad.append(f"{name} [{iw}, {ih}]")
        return bad

    N, H, W, C = shape
    out_hw = (H + 2 * padding[0] - 2, W + 2 * padding[1] - 2)
    tile, note = image_tile(out_hw, (C, O), past_limit, want="any")
    if not tile:
        raise DeviceLimitError(f"no Winograd tile fits the device: {note}; use algorithm='direct'")
    return tile
