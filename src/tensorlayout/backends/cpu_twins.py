"""The NumPy twins of the CPU backend's compiled kernels (:mod:`.cpu_kernels`): they serve
while numba compiles, where numba or llvmlite is absent, and for arrays other than
C-contiguous float32; the tests hold each against its compiled kernel and a float64
definition.  Activation codes are :data:`.cpu_source.ACT`'s."""

from __future__ import annotations

import numpy as np

from ..buffer import convert

__all__ = ["activate_numpy", "epilogue_numpy", "depthwise_numpy", "to_blocked", "from_blocked",
           "blocked_shape"]


def blocked_shape(shape) -> tuple:
    """The blocked layout's shape of an NCHW ``shape``: (N, ceil(C/16), H, W, 16)."""
    N, C, H, W = shape
    return (N, -(-C // 16), H, W, 16)


def to_blocked(x):
    """NCHW ``x`` in the blocked layout (N, ceil(C/16), H, W, 16), the lanes past C zero:
    the layout core's NCHW16c (:func:`tensorlayout.buffer.convert`).

    >>> import numpy as np
    >>> to_blocked(np.arange(2 * 3, dtype=np.float32).reshape(1, 2, 1, 3))[0, 0, 0, :, :3]
    array([[0., 3., 0.],
           [1., 4., 0.],
           [2., 5., 0.]], dtype=float32)
    """
    return convert(x, "NCHW", "NCHW16c")


def from_blocked(xb, C):
    """The NCHW tensor of ``C`` channels that blocked ``xb`` holds (its lanes past C
    dropped)."""
    return convert(xb, "NCHW16c", "NCHW", channels=C)


def activate_numpy(y, act, a0, a1):
    """The activation of code ``act`` in place on ``y``, in NumPy."""
    t = y.dtype.type
    if act == 1:
        np.clip(y, t(0), t(np.inf), out=y)
    elif act == 2:
        np.clip(y, t(a0), t(a1), out=y)
    elif act == 3:
        np.copyto(y, np.where(y >= 0, y, y * t(a0)))
    elif act == 4:
        with np.errstate(over="ignore"):
            np.negative(y, out=y)
            np.exp(y, out=y)
            y += 1
            np.reciprocal(y, out=y)
    elif act == 5:
        g = y * t(a0)
        g += t(a1)
        np.clip(g, 0, 1, out=g)
        y *= g
    elif act == 6:
        y *= t(a0)
        y += t(a1)
        np.clip(y, 0, 1, out=y)
    elif act == 7:
        np.tanh(y, out=y)
    elif act == 8:
        with np.errstate(over="ignore"):
            g = np.exp(-y)
            g += 1
            np.reciprocal(g, out=g)
            y *= g
    return y


def epilogue_numpy(y, bias, has_bias, res, has_res, act, a0, a1):
    """The CPU backend's epilogue in NumPy (``y`` (N, C, P), in place)."""
    if has_bias:
        y += bias[None, :, None]
    if has_res:
        y += res
    activate_numpy(y, act, a0, a1)


def depthwise_numpy(x, w, bias, y, sh, sw, ph, pw, dh, dw, mult, act, a0, a1):
    """The CPU backend's depthwise convolution in NumPy: each tap's strided window of the padded input."""
    N, C, H, W = x.shape
    K, _, KH, KW = w.shape
    OH, OW = y.shape[2:]
    # zeros before (the begin padding) and after, as far as the last window reaches
    xp = np.zeros((N, C, max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1),
                   max(W + pw, (OW - 1) * sw + (KW - 1) * dw + 1)), x.dtype)
    xp[:, :, ph:ph + H, pw:pw + W] = x
    xk = np.repeat(xp, mult, axis=1) if mult > 1 else xp
    y[...] = bias[None, :, None, None]
    for kh in range(KH):
        for kw in range(KW):
            win = xk[:, :, kh * dh: kh * dh + sh * (OH - 1) + 1: sh,
                     kw * dw: kw * dw + sw * (OW - 1) + 1: sw]
            y += w[None, :, 0, kh, kw, None, None] * win
    activate_numpy(y, act, a0, a1)
