"""Numba kernels specialised to one exact F(m, r), generated at first use, constants unrolled.

The generic kernels in ``_kernels`` loop over the non-zero coefficients of Bᵀ and Aᵀ at run
time, one short vector loop per coefficient; that loop overhead dominates.  This generator
writes, for the exact matrices of any F(m, r) (default or custom points), kernels whose
2-D transform is a short sequence of loops over the tiles of a block, one per row or column
of the tile, each body straight-line code (only the non-zero terms, ±1 as plain adds) with
few live values, so the compiler vectorises every loop.  Work is shared where the
matrices allow: rows of Bᵀ that evaluate at ±p are computed as e + o and e - o, and
columns of Aᵀ that differ only in sign are summed and differenced once.  The constants
come in as an array of the data's dtype, so float32 stays float32.

Wide images use a row layout (see ``wino_input``): a block is whole rows of tiles, the
input rows are split into m column phases, and the two passes of the input transform run
as long unit-stride loops (vertical per row of tiles, horizontal over the whole block).

The source of each F(m, r) is written once into the per-user cache
(:func:`tensorlayout._jit.cache_dir`), named by a hash of its exact matrices, and imported
from there; numba's ``cache=True`` keeps the
compiled code beside it, so later processes (and reinstalls) load it without compiling.
``python -m tensorlayout.winograd._codegen 6 3`` prints the kernels of F(6,3).
"""

from __future__ import annotations

import hashlib
import re
import sys

import numpy as np

from .. import _jit
from .transforms import transforms


def coef_list(*mats):
    """Distinct absolute values other than 0 and 1 of the given Fraction matrices, sorted."""
    vals = set()
    for mat in mats:
        for v in mat.flat:
            if v != 0 and abs(v) != 1:
                vals.add(abs(v))
    return sorted(vals)


def _lin(row, names, coefs):
    """Source of sum_i row[i] * names[i], using k<idx> for the constants."""
    parts = []
    for v, nm in zip(row, names):
        if v == 0:
            continue
        sign = "-" if v < 0 else "+"
        if abs(v) == 1:
            parts.append(f"{sign} {nm}")
        else:
            parts.append(f"{sign} k{coefs.index(abs(v))} * {nm}")
    if not parts:
        return "zero"
    s = " ".join(parts)
    return s[2:] if s.startswith("+ ") else "-" + s[2:]


def _pairs(vecs):
    """Greedy pairs (i, k) of vectors with vecs[k][n] = ±vecs[i][n] for every n, both signs
    occurring: the two are then e + o and e - o (evaluations at ±p)."""
    used, out = set(), []
    for i in range(len(vecs)):
        if i in used:
            continue
        for k in range(i + 1, len(vecs)):
            if k in used:
                continue
            same = all(x == y for x, y in zip(vecs[i], vecs[k]))
            ok = all(x == y or x == -y for x, y in zip(vecs[i], vecs[k]))
            flip = any(x == -y and x != 0 for x, y in zip(vecs[i], vecs[k]))
            if ok and flip and not same:
                used.update((i, k))
                out.append((i, k))
                break
    return out


def _apply(mat, names, targets, coefs, indent, tag):
    """Lines computing ``targets[i].format(mat[i] · names)`` for every row, sharing work:
    columns that differ only in sign on every row are first summed and differenced once,
    and rows that are e + o and e - o compute e and o once."""
    from fractions import Fraction

    rows = [list(r) for r in mat]
    names = list(names)
    lines = []
    cols = [[r[n] for r in rows] for n in range(len(names))]
    for c1, c2 in _pairs(cols):
        if sum(1 for r in rows if r[c1] != 0) < 2:
            continue
        sp, sm = f"{tag}p{c1}", f"{tag}m{c1}"
        lines.append(f"{indent}{sp} = {names[c1]} + {names[c2]}")
        lines.append(f"{indent}{sm} = {names[c1]} - {names[c2]}")
        names += [sp, sm]
        for r in rows:
            v1, v2 = r[c1], r[c2]
            r[c1] = r[c2] = Fraction(0)
            r += [v1 if v1 == v2 else Fraction(0), v1 if v1 == -v2 and v1 != 0 else Fraction(0)]
    for r in rows:
        r += [Fraction(0)] * (len(names) - len(r))
    done = set()
    for i, k in _pairs(rows):
        ev = [x if x == y else Fraction(0) for x, y in zip(rows[i], rows[k])]
        od = [x if x == -y else Fraction(0) for x, y in zip(rows[i], rows[k])]
        if sum(1 for v in ev if v) == 0:
            continue
        lines.append(f"{indent}{tag}e{i} = {_lin(ev, names, coefs)}")
        lines.append(f"{indent}{tag}o{i} = {_lin(od, names, coefs)}")
        lines.append(indent + targets[i].format(f"{tag}e{i} + {tag}o{i}"))
        lines.append(indent + targets[k].format(f"{tag}e{i} - {tag}o{i}"))
        done.update((i, k))
    for i, r in enumerate(rows):
        if i not in done:
            lines.append(indent + targets[i].format(_lin(r, names, coefs)))
    return lines


