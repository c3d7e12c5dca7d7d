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
