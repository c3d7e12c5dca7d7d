"""The operators of the CPU runtime, in NumPy (NCHW, float32).

Each operator is a *builder*: ``build(node, ctx)`` reads and checks the node's attributes
and constant inputs once, at load time, and returns a function ``run(inputs, out=None)``
that maps the node's input arrays to its output arrays.  Anything the runtime cannot do
raises :class:`ModelError` naming the node, its op type and why, before anything runs.

Convolutions go through :func:`tensorlayout.winograd.plan_conv2d`: the plan (algorithm,
tile, transformed weights) is made once per layer here.

>>> sorted(BUILDERS)[:6]
['Add', 'AveragePool', 'BatchNormalization', 'Cast', 'Clip', 'Concat']
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import LayoutError

__all__ = ["ModelError", "BUILDERS", "OP_TYPES", "conv_padding", "pool_output_side"]


class ModelError(LayoutError):
    """A model the runtime cannot load or run, or an input it cannot take."""


class Ctx:
    """What a builder may know about its node: static shapes, constants, the opset."""

    def __init__(self, node, in_shapes, out_shapes, consts, opset):
        self.node = node
        self.in_shapes = in_shapes      # list of tuples (or None when the input is absent)
        self.out_shapes = out_shapes
        self.consts = consts            # list: np.ndarray for constant inputs, else None
        self.opset = opset
        self.conv_plan = None           # set by Conv
        self.info = {}                  # what the plan / profile shows about the node

    def fail(self, why: str):
        raise ModelError(f"node {self.node.name!r} ({self.node.op}): {why}")

    def attr(self, name, default=None):
        return self.node.attrs.get(name, default)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and self.node.inputs[i] != ""

    def const(self, i: int, what: str, required=True):
        """Constant input ``i`` as an array, or None if absent; a runtime tensor is an error."""
        if not self.has_input(i):
            if required:
                self.fail(f"input {i} ({what}) is missing")
            return None
        c = self.consts[i]
        if c is None:
            self.fail(f"input {i} ({what}) {self.node.inputs[i]!r} must be a constant "
                      "(an initializer or a foldable subgraph): it is computed at run time")
        return c


def _axis(ctx, axis, rank, name="axis"):
    if not -rank <= axis < rank:
        ctx.fail(f"{name} = {axis} is outside [{-rank}, {rank}) for a rank-{rank} input")
    return axis % rank


def _ints(v):
    return [int(t) for t in np.asarray(v).reshape(-1)]


# ---------------------------------------------------------------------------- elementwise
def _unary(fn):
    def build(node, ctx):
        return _prepare_unary(fn, node, ctx)
    return build


def _prepare_unary(fn, node, ctx):
    def run(inputs, out=None):
        return [fn(inputs[0], out)]
    return run


_ZERO, _ONE, _INF = np.float32(0), np.float32(1), np.float32(np.inf)


def _relu(x, out):
    # np.clip with float32 bounds is several times faster than np.maximum(x, 0) here, and
    # propagates NaN the same way
    if x.dtype == np.float32:
        return np.clip(x, _ZERO, _INF, out=out)
    return np.maximum(x, 0, out=out)


def _sigmoid(x, out):
    # 1 / (1 + exp(-x)) without overflow warnings for large |x|
    with np.errstate(over="ignore"):
        y = np.negative(x, out=out)
        np.exp(y, out=y)
        y += 1
        return np.reciprocal(y, out=y)


def _tanh(x, out):
    return np.tanh(x, out=out)


def _build_leaky(node, ctx):
    alpha = np.float32(ctx.attr("alpha", 0.01))

    def run(inputs, out=None):
        x = inputs[0]
        return [np.where(x >= 0, x, x * alpha).astype(np.float32, copy=False)]
    return run


def _build_hardsigmoid(node, ctx):
    alpha = np.float32(ctx.attr("alpha", 0.2))
    beta = np.float32(ctx.attr("beta", 0.5))

    def run(inputs, out=None):
        y = np.multiply(inputs[0], alpha, out=out)
        y += beta
        return [np.clip(y, _ZERO, _ONE, out=y)]
    return run


def _build_hardswish(node, ctx):
    def run(inputs, out=None):
        x = inputs[0]
        g = x * np.float32(1 / 6)
        g += np.float32(0.5)
        np.clip(g, _ZERO, _ONE, out=g)
        return [np.multiply(x, g, out=out)]
    return run


def _build_clip(node, ctx):
    if ctx.opset < 11 or "min" in node.attrs or "max" in node.attrs:
        lo, hi = ctx.attr("min", -np.inf), ctx.attr("max", np.inf)
    else:
        c_lo = ctx.const(1, "min", required=False)
        c_hi = ctx.const(2, "max", required=False)
        lo = -np.inf if c_lo is None else float(np.asarray(c_lo).reshape(-1)[0])
        hi = np.inf if c_hi is None else float(np.asarray(c_hi).reshape(-1)[0])
    ctx.info["range"] = [lo, hi]

    def run(inputs, out=None):
        x = inputs[0]
        if x.dtype.kind == "f":
            return [np.clip(x, x.dtype.type(lo), x.dtype.type(hi), out=out)]
        if lo == -np.inf and hi == np.inf:
            return [x.copy()]
        return [np.clip(x, lo if lo > -np.inf else None, hi if hi < np.inf else None)]
    return run


_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def _build_binary(node, ctx):
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


def _build_batchnorm(node, ctx):
    scale = ctx.const(1, "scale")
    bias = ctx.const(2, "B")
    mean = ctx.const(3, "input_mean")
    var = ctx.const(4, "input_var")
    if ctx.attr("training_mode", 0):
        ctx.fail("training_mode = 1 is not supported: inference uses the running statistics")
    if len([o for o in node.outputs if o]) > 1:
        ctx.fail("the running-statistics outputs (training) are not supported")
    eps = float(ctx.attr("epsilon", 1e-5))
    mul, add = batchnorm_affine(scale, bias, mean, var, eps)
    shape = ctx.in_shapes[0]
    if shape is None or len(shape) < 2:
        ctx.fail(f"input shape {shape} needs at least 2 dimensions (N, C, ...)")
    bshape = (1, -1) + (1,) * (len(shape) - 2)
    mul, add = mul.reshape(bshape), add.reshape(bshape)

    def run(inputs, out=None):
        y = np.multiply(inputs[0], mul, out=out)
        y += add
        return [y]
    return run


def batchnorm_affine(scale, bias, mean, var, eps):
    """BatchNormalization as y = x * mul + add per channel, in float64 then float32.

    >>> m, a = batchnorm_affine(np.ones(2), np.zeros(2), np.ones(2), np.full(2, 3.0), 1.0)
    >>> m.tolist(), a.tolist()
    ([0.5, 0.5], [-0.5, -0.5])
    """
    s = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    a = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * s
    return s.astype(np.float32), a.astype(np.float32)


# ---------------------------------------------------------------------------- convolution
def conv_padding(auto_pad, pads, in_sides, kernel, strides, dilations):
    """Begin and end padding per spatial axis from ONNX ``auto_pad`` / ``pads``.

    >>> conv_padding("SAME_UPPER", None, (7, 7), (3, 3), (2, 2), (1, 1))
    ([1, 1], [1, 1])
    >>> conv_padding("SAME_UPPER", None, (8, 8), (3, 3), (2, 2), (1, 1))
    ([0, 0], [1, 1])
    >>> conv_padding("NOTSET", [0, 1, 2, 3], (8, 8), (3, 3), (1, 1), (1, 1))
    ([0, 1], [2, 3])
    """
    n = len(in_sides)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(in_sides, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            b = small if auto_pad == "SAME_UPPER" else total - small
            begin.append(b)
            end.append(total - b)
        return begin, end
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    pads = [0] * (2 * n) if pads is None else list(pads)
    return pads[:n], pads[n:]


def _check_auto_pad(ctx):
    ap = ctx.attr("auto_pad", "NOTSET")
    if ap not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        ctx.fail(f"auto_pad = {ap!r} is not allowed: it must be NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    return ap


def _build_conv(node, ctx):
    from ..winograd import plan_conv2d

    x_shape = ctx.in_shapes[0]
    if x_shape is None or len(x_shape) != 4:
        ctx.fail(f"input shape {x_shape}: only 2-D convolutions (4-D NCHW input) are supported")
    w = ctx.const(1, "W")
    if w.ndim != 4:
        ctx.fail(f"weights have shape {w.shape}: a 2-D convolution needs OIHW (4 dimensions)")
    b = ctx.const(2, "B", required=False)
    w = _float32(ctx, w, "weights")
    b = None if b is None else _float32(ctx, b, "bias")
    kernel = tuple(ctx.attr("kernel_shape", w.shape[2:]))
    if tuple(kernel) != tuple(w.shape[2:]):
        ctx.fail(f"kernel_shape = {list(kernel)} disagrees with the weights' {list(w.shape[2:])}")
    strides = tuple(ctx.attr("strides", (1, 1)))
    dil = tuple(ctx.attr("dilations", (1, 1)))
    groups = int(ctx.attr("group", 1))
    ap = _check_auto_pad(ctx)
    begin, end = conv_padding(ap, ctx.attr("pads"), x_shape[2:], kernel, strides, dil)
    if min(begin + end) < 0:
        ctx.fail(f"pads = {begin + end} is not allowed: padding must be non-negative")
    symmetric = begin == end
    if symmetric:
        eff_shape, padding, extra = x_shape, tuple(begin), None
    else:
        extra = ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1]))
        eff_shape = (x_shape[0], x_shape[1], x_shape[2] + begin[0] + end[0], x_shape[3] + begin[1] + end[1])
        padding = (0, 0)
    try:
        plan = plan_conv2d(eff_shape, w, b, stride=strides, padding=padding, dilation=dil,
                           groups=groups, algorithm="auto")
    except LayoutError as exc:
        ctx.fail(str(exc))
    ctx.conv_plan = plan
    ctx.info.update(algorithm=plan.info.name, tile=plan.info.tile, reason=plan.info.reason,
                    groups=groups, stride=list(strides), pads=begin + end)

    def run(inputs, out=None):
        x = inputs[0]
        if extra is not None:
            x = np.pad(x, extra)
        return [plan(x)]
    return run


def _float32(ctx, a, what):
    a = np.asarray(a)
    if a.dtype == np.float32:
        return a
    if a.dtype.kind == "f":
        return a.astype(np.float32)
    ctx.fail(f"{what} have dtype {a.dtype}: the runtime computes in float32")


# ---------------------------------------------------------------------------- pooling
def pool_output_side(size, k, s, d, begin, end, ceil_mode):
    """Output length of a pooling window along one axis (ONNX / PyTorch rule for ceil mode:
    a window may not start inside the end padding).

    >>> pool_output_side(112, 3, 2, 1, 1, 1, False), pool_output_side(55, 3, 2, 1, 0, 0, True)
    (56, 27)
    >>> pool_output_side(6, 3, 2, 1, 0, 0, True)    # the ceil window starts at 4 < 6
    3
    """
    span = (k - 1) * d + 1
    num = size + begin + end - span
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + begin:
        out -= 1
    return out


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
    (t, b), (l, r) = pad[2], pad[3]
    n, c, h, w = x.shape
    out = np.empty((n, c, h + t + b, w + l + r), x.dtype)
    if t or b or l or r:
        out[:, :, :t] = value
        out[:, :, t + h:] = value
        out[:, :, t:t + h, :l] = value
        out[:, :, t:t + h, l + w:] = value
    out[:, :, t:t + h, l:l + w] = x
    return out


def _build_pool(node, ctx):
    x_shape = ctx.in_shapes[0]
    if x_shape is None or len(x_shape) != 4:
        ctx.fail(f"input shape {x_shape}: only 2-D pooling (4-D NCHW input) is supported")
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != 2:
        ctx.fail(f"kernel_shape = {kernel} is not allowed: it must have 2 entries")
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(ctx.attr("strides", (1, 1)))
    dil = tuple(ctx.attr("dilations", (1, 1)))
    if node.op == "AveragePool" and dil != (1, 1):
        ctx.fail(f"dilations = {list(dil)} is not supported for AveragePool")
    if node.op == "MaxPool" and ctx.attr("storage_order", 0) != 0:
        ctx.fail("storage_order = 1 is not supported")
    if node.op == "MaxPool" and len([o for o in node.outputs if o]) > 1:
        ctx.fail("the Indices output is not supported")
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    include = bool(ctx.attr("count_include_pad", 0))
    ap = _check_auto_pad(ctx)
    H, W = x_shape[2:]
    begin, end = conv_padding(ap, ctx.attr("pads"), (H, W), kernel, strides, dil)
    if ap in ("SAME_UPPER", "SAME_LOWER") and ceil_mode:
        ceil_mode = False  # the SAME rule already fixes the output size
    oh = pool_output_side(H, kernel[0], strides[0], dil[0], begin[0], end[0], ceil_mode)
    ow = pool_output_side(W, kernel[1], strides[1], dil[1], begin[1], end[1], ceil_mode)
    if min(oh, ow) < 1:
        ctx.fail(f"kernel {kernel} does not fit the padded input {H}x{W}")
    # room the last windows reach past the explicit end padding (ceil mode)
    need_h = (oh - 1) * strides[0] + (kernel[0] - 1) * dil[0] + 1
    need_w = (ow - 1) * strides[1] + (kernel[1] - 1) * dil[1] + 1
    ext_h = max(0, need_h - (H + begin[0] + end[0]))
    ext_w = max(0, need_w - (W + begin[1] + end[1]))
    pad = ((0, 0), (0, 0), (begin[0], end[0] + ext_h), (begin[1], end[1] + ext_w))
    ctx.info.update(kernel=list(kernel), stride=list(strides), pads=begin + end, ceil_mode=int(ceil_mode))
    is_max = node.op == "MaxPool"
    div = None
    if not is_max:
        # divisor per output position: count of real (and, with count_include_pad, padding)
        # positions in each window; the ceil-mode extension never counts
        mask = np.zeros((1, 1, H + sum(pad[2]), W + sum(pad[3])), np.float32)
        if include:
            mask[:, :, :H + begin[0] + end[0], :W + begin[1] + end[1]] = 1
        else:
            mask[:, :, begin[0]:begin[0] + H, begin[1]:begin[1] + W] = 1
        div = _window_sum(mask, kernel, strides, dil, (oh, ow), np.add)
        np.maximum(div, 1, out=div)
        div = (1 / div).astype(np.float32)

    def run(inputs, out=None):
        x = inputs[0]
        padded = any(sum(p) for p in pad)
        if is_max:
            xp = _pad_hw(x, pad, -np.inf) if padded else x
            return [_window_sum(xp, kernel, strides, dil, (oh, ow), np.maximum)]
        xp = _pad_hw(x, pad, 0) if padded else x
        y = _window_sum(xp, kernel, strides, dil, (oh, ow), np.add)
        y *= div
        return [y]
    return run


def _build_global_pool(node, ctx):
    shape = ctx.in_shapes[0]
    if shape is None or len(shape) < 3:
        ctx.fail(f"input shape {shape} needs spatial dimensions")
    axes = tuple(range(2, len(shape)))
    is_max = node.op == "GlobalMaxPool"

    def run(inputs, out=None):
        x = inputs[0]
        if is_max:
            return [x.max(axis=axes, keepdims=True)]
        return [x.mean(axis=axes, keepdims=True, dtype=np.float32)]
    return run


def _build_reduce_mean(node, ctx):
    shape = ctx.in_shapes[0]
    rank = len(shape)
    if ctx.has_input(1):
        axes = _ints(ctx.const(1, "axes"))
    else:
        axes = ctx.attr("axes")
    keep = bool(ctx.attr("keepdims", 1))
    if axes is None or len(axes) == 0:
        if ctx.attr("noop_with_empty_axes", 0):
            return lambda inputs, out=None: [inputs[0]]
        axes = list(range(rank))
    axes = tuple(sorted(_axis(ctx, int(a), rank, "axes") for a in axes))

    def run(inputs, out=None):
        x = inputs[0]
        return [np.mean(x, axis=axes, keepdims=keep, dtype=np.float32 if x.dtype == np.float32 else None)
                .astype(x.dtype, copy=False)]
    return run


# ---------------------------------------------------------------------------- matrices
def _build_gemm(node, ctx):
    alpha = np.float32(ctx.attr("alpha", 1.0))
    beta = np.float32(ctx.attr("beta", 1.0))
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    bconst = ctx.consts[1]
    if bconst is not None:
        bconst = _float32(ctx, bconst, "B")
        bconst = np.ascontiguousarray(bconst.T if tb else bconst)   # (K, N)
        if alpha != 1:
            bconst = (bconst * alpha).astype(np.float32)
    c = ctx.consts[2] if ctx.has_input(2) else None
    if ctx.has_input(2) and c is None:
        c_rt = True
    else:
        c_rt = False
        if c is not None:
            c = (np.asarray(c, np.float32) * beta).astype(np.float32)

    def run(inputs, out=None):
        a = inputs[0].T if ta else inputs[0]
        if bconst is not None:
            y = a @ bconst
        else:
            b = inputs[1].T if tb else inputs[1]
            y = a @ b
            if alpha != 1:
                y *= alpha
        if c_rt:
            y = y + beta * inputs[2]
        elif c is not None:
            y += c
        return [y]
    return run


def _build_matmul(node, ctx):
    def run(inputs, out=None):
        return [np.matmul(inputs[0], inputs[1])]
    return run


def _build_softmax(node, ctx):
    shape = ctx.in_shapes[0]
    rank = len(shape)
    legacy = ctx.opset < 13
    axis = _axis(ctx, int(ctx.attr("axis", 1 if legacy else -1)), rank)

    def softmax(x, ax):
        m = x.max(axis=ax, keepdims=True)
        e = np.exp(x - m)
        e /= e.sum(axis=ax, keepdims=True)
        return e

    def run(inputs, out=None):
        x = inputs[0]
        if legacy:
            flat = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
            return [softmax(flat, 1).reshape(x.shape)]
        return [softmax(x, axis)]
    return run


# ---------------------------------------------------------------------------- shapes
def _build_concat(node, ctx):
    axis = _axis(ctx, int(ctx.attr("axis", 0)), len(ctx.out_shapes[0] or ctx.in_shapes[0]))

    def run(inputs, out=None):
        return [np.concatenate([a for a in inputs if a is not None], axis=axis)]
    return run


def _build_split(node, ctx):
    shape = ctx.in_shapes[0]
    axis = _axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    n = len(node.outputs)
    if ctx.has_input(1):
        sizes = _ints(ctx.const(1, "split"))
    elif ctx.attr("split") is not None:
        sizes = [int(s) for s in ctx.attr("split")]
    else:
        parts = int(ctx.attr("num_outputs", n))
        step = -(-shape[axis] // parts)
        sizes = [min(step, shape[axis] - i * step) for i in range(parts)]
    if len(sizes) != n or sum(sizes) != shape[axis] or min(sizes) < 0:
        ctx.fail(f"split = {sizes} does not divide axis {axis} of length {shape[axis]} "
                 f"into {n} outputs")
    cuts = np.cumsum(sizes)[:-1].tolist()

    def run(inputs, out=None):
        return np.split(inputs[0], cuts, axis=axis)
    return run


def _build_slice(node, ctx):
    shape = ctx.in_shapes[0]
    rank = len(shape)
    if ctx.opset < 10 or "starts" in node.attrs:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes"), None
    else:
        starts = _ints(ctx.const(1, "starts"))
        ends = _ints(ctx.const(2, "ends"))
        axes = _ints(ctx.const(3, "axes")) if ctx.has_input(3) else None
        steps = _ints(ctx.const(4, "steps")) if ctx.has_input(4) else None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * rank
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        if sp == 0:
            ctx.fail("steps = 0 is not allowed")
        ax = _axis(ctx, int(ax), rank, "axes")
        # ONNX clamps the huge sentinel values exporters write (INT64_MAX / MIN)
        dim = shape[ax]
        st = st + dim if st < 0 else st
        en = en + dim if en < 0 else en
        if sp > 0:
            st, en = min(max(st, 0), dim), min(max(en, 0), dim)
        else:
            st, en = min(max(st, 0), dim - 1), min(max(en, -1), dim - 1)
        index[ax] = slice(st, None if en == -1 and sp < 0 else en, sp)
    index = tuple(index)

    def run(inputs, out=None):
        return [inputs[0][index]]
    return run


def reshape_target(shape, spec, allowzero=False):
    """Resolve an ONNX Reshape ``shape`` input (0 = copy, -1 = infer) against ``shape``.

    >>> reshape_target((2, 3, 4), [0, -1])
    (2, 12)
    """
    spec = [int(s) for s in spec]
    out = [shape[i] if (s == 0 and not allowzero) else s for i, s in enumerate(spec)]
    if out.count(-1) > 1:
        raise ModelError(f"shape = {spec} has more than one -1")
    total = int(np.prod(shape, dtype=np.int64))
    if -1 in out:
        known = int(np.prod([s for s in out if s != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise ModelError(f"shape = {spec} cannot hold the {total} elements of {tuple(shape)}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        raise ModelError(f"shape = {spec} cannot hold the {total} elements of {tuple(shape)}")
    return tuple(out)


def _build_reshape(node, ctx):
    spec = ctx.const(1, "shape")
    try:
        target = reshape_target(ctx.in_shapes[0], _ints(spec), bool(ctx.attr("allowzero", 0)))
    except ModelError as exc:
        ctx.fail(str(exc))

    def run(inputs, out=None):
        return [inputs[0].reshape(target)]
    return run


def _build_flatten(node, ctx):
    shape = ctx.in_shapes[0]
    axis = int(ctx.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        ctx.fail(f"axis = {ctx.attr('axis')} is outside [-{len(shape)}, {len(shape)}]")
    target = (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))

    def run(inputs, out=None):
        return [inputs[0].reshape(target)]
    return run


def _squeeze_axes(ctx):
    if ctx.has_input(1):
        return _ints(ctx.const(1, "axes"))
    axes = ctx.attr("axes")
    return None if axes is None else [int(a) for a in axes]


def _build_squeeze(node, ctx):
    shape = ctx.in_shapes[0]
    axes = _squeeze_axes(ctx)
    if axes is None:
        target = tuple(d for d in shape if d != 1)
    else:
        axes = {_axis(ctx, a, len(shape), "axes") for a in axes}
        for a in axes:
            if shape[a] != 1:
                ctx.fail(f"axis {a} has length {shape[a]}: only length-1 axes can be squeezed")
        target = tuple(d for i, d in enumerate(shape) if i not in axes)

    def run(inputs, out=None):
        return [inputs[0].reshape(target)]
    return run


def _build_unsqueeze(node, ctx):
    shape = ctx.in_shapes[0]
    axes = _squeeze_axes(ctx)
    if axes is None:
        ctx.fail("axes are missing")
    rank = len(shape) + len(axes)
    axes = sorted(_axis(ctx, a, rank, "axes") for a in axes)
    target = list(shape)
    for a in axes:
        target.insert(a, 1)
    target = tuple(target)

    def run(inputs, out=None):
        return [inputs[0].reshape(target)]
    return run


def _build_transpose(node, ctx):
    rank = len(ctx.in_shapes[0])
    perm = ctx.attr("perm")
    perm = tuple(range(rank))[::-1] if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(rank)):
        ctx.fail(f"perm = {list(perm)} is not a permutation of the {rank} axes")

    def run(inputs, out=None):
        return [np.ascontiguousarray(np.transpose(inputs[0], perm))]
    return run


def _build_pad(node, ctx):
    shape = ctx.in_shapes[0]
    rank = len(shape)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        ctx.fail(f"mode = {mode!r} is not supported: constant, reflect or edge")
    if ctx.opset < 11:
        pads, value = list(ctx.attr("pads")), float(ctx.attr("value", 0.0))
        axes = list(range(rank))
    else:
        pads = _ints(ctx.const(1, "pads"))
        cv = ctx.const(2, "constant_value", required=False)
        value = 0.0 if cv is None or np.asarray(cv).size == 0 else float(np.asarray(cv).reshape(-1)[0])
        axes = _ints(ctx.const(3, "axes")) if ctx.has_input(3) else list(range(rank))
        axes = [_axis(ctx, a, rank, "axes") for a in axes]
    k = len(axes)
    if len(pads) != 2 * k:
        ctx.fail(f"pads has {len(pads)} entries: it needs 2 x {k}")
    width = [(0, 0)] * rank
    crop = [slice(None)] * rank
    for i, a in enumerate(axes):
        b, e = pads[i], pads[i + k]
        width[a] = (max(b, 0), max(e, 0))
        crop[a] = slice(-min(b, 0) or None, shape[a] + min(e, 0) if e < 0 else None)
    crop = tuple(crop)
    kw = {"constant_values": value} if mode == "constant" else {}
    npmode = {"constant": "constant", "reflect": "reflect", "edge": "edge"}[mode]

    def run(inputs, out=None):
        x = inputs[0][crop]
        return [np.pad(x, width, mode=npmode, **kw)]
    return run


# ---------------------------------------------------------------------------- resize
_COORD_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_half_pixel_for_nn")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(mode, out_len, in_len, scale):
    i = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        return i * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return i / scale
    return (i + 0.5) / scale  # tf_half_pixel_for_nn


def _nearest_index(x, rule, in_len):
    if rule == "floor":
        idx = np.floor(x)
    elif rule == "ceil":
        idx = np.ceil(x)
    elif rule == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    else:
        idx = np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def _build_resize(node, ctx):
    shape = ctx.in_shapes[0]
    rank = len(shape)
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        ctx.fail(f"mode = {mode!r} is not supported: nearest or linear")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORD_MODES:
        ctx.fail(f"coordinate_transformation_mode = {coord!r} is not supported: one of "
                 + ", ".join(_COORD_MODES))
    rule = ctx.attr("nearest_mode", "round_prefer_floor")
    if rule not in _NEAREST_MODES:
        ctx.fail(f"nearest_mode = {rule!r} is not supported: one of " + ", ".join(_NEAREST_MODES))
    if ctx.attr("antialias", 0):
        ctx.fail("antialias = 1 is not supported")
    if ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        ctx.fail(f"keep_aspect_ratio_policy = {ctx.attr('keep_aspect_ratio_policy')!r} is not "
                 "supported: stretch only")
    if ctx.attr("axes") is not None:
        ctx.fail("the axes attribute is not supported")
    scales_in = 2 if ctx.opset >= 11 else 1
    scales = ctx.const(scales_in, "scales", required=False)
    sizes = ctx.const(3, "sizes", required=False) if ctx.opset >= 11 else None
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if sizes is not None and np.asarray(sizes).size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        ctx.fail("exactly one of scales and sizes must be given")
    if sizes is not None:
        out = _ints(sizes)
        scl = [o / s for o, s in zip(out, shape)]
    else:
        scl = [float(s) for s in np.asarray(scales).reshape(-1)]
        out = [int(math.floor(s * f)) for s, f in zip(shape, scl)]
    if len(out) != rank:
        ctx.fail(f"scales / sizes have {len(out)} entries for a rank-{rank} input")
    if mode == "linear" and (rank < 2 or any(o != s for o, s in zip(out[:-2], shape[:-2]))):
        ctx.fail("linear mode resizes the last two axes only (1-D or 2-D linear)")
    ctx.info.update(mode=mode, coordinate_transformation_mode=coord, out=out)
    if mode == "nearest":
        # an axis kept as it is (scale 1) maps each index to itself, whatever the mode
        index = tuple(
            (np.arange(s) if (o == s and f == 1) else
             _nearest_index(_source_coords(coord, o, s, f), rule, s)).reshape(
                [-1 if k == a else 1 for k in range(rank)])
            for a, (o, s, f) in enumerate(zip(out, shape, scl)))

        def run(inputs, out_=None):
            return [inputs[0][index]]
        return run

    weights = []
    for a in (rank - 2, rank - 1):
        x = np.clip(_source_coords(coord, out[a], shape[a], scl[a]), 0, shape[a] - 1)
        x0 = np.floor(x).astype(np.int64)
        x1 = np.minimum(x0 + 1, shape[a] - 1)
        frac = (x - x0).astype(np.float32)
        weights.append((x0, x1, frac))
    (h0, h1, fh), (w0, w1, fw) = weights
    fh = fh[:, None]

    def run(inputs, out_=None):
        x = inputs[0]
        top = x[..., h0, :]
        bot = x[..., h1, :]
        rows = top + (bot - top) * fh
        left = rows[..., w0]
        right = rows[..., w1]
        return [(left + (right - left) * fw).astype(x.dtype, copy=False)]
    return run


# ---------------------------------------------------------------------------- no-ops and shape ops
def _build_identity(node, ctx):
    if node.op == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
        shape = ctx.in_shapes[0]

        def run(inputs, out=None):
            return [inputs[0], np.ones(shape, bool)]
        return run
    return lambda inputs, out=None: [inputs[0]]


def _build_shape(node, ctx):
    shape = ctx.in_shapes[0]
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    value = np.array(shape, np.int64)[start:None if end is None else int(end)]
    return lambda inputs, out=None: [value.copy()]


def _build_gather(node, ctx):
    rank = len(ctx.in_shapes[0])
    axis = _axis(ctx, int(ctx.attr("axis", 0)), rank)
    dim = ctx.in_shapes[0][axis]

    def run(inputs, out=None):
        idx = np.asarray(inputs[1])
        idx = np.where(idx < 0, idx + dim, idx)
        return [np.take(inputs[0], idx, axis=axis)]
    return run


def _build_constant(node, ctx):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in node.attrs:
            v = node.attrs[key]
            dtype = np.float32 if key.startswith("value_float") else (
                np.int64 if key.startswith("value_int") else None)
            arr = np.asarray(v, dtype=dtype)
            return lambda inputs, out=None: [arr]
    ctx.fail("only value, value_float(s) and value_int(s) constants are supported")


def _build_constant_of_shape(node, ctx):
    value = node.attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)

    def run(inputs, out=None):
        return [np.full(_ints(inputs[0]), value[0], dtype=value.dtype)]
    return run


def _build_cast(node, ctx):
    import onnx.helper

    dtype = onnx.helper.tensor_dtype_to_np_dtype(int(ctx.attr("to")))

    def run(inputs, out=None):
        return [inputs[0].astype(dtype)]
    return run


BUILDERS = {
    "Conv": _build_conv,
    "BatchNormalization": _build_batchnorm,
    "Relu": _unary(_relu), "Sigmoid": _unary(_sigmoid), "Tanh": _unary(_tanh),
    "LeakyRelu": _build_leaky, "Clip": _build_clip, "HardSigmoid": _build_hardsigmoid,
    "HardSwish": _build_hardswish,
    "Add": _build_binary, "Sub": _build_binary, "Mul": _build_binary, "Div": _build_binary,
    "Concat": _build_concat, "Split": _build_split, "Slice": _build_slice,
    "Reshape": _build_reshape, "Flatten": _build_flatten, "Transpose": _build_transpose,
    "Squeeze": _build_squeeze, "Unsqueeze": _build_unsqueeze, "Pad": _build_pad,
    "MaxPool": _build_pool, "AveragePool": _build_pool,
    "GlobalAveragePool": _build_global_pool, "GlobalMaxPool": _build_global_pool,
    "ReduceMean": _build_reduce_mean,
    "Gemm": _build_gemm, "MatMul": _build_matmul, "Softmax": _build_softmax,
    "Resize": _build_resize,
    "Identity": _build_identity, "Dropout": _build_identity,
    "Shape": _build_shape, "Gather": _build_gather, "Constant": _build_constant,
    "ConstantOfShape": _build_constant_of_shape, "Cast": _build_cast,
}

#: Ops whose output may be written over their first input when that input dies there.
IN_PLACE = frozenset({"Relu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish",
                      "BatchNormalization", "Add", "Sub", "Mul", "Div"})

#: Ops whose outputs may share memory with their inputs (views).
VIEWS = frozenset({"Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                   "Slice", "Split", "Resize", "Gather"})

OP_TYPES = tuple(sorted(BUILDERS))
