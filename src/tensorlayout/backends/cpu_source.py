"""The source of the CPU backend's compiled kernels, generated as text.

:func:`module_source` writes one module: the activation loops (:data:`ACT_EXPR`, one
vectorisable loop per activation, with a float32 ``e ** x`` of plain arithmetic), the
epilogue, the depthwise kernels (a generic one and one per :data:`SPECIAL` window, its taps
one straight-line sum; one vectorised over channels for small planes), the im2col
unfolding (whole, or block by block into the GEMM's packed columns), and the native
workers' entries that read their arguments from an int64 context
(:data:`DW_CTX`, :data:`DWCL_CTX`, :data:`EPI_CTX`, :data:`PW_CTX`, :data:`IM2COL_CTX`,
:data:`UNFOLD_CTX`);
then :mod:`.cpu_source_claim`'s sharing of a call's units among its threads,
:mod:`.cpu_source_reduce`'s pooling and matrix-vector kernels and
:mod:`.cpu_source_shift`'s shifted-GEMM convolution and :mod:`.cpu_source_move`'s transpose.
:mod:`tensorlayout.backends.cpu_kernels` compiles and calls it.
"""

from __future__ import annotations

from .cpu_source_claim import source as claim_source
from .cpu_source_reduce import source as reduce_source
from .cpu_source_move import source as move_source
from .cpu_source_block import source as block_source
from .cpu_source_shift import source as shift_source
from .cpu_source_unfold import source as unfold_source

__all__ = ["ACT", "ACT_EXPR", "SPECIAL", "VERSION", "act_code", "module_source", "DW_CTX",
           "EPI_CTX", "PW_CTX", "IM2COL_CTX", "UNFOLD_CTX", "DWCL_CTX", "THIN_CTX"]


#: Activation codes of the kernels.
ACT = {None: 0, "Relu": 1, "Clip": 2, "LeakyRelu": 3, "Sigmoid": 4, "HardSwish": 5,
       "HardSigmoid": 6, "Tanh": 7, "SiLU": 8}
#: The generated source's version (its file is named by the source's digest).
VERSION = 17
#: (KH, KW, stride H, stride W) with a kernel of their own (dilation 1).
SPECIAL = ((3, 3, 1, 1), (3, 3, 2, 2), (5, 5, 1, 1), (5, 5, 2, 2))


def act_code(p) -> tuple:
    """``(code, a0, a1)`` of an :class:`~tensorlayout.graph.ops.Activation` (or None)."""
    if p is None:
        return 0, 0.0, 0.0
    return ACT[p.kind], float(p.alpha), float(p.beta)


