"""The CPU backend's step kernels: each schedule step's ``run(inputs, out=None)`` built once
from its node (the depthwise, 1 x 1, fully connected, pooling, plane and im2col / shifted
kernels of :mod:`.cpu_kernels`, their NumPy fallbacks while the compiled kernels are not
ready, the epilogue after an engine's step), with ``run.calls`` where the step can run
bound (:mod:`.cpu_bound`); tensors in the blocked layout go in and out as blocks."""

from __future__ import annotations

import functools

import numpy as np

from ..graph.ops.nn import gemm_weight, pool_divisor
from ..schedule.cpu import plane_scale_input
from . import cpu_kernels as kernels
from .cpu_twins import from_blocked, to_blocked

__all__ = ["depthwise_step", "pointwise_step", "fc_step", "pool_step", "planes_step",
           "im2col_step", "with_epilogue", "work", "POOL_WORK", "GEMV_WORK"]


def _once(make, *args):
    """``get()``: ``make(*args)``, built on the first call (a compiled kernel's object is made
    once the kernels are ready, by whichever of a step's run or its binding comes first)."""
    return functools.lru_cache(maxsize=None)(lambda: make(*args))


def depthwise_step(node, ctx, act, xb=False, yb=False):
    """The backend's depthwise loops (bias and activation in the same pass); ``xb``, ``yb``:
    the input, the output in the blocked layout."""
    p = node.params
    w = np.ascontiguousarray(ctx.consts[1], np.float32)
    b = (np.ascontiguousarray(ctx.consts[2], np.float32).reshape(-1) if p.has_bias
         else np.zeros(w.shape[0], np.float32))
    out_shape = ctx.out_shapes[0]
    args = (*p.strides, *p.begin, *p.dilations, p.multiplier, *act)
    cl, one = None, p.multiplier == 1
    if xb or yb or (one and kernels.CHANNELS_LAST_BELOW <= out_shape[3] < kernels.BLOCKED_BELOW):
        # blocks of 16 channels: one vector per position and tap
        cl = _once(kernels.DepthwiseBlocked, w, b, args, ctx.in_shapes[0], out_shape[2:], xb, yb)
    elif one and out_shape[3] < kernels.CHANNELS_LAST_BELOW:      # the channels' vectors
        cl = _once(kernels.DepthwiseChannelsLast, w, b, args, ctx.in_shapes[0], out_shape[2:])

    def run(inputs, out=None):
        x = np.ascontiguousarray(inputs[0])
        if cl is not None and x.dtype == np.float32 and kernels.ready():
            return [cl()(x)]
        if xb:
            x = from_blocked(x, ctx.in_shapes[0][1])
        y = np.empty(out_shape, np.float32)
        y = kernels.depthwise(x, w, b, y, args)
        return [to_blocked(y) if yb else y]

    def calls(ins, y, nt):
        if cl is not None:
            return cl().calls(ins[0], y, nt)
        return kernels.depthwise_calls(ins[0], w, b, y, args, nt)
    run.calls = calls
    return run


