"""The CPU backend's native side: its generated kernels' module (compiled once per source,
cached between processes), the native workers that run them, the per-thread thread count a
kernel call takes, and :func:`run_calls`, which hands a kernel's calls to the workers."""

from __future__ import annotations

import hashlib
import threading

from .. import _backend, _jit
from ..winograd import _pool as _workers
from ..winograd._pool import address as _at
from .cpu_source import module_source

__all__ = ["module", "pool", "run_calls", "set_threads", "threads"]


_MODULE: list = []


def module():
    """The generated kernels' module (written, compiled or loaded on first use)."""
    if not _MODULE:
        src = module_source()
        digest = hashlib.sha1(src.encode()).hexdigest()[:12]     # a changed source: a new file
        _MODULE.append(_jit.generated_module(f"cpu_backend_{digest}", src))
    return _MODULE[0]


_WORKERS: list = []


def pool():
    """The native workers (None where the platform or llvmlite has none)."""
    if _WORKERS:
        return _WORKERS[0]
    w = _workers.workers()
    if w is not None:
        _WORKERS.append(w)
    return w


_LOCAL = threading.local()


def set_threads(n: int) -> None:
    """Threads this thread's kernel calls take from now on (0: numba's setting again); a
    network's run sets it for each step, so that no call asks numba."""
    _LOCAL.n = n


def threads() -> int:
    """Threads a kernel call may use: what :func:`set_threads` set on this thread, else
    numba's setting for this thread (what :func:`tensorlayout.backends.cpu.threads_limit`
    sets), else 1."""
    n = getattr(_LOCAL, "n", 0)
    if n:
        return n
    nb = _backend.numba()
    return 1 if nb is None else max(1, int(nb.get_num_threads()))


def run_calls(calls) -> None:
    """Run ``calls`` (``(entry address, int64 context, threads, arrays kept alive)`` each, as
    the kernels' ``calls`` methods give them) on the native workers, one after the other."""
    workers = pool()
    for fn, ctx, nt, _ in calls:
        workers.run(fn, _at(ctx), nt, claims=True)
