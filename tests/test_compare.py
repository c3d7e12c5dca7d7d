"""The porting workbench: ``compare`` reads every tensor of two runtimes back from its storage and
finds where they part; ``where`` says where an element lives.  The oracles are onnxruntime (every
intermediate tensor made a graph output), NumPy, MACE's IN_OUT_CHANNEL pixel formula and the
BM1684 aligned placement written out here, and the other runtime."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("pyopencl", reason="PyOpenCL is not installed (extra 'opencl')")

from _cli_util import run  # noqa: E402
from _model_util import opencl_context, ort_session  # noqa: E402
from _simulator import needs_sim  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tensorlayout.errors import LayoutError  # noqa: E402
from tensorlayout.model import load, zoo  # noqa: E402
from tensorlayout.model.workbench import compare, metrics  # noqa: E402
from tensorlayout.model.workbench_report import write_dump, write_html  # noqa: E402
from tensorlayout.model.workbench_where import where  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def cctx():
    return opencl_context()


def small_net(batch=2, seed=0, scale_w2=1.0):
    """Conv-Relu, a 1x1 Conv added to it, MaxPool, GlobalAveragePool, Flatten, Gemm: every op
    runs on images and on the chip; ``scale_w2`` puts a fault into conv2's weights."""
    rng = np.random.default_rng(seed)

    def w(*s):
        return (rng.standard_normal(s) * np.sqrt(2.0 / np.prod(s[1:]))).astype(np.float32)

    inits = {"w1": w(8, 3, 3, 3), "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
             "w2": w(8, 8, 1, 1) * np.float32(scale_w2), "wf": w(4, 8),
             "bf": np.zeros(4, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["r1", "c2"], ["s"], name="add"),
             helper.make_node("MaxPool", ["s"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [batch, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def every_tensor(data, feeds):
    """onnxruntime's value of every node output of the ONNX model ``data``."""
    m = onnx.load_from_string(data)
    names = [o for n in m.graph.node for o in n.output if o]
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                          for n in names if n not in have)
    outs = ort_session(m.SerializeToString()).run(names, feeds)
    return dict(zip(names, outs))


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.fixture(scope="module")
def tiny():
    data = zoo.tiny_onnx()
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    return data, load(data), x, every_tensor(data, {"x": x})


@pytest.fixture(scope="module")
def small():
    data = small_net()
    x = np.random.default_rng(4).standard_normal((2, 3, 8, 8)).astype(np.float32)
    return data, load(data), x, every_tensor(data, {"x": x})


# ------------------------------------------------------------------ metrics
def test_metrics_against_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1000)
    b = a + rng.standard_normal(1000) * 1e-3
    m = metrics(a, b)
    d = b - a
    assert m["max_abs"] == pytest.approx(np.abs(d).max())
    assert m["rel_l2"] == pytest.approx(np.sqrt((d ** 2).sum() / (a ** 2).sum()))
    assert m["cosine"] == pytest.approx(a @ b / np.sqrt((a @ a) * (b @ b)))
    assert m["sqnr_db"] == pytest.approx(10 * np.log10((a ** 2).sum() / (d ** 2).sum()))
    same = metrics(a, a.copy())
    assert (same["max_abs"], same["rel_l2"], same["cosine"], same["sqnr_db"]) == (0, 0, 1, math.inf)
    bad = metrics(np.array([1.0, 2, 3]), np.array([1.0, np.nan, np.inf]))
    assert (bad["finite"], bad["nan_b"], bad["inf_b"], bad["same_nonfinite"]) == (1, 1, 1, False)


# ------------------------------------------------------------------ a runtime against itself
@pytest.mark.parametrize("rt", ["cpu", "opencl", "opencl:half"])
def test_a_runtime_against_itself_is_exact_on_every_tensor(tiny, rt):
    _, m, x, ref = tiny
    c = compare(m, rt, rt, x)
    names = [r["tensor"] for r in c.rows]
    assert names == ["x"] + [o for n in m.graph.nodes for o in n.outputs]
    compared = [r for r in c.rows if r["compared"]]
    assert all(r["cosine"] == 1.0 and r["max_abs"] == 0.0 and r["sqnr_db"] == math.inf
               for r in compared)
    assert c.first is None
    # on images the convolutions' outputs are fused into their Relu (tiny: Conv-BN-Relu x3)
    fused = {r["tensor"] for r in c.rows if r["state_b"] == "fused"}
    assert fused == (set() if rt == "cpu" else {"b", "e", "g"})
    assert len(compared) == len(c.rows) - len(fused)


@needs_sim
def test_the_npu_against_itself_and_against_the_cpu(tiny):
    _, m, x, ref = tiny
    c = compare(m, "npu", "npu", x)
    assert all(r["compared"] and r["cosine"] == 1.0 and r["max_abs"] == 0.0 for r in c.rows)
    c = compare(m, "cpu", "npu", x)
    assert all(r["compared"] for r in c.rows)          # every tensor, none fused on the NPU
    for r in c.rows[1:]:
        assert rel(c.held["b"][r["tensor"]].value, ref[r["tensor"]]) < 1e-5, r["tensor"]
    conv = next(r for r in c.rows if r["tensor"] == "c")
    assert conv["storage_b"].startswith("local memory at ")
    assert next(r for r in c.rows if r["tensor"] == "j")["state_b"] == "view"


# ------------------------------------------------------------------ read back from storage
def test_every_tensor_read_back_from_images_is_onnxruntimes(tiny):
    """Each tensor read from its image right after its layer: the blocks are reused later, so
    a read at the wrong time would hold another tensor."""
    _, m, x, ref = tiny
    held = compare(m, "cpu", "opencl", x).held
    assert held["b"]["j"].state == "traced"           # Flatten: no image, read through i's
    for name, h in held["b"].items():
        if h.value is not None and name in ref:
            assert rel(h.value, ref[name]) < 1e-5, name
        if name in ref:
            assert rel(held["a"][name].value, ref[name]) < 1e-5, name


def test_images_split_by_channels_and_batch_groups_read_back(small):
    """Limits [8, 9]: the batch of 2 runs as two passes and 8 channels are held as two
    images of 4; each tensor is put together from every pass and part."""
    _, m, x, ref = small
    c = compare(m, "cpu", "opencl", x, max_image=(8, 9), keep=True)
    held = c.held["b"]
    assert "2 images by channels" in held["r1"].storage and "1 batch item per pass" in held["r1"].storage
    for name in ("r1", "c2", "s", "p", "g", "y"):
        assert rel(held[name].value, ref[name]) < 1e-5, name
    # each piece's index against MACE's IN_OUT_CHANNEL pixel formula, written out here
    pieces = held["s"].pieces
    assert len(pieces) == 4                            # 2 passes x 2 channel parts
    for phys, idx, d in pieces:
        (n0, n1), (c0, c1) = d["batch"], d["channels"]
        H, W = 8, 8
        for n, ch, h, w in [(n0, c0, 0, 0), (n0, c1 - 1, 7, 5), (n1 - 1, c0 + 1, 3, 6)]:
            cc, nn = ch - c0, n - n0
            x_px, y_px, lane = (cc // 4) * W + w, nn * H + h, cc % 4
            assert idx[n, ch, h, w] == (y_px * phys.shape[1] + x_px) * 4 + lane
            assert phys[y_px, x_px, lane] == held["s"].value[n, ch, h, w]
        assert (idx[:n0] == -1).all() and (idx[:, c1:] == -1).all()


def test_float16_images_show_the_inputs_rounding_and_stay_close(tiny):
    _, m, x, ref = tiny
    c = compare(m, "cpu", "opencl:half", x)
    row = c.rows[0]
    own = metrics(x, x.astype(np.float16))
    assert row["sqnr_db"] == pytest.approx(own["sqnr_db"], abs=0.5)
    assert row["max_abs"] <= own["max_abs"] * 1.01
    assert all(r["rel_l2"] < 1e-2 for r in c.rows if r["compared"])
    assert c.first is None and c.tol == 1e-2


# ------------------------------------------------------------------ the first divergence
@pytest.fixture(scope="module")
def resnet():
    data, _ = zoo.export("resnet18", size=32, classes=10)
    proto = onnx.load_from_string(data)
    convs = [n for n in proto.graph.node if n.op_type == "Conv"]
    target = convs[7]                                  # a 3x3 layer in the middle
    init = next(i for i in proto.graph.initializer if i.name == target.input[1])
    w = numpy_helper.to_array(init).copy()
    w[: max(1, w.shape[0] // 4)] *= 1.5                # a quarter of its filters off by half
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    return load(data), load(proto.SerializeToString()), target.name


@pytest.mark.parametrize("b", ["cpu", "opencl:half"])
def test_a_fault_in_one_layers_weights_is_named_first(resnet, b):
    model, faulty, node = resnet
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    if b == "cpu":
        assert compare(model, "cpu", "cpu", x, model_b=model).first is None
    c = compare(model, "cpu", b, x, model_b=faulty)
    assert c.first is not None and c.first["layer_b"] == node
    k = next(i for i, r in enumerate(c.rows) if r["past"])
    assert all(not r["past"] for r in c.rows[:k])
    if b == "cpu":
        assert c.first["node"] == node                 # the Conv's own output
    else:
        assert c.first["op"] in ("Conv", "Relu")       # on images its Relu may be fused into it


# ------------------------------------------------------------------ the NPU's storage
@needs_sim
def test_npu_tensors_from_local_memory_and_from_system_memory(small):
    """Batch 2: a layer group runs image by image, so local memory keeps the last image and
    each tensor is read back as each image left it; each dump piece holds what its bytes say."""
    _, m, x, ref = small
    c = compare(m, "cpu", "npu", x, keep=True)
    held = c.held["b"]
    assert all(r["compared"] for r in c.rows)
    for name in ("c1", "r1", "c2", "s", "p", "g", "y"):
        assert rel(held[name].value, ref[name]) < 1e-5, name
    assert "keeps the last image" in held["c1"].storage and "keeps the last image" in held["r1"].storage
    phys, idx, d = held["r1"].pieces[0]
    assert d["holds"] == [[1, 2], [0, 8], [0, 8], [0, 8]]
    assert (idx[0] == -1).all() and (idx[1] >= 0).all()
    # BM1684 aligned, from NPU 0, 8 channels of 8 x 8: channel c on NPU c, h*W + w words in
    for ch, h, w in [(0, 0, 0), (5, 3, 7), (7, 7, 7)]:
        npu, byte = divmod(int(idx[1, ch, h, w]), phys.shape[1])
        assert (npu, byte) == (ch, (h * 8 + w) * 4)
    words = phys.view(np.float32).reshape(-1)
    assert np.array_equal(words[idx[1] // 4], held["r1"].value[1])    # = what system memory got


# ------------------------------------------------------------------ where
def test_where_on_images_follows_maces_formula_both_ways(tiny):
    _, m, _, _ = tiny
    for idx in [(0, 0, 0, 0), (0, 5, 2, 3), (0, 15, 7, 7)]:
        r = where(m, "d", idx, runtime="opencl")             # (1, 16, 8, 8)
        (p,) = r["places"]
        n, ch, h, w = idx
        assert (p["pixel"], p["lane"]) == ([(ch // 4) * 8 + w, n * 8 + h], ch % 4)
        back = where(m, "d", at=(*p["pixel"], p["lane"]), runtime="opencl")
        assert back["places"][0]["element"] == list(idx)
    split = where(m, "c", (0, 9, 3, 4), runtime="opencl", max_image=(40, 100))
    (p,) = split["places"]                                   # channels 8..15 in their own image
    assert p["channels"] == [8, 16] and (p["pixel"], p["lane"]) == ([(1 // 4) * 16 + 4, 3], 1)
    assert where(m, "b", (0, 0, 0, 0), runtime="opencl")["state"] == "fused"
    traced = where(m, "j", (0, 9), runtime="opencl")
    assert traced["state"] == "traced" and traced["source"] == {"tensor": "i", "index": [0, 9, 0, 0]}
    others = where(m, "d", at=(11, 2, 1), runtime="opencl")["others"]
    assert others and all(o["block"] == where(m, "d", (0, 0, 0, 0), runtime="opencl")["places"][0]
                          ["block"] for o in others)


def test_where_on_the_npu_is_the_aligned_placement(tiny):
    _, m, _, _ = tiny
    r = where(m, "d", (0, 5, 2, 3), runtime="npu")            # pool1 writes it, conv2 reads it
    got = {(p["step"], p["role"]): (p["npu"], p["byte"], p["address"]) for p in r["places"]}
    assert set(got) == {("pool1", "output"), ("conv2", "input")}
    for npu, byte, address in got.values():
        assert (npu, byte) == (5, address + (2 * 8 + 3) * 4)
    back = where(m, "d", at=(5, got[("pool1", "output")][1]), runtime="npu")
    assert [p["element"] for p in back["places"] if p["step"] == "pool1"] == [[None, 5, 2, 3]]
    w = where(m, "fc.w", (3, 9), runtime="npu")["places"][0]  # Gemm transB: B[9, 3]
    assert w["local_index"] == [9, 3]


def test_where_refuses_what_it_cannot_answer(tiny):
    _, m, _, _ = tiny
    with pytest.raises(LayoutError, match=r"^index = .* item 1 = 16 is outside \[0, 16\)"):
        where(m, "c", (0, 16, 0, 0))
    with pytest.raises(LayoutError, match=r"^tensor = 'nope' is not allowed"):
        where(m, "nope", (0,))
    with pytest.raises(LayoutError, match=r"^at = .* outside the tensor's image"):
        where(m, "d", at=(32, 0, 0))


# ------------------------------------------------------------------ the command line
@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("cmp") / "tiny.onnx"
    p.write_bytes(zoo.tiny_onnx())
    return p


def test_compare_command_table_json_html_and_dump(tiny_path, tmp_path):
    rc, out, err = run("compare", tiny_path, "--a", "cpu", "--b", "opencl:half")
    assert rc == 0 and err == ""
    assert "fused in conv1" in out and "first     none past the tolerance 0.01" in out
    rc, out, err = run("compare", tiny_path, "--b", "opencl", "--json", "--html", tmp_path / "h",
                       "--dump", tmp_path / "d")
    assert rc == 0, err
    d = json.loads(out)
    assert d["a"] == "cpu" and d["b"] == "opencl" and d["tol"] == 1e-4 and d["first"] is None
    page = (tmp_path / "h" / "index.html").read_text()
    assert page.count("<svg") == 3 and 'data-past="0"' in page
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    for row in index["rows"]:
        for side in ("a", "b"):
            if row[f"file_{side}"] is None:
                assert row[f"state_{side}"] == "fused"
                continue
            z = np.load(tmp_path / "d" / row[f"file_{side}"])
            for k in range(len(json.loads(str(z["layout"]))["pieces"])):
                i = z[f"index_{k}"]
                assert np.array_equal(z[f"physical_{k}"].reshape(-1)[i[i >= 0]], z["logical"][i >= 0])


def test_compare_command_exits_1_past_the_tolerance(tiny_path, tmp_path):
    proto = onnx.load(str(tiny_path))
    init = next(i for i in proto.graph.initializer if i.name == "c3.w")
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 2, "c3.w"))
    other = tmp_path / "other.onnx"
    other.write_bytes(proto.SerializeToString())
    rc, out, err = run("compare", tiny_path, "--b", "cpu", "--b-model", other)
    assert rc == 1 and "first     g (node conv3, Conv) is the first past" in out
    rc, out, err = run("compare", tiny_path, "--b", "cpu", "--b-model", other, "--tol", "2")
    assert rc == 0


@pytest.mark.parametrize("argv,argument", [
    (["--a", "gpu"], "--a"), (["--tol", "-1"], "--tol"), (["--tol", "nan"], "--tol"),
    (["--html", "/dev/null"], "--html"), (["--dump", "/proc/x"], "--dump"),
    (["--a", "cpu", "--b", "npu", "--device", "0"], "--device"),
    (["--max-image", "0,3"], "--max-image"), (["--b-model", "/nonexistent.onnx"], "--b-model"),
    (["--winograd", "5"], "--winograd"), (["--a", "npu", "--b", "cpu", "--winograd", "0"], "--winograd"),
])
def test_compare_command_refuses_bad_input_in_one_line(tiny_path, tmp_path, argv, argument):
    rc, out, err = run("compare", tiny_path, *argv)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and argument in err, err
    rc, out, err = run("compare", tiny_path, *argv, "--json")
    assert rc == 2 and json.loads(err)["error"]


def test_where_command_both_ways_and_its_refusals(tiny_path):
    rc, out, err = run("where", tiny_path, "d", "0,5,2,3", "--runtime", "npu")
    assert rc == 0 and "step pool1 (MaxPool), output" in out and "NPU 5" in out
    rc, out, err = run("where", tiny_path, "c", "--at", "5,3,1", "--max-image", "40,100")
    assert rc == 0 and "holds element [0, 9, 3, 5]" in out
    assert "the same memory block holds, at other times:" in out
    rc, out, err = run("where", tiny_path, "d", "0,5,2,3", "--json")
    assert rc == 0 and json.loads(out)["places"][0]["pixel"] == [11, 2]
    for argv, argument in [(["d", "0,5,2"], "INDEX"), (["d", "0,5,2,9"], "INDEX"),
                           (["zz", "0"], "TENSOR"), (["d", "--at", "1,2"], "--at"),
                           (["d"], "INDEX"), (["d", "0,0,0,0", "--chip", "BM1684"], "--chip")]:
        rc, out, err = run("where", tiny_path, *argv)
        assert rc == 2 and len(err.splitlines()) == 1 and argument in err, (argv, err)


def test_html_and_dump_refuse_a_file_where_a_folder_goes(tiny, tmp_path):
    _, m, x, _ = tiny
    c = compare(m, "cpu", "cpu", x, keep=True)
    f = tmp_path / "file"
    f.write_text("")
    for fn in (write_html, write_dump):
        with pytest.raises(LayoutError, match="^out_dir = "):
            fn(c, f)


def test_where_never_shows_a_traceback(tiny_path):
    """Random tensors, indices and locations on both runtimes: an answer or one error line."""
    from _cli_util import assert_clean_end
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    names = ["x", "b", "c", "d", "j", "y", "c2.w", "c2.b", "fc.w", "conv1.W_bn[0:8]", "c3.w", "q"]
    ints = st.lists(st.integers(-2, 40), min_size=0, max_size=5).map(
        lambda v: ",".join(map(str, v)))

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(tensor=st.sampled_from(names), index=st.one_of(st.none(), ints),
           at=st.one_of(st.none(), ints), rt=st.sampled_from(["opencl", "opencl:half", "npu"]),
           limits=st.sampled_from([None, "40,100", "40,40"]))
    def check(tensor, index, at, rt, limits):
        argv = ["where", str(tiny_path), tensor] + ([index] if index is not None else [])
        argv += (["--at", at] if at is not None else []) + ["--runtime", rt]
        argv += ["--max-image", limits] if limits and rt != "npu" else []
        rc, _, err = run(*argv)
        assert_clean_end(argv, rc, err)

    check()


def test_nan_on_one_side_is_counted_and_named_first(tiny_path, tmp_path):
    proto = onnx.load(str(tiny_path))
    init = next(i for i in proto.graph.initializer if i.name == "c2.w")
    w = numpy_helper.to_array(init).copy()
    w[0, 0, 0, 0] = np.nan                                  # output channel 0 of conv2
    init.CopyFrom(numpy_helper.from_array(w, "c2.w"))
    other = tmp_path / "nan.onnx"
    other.write_bytes(proto.SerializeToString())
    c = compare(load(str(tiny_path)), "cpu", "cpu", model_b=load(str(other)))
    assert c.first["node"] == "conv2" and c.first["nan_b"] == 8 * 8   # the whole channel
    row = next(r for r in c.rows if r["tensor"] == "e")
    assert (row["nan_a"], row["same_nonfinite"], row["finite"]) == (0, False, 15 * 8 * 8)
    assert row["rel_l2"] < 1e-5                              # the other channels: as they were
    rc, out, err = run("compare", tiny_path, "--b", "cpu", "--b-model", other)
    assert rc == 1 and "a 0/0, b 64/0 (DIFFERENT places)" in out
