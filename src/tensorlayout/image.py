"""OpenCL RGBA images as MACE's GPU runtime lays them out (seeds 000, 001, 002).

A tensor is stored in a 2-D image with CL_RGBA channel order: pixel (x, y) holds
four values, lanes k = 0..3.  Arrays here are shaped (height, width, 4), the
row-major order of the image's memory.  Which element sits in which lane is
given by REFERENCE.md section 1 (the seeds' height- and width-major pixel
formulas are wrong; their image sizes are right).  Every type is a
:class:`~tensorlayout.core.Layout`, so element -> pixel, pixel -> element,
pack and unpack come from the core.

``q(x) = (x + 3) // 4``.  The nine types are rows of data (:data:`ROWS`): the image's
size and the pixel of every element, as formulas that :func:`image_layout` reads, that
the OpenCL kernels are generated from (``opencl/pixels.cl``) and that the figures print.
Capitals are sizes, lower case indices; ``c4 = c // 4`` is a pixel's group of four
channels, whose lane is ``k = c % 4``.  WINOGRAD_FILTER holds U[t, o, i] = (G g G^T) of
3x3 OIHW weights, t in [0, T2), T2 = (tile + 2)^2.

>>> print(table())
type              buffer                  image [width, height]    pixel (x, y) of an element
IN_OUT_CHANNEL    NHWC/NCHW               [q(C)*W, N*H]            (c4*W + w, n*H + h)
IN_OUT_HEIGHT     NHWC/NCHW               [W*C, N*q(H)]            (c*W + w, n*q(H) + h4)
IN_OUT_WIDTH      NHWC/NCHW               [q(W)*C, N*H]            (c*q(W) + w4, n*H + h)
ARGUMENT          W                       [q(L), 1]                (l4, 0)
CONV2D_FILTER     OIHW                    [I, H*W*q(O)]            (i, o4*H*W + h*W + w)
                  HWOI                    [RoundUp4(I), H*W*q(O)]  (i, o4*H*W + h*W + w)
DW_CONV2D_FILTER  MIHW/HWIM/C1HW          [M*H*W, q(I)]            (m*H*W + h*W + w, i4)
WEIGHT_HEIGHT     OIHW                    [I*H*W, q(O)]            (h*W*I + w*I + i, o4)
WEIGHT_WIDTH      OIHW                    [q(I)*H*W, O]            (h*W*q(I) + w*q(I) + i4, o)
WINOGRAD_FILTER   OIHW 3x3 as U[t, o, i]  [q(I), O*T2]             (i4, t*O + o)

Depthwise multiplier M > 1 is an extension of ours (MACE writes zeros): pixel
column x = m*H*W + h*W + w, which fills the [M*H*W, q(I)] image the seeds give.

>>> import numpy as np
>>> image_shape(ImageType.IN_OUT_CHANNEL, (1, 2, 3, 5))      # NHWC -> [width, height]
(6, 2)
>>> pixel_of(ImageType.IN_OUT_CHANNEL, (1, 2, 3, 5), (0, 1, 2, 4))   # (x, y, k)
(5, 1, 0)
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ._checks import IMAGE_DTYPES, image_dtype as _image_dtype, q, renamed
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
    "winograd_filter_weights",
    "ROWS",
    "Row",
    "WinogradU",
    "row",
    "table",
    "layout_of",
]

#: CL_DEVICE_IMAGE2D_MAX_WIDTH and _HEIGHT on many mobile GPUs.
DEFAULT_MAX_IMAGE_SIZE = (16384, 16384)


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


@dataclass(frozen=True)
class WinogradU:
    """A row whose image holds, not the buffer tensor g (3x3 OIHW weights), but its Winograd
    transform for one tile: the logical tensor is U[t, o, i] = (G g G^T)[t // T, t % T],
    T = tile + 2, computed on the host (:func:`winograd_filter_values`) and inverted on the
    way back (:func:`winograd_filter_weights`).

    >>> u = row("WINOGRAD_FILTER").transform
    >>> u.tiles, u.logical((8, 5, 3, 3), 2)
    ((2, 4, 6), (('t', 'o', 'i'), (16, 8, 5)))
    """

    tiles: tuple = (2, 4, 6)
    kernel: tuple = (3, 3)
    text: str = "3x3 as U[t, o, i]"

    def check_tile(self, kind, tile) -> int:
        """The tile, refused unless it is one of :attr:`tiles`."""
        if tile not in self.tiles:
            raise AlgorithmError(f"tile = {tile!r} is not allowed for {kind.name}: it must be one of {self.tiles}")
        return int(tile)

    def check_kernel(self, kind, shape) -> None:
        """Refuse a buffer tensor whose kernel is not :attr:`kernel`."""
        if shape[2:] != self.kernel:
            raise AlgorithmError(f"shape = {shape} has a {shape[2]}x{shape[3]} kernel: {kind.name} holds "
                                 f"{'x'.join(map(str, self.kernel))} filters only")

    @staticmethod
    def logical(shape, tile) -> tuple:
        """``(dims, shape)`` of the tensor the image holds: ``(t, o, i)``, ``(T^2, O, I)``."""
        return ("t", "o", "i"), ((tile + 2) ** 2, shape[0], shape[1])

    @staticmethod
    def forward(weights, tile) -> np.ndarray:
        """Buffer tensor -> the tensor the image holds (float64)."""
        return winograd_filter_values(weights, tile)

    @staticmethod
    def inverse(values, tile) -> np.ndarray:
        """The tensor the image holds -> the buffer tensor (float64, exact up to rounding)."""
        return winograd_filter_weights(values, tile)


@dataclass(frozen=True)
class Row:
    """One image type as data: the image's size and where each logical index lands.

    Formulas are Python (and C) expressions.  Capitals are the buffer's sizes, lower case
    its indices; the ``lane`` dimension's four consecutive values share a pixel, so its
    index appears as its group ``d4 = d // 4`` (lane ``k = d % 4``).  ``x`` and ``y`` are
    linear in the indices; ``holds`` says in words what lane k of pixel (x, y) holds.
    ``names`` gives a size another letter than its dimension's capital.  ``transform`` says
    the image holds a transform of the buffer tensor rather than the tensor (:class:`WinogradU`).
    """

    kind: ImageType
    formats: tuple
    width: str
    height: str
    x: str
    y: str
    lane: str
    holds: str
    names: tuple = ()
    transform: WinogradU | None = None

    def symbols(self, dims) -> tuple:
        """``(sizes, indices)``: the formula's letter for each dimension's size and index
        (the lane dimension's index as its group ``d4``)."""
        named = dict(self.names)
        sizes = tuple(named.get(d, d.upper()) for d in dims)
        idx = tuple(z.rstrip("0123456789").lower() + ("4" if d == self.lane else "")
                    for d, z in zip(dims, sizes))
        return sizes, idx

    def evaluate(self, dims, shape):
        """``(width, height, {dim: (x coefficient, y coefficient)})`` for one shape."""
        sizes, idx = self.symbols(dims)
        env = dict(zip(sizes, shape), q=q, RoundUp4=lambda v: 4 * q(v), __builtins__={})
        width, height = (eval(_code(f), env) for f in (self.width, self.height))  # noqa: S307
        zero = dict(env, **{i: 0 for i in idx})
        base = [eval(_code(f), zero) for f in (self.x, self.y)]  # noqa: S307
        place = {}
        for d, i in zip(dims, idx):
            one = dict(zero, **{i: 1})
            place[d] = tuple(eval(_code(f), one) - b for f, b in zip((self.x, self.y), base))  # noqa: S307
        return width, height, place

    def size_text(self, dot="*") -> str:
        """The image size as written in the docs: ``[q(C)*W, N*H]``."""
        text = f"[{self.width}, {self.height}]".replace("*", dot)
        return re.sub(r"\b([A-Z])2\b", "\\1\u00b2", text) if dot != "*" else text

    def pixel_text(self) -> str:
        """The pixel of an element: ``(c4*W + w, n*H + h)``."""
        return f"({self.x}, {self.y})"


@functools.lru_cache(maxsize=None)
def _code(formula: str):
    return compile(formula, formula, "eval")


def _keyed(rows) -> dict:
    """``{(type, None): its first row, (type, format): a later row of the same type}``."""
    out = {}
    for r in rows:
        out[(r.kind, None if (r.kind, None) not in out else r.formats[0])] = r
    return out


#: The nine image types (REFERENCE.md section 1; the seeds' pixel formulas for the height-
#: and width-major types are corrected there).  A type's first row serves every buffer
#: format it lists, the first one being the default; a later row of the same type (HWOI
#: filters) serves its own format.
ROWS = _keyed((
    Row(ImageType.IN_OUT_CHANNEL, ("NHWC", "NCHW"), "q(C)*W", "N*H", "c4*W + w", "n*H + h", "c",
        "n = y // H, h = y % H, w = x % W, c = 4\u00b7(x // W) + k"),
    Row(ImageType.IN_OUT_HEIGHT, ("NHWC", "NCHW"), "W*C", "N*q(H)", "c*W + w", "n*q(H) + h4", "h",
        "n = y // q(H), h = 4\u00b7(y % q(H)) + k, w = x % W, c = x // W"),
    Row(ImageType.IN_OUT_WIDTH, ("NHWC", "NCHW"), "q(W)*C", "N*H", "c*q(W) + w4", "n*H + h", "w",
        "n = y // H, h = y % H, w = 4\u00b7(x % q(W)) + k, c = x // q(W)"),
    Row(ImageType.ARGUMENT, ("W",), "q(L)", "1", "l4", "0", "w", "a[4x + k]", (("w", "L"),)),
    Row(ImageType.CONV2D_FILTER, ("OIHW",), "I", "H*W*q(O)", "i", "o4*H*W + h*W + w", "o",
        "o = 4\u00b7(y // HW) + k, i = x, h = (y % HW) // W, w = y % W"),
    Row(ImageType.CONV2D_FILTER, ("HWOI",), "RoundUp4(I)", "H*W*q(O)", "i", "o4*H*W + h*W + w", "o",
        "o = 4\u00b7(y // HW) + k, i = x, h = (y % HW) // W, w = y % W"),
    Row(ImageType.DW_CONV2D_FILTER, ("MIHW", "HWIM", "C1HW"), "M*H*W", "q(I)", "m*H*W + h*W + w",
        "i4", "i", "i = 4y + k, m = x // HW, h = (x % HW) // W, w = x % W"),
    Row(ImageType.WEIGHT_HEIGHT, ("OIHW",), "I*H*W", "q(O)", "h*W*I + w*I + i", "o4", "o",
        "o = 4y + k, x = (h\u00b7W + w)\u00b7I + i"),
    Row(ImageType.WEIGHT_WIDTH, ("OIHW",), "q(I)*H*W", "O", "h*W*q(I) + w*q(I) + i4", "o", "i",
        "o = y, x = (h\u00b7W + w)\u00b7q(I) + i // 4, k = i % 4"),
    Row(ImageType.WINOGRAD_FILTER, ("OIHW",), "q(I)", "O*T2", "i4", "t*O + o", "i",
        "y = t\u00b7O + o, x = i // 4, k = i % 4, value U_t[o, i]", (("t", "T2"),), WinogradU()),
))


def row(kind, fmt=None) -> Row:
    """The :class:`Row` of ``kind`` in buffer format ``fmt`` (None: the default format).

    >>> row("IN_OUT_CHANNEL").size_text(), row("CONV2D_FILTER", "HWOI").size_text("\u00b7")
    ('[q(C)*W, N*H]', '[RoundUp4(I), H\u00b7W\u00b7q(O)]')
    """
    kind = image_type(kind)
    return ROWS.get((kind, fmt)) or ROWS[(kind, None)]


def table() -> str:
    """The image types as a text table, read from :data:`ROWS`."""
    head = ("type", "buffer", "image [width, height]", "pixel (x, y) of an element")
    lines = [(r.kind.name if f is None else "", "/".join(r.formats) + (
        f" {r.transform.text}" if r.transform else ""), r.size_text(),
        r.pixel_text()) for (_, f), r in ROWS.items()]
    widths = [max(len(t[i]) for t in lines + [head]) for i in range(3)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(t, widths + [0])).rstrip()
                     for t in [head] + lines)


def image_type(kind) -> ImageType:
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
    kind = image_type(kind)
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


def _check_tile(r: Row, tile):
    """The tile of a row with a transform (checked), else None (refused when given)."""
    if r.transform is not None:
        return r.transform.check_tile(r.kind, tile)
    if tile is not None:
        tiled = " or ".join(t.kind.name for t in ROWS.values() if t.transform)
        raise LayoutError(f"tile = {tile!r} is not allowed for {r.kind.name}: only {tiled} takes a tile")
    return None


def image_layout(kind, shape, *, layout=None, filter_format=None, tile=None) -> Layout:
    """The :class:`Layout` of ``kind`` for a tensor of ``shape`` (in the buffer format's order).

    Its physical space is the image array (height, width, 4).  For WINOGRAD_FILTER the
    logical tensor is the transformed filter U with dimensions (t, o, i), t in [0, T^2).
    The layout is read from the type's :data:`ROWS` entry and built once per shape.

    >>> image_layout("IN_OUT_CHANNEL", (1, 2, 3, 5)).physical_shape
    (2, 6, 4)
    """
    kind = image_type(kind)
    fmt = buffer_format(kind, layout=layout, filter_format=filter_format)
    r = row(kind, fmt)
    tile = _check_tile(r, tile)
    shape = check_shape("shape", shape, rank=len(fmt))
    if kind == ImageType.DW_CONV2D_FILTER:
        _check_depthwise(fmt, shape, filter_format)
    if r.transform:
        r.transform.check_kernel(kind, shape)
    return layout_of(kind, fmt, shape, tile)


def _check_depthwise(fmt, shape, filter_format):
    if fmt == "C1HW" and shape[1] != 1:
        raise ShapeError(f"shape = {shape} is not allowed for DW_CONV2D_FILTER in C1HW: PyTorch's "
                         f"depthwise weight (C, 1, KH, KW) has 1 in the second place, not {shape[1]} "
                         "(a multiplier M > 1 is MIHW (M, C, KH, KW))")
    size = dict(zip(fmt.lower(), shape))
    if fmt != "C1HW" and filter_format is None and size["i"] == 1 and size["m"] > 1:
        raise ShapeError(
            f"shape = {shape} is ambiguous for DW_CONV2D_FILTER in MIHW: it reads as a multiplier of "
            f"{size['m']} on one channel; PyTorch's depthwise weight (C, 1, KH, KW) is "
            f"filter_format='C1HW', MACE's MIHW of {size['m']} channels is (1, {size['m']}, KH, KW); "
            "filter_format='MIHW' keeps the multiplier")


@functools.lru_cache(maxsize=1024)
def layout_of(kind: ImageType, fmt: str, shape: tuple, tile) -> Layout:
    """:func:`image_layout` for arguments already checked: ``fmt`` the buffer format,
    ``shape`` a tuple of positive ints of its rank, ``tile`` 2, 4, 6 (WINOGRAD_FILTER only)."""
    r = row(kind, fmt)
    dims = ("i", "m", "h", "w") if fmt == "C1HW" else tuple(fmt.lower())
    if r.transform:
        dims, shape = r.transform.logical(shape, tile)
    width, height, place = r.evaluate(dims, shape)
    digits = {}
    for d in dims:
        sx, sy = place[d]
        stride = sy * width * 4 + sx * 4
        digits[d] = [(4, 1), (None, stride)] if d == r.lane else stride
    return Layout(kind.name, dims, shape, (height, width, 4), digits, physical_axes=("y", "x", "k"))


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


def _host_memory_bytes():
    """Bytes of this machine's memory, or None where the system does not say."""
    import os

    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@contextlib.contextmanager
def _allocating(argument: str, what: str, nbytes: int):
    """Refuse, before allocating, ``what`` (an array past this machine's memory), and turn
    NumPy's MemoryError inside the block into a DeviceLimitError naming ``argument``."""
    have = _host_memory_bytes()
    if have is not None and nbytes > have:
        raise DeviceLimitError(f"{argument} is not allowed: {what} needs {nbytes} bytes, more than this "
                               f"machine's {have} bytes of memory")
    try:
        yield
    except MemoryError:
        raise DeviceLimitError(f"{argument} is not allowed: {what} needs {nbytes} bytes, which this "
                               "machine could not allocate") from None


def checked_source(array, kind, layout, filter_format):
    """``(kind, array)`` for a tensor about to be stored in an image: the kind is known, the
    array has the rank of the kind's buffer format and holds floating-point data."""
    kind = image_type(kind)
    fmt = buffer_format(kind, layout=layout, filter_format=filter_format)
    array = check_array("array", array, rank=len(fmt))
    if array.dtype.kind != "f":
        raise DTypeError(f"array has dtype {array.dtype}: an image is built from floating-point data")
    return kind, array


def stored_dtype(array, dtype) -> np.dtype:
    """The image's channel type: ``dtype`` if given, else float16 for float16 data and float32."""
    return _image_dtype(dtype if dtype is not None else
                        (np.float16 if array.dtype == np.float16 else np.float32))


def winograd_filter_values(weights, tile: int) -> np.ndarray:
    """The transformed filter U[t, o, i] = (G g G^T)[t // T, t % T] in float64.

    G is MACE's for the tile (``tensorlayout.winograd.transforms(tile, 3)``).
    """
    G = _winograd_G(tile)
    g = np.asarray(weights, dtype=np.float64)
    U = np.einsum("ar,oirs,bs->aboi", G, g, G)  # (T, T, O, I)
    T = tile + 2
    return U.reshape(T * T, g.shape[0], g.shape[1])


@functools.lru_cache(maxsize=None)
def _winograd_G(tile: int) -> np.ndarray:
    """MACE's G of F(tile, 3) in float64, read once per tile from the exact transforms."""
    from .winograd.transforms import transforms

    G = transforms(tile, 3).as_float(np.float64)[1]
    G.setflags(write=False)
    return G


def winograd_filter_weights(U: np.ndarray, tile: int) -> np.ndarray:
    """The 3x3 OIHW weights g whose transformed filter is ``U`` (t, o, i): g = G+ U G+^T,
    exact up to rounding (G has full column rank).

    >>> g = np.arange(18.0).reshape(2, 1, 3, 3)
    >>> np.allclose(winograd_filter_weights(winograd_filter_values(g, 4), 4), g)
    True
    """
    G = _winograd_G(tile)
    Gp = np.linalg.pinv(G)
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
    kind, array = checked_source(array, kind, layout, filter_format)
    if out is not None:
        out = check_array("out", out, rank=3)
        if out.dtype not in IMAGE_DTYPES:
            raise DTypeError(f"out has dtype {out.dtype}: an image holds float32 or float16")
        if dtype is not None and _image_dtype(dtype) != out.dtype:
            raise DTypeError(f"dtype = {dtype_text(dtype)} does not match out, which has dtype {out.dtype}")
        dtype = out.dtype
    out_dtype = stored_dtype(array, dtype)
    with renamed({"shape": "array.shape"}, "tensorlayout.to_image"):
        lay = image_layout(kind, array.shape, layout=layout, filter_format=filter_format, tile=tile)
    height, width, _ = lay.physical_shape
    check_image_limits(width, height, max_size)
    if out is not None and (out.shape != lay.physical_shape or not out.flags.c_contiguous
                            or not out.flags.writeable):
        raise ShapeError(
            f"out has shape {out.shape}: a {kind.name} image of a tensor of shape {array.shape} "
            f"needs a writeable C-contiguous array of shape (height, width, 4) = {lay.physical_shape}")
    transform = row(kind).transform
    nbytes = width * height * 4 * out_dtype.itemsize + (array.nbytes if transform else 0)
    with _allocating(f"array.shape = {tuple(array.shape)}", f"its {kind.name} image of [{width}, {height}] "
                     "pixels", nbytes):
        if transform:
            array = transform.forward(array, tile)
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
    kind = image_type(kind)
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
    transform = row(kind).transform
    if out is not None:
        out = check_array("out", out, shape=tuple(shape) if transform else lay.shape, dtypes=(image.dtype,))
        if not out.flags.writeable:
            raise ShapeError("out is read-only: from_image needs a writeable array")
    n = 1
    for d in shape:
        n *= int(d)
    with _allocating(f"shape = {tuple(shape)}", "the tensor read back",
                     n * image.dtype.itemsize * (3 if transform else 1)):
        if transform:
            w = transform.inverse(lay.unpack(image), tile).astype(image.dtype)
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