def pointwise_step(node, ctx, bias, act, residual, xb=False, yb=False):
    """A 1x1 convolution as GEMMs of the weights by the input's (C, H·W) planes, the bias,
    the residual (the last input) and the activation applied block by block: the backend's
    :class:`~tensorlayout.backends.cpu_kernels.Pointwise` on the native workers when its
    kernels are ready (:class:`~tensorlayout.backends.cpu_kernels.PointwiseBlocked` where
    ``xb`` or ``yb`` puts the input or the output in the blocked layout), else NumPy's
    matmul and the NumPy epilogue."""
    p = node.params
    w = np.ascontiguousarray(np.asarray(ctx.consts[1], np.float32).reshape(p.out_channels, -1))
    sh, sw = p.strides
    N, O, OH, OW = ctx.out_shapes[0]
    if xb or yb:
        gemm = _once(kernels.PointwiseBlocked, w, bias, act, (N, w.shape[1], OH, OW), xb, yb)
    else:
        gemm = _once(kernels.Pointwise, w, bias, act, (N, w.shape[1], OH, OW))

    def run(inputs, out=None):
        x = inputs[0]
        if (sh, sw) != (1, 1):
            x = x[:, :, ::sh, ::sw]
        x = np.ascontiguousarray(x, np.float32)
        res = None if residual is None else np.ascontiguousarray(inputs[-1], np.float32)
        if kernels.ready():
            return [gemm()(x, res)]
        if xb:
            x = from_blocked(x, w.shape[1])
        if yb and res is not None:
            res = from_blocked(res, O)
        y = np.empty((N, O, OH, OW), np.float32)
        y3 = y.reshape(N, O, OH * OW)
        np.matmul(w, x.reshape(N, -1, OH * OW), out=y3)
        kernels.epilogue(y3, bias, None if res is None else res.reshape(y3.shape), act)
        return [to_blocked(y) if yb else y]

    def calls(ins, y, nt):
        return gemm().calls(ins[0], y, ins[-1] if residual is not None else None, nt)
    if (sh, sw) == (1, 1):
        run.calls = calls
    return run


def fc_step(node, ctx, act):
    """A fully connected layer (Gemm or MatMul of (M, K) by constant weights) as the
    backend's :class:`~tensorlayout.backends.cpu_kernels.Pointwise` GEMM of the weights
    (N, K) by the input's transpose, C and the activation in its epilogue; NumPy while the
    kernels compile."""
    p = node.params
    wk = gemm_weight(p, ctx.consts[1])                       # (K, N), alpha folded in
    w = np.ascontiguousarray(wk.T)                           # (N, K)
    M, N = ctx.out_shapes[0]
    c = ctx.consts[2] if len(ctx.inputs) > 2 and ctx.inputs[2] else None
    bias = None
    if c is not None:
        bias = np.ascontiguousarray(np.broadcast_to(np.asarray(c, np.float32).reshape(-1)
                                                    * np.float32(p.beta), (N,)), np.float32)
    gemm = _once(kernels.Pointwise, w, bias, act, (1, w.shape[1], M, 1))

    def run(inputs, out=None):
        x = np.ascontiguousarray(inputs[0], np.float32)
        if not kernels.ready():
            y = x @ wk
            if bias is not None:
                y += bias
            kernels.activate_numpy(y, *act)
            return [y]
        xt = x.reshape(-1, 1) if M == 1 else np.ascontiguousarray(x.T)
        y = gemm()(xt)                                      # (1, N, M, 1)
        return [y.reshape(1, N) if M == 1 else np.ascontiguousarray(y.reshape(N, M).T)]

    def calls(ins, y, nt):
        return gemm().calls(ins[0].reshape(-1, 1), y.reshape(1, N, 1, 1), None, nt)
    if M == 1 and len(ctx.in_shapes[0]) == 2:
        run.calls = calls
    return run


def pool_step(node, ctx, fallback, yb=False, xb=False):
    """A 2-D MaxPool or AveragePool of float32 on the native workers
    (:class:`~tensorlayout.backends.cpu_kernels.Pool2d`; ``yb``, ``xb``: its output, its
    input in the blocked layout); ``fallback`` (the graph's NumPy kernel) while the kernels
    compile."""
    x_shape = ctx.in_shapes[0]
    pool = _once(kernels.Pool2d, node.params, x_shape, pool_divisor(node.params, x_shape[2:]),
                 yb, xb)

    def run(inputs, out=None):
        x = inputs[0]
        if not (kernels.ready() and x.dtype == np.float32):
            ins = [from_blocked(x, x_shape[1])] + list(inputs[1:]) if xb else inputs
            y = fallback(ins, out)
            return [to_blocked(y[0])] if yb else y
        return [pool()(np.ascontiguousarray(x))]

    def calls(ins, y, nt):
        return pool().calls(ins[0], y, nt)
    run.calls = calls
    return run


