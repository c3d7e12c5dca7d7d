"""``tensorlayout run`` / ``plan``, the tour's model part, and every bad input: one clear
error line (exit 2 on the command line), never a traceback."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

from _model_util import helper, make_model, ort_session, rel_l2, TensorProto

from tensorlayout.cli import Tour, main
from tensorlayout.model import ModelError, load, plan_model, zoo


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "tiny.onnx"
    path.write_bytes(zoo.tiny_onnx())
    return str(path)


def _err(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------- run
def test_run_json_check_profile(tiny, capsys, tmp_path):
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rc = main(["run", tiny, "--input", str(tmp_path / "x.npy"), "--threads", "1", "--profile",
               "--check", "--save", str(tmp_path / "y.npy"), "--json"])
    info = json.loads(capsys.readouterr().out)
    assert rc == 0
    ref = ort_session(open(tiny, "rb").read()).run(None, {"x": x})[0]
    y = np.load(tmp_path / "y.npy")
    assert rel_l2(y, ref) <= 1e-5
    assert info["check"][0]["rel_l2"] == pytest.approx(rel_l2(y, ref), rel=1e-3, abs=1e-9)
    assert info["check"][0]["top1"] == int(np.argmax(ref))
    assert [p["layer"] for p in info["profile"]] == [s.node.name for s in load(tiny).steps]
    algs = {p["algorithm"] for p in info["profile"] if p["op"] == "Conv"}
    assert algs and algs <= {"shifted GEMM", "direct convolution"}   # small layers, no Winograd
    assert info["outputs"][0]["top5"][0][0] == int(np.argmax(ref))


def test_run_text(tiny, capsys):
    assert main(["run", tiny, "--profile", "--check"]) == 0
    out = capsys.readouterr().out
    assert "top 5:" in out and "(same)" in out
    assert "Conv shifted GEMM" in out or "Conv direct convolution" in out


# ---------------------------------------------------------------------------- plan
def test_plan_json_chip_html(tiny, capsys, tmp_path):
    rc = main(["plan", tiny, "--chip", "BM1688", "--max-image", "40,40", "--html",
               str(tmp_path / "rep"), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    rows = {r["name"]: r for r in d["tensors"]}
    # (1, 16, 16, 16) NCHW: IN_OUT_CHANNEL [q(16) * 16, 1 * 16] = [64, 16]: past 40 wide, so
    # held as two images of 8 channels ([32, 16] each); conv1 writes it (relu1 fused, b has none)
    assert rows["c"]["image"] == [64, 16] and rows["c"]["fits"] is True
    assert rows["c"]["note"] == "held as 2 images of 8 channels"
    assert rows["b"]["image"] is None and rows["b"]["note"].startswith("fused: layer conv1")
    assert rows["d"]["image"] == [32, 8] and rows["d"]["fits"] is True
    # conv3's OIHW filter (32, 16, 3, 3): CONV2D_FILTER [16, 9 * q(32)] = [16, 72], too tall
    assert rows["c3.w"]["image"] == [16, 72] and rows["c3.w"]["fits"] is False
    assert any("c3.w" in p and "[16, 72]" in p for p in d["problems"])
    assert sorted(i["image"] for i in d["images"] if i["tensor"].startswith("c[")) == [[32, 16]] * 2
    assert d["chip"]["name"] == "BM1688" and len(d["npu_layers"]) == 9
    html = (tmp_path / "rep" / "index.html").read_text()
    assert html.count("<svg") == 4 and 'data-over="1"' in html   # the 4th: NPU local memory
    import xml.etree.ElementTree as ET

    bars = []
    for chunk in html.split("<div>")[1:]:
        svg = ET.fromstring(chunk.split("</div>")[0])
        bars += [e for e in svg.iter() if e.get("class") == "bar"]
    # the first chart: output W and H of each layer against 40; red exactly where past it
    widths = [b for b in bars if b.get("data-what") in ("W", "H")]
    assert widths and all((int(b.get("data-value")) > 40) == (b.get("data-over") == "1")
                          for b in widths)
    sets = [b for b in bars if b.get("data-what") == "set"]
    assert [int(b.get("data-value")) for b in sets] == [r["working_set"] for r in d["npu_layers"]]


def test_plan_peak_memory_on_a_diamond(tmp_path):
    """x -> a -> b; c = a + b; y = relu(c): live images and the blocks they share, by hand from
    the seed's image size."""
    x = np.zeros((1, 8, 6, 5), np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n0"),
             helper.make_node("Sigmoid", ["a"], ["b"], name="n1"),
             helper.make_node("Add", ["a", "b"], ["c"], name="n2"),
             helper.make_node("Relu", ["c"], ["y"], name="n3")]
    m = load(make_model(nodes, {"x": x}, ["y"]).SerializeToString())
    plan = plan_model(m)
    img = 2 * 5 * 6 * 16          # [q(8) * 5, 6] pixels x 4 lanes x 4 bytes
    # n3 is fused into n2 (c has no image): layers n0: x, a   n1: a, b   n2: a, b, y
    assert plan.steps == ["n0", "n1", "n2"]
    assert plan.live == [2 * img, 2 * img, 3 * img]
    mem = plan.memory()
    assert mem["live_peak_bytes"] == 3 * img and mem["peak_layer"] == "n2"
    # b takes x's block once x is read; y needs a third while a and b are still read
    assert mem["peak_image_bytes"] == 3 * img
    slots = {i["tensor"]: i["slot"] for i in plan.images()}
    assert slots["b"] == slots["x"] and len({slots["a"], slots["x"], slots["y"]}) == 3
    assert plan_model(m, half=True).memory()["peak_image_bytes"] == 3 * img // 2


