"""The CPU backend's direct convolution: the output's positions the micro-kernel's rows and
its channels the vectors, over the input dealt into a zero-bordered blocked copy.

A convolution of one group reads, for output position (oh, ow) and tap (kh, kw), input
position (oh·sh + kh·dh, ow·sw + kw·dw) less the padding.  With the input held as
(N, CB, Hp, Wp, 16) (16 channels side by side at each position, the padding zeros around
the image, zeros in the lanes past C), the 16 channels of block b at that position are 16
consecutive floats, at a fixed offset from the output position's for each (b, kh, kw): the
convolution is a GEMM whose rows are a panel of output positions (R output rows of cw
positions, the shape of :func:`~tensorlayout.winograd._simd_block.direct_panel` that wastes
least of the map: 1 x 14 on a map 28 wide, 2 x 6 on one 6 wide), whose depth is the runs of
16 lanes of every (b, kh, kw) tap (a table of offsets) and whose columns are the output
channels (the weights packed once in strips of nr): ``tl_dc{R}x{cw}s{sw}``, in whose code
each position's offset is a constant (a row of the panel one pointer), so that its loads
need no register beyond those.  Nothing is unfolded, no column is computed and dropped (the
shifted GEMM's grid computes its overhang) and no weight panel is left half empty; the sums
go to ``y``'s planes with the bias, the residual and Relu or Clip in the store
(:mod:`.cpu_source_block`'s ``direct_entry``).
"""

from __future__ import annotations

import numpy as np

from ..winograd import _simd
from ..winograd._pool import address as _at
from ..winograd._simd_block import direct_panel
from .cpu_native import module as _module
from .cpu_native import run_calls, threads
from .cpu_source_block import DC_CTX
from .cpu_twins import to_blocked

__all__ = ["Direct", "DIRECT_ROW_UNITS"]

#: Units (image, output rows, strip) a thread aims at: the rows per unit follow from it.
DIRECT_ROW_UNITS = 8


