"""Each op of the OpenCL network runtime on real images against onnxruntime: odd channel
counts (1, 3, 5, 7), odd sizes, batch > 1, float32 and float16 images; errors and limits."""

from __future__ import annotations

import numpy as np
import pytest

from tensorlayout.errors import DeviceLimitError, LayoutError

cl = pytest.importorskip("pyopencl", reason="PyOpenCL is not installed (extra 'opencl')")

from _model_util import helper, make_model, opencl_context, ort_session, rel_l2  # noqa: E402

from tensorlayout.model import load  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def cctx():
    return opencl_context()


RNG = np.random.default_rng(13)


def rnd(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run_both(nodes, inputs, outputs, inits=None, opset=17, **kw):
    from tensorlayout.model import OpenCLSession

    data = make_model(nodes, inputs, outputs, inits, opset).SerializeToString()
    sess = OpenCLSession(load(data), **kw)
    ours = sess.run(dict(inputs))
    ref = ort_session(data).run(None, dict(inputs))
    ours = ours if isinstance(ours, list) else [ours]
    return sess, ours, ref


def check(nodes, inputs, outputs, inits=None, tol=1e-5, half=False, **kw):
    sess, ours, ref = run_both(nodes, inputs, outputs, inits, half=half, **kw)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        assert np.isfinite(a).all()
        err = rel_l2(a, b)
        # half images: 11-bit significands at every tensor (and in Winograd's V and M)
        assert err <= (1e-2 if half else tol), err
    return sess


def conv_node(x, w, b, y, **attrs):
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [y], **attrs)


@pytest.mark.parametrize("C,O,k,stride,pads,dil,N,H,W", [
    (1, 3, 3, 1, [1, 1, 1, 1], 1, 1, 7, 9),
    (3, 5, 5, 2, [2, 1, 0, 2], 1, 2, 9, 7),
    (5, 7, 1, 1, [0, 0, 0, 0], 1, 2, 5, 3),
    (7, 1, 3, 1, [2, 2, 2, 2], 2, 1, 6, 11),
    (5, 9, 1, 2, [0, 0, 0, 0], 1, 3, 7, 7),
])
def test_conv_direct(C, O, k, stride, pads, dil, N, H, W):
    x, w, b = rnd(N, C, H, W), rnd(O, C, k, k), rnd(O)
    sess = check([conv_node("x", "w", "b", "y", strides=[stride] * 2, pads=pads, dilations=[dil] * 2)],
                 {"x": x}, ["y"], {"w": w, "b": b}, winograd=0)
    assert sess.layers[0].kind.endswith("direct")
    assert [t for _, t, _ in sess.layers[0].weights] == ["ARGUMENT", "CONV2D_FILTER"]


@pytest.mark.parametrize("tile", [2, 4, 6])
@pytest.mark.parametrize("half", [False, True])
def test_conv_winograd_tiles(tile, half):
    C, O = (5, 7) if tile != 4 else (16, 20)
    x, w, b = rnd(2, C, 9, 11), rnd(O, C, 3, 3), rnd(O)
    sess = check([conv_node("x", "w", "b", "c", pads=[1, 0, 1, 2]),
                  helper.make_node("Relu", ["c"], ["y"])],
                 {"x": x}, ["y"], {"w": w, "b": b}, half=half, winograd=tile)
    layer = sess.layers[0]
    assert layer.kind == f"conv 3x3 Winograd F({tile},3)" and layer.fused == ["Relu Relu_1"] or \
        layer.fused[0].startswith("Relu")
    assert "WINOGRAD_FILTER" in [t for _, t, _ in layer.weights]


