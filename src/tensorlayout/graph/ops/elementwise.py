"""Element-wise ops: activations (one parameter form every backend fuses), binary
arithmetic, BatchNormalization as a per-channel affine map, Cast, Identity and Dropout."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._base import register

__all__ = ["Activation", "ACTIVATIONS", "BatchNorm", "Cast", "Dropout", "batchnorm_affine",
           "activation_numpy"]

_ZERO, _ONE, _INF = np.float32(0), np.float32(1), np.float32(np.inf)

#: The ops that are one activation y = f(x) of the :class:`Activation` form.
ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSwish", "HardSigmoid", "Tanh")


@dataclass(frozen=True)
class Activation:
    """y = f(x), one of :data:`ACTIVATIONS`.  ``alpha`` and ``beta``: Clip's bounds (-inf /
    inf when absent), LeakyRelu's slope, HardSigmoid's slope and offset, HardSwish's 1/6 and
    1/2.  ``runtime_bounds``: Clip's bounds are tensors computed at run time (inputs 1, 2)."""

    kind: str
    alpha: float = 0.0
    beta: float = 0.0
    runtime_bounds: bool = False


def _parse_activation(ctx):
    op = ctx.op
    if op == "Clip":
        if ctx.opset < 11 or "min" in ctx.attrs or "max" in ctx.attrs:
            return Activation(op, float(ctx.attr("min", -np.inf)), float(ctx.attr("max", np.inf)))
        runtime = any(ctx.has_input(i) and ctx.consts[i] is None for i in (1, 2))
        if runtime:
            return Activation(op, -np.inf, np.inf, runtime_bounds=True)
        bounds = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            c = ctx.const(i, "min" if i == 1 else "max", required=False)
            if c is not None and np.asarray(c).size != 1:
                ctx.fail(f"input {i} has shape {np.asarray(c).shape}: a bound is one value")
            bounds.append(default if c is None else float(np.asarray(c).reshape(-1)[0]))
        return Activation(op, *bounds)
    if op == "LeakyRelu":
        return Activation(op, float(ctx.attr("alpha", 0.01)))
    if op == "HardSigmoid":
        return Activation(op, float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5)))
    if op == "HardSwish":
        return Activation(op, 1.0 / 6.0, 0.5)
    return Activation(op)


def activation_numpy(p: Activation, x, out=None, lo=None, hi=None):
    """``f(x)`` in NumPy, NaN propagating as onnxruntime does (``out`` may be ``x``)."""
    k = p.kind
    if k == "Relu":
        if x.dtype == np.float32:
            # np.clip with float32 bounds is several times faster than np.maximum(x, 0)
            return np.clip(x, _ZERO, _INF, out=out)
        return np.maximum(x, x.dtype.type(0), out=out)
    if k == "Clip":
        lo = p.alpha if lo is None else lo
        hi = p.beta if hi is None else hi
        if x.dtype.kind == "f":
            return np.clip(x, x.dtype.type(lo), x.dtype.type(hi), out=out)
        info = np.iinfo(x.dtype) if x.dtype.kind in "iu" else None
        if info is None:
            return x.copy() if out is None else np.copyto(out, x) or out
        lo_i = info.min if lo == -np.inf else int(np.ceil(lo))
        hi_i = info.max if hi == np.inf else int(np.floor(hi))
        lo_i, hi_i = max(lo_i, info.min), min(hi_i, info.max)
        return np.clip(x, x.dtype.type(lo_i), x.dtype.type(hi_i), out=out)
    if k == "Sigmoid":
        with np.errstate(over="ignore"):
            y = np.negative(x, out=out)
            np.exp(y, out=y)
            y += 1
            return np.reciprocal(y, out=y)
    if k == "Tanh":
        return np.tanh(x, out=out)
    if k == "LeakyRelu":
        y = np.where(x >= 0, x, x * x.dtype.type(p.alpha))
        if out is not None:
            np.copyto(out, y)
            return out
        return y.astype(x.dtype, copy=False)
    if k == "HardSigmoid":
        y = np.multiply(x, x.dtype.type(p.alpha), out=out)
        y += x.dtype.type(p.beta)
        return np.clip(y, x.dtype.type(0), x.dtype.type(1), out=y)
    if k == "HardSwish":
        g = x * x.dtype.type(p.alpha)
        g += x.dtype.type(p.beta)
        np.clip(g, x.dtype.type(0), x.dtype.type(1), out=g)
        return np.multiply(x, g, out=out)
    raise AssertionError(k)


def _activation_kernel(node, ctx):
    p = node.params
    if p.runtime_bounds:
        def run(inputs, out=None):
            lo = -np.inf if len(inputs) < 2 or inputs[1] is None else float(np.asarray(inputs[1]).reshape(-1)[0])
            hi = np.inf if len(inputs) < 3 or inputs[2] is None else float(np.asarray(inputs[2]).reshape(-1)[0])
            return [activation_numpy(p, inputs[0], out, lo, hi)]
        return run
    return lambda inputs, out=None: [activation_numpy(p, inputs[0], out)]


