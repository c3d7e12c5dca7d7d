"""ONNX models on Sophgo's simulator, node by node, against onnxruntime."""

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from tensorlayout.errors import LayoutError  # noqa: E402
from tensorlayout.model import load, zoo  # noqa: E402
from tensorlayout.backends.npu import run_onnx  # noqa: E402

from _simulator import skip_module_without_simulator  # noqa: E402

skip_module_without_simulator()


def _ort(src, x):
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _check(src, seed=1):
    m = load(src)
    x = np.random.default_rng(seed).standard_normal(next(iter(m.inputs.values())), dtype=np.float32)
    y, report = run_onnx(src, x)
    ref = _ort(src, x)
    assert y.shape == ref.shape
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-5
    assert [r["op"] for r in report] == [n.op for n in m.graph.nodes]     # one row a node
    return report


def _where(report):
    out = {}
    for r in report:
        out.setdefault(r["op"], set()).add(r["where"])
    return out


def test_tiny_onnx():
    report = _check(zoo.tiny_onnx())
    assert _where(report) == {"Conv": {"npu"}, "Relu": {"npu"}, "MaxPool": {"npu"},
                              "GlobalAveragePool": {"npu"}, "Flatten": {"view"}, "Gemm": {"npu"}}
    assert all(r["why"] for r in report)


def test_resnet18_32():
    pytest.importorskip("torch")
    report = _check(zoo.export("resnet18", size=32)[0])
    where = _where(report)
    for op in ("Conv", "Relu", "Add", "MaxPool", "GlobalAveragePool"):
        assert where[op] == {"npu"}, op
    assert sum(r["op"] == "Add" for r in report) == 8
    assert where["Gemm"] == {"npu"} and where["Flatten"] == {"view"}


def test_mobilenet_v2_32():
    pytest.importorskip("torch")
    report = _check(zoo.export("mobilenet_v2", size=32)[0])
    where = _where(report)
    for op in ("Conv", "Clip", "Add", "GlobalAveragePool", "Gemm"):   # depthwise convolutions included
        assert where[op] == {"npu"}, op
    assert sum("depthwise" in r["why"] for r in report) == 17


def _graph(nodes, inits, in_shape, out_shape):
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_edge_cases_run_where_they_are_exact():
    from onnx import helper

    rng = np.random.default_rng(2)
    inits = {"w": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
             "dw": rng.standard_normal((8, 1, 3, 3)).astype(np.float32),
             "gw": rng.standard_normal((8, 4, 1, 1)).astype(np.float32),
             "lo": np.array(-0.5, np.float32),
             "c": rng.standard_normal((1, 8, 1, 1)).astype(np.float32)}
    nodes = [
        # pads [top, left, bottom, right] = [1, 0, 2, 1], stride 2: 13x13 -> 7x6
        helper.make_node("Conv", ["x", "w"], ["a"], name="conv", pads=[1, 0, 2, 1], strides=[2, 2]),
        helper.make_node("Conv", ["a", "dw"], ["b"], name="dw", pads=[1, 1, 1, 1], group=8),
        helper.make_node("Conv", ["b", "gw"], ["b2"], name="grouped", group=2),
        helper.make_node("Clip", ["b2", "lo"], ["b3"], name="clip"),
        helper.make_node("Add", ["b3", "c"], ["d"], name="addc"),
        helper.make_node("MaxPool", ["d"], ["e"], name="mp", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("AveragePool", ["e"], ["f"], name="ap_pad", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["f"], ["g"], name="ap_incl", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=1),
        helper.make_node("Add", ["g", "f"], ["y"], name="add"),
    ]
    # max pool in ceil mode: 7x6 -> 4x3 (the last row's window reaches past the input)
    report = _check(_graph(nodes, inits, [2, 4, 13, 13], [2, 8, 4, 3]))
    where = {r["name"]: r["where"] for r in report}
    assert set(where.values()) == {"npu"}
    assert report[0]["shape"] == (2, 8, 7, 6) and report[5]["shape"] == (2, 8, 4, 3)


def test_gemm_and_elementwise_on_matrices():
    from onnx import helper

    rng = np.random.default_rng(4)
    inits = {"w1": rng.standard_normal((70, 150)).astype(np.float32),
             "b1": rng.standard_normal(70).astype(np.float32),
             "w2": rng.standard_normal((70, 9)).astype(np.float32),
             "w3": rng.standard_normal((9, 9)).astype(np.float32),
             "c3": rng.standard_normal((3, 9)).astype(np.float32)}
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["a"], name="fc1", transB=1),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Gemm", ["b", "w2"], ["c"], name="fc2"),
        helper.make_node("Add", ["c", "c"], ["d"], name="double"),
        helper.make_node("Gemm", ["d", "w3"], ["e"], name="scaled", alpha=0.5),
        helper.make_node("Gemm", ["e", "w3", "c3"], ["y"], name="rows_bias"),
    ]
    report = _check(_graph(nodes, inits, [3, 150], [3, 9]))
    assert {r["where"] for r in report} == {"npu"}


