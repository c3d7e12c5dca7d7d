"""Tensors in NPU local memory: strides, layouts, storage modes and queries.

Everything here follows seed 003 and REFERENCE.md section 2.  A tensor of shape
``(N, C, H, W)`` starting at NPU ``Q`` with offset ``R`` puts element
``(n, c, h, w)`` (element size ``e``, element strides ``ns, cs, hs, ws``) in NPU
``(Q + c) % X`` at byte::

    R + e * (n*ns + ((Q + c) // X)*cs + h*hs + w*ws)

The C stride steps ``c`` to ``c + X``.  In the 4N / 2N / 2IC modes ``k`` = 4, 2, 2
consecutive ``n`` share one packed unit of ``u = k*e`` bytes and the strides count
those units::

    R + u * ((n // k)*ns + ((Q + c) // X)*cs + h*hs + w*ws) + e * (n % k)

Each tensor is a core :class:`~tensorlayout.core.Layout` over the physical
space ``(X, S)`` of local-memory bytes with logical dimensions ``(n, c, h, w, b)``,
``b`` being the byte inside an element: ``c`` is shifted by ``Q`` and split into
``[(X, S), (None, cs*u)]`` (its padding, the other NPUs' blocks, is *foreign*
and never written), ``n`` is split into ``[(k, e), (None, ns*u)]`` in the modes,
and the base is ``R``.  The dummies of the last packed unit (``k - N % k`` of
them when ``k`` does not divide ``N``) are one more small layout, written as 0
by every copy into local memory.

A ``rows x cols`` matrix with W columns per channel is the same kind of layout
over ``(row, col, b)``, col split into ``[(W, e), (X, S), (None, cs*e)]``.  Its
4-D view ``(rows, ceil(cols / W), 1, W)`` is one more layout, :attr:`NpuTensor.view`:
the 4-D index read row-major as an index of the grid ``(rows, C*W)``, whose
columns past ``cols`` (the short last channel's) hold nothing.  A tensor's view
is the identity on ``(N, C, H, W)``; every query goes through it.

The seed's aligned fp32 example, ``(2, 3, 4, 5)`` on 4 NPUs of 1024 bytes
starting at NPU 2::

    >>> from tensorlayout.npu import Chip
    >>> t = tensor_layout(Chip(4, 1024, 128), 2048, (2, 3, 4, 5))
    >>> t.stride, t.start_npu, t.locate((0, 2, 0, 0))
    ((64, 32, 5, 1), 2, (0, 128))
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..core import Layout
from ..errors import (
    AlignmentError,
    dtype_text,
    DTypeError,
    FootprintError,
    IndexOutOfRange,
    LayoutError,
    ModeError,
    ShapeError,
    StrideError,
    check_choice,
    check_nonneg_int,
    check_positive_int,
    check_shape,
)
from .chip import Chip

__all__ = [
    "DTYPES",
    "word_dtype",
    "MODES",
    "NpuTensor",
    "as_dtype",
    "channels_per_npu",
    "feature_block",
    "aligned_stride",
    "compact_stride",
    "continuous_stride",
    "packed_shape",
    "tensor_layout",
    "sub_channels",
    "sub_rows",
    "matrix_as_4d",
    "as_aligned",
    "as_compact",
    "matrix_layout",
    "locate",
]

#: The data type names OKKernel uses, and the NumPy dtypes they mean.
DTYPES = {name: np.dtype(name.replace("fp", "float"))
          for name in ("fp32", "fp16", "int32", "uint32", "int16", "uint16", "int8", "uint8")}
_NAMES = {v: k for k, v in DTYPES.items()}

#: Storage modes: how many consecutive n (or i) share a packed unit, and the dtypes allowed.
MODES = {
    "4N": (4, ("int8", "uint8")),
    "2N": (2, ("int16", "uint16")),
    "2IC": (2, ("fp32",)),
}

LAYOUTS = ("aligned", "compact", "stride")


def as_dtype(dtype) -> np.dtype:
    """A data type name ("fp32", "int8", ...) or a NumPy dtype -> the NumPy dtype.

    >>> as_dtype("fp16"), as_dtype(np.uint8)
    (dtype('float16'), dtype('uint8'))
    """
    if isinstance(dtype, str) and dtype.lower() in DTYPES:     # names are case-insensitive
        return DTYPES[dtype.lower()]
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        dt = None
    if dt is None or dt.newbyteorder("=") not in _NAMES or dt.byteorder not in "=|" and dt != dt.newbyteorder("="):
        raise DTypeError(
            f"dtype = {dtype_text(dtype)} is not allowed: it must be one of {', '.join(DTYPES)} "
            "(or the matching NumPy dtype)"
        )
    return dt.newbyteorder("=")


def dtype_name(dtype) -> str:
    """The OKKernel name of a dtype: ``dtype_name(np.float32) == 'fp32'``."""
    return _NAMES[as_dtype(dtype)]


def _check_mode(mode, dtype: np.dtype) -> int:
    """Validate a storage mode against the dtype; return k (1 when mode is None)."""
    if mode is None:
        return 1
    check_choice("mode", mode, (None, *MODES))
    k, allowed = MODES[mode]
    if dtype_name(dtype) not in allowed:
        raise ModeError(
            f"mode = {mode!r} is not allowed with dtype {dtype_name(dtype)}: "
            f"{mode} mode holds {' or '.join(allowed)} data only"
        )
    return k


def check_chip(chip) -> Chip:
    if not isinstance(chip, Chip):
        raise LayoutError(f"chip = {chip!r} is not allowed: it must be a tensorlayout.npu.Chip")
    return chip


def shape4(shape, name="shape") -> tuple[int, int, int, int]:
    return check_shape(name, shape, rank=4)


def packed_shape(shape, mode=None) -> tuple[int, int, int, int]:
    """The shape against the packed data type: ``(ceil(N / k), C, H, W)`` in the 4N/2N/2IC modes.

    The seed's 4N example: ``(6, 5, 4, 5)`` int8 becomes ``(2, 5, 4, 5)`` of int8x4.

    >>> packed_shape((6, 5, 4, 5), "4N"), packed_shape((3, 5, 4, 5), "2N")
    ((2, 5, 4, 5), (2, 5, 4, 5))
    """
    n, c, h, w = shape4(shape)
    k = MODES[check_choice("mode", mode, (None, *MODES))][0] if mode is not None else 1
    return (-(-n // k), c, h, w)


def channels_per_npu(chip: Chip, start_npu: int, channels: int) -> int:
    """Channels per NPU for ``channels`` channels starting at NPU ``start_npu``: ``ceil((Q + C) / X)``.

    The seed's scatter cases on X = 4 NPUs (C = X - 1 at NPU 0 and 1, C = X + 2 at NPU 0 and X - 1):

    >>> chip = Chip(4, 1024, 128)
    >>> [channels_per_npu(chip, q, c) for q, c in ((0, 3), (1, 3), (0, 6), (3, 6))]
    [1, 1, 2, 3]
    """
    chip = check_chip(chip)
    if isinstance(start_npu, bool) or not hasattr(start_npu, "__index__") \
            or not 0 <= int(start_npu) < chip.npus:
        raise LayoutError(
            f"start_npu = {start_npu!r} is not allowed: it must be an integer in [0, {chip.npus})"
        )
    c = check_positive_int("channels", channels)
    return max(1, -(-(int(start_npu) + c) // chip.npus))


def feature_block(chip: Chip, start_npu: int, channels: int, n: int, c: int) -> tuple[int, int]:
    """Where feature ``(n, c)`` is: ``(npu, block_row)`` with ``npu = (Q + c) % X`` and
    ``block_row = n * channels_per_npu + (Q + c) // X`` (rows counted from the tensor's start).

    Seed: C = X + 2 at NPU 0 puts features (*, X) and (*, X + 1) in NPU 0 and 1 of the second row.

    >>> chip = Chip(4, 1024, 128)
    >>> feature_block(chip, 0, 6, 0, 4), feature_block(chip, 0, 6, 0, 5), feature_block(chip, 0, 6, 1, 0)
    ((0, 1), (1, 1), (0, 2))
    """
    cpn = channels_per_npu(chip, start_npu, channels)
    q = int(start_npu)
    for name, v, ext in (("n", n, None), ("c", c, channels)):
        if isinstance(v, bool) or not hasattr(v, "__index__") or v < 0 or (ext is not None and v >= ext):
            rule = "a non-negative integer" if ext is None else f"an integer in [0, {ext})"
            raise IndexOutOfRange(f"{name} = {v!r} is not allowed: it must be {rule}")
    return (q + c) % chip.npus, n * cpn + (q + c) // chip.npus


def _strides(kind: str, chip: Chip | None, shape, q: int = 0, unit: int = 1) -> tuple[int, int, int, int]:
    """Strides (n, c, h, w) of checked arguments, counted in ``unit``-byte units: W stride 1,
    H stride W, C stride ``H*W`` ("aligned": rounded up to whole ``align_bytes``), N stride
    the C stride times the channels per NPU ("continuous": times C)."""
    _, c, h, w = shape
    step = math.lcm(chip.align_bytes, unit) // unit if kind == "aligned" else 1
    cs = -(-(h * w) // step) * step
    return (cs * (c if kind == "continuous" else max(1, -(-(q + c) // chip.npus))), cs, w, 1)


def aligned_stride(chip: Chip, shape, start_npu: int, dtype="fp32", mode=None) -> tuple[int, int, int, int]:
    """Strides (n, c, h, w), in elements (packed units in the 4N/2N/2IC modes), of the aligned layout.

    The C stride is ``H*W`` rounded up to ``align_bytes / unit`` elements.  The seed's
    example, ``(2, 3, 4, 5)`` fp32 on 4 NPUs, starting at NPU 0 and at NPU 2:

    >>> chip = Chip(4, 1024, 128)
    >>> aligned_stride(chip, (2, 3, 4, 5), 0, "fp32"), aligned_stride(chip, (2, 3, 4, 5), 2, "fp32")
    ((32, 32, 5, 1), (64, 32, 5, 1))
    """
    chip, dt = check_chip(chip), as_dtype(dtype)
    k = _check_mode(mode, dt)
    shape = shape4(shape)
    channels_per_npu(chip, start_npu, shape[1])
    return _strides("aligned", chip, shape, int(start_npu), dt.itemsize * k)


def compact_stride(chip: Chip, shape, start_npu: int, mode=None) -> tuple[int, int, int, int]:
    """Strides (n, c, h, w), in elements, of the compact layout: ``(H*W*cpn, H*W, W, 1)``.

    The seed's compact example ``(2, 3, 4, 5)`` on 4 NPUs, at NPU 0 and NPU 2:

    >>> chip = Chip(4, 1024, 128)
    >>> compact_stride(chip, (2, 3, 4, 5), 0), compact_stride(chip, (2, 3, 4, 5), 2)
    ((20, 20, 5, 1), (40, 20, 5, 1))
    """
    chip = check_chip(chip)
    shape = packed_shape(shape, mode)
    channels_per_npu(chip, start_npu, shape[1])
    return _strides("compact", chip, shape, int(start_npu))


def continuous_stride(shape) -> tuple[int, int, int, int]:
    """Strides (n, c, h, w) of the continuous system-memory layout: ``(C*H*W, H*W, W, 1)``.

    >>> continuous_stride((2, 3, 4, 5))
    (60, 20, 5, 1)
    """
    return _strides("continuous", None, shape4(shape))


def check_stride(stride, name="stride") -> tuple[int, int, int, int]:
    if isinstance(stride, (str, bytes)) or not hasattr(stride, "__iter__"):
        raise StrideError(f"{name} = {stride!r} is not allowed: it must be 4 positive integers (n, c, h, w)")
    stride = tuple(stride)
    if len(stride) != 4:
        raise StrideError(f"{name} = {stride!r} has {len(stride)} entries: it must be 4 positive integers (n, c, h, w)")
    for i, s in zip("nchw", stride):
        if isinstance(s, bool) or not hasattr(s, "__index__") or int(s) < 1:
            raise StrideError(f"{name} {i} = {s!r} is not allowed: every stride must be a positive integer")
    return tuple(int(s) for s in stride)


# ------------------------------------------------------------------ the tensor
@dataclass(frozen=True, eq=False)
class NpuTensor:
    """A placement in NPU local memory (make one with :func:`tensor_layout` or :func:`matrix_layout`).

    ``shape`` is the 4-D shape (a matrix's 4-D view); ``stride`` counts elements, or packed
    units in the modes.  ``layout`` is the byte layout over ``(X, S)`` (module docstring),
    ``view`` the 4-D index as an index of ``layout``'s grid; every answer below reads them.
    """

    chip: Chip
    address: int
    shape: tuple[int, int, int, int]
    stride: tuple[int, int, int, int]
    dtype: np.dtype
    mode: str | None
    layout_name: str
    start_npu: int
    offset: int
    layout: Layout = field(repr=False)
    view: Layout = field(repr=False)
    matrix_shape: tuple[int, int] | None = None
    cols_per_channel: int | None = None

    # ------------------------------------------------------------- derived
    @property
    def unit_bytes(self) -> int:
        """Bytes of one stride unit: the element, or the packed int8x4 / int16x2 / fp32x2 word."""
        return self.dtype.itemsize * (MODES[self.mode][0] if self.mode else 1)

    @property
    def elements(self) -> Layout:
        """The layout counted in elements: logical ``(n, c, h, w)`` (or ``(row, col)``), physical ``(X, S / e)``."""
        return _recast(self.layout, self.dtype.itemsize)

    @property
    def words(self) -> Layout:
        """The layout counted in packed units: the 4N/2N/2IC words, ``(ceil(N / k), C, H, W)``.

        >>> t = tensor_layout(Chip(4, 1024, 128), 0, (6, 5, 4, 5), dtype="int8", mode="4N")
        >>> t.words.shape, t.words.locate((1, 0, 0, 0))
        ((2, 5, 4, 5), (0, 64))
        """
        return _recast(self.layout, self.unit_bytes)

    @property
    def packed_shape(self) -> tuple[int, int, int, int]:
        """The shape against the packed unit (equal to ``shape`` without a mode)."""
        return packed_shape(self.shape, self.mode)

    @property
    def channels_per_npu(self) -> int:
        return channels_per_npu(self.chip, self.start_npu, self.shape[1])

    @property
    def is_matrix(self) -> bool:
        return self.matrix_shape is not None

    @property
    def span(self) -> int:
        """Bytes from the tensor's offset to its last byte in the fullest NPU."""
        return self.end_offset - self.offset

    @property
    def end_offset(self) -> int:
        """One past the last byte used in the fullest NPU: ``offset + span`` (at most S)."""
        return self.layout.reach(self.chip.lmem_bytes)

    # ------------------------------------------------------------- queries
    def _held(self, index) -> tuple:
        """A 4-D index -> the index of :attr:`elements` it is, refused where the grid holds nothing."""
        idx = self.view._indices(index, integers=True)
        at = self.view.locate(idx)
        past = np.broadcast_to(np.asarray(at[-1]) >= self.elements.shape[-1], np.broadcast(*idx).shape)
        if np.any(past):
            i = np.flatnonzero(past)[0]
            c, w, col = (np.broadcast_to(v, past.shape).flat[i] for v in (idx[1], idx[3], at[-1]))
            raise IndexOutOfRange(f"index (c, w) = ({c}, {w}) is column {col}: the matrix has only "
                                  f"{self.elements.shape[-1]} columns")
        return at

    def _bytes(self, held) -> tuple[int, int]:
        """An index of :attr:`elements` (checked) -> ``(npu, byte)``: ints, or arrays."""
        npu, byte = np.divmod(np.asarray(self.elements.locate_flat(held)) * self.dtype.itemsize,
                              self.chip.lmem_bytes)
        return (int(npu), int(byte)) if np.ndim(npu) == 0 else (npu, byte)

    def locate(self, index) -> tuple[int, int]:
        """Element ``(n, c, h, w)`` -> ``(npu, byte_offset)`` of its first byte.

        ``index`` may hold arrays (or be an array whose last axis is 4); the answer then
        holds arrays.  Seed stride example: (2, 5, 3, 4) fp32 at NPU 0 with strides (120, 56, 16, 2):

        >>> t = tensor_layout(Chip(4, 1024, 128), 0, (2, 5, 3, 4), stride=(120, 56, 16, 2))
        >>> t.locate((1, 4, 2, 3))     # NPU 0, byte 4 * (120 + 56 + 32 + 6)
        (0, 856)
        >>> [v.tolist() for v in t.locate(np.array([[0, 0, 0, 1], [1, 4, 2, 3]]))]
        [[0, 0], [8, 856]]
        """
        return self._bytes(self._held(index))

    def matrix_locate(self, row, col) -> tuple[int, int]:
        """Matrix element ``(row, col)`` -> ``(npu, byte_offset)`` (matrix tensors only; arrays too)."""
        self._need_matrix()
        return self._bytes(self.elements._indices((row, col), integers=True))

    def _element(self, npu, byte_offset, view=None):
        """``(npu, byte)`` -> the index of :attr:`elements` (through ``view`` if given) or None;
        for array locations ``(index, valid)``."""
        got = self.layout.element_at((npu, byte_offset))
        n = len(self.elements.dims)
        if got is None or not isinstance(got[0], tuple):
            return got if got is None else got[:n] if view is None else view.element_at(got[:n])
        index = got[0][:n]
        return (index if view is None else view.element_at(index)[0]), got[1]

    def element_at(self, npu, byte_offset):
        """``(npu, byte_offset)`` -> the ``(n, c, h, w)`` whose bytes include it, or None.

        None means the byte holds nothing of this tensor (or a 4N/2N/2IC dummy).

        >>> t = tensor_layout(Chip(4, 1024, 128), 0, (2, 5, 3, 4), stride=(120, 56, 16, 2))
        >>> t.element_at(0, 859), t.element_at(0, 860)
        ((1, 4, 2, 3), None)
        """
        return self._element(npu, byte_offset, self.view)

    def is_dummy(self, npu: int, byte_offset: int) -> bool:
        """True where the byte belongs to a 4N/2N/2IC dummy element of this tensor.

        >>> t = tensor_layout(Chip(4, 1024, 128), 0, (6, 5, 4, 5), dtype="int8", mode="4N")
        >>> t.is_dummy(0, 257), t.is_dummy(0, 258)
        (False, True)
        """
        self.layout.element_at((npu, byte_offset))  # validates the location
        flat = np.asarray(npu, dtype=np.int64) * self.chip.lmem_bytes + np.asarray(byte_offset, dtype=np.int64)
        pad = self.layout.padding_at_flat(flat)
        return bool(pad) if np.ndim(pad) == 0 else pad

    def matrix_element_at(self, npu, byte_offset):
        """``(npu, byte_offset)`` -> matrix ``(row, col)``, or None (matrix tensors only)."""
        self._need_matrix()
        return self._element(npu, byte_offset)

    def _need_matrix(self):
        if not self.is_matrix:
            raise LayoutError("this tensor is not a matrix: use locate / element_at with (n, c, h, w)")

    def byte_map(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Int64 array ``(X, stop - start)``: for each local byte offset in ``[start, stop)`` of
        every NPU, the flat row-major index into :attr:`elements` (``(N, C, H, W)``, or
        ``(rows, cols)`` for a matrix) of the element it belongs to, -1 where it holds nothing
        of this tensor, -2 where it holds a dummy.  ``stop=None`` means S; the whole map
        (``X * S`` int64, 256 MiB on BM1684) is built only when asked for.

        >>> t = tensor_layout(Chip(4, 1024, 128), 1, (1, 2, 1, 1), stride=(1, 1, 1, 1), dtype="int8")
        >>> t.byte_map()[:, :2].tolist()
        [[-1, 0], [-1, 1], [-1, -1], [-1, -1]]
        >>> t.byte_map(1, 3).tolist()
        [[0, -1], [1, -1], [-1, -1], [-1, -1]]
        """
        S = self.chip.lmem_bytes
        start = check_nonneg_int("start", start)
        stop = S if stop is None else check_nonneg_int("stop", stop)
        if not start <= stop <= S:
            raise IndexOutOfRange(
                f"start, stop = {start}, {stop} is not allowed: it must be a byte range with "
                f"0 <= start <= stop <= {S}")
        lay, logical = self.layout, self.elements.shape
        if (start, stop) == (0, S):
            m = np.full(lay.physical_size, -1, dtype=np.int64)
            idx = np.arange(math.prod(logical), dtype=np.int64).reshape(logical)
            lay.pack(np.broadcast_to(idx.reshape(idx.shape + (1,) * (lay.ndim - idx.ndim)), lay.shape),
                     out=m, fill_padding=False)
            m[lay.padding_mask().reshape(-1)] = -2
            return m.reshape(lay.physical_shape)
        # A window: ask location -> element of the bytes in it only.
        X = self.chip.npus
        flat = (np.arange(X, dtype=np.int64)[:, None] * S + np.arange(start, stop, dtype=np.int64)).ravel()
        index, valid = lay.element_at_flat(flat)
        m = np.where(valid, np.ravel_multi_index(index[:len(logical)], logical), -1)
        m[lay.padding_at_flat(flat)] = -2
        return m.reshape(X, stop - start)

    def bytes_per_npu(self) -> np.ndarray:
        """Bytes of each NPU that hold this tensor's elements (and dummies), shape (X,).

        >>> tensor_layout(Chip(4, 1024, 128), 0, (2, 6, 1, 1), dtype="fp32").bytes_per_npu().tolist()
        [16, 16, 8, 8]
        """
        return np.array(self.layout.row_slots(self.chip.lmem_bytes), dtype=np.int64)

    def empty_blocks(self) -> int:
        """Feature-sized blocks inside the tensor's block rows that hold nothing of it.

        Per batch row that is ``channels_per_npu * X - C``; the seed's worst case, C = X + 2
        starting at NPU X - 1, has 2 (X - 1) per batch.  Counted for the whole tensor
        (times N, or ceil(N / k) in the modes).

        >>> chip = Chip(4, 1024, 128)
        >>> tensor_layout(chip, 3 * 1024, (1, 6, 1, 1)).empty_blocks()
        6
        """
        m, c, _, _ = self.packed_shape
        return (self.channels_per_npu * self.chip.npus - c) * m

    @functools.cached_property
    def _whole(self) -> Layout:
        """:attr:`layout` over the whole grid of :attr:`view` (a matrix's short last channel whole)."""
        grid = self.view.physical_shape
        return dataclasses.replace(self.layout, shape=grid + self.layout.shape[len(grid):])

    def npu_ranges(self) -> list[tuple[int, int] | None]:
        """Per NPU, the byte range ``[lo, hi)`` from the tensor's first to last byte there, or None.

        The ranges cover :attr:`view`'s whole grid: a matrix claims its short last channel whole.

        >>> matrix_layout(Chip(4, 1024, 128), 0, 2, 40, 15).npu_ranges()
        [(0, 188), (0, 188), (0, 188), None]
        """
        return list(self._ranges)

    @functools.cached_property
    def _ranges(self) -> tuple:
        """:meth:`npu_ranges`, worked out once per placement (allocation and overlap checks
        ask for them again and again)."""
        return tuple(self._whole.row_ranges(self.chip.lmem_bytes))

    # ------------------------------------------------------------- copies
    def _check_array(self, array) -> np.ndarray:
        array = np.asarray(array)
        want = self.elements.shape
        if array.shape != want:
            raise ShapeError(f"array has shape {array.shape}: this tensor needs {want}")
        if array.dtype.newbyteorder("=") != self.dtype or array.dtype.byteorder not in "=|":
            raise DTypeError(
                f"array has dtype {array.dtype}: this tensor holds {dtype_name(self.dtype)} "
                f"({self.dtype}), and a copy never reinterprets or converts data")
        return array

    def pack_into(self, memory: np.ndarray, array) -> None:
        """Write ``array`` into the ``(X, S)`` uint8 ``memory`` (dummies as 0; nothing else touched).

        One copy through :attr:`elements`: in the modes, n's inner digit interleaves k
        values into each word, as an image's lanes interleave channels.
        """
        array = self._check_array(array)
        u = word_dtype(self.dtype)
        self.elements.pack(array.view(u), out=memory.reshape(-1).view(u))

    def unpack_from(self, memory: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Read the tensor (original shape, its dtype) out of the ``(X, S)`` uint8 ``memory``.

        ``out``, if given, is any array of that shape and element size (a strided view is fine).
        """
        if out is None:
            out = np.empty(self.elements.shape, dtype=self.dtype)
        u = word_dtype(self.dtype)
        self.elements.unpack(memory.reshape(-1).view(u), out=out.view(u))
        return out


def word_dtype(dtype: np.dtype) -> np.dtype:
    """The unsigned integer type of ``dtype``'s size: copies move words, never convert."""
    return np.dtype(f"u{dtype.itemsize}")


@functools.lru_cache(maxsize=512)
def _recast(layout: Layout, unit: int) -> Layout:
    """The byte layout counted in ``unit``-byte units (cached per layout value)."""
    return layout.recast(1, unit)


# ------------------------------------------------------------- constructors
def _check_address_alignment(address, need, layout_name):
    if address % need:
        raise AlignmentError(
            f"address = {address} is not allowed: the {layout_name} layout needs an address "
            f"divisible by {need}"
        )


def _placement(name, chip, address, shape, stride, dt, mode, dims, sizes, digits, offsets, owned,
               grid, **matrix) -> NpuTensor:
    """The tensor of checked arguments: its byte layout over ``(X, S)`` (``b``, an element's
    bytes, added when ``e > 1``; refused when it runs past an NPU's S bytes or when two
    elements share bytes) and its 4-D view onto ``grid``."""
    X, S, e = chip.npus, chip.lmem_bytes, dt.itemsize
    q, r = divmod(address, S)
    if e > 1:
        dims, sizes, digits, owned = dims + ("b",), sizes + (e,), {**digits, "b": 1}, owned + ("b",)
    wide = Layout(f"npu-{name}", dims, sizes, (X, 1 << 48), digits, offsets=offsets, base=r,
                  owned_padding=owned, physical_axes=("npu", "byte"))
    end = wide.reach(S)
    if end > S:
        what = f"matrix {sizes[0]}x{sizes[1]}" if matrix else f"tensor {sizes[:4]}"
        raise FootprintError(
            f"{what} at offset {r} spans {end - r} bytes per NPU: offset + span = "
            f"{end} runs past the end of the NPU's {S} bytes"
        )
    if not wide.injective:
        raise StrideError(f"stride = {stride}: the strides make two elements share bytes")
    return NpuTensor(chip, address, shape, stride, dt, mode, name, q, r,
                     dataclasses.replace(wide, physical_shape=(X, S)), _view(name, shape, grid), **matrix)


@functools.lru_cache(maxsize=256)
def _view(name, shape, grid) -> Layout:
    """The 4-D index ``shape`` read row-major as an index of ``grid`` (:attr:`NpuTensor.view`)."""
    _, c, h, w = shape
    return Layout(f"npu-{name}", ("n", "c", "h", "w"), shape, grid, {"n": c * h * w, "c": h * w, "h": w, "w": 1})


def tensor_layout(chip: Chip, address: int, shape, stride=None, dtype="fp32", mode=None,
                  layout: str = "aligned") -> NpuTensor:
    """Place an ``(N, C, H, W)`` tensor at local ``address`` and describe where each byte goes.

    ``layout`` is "aligned" (address divisible by the chip's alignment), "compact" (address
    divisible by 4) or "stride" (the given ``stride``; address divisible by the element size,
    up to 4).  Giving ``stride`` means "stride" whatever ``layout`` says.  ``mode`` is None,
    "4N" (int8/uint8), "2N" (int16/uint16) or "2IC" (fp32, shape [I, O, H, W]); strides then
    count packed units.  Everything is checked before anything is returned.

    The seed's 4N example, ``(6, 5, 4, 5)`` int8 aligned on 4 NPUs:

    >>> t = tensor_layout(Chip(4, 1024, 128), 0, (6, 5, 4, 5), dtype="int8", mode="4N")
    >>> t.packed_shape, t.stride, t.locate((5, 0, 0, 0))
    ((2, 5, 4, 5), (64, 32, 5, 1), (0, 257))
    """
    chip = check_chip(chip)
    dt = as_dtype(dtype)
    if isinstance(mode, str) and mode.upper() in MODES:
        mode = mode.upper()                    # mode names are case-insensitive ("4n" is 4N)
    u = dt.itemsize * _check_mode(mode, dt)
    shape = shape4(shape)
    address = chip.check_address(address)
    if stride is not None:
        stride, name, need = check_stride(stride), "stride", min(u, 4)
    else:
        name = check_choice("layout", layout, LAYOUTS)
        if layout == "stride":
            raise StrideError("layout = 'stride' needs stride = (n, c, h, w)")
        need = chip.align_bytes if layout == "aligned" else 4
        stride = _strides(layout, chip, shape, address // chip.lmem_bytes, u)
    _check_address_alignment(address, need, name)
    return _place(chip, address, shape, stride, dt, mode, name)


@functools.lru_cache(maxsize=256)
def _place(chip, address, shape, stride, dt, mode, name) -> NpuTensor:
    """The placement of checked arguments (one per distinct placement: tensors are values)."""
    k = MODES[mode][0] if mode else 1
    u = dt.itemsize * k
    ns, cs, hs, ws = stride
    digits = {"n": ns * u if k == 1 else [(k, dt.itemsize), (None, ns * u)],
              "c": [(chip.npus, chip.lmem_bytes), (None, cs * u)], "h": hs * u, "w": ws * u}
    return _placement(name, chip, address, shape, stride, dt, mode, ("n", "c", "h", "w"), shape,
                      digits, {"c": address // chip.lmem_bytes}, ("n", "h", "w"), shape)


def matrix_layout(chip: Chip, address: int, rows: int, cols: int, cols_per_channel: int,
                  dtype="fp32") -> NpuTensor:
    """Place a ``rows x cols`` matrix in the matrix layout with ``cols_per_channel`` (W) columns per channel.

    It is the aligned 4-D tensor ``(rows, ceil(cols / W), 1, W)`` whose last channel holds
    only ``cols - W * floor(cols / W)`` columns when W does not divide cols.  Its strides are
    the aligned strides *from NPU 0* whatever the start NPU (N stride = C stride x
    ``ceil(C / X)``), as BM1684's matrix GDMA and matmul lay it out (checked on Sophgo's
    simulator): from a start NPU Q > 0 with Q + C > X, row r's wrapped channels share block
    row r + 1 with row r + 1's first channels, on other NPUs.  The seed's
    2 x 40 fp32 matrix with W = 15 on 4 NPUs:

    >>> t = matrix_layout(Chip(4, 1024, 128), 0, 2, 40, 15)
    >>> t.shape, t.stride, t.matrix_locate(1, 39), t.matrix_element_at(2, 128 + 36)
    ((2, 3, 1, 15), (32, 32, 15, 1), (2, 164), (1, 39))
    """
    chip = check_chip(chip)
    dt = as_dtype(dtype)
    rows = check_positive_int("rows", rows)
    cols = check_positive_int("cols", cols)
    W = check_positive_int("cols_per_channel", cols_per_channel)
    if W > cols:
        raise ShapeError(f"cols_per_channel = {W} is not allowed: it must be in [1, cols = {cols}]")
    address = chip.check_address(address)
    _check_address_alignment(address, chip.align_bytes, "matrix")
    return _place_matrix(chip, address, rows, cols, W, dt)


@functools.lru_cache(maxsize=64)
def _place_matrix(chip, address, rows, cols, W, dt) -> NpuTensor:
    shape = (rows, -(-cols // W), 1, W)
    stride = _strides("aligned", chip, shape, 0, dt.itemsize)
    e, q = dt.itemsize, address // chip.lmem_bytes
    digits = {"row": stride[0] * e, "col": [(W, e), (chip.npus, chip.lmem_bytes), (None, stride[1] * e)]}
    return _placement("matrix", chip, address, shape, stride, dt, None, ("row", "col"), (rows, cols),
                      digits, {"col": q * W}, ("row",), (rows, shape[1] * W),
                      matrix_shape=(rows, cols), cols_per_channel=W)


def locate(chip: Chip, address: int, shape, stride, dtype, index, mode=None) -> tuple[int, int]:
    """Element ``index = (n, c, h, w)`` -> ``(npu, byte_offset)``; ``stride=None`` means aligned.

    The seed's second stride example: (2, 3, 1, 10) fp32 at NPU 1, W stride 2, N stride 120:

    >>> locate(Chip(4, 1024, 128), 1024, (2, 3, 1, 10), (120, 20, 20, 2), "fp32", (1, 2, 0, 9))
    (3, 552)
    """
    return tensor_layout(chip, address, shape, stride, dtype, mode).locate(index)


# ------------------------------------------------------------------- views of one image
def _one_image(t: NpuTensor, what: str) -> None:
    if t.shape[0] != 1 or t.mode is not None or t.is_matrix:
        raise ShapeError(f"{what} of a tensor of shape {t.shape}{' (a matrix)' if t.is_matrix else ''}"
                         f"{' in mode ' + t.mode if t.mode else ''} is not allowed: it takes one image "
                         "(N = 1) of a 4-D tensor")


def sub_channels(t: NpuTensor, c0: int, c1: int) -> NpuTensor:
    """Channels ``[c0, c1)`` of one image ``t`` as a tensor of its own, on the same bytes: it
    starts in NPU ``(Q + c0) % X``, at the block row of channel ``c0``, with ``t``'s strides
    (the aligned strides of its own shape where those are the same bytes).

    >>> t = tensor_layout(Chip(4, 1024, 128), 0, (1, 6, 2, 3))
    >>> p = sub_channels(t, 1, 6)
    >>> p.start_npu, p.offset, p.layout_name, p.locate((0, 4, 1, 2)) == t.locate((0, 5, 1, 2))
    (1, 0, 'aligned', True)
    """
    _one_image(t, "sub_channels")
    c = t.shape[1]
    if not 0 <= c0 < c1 <= c:
        raise ShapeError(f"channels [{c0}, {c1}) is not allowed: the tensor has {c} channels")
    chip = t.chip
    q = t.start_npu + c0
    address = (q % chip.npus) * chip.lmem_bytes + t.offset + (q // chip.npus) * t.stride[1] * t.unit_bytes
    shape = (1, c1 - c0) + t.shape[2:]
    cpn = channels_per_npu(chip, q % chip.npus, c1 - c0)
    stride = (t.stride[1] * cpn,) + t.stride[1:]
    return as_aligned(tensor_layout(chip, address, shape, stride=stride, dtype=t.dtype))


def sub_rows(t: NpuTensor, r0: int, r1: int) -> NpuTensor:
    """Rows ``[r0, r1)`` of one image ``t``, on the same bytes (``t``'s strides; the aligned
    strides of its own shape where those are the same bytes).

    >>> t = tensor_layout(Chip(4, 1024, 128), 0, (1, 2, 4, 8))
    >>> r = sub_rows(t, 1, 3)
    >>> r.address, r.stride, r.locate((0, 1, 1, 7)) == t.locate((0, 1, 2, 7))
    (32, (32, 32, 8, 1), True)
    """
    _one_image(t, "sub_rows")
    if not 0 <= r0 < r1 <= t.shape[2]:
        raise ShapeError(f"rows [{r0}, {r1}) is not allowed: the tensor has {t.shape[2]} rows")
    if r0 == 0 and r1 == t.shape[2]:
        return t
    address = t.address + r0 * t.stride[2] * t.unit_bytes
    shape = t.shape[:2] + (r1 - r0, t.shape[3])
    return as_aligned(tensor_layout(t.chip, address, shape, stride=t.stride, dtype=t.dtype))


def as_aligned(t: NpuTensor) -> NpuTensor:
    """``t`` placed in the aligned layout when that is the same bytes (one image, rows of
    W elements, the aligned C stride or one channel per NPU, an aligned address); else ``t``.

    >>> t = tensor_layout(Chip(4, 1024, 128), 0, (1, 3, 2, 2), stride=(99, 77, 2, 1))
    >>> as_aligned(t).layout_name          # one channel per NPU: the C stride never counts
    'aligned'
    """
    if t.layout_name == "aligned" or t.mode is not None or t.is_matrix or t.shape[0] != 1:
        return t
    want = aligned_stride(t.chip, t.shape, t.start_npu, t.dtype)
    same = (t.shape[3] == 1 or t.stride[3] == want[3]) and (t.shape[2] == 1 or t.stride[2] == want[2]) \
        and (t.channels_per_npu == 1 or t.stride[1] == want[1])
    if not same or t.offset % t.chip.align_bytes:
        return t
    return tensor_layout(t.chip, t.address, t.shape, dtype=t.dtype)


def as_compact(t: NpuTensor) -> NpuTensor | None:
    """``t`` (one image of one element per channel, ``(1, C, 1, 1)``) in the compact layout
    when that is the same bytes (one channel per NPU, or a C stride of one element); else None."""
    if t.shape[0] != 1 or t.shape[2:] != (1, 1) or t.mode is not None or t.is_matrix:
        return None
    if t.layout_name == "compact":
        return t
    if t.channels_per_npu == 1 or t.stride[1] == 1:
        return tensor_layout(t.chip, t.address, t.shape, dtype=t.dtype, layout="compact")
    return None


def matrix_as_4d(t: NpuTensor) -> NpuTensor:
    """The aligned 4-D tensor a matrix is (its 4-D view, on the same bytes), for instructions
    that work element by element; columns past the matrix's own in the last channel are
    computed too and never read.

    >>> m = matrix_layout(Chip(4, 1024, 128), 0, 1, 10, 3)
    >>> matrix_as_4d(m).shape, matrix_as_4d(m).stride == m.stride
    ((1, 4, 1, 3), True)
    """
    if not t.is_matrix:
        return t
    if t.start_npu != 0 and t.shape[0] > 1:
        raise LayoutError(f"matrix at NPU {t.start_npu} with {t.shape[0]} rows is not allowed: its "
                          "strides are those of NPU 0, not an aligned 4-D tensor's")
    return tensor_layout(t.chip, t.address, t.shape, dtype=t.dtype)