_HEAD = """
import numpy as np
from numba import carray, njit

from tensorlayout.winograd._native import (Entry, call_void, f32_exp2, fetch_add, ptr_f32, ptr_f64,
                                           ptr_i64)


@njit(inline="always", error_model="numpy")
def fexp(x):
    \"\"\"e ** x in float32 by range reduction and Cephes' degree-6 polynomial (within 2 ulp),
    in plain arithmetic so that loops of it vectorise.  Past float32's range it gives inf;
    below e ** -87.3 (where float32 turns subnormal) it gives 0; NaN stays NaN.\"\"\"
    big = x > np.float32(88.72283)
    x = np.float32(-87.33654) if x < np.float32(-87.33654) else x
    x = np.float32(88.37626) if x > np.float32(88.37626) else x
    t = x * np.float32(1.442695) + np.float32(0.5)
    k = np.int32(t)
    k = k - 1 if np.float32(k) > t else k
    kf = np.float32(k)
    r = x - kf * np.float32(0.693359375) + kf * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1)
    e = p * f32_exp2(k)
    return np.float32(np.inf) if big else e


{ACT_ROW}


@njit(inline="always", error_model="numpy")
def split_columns(xp, ev, od, ph, pw):
    \"\"\"The plane ``xp`` placed at (ph, pw) of a padded plane kept as its even columns ``ev``
    and its odd columns ``od`` (the rest of both stays zero).\"\"\"
    for i in range(xp.shape[0]):
        split_row(xp[i], ev[i + ph], od[i + ph], pw)


@njit(inline="always", error_model="numpy")
def halves(pad):
    \"\"\"``pad`` (PH, PW) seen as two planes of half its width, for :func:`split_columns`.\"\"\"
    half = pad.reshape((2, pad.shape[0], pad.shape[1] // 2))
    return half[0], half[1]


@njit(inline="always", error_model="numpy")
def padded(xp, pad, ph, pw):
    \"\"\"The plane ``xp`` copied into ``pad`` at (ph, pw) (the rest of ``pad`` stays zero).\"\"\"
    H, W = xp.shape
    for i in range(H):
        src = xp[i]
        dst = pad[i + ph, pw:pw + W]
        for j in range(W):
            dst[j] = src[j]


@njit(cache=True, nogil=True, error_model="numpy")
def epilogue_block(y, bias, has_bias, res, has_res, act, a0, a1, r0, r1, c0, c1, C):
    # rows r0..r1 and columns c0..c1 of y (R, P); row r is channel r % C.  Without a bias,
    # bias holds one zero (never y's own element times 0: NaN there would poison the row)
    for r in range(r0, r1):
        b = bias[r % C] if has_bias else bias[0]
        yr = y[r, c0:c1]
        if has_res:
            rr = res[r, c0:c1]
            for i in range(yr.shape[0]):
                yr[i] = yr[i] + b + rr[i]
        elif has_bias:
            for i in range(yr.shape[0]):
                yr[i] = yr[i] + b
        act_row(yr, 0, yr.shape[0], act, a0, a1)


@njit(cache=True, nogil=True, error_model="numpy")
def depthwise_planes(x, w, bias, y, sh, sw, ph, pw, dh, dw, mult, act, a0, a1, q0, q1, pad, yf):
    # pad: (PH, PW), zero; each plane is copied into its interior.  yf: y flat (the
    # activation runs once per plane)
    N, C, H, W = x.shape
    K, KH, KW = w.shape[0], w.shape[2], w.shape[3]
    OH, OW = y.shape[2], y.shape[3]
    for nk in range(q0, q1):
        n = nk // K
        k = nk - n * K
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
        act_row(yf, nk * OH * OW, (nk + 1) * OH * OW, act, a0, a1)


@njit(cache=True, nogil=True, error_model="numpy")
def depthwise_channels_last(x, wt, bias, y, sh, sw, ph, pw, dh, dw, act, a0, a1, c0, c1, xt,
                            acc):
    # channels c0..c1 of a depthwise convolution (multiplier 1) vectorised over channels:
    # each image's planes moved into xt (PH, PW, C) (its border zeroed here), then every
    # output position one pass per tap over the channels' weights wt (KH, KW, C), the
    # bias first and the taps in order, as the per-plane kernels sum them
    N, C, H, W = x.shape
    KH, KW = wt.shape[0], wt.shape[1]
    OH, OW = y.shape[2], y.shape[3]
    PH, PW = xt.shape[0], xt.shape[1]
    m = c1 - c0
    a = acc[c0:c1]
    b = bias[c0:c1]
    for r in range(PH):
        for q in range(PW):
            if ph <= r < ph + H and pw <= q < pw + W:
                continue
            z = xt[r, q, c0:c1]
            for i in range(m):
                z[i] = 0
    for n in range(N):
        for c in range(c0, c1):
            xp = x[n, c]
            for h in range(H):
                for j in range(W):
                    xt[h + ph, j + pw, c] = xp[h, j]
        yn = y[n]
        for oh in range(OH):
            for ow in range(OW):
                for i in range(m):
                    a[i] = b[i]
                for kh in range(KH):
                    for kw in range(KW):
                        src = xt[oh * sh + kh * dh, ow * sw + kw * dw, c0:c1]
                        wk = wt[kh, kw, c0:c1]
                        for i in range(m):
                            a[i] += wk[i] * src[i]
                act_row(acc, c0, c1, act, a0, a1)
                for i in range(m):
                    yn[c0 + i, oh, ow] = a[i]
"""


#: Each activation as an expression of ``v`` (float32) and ``lo``, ``hi``, ``z`` (zero) and
#: ``one``: the kernels' parameters a0, a1 as float32.  NaN propagates as onnxruntime
#: propagates it (every comparison with NaN is false, so NaN falls through to ``v``).
ACT_EXPR = {
    1: "v if not v < z else z",
    2: "lo if v < lo else (hi if v > hi else v)",
    3: "v if v >= z else v * lo",
    4: "one / (one + fexp(-v))",
    5: "v * (z if v * lo + hi < z else (one if v * lo + hi > one else v * lo + hi))",
    6: "z if v * lo + hi < z else (one if v * lo + hi > one else v * lo + hi)",
    7: "np.tanh(v)",
    8: "v * (one / (one + fexp(-v)))",
}


