"""Convolution, pooling, fully connected and softmax."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError
from ._base import axis, float32, ints, register
from .conv import (ConvND, PoolND, auto_pad, conv_nd_kernel, conv_padding, parse_conv_nd,
                   parse_pool_nd, pool_nd_kernel, pool_output_side)

__all__ = ["Conv", "Pool", "Gemm", "Softmax", "conv_padding", "pool_output_side",
           "conv_kernel"]


def _pair(ctx, name, default):
    v = ctx.attr(name, default)
    v = tuple(int(t) for t in v)
    if len(v) != 2 or min(v) < 1:
        ctx.fail(f"{name} = {list(v)} is not allowed: two positive integers for a 2-D window")
    return v


# ---------------------------------------------------------------------------- Conv
@dataclass(frozen=True)
class Conv:
    """A 2-D convolution, NCHW input, OIHW constant weights (``weight``, ``bias``: input names).

    ``begin`` / ``end``: padding per spatial axis (auto_pad resolved); ``depthwise``: one input
    channel per group and a group per input channel (``multiplier`` = O / C outputs each)."""

    kernel: tuple
    strides: tuple
    dilations: tuple
    begin: tuple
    end: tuple
    group: int
    in_channels: int
    out_channels: int
    has_bias: bool

    @property
    def depthwise(self) -> bool:
        return self.group > 1 and self.group == self.in_channels and \
            self.out_channels % self.group == 0 and self.in_channels // self.group == 1

    @property
    def multiplier(self) -> int:
        return self.out_channels // self.group

    @property
    def symmetric(self) -> bool:
        return self.begin == self.end

    def out_sides(self, h, w):
        return tuple((size + b + e - ((k - 1) * d + 1)) // s + 1 for size, b, e, k, d, s in
                     zip((h, w), self.begin, self.end, self.kernel, self.dilations, self.strides))


def _parse_conv(ctx):
    x = ctx.shape(0, None, "input")
    if len(x) != 4 or ctx.runtime(1, 2):
        return parse_conv_nd(ctx)
    w = ctx.const(1, "W")
    if w.ndim != 4:
        ctx.fail(f"weights have shape {w.shape}: a 2-D convolution needs OIHW (4 dimensions)")
    float32(ctx, w, "weights")
    b = ctx.const(2, "B", required=False)
    if b is not None:
        float32(ctx, b, "bias")
        if np.asarray(b).size != w.shape[0]:
            ctx.fail(f"bias has {np.asarray(b).size} values for {w.shape[0]} output channels")
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        ctx.fail(f"kernel_shape = {list(kernel)} disagrees with the weights' {list(w.shape[2:])}")
    strides, dil = _pair(ctx, "strides", (1, 1)), _pair(ctx, "dilations", (1, 1))
    group = int(ctx.attr("group", 1))
    C, O = x[1], w.shape[0]
    if group < 1 or C % group or O % group or w.shape[1] != C // group:
        ctx.fail(f"group = {group} does not fit {C} input channels, weights {list(w.shape)} "
                 "(C and O must divide by group, and I = C / group)")
    begin, end = conv_padding(auto_pad(ctx), ctx.attr("pads"), x[2:], kernel, strides, dil)
    if min(begin + end) < 0:
        ctx.fail(f"pads = {begin + end} is not allowed: padding must be non-negative")
    p = Conv(kernel, strides, dil, tuple(begin), tuple(end), group, C, O, b is not None)
    if min(p.out_sides(*x[2:])) < 1:
        ctx.fail(f"kernel {kernel} does not fit the padded input {x[2]}x{x[3]}")
    return p


def conv_kernel(node, ctx, algorithm="auto", tile=None):
    """The convolution through :func:`tensorlayout.winograd.plan_conv2d` (weights prepared
    once); asymmetric padding is padded on the host first.  Returns ``(run, plan)``."""
    from ...winograd import plan_conv2d

    p = node.params
    x_shape = ctx.in_shapes[0]
    w = float32(ctx, ctx.consts[1], "weights")
    b = float32(ctx, ctx.consts[2], "bias").reshape(-1) if p.has_bias else None
    extra = None
    eff, padding = x_shape, p.begin
    if not p.symmetric:
        extra = ((0, 0), (0, 0), (p.begin[0], p.end[0]), (p.begin[1], p.end[1]))
        eff = (x_shape[0], x_shape[1], x_shape[2] + p.begin[0] + p.end[0],
               x_shape[3] + p.begin[1] + p.end[1])
        padding = (0, 0)
    try:
        plan = plan_conv2d(eff, w, b, stride=p.strides, padding=padding, dilation=p.dilations,
                           groups=p.group, algorithm=algorithm, tile=tile)
    except LayoutError as exc:
        ctx.fail(str(exc))

    def run(inputs, out=None):
        x = inputs[0]
        if extra is not None:
            x = np.pad(x, extra)
        return [plan(x)]
    return run, plan


def _conv_kernel(node, ctx):
    if isinstance(node.params, ConvND):
        return conv_nd_kernel(node, ctx)
    return conv_kernel(node, ctx, "direct")[0]


register("Conv", _parse_conv, _conv_kernel)


# ---------------------------------------------------------------------------- pooling
@dataclass(frozen=True)
class Pool:
    """MaxPool / AveragePool over 2-D windows.  ``extra``: rows and columns the ceil-mode
    windows reach past ``end`` (never counted); ``out``: the output's (H, W)."""

    is_max: bool
    kernel: tuple
    strides: tuple
    dilations: tuple
    begin: tuple
    end: tuple
    extra: tuple
    count_include_pad: bool
    out: tuple


