"""The graph layer: ONNX read once into typed parameters, constants folded to a fixed point,
zero-size dimensions, run-time operands; each checked against onnxruntime or against the
ONNX rule written out here."""

from __future__ import annotations

import numpy as np
import pytest

from _model_util import make_model, ort_session, rel_l2

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tensorlayout.errors import ModelError  # noqa: E402
from tensorlayout.graph import load_graph  # noqa: E402
from tensorlayout.model import load  # noqa: E402


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def test_shape_chains_fold_to_a_fixed_point():
    """Shape -> Cast -> Slice -> Cast -> Concat -> Reshape twice, the second chain reading the
    shape the first Reshape makes: it folds only on a second pass, after inference sees the
    first Reshape's output."""
    F, I = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=F),
        helper.make_node("Slice", ["sf", "z", "two"], ["sl"]),
        helper.make_node("Cast", ["sl"], ["si"], to=I),
        helper.make_node("Concat", ["si", "m1"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["r"]),
        helper.make_node("Relu", ["r"], ["rr"]),
        helper.make_node("Shape", ["rr"], ["s2"]),
        helper.make_node("Cast", ["s2"], ["s2f"], to=F),
        helper.make_node("Slice", ["s2f", "two", "three"], ["s2l"]),
        helper.make_node("Cast", ["s2l"], ["s2i"], to=I),
        helper.make_node("Concat", ["m1", "s2i"], ["t2"], axis=0),
        helper.make_node("Reshape", ["rr", "t2"], ["y"]),
    ]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", F, [2, 3, 4, 5])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [_i64("z", [0]), _i64("two", [2]), _i64("three", [3]), _i64("m1", [-1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    graph = load_graph(m)
    assert [n.op for n in graph.nodes] == ["Reshape", "Relu", "Reshape"]
    assert graph.shapes["y"] == (6, 20)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = load(m).run(x)
    ref = ort_session(m.SerializeToString()).run(None, {"x": x})[0]
    assert y.shape == ref.shape == (6, 20) and np.array_equal(y, ref)


def test_zero_size_dimensions_are_sizes():
    x = np.zeros((0, 3), np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "b"], ["y"])]
    m = make_model(nodes, {"x": x}, ["y"], {"b": np.ones(3, np.float32)})
    graph = load_graph(m)
    assert graph.shapes["y"] == (0, 3)
    y = load(m).run(x)
    ref = ort_session(m.SerializeToString()).run(None, {"x": x})[0]
    assert y.shape == ref.shape == (0, 3)


def _same_pads(size, k, s, d, upper):
    out = -(-size // s)
    total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
    return (total // 2, total - total // 2) if upper else (total - total // 2, total // 2)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"])
def test_conv_parameters(auto_pad):
    x = np.zeros((1, 6, 9, 8), np.float32)
    w = np.zeros((12, 3, 3, 2), np.float32)
    kw = {"pads": [0, 1, 2, 1]} if auto_pad == "NOTSET" else {"auto_pad": auto_pad}
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 3], group=2, **kw)],
                   {"x": x}, ["y"], {"w": w})
    p = load_graph(m).nodes[0].params
    assert (p.kernel, p.strides, p.dilations, p.group) == ((3, 2), (2, 3), (1, 1), 2)
    assert (p.in_channels, p.out_channels, p.has_bias, p.depthwise) == (6, 12, False, False)
    if auto_pad == "NOTSET":
        want = ((0, 1), (2, 1))
    elif auto_pad == "VALID":
        want = ((0, 0), (0, 0))
    else:
        h = _same_pads(9, 3, 2, 1, auto_pad == "SAME_UPPER")
        w_ = _same_pads(8, 2, 3, 1, auto_pad == "SAME_UPPER")
        want = ((h[0], w_[0]), (h[1], w_[1]))
    assert (p.begin, p.end) == want


