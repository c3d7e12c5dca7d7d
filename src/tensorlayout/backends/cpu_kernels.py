"""The CPU backend's compiled kernels: depthwise convolution, the pointwise (1 x 1)
convolution (a matrix-vector product when its input has one column), 2-D pooling and the
epilogue that a convolution, a fully connected layer or an element-wise op ends with (bias,
activation, residual).

They run on the native workers of :mod:`tensorlayout.winograd._pool` (the Winograd engine's
threads, no OpenMP: other libraries' thread pools in the process neither share nor disturb
them), each thread taking its share of (batch, channel) planes, rows, channels or blocks from
an int64 context (:mod:`.cpu_source` and :mod:`.cpu_source_reduce` name its fields;
:mod:`.cpu_native` holds the module and the workers).  The pointwise and im2col
convolutions are the SIMD GEMM of :mod:`tensorlayout.winograd._simd` on packed weights
(:mod:`.cpu_gemm`, whose :class:`Pointwise` and :class:`Im2col` this module re-exports).
Each kernel gives its native calls (``calls``) before running them, so that a bound run
(:mod:`.cpu_bound`) can keep them; Concat's copies and the plane loops give theirs through
:func:`concat_calls` and :func:`rows_calls`.

The kernels are generated source (:mod:`.cpu_source`), written once into the user cache
and compiled by numba there (:func:`tensorlayout._jit.generated_module`), so that compiled
code is kept between processes.  A depthwise window of a common size and stride (3 x 3 and
5 x 5, stride 1 or 2) gets its own kernel, its taps unrolled into one sum per output that the
compiler vectorises over the output row; other windows run a generic kernel.  Both read each
plane from a zero-padded copy, so the inner loops have no bounds tests.  Planes whose rows
are narrower than :data:`CHANNELS_LAST_BELOW` run vectorised over channels instead
(:class:`DepthwiseChannelsLast`), and those under :data:`BLOCKED_BELOW` columns, like every
layer whose tensors the schedule blocks (NCHW16c), by blocks of 16 channels in machine code
(:class:`DepthwiseBlocked`, :class:`PointwiseBlocked` and :func:`block_rows_calls`, see
:mod:`.cpu_source_block`).

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

import numpy as np

from .. import _backend, _jit
from ..winograd import _simd
from ..winograd._pool import address as _at
from ..winograd._simd_pool import POOL_WINDOWS, row_floats
from .cpu_direct import Direct
from .cpu_gemm import (POINTWISE_COLUMNS, THIN_COLUMNS, THIN_DEPTH, UNFOLD_BLOCKS_BELOW, Im2col,
                       Pointwise, PointwiseBlocked, Shifted)
from .cpu_native import module as _module
from .cpu_native import pool as _pool
from .cpu_native import run_calls, set_threads, threads
from .cpu_source import ACT, SPECIAL, VERSION, act_code, module_source
from .cpu_source_reduce import POOL_CTX, POOL_SPECIAL
from .cpu_twins import activate_numpy, depthwise_numpy, epilogue_numpy, to_blocked

__all__ = ["Direct", "ACT", "act_code", "depthwise", "DepthwiseChannelsLast", "DepthwiseBlocked", "CHANNELS_LAST_BELOW",
           "BLOCKED_BELOW", "DW_BAND_BYTES",
           "epilogue", "Pointwise", "PointwiseBlocked", "Im2col", "Shifted", "Pool2d", "plane_means",
           "scale_planes",
           "threads", "set_threads", "run_calls", "rows_calls", "block_rows_calls", "depthwise_calls",
           "concat_calls", "transpose_calls",
           "depthwise_numpy", "epilogue_numpy", "activate_numpy", "module_source", "ready",
           "POINTWISE_COLUMNS", "THIN_COLUMNS", "THIN_DEPTH", "UNFOLD_BLOCKS_BELOW"]


def _warm():
    """Compile the kernels (what a background compile runs)."""
    mod = _module()
    for e in (mod.DEPTHWISE_ENTRY, mod.EPILOGUE_ENTRY, mod.POINTWISE_ENTRY, mod.IM2COL_ENTRY,
              mod.POOL_ENTRY, mod.GEMV_ENTRY, mod.DEPTHWISE_CL_ENTRY, mod.ROWS_ENTRY,
              mod.COPY_ENTRY, mod.THIN_ENTRY, mod.SHIFT_ENTRY, mod.PERMUTE_ENTRY,
              mod.BLOCK_ENTRY, mod.PW_BLOCK_ENTRY, mod.BLOCK_ROWS_ENTRY, mod.DIRECT_ENTRY):
        e.address                                   # noqa: B018 - compiles the cfunc
    w = _pool()
    mod.run_table(np.zeros((1, 3), np.int64), 0, 0, w.run_address, w.base, w.pending, 0)
    x = np.ones((1, 2, 5, 5), np.float32)
    b = np.zeros(2, np.float32)
    for KH, KW, sh, sw in SPECIAL:
        out = np.empty((1, 2, (5 - 1) // sh + 1, (5 - 1) // sw + 1), np.float32)
        run_calls(depthwise_calls(x, np.ones((2, 1, KH, KW), np.float32), b, out,
                                  (sh, sw, KH // 2, KW // 2, 1, 1, 1, 1, 0.0, 0.0), 1))
    from ..graph.ops import Pool

    for is_max in (True, False):
        for KH, KW, sh, sw in POOL_SPECIAL:
            out = ((5 - KH) // sh + 1, (5 - KW) // sw + 1)
            p = Pool(is_max, (KH, KW), (sh, sw), (1, 1), (0, 0), (0, 0), (0, 0), False, out)
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
           mod.DEPTHWISE_CL_ENTRY, mod.run_table, mod.COPY_ENTRY, mod.THIN_ENTRY,
           mod.deal_phases, mod.shift_store, mod.SHIFT_ENTRY, mod.pool_rows, mod.PERMUTE_ENTRY,
           mod.block_in, mod.block_out, mod.BLOCK_ENTRY, mod.PW_BLOCK_ENTRY,
           mod.BLOCK_ROWS_ENTRY, mod.DIRECT_ENTRY] + [
        getattr(mod, f"depthwise_{a}x{b}_s{c}x{d}") for a, b, c, d in SPECIAL] + [
        getattr(mod, f"pool_{a}x{b}_s{c}x{d}") for a, b, c, d in POOL_SPECIAL]
    if _jit.ready(f"cpu-backend-{VERSION}", fns, _warm):
        _READY.append(True)
        return True
    return False


def _f32(*arrays) -> bool:
    """True when every array is C-contiguous float32 (what the compiled entries read)."""
    return all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)


def depthwise_calls(x, w, bias, y, args, nt):
    """The native call of :func:`depthwise` (compiled kernels ready; C-contiguous float32)."""
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
    lohi = np.array([a0, a1], np.float32)
    simd = _simd.module()
    ctx = np.array([_at(x), N, C, H, W, _at(w), K, KH, KW, _at(bias),
                    _at(y), OH, OW, sh, sw, ph, pw, dh, dw, mult, act,
                    _at(f), kind, _at(pad), PH, PW, simd.addr["tl_act"], _at(lohi)], np.int64)
    return [(_module().DEPTHWISE_ENTRY.address, ctx, nt, (x, w, bias, y, pad, f, lohi))]


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
    run_calls(depthwise_calls(x, w, bias, y, args, threads() if nt is None else nt))
    return y


#: Output rows narrower than this many columns cost the per-plane depthwise kernels more to
#: set up than to compute: such layers (multiplier 1) run vectorised over channels instead
#: (measured faster for rows of 3; from 6 columns on the planes' kernels win, the channels'
#: transposes costing more).
CHANNELS_LAST_BELOW = 4
#: Output rows narrower than this many columns (from :data:`CHANNELS_LAST_BELOW` on) run the
#: blocked kernel (:class:`DepthwiseBlocked`) even between NCHW tensors, its transposes in
#: and out included: on such small planes the per-plane kernels' rows are mostly setup.
BLOCKED_BELOW = 16


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


#: Bytes of its zero-bordered buffer one unit of :class:`DepthwiseBlocked` fills: a block's
#: plane is cut into bands of output rows whose input rows take at most this much (at
#: least one output row; 0: the whole plane), so that a layer of few blocks still gives
#: every thread units: on the 16-core Xeon MobileNetV2 224^2 1.08x on 8 threads and 1.23x on
#: 16, EfficientNet-B0 224^2 1.05x and 1.19x (its 6 blocks of 96 channels were 6 units); on
#: the 2-core machine 0.98-1.02x (``python benchmarks/bench_setting.py
#: tensorlayout.backends.cpu_kernels.DW_BAND_BYTES 0 65536 --threads T --nets ...``,
#: ``benchmarks/results/setting_dw_band_bytes_xeon.txt``, ``setting_dw_band_bytes_ci2.txt``).
DW_BAND_BYTES = 64 << 10


class DepthwiseBlocked:
    """A depthwise convolution (multiplier 1) of fixed shapes by blocks of 16 channels
    (:mod:`.cpu_source_block`): each output position's 16 channels one vector sum over the
    taps, in machine code (``tl_dw_block``, or ``tl_dw_direct`` reading a blocked input where
    it lies; their 3 x 3 and 5 x 5 forms unrolled).  ``w``:
    (C, 1, KH, KW); ``args`` as :func:`depthwise` takes them; ``x_blocked``, ``y_blocked``:
    the input, the output in the blocked layout (N, ceil(C/16), H, W, 16) instead of NCHW."""

    def __init__(self, w, bias, args, x_shape, out_hw, x_blocked=False, y_blocked=False):
        from ..winograd import _simd_block

        sh, sw, ph, pw, dh, dw, mult, act, a0, a1 = args
        if mult != 1:
            raise ValueError("blocked depthwise needs a multiplier of 1")
        N, C, H, W = x_shape
        KH, KW = w.shape[2:]
        OH, OW = out_hw
        B = -(-C // 16)
        # the window and the bias blocked as the activations are: (B, KH, KW, 16), (B·16,)
        self.w = to_blocked(np.asarray(w, np.float32).reshape(1, C, KH, KW))[0]
        self.bias = to_blocked(np.asarray(bias, np.float32).reshape(1, C, 1, 1)).reshape(-1)
        self.f = np.array([a0, a1], np.float64)
        self.lohi = np.array([a0, a1], np.float32)
        PH = max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1)
        PW = max(W + pw, (OW - 1) * sw + (KW - 1) * dw + 1)
        # a blocked input is read where it lies (DW_DIRECT), an NCHW one from its copy
        direct = x_blocked and _simd_block.DW_DIRECT
        name = _simd_block.block_function(KH, KW, sh, sw, dh, dw, direct)
        # bands of output rows whose input rows fill at most DW_BAND_BYTES of the buffer
        rows = OH
        if DW_BAND_BYTES:
            rows_in = DW_BAND_BYTES // (PW * 64)
            rows = max(1, min(OH, (rows_in - (KH - 1) * dh - 1) // sh + 1))
        self.rows = rows
        # each thread's zero-bordered plane (none where the input is read where it lies) and
        # output plane (none where the output is blocked: written in place)
        self.units = N * B * -(-OH // rows)
        self.pad = 0 if direct else PH * PW * 16
        self.ybuf = 0 if y_blocked else OH * OW * 16
        self.shape = (N, B, OH, OW, 16) if y_blocked else (N, C, OH, OW)
        self.template = np.array(
            [0, N, C, H, W, self.w.ctypes.data, self.bias.ctypes.data, 0, OH, OW, KH, KW, sh, sw,
             ph, pw, dh, dw, act, self.f.ctypes.data, 0, PH, PW, 0,
             _simd.module().addr[name], int(x_blocked), int(y_blocked), self.lohi.ctypes.data,
             _simd.module().addr["tl_act"], rows], np.int64)

    def __call__(self, x, nt=None):
        y = np.empty(self.shape, np.float32)
        run_calls(self.calls(x, y, threads() if nt is None else nt))
        return y

    def calls(self, x, y, nt):
        """The native calls that write ``y`` from ``x`` on ``nt`` threads at most."""
        nt = max(1, min(nt, self.units))
        pad = np.zeros(max(1, nt * self.pad), np.float32)
        ybuf = np.empty(max(1, nt * self.ybuf), np.float32)
        ctx = self.template.copy()
        ctx[0], ctx[7], ctx[20], ctx[23] = _at(x), _at(y), _at(pad), _at(ybuf)
        return [(_module().BLOCK_ENTRY.address, ctx, nt, (x, y, pad, ybuf))]


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
    _pool().run(_module().EPILOGUE_ENTRY.address, _at(ctx), nt, claims=True)
    return y3


#: Max pooling of a 2 x 2 or 3 x 3 window at stride 2 by the machine code, not the compiled
#: separable loop (whole networks: ``python benchmarks/bench_setting.py
#: tensorlayout.backends.cpu_kernels.MAX_POOL_SIMD False True ...``,
#: ``benchmarks/results/setting_max_pool_simd_ci2.txt``): SqueezeNet 1.1 1.03x at 224^2 and
#: 1.05x at 96^2, VGG-11 1.02x, ResNet-18 224^2 1.01x, the rest within 1%.
MAX_POOL_SIMD = True


class Pool2d:
    """2-D max or average pooling of fixed shapes (float32, NCHW) on the native workers, each
    thread taking its share of (image, channel) planes.  ``p``: the graph's
    :class:`~tensorlayout.graph.ops.Pool` (windows, strides, dilations, padding, the
    ceil-mode extension); ``div``: for an average, the (OH, OW) reciprocals of each window's
    count, as the graph's kernel computes them.  A max with a column stride of 1 or 2 runs
    separably (each output row's window rows reduced first, then its columns): a 2 x 2 or
    3 x 3 window at stride 2 whose every window has a row in the plane by the machine code
    (:mod:`tensorlayout.winograd._simd_pool`), the others by a compiled loop.  ``yb``: the
    output in the blocked layout (N, ceil(C/16), OH, OW, 16), each thread taking blocks of 16
    planes, pooled into a scratch of its own and dealt into the lanes (zero past C); ``xb``:
    the input blocked too (a max of dilation 1 only), each block's output rows by the
    machine code (``tl_bmax``), into blocks or planes."""

    def __init__(self, p, x_shape, div=None, yb=False, xb=False):
        N, C, H, W = x_shape
        OH, OW = p.out
        if xb and not (p.is_max and tuple(p.dilations) == (1, 1)):
            raise ValueError(f"xb = True: a blocked input takes a max pool of dilation 1, not "
                             f"{'max' if p.is_max else 'average'} of dilations {p.dilations}")
        KH, KW = p.kernel
        (sh, sw), (dh, dw) = p.strides, p.dilations
        self.PH = max(H + p.begin[0], (OH - 1) * sh + (KH - 1) * dh + 1)
        self.PW = max(W + p.begin[1], (OW - 1) * sw + (KW - 1) * dw + 1)
        self.PW += self.PW % 2           # even: a stride-2 kernel splits it into two halves
        self.PH += 2                     # the separable kernel's two rows below the plane
        fast = (MAX_POOL_SIMD and p.is_max and KH == KW and KH in POOL_WINDOWS
                and (sh, sw) == (2, 2) and (dh, dw) == (1, 1) and p.begin[0] < KH
                and (OH - 1) * 2 - p.begin[0] < H)
        if fast:                         # its row and, last, the plane's exponent field
            self.PW = max(self.PW, row_floats(OW) + 1, p.begin[1] + W + 1)
            self.PW += self.PW % 2
        self.fill = -np.inf if p.is_max else 0.0
        self.div = (np.ones((OH, OW), np.float32) if div is None
                    else np.ascontiguousarray(np.broadcast_to(div, (1, 1, OH, OW))[0, 0], np.float32))
        self.shape = (N, -(-C // 16), OH, OW, 16) if yb else (N, C, OH, OW)
        self.planes = N * -(-C // 16) if yb or xb else N * C
        self.scratch = 16 * OH * OW if yb and not xb else 0
        kind = 0
        if fast:
            kind = -2
        elif p.is_max and sw in (1, 2):
            kind = -1                    # separable: rows first, then columns
        elif not p.is_max and (dh, dw) == (1, 1) and (KH, KW, sh, sw) in POOL_SPECIAL:
            kind = POOL_SPECIAL.index((KH, KW, sh, sw)) + 1
        self.template = np.array([0, N, C, H, W, 0, OH, OW, KH, KW, sh, sw, *p.begin, dh, dw,
                                  p.is_max, self.div.ctypes.data, 0, self.PH, self.PW, kind,
                                  _simd.module().addr[f"tl_max{KH}s2"] if fast else 0,
                                  int(yb), 0, int(xb), _simd.module().addr["tl_bmax"], OH],
                                 np.int64)
        self.OH = OH
        assert len(self.template) == len(POOL_CTX)

    def __call__(self, x, nt=None):
        """``y`` for C-contiguous float32 ``x`` of the shape given at construction."""
        y = np.empty(self.shape, np.float32)
        run_calls(self.calls(x, y, threads() if nt is None else nt))
        return y

    def calls(self, x, y, nt):
        """The native call that writes ``y`` from ``x`` on ``nt`` threads at most."""
        ctx = self.template.copy()
        if ctx[POOL_CTX.index("xb")]:   # units of rows too: four a thread at least
            rows = max(1, min(self.OH, -(-(self.planes * self.OH) // (4 * nt))))
            ctx[POOL_CTX.index("rows")] = rows
            nt = max(1, min(nt, self.planes * -(-self.OH // rows)))
        else:
            nt = max(1, min(nt, self.planes))
        pad = np.full((nt, self.PH, self.PW), self.fill, np.float32)
        ys = np.empty(nt * self.scratch, np.float32)
        ctx[0], ctx[5], ctx[18], ctx[24] = _at(x), _at(y), _at(pad), _at(ys)
        return [(_module().POOL_ENTRY.address, ctx, nt, (x, y, pad, ys))]


def rows_calls(x2, y, s, op, nt, affine=None):
    """The native call of the rows entry: the means of the rows of ``x2`` (R, P) into ``y``
    (op 0), the rows scaled by ``s`` (R,) into ``y`` (R, P) (op 1), or (op 2, ``affine``:
    (C, b, act)) row r times ``s[r % C]`` plus ``b[r % C]``, then the activation."""
    R, P = x2.shape
    # a thread per 16 KiB of the planes at least: waking one costs more than a smaller share
    nt = max(1, min(nt, R, x2.size // 4096 or 1))
    C, b, act = affine if affine is not None else (R, None, (0, 0.0, 0.0))
    f = np.array(act[1:], np.float64)
    ctx = np.array([_at(x2), R, P, _at(y), 0 if s is None else _at(s), op, C,
                    0 if b is None else _at(b), act[0], _at(f)], np.int64)
    return [(_module().ROWS_ENTRY.address, ctx, nt, (x2, y, s, b, f))]


def concat_calls(axis, ins, y, nt):
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


def transpose_calls(perm, ins, y, nt):
    """The native call that writes ``y``, the C-contiguous float32 ``ins[0]`` with its axes
    permuted by ``perm`` (output axes of one element dropped, and neighbours that run on
    together in both tensors merged, so that each copied row is as long as it can be)."""
    x = ins[0]
    strides = [int(np.prod(x.shape[i + 1:], dtype=np.int64)) for i in range(x.ndim)]
    dims, st = [], []
    for k in perm:
        if x.shape[k] == 1:
            continue
        if dims and st[-1] == strides[k] * x.shape[k]:
            dims[-1] *= x.shape[k]
            st[-1] = strides[k]
        else:
            dims.append(int(x.shape[k]))
            st.append(strides[k])
    dims, st = np.array(dims or [1], np.int64), np.array(st or [1], np.int64)
    ctx = np.array([_at(x), _at(y), len(dims), _at(dims), _at(st), x.size, y.size], np.int64)
    rows = y.size // int(dims[-1]) if y.size else 0
    return [(_module().PERMUTE_ENTRY.address, ctx,
             max(1, min(nt, y.size // 16384 or 1, rows or 1)), (x, y, dims, st))]


def block_rows_calls(x, y, s, op, nt):
    """The native call of a blocked tensor's plane means (op 0: ``x`` (N, B, H, W, 16) into
    ``y``, N·C floats) or its planes each times one factor (op 1: ``s``, N·C floats, into
    blocked ``y``), one block of 16 channels per unit; ``C`` is y's (op 0) or s's length
    over N."""
    N, B = x.shape[:2]
    P = int(np.prod(x.shape[2:-1], dtype=np.int64))
    C = (y.size if op == 0 else s.size) // N
    fn = _simd.module().addr["tl_block_mean" if op == 0 else "tl_block_scale"]
    ctx = np.array([_at(x), N, C, P, _at(y), 0 if s is None else _at(s), op, fn], np.int64)
    return [(_module().BLOCK_ROWS_ENTRY.address, ctx, max(1, min(nt, N * B)), (x, y, s))]


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
