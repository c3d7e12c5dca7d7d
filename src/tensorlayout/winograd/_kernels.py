"""Compiled loops (numba) for the convolution engine.

Imported only when numba is installed; :mod:`tensorlayout.winograd.plan` falls back to
NumPy otherwise.  Every kernel keeps IEEE semantics (no fastmath), so NaN and Inf
travel exactly as the arithmetic says.

Winograd data layout, for a block of ``Pb`` tiles (tile index p = n·T + ty·ntx + tx):

* ``V[a·α + b, c, q]``  transformed input  (α², C, Pb), tiles contiguous;
* ``M[a·α + b, k, q]``  after the α² GEMMs  (α², K, Pb);

so each of the α² GEMMs ``M[t] = U[t] @ V[t]`` reads and writes contiguous rows.
The Winograd and im2col kernels work on a range of channels and release the GIL, so the
caller splits the work over a few threads and keeps BLAS single-threaded meanwhile (two
thread pools spinning on the same cores cost more than either saves).
Transforms are applied as sparse row combinations (only non-zero coefficients), each
one a vector operation over the ``Pb`` tiles of the block.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(nogil=True, cache=True)
def wino_input(x, V, BTi, BTv, BTn, m, pad_t, pad_l, nty, ntx, p0, npb, c0, c1):
    """Gather tiles p0 .. p0+npb-1 of channels c0 .. c1-1 and write Bᵀ d B into V (α², C, Pb)."""
    N, C, H, W = x.shape
    alpha = BTi.shape[0]
    Pb = V.shape[2]
    T = nty * ntx
    for c in range(c0, c1):
        d = np.empty((alpha, alpha, Pb), dtype=V.dtype)
        t = np.empty((alpha, Pb), dtype=V.dtype)
        e = np.empty((alpha, Pb), dtype=V.dtype)
        e = np.empty((alpha, Pb), dtype=V.dtype)
        for q in range(Pb):
            if q >= npb:
                for i in range(alpha):
                    for j in range(alpha):
                        d[i, j, q] = 0
                continue
            p = p0 + q
            n = p // T
            rem = p - n * T
            ty = rem // ntx
            tx = rem - ty * ntx
            y0 = ty * m - pad_t
            x0 = tx * m - pad_l
            if y0 >= 0 and x0 >= 0 and y0 + alpha <= H and x0 + alpha <= W:
                for i in range(alpha):
                    for j in range(alpha):
                        d[i, j, q] = x[n, c, y0 + i, x0 + j]
            else:
                for i in range(alpha):
                    yy = y0 + i
                    for j in range(alpha):
                        xx = x0 + j
                        if yy >= 0 and yy < H and xx >= 0 and xx < W:
                            d[i, j, q] = x[n, c, yy, xx]
                        else:
                            d[i, j, q] = 0
        # rows: e[a, j, :] = sum_i BT[a, i] d[i, j, :]; then columns into V.
        for a in range(alpha):
            for j in range(alpha):
                for q in range(Pb):
                    e[j, q] = 0
            for z in range(BTn[a]):
                i = BTi[a, z]
                v = BTv[a, z]
                for j in range(alpha):
                    for q in range(Pb):
                        e[j, q] += v * d[i, j, q]
            for b in range(alpha):
                for q in range(Pb):
                    t[b, q] = 0
                for z in range(BTn[b]):
                    j = BTi[b, z]
                    v = BTv[b, z]
                    for q in range(Pb):
                        t[b, q] += v * e[j, q]
                for q in range(Pb):
                    V[a * alpha + b, c, q] = t[b, q]


@njit(nogil=True, cache=True)
def wino_output(M, y, bias, ATi, ATv, ATn, m, alpha, nty, ntx, p0, npb, bad, k0, k1):
    """Aᵀ M A (+ bias) for tiles p0 .. p0+npb-1 and channels k0 .. k1-1, scattered into y.

    ``bad[k]`` accumulates ``value * 0`` over every output written: it stays 0 unless some
    output of channel k is NaN or ±Inf.
    """
    N, K, OH, OW = y.shape
    Pb = M.shape[2]
    T = nty * ntx
    for k in range(k0, k1):
        s = np.empty((alpha, Pb), dtype=M.dtype)
        o = np.empty((m, m, Pb), dtype=M.dtype)
        bk = bias[k]
        for i in range(m):
            # s[b, :] = sum_a AT[i, a] M[a·α + b, k, :]
            for b in range(alpha):
                for q in range(Pb):
                    s[b, q] = 0
            for z in range(ATn[i]):
                a = ATi[i, z]
                v = ATv[i, z]
                for b in range(alpha):
                    for q in range(Pb):
                        s[b, q] += v * M[a * alpha + b, k, q]
            for j in range(m):
                for q in range(Pb):
                    o[i, j, q] = bk
                for z in range(ATn[j]):
                    b = ATi[j, z]
                    v = ATv[j, z]
                    for q in range(Pb):
                        o[i, j, q] += v * s[b, q]
        acc = bk * 0
        for q in range(npb):
            p = p0 + q
            n = p // T
            rem = p - n * T
            ty = rem // ntx
            tx = rem - ty * ntx
            oy = ty * m
            ox = tx * m
            hi = min(m, OH - oy)
            wi = min(m, OW - ox)
            for i in range(hi):
                for j in range(wi):
                    val = o[i, j, q]
                    acc += val * 0
                    y[n, k, oy + i, ox + j] = val
        bad[k] += acc


@njit(parallel=True, cache=True)
def direct(x, w, bias, y, sh, sw, ph, pw, dh, dw, groups):
    """Plain direct convolution; taps that fall in the padding contribute nothing."""
    N, C, H, W = x.shape
    K, Cg, KH, KW = w.shape
    OH, OW = y.shape[2], y.shape[3]
    Kg = K // groups
    for nk in prange(N * K):
        n = nk // K
        k = nk - n * K
        g = k // Kg
        for oh in range(OH):
            for ow in range(OW):
                y[n, k, oh, ow] = bias[k]
        for cc in range(Cg):
            c = g * Cg + cc
            for kh in range(KH):
                for kw in range(KW):
                    wv = w[k, cc, kh, kw]
                    off_w = kw * dw - pw
                    # valid ow: 0 <= ow*sw + off_w < W
                    lo = 0
                    if off_w < 0:
                        lo = (-off_w + sw - 1) // sw
                    hi = (W - 1 - off_w) // sw + 1 if W - 1 - off_w >= 0 else 0
                    if hi > OW:
                        hi = OW
                    for oh in range(OH):
                        iy = oh * sh + kh * dh - ph
                        if iy < 0 or iy >= H:
                            continue
                        for ow in range(lo, hi):
                            y[n, k, oh, ow] += wv * x[n, c, iy, ow * sw + off_w]


@njit(nogil=True, cache=True)
def im2col(x, cols, n, oh0, KH, KW, sh, sw, ph, pw, dh, dw, OW, r0, r1):
    """cols[(c·KH + kh)·KW + kw, (oh - oh0)·OW + ow] = x[n, c, ih, iw] or 0 in the padding."""
    N, C, H, W = x.shape
    rows = cols.shape[1] // OW
    for ckk in range(r0, r1):
        c = ckk // (KH * KW)
        r = ckk - c * KH * KW
        kh = r // KW
        kw = r - kh * KW
        off_w = kw * dw - pw
        for ro in range(rows):
            iy = (oh0 + ro) * sh + kh * dh - ph
            base = ro * OW
            if iy < 0 or iy >= H:
                for ow in range(OW):
                    cols[ckk, base + ow] = 0
                continue
            for ow in range(OW):
                ix = ow * sw + off_w
                if ix >= 0 and ix < W:
                    cols[ckk, base + ow] = x[n, c, iy, ix]
                else:
                    cols[ckk, base + ow] = 0


@njit(nogil=True, cache=True)
def weight_transform(w, G, U, k0, k1):
    """U[a·α + b, k, c] = Σ_ij G[a, i] w[k, c, i, j] G[b, j] for output channels k0 .. k1-1.

    ``w`` is (K, C, r, r), ``U`` is (α², K, C).  Each filter row k is first turned into
    (r·r, C) so that every later step is a unit-stride vector operation along the input
    channels c, ending in a row of ``U``; zeros of G are skipped.  The arithmetic is in
    ``G``'s dtype (the weights' dtype)."""
    K, C, r, _ = w.shape
    alpha = G.shape[0]
    wt = np.empty((r * r, C), dtype=G.dtype)
    tmp = np.empty((r, alpha, C), dtype=G.dtype)
    for k in range(k0, k1):
        for c in range(C):
            for i in range(r):
                for j in range(r):
                    wt[i * r + j, c] = w[k, c, i, j]
        for i in range(r):
            for b in range(alpha):
                row = tmp[i, b]
                for c in range(C):
                    row[c] = 0
                for j in range(r):
                    g = G[b, j]
                    if g != 0:
                        src = wt[i * r + j]
                        for c in range(C):
                            row[c] += g * src[c]
        for a in range(alpha):
            for b in range(alpha):
                dst = U[a * alpha + b, k]
                for c in range(C):
                    dst[c] = 0
                for i in range(r):
                    g = G[a, i]
                    if g != 0:
                        src = tmp[i, b]
                        for c in range(C):
                            dst[c] += g * src[c]


@njit(parallel=True, cache=True)
def im2col_engine(x, W3, y, cols, rows_per, KH, KW, sh, sw, ph, pw, dh, dw, chunks, sgemm,
                  kstep):
    """im2col + GEMM as one parallel function on numba's pool (float32, BLAS held to one
    thread by the caller): for each band of ``rows_per`` output rows, the columns are
    gathered by chunks of rows of ``cols``, then each (group, ``kstep`` output channels)
    is one sgemm call writing straight into ``y``; ``chunks`` pieces of column rows."""
    N, C, H, W = x.shape
    G, Kg, CgKK = W3.shape
    K = G * Kg
    OH, OW = y.shape[2], y.shape[3]
    nrows = cols.shape[0]
    ldc = cols.shape[1]
    isz = W3.itemsize
    one = W3.dtype.type(1)
    zero = W3.dtype.type(0)
    nks = -(-Kg // kstep)
    for n in range(N):
        for oh0 in range(0, OH, rows_per):
            rows = min(rows_per, OH - oh0)
            ncol = rows * OW
            band = cols[:, :ncol]
            for i in prange(chunks):
                im2col(x, band, n, oh0, KH, KW, sh, sw, ph, pw, dh, dw, OW,
                       i * nrows // chunks, (i + 1) * nrows // chunks)
            for it in prange(G * nks):
                g = it // nks
                k0 = (it - g * nks) * kstep
                sgemm(101, 111, 111, min(kstep, Kg - k0), ncol, CgKK, one,
                      W3.ctypes.data + ((g * Kg + k0) * CgKK) * isz, CgKK,
                      cols.ctypes.data + (g * CgKK * ldc) * isz, ldc, zero,
                      y.ctypes.data + ((n * K + g * Kg + k0) * OH * OW + oh0 * OW) * isz,
                      OH * OW)