def test_demo_part_runs(tmp_path):
    from tensorlayout.cli_parts import model as part

    buf = io.StringIO()
    part.demo(Tour(str(tmp_path), buf))
    text = buf.getvalue()
    assert "relative L2 error" in text and "(same)" not in text.split("top-1")[0]
    assert "same" in text.split("onnxruntime on the same input")[1]
    assert os.path.exists(tmp_path / "demo_model.onnx")


# ---------------------------------------------------------------------------- bad input
def test_not_onnx(tmp_path, capsys):
    p = tmp_path / "notes.onnx"
    p.write_text("this is not a model\n" * 20)
    line = _err(capsys, ["run", str(p)])
    assert "is not an ONNX model" in line and "notes.onnx" in line
    with pytest.raises(ModelError, match="is not an ONNX model"):
        load(str(p))


def test_a_graph_of_no_nodes_is_refused_by_what_it_lacks(tmp_path, capsys):
    m = make_model([], {"x": np.zeros((1, 2, 3, 3), np.float32)}, ["x"])
    p = tmp_path / "empty_graph.onnx"
    p.write_bytes(m.SerializeToString())
    line = _err(capsys, ["run", str(p)])
    assert "has no nodes" in line and "'x'" in line and "not an ONNX model" not in line
    with pytest.raises(ModelError, match="has no nodes"):
        load(m.SerializeToString())


def test_truncated(tiny, tmp_path, capsys):
    data = open(tiny, "rb").read()
    for cut in (len(data) // 2, len(data) - 7, 40):
        p = tmp_path / f"cut{cut}.onnx"
        p.write_bytes(data[:cut])
        line = _err(capsys, ["plan", str(p)])
        assert "is not an ONNX model" in line


def test_missing_and_empty_file(tmp_path, capsys):
    assert "does not exist" in _err(capsys, ["plan", str(tmp_path / "nope.onnx")])
    (tmp_path / "e.onnx").write_bytes(b"")
    assert "is empty" in _err(capsys, ["plan", str(tmp_path / "e.onnx")])


def test_unsupported_op(tmp_path, capsys):
    x = np.zeros((1, 2, 3, 3), np.float32)
    m = make_model([helper.make_node("Relu", ["x"], ["a"]),
                    helper.make_node("Det", ["a"], ["y"], name="the_det")], {"x": x}, ["y"])
    p = tmp_path / "det.onnx"
    p.write_bytes(m.SerializeToString())
    line = _err(capsys, ["run", str(p)])
    assert "'the_det' (Det)" in line and "not supported" in line


def test_unsupported_attribute_names_node(tmp_path):
    x = np.zeros((1, 2, 4, 4), np.float32)
    m = make_model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="area", name="up")],
                   {"x": x}, ["y"], {"s": np.array([1, 1, 2, 2], np.float32)}, opset=13)
    with pytest.raises(ModelError, match=r"node 'up' \(Resize\): mode = 'area' is not supported"):
        load(m.SerializeToString())


def test_conv_weights_at_run_time_run_on_the_cpu_only():
    """Weights as a graph input: the CPU runtime convolves with what each run gives (1x1
    weights: a channel mix, worked out here with einsum); the device runtimes refuse by name."""
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="c")], {"x": x}, ["y"])
    m.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 2, 1, 1]))
    model = load(m.SerializeToString(), input_shapes={"x": (1, 2, 4, 4), "w": (3, 2, 1, 1)})
    for seed in (0, 1):
        w = np.random.default_rng(seed).standard_normal((3, 2, 1, 1)).astype(np.float32)
        want = np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0])
        assert np.allclose(model.run(x=x, w=w), want, rtol=1e-6, atol=1e-5)
    with pytest.raises(ModelError, match=r"node 'c' \(Conv\): .*weights or bias computed at "
                                         "run time, runs on the CPU runtime only"):
        model.run(x=x, w=w, runtime="opencl")


