"""The CPU backend's compiled kernels (numba): depthwise convolution and the epilogue that a
convolution, a fully connected layer or an element-wise op ends with (bias, activation,
residual), each parallel over the (batch, channel) planes of NCHW tensors.

The kernels are generated source (:func:`module_source`), written once into the user cache
and compiled by numba there (:func:`tensorlayout._jit.generated_module`), so that compiled
code is kept between processes.  A depthwise window of a common size and stride (3 x 3 and
5 x 5, stride 1 or 2) gets its own kernel, its taps unrolled into one sum per output that the
compiler vectorises over the output row; other windows run a generic kernel.  Both read each
plane from a zero-padded copy, so the inner loops have no bounds tests.

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
           "activate_numpy", "module_source", "ready"]

#: Activation codes of the kernels.
ACT = {None: 0, "Relu": 1, "Clip": 2, "LeakyRelu": 3, "Sigmoid": 4, "HardSwish": 5,
       "HardSigmoid": 6, "Tanh": 7}
#: Bumped when the generated source changes: a new file, compiled anew.
VERSION = 1
#: (KH, KW, stride H, stride W) with a kernel of their own (dilation 1).
SPECIAL = ((3, 3, 1, 1), (3, 3, 2, 2), (5, 5, 1, 1), (5, 5, 2, 2))


def act_code(p) -> tuple:
    """``(code, a0, a1)`` of an :class:`~tensorlayout.graph.ops.Activation` (or None)."""
    if p is None:
        return 0, 0.0, 0.0
    return ACT[p.kind], float(p.alpha), float(p.beta)


_HEAD = '''
import numpy as np
from numba import njit, prange


@njit(inline="always")
def activate(v, act, a0, a1):
    if act == 1:
        return v if not v < 0 else v * 0     # NaN stays NaN
    if act == 2:
        if v < a0:
            return v * 0 + a0
        if v > a1:
            return v * 0 + a1
        return v
    if act == 3:
        return v if v >= 0 else v * a0
    if act == 4:
        return 1 / (1 + np.exp(-v))
    if act == 5:
        g = v * a0 + a1
        g = g * 0 if g < 0 else (g * 0 + 1 if g > 1 else g)
        return v * g
    if act == 6:
        g = v * a0 + a1
        return g * 0 if g < 0 else (g * 0 + 1 if g > 1 else g)
    if act == 7:
        return np.tanh(v)
    return v


@njit(inline="always")
def padded(xp, pad, ph, pw):
    """The plane ``xp`` copied into ``pad`` at (ph, pw); the rest of ``pad`` zero."""
    H, W = xp.shape
    pad[:, :] = 0
    for i in range(H):
        for j in range(W):
            pad[i + ph, j + pw] = xp[i, j]
'''

_BASE = '''

@njit(parallel=True, cache=True)
def epilogue(y, bias, has_bias, res, has_res, act, a0, a1):
    N, C, P = y.shape
    for nc in prange(N * C):
        n = nc // C
        c = nc - n * C
        b = bias[c] if has_bias else y[n, c, 0] * 0
        for i in range(P):
            v = y[n, c, i] + b
            if has_res:
                v += res[n, c, i]
            y[n, c, i] = activate(v, act, a0, a1)


@njit(parallel=True, cache=True)
def depthwise(x, w, bias, y, sh, sw, ph, pw, dh, dw, mult, act, a0, a1):
    N, C, H, W = x.shape
    K, KH, KW = w.shape[0], w.shape[2], w.shape[3]
    OH, OW = y.shape[2], y.shape[3]
    PH = max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1)
    PW = max(W + pw, (OW - 1) * sw + (KW - 1) * dw + 1)
    for nk in prange(N * K):
        n = nk // K
        k = nk - n * K
        pad = np.empty((PH, PW), x.dtype)
        padded(x[n, k // mult], pad, ph, pw)
        yp = y[n, k]
        wk = w[k, 0]
        b = bias[k]
        for oh in range(OH):
            yr = yp[oh]
            for ow in range(OW):
                yr[ow] = b
            for kh in range(KH):
                pr = pad[oh * sh + kh * dh]
                for kw in range(KW):
                    wv = wk[kh, kw]
                    o = kw * dw
                    for ow in range(OW):
                        yr[ow] += wv * pr[ow * sw + o]
            if act != 0:
                for ow in range(OW):
                    yr[ow] = activate(yr[ow], act, a0, a1)
'''


def _special_source(KH, KW, sh, sw) -> str:
    """A depthwise kernel for one window and stride: its taps one straight-line sum."""
    name = f"depthwise_{KH}x{KW}_s{sh}x{sw}"
    loads = "\n".join(f"        w{i}_{j} = wk[{i}, {j}]" for i in range(KH) for j in range(KW))
    rows = "\n".join(f"            r{i} = pad[oh * {sh} + {i}]" for i in range(KH))
    col = (lambda j: f"ow + {j}") if sw == 1 else (lambda j: f"ow * {sw} + {j}")
    taps = "\n".join(f"                     + w{i}_{j} * r{i}[{col(j)}]"
                     for i in range(KH) for j in range(KW))
    return f'''

@njit(parallel=True, cache=True)
def {name}(x, w, bias, y, ph, pw, mult, act, a0, a1):
    N, C, H, W = x.shape
    K = w.shape[0]
    OH, OW = y.shape[2], y.shape[3]
    PH = max(H + ph, (OH - 1) * {sh} + {KH})
    PW = max(W + pw, (OW - 1) * {sw} + {KW})
    for nk in prange(N * K):
        n = nk // K
        k = nk - n * K
        pad = np.empty((PH, PW), x.dtype)
        padded(x[n, k // mult], pad, ph, pw)
        yp = y[n, k]
        wk = w[k, 0]
        b = bias[k]
{loads}
        for oh in range(OH):
{rows}
            yr = yp[oh]
            for ow in range(OW):
                yr[ow] = (b
{taps})
            if act != 0:
                for ow in range(OW):
                    yr[ow] = activate(yr[ow], act, a0, a1)
'''


def module_source() -> str:
    """The source of the kernels' module: the activation, the epilogue, the generic depthwise
    kernel and one per :data:`SPECIAL` window."""
    return (f'"""The CPU backend\'s kernels, generated by tensorlayout.backends.cpu_kernels '
            f'(version {VERSION}): do not edit."""\n' + _HEAD + _BASE
            + "".join(_special_source(*s) for s in SPECIAL))


