"""The source of the CPU backend's entries for the blocked layout NCHW16c, generated as text.

The channels go in blocks of 16 (:data:`tensorlayout.winograd._simd_block.BLOCK`): a
blocked tensor is (N, ceil(C/16), H, W, 16), its lanes past C zero (every writer zeroes them;
a reader multiplies them by zero weights, so that they must be finite).  The arithmetic is
machine code (:mod:`tensorlayout.winograd._simd_block`); the entries split the work among
the threads and move what the machine code does not.

``block_entry`` (the depthwise convolution) gives each thread (image, block, band of output
rows) units: for an NCHW input the rows the band reads moved into their rows of the thread's
zero-bordered plane (``pad``; its border, zero from the allocation, is never written; 16
strided writes per position), a blocked input read where it lies by ``tl_dw_direct`` (or
copied by ``tl_dw_block`` itself); the kernel; an activation its store leaves; for an NCHW
output the band's positions of the block's 16 planes written out of the thread's buffer.
``pw_block_entry`` (the 1 x 1 convolution) runs units (image, rows of positions, strip of
output channels) through ``tl_gemm_at``; ``block_rows_entry`` a block's plane means or
scaling.  :func:`source` is part of :func:`tensorlayout.backends.cpu_source.module_source`'s
module.
"""

from __future__ import annotations

from ..winograd._simd_block import IR_ACTS, POST_ACTS

__all__ = ["source", "DWB_CTX", "PWB_CTX", "BROWS_CTX", "DC_CTX"]

#: The blocked depthwise entry's context (``w``: (blocks, KH, KW, 16), ``bias``: (blocks,
#: 16), both zero past C; ``pad``: (PH, PW·16) floats per thread, ``ybuf``: OH·OW·16 per
#: thread; ``fn``: the machine code's address; ``xb``, ``yb``: 1 where x, y are blocked;
#: ``lohi``: the activation's parameters, float32; ``actfn``: ``tl_act``).
DWB_CTX = ("x", "N", "C", "H", "W", "w", "bias", "y", "OH", "OW", "KH", "KW", "sh", "sw",
           "ph", "pw", "dh", "dw", "act", "fparams", "pad", "PH", "PW", "ybuf", "fn", "xb",
           "yb", "lohi", "actfn", "rows")

#: The blocked 1 x 1 convolution's context (``wb``: the weights transposed, in strips of nr,
#: ``K`` rows deep (C, or whole blocks of 16 for a blocked input, zero past C); ``t``: rows ·
#: nr floats per thread; ``rows``: output positions per unit; ``gemm``: ``tl_gemm_at``'s
#: address; ``xb``, ``yb``: 1 where x, y are blocked; a residual only with an NCHW output;
#: ``biasp``: the bias padded with zeros to whole strips; ``lohi``: the activation's two
#: parameters, float32; ``gemm1``: ``tl_gemm_at1``, for a strip of at most ``lanes`` columns;
#: ``actfn``: ``tl_act``, the activations the machine code's store leaves).
PWB_CTX = ("x", "N", "C", "P", "O", "nr", "wb", "y", "bias", "has_bias", "res", "has_res",
           "act", "fparams", "gemm", "xb", "yb", "rows", "K", "biasp", "lohi", "gemm1", "lanes",
           "actfn")

#: The direct convolution's context (:class:`~tensorlayout.backends.cpu_direct.Direct`):
#: ``xp``: the zero-bordered blocked input (N, CB, Hp, Wp, 16); ``wb``: the weights (rows
#: (block, kh, kw, lane), K of them) in strips of nr output channels; ``offs``: each of the
#: ``runs`` (block, kh, kw) taps' float offset in an image of xp; ``biasp``: the bias in
#: whole strips (zeros without one); ``fn``: the kernel ``tl_dc{R}x{cw}s{sw}`` of panels
#: of R output rows by cw positions; ``rows``: output rows per unit (a multiple of R);
#: ``phase`` 0 deals x into xp (units (image, block)), 1 multiplies (units (image, rows,
#: strip)); ``lohi``: the activation's two parameters, float32; ``actfn``: ``tl_act``;
#: ``xb``, ``yb``: 1 where x, y (and the residual) are blocked; ``dsh``, ``dsw``: the rows
#: and columns of x dealt, every dsh-th and dsw-th (a strided 1 x 1 layer's), ``H`` by ``W``
#: of them from a map of ``XH`` by ``XW``; ``lanes`` 16, or 1: xp a zero-bordered NCHW copy
#: of x (``CB`` its C planes, a run per (channel, kh, kw), ``fn`` a ``tl_dcn`` kernel);
#: ``drows``: the rows of x a unit of the deal takes.
DC_CTX = ("x", "N", "C", "H", "W", "xp", "CB", "Hp", "Wp", "ph", "pw", "sh", "O", "OH", "OW",
          "y", "wb", "K", "runs", "offs", "biasp", "has_bias", "res", "has_res", "act",
          "fparams", "lohi", "fn", "nr", "actfn", "rows", "phase", "sw", "R", "cw", "xb", "yb",
          "dsh", "dsw", "XH", "XW", "lanes", "drows")