def affine_step(node, ctx, act, kernel):
    """A BatchNormalization of float32 with constant statistics as a map per channel,
    y = act(x · mul + add) (the graph's ``mul`` and ``add``), on the native workers (the
    rows entry, a row per (image, channel)); ``kernel`` (the graph's NumPy kernel) and the
    activation after it while the kernels compile."""
    fallback = with_epilogue(kernel, None, act, None) if act[0] else kernel
    mul = np.ascontiguousarray(node.params.mul, np.float32).reshape(-1)
    add = np.ascontiguousarray(node.params.add, np.float32).reshape(-1)
    C = ctx.in_shapes[0][1]

    def calls(ins, y, nt):
        x = ins[0]
        rows = x.shape[0] * C
        return kernels.rows_calls(x.reshape(rows, -1), y.reshape(rows, -1), mul, 2, nt,
                                  (C, add, act))

    def run(inputs, out=None):
        x = inputs[0]
        if not (kernels.ready() and x.dtype == np.float32):
            return fallback(inputs, out)
        x = np.ascontiguousarray(x)
        y = np.empty_like(x)
        kernels.run_calls(calls([x], y, kernels.threads()))
        return [y]
    run.calls = calls
    return run


def planes_step(node, graph, kind, fallback, blocked):
    """GlobalAveragePool ("gap") or a Mul by one factor per plane ("scale") of float32 on the
    native workers, from (and, scaling, into) the blocked layout where the tensor is in
    ``blocked``; ``fallback`` (the graph's NumPy kernel) while the kernels compile."""
    big = plane_scale_input(graph, node) if kind == "scale" else 0
    xb = node.inputs[big] in blocked
    C = graph.shapes[node.inputs[big]][1]

    def run(inputs, out=None):
        if not kernels.ready():
            ins = list(inputs)
            if xb:
                ins[big] = from_blocked(ins[big], C)
            y = fallback(ins, out)
            return [to_blocked(y[0])] if xb and kind == "scale" else y
        x = np.ascontiguousarray(inputs[big], np.float32)
        if xb:
            s = None if kind == "gap" else np.ascontiguousarray(inputs[1 - big], np.float32)
            y = np.empty(graph.shapes[node.outputs[0]] if kind == "gap" else x.shape, np.float32)
            kernels.run_calls(calls(inputs, y, kernels.threads()))
            return [y]
        if kind == "gap":                     # (N, C, 1, 1) or, keepdims 0, (N, C)
            return [kernels.plane_means(x).reshape(graph.shapes[node.outputs[0]])]
        return [kernels.scale_planes(x, inputs[1 - big])]

    def calls(ins, y, nt):
        x = ins[big]
        if xb:
            return kernels.block_rows_calls(x, y.reshape(-1) if kind == "gap" else y,
                                            None if kind == "gap" else ins[1 - big].reshape(-1),
                                            0 if kind == "gap" else 1, nt)
        rows = x.shape[0] * x.shape[1]
        if kind == "gap":
            return kernels.rows_calls(x.reshape(rows, -1), y, None, 0, nt)
        return kernels.rows_calls(x.reshape(rows, -1), y.reshape(rows, -1),
                                  ins[1 - big].reshape(-1), 1, nt)
    run.calls = calls
    return run


#: What one window element costs a pooling step, in the GEMM's multiply-adds that
#: :func:`work` counts (a compare or an add of a strided load against a fused multiply-add
#: of 16 lanes): without it a pooling layer of a small network ran on one thread (whole
#: networks: ``benchmarks/bench_setting.py tensorlayout.backends.cpu_steps.POOL_WORK 1 16``,
#: ``benchmarks/results/setting_pool_work_ci2.txt``).
POOL_WORK = 16


#: What a multiply-add of a matrix-vector product (a fully connected layer of one image, a
#: squeeze-and-excite block's 1 x 1 convolutions on one position) costs in :func:`work`'s
#: units: it reads a weight from memory for each, where a GEMM's reuse every weight many
#: times, so such a step takes threads by the bytes it reads (EfficientNet-B0 1.01-1.04x,
#: MobileNetV3-Small 1.01-1.03x, the others within 1%: ``python benchmarks/bench_setting.py
#: tensorlayout.backends.cpu_steps.GEMV_WORK 1 8 --nets ...``,
#: ``benchmarks/results/setting_gemv_work_ci2.txt``).
GEMV_WORK = 8