def _act_row_source() -> str:
    """``act_row(yr, c0, c1, act, a0, a1)``: the activation in place on ``yr[c0:c1]``, one
    loop per activation, so that each loop is a straight vectorisable pass."""
    lines = ["@njit(cache=True, nogil=True, error_model=\"numpy\")", "def act_row(yr, c0, c1, act, a0, a1):",
             "    lo = np.float32(a0)", "    hi = np.float32(a1)", "    z = np.float32(0)",
             "    one = np.float32(1)"]
    # a slice walked from 0: indices known to be non-negative, so no wraparound test keeps
    # the loop from being vectorised
    lines += ["    s = yr[c0:c1]", "    n = s.shape[0]"]
    for i, (code, expr) in enumerate(ACT_EXPR.items()):
        lines += [f"    {'if' if i == 0 else 'elif'} act == {code}:",
                  "        for i in range(n):", "            v = s[i]",
                  f"            s[i] = {expr}"]
    # which activations the steps writing NCHW outputs hand to the machine code's tl_act
    lines += ["", "", "@njit(inline=\"always\")", "def exp_act(act):",
              "    # Sigmoid and SiLU: an e ** x per element, which tl_act computes over whole",
              "    # registers (the loops above use half a register); the others' loops keep up",
              f"    return act == {ACT['Sigmoid']} or act == {ACT['SiLU']}"]
    return "\n".join(lines)


def _special_source(KH, KW, sh, sw) -> str:
    """A depthwise kernel for one window and stride: its taps one straight-line sum, each
    row over whole vectors of 16 (``pad`` is wide enough).  With a column stride of
    2 the padded plane is kept as its even and its odd columns (two planes of half the width,
    ``pad`` reshaped), so that every tap reads consecutive floats."""
    name = f"depthwise_{KH}x{KW}_s{sh}x{sw}"
    loads = "\n".join(f"        w{i}_{j} = wk[{i}, {j}]" for i in range(KH) for j in range(KW))
    if sw == 1:
        copy = "        padded(x[n, k // mult], pad, ph, pw)"
        rows = "\n".join(f"            r{i} = pad[oh * {sh} + {i}]" for i in range(KH))
        taps = "\n".join(f"                     + w{i}_{j} * r{i}[ow + {j}]"
                         for i in range(KH) for j in range(KW))
    else:
        copy = "        split_columns(x[n, k // mult], ev, od, ph, pw)"
        rows = "\n".join(f"            r{i}e = ev[oh * {sh} + {i}]\n            r{i}o = od[oh * {sh} + {i}]"
                         for i in range(KH))
        taps = "\n".join(f"                     + w{i}_{j} * r{i}{'eo'[j % 2]}[ow + {j // 2}]"
                         for i in range(KH) for j in range(KW))
    halves = ("" if sw == 1 else
              "    ev, od = halves(pad)\n")
    return f"""

@njit(cache=True, nogil=True, error_model="numpy")
def {name}(x, w, bias, y, ph, pw, mult, act, a0, a1, q0, q1, pad, yf):
    N, C, H, W = x.shape
    K = w.shape[0]
    OH, OW = y.shape[2], y.shape[3]
    # each row computed whole vectors wide into tmp, then its OW outputs copied: the
    # vectoriser leaves the rest of a loop to scalar code, which would be most of a short row
    OWV = (OW + 15) // 16 * 16
    tmp = np.empty(OWV, np.float32)
{halves}    for nk in range(q0, q1):
        n = nk // K
        k = nk - n * K
{copy}
        yp = y[n, k]
        wk = w[k, 0]
        b = bias[k]
{loads}
        for oh in range(OH):
{rows}
            yr = yp[oh]
            for ow in range(OWV):
                tmp[ow] = (b
{taps})
            for ow in range(OW):
                yr[ow] = tmp[ow]
        act_row(yf, nk * OH * OW, (nk + 1) * OH * OW, act, a0, a1)
"""