def _parse_pool(ctx):
    x = ctx.shape(0, None, "input")
    if (len(x) != 4 or (ctx.op == "AveragePool" and ctx.attr("dilations") is not None
                        and any(int(d) != 1 for d in ctx.attr("dilations")))
            or len([o for o in ctx.outputs if o]) > 1 or ctx.attr("storage_order", 0)):
        return parse_pool_nd(ctx)
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != 2:
        ctx.fail(f"kernel_shape = {kernel} is not allowed: it must have 2 entries")
    kernel = tuple(int(k) for k in kernel)
    strides, dil = _pair(ctx, "strides", (1, 1)), _pair(ctx, "dilations", (1, 1))
    is_max = ctx.op == "MaxPool"
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    ap = auto_pad(ctx)
    H, W = x[2:]
    begin, end = conv_padding(ap, ctx.attr("pads"), (H, W), kernel, strides, dil)
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        ceil_mode = False  # the SAME rule already fixes the output size
    out = tuple(pool_output_side(size, k, s, d, b, e, ceil_mode) for size, k, s, d, b, e in
                zip((H, W), kernel, strides, dil, begin, end))
    if min(out) < 1:
        ctx.fail(f"kernel {kernel} does not fit the padded input {H}x{W}")
    extra = tuple(max(0, (o - 1) * s + (k - 1) * d + 1 - (size + b + e)) for o, s, k, d, size, b, e
                  in zip(out, strides, kernel, dil, (H, W), begin, end))
    return Pool(is_max, kernel, strides, dil, tuple(begin), tuple(end), extra,
                bool(ctx.attr("count_include_pad", 0)), out)


def _window_sum(xp, kernel, strides, dil, out_hw, reduce):
    """Reduce (np.maximum or np.add) over the kernel offsets of a padded 4-D array."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, strides, dil, out_hw
    acc = None
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dh: i * dh + (oh - 1) * sh + 1: sh,
                     j * dw: j * dw + (ow - 1) * sw + 1: sw]
            if acc is None:
                acc = np.array(win, copy=True)
            else:
                reduce(acc, win, out=acc)
    return acc


def _pad_hw(x, pad, value):
    """``np.pad`` of the last two axes with a constant, into one new array (faster than np.pad)."""
    (t, b), (l, r) = pad
    n, c, h, w = x.shape
    out = np.empty((n, c, h + t + b, w + l + r), x.dtype)
    if t or b or l or r:
        out[:, :, :t] = value
        out[:, :, t + h:] = value
        out[:, :, t:t + h, :l] = value
        out[:, :, t:t + h, l + w:] = value
    out[:, :, t:t + h, l:l + w] = x
    return out


def _pool_pads(p):
    return (p.begin[0], p.end[0] + p.extra[0]), (p.begin[1], p.end[1] + p.extra[1])


def pool_divisor(p, hw):
    """An AveragePool's (1, 1, OH, OW) reciprocals of each window's count of real (and, with
    ``count_include_pad``, padding) positions for an input of spatial size ``hw``; the
    ceil-mode extension never counts.  None for a MaxPool."""
    if p.is_max:
        return None
    H, W = hw
    pad = _pool_pads(p)
    mask = np.zeros((1, 1, H + sum(pad[0]), W + sum(pad[1])), np.float32)
    if p.count_include_pad:
        mask[:, :, :H + p.begin[0] + p.end[0], :W + p.begin[1] + p.end[1]] = 1
    else:
        mask[:, :, p.begin[0]:p.begin[0] + H, p.begin[1]:p.begin[1] + W] = 1
    div = _window_sum(mask, p.kernel, p.strides, p.dilations, p.out, np.add)
    np.maximum(div, 1, out=div)
    return (1 / div).astype(np.float32)


def _pool_kernel(node, ctx):
    p = node.params
    pad = _pool_pads(p)
    padded = any(sum(q) for q in pad)
    div = pool_divisor(p, ctx.in_shapes[0][2:])

    def run(inputs, out=None):
        x = inputs[0]
        if p.is_max:
            if x.dtype.kind == "f":
                low = -np.inf
            elif x.dtype.kind in "iu":
                low = np.iinfo(x.dtype).min
            else:
                low = False
            xp = _pad_hw(x, pad, low) if padded else x
            return [_window_sum(xp, p.kernel, p.strides, p.dilations, p.out, np.maximum)]
        xp = _pad_hw(x, pad, 0) if padded else x
        y = _window_sum(xp, p.kernel, p.strides, p.dilations, p.out, np.add)
        y *= div.astype(y.dtype, copy=False)
        return [y]
    return run


def _any_pool_kernel(node, ctx):
    if isinstance(node.params, PoolND):
        return pool_nd_kernel(node, ctx)
    return _pool_kernel(node, ctx)


register("MaxPool", _parse_pool, _any_pool_kernel)
register("AveragePool", _parse_pool, _any_pool_kernel)


# ---------------------------------------------------------------------------- matrices
@dataclass(frozen=True)
class Gemm:
    """Y = alpha * A' @ B' + beta * C (A' = A or A transposed, likewise B'); MatMul is the
    Gemm of alpha 1, no C.  ``matmul``: ONNX MatMul's N-D broadcasting semantics."""

    alpha: float = 1.0
    beta: float = 1.0
    trans_a: bool = False
    trans_b: bool = False
    matmul: bool = False


