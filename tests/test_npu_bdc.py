"""BDC instructions on Sophgo's simulator, operands placed by tensorlayout, against PyTorch in float64.

The int8 4N conversion also checks tensorlayout's own 4N packing (the chip reads the words that
tensorlayout wrote), and the convolution its 2IC packing.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from tensorlayout.errors import (  # noqa: E402
    AlignmentError,
    ConvolutionError,
    DTypeError,
    LayoutError,
    ModeError,
    OverlapError,
    ShapeError,
    StrideError,
)
from tensorlayout.npu import BM1684, LocalMemory, matrix_layout, tensor_layout  # noqa: E402

from _simulator import skip_module_without_simulator  # noqa: E402

skip_module_without_simulator()

from tensorlayout.npu import bdc  # noqa: E402

S = BM1684.lmem_bytes
KB = 1024


@pytest.fixture(scope="module")
def mem():
    return LocalMemory(BM1684, backend="cmodel")


def _t(a):
    return torch.from_numpy(np.asarray(a, np.float64))


def _close(got, want, rel=1e-5):
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err < rel, err


def _torch_pad(x, pad, value=0.0):
    return F.pad(_t(x), (pad[2], pad[3], pad[0], pad[1]), value=value)


@pytest.mark.parametrize("seed", range(6))
def test_conv2d_random(mem, seed):
    rng = np.random.default_rng(seed)
    n, ic, oc = int(rng.integers(1, 3)), int(rng.integers(1, 80)), int(rng.integers(1, 140))
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    h, w = int(rng.integers(kh + 2, 20)), int(rng.integers(kw + 2, 20))
    pad = tuple(int(v) for v in rng.integers(0, 3, 4))
    st = tuple(int(v) for v in rng.integers(1, 4, 2))
    dil = tuple(int(v) for v in rng.integers(1, 3, 2))
    qi, qo = int(rng.integers(0, 64)), int(rng.integers(0, 64))
    x = rng.standard_normal((n, ic, h, w), dtype=np.float32)
    wt = rng.standard_normal((oc, ic, kh, kw), dtype=np.float32)
    b = rng.standard_normal(oc, dtype=np.float32)
    want = F.conv2d(_torch_pad(x, pad), _t(wt), _t(b), stride=st, dilation=dil).numpy()
    stride = None
    if seed % 2:  # an input with its own strides
        cpn = -(-(qi + ic) // 64)
        stride = ((h * (w + 3) + 5) * cpn + 7, h * (w + 3) + 5, w + 3, 1)
    xt = mem.s2l(qi * S, x, stride=stride)
    wtt = bdc.store_conv_weight(mem, qo * S + 160 * KB, wt)
    bt = bdc.store_bias(mem, qo * S + 320 * KB, b)
    yt = tensor_layout(BM1684, qo * S + 330 * KB, want.shape)
    bdc.conv2d(mem, yt, xt, wtt, bt, padding=pad, stride=st, dilation=dil)
    _close(mem.load(yt), want)
    # accumulate: the same convolution added to what the output holds, no bias
    bdc.conv2d(mem, yt, xt, wtt, None, padding=pad, stride=st, dilation=dil, accumulate=True)
    _close(mem.load(yt), 2 * want - b.reshape(1, -1, 1, 1))


@pytest.mark.parametrize("seed", range(3))
def test_depthwise_and_pooling(mem, seed):
    rng = np.random.default_rng(10 + seed)
    n, c, h, w = 2, int(rng.integers(1, 150)), int(rng.integers(5, 20)), int(rng.integers(5, 20))
    k = int(rng.integers(1, 5))
    pad = tuple(int(v) for v in rng.integers(0, k, 4))
    st = tuple(int(v) for v in rng.integers(1, 3, 2))
    q = int(rng.integers(0, 64))
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((c, 1, k, k), dtype=np.float32)
    b = rng.standard_normal(c, dtype=np.float32)
    xt = mem.s2l(q * S, x)
    want = F.conv2d(_torch_pad(x, pad), _t(wt), _t(b), stride=st, groups=c).numpy()
    wtt = bdc.store_depthwise_weight(mem, q * S + 200 * KB, wt)
    bt = bdc.store_bias(mem, q * S + 210 * KB, b)
    yt = tensor_layout(BM1684, q * S + 256 * KB, want.shape)
    bdc.depthwise2d(mem, yt, xt, wtt, bt, padding=pad, stride=st)
    _close(mem.load(yt), want)

    want = F.max_pool2d(_torch_pad(x, pad, -np.inf), k, st).numpy()
    yt = tensor_layout(BM1684, q * S + 256 * KB, want.shape)
    bdc.max_pool2d(mem, yt, xt, k, padding=pad, stride=st)
    assert np.array_equal(mem.load(yt), want.astype(np.float32))

    want = F.avg_pool2d(_torch_pad(x, pad), k, st).numpy()
    bdc.avg_pool2d(mem, yt, xt, k, padding=pad, stride=st)
    _close(mem.load(yt), want)


OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum}


@pytest.mark.parametrize("op", sorted(OPS))
def test_elementwise_tensors_and_constants(mem, op):
    rng = np.random.default_rng(len(op))
    shape = (2, int(rng.integers(1, 150)), 5, 7)
    a = rng.standard_normal(shape, dtype=np.float32)
    b = rng.standard_normal(shape, dtype=np.float32)
    qa, qb, qo = (int(v) for v in rng.integers(0, 64, 3))
    at = mem.s2l(qa * S, a)
    cpn = -(-(qb + shape[1]) // 64)
    bt = mem.s2l(qb * S + 100 * KB, b, stride=(cpn * 45, 45, 8, 1))
    ot = tensor_layout(BM1684, qo * S + 200 * KB, shape, layout="compact")
    getattr(bdc, op)(mem, ot, at, bt)
    _close(mem.load(ot), OPS[op](a.astype(np.float64), b), 1e-6)
    getattr(bdc, op)(mem, ot, at, -0.25)
    _close(mem.load(ot), OPS[op](a.astype(np.float64), -0.25), 1e-6)
    getattr(bdc, op)(mem, at, at, bt)  # in place
    _close(mem.load(at), OPS[op](a.astype(np.float64), b), 1e-6)


def test_sub_constant_and_relu(mem):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 70, 4, 9), dtype=np.float32)
    xt = mem.s2l(5 * S, x)
    yt = tensor_layout(BM1684, 5 * S + 64 * KB, x.shape)
    bdc.relu(mem, yt, xt)
    assert np.array_equal(mem.load(yt), np.maximum(x, 0))
    bdc.relu(mem, xt, xt)
    assert np.array_equal(mem.load(xt), np.maximum(x, 0))


@pytest.mark.parametrize("name,fn", [("sigmoid", lambda v: 1 / (1 + np.exp(-v))), ("tanh", np.tanh),
                                     ("exp", np.exp)])
def test_special_functions(mem, name, fn):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 100, 5, 7)) * 3).astype(np.float32)
    q = 9
    xt = mem.s2l(q * S, x)
    yt = tensor_layout(BM1684, q * S + 100 * KB, x.shape)
    wt = tensor_layout(BM1684, q * S + 200 * KB, x.shape)
    getattr(bdc, name)(mem, yt, xt, wt)
    got, want = mem.load(yt).astype(np.float64), fn(x.astype(np.float64))
    assert np.all(np.abs(got - want) <= 1e-5 * np.maximum(np.abs(want), 1) + 1e-6)


def test_compares_on_the_chip_drop_nan_as_documented(mem):
    """relu, maximum / minimum and max pooling compute "a > b ? a : b" (and "<"): NaN survives
    only as the second operand of a tensor-tensor max or min."""
    x = np.array([np.nan, -np.inf, np.inf, -1, 0, 2, np.nan, 1], np.float32).reshape(1, 1, 2, 4)
    c = np.full_like(x, 0.5)
    c[0, 0, 1, 3] = np.nan
    xt, ct = mem.s2l(0, x), mem.s2l(8 * KB, c)
    yt = tensor_layout(BM1684, 100 * KB, x.shape)
    with np.errstate(invalid="ignore"):
        for fn, want in ((lambda: bdc.relu(mem, yt, xt), np.where(x > 0, x, 0)),
                         (lambda: bdc.maximum(mem, yt, xt, ct), np.where(x > c, x, c)),
                         (lambda: bdc.maximum(mem, yt, ct, xt), np.where(c > x, c, x)),
                         (lambda: bdc.minimum(mem, yt, xt, ct), np.where(x < c, x, c)),
                         (lambda: bdc.maximum(mem, yt, xt, 0.5), np.where(x > 0.5, x, np.float32(0.5)))):
            fn()
            assert np.array_equal(mem.load(yt), want, equal_nan=True)
    pt = tensor_layout(BM1684, 200 * KB, (1, 1, 1, 2))
    bdc.max_pool2d(mem, pt, xt, 2)
    assert mem.load(pt).ravel().tolist() == [2.0, np.inf]


F32 = np.finfo(np.float32)
#: How near float64 each function comes on the chip: (relative, absolute); 1.2e-38 covers the
#: chip's flushing of subnormal numbers to 0.
SFU_TOLERANCE = {"sigmoid": (4e-7, 1.2e-38), "tanh": (0.0, 1e-6), "exp": (4e-7, 1.2e-38)}
SFU_FLOAT64 = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "exp": np.exp}


def _float32_sweep():
    """Every kind of float32: the edges, random bit patterns (all exponents), and dense steps
    over the ranges where the functions turn (integers from -300 to 300 among them)."""
    rng = np.random.default_rng(17)
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, F32.max, -F32.max, F32.tiny, -F32.tiny, 1e-45, -1e-45,
             88.72, 88.73, 88.75, 89.0, -87.3, -88.0, -88.7, -89.0, -103.9, -104.0, -200.0, 9.0, -9.0]
    bits = rng.integers(0, 2 ** 32, 64 * 128, dtype=np.uint64).astype(np.uint32).view(np.float32)
    v = np.concatenate([np.array(edges, np.float32), bits, np.linspace(-120, 120, 64 * 256, dtype=np.float32),
                        np.arange(-300, 301, dtype=np.float32)])
    return np.concatenate([v, np.zeros(-v.size % 64, np.float32)]).reshape(1, 64, 1, -1)


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "exp"])
def test_special_functions_over_all_of_float32(mem, name):
    """NaN where NumPy has NaN, ±inf exactly where it has them, every other value within the
    function's tolerance; the input is left as it was."""
    x = _float32_sweep()
    q = 5
    xt = mem.s2l(q * S, x)
    yt = tensor_layout(BM1684, q * S + 150 * KB, x.shape)
    wt = tensor_layout(BM1684, q * S + 300 * KB, x.shape)
    getattr(bdc, name)(mem, yt, xt, wt)
    assert np.array_equal(mem.load(xt), x, equal_nan=True)
    got = mem.load(yt).astype(np.float64)
    with np.errstate(all="ignore"):
        want = SFU_FLOAT64[name](x.astype(np.float64)).astype(np.float32).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), x[np.isnan(got) != np.isnan(want)]
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]) and not np.isinf(got[~inf]).any()
    rel, tiny = SFU_TOLERANCE[name]
    ok = ~np.isnan(want) & ~inf
    err = np.abs(got[ok] - want[ok])
    worst = np.argmax(err - rel * np.abs(want[ok]))
    assert np.all(err <= rel * np.abs(want[ok]) + tiny), (x[ok][worst], got[ok][worst], want[ok][worst])


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "exp"])
def test_special_function_may_read_its_source_from_its_work_buffer(mem, name):
    """What the clamp relies on: the instruction reads its source once, before it uses the work
    buffer, so the clamped input may sit in the work buffer (compared with separate buffers)."""
    from tensorlayout.npu.cmodel import dim4

    x = (np.random.default_rng(8).standard_normal((2, 70, 5, 9)) * 10).astype(np.float32)
    xt = mem.s2l(0, x)
    yt = tensor_layout(BM1684, 100 * KB, x.shape)
    wt = tensor_layout(BM1684, 200 * KB, x.shape)
    mem.call(f"okk_bdc_{name}", yt.address, xt.address, wt.address, dim4(x.shape))
    apart = mem.load(yt)
    mem.store(wt, x)
    mem.call(f"okk_bdc_{name}", yt.address, wt.address, wt.address, dim4(x.shape))
    assert np.array_equal(mem.load(yt), apart)