@pytest.mark.parametrize("block", [(4, 1), (8, 1), (8, 2)])
def test_winograd_gemm_blockings(block, monkeypatch):
    # Each GEMM blocking on its own, on tiles (30 at tile 2, 12 at tile 4) and output
    # channels (13: the last group of 4 holds one) that do not fill its blocks: rows of U
    # past O must not reach a channel that is written.
    from tensorlayout.schedule import image_ops as network

    monkeypatch.setattr(network, "_GEMM_BLOCKS", (block,))
    for tile in (2, 4):
        x, w, b = rnd(2, 9, 5, 9), rnd(13, 9, 3, 3), rnd(13)
        sess = check([conv_node("x", "w", "b", "y", pads=[1, 1, 1, 1])], {"x": x}, ["y"],
                     {"w": w, "b": b}, winograd=tile)
        assert [ln.kernel for _, ln in sess.launches()][1] == f"wino_matmul_{block[0]}x{block[1]}"


@pytest.mark.parametrize("C,O,k,stride,act", [(67, 13, 3, 2, "Relu"), (400, 9, 1, 1, None),
                                              (45, 4, 3, 1, "Relu")])
def test_direct_conv_split_over_input_channels(C, O, k, stride, act, monkeypatch):
    # As a GPU splits small layers with long sums: slices of the input channel blocks (17,
    # 100 and 12 blocks, in 4, 25 and 3 slices, the first uneven), their float32 sums added
    # with the bias, then the activation.
    from tensorlayout.schedule import image_ops as network

    monkeypatch.setitem(network._SPLIT_ITEMS, False, 16384)
    x, w, b = rnd(2, C, 9, 11), rnd(O, C, k, k), rnd(O)
    nodes = [conv_node("x", "w", "b", "c" if act else "y", strides=[stride] * 2,
                       pads=[k // 2] * 4)]
    if act:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    sess = check(nodes, {"x": x}, ["y"], {"w": w, "b": b}, winograd=0)
    assert [ln.kernel for _, ln in sess.launches()] == ["conv2d_split", "conv2d_sum"]
    assert "channel slices" in sess.layers[0].kind


@pytest.mark.parametrize("block", [(4, 1), (8, 2)])
def test_winograd_gemm_split_over_input_channels(block, monkeypatch):
    # As a GPU runs small layers: the GEMM's sums in slices of the input channel blocks (70
    # channels: 18 blocks in 2 slices of 9), each in its own rows of M, added by the output
    # stage before the bias and the activation.
    from tensorlayout.schedule import image_ops as network

    monkeypatch.setitem(network._GEMM_SPLIT_ITEMS, False, 10**6)
    monkeypatch.setattr(network, "_GEMM_BLOCKS", (block,))
    x, w, b = rnd(2, 70, 6, 7), rnd(13, 70, 3, 3), rnd(13)
    sess = check([conv_node("x", "w", "b", "c", pads=[1] * 4), helper.make_node("Relu", ["c"], ["y"])],
                 {"x": x}, ["y"], {"w": w, "b": b}, winograd=2)
    assert "GEMM over 2 channel slices" in sess.layers[0].kind


def test_tuner_picks_a_gemm_blocking(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLAYOUT_CACHE", str(tmp_path))
    x, w = rnd(1, 6, 10, 9), rnd(11, 6, 3, 3)
    sess = check([conv_node("x", "w", None, "y", pads=[1] * 4)], {"x": x}, ["y"], {"w": w},
                 winograd=2, tune=True)        # the chosen variant gives the same result
    gemm = sess.launches()[1][1]
    assert (gemm.kernel, gemm.base_gsize) in gemm.variants and len(gemm.variants) == 3
    again = check([conv_node("x", "w", None, "y", pads=[1] * 4)], {"x": x}, ["y"], {"w": w},
                  winograd=2, tune=True)       # read back from the cache: the same choice
    assert again.launches()[1][1].kernel == gemm.kernel


@pytest.mark.parametrize("C,stride,k", [(1, 1, 3), (5, 2, 3), (7, 1, 5), (12, 2, 3)])
def test_depthwise(C, stride, k):
    x, w, b = rnd(2, C, 9, 7), rnd(C, 1, k, k), rnd(C)
    sess = check([conv_node("x", "w", "b", "y", group=C, strides=[stride] * 2, pads=[k // 2] * 4)],
                 {"x": x}, ["y"], {"w": w, "b": b})
    if C == 1:                       # group 1: an ordinary convolution
        assert sess.layers[0].kind == f"conv {k}x{k} direct"
        return
    assert sess.layers[0].kind.startswith("depthwise")
    assert [t for _, t, _ in sess.layers[0].weights][-1] == "DW_CONV2D_FILTER"


@pytest.mark.parametrize("C,O,g", [(6, 10, 2), (9, 3, 3), (10, 15, 5)])
def test_grouped_conv(C, O, g):
    x, w = rnd(2, C, 5, 6), rnd(O, C // g, 3, 3)
    sess = check([conv_node("x", "w", None, "y", group=g, pads=[1] * 4)], {"x": x}, ["y"], {"w": w})
    assert sess.layers[0].kind.startswith("grouped")


@pytest.mark.parametrize("act,attrs,extra", [
    ("Relu", {}, []), ("LeakyRelu", {"alpha": 0.1}, []), ("Sigmoid", {}, []),
    ("HardSwish", {}, []), ("Clip", {}, ["lo", "hi"]), ("Tanh", {}, []),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, []),
])
def test_fused_activations(act, attrs, extra):
    x, w, b = rnd(1, 3, 6, 5) * 3, rnd(5, 3, 3, 3), rnd(5)
    inits = {"w": w, "b": b, "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    sess = check([conv_node("x", "w", "b", "c", pads=[1] * 4),
                  helper.make_node(act, ["c"] + extra, ["y"], **attrs)],
                 {"x": x}, ["y"], inits)
    assert len(sess.layers) == 1 and sess.layers[0].fused[0].startswith(act)


def test_activation_unfused_when_tensor_has_two_readers():
    x, w = rnd(1, 3, 5, 5), rnd(5, 3, 1, 1)
    sess = check([conv_node("x", "w", None, "c"), helper.make_node("Relu", ["c"], ["r"]),
                  helper.make_node("Add", ["c", "r"], ["y"])], {"x": x}, ["y"], {"w": w})
    assert [la.op for la in sess.layers] == ["Conv", "Relu", "Add"]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("half", [False, True])
def test_eltwise_broadcasting(op, half):
    a, b = rnd(2, 5, 3, 7), rnd(2, 5, 3, 7)
    per_c = np.abs(rnd(1, 5, 1, 1)) + 0.5
    pooled = np.abs(rnd(2, 5, 1, 1)) + 0.5
    nodes = [helper.make_node(op, ["a", "b"], ["s"]),                 # same shape
             helper.make_node(op, ["s", "k"], ["t"]),                 # per-channel constant
             helper.make_node(op, ["p", "t"], ["u"]),                 # broadcast operand first
             helper.make_node(op, ["u", "one"], ["y"])]               # scalar constant
    check(nodes, {"a": a, "b": b, "p": pooled}, ["y"],
          {"k": per_c, "one": np.array(1.5, np.float32)}, half=half, tol=1e-6)


def test_eltwise_one_channel_and_2d():
    a, m = rnd(2, 7, 4, 3), rnd(2, 1, 4, 3)
    g = rnd(3, 9)
    check([helper.make_node("Mul", ["a", "m"], ["y"]),
           helper.make_node("Add", ["g", "v"], ["z"]),
           helper.make_node("Sub", ["kf", "a"], ["u"])],          # a constant of the full shape first
          {"a": a, "m": m, "g": g}, ["y", "z", "u"], {"v": rnd(9), "kf": rnd(2, 7, 4, 3)})


@pytest.mark.parametrize("half", [False, True])
def test_pools(half):
    x = rnd(2, 7, 11, 9)
    nodes = [helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
             helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 2], strides=[2, 1],
                              pads=[1, 0, 1, 1]),
             helper.make_node("AveragePool", ["x"], ["b"], kernel_shape=[3, 3], strides=[1, 2],
                              pads=[1, 1, 1, 1], count_include_pad=1),
             helper.make_node("GlobalAveragePool", ["x"], ["g"]),
             helper.make_node("GlobalMaxPool", ["x"], ["h"]),
             helper.make_node("ReduceMean", ["x"], ["r"], axes=[2, 3], keepdims=0)]
    check(nodes, {"x": x}, ["m", "a", "b", "g", "h", "r"], half=half, opset=17)


def test_concat_split_slice_odd_channels():
    a, b, c = rnd(2, 3, 4, 5), rnd(2, 5, 4, 5), rnd(2, 7, 4, 5)
    w = rnd(4, 15, 1, 1)
    nodes = [helper.make_node("Concat", ["a", "b", "c"], ["k"], axis=1),
             helper.make_node("Split", ["k", "sp"], ["s1", "s2"], axis=1),
             helper.make_node("Slice", ["k", "st", "en", "ax"], ["sl"]),
             conv_node("k", "w", None, "y1"),                 # a kernel reads the concat
             helper.make_node("Relu", ["s2"], ["y2"]),
             helper.make_node("Sigmoid", ["sl"], ["y3"])]
    inits = {"w": w, "sp": np.array([6, 9], np.int64), "st": np.array([1], np.int64),
             "en": np.array([14], np.int64), "ax": np.array([1], np.int64)}
    sess = check(nodes, {"a": a, "b": b, "c": c}, ["y1", "y2", "s1", "y3"], inits)
    assert any(la.kind.startswith("gather channels (3 sources)") for la in sess.layers)


@pytest.mark.parametrize("C,g", [(6, 2), (10, 2), (9, 3)])
def test_channel_shuffle(C, g):
    x = rnd(2, C, 3, 5)
    w = rnd(C, C, 1, 1)
    nodes = [conv_node("x", "w", None, "c"),
             helper.make_node("Reshape", ["c", "s5"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s4"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    inits = {"w": w, "s5": np.array([2, g, C // g, 3, 5], np.int64),
             "s4": np.array([2, C, 3, 5], np.int64)}
    sess = check(nodes, {"x": x}, ["y"], inits)
    assert [la.kind for la in sess.layers][1].startswith("gather channels")


@pytest.mark.parametrize("trans_b", [0, 1])
def test_fully_connected_on_flattened_images(trans_b):
    x = rnd(3, 5, 3, 2)
    K, O = 5 * 3 * 2, 7
    B = rnd(O, K) if trans_b else rnd(K, O)
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "B", "C"], ["g"], transB=trans_b, alpha=0.5, beta=2.0),
             helper.make_node("Softmax", ["g"], ["y"], axis=1),
             helper.make_node("MatMul", ["g", "M"], ["z"])]
    sess = check(nodes, {"x": x}, ["y", "z"], {"B": B, "C": rnd(O), "M": rnd(O, 3)})
    fc = [la for la in sess.layers if la.op == "Gemm"][0]
    assert "read in place" in fc.kind
    assert [t for _, t, _ in fc.weights][-1] == "WEIGHT_WIDTH"


@pytest.mark.parametrize("K,N", [(1030, 1), (600, 3)])
def test_fully_connected_split_over_inputs(K, N):
    x = rnd(N, K)
    sess = check([helper.make_node("Gemm", ["x", "B", "C"], ["g"], transB=1),
                  helper.make_node("Relu", ["g"], ["y"])],
                 {"x": x}, ["y"], {"B": rnd(9, K) * 0.1, "C": rnd(9)})
    assert "split over" in sess.layers[0].kind
    assert [ln.kernel for ln in sess.layers[0].launches] == ["fc_partial", "fc_reduce"]


def test_resize():
    x = rnd(2, 5, 3, 4)
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["n"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Resize", ["x", "", "sc"], ["l"], mode="linear",
                              coordinate_transformation_mode="half_pixel")]
    check(nodes, {"x": x}, ["n", "l"], {"sc": np.array([1, 1, 2, 2], np.float32)})


def test_memory_is_reused_along_a_chain():
    C = 8
    nodes, inits, prev = [], {}, "x"
    for i in range(6):
        inits[f"w{i}"] = rnd(C, C, 1, 1)
        nodes.append(conv_node(prev, f"w{i}", None, f"c{i}"))
        prev = f"c{i}"
    sess, ours, ref = run_both(nodes, {"x": rnd(1, C, 6, 6)}, [prev], inits)
    assert rel_l2(ours[0], ref[0]) <= 1e-5
    s = sess.summary()
    # input + two ping-pong images + the output, not one per tensor
    assert s["images_allocated"] <= 4 < 7
    assert s["activation_bytes"] <= 4 * 2 * 6 * 6 * 4 * 4


def test_device_limits_fall_back_and_say_where():
    x, w = rnd(1, 16, 8, 8), rnd(16, 16, 3, 3)
    # U of tile 4 is [4, 16 * 36 = 576] pixels, of tile 2 [4, 256]: a limit of 300 takes tile 2
    sess = check([conv_node("x", "w", None, "y", pads=[1] * 4)], {"x": x}, ["y"], {"w": w},
                 winograd=4, max_image=(300, 300))
    assert sess.layers[0].kind == "conv 3x3 Winograd F(2,3)"
    assert sess.fallbacks == ["Conv_0: Winograd tile 4 -> 2 (images past the limit [300, 300])"] or \
        "tile 4 -> 2" in sess.fallbacks[0]
    sess = check([conv_node("x", "w", None, "y", pads=[1] * 4)], {"x": x}, ["y"], {"w": w},
                 winograd=4, max_image=(100, 100))
    assert sess.layers[0].kind == "conv 3x3 direct" and "-> direct kernel" in sess.fallbacks[0]
    # 8 columns of one pixel each are past a width of 5, whatever the channels
    with pytest.raises(DeviceLimitError, match=r"past the image limit \[5, 20\] .*even four "
                       "channels are too wide"):
        run_both([conv_node("x", "w", None, "y", pads=[1] * 4)], {"x": x}, ["y"], {"w": w},
                 max_image=(5, 20))
    # a weight past the limit has no other form
    with pytest.raises(DeviceLimitError, match=r"CONV2D_FILTER weight w image \[16, 36\]"):
        run_both([conv_node("x", "w", None, "y", pads=[1] * 4)], {"x": x}, ["y"], {"w": w},
                 max_image=(100, 20), winograd=0)


def with_head(nodes, inits, src, C):
    """``nodes`` then MaxPool 2x2 ('p'), GlobalAveragePool, Flatten, Gemm + bias and Softmax
    ('y') on the C channels of ``src``."""
    inits.update(wf=rnd(C, 6), bf=rnd(6))
    return nodes + [
        helper.make_node("MaxPool", [src], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"], axis=1)]


def split_net(C=5, N=4, H=10):
    """Conv + Relu, a 1x1 conv, Concat (7 + 3 channels: lanes shift), depthwise, a per-channel
    Mul, then the head of with_head: (nodes, inputs, inits)."""
    inits = {"w1": rnd(7, C, 3, 3), "b1": rnd(7), "w2": rnd(3, 7, 1, 1), "wd": rnd(10, 1, 3, 3),
             "k": rnd(1, 10, 1, 1)}
    nodes = [conv_node("x", "w1", "b1", "c1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             conv_node("r1", "w2", None, "c2"),
             helper.make_node("Concat", ["r1", "c2"], ["cat"], axis=1),
             conv_node("cat", "wd", None, "d", pads=[1] * 4, group=10),
             helper.make_node("Mul", ["d", "k"], ["m"])]
    return with_head(nodes, inits, "m", 10), {"x": rnd(N, C, H, H)}, inits


@pytest.mark.parametrize("N,limit,group", [(4, 25, 2), (3, 25, 1), (4, 40, 4)])
def test_tall_images_run_in_batch_groups(N, limit, group):
    # a batch of N 10-row items is N * 10 rows high: past the limit, the images hold groups
    nodes, inputs, inits = split_net(N=N)
    sess = check(nodes, inputs, ["y", "p"], inits, max_image=(200, limit))
    assert sess.group == group and sess.batch == N
    if group == N:
        assert sess.fallbacks == []
    else:
        assert sess.fallbacks[0].startswith(f"network: batch {N} runs as {N // group} groups of "
                                            f"{group}")
        split = [f for f in sess.fallbacks[1:] if "held as" in f]
        assert split and all(f"held as {N // group} images of {group} batch item" in f
                             for f in split)
        assert any(f.startswith("input: 'x' ") for f in split)
        assert any(f.startswith("Conv_0: 'r1' ") for f in split)       # fused Relu's output


def test_too_tall_item_is_a_clear_error():
    nodes, inputs, inits = split_net(N=2)
    with pytest.raises(DeviceLimitError, match="even one batch item is too tall"):
        run_both(nodes, inputs, ["y"], inits, max_image=(200, 8))


def wide_net(C=6, N=2, H=10):
    """Conv 3x3 + Relu, a 1x1 conv, a residual Add, depthwise + bias, a per-channel Mul,
    Sigmoid, then the head of with_head; 7 channels inside."""
    inits = {"w1": rnd(7, C, 3, 3), "b1": rnd(7), "w2": rnd(7, 7, 1, 1), "wd": rnd(7, 1, 3, 3),
             "bd": rnd(7), "k": rnd(1, 7, 1, 1)}
    nodes = [conv_node("x", "w1", "b1", "c1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             conv_node("r1", "w2", None, "c2"), helper.make_node("Add", ["c2", "r1"], ["s"]),
             conv_node("s", "wd", "bd", "d", pads=[1] * 4, group=7),
             helper.make_node("Mul", ["d", "k"], ["m"]), helper.make_node("Sigmoid", ["m"], ["sg"])]
    return with_head(nodes, inits, "sg", 7), {"x": rnd(N, C, H, H)}, inits


@pytest.mark.parametrize("limit,half", [((15, 100), False), ((15, 12), False), ((15, 100), True)])
def test_wide_images_split_by_channels(limit, half):
    # 6 and 7 channels at W = 10 are 20 pixels wide: past 15, the images hold 4 channels each
    nodes, inputs, inits = wide_net()
    sess = check(nodes, inputs, ["y", "p", "s"], inits, max_image=limit, half=half, winograd=2)
    assert sess.part == 4 and sess.group == (1 if limit[1] < 20 else 2)
    split = [f for f in sess.fallbacks if "images of 4 channels" in f]
    assert [f.split(":")[0] for f in split] == ["input", "Conv_0", "Conv_2", "Add_3", "Conv_4",
                                                 "Mul_5"]
    assert any(f.startswith("Conv_0: Winograd tile 2 -> direct kernel") for f in sess.fallbacks)
    kinds = {la.name: (la.kind, len(la.launches)) for la in sess.layers}
    # two input parts x two output parts, the sums of the input parts chained
    assert kinds["Conv_0"] == ("conv 3x3 direct, input in 2 channel parts", 4)
    assert kinds["Conv_4"] == ("depthwise 3x3", 2) and kinds["MaxPool_7"][1] == 2
    assert kinds["GlobalAveragePool_8"][1] == 1                 # 'p' fits: one image


def test_winograd_layer_with_a_split_input_runs_direct():
    # V [10 tiles, 32] and U [2, 112] fit [15, 200]; x [20, 4] does not: split, so direct
    x, w, b = rnd(2, 6, 2, 10), rnd(7, 6, 3, 3), rnd(7)
    sess = check([conv_node("x", "w", "b", "y", pads=[1] * 4)], {"x": x}, ["y"], {"w": w, "b": b},
                 winograd=2, max_image=(15, 200))
    assert "Conv_0: Winograd tile 2 -> direct kernel (an image split by channels)" in sess.fallbacks
    assert sess.layers[0].kind == "conv 3x3 direct, input in 2 channel parts"


def test_ops_without_split_operands_are_clear_errors():
    nodes, inputs, inits = split_net(C=6)
    with pytest.raises(DeviceLimitError, match=r"node 'Concat_3' \(Concat\): input 'r1' is held "
                       r"as 2 images split by channels .* cannot take a split operand"):
        run_both(nodes, inputs, ["y"], inits, max_image=(15, 100))
    x, wf = rnd(2, 6, 1, 12), rnd(72, 5)
    nodes = [helper.make_node("Flatten", ["x"], ["f"]),
             helper.make_node("MatMul", ["f", "wf"], ["y"])]
    with pytest.raises(DeviceLimitError, match=r"\(MatMul\): input 'x' .* cannot take a split"):
        run_both(nodes, {"x": x}, ["y"], {"wf": wf}, max_image=(15, 100))


def test_unknown_op_and_bad_device_are_clear_errors():
    from tensorlayout.model import OpenCLSession

    data = make_model([helper.make_node("Pad", ["x", "p"], ["y"])], {"x": (1, 2, 3, 3)}, ["y"],
                      {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}).SerializeToString()
    with pytest.raises(LayoutError, match=r"op Pad is not supported on OpenCL images"):
        OpenCLSession(load(data))
    with pytest.raises(LayoutError, match="matches no OpenCL device"):
        OpenCLSession(load(data), device="no-such-device-xyz")
    with pytest.raises(LayoutError, match="winograd = 3 is not allowed"):
        OpenCLSession(load(data), winograd=3)
    with pytest.raises(LayoutError, match="max_image = .* is not allowed"):
        OpenCLSession(load(data), max_image=("wide", 3))
    x = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (1, 2, 3, 3)}, ["y"])
    sess = OpenCLSession(load(x.SerializeToString()))
    with pytest.raises(LayoutError, match="has shape"):
        sess.run(np.zeros((1, 2, 3, 4), np.float32))


def test_cli_runs_and_refuses_bad_options(tmp_path, capsys):
    from tensorlayout.cli import main

    x, w = rnd(1, 3, 6, 6), rnd(4, 3, 3, 3)
    path = tmp_path / "m.onnx"
    path.write_bytes(make_model([conv_node("x", "w", None, "c", pads=[1] * 4),
                                 helper.make_node("Relu", ["c"], ["y"])],
                                {"x": x}, ["y"], {"w": w}).SerializeToString())
    assert main(["run", str(path), "--runtime", "opencl", "--profile", "--check"]) == 0
    out = capsys.readouterr().out
    assert "device ms" in out and "same" not in out or "relative L2 error" in out
    assert main(["run", str(path), "--runtime", "opencl", "--device", "no-such-device-xyz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matches no OpenCL device" in err
    assert main(["run", str(path), "--half"]) == 2
    assert "--half does not apply to --runtime cpu" in capsys.readouterr().err


def test_work_group_tuner_caches_per_device(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLAYOUT_CACHE", str(tmp_path))
    x, w = rnd(2, 5, 9, 7), rnd(6, 5, 3, 3)
    nodes = [conv_node("x", "w", None, "c", pads=[1] * 4), helper.make_node("Relu", ["c"], ["y"]),
             helper.make_node("MaxPool", ["y"], ["z"], kernel_shape=[2, 2], strides=[2, 2])]
    sess = check(nodes, {"x": x}, ["z"], {"w": w}, tune=True)       # tuned sizes, same result
    files = list(tmp_path.glob("tuning-*.json"))
    assert len(files) == 1
    import json

    entries = json.loads(files[0].read_text())
    assert len(entries) == len(sess.launches())
    for _, ln in sess.launches():           # a tuned global size is a multiple of the local one
        assert ln.lsize is None or all(g % lc == 0 for g, lc in zip(ln.gsize, ln.lsize))
    before = files[0].stat().st_mtime_ns
    again = check(nodes, {"x": x}, ["z"], {"w": w}, tune=True)     # read from the cache
    assert files[0].stat().st_mtime_ns == before
    assert [ln.lsize for _, ln in again.launches()] == [ln.lsize for _, ln in sess.launches()]
