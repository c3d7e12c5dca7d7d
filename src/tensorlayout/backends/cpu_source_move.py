"""The source of the CPU backend's data-moving entries, generated as text: a transpose (any
permutation of a float32 tensor's axes) as rows of the output copied from the input at the
permutation's strides.  :func:`source` is part of
:func:`tensorlayout.backends.cpu_source.module_source`'s module.
"""

from __future__ import annotations

__all__ = ["source", "PERMUTE_CTX"]

#: The transpose entry's context: ``dims`` and ``strides`` point to ``nd`` int64 each (the
#: output's axes, merged where both tensors run on together, and the input's float stride
#: along each); ``xsize`` and ``ysize``: the tensors' floats.
PERMUTE_CTX = ("x", "y", "nd", "dims", "strides", "xsize", "ysize")

_SOURCE = '''

def permute_entry(ctx, tid, nt):
    # the output's rows (all axes but the last) split over the threads; each row's place in
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
    for r in range(tid * rows // nt, (tid + 1) * rows // nt):
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
'''


def source() -> str:
    """The data-moving entries' source."""
    return _SOURCE.replace("{n}", str(len(PERMUTE_CTX)))
