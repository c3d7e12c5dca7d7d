"""Float64 reference computations for the NPU kernels: direct convolution and pooling in NumPy.

They follow the textbook formulas (one sliding-window view, no transforms) and serve as the
yardstick the planner and the network runner report their error against.

>>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
>>> conv2d_reference(x, np.ones((1, 1, 2, 2), np.float32), stride=2).ravel().tolist()
[10.0, 18.0, 42.0, 50.0]
"""

from __future__ import annotations

import numpy as np

from .._checks import pair

__all__ = ["conv2d_reference", "max_pool_reference", "avg_pool_reference"]


def _pad4(padding):
    if isinstance(padding, (int, np.integer)):
        return (int(padding),) * 4
    p = tuple(int(v) for v in padding)
    return (p[0], p[0], p[1], p[1]) if len(p) == 2 else p


def _windows(x, kh, kw, stride, dilation, padding, fill):
    pt, pb, pl, pr = _pad4(padding)
    sh, sw = pair("stride", stride)
    dh, dw = pair("dilation", dilation)
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    n, c, h, w = xp.shape
    ho = (h - (kh - 1) * dh - 1) // sh + 1
    wo = (w - (kw - 1) * dw - 1) // sw + 1
    s = xp.strides
    return np.lib.stride_tricks.as_strided(
        xp, (n, c, ho, wo, kh, kw), (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw), writeable=False)


def conv2d_reference(x, weight, bias=None, padding=0, stride=1, dilation=1) -> np.ndarray:
    """Float64 direct convolution of NCHW ``x`` with OIHW ``weight`` (plus per-channel ``bias``)."""
    w = np.asarray(weight, np.float64)
    win = _windows(x, w.shape[2], w.shape[3], stride, dilation, padding, 0.0)
    y = np.einsum("nchwij,ocij->nohw", win, w, optimize=True)
    if bias is not None:
        y += np.asarray(bias, np.float64).reshape(1, -1, 1, 1)
    return y


def max_pool_reference(x, kernel, padding=0, stride=None) -> np.ndarray:
    """Float64 max pooling (padding never wins)."""
    kh, kw = pair("kernel", kernel)
    return _windows(x, kh, kw, stride or (kh, kw), 1, padding, -np.inf).max(axis=(4, 5))


def avg_pool_reference(x, kernel, padding=0, stride=None) -> np.ndarray:
    """Float64 average pooling over the whole window (padding counts as 0)."""
    kh, kw = pair("kernel", kernel)
    return _windows(x, kh, kw, stride or (kh, kw), 1, padding, 0.0).mean(axis=(4, 5))
