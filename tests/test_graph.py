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


def _typed_model(nodes, inputs, outputs, inits=None, opset=18):
    """A model from ``inputs`` / ``outputs``: {name: (TensorProto type, shape or None)}."""
    g = helper.make_graph(nodes, "t",
                          [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                          [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
                          [numpy_helper.from_array(np.asarray(v), k)
                           for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("to, top, overflow", [
    (TensorProto.FLOAT8E4M3FN, 448.0, np.nan), (TensorProto.FLOAT8E4M3FNUZ, 240.0, np.nan),
    (TensorProto.FLOAT8E5M2, 57344.0, np.inf), (TensorProto.FLOAT8E5M2FNUZ, 57344.0, np.nan)])
def test_cast_to_float8_saturates_as_onnx_says(to, top, overflow):
    """ONNX's Cast tables: with saturate (the default) 1e6 and inf become the type's largest
    finite value, NaN stays NaN; without it E4M3FN / the FNUZ types give NaN, E5M2 gives inf."""
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 0.5], np.float32)
    for saturate, want in ((1, [top, -top, top, -top, np.nan, 0.5]),
                           (0, [overflow, -overflow, overflow, -overflow, np.nan, 0.5])):
        m = _typed_model([helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)],
                         {"x": (TensorProto.FLOAT, [6])}, {"y": (to, [6])}, opset=19)
        y = load(m).run(x)
        assert y.dtype == np.dtype(helper.tensor_dtype_to_np_dtype(to))
        got = y.astype(np.float64)
        if overflow != np.inf and not saturate:    # NaN has no sign in the FNUZ types
            got[:4] = np.abs(got[:4])
            want = [abs(v) for v in want[:4]] + want[4:]
        np.testing.assert_array_equal(got, np.array(want))


def test_cast_to_float8e8m0_rounds_by_round_mode():
    """float8e8m0 holds powers of two: 3 rounds up to 4, down to 2, to nearest 4 (ties up:
    1.5 * 2^k goes up); 5 goes to 4 except up; saturation keeps 1e39 at 2^127."""
    x = np.array([3, 5, 1.5, 1, 0.25, 1e39], np.float64)
    cases = {"up": [4, 8, 2, 1, 0.25, 2.0 ** 127], "down": [2, 4, 1, 1, 0.25, 2.0 ** 127],
             "nearest": [4, 4, 2, 1, 0.25, 2.0 ** 127]}
    for mode, want in cases.items():
        m = _typed_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0,
                                           round_mode=mode)],
                         {"x": (TensorProto.DOUBLE, [6])}, {"y": (TensorProto.FLOAT8E8M0, [6])},
                         opset=24)
        assert load(m).run(x).astype(np.float64).tolist() == want, mode


def test_storage_only_types_reach_only_cast_and_moves():
    """float8 moves (Reshape) but is not computed on (Add: refused by name, by onnx's type
    check or this runtime's); bfloat16 is computed in float32
    and rounded once: 1 + 2^-8 + 2^-8 is 1 + 2^-7 exactly, where bfloat16 steps would lose
    each 2^-8 to rounding half to even."""
    m = _typed_model([helper.make_node("Reshape", ["x", "s"], ["r"]),
                      helper.make_node("Add", ["r", "r"], ["y"], name="add")],
                     {"x": (TensorProto.FLOAT8E4M3FN, [2, 3])},
                     {"y": (TensorProto.FLOAT8E4M3FN, None)}, {"s": np.array([3, 2], np.int64)},
                     opset=19)
    with pytest.raises(ModelError, match=r"node 'add' \(Add\): .*float8"):
        load_graph(m)
    import ml_dtypes

    B = TensorProto.BFLOAT16
    m = _typed_model([helper.make_node("Sum", ["a", "b", "b"], ["y"])],
                     {"a": (B, [1]), "b": (B, [1])}, {"y": (B, [1])})
    bf = ml_dtypes.bfloat16
    y = load(m).run(a=np.array([1], bf), b=np.array([2 ** -8], bf))
    assert y.dtype == bf and y.astype(np.float64).tolist() == [1 + 2 ** -7]