#: The blocked plane means' and scaling's context (``op`` 0: y (N, C) the means of x's
#: planes; 1: y, blocked, x times one factor per plane of s (N, C); ``fn``: the machine
#: code's address, ``tl_block_mean`` or ``tl_block_scale``).
BROWS_CTX = ("x", "N", "C", "P", "y", "s", "op", "fn")

_SOURCE = '''

@njit(inline="always", error_model="numpy")
def after_act(fn, at, arr, lo, hi, act, f0, f1, lohi):
    # the activation a kernel's store leaves (code act) over arr[lo:hi], arr at address at:
    # the machine code's tl_act, or the compiled loops for one it lacks
    if {POST}:
        call_void(fn, (at + lo * 4, hi - lo, act, lohi))
    elif {LOOPS}:
        act_row(arr, lo, hi, act, f0, f1)


@njit(cache=True, nogil=True, error_model="numpy")
def block_in(x, n, c0, cl, pad, ph, pw, h0, h1, W, dh, dw):
    # channels c0..c0+cl of image n of x (N, C, ., .) into the interior of pad (PH, PW·16),
    # lane c of each position: rows h0..h1 by W positions, x's every dh-th row and dw-th
    # column (1, 1: the whole plane); the lanes from cl on zero.  Position by position, its
    # 16 lanes innermost, so that the stores run on through the row (not a float every 16)
    z = np.float32(0)
    for h in range(h0, h1):
        row = pad[h + ph, pw * 16:]
        if cl == 16 and dw == 1:
            for j in range(W):
                for c in range(16):
                    row[j * 16 + c] = x[n, c0 + c, h * dh, j]
        else:
            for j in range(W):
                for c in range(16):
                    row[j * 16 + c] = x[n, c0 + c, h * dh, j * dw] if c < cl else z


@njit(inline="always", error_model="numpy")
def zero_lanes(v, positions, cl):
    # a blocked tensor's lanes from cl on zero, at each of the positions of v (16 floats each)
    z = np.float32(0)
    for q in range(positions if cl < 16 else 0):
        for i in range(cl, 16):
            v[q * 16 + i] = z


@njit(cache=True, nogil=True, error_model="numpy")
def block_out(yb, y, n, c0, cl, q0, q1):
    # lanes 0..cl of yb (OH·OW·16) at positions q0..q1 into planes c0..c0+cl of image n of y
    # (N, C, OH, OW)
    Q = y.shape[2] * y.shape[3]
    for c in range(cl):
        yp = y[n, c0 + c].reshape(Q)
        src = yb[c:]
        for q in range(q0, q1):
            yp[q] = src[q * 16]


def block_entry(ctx, tid, nt, work):
    a = carray(ptr_i64(ctx), ({n},))
    f = carray(ptr_f64(a[19]), (2,))
    N = a[1]
    C = a[2]
    H = a[3]
    W = a[4]
    OH = a[8]
    OW = a[9]
    PH = a[21]
    PW = a[22]
    B = (C + 15) // 16
    # the thread's bordered plane and output plane, allocated only where used: pad for an
    # NCHW input (tl_dw_direct reads a blocked one in place), ybuf for an NCHW output
    pad = carray(ptr_f32(a[20] + tid * PH * PW * 64), (PH, PW * 16))
    ybuf = carray(ptr_f32(a[23] + tid * OH * OW * 64), (OH * OW * 16,))
    x = carray(ptr_f32(a[0]), (N, C, H, W))
    y = carray(ptr_f32(a[7]), (N, C, OH, OW))
    ybl = carray(ptr_f32(a[7]), (N, B, OH * OW * 16))
    sh = a[12]
    ph = a[14]
    rows = a[29]
    nb = (OH + rows - 1) // rows
    units = N * B * nb
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n = u // (B * nb)
        b = (u - n * B * nb) // nb
        oh0 = (u - (n * B + b) * nb) * rows
        oh1 = min(OH, oh0 + rows)
        c0 = b * 16
        cl = min(16, C - c0)
        # the input rows h0..h1 the band reads, into their rows of pad (row h + ph); the
        # machine code is handed pad from the band's first window row on, so that its copy
        # goes ph1 rows down from there (rows outside the input are pad's zero border, never
        # written)
        h0 = max(0, oh0 * sh - ph)
        h1 = min(H, (oh1 - 1) * sh - ph + (a[10] - 1) * a[16] + 1)
        ph1 = h0 + ph - oh0 * sh
        xat = 0
        if a[25] != 0:          # a blocked input: read or copied by the machine code
            xat = a[0] + ((n * B + b) * H + h0) * W * 64 if h1 > h0 else 0
        else:
            block_in(x, n, c0, cl, pad, ph, a[15], h0, h1, W, 1, 1)
        if a[26] != 0:
            out = ybl[n, b]
            at = a[7] + (n * B + b) * OH * OW * 64
        else:
            out = ybuf
            at = a[23] + tid * OH * OW * 64
        # Relu and Clip in the machine code's store, another activation after it
        call_void(a[24], (a[20] + (tid * PH + oh0 * sh) * PW * 64, PW * 16,
                          a[5] + b * a[10] * a[11] * 64, a[6] + b * 64, at + oh0 * OW * 64,
                          oh1 - oh0, OW, a[10], a[11], sh, a[13], a[16], a[17],
                          xat, h1 - h0, W, ph1, a[15], a[18], a[27]))
        after_act(a[28], at, out, oh0 * OW * 16, oh1 * OW * 16, a[18], f[0], f[1], a[27])
        if a[26] == 0:
            block_out(ybuf, y, n, c0, cl, oh0 * OW, oh1 * OW)
        else:
            zero_lanes(out[oh0 * OW * 16:], (oh1 - oh0) * OW, cl)


BLOCK_ENTRY = Entry(block_entry)


@njit(inline="always")
def strip_unit(u, nch, ns):
    # unit u of (image, chunk of positions or rows, strip of output channels) units, the
    # strips innermost (a thread's run of units keeps its positions): (n, chunk, strip)
    n = u // (nch * ns)
    v = u - n * nch * ns
    ch = v // ns
    return n, ch, v - ch * ns


def pw_block_entry(ctx, tid, nt, work):
    # a 1 x 1 convolution turned over, Y^T (P, O) = X^T (P, C) . W^T (C, O), for an input or
    # an output in the blocked layout: units (image, rows of positions, strip of nr output
    # channels), each one tl_gemm_at, which reads the input where it lies and writes y by
    # blocks of channels or (scattered) by planes with the bias, the residual and Relu or
    # Clip; another activation after it; a blocked y's lanes past O zeroed
    a = carray(ptr_i64(ctx), ({m},))
    f = carray(ptr_f64(a[13]), (2,))
    N = a[1]
    C = a[2]
    P = a[3]
    O = a[4]
    nr = a[5]
    K = a[18]
    OB = (O + 15) // 16
    rows = a[17]
    nch = (P + rows - 1) // rows
    ns = (O + nr - 1) // nr
    y = carray(ptr_f32(a[7]), (N, O, P))
    yb = carray(ptr_f32(a[7]), (N, OB, P, 16))
    if a[15] != 0:          # blocked: position i, channel 16·b + j at 16·(b·P + i) + j
        ars, aks, depth, runs, rstride = 16, 1, 16, K // 16, P * 16
    else:                   # NCHW: position i, channel c at c·P + i
        ars, aks, depth, runs, rstride = 1, P, C, 1, 0
    units = N * nch * ns
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n, ch, st = strip_unit(u, nch, ns)
        p0 = ch * rows
        p1 = min(P, p0 + rows)
        o0 = st * nr
        o1 = min(O, o0 + nr)
        cnt = o1 - o0
        R = p1 - p0
        wat = a[6] + st * K * nr * 4
        aat = a[0] + (n * K * P + p0 * ars) * 4
        fn = a[21] if cnt <= a[22] else a[14]       # one vector of columns: twice the rows
        if a[16] != 0:
            # into y's blocks, with the bias, the residual (blocked too) and the activation
            # (one the machine code lacks over each block's rows after); the lanes past O
            # zeroed
            yo = ((n * OB + o0 // 16) * P + p0) * 64 + o0 % 16 * 4
            call_void(fn, (R, cnt, depth, aat, ars, aks, runs, rstride, wat, a[7] + yo, 16,
                           P * 16, a[19] + o0 * 4 if a[9] != 0 else 0, a[12], a[20], 0,
                           a[10] + yo if a[11] != 0 else 0))
            for ob in range(o0 // 16, (o1 + 15) // 16):
                blk = yb[n, ob, p0:p1].reshape(R * 16)
                bat = a[7] + ((n * OB + ob) * P + p0) * 64
                if a[12] > 2:
                    lo = max(o0, ob * 16) - ob * 16
                    hi = min(o1, ob * 16 + 16) - ob * 16
                    if lo == 0 and (hi == 16 or ob * 16 + hi == O):
                        after_act(a[23], bat, blk, 0, R * 16, a[12], f[0], f[1], a[20])
                    else:           # a strip narrower than a block: its lanes only
                        for r in range(R):
                            after_act(a[23], bat, blk, r * 16 + lo, r * 16 + hi, a[12], f[0],
                                      f[1], a[20])
                if ob == OB - 1:
                    zero_lanes(blk, R, O - ob * 16)
            continue
        # into y's planes, scattered, with the bias, the residual and the activation (one
        # the machine code lacks over the planes' rows after)
        call_void(fn, (R, cnt, depth, aat, ars, aks, runs, rstride, wat,
                       a[7] + ((n * O + o0) * P + p0) * 4, 0, 16,
                       a[19] + o0 * 4 if a[9] != 0 else 0, a[12], a[20], P,
                       a[10] + ((n * O + o0) * P + p0) * 4 if a[11] != 0 else 0))
        if a[12] > 2:
            if R == P:                  # the planes o0..o1 whole: one stretch of floats
                yf = y[n, o0:o1].reshape(cnt * P)
                after_act(a[23], a[7] + (n * O + o0) * P * 4, yf, 0, cnt * P, a[12], f[0],
                          f[1], a[20])
            else:
                for j in range(cnt):
                    after_act(a[23], a[7] + (n * O + o0 + j) * P * 4, y[n, o0 + j], p0, p1,
                              a[12], f[0], f[1], a[20])


PW_BLOCK_ENTRY = Entry(pw_block_entry)


def direct_entry(ctx, tid, nt, work):
    # a convolution over the input dealt into a zero-bordered blocked copy: phase 0 deals
    # the input's blocks of channels (units (image, block)); phase 1 runs units (image,
    # output rows, strip of nr output channels), each panel of R output rows by cw positions
    # one tl_dc{R}x{cw}s{sw}, whose depth runs over every (block, kh, kw) tap and which
    # writes y's planes with the bias, the residual and Relu or Clip; another activation
    # after it
    a = carray(ptr_i64(ctx), ({d},))
    N = a[1]
    C = a[2]
    H = a[3]
    W = a[4]
    CB = a[6]
    Hp = a[7]
    Wp = a[8]
    O = a[12]
    OH = a[13]
    OW = a[14]
    P = OH * OW
    lanes = a[41]
    if a[31] == 0:              # units (image, block of 16 channels, drows rows) dealt
        xp = carray(ptr_f32(a[5]), (N, CB, Hp, Wp * lanes))
        drows = a[42]
        dch = (H + drows - 1) // drows
        units = N * CB * dch
        dsh = a[37]
        dsw = a[38]
        x = carray(ptr_f32(a[0]), (N, C, a[39], a[40]))
        xbl = carray(ptr_f32(a[0]), (N, CB, a[39], a[40] * 16))
        while True:             # the next unit (see next_unit)
            u = next_unit(work, tid, units)
            if u >= units:
                break
            nb = u // dch
            h0 = (u - nb * dch) * drows
            h1 = min(H, h0 + drows)
            n = nb // CB
            b = nb - n * CB
            if lanes == 1:      # one lane: plane b's rows into the border's interior
                for h in range(h0, h1):
                    dst = xp[n, b, h + a[9], a[10]:]
                    src = x[n, b, h * dsh]
                    for j in range(W):
                        dst[j] = src[j * dsw]
                continue
            if a[35] == 0:
                block_in(x, n, b * 16, min(16, C - b * 16), xp[n, b], a[9], a[10], h0, h1, W,
                         dsh, dsw)
                continue
            for h in range(h0, h1):     # a blocked input's rows into the border's interior
                dst = xp[n, b, h + a[9], a[10] * 16:]
                src = xbl[n, b, h * dsh]
                for j in range(W):
                    for q in range(16):
                        dst[j * 16 + q] = src[j * dsw * 16 + q]
        return
    f = carray(ptr_f64(a[25]), (2,))
    y = carray(ptr_f32(a[15]), (N, O, P))
    nr = a[28]
    K = a[17]
    rows = a[30]
    R = a[33]
    cw = a[34]
    nch = (OH + rows - 1) // rows
    ns = (O + nr - 1) // nr
    arow = Wp * lanes * a[11]
    acol = lanes * a[32]
    units = N * nch * ns
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n, ch, st = strip_unit(u, nch, ns)
        h0 = ch * rows
        h1 = min(OH, h0 + rows)
        o0 = st * nr
        cnt = min(O, o0 + nr) - o0
        wat = a[16] + st * K * nr * 4
        bat = a[20] + o0 * 4 if a[21] != 0 else 0
        img = a[5] + n * CB * Hp * Wp * lanes * 4
        # y's planes, or its blocks of 16 channels: the strip's first float, floats between
        # planes (0: blocked) and between blocks (0: planes)
        OB = (O + 15) // 16
        if a[36] == 0:
            base, cps, cbs = (n * O + o0) * P, P, 0
        else:
            base, cps, cbs = (n * OB + o0 // 16) * P * 16 + o0 % 16, 0, P * 16
        for oh in range(h0, h1, R):
            for ow in range(0, OW, cw):
                at = (base + (oh * OW + ow) * (16 if cbs else 1)) * 4
                call_void(a[27], (min(R, h1 - oh), min(cw, OW - ow),
                                  img + (oh * arow + ow * acol) * 4, arow, a[18], a[19], wat,
                                  a[15] + at, OW, cps, cnt, bat, a[24], a[26],
                                  a[22] + at if a[23] != 0 else 0, cbs))
        if a[24] > 2 and cbs == 0:
            for j in range(cnt):
                after_act(a[29], a[15] + ((n * O + o0 + j) * P) * 4, y[n, o0 + j],
                          h0 * OW, h1 * OW, a[24], f[0], f[1], a[26])
        elif a[24] > 2:         # over the strip's blocks' rows h0..h1, every lane
            for bo in range(o0 // 16, (o0 + cnt + 15) // 16):
                at = a[15] + (n * OB + bo) * P * 64
                after_act(a[29], at, carray(ptr_f32(at), (P * 16,)), h0 * OW * 16,
                          h1 * OW * 16, a[24], f[0], f[1], a[26])
        if cbs != 0 and st == ns - 1 and O % 16 != 0:
            # the last block's lanes past O, which the kernel leaves (or the activation
            # made nonzero)
            yl = carray(ptr_f32(a[15] + (n * OB + OB - 1) * P * 64), (P * 16,))
            zero_lanes(yl[h0 * OW * 16:], (h1 - h0) * OW, O % 16)


DIRECT_ENTRY = Entry(direct_entry)


def block_rows_entry(ctx, tid, nt, work):
    # units (image, block of 16 channels): a blocked tensor's plane means, or its planes
    # each times one factor, in machine code
    a = carray(ptr_i64(ctx), ({r},))
    N = a[1]
    C = a[2]
    P = a[3]
    B = (C + 15) // 16
    units = N * B
    while True:                 # the next unit (see next_unit)
        u = next_unit(work, tid, units)
        if u >= units:
            break
        n = u // B
        b = u - n * B
        lanes = min(16, C - b * 16)
        blk = a[0] + (n * B + b) * P * 64
        if a[6] == 0:
            call_void(a[7], (blk, P, a[4] + (n * C + b * 16) * 4, lanes))
        else:
            call_void(a[7], (blk, a[5] + (n * C + b * 16) * 4, a[4] + (n * B + b) * P * 64, P,
                             lanes))


BLOCK_ROWS_ENTRY = Entry(block_rows_entry)
'''


def source(codes) -> str:
    """The blocked kernels and their entries; ``codes``: every activation code."""
    post = " or ".join(f"act == {c}" for c in POST_ACTS) or "False"
    loops = " or ".join(f"act == {c}" for c in codes if c and c not in IR_ACTS) or "False"
    return (_SOURCE.replace("{n}", str(len(DWB_CTX))).replace("{m}", str(len(PWB_CTX)))
            .replace("{r}", str(len(BROWS_CTX))).replace("{d}", str(len(DC_CTX)))
            .replace("{POST}", post).replace("{LOOPS}", loops))
