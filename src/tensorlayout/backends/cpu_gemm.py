"""The CPU backend's GEMM-based layers on the SIMD micro-kernel of
:mod:`tensorlayout.winograd._simd`: the 1 x 1 convolution (:class:`Pointwise`: blocks of
columns with their epilogue; a matrix-vector product for one column; the GEMM turned over
for a few columns; :class:`PointwiseBlocked` for a blocked input or output), the im2col
convolution (:class:`Im2col`) and the shifted GEMM (:class:`Shifted`)."""

from __future__ import annotations

import numpy as np

from ..winograd import _simd
from ..winograd._pool import address as _at
from .cpu_native import module as _module
from .cpu_native import run_calls, threads

__all__ = ["Pointwise", "PointwiseBlocked", "Im2col", "Shifted", "BLOCKED_ROWS", "SHIFT_COLUMNS",
           "SHIFT_DEPTH", "POINTWISE_COLUMNS", "THIN_COLUMNS", "THIN_DEPTH", "UNFOLD_BLOCKS_BELOW",
           "UNITS_PER_THREAD", "EPILOGUE_IN_STORE", "SPLIT_COLUMNS", "SHIFT_ROWS_FROM",
           "SHIFT_ROWS_DEPTH", "ROW_UNITS_PER_THREAD"]


#: Units of work a GEMM-based layer aims to give each thread (splitting its weight panels
#: into groups where its blocks of columns are fewer): the threads claim them as they come
#: (see ``cpu_source_claim``), so a thread another process holds back leaves the rest to the
#: others; each group reads the block of columns again.
UNITS_PER_THREAD = 2

#: :class:`Pointwise` (and :class:`Im2col`) apply the bias, the residual and Relu or Clip in
#: the GEMM's store (``tl_sgemm_ep``) rather than in a pass over each block after it (other
#: activations still take that pass).
EPILOGUE_IN_STORE = True

#: How much of a panel of the main micro-kernel's rows (mr) the narrow one's (``Isa.narrow``)
#: must save for :class:`Pointwise` and :class:`Shifted` to take it: its rows rounded up to
#: whole panels at most this share of them rounded up to panels of mr (16 outputs: 16 rows
#: against 28; 0: never); its 8 x 3 kernel is about as fast per multiply-add (SqueezeNet 1.1,
#: whose squeeze layers have 16 to 64 outputs, 1.02-1.04x at 224^2 with the 1 x 1 layers
#: alone; with the first layers too (MobileNetV3-Small's 16 outputs, MobileNetV2's and
#: EfficientNet-B0's 32) the MobileNets, EfficientNet-B0 and ShuffleNetV2 1.01-1.02x: ``python
#: benchmarks/bench_setting.py tensorlayout.backends.cpu_gemm.NARROW_FILL 0 0.9 --nets
#: ...``, ``benchmarks/results/setting_narrow_fill_ci2.txt``).
NARROW_FILL = 0.9

#: Weight bytes from which the matrix-vector product of one image on several threads cuts
#: its depth instead of its outputs: each thread then reads whole rows of the transposed
#: weights, one run through memory (a chunk of outputs reads a piece of every row, a jump
#: at each), and the parts are added up after (MobileNetV3-Small 1.06x at 96^2 and 1.02x at
#: 224^2, VGG-11 96^2 1.03x, EfficientNet-B0 96^2 1.01x, the rest within 1%: ``python
#: benchmarks/bench_setting.py tensorlayout.backends.cpu_gemm.GEMV_SPLIT_BYTES 1e15 1048576
#: --nets ...``, ``benchmarks/results/setting_gemv_split_ci2.txt``).
GEMV_SPLIT_BYTES = 1 << 20
#: Ranges of rows per thread in that split.
GEMV_SPLIT_UNITS = 4

#: Columns of one pointwise block: the block's rows of the input (at most 128 deep per GEMM
#: slice) stay in the L2 cache while every panel of weights passes over them.
POINTWISE_COLUMNS = 256

#: :class:`Pointwise` splits a layer whose input outweighs its weights (more positions than
#: output channels) by columns only, in blocks narrowed (to whole vectors) until every thread
#: has :data:`UNITS_PER_THREAD` of them, rather than into groups of weight panels: then
#: each thread reads mostly the positions the step before wrote on the same core (the
#: threads take the front and the back of every step's units, see ``cpu_source_claim``)
#: instead of every position of the input, half of them from the other core's cache.
#: Whole networks: ``benchmarks/bench_setting.py tensorlayout.backends.cpu_gemm.SPLIT_COLUMNS
#: False True`` (``benchmarks/results/setting_split_columns_ci2.txt``: SqueezeNet 1.1 3%).
SPLIT_COLUMNS = True


