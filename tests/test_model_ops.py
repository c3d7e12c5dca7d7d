"""Every operator and attribute of the CPU runtime, one small graph each, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from _model_util import compare, helper, make_model, numpy_helper, TensorProto

R = np.random.default_rng(7)


def rnd(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def i64(*v):
    return np.array(v, np.int64)


# ---------------------------------------------------------------------------- Conv
CONV_CASES = [
    # x shape, w shape, attrs, bias
    ((1, 3, 7, 9), (5, 3, 1, 1), {}, True),
    ((1, 3, 7, 9), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True),
    ((2, 4, 11, 10), (6, 4, 5, 5), dict(pads=[2, 2, 2, 2]), False),
    ((1, 3, 15, 13), (8, 3, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2]), True),
    ((1, 4, 13, 13), (4, 4, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), True),
    ((1, 6, 9, 9), (8, 3, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True),
    ((1, 8, 9, 11), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1]), True),            # depthwise
    ((1, 8, 10, 10), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1], strides=[2, 2]), False),
    ((1, 4, 9, 9), (16, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1]), True),            # multiplier 4
    ((1, 3, 8, 9), (4, 3, 3, 3), dict(pads=[0, 1, 1, 0]), True),                      # asymmetric
    ((1, 3, 8, 8), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2]), True),
    ((1, 3, 8, 8), (4, 3, 3, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2]), True),
    ((1, 3, 8, 7), (4, 3, 2, 2), dict(auto_pad="SAME_UPPER"), True),
    ((1, 3, 8, 7), (4, 3, 3, 3), dict(auto_pad="VALID"), True),
    ((1, 16, 22, 21), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1]), True),                  # shifted GEMM
    ((1, 16, 9, 9), (24, 16, 3, 3), dict(pads=[1, 1, 1, 1]), True),                    # shifted GEMM
    ((1, 40, 12, 13), (36, 40, 3, 3), dict(pads=[1, 1, 1, 1]), True),                  # direct
    ((1, 32, 11, 25), (20, 32, 3, 3), dict(pads=[0, 1, 1, 0], strides=[2, 2]), False),  # direct
    ((1, 3, 6, 10), (4, 3, 1, 3), dict(pads=[0, 1, 0, 1]), True),                       # non-square
]


@pytest.mark.parametrize("xs, ws, attrs, bias", CONV_CASES)
def test_conv(xs, ws, attrs, bias):
    x, w = rnd(*xs), rnd(*ws, scale=0.3)
    inits = {"w": w}
    ins = ["x", "w"]
    if bias:
        inits["b"] = rnd(ws[0])
        ins.append("b")
    compare([helper.make_node("Conv", ins, ["y"], **attrs)], {"x": x}, ["y"], inits)


def test_conv_then_batchnorm_folds_and_agrees():
    from tensorlayout.model import load
    from _model_util import make_model

    x = rnd(1, 4, 9, 9)
    inits = {"w": rnd(6, 4, 3, 3, scale=0.3), "g": rnd(6) + 1, "b": rnd(6), "m": rnd(6),
             "v": np.abs(rnd(6)) + 0.5}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], epsilon=1e-3)]
    compare(nodes, {"x": x}, ["y"], inits)
    m = load(make_model(nodes, {"x": x}, ["y"], inits).SerializeToString())
    assert [s.node.op for s in m.steps] == ["Conv"]
    assert m.steps[0].info["folded"]


def test_batchnorm_alone():
    x = rnd(2, 5, 3, 4)
    inits = {"g": rnd(5) + 1, "b": rnd(5), "m": rnd(5), "v": np.abs(rnd(5)) + 0.1}
    compare([helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "g", "b", "m", "v"], ["y"])],
            {"x": x}, ["y"], inits)


# ---------------------------------------------------------------------------- activations
@pytest.mark.parametrize("op, attrs, opset", [
    ("Relu", {}, 17), ("Sigmoid", {}, 17), ("Tanh", {}, 17), ("LeakyRelu", {}, 17),
    ("LeakyRelu", dict(alpha=0.3), 17), ("HardSigmoid", {}, 17),
    ("HardSigmoid", dict(alpha=0.3, beta=0.4), 17), ("HardSwish", {}, 17),
    ("Identity", {}, 17), ("Dropout", {}, 17), ("Softmax", {}, 17), ("Softmax", dict(axis=1), 17),
    ("Softmax", dict(axis=1), 11), ("Softmax", {}, 11),
])
def test_unary(op, attrs, opset):
    x = rnd(2, 3, 5, 7, scale=4)
    compare([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"], opset=opset)


def test_activation_after_a_reader_is_not_written_in_place():
    # 'a' is read by Relu (its last reader) and, earlier, by Flatten whose view is an output
    x = rnd(1, 4, 3, 3)
    compare([helper.make_node("Sigmoid", ["x"], ["a"]),
             helper.make_node("Flatten", ["a"], ["f"]),
             helper.make_node("Relu", ["a"], ["y"]),
             helper.make_node("Identity", ["f"], ["g"])],
            {"x": x}, ["y", "g"])


@pytest.mark.parametrize("lo, hi", [(-0.5, 0.7), (None, 0.2), (0.0, None), (None, None), (0.0, 6.0)])
def test_clip_inputs(lo, hi):
    x = rnd(1, 3, 4, 5, scale=3)
    inits, ins = {}, ["x"]
    ins.append("lo" if lo is not None else "")
    if lo is not None:
        inits["lo"] = np.float32(lo)
    if hi is not None:
        ins.append("hi")
        inits["hi"] = np.float32(hi)
    while ins and ins[-1] == "":
        ins.pop()
    compare([helper.make_node("Clip", ins, ["y"])], {"x": x}, ["y"], inits)


# ---------------------------------------------------------------------------- binary ops
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("sa, sb", [((1, 8, 5, 7), (1, 8, 1, 1)), ((1, 8, 5, 7), (7,)),
                                    ((2, 1, 5, 1), (1, 3, 1, 4)), ((1, 3, 5, 7), ()),
                                    ((3, 5), (2, 1, 3, 5))])
def test_binary_broadcast(op, sa, sb):
    a, b = rnd(*sa), rnd(*sb) if sb else np.float32(R.standard_normal())
    if op == "Div":
        b = np.where(np.abs(b) < 0.2, 1.0, b).astype(np.float32)
    compare([helper.make_node(op, ["a", "b"], ["y"])], {"a": a}, ["y"], {"b": np.asarray(b)})


def test_binary_both_runtime_and_squeeze_excitation():
    x = rnd(1, 16, 6, 5)
    inits = {"w1": rnd(4, 16, 1, 1, scale=0.3), "b1": rnd(4), "w2": rnd(16, 4, 1, 1, scale=0.3),
             "b2": rnd(16)}
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
             helper.make_node("Conv", ["p", "w1", "b1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["s2"]),
             helper.make_node("Conv", ["s2", "w2", "b2"], ["s3"]),
             helper.make_node("HardSigmoid", ["s3"], ["s4"], alpha=1 / 6),
             helper.make_node("Mul", ["x", "s4"], ["m"]),
             helper.make_node("Add", ["m", "x"], ["y"])]
    compare(nodes, {"x": x}, ["y"], inits)


# ---------------------------------------------------------------------------- shape ops
def test_concat_axes():
    a, b = rnd(1, 3, 4, 5), rnd(1, 2, 4, 5)
    compare([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)], {"a": a, "b": b}, ["y"])
    c = rnd(1, 3, 4, 2)
    compare([helper.make_node("Concat", ["a", "c"], ["y"], axis=-1)], {"a": a, "c": c}, ["y"])


@pytest.mark.parametrize("opset, how", [(13, "input"), (11, "attr"), (13, "equal"), (18, "num_outputs")])
def test_split(opset, how):
    x = rnd(1, 6, 4, 5)
    inits, ins, attrs, outs = {}, ["x"], dict(axis=1), ["y0", "y1"]
    if how == "input":
        ins.append("s")
        inits["s"] = i64(2, 4)
    elif how == "attr":
        attrs["split"] = [1, 5]
    elif how == "num_outputs":
        attrs["num_outputs"] = 2
    compare([helper.make_node("Split", ins, outs, **attrs)], {"x": x}, outs, inits, opset=opset)


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1], [3], [1], None), ([0, 1], [2, -1], [2, 3], [1, 2]), ([-1], [-10**18], [3], [-1]),
    ([2], [2**62], [2], None), ([5, 0], [0, 3], [3, 1], [-2, 1]), ([0], [1], [-3], None),
])
def test_slice(starts, ends, axes, steps):
    x = rnd(2, 4, 5, 7)
    inits = {"st": i64(*starts), "en": i64(*ends), "ax": i64(*axes)}
    ins = ["x", "st", "en", "ax"]
    if steps:
        inits["sp"] = i64(*steps)
        ins.append("sp")
    compare([helper.make_node("Slice", ins, ["y"])], {"x": x}, ["y"], inits)


@pytest.mark.parametrize("shape", [(0, -1), (2, 3, -1), (-1,), (1, 0, 20, 1)])
def test_reshape(shape):
    x = rnd(1, 6, 4, 5)
    compare([helper.make_node("Reshape", ["x", "s"], ["y"])], {"x": x}, ["y"], {"s": i64(*shape)})


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 4])
def test_flatten(axis):
    compare([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], {"x": rnd(2, 3, 4, 5)}, ["y"])


def test_transpose_channel_shuffle_and_default_perm():
    x = rnd(1, 6, 3, 4)
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["b", "s2"], ["y"]),
             helper.make_node("Transpose", ["x"], ["z"])]
    compare(nodes, {"x": x}, ["y", "z"], {"s1": i64(1, 2, 3, 3, 4), "s2": i64(1, -1, 3, 4)})


@pytest.mark.parametrize("opset, sq_axes, unsq_axes", [(13, [0, 2], [1, -1]), (11, [2], [0]),
                                                      (13, None, [0])])
def test_squeeze_unsqueeze(opset, sq_axes, unsq_axes):
    x = rnd(1, 3, 1, 4)
    inits = {}
    if opset >= 13:
        sq_in = ["x"] + (["sa"] if sq_axes is not None else [])
        if sq_axes is not None:
            inits["sa"] = i64(*sq_axes)
        inits["ua"] = i64(*unsq_axes)
        nodes = [helper.make_node("Squeeze", sq_in, ["a"]),
                 helper.make_node("Unsqueeze", ["a", "ua"], ["y"])]
    else:
        nodes = [helper.make_node("Squeeze", ["x"], ["a"], axes=sq_axes),
                 helper.make_node("Unsqueeze", ["a"], ["y"], axes=unsq_axes)]
    compare(nodes, {"x": x}, ["y"], inits, opset=opset)


@pytest.mark.parametrize("mode, pads, value", [
    ("constant", [0, 0, 1, 2, 0, 0, 3, 0], 0.0), ("constant", [0, 1, 0, 0, 0, 0, 2, 1], 1.5),
    ("reflect", [0, 0, 2, 1, 0, 0, 1, 2], None), ("edge", [0, 0, 1, 3, 0, 0, 2, 0], None),
    ("constant", [0, 0, -1, 1, 0, 0, 1, -2], 0.5),
])
def test_pad(mode, pads, value):
    x = rnd(1, 2, 5, 6)
    inits, ins = {"p": i64(*pads)}, ["x", "p"]
    if value is not None:
        inits["v"] = np.float32(value)
        ins.append("v")
    compare([helper.make_node("Pad", ins, ["y"], mode=mode)], {"x": x}, ["y"], inits)


def test_pad_axes_opset18():
    x = rnd(1, 2, 5, 6)
    compare([helper.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="edge")], {"x": x}, ["y"],
            {"p": i64(1, 2, 0, 3), "a": i64(2, 3)}, opset=18)


# ---------------------------------------------------------------------------- pooling
@pytest.mark.parametrize("op, attrs, xs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (1, 3, 11, 12)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), (1, 3, 13, 14)),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2]), (2, 3, 7, 9)),
    ("MaxPool", dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 2, 2, 1]), (1, 2, 9, 10)),
    ("MaxPool", dict(kernel_shape=[3, 2], strides=[2, 1], auto_pad="SAME_UPPER"), (1, 2, 9, 8)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"), (1, 2, 8, 8)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (1, 3, 11, 12)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=1), (1, 3, 11, 12)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), (1, 3, 12, 13)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 1, 1, 1],
                         count_include_pad=1), (1, 2, 12, 13)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 0, 1, 0],
                         count_include_pad=0), (1, 2, 10, 11)),
    ("AveragePool", dict(kernel_shape=[2, 3], auto_pad="SAME_UPPER"), (1, 2, 7, 6)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]), (1, 2, 5, 5)),
])
def test_pool(op, attrs, xs):
    compare([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": rnd(*xs)}, ["y"], opset=19)


@pytest.mark.parametrize("opset", [17, 22])
@pytest.mark.parametrize("op, attrs, xs", [
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1]), (1, 8, 7, 22)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1]), (2, 4, 8, 9)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=1), (1, 8, 8, 22)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 0, 1, 0]), (1, 3, 7, 8)),
    ("MaxPool", dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], pads=[1] * 6), (1, 2, 5, 7, 6)),
    ("MaxPool", dict(kernel_shape=[2], strides=[2], pads=[1, 1]), (1, 3, 9)),
    ("LpPool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1]), (1, 2, 7, 9)),
])
def test_ceil_mode_drops_a_window_that_would_start_in_the_end_padding(opset, op, attrs, xs):
    """In ceil mode, a last window that would start inside the end padding is dropped (as
    onnxruntime and PyTorch compute, and ONNX from opset 22), at every opset; onnx's shape
    inference keeps it before opset 22, and the tensors after the pooling (a Relu and a
    reshape to one row per image) take the dropped size too.  onnxruntime's results."""
    from tensorlayout.graph import load_graph
    from tensorlayout.graph.ops import pool_output_side

    x = rnd(*xs)
    d = len(xs) - 2
    p = attrs["pads"]
    opset = max(opset, 18) if op == "LpPool" else opset     # its ceil_mode came in 18
    out = [pool_output_side(n, k, s, 1, b, e, True) for n, k, s, b, e in
           zip(xs[2:], attrs["kernel_shape"], attrs["strides"], p[:d], p[d:])]
    assert any(o < -(-(n + b + e - k) // s) + 1 for o, n, k, s, b, e in
               zip(out, xs[2:], attrs["kernel_shape"], attrs["strides"], p[:d], p[d:]))
    nodes = [helper.make_node(op, ["x"], ["p"], ceil_mode=1, **attrs),
             helper.make_node("Relu", ["p"], ["r"]),
             helper.make_node("Reshape", ["r", "s"], ["y"])]
    inits = {"s": i64(xs[0], -1)}
    g = load_graph(make_model(nodes, {"x": x}, ["y"], inits, opset=opset).SerializeToString())
    assert g.shapes["p"] == (*xs[:2], *out) and g.shapes["r"] == g.shapes["p"]
    assert g.shapes["y"] == (xs[0], xs[1] * int(np.prod(out)))
    compare(nodes, {"x": x}, ["y"], inits, opset=opset)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op):
    compare([helper.make_node(op, ["x"], ["y"])], {"x": rnd(2, 5, 7, 3)}, ["y"])


