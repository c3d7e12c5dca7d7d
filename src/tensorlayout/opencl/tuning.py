"""Work-group sizes for the network kernels, chosen by timing on the device and cached.

For each prepared launch (kernel, program options, global size) a few local sizes are
timed with OpenCL profiling events (the best of three runs each), next to letting the
driver choose (``None``); the fastest is kept.  Choices are stored per device in
``tuning-<device>.json`` under the cache directory: ``$TENSORLAYOUT_CACHE``, else
``$XDG_CACHE_HOME/tensorlayout`` (``~/.cache/tensorlayout``).  A later session on the same
device and shapes reads them instead of timing again.

>>> import numpy as np
>>> from tensorlayout.opencl.tuning import candidates
>>> candidates((16, 8, 32), 256)[:3]
[None, (4, 4, 4), (1, 8, 8)]
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading

import numpy as np

from ._device import cl

__all__ = ["cache_dir", "candidates", "tune_session"]

_LOCK = threading.Lock()

_CAND3 = [(4, 4, 4), (1, 8, 8), (4, 8, 2), (8, 4, 4), (1, 16, 4), (2, 4, 16), (16, 1, 4),
          (4, 16, 1), (1, 4, 32), (8, 8, 1)]
_CAND2 = [(16, 1), (8, 4), (4, 8), (32, 1), (1, 32), (16, 4), (64, 1), (8, 8)]


def cache_dir() -> str:
    """``$TENSORLAYOUT_CACHE``, else ``$XDG_CACHE_HOME/tensorlayout`` (``~/.cache/tensorlayout``)."""
    root = os.environ.get("TENSORLAYOUT_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "tensorlayout")
    return root


def candidates(gsize, max_group: int) -> list:
    """Local sizes worth timing for a global size: None (the driver's choice) first, then
    those within ``max_group`` work-items that do not exceed the range by more than 2x."""
    out = [None]
    for c in (_CAND3 if len(gsize) == 3 else _CAND2):
        if int(np.prod(c)) > max_group:
            continue
        if all(l <= max(1, 2 * g) for l, g in zip(c, gsize)):
            out.append(c)
    return out


def _round(gsize, lsize):
    return tuple(-(-g // l) * l for g, l in zip(gsize, lsize))


def _path(cctx):
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{cctx.info.platform}-{cctx.info.name}")[:80]
    return os.path.join(cache_dir(), f"tuning-{name}.json")


def _load(path):
    try:
        with open(path) as f:
            got = json.load(f)
        return got if isinstance(got, dict) else {}
    except (OSError, ValueError):
        return {}


def _key(cctx, ln):
    prog, opts, src = ln.program
    h = hashlib.sha256((src or "").encode()).hexdigest()[:8]
    g = ln.base_gsize or ln.gsize
    return f"{cctx.info.version}|{prog}|{','.join(opts)}|{h}|{ln.kernel}|{'x'.join(map(str, g))}"


def _time(queue, kobj, gsize, lsize, reps=3):
    pcl = cl()
    best = None
    for _ in range(reps):
        ev = pcl.enqueue_nd_range_kernel(queue, kobj, gsize, lsize)
        ev.wait()
        t = ev.profile.end - ev.profile.start
        best = t if best is None else min(best, t)
    return best


def tune_session(sess) -> int:
    """Choose and set the local size of every launch of an OpenCLSession; returns how many
    launches got a size other than the driver's choice.  Results are cached per device."""
    pcl = cl()
    cctx = sess.cctx
    path = _path(cctx)
    with _LOCK:
        cache = _load(path)
        changed = False
        chosen = 0
        max_dev = int(cctx.device.max_work_group_size)
        for _, ln in sess.launches():
            key = _key(cctx, ln)
            need = ln.base_gsize or ln.gsize
            if key in cache:
                best = cache[key]
                best = tuple(best) if best else None
            else:
                limit = min(max_dev, int(ln.kobj.get_work_group_info(
                    pcl.kernel_work_group_info.WORK_GROUP_SIZE, cctx.device)))
                timings = []
                for cand in candidates(need, limit):
                    g = need if cand is None else _round(need, cand)
                    try:
                        t = _time(sess.queue, ln.kobj, g, cand)
                    except pcl.Error:
                        continue
                    timings.append((t, cand))
                best = min(timings, key=lambda tc: tc[0])[1] if timings else None
                cache[key] = list(best) if best else None
                changed = True
            ln.lsize = best
            ln.gsize = need if best is None else _round(need, best)
            chosen += best is not None
        sess.queue.finish()
        if changed:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    json.dump(cache, f, indent=0, sort_keys=True)
                os.replace(tmp, path)
            except OSError:
                pass      # a read-only cache: the choice holds for this session only
    return chosen