@pytest.mark.parametrize("seed", range(4))
def test_matmul(mem, seed):
    rng = np.random.default_rng(20 + seed)
    m, k, n = int(rng.integers(1, 9)), int(rng.integers(1, 300)), int(rng.integers(1, 500))
    lw, rw = int(rng.integers(1, min(k, 40) + 1)), int(rng.integers(1, min(n, 40) + 1))
    q = int(rng.integers(0, 64))
    left = rng.standard_normal((m, k), dtype=np.float32)
    right = rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal((1, n), dtype=np.float32)
    lt = mem.matrix_s2l(q * S, left, lw)
    rt = mem.matrix_s2l(q * S + 64 * KB, right, rw)
    bt = mem.matrix_s2l(q * S + 256 * KB, bias, rw)
    from tensorlayout.npu import matrix_layout
    ot = matrix_layout(BM1684, q * S + 320 * KB, m, n, rw)
    bdc.matmul(mem, ot, lt, rt, bt)
    want = left.astype(np.float64) @ right + bias
    _close(mem.matrix_l2s(ot.address, m, n, rw, "fp32"), want)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_int8_4n_to_fp32_reads_tensorlayouts_4n_packing(mem, dtype):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (7, 90, 5, 6)).astype(dtype)
    q = 30
    xt = mem.s2l(q * S, x, mode="4N")
    yt = tensor_layout(BM1684, q * S + 100 * KB, x.shape)
    wt = tensor_layout(BM1684, q * S + 300 * KB, x.shape)
    bdc.int8_4n_to_fp32(mem, yt, xt, wt)
    assert np.array_equal(mem.load(yt), x.astype(np.float32))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_fp32_to_int8_4n_truncates_saturates_and_packs_like_tensorlayout(mem, dtype):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((6, 70, 4, 5)) * 120).astype(np.float32)
    q = 12
    xt = mem.s2l(q * S, x)
    yt = tensor_layout(BM1684, q * S + 100 * KB, x.shape, dtype=dtype, mode="4N")
    wt = tensor_layout(BM1684, q * S + 200 * KB, x.shape)
    bdc.fp32_to_int8_4n(mem, yt, xt, wt)
    info = np.iinfo(dtype)
    want = np.clip(np.trunc(x.astype(np.float64)), info.min, info.max).astype(dtype)
    assert np.array_equal(mem.load(yt), want)
    assert np.array_equal(mem.load(xt), x)


