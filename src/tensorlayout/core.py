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
dimension of the coalesced layout into a few rectangular boxes in digit space
and run one strided copy per box: the boxes, their merged axes and the copy
engine's plans are made once per layout value (a copy program), and a call
only runs them (:mod:`tensorlayout._copy`).

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

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Mapping

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

__all__ = ["Digit", "Layout", "convert"]


@dataclass(frozen=True)
class Digit:
    """One part of a split dimension: ``((d + offset) // div) % radix``, placed at ``stride``."""

    dim: int
    div: int
    radix: int | None
    stride: int
    extent: int  # how many values this digit takes over the padded grid


def _canonical_digits(name, dims, digits) -> tuple[tuple[tuple[int | None, int], ...], ...]:
    """``{dim: stride or [(radix, stride), ...]}`` (or the tuple form) -> one tuple per dimension."""
    if not isinstance(digits, Mapping):
        digits = dict(zip(dims, digits))
    unknown = set(digits) - set(dims)
    if unknown:
        raise LayoutError(f"{name}: digits or offsets name unknown dimensions {sorted(unknown)}")
    out = []
    for d in dims:
        spec = digits.get(d)
        if spec is None:
            raise LayoutError(f"{name}: dimension {d!r} has no stride")
        pairs = [(None, spec)] if isinstance(spec, (int, np.integer)) else list(spec)
        canon = []
        for k, (radix, stride) in enumerate(pairs):
            if (radix is None) != (k == len(pairs) - 1):
                raise LayoutError(f"{name}: only the outermost digit of {d!r} has no radix")
            if int(stride) < 0:
                raise LayoutError(f"{name}: stride of {d!r} = {stride} must be >= 0")
            canon.append((None if radix is None else int(radix), int(stride)))
        out.append(tuple(canon))
    return tuple(out)


