"""The source of the CPU backend's shifted-GEMM convolution, generated as text.

A convolution of stride (sh, sw) reads, for its tap (kh, kw), input row ``oh·sh + kh·dh``
and column ``ow·sw + kw·dw`` (less the padding).  With the input dealt once into its
``sh·sw`` stride phases (phase (ry, rx) holds rows ry, ry + sh, ... and columns rx, rx + sw,
... of the zero-padded input), every tap reads one phase at a fixed shift: the output grid
(OH, Wq) laid out row after row, tap (kh, kw) reads its phase plane from
``((kh·dh) // sh)·Wq + (kw·dw) // sw`` on, the same consecutive floats for every output
channel.  So the convolution is one GEMM per tap, of the tap's packed weights (O, C) by the
phase planes (C rows, one per channel, at the channel stride), summed over the taps: no
unfolded matrix, each input element copied once (im2col writes KH·KW copies).  The grid is
``Wq - OW`` columns wider than the output (the window's overhang); those columns are
computed and dropped.

``shift_entry`` phase 0 deals the planes into their phases (threads split the rows; the
phase buffer's border, zero from its allocation, is never written); phase 1 runs units
(image, panel group, column block of the grid): per tap a ``tl_sgemm`` into the thread's
block of sums, then the block's valid columns written to ``y`` with the bias, residual and
activation.  :func:`source` is part of :func:`tensorlayout.backends.cpu_source.module_source`'s
module.
"""

from __future__ import annotations

__all__ = ["source", "SHIFT_CTX"]

#: The shifted GEMM's context (``xq``: the phase buffer (N, C, sh, sw, Hq, Wq); ``a``: the
#: packed weights, taps in groups of ``group``, each group's panels (panels, group·C, mr);
#: ``offs``: each tap's float offset into a channel's phases; ``scratch``: rp·mr·cbw floats
#: per thread; ``phase`` 0 deals, 1 multiplies; ``group`` 0: one ``sgemm`` per tap; ``rows``
#: not 0: units of that many output rows, each row's OW columns multiplied straight into y
#: by ``taps_ep`` with the epilogue in its store (``bias``: O floats, zeros without a bias;
#: ``lohi``: the activation's parameters as float32), no scratch and no dropped columns;
#: ``actfn``: ``tl_act``, the activations the store leaves).
SHIFT_CTX = ("x", "N", "C", "H", "W", "xq", "sh", "sw", "ph", "pw", "Hq", "Wq", "y", "O", "OH",
             "OW", "a", "npan", "mr", "taps", "offs", "bias", "has_bias", "res", "has_res", "act",
             "fparams", "sgemm", "cbw", "rp", "ncb", "nrb", "scratch", "phase", "Q", "group",
             "sgemm_taps", "rows", "taps_ep", "lohi", "actfn")

