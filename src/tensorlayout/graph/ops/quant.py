"""Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (per
tensor, per axis and blocked; integer, 4- and 2-bit and float8 types), and the integer
products MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

Quantizing divides in the scale's type (or ``precision``'s), rounds half to even, adds the
zero point and saturates to the target type; float8 targets are a saturating Cast instead
of the rounding.  Integer products accumulate exactly, in int64, and give int32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import axis, register
from .conv import ConvND, conv_nd, parse_conv_nd
from .elementwise import cast_array

__all__ = ["Quantize", "quantize", "dequantize"]


@dataclass(frozen=True)
class Quantize:
    """Quantize / DequantizeLinear: ``axis`` (raw) and ``block_size`` of the scale's
    granularity; ``dtype``: the target type's name (None: the zero point's, or uint8 /
    the scale's); ``precision``: the type the division is made in (None: the scale's);
    ``saturate``: float8 targets clamp to their largest finite value."""

    axis: int = 1
    block_size: int = 0
    dtype: str | None = None
    precision: str | None = None
    saturate: bool = True


def _dtype_attr(ctx, name):
    from .._onnx import np_dtype, type_name

    code = ctx.attr(name)
    if not code:
        return None
    dt = np_dtype(int(code))
    if dt is None:
        ctx.fail(f"{name} = {type_name(int(code))} is not supported")
    return dt.name


def _parse_quantize(ctx):
    return Quantize(int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0)),
                    _dtype_attr(ctx, "output_dtype"), _dtype_attr(ctx, "precision"),
                    bool(ctx.attr("saturate", 1)))


def _dtype(name):
    if name in np.sctypeDict:
        return np.dtype(name)
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


def _spread(fail, v, x_shape, ax, block):
    """A scale or zero point broadcast against x: scalar, per axis, or blocked along ``ax``."""
    v = np.asarray(v)
    rank = len(x_shape)
    if v.size == 1 and v.ndim <= 1:
        return v.reshape(())
    a = axis(fail, ax, rank)
    if v.ndim == 1 and rank != 1:
        if v.shape[0] != x_shape[a]:
            fail(f"a per-axis scale of {v.shape[0]} values for axis {a} of length {x_shape[a]}")
        return v.reshape([-1 if k == a else 1 for k in range(rank)])
    if v.ndim != rank:
        fail(f"scale of shape {v.shape} for an input of shape {tuple(x_shape)}")
    if block <= 0:
        block = -(-x_shape[a] // v.shape[a])
    rep = np.repeat(v, block, axis=a)
    if rep.shape[a] < x_shape[a]:
        fail(f"block_size = {block} with {v.shape[a]} scales does not cover axis {a} of "
             f"length {x_shape[a]}")
    return np.take(rep, np.arange(x_shape[a]), axis=a)


def _int_range(dt):
    import ml_dtypes

    info = ml_dtypes.iinfo(dt) if dt.kind == "V" else np.iinfo(dt)
    return int(info.min), int(info.max)


def quantize(x, scale, zero, dt, precision=None, saturate=True):
    """``x`` quantized to ``dt`` by ONNX's rule (scale and zero point already broadcast).

    >>> quantize(np.array([-1.0, 0.5, 1.5, 300.0], np.float32), np.float32(0.5), np.uint8(10),
    ...          np.dtype(np.uint8)).tolist()
    [8, 11, 13, 255]
    """
    prec = np.dtype(precision) if precision is not None else np.asarray(scale).dtype
    if prec.kind != "f" or prec.name == "bfloat16":
        prec = np.dtype(np.float32)
    q = np.asarray(x).astype(prec) / np.asarray(scale).astype(prec)
    if dt.name.startswith("float"):
        z = np.asarray(zero).astype(np.float32) if zero is not None else 0.0
        return cast_array(q.astype(np.float32) + z, dt, saturate)
    lo, hi = _int_range(dt)
    z = np.asarray(zero).astype(np.int64) if zero is not None else 0
    return np.clip(np.rint(q).astype(np.float64) + z, lo, hi).astype(np.int64).astype(dt)


def dequantize(x, scale, zero, dt):
    """``(x - zero) * scale`` in ``dt`` (the difference exact, in int64, for integer x)."""
    x = np.asarray(x)
    if x.dtype.kind in "iub" or x.dtype.name.startswith(("int", "uint")):
        d = x.astype(np.int64) - (np.asarray(zero).astype(np.int64) if zero is not None else 0)
    else:
        d = x.astype(np.float32) - (np.asarray(zero).astype(np.float32) if zero is not None
                                    else 0)
    wide = np.float64 if dt == np.float64 else np.float32
    return (d.astype(wide) * np.asarray(scale).astype(wide)).astype(dt)


def _quantize_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x, scale = inputs[0], inputs[1]
        zero = inputs[2] if len(inputs) > 2 else None
        dt = np.asarray(zero).dtype if zero is not None else _dtype(p.dtype or "uint8")
        s = _spread(ctx.fail, scale, x.shape, p.axis, p.block_size)
        z = None if zero is None else _spread(ctx.fail, zero, x.shape, p.axis, p.block_size)
        return [quantize(x, s, z, dt, p.precision, p.saturate)]
    return run


def _dequantize_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        x, scale = inputs[0], inputs[1]
        zero = inputs[2] if len(inputs) > 2 else None
        dt = _dtype(p.dtype) if p.dtype else np.asarray(scale).dtype
        s = _spread(ctx.fail, scale, x.shape, p.axis, p.block_size)
        z = None if zero is None else _spread(ctx.fail, zero, x.shape, p.axis, p.block_size)
        return [dequantize(x, s, z, dt)]
    return run


def _dynamic_quantize_kernel(node, ctx):
    def run(inputs, out=None):
        x = inputs[0].astype(np.float32)
        lo = min(0.0, float(x.min(initial=0)))
        hi = max(0.0, float(x.max(initial=0)))
        scale = np.float32((hi - lo) / 255)
        if scale == 0:
            return [np.zeros(x.shape, np.uint8), scale.reshape(()), np.array(0, np.uint8)]
        zero = np.uint8(np.clip(np.rint(0 - lo / scale), 0, 255))
        y = np.clip(np.rint(x / scale) + zero, 0, 255).astype(np.uint8)
        return [y, np.array(scale, np.float32), np.array(zero, np.uint8)]
    return run


register("QuantizeLinear", _parse_quantize, _quantize_kernel, since=10, dynamic=True,
         any_dtype=True)
register("DequantizeLinear", _parse_quantize, _dequantize_kernel, since=10, dynamic=True,
         any_dtype=True)
register("DynamicQuantizeLinear", None, _dynamic_quantize_kernel, since=11, dynamic=True)


# ---------------------------------------------------------------------------- integer products
def _zero_shift(fail, a, zero, along):
    """``a - zero`` in int64; ``zero`` a scalar or one value per entry of axis ``along``."""
    a = np.asarray(a).astype(np.int64)
    if zero is None:
        return a
    z = np.asarray(zero).astype(np.int64)
    if z.size == 1:
        return a - z.reshape(())
    shape = [1] * a.ndim
    shape[along] = -1
    if z.size != a.shape[along]:
        fail(f"a zero point of {z.size} values for {a.shape[along]} along axis {along}")
    return a - z.reshape(shape)


def _matmul_integer_kernel(node, ctx):
    def run(inputs, out=None):
        get = (lambda i: inputs[i] if i < len(inputs) else None)
        a = _zero_shift(ctx.fail, inputs[0], get(2), max(inputs[0].ndim - 2, 0))
        b = _zero_shift(ctx.fail, inputs[1], get(3), inputs[1].ndim - 1)
        return [np.matmul(a, b).astype(np.int32)]
    return run


def _per(v, rank, along):
    """A scale as a scalar or one value per entry of axis ``along`` (float64)."""
    v = np.asarray(v, np.float64)
    if v.size == 1:
        return v.reshape(())
    shape = [1] * rank
    shape[along] = -1
    return v.reshape(shape)


def _qlinear_matmul_kernel(node, ctx):
    def run(inputs, out=None):
        a, a_s, a_z, b, b_s, b_z, y_s, y_z = inputs
        rows, cols = max(a.ndim - 2, 0), b.ndim - 1
        acc = np.matmul(_zero_shift(ctx.fail, a, a_z, rows), _zero_shift(ctx.fail, b, b_z, cols))
        real = acc * _per(a_s, a.ndim, rows) * _per(b_s, acc.ndim, acc.ndim - 1)
        return [quantize(real, y_s, y_z, np.asarray(y_z).dtype)]
    return run


register("MatMulInteger", None, _matmul_integer_kernel, since=10, dynamic=True)
register("QLinearMatMul", None, _qlinear_matmul_kernel, since=10, dynamic=True)


def _conv_integer_kernel(node, ctx):
    p: ConvND = node.params

    def run(inputs, out=None):
        get = (lambda i: inputs[i] if i < len(inputs) else None)
        x = _zero_shift(ctx.fail, inputs[0], get(2), 1)
        w = _zero_shift(ctx.fail, inputs[1], get(3), 0)
        return [conv_nd(x, w, None, p).astype(np.int32)]
    return run


def _qlinear_conv_kernel(node, ctx):
    p: ConvND = node.params

    def run(inputs, out=None):
        x, x_s, x_z, w, w_s, w_z, y_s, y_z = inputs[:8]
        b = inputs[8] if len(inputs) > 8 else None
        xi = _zero_shift(ctx.fail, x, x_z, 1)
        wi = _zero_shift(ctx.fail, w, w_z, 0)
        acc = conv_nd(xi, wi, None if b is None else np.asarray(b, np.int64), p)
        ws = np.asarray(w_s, np.float64).reshape((1, -1) + (1,) * (acc.ndim - 2)) \
            if np.asarray(w_s).size > 1 else np.float64(np.asarray(w_s).reshape(-1)[0])
        real = acc.astype(np.float64) * float(np.asarray(x_s).reshape(-1)[0]) * ws
        return [quantize(real, y_s, y_z, np.asarray(y_z).dtype)]
    return run


def _parse_conv_integer(ctx):
    return parse_conv_nd(ctx, w_index=1, b_index=None)


def _parse_qlinear_conv(ctx):
    return parse_conv_nd(ctx, w_index=3, b_index=8)


register("ConvInteger", _parse_conv_integer, _conv_integer_kernel, since=10)
register("QLinearConv", _parse_qlinear_conv, _qlinear_conv_kernel, since=10)
