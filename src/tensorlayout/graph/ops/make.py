"""Ops that make tensors or read their shapes (Shape, Size, Constant, ConstantOfShape, Range,
EyeLike) and Gather."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._base import axis, ints, register

__all__ = ["ShapeOf", "Gather", "Constant"]

_MOVES = dict(any_dtype=True)


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
    known = ctx.in_shapes[0]
    if known is not None:
        value = np.array(known, np.int64)[p.start:p.end]
        return lambda inputs, out=None: [value.copy()]
    return lambda inputs, out=None: [np.array(inputs[0].shape, np.int64)[p.start:p.end]]


register("Shape", _parse_shape, _shape_kernel, dynamic=True, reads_shape_only=True, **_MOVES)
register("Size", None, lambda node, ctx: (
    lambda inputs, out=None: [np.array(inputs[0].size, np.int64)]),
    dynamic=True, reads_shape_only=True, **_MOVES)


@dataclass(frozen=True)
class Gather:
    axis: int


def _parse_gather(ctx):
    a = int(ctx.attr("axis", 0))
    if ctx.known(0):
        a = axis(ctx, a, len(ctx.shape(0)))
    return Gather(a)


def _gather_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x, idx = inputs[0], np.asarray(inputs[1])
        a = axis(ctx, p.axis, x.ndim)
        dim = x.shape[a]
        if idx.size and (idx.min() < -dim or idx.max() >= dim):
            ctx.fail(f"indices reach {int(idx.min())} .. {int(idx.max())}: axis {a} has "
                     f"{dim} entries")
        return [np.take(x, np.where(idx < 0, idx + dim, idx), axis=a)]
    return run


register("Gather", _parse_gather, _gather_kernel, dynamic=True, **_MOVES)


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
         lambda node, ctx: (lambda inputs, out=None: [node.params.value]), dynamic=True,
         **_MOVES)


def _parse_constant_of_shape(ctx):
    value = ctx.attr("value")
    return Constant(np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1))


def _constant_of_shape_kernel(node, ctx):
    v = node.params.value

    def run(inputs, out=None):
        shape = ints(inputs[0])
        if min(shape, default=0) < 0:
            ctx.fail(f"shape = {shape} has a negative entry")
        return [np.full(shape, v[0], dtype=v.dtype)]
    return run


register("ConstantOfShape", _parse_constant_of_shape, _constant_of_shape_kernel, dynamic=True,
         any_dtype=True)


# ---------------------------------------------------------------------------- Range, EyeLike
def _scalar(ctx, a, i):
    a = np.asarray(a)
    if a.size != 1:
        ctx.fail(f"input {i} has shape {a.shape}: a scalar is needed")
    return a.reshape(-1)[0]


def _range_kernel(node, ctx):
    def run(inputs, out=None):
        start, limit, delta = (_scalar(ctx, a, i) for i, a in enumerate(inputs))
        dt = np.asarray(inputs[0]).dtype
        if delta == 0:
            ctx.fail("delta = 0 is not allowed")
        n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
        if dt.kind in "iu":
            return [(int(start) + int(delta) * np.arange(n, dtype=np.int64)).astype(dt)]
        return [(start + delta * np.arange(n, dtype=dt)).astype(dt)]
    return run


register("Range", None, _range_kernel, since=11, dynamic=True)


@dataclass(frozen=True)
class EyeLike:
    """Ones on the ``k``-th diagonal of a 2-D tensor shaped like the input; ``dtype``: None
    for the input's type."""

    k: int
    dtype: str | None


def _parse_eye_like(ctx):
    from .._onnx import np_dtype, type_name

    to = ctx.attr("dtype")
    dt = None
    if to is not None:
        dt = np_dtype(int(to))
        if dt is None:
            ctx.fail(f"dtype = {type_name(int(to))} is not supported")
    return EyeLike(int(ctx.attr("k", 0)), None if dt is None else dt.name)


def _eye_like_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x = inputs[0]
        if x.ndim != 2:
            ctx.fail(f"input shape {x.shape} has rank {x.ndim}: EyeLike takes rank 2")
        return [np.eye(x.shape[0], x.shape[1], p.k, dtype=p.dtype or x.dtype)]
    return run


register("EyeLike", _parse_eye_like, _eye_like_kernel, since=9, dynamic=True)