def test_integer_tensors_stay_on_the_host():
    from onnx import helper

    nodes = [helper.make_node("Cast", ["x"], ["s"], name="to_int", to=7),
             helper.make_node("Add", ["s", "s"], ["s2"], name="add_int"),
             helper.make_node("Cast", ["s2"], ["f"], name="cast", to=1),
             helper.make_node("Add", ["f", "x"], ["y"], name="add_float")]
    src = _graph(nodes, {}, [2, 3, 4, 5], [2, 3, 4, 5])
    x = (np.random.default_rng(5).standard_normal((2, 3, 4, 5)) * 1e3).astype(np.float32)
    y, report = run_onnx(src, x)
    assert np.abs(y - _ort(src, x)).max() <= 1e-5 * np.abs(x).max() * 3
    assert [r["where"] for r in report] == ["host", "host", "host", "npu"]
    assert "int64" in report[1]["why"]


def test_bad_input():
    src = zoo.tiny_onnx()
    with pytest.raises(LayoutError, match="shape"):
        run_onnx(src, np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(LayoutError, match="float32"):
        run_onnx(src, np.zeros((1, 3, 16, 16), np.float64))


def _cli(*args):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(["src", os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "tensorlayout", "npu", "run-onnx", *args],
                          capture_output=True, text=True, env=env)


def test_cli_run_onnx(tmp_path):
    import json

    path = tmp_path / "tiny.onnx"
    path.write_bytes(zoo.tiny_onnx())
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    r = _cli(str(path), "--input", str(tmp_path / "x.npy"), "--check", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["npu_nodes"] == 9 and [n["where"] for n in info["nodes"]][-2:] == ["view", "npu"]
    assert info["rel_max_vs_onnxruntime"] < 1e-5
    r = _cli(str(tmp_path / "missing.onnx"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "missing.onnx" in r.stderr


def test_the_run_uses_the_placements_the_plan_prints():
    """Every NPU node's tensors, as the instructions used them, are the plan's NPU rows."""
    from tensorlayout.model import plan_model

    m = load(zoo.tiny_onnx())
    x = np.random.default_rng(6).standard_normal((1, 3, 16, 16), dtype=np.float32)
    m.run(x, runtime="npu")
    rows = {r["layer"]: r for r in plan_model(m, chip="BM1684").layers}
    ran = [r for r in m.last_report if r["where"] == "npu"]
    assert len(ran) == 9
    for r in ran:
        assert r["tensors"] == rows[r["name"]]["tensors"], r["name"]
        assert rows[r["name"]]["place"] == "npu" and rows[r["name"]]["why"] == r["why"]


def test_standalone_batchnorm_and_concat_as_densenet_has_them():
    """A dense block's pattern: Concat, then BatchNormalization (folded into nothing), Relu,
    convolutions; the BatchNorm runs on the NPU as a depthwise 1 x 1 of scale and shift."""
    from onnx import helper

    rng = np.random.default_rng(8)
    c = 12
    inits = {"w0": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
             "w1": rng.standard_normal((8, c, 1, 1)).astype(np.float32),
             "g": rng.uniform(0.5, 1.5, c).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32),
             "m": rng.standard_normal(c).astype(np.float32),
             "v": rng.uniform(0.5, 1.5, c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["x", "a"], ["cat"], name="cat", axis=1),
             helper.make_node("BatchNormalization", ["cat", "g", "b", "m", "v"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w1"], ["y"], name="conv1")]
    report = _check(_graph(nodes, inits, [2, 4, 9, 7], [2, 8, 9, 7]))
    where = {r["name"]: r["where"] for r in report}
    assert set(where.values()) == {"npu"}
    bn = next(r for r in report if r["name"] == "bn")
    assert "scale and shift" in bn["why"] and [t["role"] for t in bn["tensors"]] == [
        "output", "input", "scale", "bias"]


def test_a_densenet_block_on_the_npu_path():
    """DenseNet-121's stem, first dense block and transition (the whole network runs the same
    way: ``tensorlayout run densenet.onnx --runtime npu --check``)."""
    torch = pytest.importorskip("torch")
    import io

    net = zoo.torch_net("densenet121", classes=10)
    part = torch.nn.Sequential(*list(net.children())[:8]).eval()
    import warnings

    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(part, torch.randn(1, 3, 32, 32), buf, dynamo=False, opset_version=17,
                          do_constant_folding=False, input_names=["input"], output_names=["y"])
    report = _check(buf.getvalue())
    where = _where(report)
    assert where["BatchNormalization"] == {"npu"} and where["Conv"] == {"npu"}
    assert where["Concat"] == {"npu"}
