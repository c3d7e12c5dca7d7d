"""NaN and Inf on the OpenCL images path follow PyTorch's semantics; PyTorch is the oracle.

PyTorch's conv2d behaves as if the input were explicitly zero-padded and every product of the
kernel window taken: a NaN input reaches the outputs whose window covers it, a NaN weight
poisons its whole output channel (it meets the padded zeros too), an Inf weight gives NaN
where it meets a zero.  The NaN masks (count and positions) and the finite values must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorlayout.errors import OpenCLUnavailable

pytest.importorskip("pyopencl", reason="PyOpenCL is not installed (extra 'opencl')")
torch = pytest.importorskip("torch", reason="PyTorch (the oracle) is not installed (extra 'test')")


@pytest.fixture(scope="module")
def cctx():
    from tensorlayout.opencl import get_context

    try:
        return get_context()
    except OpenCLUnavailable as exc:
        pytest.skip(f"no OpenCL platform can be had on this machine: {exc}")


def torch_conv(x, w, b, padding, stride=1):
    t = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                   torch.from_numpy(w.astype(np.float64)),
                                   None if b is None else torch.from_numpy(b.astype(np.float64)),
                                   stride=stride, padding=padding)
    return t.numpy()


def assert_same_nonfinite(y, ref):
    assert np.array_equal(np.isnan(y), np.isnan(ref)), (
        f"NaN count {int(np.isnan(y).sum())}, PyTorch {int(np.isnan(ref).sum())}")
    assert np.array_equal(np.isposinf(y), np.isposinf(ref))
    assert np.array_equal(np.isneginf(y), np.isneginf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(y[fin], ref[fin], rtol=2e-4, atol=2e-4)


def _data(seed=0, shape=(1, 6, 12, 12), out=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((out, shape[1], 3, 3)) / 4).astype(np.float32)
    b = rng.standard_normal(out).astype(np.float32)
    return x, w, b


CASES = [
    ("winograd", 2), ("winograd", 4), ("winograd", 6), ("direct", None),
]


@pytest.mark.parametrize("algorithm,tile", CASES)
def test_nan_input_reaches_only_its_windows(cctx, algorithm, tile):
    from tensorlayout.opencl import conv2d

    x, w, b = _data()
    x[0, 2, 5, 7] = np.nan
    y = conv2d(x, w, b, padding=1, algorithm=algorithm, tile=tile, dtype=np.float32, device=cctx)
    ref = torch_conv(x, w, b, 1)
    assert int(np.isnan(ref).sum()) == 5 * 9          # 3x3 windows cover it, in each channel
    assert_same_nonfinite(y, ref)


@pytest.mark.parametrize("algorithm,tile", CASES)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nonfinite_weight_meets_the_padding(cctx, algorithm, tile, value):
    from tensorlayout.opencl import conv2d

    x, w, b = _data(1)
    x[0, 1, 3, 3] = 0.0                               # an exact zero: Inf * 0 = NaN there too
    w[2, 1, 0, 0] = value
    y = conv2d(x, w, b, padding=1, algorithm=algorithm, tile=tile, dtype=np.float32, device=cctx)
    ref = torch_conv(x, w, b, 1)
    if np.isnan(value):
        assert np.isnan(ref[:, 2]).all() and not np.isnan(np.delete(ref, 2, axis=1)).any()
    else:
        assert np.isnan(ref[:, 2]).any() and np.isinf(ref[:, 2]).any()
    assert_same_nonfinite(y, ref)


def test_nan_bias_and_strided_direct(cctx):
    from tensorlayout.opencl import conv2d

    x, w, b = _data(2, shape=(2, 5, 9, 11))
    b[3] = np.nan
    w[1, 4, 2, 2] = np.inf
    x[1, 0, 0, 0] = np.nan
    for algorithm, stride in (("winograd", 1), ("direct", 1), ("direct", 2)):
        y = conv2d(x, w, b, padding=1, algorithm=algorithm, dtype=np.float32, device=cctx,
                   stride=stride)
        assert_same_nonfinite(y, torch_conv(x, w, b, 1, stride))


def test_values_that_overflow_half_count_as_inf(cctx):
    """7e4 is finite in float32 but Inf in a half image: the fallback sees the stored value."""
    from tensorlayout.opencl import conv2d

    if not cctx.info.half_images:
        pytest.skip("the device has no half images")
    x, w, b = _data(3)
    x[0, 0, 6, 6] = 7e4
    y = conv2d(x, w, b, padding=1, algorithm="winograd", tile=2, dtype=np.float16,
               device=cctx).astype(np.float64)
    with np.errstate(over="ignore"):
        ref = torch_conv(x.astype(np.float16), w.astype(np.float16), b.astype(np.float16), 1)
    assert np.array_equal(~np.isfinite(y), ~np.isfinite(ref))


# ---------------------------------------------------------------- the network runtime
def _nonfinite_input(seed=4, shape=(1, 5, 6, 7)):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 1, 1] = x[0, 2, 3, 4] = np.nan        # the last and the third of their 2x2 windows
    x[0, 4, 0, 0], x[0, 1, 5, 6] = np.inf, -np.inf
    return x


def _session_nodes():
    """ONNX graphs whose ops keep NaN in onnxruntime; the oracle is onnxruntime itself."""
    from _model_util import helper

    rng = np.random.default_rng(5)
    w = (rng.standard_normal((4, 5, 3, 3)) / 4).astype(np.float32)
    clip = {"lo": np.float32(-0.5), "hi": np.float32(0.5)}
    return {
        "Relu": ([helper.make_node("Relu", ["x"], ["y"])], {}),
        "Clip": ([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], clip),
        "HardSigmoid": ([helper.make_node("HardSigmoid", ["x"], ["y"])], {}),
        "HardSwish": ([helper.make_node("HardSwish", ["x"], ["y"])], {}),
        "LeakyRelu": ([helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)], {}),
        "Sigmoid": ([helper.make_node("Sigmoid", ["x"], ["y"])], {}),
        "Tanh": ([helper.make_node("Tanh", ["x"], ["y"])], {}),
        "Softmax": ([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {}),
        "AveragePool": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {}),
        "Conv+Relu": ([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["c"], ["y"])], {"w": w}),
        "Conv+Clip": ([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                       helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], {"w": w, **clip}),
    }


@pytest.mark.parametrize("half", [False, True], ids=["float32", "float16"])
@pytest.mark.parametrize("name", list(_session_nodes()))
def test_session_keeps_nan_as_onnxruntime_does(cctx, name, half):
    """Relu, Clip and HardSigmoid of NaN are NaN (OpenCL's fmax and fmin would give numbers),
    fused into a convolution too, and NaN stays NaN in float16 images."""
    from _model_util import make_model, ort_session

    from tensorlayout.model import load
    from tensorlayout.model import OpenCLSession

    if half and not cctx.info.half_images:
        pytest.skip("the device has no half images")
    nodes, inits = _session_nodes()[name]
    x = _nonfinite_input()
    data = make_model(nodes, {"x": x}, ["y"], inits).SerializeToString()
    ref = ort_session(data).run(None, {"x": x})[0]
    assert np.isnan(ref).any()
    y = OpenCLSession(load(data), half=half).run({"x": x})
    assert np.array_equal(np.isnan(y), np.isnan(ref)), (int(np.isnan(y).sum()), int(np.isnan(ref).sum()))
    assert np.array_equal(np.where(np.isinf(y), y, 0), np.where(np.isinf(ref), ref, 0))
    fin = np.isfinite(ref)
    tol = 1e-2 if half else 2e-5
    np.testing.assert_allclose(y[fin], ref[fin], rtol=tol, atol=tol)


@pytest.mark.parametrize("half", [False, True], ids=["float32", "float16"])
@pytest.mark.parametrize("op", ["MaxPool", "GlobalMaxPool"])
def test_max_pooling_keeps_nan(cctx, op, half):
    """The max of a window holding NaN is NaN, as in PyTorch and NumPy (the oracle here).
    onnxruntime's own pooling keeps a NaN only where it is the last value of its window
    (MaxPool) or never (GlobalMaxPool): an order effect of its vector max, not a rule."""
    from _model_util import helper, make_model

    from tensorlayout.model import load
    from tensorlayout.model import OpenCLSession

    if half and not cctx.info.half_images:
        pytest.skip("the device has no half images")
    x = _nonfinite_input()
    if op == "MaxPool":
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
        ref = torch.nn.functional.max_pool2d(torch.from_numpy(x), 2).numpy()
    else:
        node = helper.make_node("GlobalMaxPool", ["x"], ["y"])
        ref = torch.amax(torch.from_numpy(x), dim=(2, 3), keepdim=True).numpy()
    assert np.isnan(ref).sum() == 2
    y = OpenCLSession(load(make_model([node], {"x": x}, ["y"]).SerializeToString()), half=half).run({"x": x})
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(y[fin], ref[fin], rtol=1e-2 if half else 0, atol=1e-2 if half else 0)
