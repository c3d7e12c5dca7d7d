"""The source of the CPU backend's im2col unfolding, generated as text: the unit of a GEMM
split into (image, panel group, column block) units (``gemm_unit``, which the pointwise and
shifted entries share), a padded row dealt into its even and odd columns (``split_row``, for
every stride-2 kernel), the whole unfolding (every row (c, kh, kw) of the columns written
out, for deep layers) and the block unfolding into the GEMM's packed column strips (for
shallow layers on large maps, which :data:`.cpu_source.PW_CTX`'s pointwise entry multiplies
block by block).
:func:`source` is part of :func:`tensorlayout.backends.cpu_source.module_source`'s module.
"""

from __future__ import annotations

__all__ = ["source"]

_SOURCE = '''

@njit(inline="always", error_model="numpy")
def split_row(src, ev, od, pw):
    """The row ``src`` placed at column ``pw`` of a padded row kept as its even columns
    ``ev`` and its odd columns ``od``: ev[k] = src[2k - pw] and od[k] = src[2k + 1 - pw]
    wherever that column is in ``src`` and k in the row (the rest stays as it is); where both
    are, one pass takes the pair (two loads the vectoriser can split)."""
    W = src.shape[0]
    e0 = (pw + 1) // 2
    e1 = min(ev.shape[0], (W - 1 + pw) // 2 + 1)
    o0 = pw // 2
    o1 = min(od.shape[0], (W - 2 + pw) // 2 + 1)
    b0 = max(e0, o0)
    b1 = max(b0, min(e1, o1))
    for k in range(e0, b0):
        ev[k] = src[2 * k - pw]
    for k in range(o0, b0):
        od[k] = src[2 * k + 1 - pw]
    s = src[2 * b0 - pw:]
    te = ev[b0:b1]
    to = od[b0:b1]
    for k in range(b1 - b0):
        te[k] = s[2 * k]
        to[k] = s[2 * k + 1]
    for k in range(b1, e1):
        ev[k] = src[2 * k - pw]
    for k in range(b1, o1):
        od[k] = src[2 * k + 1 - pw]


@njit(inline="always", error_model="numpy")
def gemm_unit(u, nrb, ncb, rp, npan, mr, O, cbw, P):
    """Unit ``u`` of a GEMM split into (image, panel group, column block) units: its image
    n, first panel p0, rows r0..r1 (of O) and columns c0..c1 (of P)."""
    n = u // (nrb * ncb)
    v = u - n * nrb * ncb
    rb = v // ncb
    cb = v - rb * ncb
    p0 = rb * rp
    c0 = cb * cbw
    return n, p0, p0 * mr, min(O, min(npan, p0 + rp) * mr), c0, min(P, c0 + cbw)


@njit(inline="always", error_model="numpy")
def tap_columns(off, sw, W, OW):
    # the outputs [lo, hi) whose input column ow * sw - off lies in [0, W)
    lo = min(OW, max(0, -((-off) // sw)))
    return lo, max(lo, min(OW, (W - 1 + off) // sw + 1))


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
                lo, hi = tap_columns(off, sw, W, OW)
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
def put_span(buf, k, t, m, src, base, zero):
    # block columns t..t+m of row k of buf (strips, K, nr): zeros, or src[base:base + m]
    nr = buf.shape[2]
    i = 0
    while i < m:
        s = (t + i) // nr
        l0 = t + i - s * nr
        w = min(nr - l0, m - i)
        d = buf[s, k, l0:l0 + w]
        if zero:
            for q in range(w):
                d[q] = 0
        else:
            b = base + i
            for q in range(w):
                d[q] = src[b + q]
        i += w


@njit(cache=True, nogil=True, error_model="numpy")
def unfold_block(xn, buf, c0, c1, KH, KW, sh, sw, ph, pw, dh, dw, OW):
    # output positions c0..c1 of image xn (C, H, W) unfolded into buf (strips, K, nr), the
    # GEMM's packed columns: row (c, kh, kw), block column p - c0; taps outside read zero.
    # With a column stride sw > 1 each input row is first dealt into its sw phases
    # (columns r, r + sw, ...), so that every tap copies consecutive floats.
    C, H, W = xn.shape
    phases = np.empty((sw, (W + sw - 1) // sw), np.float32)
    for c in range(C):
        xp = xn[c]
        for kh in range(KH):
            p = c0
            while p < c1:
                oh = p // OW
                owa = p - oh * OW
                owb = min(OW, owa + c1 - p)
                ih = oh * sh - ph + kh * dh
                t = p - c0
                inside = ih >= 0 and ih < H
                if inside and sw > 1:
                    row = xp[ih]
                    for q in range(sw):
                        dst = phases[q]
                        for j in range((W - q + sw - 1) // sw):
                            dst[j] = row[q + j * sw]
                for kw in range(KW):
                    k = (c * KH + kh) * KW + kw
                    if not inside:
                        put_span(buf, k, t, owb - owa, xp[0], 0, True)
                        continue
                    off = pw - kw * dw              # input column = ow * sw - off
                    lo, hi = tap_columns(off, sw, W, OW)
                    r = (-off) % sw                 # its phase; index ow - shift there
                    shift = (off + r) // sw
                    src = phases[r] if sw > 1 else xp[ih]
                    a = min(owb, max(owa, lo))
                    b = min(owb, max(a, hi))
                    put_span(buf, k, t, a - owa, src, 0, True)
                    put_span(buf, k, t + a - owa, b - a, src, a - shift, False)
                    put_span(buf, k, t + b - owa, owb - b, src, 0, True)
                p += owb - owa
'''


def source() -> str:
    """The unfolding kernels' source."""
    return _SOURCE
