"""Threads for the compiled paths: one pool, and BLAS held to one thread while it works.

The transforms (numba, GIL released) and the GEMMs (NumPy's BLAS, GIL released) run on
our own threads; BLAS is limited to one thread for the duration through threadpoolctl,
so two thread pools never compete for the same cores.  Without threadpoolctl the BLAS
setting is left alone (correct, possibly slower).
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .. import _backend

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_LOCK = threading.Lock()
_LIMITER = None           # threadpoolctl.ThreadpoolController, False when unavailable
_DEPTH = 0
_SAVED = None


def num_threads(requested=None) -> int:
    """Threads to use: ``requested``, else numba's setting, else the CPU count."""
    if requested:
        return int(requested)
    nb = _backend.numba()
    if nb is None:
        return max(1, os.cpu_count() or 1)
    return max(1, int(nb.get_num_threads()))


def _pool(n: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE < n:
            _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tensorlayout")
            _POOL_SIZE = n
        return _POOL


def run(fns) -> None:
    """Run the callables in parallel (the first on this thread); re-raise the first error."""
    fns = list(fns)
    if len(fns) == 1:
        fns[0]()
        return
    futs = [_pool(len(fns) - 1).submit(f) for f in fns[1:]]
    err = None
    try:
        fns[0]()
    except BaseException as exc:  # noqa: BLE001 - re-raised after the others finish
        err = exc
    for f in futs:
        try:
            f.result()
        except BaseException as exc:  # noqa: BLE001
            err = err or exc
    if err is not None:
        raise err


def run_split(fn, n_items: int, n: int) -> None:
    """Call ``fn(lo, hi)`` on ``n`` (or fewer) contiguous ranges covering [0, n_items)."""
    n = max(1, min(n, n_items))
    bounds = [n_items * i // n for i in range(n + 1)]
    run([(lambda a=bounds[i], b=bounds[i + 1]: fn(a, b)) for i in range(n)])


def _blas_libraries():
    """threadpoolctl's controllers of the BLAS libraries loaded now (an empty list without it)."""
    global _LIMITER
    if _LIMITER is None:
        try:
            from threadpoolctl import ThreadpoolController

            _LIMITER = [lib for lib in ThreadpoolController().lib_controllers
                        if lib.user_api == "blas"]
        except Exception:  # noqa: BLE001 - not installed: leave BLAS as it is
            _LIMITER = []
    return _LIMITER


@contextlib.contextmanager
def single_threaded_blas():
    """Hold BLAS to one thread inside the block (nested and concurrent uses are fine)."""
    global _DEPTH, _SAVED
    libs = _blas_libraries()
    if not libs:
        yield
        return
    with _LOCK:
        if _DEPTH == 0:
            _SAVED = [lib.get_num_threads() for lib in libs]
            for lib in libs:
                lib.set_num_threads(1)
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and _SAVED is not None:
                for lib, n in zip(libs, _SAVED):
                    lib.set_num_threads(n)
                _SAVED = None


_SGEMM = None


def sgemm_entry():
    """BLAS's ``cblas_sgemm`` as a ctypes function, for compiled code to call (None if the BLAS
    NumPy loaded exports none that we know).  Found through threadpoolctl's list of the
    loaded BLAS libraries; 64-bit-integer builds (NumPy's own OpenBLAS) and 32-bit ones."""
    global _SGEMM
    if _SGEMM is not None:
        return _SGEMM or None
    import ctypes

    _SGEMM = False
    I, F, P = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    for lib in _blas_libraries():
        try:
            dll = ctypes.CDLL(lib.filepath)
        except OSError:
            continue
        for name, idx in (("scipy_cblas_sgemm64_", ctypes.c_int64), ("cblas_sgemm64_", ctypes.c_int64),
                          ("scipy_cblas_sgemm", ctypes.c_int), ("cblas_sgemm", ctypes.c_int)):
            fn = getattr(dll, name, None)
            if fn is None:
                continue
            fn.argtypes = [I, I, I, idx, idx, idx, F, P, idx, P, idx, F, P, idx]
            fn.restype = None
            _SGEMM = fn
            return fn
    return None