@dataclass(frozen=True)
class Layout:
    """A logical shape, its digits and strides into a physical space (see module docstring).

    ``digits`` maps each dimension name to a stride (no split) or to a list of
    ``(radix, stride)`` pairs from the innermost digit outwards, the last radix
    being ``None``.  ``offsets`` shifts a dimension before splitting.
    ``owned_padding`` names the dimensions whose padding slots belong to the
    tensor (zero-filled by pack); by default all of them do.

    A layout is a value: its fields are fixed in canonical form at construction
    (``digits`` one tuple of ``(radix, stride)`` pairs per dimension, ``offsets``
    one int per dimension, ``owned`` one flag per dimension), and two layouts
    are equal, and hash alike, when they are the same map: same logical shape,
    physical space, digits, offsets, base and owned padding.  The names
    (``name``, ``dims``, ``physical_axes``) are labels and do not count.

    >>> a = Layout("a", ("h", "w"), (2, 3), (6,), {"h": 3, "w": 1})
    >>> b = Layout("b", ("y", "x"), [2, 3], (6,), (((None, 3),), [(None, 1)]))
    >>> a == b, hash(a) == hash(b), a.digits
    (True, True, (((None, 3),), ((None, 1),)))
    """

    name: str = field(compare=False)
    dims: tuple[str, ...] = field(compare=False)
    shape: tuple[int, ...]
    physical_shape: tuple[int, ...]
    digits: tuple[tuple[tuple[int | None, int], ...], ...]
    offsets: tuple[int, ...] = ()
    base: int = 0
    owned_padding: tuple[str, ...] | None = field(default=None, compare=False)
    physical_axes: tuple[str, ...] | None = field(default=None, compare=False)
    owned: tuple[bool, ...] = field(init=False)

    # ---------------------------------------------------------------- set-up
    def __post_init__(self):
        dims = tuple(self.dims)
        offsets = self.offsets
        if isinstance(offsets, Mapping):
            unknown = set(offsets) - set(dims)
            if unknown:
                raise LayoutError(f"{self.name}: digits or offsets name unknown dimensions {sorted(unknown)}")
            offsets = tuple(int(offsets.get(d, 0)) for d in dims)
        offsets = tuple(int(o) for o in offsets) or (0,) * len(dims)
        owned_names = dims if self.owned_padding is None else tuple(
            d for d in dims if d in set(self.owned_padding))
        canonical = dict(
            dims=dims,
            shape=check_shape(f"{self.name} shape", self.shape, rank=len(dims)),
            physical_shape=tuple(int(s) for s in self.physical_shape),
            digits=_canonical_digits(self.name, dims, self.digits),
            offsets=offsets, base=int(self.base), owned_padding=owned_names,
            owned=tuple(d in owned_names for d in dims),
            physical_axes=None if self.physical_axes is None else tuple(self.physical_axes))
        for key, value in canonical.items():   # a frozen value: its canonical form, set once
            object.__setattr__(self, key, value)
        for name, off in zip(dims, offsets):
            if off < 0:
                raise LayoutError(f"{self.name}: offset of {name!r} = {off} must be >= 0")
        reach = self.reach() - 1
        if self.base < 0 or reach >= self.physical_size:
            raise FootprintError(
                f"{self.name}: the layout reaches location {reach} (base {self.base}), "
                f"past the physical size {self.physical_size} of {self.physical_shape}"
            )

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        """The hash of the map (its compared fields), computed once: layouts key the plan caches."""
        return hash((self.shape, self.physical_shape, self.digits, self.offsets, self.base, self.owned))

    @functools.cached_property
    def _per_dim(self) -> tuple[tuple[Digit, ...], ...]:
        """The digits of every dimension, innermost first, with their divisors and grid extents."""
        per_dim = []
        for i, pairs in enumerate(self.digits):
            span = self.offsets[i] + self.shape[i]
            digs, div = [], 1
            for radix, stride in pairs:
                ext = -(-span // div)
                if radix is not None:
                    # Owned padding (lanes past C = 3, a 4N word's dummies when N < 4) spans the
                    # whole radix, so pack writes it as zero; foreign padding stops where the
                    # tensor does.
                    ext = radix if self.owned[i] else min(radix, ext)
                digs.append(Digit(i, div, radix, stride, ext))
                if radix is not None:
                    div *= radix
            per_dim.append(tuple(digs))
        return tuple(per_dim)

    @functools.cached_property
    def _grid(self) -> tuple[Digit, ...]:
        """Grid axes: dimensions in order, digits outermost first within each."""
        return tuple(d for digs in self._per_dim for d in reversed(digs))

    @functools.cached_property
    def nested(self) -> bool:
        """True when the digits' strides nest (each larger than all below it can reach), so a
        location decodes digit by digit, largest stride first."""
        live = sorted((d for d in self._grid if d.extent > 1), key=lambda d: -d.stride)
        for k, dig in enumerate(live):
            below = sum((d.extent - 1) * d.stride for d in live[k + 1:])
            if dig.stride <= below:
                return False
        return True

    @functools.cached_property
    def injective(self) -> bool:
        """True when no two elements share a location.

        Nested strides decide it at once; other strides are checked element by element,
        up to 2**22 elements (a larger tensor with such strides counts as not injective).

        >>> Layout("skew", ("a", "b"), (2, 4), (14,), {"a": 4, "b": 3}).injective
        True
        >>> Layout("overlap", ("a", "b"), (2, 4), (14,), {"a": 2, "b": 1}).injective
        False
        """
        if self.nested:
            return True
        if self.count > 1 << 22:
            return False
        locs = self.locate_flat(tuple(np.indices(self.shape).reshape(self.ndim, -1)))
        return bool(np.unique(locs).size == locs.size)

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

    def reach(self, row: int | None = None) -> int:
        """One past the last location the padded grid touches.

        With ``row``, the physical space is read as rows of ``row`` slots (an NPU's S
        bytes): a split digit whose stride is a whole number of rows picks the row (the
        NPU digit of the channels) and does not count, and the answer is the offset inside
        a row one past the last slot the grid touches.
        The seed's aligned fp32 tensor (2, 3, 4, 5) from NPU 2 ends at byte 464:

        >>> lay = Layout("npu", ("n", "c", "h", "w", "b"), (2, 3, 4, 5, 4), (4, 1024),
        ...              {"n": 256, "c": [(4, 1024), (None, 128)], "h": 20, "w": 4, "b": 1},
        ...              offsets={"c": 2}, owned_padding=("n", "h", "w", "b"))
        >>> lay.reach(1024), lay.extent
        (464, 3536)
        """
        if row is None:
            return self.base + sum((d.extent - 1) * d.stride for d in self._grid) + 1
        return self.base % row + sum((d.extent - 1) * d.stride for d in self._grid
                                     if not self._row_axis(d, row)) + 1

    @property
    def extent(self) -> int:
        """Slots from the first location (``base``) to one past the last the grid touches."""
        return self.reach() - self.base

    def digits_of(self, dim: str) -> tuple[Digit, ...]:
        """The digits of one dimension, innermost first."""
        return self._per_dim[self.dims.index(dim)]

    def __repr__(self) -> str:
        shape = ", ".join(f"{n}={s}" for n, s in zip(self.dims, self.shape))
        return f"Layout({self.name}: {shape} -> physical {self.physical_shape})"

    # ------------------------------------------------------------ algebra
    def coalesce(self) -> "Layout":
        """The same map with the fewest digits: contiguous digits merged, as CuTe's coalesce.

        Inside a dimension, a digit whose stride continues the one below it merges with
        it (where that keeps the owned padding); next to each other, two dimensions merge
        when the inner one is a plain run without padding that the outer one continues;
        dimensions of size 1 without padding go.  The result maps the row-major flat
        index of the tensor exactly as this layout does, pads the same slots, and is what
        pack and unpack copy with.  A dense NCHW buffer is one run:

        >>> nchw = Layout("NCHW", ("n", "c", "h", "w"), (2, 3, 4, 5), (120,),
        ...               {"n": 60, "c": 20, "h": 5, "w": 1})
        >>> co = nchw.coalesce()
        >>> co.shape, co.digits, co.dims
        ((120,), (((None, 1),),), ('nchw',))
        """
        return _coalesced(self, self.name, self.dims)   # names are part of the answer

    def _coalesce(self) -> "Layout":
        """The coalesced layout, built once per layout value (see :meth:`coalesce`)."""
        dims, shape, offsets, owned = list(self.dims), list(self.shape), list(self.offsets), list(self.owned)
        digits = [_merge_digits(list(d), off + n, own)
                  for d, off, n, own in zip(self.digits, offsets, shape, owned)]
        i = len(dims) - 1
        while i > 0:
            o, n = i - 1, i          # outer and inner neighbours
            inner_plain = len(digits[n]) == 1 and offsets[n] == 0
            outer_plain = len(digits[o]) == 1 and offsets[o] == 0
            if inner_plain and shape[n] == 1 or outer_plain and shape[o] == 1:
                keep = o if inner_plain and shape[n] == 1 else n
                drop = n if keep == o else o
                for lst in (dims, shape, offsets, owned, digits):
                    del lst[drop]
                i = min(i, len(dims) - 1)
                continue
            s_in = digits[n][0][1]
            if inner_plain and digits[o][0][1] == shape[n] * s_in:   # outer continues the inner run
                span = (offsets[o] * shape[n], shape[o] * shape[n])
                merged = _merge_digits([(shape[n], s_in)] + list(digits[o]), span[0] + span[1], owned[o])
                dims[o:n + 1] = [dims[o] + dims[n]]
                shape[o:n + 1] = [span[1]]
                offsets[o:n + 1] = [span[0]]
                owned[o:n + 1] = [owned[o]]
                digits[o:n + 1] = [merged]
            i -= 1
        if not dims:
            dims, shape, offsets, owned, digits = ["_"], [1], [0], [True], [((None, 0),)]
        return Layout(self.name, tuple(dims), tuple(shape), self.physical_shape, tuple(digits),
                      offsets=tuple(offsets), base=self.base,
                      owned_padding=tuple(d for d, own in zip(dims, owned) if own),
                      physical_axes=self.physical_axes)

    def transpose(self, *dims: str) -> "Layout":
        """The same placement with its logical dimensions in the order ``dims``.

        Two layouts of one tensor in different index orders (an NHWC image and an NCHW
        NPU tensor) become comparable, and :func:`convert` moves data between them:

        >>> img = Layout("rows", ("h", "w", "c"), (2, 3, 4), (24,), {"h": 12, "w": 4, "c": 1})
        >>> chw = img.transpose("c", "h", "w")
        >>> chw.shape, chw.locate_flat((3, 1, 2)) == img.locate_flat((1, 2, 3))
        ((4, 2, 3), True)
        """
        if sorted(dims) != sorted(self.dims):
            raise RankError(f"dims = {dims!r} is not allowed: it must order {self.dims}")
        order = [self.dims.index(d) for d in dims]
        return Layout(self.name, tuple(dims), tuple(self.shape[i] for i in order), self.physical_shape,
                      tuple(self.digits[i] for i in order), offsets=tuple(self.offsets[i] for i in order),
                      base=self.base, owned_padding=self.owned_padding, physical_axes=self.physical_axes)

    def recast(self, old_bytes: int, new_bytes: int, dim: str = "b") -> "Layout":
        """The same placement counted in units of ``new_bytes`` instead of ``old_bytes``.

        To a smaller unit, every location and stride scales up and each old unit gets an
        innermost dimension ``dim`` (its bytes, say).  To a larger unit, the digits with
        strides below the new unit must tile it exactly (an element's bytes, or a 4N
        word's four int8 values: n's inner digit); they fold into the unit and leave the
        layout, a dimension split there keeping only its outer digits.  The physical
        space's last axis is counted in the new unit.  Bytes of a (2, 3) float32 buffer
        in elements, and int8 values in 4N words:

        >>> b = Layout("bytes", ("h", "w", "b"), (2, 3, 4), (24,), {"h": 12, "w": 4, "b": 1})
        >>> e = b.recast(1, 4)
        >>> e.dims, e.shape, e.digits, e.recast(4, 1) == b
        (('h', 'w'), (2, 3), (((None, 3),), ((None, 1),)), True)
        >>> n4 = Layout("4N", ("n", "c", "b"), (6, 2, 1), (16,), {"n": [(4, 1), (None, 8)], "c": 4, "b": 1})
        >>> w = n4.recast(1, 4)
        >>> w.dims, w.shape, w.physical_shape, w.locate((1, 1))
        (('n', 'c'), (2, 2), (4,), (3,))
        """
        for name, v in (("old_bytes", old_bytes), ("new_bytes", new_bytes)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise LayoutError(f"{name} = {v!r} is not allowed: it must be a positive integer")
        if new_bytes == old_bytes:
            return self
        if old_bytes % new_bytes == 0:
            f = old_bytes // new_bytes
            name = dim if dim not in self.dims else dim + "_"
            return Layout(self.name, self.dims + (name,), self.shape + (f,),
                          self.physical_shape[:-1] + (self.physical_shape[-1] * f,),
                          tuple(tuple((r, st * f) for r, st in d) for d in self.digits) + (((None, 1),),),
                          offsets=self.offsets + (0,), base=self.base * f,
                          owned_padding=self.owned_padding + (name,), physical_axes=self.physical_axes)
        if new_bytes % old_bytes:
            raise LayoutError(f"new_bytes = {new_bytes} is not allowed with old_bytes = {old_bytes}: "
                              "one unit must be a whole number of the other")
        return self._fold(new_bytes // old_bytes)

    def _fold(self, f: int) -> "Layout":
        """Fold the digits below stride ``f`` into one unit of ``f`` slots (see :meth:`recast`)."""
        def refuse(why):
            raise LayoutError(f"{self.name}: cannot count in units of {f} slots: {why}")

        if self.base % f or self.physical_shape[-1] % f:
            refuse(f"base {self.base} and the last physical axis {self.physical_shape[-1]} must be multiples")
        live = sorted((d for d in self._grid if d.stride < f and d.extent > 1), key=lambda d: d.stride)
        acc = 1
        for dig in live:
            size = dig.radix if dig.radix is not None else dig.extent
            if dig.stride != acc:
                refuse(f"the digits below it do not tile it (a stride {dig.stride} where {acc} is next)")
            acc *= size
        if acc != f:
            refuse(f"the digits below it cover {acc} slots")
        dims, shape, digits, offsets, owned = [], [], [], [], []
        for i, digs in enumerate(self._per_dim):
            k = 0
            while k < len(digs) and digs[k].stride < f:
                k += 1
            rest = [(d.radix, d.stride // f) for d in digs[k:]]
            bad = [d.stride for d in digs[k:] if d.stride % f and d.extent > 1]
            if bad:
                refuse(f"the stride {bad[0]} of {self.dims[i]!r} is not a multiple")
            span = self.offsets[i] + self.shape[i]
            div = digs[k].div if rest else math.prod(d.extent for d in digs)
            if not rest:
                if self.offsets[i] or span != div:
                    refuse(f"dimension {self.dims[i]!r} has padding inside a unit")
                continue
            if self.offsets[i] % div:
                refuse(f"the offset of {self.dims[i]!r} does not start a unit")
            dims.append(self.dims[i])
            shape.append(-(-span // div) - self.offsets[i] // div)
            offsets.append(self.offsets[i] // div)
            owned.append(self.owned[i])
            digits.append(tuple(rest))
        return Layout(self.name, tuple(dims), tuple(shape),
                      self.physical_shape[:-1] + (self.physical_shape[-1] // f,), tuple(digits),
                      offsets=tuple(offsets), base=self.base // f,
                      owned_padding=tuple(d for d, own in zip(dims, owned) if own),
                      physical_axes=self.physical_axes)

    def compose(self, inner: "Layout") -> "Layout":
        """``self`` after ``inner``: the layout taking ``inner``'s index to ``self``'s location.

        ``inner``'s physical space is ``self``'s logical tensor, read row-major (so
        ``inner.physical_size == self.count``); ``self`` must be a plain mixed-radix map
        (no offsets, no padding), and every digit of ``inner`` must fall on whole digits
        of it, as in CuTe's composition.  A transpose of a (4, 6) buffer, viewed as
        (2, 2, 6) blocks of rows:

        >>> t = Layout("T", ("r", "c"), (4, 6), (24,), {"r": 1, "c": 4})
        >>> blocks = Layout("B", ("a", "b", "c"), (2, 2, 6), (4, 6), {"a": 12, "b": 6, "c": 1})
        >>> tb = t.compose(blocks)
        >>> tb.locate_flat((1, 0, 5)) == t.locate_flat((2, 5))
        True
        """
        if not isinstance(inner, Layout):
            raise LayoutError(f"inner = {short(inner)!r} is not allowed: it must be a Layout")
        if inner.physical_size != self.count:
            raise ShapeError(f"inner's physical space {inner.physical_shape} has {inner.physical_size} "
                             f"slots: it must be the {self.count} elements of {self.shape}")
        if inner.base:
            raise LayoutError(f"inner has base {inner.base}: composition needs base 0")
        modes = []                                  # (size, stride), innermost first
        for i in reversed(range(self.ndim)):
            for dig in self._per_dim[i]:
                size = dig.radix if dig.radix is not None else dig.extent
                if self.offsets[i] or (dig.radix is None and size * dig.div != self.shape[i]):
                    raise LayoutError(f"{self.name}: dimension {self.dims[i]!r} has an offset or padding; "
                                      "composition needs a plain mixed-radix layout")
                modes.append((size, dig.stride))
        digits = []
        for i, digs in enumerate(inner._per_dim):
            out = []
            for dig in digs:
                size = dig.radix if dig.radix is not None else dig.extent
                parts = _compose_digit(modes, size, dig.stride, last=dig.radix is None, name=self.name)
                out += parts
            digits.append(tuple(out))
        return Layout(f"{self.name}∘{inner.name}", inner.dims, inner.shape, self.physical_shape,
                      tuple(digits), offsets=inner.offsets, base=self.base,
                      owned_padding=inner.owned_padding, physical_axes=self.physical_axes)

    def _row_axis(self, dig: Digit, row: int) -> bool:
        """A split digit whose stride is whole rows picks the row (an NPU): it does not reach along one."""
        return dig.radix is not None and dig.stride > 0 and dig.stride % row == 0

    def _rows(self, row: int, with_padding: bool):
        """Per row of ``row`` slots: [lo, hi, slots] over the boxes of elements (and owned padding)."""
        out: list = [None] * (self.physical_size // row)
        for combo in itertools.product(*(boxes for _, boxes in self._boxes(with_padding))):
            rows, hi, slots = [self.base], 0, 1
            for digs, box in zip(self._per_dim, combo):
                for dig, (lo_v, hi_v) in zip(reversed(digs), box[1]):
                    if self._row_axis(dig, row):
                        rows = [r + v * dig.stride for r in rows for v in range(lo_v, hi_v)]
                    else:
                        rows = [r + lo_v * dig.stride for r in rows]
                        hi += (hi_v - lo_v - 1) * dig.stride
                        slots *= hi_v - lo_v
            for loc in rows:
                r, a = divmod(loc, row)
                cur = out[r]
                out[r] = [a, a + hi + 1, slots] if cur is None else \
                    [min(cur[0], a), max(cur[1], a + hi + 1), cur[2] + slots]
        return out

    def row_ranges(self, row: int, padding: bool = True) -> list[tuple[int, int] | None]:
        """Per row of ``row`` slots (an NPU's bytes), ``[lo, hi)`` from the first to one past
        the last slot the tensor holds there (its elements and, with ``padding``, its owned
        padding: a 4N word's dummies), or None.

        >>> lay = Layout("npu", ("c", "w"), (6, 2), (4, 16), {"c": [(4, 16), (None, 2)], "w": 1},
        ...              offsets={"c": 1}, owned_padding=("w",))
        >>> lay.row_ranges(16)
        [(2, 4), (0, 4), (0, 4), (0, 2)]
        """
        return [None if r is None else (r[0], r[1]) for r in self._rows(row, padding)]

    def row_slots(self, row: int, padding: bool = True) -> list[int]:
        """Per row of ``row`` slots, how many hold an element (and, with ``padding``, owned padding).

        >>> Layout("lanes", ("c",), (6,), (2, 8), {"c": [(4, 1), (None, 8)]}).row_slots(8)
        [4, 4]
        """
        return [0 if r is None else r[2] for r in self._rows(row, padding)]

    # ------------------------------------------------------------ index maps
    def _indices(self, index, integers: bool = False) -> tuple[np.ndarray, ...]:
        """Normalise ``index`` (a tuple of ints/arrays, or an array whose last axis is ndim).

        With ``integers``, whole floats and booleans are refused too (IndexOutOfRange)."""
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
            if integers and (isinstance(p, (bool, np.bool_)) or a.dtype.kind not in "iuO"):
                raise IndexOutOfRange(f"index {name} = {short(p)!r} is not allowed: indices must be integers")
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
        for i, d in enumerate(idx):
            loc = loc + self._locate_dim(i, d)
        if np.ndim(loc) == 0:
            return int(loc)
        return loc

    def _locate_dim(self, i: int, d):
        """The location that index ``d`` (an int or an array) of dimension ``i`` adds: the
        digit formula ``sum(((d + offset) // div) % radix * stride)``."""
        j = d + self.offsets[i]
        loc = 0
        for dig in self._per_dim[i]:
            v = j // dig.div
            if dig.radix is not None:
                v = v % dig.radix
            loc = loc + v * dig.stride
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
        if not self.nested:
            return self._dense_lookup(flat)
        index, on_grid, inside = self._decode(flat)
        valid = on_grid & np.logical_and.reduce(inside)
        return tuple(np.where(valid, d, 0) for d in index), valid

    def _decode(self, flat: np.ndarray):
        """Greedy decode of nested digits: (index per dim, slot on the padded grid, per-dim in range)."""
        rem = flat - self.base
        on_grid = rem >= 0
        values = {}
        for dig in sorted(self._grid, key=lambda d: -d.stride):
            if dig.extent == 1 or dig.stride == 0:
                v = np.zeros_like(rem)
            else:
                v = np.floor_divide(rem, dig.stride)
                on_grid &= (v >= 0) & (v < dig.extent)
                v = np.clip(v, 0, dig.extent - 1)
                rem = rem - v * dig.stride
            values[id(dig)] = v
        on_grid &= rem == 0
        index, inside = [], []
        for i, digs in enumerate(self._per_dim):
            d = sum(values[id(dig)] * dig.div for dig in digs) - self.offsets[i]
            index.append(d)
            inside.append((d >= 0) & (d < self.shape[i]))
        return index, on_grid, inside

    def padding_at_flat(self, flat) -> np.ndarray:
        """Flat physical locations -> True where the slot is owned padding of this layout
        (an RGBA lane past C, a 4N dummy): written as 0 by pack, holding no element.

        >>> lay = Layout("lanes", ("c",), (3,), (8,), {"c": [(4, 1), (None, 4)]})
        >>> lay.padding_at_flat(np.arange(8)).tolist()
        [False, False, False, True, False, False, False, False]
        """
        flat = _location_array("location", flat)
        if not self.nested:
            return self.padding_mask().reshape(-1)[flat]
        _, on_grid, inside = self._decode(flat)
        inside = np.array(inside).reshape(self.ndim, -1) if self.ndim else inside
        owned = np.array(self.owned)[:, None]
        # On the grid, outside the tensor only along owned dimensions.
        pad = on_grid.reshape(-1) & np.all(inside | owned, axis=0) & ~np.all(inside, axis=0)
        return pad.reshape(np.shape(flat))

    def padding_mask(self) -> np.ndarray:
        """Boolean physical array: True where a slot is owned padding (see :meth:`padding_at_flat`)."""
        marks = np.ones(self.physical_size, dtype=np.int8)
        self._copy_boxes(marks, None, to_physical=True, fill_padding=True)
        return (marks == 0).reshape(self.physical_shape)

    @functools.cached_property
    def _dense_inverse(self) -> np.ndarray:
        """Location -> flat element number (-1 for none), for strides that do not nest."""
        inv = np.full(self.physical_size, -1, dtype=np.int64)
        grids = np.indices(self.shape).reshape(self.ndim, -1)
        inv[self.locate_flat(tuple(grids))] = np.arange(self.count)
        return inv

    def _dense_lookup(self, flat):
        e = self._dense_inverse[flat]
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
            off = self.offsets[i]
            radices = [d.radix for d in digs]  # inner -> outer
            grid_span = math.prod(d.extent for d in digs)
            spans = [(off, off + self.shape[i], False)]
            if with_padding and self.owned[i]:
                spans = [(0, off, True)] + spans + [(off + self.shape[i], grid_span, True)]
            boxes = []
            for a, b, pad in spans:
                if a >= b:
                    continue
                for ranges, start in _interval_boxes(a, b, radices):
                    boxes.append((start - off, tuple(reversed(ranges)), pad))
            result.append((digs, boxes))
        return result

    def _copy_boxes(self, physical: np.ndarray, logical: np.ndarray | None, to_physical: bool,
                    fill_padding: bool) -> None:
        """The one copy behind pack, unpack and the padding fill: one copy per box.

        The boxes are those of the coalesced layout when ``logical`` can be viewed in its
        shape (a C-ordered array can).  What each box copies, and how (the compiled
        kernel's plan or NumPy), is planned once per layout value and array form
        (:func:`_copy_program`); a call only runs the plan.
        """
        lay = self
        if logical is not None:
            co = self.coalesce()
            if co.shape != self.shape:
                view = _reshaped(logical, co.shape)
                if view is not None:
                    lay, logical = co, view
        flat = physical.reshape(-1)
        if logical is None:
            prog = _copy_program(lay, to_physical and fill_padding, to_physical, flat.itemsize, None, False)
        else:
            prog = _copy_program(lay, to_physical and fill_padding, to_physical, flat.itemsize,
                                 logical.strides, flat.dtype == logical.dtype)
        _run_program(prog, flat, logical, to_physical)

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
            if self.footprint == self.physical_size and all(self.owned) and self.nested:
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


def _merge_digits(pairs, span: int, owned: bool):
    """Merge a dimension's neighbouring digits where the outer one continues the inner one."""
    out, div = [], 1
    for radix, stride in pairs:
        if out and out[-1][0] == 1:                 # a radix-1 digit is always 0: drop it
            out.pop()
        if out:
            r1, s1 = out[-1]
            keeps_padding = radix is not None or not owned or (-(-span // (div // r1))) % r1 == 0
            if stride == r1 * s1 and keeps_padding:
                out[-1] = (None if radix is None else r1 * radix, s1)
                div = div if radix is None else div * radix
                continue
        out.append((radix, stride))
        if radix is not None:
            div *= radix
    return tuple(out)


def _compose_digit(modes, size: int, stride: int, *, last: bool, name: str):
    """The digits of ``modes`` (a plain layout, innermost first) that a digit of ``size``
    values ``stride`` apart walks: CuTe's divide-then-take, as (radix, stride) pairs."""
    if size == 1 or stride == 0:
        return [(None if last else size, 0)]
    rest, kept = stride, []
    for k, (n, d) in enumerate(modes):          # skip ``stride`` positions
        if rest == 1:
            kept.append((n, d))
        elif rest % n == 0 and k < len(modes) - 1:
            rest //= n
        elif n % rest == 0 or k == len(modes) - 1:
            kept.append((-(-n // rest), d * rest))
            rest = 1
        else:
            raise LayoutError(f"{name}: a stride of {stride} does not fall on whole digits of the layout")
    out, want = [], size
    for k, (n, d) in enumerate(kept):            # take ``size`` values
        if want <= n or k == len(kept) - 1:
            if want < n and n % want and not last:
                raise LayoutError(f"{name}: {size} values do not fall on whole digits of the layout")
            out.append((None if last else want, d))
            return out
        if want % n:
            raise LayoutError(f"{name}: {size} values do not fall on whole digits of the layout")
        out.append((n, d))
        want //= n
    raise LayoutError(f"{name}: a stride of {stride} runs past the layout")


@functools.lru_cache(maxsize=512)
def _coalesced(lay: Layout, name, dims) -> Layout:
    return lay._coalesce()


@functools.lru_cache(maxsize=512)
def _plan(lay: Layout, with_padding: bool):
    """The boxes of a copy through ``lay``, planned once per layout value.

    Each box: (shape, physical strides, physical offset, logical starts,
    ((logical axis, div) per box axis), is_padding); strides in slots.
    """
    per_dim = lay._boxes(with_padding)
    plan = []
    for combo in itertools.product(*(boxes for _, boxes in per_dim)):
        shape, pstrides, lstrides, poff = [], [], [], lay.base
        for axis, ((digs, _), box) in enumerate(zip(per_dim, combo)):
            for dig, (lo, hi) in zip(reversed(digs), box[1]):
                shape.append(hi - lo)
                pstrides.append(dig.stride)
                lstrides.append((axis, dig.div))
                poff += lo * dig.stride
        plan.append((tuple(shape), tuple(pstrides), poff, tuple(box[0] for box in combo),
                     tuple(lstrides), any(box[2] for box in combo)))
    return tuple(plan)


def _view(arr: np.ndarray, offset: int, shape, strides, starts=None) -> np.ndarray:
    """A strided view into ``arr`` from byte ``offset``, which is element ``starts`` of a
    non-contiguous ``arr`` (where that is given)."""
    if arr.flags.c_contiguous:      # cheaper than as_strided: no interface dictionary
        return np.ndarray(shape, arr.dtype, buffer=arr, offset=offset, strides=strides)
    corner = arr[tuple(slice(st, None) for st in starts)]   # slicing moves the data pointer
    return as_strided(corner, shape=shape, strides=strides, writeable=arr.flags.writeable)


def _reshaped(arr: np.ndarray, shape) -> np.ndarray | None:
    """``arr`` viewed in ``shape`` without a copy, or None where that needs one."""
    view = arr.view()
    try:
        view.shape = shape
    except AttributeError:
        return None
    return view


def convert(src: Layout, dst: Layout, physical, out: np.ndarray | None = None, *,
            fill_padding: bool = True) -> np.ndarray:
    """Move a tensor from ``src``'s physical storage to ``dst``'s as one planned strided copy.

    ``src`` and ``dst`` are two layouts of the same logical tensor (same shape).  Each
    dimension is cut where either layout carries a digit; between cuts both are linear, so
    equal runs group into one strided axis and every group pair is one copy, with no dense
    tensor in between.  ``out=None`` gives a new array of ``dst.physical_shape`` (0 where
    no element lands); a given ``out`` changes only the element slots and, with
    ``fill_padding``, ``dst``'s owned padding.  A (2, 5) NCHW-like buffer into RGBA lanes:

    >>> rows = Layout("rows", ("h", "c"), (2, 5), (10,), {"h": 5, "c": 1})
    >>> rgba = Layout("rgba", ("h", "c"), (2, 5), (2, 2, 4), {"h": 8, "c": [(4, 1), (None, 4)]})
    >>> convert(rows, rgba, np.arange(10.0))[1].tolist()
    [[5.0, 6.0, 7.0, 8.0], [9.0, 0.0, 0.0, 0.0]]
    """
    if not isinstance(src, Layout) or not isinstance(dst, Layout):
        raise LayoutError("src and dst must both be Layouts")
    if src.shape != dst.shape:
        raise ShapeError(f"dst has shape {dst.shape}: it must hold the same tensor as src {src.shape}")
    physical = np.asarray(physical)
    if physical.size != src.physical_size:
        raise ShapeError(f"physical array has shape {physical.shape} ({physical.size} slots): the "
                         f"{src.name} layout needs {src.physical_size} slots {src.physical_shape}")
    physical = np.ascontiguousarray(physical).reshape(-1)
    if out is None:
        out = np.zeros(dst.physical_shape, dtype=physical.dtype)
    elif not isinstance(out, np.ndarray) or not out.flags.writeable or not out.flags.c_contiguous \
            or out.size != dst.physical_size:
        raise ShapeError(f"out = {short(out)!r} is not allowed: the {dst.name} layout needs a writeable "
                         f"C-contiguous array of {dst.physical_size} slots {dst.physical_shape}")
    elif fill_padding:
        dst._copy_boxes(out, None, to_physical=True, fill_padding=True)
    flat = out.reshape(-1)
    prog = _convert_program(src, dst, physical.itemsize, flat.itemsize, physical.dtype == flat.dtype)
    _run_program(prog, flat, physical, True)
    return out


@functools.lru_cache(maxsize=256)
def _convert_plan(src: Layout, dst: Layout):
    """The strided copies of :func:`convert`, planned once per pair of layouts:
    (shape, source strides, destination strides, source offset, destination offset) in slots."""
    groups = [_run_groups(src, dst, i) for i in range(src.ndim)]
    plan = []
    for combo in itertools.product(*groups):
        shape, sstr, dstr = [], [], []
        soff, doff = src.base, dst.base
        for count, length, s0, d0, sstep, dstep, s1, d1 in combo:
            shape += [count, length]
            sstr += [sstep, s1]
            dstr += [dstep, d1]
            soff += s0
            doff += d0
        plan.append((tuple(shape), tuple(sstr), tuple(dstr), soff, doff))
    return tuple(plan)


# ---------------------------------------------------------------- copy programs
# A copy program is what pack, unpack and convert run: per box, the physical side's byte
# offset, shape and strides, the logical (or source) side's, and the compiled kernel's plan
# for each alignment met so far.  It is built once per layout value (or pair of layouts) and
# array form, from the coalesced layout's digits, so a call neither rebuilds the boxes nor
# asks the engine to find the axes again.

@dataclass(frozen=True)
class _Step:
    """One box of a copy program: offsets and strides in bytes; ``pad``: write zeros."""

    pad: bool
    shape: tuple
    p_off: int              # the physical (destination) side
    p_strides: tuple
    l_off: int = 0          # the logical (or source) side, from its data pointer
    l_strides: tuple = ()
    starts: tuple = ()      # the box's first logical index (to view a non-contiguous array)
    axes: tuple = ()        # (extent, dst stride, src stride), merged: what the kernel copies


class _Program:
    """The steps of one copy, and the compiled kernel's plans of its big steps."""

    def __init__(self, steps, itemsize: int, to_physical: bool):
        self.steps = steps
        self.to_physical = to_physical
        self.itemsize = itemsize      # of both sides where they share a dtype; else 0: NumPy casts
        self.fast = tuple(k for k, st in enumerate(steps)
                          if itemsize and st.axes and math.prod(st.shape) >= _copy.FAST_MIN_ELEMENTS)
        self._plans: dict = {}

    def plans(self, p_mod: int, l_mod: int) -> dict:
        """Step index -> the kernel's plan (or None: NumPy), for sides whose data pointers
        lie at these addresses modulo 8; planned once for each."""
        got = self._plans.get((p_mod, l_mod))
        if got is None:
            got = {}
            for k in self.fast:
                st = self.steps[k]
                pm, lm = (p_mod + st.p_off) % 8, (l_mod + st.l_off) % 8
                got[k] = _copy.plan(st.axes, self.itemsize, *((pm, lm) if self.to_physical else (lm, pm)))
            self._plans[(p_mod, l_mod)] = got
        return got


def _step(shape, p_off, p_strides, l_off, l_strides, starts, to_physical) -> _Step:
    """A copy step; its axes are the box's digits in the layout's order, merged where one
    continues the next in both arrays (the coalesce rule, see :func:`tensorlayout._copy.merge_runs`)."""
    pairs = zip(shape, p_strides, l_strides) if to_physical else zip(shape, l_strides, p_strides)
    return _Step(False, tuple(shape), p_off, tuple(p_strides), l_off, tuple(l_strides), tuple(starts),
                 tuple(_copy.merge_runs(pairs)))


@functools.lru_cache(maxsize=1024)
def _copy_program(lay: Layout, with_padding: bool, to_physical: bool, item: int, l_strides,
                  same_dtype: bool) -> _Program:
    """The copy program of pack (``to_physical``) or unpack through ``lay`` for a physical
    array of ``item`` bytes and a logical array with byte strides ``l_strides`` (None: only the
    padding fill), from the boxes of :func:`_plan`."""
    steps = []
    for shape, pstrides, poff, starts, lstrides, pad in _plan(lay, with_padding):
        p_str = tuple(v * item for v in pstrides)
        if pad:
            steps.append(_Step(True, shape, poff * item, p_str))
        elif l_strides is not None:
            # The box's first element, then the digits walk each dimension with stride
            # div * (the axis stride).
            first = sum(st * step for st, step in zip(starts, l_strides))
            steps.append(_step(shape, poff * item, p_str, first,
                               tuple(d * l_strides[ax] for ax, d in lstrides), starts, to_physical))
    return _Program(tuple(steps), item if same_dtype else 0, to_physical)


@functools.lru_cache(maxsize=256)
def _convert_program(src: Layout, dst: Layout, s_item: int, d_item: int, same_dtype: bool) -> _Program:
    """The copy program of :func:`convert` from the strided copies of :func:`_convert_plan`."""
    steps = tuple(_step(shape, doff * d_item, [v * d_item for v in dstr], soff * s_item,
                        [v * s_item for v in sstr], (), True)
                  for shape, sstr, dstr, soff, doff in _convert_plan(src, dst))
    return _Program(steps, d_item if same_dtype else 0, True)


def _run_program(prog: _Program, physical: np.ndarray, other: np.ndarray | None, to_physical: bool) -> None:
    """Run a copy program between ``physical`` (flat, C-contiguous) and ``other`` (the logical
    array, or convert's source): big steps by the compiled kernel, the rest (and everything
    while the kernel compiles) by NumPy."""
    plans = None
    if prog.fast and _copy._fast_enabled():
        p_ptr = physical.__array_interface__["data"][0]
        l_ptr = other.__array_interface__["data"][0]
        plans = prog.plans(p_ptr % 8, l_ptr % 8)
    for k, st in enumerate(prog.steps):
        if plans:
            planned = plans.get(k)
            if planned is not None and (
                    _copy.run_planned(planned, physical, p_ptr + st.p_off, other, l_ptr + st.l_off)
                    if to_physical else
                    _copy.run_planned(planned, other, l_ptr + st.l_off, physical, p_ptr + st.p_off)):
                continue
        dst = _view(physical, st.p_off, st.shape, st.p_strides)
        if st.pad:
            dst[...] = 0
            continue
        src = _view(other, st.l_off, st.shape, st.l_strides, st.starts)
        if to_physical:
            np.copyto(dst, src, casting="unsafe")
        else:
            np.copyto(src, dst, casting="unsafe")


def _run_groups(src: Layout, dst: Layout, i: int):
    """Dimension ``i`` cut into runs on which both layouts are linear, equal runs grouped:
    (count, length, src start, dst start, src step, dst step, src stride, dst stride)."""
    n = src.shape[i]
    cuts = {0, n}
    for lay in (src, dst):
        r = lay._per_dim[i][0].radix
        if r is not None:
            off = lay.offsets[i]
            cuts.update(range((-off) % r, n, r))
    cuts = sorted(c for c in cuts if 0 <= c <= n)
    s1, d1 = (lay._per_dim[i][0].stride for lay in (src, dst))
    runs = [(a, b - a, src._locate_dim(i, a), dst._locate_dim(i, a)) for a, b in zip(cuts, cuts[1:])]
    groups = []
    for a, length, sc, dc in runs:
        if groups:
            count, glen, s0, d0, sstep, dstep = groups[-1]
            if glen == length and (count == 1 or (sc - s0 == count * sstep and dc - d0 == count * dstep)):
                if count == 1:
                    sstep, dstep = sc - s0, dc - d0
                groups[-1] = (count + 1, glen, s0, d0, sstep, dstep)
                continue
        groups.append((1, length, sc, dc, 0, 0))
    return [(c, ln, s0, d0, ss, ds, s1, d1) for c, ln, s0, d0, ss, ds in groups]


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
