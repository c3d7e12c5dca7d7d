"""OpenCL RGBA images as MACE's GPU runtime lays them out (seeds 000, 001, 002).

A tensor is stored in a 2-D image with CL_RGBA channel order: pixel (x, y) holds
four values, lanes k = 0..3.  Arrays here are shaped (height, width, 4), the
row-major order of the image's memory.  Which element sits in which lane is
given by REFERENCE.md section 1 (the seeds' height- and width-major pixel
formulas are wrong; their image sizes are right).  Every type is a
:class:`~tensorlayout.core.Layout`, so element -> pixel, pixel -> element,
pack and unpack come from the core.

``q(x) = (x + 3) // 4``.  The nine types, with the buffer they start from:

=================  =========  ========================  =====================================
type               buffer     image [width, height]     pixel (x, y), lane k holds
=================  =========  ========================  =====================================
IN_OUT_CHANNEL     NHWC       [q(C)*W, N*H]             c = 4*(x // W) + k
IN_OUT_HEIGHT      NHWC       [W*C, N*q(H)]             h = 4*(y % q(H)) + k
IN_OUT_WIDTH       NHWC       [q(W)*C, N*H]             w = 4*(x % q(W)) + k
ARGUMENT           W          [q(L), 1]                 a[4x + k]
CONV2D_FILTER      OIHW       [I, H*W*q(O)]             o = 4*(y // HW) + k
                   HWOI       [RoundUp4(I), H*W*q(O)]   (MACE up to v0.6)
DW_CONV2D_FILTER   MIHW/HWIM  [M*H*W, q(I)]             i = 4y + k
WEIGHT_HEIGHT      OIHW       [I*H*W, q(O)]             o = 4y + k
WEIGHT_WIDTH       OIHW       [q(I)*H*W, O]             i = 4*(x % q(I)) + k
WINOGRAD_FILTER    OIHW 3x3   [q(I), O*T^2]             U_t[o, i], i = 4x + k, y = t*O + o
=================  =========  ========================  =====================================

Depthwise multiplier M > 1 is an extension of ours (MACE writes zeros): pixel
column x = m*H*W + h*W + w, which fills the [M*H*W, q(I)] image the seeds give.

>>> import numpy as np
>>> image_shape(ImageType.IN_OUT_CHANNEL, (1, 2, 3, 5))      # NHWC -> [width, height]
(6, 2)
>>> pixel_of(ImageType.IN_OUT_CHANNEL, (1, 2, 3, 5), (0, 1, 2, 4))   # (x, y, k)
(5, 1, 0)
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from .core import Layout
from .errors import (
    AlgorithmError,
    dtype_text,
    DeviceLimitError,
    DTypeError,
    LayoutError,
    RankError,
    ShapeError,
    check_array,
    check_positive_int,
    check_shape,
    short,
)

__all__ = [
    "ImageType",
    "DEFAULT_MAX_IMAGE_SIZE",
    "IMAGE_DTYPES",
    "image_layout",
    "image_shape",
    "image_nbytes",
    "to_image",
    "from_image",
    "image_from_dump",
    "pixel_of",
    "element_at",
    "check_image_limits",
    "buffer_format",
    "winograd_filter_values",
]

#: CL_DEVICE_IMAGE2D_MAX_WIDTH and _HEIGHT on many mobile GPUs.
DEFAULT_MAX_IMAGE_SIZE = (16384, 16384)

#: Channel types an image can hold: CL_FLOAT and CL_HALF_FLOAT.
IMAGE_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


class ImageType(IntEnum):
    """MACE's buffer types (``BufferContentType``), with MACE's numbering."""

    CONV2D_FILTER = 0
    IN_OUT_CHANNEL = 1
    ARGUMENT = 2
    IN_OUT_HEIGHT = 3
    IN_OUT_WIDTH = 4
    WINOGRAD_FILTER = 5
    DW_CONV2D_FILTER = 6
    WEIGHT_HEIGHT = 7
    WEIGHT_WIDTH = 8


_ACTIVATIONS = (ImageType.IN_OUT_CHANNEL, ImageType.IN_OUT_HEIGHT, ImageType.IN_OUT_WIDTH)
_WINOGRAD_TILES = (2, 4, 6)


def _q(x: int) -> int:
    return (x + 3) // 4


def _kind(kind) -> ImageType:
    if isinstance(kind, ImageType):
        return kind
    if isinstance(kind, str):
        try:
            return ImageType[kind.upper()]
        except KeyError:
            pass
    elif isinstance(kind, (int, np.integer)) and not isinstance(kind, bool):
        try:
            return ImageType(int(kind))
        except ValueError:
            pass
    names = ", ".join(t.name for t in ImageType)
    raise LayoutError(f"kind = {kind!r} is not an image type: it must be one of {names} (or 0-8)")


def buffer_format(kind, *, layout=None, filter_format=None) -> str:
    """The buffer format (dimension letters) the ``shape`` and arrays of ``kind`` are given in.

    ``filter_format`` (filters only; None is the kind's default): OIHW or HWOI for
    CONV2D_FILTER; MIHW (MACE's (multiplier, channels, KH, KW)), HWIM, or C1HW (PyTorch's
    depthwise weight (C, 1, KH, KW), multiplier 1) for DW_CONV2D_FILTER.  Names are
    case-insensitive.  A depthwise shape (M, 1, KH, KW) with M > 1 and no filter_format is
    refused as ambiguous (PyTorch's (C, 1, KH, KW) looks the same): name the format.  An option that does not apply to ``kind`` is refused, not ignored.

    >>> buffer_format("IN_OUT_CHANNEL", layout="NCHW"), buffer_format("DW_CONV2D_FILTER")
    ('NCHW', 'MIHW')
    >>> buffer_format("DW_CONV2D_FILTER", filter_format="c1hw")
    'C1HW'
    """
    kind = _kind(kind)
    ff = None if filter_format is None else str(filter_format).upper()
    if kind in _ACTIVATIONS:
        fmt = "NHWC" if layout is None else str(layout).upper()
        if fmt not in ("NHWC", "NCHW"):
            raise LayoutError(f"layout = {short(layout)!r} is not allowed for {kind.name}: it must be 'NHWC' or 'NCHW'")
        if ff is not None:
            raise LayoutError(f"filter_format = {short(filter_format)!r} is not allowed for {kind.name}: "
                              "only filters take a filter format (an activation takes layout='NHWC' or 'NCHW')")
        return fmt
    if layout is not None:
        raise LayoutError(f"layout = {short(layout)!r} is not allowed for {kind.name}: only activations take a layout")
    if kind == ImageType.CONV2D_FILTER:
        ff = ff or "OIHW"
        if ff not in ("OIHW", "HWOI"):
            raise LayoutError(
                f"filter_format = {short(filter_format)!r} is not allowed for CONV2D_FILTER: it must be 'OIHW' or 'HWOI'")
        return ff
    if kind == ImageType.DW_CONV2D_FILTER:
        ff = ff or "MIHW"
        if ff not in ("MIHW", "HWIM", "C1HW"):
            raise LayoutError(
                f"filter_format = {short(filter_format)!r} is not allowed for DW_CONV2D_FILTER: it must be "
                "'MIHW' (MACE's (multiplier, channels, KH, KW)), 'HWIM', or 'C1HW' for PyTorch's "
                "depthwise weight (C, 1, KH, KW)")
        return ff
    if ff not in (None, "OIHW"):
        raise LayoutError(f"filter_format = {short(filter_format)!r} is not allowed for {kind.name}: it must be 'OIHW'")
    if kind == ImageType.ARGUMENT:
        return "W"
    return "OIHW"


def _check_tile(kind: ImageType, tile):
    if kind == ImageType.WINOGRAD_FILTER:
        if tile not in _WINOGRAD_TILES:
            raise AlgorithmError(
                f"tile = {tile!r} is not allowed for WINOGRAD_FILTER: it must be one of {_WINOGRAD_TILES}")
        return int(tile)
    if tile is not None:
        raise LayoutError(f"tile = {tile!r} is not allowed for {kind.name}: only WINOGRAD_FILTER takes a tile")
    return None


def image_layout(kind, shape, *, layout=None, filter_format=None, tile=None) -> Layout:
    """The :class:`Layout` of ``kind`` for a tensor of ``shape`` (in the buffer format's order).

    Its physical space is the image array (height, width, 4).  For WINOGRAD_FILTER the
    logical tensor is the transformed filter U with dimensions (t, o, i), t in [0, T^2).
    """
    kind = _kind(kind)
    fmt = buffer_format(kind, layout=layout, filter_format=filter_format)
    tile = _check_tile(kind, tile)
    shape = check_shape("shape", shape, rank=len(fmt))
    dims = ("i", "m", "h", "w") if fmt == "C1HW" else tuple(fmt.lower())
    size = dict(zip(dims, shape))
    if fmt == "C1HW" and size["m"] != 1:
        raise ShapeError(f"shape = {shape} is not allowed for DW_CONV2D_FILTER in C1HW: PyTorch's "
                         f"depthwise weight (C, 1, KH, KW) has 1 in the second place, not {size['m']} "
                         "(a multiplier M > 1 is MIHW (M, C, KH, KW))")
    if kind == ImageType.DW_CONV2D_FILTER and filter_format is None and size["i"] == 1 and size["m"] > 1:
        raise ShapeError(
            f"shape = {shape} is ambiguous for DW_CONV2D_FILTER in MIHW: it reads as a multiplier of "
            f"{size['m']} on one channel; PyTorch's depthwise weight (C, 1, KH, KW) is "
            f"filter_format='C1HW', MACE's MIHW of {size['m']} channels is (1, {size['m']}, KH, KW); "
            "filter_format='MIHW' keeps the multiplier")

    def make(width, height, digits, dims=dims, shape=shape):
        row = width * 4
        digits = {k: (v(row) if callable(v) else v) for k, v in digits.items()}
        return Layout(kind.name, dims, shape, (height, width, 4), digits,
                      physical_axes=("y", "x", "k"))

    if kind in _ACTIVATIONS:
        N, H, W, C = size["n"], size["h"], size["w"], size["c"]
        if kind == ImageType.IN_OUT_CHANNEL:
            width, height = _q(C) * W, N * H
            return make(width, height, {"n": lambda r: H * r, "h": lambda r: r, "w": 4,
                                        "c": [(4, 1), (None, W * 4)]})
        if kind == ImageType.IN_OUT_HEIGHT:
            width, height = W * C, N * _q(H)
            return make(width, height, {"n": lambda r: _q(H) * r, "h": lambda r: [(4, 1), (None, r)],
                                        "w": 4, "c": W * 4})
        width, height = _q(W) * C, N * H
        return make(width, height, {"n": lambda r: H * r, "h": lambda r: r,
                                    "w": [(4, 1), (None, 4)], "c": _q(W) * 4})
    if kind == ImageType.ARGUMENT:
        return make(_q(size["w"]), 1, {"w": [(4, 1), (None, 4)]})
    if kind == ImageType.CONV2D_FILTER:
        O, I, H, W = size["o"], size["i"], size["h"], size["w"]
        width = I if fmt == "OIHW" else 4 * _q(I)
        return make(width, H * W * _q(O), {"o": lambda r: [(4, 1), (None, H * W * r)], "i": 4,
                                           "h": lambda r: W * r, "w": lambda r: r})
    if kind == ImageType.DW_CONV2D_FILTER:
        M, I, H, W = size["m"], size["i"], size["h"], size["w"]
        return make(M * H * W, _q(I), {"m": H * W * 4, "i": lambda r: [(4, 1), (None, r)],
                                       "h": W * 4, "w": 4})
    if kind == ImageType.WEIGHT_HEIGHT:
        O, I, H, W = size["o"], size["i"], size["h"], size["w"]
        return make(I * H * W, _q(O), {"o": lambda r: [(4, 1), (None, r)], "i": 4,
                                       "h": W * I * 4, "w": I * 4})
    if kind == ImageType.WEIGHT_WIDTH:
        O, I, H, W = size["o"], size["i"], size["h"], size["w"]
        qi = _q(I)
        return make(qi * H * W, O, {"o": lambda r: r, "i": [(4, 1), (None, 4)],
                                    "h": W * qi * 4, "w": qi * 4})
    # WINOGRAD_FILTER: 3x3 OIHW weights, transformed to U[t, o, i].
    O, I, H, W = size["o"], size["i"], size["h"], size["w"]
    if (H, W) != (3, 3):
        raise AlgorithmError(
            f"shape = {shape} has a {H}x{W} kernel: WINOGRAD_FILTER holds 3x3 filters only")
    T2 = (tile + 2) ** 2
    return make(_q(I), O * T2, {"t": lambda r: O * r, "o": lambda r: r, "i": [(4, 1), (None, 4)]},
                dims=("t", "o", "i"), shape=(T2, O, I))


def image_shape(kind, shape, *, layout=None, filter_format=None, tile=None) -> tuple[int, int]:
    """Image size ``(width, height)`` in pixels for a tensor of ``shape``.

    >>> image_shape("CONV2D_FILTER", (5, 3, 3, 3))                      # OIHW
    (3, 18)
    >>> image_shape("CONV2D_FILTER", (3, 3, 5, 3), filter_format="HWOI")
    (4, 18)
    """
    lay = image_layout(kind, shape, layout=layout, filter_format=filter_format, tile=tile)
    height, width, _ = lay.physical_shape
    return width, height


def image_nbytes(kind, shape, dtype=np.float32, **kwargs) -> int:
    """Bytes of the image: width * height * 4 lanes * the channel type's size."""
    width, height = image_shape(kind, shape, **kwargs)
    return width * height * 4 * _image_dtype(dtype).itemsize


def check_image_limits(width: int, height: int, max_size=DEFAULT_MAX_IMAGE_SIZE) -> None:
    """Raise DeviceLimitError if a ``width`` x ``height`` image is past the device's maximum.

    >>> check_image_limits(20000, 10)
    Traceback (most recent call last):
    ...
    tensorlayout.errors.DeviceLimitError: image width 20000 is past the device maximum 16384 by 3616 pixels
    """
    for name, v in (("width", width), ("height", height)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ShapeError(f"{name} = {v!r} is not allowed: an image size must be a positive integer")
    if max_size is None:
        return
    if (isinstance(max_size, (str, bytes)) or not hasattr(max_size, "__len__") or len(max_size) != 2
            or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1
                   for v in max_size)):
        raise DeviceLimitError(
            f"max_size = {max_size!r} is not allowed: it must be (max width, max height), "
            "two positive integers, or None")
    max_w, max_h = max_size
    if width > max_w:
        raise DeviceLimitError(
            f"image width {width} is past the device maximum {max_w} by {width - max_w} pixels")
    if height > max_h:
        raise DeviceLimitError(
            f"image height {height} is past the device maximum {max_h} by {height - max_h} pixels")


def _image_dtype(dtype) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in IMAGE_DTYPES:
        raise DTypeError(f"dtype = {dtype_text(dtype)} is not allowed: an image holds float32 (CL_FLOAT) "
                         "or float16 (CL_HALF_FLOAT)")
    return dt


def _checked_source(array, kind, layout, filter_format):
    """``(kind, array)`` for a tensor about to be stored in an image: the kind is known, the
    array has the rank of the kind's buffer format and holds floating-point data."""
    kind = _kind(kind)
    fmt = buffer_format(kind, layout=layout, filter_format=filter_format)
    array = check_array("array", array, rank=len(fmt))
    if array.dtype.kind != "f":
        raise DTypeError(f"array has dtype {array.dtype}: an image is built from floating-point data")
    return kind, array


def _stored_dtype(array, dtype) -> np.dtype:
    """The image's channel type: ``dtype`` if given, else float16 for float16 data and float32."""
    return _image_dtype(dtype if dtype is not None else
                        (np.float16 if array.dtype == np.float16 else np.float32))


def winograd_filter_values(weights, tile: int) -> np.ndarray:
    """The transformed filter U[t, o, i] = (G g G^T)[t // T, t % T] in float64.

    G is MACE's for the tile (``tensorlayout.winograd.transforms(tile, 3)``).
    """
    from .winograd import transforms

    _, G, _ = transforms(tile, 3).as_float(np.float64)
    g = np.asarray(weights, dtype=np.float64)
    U = np.einsum("ar,oirs,bs->aboi", G, g, G)  # (T, T, O, I)
    T = tile + 2
    return U.reshape(T * T, g.shape[0], g.shape[1])


def _winograd_filter_weights(U: np.ndarray, tile: int) -> np.ndarray:
    from .winograd import transforms

    _, G, _ = transforms(tile, 3).as_float(np.float64)
    Gp = np.linalg.pinv(G)  # G has full column rank: G+ G = I, so g = G+ U G+^T
    T = tile + 2
    U = np.asarray(U, dtype=np.float64).reshape(T, T, U.shape[1], U.shape[2])
    return np.einsum("ra,aboi,sb->oirs", Gp, U, Gp)


def to_image(array, kind, *, layout=None, dtype=None, filter_format=None, tile=None,
             max_size=DEFAULT_MAX_IMAGE_SIZE, out=None) -> np.ndarray:
    """Store a buffer tensor in an RGBA image; returns an array of shape (height, width, 4).

    ``array`` is in the kind's buffer format (NHWC activations, or NCHW with
    ``layout="NCHW"``; OIHW or HWOI filters; MIHW or HWIM depthwise; a 1-D argument).
    ``dtype`` is float32 (default) or float16 (round to nearest even).  Padding lanes
    are exactly 0.  Images past ``max_size`` (width, height) raise DeviceLimitError
    before anything is allocated; ``max_size=None`` skips the check.  ``out``, a
    C-contiguous (height, width, 4) float32 or float16 array, receives the image
    instead of a new array (its dtype is the image's; every slot is rewritten).

    >>> import numpy as np
    >>> img = to_image(np.arange(1, 6, dtype=np.float32), "ARGUMENT")
    >>> img.shape, img[0, 1].tolist()
    ((1, 2, 4), [5.0, 0.0, 0.0, 0.0])
    """
    kind, array = _checked_source(array, kind, layout, filter_format)
    if out is not None:
        out = check_array("out", out, rank=3)
        if out.dtype not in IMAGE_DTYPES:
            raise DTypeError(f"out has dtype {out.dtype}: an image holds float32 or float16")
        if dtype is not None and _image_dtype(dtype) != out.dtype:
            raise DTypeError(f"dtype = {dtype_text(dtype)} does not match out, which has dtype {out.dtype}")
        dtype = out.dtype
    out_dtype = _stored_dtype(array, dtype)
    lay = image_layout(kind, array.shape, layout=layout, filter_format=filter_format, tile=tile)
    height, width, _ = lay.physical_shape
    check_image_limits(width, height, max_size)
    if out is not None and (out.shape != lay.physical_shape or not out.flags.c_contiguous
                            or not out.flags.writeable):
        raise ShapeError(
            f"out has shape {out.shape}: a {kind.name} image of a tensor of shape {array.shape} "
            f"needs a writeable C-contiguous array of shape (height, width, 4) = {lay.physical_shape}")
    if kind == ImageType.WINOGRAD_FILTER:
        array = winograd_filter_values(array, tile)
    elif array.dtype != out_dtype and array.dtype.itemsize > out_dtype.itemsize:
        # One correctly rounded conversion (float64 -> float16 directly, not via float32).
        array = array.astype(out_dtype)
    if out is not None:
        return lay.pack(array, out=out)
    return lay.pack(array, dtype=out_dtype)


def image_from_dump(data, width, height, *, dtype=np.float32, row_pitch=None) -> np.ndarray:
    """A raw image dump (bytes or a flat array, as read back from a device) as ``(height, width, 4)``.

    Row ``y`` starts at byte ``y * row_pitch`` (default: ``width * 4 * itemsize``, no gap);
    a device may pad rows, so give its pitch.  Note the order: :func:`image_shape` answers
    ``(width, height)`` (OpenCL's), the array is ``(height, width, 4)`` (row-major).

    >>> dump = np.arange(2 * 3 * 4, dtype=np.float32).tobytes()   # a [3, 2] image, no row gap
    >>> image_from_dump(dump, 3, 2)[1, 0]                          # pixel x=0, y=1
    array([12., 13., 14., 15.], dtype=float32)
    >>> padded = np.zeros((2, 64), np.uint8); padded[:, :48] = np.frombuffer(dump, np.uint8).reshape(2, 48)
    >>> np.array_equal(image_from_dump(padded.ravel(), 3, 2, row_pitch=64), image_from_dump(dump, 3, 2))
    True
    """
    dt = _image_dtype(dtype)
    width = check_positive_int("width", width)
    height = check_positive_int("height", height)
    row = width * 4 * dt.itemsize
    gapless = row_pitch is None
    if gapless:
        row_pitch = row
    row_pitch = check_positive_int("row_pitch", row_pitch)
    if row_pitch < row:
        raise ShapeError(f"row_pitch = {row_pitch} is not allowed: a row of {width} RGBA "
                         f"{dt.name} pixels needs at least {row} bytes")
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = np.frombuffer(data, dtype=np.uint8)
    else:
        arr = check_array("data", data)
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    need = (height - 1) * row_pitch + row
    if raw.size < need or raw.size > height * row_pitch or (gapless and raw.size != need):
        raise ShapeError(f"data has {raw.size} bytes: a [{width}, {height}] {dt.name} image with "
                         f"row pitch {row_pitch} has {need} to {height * row_pitch}"
                         + ("; a device that pads its rows needs row_pitch" if gapless else ""))
    step = row_pitch if height > 1 else row        # one row: the pitch never steps
    rows = np.lib.stride_tricks.as_strided(raw, shape=(height, row), strides=(step, 1))
    return np.ascontiguousarray(rows).view(dt).reshape(height, width, 4)


def from_image(image, kind, shape, *, layout=None, filter_format=None, tile=None,
               out=None) -> np.ndarray:
    """The exact inverse of :func:`to_image`: read the buffer tensor of ``shape`` back out.

    The result has the image's dtype; ``out`` (an array of ``shape`` and that dtype) receives
    it instead of a new array.  For WINOGRAD_FILTER the 3x3 weights are
    recovered from U with the pseudo-inverse of G (exact up to rounding).  ``image`` is the
    ``(height, width, 4)`` array; a flat dump from a device goes through
    :func:`image_from_dump` first (it takes the row pitch).
    """
    kind = _kind(kind)
    lay = image_layout(kind, shape, layout=layout, filter_format=filter_format, tile=tile)
    image = check_array("image", image)
    if image.ndim == 1:
        h, w, _ = lay.physical_shape
        raise RankError(f"image is flat ({image.size} values): read a device dump with "
                        f"image_from_dump(data, {w}, {h}, dtype=..., row_pitch=...) first; "
                        f"note the array is (height, width, 4) = ({h}, {w}, 4) while image_shape "
                        f"answers (width, height) = ({w}, {h})")
    image = check_array("image", image, rank=3)
    if tuple(image.shape) != lay.physical_shape:
        h, w, _ = lay.physical_shape
        raise ShapeError(
            f"image has shape {tuple(image.shape)}: a {kind.name} image of a tensor of shape "
            f"{tuple(shape)} is (height, width, 4) = {lay.physical_shape}, i.e. [{w}, {h}]")
    if image.dtype not in IMAGE_DTYPES:
        raise DTypeError(f"image has dtype {image.dtype}: an image holds float32 or float16")
    if out is not None:
        out = check_array("out", out, shape=lay.shape if kind != ImageType.WINOGRAD_FILTER else
                          tuple(shape), dtypes=(image.dtype,))
        if not out.flags.writeable:
            raise ShapeError("out is read-only: from_image needs a writeable array")
    if kind == ImageType.WINOGRAD_FILTER:
        w = _winograd_filter_weights(lay.unpack(image), tile).astype(image.dtype)
        if out is None:
            return w
        out[...] = w
        return out
    return lay.unpack(image, out=out)


def pixel_of(kind, shape, index, *, layout=None, filter_format=None, tile=None):
    """Element -> pixel: ``(x, y, k)`` for a buffer index (ints or broadcastable arrays).

    ``shape`` and ``index`` are in the buffer format's order (for WINOGRAD_FILTER,
    ``index`` is (t, o, i) of the transformed filter).

    >>> pixel_of("CONV2D_FILTER", (5, 3, 3, 3), (4, 2, 1, 0))     # o=4 -> second pixel row block
    (2, 12, 0)
    """
    lay = image_layout(kind, shape, layout=layout, filter_format=filter_format, tile=tile)
    y, x, k = lay.locate(index)
    return x, y, k


def element_at(kind, shape, x, y, k, *, layout=None, filter_format=None, tile=None):
    """Pixel -> element: the buffer index held by lane ``k`` of pixel ``(x, y)``, or None for padding.

    With array arguments it returns ``(index_tuple, valid)``, ``valid`` False on padding.

    >>> element_at("ARGUMENT", (5,), 1, 0, 0), element_at("ARGUMENT", (5,), 1, 0, 1)
    ((4,), None)
    """
    lay = image_layout(kind, shape, layout=layout, filter_format=filter_format, tile=tile)
    return lay.element_at((y, x, k))
