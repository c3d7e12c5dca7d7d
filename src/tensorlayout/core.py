"""The layout core: one description for every storage scheme in the seeds.

A :class:`Layout` maps a logical index (for example ``(n, h, w, c)``) to a
location in a physical space (an image's ``(y, x, lane)``, an NPU's
``(npu, byte)``, a buffer's offset).  Each logical dimension ``d`` is first
shifted by an offset, ``j = d + offset``, and then split into mixed-radix
*digits*::

    digit_k = (j // div_k) % radix_k      (the outermost digit has no radix)

Every digit has a stride into the row-major physical space, and the location
is ``base + sum(digit * stride)``.  That is enough for every row of the seeds'
tables: RGBA lanes are ``c % 4`` with stride 1, NPUs are ``(c + Q) % X`` with
stride S, 4N mode is ``n % 4`` inside a 32-bit word, and so on.

Digit positions whose ``j`` falls outside ``[offset, offset + D)`` are
padding.  A dimension's padding is either *owned* (image lanes past C, 4N
dummies: written as zero by :meth:`Layout.pack`) or *foreign* (the NPUs
before a tensor's start NPU belong to other tensors: never written).

From the description follow, with no per-layout code: the physical size,
:meth:`Layout.locate` (element to location), :meth:`Layout.element_at`
(location to element or padding), :meth:`Layout.pack` and
:meth:`Layout.unpack`.  Pack and unpack cut the valid range of every
dimension into a few rectangular boxes in digit space and run one strided copy
per box through :func:`tensorlayout._copy.strided_copy`.

Example, the seed's channel-major image of an NHWC tensor (1, 2, 3, 5)::

    >>> q = 2  # (5 + 3) // 4 pixels of channels
    >>> lay = Layout("IN_OUT_CHANNEL", ("n", "h", "w", "c"), (1, 2, 3, 5),
    ...              physical_shape=(2, q * 3, 4),
    ...              digits={"n": 2 * q * 3 * 4, "h": q * 3 * 4, "w": 4,
    ...                      "c": [(4, 1), (None, 3 * 4)]})
    >>> lay.locate((0, 1, 2, 4))     # element c=4 lives in pixel x=3+2, y=1, lane 0
    (1, 5, 0)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import _copy
from .errors import (
    DTypeError,
    FootprintError,
    IndexOutOfRange,
    LayoutError,
    RankError,
    ShapeError,
    check_shape,
    short,
)

__all__ = ["Digit", "Layout"]


@dataclass(frozen=True)
class Digit:
    """One part of a split dimension: ``((d + offset) // div) % radix``, placed at ``stride``."""

    dim: int
    div: int
    radix: int | None
    stride: int
    extent: int  # how many values this digit takes over the padded grid


@dataclass(frozen=True, eq=False)
class Layout:
    """A logical shape, its digits and strides into a physical space (see module docstring).

    ``digits`` maps each dimension name to a stride (no split) or to a list of
    ``(radix, stride)`` pairs from the innermost digit outwards, the last radix
    being ``None``.  ``offsets`` shifts a dimension before splitting.
    ``owned_padding`` names the dimensions whose padding slots belong to the
    tensor (zero-filled by pack); by default all of them do.
    """

    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    physical_shape: tuple[int, ...]
    digits: Mapping[str, object]
    offsets: Mapping[str, int] = field(default_factory=dict)
    base: int = 0
    owned_padding: Sequence[str] | None = None
    physical_axes: tuple[str, ...] | None = None

    # ---------------------------------------------------------------- set-up
    def __post_init__(self):
        shape = check_shape(f"{self.name} shape", self.shape, rank=len(self.dims))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "physical_shape", tuple(int(s) for s in self.physical_shape))
        unknown = set(self.digits) - set(self.dims) | set(self.offsets) - set(self.dims)
        if unknown:
            raise LayoutError(f"{self.name}: digits or offsets name unknown dimensions {sorted(unknown)}")
        owned = set(self.dims if self.owned_padding is None else self.owned_padding)
        object.__setattr__(self, "_owned", tuple(d in owned for d in self.dims))
        per_dim: list[tuple[Digit, ...]] = []
        for i, name in enumerate(self.dims):
            spec = self.digits.get(name)
            if spec is None:
                raise LayoutError(f"{self.name}: dimension {name!r} has no stride")
            pairs = [(None, spec)] if isinstance(spec, (int, np.integer)) else list(spec)
            off = int(self.offsets.get(name, 0))
            if off < 0:
                raise LayoutError(f"{self.name}: offset of {name!r} = {off} must be >= 0")
            span = off + shape[i]
            digs, div = [], 1
            for k, (radix, stride) in enumerate(pairs):
                last = k == len(pairs) - 1
                if (radix is None) != last:
                    raise LayoutError(f"{self.name}: only the outermost digit of {name!r} has no radix")
                if int(stride) < 0:
                    raise LayoutError(f"{self.name}: stride of {name!r} = {stride} must be >= 0")
                ext = -(-span // div)
                if radix is not None and not self._owned[i]:
                    # Foreign padding: the grid stops where the tensor does.  Owned padding
                    # (lanes past C = 3, a 4N word's dummies when N < 4) spans the whole
                    # radix, so pack writes it as zero even into an existing array.
                    ext = min(int(radix), ext)
                elif radix is not None:
                    ext = int(radix)
                digs.append(Digit(i, div, None if radix is None else int(radix), int(stride), ext))
                if radix is not None:
                    div *= int(radix)
            per_dim.append(tuple(digs))
        object.__setattr__(self, "_per_dim", tuple(per_dim))
        # Grid axes: dimensions in order, digits outermost first within each.
        grid = tuple(d for digs in per_dim for d in reversed(digs))
        object.__setattr__(self, "_grid", grid)
        reach = self.base + sum((d.extent - 1) * d.stride for d in grid)
        if self.base < 0 or reach >= self.physical_size:
            raise FootprintError(
                f"{self.name}: the layout reaches location {reach} (base {self.base}), "
                f"past the physical size {self.physical_size} of {self.physical_shape}"
            )
        object.__setattr__(self, "_nested", self._check_nested())
        object.__setattr__(self, "_dense_inverse", None)

    def _check_nested(self) -> bool:
        """True when the digits' strides nest, so a location decodes greedily."""
        live = sorted((d for d in self._grid if d.extent > 1), key=lambda d: -d.stride)
        for k, dig in enumerate(live):
            below = sum((d.extent - 1) * d.stride for d in live[k + 1:])
            if dig.stride <= below:
                return False
        return True

    # ------------------------------------------------------------ properties
    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def physical_size(self) -> int:
        """Number of physical slots (elements of an image or buffer, bytes of NPU memory)."""
        return math.prod(self.physical_shape)

    @property
    def count(self) -> int:
        """Number of logical elements."""
        return math.prod(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(d.extent for d in self._grid)

    @property
    def footprint(self) -> int:
        """Slots covered by the padded digit grid (elements plus padding slots)."""
        return math.prod(self.grid_shape)

    @property
    def padding_waste(self) -> float:
        """Fraction of the physical space that holds no element."""
        return 1.0 - self.count / self.physical_size

    def digits_of(self, dim: str) -> tuple[Digit, ...]:
        """The digits of one dimension, innermost first."""
        return self._per_dim[self.dims.index(dim)]

    def __repr__(self) -> str:
        shape = ", ".join(f"{n}={s}" for n, s in zip(self.dims, self.shape))
        return f"Layout({self.name}: {shape} -> physical {self.physical_shape})"

    # ------------------------------------------------------------ index maps
    def _indices(self, index) -> tuple[np.ndarray, ...]:
        """Normalise ``index`` (a tuple of ints/arrays, or an array whose last axis is ndim)."""
        if isinstance(index, np.ndarray) and index.ndim >= 1 and not isinstance(index, tuple):
            if index.shape[-1] != self.ndim:
                raise RankError(
                    f"index has last axis {index.shape[-1]}: {self.name} has {self.ndim} dimensions {self.dims}"
                )
            parts = tuple(index[..., i] for i in range(self.ndim))
        else:
            if isinstance(index, (str, bytes)) or not hasattr(index, "__iter__"):
                raise RankError(
                    f"index = {index!r} is not allowed: it must be a sequence of {self.ndim} "
                    f"integers (or arrays) for the dimensions {self.dims}"
                )
            parts = tuple(index)
            if len(parts) != self.ndim:
                raise RankError(
                    f"index = {tuple(index)!r} has {len(parts)} components: {self.name} has "
                    f"{self.ndim} dimensions {self.dims}"
                )
        out = []
        for name, extent, p in zip(self.dims, self.shape, parts):
            try:
                a = np.asarray(p)
            except (ValueError, TypeError, OverflowError):
                a = np.asarray(None)
            if a.dtype.kind == "O" and a.size and all(
                    isinstance(v, int) and not isinstance(v, bool) for v in a.flat):
                v = max(a.flat, key=abs)           # an integer too large for int64
                raise IndexOutOfRange(f"index {name} = {short(v)} is out of range: it must be in [0, {extent})")
            if a.dtype.kind not in "iu":
                if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(np.mod(a, 1) == 0):
                    if np.any(np.abs(a) >= 2.0 ** 62):
                        v = a[np.abs(a) >= 2.0 ** 62].flat[0]
                        raise IndexOutOfRange(f"index {name} = {float(v):g} is out of range: it must be in [0, {extent})")
                    a = a.astype(np.int64)
                else:
                    raise ShapeError(f"index {name} = {short(p)!r} is not allowed: indices must be integers")
            if a.dtype == np.uint64 and a.size and a.max() >= 2 ** 63:
                raise IndexOutOfRange(f"index {name} = {a.max()} is out of range: it must be in [0, {extent})")
            a = a.astype(np.int64, copy=False)
            bad = (a < 0) | (a >= extent)
            if np.any(bad):
                v = a[bad].flat[0]
                raise IndexOutOfRange(f"index {name} = {v} is out of range: it must be in [0, {extent})")
            out.append(a)
        return tuple(out)

    def locate_flat(self, index) -> np.ndarray | int:
        """Element index -> flat physical location (vectorised over arrays)."""
        idx = self._indices(index)
        loc = np.int64(self.base)
        for digs, d in zip(self._per_dim, idx):
            j = d + int(self.offsets.get(self.dims[digs[0].dim], 0)) if digs else d
            for dig in digs:
                v = j // dig.div
                if dig.radix is not None:
                    v = v % dig.radix
                loc = loc + v * dig.stride
        if np.ndim(loc) == 0:
            return int(loc)
        return loc

    def locate(self, index):
        """Element index -> physical coordinates (a tuple, one entry per physical axis)."""
        flat = self.locate_flat(index)
        coords = np.unravel_index(flat, self.physical_shape)
        if np.ndim(flat) == 0:
            return tuple(int(c) for c in coords)
        return coords

    def element_at_flat(self, flat):
        """Flat physical location -> (index tuple, valid mask); invalid entries are padding."""
        flat = _location_array("location", flat)
        if np.any((flat < 0) | (flat >= self.physical_size)):
            v = flat[(flat < 0) | (flat >= self.physical_size)].flat[0]
            raise IndexOutOfRange(
                f"location {v} is outside the physical space of {self.physical_size} slots {self.physical_shape}"
            )
        if not self._nested:
            return self._dense_lookup(flat)
        rem = flat - self.base
        valid = rem >= 0
        values = {}
        for dig in sorted(self._grid, key=lambda d: -d.stride):
            if dig.extent == 1 or dig.stride == 0:
                v = np.zeros_like(rem)
            else:
                v = np.floor_divide(rem, dig.stride)
                valid &= (v >= 0) & (v < dig.extent)
                v = np.clip(v, 0, dig.extent - 1)
                rem = rem - v * dig.stride
            values[id(dig)] = v
        valid &= rem == 0
        index = []
        for i, digs in enumerate(self._per_dim):
            j = sum(values[id(dig)] * dig.div for dig in digs)
            d = j - int(self.offsets.get(self.dims[i], 0))
            valid &= (d >= 0) & (d < self.shape[i])
            index.append(np.where(valid, d, 0))
        return tuple(index), valid

    def _dense_lookup(self, flat):
        inv = self._dense_inverse
        if inv is None:
            inv = np.full(self.physical_size, -1, dtype=np.int64)
            grids = np.indices(self.shape).reshape(self.ndim, -1)
            inv[self.locate_flat(tuple(grids))] = np.arange(self.count)
            object.__setattr__(self, "_dense_inverse", inv)
        e = inv[flat]
        valid = e >= 0
        index = np.unravel_index(np.where(valid, e, 0), self.shape)
        return tuple(np.asarray(i) for i in index), valid

    def element_at(self, coords):
        """Physical coordinates -> element index tuple, or ``None`` where the slot is padding.

        With scalar coordinates this returns a tuple of ints or None; with arrays it returns
        ``(index_tuple, valid_mask)``.
        """
        coords = tuple(coords)
        if len(coords) != len(self.physical_shape):
            raise RankError(
                f"location = {coords!r} has {len(coords)} components: the physical space "
                f"{self.physical_shape} has {len(self.physical_shape)}"
            )
        names = [self.physical_axes[k] if self.physical_axes else f"axis {k}" for k in range(len(coords))]
        arrs = [_location_array(f"location {n}", c) for n, c in zip(names, coords)]
        for k, (a, ext) in enumerate(zip(arrs, self.physical_shape)):
            if np.any((a < 0) | (a >= ext)):
                v = a[(a < 0) | (a >= ext)].flat[0]
                axis = self.physical_axes[k] if self.physical_axes else f"axis {k}"
                raise IndexOutOfRange(f"location {axis} = {v} is out of range: it must be in [0, {ext})")
        flat = np.ravel_multi_index(tuple(arrs), self.physical_shape)
        index, valid = self.element_at_flat(flat)
        if all(np.ndim(c) == 0 for c in coords):
            return tuple(int(i) for i in index) if bool(valid) else None
        return index, valid

    # ---------------------------------------------------------- pack/unpack
    def _boxes(self, with_padding: bool):
        """Per dimension: list of (d_start, digit_ranges outer->inner, is_padding)."""
        result = []
        for i, digs in enumerate(self._per_dim):
            off = int(self.offsets.get(self.dims[i], 0))
            radices = [d.radix for d in digs]  # inner -> outer
            grid_span = math.prod(d.extent for d in digs)
            spans = [(off, off + self.shape[i], False)]
            if with_padding and self._owned[i]:
                spans = [(0, off, True)] + spans + [(off + self.shape[i], grid_span, True)]
            boxes = []
            for a, b, pad in spans:
                if a >= b:
                    continue
                for ranges, start in _interval_boxes(a, b, radices):
                    boxes.append((start - off, tuple(reversed(ranges)), pad))
            result.append((digs, boxes))
        return result

    def _physical_view(self, flat: np.ndarray, ranges_per_dim) -> np.ndarray:
        shape, strides, offset = [], [], self.base
        for digs, ranges in ranges_per_dim:
            for dig, (lo, hi) in zip(reversed(digs), ranges):
                shape.append(hi - lo)
                strides.append(dig.stride * flat.itemsize)
                offset += lo * dig.stride
        return as_strided(flat[offset:], shape=shape, strides=strides, writeable=flat.flags.writeable)

    @staticmethod
    def _logical_view(arr: np.ndarray, starts, ranges_per_dim) -> np.ndarray:
        shape, strides = [], []
        for axis, (digs, ranges) in enumerate(ranges_per_dim):
            for dig, (lo, hi) in zip(reversed(digs), ranges):
                shape.append(hi - lo)
                strides.append(dig.div * arr.strides[axis])
        # Slicing moves the data pointer to the box's first element; the digits then
        # walk the dimension with stride div * (the axis stride).
        corner = arr[tuple(slice(s, None) for s in starts)]
        return as_strided(corner, shape=shape, strides=strides, writeable=arr.flags.writeable)

    def _copy_boxes(self, physical: np.ndarray, logical: np.ndarray, to_physical: bool,
                    fill_padding: bool) -> None:
        flat = physical.reshape(-1)
        per_dim = self._boxes(with_padding=to_physical and fill_padding)
        for combo in itertools.product(*(boxes for _, boxes in per_dim)):
            ranges = [(digs, box[1]) for (digs, _), box in zip(per_dim, combo)]
            dst = self._physical_view(flat, ranges)
            if any(box[2] for box in combo):
                dst[...] = 0
                continue
            src = self._logical_view(logical, [box[0] for box in combo], ranges)
            if to_physical:
                _copy.strided_copy(dst, src)
            else:
                _copy.strided_copy(src, dst)

    def pack(self, array, out: np.ndarray | None = None, *, fill_padding: bool = True,
             dtype=None) -> np.ndarray:
        """Write a dense logical array into physical storage.

        With ``out=None`` a new physical array of ``physical_shape`` is made, every slot
        that holds no element being 0.  With
        ``out`` given, only the tensor's element slots (and, if ``fill_padding``, its owned
        padding slots, written as 0) change; foreign slots are left alone.
        """
        array = np.asarray(array)
        if array.shape != self.shape:
            raise ShapeError(f"array has shape {array.shape}: the {self.name} layout expects {self.shape}")
        if out is None:
            if self.footprint == self.physical_size and all(self._owned) and self._nested:
                # The padded grid covers every slot: each byte is written once, the padding
                # boxes with zeros and the element boxes by the copy.
                out = np.empty(self.physical_shape, dtype=dtype or array.dtype)
                fill_padding = True
            else:
                out = np.zeros(self.physical_shape, dtype=dtype or array.dtype)
                fill_padding = False
        elif not isinstance(out, np.ndarray) or not out.flags.writeable:
            raise ShapeError(
                f"out = {type(out).__name__} is not allowed: the {self.name} layout needs a writeable "
                f"C-contiguous numpy array of {self.physical_size} slots {self.physical_shape}"
            )
        elif out.size != self.physical_size or not out.flags.c_contiguous:
            raise ShapeError(
                f"out has shape {out.shape}: the {self.name} layout needs a C-contiguous "
                f"array of {self.physical_size} slots {self.physical_shape}"
            )
        self._copy_boxes(out, array, to_physical=True, fill_padding=fill_padding)
        return out

    def unpack(self, physical, out: np.ndarray | None = None) -> np.ndarray:
        """Read the dense logical array back out of physical storage."""
        physical = np.asarray(physical)
        if physical.size != self.physical_size:
            raise ShapeError(
                f"physical array has shape {physical.shape} ({physical.size} slots): the {self.name} "
                f"layout needs {self.physical_size} slots {self.physical_shape}"
            )
        if not physical.flags.c_contiguous:
            physical = np.ascontiguousarray(physical)
        if out is None:
            out = np.empty(self.shape, dtype=physical.dtype)
        elif not isinstance(out, np.ndarray) or not out.flags.writeable:
            raise ShapeError(
                f"out = {type(out).__name__} is not allowed: the {self.name} layout needs a writeable "
                f"numpy array of shape {self.shape}"
            )
        elif out.shape != self.shape:
            raise ShapeError(f"out has shape {out.shape}: the {self.name} layout expects {self.shape}")
        elif not np.can_cast(physical.dtype, out.dtype, casting="safe"):
            raise DTypeError(
                f"out has dtype {out.dtype}: it cannot hold the physical dtype {physical.dtype} "
                "without loss (a safe cast is required)"
            )
        self._copy_boxes(physical, out, to_physical=False, fill_padding=False)
        return out

    def mask(self) -> np.ndarray:
        """Boolean physical array: True where a slot holds an element of the tensor."""
        m = np.zeros(self.physical_size, dtype=bool)
        self.pack(np.ones(self.shape, dtype=bool), out=m, fill_padding=False)
        return m.reshape(self.physical_shape)


def _location_array(name: str, value) -> np.ndarray:
    """A location (int or integer array) as int64; non-integers raise IndexOutOfRange."""
    if isinstance(value, (bool, np.bool_)):
        raise IndexOutOfRange(f"{name} = {short(value)!r} is not allowed: locations must be integers")
    try:
        a = np.asarray(value)
    except Exception:  # noqa: BLE001 - re-raised as a LayoutError naming the argument
        a = np.asarray(None)
    if a.dtype.kind == "O" and a.size and all(isinstance(v, int) and not isinstance(v, bool) for v in a.flat):
        raise IndexOutOfRange(f"{name} = {short(max(a.flat, key=abs))} is outside the storage: "
                              "it is past any location")
    if a.dtype.kind == "f" and a.size and not np.all(np.abs(a) < 2.0 ** 62):
        raise IndexOutOfRange(f"{name} = {short(value)!r} is outside the storage: it is past any location")
    if a.dtype == np.uint64 and a.size and a.max() >= 2 ** 63:
        raise IndexOutOfRange(f"{name} = {a.max()} is outside the storage: it is past any location")
    if a.dtype.kind not in "iu":
        if a.dtype.kind == "f" and a.size and np.all(np.mod(a, 1) == 0):
            return a.astype(np.int64)
        if a.dtype.kind == "f" and a.ndim:
            value = a[np.mod(a, 1) != 0].flat[0]
        elif a.dtype.kind in "bO" and a.ndim:
            value = a.flat[0]
        raise IndexOutOfRange(f"{name} = {short(value)!r} is not allowed: locations must be integers")
    return a.astype(np.int64, copy=False)


def _interval_boxes(a: int, b: int, radices):
    """Cut ``[a, b)`` into boxes of mixed-radix digits (innermost radix first).

    Yields ``(ranges, start)``: ``ranges`` holds a half-open range per digit, innermost
    first, and ``start`` is the first value of the box.  Every box is a contiguous run of
    values, so the matching slice of the dense array is contiguous along the dimension.
    """
    r = radices[0]
    if r is None:
        yield [(a, b)], a
        return
    A = -(-a // r) * r
    B = (b // r) * r
    if A > B:  # a and b share the same outer value
        for outer, start in _interval_boxes(a // r, a // r + 1, radices[1:]):
            yield [(a % r, (b - 1) % r + 1)] + outer, a
        return
    if a < A:
        for outer, _ in _interval_boxes(a // r, a // r + 1, radices[1:]):
            yield [(a % r, r)] + outer, a
    if A < B:
        for outer, start in _interval_boxes(A // r, B // r, radices[1:]):
            yield [(0, r)] + outer, start * r
    if B < b:
        for outer, _ in _interval_boxes(B // r, B // r + 1, radices[1:]):
            yield [(0, b - B)] + outer, B