@pytest.mark.parametrize("opset, axes, keep", [(17, [2, 3], 1), (17, [-1], 0), (17, None, 1),
                                               (18, [1, 3], 0), (18, None, 0)])
def test_reduce_mean(opset, axes, keep):
    x = rnd(2, 3, 4, 5)
    inits, ins, attrs = {}, ["x"], dict(keepdims=keep)
    if axes is not None:
        if opset >= 18:
            inits["a"] = i64(*axes)
            ins.append("a")
        else:
            attrs["axes"] = axes
    compare([helper.make_node("ReduceMean", ins, ["y"], **attrs)], {"x": x}, ["y"], inits,
            opset=opset)


# ---------------------------------------------------------------------------- matrices
@pytest.mark.parametrize("ta, tb, alpha, beta, cshape", [
    (0, 0, 1.0, 1.0, (6,)), (0, 1, 1.0, 1.0, (1, 6)), (1, 0, 0.5, 2.0, (5, 6)),
    (1, 1, 2.0, 0.5, ()), (0, 1, 1.0, 1.0, None),
])
def test_gemm(ta, tb, alpha, beta, cshape):
    a = rnd(*((7, 5) if ta else (5, 7)))
    b = rnd(*((6, 7) if tb else (7, 6)))
    inits, ins = {"b": b}, ["a", "b"]
    if cshape is not None:
        inits["c"] = rnd(*cshape) if cshape else np.float32(0.3)
        ins.append("c")
    compare([helper.make_node("Gemm", ins, ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta)],
            {"a": a}, ["y"], inits)


