"""Ops that move data without arithmetic: Concat, Split, Slice, the reshapes (Reshape,
Flatten, Squeeze, Unsqueeze: one :class:`Reshape` form), Transpose and Pad.

An operand that fixes where the data goes (Slice's starts, Reshape's shape, Pad's pads,
Split's sizes, Squeeze's axes) is read when the model loads if it is a constant and the
input's shape is known; otherwise the kernel reads it from its inputs on every run, with the
same checks, and the parameters say so (``host_only``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ModelError
from ._base import axis, ints, register

__all__ = ["Concat", "Split", "Slice", "Reshape", "Transpose", "Pad", "reshape_target",
           "slice_index", "pad_plan"]

_MOVES = dict(any_dtype=True)


# ---------------------------------------------------------------------------- Concat, Split
@dataclass(frozen=True)
class Concat:
    axis: int


def _parse_concat(ctx):
    shapes = [s for s in ctx.in_shapes if s is not None]
    if not shapes:
        ctx.fail("no input has a known shape")
    return Concat(axis(ctx, ctx.attr("axis", 0), len(shapes[0])))


register("Concat", _parse_concat, lambda node, ctx: (
    lambda inputs, out=None: [np.concatenate([a for a in inputs if a is not None],
                                             axis=node.params.axis)]), **_MOVES)


@dataclass(frozen=True)
class Split:
    """``sizes`` along ``axis``; None when they are worked out on each run (the split input is
    computed at run time, or the input's shape is known only then): from the split input, or
    ``ceil`` parts of ceil(length / n) with the last smaller (opset 18's num_outputs), or
    equal parts.  ``given``: the constant sizes, kept for the run."""

    axis: int
    sizes: tuple | None
    ceil: bool = False
    given: tuple | None = None

    @property
    def host_only(self) -> str:
        return "" if self.sizes is not None else "its split sizes are computed at run time"


def _split_sizes(fail, length, ax, n, split, ceil):
    if split is None and ceil:
        step = -(-length // n)
        split = [max(0, min(step, length - i * step)) for i in range(n)]
    elif split is None:
        if length % n:
            fail(f"axis {ax} of length {length} does not split into {n} equal parts")
        split = [length // n] * n
    if len(split) != n or sum(split) != length or min(split, default=0) < 0:
        fail(f"split = {list(split)} does not divide axis {ax} of length {length} into {n} outputs")
    return tuple(split)


def _parse_split(ctx):
    n = len(ctx.outputs)
    ax = int(ctx.attr("axis", 0))
    split, ceil = None, False
    if ctx.has_input(1):
        if ctx.runtime(1):
            return Split(ax if not ctx.known(0) else axis(ctx, ax, len(ctx.shape(0))), None)
        split = ints(ctx.consts[1])
    elif ctx.attr("split") is not None:
        split = [int(v) for v in ctx.attr("split")]
    elif ctx.attr("num_outputs") is not None:
        if int(ctx.attr("num_outputs")) != n:
            ctx.fail(f"num_outputs = {ctx.attr('num_outputs')} for {n} outputs")
        ceil = True
    if not ctx.known(0):
        return Split(ax, None, ceil, None if split is None else tuple(split))
    shape = ctx.shape(0)
    ax = axis(ctx, ax, len(shape))
    return Split(ax, _split_sizes(ctx.fail, shape[ax], ax, n, split, ceil), ceil)


def _split_kernel(node, ctx):
    p = node.params
    n = len(node.outputs)

    def run(inputs, out=None):
        x = inputs[0]
        sizes = p.sizes
        if sizes is None:
            ax = axis(ctx, p.axis, x.ndim)
            split = p.given
            if split is None and len(inputs) > 1 and inputs[1] is not None:
                split = ints(inputs[1])
            sizes = _split_sizes(ctx.fail, x.shape[ax], ax, n, split, p.ceil)
        else:
            ax = p.axis
        cuts = np.cumsum(sizes)[:-1].tolist()
        return np.split(x, cuts, axis=ax)
    return run


register("Split", _parse_split, _split_kernel, dynamic=True, **_MOVES)


# ---------------------------------------------------------------------------- Slice
@dataclass(frozen=True)
class Slice:
    """``index``: (start, stop, step) per axis, clamped to the input (stop None: past the
    front); None when the starts, ends, axes or steps are computed at run time."""

    index: tuple | None

    def slices(self):
        return tuple(slice(*t) for t in self.index)

    @property
    def host_only(self) -> str:
        return "" if self.index is not None else "its starts / ends are computed at run time"


def slice_index(fail, shape, starts, ends, axes=None, steps=None):
    """ONNX Slice's (start, stop, step) per axis of ``shape``, clamped as ONNX clamps them.

    >>> slice_index(None, (10, 4), [-3, 9], [2**62, 0], None, [1, -1])
    ((7, 10, 1), (3, 0, -1))
    """
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        fail(f"starts, ends, axes and steps have {len(starts)}, {len(ends)}, {len(axes)} "
             f"and {len(steps)} entries: they must have as many")
    index = [(0, d, 1) for d in shape]
    seen = set()
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        if sp == 0:
            fail("steps = 0 is not allowed")
        ax = axis(fail, ax, rank, "axes")
        if ax in seen:
            fail(f"axes = {list(axes)} repeats axis {ax}")
        seen.add(ax)
        dim = shape[ax]
        st = st + dim if st < 0 else st
        en = en + dim if en < 0 else en
        if sp > 0:
            st, en = min(max(st, 0), dim), min(max(en, 0), dim)
        else:
            st, en = min(max(st, 0), dim - 1), min(max(en, -1), dim - 1)
        index[ax] = (st, None if en == -1 and sp < 0 else en, sp)
    return tuple(index)


def _slice_operands(values):
    starts, ends = ints(values[0]), ints(values[1])
    axes = ints(values[2]) if values[2] is not None else None
    steps = ints(values[3]) if values[3] is not None else None
    return starts, ends, axes, steps


def _parse_slice(ctx):
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        if starts is None or ends is None:
            ctx.fail("starts and ends are missing")
        axes = ctx.attr("axes")
        return Slice(slice_index(ctx.fail, ctx.shape(0), [int(v) for v in starts],
                                 [int(v) for v in ends],
                                 None if axes is None else [int(v) for v in axes]))
    for i, what in ((1, "starts"), (2, "ends")):
        if not ctx.has_input(i):
            ctx.fail(f"input {i} ({what}) is missing")
    if ctx.runtime(1, 2, 3, 4) or not ctx.known(0):
        return Slice(None)
    values = [ctx.consts[i] if ctx.has_input(i) else None for i in (1, 2, 3, 4)]
    return Slice(slice_index(ctx.fail, ctx.shape(0), *_slice_operands(values)))


def _slice_kernel(node, ctx):
    p = node.params
    if p.index is not None:
        index = p.slices()
        return lambda inputs, out=None: [inputs[0][index]]

    def run(inputs, out=None):
        values = [inputs[i] if i < len(inputs) else None for i in (1, 2, 3, 4)]
        index = slice_index(ctx.fail, inputs[0].shape, *_slice_operands(values))
        return [inputs[0][tuple(slice(*t) for t in index)]]
    return run


register("Slice", _parse_slice, _slice_kernel, dynamic=True, **_MOVES)


# ---------------------------------------------------------------------------- reshapes
@dataclass(frozen=True)
class Reshape:
    """The output ``shape`` of Reshape, Flatten, Squeeze or Unsqueeze: the same elements in
    the same (row-major) order.  ``shape`` is None when it is worked out on each run (its
    operand is computed at run time, or the input's shape is known only then): from
    ``allowzero`` (Reshape), ``axis`` (Flatten) or ``axes`` (Squeeze / Unsqueeze constant
    axes; None: all length-1 axes, or read from the input)."""

    shape: tuple | None
    allowzero: bool = False
    axis: int = 1
    axes: tuple | None = None

    @property
    def host_only(self) -> str:
        return "" if self.shape is not None else "its output shape is computed at run time"


def reshape_target(shape, spec, allowzero=False):
    """Resolve an ONNX Reshape ``shape`` input (0 = copy, -1 = infer) against ``shape``.

    >>> reshape_target((2, 3, 4), [0, -1])
    (2, 12)
    """
    spec = [int(s) for s in spec]
    if allowzero and 0 in spec and -1 in spec:
        raise ModelError(f"shape = {spec} has both 0 and -1 with allowzero = 1")
    out = [shape[i] if (s == 0 and not allowzero and i < len(shape)) else s
           for i, s in enumerate(spec)]
    if out.count(-1) > 1:
        raise ModelError(f"shape = {spec} has more than one -1")
    if any(s < -1 for s in out):
        raise ModelError(f"shape = {spec} has an entry below -1")
    total = int(np.prod(shape, dtype=np.int64))
    if -1 in out:
        known = int(np.prod([s for s in out if s != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise ModelError(f"shape = {spec} cannot hold the {total} elements of {tuple(shape)}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        raise ModelError(f"shape = {spec} cannot hold the {total} elements of {tuple(shape)}")
    return tuple(out)


def _target(fail, op, shape, p, operand):
    """The output shape of the reshape ``op`` for an input of ``shape``."""
    if op == "Reshape":
        try:
            return reshape_target(shape, ints(operand), p.allowzero)
        except ModelError as exc:
            fail(str(exc))
    rank = len(shape)
    if op == "Flatten":
        a = p.axis + rank if p.axis < 0 else p.axis
        if not 0 <= a <= rank:
            fail(f"axis = {p.axis} is outside [-{rank}, {rank}]")
        return (int(np.prod(shape[:a], dtype=np.int64)), int(np.prod(shape[a:], dtype=np.int64)))
    axes = p.axes if operand is None else ints(operand)
    if op == "Squeeze":
        if axes is None or len(axes) == 0:
            return tuple(d for d in shape if d != 1)
        axes = {axis(fail, a, rank, "axes") for a in axes}
        for a in sorted(axes):
            if shape[a] != 1:
                fail(f"axis {a} has length {shape[a]}: only length-1 axes can be squeezed")
        return tuple(d for i, d in enumerate(shape) if i not in axes)
    if axes is None:
        fail("axes are missing")
    out_rank = rank + len(axes)
    norm = sorted(axis(fail, a, out_rank, "axes") for a in axes)
    if len(set(norm)) != len(norm):
        fail(f"axes = {list(axes)} repeats an axis")
    target = list(shape)
    for a in norm:
        target.insert(a, 1)
    return tuple(target)


def _parse_reshape(ctx):
    op = ctx.op
    axes, operand = None, None
    if op in ("Squeeze", "Unsqueeze"):
        if ctx.has_input(1):
            operand = ctx.consts[1]
            if operand is None:
                return Reshape(None)
        elif ctx.attr("axes") is not None:
            axes = tuple(int(a) for a in ctx.attr("axes"))
    elif op == "Reshape":
        if not ctx.has_input(1):
            ctx.fail("input 1 (shape) is missing")
        operand = ctx.consts[1]
    p = Reshape(None, bool(ctx.attr("allowzero", 0)), int(ctx.attr("axis", 1)), axes)
    if (op == "Reshape" and operand is None) or not ctx.known(0):
        return p
    return Reshape(_target(ctx.fail, op, ctx.shape(0), p, operand), p.allowzero, p.axis, p.axes)


def _reshape_kernel(node, ctx):
    p = node.params
    if p.shape is not None:
        target = p.shape
        return lambda inputs, out=None: [inputs[0].reshape(target)]
    op = node.op

    def run(inputs, out=None):
        operand = inputs[1] if len(inputs) > 1 else None
        return [inputs[0].reshape(_target(ctx.fail, op, inputs[0].shape, p, operand))]
    return run


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
    register(_op, _parse_reshape, _reshape_kernel, dynamic=True, **_MOVES)


@dataclass(frozen=True)
class Transpose:
    """``perm``; None: the axes reversed, for an input whose rank is known only at run time."""

    perm: tuple | None


def _parse_transpose(ctx):
    perm = ctx.attr("perm")
    if not ctx.known(0):
        return Transpose(None if perm is None else tuple(int(p) for p in perm))
    rank = len(ctx.shape(0))
    perm = tuple(range(rank))[::-1] if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(rank)):
        ctx.fail(f"perm = {list(perm)} is not a permutation of the {rank} axes")
    return Transpose(perm)


def _transpose_kernel(node, ctx):
    perm = node.params.perm

    def run(inputs, out=None):
        x = inputs[0]
        if perm is not None and sorted(perm) != list(range(x.ndim)):
            ctx.fail(f"perm = {list(perm)} is not a permutation of the {x.ndim} axes")
        return [np.ascontiguousarray(np.transpose(x, perm))]
    return run


register("Transpose", _parse_transpose, _transpose_kernel, dynamic=True, **_MOVES)


# ---------------------------------------------------------------------------- Pad
@dataclass(frozen=True)
class Pad:
    """``width``: (before, after) per axis, non-negative; ``crop``: (start, stop) per axis for
    the negative pads, applied first; ``mode``: constant, reflect, edge or wrap.  ``width`` and
    ``crop`` are None when the pads (or the input's shape) are known only at run time, and
    ``value`` None when the constant value is."""

    mode: str
    width: tuple | None
    crop: tuple | None
    value: float | None

    @property
    def host_only(self) -> str:
        if self.width is None:
            return "its pads are computed at run time"
        return "" if self.value is not None else "its constant value is computed at run time"


def pad_plan(fail, shape, pads, axes=None):
    """(width, crop) of ONNX pads over ``axes`` (default: all) of ``shape``.

    >>> pad_plan(None, (4, 5), [1, -1, 0, 2])
    (((1, 0), (0, 2)), ((0, 4), (1, 5)))
    """
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [axis(fail, a, rank, "axes")
                                                   for a in axes]
    k = len(axes)
    if len(pads) != 2 * k:
        fail(f"pads has {len(pads)} entries: it needs 2 x {k}")
    width = [(0, 0)] * rank
    crop = [(0, d) for d in shape]
    for i, a in enumerate(axes):
        b, e = pads[i], pads[i + k]
        width[a] = (max(b, 0), max(e, 0))
        crop[a] = (-min(b, 0), shape[a] + min(e, 0))
        if crop[a][1] < crop[a][0]:
            fail(f"pads = {list(pads)} crop more than axis {a}'s {shape[a]} elements")
    return tuple(width), tuple(crop)


def _pad_value(v):
    v = np.asarray(v)
    return 0.0 if v.size == 0 else v.reshape(-1)[0].item()


def _parse_pad(ctx):
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        ctx.fail(f"mode = {mode!r} is not supported: constant, reflect, edge or wrap")
    if ctx.opset < 11:
        pads, value, axes = [int(v) for v in ctx.attr("pads")], float(ctx.attr("value", 0.0)), None
    else:
        if not ctx.has_input(1):
            ctx.fail("input 1 (pads) is missing")
        value = 0.0 if not ctx.has_input(2) else (
            None if ctx.runtime(2) else _pad_value(ctx.consts[2]))
        if ctx.runtime(1, 3) or not ctx.known(0):
            return Pad(mode, None, None, value)
        pads = ints(ctx.consts[1])
        axes = ints(ctx.consts[3]) if ctx.has_input(3) else None
    if not ctx.known(0):
        return Pad(mode, None, None, value)
    width, crop = pad_plan(ctx.fail, ctx.shape(0), pads, axes)
    _check_reflect(ctx.fail, mode, ctx.shape(0), width, crop)
    return Pad(mode, width, crop, value)


def _check_reflect(fail, mode, shape, width, crop):
    for a, ((b, e), (c0, c1)) in enumerate(zip(width, crop)):
        n = c1 - c0
        if (b or e) and n == 0 and mode != "constant":
            fail(f"axis {a} is empty after cropping: mode {mode!r} has nothing to repeat")
        if mode == "reflect" and max(b, e) > n - 1 and (b or e):
            fail(f"pads ({b}, {e}) on axis {a} of length {n}: reflect pads at most length - 1")


def _pad_kernel(node, ctx):
    p = node.params
    static_crop = None if p.crop is None else tuple(slice(a, b) for a, b in p.crop)

    def run(inputs, out=None):
        x = inputs[0]
        width, crop = p.width, static_crop
        if width is None:
            axes = ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else None
            width, c = pad_plan(ctx.fail, x.shape, ints(inputs[1]), axes)
            _check_reflect(ctx.fail, p.mode, x.shape, width, c)
            crop = tuple(slice(a, b) for a, b in c)
        if p.mode != "constant":
            return [np.pad(x[crop], width, mode=p.mode)]
        value = p.value
        if value is None:
            value = _pad_value(inputs[2]) if inputs[2] is not None else 0
        return [np.pad(x[crop], width, mode="constant", constant_values=value)]
    return run


register("Pad", _parse_pad, _pad_kernel, dynamic=True, **_MOVES)
del _op
