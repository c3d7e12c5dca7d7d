"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp, ReduceSumSquare (one :class:`Reduce` form), the global
poolings, and ArgMax / ArgMin.

Axes come from the attribute (before opset 13 for ReduceSum, 18 for the others) or from
input 1, which may be computed at run time.  A reduction over an empty set gives its
identity: 0 for the sums, 1 for the product, -inf / +inf (the type's extremes for
integers) for max / min, -inf for the log-sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import axis, ints, register

__all__ = ["Reduce", "ArgReduce", "REDUCTIONS"]

#: ONNX reduction op -> the :class:`Reduce` kind.
REDUCTIONS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
              "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "logsum",
              "ReduceLogSumExp": "logsumexp", "ReduceSumSquare": "sumsquare"}


@dataclass(frozen=True)
class Reduce:
    """A reduction: ``kind`` (a value of :data:`REDUCTIONS`, or 'identity' for empty axes with
    noop_with_empty_axes) over ``axes`` (sorted), ``keepdims``; GlobalAveragePool and
    GlobalMaxPool are 'mean' and 'max' over the spatial axes with keepdims.  ``axes`` is None
    when they are read on each run (computed at run time, or the input's rank is known only
    then); ``given`` holds constant axes kept for such a run, ``noop``: empty axes reduce
    nothing."""

    kind: str
    axes: tuple | None
    keepdims: bool
    noop: bool = False
    given: tuple | None = None

    @property
    def spatial(self) -> bool:
        """Over axes (2, 3) of a 4-D tensor, keeping them: a global pooling."""
        return self.axes == (2, 3) and self.keepdims

    @property
    def host_only(self) -> str:
        return "" if self.axes is not None else "its axes are computed at run time"


def _parse_global(ctx):
    shape = ctx.shape(0)
    if len(shape) < 3:
        ctx.fail(f"input shape {shape} needs spatial dimensions")
    return Reduce("max" if ctx.op == "GlobalMaxPool" else "mean", tuple(range(2, len(shape))), True)


def _resolve_axes(fail, given, rank, noop):
    """Sorted axes of a rank-``rank`` input; None for noop (reduce nothing)."""
    if given is None or len(given) == 0:
        return None if noop else tuple(range(rank))
    axes = [axis(fail, a, rank, "axes") for a in given]
    if len(set(axes)) != len(axes):
        fail(f"axes = {list(given)} repeats an axis")
    return tuple(sorted(axes))


def _parse_reduce(ctx):
    kind = REDUCTIONS[ctx.op]
    keep = bool(ctx.attr("keepdims", 1))
    noop = bool(ctx.attr("noop_with_empty_axes", 0))
    if ctx.has_input(1):
        if ctx.runtime(1):
            return Reduce(kind, None, keep, noop)
        given = tuple(ints(ctx.consts[1]))
    else:
        given = ctx.attr("axes")
        given = None if given is None else tuple(int(a) for a in given)
    if not ctx.known(0):
        return Reduce(kind, None, keep, noop, given)
    axes = _resolve_axes(ctx.fail, given, len(ctx.shape(0)), noop)
    if axes is None:
        return Reduce("identity", (), keep, noop)
    return Reduce(kind, axes, keep, noop)


def _extreme(dtype, top):
    if dtype.kind == "f":
        return np.inf if top else -np.inf
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.max if top else info.min
    return top  # bool


def reduce_array(kind, x, axes, keepdims):
    """The ONNX reduction ``kind`` of ``x`` over ``axes``, in ``x``'s type (float16 sums
    accumulate in float32).

    >>> reduce_array("logsumexp", np.array([[0.0, 0.0], [1.0, 1.0]], np.float32), (1,), False)
    array([0.6931472, 1.6931472], dtype=float32)
    >>> reduce_array("max", np.zeros((2, 0), np.float32), (1,), True).tolist()
    [[-inf], [-inf]]
    """
    dt = x.dtype
    acc = np.float32 if dt == np.float16 else dt
    kw = dict(axis=axes, keepdims=keepdims)
    if kind == "sum":
        y = np.sum(x, dtype=acc, **kw)
    elif kind == "mean":
        y = np.mean(x, dtype=np.float32 if dt.kind == "f" and dt.itemsize <= 4 else None, **kw)
    elif kind == "max":
        y = np.max(x, initial=_extreme(dt, False), **kw)
    elif kind == "min":
        y = np.min(x, initial=_extreme(dt, True), **kw)
    elif kind == "prod":
        y = np.prod(x, dtype=acc, **kw)
    elif kind == "l1":
        y = np.sum(np.abs(x), dtype=acc, **kw)
    elif kind == "l2":
        y = np.sqrt(np.sum(np.square(x.astype(acc)), **kw))
    elif kind == "sumsquare":
        y = np.sum(np.square(x.astype(acc)), **kw)
    elif kind == "logsum":
        y = np.log(np.sum(x, dtype=acc, **kw))
    else:  # logsumexp, shifted by the maximum (a finite one) so that exp does not overflow
        xa = x.astype(acc)
        m = np.max(xa, axis=axes, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0)
        y = np.log(np.sum(np.exp(xa - m), **kw)) + (m if keepdims else np.squeeze(m, axis=axes))
    return np.asarray(y).astype(dt, copy=False)


def _reduce_kernel(node, ctx):
    p = node.params
    if p.kind == "identity":
        return lambda inputs, out=None: [inputs[0]]
    if p.axes is not None:
        return lambda inputs, out=None: [reduce_array(p.kind, inputs[0], p.axes, p.keepdims)]

    def run(inputs, out=None):
        x = inputs[0]
        given = p.given
        if given is None and len(inputs) > 1 and inputs[1] is not None:
            given = ints(inputs[1])
        axes = _resolve_axes(ctx.fail, given, x.ndim, p.noop)
        if axes is None:
            return [x]
        return [reduce_array(p.kind, x, axes, p.keepdims)]
    return run


register("GlobalAveragePool", _parse_global, _reduce_kernel)
register("GlobalMaxPool", _parse_global, _reduce_kernel)
for _op in REDUCTIONS:
    register(_op, _parse_reduce, _reduce_kernel, dynamic=True)


# ---------------------------------------------------------------------------- ArgMax, ArgMin
@dataclass(frozen=True)
class ArgReduce:
    """The index (int64) of the largest (ArgMax) or smallest (ArgMin) element along ``axis``;
    ``last``: the last such index where several tie (select_last_index)."""

    largest: bool
    axis: int
    keepdims: bool
    last: bool


def _parse_arg(ctx):
    rank = len(ctx.shape(0))
    return ArgReduce(ctx.op == "ArgMax", axis(ctx, ctx.attr("axis", 0), rank),
                     bool(ctx.attr("keepdims", 1)), bool(ctx.attr("select_last_index", 0)))


def _arg_kernel(node, ctx):
    p = node.params
    pick = np.argmax if p.largest else np.argmin

    def run(inputs, out=None):
        x = inputs[0]
        if x.shape[p.axis] == 0:
            ctx.fail(f"axis {p.axis} is empty: there is no index to return")
        if p.last:
            flipped = np.flip(x, axis=p.axis)
            idx = x.shape[p.axis] - 1 - pick(flipped, axis=p.axis)
        else:
            idx = pick(x, axis=p.axis)
        idx = idx.astype(np.int64)
        return [np.expand_dims(idx, p.axis) if p.keepdims else idx]
    return run


register("ArgMax", _parse_arg, _arg_kernel)
register("ArgMin", _parse_arg, _arg_kernel)
del _op
