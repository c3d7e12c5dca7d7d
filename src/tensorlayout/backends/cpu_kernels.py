"""The CPU backend's compiled kernels: depthwise convolution, the pointwise (1 x 1)
convolution (a matrix-vector product when its input has one column), 2-D pooling and the
epilogue that a convolution, a fully connected layer or an element-wise op ends with (bias,
activation, residual).

They run on the native workers of :mod:`tensorlayout.winograd._pool` (the Winograd engine's
threads, no OpenMP: other libraries' thread pools in the process neither share nor disturb
them), each thread taking its share of (batch, channel) planes, rows, channels or blocks from
an int64 context (:mod:`.cpu_source` and :mod:`.cpu_source_reduce` name its fields).  The
pointwise convolution is the SIMD GEMM of :mod:`tensorlayout.winograd._simd` on packed
weights, cut into blocks of :data:`POINTWISE_COLUMNS` columns, each block's epilogue applied
while it is in the cache.

The kernels are generated source (:mod:`.cpu_source`), written once into the user cache
and compiled by numba there (:func:`tensorlayout._jit.generated_module`), so that compiled
code is kept between processes.  A depthwise window of a common size and stride (3 x 3 and
5 x 5, stride 1 or 2) gets its own kernel, its taps unrolled into one sum per output that the
compiler vectorises over the output row; other windows run a generic kernel.  Both read each
plane from a zero-padded copy, so the inner loops have no bounds tests.  Planes whose rows
are narrower than :data:`CHANNELS_LAST_BELOW` run vectorised over channels instead
(:class:`DepthwiseChannelsLast`).

Activation codes are those of :data:`ACT`; ``a0`` and ``a1`` are the activation's
parameters as :class:`~tensorlayout.graph.ops.Activation` holds them (Clip's bounds,
LeakyRelu's slope, HardSigmoid's and HardSwish's slope and offset).  NaN propagates as
onnxruntime propagates it: max(NaN, 0) is NaN.

Each kernel has a NumPy twin (:func:`depthwise_numpy`, :func:`epilogue_numpy`, NumPy's
matmul for the pointwise GEMM, the graph's kernel for pooling) that serves while numba
compiles in the background (:mod:`tensorlayout._jit`), when numba or llvmlite is absent, or
for arrays other than C-contiguous float32; the tests hold the two against each other and
against a float64 direct convolution.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np

from .. import _backend, _jit
from ..winograd import _pool as _workers
from ..winograd._pool import address as _at
from .cpu_source import ACT, SPECIAL, VERSION, act_code, module_source
from .cpu_source_reduce import POOL_SPECIAL
from .cpu_twins import activate_numpy, depthwise_numpy, epilogue_numpy, unfold_numpy

__all__ = ["ACT", "act_code", "depthwise", "DepthwiseChannelsLast", "CHANNELS_LAST_BELOW",
           "epilogue", "Pointwise", "Im2col", "Pool2d", "plane_means", "scale_planes", "threads",
           "set_threads", "run_calls", "rows_calls", "depthwise_calls", "concat_calls",
           "depthwise_numpy", "epilogue_numpy", "activate_numpy", "module_source", "ready"]


_MODULE: list = []


def _module():
    if not _MODULE:
        src = module_source()
        digest = hashlib.sha1(src.encode()).hexdigest()[:12]     # a changed source: a new file
        _MODULE.append(_jit.generated_module(f"cpu_backend_{digest}", src))
    return _MODULE[0]


_WORKERS: list = []


def _pool():
    """The native workers (None where the platform or llvmlite has none)."""
    if _WORKERS:
        return _WORKERS[0]
    w = _workers.workers()
    if w is not None:
        _WORKERS.append(w)
    return w


def _warm():
    """Compile the kernels (what a background compile runs)."""
    mod = _module()
    for e in (mod.DEPTHWISE_ENTRY, mod.EPILOGUE_ENTRY, mod.POINTWISE_ENTRY, mod.IM2COL_ENTRY,
              mod.POOL_ENTRY, mod.GEMV_ENTRY, mod.DEPTHWISE_CL_ENTRY, mod.ROWS_ENTRY,
              mod.COPY_ENTRY):
        e.address                                   # noqa: B018 - compiles the cfunc
    w = _pool()
    mod.run_table(np.zeros((1, 3), np.int64), 0, 0, w.run_address, w.base, w.pending, 0)
    x = np.ones((1, 2, 5, 5), np.float32)
    b = np.zeros(2, np.float32)
    for KH, KW, sh, sw in SPECIAL:
        out = np.empty((1, 2, (5 - 1) // sh + 1, (5 - 1) // sw + 1), np.float32)
        _depthwise_compiled(mod, x, np.ones((2, 1, KH, KW), np.float32), b, out,
                            (sh, sw, KH // 2, KW // 2, 1, 1, 1, 1, 0.0, 0.0), 1)
    from ..graph.ops import Pool

    for KH, KW, sh, sw in POOL_SPECIAL:
        out = ((5 - KH) // sh + 1, (5 - KW) // sw + 1)
        p = Pool(True, (KH, KW), (sh, sw), (1, 1), (0, 0), (0, 0), (0, 0), False, out)
        Pool2d(p, x.shape)(x, 1)


_READY: list = []


def ready() -> bool:
    """True when the compiled kernels can run now (numba and llvmlite installed, the native
    workers started and the kernels compiled or cached); otherwise a background compile starts
    and the NumPy twins serve.  Once true, it stays true without asking again."""
    if _READY:
        return True
    if _backend.numba() is None:
        return False
    try:
        if _pool() is None:
            return False
        mod = _module()
    except (OSError, ImportError):      # no writable cache or no llvmlite: the twins serve
        return False
    fns = [mod.depthwise_planes, mod.epilogue_block, mod.unfold_block, mod.im2col_planes,
           mod.pool_planes,
           mod.gemv_block, mod.DEPTHWISE_ENTRY, mod.EPILOGUE_ENTRY, mod.POINTWISE_ENTRY,
           mod.IM2COL_ENTRY, mod.POOL_ENTRY, mod.GEMV_ENTRY, mod.depthwise_channels_last,
           mod.channel_means, mod.scale_rows, mod.ROWS_ENTRY,
           mod.DEPTHWISE_CL_ENTRY, mod.run_table, mod.COPY_ENTRY] + [
        getattr(mod, f"depthwise_{a}x{b}_s{c}x{d}") for a, b, c, d in SPECIAL] + [
        getattr(mod, f"pool_{a}x{b}_s{c}x{d}") for a, b, c, d in POOL_SPECIAL]
    if _jit.ready(f"cpu-backend-{VERSION}", fns, _warm):
        _READY.append(True)
        return True
    return False


_LOCAL = threading.local()


def set_threads(n: int) -> None:
    """Threads this thread's kernel calls take from now on (0: numba's setting again); a
    network's run sets it for each step, so that no call asks numba."""
    _LOCAL.n = n


