"""Ops that move or make data without arithmetic: Concat, Split, Slice, the reshapes (Reshape,
Flatten, Squeeze, Unsqueeze: one :class:`Reshape` form), Transpose, Pad, Shape, Gather,
Constant and ConstantOfShape."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import ModelError
from ._base import axis, ints, register

__all__ = ["Concat", "Split", "Slice", "Reshape", "Transpose", "Pad", "reshape_target"]


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
                                             axis=node.params.axis)]))


@dataclass(frozen=True)
class Split:
    axis: int
    sizes: tuple


def _parse_split(ctx):
    shape = ctx.shape(0)
    ax = axis(ctx, ctx.attr("axis", 0), len(shape))
    n = len(ctx.outputs)
    if ctx.has_input(1):
        sizes = ints(ctx.const(1, "split"))
    elif ctx.attr("split") is not None:
        sizes = [int(s) for s in ctx.attr("split")]
    else:
        parts = int(ctx.attr("num_outputs", n))
        step = -(-shape[ax] // parts)
        sizes = [min(step, shape[ax] - i * step) for i in range(parts)]
    if len(sizes) != n or sum(sizes) != shape[ax] or min(sizes) < 0:
        ctx.fail(f"split = {sizes} does not divide axis {ax} of length {shape[ax]} into {n} outputs")
    return Split(ax, tuple(sizes))


def _split_kernel(node, ctx):
    p = node.params
    cuts = np.cumsum(p.sizes)[:-1].tolist()
    return lambda inputs, out=None: np.split(inputs[0], cuts, axis=p.axis)


register("Split", _parse_split, _split_kernel)


@dataclass(frozen=True)
class Slice:
    """``index``: (start, stop, step) per axis, clamped to the input (stop None: past the front)."""

    index: tuple

    def slices(self):
        return tuple(slice(*t) for t in self.index)


def _parse_slice(ctx):
    shape = ctx.shape(0)
    rank = len(shape)
    if ctx.opset < 10 or "starts" in ctx.attrs:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes"), None
        if starts is None or ends is None:
            ctx.fail("starts and ends are missing")
    else:
        starts = ints(ctx.const(1, "starts"))
        ends = ints(ctx.const(2, "ends"))
        axes = ints(ctx.const(3, "axes")) if ctx.has_input(3) else None
        steps = ints(ctx.const(4, "steps")) if ctx.has_input(4) else None
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        ctx.fail(f"starts, ends, axes and steps have {len(starts)}, {len(ends)}, {len(axes)} "
                 f"and {len(steps)} entries: they must have as many")
    index = [(None, None, None)] * rank
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        if sp == 0:
            ctx.fail("steps = 0 is not allowed")
        ax = axis(ctx, ax, rank, "axes")
        # ONNX clamps the huge sentinel values exporters write (INT64_MAX / MIN)
        dim = shape[ax]
        st = st + dim if st < 0 else st
        en = en + dim if en < 0 else en
        if sp > 0:
            st, en = min(max(st, 0), dim), min(max(en, 0), dim)
        else:
            st, en = min(max(st, 0), dim - 1), min(max(en, -1), dim - 1)
        index[ax] = (st, None if en == -1 and sp < 0 else en, sp)
    return Slice(tuple(index))


def _slice_kernel(node, ctx):
    index = node.params.slices()
    return lambda inputs, out=None: [inputs[0][index]]


register("Slice", _parse_slice, _slice_kernel)


# ---------------------------------------------------------------------------- reshapes
@dataclass(frozen=True)
class Reshape:
    """The output ``shape`` of Reshape, Flatten, Squeeze or Unsqueeze: the same elements in
    the same (row-major) order."""

    shape: tuple


def reshape_target(shape, spec, allowzero=False):
    """Resolve an ONNX Reshape ``shape`` input (0 = copy, -1 = infer) against ``shape``.

    >>> reshape_target((2, 3, 4), [0, -1])
    (2, 12)
    """
    spec = [int(s) for s in spec]
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


def _parse_reshape(ctx):
    shape = ctx.shape(0)
    if ctx.op == "Reshape":
        try:
            return Reshape(reshape_target(shape, ints(ctx.const(1, "shape")),
                                          bool(ctx.attr("allowzero", 0))))
        except ModelError as exc:
            ctx.fail(str(exc))
    if ctx.op == "Flatten":
        a = int(ctx.attr("axis", 1))
        a = a + len(shape) if a < 0 else a
        if not 0 <= a <= len(shape):
            ctx.fail(f"axis = {ctx.attr('axis')} is outside [-{len(shape)}, {len(shape)}]")
        return Reshape((int(np.prod(shape[:a], dtype=np.int64)),
                        int(np.prod(shape[a:], dtype=np.int64))))
    if ctx.has_input(1):
        axes = ints(ctx.const(1, "axes"))
    else:
        axes = ctx.attr("axes")
        axes = None if axes is None else [int(a) for a in axes]
    if ctx.op == "Squeeze":
        if axes is None:
            return Reshape(tuple(d for d in shape if d != 1))
        axes = {axis(ctx, a, len(shape), "axes") for a in axes}
        for a in axes:
            if shape[a] != 1:
                ctx.fail(f"axis {a} has length {shape[a]}: only length-1 axes can be squeezed")
        return Reshape(tuple(d for i, d in enumerate(shape) if i not in axes))
    if axes is None:
        ctx.fail("axes are missing")
    rank = len(shape) + len(axes)
    axes = sorted(axis(ctx, a, rank, "axes") for a in axes)
    if len(set(axes)) != len(axes):
        ctx.fail(f"axes = {axes} repeats an axis")
    target = list(shape)
    for a in axes:
        target.insert(a, 1)
    return Reshape(tuple(target))


def _reshape_kernel(node, ctx):
    target = node.params.shape
    return lambda inputs, out=None: [inputs[0].reshape(target)]


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
    register(_op, _parse_reshape, _reshape_kernel)


@dataclass(frozen=True)
class Transpose:
    perm: tuple


def _parse_transpose(ctx):
    rank = len(ctx.shape(0))
    perm = ctx.attr("perm")
    perm = tuple(range(rank))[::-1] if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(rank)):
        ctx.fail(f"perm = {list(perm)} is not a permutation of the {rank} axes")
    return Transpose(perm)


register("Transpose", _parse_transpose, lambda node, ctx: (
    lambda inputs, out=None: [np.ascontiguousarray(np.transpose(inputs[0], node.params.perm))]))


@dataclass(frozen=True)
class Pad:
    """``width``: (before, after) per axis, non-negative; ``crop``: (start, stop) per axis for
    the negative pads, applied first; ``mode``: constant, reflect or edge."""

    mode: str
    width: tuple
    crop: tuple
    value: float


def _parse_pad(ctx):
    shape = ctx.shape(0)
    rank = len(shape)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        ctx.fail(f"mode = {mode!r} is not supported: constant, reflect or edge")
    if ctx.opset < 11:
        pads, value = list(ctx.attr("pads")), float(ctx.attr("value", 0.0))
        axes = list(range(rank))
    else:
        pads = ints(ctx.const(1, "pads"))
        cv = ctx.const(2, "constant_value", required=False)
        value = 0.0 if cv is None or np.asarray(cv).size == 0 else float(np.asarray(cv).reshape(-1)[0])
        axes = ints(ctx.const(3, "axes")) if ctx.has_input(3) else list(range(rank))
        axes = [axis(ctx, a, rank, "axes") for a in axes]
    k = len(axes)
    if len(pads) != 2 * k:
        ctx.fail(f"pads has {len(pads)} entries: it needs 2 x {k}")
    width = [(0, 0)] * rank
    crop = [(0, d) for d in shape]
    for i, a in enumerate(axes):
        b, e = pads[i], pads[i + k]
        width[a] = (max(b, 0), max(e, 0))
        crop[a] = (-min(b, 0), shape[a] + min(e, 0))
        if crop[a][1] < crop[a][0]:
            ctx.fail(f"pads = {pads} crop more than axis {a}'s {shape[a]} elements")
    return Pad(mode, tuple(width), tuple(crop), value)


def _pad_kernel(node, ctx):
    p = node.params
    crop = tuple(slice(a, b) for a, b in p.crop)
    kw = {"constant_values": p.value} if p.mode == "constant" else {}
    return lambda inputs, out=None: [np.pad(inputs[0][crop], p.width, mode=p.mode, **kw)]


register("Pad", _parse_pad, _pad_kernel)


# ---------------------------------------------------------------------------- shapes and constants
@dataclass(frozen=True)
class ShapeOf:
    start: int
    end: int | None


def _parse_shape(ctx):
    end = ctx.attr("end")
    return ShapeOf(int(ctx.attr("start", 0)), None if end is None else int(end))


def _shape_kernel(node, ctx):
    p = node.params
    value = np.array(ctx.in_shapes[0], np.int64)[p.start:p.end]
    return lambda inputs, out=None: [value.copy()]


register("Shape", _parse_shape, _shape_kernel)


@dataclass(frozen=True)
class Gather:
    axis: int
    dim: int


def _parse_gather(ctx):
    shape = ctx.shape(0)
    a = axis(ctx, ctx.attr("axis", 0), len(shape))
    return Gather(a, shape[a])


def _gather_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        idx = np.asarray(inputs[1])
        idx = np.where(idx < 0, idx + p.dim, idx)
        return [np.take(inputs[0], idx, axis=p.axis)]
    return run


register("Gather", _parse_gather, _gather_kernel)


@dataclass(frozen=True)
class Constant:
    value: np.ndarray = field(compare=False, repr=False)


def _parse_constant(ctx):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in ctx.attrs:
            dtype = np.float32 if key.startswith("value_float") else (
                np.int64 if key.startswith("value_int") else None)
            return Constant(np.asarray(ctx.attrs[key], dtype=dtype))
    ctx.fail("only value, value_float(s) and value_int(s) constants are supported")


register("Constant", _parse_constant,
         lambda node, ctx: (lambda inputs, out=None: [node.params.value]))


def _parse_constant_of_shape(ctx):
    value = ctx.attr("value")
    return Constant(np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1))


def _constant_of_shape_kernel(node, ctx):
    v = node.params.value
    return lambda inputs, out=None: [np.full(ints(inputs[0]), v[0], dtype=v.dtype)]


register("ConstantOfShape", _parse_constant_of_shape, _constant_of_shape_kernel)
del _op
