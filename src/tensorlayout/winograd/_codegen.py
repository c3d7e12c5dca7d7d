"""Writes ``_generated.py``: numba kernels specialised to one F(m, r), constants unrolled.

The generic kernels in ``_kernels`` loop over the non-zero coefficients of Bᵀ and Aᵀ at run
time, one short vector loop per coefficient.  For the standard tiles that loop overhead
dominates, so this generator writes, for each of F(2,3), F(4,3), F(6,3) and F(4,5), a
kernel whose 2-D transform is a short sequence of loops over the tiles of a block, one per
row or column of the tile, each body straight-line code (only the non-zero terms, ±1 as
plain adds) with few live values, so the compiler vectorises every loop.  The constants come in as an array of the data's dtype, so
float32 stays float32.

Regenerate with ``python -m tensorlayout.winograd._codegen`` after changing the default
transforms; at run time the exact matrices recorded in the file are compared with
:func:`transforms` and the generic kernels are used on any mismatch.
"""

from __future__ import annotations

import os

from .transforms import transforms

TILES = ((2, 3), (4, 3), (6, 3), (4, 5))


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


_DRIVERS = """
@njit(nogil=True, cache=True)
def wino_input_{m}_{r}(x, V, coef, pad_t, pad_l, nty, ntx, p0, npb, c0, c1):
    N, C, H, W = x.shape
    Pb = V.shape[2]
    T = nty * ntx
    D = np.zeros(({a} * {a}, Pb), dtype=V.dtype)
    E = np.empty(({a} * {a}, Pb), dtype=V.dtype)
    # When the block lies in one image, its rows of each channel are first copied, with
    # the zero padding, into a small plane (a streaming read the prefetchers follow), and
    # the tiles are gathered from there without bounds checks.
    n0 = p0 // T
    n1 = (p0 + npb - 1) // T
    ty_lo = (p0 - n0 * T) // ntx
    ty_hi = (p0 + npb - 1 - n1 * T) // ntx
    ybase = ty_lo * {m} - pad_t
    rows = (ty_hi - ty_lo) * {m} + {a} if n0 == n1 else 1
    Wp = ntx * {m} + {a} - {m}
    plane = np.zeros((rows, Wp), dtype=V.dtype)
    # where each tile of the block starts (image, top row, left column), divisions done once
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
        if n0 == n1:
            for rr in range(rows):
                yy = ybase + rr
                if yy < 0 or yy >= H:
                    continue
                lim = min(W, Wp - pad_l)
                for xx in range(lim):
                    plane[rr, pad_l + xx] = x[n0, c, yy, xx]
            for q in range(npb):
                r0 = qy[q] - ybase
                x0 = qx[q] + pad_l
                for i in range({a}):
                    for j in range({a}):
                        D[i * {a} + j, q] = plane[r0 + i, x0 + j]
            input_{m}_{r}(D, E, V, c, coef, Pb)
            continue
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
        input_{m}_{r}(D, E, V, c, coef, Pb)


@njit(nogil=True, cache=True)
def wino_output_{m}_{r}(M, y, bias, coef, nty, ntx, p0, npb, bad, k0, k1):
    N, K, OH, OW = y.shape
    Pb = M.shape[2]
    T = nty * ntx
    O = np.empty(({m} * {m}, Pb), dtype=M.dtype)
    S = np.empty(({m} * {a}, Pb), dtype=M.dtype)
    qn = np.empty(npb, dtype=np.int64)
    qy = np.empty(npb, dtype=np.int64)
    qx = np.empty(npb, dtype=np.int64)
    for q in range(npb):
        p = p0 + q
        n = p // T
        rem = p - n * T
        ty = rem // ntx
        qn[q] = n
        qy[q] = ty * {m}
        qx[q] = (rem - ty * ntx) * {m}
    for k in range(k0, k1):
        bk = bias[k]
        output_{m}_{r}(M, S, O, k, bk, coef, Pb)
        acc = bk * 0
        for q in range(npb):
            n = qn[q]
            oy = qy[q]
            ox = qx[q]
            if oy + {m} <= OH and ox + {m} <= OW:
                for i in range({m}):
                    for j in range({m}):
                        val = O[i * {m} + j, q]
                        acc += val * 0
                        y[n, k, oy + i, ox + j] = val
            else:
                for i in range(min({m}, OH - oy)):
                    for j in range(min({m}, OW - ox)):
                        val = O[i * {m} + j, q]
                        acc += val * 0
                        y[n, k, oy + i, ox + j] = val
        bad[k] += acc

"""


def _kernel_source(m, r):
    t = transforms(m, r)
    a = t.alpha
    coefs = coef_list(t.AT, t.BT)
    ks = "\n".join(f"    k{i} = coef[{i}]" for i in range(len(coefs)))
    L = []
    # ---- input: D[i*a + j, q] -> V[a1*a + b, c, q] = sum_ij BT[a1,i] D[i,j] BT[b,j]
    L.append(_DRIVERS.format(m=m, r=r, a=a))
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def input_{m}_{r}(D, E, V, c, coef, Pb):")
    L.append(ks)
    # rows: one small loop over the tiles per column j (few live values: it vectorises)
    for j in range(a):
        L.append("    for q in range(Pb):")
        for i in range(a):
            L.append(f"        d{i} = D[{i * a + j}, q]")
        for a1 in range(a):
            L.append(f"        E[{a1 * a + j}, q] = "
                     + _lin(t.BT[a1], [f"d{i}" for i in range(a)], coefs))
    # columns: one loop per row a1
    for a1 in range(a):
        L.append("    for q in range(Pb):")
        for j in range(a):
            L.append(f"        e{j} = E[{a1 * a + j}, q]")
        for b in range(a):
            L.append(f"        V[{a1 * a + b}, c, q] = "
                     + _lin(t.BT[b], [f"e{j}" for j in range(a)], coefs))
    L.append("")
    L.append("@njit(nogil=True, cache=True)")
    L.append(f"def output_{m}_{r}(M, S, O, k, bk, coef, Pb):")
    L.append(ks)
    for b in range(a):
        L.append("    for q in range(Pb):")
        for a1 in range(a):
            L.append(f"        u{a1} = M[{a1 * a + b}, k, q]")
        for i in range(m):
            L.append(f"        S[{i * a + b}, q] = "
                     + _lin(t.AT[i], [f"u{a1}" for a1 in range(a)], coefs))
    for i in range(m):
        L.append("    for q in range(Pb):")
        for b in range(a):
            L.append(f"        s{b} = S[{i * a + b}, q]")
        for j in range(m):
            L.append(f"        O[{i * m + j}, q] = bk + ("
                     + _lin(t.AT[j], [f"s{b}" for b in range(a)], coefs) + ")")
    L.append("")
    exact = (tuple(tuple(str(v) for v in row) for row in t.AT),
             tuple(tuple(str(v) for v in row) for row in t.BT))
    return "\n".join(L), coefs, exact


def generate() -> str:
    out = ['"""Generated by ``python -m tensorlayout.winograd._codegen``: do not edit."""', "",
           "import numpy as np", "from numba import njit", "", "EXACT = {}", "COEFS = {}", ""]
    for m, r in TILES:
        src, coefs, exact = _kernel_source(m, r)
        out.append(f"EXACT[({m}, {r})] = {exact!r}")
        out.append(f"COEFS[({m}, {r})] = {[str(c) for c in coefs]!r}")
        out.append("")
        out.append(src)
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    path = os.path.join(os.path.dirname(__file__), "_generated.py")
    with open(path, "w") as fh:
        fh.write(generate())
    print(f"wrote {path}")
