"""Direct convolution loops: one multiply-add per tap that falls inside the input.

Used for depthwise and other one-channel-per-group convolutions (and on request).
Taps in the padding are skipped, which is exact for finite weights; the caller sends
non-finite weights to im2col so that NaN and Inf follow PyTorch's semantics.
"""

from __future__ import annotations

import numpy as np


def direct(plan, x: np.ndarray, use_numba: bool) -> np.ndarray:
    N, C, H, W = x.shape
    K, Cg, KH, KW = plan.w.shape
    sh, sw = plan.stride
    ph, pw = plan.padding
    dh, dw = plan.dilation
    groups = plan.groups
    y = np.empty(plan.out_shape, dtype=x.dtype)
    if use_numba:
        from . import _kernels

        _kernels.direct(x, plan.w, plan.bias, y, sh, sw, ph, pw, dh, dw, groups)
        return y
    Kg = K // groups
    OH, OW = plan.out_shape[2:]
    y[...] = plan.bias[None, :, None, None]
    yg = y.reshape(N, groups, Kg, OH, OW)
    wg = plan.w.reshape(groups, Kg, Cg, KH, KW)
    for kh in range(KH):
        lo_h, hi_h = _valid(kh * dh - ph, sh, H, OH)
        for kw in range(KW):
            lo_w, hi_w = _valid(kw * dw - pw, sw, W, OW)
            if lo_h >= hi_h or lo_w >= hi_w:
                continue
            iy0 = lo_h * sh + kh * dh - ph
            ix0 = lo_w * sw + kw * dw - pw
            xs = x[:, :, iy0:iy0 + sh * (hi_h - lo_h - 1) + 1:sh,
                   ix0:ix0 + sw * (hi_w - lo_w - 1) + 1:sw]
            xs = xs.reshape(N, groups, Cg, hi_h - lo_h, hi_w - lo_w)
            yg[:, :, :, lo_h:hi_h, lo_w:hi_w] += np.einsum("gkc,ngchw->ngkhw", wg[:, :, :, kh, kw], xs)
    return y


def _valid(off: int, s: int, size: int, out: int):
    """Output range [lo, hi) whose input index o·s + off lies in [0, size)."""
    lo = 0 if off >= 0 else (-off + s - 1) // s
    hi = (size - 1 - off) // s + 1 if size - 1 - off >= 0 else 0
    return min(lo, out), max(min(hi, out), 0)