def _entries_source() -> str:
    """The workers' entries: each thread takes its share of planes, rows or blocks from the
    int64 context the Python side writes (see :data:`DW_CTX`, :data:`EPI_CTX`, :data:`PW_CTX`)."""
    branches = "\n".join(
        f"        elif kind == {i + 1}:\n"
        f"            depthwise_{a}x{b}_s{c}x{d}(x, w, bias, y, a[15], a[16], a[19], kact, f[0], "
        f"f[1], q0, q1, pad, yf)" for i, (a, b, c, d) in enumerate(SPECIAL))
    return f"""

def depthwise_entry(ctx, tid, nt, work):
    a = carray(ptr_i64(ctx), ({len(DW_CTX)},))
    f = carray(ptr_f64(a[21]), (2,))
    x = carray(ptr_f32(a[0]), (a[1], a[2], a[3], a[4]))
    w = carray(ptr_f32(a[5]), (a[6], 1, a[7], a[8]))
    bias = carray(ptr_f32(a[9]), (a[6],))
    y = carray(ptr_f32(a[10]), (a[1], a[6], a[11], a[12]))
    yf = carray(ptr_f32(a[10]), (a[1] * a[6] * a[11] * a[12],))
    # each thread's own zeroed (PH, PW) plane; views of these arrays carry no reference count
    pad = carray(ptr_f32(a[23] + tid * a[24] * a[25] * 4), (a[24], a[25]))
    total = a[1] * a[6]
    kind = a[22]
    P = a[11] * a[12]
    # Sigmoid and SiLU by tl_act (at actfn) over the range's planes once the kernel has
    # written them (see exp_act)
    kact = 0 if exp_act(a[20]) else a[20]
    while True:
        q0, q1 = next_range(work, tid, nt, total)
        if q0 >= total:
            break
        if kind == 0:
            depthwise_planes(x, w, bias, y, a[13], a[14], a[15], a[16], a[17], a[18], a[19],
                             kact, f[0], f[1], q0, q1, pad, yf)
{branches}
        if kact != a[20]:
            call_void(a[26], (a[10] + q0 * P * 4, (q1 - q0) * P, a[20], a[27]))


DEPTHWISE_ENTRY = Entry(depthwise_entry)


def depthwise_cl_entry(ctx, tid, nt, work):
    # ranges of channels, whole vectors of 16
    a = carray(ptr_i64(ctx), ({len(DWCL_CTX)},))
    f = carray(ptr_f64(a[16]), (2,))
    N = a[1]
    C = a[2]
    x = carray(ptr_f32(a[0]), (N, C, a[3], a[4]))
    wt = carray(ptr_f32(a[5]), (a[6], a[7], C))
    bias = carray(ptr_f32(a[8]), (C,))
    y = carray(ptr_f32(a[9]), (N, C, a[10], a[11]))
    xt = carray(ptr_f32(a[19]), (a[20], a[21], C))
    acc = carray(ptr_f32(a[22]), (C,))
    nv = (C + 15) // 16
    while True:
        v0, v1 = next_range(work, tid, nt, nv)
        if v0 >= nv:
            break
        depthwise_channels_last(x, wt, bias, y, a[12], a[13], a[14], a[15], a[17], a[18], a[23],
                                f[0], f[1], v0 * 16, min(C, v1 * 16), xt, acc)


DEPTHWISE_CL_ENTRY = Entry(depthwise_cl_entry)


def epilogue_entry(ctx, tid, nt, work):
    a = carray(ptr_i64(ctx), ({len(EPI_CTX)},))
    f = carray(ptr_f64(a[9]), (2,))
    y = carray(ptr_f32(a[0]), (a[1], a[2]))
    bias = carray(ptr_f32(a[4]), (a[3],))
    res = carray(ptr_f32(a[6]), (a[1], a[2]))
    while True:
        r0, r1 = next_range(work, tid, nt, a[1])
        if r0 >= a[1]:
            break
        epilogue_block(y, bias, a[5] != 0, res, a[7] != 0, a[8], f[0], f[1], r0,
                       r1, 0, a[2], a[3])


EPILOGUE_ENTRY = Entry(epilogue_entry)


def pointwise_entry(ctx, tid, nt, work):
    # units (image, panel group, column block); each a tl_sgemm, then its epilogue: with no
    # activation, Relu or Clip all of it in the GEMM's store (tl_sgemm_ep at sgemm_ep, unless
    # 0: bias holds O floats, zeros without one), another activation a pass over the block
    # after
    a = carray(ptr_i64(ctx), ({len(PW_CTX)},))
    f = carray(ptr_f64(a[14]), (2,))
    N = a[1]
    Ci = a[2]
    P = a[3]
    O = a[8]
    mr = a[6]
    npan = a[5]
    y = carray(ptr_f32(a[7]), (N * O, P))
    bias = carray(ptr_f32(a[9]), (O,))
    res = carray(ptr_f32(a[11]), (N * O, P))
    cbw = a[16]
    rp = a[17]
    ncb = a[18]
    nrb = a[19]
    units = N * nrb * ncb
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n, p0, r0, r1, c0, c1 = gemm_unit(u, nrb, ncb, rp, npan, mr, O, cbw, P)
        yat = a[7] + ((n * O + r0) * P + c0) * 4
        fused = a[13] <= 2 and a[21] != 0
        rat = a[11] + ((n * O + r0) * P + c0) * 4 if a[12] != 0 else 0
        if a[20] != 0:
            # an im2col convolution: the block's columns unfolded from the image into this
            # thread's buffer, packed in strips of nr, then the GEMM by them
            g = carray(ptr_i64(a[20]), (14,))
            at = g[12] + tid * Ci * cbw * 4
            buf = carray(ptr_f32(at), (cbw // g[13], Ci, g[13]))
            xi = carray(ptr_f32(a[0]), (N, g[0], g[1], g[2]))
            unfold_block(xi[n], buf, c0, c1, g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10],
                         g[11])
            bat, ldb, flags = at, g[13], 2
        else:
            bat, ldb, flags = a[0] + (n * Ci * P + c0) * 4, P, 0
        if fused:
            call_void(a[21], (r1 - r0, c1 - c0, Ci, a[4] + p0 * Ci * mr * 4, bat, ldb, yat, P,
                              flags | 4, a[9] + r0 * 4, rat, a[13], a[22]))
            continue
        call_void(a[15], (r1 - r0, c1 - c0, Ci, a[4] + p0 * Ci * mr * 4, bat, ldb, yat, P,
                          flags))
        # Sigmoid and SiLU by tl_act (at actfn), the block's rows one by one (see exp_act)
        mc = exp_act(a[13])
        if a[10] != 0 or a[12] != 0 or a[13] != 0:
            epilogue_block(y, bias, a[10] != 0, res, a[12] != 0, 0 if mc else a[13], f[0],
                           f[1], n * O + r0, n * O + r1, c0, c1, O)
        if mc:
            for r in range(r1 - r0):
                call_void(a[23], (yat + r * P * 4, c1 - c0, a[13], a[22]))


POINTWISE_ENTRY = Entry(pointwise_entry)


def thin_entry(ctx, tid, nt, work):
    # a GEMM of few columns turned over: Y^T (P, O) = X^T (P, C) . W^T (C, O), the input's
    # P columns the micro-kernel's rows and the weights (packed once in strips of nr) its
    # columns.  Phase 0 packs X^T into panels of mr rows (threads split the channels);
    # phase 1 runs the units (image, strip), each block of Y^T transposed into y with the
    # epilogue.
    a = carray(ptr_i64(ctx), ({len(THIN_CTX)},))
    f = carray(ptr_f64(a[14]), (2,))
    N = a[1]
    C = a[2]
    P = a[3]
    O = a[4]
    mr = a[5]
    nr = a[6]
    npan = (P + mr - 1) // mr
    ns = (O + nr - 1) // nr
    x = carray(ptr_f32(a[0]), (N, C, P))
    ap = carray(ptr_f32(a[8]), (N, npan, C, mr))
    if a[16] == 0:
        rows = N * npan * C
        while True:
            i0, i1 = next_range(work, tid, nt, rows)
            if i0 >= rows:
                break
            for i in range(i0, i1):
                n = i // (npan * C)
                pi = i // C - n * npan
                c = i - (n * npan + pi) * C
                d = ap[n, pi, c]
                xr = x[n, c]
                for r in range(mr):
                    q = pi * mr + r
                    d[r] = xr[q] if q < P else np.float32(0)
        return
    t = carray(ptr_f32(a[9]), (N, P, O))
    y = carray(ptr_f32(a[10]), (N * O, P))
    bias = carray(ptr_f32(a[11]), (O,))
    res = carray(ptr_f32(a[12]), (N * O, P))
    units = N * ns
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n = u // ns
        st = u - n * ns
        o0 = st * nr
        o1 = min(O, o0 + nr)
        call_void(a[15], (P, o1 - o0, C, a[8] + n * npan * C * mr * 4,
                          a[7] + st * C * nr * 4, nr, a[9] + (n * P * O + o0) * 4, O, 2))
        tn = t[n]
        for o in range(o0, o1):
            yr = y[n * O + o]
            for p in range(P):
                yr[p] = tn[p, o]
        epilogue_block(y, bias, a[17] != 0, res, a[13] != 0, a[18], f[0], f[1],
                       n * O + o0, n * O + o1, 0, P, O)


THIN_ENTRY = Entry(thin_entry)


@njit(cache=True, nogil=True)
def run_table(table, i0, i1, run, base, pending, spin):
    # rows i0..i1 of table (entry, context, threads), each handed to the workers by tl_run
    # (address run) in turn: a bound run's steps with no Python between them.  Every entry
    # of this module claims its units (see next_unit): a worker not started when the caller's
    # part returns is not waited for
    for i in range(i0, i1):
        call_void(run, (base, pending, table[i, 0], table[i, 1], table[i, 2], spin, 1))


def im2col_entry(ctx, tid, nt, work):
    a = carray(ptr_i64(ctx), ({len(IM2COL_CTX)},))
    x = carray(ptr_f32(a[0]), (a[1], a[2], a[3], a[4]))
    cols = carray(ptr_f32(a[5]), (a[1], a[2] * a[6] * a[7], a[14] * a[15]))
    total = a[1] * a[2]
    while True:
        q0, q1 = next_range(work, tid, nt, total)
        if q0 >= total:
            break
        im2col_planes(x, cols, a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15],
                      q0, q1)


IM2COL_ENTRY = Entry(im2col_entry)
"""


