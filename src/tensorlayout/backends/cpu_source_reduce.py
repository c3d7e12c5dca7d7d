"""The source of the CPU backend's reducing kernels, generated as text: 2-D max and average
pooling (a generic loop, one straight-line kernel per :data:`POOL_SPECIAL` window for
averages, and a separable max for column strides 1 and 2: each output row's window rows
reduced first, then its columns; from and into the blocked layout too), the
matrix-vector product of a layer whose input has one column (a fully connected layer of
one image, the 1 x 1 convolutions of a squeeze-and-excite block), and the row-wise steps
(each plane's mean, each plane scaled by its factor, a BatchNormalization's map per
channel), with the workers' entries that read their arguments from an int64 context
(:data:`POOL_CTX`, :data:`GEMV_CTX`, :data:`ROWS_CTX`).

:func:`source` is appended to :func:`tensorlayout.backends.cpu_source.module_source`'s
module, whose helpers (``padded``, ``split_columns``, ``epilogue_block``; the blocked
layout's ``block_in`` and ``zero_lanes``) it calls.
"""

from __future__ import annotations

__all__ = ["POOL_SPECIAL", "POOL_CTX", "GEMV_CTX", "ROWS_CTX", "source"]

#: Average pooling windows (KH, KW, stride H, stride W) with a kernel of their own
#: (dilation 1).
POOL_SPECIAL = ((3, 3, 2, 2), (2, 2, 2, 2), (3, 3, 1, 1))
#: The pooling entry's context (``div``: (OH, OW) reciprocals of the window counts, for an
#: average; ``pad``: a (PH, PW) plane per thread, its border already -inf or 0, its last two
#: rows the separable kernel's; ``kind``: 0 the generic kernel, i the kernel of
#: ``POOL_SPECIAL[i - 1]``, -1 the separable max, -2 the machine code's max of a k x k
#: window at stride 2 (``fast``: its address, ``tl_max{k}s2``; the pad's last row its row
#: and, in its last float, the plane's largest exponent field); ``yb`` 1: y in the blocked
#: layout (N, ceil(C/16), OH, OW, 16), each block's planes pooled into ``ys``, a thread's
#: (16, OH, OW) scratch, then dealt into y's lanes); ``xb`` 1: x blocked too (a max of
#: dilation 1), each block's output rows by ``bfn`` (``tl_bmax``) into y's blocks or, where
#: ``yb`` is 0, its planes, units (image, block, ``rows`` output rows).
POOL_CTX = ("x", "N", "C", "H", "W", "y", "OH", "OW", "KH", "KW", "sh", "sw", "ph", "pw", "dh",
            "dw", "is_max", "div", "pad", "PH", "PW", "kind", "fast", "yb", "ys", "xb", "bfn",
            "rows")
#: The matrix-vector entry's context (``wt``: the weights transposed, (K, O); ``x`` (N, K)
#: and ``y`` (N, O); ``chunk``: outputs per unit; ``split``: for one image, the ranges of
#: rows its depth is cut into (0: none), ``part`` their products (split, O), ``phase`` 0
#: the products, 1 their sums by chunks of outputs and the epilogue).
GEMV_CTX = ("x", "N", "K", "O", "wt", "y", "bias", "has_bias", "res", "has_res", "act",
            "fparams", "chunk", "split", "part", "phase")
#: The rows entry's context: ``x`` (R, P); ``y`` (R,) means or (R, P) scaled rows; ``s`` (R,)
#: the scales; ``op`` 0 means, 1 scaling, 2 a map per channel (row r channel r % ``C``):
#: y = act(x · s[c] + ``b``[c]) (BatchNormalization; ``act`` and ``fparams`` as the epilogue's).
ROWS_CTX = ("x", "R", "P", "y", "s", "op", "C", "b", "act", "fparams")


