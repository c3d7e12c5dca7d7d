"""One prepared network served to several threads at once: the CPU runtime's Model, an
OpenCLSession and the NPU backend each give every caller the result a call alone gives."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("onnx")

from tensorlayout.model import load, zoo  # noqa: E402


def _race(fn, inputs, rounds=3):
    """Run ``fn`` on each input from its own thread, all released at once, ``rounds`` times."""
    results = [[None] * len(inputs) for _ in range(rounds)]
    errors = []
    for r in range(rounds):
        gate = threading.Barrier(len(inputs))

        def work(i):
            try:
                gate.wait()
                results[r][i] = fn(inputs[i])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    return results


def _inputs():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    xs[1][0, 0, 3, 3] = np.nan           # a non-finite input beside finite ones
    xs[2] *= 1e3
    return xs


def test_cpu_model_from_several_threads():
    m = load(zoo.tiny_onnx())
    xs = _inputs()
    alone = [m.run(x) for x in xs]
    for got in _race(m.run, xs):
        for a, b in zip(got, alone):
            np.testing.assert_array_equal(a, b)


def test_opencl_session_from_several_threads():
    pytest.importorskip("pyopencl")
    from _model_util import opencl_context

    from tensorlayout.model import OpenCLSession

    opencl_context()
    sess = OpenCLSession(load(zoo.tiny_onnx()))
    xs = _inputs()
    alone = [sess.run(x) for x in xs]
    for got in _race(sess.run, xs):
        for a, b in zip(got, alone):
            np.testing.assert_array_equal(a, b)


def test_npu_program_from_several_threads():
    from _simulator import skip_module_without_simulator

    skip_module_without_simulator()
    from tensorlayout.backends.npu import NpuProgram

    prog = NpuProgram(load(zoo.tiny_onnx()))
    xs = _inputs()[:2]
    alone = [prog.run({"x": x})[0][0] for x in xs]
    for got in _race(lambda x: prog.run({"x": x})[0][0], xs, rounds=1):
        for a, b in zip(got, alone):
            np.testing.assert_array_equal(a, b)