def test_run_time_operands_are_read_on_each_run():
    """Slice bounds, a Reshape shape, Pad pads, Split sizes and Squeeze axes given as graph
    inputs: each run reads them, as onnxruntime does; the output shape the model declares is
    checked against what the run computes."""
    F, I = TensorProto.FLOAT, TensorProto.INT64
    nodes = [helper.make_node("Slice", ["x", "st", "en"], ["s"]),
             helper.make_node("Reshape", ["s", "shape"], ["r"]),
             helper.make_node("Pad", ["r", "pads"], ["p"]),
             helper.make_node("Split", ["p", "split"], ["a", "b"], axis=1),
             helper.make_node("Unsqueeze", ["a", "ax"], ["y"])]
    m = _typed_model(nodes, {"x": (F, [4, 6]), "st": (I, [2]), "en": (I, [2]), "shape": (I, [2]),
                             "pads": (I, [4]), "split": (I, [2]), "ax": (I, [1])},
                     {"y": (F, [1, 5, 1]), "b": (F, [5, 4])})
    model = load(m)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    feeds = {"x": x, "st": np.array([1, 0], np.int64), "en": np.array([3, 6], np.int64),
             "shape": np.array([3, 4], np.int64), "pads": np.array([1, 0, 1, 1], np.int64),
             "split": np.array([1, 4], np.int64), "ax": np.array([0], np.int64)}
    ref = ort_session(m.SerializeToString()).run(None, feeds)
    for got, want in zip(model.run(feeds), ref):
        assert got.shape == want.shape and np.array_equal(got, want)
    with pytest.raises(ModelError, match=r"node 'Reshape_1' \(Reshape\): shape = \[3, 4\] "
                                         r"cannot hold the 4 elements of \(1, 4\)"):
        model.run(dict(feeds, en=np.array([2, 4], np.int64)))
    with pytest.raises(ModelError, match=r"node 'Unsqueeze_4' \(Unsqueeze\) computed shape "
                                         r"\(5, 1, 1\) where the model's shapes say \(1, 5, 1\)"):
        model.run(dict(feeds, ax=np.array([1], np.int64)))
    with pytest.raises(ModelError, match=r"node 'Slice_0' \(Slice\): the shape of 's' is known only at "
                                         "run time; the opencl runtime does not run it"):
        model.run(feeds, runtime="opencl")


def test_batchnorm_statistics_at_run_time_and_training_mode():
    """Statistics as graph inputs: y = (x - mean) / sqrt(var + eps) * scale + B per channel;
    training_mode = 1: the batch's own mean and (biased) variance, and running statistics
    mean * momentum + batch * (1 - momentum)."""
    F = TensorProto.FLOAT
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s, b, mean = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2, 3).astype(np.float32)
    stats = {"s": s, "b": b, "mean": mean, "var": var}
    ins = {"x": (F, [2, 3, 4, 5]), **{k: (F, [3]) for k in stats}}
    c = (1, 3, 1, 1)
    m = _typed_model([helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"],
                                       ["y"], epsilon=1e-3)], ins, {"y": (F, [2, 3, 4, 5])})
    want = (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + 1e-3) * s.reshape(c) + b.reshape(c)
    assert rel_l2(load(m).run({"x": x, **stats}), want) < 1e-6
    m = _typed_model([helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"],
                                       ["y", "rm", "rv"], training_mode=1, momentum=0.8)], ins,
                     {"y": (F, [2, 3, 4, 5]), "rm": (F, [3]), "rv": (F, [3])})
    bm, bv = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    y, rm, rv = load(m).run({"x": x, **stats})
    want = (x - bm.reshape(c)) / np.sqrt(bv.reshape(c) + 1e-5) * s.reshape(c) + b.reshape(c)
    assert rel_l2(y, want) < 1e-6
    assert np.allclose(rm, mean * 0.8 + bm * 0.2, rtol=1e-6)
    assert np.allclose(rv, var * 0.8 + bv * 0.2, rtol=1e-6)


