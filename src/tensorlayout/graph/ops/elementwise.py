"""Element-wise ops: activations (one parameter form every backend fuses), binary
arithmetic, BatchNormalization as a per-channel affine map, Cast, Identity and Dropout."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._base import register, storage_only

__all__ = ["Activation", "ACTIVATIONS", "BatchNorm", "Cast", "Dropout", "batchnorm_affine",
           "activation_numpy", "cast_array"]

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
    register(_op, _parse_activation, _activation_kernel, since=14 if _op == "HardSwish" else 1,
             dynamic=True)


# ---------------------------------------------------------------------------- binary
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def integer_divide(ctx, a, b):
    """ONNX's integer Div: the quotient truncated toward zero, in integer arithmetic (a float
    quotient loses the low digits of 64-bit values); a zero divisor is refused on the run.

    >>> integer_divide(None, np.array([7, -7, 2**62 + 1]), np.array([2, 2, 1])).tolist()
    [3, -3, 4611686018427387905]
    """
    if (b == 0).any():
        ctx.fail("an integer divisor is 0")
    q = np.floor_divide(a, b)
    # floor and truncation differ where the division is inexact and the signs differ
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return (q + fix).astype(np.result_type(a, b), copy=False)


def _binary_kernel(node, ctx):
    fn = _BINARY[node.op]
    integer_div = node.op == "Div"

    def run(inputs, out=None):
        a, b = inputs
        if integer_div and a.dtype.kind in "iu" and b.dtype.kind in "iu":
            return [integer_divide(ctx, a, b)]
        r_dtype = np.result_type(a, b)
        if out is not None and out.shape == np.broadcast_shapes(a.shape, b.shape) \
                and out.dtype == r_dtype:
            return [fn(a, b, out=out)]
        return [fn(a, b)]
    return run


for _op in _BINARY:
    register(_op, None, _binary_kernel, dynamic=True)


# ---------------------------------------------------------------------------- BatchNormalization
@dataclass(frozen=True)
class BatchNorm:
    """BatchNormalization as y = x * mul + add per channel (float32, from float64); ``mul`` and
    ``add`` are None when the statistics are computed at run time.  ``training``: the batch's
    own statistics normalize it (training_mode = 1), and the running statistics are updated
    with ``momentum`` when those outputs are asked for."""

    epsilon: float
    channels: int
    mul: np.ndarray | None = field(compare=False, repr=False)
    add: np.ndarray | None = field(compare=False, repr=False)
    training: bool = False
    momentum: float = 0.9

    @property
    def host_only(self) -> str:
        if self.training:
            return "it normalizes with the batch's statistics (training_mode = 1)"
        return "" if self.mul is not None else "its statistics are computed at run time"


def batchnorm_affine(scale, bias, mean, var, eps):
    """BatchNormalization as y = x * mul + add per channel, in float64 then float32.

    >>> m, a = batchnorm_affine(np.ones(2), np.zeros(2), np.ones(2), np.full(2, 3.0), 1.0)
    >>> m.tolist(), a.tolist()
    ([0.5, 0.5], [-0.5, -0.5])
    """
    s = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    a = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * s
    return s.astype(np.float32), a.astype(np.float32)


_BN_INPUTS = ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var"))


def _check_stats(fail, stats, channels):
    for (i, what), s in zip(_BN_INPUTS, stats):
        if np.asarray(s).size != channels:
            fail(f"input {i} ({what}) has {np.asarray(s).size} values for {channels} channels")


def _parse_batchnorm(ctx):
    if ctx.opset < 9 and not ctx.attr("spatial", 1):
        ctx.fail("spatial = 0 (statistics per element) is not supported")
    training = bool(ctx.attr("training_mode", 0))
    if len([o for o in ctx.outputs if o]) > 1 and not training:
        ctx.fail("the running-statistics outputs are computed in training mode only "
                 "(training_mode = 1)")
    shape = ctx.shape(0)
    if len(shape) < 2:
        ctx.fail(f"input shape {shape} needs at least 2 dimensions (N, C, ...)")
    for i, what in _BN_INPUTS:
        if not ctx.has_input(i):
            ctx.fail(f"input {i} ({what}) is missing")
    eps = float(ctx.attr("epsilon", 1e-5))
    momentum = float(ctx.attr("momentum", 0.9))
    if training or ctx.runtime(1, 2, 3, 4):
        for i, what in _BN_INPUTS:
            s = ctx.in_shapes[i]
            if s is not None and int(np.prod(s)) != shape[1]:
                ctx.fail(f"input {i} ({what}) has shape {s} for {shape[1]} channels")
        return BatchNorm(eps, shape[1], None, None, training, momentum)
    stats = [ctx.consts[i] for i, _ in _BN_INPUTS]
    _check_stats(ctx.fail, stats, shape[1])
    mul, add = batchnorm_affine(*stats, eps)
    return BatchNorm(eps, shape[1], mul, add, False, momentum)


def _batchnorm_kernel(node, ctx):
    p = node.params
    bshape = (1, -1) + (1,) * (len(ctx.in_shapes[0]) - 2)
    if p.mul is not None:
        mul, add = p.mul.reshape(bshape), p.add.reshape(bshape)

        def run(inputs, out=None):
            y = np.multiply(inputs[0], mul, out=out)
            y += add
            return [y]
        return run
    axes = tuple(i for i in range(len(ctx.in_shapes[0])) if i != 1)
    outputs = len(node.outputs)

    def run_stats(inputs, out=None):
        x = inputs[0]
        stats = [np.asarray(a) for a in inputs[1:5]]
        _check_stats(ctx.fail, stats, p.channels)
        scale, bias, mean, var = (np.asarray(a, np.float64).reshape(bshape) for a in stats)
        xd = x.astype(np.float64)
        if p.training:
            cur_mean = xd.mean(axis=axes, keepdims=True)
            cur_var = xd.var(axis=axes, keepdims=True)
            y = (xd - cur_mean) / np.sqrt(cur_var + p.epsilon) * scale + bias
            outs = [y.astype(x.dtype)]
            for run_stat, cur in ((mean, cur_mean), (var, cur_var)):
                new = run_stat * p.momentum + cur * (1 - p.momentum)
                outs.append(new.reshape(stats[2].shape).astype(stats[2].dtype))
            return outs[:outputs]
        y = (xd - mean) / np.sqrt(var + p.epsilon) * scale + bias
        return [y.astype(x.dtype)]
    return run_stats


register("BatchNormalization", _parse_batchnorm, _batchnorm_kernel)


# ---------------------------------------------------------------------------- Cast
@dataclass(frozen=True)
class Cast:
    """Cast to ``dtype`` (a NumPy or ml_dtypes type name); ``saturate``: float8 targets clamp
    out-of-range values to their largest finite value (ONNX's default); ``round_mode``: how
    float8e8m0 rounds (up, down, nearest)."""

    dtype: str
    saturate: bool = True
    round_mode: str = "up"


def _float8_max(dtype):
    import ml_dtypes

    return float(ml_dtypes.finfo(dtype).max)


def _to_e8m0(x, dtype, saturate, round_mode):
    """float8e8m0 (powers of two 2^-127 .. 2^127, one NaN code 0xFF) by ONNX's rounding rules."""
    xf = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m, e = np.frexp(np.abs(xf))           # |x| = m * 2^e, m in [0.5, 1)
        k = e.astype(np.int64) - 1            # floor(log2 |x|)
        frac = m * 2                          # |x| / 2^k in [1, 2)
        if round_mode == "up":
            k = k + (frac > 1)
        elif round_mode == "nearest":
            k = k + (frac >= 1.5)
        bad = np.isnan(xf)
        if saturate:
            k = np.where(np.isinf(xf), 127, k)
            k = np.where(xf == 0, -127, k)
            k = np.clip(k, -127, 127)
        else:
            bad = bad | np.isinf(xf) | (xf == 0) | (k < -127) | (k > 127)
    code = np.where(bad, 255, np.clip(k, -127, 127) + 127).astype(np.uint8)
    return code.view(dtype)


def cast_array(x, dtype, saturate=True, round_mode="up"):
    """``x`` as ``dtype`` by ONNX's Cast rules: float8 targets saturate (or give NaN / Inf when
    ``saturate`` is false), float8e8m0 rounds by ``round_mode``; other types as NumPy casts.

    >>> import ml_dtypes
    >>> y = cast_array(np.array([1e6, -np.inf, np.nan], np.float32), ml_dtypes.float8_e4m3fn)
    >>> y.dtype.name, y.astype(np.float32).tolist()
    ('float8_e4m3fn', [448.0, -448.0, nan])
    """
    dtype = np.dtype(dtype)
    x = np.asarray(x)
    if dtype.name == "float8_e8m0fnu":
        return _to_e8m0(x, dtype, saturate, round_mode)
    if dtype.name.startswith("float8") and saturate:
        wide = x.astype(np.float64 if x.dtype.kind in "iub" or x.dtype.itemsize > 4
                        else np.float32)
        top = _float8_max(dtype)
        return np.clip(wide, -top, top).astype(dtype)
    if dtype.kind == "b" and storage_only(x.dtype):
        x = x.astype(np.float32)
    return x.astype(dtype)


def _cast_target(ctx, dt, what):
    if dt is None:
        ctx.fail(f"{what} is not supported: this runtime casts to the bool, integer, float and "
                 "ml_dtypes' float8 / bfloat16 / 4-bit types")
    saturate = bool(ctx.attr("saturate", 1))
    round_mode = ctx.attr("round_mode", "up")
    if round_mode not in ("up", "down", "nearest"):
        ctx.fail(f"round_mode = {round_mode!r} is not allowed: up, down or nearest")
    return Cast(dt.name, saturate, round_mode)


def _parse_cast(ctx):
    from .._onnx import np_dtype, type_name

    to = int(ctx.attr("to", 0))
    return _cast_target(ctx, np_dtype(to), f"to = {type_name(to)}")


def _parse_cast_like(ctx):
    dt = ctx.in_dtypes[1] if len(ctx.in_dtypes) > 1 else None
    return _cast_target(ctx, dt, "the type of input 1 (target_type)")


def _cast_kernel(node, ctx):
    p = node.params
    dtype = np.dtype(p.dtype) if p.dtype in np.sctypeDict else _ml_dtype(p.dtype)
    return lambda inputs, out=None: [cast_array(inputs[0], dtype, p.saturate, p.round_mode)]


def _ml_dtype(name):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


register("Cast", _parse_cast, _cast_kernel, dynamic=True, any_dtype=True)
register("CastLike", _parse_cast_like, _cast_kernel, since=15, dynamic=True, any_dtype=True)


# ---------------------------------------------------------------------------- Identity, Dropout
@dataclass(frozen=True)
class Dropout:
    """Dropout at inference: the identity (``mask``: the second output is asked for, all
    true).  ``runtime``: the ratio or training_mode arrive at run time; a run in training mode
    with a ratio above 0 is refused then (random dropout matches no other runtime)."""

    mask: bool
    runtime: bool = False

    @property
    def host_only(self) -> str:
        return "its ratio or training_mode is computed at run time" if self.runtime else ""


_TRAINING = ("training_mode = true with ratio > 0 is not supported: inference only (random "
             "dropout would not match any other runtime)")


def _parse_dropout(ctx):
    mask = len(ctx.outputs) > 1 and ctx.outputs[1] != ""
    if ctx.opset < 12 or not ctx.has_input(2):
        return Dropout(mask)
    if ctx.runtime(1, 2):
        return Dropout(mask, True)
    ratio = ctx.consts[1] if ctx.has_input(1) else None
    ratio = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    if bool(np.asarray(ctx.consts[2]).reshape(-1)[0]) and ratio != 0:
        ctx.fail(_TRAINING)
    return Dropout(mask)


def _dropout_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x = inputs[0]
        if p.runtime and inputs[2] is not None and bool(np.asarray(inputs[2]).reshape(-1)[0]):
            ratio = 0.5 if len(inputs) < 2 or inputs[1] is None else \
                float(np.asarray(inputs[1]).reshape(-1)[0])
            if ratio != 0:
                ctx.fail(_TRAINING)
        return [x, np.ones(x.shape, bool)] if p.mask else [x]
    return run


register("Dropout", _parse_dropout, _dropout_kernel, dynamic=True)
register("Identity", None, lambda node, ctx: (lambda inputs, out=None: [inputs[0]]),
         dynamic=True, any_dtype=True)

del _op