def test_opset_out_of_range():
    """Opsets 7 to the newest the installed onnx knows load, and an older one whose ops are
    defined there as at 7 (Relu is the same from opset 6 on); Relu at opset 5 (version 1, with
    consumed_inputs) and one past the newest do not."""
    from onnx.defs import onnx_opset_version

    x = np.array([[-1, 2]], np.float32)
    newest = onnx_opset_version()
    for opset in (6, 7, newest):
        m = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"], opset=opset)
        assert load(m.SerializeToString()).run(x).tolist() == [[0, 2]]
    for opset in (5, newest + 1):
        m = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"], opset=opset)
        with pytest.raises(ModelError, match=f"opset {opset} .* supported are 7 to {newest}"):
            load(m.SerializeToString())


@pytest.fixture
def dynamic(tmp_path):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": ["batch", 3, "h", "w"]}, ["y"])
    p = tmp_path / "dyn.onnx"
    p.write_bytes(m.SerializeToString())
    return str(p)


def test_dynamic_shape_needs_input_shape(dynamic, capsys):
    line = _err(capsys, ["plan", dynamic])
    assert "dynamic shape" in line and "--input-shape" in line
    assert main(["plan", dynamic, "--input-shape", "1,3,5,6", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tensors"][0]["shape"] == [1, 3, 5, 6]
    assert main(["run", dynamic, "--input-shape", "x=2,3,4,4"]) == 0
    capsys.readouterr()
    assert "disagrees" in _err(capsys, ["plan", dynamic, "--input-shape", "1,4,5,6"])
    assert "'z'" in _err(capsys, ["plan", dynamic, "--input-shape", "z=1,3,5,6"])
    assert "non-negative integer" in _err(capsys, ["plan", dynamic, "--input-shape", "1,-3,5,6"])
    # a zero-size dimension loads; an image cannot hold it, and the plan says so
    assert "= 0 is not allowed" in _err(capsys, ["plan", dynamic, "--input-shape", "1,3,0,6"])


def test_wrong_input_shape_and_dtype(tiny, tmp_path, capsys):
    np.save(tmp_path / "bad_shape.npy", np.zeros((1, 3, 15, 16), np.float32))
    np.save(tmp_path / "bad_dtype.npy", np.zeros((1, 3, 16, 16), np.float64))
    line = _err(capsys, ["run", tiny, "--input", str(tmp_path / "bad_shape.npy")])
    assert "input 'x' has shape (1, 3, 15, 16)" in line and "(1, 3, 16, 16)" in line
    line = _err(capsys, ["run", tiny, "--input", str(tmp_path / "bad_dtype.npy")])
    assert "input 'x' has dtype float64" in line and "float32" in line
    # every runtime checks its inputs before it runs (the NPU path before the simulator)
    for argv in (["npu", "run-onnx", tiny], ["run", tiny, "--runtime", "npu"],
                 ["compare", tiny, "--a", "cpu", "--b", "cpu"]):
        line = _err(capsys, argv + ["--input", str(tmp_path / "bad_shape.npy")])
        assert "input 'x' has shape (1, 3, 15, 16)" in line, argv
    (tmp_path / "junk.npy").write_text("junk")
    assert "cannot be read as a .npy array" in _err(capsys, ["run", tiny, "--input",
                                                             str(tmp_path / "junk.npy")])
    m = load(tiny)
    with pytest.raises(ModelError, match="has dtype int64"):
        m.run(np.zeros((1, 3, 16, 16), np.int64))
    with pytest.raises(ModelError, match="takes 1"):
        m.run(np.zeros((1, 3, 16, 16), np.float32), np.zeros(1, np.float32))


def test_bad_plan_options(tiny, capsys):
    assert "--max-image" in _err(capsys, ["plan", tiny, "--max-image", "10"])
    assert "chip" in _err(capsys, ["plan", tiny, "--chip", "BM9999"])
    assert "threads" in _err(capsys, ["run", tiny, "--threads", "0"])


def test_device_limits_are_read_from_the_device(tiny, capsys):
    """With an OpenCL platform the limits are the device's own; without one, one error line."""
    try:
        from tensorlayout.opencl import list_devices

        want = list(list_devices()[0].max_image_size)
    except Exception:  # noqa: BLE001 - no PyOpenCL or no platform on this machine
        want = None
    if want is None:
        assert "OpenCL" in _err(capsys, ["plan", tiny, "--device", "0"])
    else:
        assert main(["plan", tiny, "--device", "0", "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["max_image"] == want and d["limits_from"].startswith("OpenCL device")
    assert "both given" in _err(capsys, ["plan", tiny, "--device", "0", "--max-image", "8,8"])