def test_depthwise_is_one_input_channel_per_group():
    x = np.zeros((1, 8, 5, 5), np.float32)
    for w_shape, group, depthwise, mult in (((8, 1, 3, 3), 8, True, 1), ((16, 1, 3, 3), 8, True, 2),
                                            ((8, 2, 3, 3), 4, False, 2), ((8, 8, 3, 3), 1, False, 8)):
        m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=group, pads=[1] * 4)],
                       {"x": x}, ["y"], {"w": np.zeros(w_shape, np.float32)})
        p = load_graph(m).nodes[0].params
        assert (p.depthwise, p.multiplier) == (depthwise, mult)


def test_clip_bounds_from_inputs_constant_and_at_run_time():
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    m = make_model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": x}, ["y"],
                   {"lo": np.float32(-1), "hi": np.float32(2)})
    p = load_graph(m).nodes[0].params
    assert (p.kind, p.alpha, p.beta, p.runtime_bounds) == ("Clip", -1.0, 2.0, False)
    # bounds as graph inputs: computed at run time, read per run
    g = helper.make_graph([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("lo", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("hi", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    mm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mm.ir_version = 8
    assert load_graph(mm).nodes[0].params.runtime_bounds
    model = load(mm)
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(mm)       # onnxruntime's Python binding refuses 0-d float inputs
    for lo, hi in ((-1, 2), (0.5, 0.75)):
        feeds = {"x": x, "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        want = ref.run(None, feeds)[0]
        assert np.array_equal(model.run(feeds), want) and np.array_equal(want, np.clip(x, lo, hi))


def test_gemm_parameters_and_inner_dimension_check():
    a = np.zeros((2, 5), np.float32)
    m = make_model([helper.make_node("Gemm", ["a", "b"], ["y"], transB=1, alpha=0.5)], {"a": a},
                   ["y"], {"b": np.zeros((7, 5), np.float32)})
    p = load_graph(m).nodes[0].params
    assert (p.alpha, p.beta, p.trans_a, p.trans_b) == (0.5, 1.0, False, True)
    bad = make_model([helper.make_node("Gemm", ["a", "b"], ["y"])], {"a": a}, ["y"],
                     {"b": np.zeros((7, 5), np.float32)})
    with pytest.raises(ModelError, match="inner dimension|shape inference"):
        load_graph(bad)


def test_dropout_in_training_mode_is_refused_by_name():
    x = np.zeros((2, 3), np.float32)
    m = make_model([helper.make_node("Dropout", ["x", "r", "t"], ["y"])], {"x": x}, ["y"],
                   {"r": np.float32(0.5), "t": np.bool_(True)})
    with pytest.raises(ModelError, match="training_mode = true"):
        load_graph(m)


def test_resize_align_corners_uses_the_unrounded_length():
    """ONNX's downsample_scales_linear_align_corners case: scale 0.6 on 4 columns gives 2
    outputs, at source columns 0 and 3 / (4 * 0.6 - 1), as ONNX's reference evaluator and its
    node test's expected output say (onnxruntime rounds the length and gives 4.0)."""
    from onnx.reference import ReferenceEvaluator

    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 2, 4)
    m = make_model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear",
                                     coordinate_transformation_mode="align_corners")],
                   {"x": x}, ["y"], {"s": np.array([1, 1, 0.6, 0.6], np.float32)})
    y = load(m).run(x)
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert y.shape == ref.shape == (1, 1, 1, 2)
    assert rel_l2(y, ref) < 1e-6
    assert y[0, 0, 0, 1] == pytest.approx(1 + 3 / 1.4, rel=1e-6)


def test_an_attribute_the_op_does_not_have_is_refused_by_name():
    x = np.zeros((2, 3), np.float32)
    m = make_model([helper.make_node("Relu", ["x"], ["y"], bogus=1)], {"x": x}, ["y"])
    with pytest.raises(ModelError, match="'bogus' is not an attribute of Relu at opset 17"):
        load_graph(m)
