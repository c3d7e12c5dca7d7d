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


# ---------------------------------------------------------------------------- generated kernels
_MODULES: dict = {}


def cache_dir() -> str:
    """Where generated kernels and numba's compiled code are kept between processes:
    ``$TENSORLAYOUT_CACHE``, else ``$XDG_CACHE_HOME/tensorlayout`` (``~/.cache/tensorlayout``)."""
    root = os.environ.get("TENSORLAYOUT_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "tensorlayout")
    return root


def loaded_module(name: str):
    """The generated module ``name`` if this process has loaded it, else None (no lock: a
    module, once there, stays)."""
    return _MODULES.get(name)


def generated_module(name: str, source: str):
    """The module of generated kernels ``source``, written once into :func:`cache_dir`'s
    ``kernels`` folder as ``name``.py (``name`` must say everything the source depends on)
    and imported from there, so that numba's ``cache=True`` keeps the compiled code beside
    it; an OSError when the cache cannot be written."""
    import importlib.util
    import sys

    with _LOCK:
        mod = _MODULES.get(name)
        if mod is not None:
            return mod
        folder = os.path.join(cache_dir(), "kernels")
        path = os.path.join(folder, f"{name}.py")
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(source)
            os.replace(tmp, path)
        full = f"tensorlayout_kernels_{name}"
        spec = importlib.util.spec_from_file_location(full, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
        _MODULES[name] = mod
        return mod
