"""Work-group sizes for the network kernels, chosen by timing on the device and cached.

For each prepared launch (kernel, program options, global size) a few local sizes are
timed with OpenCL profiling events (the best of three runs each), next to letting the
driver choose (``None``); the four fastest, and the fastest of each variant, are timed
again in turns (seven runs each) and the one with the lowest median is kept.  A launch with variants (the Winograd
GEMM's three blockings) has each variant timed the same way, and the fastest variant and
local size are kept together.  Choices are stored per device in
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
import itertools
import json
import math
import os
import re
import threading

import numpy as np

from ._device import cl

__all__ = ["cache_dir", "candidates", "round_up", "choose_local_sizes"]

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


def candidates(gsize, max_group: int, wide: bool = False) -> list:
    """Local sizes worth timing for a global size: None (the driver's choice) first, then
    those within ``max_group`` work-items that do not exceed the range by more than 2x.

    ``wide`` (GPUs, where a run takes microseconds): every power-of-two shape of 8 to
    ``max_group`` work-items instead of the short list, as MACE's tuner tries both thin
    and square groups; on an H100 the best local size of a Winograd GEMM was often a
    thin one such as (2, 8) that the short list lacks.
    """
    if wide:
        pw = [1 << i for i in range(9)]
        grid = [c for c in itertools.product(pw, repeat=len(gsize)) if 8 <= math.prod(c) <= 256]
    else:
        grid = _CAND3 if len(gsize) == 3 else _CAND2
    out = [None]
    for c in grid:
        if math.prod(c) > max_group:
            continue
        if all(l <= max(1, 2 * g) for l, g in zip(c, gsize)):
            out.append(tuple(c))
    return out


def round_up(gsize, lsize):
    """``gsize`` rounded up to a multiple of ``lsize`` on every axis."""
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
    if ln.variants:       # one key for the launch, whichever variant it holds now
        what = "/".join(f"{k}:{'x'.join(map(str, g))}" for k, g in sorted(ln.variants))
    else:
        what = f"{ln.kernel}|{'x'.join(map(str, ln.base_gsize))}"
    return f"{cctx.info.version}|{prog}|{','.join(opts)}|{h}|{what}"


def _run_once(queue, kobj, gsize, lsize) -> int:
    """Device nanoseconds of one launch (its profiling event, waited for)."""
    ev = cl().enqueue_nd_range_kernel(queue, kobj, gsize, lsize)
    ev.wait()
    return ev.profile.end - ev.profile.start


def _time(queue, kobj, gsize, lsize, reps=3):
    return min(_run_once(queue, kobj, gsize, lsize) for _ in range(reps))


def _final(queue, kernels, variants, timings, top=4, rounds=7):
    """The winner among the ``top`` fastest of a first pass (best of three runs each) and
    the best of each variant, timed again in turns, ``rounds`` runs each, by median: one
    early run of a few microseconds can be fast or slow by chance (on an H100 the first pass alone sometimes kept a GEMM
    blocking 15% slower than another)."""
    if len(timings) <= 1:
        return min(timings, key=lambda tc: tc[0])
    ranked = sorted(timings, key=lambda tc: tc[0])
    shortlist = ranked[:top]
    for name, _ in variants:          # and each variant's best, whatever the first pass said
        mine = next((tc for tc in ranked if tc[1] == name), None)
        if mine is not None and mine not in shortlist:
            shortlist.append(mine)
    need = dict(variants)
    runs = {i: [] for i in range(len(shortlist))}
    for _ in range(rounds):
        for i, (_, name, cand) in enumerate(shortlist):
            g = need[name] if cand is None else round_up(need[name], cand)
            runs[i].append(_run_once(queue, kernels[name], g, cand))
    i = min(runs, key=lambda i: float(np.median(runs[i])))
    return shortlist[i]


def choose_local_sizes(cctx, queue, launches) -> list:
    """For each launch (``program`` (source name, options, source), ``kernel``, ``base_gsize``,
    ``variants``, ``kobj`` and ``kargs``), the ``(kernel, global size it needs, local size or
    None)`` to run it with, timed on ``queue`` (a profiling queue) or read from the cache; the
    caller applies them.  Results are cached per device."""
    pcl = cl()
    path = _path(cctx)
    out = []
    with _LOCK:
        cache = _load(path)
        changed = False
        max_dev = int(cctx.device.max_work_group_size)
        wide = cctx.info.is_gpu
        for ln in launches:
            key = _key(cctx, ln)
            variants = ln.variants or ((ln.kernel, ln.base_gsize),)
            kernels = {ln.kernel: ln.kobj}

            def kernel(name, ln=ln, kernels=kernels):
                """The launch's kernel object for variant ``name``, with its arguments."""
                k = kernels.get(name)
                if k is None:
                    k = kernels[name] = pcl.Kernel(cctx.program(*ln.program), name)
                    k.set_args(*ln.kargs)
                return k
            if key in cache:
                got = cache[key]
                name, best = (got[0], got[1]) if ln.variants else (ln.kernel, got)
                best = tuple(best) if best else None
            else:
                timings = []
                for name, need in variants:
                    k = kernel(name)
                    limit = min(max_dev, int(k.get_work_group_info(
                        pcl.kernel_work_group_info.WORK_GROUP_SIZE, cctx.device)))
                    for cand in candidates(need, limit, wide):
                        g = need if cand is None else round_up(need, cand)
                        try:
                            t = _time(queue, k, g, cand)
                        except pcl.Error:
                            continue
                        timings.append((t, name, cand))
                if timings:
                    _, name, best = _final(queue, kernels, variants, timings)
                else:
                    name, best = ln.kernel, None
                lsize = list(best) if best else None
                cache[key] = [name, lsize] if ln.variants else lsize
                changed = True
            need = dict(variants).get(name)
            if need is None:                     # a cache entry from other kernels
                name, need = variants[0]
            out.append((name, tuple(need), best))
        queue.finish()
        if changed:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    json.dump(cache, f, indent=0, sort_keys=True)
                os.replace(tmp, path)
            except OSError:
                pass      # a read-only cache: the choice holds for this session only
    return out