def test_gemm_and_matmul_with_runtime_operands():
    a, b, c = rnd(4, 3), rnd(3, 5), rnd(4, 5)
    compare([helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.7, beta=1.3)],
            {"a": a, "b": b, "c": c}, ["y"])
    compare([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": rnd(2, 4, 3), "b": b}, ["y"])


def test_matmul_const():
    compare([helper.make_node("MatMul", ["a", "w"], ["y"])], {"a": rnd(3, 2, 9)}, ["y"],
            {"w": rnd(9, 4)})


# ---------------------------------------------------------------------------- resize
RESIZE_CASES = [
    ("nearest", "asymmetric", "floor", [1, 1, 2, 2], None),
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 1.5, 2.5], None),
    ("nearest", "half_pixel", "round_prefer_ceil", [1, 1, 0.5, 0.75], None),
    ("nearest", "align_corners", "round_prefer_floor", None, [1, 2, 9, 4]),
    ("nearest", "tf_half_pixel_for_nn", "ceil", [1, 1, 2, 3], None),
    ("nearest", "pytorch_half_pixel", "floor", None, [1, 2, 1, 11]),
    ("linear", "half_pixel", None, [1, 1, 2, 2], None),
    ("linear", "align_corners", None, None, [1, 2, 11, 3]),
    ("linear", "asymmetric", None, [1, 1, 1.5, 0.6], None),
    ("linear", "pytorch_half_pixel", None, None, [1, 2, 1, 9]),
    ("linear", "half_pixel", None, [1, 1, 0.5, 0.5], None),
]


