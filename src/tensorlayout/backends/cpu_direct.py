"""The CPU backend's direct convolution: the output's positions the micro-kernel's rows and
its channels the vectors, over the input dealt into a zero-bordered blocked copy.

A convolution of one group reads, for output position (oh, ow) and tap (kh, kw), input
position (oh·sh + kh·dh, ow·sw + kw·dw) less the padding.  With the input held as
(N, CB, Hp, Wp, 16) (16 channels side by side at each position, the padding zeros around
the image, zeros in the lanes past C), the 16 channels of block b at that position are 16
consecutive floats, at a fixed offset from the output position's for each (b, kh, kw): the
convolution is a GEMM whose rows are an output row's positions (16·sw floats apart), whose
depth is the runs of 16 lanes of every (b, kh, kw) tap (a table of offsets) and whose columns
are the output channels (the weights packed once in strips of nr): ``tl_gemm_at_s{sw}``,
whose rows sit at offsets that are constants in the code, so that the micro-kernel's loads
need no register beyond its pointer.  Nothing is unfolded and no column is computed and
dropped (the shifted GEMM's grid computes its overhang; its weights panels of mr rows leave
part of the last one empty); the sums go to ``y``'s planes with the bias, the residual and
Relu or Clip in the store (:mod:`.cpu_source_block`'s ``direct_entry``).
"""

from __future__ import annotations

import numpy as np

from ..winograd import _simd
from ..winograd._pool import address as _at
from .cpu_native import module as _module
from .cpu_native import run_calls, threads
from .cpu_source_block import DC_CTX

__all__ = ["Direct", "DIRECT_ROW_UNITS"]

#: Units (image, output rows, strip) a thread aims at: the rows per unit follow from it.
DIRECT_ROW_UNITS = 8


class Direct:
    """A convolution of one group with strides 1 or 2 (any window, dilation and padding) of
    fixed shapes as :mod:`this module <.cpu_direct>` describes.  ``weights``: (O, C, KH, KW)
    float32; ``begin``: the top and left padding (the rest is what ``out_hw`` leaves);
    ``act``: (code, two parameters)."""

    def __init__(self, weights, bias, act, x_shape, strides, begin, dilations, out_hw):
        O, C, KH, KW = weights.shape
        N, _, H, W = x_shape
        OH, OW = out_hw
        (sh, sw), (dh, dw) = strides, dilations
        if sw not in (1, 2):
            raise ValueError(f"strides = {strides}: the direct convolution takes a column "
                             "stride of 1 or 2")
        mod = _simd.module()
        mr, nr = mod.isa.mr, mod.isa.nr
        CB = -(-C // 16)
        ph, pw = begin
        Hp = max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1)
        Wp = max(W + pw, (OW - 1) * sw + (KW - 1) * dw + 1)
        # rows (block, kh, kw, lane) by the output channels, zero past C, in strips of nr
        wz = np.zeros((O, CB * 16, KH, KW), np.float32)
        wz[:, :C] = weights
        self.wb = _simd.pack_rows(
            wz.reshape(O, CB, 16, KH, KW).transpose(0, 1, 3, 4, 2).reshape(O, -1), nr)
        self.offs = np.array([(b * Hp * Wp + kh * dh * Wp + kw * dw) * 16 for b in range(CB)
                              for kh in range(KH) for kw in range(KW)], np.int64)
        self.biasp = np.zeros(-(-O // nr) * nr, np.float32)
        if bias is not None:
            self.biasp[:O] = np.asarray(bias, np.float32).reshape(-1)
        self.f = np.array(act[1:], np.float64)
        self.lohi = np.array(act[1:], np.float32)
        # the buffer's floats: the image's, and past them what a last panel reads beyond its
        # row (all 2·mr rows of the one-vector form, at 16·sw floats each)
        self.xp_floats = N * CB * Hp * Wp * 16 + (2 * mr * sw + KW * dw + 1) * 16
        self.xp_shape = (N, CB, Hp, Wp, 16)
        self.shape = (N, O, OH, OW)
        self.N, self.OH, self.nr = N, OH, nr
        self.strips = -(-O // nr)
        self.rows_in = N * CB * H
        self.template = np.array(
            [0, N, C, H, W, 0, CB, Hp, Wp, ph, pw, sh, O, OH, OW, 0, self.wb.ctypes.data,
             CB * KH * KW * 16, CB * KH * KW, self.offs.ctypes.data, self.biasp.ctypes.data,
             bias is not None, 0, 0, act[0], self.f.ctypes.data, self.lohi.ctypes.data,
             mod.addr[f"tl_gemm_at_s{sw}"], mod.addr[f"tl_gemm_at_s{sw}1"], nr,
             mod.isa.lanes, mod.addr["tl_act"], 1, 0, sw], np.int64)
        assert len(self.template) == len(DC_CTX)

    def __call__(self, x, res=None, nt=None):
        """``y`` (N, O, OH, OW) for C-contiguous float32 ``x`` (and residual ``res``)."""
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
        rows = max(1, self.N * self.OH * self.strips // (DIRECT_ROW_UNITS * nt))
        ctx[32] = rows = min(rows, self.OH)
        deal = ctx.copy()
        fn = _module().DIRECT_ENTRY.address
        units = self.N * -(-self.OH // rows) * self.strips
        ctx[33] = 1
        keep = (x, y, res, xp)
        return [(fn, deal, max(1, min(nt, self.rows_in // 16)), keep),
                (fn, ctx, max(1, min(nt, units)), keep)]
