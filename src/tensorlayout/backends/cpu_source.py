"""The source of the CPU backend's compiled kernels, generated as text.

:func:`module_source` writes one module: the activation loops (:data:`ACT_EXPR`, one
vectorisable loop per activation, with a float32 ``e ** x`` of plain arithmetic), the
epilogue, the depthwise kernels (a generic one and one per :data:`SPECIAL` window, its taps
one straight-line sum), the im2col unfolding, 2-D max and average pooling, and the native
workers' entries that read their arguments from an int64 context (:data:`DW_CTX`,
:data:`EPI_CTX`, :data:`PW_CTX`, :data:`IM2COL_CTX`, :data:`POOL_CTX`).
:mod:`tensorlayout.backends.cpu_kernels` compiles and calls it.
"""

from __future__ import annotations

__all__ = ["ACT", "ACT_EXPR", "SPECIAL", "POOL_SPECIAL", "VERSION", "act_code", "module_source", "DW_CTX",
           "EPI_CTX", "PW_CTX", "IM2COL_CTX", "POOL_CTX"]


#: Activation codes of the kernels.
ACT = {None: 0, "Relu": 1, "Clip": 2, "LeakyRelu": 3, "Sigmoid": 4, "HardSwish": 5,
       "HardSigmoid": 6, "Tanh": 7, "SiLU": 8}
#: The generated source's version (its file is named by the source's digest).
VERSION = 3
#: (KH, KW, stride H, stride W) with a kernel of their own (dilation 1).
SPECIAL = ((3, 3, 1, 1), (3, 3, 2, 2), (5, 5, 1, 1), (5, 5, 2, 2))
#: Pooling windows (KH, KW, stride H, stride W) with a kernel of their own (dilation 1).
POOL_SPECIAL = ((3, 3, 2, 2), (2, 2, 2, 2), (3, 3, 1, 1))


def act_code(p) -> tuple:
    """``(code, a0, a1)`` of an :class:`~tensorlayout.graph.ops.Activation` (or None)."""
    if p is None:
        return 0, 0.0, 0.0
    return ACT[p.kind], float(p.alpha), float(p.beta)


