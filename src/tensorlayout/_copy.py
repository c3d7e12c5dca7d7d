"""The one copy every pack and unpack goes through: ``dst[...] = src`` for two strided views.

Both views have the same shape.  NumPy's strided assignment is the portable
path.  Large copies of one dtype go to a compiled kernel
(:mod:`tensorlayout._fastcopy`, numba) when numba is installed; set the
environment variable ``TENSORLAYOUT_NUMPY_COPY=1`` to keep NumPy's.  Small
copies stay with NumPy: below :data:`FAST_MIN_ELEMENTS` the kernel's call
overhead costs more than it saves.

>>> import numpy as np
>>> dst = np.zeros((2, 3), dtype=np.float32)
>>> strided_copy(dst, np.arange(6.0).reshape(3, 2).T)
>>> dst.tolist()
[[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
"""

from __future__ import annotations

import numpy as np

from . import _backend

#: Copies smaller than this many elements use NumPy alone.
FAST_MIN_ELEMENTS = 1 << 16


def _fast_enabled() -> bool:
    return _backend.numba_for_copies() is not None


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