def _pass(mat, var, sources, targets, coefs, header=("    for q in range(Pb):",)):
    """One loop of a 1-D transform: the ``header`` lines, then ``var{i} = sources[i]`` and
    ``targets[r]`` set to row r of ``mat`` applied to those values (through :func:`_apply`)."""
    indent = " " * (len(header[-1]) - len(header[-1].lstrip()) + 4)
    lines = list(header) + [f"{indent}{var}{i} = {src}" for i, src in enumerate(sources)]
    return lines + _apply(mat, [f"{var}{i}" for i in range(len(sources))], targets, coefs, indent, "t")


_DRIVERS = """
@njit(nogil=True, cache=True)
def wino_input_{m}_{r}(x, V, coef, pad_t, pad_l, nty, ntx, p0, npb, c0, c1, U2):
    N, C, H, W = x.shape
    Pb = V.shape[2]
    T = nty * ntx
    n0 = p0 // T
    n1 = (p0 + npb - 1) // T
    if U2 > 0:
        # Row layout: the block is R whole rows of tiles of one image, tile (rl, u) in
        # column rl·U2 + u of V; the last column of each row (u = ntx) is a spare tile that
        # lets the horizontal pass run over the whole block in one unit-stride loop.  Per
        # channel the rows are copied with the zero padding, split into {m} column phases
        # (P[row, s, u] = column {m}·u + s), transformed vertically one row of tiles at a time
        # and horizontally over the whole block.
        R = npb // ntx
        ybase = (p0 - n0 * T) // ntx * {m} - pad_t
        rows = (R - 1) * {m} + {a}
        lim = min(W, {m} * U2 - pad_l)
        for c in range(c0, c1):
            for t in range({a} * {a}):
                for q in range(R * U2, Pb):
                    V[t, c, q] = 0
        row = np.zeros({m} * U2, dtype=V.dtype)
        P = np.zeros((rows, {m}, U2), dtype=V.dtype)
        Fb = np.zeros(({a}, {m}, (R + 1) * U2), dtype=V.dtype)
        F4 = Fb.reshape(({a}, {m}, R + 1, U2))
        for c in range(c0, c1):
            for rr in range(rows):
                yy = ybase + rr
                if yy < 0 or yy >= H:
                    continue
                for xx in range(lim):
                    row[pad_l + xx] = x[n0, c, yy, xx]
                deint_{m}_{r}(row, P, rr, U2)
            for rl in range(R):
                vert_{m}_{r}(P, F4, rl, coef)
            horiz_{m}_{r}(Fb, V, c, R * U2, coef)
        return
    # columns past the block's tiles: zero up to a whole vector of tiles (the GEMM reads
    # npb columns; V's rows may be longer still, see engine.schedule)
    Pw = min(Pb, (npb + 15) // 16 * 16)
    for c in range(c0, c1):
        for t in range({a} * {a}):
            for q in range(npb, Pw):
                V[t, c, q] = 0
    D = np.zeros(({a} * {a}, Pb), dtype=V.dtype)
    E = np.empty(({a} * {a}, Pb), dtype=V.dtype)
    if n0 == n1:
        # One image: its rows of each channel are first copied, with the zero padding,
        # into a small plane (a streaming read the prefetchers follow), and the tiles are
        # gathered from there without bounds checks.
        ty_lo = (p0 - n0 * T) // ntx
        ty_hi = (p0 + npb - 1 - n1 * T) // ntx
        ybase = ty_lo * {m} - pad_t
        rows = (ty_hi - ty_lo) * {m} + {a}
        Wp = ntx * {m} + {a} - {m}
        plane = np.zeros((rows, Wp), dtype=V.dtype)
        qy = np.empty(npb, dtype=np.int64)
        qx = np.empty(npb, dtype=np.int64)
        for q in range(npb):
            rem = p0 + q - n0 * T
            ty = rem // ntx
            qy[q] = ty * {m} - pad_t - ybase
            qx[q] = (rem - ty * ntx) * {m}
        lim = min(W, Wp - pad_l)
        for c in range(c0, c1):
            for rr in range(rows):
                yy = ybase + rr
                if yy < 0 or yy >= H:
                    continue
                for xx in range(lim):
                    plane[rr, pad_l + xx] = x[n0, c, yy, xx]
            for q in range(npb):
                r0 = qy[q]
                x0 = qx[q]
                for i in range({a}):
                    for j in range({a}):
                        D[i * {a} + j, q] = plane[r0 + i, x0 + j]
            input_{m}_{r}(D, E, V, c, coef, Pw)
        return
    # blocks over several images: gather each tile, bounds checked
    qn = np.empty(npb, dtype=np.int64)
    qy = np.empty(npb, dtype=np.int64)
    qx = np.empty(npb, dtype=np.int64)
    for q in range(npb):
        p = p0 + q
        n = p // T
        rem = p - n * T
        ty = rem // ntx
        qn[q] = n
        qy[q] = ty * {m} - pad_t
        qx[q] = (rem - ty * ntx) * {m} - pad_l
    for c in range(c0, c1):
        for q in range(npb):
            n = qn[q]
            y0 = qy[q]
            x0 = qx[q]
            if y0 >= 0 and x0 >= 0 and y0 + {a} <= H and x0 + {a} <= W:
                for i in range({a}):
                    for j in range({a}):
                        D[i * {a} + j, q] = x[n, c, y0 + i, x0 + j]
            else:
                for i in range({a}):
                    yy = y0 + i
                    for j in range({a}):
                        xx = x0 + j
                        if yy >= 0 and yy < H and xx >= 0 and xx < W:
                            D[i * {a} + j, q] = x[n, c, yy, xx]
                        else:
                            D[i * {a} + j, q] = 0
        input_{m}_{r}(D, E, V, c, coef, Pw)


@njit(nogil=True, cache=True)
def wino_output_{m}_{r}(M, y, bias, coef, nty, ntx, p0, npb, bad, k0, k1, U2):
    N, K, OH, OW = y.shape
    Pb = M.shape[2]
    T = nty * ntx
    O = np.empty(({m} * {m}, Pb), dtype=M.dtype)
    S = np.empty(({m} * {a}, Pb), dtype=M.dtype)
    # Z[q] gathers value * 0 over every output of tile q: 0 unless one is NaN or ±Inf (one
    # vector add per output instead of a serial sum)
    Z = np.zeros(Pb, dtype=M.dtype)
    qn = np.empty(npb, dtype=np.int64)
    qy = np.empty(npb, dtype=np.int64)
    qx = np.empty(npb, dtype=np.int64)
    qs = np.empty(npb, dtype=np.int64)      # column of tile q in M (see the row layout)
    for q in range(npb):
        p = p0 + q
        n = p // T
        rem = p - n * T
        ty = rem // ntx
        qn[q] = n
        qy[q] = ty * {m}
        qx[q] = (rem - ty * ntx) * {m}
        qs[q] = q if U2 == 0 else (q // ntx) * U2 + q % ntx
    if U2 > 0:
        # row layout: write each output row of a row of tiles in one interleaving pass
        R = npb // ntx
        O3 = O.reshape(({m} * {m}, Pb // U2, U2))
        oy0 = (p0 - qn[0] * T) // ntx * {m}
        nfull = OW // {m}
        for k in range(k0, k1):
            bk = bias[k]
            output_{m}_{r}(M, S, O, Z, k, bk, coef, Pb)
            for rl in range(R):
                for i in range(min({m}, OH - oy0 - rl * {m})):
                    yrow = y[qn[0], k, oy0 + rl * {m} + i]
                    scat_{m}_{r}(O3, yrow, i, rl, nfull)
                    for xx in range(nfull * {m}, OW):
                        yrow[xx] = O3[i * {m} + xx - nfull * {m}, rl, nfull]
        if k1 > k0:
            acc = Z[0] * 0
            for q in range(npb):
                acc += Z[qs[q]]
            bad[k0] += acc
        return
    Pw = min(Pb, (npb + 15) // 16 * 16)
    for k in range(k0, k1):
        bk = bias[k]
        output_{m}_{r}(M, S, O, Z, k, bk, coef, Pw)
        for q in range(npb):
            n = qn[q]
            oy = qy[q]
            ox = qx[q]
            sq = qs[q]
            if oy + {m} <= OH and ox + {m} <= OW:
                for i in range({m}):
                    for j in range({m}):
                        y[n, k, oy + i, ox + j] = O[i * {m} + j, sq]
            else:
                for i in range(min({m}, OH - oy)):
                    for j in range(min({m}, OW - ox)):
                        y[n, k, oy + i, ox + j] = O[i * {m} + j, sq]
    if k1 > k0:
        acc = Z[0] * 0
        for q in range(npb):
            acc += Z[qs[q]]
        bad[k0] += acc

"""