for _op in ACTIVATIONS:
    register(_op, _parse_activation, _activation_kernel, since=14 if _op == "HardSwish" else 1)


# ---------------------------------------------------------------------------- binary
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def _binary_kernel(node, ctx):
    fn = _BINARY[node.op]
    integer_div = node.op == "Div"

    def run(inputs, out=None):
        a, b = inputs
        if integer_div and a.dtype.kind in "iu" and b.dtype.kind in "iu":
            # ONNX integer Div truncates toward zero
            return [(np.trunc(a / b)).astype(np.result_type(a, b))]
        r_dtype = np.result_type(a, b)
        if out is not None and out.shape == np.broadcast_shapes(a.shape, b.shape) \
                and out.dtype == r_dtype:
            return [fn(a, b, out=out)]
        return [fn(a, b)]
    return run


for _op in _BINARY:
    register(_op, None, _binary_kernel)


# ---------------------------------------------------------------------------- BatchNormalization
@dataclass(frozen=True)
class BatchNorm:
    """Inference BatchNormalization as y = x * mul + add per channel (float32, from float64)."""

    epsilon: float
    channels: int
    mul: np.ndarray = field(compare=False, repr=False)
    add: np.ndarray = field(compare=False, repr=False)


def batchnorm_affine(scale, bias, mean, var, eps):
    """BatchNormalization as y = x * mul + add per channel, in float64 then float32.

    >>> m, a = batchnorm_affine(np.ones(2), np.zeros(2), np.ones(2), np.full(2, 3.0), 1.0)
    >>> m.tolist(), a.tolist()
    ([0.5, 0.5], [-0.5, -0.5])
    """
    s = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    a = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * s
    return s.astype(np.float32), a.astype(np.float32)


def _parse_batchnorm(ctx):
    if ctx.attr("training_mode", 0):
        ctx.fail("training_mode = 1 is not supported: inference uses the running statistics")
    if len([o for o in ctx.outputs if o]) > 1:
        ctx.fail("the running-statistics outputs (training) are not supported")
    shape = ctx.shape(0)
    if len(shape) < 2:
        ctx.fail(f"input shape {shape} needs at least 2 dimensions (N, C, ...)")
    stats = [ctx.const(i, what) for i, what in
             ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var"))]
    for (i, what), s in zip(((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")), stats):
        if np.asarray(s).size != shape[1]:
            ctx.fail(f"input {i} ({what}) has {np.asarray(s).size} values for {shape[1]} channels")
    eps = float(ctx.attr("epsilon", 1e-5))
    mul, add = batchnorm_affine(*stats, eps)
    return BatchNorm(eps, shape[1], mul, add)


def _batchnorm_kernel(node, ctx):
    p = node.params
    bshape = (1, -1) + (1,) * (len(ctx.in_shapes[0]) - 2)
    mul, add = p.mul.reshape(bshape), p.add.reshape(bshape)

    def run(inputs, out=None):
        y = np.multiply(inputs[0], mul, out=out)
        y += add
        return [y]
    return run


register("BatchNormalization", _parse_batchnorm, _batchnorm_kernel)


# ---------------------------------------------------------------------------- Cast, Identity, Dropout
@dataclass(frozen=True)
class Cast:
    """Cast to ``dtype`` (a NumPy dtype name)."""

    dtype: str


def _parse_cast(ctx):
    from .._onnx import np_dtype, type_name

    to = int(ctx.attr("to", 0))
    dt = np_dtype(to)
    if dt is None:
        ctx.fail(f"to = {type_name(to)} is not supported: this runtime casts to the "
                 "bool, integer and float16/32/64 types")
    return Cast(dt.name)


def _cast_kernel(node, ctx):
    dtype = np.dtype(node.params.dtype)
    return lambda inputs, out=None: [inputs[0].astype(dtype)]


register("Cast", _parse_cast, _cast_kernel)


@dataclass(frozen=True)
class Dropout:
    """Dropout at inference: the identity (``mask``: the second output is asked for)."""

    mask: bool


def _parse_dropout(ctx):
    if ctx.attr("is_test", 1) == 0 and ctx.opset < 7:
        ctx.fail("is_test = 0 (training) is not supported")
    if ctx.has_input(2):
        t = ctx.consts[2]
        if t is None:
            ctx.fail("training_mode is computed at run time: only inference (false) is supported")
        if bool(np.asarray(t).reshape(-1)[0]):
            ctx.fail("training_mode = true is not supported: inference only (random dropout "
                     "would not match any other runtime)")
    return Dropout(len(ctx.outputs) > 1 and ctx.outputs[1] != "")


def _dropout_kernel(node, ctx):
    if node.params.mask:
        shape = ctx.in_shapes[0]
        return lambda inputs, out=None: [inputs[0], np.ones(shape, bool)]
    return lambda inputs, out=None: [inputs[0]]


register("Dropout", _parse_dropout, _dropout_kernel)
register("Identity", None, lambda node, ctx: (lambda inputs, out=None: [inputs[0]]))

del _op
