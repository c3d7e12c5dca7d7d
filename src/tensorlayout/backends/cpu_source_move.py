"""The source of the CPU backend's data-moving entries, generated as text: a transpose (any
permutation of a float32 tensor's axes) as rows of the output copied from the input at the
permutation's strides, and one input of a Concat copied into its place in the output.
:func:`source` is part of
:func:`tensorlayout.backends.cpu_source.module_source`'s module.
"""

from __future__ import annotations

__all__ = ["source", "PERMUTE_CTX"]

#: The transpose entry's context: ``dims`` and ``strides`` point to ``nd`` int64 each (the
#: output's axes, merged where both tensors run on together, and the input's float stride
#: along each); ``xsize`` and ``ysize``: the tensors' floats.
PERMUTE_CTX = ("x", "y", "nd", "dims", "strides", "xsize", "ysize")

_SOURCE = '''

def permute_entry(ctx, tid, nt, work):
    # the output's rows (all axes but the last) claimed in ranges; each row's place in
    # the input counted from its index, then its floats copied (consecutive, or at the last
    # axis's stride)
    a = carray(ptr_i64(ctx), ({n},))
    nd = a[2]
    d = carray(ptr_i64(a[3]), (nd,))
    s = carray(ptr_i64(a[4]), (nd,))
    x = carray(ptr_f32(a[0]), (a[5],))
    y = carray(ptr_f32(a[1]), (a[6],))
    L = d[nd - 1]
    sl = s[nd - 1]
    rows = a[6] // L if L > 0 else 0
    while True:
        r0, r1 = next_range(work, tid, nt, rows)
        if r0 >= rows:
            break
        for r in range(r0, r1):
            off = 0
            q = r
            for k in range(nd - 2, -1, -1):
                i = q % d[k]
                q //= d[k]
                off += i * s[k]
            dst = y[r * L:(r + 1) * L]
            if sl == 1:
                src = x[off:off + L]
                for j in range(L):
                    dst[j] = src[j]
            else:
                for j in range(L):
                    dst[j] = x[off + j * sl]


PERMUTE_ENTRY = Entry(permute_entry)


def copy_entry(ctx, tid, nt, work):
    # one input of a Concat: src (outer, inner) into columns off..off+inner of dst
    # (outer, total), the threads claiming ranges of the outer * inner floats
    a = carray(ptr_i64(ctx), (6,))
    outer = a[1]
    total = a[2]
    inner = a[4]
    off = a[5]
    dst = carray(ptr_f32(a[0]), (outer * total,))
    src = carray(ptr_f32(a[3]), (outer * inner,))
    n = outer * inner
    while True:
        i, i1 = next_range(work, tid, nt, n)
        if i >= n:
            break
        while i < i1:
            o = i // inner
            j = i - o * inner
            m = min(inner - j, i1 - i)
            d = dst[o * total + off + j:o * total + off + j + m]
            s = src[i:i + m]
            for q in range(m):
                d[q] = s[q]
            i += m


COPY_ENTRY = Entry(copy_entry)
'''


def source() -> str:
    """The data-moving entries' source."""
    return _SOURCE.replace("{n}", str(len(PERMUTE_CTX)))
