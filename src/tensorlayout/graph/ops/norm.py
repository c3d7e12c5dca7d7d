"""Normalizations that use the tensor's own statistics: LayerNormalization,
RMSNormalization, InstanceNormalization, GroupNormalization, MeanVarianceNormalization,
LpNormalization and LRN.  Statistics are computed in float64 and the result given in the
input's type (ONNX's stash_type asks for float32 or better)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import axis, register

__all__ = ["Norm"]


@dataclass(frozen=True)
class Norm:
    """A normalization: ``axis`` (raw, normalized against the input's rank on each run),
    ``epsilon``, ``groups`` (GroupNormalization), ``axes`` (MeanVarianceNormalization), ``p``
    (LpNormalization), LRN's ``size``, ``alpha``, ``beta``, ``bias``; ``per_group``: opset
    18's GroupNormalization scale and bias (one value per group, not per channel)."""

    axis: int = -1
    epsilon: float = 1e-5
    groups: int = 0
    axes: tuple = ()
    p: int = 2
    size: int = 0
    alpha: float = 0.0
    beta: float = 0.0
    bias: float = 0.0
    per_group: bool = False


def _parse_norm(ctx):
    op = ctx.op
    eps = float(ctx.attr("epsilon", 1e-5))
    if op in ("LayerNormalization", "RMSNormalization"):
        return Norm(int(ctx.attr("axis", -1)), eps)
    if op == "InstanceNormalization":
        return Norm(1, eps)
    if op == "GroupNormalization":
        g = int(ctx.attr("num_groups", 0))
        if g < 1:
            ctx.fail(f"num_groups = {g} is not allowed: a positive integer")
        return Norm(1, eps, groups=g, per_group=ctx.opset < 21)
    if op == "MeanVarianceNormalization":
        return Norm(axes=tuple(int(a) for a in ctx.attr("axes", (0, 2, 3))))
    if op == "LpNormalization":
        p = int(ctx.attr("p", 2))
        if p not in (1, 2):
            ctx.fail(f"p = {p} is not allowed: 1 or 2")
        return Norm(int(ctx.attr("axis", -1)), p=p)
    size = int(ctx.attr("size", 0))
    if size < 1:
        ctx.fail(f"size = {size} is not allowed: a positive integer")
    return Norm(size=size, alpha=float(ctx.attr("alpha", 1e-4)),
                beta=float(ctx.attr("beta", 0.75)), bias=float(ctx.attr("bias", 1.0)))


def _standardize(xd, axes, eps):
    mean = xd.mean(axis=axes, keepdims=True)
    d = xd - mean
    inv = 1 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
    return d * inv, mean, inv


def _layer_norm(ctx, p, inputs, outputs):
    x = inputs[0]
    a = axis(ctx, p.axis, x.ndim)
    axes = tuple(range(a, x.ndim))
    y, mean, inv = _standardize(x.astype(np.float64), axes, p.epsilon)
    y = y * inputs[1]
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + inputs[2]
    stats = [s.astype(np.float32) for s in (mean, inv)]
    return [y.astype(x.dtype)] + stats[:outputs - 1]


def _rms_norm(ctx, p, inputs):
    x = inputs[0]
    a = axis(ctx, p.axis, x.ndim)
    xd = x.astype(np.float64)
    rms = np.sqrt((xd * xd).mean(axis=tuple(range(a, x.ndim)), keepdims=True) + p.epsilon)
    return [(xd / rms * inputs[1]).astype(x.dtype)]


def _per_channel(v, rank):
    return np.asarray(v, np.float64).reshape((1, -1) + (1,) * (rank - 2))


def _instance_norm(ctx, p, inputs):
    x, scale, bias = inputs
    if x.ndim < 3:
        ctx.fail(f"input shape {x.shape} needs spatial dimensions (N, C, D1, ...)")
    y, _, _ = _standardize(x.astype(np.float64), tuple(range(2, x.ndim)), p.epsilon)
    return [(y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype(x.dtype)]


def _group_norm(ctx, p, inputs):
    x, scale, bias = inputs
    n, c = x.shape[:2]
    g = p.groups
    if c % g:
        ctx.fail(f"{c} channels do not divide into num_groups = {g}")
    xg = x.astype(np.float64).reshape((n, g, -1))
    y, _, _ = _standardize(xg, (2,), p.epsilon)
    y = y.reshape(x.shape)
    if p.per_group:
        scale, bias = np.repeat(scale, c // g), np.repeat(bias, c // g)
    return [(y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype(x.dtype)]


def _mvn(ctx, p, inputs):
    x = inputs[0]
    axes = tuple(sorted({axis(ctx, a, x.ndim, "axes") for a in p.axes}))
    xd = x.astype(np.float64)
    d = xd - xd.mean(axis=axes, keepdims=True)
    return [(d / np.sqrt((d * d).mean(axis=axes, keepdims=True))).astype(x.dtype)]


def _lp_norm(ctx, p, inputs):
    x = inputs[0]
    a = axis(ctx, p.axis, x.ndim)
    xd = x.astype(np.float64)
    norm = np.abs(xd).sum(axis=a, keepdims=True) if p.p == 1 else \
        np.sqrt((xd * xd).sum(axis=a, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(norm == 0, 0, xd / np.where(norm == 0, 1, norm))
    return [y.astype(x.dtype)]


def _lrn(ctx, p, inputs):
    x = inputs[0]
    xd = x.astype(np.float64)
    c = x.shape[1]
    lo, hi = (p.size - 1) // 2, -(-(p.size - 1) // 2)
    sq = xd * xd
    total = np.zeros_like(xd)
    for k in range(c):
        total[:, k] = sq[:, max(0, k - lo):min(c, k + hi + 1)].sum(axis=1)
    return [(xd / (p.bias + p.alpha / p.size * total) ** p.beta).astype(x.dtype)]


_KERNELS = {"RMSNormalization": _rms_norm, "InstanceNormalization": _instance_norm,
            "GroupNormalization": _group_norm, "MeanVarianceNormalization": _mvn,
            "LpNormalization": _lp_norm, "LRN": _lrn}


def _norm_kernel(node, ctx):
    p = node.params
    if node.op == "LayerNormalization":
        outputs = len(node.outputs)
        return lambda inputs, out=None: _layer_norm(ctx, p, inputs, outputs)
    fn = _KERNELS[node.op]
    return lambda inputs, out=None: fn(ctx, p, inputs)


for _op, _since in (("LayerNormalization", 17), ("RMSNormalization", 23),
                    ("InstanceNormalization", 1), ("GroupNormalization", 18),
                    ("MeanVarianceNormalization", 9), ("LpNormalization", 1), ("LRN", 1)):
    register(_op, _parse_norm, _norm_kernel, since=_since, dynamic=True)
del _op, _since
