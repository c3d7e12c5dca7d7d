"""Whole networks on Sophgo's simulator in layer groups: every op form against onnxruntime,
row slices with their halos, concat placements, the GDMA bytes a run moves, the allocator's
buffers, the picture, the cost model by hand, other chips' plans and refusals."""

import json

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tensorlayout.backends.npu import NpuProgram  # noqa: E402
from tensorlayout.model import load, zoo  # noqa: E402
from tensorlayout.npu import BM1684, BM1684X, BM1688, Chip  # noqa: E402
from tensorlayout.schedule.npu import schedule_npu  # noqa: E402

from _simulator import skip_module_without_simulator  # noqa: E402

skip_module_without_simulator()

RNG = np.random.default_rng(11)


def _w(*shape, scale=None):
    fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (RNG.standard_normal(shape) * (scale or np.sqrt(2.0 / fan))).astype(np.float32)


def _model(nodes, inits, in_shape, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _run(src, x=None, groups=True, tol=1e-5):
    """Run on the simulator, check against onnxruntime; (output, report, program)."""
    m = load(src)
    shape = next(iter(m.inputs.values()))
    if x is None:
        x = RNG.standard_normal(shape, dtype=np.float32)
    prog = NpuProgram(m, groups=groups)
    y, report = prog.run({"x": x})
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    assert y[0].shape == ref.shape
    assert np.abs(y[0] - ref).max() <= tol * max(np.abs(ref).max(), 1e-30), np.abs(y[0] - ref).max()
    assert prog.gdma_moved == prog.schedule.gdma_bytes()["total"]
    return y[0], report, prog


def _where(report):
    return {r["name"]: r["where"] for r in report}


def _node(op, ins, out, name=None, **kw):
    return helper.make_node(op, ins, [out] if isinstance(out, str) else out, name=name or out, **kw)


# ------------------------------------------------------------------------- op forms
def test_squeeze_excite_and_hard_activations():
    """MobileNetV3's and EfficientNet's blocks: HardSwish, a squeeze-excite of 80 channels
    (two channels per NPU for some) gated by HardSigmoid and by Sigmoid, SiLU as x * sigmoid(x),
    LeakyRelu both ways, Tanh; all on the NPU, in one layer group."""
    c = 80
    inits = {"w1": _w(c, 16, 1, 1), "dw": _w(c, 1, 3, 3), "s1": _w(20, c, 1, 1), "s2": _w(c, 20, 1, 1),
             "w2": _w(24, c, 1, 1), "b2": _w(24, scale=0.1)}
    nodes = [_node("Conv", ["x", "w1"], "a"), _node("HardSwish", ["a"], "b"),
             _node("Conv", ["b", "dw"], "c", pads=[1, 1, 1, 1], group=c),
             _node("GlobalAveragePool", ["c"], "p"), _node("Conv", ["p", "s1"], "q"),
             _node("Relu", ["q"], "r"), _node("Conv", ["r", "s2"], "t"), _node("HardSigmoid", ["t"], "u"),
             _node("Mul", ["c", "u"], "d"), _node("Sigmoid", ["t"], "v"), _node("Mul", ["v", "d"], "e"),
             _node("Conv", ["e", "w2", "b2"], "f"), _node("Sigmoid", ["f"], "g"), _node("Mul", ["f", "g"], "h"),
             _node("LeakyRelu", ["h"], "i", alpha=0.1), _node("LeakyRelu", ["i"], "j", alpha=-1.5),
             _node("Tanh", ["j"], "y")]
    _, report, prog = _run(_model(nodes, inits, [1, 16, 9, 7]))
    assert set(_where(report).values()) == {"npu"}
    assert {r["group"] for r in report} == {0}
    se = next(r for r in report if r["name"] == "d")
    assert "per-channel scale" in se["why"]


def test_arithmetic_forms_and_grouped_convolutions():
    """Grouped convolutions (4 groups; depthwise with multiplier 2), numbers and per-channel
    and expanded constants on either side of Add, Sub, Mul, Div, Max and Min, PRelu, Elu,
    Neg, Abs, Reciprocal and Exp."""
    inits = {"gw": _w(32, 4, 3, 3), "gb": _w(32, scale=0.1), "dw2": _w(64, 1, 3, 3),
             "k": np.float32(0.75), "pc": RNG.uniform(0.5, 2, (1, 64, 1, 1)).astype(np.float32),
             "hw": RNG.uniform(0.5, 2, (1, 1, 6, 5)).astype(np.float32),
             "slope": RNG.uniform(0, 0.5, (64, 1, 1)).astype(np.float32)}
    nodes = [_node("Conv", ["x", "gw", "gb"], "a", pads=[1, 1, 1, 1], group=4),
             _node("Conv", ["a", "dw2"], "b", pads=[1, 1, 1, 1], group=32),
             _node("Add", ["k", "b"], "c"), _node("Sub", ["pc", "c"], "d"), _node("Div", ["d", "pc"], "e"),
             _node("Mul", ["e", "hw"], "f"), _node("Sub", ["f", "k"], "g"), _node("Max", ["g", "e"], "h"),
             _node("Min", ["h", "hw"], "i"), _node("PRelu", ["i", "slope"], "j"), _node("Elu", ["j"], "k2"),
             _node("Neg", ["k2"], "l"), _node("Abs", ["l"], "m"), _node("Add", ["m", "k"], "n"),
             _node("Reciprocal", ["n"], "o"), _node("Div", ["k", "o"], "p"), _node("Mul", ["p", "k"], "q"),
             _node("Exp", ["q"], "r"), _node("Div", ["r", "q"], "y")]
    _, report, _ = _run(_model(nodes, inits, [1, 16, 6, 5]))
    assert set(_where(report).values()) == {"npu"}


def test_pooling_divisors_and_reductions():
    """Average pooling that leaves padding (and ceil-mode overhang) out of the divisor, or
    counts it; max pooling in ceil mode; global max; reductions over H and W into a Gemm."""
    inits = {"fw": _w(10, 70), "fb": _w(10, scale=0.1)}
    nodes = [_node("AveragePool", ["x"], "a", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             _node("AveragePool", ["a"], "b", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             _node("AveragePool", ["b"], "c", kernel_shape=[3, 3], pads=[1, 0, 1, 1], count_include_pad=1,
                   ceil_mode=1, strides=[2, 2]),
             _node("MaxPool", ["c"], "d", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             _node("GlobalMaxPool", ["d"], "e"), _node("ReduceSum", ["d"], "f", axes=[2, 3], keepdims=1),
             _node("Add", ["e", "f"], "g"), _node("ReduceMean", ["g"], "h", axes=[2, 3], keepdims=0),
             _node("Gemm", ["h", "fw", "fb"], "y", transB=1)]
    _, report, _ = _run(_model(nodes, inits, [1, 70, 13, 11], opset=11))
    assert set(_where(report).values()) == {"npu"}
    assert "divisor" not in _where(report) and "kh*kw" in next(r for r in report if r["name"] == "a")["why"]


def test_gemm_forms_and_chunked_weights():
    """Gemm with alpha, beta and a C matrix, a C column, transA (A loaded transposed), MatMul,
    and weights too big for local memory (chunks of K summed by the instruction's accumulate)."""
    inits = {"w1": _w(2100, 130), "w2": _w(40, 130), "c2": _w(3, 40, scale=0.5), "w3": _w(40, 40),
             "c3": _w(3, 1, scale=0.5), "w4": _w(3, 12), "w5": _w(12, 12)}
    nodes = [_node("MatMul", ["x", "w1"], "a"), _node("Relu", ["a"], "b"),
             _node("Gemm", ["b", "w2", "c2"], "c", transB=1, alpha=0.5, beta=2.0),
             _node("Gemm", ["c", "w3", "c3"], "d", beta=0.25),
             _node("Gemm", ["d", "w4"], "e", transA=1),          # (40, 3)^T ... (3, 40) -> A^T is (40, 3)
             _node("MatMul", ["e", "w5"], "y")]
    # e = d^T (40 x 3) @ w4 (3 x 12): a (40, 12) output
    _, report, prog = _run(_model(nodes, inits, [3, 2100]), x=RNG.standard_normal((3, 2100), dtype=np.float32))
    assert set(_where(report).values()) == {"npu"}
    groups = {s.node.name: s.group for s in prog.schedule.steps}
    kinds = {g.index: g.kind for g in prog.schedule.groups}
    assert kinds[groups["a"]] == kinds[groups["e"]] == "matmul"      # matmuls of their own
    assert kinds[groups["c"]] == "group" and groups["c"] == groups["d"]
    assert "chunks" in next(r for r in report if r["name"] == "a")["why"]


def _moves_graph():
    inits = {"w0": _w(8, 6, 3, 3), "w1": _w(8, 14, 1, 1), "w2": _w(8, 22, 3, 3),
             "wa": _w(10, 30, 1, 1), "wb": _w(10, 30, 1, 1), "wc": _w(12, 20, 1, 1),
             "shape5": np.array([1, 2, 6, 5, 7], np.int64), "shape4": np.array([1, 12, 5, 7], np.int64),
             "s0": np.array([0], np.int64), "s6": np.array([6], np.int64), "s12": np.array([12], np.int64),
             "ax1": np.array([1], np.int64), "h1": np.array([1], np.int64), "h4": np.array([4], np.int64),
             "ax2": np.array([2], np.int64), "sp": np.array([4, 8], np.int64)}
    nodes = [_node("Conv", ["x", "w0"], "f0", pads=[1, 1, 1, 1]),
             _node("Concat", ["x", "f0"], "c0", axis=1), _node("Relu", ["c0"], "r0"),
             _node("Conv", ["r0", "w1"], "f1"), _node("Concat", ["x", "f0", "f1"], "c1", axis=1),
             _node("Relu", ["c1"], "r1"), _node("Conv", ["r1", "w2"], "f2", pads=[1, 1, 1, 1]),
             _node("Concat", ["x", "f0", "f1", "f2"], "c2", axis=1),          # 30 channels
             _node("Conv", ["c2", "wa"], "a"), _node("Conv", ["c2", "wb"], "b"),
             _node("Relu", ["a"], "ra"), _node("Relu", ["b"], "rb"),
             _node("Concat", ["ra", "rb"], "ab", axis=1),                       # rb at channel 10: copies
             _node("Conv", ["ab", "wc"], "cc"),
             _node("Slice", ["cc", "s0", "s6", "ax1"], "x1"), _node("Slice", ["cc", "s6", "s12", "ax1"], "x2"),
             _node("Relu", ["x2"], "b2"), _node("Concat", ["x1", "b2"], "cat", axis=1),
             _node("Reshape", ["cat", "shape5"], "r5"), _node("Transpose", ["r5"], "t5", perm=[0, 2, 1, 3, 4]),
             _node("Reshape", ["t5", "shape4"], "sh"),
             _node("Split", ["sh", "sp"], ["sa", "sb"], name="split", axis=1), _node("Relu", ["sb"], "rs"),
             _node("Concat", ["sa", "rs"], "j", axis=1),
             _node("Slice", ["j", "h1", "h4", "ax2"], "k"), _node("Concat", ["k", "k"], "w", axis=3),
             _node("Transpose", ["w"], "y", perm=[0, 1, 3, 2])]
    return _model(nodes, inits, [1, 6, 5, 7])


def test_moves_concat_placement_copies_shuffle_and_slices():
    """DenseNet's growing concats written in place, a concat that needs copies (a part at
    channel 10: another NPU than its producer's input), ShuffleNet's channel shuffle
    (Concat, Reshape to 5-D, Transpose, Reshape, two Slices), a Split, Slice along H and a
    Concat along W (in system memory), and a Transpose."""
    _, report, prog = _run(_moves_graph())
    assert set(r["where"] for r in report) <= {"npu", "view"}
    g0 = prog.schedule.program.groups[0]
    modes = {}
    for s in prog.schedule.steps:
        if s.node.op == "Concat":
            modes[s.node.name] = s.why
    assert all(s.group == 0 for s in prog.schedule.steps[:8])          # the dense block: one group
    assert g0.kind == "group"


@pytest.mark.parametrize("inner", [["s", "x"], ["s", "t"]])
def test_a_concat_written_in_place_is_stored_as_a_part_of_a_concat_in_system_memory(inner):
    """A Concat whose parts are written in place (its output a family of buffers) that is
    itself a part of a Concat assembled in system memory (the graph's output): its channels
    are stored into the outer output's.  (They were never stored: the outer output held
    whatever its memory held there.)  onnxruntime's results."""
    nodes = [_node("Sigmoid", ["x"], "s"), _node("Tanh", ["x"], "t"), _node("Relu", ["x"], "r"),
             _node("Concat", inner, "c", axis=1), _node("Concat", ["c", "r"], "y", axis=1)]
    _run(_model(nodes, {}, [1, 32, 20, 18]))


def test_a_convolution_too_big_for_any_group_goes_through_the_layer_planner():
    """1024 -> 1024 channels, 3 x 3: its 2IC weights alone take 590 KB of each NPU, more than
    one holds, so no group takes it; the layer planner cuts its output channels."""
    src = _model([_node("Conv", ["x", "w", "b"], "a", pads=[1, 1, 1, 1]), _node("Relu", ["a"], "y")],
                 {"w": _w(1024, 1024, 3, 3), "b": _w(1024)}, [1, 1024, 3, 3])
    _, report, prog = _run(src)
    step = prog.schedule.steps[0]
    assert step.kind == "conv" and "planner" in step.why and step.conv_plan.split[1] > 1
    assert step.row()["gdma_bytes"] == step.conv_plan.gdma_bytes
    assert [r["where"] for r in report] == ["npu", "npu"]


# ------------------------------------------------------------------ slices and groups
def _big_graph():
    c, h, w = 8, 600, 400          # one channel of one image: 960 KB, more than an NPU holds
    inits = {"w1": _w(c, c, 3, 3, scale=0.3), "b1": _w(c, scale=0.1), "w2": _w(c, c, 3, 3, scale=0.3),
             "dw": _w(c, 1, 3, 3), "d1": _w(c, 1, 1, 1)}
    nodes = [_node("Conv", ["x", "w1", "b1"], "a", pads=[1, 1, 1, 1]), _node("Relu", ["a"], "b"),
             _node("Conv", ["b", "w2"], "c", pads=[1, 1, 1, 1]), _node("Add", ["c", "x"], "d"),
             _node("Conv", ["d", "d1"], "d2", group=c),               # reads d's rows exactly
             _node("Conv", ["d", "dw"], "e", pads=[1, 1, 1, 1], group=c),   # reads d with a halo
             _node("Add", ["d2", "e"], "f"), _node("Sigmoid", ["f"], "g"),
             _node("MaxPool", ["g"], "y", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    return _model(nodes, inits, [1, c, h, w])


@pytest.fixture(scope="module")
def big():
    """The big graph run once through Model.run: (model, output, onnxruntime's output)."""
    src = _big_graph()
    m = load(src)
    x = RNG.standard_normal((1, 8, 600, 400), dtype=np.float32)
    y = m.run(x, runtime="npu")
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return m, y, ref


def test_row_slices_with_halos(big):
    """A group too big for whole images runs in row slices: each slice loads its input rows
    with the halo its windows read, padding only at the image's edges, stores only its own
    rows; a depthwise 1x1 reading exactly the rows a 3x3 also reads with a halo gets a copy."""
    m, y, ref = big
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()
    prog = m._npu
    assert prog.gdma_moved == prog.schedule.gdma_bytes()["total"]
    groups = [g for g in prog.schedule.group_rows() if g["kind"] == "group"]
    assert len(groups) == 1 and groups[0]["row_slices"] > 1
    g = groups[0]
    x_bytes, y_bytes = 4 * 8 * 600 * 400, 4 * 8 * 300 * 200
    # halos load some input rows twice, the stores write each output row once
    assert x_bytes < g["gdma"]["load"] - 4 * 1000 < 1.2 * x_bytes
    assert g["gdma"]["store"] == y_bytes
    assert g["gdma"]["local"] > 0                 # the depthwise 1x1's aligned copy of d
    assert g["peak_bytes"] <= BM1684.lmem_bytes


def test_a_batch_runs_image_by_image_in_one_group():
    """Three images: the group runs its instructions once per image (constants loaded once),
    a dense block's concats in place and a squeeze-excite whose factor is one per image."""
    nodes = [_node("Conv", ["x", "w0"], "f0", pads=[1, 1, 1, 1]), _node("Concat", ["x", "f0"], "c0", axis=1),
             _node("Relu", ["c0"], "r0"), _node("Conv", ["r0", "w1"], "f1"),
             _node("Concat", ["x", "f0", "f1"], "c1", axis=1), _node("GlobalAveragePool", ["c1"], "p"),
             _node("Conv", ["p", "s1"], "q"), _node("Relu", ["q"], "r"), _node("Conv", ["r", "s2"], "t"),
             _node("Sigmoid", ["t"], "u"), _node("Mul", ["c1", "u"], "d"),
             _node("MaxPool", ["d"], "e", kernel_shape=[2, 2], strides=[2, 2]),
             _node("GlobalAveragePool", ["e"], "g"), _node("Flatten", ["g"], "h"),
             _node("Gemm", ["h", "fw", "fb"], "y", transB=1)]
    inits = {"w0": _w(8, 6, 3, 3), "w1": _w(8, 14, 1, 1), "s1": _w(5, 22, 1, 1), "s2": _w(22, 5, 1, 1),
             "fw": _w(7, 22), "fb": _w(7)}
    src = _model(nodes, inits, [3, 6, 9, 8])
    x = RNG.standard_normal((3, 6, 9, 8), dtype=np.float32)
    y, report, prog = _run(src, x)
    assert {r["where"] for r in report} == {"npu", "view"}
    (g,) = prog.schedule.group_rows()
    assert (g["images"], g["row_slices"], g["constants"]) == (3, 1, "resident")
    # 2IC weights hold pairs of input channels: an odd count gets a zero channel (s2's 5 -> 6)
    weights = sum(4 * k * 2 * -(-c // 2) * kh * kw for k, c, kh, kw in
                  (v.shape for n, v in inits.items() if n[0] in "ws")) + 4 * (7 * 22 + 7)
    assert g["gdma"]["load"] == weights + x.nbytes and g["gdma"]["store"] == 4 * 3 * 7
    assert np.array_equal(y, _run(src, x, groups=False)[0])


def test_layer_groups_against_layer_by_layer():
    """The same instructions in one group or node by node give the same bits; the group moves
    fewer GDMA bytes, and both runs move exactly the bytes their plans count."""
    src = zoo.tiny_onnx()
    x = RNG.standard_normal((1, 3, 16, 16), dtype=np.float32)
    yg, rg, pg = _run(src, x)
    yl, rl, pl = _run(src, x, groups=False)
    assert np.array_equal(yg, yl)
    assert {r["group"] for r in rg if r["where"] == "npu"} == {0}
    assert len({r["group"] for r in rl}) == len(rl)
    g, l_ = pg.schedule.gdma_bytes(), pl.schedule.gdma_bytes()
    # by layer: every activation stored and loaded again; in the group only the input and logits move
    assert g["store"] == 4 * 10 and l_["store"] > 10 * g["store"]
    assert g["total"] < 0.4 * l_["total"]


def test_the_run_uses_the_placements_the_plan_prints_in_groups(big):
    from tensorlayout.model import plan_model

    m = big[0]
    rows = {r["layer"]: r for r in plan_model(m, chip="BM1684").layers}
    ran = [r for r in m.last_report if r["where"] == "npu"]
    assert len(ran) == 9
    for r in ran:
        assert r["tensors"] == rows[r["name"]]["tensors"], r["name"]
        assert rows[r["name"]]["group"] == r["group"] == 0


# --------------------------------------------------------- plans: allocator, chips, picture
def _check_buffers(schedule):
    """Buffers alive at the same instruction never share bytes; all inside one NPU."""
    chip = schedule.chip
    for g in schedule.groups:
        bufs = g.buffers
        for i, (k1, _, _, o1, s1, a1, b1) in enumerate(bufs):
            assert 0 <= o1 and o1 + s1 <= chip.lmem_bytes and o1 % chip.align_bytes == 0, k1
            for k2, _, _, o2, s2, a2, b2 in bufs[i + 1:]:
                if a1 <= b2 and a2 <= b1:
                    assert o1 + s1 <= o2 or o2 + s2 <= o1, (k1, k2)


@pytest.mark.parametrize("chip", [BM1684, BM1684X, BM1688, Chip(8, 16384, 64, "small")],
                         ids=lambda c: c.name)
def test_plans_on_each_chip_keep_buffers_apart(chip):
    from tensorlayout.graph import load_graph

    for src in (_big_graph(), zoo.tiny_onnx()):
        s = schedule_npu(load_graph(src), chip)
        assert {st.place for st in s.steps} == {"npu"}
        _check_buffers(s)
        for st in s.steps:
            for role, name, t in st.tensors:
                assert t.chip == chip and t.end_offset <= chip.lmem_bytes
                if t.layout_name == "aligned":
                    assert t.offset % chip.align_bytes == 0


def test_picture_shows_the_buffers_of_the_plan():
    import xml.etree.ElementTree as ET

    from tensorlayout.graph import load_graph
    from tensorlayout.model.report import local_memory_svg

    s = schedule_npu(load_graph(zoo.tiny_onnx()), BM1684)
    root = ET.fromstring(local_memory_svg(s).split("?>", 1)[1])
    rects = [e for e in root.iter() if e.get("class") == "buffer"]
    want = sorted((b[3], b[4], b[5], b[6]) for g in s.groups for b in g.buffers)
    got = sorted((int(e.get("data-offset")), int(e.get("data-span")), int(e.get("data-first")),
                  int(e.get("data-last"))) for e in rects)
    assert got == want and len(got) > 10
    # each NPU's bytes at the busiest instruction: the tensors' channels, NPU by NPU
    npu = [e for e in root.iter() if e.get("class") == "npu-bytes"]
    assert {int(e.get("data-npu")) for e in npu} <= set(range(64)) and npu


def test_cost_model_by_hand():
    """One 3x3 convolution of 64 -> 64 channels on 16 x 16: 16*16/32 = 8 cycles of positions
    per channel row, 64*9 multiply-adds each, one channel per NPU; its GDMA bytes are the
    input, the 2IC weights, the bias and the output, each once."""
    src = _model([_node("Conv", ["x", "w", "b"], "y", pads=[1, 1, 1, 1])],
                 {"w": _w(64, 64, 3, 3), "b": _w(64)}, [1, 64, 16, 16])
    from tensorlayout.graph import load_graph

    s = schedule_npu(load_graph(src), BM1684)
    row = s.group_rows()[0]
    assert row["bdc_cycles"] == 8 * 64 * 9
    assert row["macs"] == 64 * 16 * 16 * 64 * 9
    io = 4 * 64 * 16 * 16
    assert row["gdma"] == {"load": io + 4 * 64 * 64 * 9 + 4 * 64, "store": io, "local": 0, "system": 0,
                           "total": 2 * io + 4 * 64 * 64 * 9 + 4 * 64}
    assert row["estimate"] is True and row["seconds"] == pytest.approx(
        8 * 64 * 9 / 550e6 + row["gdma"]["total"] / 32e9)


# ----------------------------------------------------------------------- refusals
def test_new_instructions_refuse_bad_operands_and_leave_memory_intact():
    from tensorlayout.errors import LayoutError
    from tensorlayout.npu import LocalMemory, bdc, compact_stride, tensor_layout

    mem = LocalMemory(BM1684, system_bytes=4096, backend="cmodel")
    x = mem.s2l(0, RNG.standard_normal((1, 70, 4, 4), dtype=np.float32))
    s = mem.s2l(65536, RNG.standard_normal((1, 70, 1, 1), dtype=np.float32))       # aligned, not compact
    sc = bdc.store_bias(mem, 98304, RNG.standard_normal(70))
    y = tensor_layout(BM1684, 131072, (1, 70, 4, 4))
    wrong_npu = tensor_layout(BM1684, 3 * BM1684.lmem_bytes + 98304, (1, 70, 1, 1),
                              stride=compact_stride(BM1684, (1, 70, 1, 1), 3))
    local, system = mem.local.copy(), mem.system.copy()
    bad = [lambda: bdc.scale_bias(mem, y, x, scale=s),                     # scale not compact
           lambda: bdc.scale_bias(mem, y, x, scale=wrong_npu),             # scale in another NPU
           lambda: bdc.scale_bias(mem, y, x),                              # nothing to apply
           lambda: bdc.scale_bias(mem, x, y, bias=tensor_layout(BM1684, 0, (1, 70, 1, 1), layout="compact")),
           lambda: bdc.div(mem, y, x, s),                                  # shapes differ
           lambda: bdc.rdiv(mem, y, x, float("inf")),
           lambda: bdc.rsub(mem, y, x, "1"),
           lambda: bdc.copy(mem, x, x),                                    # overlap
           lambda: bdc.copy(mem, tensor_layout(BM1684, BM1684.lmem_bytes + 131072, (1, 70, 4, 4)), x)]
    for call in bad:
        with pytest.raises(LayoutError):
            call()
        assert np.array_equal(mem.local, local) and np.array_equal(mem.system, system)
    bdc.scale_bias(mem, y, x, scale=sc, bias=sc)
    want = mem.load(x) * mem.load(sc) + mem.load(sc)
    assert np.array_equal(mem.load(y), want)


# ---------------------------------------------------------------------- command line
def test_cli_reports_groups_gdma_and_the_estimate(tmp_path):
    from _cli_util import run as run_cli

    path = tmp_path / "tiny.onnx"
    path.write_bytes(zoo.tiny_onnx())
    rc, out, err = run_cli("run", str(path), "--runtime", "npu", "--check", "--json")
    assert rc == 0, err
    info = json.loads(out)
    assert info["rel_max_vs_onnxruntime"] < 1e-5
    assert [g["kind"] for g in info["groups"]] == ["group"] and info["groups"][0]["nodes"][0] == "conv1"
    gd = info["gdma"]
    assert gd["moved"] == gd["plan"]["total"] and gd["ratio"] < 0.4
    assert gd["layer_by_layer"]["total"] > gd["plan"]["total"]
    assert info["estimate"]["estimate"] is True and info["estimate"]["bdc_cycles"] > 0
    assert all("why" in n and "group" in n for n in info["nodes"])
    rc, out, err = run_cli("run", str(path), "--runtime", "npu", "--layer-by-layer", "--json")
    single = json.loads(out)
    assert rc == 0 and single["gdma"]["ratio"] == 1.0 and len(single["groups"]) == 10
    rc, out, err = run_cli("run", str(path), "--layer-by-layer")
    assert rc == 2 and "--layer-by-layer does not apply to --runtime cpu" in err