_HEAD = """
import numpy as np
from numba import carray, njit

from tensorlayout.winograd._native import Entry, call_void, f32_exp2, ptr_f32, ptr_f64, ptr_i64


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
    H, W = xp.shape
    je = pw % 2                    # the first column of xp that lands on an even column
    jo = 1 - je
    ne = (W - je + 1) // 2
    no = (W - jo + 1) // 2
    for i in range(H):
        src = xp[i]
        de = ev[i + ph, (je + pw) // 2:(je + pw) // 2 + ne]
        for t in range(ne):
            de[t] = src[je + 2 * t]
        do = od[i + ph, (jo + pw) // 2:(jo + pw) // 2 + no]
        for t in range(no):
            do[t] = src[jo + 2 * t]


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
def im2col_planes(x, cols, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, q0, q1):
    # planes q0..q1 of (image, channel) of x unfolded into the rows (c, kh, kw) of
    # cols (N, C·KH·KW, OH·OW); taps outside the input read zero
    N, C, H, W = x.shape
    for nc in range(q0, q1):
        n = nc // C
        c = nc - n * C
        xp = x[n, c]
        for kh in range(KH):
            for kw in range(KW):
                row = cols[n, (c * KH + kh) * KW + kw]
                off = pw - kw * dw                  # input column = ow * sw - off
                lo = min(OW, max(0, -((-off) // sw)))
                hi = max(lo, min(OW, (W - 1 + off) // sw + 1))
                for oh in range(OH):
                    ih = oh * sh - ph + kh * dh
                    seg = row[oh * OW:(oh + 1) * OW]
                    if ih < 0 or ih >= H:
                        for ow in range(OW):
                            seg[ow] = 0
                        continue
                    src = xp[ih]
                    for ow in range(lo):
                        seg[ow] = 0
                    for ow in range(lo, hi):
                        seg[ow] = src[ow * sw - off]
                    for ow in range(hi, OW):
                        seg[ow] = 0


@njit(inline="always", error_model="numpy")
def finite_plane(xp):
    \"\"\"True when every element of the plane is finite (x * 0 is NaN for NaN and +-inf).\"\"\"
    H, W = xp.shape
    acc = np.float32(0)
    for i in range(H):
        r = xp[i]
        for j in range(W):
            acc += r[j] * np.float32(0)
    return acc == acc


@njit(inline="always", error_model="numpy")
def fmax(a, v):
    \"\"\"The larger of a and v (a when v is NaN: the plane was checked finite first).\"\"\"
    return v if v > a else a


@njit(inline="always", error_model="numpy")
def pool_tap(yr, src, start, OW, mode):
    # one tap over an output row: mode 0 max, 1 NaN-propagating max, 2 sum
    s = src[start:start + OW]
    if mode == 0:
        for ow in range(OW):
            v = s[ow]
            a = yr[ow]
            yr[ow] = v if v > a else a
    elif mode == 1:
        for ow in range(OW):
            v = s[ow]
            a = yr[ow]
            yr[ow] = v if (v > a or v != v) else a
    else:
        for ow in range(OW):
            yr[ow] += s[ow]


@njit(cache=True, nogil=True, error_model="numpy")
def pool_planes(x, y, KH, KW, sh, sw, ph, pw, dh, dw, is_max, div, q0, q1, pad):
    # planes q0..q1 of (image, channel): each copied into the interior of ``pad`` (whose
    # border holds -inf for a max, 0 for an average), then every window reduced in tap
    # order; an average is multiplied by ``div`` (OH, OW), the reciprocal of each window's
    # count.  A NaN in a window gives NaN, as NumPy's maximum does (a plane with a NaN or an
    # infinity takes the slower loop that checks).  With a column stride of 2 the padded plane
    # is kept as its even and its odd columns, so that every tap reads consecutive floats.
    N, C, H, W = x.shape
    OH, OW = y.shape[2], y.shape[3]
    half = pad.reshape((2, pad.shape[0], pad.shape[1] // 2))
    ev = half[0]
    od = half[1]
    for nc in range(q0, q1):
        n = nc // C
        c = nc - n * C
        xp = x[n, c]
        if sw == 2:
            split_columns(xp, ev, od, ph, pw)
        else:
            padded(xp, pad, ph, pw)
        mode = 2 if not is_max else (0 if finite_plane(xp) else 1)
        yp = y[n, c]
        for oh in range(OH):
            yr = yp[oh]
            for ow in range(OW):
                yr[ow] = np.float32(-np.inf) if is_max else np.float32(0)
            for kh in range(KH):
                row = oh * sh + kh * dh
                for kw in range(KW):
                    o = kw * dw
                    if sw == 2:
                        if o % 2 == 0:
                            pool_tap(yr, ev[row], o // 2, OW, mode)
                        else:
                            pool_tap(yr, od[row], o // 2, OW, mode)
                    elif sw == 1:
                        pool_tap(yr, pad[row], o, OW, mode)
                    else:
                        pr = pad[row]
                        for ow in range(OW):
                            v = pr[ow * sw + o]
                            a = yr[ow]
                            if mode == 2:
                                yr[ow] = a + v
                            else:
                                yr[ow] = v if (v > a or v != v) else a
            if not is_max:
                dr = div[oh]
                for ow in range(OW):
                    yr[ow] *= dr[ow]
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
    return "\n".join(lines)


def _special_source(KH, KW, sh, sw) -> str:
    """A depthwise kernel for one window and stride: its taps one straight-line sum.  With a
    column stride of 2 the padded plane is kept as its even and its odd columns (two planes
    of half the width, ``pad`` reshaped), so that every tap reads consecutive floats."""
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
              "    half = pad.reshape((2, pad.shape[0], pad.shape[1] // 2))\n"
              "    ev = half[0]\n    od = half[1]\n")
    return f"""

@njit(cache=True, nogil=True, error_model="numpy")
def {name}(x, w, bias, y, ph, pw, mult, act, a0, a1, q0, q1, pad, yf):
    N, C, H, W = x.shape
    K = w.shape[0]
    OH, OW = y.shape[2], y.shape[3]
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
            for ow in range(OW):
                yr[ow] = (b
{taps})
        act_row(yf, nk * OH * OW, (nk + 1) * OH * OW, act, a0, a1)