_NATIVE = """
@njit(nogil=True, cache=True)
def share_{m}_{r}(tid, nt, x, Up, G, nkb, mr, y, bias, coef, pad_t, pad_l, nty, ntx, blocks,
                  U2, split, V, M, bad, ctl, gemm, barrier, fetch_add, spin, w, Ub):
    # Thread tid's part of one call on nt native workers (engine.NativeCall).  Up holds the
    # transformed weights as tl_sgemm's panels: row t is the (groups, nkb, Cg, mr) panels
    # of point t, rows padded (engine.plane_floats); V and M one (a2, Cp, Pb) / (a2, Kp,
    # Pb) buffer per thread (split: one shared), Cp >= C and Kp >= K rows per plane.
    # split = 0: each thread takes whole blocks from the counter ctl[0] and runs the input
    #   transform, the a2 x groups GEMMs and the output transform on its own buffers;
    # split = 1: every block is shared: the input transform by input channels, a barrier,
    #   the a2 x (groups x nkb) GEMMs of one panel each cut into nt equal runs (a thread's
    #   run keeps to few points t, so its V[t] stays in its cache), a barrier, then the
    #   output transform by output channels.  With weights w (a one-shot call, Up unused)
    #   each thread instead takes whole panels: it transforms the panel's filters into its
    #   own Ub[tid] (one panel of every point, in its cache) and runs the panel's a2 GEMMs
    #   from there; the transformed weights are never written to memory as a whole.
    N, C, H, W_ = x.shape
    K = y.shape[1]
    a2 = Up.shape[0]
    Lp = Up.shape[1]
    Cg = C // G
    Kg = K // G
    Cp = V.shape[2]
    Kp = M.shape[2]
    Pb = V.shape[3]
    nblk = blocks.shape[0]
    panel = Cg * mr
    ua = Up.ctypes.data
    isz = Up.itemsize
    bar = ctl.ctypes.data + 8
    if split == 0:
        Vt = V[tid]
        Mt = M[tid]
        va = Vt.ctypes.data
        ma = Mt.ctypes.data
        while True:
            b = call_i64(fetch_add, (ctl.ctypes.data, 1))
            if b >= nblk:
                return
            p0 = blocks[b, 0]
            npb = blocks[b, 1]
            ncol = blocks[b, 2]
            wino_input_{m}_{r}(x, Vt, coef, pad_t, pad_l, nty, ntx, p0, npb, 0, C, U2)
            for t in range(a2):
                for g in range(G):
                    call_void(gemm, (Kg, ncol, Cg, ua + (t * Lp + g * nkb * panel) * isz,
                                     va + (t * Cp + g * Cg) * Pb * isz, Pb,
                                     ma + (t * Kp + g * Kg) * Pb * isz, Pb, 0))
            wino_output_{m}_{r}(Mt, y, bias, coef, nty, ntx, p0, npb, bad[tid], 0, K, U2)
    Vt = V[0]
    Mt = M[0]
    va = Vt.ctypes.data
    ma = Mt.ctypes.data
    c0 = tid * C // nt
    c1 = (tid + 1) * C // nt
    npan = G * nkb
    u0 = tid * a2 * npan // nt
    u1 = (tid + 1) * a2 * npan // nt
    k0o = tid * K // nt
    k1o = (tid + 1) * K // nt
    fused = w.shape[0] > 0
    if fused:
        q0f = tid * npan // nt
        q1f = (tid + 1) * npan // nt
        Ut = Ub[tid]
        uta = Ut.ctypes.data
        Lq = Ut.shape[1]
        W16 = np.empty((Cg, w.shape[2] * w.shape[3], 16), dtype=Ut.dtype)
        T16 = np.empty(({a} * w.shape[2], 16), dtype=Ut.dtype)
    for b in range(nblk):
        p0 = blocks[b, 0]
        npb = blocks[b, 1]
        ncol = blocks[b, 2]
        if b > 0:
            call_void(barrier, (bar, nt, spin))          # V and M are about to be reused
        wino_input_{m}_{r}(x, Vt, coef, pad_t, pad_l, nty, ntx, p0, npb, c0, c1, U2)
        call_void(barrier, (bar, nt, spin))
        if fused:
            for q in range(q0f, q1f):
                weights_{m}_{r}(w, Ut, coef, G, nkb, mr, q, q + 1, q, W16, T16)
                g = q // nkb
                kb = q - g * nkb
                k0 = g * Kg + kb * mr
                k1 = g * Kg + min(Kg, (kb + 1) * mr)
                for t in range(a2):
                    call_void(gemm, (k1 - k0, ncol, Cg, uta + t * Lq * isz,
                                     va + (t * Cp + g * Cg) * Pb * isz, Pb,
                                     ma + (t * Kp + k0) * Pb * isz, Pb, 0))
            u1 = u0                                       # no units left
        u = u0                                            # units (point t, panel q)
        while u < u1:
            t = u // npan
            qa = u - t * npan
            qb = min(npan, qa + u1 - u)
            q = qa
            while q < qb:
                g = q // nkb
                kb0 = q - g * nkb
                kb1 = min(nkb, kb0 + qb - q)
                k0 = g * Kg + kb0 * mr
                k1 = g * Kg + min(Kg, kb1 * mr)
                call_void(gemm, (k1 - k0, ncol, Cg, ua + (t * Lp + (g * nkb + kb0) * panel) * isz,
                                 va + (t * Cp + g * Cg) * Pb * isz, Pb,
                                 ma + (t * Kp + k0) * Pb * isz, Pb, 0))
                q += kb1 - kb0
            u += qb - qa
        call_void(barrier, (bar, nt, spin))
        wino_output_{m}_{r}(Mt, y, bias, coef, nty, ntx, p0, npb, bad[tid], k0o, k1o, U2)


def entry_{m}_{r}(ctx, tid, nt, work):
    # The workers' entry (a cfunc through ENTRY): the arrays and numbers of one call from
    # the int64 context written by engine.NativeCall.
    a = carray(ptr_i64(ctx), (64,))
    x = carray(ptr_f32(a[0]), (a[1], a[2], a[3], a[4]))
    Up = carray(ptr_f32(a[5]), (a[6], a[7]))
    y = carray(ptr_f32(a[11]), (a[12], a[13], a[14], a[15]))
    bias = carray(ptr_f32(a[16]), (a[13],))
    coef = carray(ptr_f32(a[17]), (a[18],))
    blocks = carray(ptr_i64(a[19]), (a[20], 3))
    V = carray(ptr_f32(a[21]), (a[22], a[23], a[24], a[25]))
    M = carray(ptr_f32(a[26]), (a[22], a[23], a[40], a[25]))
    bad = carray(ptr_f32(a[27]), (a[28], a[13]))
    ctl = carray(ptr_i64(a[29]), (4,))
    w = carray(ptr_f32(a[41]), (a[42], a[43], a[44], a[45]))
    Ub = carray(ptr_f32(a[46]), (a[47], a[6], a[48]))
    share_{m}_{r}(tid, nt, x, Up, a[8], a[9], a[10], y, bias, coef, a[30], a[31], a[32], a[33],
                  blocks, a[34], a[35], V, M, bad, ctl, a[36], a[37], a[38], a[39], w, Ub)


ENTRY = Entry(entry_{m}_{r})       # compiled as a cfunc at first use


def weight_entry_{m}_{r}(ctx, tid, nt, work):
    # The workers' entry for weights_{m}_{r} (a cfunc through WEIGHT_ENTRY): thread tid
    # transforms its share of the groups x nkb panels.
    a = carray(ptr_i64(ctx), (16,))
    w = carray(ptr_f32(a[0]), (a[1], a[2], a[3], a[4]))
    Up = carray(ptr_f32(a[5]), (a[6], a[7]))
    coef = carray(ptr_f32(a[11]), (a[12],))
    nq = a[8] * a[9]
    W16 = np.empty((a[2], a[3] * a[4], 16), dtype=np.float32)
    T = np.empty(({a} * a[3], 16), dtype=np.float32)
    weights_{m}_{r}(w, Up, coef, a[8], a[9], a[10], tid * nq // nt, (tid + 1) * nq // nt, 0,
                    W16, T)


WEIGHT_ENTRY = Entry(weight_entry_{m}_{r})
"""


