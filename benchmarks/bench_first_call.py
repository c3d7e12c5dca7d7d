"""First call of each public entry point in a fresh process, with an empty and a warm cache.

Each case runs in a new Python process (``sys.executable``) with ``TENSORLAYOUT_CACHE`` and
``NUMBA_CACHE_DIR`` pointing at a folder of its own: first empty (what a user pays on a new
machine), then again with the folder the first run filled (what every later process pays:
compiled code loaded from the cache).  With an empty cache the call computes with NumPy
while numba compiles in the background (``tensorlayout._jit``; the process waits for that
compile at exit, so the cache is filled).  Times are wall seconds of the call alone
(imports excluded and shown separately), one run each, with the path that ran.

    python benchmarks/bench_first_call.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CASES = {
    "conv2d (1,64,56,56) 3x3": (
        "x = np.random.rand(1, 64, 56, 56).astype(np.float32);"
        "w = np.random.rand(64, 64, 3, 3).astype(np.float32)",
        "r = tl.conv2d(x, w, padding=1, return_info=True)[1].backend"),
    "plan_conv2d + call (1,64,56,56)": (
        "x = np.random.rand(1, 64, 56, 56).astype(np.float32);"
        "w = np.random.rand(64, 64, 3, 3).astype(np.float32)",
        "p = tl.winograd.plan_conv2d(x.shape, w, padding=1); p(x); r = p.info.backend"),
    "to_image NCHW -> IN_OUT_CHANNEL (1,64,56,56)": (
        "x = np.random.rand(1, 64, 56, 56).astype(np.float32)",
        "tl.to_image(x, 'IN_OUT_CHANNEL', layout='NCHW'); from tensorlayout import _jit; "
        "r = 'numpy (numba compiling)' if _jit.busy() else 'numba'"),
}

CHILD = """
import time, json
t0 = time.perf_counter()
import numpy as np, tensorlayout as tl
t1 = time.perf_counter()
{setup}
t2 = time.perf_counter()
{call}
t3 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "call": t3 - t2, "ran": r}}))
"""


def run(setup, call, cache):
    env = dict(os.environ, TENSORLAYOUT_CACHE=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
    out = subprocess.run([sys.executable, "-c", CHILD.format(setup=setup, call=call)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    print(f"python {sys.version.split()[0]}; goal: first call <= 2 s with an empty cache")
    print(f"{'entry point':45s} {'import s':>9s} {'empty cache s':>14s} {'warm cache s':>13s}  ran")
    for name, (setup, call) in CASES.items():
        with tempfile.TemporaryDirectory() as cache:
            cold = run(setup, call, cache)
            warm = run(setup, call, cache)
        print(f"{name:45s} {cold['import']:9.2f} {cold['call']:14.2f} {warm['call']:13.2f}  "
              f"{cold['ran']} / {warm['ran']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
