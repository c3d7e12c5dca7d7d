"""Threads for the compiled paths: a small pool, and single-threaded BLAS while it runs.

The transforms (numba, GIL released) and the GEMMs (NumPy's BLAS, GIL released) are split
over ``n`` Python threads by channel ranges and by Winograd points.  BLAS is held to one
thread for the duration, so two thread pools never compete for the same cores.  The BLAS
thread count is found through the OpenBLAS library NumPy loaded; with another BLAS the
setting is left alone (correct, possibly slower).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_LOCK = threading.Lock()
_BLAS = None          # (get, set) ctypes functions, or False when not found
_BLAS_DEPTH = 0
_BLAS_SAVED = None


def num_threads() -> int:
    """Threads to use: numba's setting (``numba.set_num_threads``), else the CPU count."""
    try:
        import numba

        return max(1, int(numba.get_num_threads()))
    except Exception:  # noqa: BLE001 - numba absent or not initialised
        return max(1, os.cpu_count() or 1)


def pool(n: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE < n:
            _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tensorlayout")
            _POOL_SIZE = n
        return _POOL


def run_split(fn, n_items: int, n: int):
    """Call ``fn(lo, hi)`` on ``n`` (or fewer) contiguous ranges covering [0, n_items), in parallel."""
    n = max(1, min(n, n_items))
    bounds = [n_items * i // n for i in range(n + 1)]
    if n == 1:
        fn(0, n_items)
        return
    futs = [pool(n).submit(fn, bounds[i], bounds[i + 1]) for i in range(1, n)]
    fn(bounds[0], bounds[1])
    for f in futs:
        f.result()


def _find_blas():
    global _BLAS
    if _BLAS is not None:
        return _BLAS
    _BLAS = False
    try:
        import numpy  # noqa: F401 - make sure its BLAS is loaded

        paths = set()
        with open("/proc/self/maps") as fh:
            for line in fh:
                if "openblas" in line.lower():
                    paths.add(line.split()[-1])
        for path in sorted(paths):
            lib = ctypes.CDLL(path)
            for prefix in ("scipy_openblas", "openblas"):
                for suffix in ("64_", ""):
                    get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                    put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                    if get is not None and put is not None:
                        get.restype = ctypes.c_int
                        put.argtypes = [ctypes.c_int]
                        _BLAS = (get, put)
                        return _BLAS
    except Exception:  # noqa: BLE001 - no /proc, no OpenBLAS: leave BLAS as it is
        _BLAS = False
    return _BLAS


@contextlib.contextmanager
def single_threaded_blas():
    """Hold OpenBLAS to one thread inside the block (nested uses are fine), restore after."""
    global _BLAS_DEPTH, _BLAS_SAVED
    blas = _find_blas()
    if not blas:
        yield
        return
    with _LOCK:
        if _BLAS_DEPTH == 0:
            _BLAS_SAVED = blas[0]()
            blas[1](1)
        _BLAS_DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _BLAS_DEPTH -= 1
            if _BLAS_DEPTH == 0 and _BLAS_SAVED:
                blas[1](_BLAS_SAVED)