_SOURCE = '''

@njit(cache=True, nogil=True, error_model="numpy")
def deal_phases(x, xq, sh, sw, ph, pw, u0, u1):
    # rows u0..u1 of the phase buffer xq (N, C, sh, sw, Hq, Wq), counted over (image,
    # channel, ry, row) with every column phase rx of the row at once, dealt from x
    # (N, C, H, W): phase (ry, rx) element (i, j) is x[i·sh + ry - ph, j·sw + rx - pw];
    # elements outside the input are left as they are (zero).  The first row's place is
    # decoded once, then counted on.  With a column stride of 2 the even and the odd
    # columns are dealt together (split_row).
    N, C, H, W = x.shape
    Hq, Wq = xq.shape[4], xq.shape[5]
    i = u0 % Hq
    v = u0 // Hq
    ry = v % sh
    nc = v // sh
    n = nc // C
    c = nc - n * C
    # each column phase's span of columns inside the input
    js = np.empty((sw, 2), np.int64)
    for r in range(sw):
        js[r, 0] = max(0, -((r - pw) // sw))
        js[r, 1] = min(Wq, (W - 1 - r + pw) // sw + 1)
    b0 = js[0, 0]
    b1 = max(b0, js[0, 1])
    for _ in range(u0, u1):
        ih = i * sh + ry - ph
        if ih >= 0 and ih < H:
            src = x[n, c, ih]
            if sw == 1:
                s = src[b0 - pw:b1 - pw]
                t = xq[n, c, ry, 0, i, b0:b1]
                for j in range(b1 - b0):
                    t[j] = s[j]
            elif sw == 2:
                split_row(src, xq[n, c, ry, 0, i], xq[n, c, ry, 1, i], pw)
            else:
                for rx in range(sw):
                    dst = xq[n, c, ry, rx, i]
                    for j in range(js[rx, 0], js[rx, 1]):
                        dst[j] = src[j * sw + rx - pw]
        i += 1
        if i == Hq:
            i = 0
            ry += 1
            if ry == sh:
                ry = 0
                c += 1
                if c == C:
                    c = 0
                    n += 1


@njit(cache=True, nogil=True, error_model="numpy")
def shift_store(s, y, bias, has_bias, res, has_res, act, a0, a1, r0, r1, c0, c1, Wq, OW, O):
    # rows r0..r1 of the block of sums s (rows, cbw), grid columns c0..c1: the valid
    # columns (ow < OW) written to y (rows, OH·OW) plus the bias (row r is channel r % O;
    # and the residual), activated.  Without a residual the bias and the activation run
    # over the block's whole rows first (the dropped columns too: one long loop each), then
    # the valid spans are copied.  Without a bias, bias holds one zero.
    if not has_res:
        # s's row i is channel (r0 + i) % O: the bias from there on
        epilogue_block(s, bias[r0 % O:] if has_bias else bias, has_bias, s, False, act, a0,
                       a1, 0, r1 - r0, 0, c1 - c0, O)
    q = c0
    while q < c1:
        oh = q // Wq
        ow = q - oh * Wq
        e = min(c1 - q, Wq - ow)
        m = min(e, OW - ow)
        if m > 0:
            d0 = oh * OW + ow
            k0 = q - c0
            for r in range(r0, r1):
                src = s[r - r0, k0:k0 + m]
                dst = y[r, d0:d0 + m]
                if has_res:
                    b = bias[r % O] if has_bias else bias[0]
                    rs = res[r, d0:d0 + m]
                    for i in range(m):
                        dst[i] = src[i] + b + rs[i]
                    act_row(dst, 0, m, act, a0, a1)
                else:
                    for i in range(m):
                        dst[i] = src[i]
        q += e


@njit(inline="always", error_model="numpy")
def shift_rows(a, y, N, C, O, Wq, plane, npan, mr, rp, nrb, taps, a0, a1, work, tid):
    # units (image, panel group, rows of the output), claimed: per output row oh, its OW
    # columns of the grid (oh·Wq on) multiplied straight into y's row by one call over all
    # the taps (the rule keeps them in one group), the bias, the residual and Relu or Clip
    # in its store, another activation over the row after
    OH = a[14]
    OW = a[15]
    P = OH * OW
    rc = a[37]
    nrc = (OH + rc - 1) // rc
    units = N * nrb * nrc
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n, p0, r0, r1, h0, h1 = gemm_unit(u, nrb, nrc, rp, npan, mr, O, rc, OH)
        for oh in range(h0, h1):
            off = ((n * O + r0) * P + oh * OW) * 4
            call_void(a[38], (r1 - r0, OW, C, a[16] + p0 * taps * C * mr * 4,
                              a[5] + (n * C * plane + oh * Wq) * 4, plane, a[12] + off, P, 4,
                              taps, a[20], a[21] + r0 * 4, a[23] + off if a[24] != 0 else 0,
                              a[25], a[39]))
            if exp_act(a[25]):          # by tl_act (at actfn)
                for r in range(n * O + r0, n * O + r1):
                    call_void(a[40], (a[12] + (r * P + oh * OW) * 4, OW, a[25], a[39]))
            elif a[25] > 2:
                for r in range(n * O + r0, n * O + r1):
                    act_row(y[r], oh * OW, oh * OW + OW, a[25], a0, a1)


def shift_entry(ctx, tid, nt, work):
    a = carray(ptr_i64(ctx), ({n},))
    N = a[1]
    C = a[2]
    sh = a[6]
    sw = a[7]
    Hq = a[10]
    Wq = a[11]
    if a[33] == 0:
        x = carray(ptr_f32(a[0]), (N, C, a[3], a[4]))
        xq = carray(ptr_f32(a[5]), (N, C, sh, sw, Hq, Wq))
        total = N * C * sh * Hq
        while True:
            q0, q1 = next_range(work, tid, nt, total)
            if q0 >= total:
                break
            deal_phases(x, xq, sh, sw, a[8], a[9], q0, q1)
        return
    f = carray(ptr_f64(a[26]), (2,))
    O = a[13]
    P = a[14] * a[15]
    mr = a[18]
    npan = a[17]
    taps = a[19]
    offs = carray(ptr_i64(a[20]), (taps,))
    y = carray(ptr_f32(a[12]), (N * O, P))
    bias = carray(ptr_f32(a[21]), (O,))
    res = carray(ptr_f32(a[23]), (N * O, P))
    cbw = a[28]
    rp = a[29]
    ncb = a[30]
    nrb = a[31]
    Q = a[34]
    plane = sh * sw * Hq * Wq
    if a[37] != 0:
        shift_rows(a, y, N, C, O, Wq, plane, npan, mr, rp, nrb, taps, f[0], f[1], work,
                   tid)
        return
    sat = a[32] + tid * rp * mr * cbw * 4
    s = carray(ptr_f32(sat), (rp * mr, cbw))
    units = N * nrb * ncb
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n, p0, r0, r1, c0, c1 = gemm_unit(u, nrb, ncb, rp, npan, mr, O, cbw, Q)
        bq = a[5] + (n * C * plane + c0) * 4
        if a[35] == 0:
            for t in range(taps):
                call_void(a[27], (r1 - r0, c1 - c0, C, a[16] + (t * npan + p0) * C * mr * 4,
                                  bq + offs[t] * 4, plane, sat, cbw, 1 if t > 0 else 0))
        else:
            t = 0
            while t < taps:
                g = min(a[35], taps - t)
                call_void(a[36], (r1 - r0, c1 - c0, C,
                                  a[16] + (t * npan + p0 * g) * C * mr * 4, bq, plane, sat,
                                  cbw, 1 if t > 0 else 0, g, a[20] + t * 8))
                t += g
        shift_store(s, y, bias, a[22] != 0, res, a[24] != 0, a[25], f[0], f[1],
                    n * O + r0, n * O + r1, c0, c1, Wq, a[15], O)


SHIFT_ENTRY = Entry(shift_entry)
'''


def source() -> str:
    """The shifted GEMM's kernels and entry."""
    return _SOURCE.replace("{n}", str(len(SHIFT_CTX)))
