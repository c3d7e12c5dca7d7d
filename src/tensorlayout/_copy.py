"""The one copy every pack, unpack and convert goes through.

A copy is given as axes ``(extent, dst stride, src stride)`` (strides in bytes).  Pack,
unpack and :func:`tensorlayout.core.convert` take them from their layouts' digits: each box
of a coalesced layout is one copy, its axes merged by :func:`merge_runs`, planned by
:func:`plan` once per layout value and run by :func:`run_planned` on every call.  Any two
equal-shaped strided NumPy views can also be copied with :func:`strided_copy`.

NumPy's strided assignment is the portable path.  Large copies of one dtype go to a
compiled kernel (:mod:`tensorlayout._fastcopy`, numba) when numba is installed; set the
environment variable ``TENSORLAYOUT_NUMPY_COPY=1`` to keep NumPy's.  Small copies stay with
NumPy: below :data:`FAST_MIN_ELEMENTS` the kernel's call overhead costs more than it saves.

>>> import numpy as np
>>> dst = np.zeros((2, 3), dtype=np.float32)
>>> strided_copy(dst, np.arange(6.0).reshape(3, 2).T)
>>> dst.tolist()
[[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
"""

from __future__ import annotations

import math

import numpy as np

from . import _backend
from ._fastcopy import merge_runs

#: Copies smaller than this many elements use NumPy alone.
FAST_MIN_ELEMENTS = 1 << 16


def _fast_enabled() -> bool:
    return _backend.numba_for_copies() is not None


def plan(axes, itemsize: int, d_mod: int, s_mod: int):
    """The compiled kernel's plan for a copy of ``axes`` (see :func:`merge_runs`) between
    arrays of one dtype whose first elements lie at ``d_mod`` and ``s_mod`` modulo 8, or None
    where NumPy copies it (a small copy, no numba, a form the kernel does not take).

    Decided once per form (layouts keep the answer): the plan holds the word size, the
    loops, streaming stores and the lane interleave the kernel will use.

    Four float32 planes of 300 values into 300 RGBA pixels, 64 times: the kernel writes
    each pixel's 4 lanes from the 4 planes' unit-stride rows.

    >>> p = plan([(64, 4800, 4800), (300, 16, 4), (4, 4, 1200)], 4, 0, 0)
    >>> p.unit, p.shape[-2:], p.dst_strides[-2:], p.src_strides[-2:]
    (4, (300, 4), (4, 1), (1, 300))
    """
    if math.prod(a[0] for a in axes) < FAST_MIN_ELEMENTS:
        return None
    from . import _fastcopy

    if not _fastcopy.available():
        return None
    return _fastcopy.schedule(axes, itemsize, d_mod, s_mod)


def run_planned(planned, dst: np.ndarray, d_ptr: int, src: np.ndarray, s_ptr: int) -> bool:
    """Run a :func:`plan` with its first elements at addresses ``d_ptr`` and ``s_ptr`` inside
    ``dst`` and ``src``; False, with nothing written, while the kernel is still compiling
    (NumPy copies then).  The caller has checked :func:`_fast_enabled` once for its copy
    program (``TENSORLAYOUT_NUMPY_COPY`` turns numba off)."""
    from . import _fastcopy

    return _fastcopy.execute(planned, dst, d_ptr, src, s_ptr)


def strided_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """Copy ``src`` into ``dst`` (same shape, any strides, dtype cast as NumPy's copyto does)."""
    if (dst.size >= FAST_MIN_ELEMENTS and dst.dtype == src.dtype and dst.shape == src.shape
            and _fast_enabled()):
        from . import _fastcopy

        if _fastcopy.run(dst, src):
            return
    np.copyto(dst, src, casting="unsafe")


def engine() -> str:
    """Which copy large conversions use: ``'numba X.Y (N threads)'`` or ``'numpy'``."""
    if not _fast_enabled():
        return "numpy"
    from . import _fastcopy

    return _fastcopy.describe()
