"""Compile numba kernels without making a first call wait for them.

Compiling tensorlayout's kernels takes 5 to 20 s per family (numba, once per machine:
the result is cached on disk).  A call that finds the kernels it needs neither compiled in
this process nor loadable from the cache starts compiling them in a background thread and
takes its NumPy path meanwhile; calls after the compile use the kernels.  While any
background compile runs every caller takes NumPy (numba compiles under one lock, and even
loading a cached kernel would wait for it).

A process that ends while a background compile runs waits for it at exit, so that the
compiled code reaches the cache and the next process loads it.

``TENSORLAYOUT_COMPILE=wait`` (or ``Tuning(compile="wait")`` for convolutions) compiles in
the caller instead, as numba does by default.

>>> mode() in ("background", "wait")
True
"""

from __future__ import annotations

import atexit
import os
import threading

_LOCK = threading.Lock()
_THREADS: dict = {}


def mode() -> str:
    """'background' (the default) or 'wait', from ``TENSORLAYOUT_COMPILE``."""
    return "wait" if os.environ.get("TENSORLAYOUT_COMPILE", "") == "wait" else "background"


def busy() -> bool:
    """True while a background compile runs."""
    with _LOCK:
        return any(t.is_alive() for t in _THREADS.values())


def loadable(dispatchers) -> bool:
    """True when every numba dispatcher is compiled in this process or has a current entry in
    numba's cache on disk (so calling it costs at most a load)."""
    for d in dispatchers:
        if d.overloads:
            continue
        try:
            if not d._cache._cache_file._load_index():
                return False
        except Exception:  # noqa: BLE001 - no cache (or an unknown numba): it would compile
            return False
    return True


def ready(key, dispatchers, warm, how=None) -> bool:
    """True: call ``dispatchers`` now.  False: they would compile first; ``warm()`` (which
    compiles them, e.g. by running the caller on tiny inputs) is started in a background
    thread, once per ``key``, and the caller should take its NumPy path."""
    if (how or mode()) == "wait":
        return True
    if busy():
        return False
    if loadable(dispatchers):
        return True
    with _LOCK:
        if key not in _THREADS:
            th = threading.Thread(target=_run_quietly, args=(warm,), daemon=True,
                                  name=f"tensorlayout-compile-{key}")
            if not _THREADS:
                atexit.register(wait)
            _THREADS[key] = th
            th.start()
    return False


def wait(timeout=None) -> None:
    """Wait for the background compiles started so far."""
    with _LOCK:
        threads = list(_THREADS.values())
    for t in threads:
        t.join(timeout)


def _run_quietly(fn):
    try:
        fn()
    except Exception:  # noqa: BLE001 - a failed warm-up only means the NumPy path stays
        pass