def _snapshot(mem):
    return mem.local.copy()


BAD = [
    ("numpy backend", LayoutError, "backend='cmodel'",
     lambda m, x, w, y: bdc.relu(LocalMemory(BM1684, system_bytes=64), y, x)),
    ("output unaligned", AlignmentError, "divisible by 128",
     lambda m, x, w, y: bdc.conv2d(m, tensor_layout(BM1684, 300 * KB + 4, y.shape, layout="compact"), x, w)),
    ("weight other NPU", AlignmentError, "NPU of output",
     lambda m, x, w, y: bdc.conv2d(m, tensor_layout(BM1684, S + 300 * KB, y.shape), x, w)),
    ("weight not 2IC", ModeError, "2IC",
     lambda m, x, w, y: bdc.conv2d(m, y, x, tensor_layout(BM1684, 100 * KB, (4, 8, 3, 3)))),
    ("wrong output shape", ShapeError, "needs",
     lambda m, x, w, y: bdc.conv2d(m, tensor_layout(BM1684, 300 * KB, (1, 8, 5, 5)), x, w)),
    ("stride 16", ConvolutionError, "at most 15",
     lambda m, x, w, y: bdc.conv2d(m, y, x, w, stride=16)),
    ("output overlaps input", OverlapError, "overlap",
     lambda m, x, w, y: bdc.conv2d(m, tensor_layout(BM1684, 0, y.shape), x, w)),
    ("int input", DTypeError, "fp32",
     lambda m, x, w, y: bdc.relu(m, y, tensor_layout(BM1684, 0, y.shape, dtype="int32"))),
    ("sfu strided", StrideError, "aligned strides",
     lambda m, x, w, y: bdc.exp(m, y, tensor_layout(BM1684, 0, y.shape, layout="compact"),
                                tensor_layout(BM1684, 400 * KB, y.shape))),
    ("pool other NPU", AlignmentError, "NPU of input",
     lambda m, x, w, y: bdc.max_pool2d(m, tensor_layout(BM1684, 3 * S, (1, 4, 2, 2)), x, 3)),
    ("w stride", StrideError, "W stride 1",
     lambda m, x, w, y: bdc.relu(m, y, tensor_layout(BM1684, 0, y.shape, stride=(200, 200, 20, 2)))),
    ("channels", ConvolutionError, "channels",
     lambda m, x, w, y: bdc.conv2d(m, y, tensor_layout(BM1684, 0, (1, 5, 8, 8)), w)),
    ("conv 4096 output channels", ShapeError, "at most 4095",       # the simulator would exit
     lambda m, x, w, y: bdc.conv2d(m, tensor_layout(BM1684, 300 * KB, (1, 4096, 6, 6)), x,
                                   tensor_layout(BM1684, 100 * KB, (4, 4096, 3, 3), mode="2IC"))),
    ("matmul bias an array", LayoutError, "bias = array",
     lambda m, x, w, y: bdc.matmul(m, matrix_layout(BM1684, 400 * KB, 2, 3, 3), matrix_layout(BM1684, 0, 2, 4, 4),
                                   matrix_layout(BM1684, 200 * KB, 4, 3, 3), np.ones((1, 3), np.float32))),
]


@pytest.mark.parametrize("name,err,match,call", BAD, ids=[b[0] for b in BAD])
def test_bad_operands_are_named_errors_and_nothing_runs(mem, name, err, match, call):
    x = mem.s2l(0, np.ones((1, 4, 8, 8), np.float32))
    w = bdc.store_conv_weight(mem, 100 * KB, np.ones((8, 4, 3, 3), np.float32))
    y = tensor_layout(BM1684, 300 * KB, (1, 8, 6, 6))
    before = _snapshot(mem)
    calls = mem.simulator.calls
    with pytest.raises(err, match=match):
        call(mem, x, w, y)
    assert mem.simulator.calls == calls
    assert np.array_equal(mem.local, before)
