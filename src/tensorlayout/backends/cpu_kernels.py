"""The CPU backend's compiled kernels (numba): depthwise convolution and the epilogue that a
convolution, a fully connected layer or an element-wise op ends with (bias, activation,
residual), each parallel over the (batch, channel) planes of NCHW tensors.

Activation codes are those of :data:`ACT`; ``a0`` and ``a1`` are the activation's
parameters as :class:`~tensorlayout.graph.ops.Activation` holds them (Clip's bounds,
LeakyRelu's slope, HardSigmoid's and HardSwish's slope and offset).  NaN propagates as
onnxruntime propagates it: max(NaN, 0) is NaN.

Each kernel has a NumPy twin (:func:`depthwise_numpy`, :func:`epilogue_numpy`) that serves
while numba compiles in the background (:mod:`tensorlayout._jit`) or when numba is absent;
the tests hold the two against each other and against a float64 direct convolution.
"""

from __future__ import annotations

import numpy as np

from .. import _backend, _jit

__all__ = ["ACT", "act_code", "depthwise", "epilogue", "depthwise_numpy", "epilogue_numpy",
           "ready"]

#: Activation codes of the kernels.
ACT = {None: 0, "Relu": 1, "Clip": 2, "LeakyRelu": 3, "Sigmoid": 4, "HardSwish": 5,
       "HardSigmoid": 6, "Tanh": 7}


def act_code(p) -> tuple:
    """``(code, a0, a1)`` of an :class:`~tensorlayout.graph.ops.Activation` (or None)."""
    if p is None:
        return 0, 0.0, 0.0
    return ACT[p.kind], float(p.alpha), float(p.beta)


_KERNELS: dict = {}


def _compiled():
    """The numba kernels, defined (not compiled) on first use."""
    if _KERNELS:
        return _KERNELS
    numba = _backend.numba()
    njit, prange = numba.njit, numba.prange

    @njit(inline="always")
    def activate(v, act, a0, a1):
        if act == 1:
            return v if not v < 0 else 0.0              # NaN stays NaN
        if act == 2:
            if v < a0:
                return a0
            if v > a1:
                return a1
            return v
        if act == 3:
            return v if v >= 0 else v * a0
        if act == 4:
            return 1.0 / (1.0 + np.exp(-v))
        if act == 5:
            g = v * a0 + a1
            g = 0.0 if g < 0 else (1.0 if g > 1 else g)
            return v * g
        if act == 6:
            g = v * a0 + a1
            return 0.0 if g < 0 else (1.0 if g > 1 else g)
        if act == 7:
            return np.tanh(v)
        return v

    @njit(parallel=True, cache=True, fastmath=False)
    def epilogue(y, bias, has_bias, res, has_res, act, a0, a1):
        N, C = y.shape[0], y.shape[1]
        P = y.shape[2]
        for nc in prange(N * C):
            n = nc // C
            c = nc - n * C
            b = bias[c] if has_bias else np.float32(0)
            for i in range(P):
                v = y[n, c, i] + b
                if has_res:
                    v += res[n, c, i]
                y[n, c, i] = activate(v, act, a0, a1)

    @njit(parallel=True, cache=True, fastmath=False)
    def depthwise(x, w, bias, y, sh, sw, ph, pw, dh, dw, mult, act, a0, a1):
        N, C, H, W = x.shape
        K, KH, KW = w.shape[0], w.shape[2], w.shape[3]
        OH, OW = y.shape[2], y.shape[3]
        for nk in prange(N * K):
            n = nk // K
            k = nk - n * K
            c = k // mult
            b = bias[k]
            for oh in range(OH):
                for ow in range(OW):
                    y[n, k, oh, ow] = b
                for kh in range(KH):
                    iy = oh * sh + kh * dh - ph
                    if iy < 0 or iy >= H:
                        continue
                    for kw in range(KW):
                        wv = w[k, 0, kh, kw]
                        off = kw * dw - pw
                        lo = 0 if off >= 0 else (-off + sw - 1) // sw
                        hi = (W - 1 - off) // sw + 1 if W - 1 - off >= 0 else 0
                        if hi > OW:
                            hi = OW
                        for ow in range(lo, hi):
                            y[n, k, oh, ow] += wv * x[n, c, iy, ow * sw + off]
                if act != 0:
                    for ow in range(OW):
                        y[n, k, oh, ow] = activate(y[n, k, oh, ow], act, a0, a1)

    _KERNELS.update(epilogue=epilogue, depthwise=depthwise)
    return _KERNELS


def _warm():
    """Compile the kernels on tiny inputs (what a background compile runs)."""
    k = _compiled()
    x = np.ones((1, 2, 5, 5), np.float32)
    y = np.empty((1, 2, 5, 5), np.float32)
    k["depthwise"](x, np.ones((2, 1, 3, 3), np.float32), np.zeros(2, np.float32), y,
                   1, 1, 1, 1, 1, 1, 1, 1, 0.0, 0.0)
    k["epilogue"](y.reshape(1, 2, 25), np.zeros(2, np.float32), True, y.reshape(1, 2, 25),
                  False, 1, 0.0, 0.0)


def ready() -> bool:
    """True when the compiled kernels can run now (numba installed and compiled or cached);
    otherwise a background compile starts and the NumPy twins serve."""
    if _backend.numba() is None:
        return False
    k = _compiled()
    return _jit.ready("cpu-backend", (k["depthwise"], k["epilogue"]), _warm)


# ---------------------------------------------------------------------------- NumPy twins
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
    return y


def epilogue_numpy(y, bias, has_bias, res, has_res, act, a0, a1):
    """:func:`epilogue` in NumPy (``y`` (N, C, P), in place)."""
    if has_bias:
        y += bias[None, :, None]
    if has_res:
        y += res
    activate_numpy(y, act, a0, a1)


def depthwise_numpy(x, w, bias, y, sh, sw, ph, pw, dh, dw, mult, act, a0, a1):
    """:func:`depthwise` in NumPy: each tap's strided window of the padded input."""
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


def depthwise_call(x, w, bias, y, args):
    """The compiled depthwise kernel when ready, else its NumPy twin."""
    fn = _compiled()["depthwise"] if ready() else depthwise_numpy
    fn(x, w, bias, y, *args)
    return y


def epilogue_call(y3, bias, res3, act):
    """The compiled epilogue when ready, else its NumPy twin; ``y3`` (N, C, P) in place."""
    has_bias, has_res = bias is not None, res3 is not None
    b = bias if has_bias else np.zeros(1, y3.dtype)
    r = res3 if has_res else y3
    fn = _compiled()["epilogue"] if ready() else epilogue_numpy
    fn(y3, b, has_bias, r, has_res, *act)
    return y3


depthwise = depthwise_call
epilogue = epilogue_call