#: The depthwise entry's context: one int64 per name (float64 parameters through ``fparams``;
#: ``actfn``: ``tl_act``, which takes Sigmoid and SiLU, ``lohi``: its two floats).
DW_CTX = ("x", "N", "C", "H", "W", "w", "K", "KH", "KW", "bias", "y", "OH", "OW", "sh", "sw",
          "ph", "pw", "dh", "dw", "mult", "act", "fparams", "kind", "pad", "PH", "PW", "actfn",
          "lohi")
#: The channels-last depthwise entry's context (``wt``: the weights as (KH, KW, C); ``xt``:
#: a (PH, PW, C) buffer; ``acc``: C floats).
DWCL_CTX = ("x", "N", "C", "H", "W", "wt", "KH", "KW", "bias", "y", "OH", "OW", "sh", "sw", "ph",
            "pw", "fparams", "dh", "dw", "xt", "PH", "PW", "acc", "act")
#: The epilogue entry's context (``y`` and ``res`` as (rows, columns); row r is channel r % C).
EPI_CTX = ("y", "rows", "cols", "C", "bias", "has_bias", "res", "has_res", "act", "fparams")
#: The pointwise entry's context (``a``: the weights as ``pack_rows`` panels; ``actfn``:
#: ``tl_act``, which takes Sigmoid and SiLU after the GEMM).
PW_CTX = ("x", "N", "Cin", "P", "a", "npan", "mr", "y", "O", "bias", "has_bias", "res",
          "has_res", "act", "fparams", "sgemm", "cbw", "rp", "ncb", "nrb", "im2col", "sgemm_ep",
          "lohi", "actfn")