@pytest.mark.parametrize("mode, coord, nearest, scales, sizes", RESIZE_CASES)
def test_resize(mode, coord, nearest, scales, sizes):
    x = rnd(1, 2, 5, 6)
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    if nearest:
        attrs["nearest_mode"] = nearest
    inits = {"roi": np.zeros(0, np.float32)}
    if scales is not None:
        inits["sc"] = np.array(scales, np.float32)
        ins = ["x", "roi", "sc"]
    else:
        inits["sc"] = np.zeros(0, np.float32)
        inits["sz"] = i64(*sizes)
        ins = ["x", "roi", "sc", "sz"]
    compare([helper.make_node("Resize", ins, ["y"], **attrs)], {"x": x}, ["y"], inits, opset=13)


def test_resize_opset11_and_19_forms():
    x = rnd(1, 2, 4, 5)
    compare([helper.make_node("Resize", ["x", "roi", "sc"], ["y"], mode="nearest")], {"x": x},
            ["y"], {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)},
            opset=11)
    compare([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear")], {"x": x},
            ["y"], {"sc": np.array([1, 1, 2, 3], np.float32)}, opset=19)


# ---------------------------------------------------------------------------- folding
def test_shape_gather_concat_chain_folds():
    """The chain exporters write for x.view(x.size(0), -1): folded at load, not run."""
    from tensorlayout.model import load
    from _model_util import make_model

    x = rnd(2, 3, 4, 5)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Cast", ["shape"], ["shape64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "shape64"], ["r"]),
             helper.make_node("ConstantOfShape", ["cs"], ["ones"],
                              value=numpy_helper.from_array(np.array([2.0], np.float32))),
             helper.make_node("Mul", ["r", "ones"], ["y"])]
    inits = {"ax": i64(0), "minus1": i64(-1), "cs": i64(60)}
    compare(nodes, {"x": x}, ["y"], inits)
    m = load(make_model(nodes, {"x": x}, ["y"], inits).SerializeToString())
    assert [s.node.op for s in m.steps] == ["Reshape", "Mul"]


def test_constant_forms_and_shape_start_end():
    x = rnd(2, 3, 4, 5)
    nodes = [helper.make_node("Constant", [], ["c"], value_float=2.5),
             helper.make_node("Constant", [], ["d"], value_floats=[1.0, 2.0, 3.0, 4.0, 5.0]),
             helper.make_node("Shape", ["x"], ["s"], start=2, end=3),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "c"], ["a"]),
             helper.make_node("Add", ["a", "d"], ["b"]),
             helper.make_node("Div", ["b", "sf"], ["y"])]
    compare(nodes, {"x": x}, ["y"], opset=15)


def test_gather_at_run_time():
    x = rnd(3, 5, 2)
    compare([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], {"x": x}, ["y"],
            {"i": i64(4, -1, 0, 2)})


def test_multiple_inputs_and_outputs_by_name():
    a, b = rnd(1, 2, 3, 3), rnd(1, 2, 3, 3)
    compare([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["a", "b"], ["p"])],
            {"a": a, "b": b}, ["s", "p"])
