"""Sophgo's simulator from several threads: one global state, guarded by one lock.

Each thread works on a cmodel-backed memory of its own (or runs a convolution plan, which makes
one); the results must equal those of the same work run one after the other. The simulator's
own floating-point mode (it flushes subnormal numbers to zero) must not leak into the caller's
arithmetic, and must not depend on which thread calls it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from _simulator import skip_module_without_simulator

skip_module_without_simulator()

from tensorlayout.npu import BM1684, LocalMemory, bdc, tensor_layout  # noqa: E402
from tensorlayout.npu.planner import plan_conv, run_conv_plan  # noqa: E402

S, KB = BM1684.lmem_bytes, 1024
SRC = Path(__file__).resolve().parents[1] / "src"


def _together(jobs):
    """Run each job in its own thread, all released at once; their results in order."""
    start = threading.Barrier(len(jobs))
    out, errors = [None] * len(jobs), []

    def work(i, job):
        try:
            start.wait()
            out[i] = job()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def _layer_job(seed, rounds=4):
    """Convolution, sigmoid and an element-wise add on a memory of its own, several rounds; the
    same addresses in every job, so jobs that shared bytes would read each other's data."""
    def job():
        rng = np.random.default_rng(seed)
        mem = LocalMemory(BM1684, system_bytes=1 << 16, backend="cmodel")
        outs = []
        for _ in range(rounds):
            x = rng.standard_normal((1, 8, 6, 6), dtype=np.float32)
            w = rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
            xt = mem.s2l(0, x)
            wt = bdc.store_conv_weight(mem, 64 * KB, w)
            yt = tensor_layout(BM1684, 128 * KB, (1, 16, 6, 6))
            bdc.conv2d(mem, yt, xt, wt, padding=1)
            st = tensor_layout(BM1684, 192 * KB, yt.shape)
            bdc.sigmoid(mem, st, yt, tensor_layout(BM1684, 256 * KB, yt.shape))
            bdc.add(mem, st, st, yt)
            outs.append(mem.load(st))
        return outs
    return job


def test_two_threads_with_memories_of_their_own_equal_sequential_runs():
    jobs = [_layer_job(1), _layer_job(2)]
    alone = [job() for job in jobs]
    for _ in range(2):
        together = _together(jobs)
        for a, b in zip(alone, together):
            for x, y in zip(a, b):
                assert np.array_equal(x, y)


def test_one_plan_run_from_two_threads_keeps_their_inputs_apart():
    """One ConvPlan, two threads at once, one input finite and one with inf and NaN."""
    plan = plan_conv((1, 3, 40, 24), 4, 3)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    b = rng.standard_normal(4, dtype=np.float32)
    finite = rng.standard_normal(plan.input_shape, dtype=np.float32)
    odd = finite.copy()
    odd[0, 1, ::7, ::5] = np.inf
    odd[0, 2, 3, 4] = np.nan
    alone = [run_conv_plan(plan, finite, w, b), run_conv_plan(plan, odd, w, b)]
    together = _together([lambda: run_conv_plan(plan, finite, w, b), lambda: run_conv_plan(plan, odd, w, b)])
    assert np.array_equal(together[0], alone[0]) and np.isfinite(together[0]).all()
    assert np.array_equal(together[1], alone[1], equal_nan=True)


def test_the_simulators_float_mode_stays_inside_its_calls():
    """In a fresh process: a thread started before the library loads and the main thread get the
    same simulator results, and NumPy keeps subnormal numbers after the library is loaded."""
    code = """
import threading, numpy as np
results, ready, go = {}, threading.Event(), threading.Event()
def run_exp(where):
    from tensorlayout.npu import BM1684, LocalMemory, bdc, tensor_layout
    x = np.linspace(-88, -86, 64 * 32, dtype=np.float32).reshape(1, 64, 1, 32)
    mem = LocalMemory(BM1684, backend="cmodel")
    xt = mem.s2l(0, x)
    yt, wt = tensor_layout(BM1684, 65536, x.shape), tensor_layout(BM1684, 131072, x.shape)
    bdc.exp(mem, yt, xt, wt)
    results[where] = mem.load(yt)
def early():
    ready.set(); go.wait(); run_exp("early thread")
t = threading.Thread(target=early); t.start(); ready.wait()
run_exp("main")                        # loads the library
sub = np.array([1e-39], np.float32) * np.float32(1)
go.set(); t.join()
print(bool(sub[0] != 0), bool(np.array_equal(results["main"], results["early thread"])))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(SRC), **{k: v for k, v in __import__("os").environ.items()
                                                        if k != "PYTHONPATH"}})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"], out.stdout


def test_a_memory_switched_out_keeps_its_bytes():
    """A memory that other memories' work switched out comes back with its own bytes."""
    a = LocalMemory(BM1684, system_bytes=4096, backend="cmodel")
    x = np.arange(64 * 4, dtype=np.float32).reshape(1, 64, 2, 2)
    ta = a.s2l(3 * S, x)
    for seed in range(3):
        _layer_job(seed, rounds=1)()
    assert np.array_equal(a.load(ta), x)