def _kernel_source(t):
    m, r = t.m, t.r
    a = t.alpha
    coefs = coef_list(t.AT, t.BT, t.G)
    ks = "\n".join(f"    k{i} = coef[{i}]" for i in range(len(coefs)))
    L = [_NATIVE.format(m=m, r=r, a=a)]
    # ---- weights: w[k, c] -> Up[a*a + b, (q*Cg + c)*mr + l] = sum_ij G[a,i] w[i,j] G[b,j], the
    # filters k = g*Kg + kb*mr + l of a panel in the vector lanes: the panel's filters are
    # first copied into W16[c, i*r + j, l] (16 lanes; lanes past the panel's filters zero up
    # to mr, beyond that computed but never stored),
    # then per input channel one loop over the lanes computes G w (all columns) and one
    # more G w G^T (all rows) straight into the panel
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def weights_{m}_{r}(w, Up, coef, Gn, nkb, mr, q0, q1, qoff, W16, T):")
    L.append(f"    # W16 (Cg, {r * r}, 16) and T ({a * r}, 16): scratch; panel q goes to Up[:, (q - qoff)*Cg*mr:]")
    L.append(ks)
    L += ["    K = w.shape[0]", "    Cg = w.shape[1]", "    Kg = K // Gn",
          "    for q in range(q0, q1):", "        g = q // nkb", "        kb = q - g * nkb",
          "        kf = g * Kg + kb * mr", "        nl = min(mr, Kg - kb * mr)",
          "        base = (q - qoff) * Cg * mr",
          "        for c in range(Cg):",
          f"            for i in range({r}):",
          f"                for j in range({r}):",
          "                    for l in range(nl):",
          f"                        W16[c, i * {r} + j, l] = w[kf + l, c, i, j]",
          "                    for l in range(nl, mr):",
          f"                        W16[c, i * {r} + j, l] = 0",
          "        for c in range(Cg):"]
    # columns of w, all in one loop: T[a*r + j] = sum_i G[a, i] w[i, j]
    body = ["            for l in range(16):"]
    for j in range(r):
        body += _pass(t.G, f"d{j}_", [f"W16[c, {i * r + j}, l]" for i in range(r)],
                      [f"T[{a1 * r + j}, l] = {{}}" for a1 in range(a)], coefs,
                      header=("            for l in range(16):",))[1:]
    L += body
    # rows, all in one loop over the panel's lanes: Up[a1*a + b] = sum_j G[b, j] T[a1*r + j]
    body = ["            o = base + c * mr", "            for l in range(mr):"]
    for a1 in range(a):
        body += _pass(t.G, f"e{a1}_", [f"T[{a1 * r + j}, l]" for j in range(r)],
                      [f"Up[{a1 * a + b}, o + l] = {{}}" for b in range(a)], coefs,
                      header=("            for l in range(mr):",))[1:]
    L += body
    L.append("")
    # ---- input: D[i*a + j, q] -> V[a1*a + b, c, q] = sum_ij BT[a1,i] D[i,j] BT[b,j]
    L.append(_DRIVERS.format(m=m, r=r, a=a))
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def input_{m}_{r}(D, E, V, c, coef, Pb):")
    L.append(ks)
    # rows: one small loop over the tiles per column j (few live values: it vectorises)
    for j in range(a):
        L += _pass(t.BT, "d", [f"D[{i * a + j}, q]" for i in range(a)],
                   [f"E[{a1 * a + j}, q] = {{}}" for a1 in range(a)], coefs)
    # columns: one loop per row a1
    for a1 in range(a):
        L += _pass(t.BT, "e", [f"E[{a1 * a + j}, q]" for j in range(a)],
                   [f"V[{a1 * a + b}, c, q] = {{}}" for b in range(a)], coefs)
    L.append("")
    # In the three loops below the innermost index is the bare loop counter (plus a small
    # constant) and every other index is fixed during the loop, so numba's negative-index
    # handling folds away and the compiler vectorises them.
    # deinterleave one padded row into its m column phases: P[rr, s, u] = row[m·u + s]
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def deint_{m}_{r}(row, P, rr, U2):")
    L.append("    for u in range(U2):")
    for sph in range(m):
        L.append(f"        P[rr, {sph}, u] = row[{m} * u + {sph}]")
    L.append("")
    # vertical, one row rl of tiles: F4[a1, s, rl, u] = sum_i BT[a1, i] P[rl·m + i, s, u]
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def vert_{m}_{r}(P, F4, rl, coef):")
    L.append(ks)
    L.append("    U2 = P.shape[2]")
    L.append(f"    r0 = rl * {m}")
    L += _pass(t.BT, "d", [f"P[r0 + {i}, s, u]" for i in range(a)],
               [f"F4[{a1}, s, rl, u] = {{}}" for a1 in range(a)], coefs,
               header=(f"    for s in range({m}):", "        for u in range(U2):"))
    L.append("")
    # horizontal, whole block: V[a1*a + b, c, v] = sum_j BT[b, j] F[a1, j % m, v + j // m]
    # (v = rl·U2 + u; the spare columns u >= ntx of each row hold a harmless extra tile)
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def horiz_{m}_{r}(F, V, c, n, coef):")
    L.append(ks)
    L += _pass(t.BT, "e", [f"F[a1, {j % m}, u + {j // m}]" for j in range(a)],
               [f"V[t0 + {b}, c, u] = {{}}" for b in range(a)], coefs,
               header=(f"    for a1 in range({a}):", f"        t0 = a1 * {a}", "        for u in range(n):"))
    L.append("")
    # one output row i of a row rl of tiles: yrow[m·u + j] = O[i·m + j, rl, u]
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def scat_{m}_{r}(O3, yrow, i, rl, nfull):")
    for j in range(m):
        L.append(f"    o{j} = O3[i * {m} + {j}, rl]")
    L.append("    for u in range(nfull):")
    for j in range(m):
        L.append(f"        yrow[{m} * u + {j}] = o{j}[u]")
    L.append("")
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def output_{m}_{r}(M, S, O, Z, k, bk, coef, Pb):")
    L.append(ks)
    for b in range(a):
        L += _pass(t.AT, "u", [f"M[{a1 * a + b}, k, q]" for a1 in range(a)],
                   [f"S[{i * a + b}, q] = {{}}" for i in range(m)], coefs)
    for i in range(m):
        L += _pass(t.AT, "s", [f"S[{i * a + b}, q]" for b in range(a)],
                   [f"o{j} = bk + ({{}})" for j in range(m)], coefs)
        for j in range(m):
            L.append(f"        O[{i * m + j}, q] = o{j}")
        L.append("        Z[q] += " + " + ".join(f"o{j} * 0" for j in range(m)))
    L.append("")
    exact = (tuple(tuple(str(v) for v in row) for row in t.AT),
             tuple(tuple(str(v) for v in row) for row in t.BT))
    return "\n".join(L), coefs, exact