"""


def _pool_special_source(KH, KW, sh, sw) -> str:
    """A pooling kernel for one window and stride: each output one straight-line max or sum
    of its taps (a plane with a NaN or an infinity goes to the generic kernel, which
    propagates NaN)."""
    name = f"pool_{KH}x{KW}_s{sh}x{sw}"
    if sw == 1:
        copy = "        padded(xp, pad, ph, pw)"
        load = "\n".join(f"            r{i} = pad[oh * {sh} + {i}]" for i in range(KH))
        tap = [f"r{i}[ow + {j}]" for i in range(KH) for j in range(KW)]
    else:
        copy = "        split_columns(xp, ev, od, ph, pw)"
        load = "\n".join(f"            r{i}e = ev[oh * {sh} + {i}]\n            r{i}o = od[oh * {sh} + {i}]"
                         for i in range(KH))
        tap = [f"r{i}{'eo'[j % 2]}[ow + {j // 2}]" for i in range(KH) for j in range(KW)]
    mx = tap[0]
    for t in tap[1:]:
        mx = f"fmax({mx}, {t})"
    total = " + ".join(tap)
    return f"""

@njit(cache=True, nogil=True, error_model="numpy")
def {name}(x, y, ph, pw, is_max, div, q0, q1, pad):
    N, C, H, W = x.shape
    OH, OW = y.shape[2], y.shape[3]
    half = pad.reshape((2, pad.shape[0], pad.shape[1] // 2))
    ev = half[0]
    od = half[1]
    for nc in range(q0, q1):
        n = nc // C
        c = nc - n * C
        xp = x[n, c]
        if is_max and not finite_plane(xp):
            pool_planes(x, y, {KH}, {KW}, {sh}, {sw}, ph, pw, 1, 1, is_max, div, nc, nc + 1, pad)
            continue
{copy}
        yp = y[n, c]
        for oh in range(OH):
{load}
            yr = yp[oh]
            if is_max:
                for ow in range(OW):
                    yr[ow] = {mx}
            else:
                dr = div[oh]
                for ow in range(OW):
                    yr[ow] = ({total}) * dr[ow]
"""


def _entries_source() -> str:
    """The workers' entries: each thread takes its share of planes, rows or blocks from the
    int64 context the Python side writes (see :data:`DW_CTX`, :data:`EPI_CTX`, :data:`PW_CTX`)."""
    branches = "\n".join(
        f"    elif kind == {i + 1}:\n"
        f"        depthwise_{a}x{b}_s{c}x{d}(x, w, bias, y, a[15], a[16], a[19], a[20], f[0], f[1], "
        f"q0, q1, pad, yf)" for i, (a, b, c, d) in enumerate(SPECIAL))
    pool_branches = "\n".join(
        f"    elif kind == {i + 1}:\n"
        f"        pool_{a}x{b}_s{c}x{d}(x, y, a[12], a[13], a[16] != 0, div, q0, q1, pad)"
        for i, (a, b, c, d) in enumerate(POOL_SPECIAL))
    return f"""

def depthwise_entry(ctx, tid, nt):
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
    q0 = tid * total // nt
    q1 = (tid + 1) * total // nt
    kind = a[22]
    if kind == 0:
        depthwise_planes(x, w, bias, y, a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20],
                         f[0], f[1], q0, q1, pad, yf)
{branches}


DEPTHWISE_ENTRY = Entry(depthwise_entry)


def epilogue_entry(ctx, tid, nt):
    a = carray(ptr_i64(ctx), ({len(EPI_CTX)},))
    f = carray(ptr_f64(a[9]), (2,))
    y = carray(ptr_f32(a[0]), (a[1], a[2]))
    bias = carray(ptr_f32(a[4]), (a[3],))
    res = carray(ptr_f32(a[6]), (a[1], a[2]))
    r0 = tid * a[1] // nt
    r1 = (tid + 1) * a[1] // nt
    epilogue_block(y, bias, a[5] != 0, res, a[7] != 0, a[8], f[0], f[1], r0, r1, 0, a[2], a[3])


EPILOGUE_ENTRY = Entry(epilogue_entry)


def pointwise_entry(ctx, tid, nt):
    # units (image, panel group, column block); each a tl_sgemm, then its epilogue
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
    for u in range(tid * units // nt, (tid + 1) * units // nt):
        n = u // (nrb * ncb)
        v = u - n * nrb * ncb
        rb = v // ncb
        cb = v - rb * ncb
        p0 = rb * rp
        p1 = min(npan, p0 + rp)
        r0 = p0 * mr
        r1 = min(O, p1 * mr)
        c0 = cb * cbw
        c1 = min(P, c0 + cbw)
        call_void(a[15], (r1 - r0, c1 - c0, Ci, a[4] + p0 * Ci * mr * 4,
                          a[0] + (n * Ci * P + c0) * 4, P,
                          a[7] + ((n * O + r0) * P + c0) * 4, P, 0))
        if a[10] != 0 or a[12] != 0 or a[13] != 0:
            epilogue_block(y, bias, a[10] != 0, res, a[12] != 0, a[13], f[0], f[1],
                           n * O + r0, n * O + r1, c0, c1, O)


POINTWISE_ENTRY = Entry(pointwise_entry)


def im2col_entry(ctx, tid, nt):
    a = carray(ptr_i64(ctx), ({len(IM2COL_CTX)},))
    x = carray(ptr_f32(a[0]), (a[1], a[2], a[3], a[4]))
    cols = carray(ptr_f32(a[5]), (a[1], a[2] * a[6] * a[7], a[14] * a[15]))
    total = a[1] * a[2]
    im2col_planes(x, cols, a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15],
                  tid * total // nt, (tid + 1) * total // nt)


IM2COL_ENTRY = Entry(im2col_entry)


def pool_entry(ctx, tid, nt):
    a = carray(ptr_i64(ctx), ({len(POOL_CTX)},))
    x = carray(ptr_f32(a[0]), (a[1], a[2], a[3], a[4]))
    y = carray(ptr_f32(a[5]), (a[1], a[2], a[6], a[7]))
    div = carray(ptr_f32(a[17]), (a[6], a[7]))
    pad = carray(ptr_f32(a[18] + tid * a[19] * a[20] * 4), (a[19], a[20]))
    total = a[1] * a[2]
    q0 = tid * total // nt
    q1 = (tid + 1) * total // nt
    kind = a[21]
    if kind == 0:
        pool_planes(x, y, a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16] != 0, div,
                    q0, q1, pad)
{pool_branches}


POOL_ENTRY = Entry(pool_entry)
"""


#: The depthwise entry's context: one int64 per name (float64 parameters through ``fparams``).
DW_CTX = ("x", "N", "C", "H", "W", "w", "K", "KH", "KW", "bias", "y", "OH", "OW", "sh", "sw",
          "ph", "pw", "dh", "dw", "mult", "act", "fparams", "kind", "pad", "PH", "PW")
#: The epilogue entry's context (``y`` and ``res`` as (rows, columns); row r is channel r % C).
EPI_CTX = ("y", "rows", "cols", "C", "bias", "has_bias", "res", "has_res", "act", "fparams")
#: The pointwise entry's context (``a``: the weights as ``pack_rows`` panels).
PW_CTX = ("x", "N", "Cin", "P", "a", "npan", "mr", "y", "O", "bias", "has_bias", "res",
          "has_res", "act", "fparams", "sgemm", "cbw", "rp", "ncb", "nrb")
#: The im2col entry's context.
IM2COL_CTX = ("x", "N", "C", "H", "W", "cols", "KH", "KW", "sh", "sw", "ph", "pw", "dh", "dw",
              "OH", "OW")

#: The pooling entry's context (``div``: (OH, OW) reciprocals of the window counts, for an
#: average; ``pad``: a (PH, PW) plane per thread, its border already -inf or 0; ``kind``:
#: 0 the generic kernel, i the kernel of ``POOL_SPECIAL[i - 1]``).
POOL_CTX = ("x", "N", "C", "H", "W", "y", "OH", "OW", "KH", "KW", "sh", "sw", "ph", "pw", "dh",
            "dw", "is_max", "div", "pad", "PH", "PW", "kind")


def module_source() -> str:
    """The source of the kernels' module: the activation, the epilogue, the generic depthwise
    kernel, one per :data:`SPECIAL` window and the workers' entries."""
    return (f'"""The CPU backend\'s kernels, generated by tensorlayout.backends.cpu_kernels '
            f'(version {VERSION}): do not edit."""\n' + _HEAD.replace("{ACT_ROW}", _act_row_source())
            + "".join(_special_source(*s) for s in SPECIAL)
            + "".join(_pool_special_source(*s) for s in POOL_SPECIAL) + _entries_source())