def threads() -> int:
    """Threads a kernel call may use: what :func:`set_threads` set on this thread, else
    numba's setting for this thread (what :func:`tensorlayout.backends.cpu.threads_limit`
    sets), else 1."""
    n = getattr(_LOCAL, "n", 0)
    if n:
        return n
    nb = _backend.numba()
    return 1 if nb is None else max(1, int(nb.get_num_threads()))


def _f32(*arrays) -> bool:
    """True when every array is C-contiguous float32 (what the compiled entries read)."""
    return all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)


def run_calls(calls) -> None:
    """Run ``calls`` (``(entry address, int64 context, threads, arrays kept alive)`` each, as
    the kernels' ``calls`` methods give them) on the native workers, one after the other."""
    pool = _pool()
    for fn, ctx, nt, _ in calls:
        pool.run(fn, _at(ctx), nt)


def _depthwise_compiled(mod, x, w, bias, y, args, nt):
    run_calls(_depthwise_calls(mod, x, w, bias, y, args, nt))


def depthwise_calls(x, w, bias, y, args, nt):
    """The native call of :func:`depthwise` (compiled kernels ready; C-contiguous float32)."""
    return _depthwise_calls(_module(), x, w, bias, y, args, nt)


def _depthwise_calls(mod, x, w, bias, y, args, nt):
    sh, sw, ph, pw, dh, dw, mult, act, a0, a1 = args
    N, C, H, W = x.shape
    K, _, KH, KW = w.shape
    kind = 0
    if (dh, dw) == (1, 1) and (KH, KW, sh, sw) in SPECIAL:
        kind = SPECIAL.index((KH, KW, sh, sw)) + 1
    OH, OW = y.shape[2:]
    PH = max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1)
    # an unrolled kernel computes rows of whole vectors of 16 (see cpu_source)
    OWV = -(-OW // 16) * 16 if kind else OW
    PW = max(W + pw, (OWV - 1) * sw + (KW - 1) * dw + 1)
    PW += PW % 2                   # even: a stride-2 kernel splits it into two halves
    nt = max(1, min(nt, N * K))
    pad = np.zeros((nt, PH, PW), np.float32)
    f = np.array([a0, a1], np.float64)
    ctx = np.array([_at(x), N, C, H, W, _at(w), K, KH, KW, _at(bias),
                    _at(y), OH, OW, sh, sw, ph, pw, dh, dw, mult, act,
                    _at(f), kind, _at(pad), PH, PW], np.int64)
    return [(mod.DEPTHWISE_ENTRY.address, ctx, nt, (x, w, bias, y, pad, f))]


def depthwise(x, w, bias, y, args, nt=None):
    """The depthwise convolution of ``x`` (N, C, H, W) by ``w`` (C·mult, 1, KH, KW) into ``y``,
    bias and activation included; ``args`` = (sh, sw, ph, pw, dh, dw, mult, act, a0, a1)
    (ph, pw: the begin padding; the end padding is what the output's size leaves).  The
    compiled kernel on ``nt`` native workers (default :func:`threads`; one kernel of its own
    for a :data:`SPECIAL` window) when ready and every array is C-contiguous float32, else
    NumPy."""
    if not (_f32(x, w, bias, y) and ready()):
        depthwise_numpy(x, w, bias, y, *args)
        return y
    _depthwise_compiled(_module(), x, w, bias, y, args, threads() if nt is None else nt)
    return y


#: Output rows narrower than this many columns cost the per-plane depthwise kernels more to
#: set up than to compute: such layers (multiplier 1) run vectorised over channels instead
#: (measured faster for rows of 3; from 6 columns on the planes' kernels win, the channels'
#: transposes costing more).
CHANNELS_LAST_BELOW = 4


class DepthwiseChannelsLast:
    """A depthwise convolution (multiplier 1) of fixed shapes vectorised over channels, for
    small planes: each thread takes a range of channels (whole vectors of 16), moves them
    into a (PH, PW, C) buffer with its zero border, and sums every output's taps over its
    channels at once, bias first and taps in order; then the activation.  ``w``: (C, 1, KH, KW);
    ``args`` as :func:`depthwise` takes them."""

    def __init__(self, w, bias, args, x_shape, out_hw):
        sh, sw, ph, pw, dh, dw, mult, act, a0, a1 = args
        if mult != 1:
            raise ValueError("channels-last depthwise needs a multiplier of 1")
        N, C, H, W = x_shape
        KH, KW = w.shape[2:]
        OH, OW = out_hw
        self.wt = np.ascontiguousarray(np.asarray(w, np.float32)[:, 0].transpose(1, 2, 0))
        self.bias = np.ascontiguousarray(bias, np.float32)
        self.f = np.array([a0, a1], np.float64)
        PH = max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1)
        PW = max(W + pw, (OW - 1) * sw + (KW - 1) * dw + 1)
        self.shape, self.buf, self.C = (N, C, OH, OW), (PH * PW + 1) * C, C
        self.template = np.array(
            [0, N, C, H, W, self.wt.ctypes.data, KH, KW, self.bias.ctypes.data, 0, OH, OW, sh, sw,
             ph, pw, self.f.ctypes.data, dh, dw, 0, PH, PW, 0, act], np.int64)

    def __call__(self, x, nt=None):
        y = np.empty(self.shape, np.float32)
        run_calls(self.calls(x, y, threads() if nt is None else nt))
        return y

    def calls(self, x, y, nt):
        """The native calls that write ``y`` from ``x`` on ``nt`` threads at most."""
        nt = max(1, min(nt, -(-self.C // 16)))
        buf = np.empty(self.buf, np.float32)           # xt, then acc: C floats
        ctx = self.template.copy()
        ctx[0], ctx[9], ctx[19] = _at(x), _at(y), _at(buf)
        ctx[22] = ctx[19] + (self.buf - self.C) * 4
        return [(_module().DEPTHWISE_CL_ENTRY.address, ctx, nt, (x, y, buf))]


def epilogue(y3, bias, res3, act, nt=None):
    """Bias (per channel), residual and activation in place on ``y3`` (N, C, P): the compiled
    kernel on ``nt`` native workers when ready (float32, C-contiguous), else its NumPy twin."""
    has_bias, has_res = bias is not None, res3 is not None
    b = bias if has_bias else np.zeros(1, y3.dtype)
    r = res3 if has_res else y3
    if not (_f32(y3, b, r) and ready()):
        epilogue_numpy(y3, b, has_bias, r, has_res, *act)
        return y3
    N, C, P = y3.shape
    f = np.array(act[1:], np.float64)
    ctx = np.array([_at(y3), N * C, P, C, _at(b), has_bias, _at(r),
                    has_res, act[0], _at(f)], np.int64)
    nt = threads() if nt is None else nt
    # a thread per 4 KiB of work at least: waking one costs more than a smaller share
    nt = max(1, min(nt, N * C, y3.size // 1024 or 1))
    _pool().run(_module().EPILOGUE_ENTRY.address, _at(ctx), nt)
    return y3


#: Columns of one pointwise block: the block's rows of the input (at most 128 deep per GEMM
#: slice) stay in the L2 cache while every panel of weights passes over them.
POINTWISE_COLUMNS = 256


class Pointwise:
    """A 1 x 1 convolution (stride 1) of fixed shapes as GEMMs of packed weights by the input's
    (C, H·W) planes on the native workers, its epilogue (bias, residual, activation) applied
    to each block while it is in the cache.  ``weights``: (O, C) float32.  An input of one
    column (H·W = 1: a fully connected layer of one image, a squeeze-and-excite block's
    convolutions) is a matrix-vector product instead, over the weights transposed (C, O),
    each thread taking a chunk of the outputs."""

    def __init__(self, weights, bias, act, x_shape):
        O, C = weights.shape
        N, _, H, W = x_shape
        P = H * W
        self.bias = np.zeros(1, np.float32) if bias is None else np.ascontiguousarray(bias,
                                                                                     np.float32)
        self.f = np.array(act[1:], np.float64)
        self.shape = (N, O, H, W)
        self.N = N
        if P == 1:
            self.wt = np.ascontiguousarray(weights.T, np.float32)
            self.template = np.array(
                [0, N, C, O, self.wt.ctypes.data, 0, self.bias.ctypes.data, bias is not None,
                 0, 0, act[0], self.f.ctypes.data, O], np.int64)
            self.gemv = True
            return
        from ..winograd import _simd

        mod = _simd.module()
        self.mr = mr = mod.isa.mr
        self.gemv = False
        self.a = _simd.pack_rows(weights, mr)
        npan = -(-O // mr)
        ncb = -(-P // POINTWISE_COLUMNS)
        self.template = np.array(
            [0, N, C, P, self.a.ctypes.data, npan, mr, 0, O, self.bias.ctypes.data,
             bias is not None, 0, 0, act[0], self.f.ctypes.data, mod.addr["tl_sgemm"],
             POINTWISE_COLUMNS, npan, ncb, 1, 0], np.int64)
        self.npan, self.ncb = npan, ncb

    def _gemv(self, x, y, res, nt):
        ctx = self.template.copy()
        ctx[0], ctx[5] = _at(x), _at(y)
        if res is not None:
            ctx[8], ctx[9] = _at(res), 1
        O = self.shape[1]
        # chunks of whole vectors (16 floats), at least 256 outputs each: a smaller share
        # costs more to hand out than it saves
        chunk = max(256, -(-O // nt))
        ctx[12] = chunk = -(-chunk // 16) * 16
        units = self.N * -(-O // chunk)
        return [(_module().GEMV_ENTRY.address, ctx, max(1, min(nt, units)), (x, y, res))]

    def __call__(self, x, res=None, nt=None):
        """``y`` (N, O, H, W) for C-contiguous float32 ``x`` (and residual ``res``, y's shape)."""
        y = np.empty(self.shape, np.float32)
        run_calls(self.calls(x, y, res, threads() if nt is None else nt))
        return y

    def calls(self, x, y, res, nt):
        """The native calls that write ``y`` (N, O, H, W) from ``x`` and ``res`` (or None),
        C-contiguous float32, on ``nt`` threads at most."""
        if self.gemv:
            return self._gemv(x, y, res, nt)
        ctx = self.template.copy()
        ctx[0], ctx[7] = _at(x), _at(y)
        if res is not None:
            ctx[11], ctx[12] = _at(res), 1
        # enough (panel group, column block) units for every thread: panels split when the
        # columns alone give too few
        units = self.N * self.ncb
        groups = min(self.npan, -(-nt // units)) if units < 2 * nt else 1
        rp = -(-self.npan // groups)
        ctx[17], ctx[19] = rp, -(-self.npan // rp)
        return [(_module().POINTWISE_ENTRY.address, ctx,
                 max(1, min(nt, units * -(-self.npan // rp))), (x, y, res))]


def _simd_isa():
    from ..winograd import _simd

    return _simd.module().isa


#: Unfolded rows (C·KH·KW) up to which an im2col convolution unfolds block by block into
#: the GEMM's packed columns: a shallow layer on a large map (a network's first) would
#: otherwise write out and read back a matrix far larger than the cache; deeper layers, on
#: smaller maps, unfold whole, their matrix cached, each row once.
UNFOLD_BLOCKS_BELOW = 256


class Im2col:
    """A convolution (one group, any window, stride, dilation and padding) as
    :class:`Pointwise`'s GEMM of the packed weights by the input's unfolded columns (rows
    (c, kh, kw), one column per output position), with the epilogue.  Under
    :data:`UNFOLD_BLOCKS_BELOW` rows each worker unfolds one block of
    :data:`POINTWISE_COLUMNS` columns at a time straight into the micro-kernel's column
    strips in a buffer of its own and multiplies it while it is in the cache; deeper
    layers unfold whole on the workers first.  An output of one position unfolds into one
    column and takes the matrix-vector product.  ``weights``: (O, C, KH, KW) float32;
    ``begin``: the top and left padding (the bottom and right padding is what ``out_hw``
    leaves)."""

    def __init__(self, weights, bias, act, x_shape, strides, begin, dilations, out_hw):
        O, C, KH, KW = weights.shape
        N, _, H, W = x_shape
        OH, OW = out_hw
        K = C * KH * KW
        self.pw = Pointwise(np.ascontiguousarray(weights, np.float32).reshape(O, -1), bias, act,
                            (N, K, OH, OW))
        self.K = K
        self.conv = (strides, begin, dilations, (KH, KW), out_hw)
        self.blocks = K < UNFOLD_BLOCKS_BELOW and not self.pw.gemv
        self.geo = np.array([C, H, W, KH, KW, *strides, *begin, *dilations, OW, 0,
                             _simd_isa().nr], np.int64)
        self.cols_shape = (N, K, OH * OW)
        self.template = np.array([0, N, C, H, W, 0, KH, KW, *strides, *begin, *dilations, OH, OW],
                                 np.int64)
        self.planes = N * C

    def __call__(self, x, res=None, nt=None):
        nt = threads() if nt is None else nt
        if self.pw.gemv:                    # one output position: its one column, then GEMV
            return self.pw(unfold_numpy(x, *self.conv), res, nt)
        y = np.empty(self.pw.shape, np.float32)
        run_calls(self.calls(x, y, res, nt))
        return y

    def calls(self, x, y, res, nt):
        """The native calls that write ``y`` from ``x`` and ``res`` (or None) on ``nt``
        threads at most; None for an output of one position (its column is unfolded by
        NumPy on each call)."""
        if self.pw.gemv:
            return None
        if not self.blocks:
            cols = np.empty(self.cols_shape, np.float32)
            ctx = self.template.copy()
            ctx[0], ctx[5] = _at(x), _at(cols)
            return ([(_module().IM2COL_ENTRY.address, ctx, max(1, min(nt, self.planes)),
                      (x, cols))] + self.pw.calls(cols, y, res, nt))
        calls = self.pw.calls(x, y, res, nt)
        fn, ctx, n, keep = calls[0]
        geo = self.geo.copy()
        scratch = np.empty(n * self.K * POINTWISE_COLUMNS, np.float32)
        geo[12] = _at(scratch)
        ctx[20] = _at(geo)
        return [(fn, ctx, n, keep + (geo, scratch))]


class Pool2d:
    """2-D max or average pooling of fixed shapes (float32, NCHW) on the native workers, each
    thread taking its share of (image, channel) planes.  ``p``: the graph's
    :class:`~tensorlayout.graph.ops.Pool` (windows, strides, dilations, padding, the
    ceil-mode extension); ``div``: for an average, the (OH, OW) reciprocals of each window's
    count, as the graph's kernel computes them."""

    def __init__(self, p, x_shape, div=None):
        N, C, H, W = x_shape
        OH, OW = p.out
        KH, KW = p.kernel
        (sh, sw), (dh, dw) = p.strides, p.dilations
        self.PH = max(H + p.begin[0], (OH - 1) * sh + (KH - 1) * dh + 1)
        self.PW = max(W + p.begin[1], (OW - 1) * sw + (KW - 1) * dw + 1)
        self.PW += self.PW % 2           # even: a stride-2 kernel splits it into two halves
        self.fill = -np.inf if p.is_max else 0.0
        self.div = (np.ones((OH, OW), np.float32) if div is None
                    else np.ascontiguousarray(np.broadcast_to(div, (1, 1, OH, OW))[0, 0], np.float32))
        self.shape = (N, C, OH, OW)
        self.planes = N * C
        kind = 0
        if (dh, dw) == (1, 1) and (KH, KW, sh, sw) in POOL_SPECIAL:
            kind = POOL_SPECIAL.index((KH, KW, sh, sw)) + 1
        self.template = np.array([0, N, C, H, W, 0, OH, OW, KH, KW, sh, sw, *p.begin, dh, dw,
                                  p.is_max, self.div.ctypes.data, 0, self.PH, self.PW, kind],
                                 np.int64)

    def __call__(self, x, nt=None):
        """``y`` for C-contiguous float32 ``x`` of the shape given at construction."""
        y = np.empty(self.shape, np.float32)
        run_calls(self.calls(x, y, threads() if nt is None else nt))
        return y

    def calls(self, x, y, nt):
        """The native call that writes ``y`` from ``x`` on ``nt`` threads at most."""
        nt = max(1, min(nt, self.planes))
        pad = np.full((nt, self.PH, self.PW), self.fill, np.float32)
        ctx = self.template.copy()
        ctx[0], ctx[5], ctx[18] = _at(x), _at(y), _at(pad)
        return [(_module().POOL_ENTRY.address, ctx, nt, (x, y, pad))]


def rows_calls(x2, y, s, op, nt):
    """The native call of the rows entry: the means of the rows of ``x2`` (R, P) into ``y``
    (op 0), or the rows scaled by ``s`` (R,) into ``y`` (R, P) (op 1)."""
    R, P = x2.shape
    # a thread per 16 KiB of the planes at least: waking one costs more than a smaller share
    nt = max(1, min(nt, R, x2.size // 4096 or 1))
    ctx = np.array([_at(x2), R, P, _at(y), 0 if s is None else _at(s), op], np.int64)
    return [(_module().ROWS_ENTRY.address, ctx, nt, (x2, y, s))]


def concat_calls(ins, y, axis, nt):
    """The native calls that write ``y``, the C-contiguous float32 ``ins`` concatenated along
    ``axis`` (one copy per input; a thread per 64 KiB of it at most)."""
    outer = int(np.prod(y.shape[:axis], dtype=np.int64))
    total = int(np.prod(y.shape[axis:], dtype=np.int64))
    calls, off = [], 0
    for x in ins:
        inner = int(np.prod(x.shape[axis:], dtype=np.int64))
        ctx = np.array([_at(y), outer, total, _at(x), inner, off], np.int64)
        calls.append((_module().COPY_ENTRY.address, ctx,
                      max(1, min(nt, outer * inner // 16384 or 1)), (x, y)))
        off += inner
    return calls


def _rows(x2, y, s, op, nt):
    run_calls(rows_calls(x2, y, s, op, threads() if nt is None else nt))
    return y


def plane_means(x, nt=None):
    """The mean of each (image, channel) plane of C-contiguous float32 ``x`` (N, C, ...), as
    (N, C, 1, ...): GlobalAveragePool on the native workers (sixteen running sums a plane)."""
    N, C = x.shape[:2]
    y = np.empty((N, C) + (1,) * (x.ndim - 2), np.float32)
    return _rows(x.reshape(N * C, -1), y, None, 0, nt)


def scale_planes(x, s, nt=None):
    """``x`` (N, C, ...) times ``s`` (N, C, 1, ...), one factor per plane, C-contiguous float32
    (a squeeze-and-excite block's last step) on the native workers."""
    N, C = x.shape[:2]
    y = np.empty(x.shape, np.float32)
    _rows(x.reshape(N * C, -1), y.reshape(N * C, -1),
          np.ascontiguousarray(s, np.float32).reshape(-1), 1, nt)
    return y
