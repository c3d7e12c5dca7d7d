"""The ops the CPU runtime gained beyond the five test networks, checked against
onnxruntime where ONNX's own node tests leave a form out: recurrent layers with sequence
lengths, initial states and both directions, ConvTranspose's output shapes, groups and
dilations, N-d convolution and pooling."""

from __future__ import annotations

import numpy as np
import pytest

from _model_util import ort_session, rel_l2

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tensorlayout.model import load  # noqa: E402

F, I32 = TensorProto.FLOAT, TensorProto.INT32


def _model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "t",
                          [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                          [helper.make_tensor_value_info(n, F, None) for n in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _same_as_ort(m, feeds, tol=1e-5):
    ours = load(m).run(feeds)
    ours = ours if isinstance(ours, list) else [ours]
    ref = ort_session(m.SerializeToString()).run(None, feeds)
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert rel_l2(a, b) <= tol, rel_l2(a, b)


_RNG = np.random.default_rng(7)


def _rand(*shape, scale=0.5):
    return (_RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_layers_with_lengths_and_initial_states(op, direction):
    """Sequences of lengths 5, 2 and 0 steps in one batch, initial states, bias (and LSTM's
    peepholes): outputs past a sequence's end are 0 and its last state is that of its own
    last step, as onnxruntime computes."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    seq, batch, inp, hid = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    inits = {"W": _rand(dirs, gates * hid, inp), "R": _rand(dirs, gates * hid, hid),
             "B": _rand(dirs, 2 * gates * hid), "h0": _rand(dirs, batch, hid)}
    names = ["x", "W", "R", "B", "lens", "h0"]
    outs = ["y", "yh"]
    attrs = dict(hidden_size=hid, direction=direction)
    if op == "LSTM":
        inits.update(c0=_rand(dirs, batch, hid), P=_rand(dirs, 3 * hid))
        names += ["c0", "P"]
        outs.append("yc")
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    m = _model([helper.make_node(op, names, outs, **attrs)],
               {"x": (F, [seq, batch, inp]), "lens": (I32, [batch])}, outs, inits)
    _same_as_ort(m, {"x": _rand(seq, batch, inp, scale=1),
                     "lens": np.array([5, 2, 0], np.int32)})


def test_gru_reset_before_the_product_and_lstm_activations_and_clip():
    seq, batch, inp, hid = 4, 2, 3, 5
    x = _rand(seq, batch, inp, scale=2)
    m = _model([helper.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=hid,
                                 linear_before_reset=0)],
               {"x": (F, [seq, batch, inp])}, ["y"],
               {"W": _rand(1, 3 * hid, inp), "R": _rand(1, 3 * hid, hid)})
    _same_as_ort(m, {"x": x})
    m = _model([helper.make_node("LSTM", ["x", "W", "R"], ["y", "yh"], hidden_size=hid,
                                 clip=0.7, activations=["HardSigmoid", "Tanh", "Relu"],
                                 activation_alpha=[0.3], activation_beta=[0.4])],
               {"x": (F, [seq, batch, inp])}, ["y", "yh"],
               {"W": _rand(1, 4 * hid, inp), "R": _rand(1, 4 * hid, hid)})
    _same_as_ort(m, {"x": x})


@pytest.mark.parametrize("attrs, x_shape, w_shape", [
    (dict(strides=[2, 2]), (1, 4, 5, 6), (4, 3, 2, 2)),
    (dict(strides=[2, 3], pads=[1, 0, 0, 2], output_padding=[1, 2]), (2, 4, 5, 4),
     (4, 2, 3, 3)),
    (dict(strides=[2, 2], group=2, dilations=[2, 1]), (1, 4, 3, 5), (4, 3, 3, 2)),
    (dict(strides=[2, 2], output_shape=[10, 9]), (1, 2, 5, 4), (2, 3, 3, 3)),
    (dict(strides=[3], auto_pad="SAME_UPPER"), (1, 2, 7), (2, 4, 4)),
    (dict(strides=[1, 2, 2]), (1, 2, 3, 4, 3), (2, 2, 2, 3, 2)),
])
def test_conv_transpose(attrs, x_shape, w_shape):
    m = _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)],
               {"x": (F, list(x_shape))}, ["y"],
               {"w": _rand(*w_shape), "b": _rand(w_shape[1] * attrs.get("group", 1))})
    _same_as_ort(m, {"x": _rand(*x_shape, scale=1)})


@pytest.mark.parametrize("op, attrs, x_shape", [
    ("Conv", dict(strides=[2], pads=[1, 2], dilations=[2], group=2), (2, 4, 11)),
    ("Conv", dict(strides=[1, 2, 1], auto_pad="SAME_LOWER"), (1, 2, 4, 5, 6)),
    ("MaxPool", dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1), (1, 3, 10)),
    ("AveragePool", dict(kernel_shape=[2, 2, 3], pads=[1, 0, 1, 1, 1, 1],
                         count_include_pad=1), (1, 2, 4, 5, 6)),
    ("AveragePool", dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 1, 2, 2],
                         ceil_mode=1), (1, 2, 9, 8)),
    ("LpPool", dict(kernel_shape=[2, 3], strides=[2, 1], p=3), (1, 2, 6, 7)),
])
def test_convolution_and_pooling_of_other_ranks(op, attrs, x_shape):
    inits, names = {}, ["x"]
    if op == "Conv":
        d = len(x_shape) - 2
        inits["w"] = _rand(6, x_shape[1] // attrs.get("group", 1), *([3] * d))
        names.append("w")
    m = _model([helper.make_node(op, names, ["y"], **attrs)], {"x": (F, list(x_shape))}, ["y"],
               inits, opset=19)
    _same_as_ort(m, {"x": _rand(*x_shape, scale=1)})


def test_maxpool_indices_in_both_storage_orders():
    x = _rand(2, 3, 5, 6, scale=1)
    for order in (0, 1):
        m = _model([helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 3],
                                     strides=[2, 2], pads=[0, 1, 1, 1], storage_order=order)],
                   {"x": (F, [2, 3, 5, 6])}, ["y", "i"], {}, opset=12)
        m.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
        y, idx = load(m).run(x)
        ref = ort_session(m.SerializeToString()).run(None, {"x": x})
        assert np.array_equal(y, ref[0]) and np.array_equal(idx, ref[1]), order


def test_dynamic_quantization_chain_as_onnxruntime_quantizes_it():
    """The pattern onnxruntime's dynamic quantization writes for a float MatMul:
    DynamicQuantizeLinear, MatMulInteger with uint8 weights and their zero point, Cast, and
    the two scales multiplied back; integers equal, floats within 1e-6."""
    U8, I32_ = TensorProto.UINT8, TensorProto.INT32
    w = _RNG.integers(0, 256, (6, 5)).astype(np.uint8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ["q", "w", "z", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=F),
             helper.make_node("Mul", ["s", "ws"], ["scale"]),
             helper.make_node("Mul", ["accf", "scale"], ["y"])]
    m = _model(nodes, {"x": (F, [3, 6])}, ["y", "q", "acc"],
               {"w": w, "wz": np.uint8(131), "ws": np.float32(0.02)})
    m.graph.output[1].type.tensor_type.elem_type = U8
    m.graph.output[2].type.tensor_type.elem_type = I32_
    x = _rand(3, 6, scale=2)
    ours = load(m).run(x)
    ref = ort_session(m.SerializeToString()).run(None, {"x": x})
    assert np.array_equal(ours[1], ref[1]) and np.array_equal(ours[2], ref[2])
    assert rel_l2(ours[0], ref[0]) < 1e-6


def test_qlinear_conv_and_matmul_as_onnxruntime():
    U8 = TensorProto.UINT8
    x = _RNG.integers(0, 256, (1, 4, 6, 5)).astype(np.uint8)
    conv = _model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz",
                                                   "b"], ["y"], pads=[1, 1, 1, 1], strides=[1, 2])],
                  {"x": (U8, [1, 4, 6, 5])}, ["y"],
                  {"xs": np.float32(0.05), "xz": np.uint8(120),
                   "w": _RNG.integers(-127, 128, (3, 4, 3, 3)).astype(np.int8),
                   "ws": np.array([0.01, 0.02, 0.015], np.float32), "wz": np.zeros(3, np.int8),
                   "ys": np.float32(0.3), "yz": np.uint8(128),
                   "b": _RNG.integers(-500, 500, 3).astype(np.int32)})
    conv.graph.output[0].type.tensor_type.elem_type = U8
    a = _RNG.integers(0, 256, (4, 7)).astype(np.uint8)
    mm = _model([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                                  ["y"])], {"a": (U8, [4, 7])}, ["y"],
                {"as": np.float32(0.02), "az": np.uint8(100),
                 "b": _RNG.integers(0, 256, (7, 3)).astype(np.uint8), "bs": np.float32(0.03),
                 "bz": np.uint8(130), "ys": np.float32(0.1), "yz": np.uint8(125)})
    mm.graph.output[0].type.tensor_type.elem_type = U8
    for m, feeds in ((conv, {"x": x}), (mm, {"a": a})):
        ours = load(m).run(feeds)
        ref = ort_session(m.SerializeToString()).run(None, feeds)[0]
        assert ours.dtype == ref.dtype
        assert np.abs(ours.astype(np.int64) - ref).max() == 0


@pytest.mark.parametrize("centers", [0, 1])
def test_non_max_suppression_as_onnxruntime(centers):
    """Two images, three classes, 40 overlapping boxes (corners given in either order), a
    score threshold: the same selected (image, class, box) rows in the same order."""
    I64 = TensorProto.INT64
    xy = _RNG.uniform(0, 10, (2, 40, 2))
    wh = _RNG.uniform(0.5, 3, (2, 40, 2))
    boxes = np.concatenate([xy, wh], axis=2) if centers else \
        np.concatenate([xy + wh * _RNG.choice([-1, 1], (2, 40, 1)), xy], axis=2)
    scores = _RNG.uniform(0, 1, (2, 3, 40)).astype(np.float32)
    m = _model([helper.make_node("NonMaxSuppression", ["b", "s", "k", "iou", "th"], ["y"],
                                 center_point_box=centers)],
               {"b": (F, [2, 40, 4]), "s": (F, [2, 3, 40])}, ["y"],
               {"k": np.array([7], np.int64), "iou": np.array([0.4], np.float32),
                "th": np.array([0.2], np.float32)})
    m.graph.output[0].type.tensor_type.elem_type = I64
    feeds = {"b": boxes.astype(np.float32), "s": scores}
    ours = load(m).run(feeds)
    ref = ort_session(m.SerializeToString()).run(None, feeds)[0]
    assert ours.shape[0] > 6 and np.array_equal(ours, ref)


_X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) / 7 - 8


@pytest.mark.parametrize("opset, node, inits", [
    (7, helper.make_node("Clip", ["x"], ["y"], min=-3.0, max=2.5), {}),
    (7, helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 2, 0, 0, 1, 1], value=1.5), {}),
    (7, helper.make_node("Pad", ["x"], ["y"], pads=[0, 0, 1, 2, 0, 0, 2, 1], mode="edge"), {}),
    (9, helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[100, -1], axes=[1, 3]),
     {}),
    (11, helper.make_node("Split", ["x"], ["y", "z"], axis=3, split=[2, 3]), {}),
    (11, helper.make_node("Squeeze", ["s"], ["y"], axes=[1]), {}),
    (11, helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0, -1]), {}),
    (11, helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, -1], keepdims=0), {}),
    (12, helper.make_node("ReduceSum", ["x"], ["y"], axes=[2]), {}),
    (11, helper.make_node("Softmax", ["x"], ["y"], axis=2), {}),
    (11, helper.make_node("LogSoftmax", ["x"], ["y"]), {}),
    (11, helper.make_node("Hardmax", ["x"], ["y"], axis=1), {}),
    (9, helper.make_node("Upsample", ["x", "sc"], ["y"], mode="nearest"),
     {"sc": np.array([1, 1, 2, 3], np.float32)}),
    (9, helper.make_node("Upsample", ["x", "sc"], ["y"], mode="linear"),
     {"sc": np.array([1, 1, 2, 1.5], np.float32)}),
    (10, helper.make_node("Resize", ["x", "sc"], ["y"], mode="linear"),
     {"sc": np.array([1, 1, 1.5, 2], np.float32)}),
    (7, helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], epsilon=1e-3),
     {"g": np.array([1, 2, 3], np.float32), "b": np.array([0, 1, -1], np.float32),
      "m": np.array([-8, -7, -6], np.float32), "v": np.array([1, 4, 9], np.float32)}),
    (7, helper.make_node("Dropout", ["x"], ["y"], ratio=0.3), {}),
    (9, helper.make_node("TopK", ["x"], ["y", "i"], k=2, axis=-1), {}),
    (8, helper.make_node("Max", ["x", "s"], ["y"]), {}),
    (7, helper.make_node("Gemm", ["f", "w", "c"], ["y"], transB=1, beta=0.5),
     {"w": np.ones((4, 60), np.float32) / 10, "c": np.arange(4, dtype=np.float32)}),
])
def test_older_opset_forms(opset, node, inits):
    """The forms ops had before their operands became inputs (or before a default changed),
    each at its old opset, as onnxruntime computes them."""
    feeds = {"x": _X, "s": _X[:, :1], "f": _X.reshape(2, 60)}
    used = {n: feeds[n] for n in node.input if n in feeds}
    m = _model([node], {n: (F, list(a.shape)) for n, a in used.items()}, list(node.output),
               inits, opset=opset)
    if node.op_type == "TopK":
        m.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    m.ir_version = 7
    _same_as_ort(m, used, tol=1e-6)