def test_dropout_training_mode_at_run_time():
    """training_mode as a graph input: false (or a ratio of 0) is the identity with an all-true
    mask; true with a ratio above 0 is refused on that run, by name."""
    F, B = TensorProto.FLOAT, TensorProto.BOOL
    m = _typed_model([helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], name="drop")],
                     {"x": (F, [2, 3]), "r": (F, []), "t": (B, [])},
                     {"y": (F, [2, 3]), "mask": (B, [2, 3])})
    model = load(m)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for r, t in ((0.5, False), (0.0, True)):
        y, mask = model.run({"x": x, "r": np.array(r, np.float32), "t": np.array(t)})
        assert np.array_equal(y, x) and mask.all() and mask.dtype == bool
    with pytest.raises(ModelError, match=r"node 'drop' \(Dropout\): training_mode = true"):
        model.run({"x": x, "r": np.array(0.5, np.float32), "t": np.array(True)})


def test_maxpool_on_uint8_folds():
    """A MaxPool of a uint8 constant (padded: the padding must lose to every uint8 value) is
    folded at load; its result, cast and added, equals the window maxima worked out here."""
    c = (np.arange(32) * 7 % 256).astype(np.uint8).reshape(1, 2, 4, 4)
    m = _typed_model([helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[2, 2],
                                       pads=[1, 1, 1, 1], strides=[2, 2]),
                      helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
                      helper.make_node("Add", ["x", "mf"], ["y"])],
                     {"x": (TensorProto.FLOAT, [1, 2, 3, 3])}, {"y": (TensorProto.FLOAT, None)},
                     {"c": c}, opset=12)
    graph = load_graph(m)
    assert [n.op for n in graph.nodes] == ["Add"]
    padded = np.zeros((1, 2, 6, 6), np.int64)
    padded[:, :, 1:5, 1:5] = c
    want = padded.reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5)).astype(np.float32)
    assert np.array_equal(load(m).run(np.zeros((1, 2, 3, 3), np.float32)), want)


def test_a_shape_inference_failure_names_the_node():
    F = TensorProto.FLOAT
    m = _typed_model([helper.make_node("Relu", ["x"], ["r"]),
                      helper.make_node("Add", ["r", "z"], ["y"], name="bad")],
                     {"x": (F, [2, 3]), "z": (F, [4, 5])}, {"y": (F, None)})
    with pytest.raises(ModelError, match=r"node 'bad' \(Add\): shape inference failed"):
        load_graph(m)


def test_resize_scales_at_run_time_give_each_run_its_shape():
    """Scales as a graph input and no declared output shape: the output's shape is known only
    at run time, and each run resizes by the scales it is given, as onnxruntime does."""
    F = TensorProto.FLOAT
    m = _typed_model([helper.make_node("Resize", ["x", "", "s"], ["r"], mode="linear"),
                      helper.make_node("Relu", ["r"], ["y"])],
                     {"x": (F, [1, 2, 3, 4]), "s": (F, [4])}, {"y": (F, None)})
    model = load(m)
    assert "y" not in model.graph.shapes
    x = np.random.default_rng(3).standard_normal((1, 2, 3, 4)).astype(np.float32)
    sess = ort_session(m.SerializeToString())
    for s in ([1, 1, 2, 2], [1, 1, 0.5, 1.5]):
        feeds = {"x": x, "s": np.array(s, np.float32)}
        y, want = model.run(feeds), sess.run(None, feeds)[0]
        assert y.shape == want.shape and rel_l2(y, want) < 1e-6


def test_integer_div_truncates_exactly_and_refuses_a_zero_divisor():
    """int64 Div truncates toward zero without passing through float64 (2^62 + 1 has no
    float64 of its own), as onnxruntime computes it; a zero divisor is refused by name."""
    I = TensorProto.INT64
    m = _typed_model([helper.make_node("Div", ["a", "b"], ["y"], name="div")],
                     {"a": (I, [5]), "b": (I, [5])}, {"y": (I, [5])})
    a = np.array([7, -7, 7, -7, 2**62 + 1], np.int64)
    b = np.array([2, 2, -2, -2, 3], np.int64)
    y = load(m).run(a=a, b=b)
    assert y.tolist() == ort_session(m.SerializeToString()).run(None, {"a": a, "b": b})[0].tolist()
    assert y.tolist() == [3, -3, -3, 3, (2**62 + 1) // 3]
    with pytest.raises(ModelError, match=r"node 'div' \(Div\): an integer divisor is 0"):
        load(m).run(a=a, b=np.array([1, 1, 0, 1, 1], np.int64))