def _drop_unused_coefs(src: str) -> str:
    """Remove ``kN = coef[N]`` lines from every kernel in ``src`` that does not use ``kN``."""
    kernels = src.split("\n@njit")
    for n, body in enumerate(kernels):
        lines = body.split("\n")
        keep = []
        for i, line in enumerate(lines):
            m = re.fullmatch(r"    (k\d+) = coef\[\d+\]", line)
            if m and not any(re.search(rf"\b{m.group(1)}\b", other)
                             for j, other in enumerate(lines) if j != i):
                continue
            keep.append(line)
        kernels[n] = "\n".join(keep)
    return "\n@njit".join(kernels)


VERSION = 15        # bump when the generated code changes: cached files are keyed by it
_OWN = None         # this file's digest, also in the key: an edited generator, new files


def module_source(t) -> str:
    """The source of one module of kernels for the exact transforms ``t``."""
    src, coefs, exact = _kernel_source(t)
    src = _drop_unused_coefs(src)
    out = [f'"""Kernels for F({t.m},{t.r}), generated by tensorlayout.winograd._codegen '
           f'(version {VERSION}): do not edit."""', "",
           "import numpy as np", "from numba import carray, njit", "",
           "from tensorlayout.winograd._native import Entry, call_i64, call_void, ptr_f32, ptr_i64",
           "",
           f"EXACT = {exact!r}", f"COEFS = {[str(c) for c in coefs]!r}", "", src, ""]
    return "\n".join(out)


