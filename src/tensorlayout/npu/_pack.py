"""Packing k consecutive n into one word (4N, 2N, 2IC modes) and back.

``interleave(src, k)`` turns an ``(N, L)`` array of e-byte unsigned values into an
``(ceil(N / k), L)`` array of ``k*e``-byte words whose bytes from ``e*i`` hold
``src[m*k + i]`` (little-endian, as the NPU stores int8x4, int16x2, fp32x2);
missing ``n`` (the dummies) are 0.  ``deinterleave`` is the inverse.  With
numba installed, large arrays go through a compiled loop (one per element size
and k, with its shifts fixed) that the compiler vectorises; the NumPy path
writes the same bytes.

>>> import numpy as np
>>> w = interleave(np.array([[1], [2], [3]], dtype=np.uint8), 4)
>>> hex(int(w[0, 0]))
'0x30201'
>>> deinterleave(w, 3, 4, np.dtype(np.uint8)).ravel().tolist()
[1, 2, 3]
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["interleave", "deinterleave", "interleave_runs", "deinterleave_runs", "FAST_MIN_ELEMENTS"]

#: Arrays smaller than this many elements use NumPy alone (a compiled call costs more).
FAST_MIN_ELEMENTS = 1 << 15

_kernels: dict = {}
_numba = None


def _get_numba():
    global _numba
    if _numba is None:
        if os.environ.get("TENSORLAYOUT_NUMPY_COPY", "") not in ("", "0"):
            _numba = False
        else:
            try:
                import numba
                _numba = numba
            except Exception:  # noqa: BLE001 - without numba the NumPy path serves
                _numba = False
    return _numba or None


def _make(e: int, k: int):
    numba = _get_numba()
    Wt = numba.uint32 if e * k == 4 else numba.uint64
    Et = {1: numba.uint8, 2: numba.uint16, 4: numba.uint32}[e]
    s1, s2, s3 = Wt(8 * e), Wt(16 * e), Wt(24 * e)

    if k == 4:
        @numba.njit
        def pack(src, zero, out):
            n_total, length = src.shape
            for m in range(out.shape[0]):
                n = m * 4
                a = src[n]
                b = src[n + 1] if n + 1 < n_total else zero
                c = src[n + 2] if n + 2 < n_total else zero
                d = src[n + 3] if n + 3 < n_total else zero
                o = out[m]
                for j in range(length):
                    o[j] = Wt(a[j]) | (Wt(b[j]) << s1) | (Wt(c[j]) << s2) | (Wt(d[j]) << s3)

        @numba.njit
        def unpack(words, dst):
            n_total, length = dst.shape
            for m in range(words.shape[0]):
                n = m * 4
                w = words[m]
                if n + 3 < n_total:
                    a, b, c, d = dst[n], dst[n + 1], dst[n + 2], dst[n + 3]
                    for j in range(length):
                        v = w[j]
                        a[j] = Et(v)
                        b[j] = Et(v >> s1)
                        c[j] = Et(v >> s2)
                        d[j] = Et(v >> s3)
                else:
                    for i in range(n_total - n):
                        r = dst[n + i]
                        sh = Wt(8 * e * i)
                        for j in range(length):
                            r[j] = Et(w[j] >> sh)
    else:
        @numba.njit
        def pack(src, zero, out):
            n_total, length = src.shape
            for m in range(out.shape[0]):
                n = m * 2
                a = src[n]
                b = src[n + 1] if n + 1 < n_total else zero
                o = out[m]
                for j in range(length):
                    o[j] = Wt(a[j]) | (Wt(b[j]) << s1)

        @numba.njit
        def unpack(words, dst):
            n_total, length = dst.shape
            for m in range(words.shape[0]):
                n = m * 2
                w = words[m]
                a = dst[n]
                if n + 1 < n_total:
                    b = dst[n + 1]
                    for j in range(length):
                        v = w[j]
                        a[j] = Et(v)
                        b[j] = Et(v >> s1)
                else:
                    for j in range(length):
                        a[j] = Et(w[j])
    @numba.njit
    def pack_runs(src, zero, offs, dst):
        # src (N, G, run) values; offs (M, G) word offsets of each run in dst
        n_total, groups, run = src.shape
        for m in range(offs.shape[0]):
            n = m * k
            for g in range(groups):
                o = offs[m, g]
                a = src[n, g]
                b = src[n + 1, g] if n + 1 < n_total else zero
                w = dst[o:o + run]
                if k == 4:
                    c = src[n + 2, g] if n + 2 < n_total else zero
                    d = src[n + 3, g] if n + 3 < n_total else zero
                    for j in range(run):
                        w[j] = Wt(a[j]) | (Wt(b[j]) << s1) | (Wt(c[j]) << s2) | (Wt(d[j]) << s3)
                else:
                    for j in range(run):
                        w[j] = Wt(a[j]) | (Wt(b[j]) << s1)

    @numba.njit
    def unpack_runs(words, offs, out):
        # out (N, G, run) values; offs (M, G) word offsets of each run in words
        n_total, groups, run = out.shape
        for m in range(offs.shape[0]):
            n = m * k
            for g in range(groups):
                o = offs[m, g]
                words_run = words[o:o + run]
                if n + k <= n_total:
                    a = out[n, g]
                    b = out[n + 1, g]
                    if k == 4:
                        c = out[n + 2, g]
                        d = out[n + 3, g]
                        for j in range(run):
                            v = words_run[j]
                            a[j] = Et(v)
                            b[j] = Et(v >> s1)
                            c[j] = Et(v >> s2)
                            d[j] = Et(v >> s3)
                    else:
                        for j in range(run):
                            v = words_run[j]
                            a[j] = Et(v)
                            b[j] = Et(v >> s1)
                else:
                    for i in range(n_total - n):
                        r = out[n + i, g]
                        sh = Wt(8 * e * i)
                        for j in range(run):
                            r[j] = Et(words_run[j] >> sh)

    return pack, unpack, pack_runs, unpack_runs


def _kernel(e: int, k: int):
    if _get_numba() is None:
        return None
    key = (e, k)
    if key not in _kernels:
        _kernels[key] = _make(e, k)
    return _kernels[key]


def _word(e: int, k: int) -> np.dtype:
    return np.dtype(f"u{e * k}")


def interleave(src: np.ndarray, k: int) -> np.ndarray:
    """``(N, L)`` unsigned e-byte values -> ``(ceil(N/k), L)`` words of ``k*e`` bytes (dummies 0)."""
    n, length = src.shape
    e = src.dtype.itemsize
    m = -(-n // k)
    out = np.empty((m, length), dtype=_word(e, k))
    kern = _kernel(e, k) if src.size >= FAST_MIN_ELEMENTS else None
    if kern is not None:
        s = np.ascontiguousarray(src)
        kern[0](s, np.zeros(length, dtype=s.dtype), out)
        return out
    lanes = out.view(src.dtype).reshape(m, length, k)
    for i in range(k):
        part = src[i::k]
        lanes[:part.shape[0], :, i] = part
        lanes[part.shape[0]:, :, i] = 0
    return out


def deinterleave(words: np.ndarray, n: int, k: int, dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
    """The inverse of :func:`interleave`: ``(M, L)`` words -> ``(n, L)`` values of ``dtype``."""
    m, length = words.shape
    e = dtype.itemsize
    if out is None:
        out = np.empty((n, length), dtype=dtype)
    kern = _kernel(e, k) if out.size >= FAST_MIN_ELEMENTS else None
    if kern is not None and out.flags.c_contiguous:
        kern[1](np.ascontiguousarray(words), out.view(np.dtype(f"u{e}")))
        return out
    lanes = words.view(np.dtype(f"u{e}")).reshape(m, length, k)
    for i in range(k):
        out[i::k] = lanes[:len(range(i, n, k)), :, i].view(dtype)
    return out


def interleave_runs(src: np.ndarray, k: int, offsets: np.ndarray, words: np.ndarray) -> bool:
    """Pack ``src`` ``(N, G, run)`` straight into runs of the flat word array ``words``.

    Run ``(m, g)`` (``k`` consecutive n of group g) starts at word ``offsets[m, g]``, which the
    caller takes from its layout.  Returns False (and writes nothing) when no compiled kernel
    is at hand or the array is small: the caller then takes the two-step path.
    """
    if src.size < FAST_MIN_ELEMENTS:
        return False
    kern = _kernel(src.dtype.itemsize, k)
    if kern is None:
        return False
    s = np.ascontiguousarray(src)
    kern[2](s, np.zeros(s.shape[2], dtype=s.dtype), offsets, words)
    return True


def deinterleave_runs(words: np.ndarray, k: int, offsets: np.ndarray, out: np.ndarray) -> bool:
    """The inverse of :func:`interleave_runs` into a C-contiguous ``(N, G, run)`` ``out``."""
    if out.size < FAST_MIN_ELEMENTS or not out.flags.c_contiguous:
        return False
    kern = _kernel(out.dtype.itemsize, k)
    if kern is None:
        return False
    kern[3](words, offsets, out)
    return True
