"""The CPU backend's own kernels and fusions: the depthwise loops and the epilogue (compiled
and their NumPy twins) against a float64 direct convolution written here, and fused steps
(convolution + residual + activation, pointwise, depthwise, Gemm and element-wise with their
activations) against onnxruntime, NaN included."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _model_util import compare, make_model, ort_session

from tensorlayout.backends import cpu_kernels as K  # noqa: E402
from tensorlayout.model import load  # noqa: E402

_ACTS = {0: lambda v: v, 1: lambda v: np.where(v < 0, 0, v), 2: lambda v: np.clip(v, -0.5, 0.75),
         3: lambda v: np.where(v >= 0, v, 0.1 * v), 4: lambda v: 1 / (1 + np.exp(-v)),
         5: lambda v: v * np.clip(v / 6 + 0.5, 0, 1), 6: lambda v: np.clip(0.2 * v + 0.5, 0, 1),
         7: np.tanh}
_PARAMS = {0: (0, 0), 1: (0, 0), 2: (-0.5, 0.75), 3: (0.1, 0), 4: (0, 0), 5: (1 / 6, 0.5),
           6: (0.2, 0.5), 7: (0, 0)}


def _direct64(x, w, b, stride, begin, dil, mult, out_hw):
    """Depthwise convolution by its definition, in float64: y[n, k] sums w[k] over the window of
    input channel k // mult; taps outside the input read zero."""
    N, C, H, W = x.shape
    K_, _, KH, KW = w.shape
    OH, OW = out_hw
    y = np.zeros((N, K_, OH, OW))
    for k in range(K_):
        for oh in range(OH):
            for ow in range(OW):
                acc = np.zeros(N)
                for i in range(KH):
                    for j in range(KW):
                        iy = oh * stride[0] + i * dil[0] - begin[0]
                        ix = ow * stride[1] + j * dil[1] - begin[1]
                        if 0 <= iy < H and 0 <= ix < W:
                            acc += w[k, 0, i, j] * x[:, k // mult, iy, ix].astype(np.float64)
                y[:, k, oh, ow] = acc + b[k]
    return y


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("case", [
    # (N, C, H, W, mult, KH, KW, stride, begin, end, dilation, act)
    (1, 3, 7, 9, 1, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1), 1),
    (2, 4, 8, 7, 2, 3, 5, (2, 2), (0, 2), (1, 1), (1, 1), 2),
    (1, 5, 11, 10, 1, 5, 5, (2, 1), (2, 2), (2, 2), (2, 1), 5),
    (1, 2, 6, 6, 3, 3, 3, (1, 2), (2, 1), (0, 2), (1, 1), 7),
])
def test_depthwise_loops_equal_the_definition(compiled, case, monkeypatch):
    N, C, H, W, mult, KH, KW, stride, begin, end, dil, act = case
    if compiled and K.ready() is False:
        from tensorlayout import _jit
        _jit.wait()
        if not K.ready():
            pytest.skip("numba is not installed")
    if not compiled:
        monkeypatch.setattr(K, "ready", lambda: False)
    rng = np.random.default_rng(sum(case[:4]))
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((C * mult, 1, KH, KW)).astype(np.float32)
    b = rng.standard_normal(C * mult).astype(np.float32)
    OH = (H + begin[0] + end[0] - (KH - 1) * dil[0] - 1) // stride[0] + 1
    OW = (W + begin[1] + end[1] - (KW - 1) * dil[1] - 1) // stride[1] + 1
    y = np.empty((N, C * mult, OH, OW), np.float32)
    a0, a1 = _PARAMS[act]
    K.depthwise(x, w, b, y, (*stride, *begin, *dil, mult, act, a0, a1))
    want = _ACTS[act](_direct64(x, w, b, stride, begin, dil, mult, (OH, OW)))
    assert np.abs(y - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("compiled", [True, False])
def test_epilogue_bias_residual_activation_and_nan(compiled, monkeypatch):
    if not compiled:
        monkeypatch.setattr(K, "ready", lambda: False)
    elif not K.ready():
        from tensorlayout import _jit
        _jit.wait()
        if not K.ready():
            pytest.skip("numba is not installed")
    rng = np.random.default_rng(3)
    for act in range(8):
        y = rng.standard_normal((2, 3, 10)).astype(np.float32)
        y[0, 1, 4] = np.nan
        res = rng.standard_normal((2, 3, 10)).astype(np.float32)
        b = rng.standard_normal(3).astype(np.float32)
        want = _ACTS[act](y.astype(np.float64) + b[None, :, None] + res)
        K.epilogue(y, b, res, (act, *_PARAMS[act]))
        assert np.isnan(y[0, 1, 4]) and np.isnan(want[0, 1, 4])
        ok = ~np.isnan(want)
        assert np.abs(y[ok] - want[ok]).max() <= 1e-6 * max(1.0, np.abs(want[ok]).max()), act


def test_fused_steps_agree_with_onnxruntime():
    """A depthwise convolution with a multiplier, stride, dilation and asymmetric padding and a
    fused Clip; a strided pointwise convolution with HardSwish; a 3x3 convolution with the
    residual Add and a LeakyRelu fused; Gemm + Sigmoid; Add + Relu; NaN in the input."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 13, 11)).astype(np.float32)
    x[1, 2, 5, 5] = np.nan
    inits = {"dw": rng.standard_normal((8, 1, 3, 3)).astype(np.float32),
             "db": rng.standard_normal(8).astype(np.float32),
             "pw": rng.standard_normal((6, 8, 1, 1)).astype(np.float32),
             "pb": rng.standard_normal(6).astype(np.float32),
             "cw": rng.standard_normal((6, 6, 3, 3)).astype(np.float32),
             "gw": rng.standard_normal((5, 6)).astype(np.float32),
             "lo": np.array(-1, np.float32), "hi": np.array(2, np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "dw", "db"], ["a"], group=4, strides=[2, 1],
                         dilations=[1, 2], pads=[1, 0, 2, 1]),
        helper.make_node("Clip", ["a", "lo", "hi"], ["a2"]),
        helper.make_node("Conv", ["a2", "pw", "pb"], ["b"], strides=[1, 2]),
        helper.make_node("HardSwish", ["b"], ["b2"]),
        helper.make_node("Conv", ["b2", "cw"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "b2"], ["d"]),
        helper.make_node("LeakyRelu", ["d"], ["e"], alpha=0.2),
        helper.make_node("GlobalAveragePool", ["e"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "gw"], ["h"], transB=1),
        helper.make_node("Sigmoid", ["h"], ["y1"]),
        helper.make_node("Add", ["e", "e"], ["s"]),
        helper.make_node("Relu", ["s"], ["y2"]),
    ]
    m = make_model(nodes, {"x": x}, ["y1", "y2"], inits)
    model = load(m.SerializeToString())
    fused = {st.node.name or st.node.op: st.fused for st in model.steps}
    assert sum(len(f) for f in fused.values()) == 6     # Clip, HardSwish, Add + LeakyRelu, Sigmoid, Relu
    ours = model.run(x)
    ref = ort_session(m.SerializeToString()).run(None, {"x": x})
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        assert np.array_equal(np.isnan(a), np.isnan(b))
        ok = ~np.isnan(b)
        assert np.abs(a[ok] - b[ok]).max() <= 1e-4 * max(1.0, np.abs(b[ok]).max())


def test_a_residual_computed_after_the_convolution_is_not_fused():
    """The Add's other operand comes from a node after the convolution: the Add stays a step
    of its own (the operand does not exist yet when the convolution runs)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    inits = {"w": rng.standard_normal((3, 3, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Add", ["c", "s"], ["y"])]
    out = compare(nodes, {"x": x}, ["y"], inits)
    model = load(make_model(nodes, {"x": x}, ["y"], inits).SerializeToString())
    assert [st.node.op for st in model.steps] == ["Conv", "Sigmoid", "Add"]
    assert out[0].shape == (1, 3, 6, 6)


@pytest.mark.parametrize("window", [(3, 3, 1, 1), (3, 3, 2, 2), (5, 5, 1, 1), (5, 5, 2, 2)])
def test_each_unrolled_window_equals_the_definition(window):
    """The kernels with the taps of one window unrolled, with the padding MobileNets use and
    an odd one, a multiplier of 2 and a fused activation."""
    if not K.ready():
        from tensorlayout import _jit
        _jit.wait()
        if not K.ready():
            pytest.skip("numba is not installed")
    KH, KW, sh, sw = window
    rng = np.random.default_rng(KH * 10 + sh)
    for begin, end in (((KH // 2, KW // 2), (KH // 2, KW // 2)), ((0, KW - 1), (KH - 1, 0))):
        x = rng.standard_normal((2, 3, 11, 9)).astype(np.float32)
        w = rng.standard_normal((6, 1, KH, KW)).astype(np.float32)
        b = rng.standard_normal(6).astype(np.float32)
        OH = (11 + begin[0] + end[0] - KH) // sh + 1
        OW = (9 + begin[1] + end[1] - KW) // sw + 1
        y = np.empty((2, 6, OH, OW), np.float32)
        K.depthwise(x, w, b, y, (sh, sw, *begin, 1, 1, 2, 5, 1 / 6, 0.5))
        want = _ACTS[5](_direct64(x, w, b, (sh, sw), begin, (1, 1), 2, (OH, OW)))
        assert np.abs(y - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