_KEYS = {}                    # id(Transforms) -> (the transforms, key): computed once each


def _key(t) -> str:
    got = _KEYS.get(id(t))
    if got is not None and got[0] is t:
        return got[1]
    global _OWN
    if _OWN is None:
        with open(__file__, "rb") as fh:
            _OWN = hashlib.sha1(fh.read()).hexdigest()[:12]
    exact = (t.m, t.r, tuple(map(str, t.AT.flat)), tuple(map(str, t.BT.flat)), VERSION, _OWN)
    key = hashlib.sha256(repr(exact).encode()).hexdigest()[:16]
    _KEYS[id(t)] = (t, key)
    return key


def load_module(t):
    """The module of kernels for ``t``, written into :func:`tensorlayout._jit.cache_dir` at
    first use (:func:`tensorlayout._jit.generated_module`)."""
    key = _key(t)
    name = f"wino_{t.m}_{t.r}_{key}"
    mod = _jit.loaded_module(name)
    return mod if mod is not None else _jit.generated_module(name, module_source(t))


def _coefficients(mod, dtype) -> np.ndarray:
    """The module's constants as an array of ``dtype`` (made once per module and dtype)."""
    cache = mod.__dict__.setdefault("_coef_arrays", {})
    got = cache.get(dtype)
    if got is None:
        from fractions import Fraction

        got = np.array([float(Fraction(c)) for c in mod.COEFS] or [1.0], dtype=dtype)
        cache[dtype] = got
    return got


def kernels_for(t, dtype):
    """``(input, output, coef, module)``: the unrolled kernels for the exact transforms ``t``
    and their module (whose ``ENTRY`` runs the native engine, see ``engine.NativeCall``)."""
    try:
        mod = load_module(t)
    except OSError:
        return None                      # no writable cache: the generic kernels run
    coef = _coefficients(mod, np.dtype(dtype))
    return (getattr(mod, f"wino_input_{t.m}_{t.r}"), getattr(mod, f"wino_output_{t.m}_{t.r}"),
            coef, mod)


if __name__ == "__main__":  # pragma: no cover
    # print the kernels of one tile: python -m tensorlayout.winograd._codegen 6 3
    m, r = (int(v) for v in sys.argv[1:3]) if len(sys.argv) > 2 else (6, 3)
    print(module_source(transforms(m, r)))