#: The turned-over GEMM's context (``wb``: the weights transposed, in strips of nr; ``ap``
#: (N, panels, C, mr) and ``t`` (N, P, O): scratch; ``phase`` 0 packs, 1 multiplies).
THIN_CTX = ("x", "N", "C", "P", "O", "mr", "nr", "wb", "ap", "t", "y", "bias", "res",
            "has_res", "fparams", "sgemm", "phase", "has_bias", "act")
#: The im2col entry's context (the whole unfolded matrix written out).
IM2COL_CTX = ("x", "N", "C", "H", "W", "cols", "KH", "KW", "sh", "sw", "ph", "pw", "dh", "dw",
              "OH", "OW")
#: A shallow im2col convolution's geometry, which the pointwise entry's ``im2col`` field
#: points to (``x`` is then the image, ``Cin`` the unfolded rows C·KH·KW, ``P`` the output
#: positions; ``scratch``: Cin · cbw floats per thread; ``nr``: the micro-kernel's columns).
UNFOLD_CTX = ("C", "H", "W", "KH", "KW", "sh", "sw", "ph", "pw", "dh", "dw", "OW", "scratch",
              "nr")


def module_source() -> str:
    """The source of the kernels' module: the activation, the epilogue, the generic depthwise
    kernel, one per :data:`SPECIAL` window and the workers' entries."""
    return (f'"""The CPU backend\'s kernels, generated by tensorlayout.backends.cpu_kernels '
            f'(version {VERSION}): do not edit."""\n' + _HEAD.replace("{ACT_ROW}", _act_row_source())
            + "".join(_special_source(*s) for s in SPECIAL)
            + claim_source() + unfold_source() + _entries_source() + reduce_source()
            + shift_source()
            + move_source() + block_source(ACT.values()))