class Direct:
    """A convolution of one group with strides 1 or 2 (any window, dilation and padding) of
    fixed shapes as :mod:`this module <.cpu_direct>` describes.  ``weights``: (O, C, KH, KW)
    float32; ``begin``: the top and left padding (the rest is what ``out_hw`` leaves);
    ``act``: (code, two parameters); ``xb``, ``yb``: the input, the output (and the
    residual) in the blocked layout (N, ceil(C/16), H, W, 16), lanes past C zero (an
    activation the store lacks then runs over the blocks' rows, every lane, before the
    lanes past O are zeroed).  ``lanes`` 1: the input dealt into a
    zero-bordered NCHW copy instead, each (channel, kh, kw) a run of one float
    (``tl_dcn{R}x{cw}s{sw}``): a network's first layer of 3 channels, which blocks of 16
    would leave mostly zeros (its input NCHW)."""

    def __init__(self, weights, bias, act, x_shape, strides, begin, dilations, out_hw,
                 xb=False, yb=False, lanes=16):
        O, C, KH, KW = weights.shape
        N, _, H, W = x_shape
        OH, OW = out_hw
        (sh, sw), (dh, dw) = strides, dilations
        # a strided 1 x 1 layer reads every sh-th row's every sw-th position: those alone
        # are dealt (a map of OH x OW), then multiplied at stride 1
        ds = (sh, sw) if (KH, KW) == (1, 1) and tuple(begin) == (0, 0) else (1, 1)
        if ds != (1, 1):
            H, W, sh, sw = OH, OW, 1, 1
        if sw not in (1, 2):
            raise ValueError(f"strides = {strides}: the direct convolution takes a column "
                             "stride of 1 or 2")
        if lanes not in (1, 16) or (lanes == 1 and xb):
            raise ValueError(f"lanes = {lanes}: 16, or 1 for an NCHW input")
        mod = _simd.module()
        nr = mod.isa.nr
        self.panel = R, cw = direct_panel(OH, OW, mod.isa.mr)[0]
        CB = -(-C // 16) if lanes == 16 else C     # the planes or blocks of the input's copy
        ph, pw = begin
        Hp = max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1)
        Wp = max(W + pw, (OW - 1) * sw + (KW - 1) * dw + 1)
        # rows (block, kh, kw, lane) by the output channels, zero past C (each output
        # channel's window in the blocked layout of the input), in strips of nr
        w32 = np.asarray(weights, np.float32)
        self.wb = _simd.pack_rows((to_blocked(w32) if lanes == 16 else w32).reshape(O, -1), nr)
        self.offs = np.array([(b * Hp * Wp + kh * dh * Wp + kw * dw) * lanes for b in range(CB)
                              for kh in range(KH) for kw in range(KW)], np.int64)
        self.biasp = np.zeros(-(-O // nr) * nr, np.float32)
        if bias is not None:
            self.biasp[:O] = np.asarray(bias, np.float32).reshape(-1)
        self.f = np.array(act[1:], np.float64)
        self.lohi = np.array(act[1:], np.float32)
        # the buffer's floats: the images', and past them what a last panel reads beyond
        # the map (its rows and columns past the output's, a row's width further)
        self.xp_floats = (N * CB * Hp * Wp + (R * sh + 1) * Wp + cw * sw + 1) * lanes
        self.shape = (N, -(-O // 16), OH, OW, 16) if yb else (N, O, OH, OW)
        self.N, self.OH = N, OH
        self.strips = -(-O // nr)
        self.blocks_in = N * CB
        self.template = np.array(
            [0, N, C, H, W, 0, CB, Hp, Wp, ph, pw, sh, O, OH, OW, 0, self.wb.ctypes.data,
             CB * KH * KW * lanes, CB * KH * KW, self.offs.ctypes.data, self.biasp.ctypes.data,
             bias is not None, 0, 0, act[0], self.f.ctypes.data, self.lohi.ctypes.data,
             mod.addr[f"tl_dc{'' if lanes == 16 else 'n'}{R}x{cw}s{sw}"], nr, mod.addr["tl_act"],
             R, 0, sw, R, cw, int(xb), int(yb), *ds, x_shape[2], x_shape[3], lanes, H],
            np.int64)
        self.H = H
        assert len(self.template) == len(DC_CTX)

    def __call__(self, x, res=None, nt=None):
        """``y`` (N, O, OH, OW), or blocked, for C-contiguous float32 ``x`` (and residual
        ``res``) in the layouts given."""
        y = np.empty(self.shape, np.float32)
        run_calls(self.calls(x, y, res, threads() if nt is None else nt))
        return y

    def calls(self, x, y, res, nt):
        """The native calls that write ``y`` from ``x`` and ``res`` (or None) on ``nt``
        threads at most: the input dealt, then the rows multiplied."""
        xp = np.zeros(self.xp_floats, np.float32)   # its border and spare lanes stay zero
        ctx = self.template.copy()
        ctx[0], ctx[5], ctx[15] = _at(x), _at(xp), _at(y)
        if res is not None:
            ctx[22], ctx[23] = _at(res), 1
        R = self.panel[0]
        groups = -(-self.OH // R)                   # panels' rows down the map
        rows = max(1, self.N * groups * self.strips // (DIRECT_ROW_UNITS * nt))
        ctx[30] = rows = min(rows, groups) * R
        deal = ctx.copy()
        # the deal in units of rows too where the blocks are fewer than two a thread (a
        # first layer's 3 planes, a 16-channel layer's one block)
        drows = -(-self.H // max(1, -(-2 * nt // self.blocks_in)))
        deal[42] = drows
        fn = _module().DIRECT_ENTRY.address
        units = self.N * -(-self.OH // rows) * self.strips
        ctx[31] = 1
        keep = (x, y, res, xp)
        return [(fn, deal, max(1, min(nt, self.blocks_in * -(-self.H // drows))), keep),
                (fn, ctx, max(1, min(nt, units)), keep)]
