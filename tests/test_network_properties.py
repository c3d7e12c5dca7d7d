"""Robustness of the network commands as a property (hypothesis).

Random command lines of ``run``, ``plan``, ``npu run-onnx`` and ``npu plan-conv``, built from
their real options with values good and bad (files that are not models or arrays, pipes,
devices, folders, places nothing can be written to, negative, zero, huge and malformed
numbers), never end in a traceback and exit only with 0 or 2; an exit 2 prints exactly one
line on stderr. The inputs are finite, so ``npu run-onnx`` has no NaN to report (its exit 1).
The OpenCL runtime's options are drawn only where the CPU runtime refuses them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")

from tensorlayout.model import zoo  # noqa: E402
from tensorlayout.npu import cmodel  # noqa: E402

from _cli_util import assert_clean_end, draw_command_line, run, small_allocations  # noqa: E402,F401 (a fixture)

NUMBERS = st.sampled_from(["0", "1", "2", "3", "-1", "-7", "16", "4097", str(2 ** 31), str(10 ** 30), "",
                           "1.5", "x", "1e3", "\uff11", "nan"])
SHAPES = st.sampled_from(["1,3,16,16", "1,3,8,8", "x=1,3,16,16", "1,3,0,16", "1,3,16", "1,,3,16",
                          "y=1,3,16,16", "2000000000,3,16,16", "", "a,b"])
MODELS = st.sampled_from(["tiny.onnx", "dyn.onnx", "missing.onnx", "fifo", "adir", "x.npy", "afile", ""])
ARRAYS = st.sampled_from(["x.npy", "x=x.npy", "nope=x.npy", "small.npy", "int.npy", "empty.npy", "garbage.npy",
                          "two.npz", "fifo", "/dev/zero", "adir", "missing.npy", ""])
FILES_OUT = st.sampled_from(["out.npy", "out.svg", "adir", "afile/x", "missing/x", "/proc/x", "/dev/null",
                             "fifo", ""])
FOLDERS_OUT = st.sampled_from(["report", "adir", "afile", "afile/x", "/proc/x", "/sys/x", "/dev/null", ""])
CONV_INPUTS = st.sampled_from(["1,3,8,8", "2,4,6,5", "1,1,1,1", "1,3,8", "0,3,8,8", "1,5000,8,8",
                               "1,3,8,3000", "1,3,8,8,1", "x"])

COMMANDS = {
    ("run",): dict(positional=MODELS, opts={
        "--input": ARRAYS, "--input-shape": SHAPES, "--seed": NUMBERS, "--threads": NUMBERS,
        "--save": FILES_OUT, "--check": None, "--json": None, "--profile": None,
        "--runtime": st.sampled_from(["cpu", "CPU", "bogus"]), "--half": None, "--tune": None,
        "--winograd": st.sampled_from(["auto", "0", "4", "5"]), "--max-image": SHAPES,
        "--device": st.sampled_from(["0", "cpu"])}),
    ("plan",): dict(positional=MODELS, opts={
        "--input-shape": SHAPES, "--max-image": st.sampled_from(["40,40", "0,4", "4", "16384,16384", "x"]),
        "--chip": st.sampled_from(["BM1684", "bm1688", "nope", ""]), "--html": FOLDERS_OUT, "--json": None}),
    ("npu", "run-onnx"): dict(positional=MODELS, opts={
        "--input": ARRAYS, "--input-shape": SHAPES, "--seed": NUMBERS, "--check": None, "--json": None}),
    ("npu", "plan-conv"): dict(positional=None, required=("--input", "--out-channels", "--kernel"), opts={
        "--input": CONV_INPUTS, "--out-channels": NUMBERS, "--kernel": st.sampled_from(["1", "3", "3,1", "0", "99"]),
        "--stride": st.sampled_from(["1", "2", "16", "0"]), "--padding": st.sampled_from(["0", "1", "1,2", "15", "16"]),
        "--dilation": st.sampled_from(["1", "2", "17"]), "--no-bias": None, "--seed": NUMBERS,
        "--svg": FILES_OUT, "--chip": st.sampled_from(["BM1684", "BM1688", "nope"]), "--json": None,
        "--run": None}),
}


@st.composite
def command_lines(draw):
    # run-onnx runs the simulator (a second a model): drawn less often than the others
    return draw_command_line(draw, COMMANDS, draw(st.sampled_from(
        [("run",), ("run",), ("plan",), ("plan",), ("npu", "plan-conv"), ("npu", "plan-conv"), ("npu", "run-onnx")])))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("netcli")
    (d / "tiny.onnx").write_bytes(zoo.tiny_onnx())
    m = onnx.load(str(d / "tiny.onnx"))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "H", "W"
    onnx.save(m, str(d / "dyn.onnx"))
    rng = np.random.default_rng(0)
    np.save(d / "x.npy", rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    np.save(d / "small.npy", rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    np.save(d / "int.npy", np.ones((1, 3, 16, 16), np.int64))
    np.savez(d / "two.npz", a=np.ones(3))
    (d / "empty.npy").write_bytes(b"")
    (d / "garbage.npy").write_bytes(b"\x93NUMPY??")
    (d / "afile").write_text("not a folder")
    (d / "adir").mkdir()
    os.mkfifo(d / "fifo")
    return d


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
def test_network_commands_never_show_a_traceback(argv, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    if argv[:2] == ["npu", "run-onnx"] or "--run" in argv:
        if not cmodel.available():
            argv = [a for a in argv if a != "--run"] if "--run" in argv else ["npu", "run-onnx", "missing.onnx"]
    rc, _, err = run(*argv)
    assert_clean_end(argv, rc, err)


def test_the_generator_reaches_both_outcomes(workdir, monkeypatch):
    """The property is not vacuous: well-formed lines succeed, malformed ones are refused."""
    monkeypatch.chdir(workdir)
    ok = [["run", "tiny.onnx", "--input", "x.npy", "--save", "out.npy"], ["plan", "dyn.onnx", "--input-shape",
          "1,3,16,16", "--html", "report"], ["npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "2",
                                             "--kernel", "3", "--svg", "out.svg"]]
    bad = [["run", "tiny.onnx", "--input", "fifo"], ["plan", "tiny.onnx", "--html", "afile"],
           ["npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "2", "--kernel", "3", "--seed", "-1"]]
    assert [run(*a)[0] for a in ok] == [0, 0, 0]
    assert [run(*a)[0] for a in bad] == [2, 2, 2]
