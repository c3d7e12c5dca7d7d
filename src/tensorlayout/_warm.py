"""Compile (or load from the cache) the compiled kernels a session is likely to use.

``python -m tensorlayout._warm`` runs each compiled path once on tiny inputs: the image
and buffer copies, the Winograd tiles F(2,3), F(4,3), F(6,3) and F(4,5) in float32 (their
generated kernels and the weight transform), im2col, the direct loops and the network CPU
backend's depthwise and epilogue loops.  numba keeps
what it compiles in its cache, so later processes start in about a second instead of
compiling at their first call.  ``make demo`` and ``make test`` run it once after
installing.  Without numba it does nothing.
"""

from __future__ import annotations

import os
import sys
import time


def warm(out=sys.stdout) -> float:
    """Run every compiled path once, compiling in this thread; returns the seconds it took."""
    t0 = time.perf_counter()
    saved = os.environ.get("TENSORLAYOUT_COMPILE")
    os.environ["TENSORLAYOUT_COMPILE"] = "wait"      # no background compile: this is it
    try:
        return _warm(out, t0)
    finally:
        if saved is None:
            del os.environ["TENSORLAYOUT_COMPILE"]
        else:
            os.environ["TENSORLAYOUT_COMPILE"] = saved


def _warm(out, t0) -> float:
    from . import _backend

    if not _backend.has_numba():
        print("numba is not installed: nothing to compile", file=out)
        return 0.0
    import numpy as np

    import tensorlayout as tl
    from tensorlayout.winograd import Tuning, plan_conv2d

    now = Tuning(compile="wait")

    x = np.random.default_rng(0).standard_normal((1, 16, 12, 12)).astype(np.float32)
    tl.from_image(tl.to_image(x, "IN_OUT_CHANNEL", layout="NCHW"), "IN_OUT_CHANNEL", x.shape,
                  layout="NCHW")
    tl.to_image(x, "IN_OUT_CHANNEL")
    for tile, k in ((2, 3), (4, 3), (6, 3), (4, 5)):
        w = np.ones((16, 16, k, k), np.float32)
        plan_conv2d(x.shape, w, padding=k // 2, algorithm=f"winograd:{tile}", tuning=now)(x)
        print(f"  F({tile},{k}) ready ({time.perf_counter() - t0:.0f} s)", file=out, flush=True)
    w = np.ones((16, 16, 3, 3), np.float32)
    plan_conv2d(x.shape, w, stride=2, padding=1, algorithm="im2col", tuning=now)(x)
    plan_conv2d(x.shape, np.ones((16, 1, 3, 3), np.float32), padding=1, groups=16,
                algorithm="direct", tuning=now)(x)
    from tensorlayout.backends import cpu_kernels

    cpu_kernels._warm()                          # the network CPU backend's loops
    print(f"  network kernels ready ({time.perf_counter() - t0:.0f} s)", file=out, flush=True)
    return time.perf_counter() - t0


if __name__ == "__main__":  # pragma: no cover
    print("compiling tensorlayout's kernels into numba's cache (once per install) ...")
    print(f"done in {warm():.0f} s")