_KERNELS = '''

@njit(inline="always", error_model="numpy")
def finite_plane(xp):
    \"\"\"True when every element of the (C-contiguous) plane is finite: the largest exponent
    field of its bits, an integer reduction that vectorises (a float sum would run one
    dependent add after another), is below all ones (NaN and +-inf).\"\"\"
    bits = xp.ravel().view(np.int32)
    top = np.int32(0)
    for i in range(bits.size):
        e = bits[i] & np.int32(0x7F800000)
        top = e if e > top else top
    return top < np.int32(0x7F800000)


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
    ev, od = halves(pad)
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


@njit(cache=True, nogil=True, error_model="numpy")
def pool_rows(x, y, KH, KW, sh, sw, ph, pw, dh, dw, div, q0, q1, pad):
    # max pooling of planes q0..q1, separably: for each output row the window's input rows
    # reduced first into the padded row v (its border -inf), then v's columns; with a
    # column stride of 2, v dealt into its even and odd columns in one pass so that every
    # column tap reads consecutive floats.  v and the dealt row are pad's last two rows (the
    # rows above serve pool_planes, which takes a plane with a NaN or an infinity: the
    # largest exponent field of the rows read is kept in the same pass, and a plane where
    # it is all ones, NaN or +-inf, is pooled again by pool_planes).
    N, C, H, W = x.shape
    xi = x.view(np.int32)
    inf_bits = np.int32(0x7F800000)
    OH, OW = y.shape[2], y.shape[3]
    PH, PW = pad.shape
    v = pad[PH - 2]
    half = PW // 2
    ev = pad[PH - 1, :half]
    od = pad[PH - 1, half:]
    vi = v[pw:pw + W]
    for nc in range(q0, q1):
        n = nc // C
        c = nc - n * C
        xp = x[n, c]
        xpi = xi[n, c]
        top = np.int32(0)
        yp = y[n, c]
        for oh in range(OH):
            ih0 = oh * sh - ph
            if KH == 3 and dh == 1 and ih0 >= 0 and ih0 + 2 < H:
                # the common 3-row window inside the plane: its rows in one pass (the same
                # order of comparisons as the loop below)
                s0 = xp[ih0]
                s1 = xp[ih0 + 1]
                s2 = xp[ih0 + 2]
                e0 = xpi[ih0]
                e1 = xpi[ih0 + 1]
                e2 = xpi[ih0 + 2]
                for j in range(W):
                    m = s0[j]
                    b = s1[j]
                    m = b if b > m else m
                    b = s2[j]
                    vi[j] = b if b > m else m
                    e = max(e0[j] & inf_bits, e1[j] & inf_bits, e2[j] & inf_bits)
                    top = e if e > top else top
            else:
                first = True
                for kh in range(KH):
                    ih = ih0 + kh * dh
                    if ih < 0 or ih >= H:
                        continue
                    src = xp[ih]
                    srci = xpi[ih]
                    for j in range(W):
                        e = srci[j] & inf_bits
                        top = e if e > top else top
                    if first:
                        for j in range(W):
                            vi[j] = src[j]
                        first = False
                    else:
                        for j in range(W):
                            b = src[j]
                            a = vi[j]
                            vi[j] = b if b > a else a
                if first:
                    for j in range(W):
                        vi[j] = np.float32(-np.inf)
            yr = yp[oh]
            if sw == 2:
                for j in range(half):
                    ev[j] = v[2 * j]
                    od[j] = v[2 * j + 1]
                if KW == 3 and dw == 1:
                    # columns 2·ow, 2·ow + 1, 2·ow + 2 in one pass
                    for ow in range(OW):
                        m = ev[ow]
                        b = od[ow]
                        m = b if b > m else m
                        b = ev[ow + 1]
                        yr[ow] = b if b > m else m
                    continue
            for ow in range(OW):
                yr[ow] = np.float32(-np.inf)
            if sw == 2:
                for kw in range(KW):
                    o = kw * dw
                    pool_tap(yr, ev if o % 2 == 0 else od, o // 2, OW, 0)
            else:
                for kw in range(KW):
                    pool_tap(yr, v, kw * dw, OW, 0)
        if top == inf_bits:
            pool_planes(x, y, KH, KW, sh, sw, ph, pw, dh, dw, True, div, nc, nc + 1,
                        pad[:PH - 2])


@njit(cache=True, nogil=True, error_model="numpy")
def gemv_block(wt, x, y, o0, o1, k0, k1):
    # y[o0:o1] = x[k0:k1] @ wt[k0:k1, o0:o1] for wt (K, O): rows of wt four at a time, each
    # pass a vectorised multiply-add into the chunk (which stays in L1); every sum is still
    # taken in order of k.  All the outputs over a range of rows read those rows as one run
    # through memory (the matrix-vector entry's depth split)
    n = o1 - o0
    ys = y[o0:o1]
    for i in range(n):
        ys[i] = 0
    k = k0
    while k + 4 <= k1:
        x0 = x[k]
        x1 = x[k + 1]
        x2 = x[k + 2]
        x3 = x[k + 3]
        w0 = wt[k, o0:o1]
        w1 = wt[k + 1, o0:o1]
        w2 = wt[k + 2, o0:o1]
        w3 = wt[k + 3, o0:o1]
        for i in range(n):
            ys[i] = (((ys[i] + w0[i] * x0) + w1[i] * x1) + w2[i] * x2) + w3[i] * x3
        k += 4
    while k < k1:
        xv = x[k]
        wr = wt[k, o0:o1]
        for i in range(n):
            ys[i] += wr[i] * xv
        k += 1


@njit(cache=True, nogil=True, error_model="numpy")
def channel_means(x, y, r0, r1):
    # y[r] = the mean of row r of x (R, P), rows r0..r1: sixteen running sums per row (a
    # vector's lanes, each in order), added up at the end, then the rest
    P = x.shape[1]
    P16 = P - P % 16
    lanes = np.zeros(16, np.float32)
    inv = np.float32(1) / np.float32(P)
    for r in range(r0, r1):
        xr = x[r]
        for j in range(16):
            lanes[j] = 0
        for i in range(0, P16, 16):
            blk = xr[i:i + 16]
            for j in range(16):
                lanes[j] += blk[j]
        acc = np.float32(0)
        for j in range(16):
            acc += lanes[j]
        for i in range(P16, P):
            acc += xr[i]
        y[r] = acc * inv


@njit(cache=True, nogil=True, error_model="numpy")
def scale_rows(x, s, y, r0, r1):
    # y[r, :] = x[r, :] * s[r] for rows r0..r1 of (R, P)
    P = x.shape[1]
    for r in range(r0, r1):
        xr = x[r]
        yr = y[r]
        v = s[r]
        for i in range(P):
            yr[i] = xr[i] * v


@njit(cache=True, nogil=True, error_model="numpy")
def affine_rows(x, s, b, y, C, act, a0, a1, r0, r1):
    # y[r, :] = act(x[r, :] * s[c] + b[c]), c = r % C, for rows r0..r1 of (R, P): the
    # product and the sum each rounded to float32, as NumPy's x * s + b
    P = x.shape[1]
    for r in range(r0, r1):
        xr = x[r]
        yr = y[r]
        m = s[r % C]
        a = b[r % C]
        for i in range(P):
            yr[i] = xr[i] * m + a
        act_row(yr, 0, P, act, a0, a1)
'''


