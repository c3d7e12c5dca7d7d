"""First calls do not wait for numba: with an empty cache they compute with NumPy while the
kernels compile in the background, then switch to them (tensorlayout._jit)."""

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import json, time
import numpy as np
import tensorlayout as tl
from tensorlayout import _jit

rng = np.random.default_rng(0)
x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
out = {"mode": _jit.mode()}
t = time.perf_counter()
plan = tl.winograd.plan_conv2d(x.shape, w, padding=1, algorithm="im2col")
y0 = plan(x)
out["first"] = plan.info.backend
out["first_s"] = time.perf_counter() - t
img0 = tl.to_image(np.ones((1, 64, 64, 64), np.float32), "IN_OUT_CHANNEL")
_jit.wait()
y1 = plan(x)                                  # the same plan, now compiled
out["after"] = plan.info.backend
out["same"] = float(np.abs(y1 - y0).max())
ref = tl.winograd.plan_conv2d(x.shape.__class__(x.shape), w.astype(np.float64), padding=1,
                              algorithm="direct", tuning=tl.winograd.Tuning(use_numba=False))
out["err"] = float(np.abs(y1 - ref(x.astype(np.float64))).max())
img1 = tl.to_image(np.ones((1, 64, 64, 64), np.float32), "IN_OUT_CHANNEL")
out["image_same"] = bool((img0 == img1).all())
print(json.dumps(out))
"""


def test_first_call_computes_with_numpy_while_the_kernels_compile(tmp_path):
    pytest.importorskip("numba")
    env = dict(os.environ, TENSORLAYOUT_CACHE=str(tmp_path), NUMBA_CACHE_DIR=str(tmp_path / "nb"))
    env.pop("TENSORLAYOUT_COMPILE", None)
    res = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["mode"] == "background"
    assert out["first"] == "numpy" and out["after"] == "numba"
    assert out["same"] < 1e-4 and out["err"] < 1e-4
    assert out["image_same"]


def test_a_warm_cache_makes_the_cpu_kernels_ready_at_once():
    """Once the CPU backend's kernels are compiled into the cache, a fresh process finds
    every one of them there: ready() is true at its first call, with no compile in the
    background (a kernel the cache never holds, such as one only ever inlined, would keep a
    process on the NumPy twins until it compiled everything again)."""
    pytest.importorskip("numba")
    from tensorlayout import _jit
    from tensorlayout.backends import cpu_kernels

    cpu_kernels.ready()
    _jit.wait()
    assert cpu_kernels.ready()
    env = dict(os.environ)
    env.pop("TENSORLAYOUT_COMPILE", None)
    child = ("from tensorlayout.backends import cpu_kernels as K; "
             "from tensorlayout import _jit; print(K.ready(), _jit.busy())")
    res = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False"], res.stdout