def _parse_gemm(ctx):
    if ctx.op == "MatMul":
        return Gemm(matmul=True)
    a = ctx.shape(0, 2, "A")
    b = ctx.shape(1, 2, "B")
    p = Gemm(float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0)),
             bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0)))
    k_a = a[0] if p.trans_a else a[1]
    k_b = b[1] if p.trans_b else b[0]
    if k_a != k_b:
        ctx.fail(f"A {list(a)} and B {list(b)} (transA {int(p.trans_a)}, transB {int(p.trans_b)}) "
                 "do not share their inner dimension")
    return p


def gemm_weight(p: Gemm, b) -> np.ndarray:
    """A constant B as the (K, N) float32 matrix that ``A' @ it`` needs, alpha folded in."""
    b = np.asarray(b, np.float32)
    b = np.ascontiguousarray(b.T if p.trans_b else b)
    return b if p.alpha == 1 else (b * np.float32(p.alpha)).astype(np.float32)


def _gemm_kernel(node, ctx):
    p = node.params
    if p.matmul:
        return lambda inputs, out=None: [np.matmul(inputs[0], inputs[1])]
    bconst = None if ctx.consts[1] is None else gemm_weight(p, ctx.consts[1])
    has_c = len(ctx.inputs) > 2 and ctx.inputs[2] != ""
    c = ctx.consts[2] if has_c else None
    c_rt = has_c and c is None
    if c is not None:
        c = (np.asarray(c, np.float32) * np.float32(p.beta)).astype(np.float32)
    alpha, beta = np.float32(p.alpha), np.float32(p.beta)

    def run(inputs, out=None):
        a = inputs[0].T if p.trans_a else inputs[0]
        if bconst is not None:
            y = a @ bconst
        else:
            b = inputs[1].T if p.trans_b else inputs[1]
            y = a @ b
            if alpha != 1:
                y *= alpha
        if c_rt:
            y = y + beta * inputs[2]
        elif c is not None:
            y += c
        return [y]
    return run


register("Gemm", _parse_gemm, _gemm_kernel)
register("MatMul", _parse_gemm, _gemm_kernel)


@dataclass(frozen=True)
class Softmax:
    """Softmax, LogSoftmax or Hardmax over ``axis``; ``coerced``: opsets below 13 flatten to
    2-D at ``axis`` first."""

    axis: int
    coerced: bool


def _parse_softmax(ctx):
    rank = len(ctx.shape(0))
    legacy = ctx.opset < 13
    return Softmax(axis(ctx, ctx.attr("axis", 1 if legacy else -1), rank), legacy)


def _softmax(x, ax, op):
    if op == "Hardmax":
        first = np.expand_dims(np.argmax(x, axis=ax), ax)
        return (np.arange(x.shape[ax]).reshape([-1 if i == ax % x.ndim else 1
                                                for i in range(x.ndim)]) == first).astype(x.dtype)
    m = x.max(axis=ax, keepdims=True)
    if op == "LogSoftmax":
        d = x - m
        return d - np.log(np.exp(d).sum(axis=ax, keepdims=True))
    e = np.exp(x - m)
    e /= e.sum(axis=ax, keepdims=True)
    return e


def _softmax_kernel(node, ctx):
    p = node.params
    op = node.op

    def run(inputs, out=None):
        x = inputs[0]
        if x.size == 0:
            return [x.copy()]
        if p.coerced:
            flat = x.reshape(int(np.prod(x.shape[:p.axis], dtype=np.int64)), -1)
            return [_softmax(flat, 1, op).reshape(x.shape)]
        return [_softmax(x, p.axis, op)]
    return run


register("Softmax", _parse_softmax, _softmax_kernel)
register("LogSoftmax", _parse_softmax, _softmax_kernel)
register("Hardmax", _parse_softmax, _softmax_kernel)