def work(kind, node, ctx) -> int:
    """A step's multiply-adds (convolutions, fully connected layers; times
    :data:`GEMV_WORK` for a matrix-vector product), its window elements times
    :data:`POOL_WORK` (pooling), its input elements (plane means, which read every one for one
    output each) or its output elements."""
    out = sum(int(np.prod(o)) for o in ctx.out_shapes if o is not None)
    if kind == "gap":
        return int(np.prod(ctx.in_shapes[0]))
    if node.op == "Conv" and kind != "kernel":
        w = ctx.consts[1]
        o = ctx.out_shapes[0]
        one = o is not None and len(o) == 4 and o[0] * o[2] * o[3] == 1
        return out * int(np.prod(w.shape[1:])) * (GEMV_WORK if one else 1)
    if kind == "fc":
        one = int(np.prod(ctx.in_shapes[0][:-1])) == 1
        return out * int(ctx.in_shapes[0][-1]) * (GEMV_WORK if one else 1)
    if kind == "pool":
        return out * int(np.prod(node.params.kernel)) * POOL_WORK
    return out


def im2col_step(node, ctx, engine, act, residual, kind, xb=False, yb=False, lanes=16):
    """A convolution as the packed GEMM with its epilogue, ``kind``
    :class:`~tensorlayout.backends.cpu_kernels.Im2col` (by unfolded columns),
    :class:`~tensorlayout.backends.cpu_kernels.Shifted` (one GEMM per tap) or
    :class:`~tensorlayout.backends.cpu_kernels.Direct` (``xb``, ``yb``: its input, its output
    and residual in the blocked layout; ``lanes`` 1: its input's runs one float each), when
    the backend's kernels are ready, else
    ``engine`` (the engine's im2col plan with the epilogue after it)."""
    p = node.params
    w = np.asarray(ctx.consts[1], np.float32)
    bias = (np.ascontiguousarray(ctx.consts[2], np.float32).reshape(-1) if p.has_bias
            else None)
    more = (xb, yb, lanes) if lanes != 16 else (xb, yb) if xb or yb else ()
    conv = _once(kind, w, bias, act, ctx.in_shapes[0], p.strides, p.begin,
                 p.dilations, ctx.out_shapes[0][2:], *more)

    def run(inputs, out=None):
        if not kernels.ready():
            ins = list(inputs)
            if xb:
                ins[0] = from_blocked(ins[0], ctx.in_shapes[0][1])
            if yb and residual is not None:
                ins[-1] = from_blocked(ins[-1], ctx.out_shapes[0][1])
            y = engine(ins, out)[0]
            return [to_blocked(y) if yb else y]
        res = None if residual is None else np.ascontiguousarray(inputs[-1], np.float32)
        return [conv()(np.ascontiguousarray(inputs[0], np.float32), res)]

    def calls(ins, y, nt):
        return conv().calls(ins[0], y, ins[-1] if residual is not None else None, nt)
    run.calls = calls
    return run


def with_epilogue(run, bias, act, residual):
    """``run``, then (in place on its first output) the bias, the residual (the last input)
    and the activation, in one compiled pass over each (batch, channel) plane."""
    def fused(inputs, out=None):
        y = run(inputs if residual is None else inputs[:-1], out)[0]
        if not isinstance(y, np.ndarray):              # NumPy gives scalars for 0-d
            y = np.array(y)
        elif not y.flags.c_contiguous:
            y = np.ascontiguousarray(y)
        if y.ndim < 2:
            kernels.activate_numpy(y, *act)
            return [y]
        n, c = y.shape[:2]
        res = None if residual is None else np.ascontiguousarray(inputs[-1]).reshape(n, c, -1)
        kernels.epilogue(y.reshape(n, c, -1), bias, res, act)
        return [y]
    return fused