def _module():
    return _jit.generated_module(f"cpu_backend_v{VERSION}", module_source())


def _warm():
    """Compile the kernels on tiny inputs (what a background compile runs)."""
    mod = _module()
    x = np.ones((1, 2, 5, 5), np.float32)
    y = np.empty((1, 2, 5, 5), np.float32)
    b = np.zeros(2, np.float32)
    mod.depthwise(x, np.ones((2, 1, 3, 3), np.float32), b, y, 1, 1, 1, 1, 1, 1, 1, 1, 0.0, 0.0)
    for KH, KW, sh, sw in SPECIAL:
        out = np.empty((1, 2, (5 + KH - 1 - KH) // sh + 1, (5 + KW - 1 - KW) // sw + 1), np.float32)
        getattr(mod, f"depthwise_{KH}x{KW}_s{sh}x{sw}")(
            x, np.ones((2, 1, KH, KW), np.float32), b, out, KH // 2, KW // 2, 1, 1, 0.0, 0.0)
    mod.epilogue(y.reshape(1, 2, 25), b, True, y.reshape(1, 2, 25), False, 1, 0.0, 0.0)


_READY: list = []


def ready() -> bool:
    """True when the compiled kernels can run now (numba installed and compiled or cached);
    otherwise a background compile starts and the NumPy twins serve.  Once true, it stays
    true without asking again."""
    if _READY:
        return True
    if _backend.numba() is None:
        return False
    try:
        mod = _module()
    except OSError:                     # no writable cache: the NumPy twins serve
        return False
    fns = [mod.depthwise, mod.epilogue] + [getattr(mod, f"depthwise_{a}x{b}_s{c}x{d}")
                                            for a, b, c, d in SPECIAL]
    if _jit.ready(f"cpu-backend-{VERSION}", fns, _warm):
        _READY.append(True)
        return True
    return False


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


def depthwise(x, w, bias, y, args):
    """The depthwise convolution of ``x`` (N, C, H, W) by ``w`` (C·mult, 1, KH, KW) into ``y``,
    bias and activation included; ``args`` = (sh, sw, ph, pw, dh, dw, mult, act, a0, a1)
    (ph, pw: the begin padding; the end padding is what the output's size leaves).  The
    compiled kernel when ready (one of its own for a :data:`SPECIAL` window), else NumPy."""
    if not ready():
        depthwise_numpy(x, w, bias, y, *args)
        return y
    mod = _module()
    sh, sw, ph, pw, dh, dw, mult, act, a0, a1 = args
    KH, KW = w.shape[2:]
    if (KH, KW, sh, sw) in SPECIAL and (dh, dw) == (1, 1):
        getattr(mod, f"depthwise_{KH}x{KW}_s{sh}x{sw}")(x, w, bias, y, ph, pw, mult, act, a0, a1)
    else:
        mod.depthwise(x, w, bias, y, *args)
    return y


def epilogue(y3, bias, res3, act):
    """Bias (per channel), residual and activation in place on ``y3`` (N, C, P): the compiled
    kernel when ready, else its NumPy twin."""
    has_bias, has_res = bias is not None, res3 is not None
    b = bias if has_bias else np.zeros(1, y3.dtype)
    r = res3 if has_res else y3
    fn = _module().epilogue if ready() else epilogue_numpy
    fn(y3, b, has_bias, r, has_res, *act)
    return y3
