"""Ops that pick or place elements by index: GatherElements, GatherND, ScatterElements,
ScatterND, OneHot, TopK, Trilu, CumSum, NonZero, Compress and ReverseSequence.  An index out of its axis is a ModelError of the
run, naming the node (ONNX leaves it undefined)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import axis, ints, register

__all__ = ["AxisOp", "Scatter", "TopK"]


@dataclass(frozen=True)
class AxisOp:
    """An op along ``axis`` (raw: normalized on each run against the input's rank; None:
    Compress of the flattened input), with its flags: ``batch_dims`` (GatherND; the batch
    axis of ReverseSequence), ``exclusive`` / ``reverse`` (CumSum), ``upper`` (Trilu)."""

    axis: int | None = 0
    batch_dims: int = 0
    exclusive: bool = False
    reverse: bool = False
    upper: bool = True


def _indices(ctx, idx, dim, what="indices"):
    idx = np.asarray(idx).astype(np.int64, copy=False)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        ctx.fail(f"{what} reach {int(idx.min())} .. {int(idx.max())} for an axis of {dim}")
    return np.where(idx < 0, idx + dim, idx)


def _gather_elements_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x, idx = inputs
        a = axis(ctx, p.axis, x.ndim)
        if idx.ndim != x.ndim:
            ctx.fail(f"indices have rank {idx.ndim}: the data has rank {x.ndim}")
        return [np.take_along_axis(x, _indices(ctx, idx, x.shape[a]), axis=a)]
    return run


def _parse_axis_op(ctx):
    return AxisOp(int(ctx.attr("axis", 0)), int(ctx.attr("batch_dims", 0)),
                  bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0)),
                  bool(ctx.attr("upper", 1)))


register("GatherElements", _parse_axis_op, _gather_elements_kernel, since=11, dynamic=True,
         any_dtype=True)


def _gather_nd_kernel(node, ctx):
    b = node.params.batch_dims

    def run(inputs, out=None):
        x, idx = inputs
        idx = np.asarray(idx, np.int64)
        k = idx.shape[-1]
        if b + k > x.ndim or x.shape[:b] != idx.shape[:b]:
            ctx.fail(f"indices of shape {idx.shape} (batch_dims {b}) do not fit data of shape "
                     f"{x.shape}")
        batch = int(np.prod(x.shape[:b], dtype=np.int64))
        xs = x.reshape((batch,) + x.shape[b:])
        ids = idx.reshape((batch, -1, k))
        dims = np.array(x.shape[b:b + k], np.int64)
        if ids.size and ((ids < -dims).any() or (ids >= dims).any()):
            ctx.fail(f"indices fall outside the data's axes {tuple(dims)}")
        ids = np.where(ids < 0, ids + dims, ids)
        picked = np.stack([xs[i][tuple(ids[i].T)] for i in range(batch)]) if batch else \
            np.empty((0, ids.shape[1]) + x.shape[b + k:], x.dtype)
        return [picked.reshape(idx.shape[:-1] + x.shape[b + k:])]
    return run


register("GatherND", _parse_axis_op, _gather_nd_kernel, since=11, dynamic=True, any_dtype=True)


# ---------------------------------------------------------------------------- scatters
@dataclass(frozen=True)
class Scatter:
    """ScatterElements (along ``axis``) or ScatterND: ``reduction`` none, add, mul, max or min."""

    axis: int
    reduction: str


_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _parse_scatter(ctx):
    r = ctx.attr("reduction", "none")
    if r not in ("none", "add", "mul", "max", "min"):
        ctx.fail(f"reduction = {r!r} is not allowed: none, add, mul, max or min")
    return Scatter(int(ctx.attr("axis", 0)), r)


def _scatter(x, where, updates, reduction):
    """A copy of ``x`` with ``updates`` written (or reduced, in order) at index ``where``."""
    y = np.array(x, copy=True)
    if reduction == "none":
        y[where] = updates
    else:
        _REDUCE[reduction].at(y, where, updates)
    return y


def _scatter_elements_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x, idx, upd = inputs
        a = axis(ctx, p.axis, x.ndim)
        idx = _indices(ctx, idx, x.shape[a])
        if idx.shape != upd.shape or idx.ndim != x.ndim:
            ctx.fail(f"indices {idx.shape} and updates {upd.shape} must have one shape, of the "
                     f"data's rank {x.ndim}")
        where = list(np.indices(idx.shape, sparse=True))
        where[a] = idx
        return [_scatter(x, tuple(np.broadcast_to(w, idx.shape) for w in where), upd,
                         p.reduction)]
    return run


def _scatter_nd_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x, idx, upd = inputs
        idx = np.asarray(idx, np.int64)
        k = idx.shape[-1]
        dims = np.array(x.shape[:k], np.int64)
        if k > x.ndim or upd.shape != idx.shape[:-1] + x.shape[k:]:
            ctx.fail(f"updates of shape {upd.shape} do not fit indices {idx.shape} into data "
                     f"{x.shape}")
        if idx.size and ((idx < -dims).any() or (idx >= dims).any()):
            ctx.fail(f"indices fall outside the data's axes {tuple(dims)}")
        idx = np.where(idx < 0, idx + dims, idx).reshape(-1, k)
        return [_scatter(x, tuple(idx.T), upd.reshape((-1,) + x.shape[k:]), p.reduction)]
    return run


register("ScatterElements", _parse_scatter, _scatter_elements_kernel, since=11, dynamic=True,
         any_dtype=True)
register("ScatterND", _parse_scatter, _scatter_nd_kernel, since=11, dynamic=True,
         any_dtype=True)


# ---------------------------------------------------------------------------- OneHot, TopK
def _one_hot_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        idx, depth, values = inputs
        depth = int(np.asarray(depth).reshape(-1)[0])
        if depth < 1:
            ctx.fail(f"depth = {depth} is not allowed: at least 1")
        idx = np.asarray(idx).astype(np.float64)
        idx = np.trunc(np.where(idx < 0, idx + depth, idx))
        a = axis(ctx, p.axis, idx.ndim + 1)
        hot = np.expand_dims(idx, a) == np.arange(depth).reshape(
            [-1 if i == a else 1 for i in range(idx.ndim + 1)])
        off, on = np.asarray(values).reshape(-1)[:2]
        return [np.where(hot, on, off).astype(np.asarray(values).dtype)]
    return run


register("OneHot", lambda ctx: AxisOp(int(ctx.attr("axis", -1))), _one_hot_kernel, since=9,
         dynamic=True)


@dataclass(frozen=True)
class TopK:
    """The ``k`` (input 1) largest or smallest values along ``axis`` and their int64 indices,
    sorted (ties: the lower index first)."""

    axis: int
    largest: bool
    k: int | None = None      # the attribute of opset 1-9


def _parse_topk(ctx):
    k = ctx.attr("k") if ctx.opset < 10 else None
    return TopK(int(ctx.attr("axis", -1)), bool(ctx.attr("largest", 1)),
                None if k is None else int(k))


def _topk_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x = inputs[0]
        k = p.k if p.k is not None else int(np.asarray(inputs[1]).reshape(-1)[0])
        a = axis(ctx, p.axis, x.ndim)
        if not 0 <= k <= x.shape[a]:
            ctx.fail(f"k = {k} is outside [0, {x.shape[a]}] for axis {a}")
        # a stable ascending sort of an order-reversing key keeps ties lowest index first;
        # ~x reverses integers without the overflow of -x
        keys = x if not p.largest else (-x if x.dtype.kind == "f" else np.invert(x))
        order = np.argsort(keys, axis=a, kind="stable")
        idx = np.take(order, np.arange(k), axis=a)
        return [np.take_along_axis(x, idx, axis=a), idx.astype(np.int64)]
    return run


register("TopK", _parse_topk, _topk_kernel, dynamic=True)


# ---------------------------------------------------------------------------- Trilu, CumSum
def _trilu_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x = inputs[0]
        k = int(np.asarray(inputs[1]).reshape(-1)[0]) if len(inputs) > 1 and \
            inputs[1] is not None else 0
        if x.ndim < 2:
            ctx.fail(f"input shape {x.shape} has rank {x.ndim}: Trilu takes rank 2 or more")
        return [np.triu(x, k) if p.upper else np.tril(x, k)]
    return run


register("Trilu", _parse_axis_op, _trilu_kernel, since=14, dynamic=True)


def _cumsum_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x = inputs[0]
        a = axis(ctx, int(np.asarray(inputs[1]).reshape(-1)[0]), x.ndim)
        y = np.flip(x, a) if p.reverse else x
        acc = np.float32 if x.dtype == np.float16 else x.dtype
        y = np.cumsum(y, axis=a, dtype=acc)
        if p.exclusive:
            y = np.concatenate([np.zeros_like(np.take(y, [0], axis=a)),
                                np.take(y, np.arange(y.shape[a] - 1), axis=a)], axis=a)
        y = np.flip(y, a) if p.reverse else y
        return [np.ascontiguousarray(y).astype(x.dtype, copy=False)]
    return run


register("CumSum", _parse_axis_op, _cumsum_kernel, since=11, dynamic=True)


# ---------------------------------------------------------------------------- selections
def _nonzero_kernel(node, ctx):
    return lambda inputs, out=None: [np.array(np.nonzero(inputs[0]), np.int64).reshape(
        inputs[0].ndim, -1)]


def _compress_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x, cond = inputs[0], np.asarray(inputs[1]).astype(bool).reshape(-1)
        flat = p.axis is None
        a = None if flat else axis(ctx, p.axis, x.ndim)
        length = x.size if flat else x.shape[a]
        if cond.size > length:
            ctx.fail(f"condition has {cond.size} entries for {length} along the axis")
        return [np.compress(cond, x, axis=a)]
    return run


def _reverse_sequence_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x, lens = inputs[0], np.asarray(inputs[1], np.int64).reshape(-1)
        t, b = p.axis, p.batch_dims          # time_axis, batch_axis
        if lens.size != x.shape[b] or lens.min(initial=0) < 0 or lens.max(initial=0) > x.shape[t]:
            ctx.fail(f"sequence_lens = {lens.tolist()} do not fit {x.shape[b]} sequences of "
                     f"{x.shape[t]} steps")
        y = np.array(x, copy=True)
        for i, n in enumerate(lens):
            where = [slice(None)] * x.ndim
            where[b], where[t] = i, slice(0, n)
            y[tuple(where)] = np.flip(x[tuple(where)], axis=t - (t > b))
        return [y]
    return run


register("NonZero", None, _nonzero_kernel, since=9, dynamic=True)
register("Compress", lambda ctx: AxisOp(None if ctx.attr("axis") is None else
                                        int(ctx.attr("axis"))),
         _compress_kernel, since=9, dynamic=True, any_dtype=True)
register("ReverseSequence", lambda ctx: AxisOp(int(ctx.attr("time_axis", 0)),
                                               int(ctx.attr("batch_axis", 1))),
         _reverse_sequence_kernel, since=10, dynamic=True, any_dtype=True)
