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

The seed's aligned fp32 example, ``(2, 3, 4, 5)`` on 4 NPUs of 1024 bytes
starting at NPU 2::

    >>> from tensorlayout.npu import Chip
    >>> t = tensor_layout(Chip(4, 1024, 128), 2048, (2, 3, 4, 5))
    >>> t.stride, t.start_npu, t.locate((0, 2, 0, 0))
    ((64, 32, 5, 1), 2, (0, 128))
"""

from __future__ import annotations

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
    RankError,
    ShapeError,
    StrideError,
    check_choice,
    check_nonneg_int,
    check_positive_int,
    check_shape,
)
from . import _pack
from .chip import Chip

__all__ = [
    "DTYPES",
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
    "matrix_layout",
    "locate",
]

#: The data type names OKKernel uses, and the NumPy dtypes they mean.
DTYPES = {
    "fp32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16),
    "int32": np.dtype(np.int32),
    "uint32": np.dtype(np.uint32),
    "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
}
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


def _check_chip(chip) -> Chip:
    if not isinstance(chip, Chip):
        raise LayoutError(f"chip = {chip!r} is not allowed: it must be a tensorlayout.npu.Chip")
    return chip


def _check_start(chip: Chip, start_npu) -> int:
    if isinstance(start_npu, bool) or not hasattr(start_npu, "__index__") \
            or not 0 <= int(start_npu) < chip.npus:
        raise LayoutError(
            f"start_npu = {start_npu!r} is not allowed: it must be an integer in [0, {chip.npus})"
        )
    return int(start_npu)


def _shape4(shape, name="shape") -> tuple[int, int, int, int]:
    return check_shape(name, shape, rank=4)


def packed_shape(shape, mode=None) -> tuple[int, int, int, int]:
    """The shape against the packed data type: ``(ceil(N / k), C, H, W)`` in the 4N/2N/2IC modes.

    The seed's 4N example: ``(6, 5, 4, 5)`` int8 becomes ``(2, 5, 4, 5)`` of int8x4.

    >>> packed_shape((6, 5, 4, 5), "4N"), packed_shape((3, 5, 4, 5), "2N")
    ((2, 5, 4, 5), (2, 5, 4, 5))
    """
    n, c, h, w = _shape4(shape)
    if mode is None:
        return (n, c, h, w)
    check_choice("mode", mode, (None, *MODES))
    k = MODES[mode][0]
    return (-(-n // k), c, h, w)


def channels_per_npu(chip: Chip, start_npu: int, channels: int) -> int:
    """Channels per NPU for ``channels`` channels starting at NPU ``start_npu``: ``ceil((Q + C) / X)``.

    The seed's scatter cases on X = 4 NPUs (C = X - 1 at NPU 0 and 1, C = X + 2 at NPU 0 and X - 1):

    >>> chip = Chip(4, 1024, 128)
    >>> [channels_per_npu(chip, q, c) for q, c in ((0, 3), (1, 3), (0, 6), (3, 6))]
    [1, 1, 2, 3]
    """
    chip = _check_chip(chip)
    q = _check_start(chip, start_npu)
    c = check_positive_int("channels", channels)
    return max(1, -(-(q + c) // chip.npus))


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


def _unit_bytes(dtype: np.dtype, mode) -> int:
    k = 1 if mode is None else MODES[mode][0]
    return dtype.itemsize * k


def aligned_stride(chip: Chip, shape, start_npu: int, dtype="fp32", mode=None) -> tuple[int, int, int, int]:
    """Strides (n, c, h, w), in elements, of the aligned layout on ``chip``.

    W stride 1, H stride W, C stride ``H*W`` rounded up to ``align_bytes / unit`` elements,
    N stride = C stride x channels per NPU.  In the 4N/2N/2IC modes the unit is the packed
    32-bit (64-bit for 2IC) word and the strides count those words.  The seed's example,
    ``(2, 3, 4, 5)`` fp32 on 4 NPUs, starting at NPU 0 and at NPU 2:

    >>> chip = Chip(4, 1024, 128)
    >>> aligned_stride(chip, (2, 3, 4, 5), 0, "fp32"), aligned_stride(chip, (2, 3, 4, 5), 2, "fp32")
    ((32, 32, 5, 1), (64, 32, 5, 1))
    """
    chip = _check_chip(chip)
    dt = as_dtype(dtype)
    _check_mode(mode, dt)
    m, c, h, w = packed_shape(shape, mode)
    u = _unit_bytes(dt, mode)
    step = math.lcm(chip.align_bytes, u) // u  # elements per alignment step
    cs = -(-(h * w) // step) * step
    return (cs * channels_per_npu(chip, start_npu, c), cs, w, 1)


def compact_stride(chip: Chip, shape, start_npu: int, mode=None) -> tuple[int, int, int, int]:
    """Strides (n, c, h, w), in elements, of the compact layout: ``(H*W*cpn, H*W, W, 1)``.

    The seed's compact example ``(2, 3, 4, 5)`` on 4 NPUs, at NPU 0 and NPU 2:

    >>> chip = Chip(4, 1024, 128)
    >>> compact_stride(chip, (2, 3, 4, 5), 0), compact_stride(chip, (2, 3, 4, 5), 2)
    ((20, 20, 5, 1), (40, 20, 5, 1))
    """
    chip = _check_chip(chip)
    _, c, h, w = packed_shape(shape, mode)
    return (h * w * channels_per_npu(chip, start_npu, c), h * w, w, 1)


def continuous_stride(shape) -> tuple[int, int, int, int]:
    """Strides (n, c, h, w) of the continuous system-memory layout: ``(C*H*W, H*W, W, 1)``.

    >>> continuous_stride((2, 3, 4, 5))
    (60, 20, 5, 1)
    """
    _, c, h, w = _shape4(shape)
    return (c * h * w, h * w, w, 1)


def _check_stride(stride, name="stride") -> tuple[int, int, int, int]:
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
    """A tensor placed in NPU local memory (make one with :func:`tensor_layout` or :func:`matrix_layout`).

    ``shape`` is the original ``(N, C, H, W)`` (for a matrix, its 4-D view
    ``(rows, ceil(cols / W), 1, W)``); ``stride`` counts elements, or packed units
    in the 4N/2N/2IC modes; ``layout`` is the core :class:`~tensorlayout.core.Layout`
    over the ``(X, S)`` bytes of local memory with dimensions ``(n, c, h, w, b)``
    (``(row, col, b)`` for a matrix).
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
    matrix_shape: tuple[int, int] | None = None
    cols_per_channel: int | None = None
    _elements: Layout = field(default=None, repr=False)
    # (bytes, elements) layouts of the 4N/2N/2IC dummies, or None when there are none
    _dummies: tuple[Layout, Layout] | None = field(default=None, repr=False)
    # 4N/2N/2IC: the packed words as elements of an (X, S / u) array, when the offset allows
    _words: Layout | None = field(default=None, repr=False)

    # ------------------------------------------------------------- derived
    @property
    def unit_bytes(self) -> int:
        """Bytes of one stride unit: the element, or the packed int8x4 / int16x2 / fp32x2 word."""
        return _unit_bytes(self.dtype, self.mode)

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
        m, _, h, w = self.packed_shape
        ns, cs, hs, ws = self.stride
        return self.unit_bytes * ((m - 1) * ns + (self.channels_per_npu - 1) * cs
                                  + (h - 1) * hs + (w - 1) * ws + 1)

    @property
    def end_offset(self) -> int:
        """One past the last byte used in the fullest NPU: ``offset + span`` (at most S)."""
        return self.offset + self.span

    # ------------------------------------------------------------- queries
    def _layout_index(self, index):
        """``(n, c, h, w)`` (ints, arrays, or an array whose last axis is 4) -> the byte layout's index."""
        if isinstance(index, np.ndarray) and index.ndim >= 1:
            if index.shape[-1] != 4:
                raise RankError(f"index has last axis {index.shape[-1]}: it must be (n, c, h, w)")
            parts = tuple(index[..., i] for i in range(4))
        else:
            if isinstance(index, (str, bytes)) or not hasattr(index, "__iter__"):
                raise RankError(f"index = {index!r} is not allowed: it must be (n, c, h, w)")
            parts = tuple(index)
            if len(parts) != 4:
                raise RankError(f"index = {parts!r} has {len(parts)} components: it must be (n, c, h, w)")
        arrs = []
        for name, v, ext in zip("nchw", parts, self.shape):
            a = np.asarray(v)
            if isinstance(v, (bool, np.bool_)) or a.dtype.kind not in "iu":
                raise IndexOutOfRange(f"index {name} = {v!r} is not allowed: indices must be integers")
            bad = (a < 0) | (a >= ext)
            if np.any(bad):
                raise IndexOutOfRange(
                    f"index {name} = {a[bad].flat[0]} is out of range: it must be in [0, {ext})")
            arrs.append(a.astype(np.int64, copy=False))
        n, c, h, w = arrs
        if self.is_matrix:
            col = c * self.cols_per_channel + w
            bad = col >= self.matrix_shape[1]
            if np.any(bad):
                i = np.flatnonzero(np.broadcast_to(bad, col.shape))[0] if col.ndim else 0
                cc, ww = np.broadcast_to(c, col.shape).flat[i], np.broadcast_to(w, col.shape).flat[i]
                raise IndexOutOfRange(
                    f"index (c, w) = ({cc}, {ww}) is column {col.flat[i]}: the matrix has only "
                    f"{self.matrix_shape[1]} columns"
                )
            return (n, col, 0)
        return (n, c, h, w, 0)

    @staticmethod
    def _pair(loc):
        """Core coordinates -> (npu, byte): ints for a scalar query, arrays otherwise."""
        if all(np.ndim(v) == 0 for v in loc):
            return tuple(int(v) for v in loc)
        return tuple(np.asarray(v) for v in loc)

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
        return self._pair(self.layout.locate(self._layout_index(index)))

    def matrix_locate(self, row, col) -> tuple[int, int]:
        """Matrix element ``(row, col)`` -> ``(npu, byte_offset)`` (matrix tensors only; arrays too)."""
        self._need_matrix()
        return self._pair(self.layout.locate((row, col, 0)))

    def element_at(self, npu, byte_offset):
        """``(npu, byte_offset)`` -> the ``(n, c, h, w)`` whose bytes include it, or None.

        None means the byte holds nothing of this tensor (or a 4N/2N/2IC dummy).

        >>> t = tensor_layout(Chip(4, 1024, 128), 0, (2, 5, 3, 4), stride=(120, 56, 16, 2))
        >>> t.element_at(0, 859), t.element_at(0, 860)
        ((1, 4, 2, 3), None)
        """
        got = self.layout.element_at((npu, byte_offset))
        if got is None:
            return None
        if isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], np.ndarray):
            index, valid = got
            if self.is_matrix:
                r, col = index[0], index[1]
                W = self.cols_per_channel
                return (r, col // W, np.zeros_like(col), col % W), valid
            return tuple(index[:4]), valid
        if self.is_matrix:
            r, col, _ = got
            return (r, col // self.cols_per_channel, 0, col % self.cols_per_channel)
        return got[:4]

    def is_dummy(self, npu: int, byte_offset: int) -> bool:
        """True where the byte belongs to a 4N/2N/2IC dummy element of this tensor.

        >>> t = tensor_layout(Chip(4, 1024, 128), 0, (6, 5, 4, 5), dtype="int8", mode="4N")
        >>> t.is_dummy(0, 257), t.is_dummy(0, 258)
        (False, True)
        """
        got = self.layout.element_at((npu, byte_offset))  # validates the location
        scalar = np.ndim(npu) == 0 and np.ndim(byte_offset) == 0
        if self._dummies is None:
            return False if scalar else np.zeros(np.broadcast(npu, byte_offset).shape, dtype=bool)
        got = self._dummies[0].element_at((npu, byte_offset))
        return got is not None if scalar else got[1]

    def matrix_element_at(self, npu, byte_offset):
        """``(npu, byte_offset)`` -> matrix ``(row, col)``, or None (matrix tensors only)."""
        self._need_matrix()
        got = self.layout.element_at((npu, byte_offset))
        if got is not None and isinstance(got[1], np.ndarray):
            return got[0][:2], got[1]
        return None if got is None else got[:2]

    def _need_matrix(self):
        if not self.is_matrix:
            raise LayoutError("this tensor is not a matrix: use locate / element_at with (n, c, h, w)")

    def byte_map(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Int64 array ``(X, stop - start)``: for each local byte offset in ``[start, stop)`` of
        every NPU, the flat row-major index of the element it belongs to, -1 where it holds
        nothing of this tensor, -2 where it holds a dummy.  ``stop=None`` means S; the whole
        map (``X * S`` int64, 256 MiB on BM1684) is built only when asked for.

        The index is into the original shape ``(N, C, H, W)`` (for a matrix: ``row * cols + col``).

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
        lay = self.layout
        logical = lay.shape[:-1]
        if (start, stop) == (0, S):
            m = np.full(lay.physical_size, -1, dtype=np.int64)
            idx = np.arange(math.prod(logical), dtype=np.int64).reshape(logical)[..., None]
            lay.pack(np.broadcast_to(idx, lay.shape), out=m, fill_padding=False)
            if self._dummies is not None:
                dl = self._dummies[0]
                dl.pack(np.broadcast_to(np.int64(-2), dl.shape), out=m, fill_padding=False)
            return m.reshape(lay.physical_shape)
        # A window: ask location -> element of the bytes in it only.
        X = self.chip.npus
        flat = (np.arange(X, dtype=np.int64)[:, None] * S + np.arange(start, stop, dtype=np.int64)).ravel()
        index, valid = lay.element_at_flat(flat)
        m = np.where(valid, np.ravel_multi_index(index[:-1], logical), -1)
        if self._dummies is not None:
            m[self._dummies[0].element_at_flat(flat)[1]] = -2
        return m.reshape(X, stop - start)

    def _channel_bytes(self) -> np.ndarray:
        """Bytes each channel holds (elements and dummies)."""
        m, c, h, w = self.packed_shape
        if self.is_matrix:
            rows, cols = self.matrix_shape
            W = self.cols_per_channel
            per = np.minimum(W, cols - W * np.arange(c))
            return per * rows * self.dtype.itemsize
        return np.full(c, m * h * w * self.unit_bytes, dtype=np.int64)

    def bytes_per_npu(self) -> np.ndarray:
        """Bytes of each NPU that hold this tensor's elements (and dummies), shape (X,).

        >>> tensor_layout(Chip(4, 1024, 128), 0, (2, 6, 1, 1), dtype="fp32").bytes_per_npu().tolist()
        [16, 16, 8, 8]
        """
        c = self.shape[1]
        npu = (self.start_npu + np.arange(c)) % self.chip.npus
        return np.bincount(npu, weights=self._channel_bytes(), minlength=self.chip.npus).astype(np.int64)

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

    def npu_ranges(self) -> list[tuple[int, int] | None]:
        """Per NPU, the byte range ``[lo, hi)`` from the tensor's first to last byte there, or None."""
        m, c, h, w = self.packed_shape
        ns, cs, hs, ws = self.stride
        u, X, q = self.unit_bytes, self.chip.npus, self.start_npu
        inner = (m - 1) * ns + (h - 1) * hs + (w - 1) * ws
        out = []
        for p in range(X):
            first = (p - q) % X  # first channel in NPU p
            if first >= c:
                out.append(None)
                continue
            last = first + ((c - 1 - first) // X) * X
            r0, r1 = (q + first) // X, (q + last) // X
            out.append((self.offset + u * r0 * cs, self.offset + u * (r1 * cs + inner + 1)))
        return out

    # ---------------------------------------------------- copies (fast path)
    def _check_array(self, array) -> np.ndarray:
        array = np.asarray(array)
        want = self.matrix_shape if self.is_matrix else self.shape
        if array.shape != tuple(want):
            raise ShapeError(f"array has shape {array.shape}: this tensor needs {tuple(want)}")
        if array.dtype.newbyteorder("=") != self.dtype or array.dtype.byteorder not in "=|":
            raise DTypeError(
                f"array has dtype {array.dtype}: this tensor holds {dtype_name(self.dtype)} "
                f"({self.dtype}), and a copy never reinterprets or converts data")
        return array

    def _runs(self):
        """Word offsets of the contiguous runs of the packed words: ``(offsets (M, G), run)``.

        A run is a whole feature (H*W words) when the H stride is W, else one row of W words.
        The offsets come from the word layout's own ``locate_flat``; cached per tensor.
        """
        cached = self.__dict__.get("_runs_cache")
        if cached is not None:
            return cached or None
        m, c, h, w = self.packed_shape
        _, _, hs, ws = self.stride
        result = False
        if self._words is not None and ws == 1:
            if hs == w or h == 1:
                grid = np.meshgrid(np.arange(m), np.arange(c), [0], [0], indexing="ij")
                run = h * w
            else:
                grid = np.meshgrid(np.arange(m), np.arange(c), np.arange(h), [0], indexing="ij")
                run = w
            offsets = self._words.locate_flat(tuple(g.ravel() for g in grid)).reshape(m, -1)
            result = (np.ascontiguousarray(offsets, dtype=np.int64), run)
        object.__setattr__(self, "_runs_cache", result)
        return result or None

    def pack_into(self, memory: np.ndarray, array) -> None:
        """Write ``array`` into the ``(X, S)`` uint8 ``memory`` (dummies as 0; nothing else touched)."""
        array = self._check_array(array)
        e = self.dtype.itemsize
        src = array.view(np.dtype(f"u{e}"))
        flat = memory.reshape(-1)
        if self._words is not None:
            n, k = self.shape[0], self.unit_bytes // e
            runs = self._runs()
            if runs is not None:
                # One pass: k planes of n go straight into the runs the word layout locates.
                offsets, run = runs
                if _pack.interleave_runs(src.reshape(n, -1, run), k, offsets,
                                         flat.view(np.dtype(f"u{self.unit_bytes}"))):
                    return
            # Interleave k consecutive n into words first, then one strided copy of words.
            words = _pack.interleave(src.reshape(n, -1), k)
            self._words.pack(words.reshape(self.packed_shape), out=flat.view(words.dtype),
                             fill_padding=False)
            return
        flat = flat.view(src.dtype)
        self._elements.pack(src, out=flat, fill_padding=False)
        if self._dummies is not None:
            dl = self._dummies[1]
            dl.pack(np.broadcast_to(flat.dtype.type(0), dl.shape), out=flat, fill_padding=False)

    def unpack_from(self, memory: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Read the tensor (original shape, its dtype) out of the ``(X, S)`` uint8 ``memory``.

        ``out``, if given, is any array of that shape and element size (a strided view is fine).
        """
        e = self.dtype.itemsize
        if out is None:
            want = self.matrix_shape if self.is_matrix else self.shape
            out = np.empty(want, dtype=self.dtype)
        out_u = out.view(np.dtype(f"u{e}"))
        flat = memory.reshape(-1)
        if self._words is not None:
            u = self.unit_bytes
            n = self.shape[0]
            runs = self._runs()
            if runs is not None and out_u.flags.c_contiguous:
                offsets, run = runs
                if _pack.deinterleave_runs(flat.view(np.dtype(f"u{u}")), u // e, offsets,
                                           out_u.reshape(n, -1, run)):
                    return out
            words = self._words.unpack(flat.view(np.dtype(f"u{u}")))
            if out_u.flags.c_contiguous:
                _pack.deinterleave(words.reshape(words.shape[0], -1), n, u // e, out_u.dtype,
                                   out=out_u.reshape(n, -1))
            else:
                tmp = _pack.deinterleave(words.reshape(words.shape[0], -1), n, u // e, out_u.dtype)
                np.copyto(out_u, tmp.reshape(out_u.shape))
            return out
        self._elements.unpack(flat.view(out_u.dtype), out=out_u)
        return out


# ------------------------------------------------------------- constructors
def _check_address_alignment(chip, address, need, layout_name):
    if address % need:
        raise AlignmentError(
            f"address = {address} is not allowed: the {layout_name} layout needs an address "
            f"divisible by {need}"
        )


def _check_footprint(chip, offset, span, what):
    if offset + span > chip.lmem_bytes:
        raise FootprintError(
            f"{what} at offset {offset} spans {span} bytes per NPU: offset + span = "
            f"{offset + span} runs past the end of the NPU's {chip.lmem_bytes} bytes"
        )


def _check_injective(lay: Layout, what: str):
    if lay._nested:
        return
    if lay.count > 1 << 22:
        raise StrideError(f"{what}: the strides interleave elements in a way that cannot be checked for overlap")
    idx = np.indices(lay.shape).reshape(lay.ndim, -1)
    locs = lay.locate_flat(tuple(idx))
    if np.unique(locs).size != locs.size:
        raise StrideError(f"{what}: the strides make two elements share bytes")


def _key(value):
    """A hashable form of a shape or stride argument, or None where there is none."""
    if isinstance(value, (tuple, list)) and all(type(v) is int for v in value):
        return tuple(value)
    return None


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
    # Placements are immutable, so repeated copies of one tensor reuse its layouts.
    sk, tk = _key(shape), _key(stride)
    if (isinstance(chip, Chip) and type(address) is int and sk is not None
            and (stride is None or tk is not None) and isinstance(layout, str)
            and (mode is None or isinstance(mode, str))):
        try:
            dt = as_dtype(dtype)
        except DTypeError:
            dt = None
        if dt is not None:
            return _tensor_layout_cached(chip, address, sk, tk, dt, mode, layout)
    return _tensor_layout(chip, address, shape, stride, dtype, mode, layout)


@functools.lru_cache(maxsize=256)
def _tensor_layout_cached(chip, address, shape, stride, dtype, mode, layout):
    return _tensor_layout(chip, address, shape, stride, dtype, mode, layout)


def _tensor_layout(chip, address, shape, stride, dtype, mode, layout) -> NpuTensor:
    chip = _check_chip(chip)
    dt = as_dtype(dtype)
    if isinstance(mode, str) and mode.upper() in MODES:
        mode = mode.upper()                    # mode names are case-insensitive ("4n" is 4N)
    k = _check_mode(mode, dt)
    shape = _shape4(shape)
    address = chip.check_address(address)
    q, r = address // chip.lmem_bytes, address % chip.lmem_bytes
    u = dt.itemsize * k
    if stride is not None:
        stride = _check_stride(stride)
        name, need = "stride", min(u, 4)
    else:
        check_choice("layout", layout, LAYOUTS)
        if layout == "stride":
            raise StrideError("layout = 'stride' needs stride = (n, c, h, w)")
        if layout == "aligned":
            stride, need = aligned_stride(chip, shape, q, dt, mode), chip.align_bytes
        else:
            stride, need = compact_stride(chip, shape, q, mode), 4
        name = layout
    _check_address_alignment(chip, address, need, name)
    m = packed_shape(shape, mode)[0]
    n, c, h, w = shape
    ns, cs, hs, ws = stride
    X, S, e = chip.npus, chip.lmem_bytes, dt.itemsize
    cpn = channels_per_npu(chip, q, c)
    span = u * ((m - 1) * ns + (cpn - 1) * cs + (h - 1) * hs + (w - 1) * ws + 1)
    _check_footprint(chip, r, span, f"tensor {shape}")
    ndig = ns * u if k == 1 else [(k, e), (None, ns * u)]
    byte_layout = Layout(
        f"npu-{name}", ("n", "c", "h", "w", "b"), (n, c, h, w, e), (X, S),
        digits={"n": ndig, "c": [(X, S), (None, cs * u)], "h": hs * u, "w": ws * u, "b": 1},
        offsets={"c": q}, base=r, owned_padding=("n", "h", "w", "b"), physical_axes=("npu", "byte"))
    _check_injective(byte_layout, f"stride = {stride}")
    ndig_e = ns * k if k == 1 else [(k, 1), (None, ns * k)]
    elements = Layout(
        f"npu-{name}-elements", ("n", "c", "h", "w"), (n, c, h, w), (X, S // e),
        digits={"n": ndig_e, "c": [(X, S // e), (None, cs * k)], "h": hs * k, "w": ws * k},
        offsets={"c": q}, base=r // e, owned_padding=("n", "h", "w"), physical_axes=("npu", "element"))
    dummies = None
    if n % k:
        # The dummies after the last n: k - N % k slots in the last packed unit of every (c, h, w).
        d, first = k - n % k, (m - 1) * ns * u + (n % k) * e
        dummies = (
            Layout(f"npu-{name}-dummies", ("d", "c", "h", "w", "b"), (d, c, h, w, e), (X, S),
                   digits={"d": e, "c": [(X, S), (None, cs * u)], "h": hs * u, "w": ws * u, "b": 1},
                   offsets={"c": q}, base=r + first, owned_padding=("d", "h", "w", "b")),
            Layout(f"npu-{name}-dummy-elements", ("d", "c", "h", "w"), (d, c, h, w), (X, S // e),
                   digits={"d": 1, "c": [(X, S // e), (None, cs * k)], "h": hs * k, "w": ws * k},
                   offsets={"c": q}, base=(r + first) // e, owned_padding=("d", "h", "w")),
        )
    words = None
    if k > 1 and r % u == 0 and S % u == 0:
        words = Layout(
            f"npu-{name}-words", ("m", "c", "h", "w"), (m, c, h, w), (X, S // u),
            digits={"m": ns, "c": [(X, S // u), (None, cs)], "h": hs, "w": ws},
            offsets={"c": q}, base=r // u, owned_padding=("m", "h", "w"), physical_axes=("npu", "word"))
    return NpuTensor(chip, address, shape, stride, dt, mode, name, q, r, byte_layout,
                     _elements=elements, _dummies=dummies, _words=words)


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
    chip = _check_chip(chip)
    dt = as_dtype(dtype)
    rows = check_positive_int("rows", rows)
    cols = check_positive_int("cols", cols)
    W = check_positive_int("cols_per_channel", cols_per_channel)
    if W > cols:
        raise ShapeError(f"cols_per_channel = {W} is not allowed: it must be in [1, cols = {cols}]")
    address = chip.check_address(address)
    q, r = address // chip.lmem_bytes, address % chip.lmem_bytes
    shape = (rows, -(-cols // W), 1, W)
    stride = aligned_stride(chip, shape, 0, dt)
    _check_address_alignment(chip, address, chip.align_bytes, "matrix")
    X, S, e = chip.npus, chip.lmem_bytes, dt.itemsize
    ns, cs = stride[0], stride[1]
    cpn = channels_per_npu(chip, q, shape[1])
    span = e * ((rows - 1) * ns + (cpn - 1) * cs + W)
    _check_footprint(chip, r, span, f"matrix {rows}x{cols}")
    byte_layout = Layout(
        "npu-matrix", ("row", "col", "b"), (rows, cols, e), (X, S),
        digits={"row": ns * e, "col": [(W, e), (X, S), (None, cs * e)], "b": 1},
        offsets={"col": q * W}, base=r, owned_padding=("row", "b"), physical_axes=("npu", "byte"))
    elements = Layout(
        "npu-matrix-elements", ("row", "col"), (rows, cols), (X, S // e),
        digits={"row": ns, "col": [(W, 1), (X, S // e), (None, cs)]},
        offsets={"col": q * W}, base=r // e, owned_padding=("row",), physical_axes=("npu", "element"))
    return NpuTensor(chip, address, shape, stride, dt, None, "matrix", q, r, byte_layout,
                     matrix_shape=(rows, cols), cols_per_channel=W, _elements=elements)


def locate(chip: Chip, address: int, shape, stride, dtype, index, mode=None) -> tuple[int, int]:
    """Element ``index = (n, c, h, w)`` -> ``(npu, byte_offset)``; ``stride=None`` means aligned.

    The seed's second stride example: (2, 3, 1, 10) fp32 at NPU 1, W stride 2, N stride 120:

    >>> locate(Chip(4, 1024, 128), 1024, (2, 3, 1, 10), (120, 20, 20, 2), "fp32", (1, 2, 0, 9))
    (3, 552)
    """
    return tensor_layout(chip, address, shape, stride, dtype, mode).locate(index)
