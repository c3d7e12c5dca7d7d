"""Threads: the engine's own native workers, and a Python pool for the BLAS paths.

:class:`Workers` is the pool of the float32 Winograd engine: native threads (started with
``pthread_create``, running the machine code of :mod:`._simd`) that each call a compiled
function (a numba ``cfunc``) with ``(context, thread index, thread count, work counter)``.
A call uses exactly the threads it asks for: the caller's thread is thread 0 and the others are
woken one by one through a futex; when their part is done they spin for about
``SPIN_TICKS`` time-stamp ticks (about a millisecond, so that back-to-back calls of a
network find them awake, yielding the core to any other runnable thread every few polls)
and then park in the kernel.  No OpenMP runtime is involved, so
other libraries' pools in the same process (PyTorch's, onnxruntime's, ncnn's and MNN's
OpenMP, numba's) neither share nor disturb it, and idle workers cost nothing.  One call
runs at a time; concurrent callers wait for each other.  The pool exists on Linux (x86-64
and ARM64); elsewhere the engine takes the Python threads below.

The Python pool (:func:`run`, :func:`run_split`) serves the float64, custom-kernel and
im2col paths: the transforms (numba, GIL released) and the GEMMs (NumPy's BLAS, GIL
released) run on our own threads, BLAS held to one thread for the duration through
threadpoolctl, so two thread pools never compete for the same cores.  Without
threadpoolctl the BLAS setting is left alone (correct, possibly slower).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

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


# ---------------------------------------------------------------------- native workers

_CHARS = ctypes.c_char.from_buffer
_ADDRESS = ctypes.addressof


def address(a) -> int:
    """The address of a C-contiguous array's first byte (a quarter of the time
    ``a.ctypes.data`` takes, which matters on a network's small layers); read-only or empty
    arrays take ``a.ctypes.data``."""
    try:
        return _ADDRESS(_CHARS(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


#: Time-stamp ticks a woken or finished thread polls before parking (about 1.2 ms at
#: 2.6 GHz): a network's next layer finds it awake even in a process whose cores were idle,
#: where a parked worker wakes slowly at every layer (run after 100 ms idle, ResNet-18 at
#: 96^2, SqueezeNet 1.1 at 224^2 and MobileNetV2 at 96^2 1.24-1.46x faster than with a
#: tenth of that; no change back to back: ``python benchmarks/bench_spin.py 300000 3000000
#: --nets ...``, ``benchmarks/results/spin_ci2.txt``).
SPIN_TICKS = 3_000_000
MAX_WORKERS = 1023        # threads a call may ask for beyond the caller's own


class Workers:
    """Native worker threads running compiled functions (see the module docstring)."""

    def __init__(self, mod):
        self._mod = mod
        self._slots = np.zeros((MAX_WORKERS + 1) * 64 // 8, np.int64)   # 64-byte slots
        base = self._slots.ctypes.data
        self._base = base + (-base % 64)
        # the count of unfinished workers, and 64 bytes on the work counter (own cache lines)
        self._pending = np.zeros(48, np.int32)
        self._pending_at = self._pending.ctypes.data + (-self._pending.ctypes.data % 64)
        self._threads = []
        self._lock = threading.Lock()
        i64 = ctypes.c_int64
        self._run = ctypes.CFUNCTYPE(None, i64, i64, i64, i64, i64, i64, i64)(mod.addr["tl_run"])
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p,
                                              ctypes.c_void_p, ctypes.c_void_p]
        self._libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
        self._libc.syscall.restype = ctypes.c_long

    @property
    def base(self) -> int:
        """The address of the workers' slots (``tl_run``'s first argument)."""
        return self._base

    @property
    def pending(self) -> int:
        """The address of the pending-work words (``tl_run``'s second argument; the call's
        work counter is 64 bytes on)."""
        return self._pending_at

    @property
    def run_address(self) -> int:
        """The address of ``tl_run(base, pending, fn, ctx, threads, spin, claims)``, for compiled
        callers that hand several calls to the workers in a row (holding :attr:`lock` and
        having called :meth:`reserve`)."""
        return self._mod.addr["tl_run"]

    @property
    def lock(self):
        """Held while the workers run a caller's work (one caller at a time)."""
        return self._lock

    def reserve(self, n: int) -> None:
        """Start workers until ``n`` threads (the caller's own included) can run."""
        with self._lock:
            self._grow(max(0, min(int(n), MAX_WORKERS + 1) - 1))

    @property
    def started(self) -> int:
        """Worker threads started so far (they are kept for the life of the process)."""
        return len(self._threads)

    def _grow(self, n: int) -> None:
        while len(self._threads) < n:
            tid = ctypes.c_ulong()
            slot = self._base + 64 * len(self._threads)
            err = self._libc.pthread_create(ctypes.byref(tid), None,
                                            self._mod.addr["tl_worker"], slot)
            if err:
                raise OSError(err, f"pthread_create failed for worker {len(self._threads) + 1}: "
                              + os.strerror(err))
            name = getattr(self._libc, "pthread_setname_np", None)
            if name is not None:
                name(tid, b"tensorlayout")
            self._threads.append(tid.value)

    def run(self, fn: int, ctx: int, threads: int, claims: bool = False) -> None:
        """``fn(ctx, tid, threads, work)`` for tid = 0 .. threads-1 (tid 0 on this thread);
        returns when every part has returned.  ``fn`` is the address of a
        ``void(i64, i64, i64, i64)``; ``work`` is the address of an int64 that is 0 when the
        parts start, for them to take units of work from with :func:`._native.fetch_add`
        (whoever is running takes the next unit: a thread held back by the system delays
        nothing but the unit it holds).  ``claims``: ``fn`` takes all its work that way and
        returns when none is left, so a worker that has not started when this thread's part
        returns is not waited for (its part is withdrawn): set it only for such an ``fn``
        (one that needs every part, at a barrier say, would wait for ever)."""
        threads = max(1, min(int(threads), MAX_WORKERS + 1))
        with self._lock:
            self._grow(threads - 1)
            self._run(self._base, self._pending_at, fn, ctx, threads, SPIN_TICKS, int(claims))

    def stop(self) -> None:
        """End every worker (at exit: nothing may run the code after it is freed)."""
        with self._lock:
            first = (self._base - self._slots.ctypes.data) // 4
            words = self._slots.view(np.int32)[first:]
            for i in range(len(self._threads)):
                words[16 * i + 1] = 1                  # stop
                words[16 * i] += 1                     # go
                self._libc.syscall(_FUTEX_NR, ctypes.c_void_p(self._base + 64 * i), 129, 1)
            for tid in self._threads:
                self._libc.pthread_join(tid, None)
            self._threads.clear()


_FUTEX_NR = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(
    __import__("platform").machine().lower(), -1)
_WORKERS: Workers | None = None
_WORKERS_LOCK = threading.Lock()


def workers() -> Workers | None:
    """The process's :class:`Workers` (None where the platform or llvmlite has none)."""
    global _WORKERS
    if _WORKERS is not None:
        return _WORKERS
    with _WORKERS_LOCK:
        if _WORKERS is None:
            from . import _simd

            if not _simd.available() or not _simd.module().pool:
                return None
            _WORKERS = Workers(_simd.module())
            atexit.register(_WORKERS.stop)
    return _WORKERS


def _after_fork_in_child():
    # the child has none of the parent's threads: start a new pool on first use
    global _WORKERS
    _WORKERS = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
