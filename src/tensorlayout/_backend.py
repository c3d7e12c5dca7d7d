"""Which optional backends this process can use: numba (compiled loops) and PyOpenCL.

Every module asks here instead of trying its own import, so that each probe runs once per
process and a broken install is judged the same way everywhere.  ``TENSORLAYOUT_NUMPY_COPY``
set to anything but ``0`` keeps the copy engine on NumPy (:func:`numba_for_copies`).

>>> isinstance(has_numba(), bool), isinstance(has_pyopencl(), bool)
(True, True)
"""

from __future__ import annotations

import functools
import os

__all__ = ["numba", "has_numba", "numba_for_copies", "pyopencl", "has_pyopencl"]


@functools.lru_cache(maxsize=None)
def numba():
    """The ``numba`` module, or None when it is not installed or does not import."""
    try:
        import numba as nb
    except Exception:  # noqa: BLE001 - a broken numba counts as none: NumPy serves
        return None
    return nb


def has_numba() -> bool:
    """True when numba imports."""
    return numba() is not None


def numba_for_copies():
    """numba for the copy engines, or None when absent or ``TENSORLAYOUT_NUMPY_COPY`` asks
    for NumPy."""
    if os.environ.get("TENSORLAYOUT_NUMPY_COPY", "") not in ("", "0"):
        return None
    return numba()


@functools.lru_cache(maxsize=None)
def _pyopencl():
    try:
        import pyopencl as pcl
    except ImportError as exc:
        return None, str(exc)
    return pcl, None


def pyopencl():
    """``(module, None)``, or ``(None, why)`` when PyOpenCL does not import."""
    return _pyopencl()


def has_pyopencl() -> bool:
    """True when PyOpenCL imports (a platform may still be missing: see tensorlayout.opencl)."""
    return _pyopencl()[0] is not None