def _pool_special_source(KH, KW, sh, sw) -> str:
    """An average pooling kernel for one window and stride: each output one straight-line sum
    of its taps times its window's reciprocal count."""
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
    total = " + ".join(tap)
    return f"""

@njit(cache=True, nogil=True, error_model="numpy")
def {name}(x, y, ph, pw, div, q0, q1, pad):
    N, C, H, W = x.shape
    OH, OW = y.shape[2], y.shape[3]
    ev, od = halves(pad)
    for nc in range(q0, q1):
        n = nc // C
        c = nc - n * C
        xp = x[n, c]
{copy}
        yp = y[n, c]
        for oh in range(OH):
{load}
            yr = yp[oh]
            dr = div[oh]
            for ow in range(OW):
                yr[ow] = ({total}) * dr[ow]
"""


def _entries() -> str:
    branches = "\n".join(
        f"    elif kind == {i + 1}:\n"
        f"        pool_{a}x{b}_s{c}x{d}(x, y, a[12], a[13], div, q0, q1, pad)"
        for i, (a, b, c, d) in enumerate(POOL_SPECIAL))
    return f"""

@njit(inline="always", error_model="numpy")
def pool_span(a, xa, ya, x, y, div, pad, tid, q0, q1):
    # planes q0..q1 of x (image and channel as one index; at address xa) pooled into the
    # same planes of y (at ya) by the context's kernel
    kind = a[21]
    if kind == -2:
        # a plane at a time by the machine code; a plane with a NaN or an infinity (its
        # largest exponent field all ones) pooled again by the generic kernel
        row = a[18] + (tid * a[19] + a[19] - 1) * a[20] * 4
        top = pad[a[19] - 1].view(np.int32)
        for nc in range(q0, q1):
            call_void(a[22], (xa + nc * a[3] * a[4] * 4, ya + nc * a[6] * a[7] * 4,
                              a[3], a[4], a[6], a[7], a[12], a[13], row,
                              row + (a[20] - 1) * 4))
            if top[a[20] - 1] == np.int32(0x7F800000):
                pool_planes(x, y, a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15],
                            True, div, nc, nc + 1, pad[:a[19] - 2])
    elif kind < 0:
        pool_rows(x, y, a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], div, q0, q1,
                  pad)
    elif kind == 0:
        pool_planes(x, y, a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16] != 0,
                    div, q0, q1, pad)
{branches}


def pool_entry(ctx, tid, nt, work):
    a = carray(ptr_i64(ctx), ({len(POOL_CTX)},))
    N = a[1]
    C = a[2]
    H = a[3]
    W = a[4]
    P = a[6] * a[7]
    div = carray(ptr_f32(a[17]), (a[6], a[7]))
    pad = carray(ptr_f32(a[18] + tid * a[19] * a[20] * 4), (a[19], a[20]))
    CB = (C + 15) // 16
    if a[25] != 0:              # from blocks, units (image, block, rows): a row at a time
        rows = a[27]
        nrc = (a[6] + rows - 1) // rows
        while True:
            v0, v1 = next_range(work, tid, nt, N * CB * nrc)
            if v0 >= N * CB * nrc:
                break
            for v in range(v0, v1):
                u = v // nrc
                h0 = (v - u * nrc) * rows
                h1 = min(a[6], h0 + rows)
                n = u // CB
                c0 = (u - n * CB) * 16
                cl = min(16, C - c0)
                for oh in range(h0, h1):
                    if a[23] != 0:
                        ya, cps = a[5] + (u * P + oh * a[7]) * 64, 0
                    else:
                        ya, cps = a[5] + ((n * C + c0) * P + oh * a[7]) * 4, P
                    call_void(a[26], (a[0] + u * H * W * 64, ya, H, W, a[7], oh * a[10] - a[12],
                                      a[8], a[9], a[11], a[13], cps, cl))
                if a[23] != 0:  # the lanes past C zero (a window wholly in the padding)
                    yl = carray(ptr_f32(a[5] + (u * P + h0 * a[7]) * 64), (P * 16,))
                    zero_lanes(yl, (h1 - h0) * a[7], cl)
        return
    if a[23] == 0:              # planes to planes, units (image, channel)
        x = carray(ptr_f32(a[0]), (N, C, H, W))
        y = carray(ptr_f32(a[5]), (N, C, a[6], a[7]))
        while True:
            q0, q1 = next_range(work, tid, nt, N * C)
            if q0 >= N * C:
                break
            pool_span(a, a[0], a[5], x, y, div, pad, tid, q0, q1)
        return
    # into the blocked layout, units (image, block of 16 channels): the block's planes
    # pooled into the thread's scratch, then dealt into y's lanes (block_in)
    yb = carray(ptr_f32(a[5]), (N, CB, a[6], a[7] * 16))
    sa = a[24] + tid * 16 * P * 4
    ys = carray(ptr_f32(sa), (1, 16, a[6], a[7]))
    while True:
        u0, u1 = next_range(work, tid, nt, N * CB)
        if u0 >= N * CB:
            break
        for u in range(u0, u1):
            n = u // CB
            c0 = (u - n * CB) * 16
            cl = min(16, C - c0)
            xa = a[0] + (n * C + c0) * H * W * 4
            pool_span(a, xa, sa, carray(ptr_f32(xa), (1, cl, H, W)),
                      carray(ptr_f32(sa), (1, cl, a[6], a[7])), div, pad, tid, 0, cl)
            block_in(ys, 0, 0, cl, yb[n, u - n * CB], 0, 0, 0, a[6], a[7], 1, 1)


POOL_ENTRY = Entry(pool_entry)


def gemv_entry(ctx, tid, nt, work):
    # units (image, chunk of outputs); each its product, then its epilogue
    a = carray(ptr_i64(ctx), ({len(GEMV_CTX)},))
    f = carray(ptr_f64(a[11]), (2,))
    N = a[1]
    K = a[2]
    O = a[3]
    x = carray(ptr_f32(a[0]), (N, K))
    wt = carray(ptr_f32(a[4]), (K, O))
    y = carray(ptr_f32(a[5]), (N, O))
    yc = carray(ptr_f32(a[5]), (N * O, 1))
    rc = carray(ptr_f32(a[8]), (N * O, 1))
    bias = carray(ptr_f32(a[6]), (O,))
    chunk = a[12]
    per = (O + chunk - 1) // chunk
    units = N * per
    S = a[13]
    if S > 0 and a[15] == 0:
        # one image, its depth split: unit s the product of rows s·ks.. of the weights (one
        # stream each) into part[s]; the next call adds the parts up
        part = carray(ptr_f32(a[14]), (S, O))
        ks = (K + S - 1) // S
        while True:
            s = next_unit(work, tid, S)
            if s >= S:
                return
            gemv_block(wt, x[0], part[s], 0, O, s * ks, min(K, s * ks + ks))
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n = u // per
        o0 = (u - n * per) * chunk
        o1 = min(O, o0 + chunk)
        if S > 0:               # the parts' sums, in order of the parts
            part = carray(ptr_f32(a[14]), (S, O))
            yr = y[0]
            for i in range(o0, o1):
                yr[i] = part[0, i]
            for t in range(1, S):
                pr = part[t]
                for i in range(o0, o1):
                    yr[i] += pr[i]
        else:
            gemv_block(wt, x[n], y[n], o0, o1, 0, K)
        if a[7] != 0 or a[9] != 0 or a[10] != 0:
            epilogue_block(yc, bias, a[7] != 0, rc, a[9] != 0, a[10], f[0], f[1],
                           n * O + o0, n * O + o1, 0, 1, O)


GEMV_ENTRY = Entry(gemv_entry)


def rows_entry(ctx, tid, nt, work):
    # (R, P) rows, claimed in ranges: their means (op 0), their scaling (op 1) or a map
    # per channel (op 2)
    a = carray(ptr_i64(ctx), ({len(ROWS_CTX)},))
    R = a[1]
    P = a[2]
    x = carray(ptr_f32(a[0]), (R, P))
    while True:
        r0, r1 = next_range(work, tid, nt, R)
        if r0 >= R:
            break
        if a[5] == 0:
            channel_means(x, carray(ptr_f32(a[3]), (R,)), r0, r1)
        elif a[5] == 1:
            scale_rows(x, carray(ptr_f32(a[4]), (R,)), carray(ptr_f32(a[3]), (R, P)), r0, r1)
        else:
            f = carray(ptr_f64(a[9]), (2,))
            affine_rows(x, carray(ptr_f32(a[4]), (a[6],)), carray(ptr_f32(a[7]), (a[6],)),
                        carray(ptr_f32(a[3]), (R, P)), a[6], a[8], f[0], f[1], r0, r1)


ROWS_ENTRY = Entry(rows_entry)
"""


def source() -> str:
    """The kernels' and entries' source (appended to the backend's module)."""
    return _KERNELS + "".join(_pool_special_source(*s) for s in POOL_SPECIAL) + _entries()