def _panels(mod, O: int, narrow: bool = True) -> tuple:
    """``(mr, tag)``: the rows of the micro-kernel whose panels the weights of ``O`` output
    channels take, and the suffix of its GEMMs' names: the narrow kernel's (``"_n"``) where
    it has one, ``narrow`` allows it and it saves enough (:data:`NARROW_FILL`), else the
    main kernel's (``""``)."""
    mr = mod.isa.mr
    few = mod.isa.narrow[0] if mod.isa.narrow and narrow and NARROW_FILL else 0
    if few and -(-O // few) * few <= NARROW_FILL * -(-O // mr) * mr:
        return few, "_n"
    return mr, ""


class Pointwise:
    """A 1 x 1 convolution (stride 1) of fixed shapes as GEMMs of packed weights by the input's
    (C, H·W) planes on the native workers, its epilogue (bias, residual, activation) in the
    GEMM's store (see :data:`EPILOGUE_IN_STORE`), or for another activation applied to each
    block while it is in the cache.  ``weights``: (O, C) float32.  An input of one
    column (H·W = 1: a fully connected layer of one image, a squeeze-and-excite block's
    convolutions) is a matrix-vector product instead, over the weights transposed (C, O),
    each thread taking a chunk of the outputs (one image of large weights: a range of rows,
    :data:`GEMV_SPLIT_BYTES`).  Few output channels (16, 32, 48) take the
    narrow micro-kernel's panels where they fill them better (:data:`NARROW_FILL`; not with
    ``narrow`` False)."""

    def __init__(self, weights, bias, act, x_shape, narrow=True):
        O, C = weights.shape
        N, _, H, W = x_shape
        P = H * W
        # O floats, zeros without a bias (the GEMM's store reads one per row)
        self.bias = (np.zeros(O, np.float32) if bias is None
                     else np.ascontiguousarray(bias, np.float32))
        self.f = np.array(act[1:], np.float64)
        self.shape = (N, O, H, W)
        self.N = N
        if P == 1:
            self.wt = np.ascontiguousarray(weights.T, np.float32)
            self.template = np.array(
                [0, N, C, O, self.wt.ctypes.data, 0, self.bias.ctypes.data, bias is not None,
                 0, 0, act[0], self.f.ctypes.data, O, 0, 0, 0], np.int64)
            self.gemv = True
            return
        mod = _simd.module()
        mr, tag = _panels(mod, O, narrow)
        self.mr = mr
        gemm, gemm_ep = "tl_sgemm" + tag, "tl_sgemm_ep" + tag
        self.gemv = False
        self.thin = None
        if P <= THIN_COLUMNS and C >= THIN_DEPTH:
            self.thin = _Thin(weights, self.bias, bias is not None, self.f, act, x_shape, mod)
            return
        self.a = _simd.pack_rows(weights, mr)
        #: what a narrowed column block is a multiple of (a vector; Im2col: a strip of nr)
        self.block_unit = mod.isa.lanes
        npan = -(-O // mr)
        ncb = -(-P // POINTWISE_COLUMNS)
        # the store's epilogue (no activation, Relu, Clip) takes the activation's two
        # parameters as float32
        self.lohi = np.array(act[1:], np.float32)
        self.template = np.array(
            [0, N, C, P, self.a.ctypes.data, npan, mr, 0, O, self.bias.ctypes.data,
             bias is not None, 0, 0, act[0], self.f.ctypes.data, mod.addr[gemm],
             POINTWISE_COLUMNS, npan, ncb, 1, 0,
             mod.addr[gemm_ep] if EPILOGUE_IN_STORE else 0, self.lohi.ctypes.data,
             mod.addr["tl_act"]], np.int64)
        self.npan, self.ncb = npan, ncb

    def _gemv(self, x, y, res, nt):
        ctx = self.template.copy()
        ctx[0], ctx[5] = _at(x), _at(y)
        if res is not None:
            ctx[8], ctx[9] = _at(res), 1
        O = self.shape[1]
        fn = _module().GEMV_ENTRY.address
        C = int(self.template[2])
        S = min(GEMV_SPLIT_UNITS * nt, C // 16)
        if self.N == 1 and nt > 1 and S > 1 and C * O * 4 >= GEMV_SPLIT_BYTES:
            # the depth split: each unit's rows one stream through the weights, the parts
            # then added up by chunks of outputs (256 or more, whole vectors)
            part = np.empty((S, O), np.float32)
            ctx[13], ctx[14] = S, _at(part)
            ctx[12] = chunk = -(-max(256, -(-O // nt)) // 16) * 16
            add = ctx.copy()
            add[15] = 1
            keep = (x, y, res, part)
            return [(fn, ctx, max(1, min(nt, S)), keep),
                    (fn, add, max(1, min(nt, -(-O // chunk))), keep)]
        # chunks of whole vectors (16 floats), one per thread, at least 256 outputs each:
        # a smaller chunk reads the weights' rows in shorter runs (slower)
        chunk = max(256, -(-O // nt))
        ctx[12] = chunk = -(-chunk // 16) * 16
        units = self.N * -(-O // chunk)
        return [(fn, ctx, max(1, min(nt, units)), (x, y, res))]

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
        if self.thin is not None:
            return self.thin.calls(x, y, res, nt)
        ctx = self.template.copy()
        ctx[0], ctx[7] = _at(x), _at(y)
        if res is not None:
            ctx[11], ctx[12] = _at(res), 1
        # UNITS_PER_THREAD (panel group, column block) units for every thread: panels split
        # when the columns alone give too few
        want = UNITS_PER_THREAD * nt
        P, O = self.shape[2] * self.shape[3], self.shape[1]
        ncb = self.ncb
        if SPLIT_COLUMNS and P >= O and self.N * ncb < want:
            per_image = -(-want // self.N)             # blocks each image is cut into
            cbw = _up(-(-P // per_image), self.block_unit)
            ncb = -(-P // cbw)
            ctx[16], ctx[18] = cbw, ncb
        units = self.N * ncb
        groups = min(self.npan, -(-want // units)) if units < want else 1
        rp = -(-self.npan // groups)
        ctx[17], ctx[19] = rp, -(-self.npan // rp)
        return [(_module().POINTWISE_ENTRY.address, ctx,
                 max(1, min(nt, units * ctx[19])), (x, y, res))]


#: Columns (output positions) up to which :class:`Pointwise` turns its GEMM over: the
#: positions become the micro-kernel's rows (a panel of mr) and the output channels its
#: columns, where as columns a few positions would leave most of each vector empty.  Only
#: from :data:`THIN_DEPTH` input rows on: the packing and the transpose cost more than they
#: save on a shallower product (measured on 2 threads: 512 channels 3 x 3 on a 3 x 3 map
#: 469 -> 330 us; on a 4 x 4 map, 16 columns, slower; a 1 x 1 layer of 576 channels slower).
THIN_COLUMNS = 12
THIN_DEPTH = 1024


class _Thin:
    """:class:`Pointwise`'s GEMM turned over for an input of few columns (see
    :data:`THIN_COLUMNS`): the weights transposed and packed once in strips of nr columns;
    per call the input's columns packed as panels of mr rows (threads split the channels),
    then each thread's strips of output channels multiplied, transposed into ``y`` and given
    their epilogue."""

    def __init__(self, weights, bias, has_bias, f, act, x_shape, mod):
        O, C = weights.shape
        N, _, H, W = x_shape
        mr, nr = mod.isa.mr, mod.isa.nr
        ns = -(-O // nr)
        self.wb = _simd.pack_rows(weights, nr)      # W^T (C, O) as strips of nr columns
        self.bias, self.f = bias, f
        self.P, self.npan, self.ns, self.N, self.C, self.O = H * W, -(-H * W // mr), ns, N, C, O
        self.mr = mr
        self.template = np.array(
            [0, N, C, H * W, O, mr, nr, self.wb.ctypes.data, 0, 0, 0, bias.ctypes.data, 0, 0,
             f.ctypes.data, mod.addr["tl_sgemm"], 0, has_bias, act[0]], np.int64)

    def calls(self, x, y, res, nt):
        ap = np.empty(self.N * self.npan * self.C * self.mr, np.float32)
        t = np.empty(self.N * self.P * self.O, np.float32)
        ctx = self.template.copy()
        ctx[0], ctx[8], ctx[9], ctx[10] = _at(x), _at(ap), _at(t), _at(y)
        if res is not None:
            ctx[12], ctx[13] = _at(res), 1
        mul = ctx.copy()
        mul[16] = 1
        fn = _module().THIN_ENTRY.address
        keep = (x, y, res, ap, t)
        return [(fn, ctx, max(1, min(nt, self.C // 64 or 1)), keep),
                (fn, mul, max(1, min(nt, self.N * self.ns)), keep)]


#: Output positions per unit of :class:`PointwiseBlocked` (in whole panels of mr): the tile
#: of sums a thread writes before its epilogue, at most this many rows of nr floats.
BLOCKED_ROWS = 112


class PointwiseBlocked:
    """A 1 x 1 convolution (stride 1) of fixed shapes whose input or output is in the
    blocked layout (N, ceil(C/16), H, W, 16) (:mod:`.cpu_source_block`): the GEMM turned
    over, the positions the micro-kernel's rows, read where they lie in either layout
    (``tl_gemm_at``: no packing), and the output channels its columns (the weights
    transposed and packed once in strips of nr); each tile then takes the bias, the
    residual (in the output's layout) and the activation and is written to ``y`` by blocks
    of channels or by planes.  ``weights``: (O, C) float32."""

    def __init__(self, weights, bias, act, x_shape, x_blocked, y_blocked):
        O, C = weights.shape
        N, _, H, W = x_shape
        mod = _simd.module()
        mr, nr = mod.isa.mr, mod.isa.nr
        P = H * W
        K = -(-C // 16) * 16 if x_blocked else C
        wz = np.zeros((O, K), np.float32)
        wz[:, :C] = weights
        self.wb = _simd.pack_rows(wz, nr)           # W^T (K, O) as strips of nr columns
        self.bias = (np.zeros(1, np.float32) if bias is None
                     else np.ascontiguousarray(bias, np.float32).reshape(-1))
        self.f = np.array(act[1:], np.float64)
        self.lohi = np.array(act[1:], np.float32)
        self.biasp = np.zeros(-(-O // nr) * nr, np.float32)
        if bias is not None:
            self.biasp[:O] = self.bias
        # positions per unit: whole panels of mr, at most BLOCKED_ROWS
        self.rows = max(mr, min(BLOCKED_ROWS // mr, -(-P // mr)) * mr)
        self.N, self.P, self.O, self.nr = N, P, O, nr
        self.shape = (N, -(-O // 16), H, W, 16) if y_blocked else (N, O, H, W)
        self.y_blocked = y_blocked
        self.template = np.array(
            [0, N, C, P, O, nr, self.wb.ctypes.data, 0, self.bias.ctypes.data,
             bias is not None, 0, 0, act[0], self.f.ctypes.data, mod.addr["tl_gemm_at"],
             int(x_blocked), int(y_blocked), self.rows, K, self.biasp.ctypes.data,
             self.lohi.ctypes.data, mod.addr["tl_gemm_at1"], mod.isa.lanes, mod.addr["tl_act"]],
            np.int64)

    def __call__(self, x, res=None, nt=None):
        y = np.empty(self.shape, np.float32)
        run_calls(self.calls(x, y, res, threads() if nt is None else nt))
        return y

    def calls(self, x, y, res, nt):
        """The native calls that write ``y`` from ``x`` (and ``res``, y's shape and layout,
        or None), C-contiguous float32, on ``nt`` threads at most."""
        units = self.N * -(-self.P // self.rows) * -(-self.O // self.nr)
        ctx = self.template.copy()
        ctx[0], ctx[7] = _at(x), _at(y)
        if res is not None:
            ctx[10], ctx[11] = _at(res), 1
        return [(_module().PW_BLOCK_ENTRY.address, ctx, max(1, min(nt, units)), (x, y, res))]


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
    layers (and an output of one position, whose one column takes the matrix-vector
    product) unfold whole on the workers first.  ``weights``: (O, C, KH, KW) float32;
    ``begin``: the top and left padding (the bottom and right padding is what ``out_hw``
    leaves)."""

    def __init__(self, weights, bias, act, x_shape, strides, begin, dilations, out_hw):
        O, C, KH, KW = weights.shape
        N, _, H, W = x_shape
        OH, OW = out_hw
        K = C * KH * KW
        self.pw = Pointwise(np.ascontiguousarray(weights, np.float32).reshape(O, -1), bias, act,
                            (N, K, OH, OW), narrow=False)
        self.K = K
        self.blocks = K < UNFOLD_BLOCKS_BELOW and not self.pw.gemv and self.pw.thin is None
        if self.blocks:                 # columns unfolded into whole strips of nr
            self.pw.block_unit = _simd.module().isa.nr
        self.geo = np.array([C, H, W, KH, KW, *strides, *begin, *dilations, OW, 0,
                             _simd.module().isa.nr], np.int64)
        self.cols_shape = (N, K, OH * OW)
        self.template = np.array([0, N, C, H, W, 0, KH, KW, *strides, *begin, *dilations, OH, OW],
                                 np.int64)
        self.planes = N * C

    def __call__(self, x, res=None, nt=None):
        y = np.empty(self.pw.shape, np.float32)
        run_calls(self.calls(x, y, res, threads() if nt is None else nt))
        return y

    def calls(self, x, y, res, nt):
        """The native calls that write ``y`` from ``x`` and ``res`` (or None) on ``nt``
        threads at most."""
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


def _up(a: int, b: int) -> int:
    """``a`` rounded up to a multiple of ``b``."""
    return -(-a // b) * b


#: Grid columns of one shifted-GEMM block (its sums stay in the cache through every tap).
SHIFT_COLUMNS = 256
#: Depth (taps · channels) up to which, and output width from which, :class:`Shifted`
#: multiplies row by row: each output row's columns straight into the output with the
#: epilogue in the GEMM's store (``tl_sgemm_taps_ep``), no scratch, no dropped columns (a
#: network's first layer, SqueezeNet's 16-channel 3 x 3 layers).  Deeper layers keep the
#: grid's blocks (several rows to a block of columns, the weights read once per block, not
#: once per row), and so do narrower maps; the copy into the output is what they pay (whole
#: networks: ``benchmarks/bench_setting.py tensorlayout.backends.cpu_gemm.SHIFT_ROWS_DEPTH
#: 0 160``, ``benchmarks/results/setting_shift_rows_depth_ci2.txt``).
SHIFT_ROWS_DEPTH = 160
SHIFT_ROWS_FROM = 16
#: Units of output rows :class:`Shifted` aims to give each thread when multiplying row by row.
ROW_UNITS_PER_THREAD = 8
#: Rows (taps · channels) of one run of :class:`Shifted`'s sums kept in the registers: the
#: taps are grouped evenly under it (longer float32 sums lose accuracy); channels deeper than
#: this take one sliced GEMM per tap.
SHIFT_DEPTH = 512


class Shifted:
    """A convolution (one group, any window, stride, dilation and padding) as one GEMM per
    kernel tap over the input dealt into its stride phases (see
    :mod:`.cpu_source_shift`): no unfolded matrix; each block's sums are summed over the taps
    in the thread's buffer and written to ``y`` with the epilogue.  ``weights``: (O, C, KH,
    KW) float32; ``begin``: the top and left padding (the rest is what ``out_hw`` leaves).
    Few output channels (a network's first layer of 16 or 32) take the narrow micro-kernel's
    panels, as :class:`Pointwise` does."""

    def __init__(self, weights, bias, act, x_shape, strides, begin, dilations, out_hw):
        O, C, KH, KW = weights.shape
        N, _, H, W = x_shape
        OH, OW = out_hw
        (sh, sw), (dh, dw) = strides, dilations
        mod = _simd.module()
        mr, tag = _panels(mod, O)
        self.mr = mr
        self.nr = mod.isa.nr
        Hq, Wq = OH + (KH - 1) * dh // sh, OW + (KW - 1) * dw // sw
        taps = KH * KW
        wt = np.asarray(weights, np.float32).reshape(O, C, taps).transpose(2, 0, 1)
        # taps summed in registers in groups of at most SHIFT_DEPTH rows, evenly; deeper
        # channels one tap per sliced tl_sgemm
        groups = -(-taps * C // SHIFT_DEPTH)
        g = 0 if C > SHIFT_DEPTH else -(-taps // groups)
        self.a = np.concatenate([
            _simd.pack_rows(np.concatenate(list(wt[t:t + max(g, 1)]), axis=1), mr).ravel()
            for t in range(0, taps, max(g, 1))])
        self.offs = np.array([(((kh * dh % sh) * sw + kw * dw % sw) * Hq + kh * dh // sh) * Wq
                              + kw * dw // sw for kh in range(KH) for kw in range(KW)], np.int64)
        # O floats, zeros without a bias (the GEMM's store reads one per row)
        self.bias = (np.zeros(O, np.float32) if bias is None
                     else np.ascontiguousarray(bias, np.float32))
        self.f = np.array(act[1:], np.float64)
        self.lohi = np.array(act[1:], np.float32)
        self.by_rows = g == taps and taps * C <= SHIFT_ROWS_DEPTH and OW >= SHIFT_ROWS_FROM
        self.shape, self.xq_shape = (N, O, OH, OW), (N, C, sh, sw, Hq, Wq)
        self.npan = npan = -(-O // mr)
        self.Q = Q = (OH - 1) * Wq + OW
        self.N, self.rows = N, N * C * sh * Hq
        self.template = np.array(
            [0, N, C, H, W, 0, sh, sw, *begin, Hq, Wq, 0, O, OH, OW, self.a.ctypes.data, npan,
             mr, KH * KW, self.offs.ctypes.data, self.bias.ctypes.data, bias is not None, 0, 0,
             act[0], self.f.ctypes.data, mod.addr["tl_sgemm" + tag], 0, npan, 0, 1, 0, 0, Q, g,
             mod.addr["tl_sgemm_taps" + tag], 0, mod.addr["tl_sgemm_taps_ep" + tag],
             self.lohi.ctypes.data,
             mod.addr["tl_act"]], np.int64)

    def __call__(self, x, res=None, nt=None):
        """``y`` (N, O, OH, OW) for C-contiguous float32 ``x`` (and residual ``res``)."""
        y = np.empty(self.shape, np.float32)
        run_calls(self.calls(x, y, res, threads() if nt is None else nt))
        return y

    def calls(self, x, y, res, nt):
        """The native calls that write ``y`` from ``x`` and ``res`` (or None) on ``nt``
        threads at most: the phases dealt, then the blocks multiplied."""
        xq = np.zeros(self.xq_shape, np.float32)
        ctx = self.template.copy()
        ctx[0], ctx[5], ctx[12] = _at(x), _at(xq), _at(y)
        if res is not None:
            ctx[23], ctx[24] = _at(res), 1
        fn = _module().SHIFT_ENTRY.address
        deal = ctx.copy()
        deal[33] = 0
        deal_call = (fn, deal, max(1, min(nt, self.rows // 16)), (x, y, res, xq))
        if self.by_rows:
            # units of whole output rows (panel groups where the rows are too few), at
            # least UNITS_PER_THREAD per thread, and at most ROW_UNITS_PER_THREAD (a row's
            # call costs little; more units even the threads' shares)
            OH = self.shape[2]
            want = UNITS_PER_THREAD * nt
            groups = min(self.npan, max(1, -(-want // (self.N * OH))))
            rp = -(-self.npan // groups)
            nrb = -(-self.npan // rp)
            rc = max(1, self.N * nrb * OH // (ROW_UNITS_PER_THREAD * nt))
            ctx[29], ctx[31], ctx[33], ctx[37] = rp, nrb, 1, rc
            units = self.N * nrb * -(-OH // rc)
            return [deal_call, (fn, ctx, max(1, min(nt, units)), (x, y, res, xq))]
        # blocks of whole strips of nr, at most SHIFT_COLUMNS wide; when they are few, a
        # multiple of the threads of them, so that no thread waits on another's extra block
        Q = self.Q
        nb = -(-Q // SHIFT_COLUMNS)
        if self.N < nt and self.N * nb < 4 * nt:
            nb = _up(max(nb, -(-nt // self.N)), nt)
        cbw = _up(-(-Q // nb), self.nr)
        ncb = -(-Q // cbw)
        units = self.N * ncb
        want = UNITS_PER_THREAD * nt
        groups = min(self.npan, -(-want // units)) if units < want else 1
        rp = -(-self.npan // groups)
        ctx[28], ctx[29], ctx[30], ctx[31] = cbw, rp, ncb, -(-self.npan // rp)
        n = max(1, min(nt, units * ctx[31]))
        scratch = np.empty(n * rp * self.mr * cbw, np.float32)
        ctx[32], ctx[33] = _at(scratch), 1
        return [deal_call, (fn, ctx, n, (x, y, res, xq, scratch))]
