"""The CPU backend's own kernels and fusions: the depthwise loops and the epilogue (compiled
and their NumPy twins) against a float64 direct convolution written here, and fused steps
(convolution + residual + activation, pointwise, depthwise, Gemm and element-wise with their
activations) against onnxruntime, NaN included."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper

from _model_util import compare, make_model, ort_session

from tensorlayout.backends import cpu_gemm  # noqa: E402
from tensorlayout.backends import cpu_kernels as K  # noqa: E402
from tensorlayout.model import load  # noqa: E402

_ACTS = {0: lambda v: v, 1: lambda v: np.where(v < 0, 0, v), 2: lambda v: np.clip(v, -0.5, 0.75),
         3: lambda v: np.where(v >= 0, v, 0.1 * v), 4: lambda v: 1 / (1 + np.exp(-v)),
         5: lambda v: v * np.clip(v / 6 + 0.5, 0, 1), 6: lambda v: np.clip(0.2 * v + 0.5, 0, 1),
         7: np.tanh, 8: lambda v: v / (1 + np.exp(-v))}
_PARAMS = {0: (0, 0), 1: (0, 0), 2: (-0.5, 0.75), 3: (0.1, 0), 4: (0, 0), 5: (1 / 6, 0.5),
           6: (0.2, 0.5), 7: (0, 0), 8: (0, 0)}


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


def _conv64(x, w, stride, begin, dil, out_hw):
    """A one-group convolution by its definition, in float64, without bias: y[n, o] sums
    w[o, c] over the window of every input channel c; taps outside the input read zero."""
    N, C, H, W = x.shape
    OH, OW = out_hw
    y = np.zeros((N, w.shape[0], OH, OW))
    for oh in range(OH):
        for ow in range(OW):
            for i in range(w.shape[2]):
                for j in range(w.shape[3]):
                    iy = oh * stride[0] + i * dil[0] - begin[0]
                    ix = ow * stride[1] + j * dil[1] - begin[1]
                    if 0 <= iy < H and 0 <= ix < W:
                        y[:, :, oh, ow] += x[:, :, iy, ix].astype(np.float64) @ \
                            w[:, :, i, j].astype(np.float64).T
    return y


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("case", [
    # (N, C, H, W, mult, KH, KW, stride, begin, end, dilation, act)
    (1, 3, 7, 9, 1, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1), 1),
    (2, 4, 8, 7, 2, 3, 5, (2, 2), (0, 2), (1, 1), (1, 1), 2),
    (1, 5, 11, 10, 1, 5, 5, (2, 1), (2, 2), (2, 2), (2, 1), 5),
    (1, 2, 6, 6, 3, 3, 3, (1, 2), (2, 1), (0, 2), (1, 1), 7),
    # the stride-2 specialisations (even / odd column halves), odd and even begin padding
    (1, 3, 9, 11, 1, 3, 3, (2, 2), (0, 1), (1, 1), (1, 1), 4),
    (1, 2, 12, 9, 2, 5, 5, (2, 2), (2, 1), (2, 2), (1, 1), 8),
    (2, 3, 8, 8, 1, 3, 3, (2, 2), (1, 0), (0, 1), (1, 1), 0),
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
    for act in range(9):
        y = rng.standard_normal((2, 3, 10)).astype(np.float32)
        y[0, 1, 4] = np.nan
        res = rng.standard_normal((2, 3, 10)).astype(np.float32)
        b = rng.standard_normal(3).astype(np.float32)
        want = _ACTS[act](y.astype(np.float64) + b[None, :, None] + res)
        K.epilogue(y, b, res, (act, *_PARAMS[act]))
        assert np.isnan(y[0, 1, 4]) and np.isnan(want[0, 1, 4])
        ok = ~np.isnan(want)
        assert np.abs(y[ok] - want[ok]).max() <= 1e-6 * max(1.0, np.abs(want[ok]).max()), act


def _compiled_or_skip():
    if not K.ready():
        from tensorlayout import _jit
        _jit.wait()
        if not K.ready():
            pytest.skip("numba or llvmlite is not installed")


def test_threads_take_each_unit_once_two_from_either_end():
    """The entries' claims (``next_unit``, ``next_range`` of the kernels' module) on the
    native workers: every unit exactly once for any thread count; with two threads each
    takes one run of consecutive units, thread 0 from the front, thread 1 from the back."""
    _compiled_or_skip()
    from numba import carray, cfunc, types

    from tensorlayout.backends import cpu_native
    from tensorlayout.winograd._native import fetch_add, ptr_i64

    mod = cpu_native.module()
    next_unit, next_range = mod.next_unit, mod.next_range

    @cfunc(types.void(types.int64, types.int64, types.int64, types.int64))
    def part(ctx, tid, nt, work):
        a = carray(ptr_i64(ctx), (4096,))
        units = a[0]
        while True:
            u = next_unit(work, tid, units)
            if u >= units:
                break
            fetch_add(ctx + 8 * (16 + u), 1)
            a[2048 + u] = tid

    @cfunc(types.void(types.int64, types.int64, types.int64, types.int64))
    def chunks(ctx, tid, nt, work):
        a = carray(ptr_i64(ctx), (4096,))
        total = a[0]
        while True:
            q, q1 = next_range(work, tid, nt, total)
            if q >= total:
                break
            for i in range(q, q1):
                fetch_add(ctx + 8 * (16 + i), 1)

    workers = cpu_native.pool()
    for nt in (1, 2, 3, 5, 8):
        for units in (0, 1, 2, 7, 64, 1000):
            ctx = np.zeros(4096, np.int64)
            ctx[0] = units
            workers.run(part.address, ctx.ctypes.data, nt, claims=True)
            assert (ctx[16:16 + units] == 1).all(), (nt, units)
            assert (ctx[16 + units:2048] == 0).all()
            if nt == 2 and units:
                owner = ctx[2048:2048 + units]
                k = int((owner == 0).sum())
                assert (owner[:k] == 0).all() and (owner[k:] == 1).all(), owner
            ctx = np.zeros(4096, np.int64)
            ctx[0] = units
            workers.run(chunks.address, ctx.ctypes.data, nt, claims=True)
            assert (ctx[16:16 + units] == 1).all(), (nt, units)
            assert (ctx[16 + units:2048] == 0).all()


@pytest.mark.parametrize("shape", [
    # (N, C, O, H, W): column blocks past POINTWISE_COLUMNS, rows in partial panels, a
    # batch; a single column is the matrix-vector product (outputs in chunks past 256, the
    # rows of the weights four at a time and the rest)
    (1, 24, 40, 23, 29), (1, 320, 130, 7, 7), (2, 5, 3, 1, 1), (3, 16, 17, 9, 31),
    # fewer column blocks than the threads want: narrower blocks (see SPLIT_COLUMNS)
    (1, 48, 32, 27, 27),
    # few outputs: the narrow micro-kernel's panels (16 rows; 48 rows on 169 columns)
    (2, 40, 16, 55, 9), (1, 200, 48, 13, 13),
    (1, 103, 1000, 1, 1), (2, 64, 600, 1, 1),
    # one image's product of 1.2 MB of weights: its depth cut into ranges of rows (parts
    # added up after) on more than one thread
    (1, 600, 500, 1, 1),
    # few columns: the GEMM turned over (positions as rows, channels in strips)
    (1, 1030, 70, 3, 3), (2, 1100, 33, 2, 5), (1, 1024, 5, 1, 2)])
@pytest.mark.parametrize("nt", [1, 2, 5])
def test_pointwise_blocks_equal_the_definition(shape, nt):
    """Every (panel group, column block) unit of the pointwise GEMM, with its bias, residual
    and activation, against a float64 matrix product, for several thread counts."""
    _compiled_or_skip()
    N, C, O, H, W = shape
    rng = np.random.default_rng(sum(shape) + nt)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    if N * H * W > 1:
        x[0, 0, 0, 0] = np.nan                  # poisons output column 0 of image 0 only
    w = rng.standard_normal((O, C)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    r = rng.standard_normal((N, O, H, W)).astype(np.float32)
    for act, res, bias in ((0, None, None), (1, r, b), (5, None, b), (2, r, None), (8, r, b),
                           (4, None, None)):
        a0, a1 = _PARAMS[act]
        y = K.Pointwise(w, bias, (act, a0, a1), x.shape)(x, res, nt=nt)
        want = np.einsum("oc,nchw->nohw", w.astype(np.float64), x.astype(np.float64))
        if bias is not None:
            want += bias[None, :, None, None]
        if res is not None:
            want += res
        scale = max(1.0, np.nanmax(np.abs(want)))         # before the activation
        want = _ACTS[act](want)
        assert np.array_equal(np.isnan(y), np.isnan(want)), act
        ok = ~np.isnan(want)
        assert np.abs(y[ok] - want[ok]).max() <= 1e-5 * scale, act


def test_a_large_matrix_vector_product_splits_its_depth():
    """One image's fully connected layer of at least GEMV_SPLIT_BYTES of weights on several
    threads: a call of the parts (ranges of rows, at most GEMV_SPLIT_UNITS per thread) and a
    call adding them up; on one thread, or smaller, one call by chunks of outputs."""
    _compiled_or_skip()
    from tensorlayout.backends.cpu_source_reduce import GEMV_CTX

    x = np.zeros((1, 600, 1, 1), np.float32)
    y = np.empty((1, 500, 1, 1), np.float32)
    pw = K.Pointwise(np.ones((500, 600), np.float32), None, (0, 0.0, 0.0), x.shape)
    assert 600 * 500 * 4 >= cpu_gemm.GEMV_SPLIT_BYTES
    (_, parts, n1, _), (_, adds, n2, _) = pw.calls(x, y, None, 3)
    split = GEMV_CTX.index("split")
    assert parts[split] == adds[split] == 3 * cpu_gemm.GEMV_SPLIT_UNITS and n1 == 3
    assert parts[GEMV_CTX.index("phase")] == 0 and adds[GEMV_CTX.index("phase")] == 1
    assert len(pw.calls(x, y, None, 1)) == 1
    small = K.Pointwise(np.ones((50, 60), np.float32), None, (0, 0.0, 0.0), (1, 60, 1, 1))
    assert len(small.calls(np.zeros((1, 60, 1, 1), np.float32),
                           np.empty((1, 50, 1, 1), np.float32), None, 3)) == 1


def test_few_output_channels_take_the_narrow_panels():
    """Where the vector path has a narrow micro-kernel, a 1 x 1 layer of 16, 32 or 48 outputs
    packs its weights in its panels (16 rows in two, not in two of the main kernel's 14),
    64 and more in the main kernel's; an im2col layer keeps the main kernel (its unfolded
    columns are packed for it)."""
    _compiled_or_skip()
    from tensorlayout.winograd import _simd

    isa = _simd.module().isa
    if not isa.narrow:
        pytest.skip("this vector path has no narrow micro-kernel")
    for O, narrow in ((16, True), (32, True), (48, True), (64, False), (112, False)):
        pw = K.Pointwise(np.ones((O, 8), np.float32), None, (0, 0.0, 0.0), (1, 8, 9, 9))
        assert pw.mr == (isa.narrow[0] if narrow else isa.mr), O
        assert pw.a.size == -(-O // pw.mr) * pw.mr * 8
    conv = K.Im2col(np.ones((16, 8, 3, 3), np.float32), None, (0, 0.0, 0.0), (1, 8, 9, 9),
                    (1, 1), (1, 1), (1, 1), (9, 9))
    assert conv.pw.mr == isa.mr


def test_pointwise_splits_by_columns_where_the_input_outweighs_the_weights():
    """A squeeze layer (256 -> 32 channels on 27 x 27) on two threads: column blocks only,
    whole vectors wide, covering the positions, UNITS_PER_THREAD per thread; a layer of more
    weights than positions (512 -> 1000 on 13 x 13) still splits its weight panels."""
    _compiled_or_skip()
    from tensorlayout.backends.cpu_source import PW_CTX
    from tensorlayout.winograd import _simd

    lanes = _simd.module().isa.lanes
    at = {k: PW_CTX.index(k) for k in ("cbw", "ncb", "nrb")}
    for C, O, H, split in ((256, 32, 27, True), (512, 1000, 13, False)):
        x = np.zeros((1, C, H, H), np.float32)
        y = np.empty((1, O, H, H), np.float32)
        pw = K.Pointwise(np.ones((O, C), np.float32), None, (0, 0.0, 0.0), x.shape)
        (_, ctx, n, _), = pw.calls(x, y, None, 2)
        cbw, ncb, nrb = (int(ctx[at[k]]) for k in ("cbw", "ncb", "nrb"))
        assert n == 2 and ncb * cbw >= H * H > (ncb - 1) * cbw
        if split:
            assert nrb == 1 and ncb == 2 * cpu_gemm.UNITS_PER_THREAD and cbw % lanes == 0
        else:
            assert nrb > 1


@pytest.mark.parametrize("compiled", [True, False])
def test_epilogue_without_bias_keeps_nan_to_its_element(compiled, monkeypatch):
    """NaN at the start of a plane, no bias: only that element is NaN afterwards."""
    if compiled:
        _compiled_or_skip()
    else:
        monkeypatch.setattr(K, "ready", lambda: False)
    y = np.ones((1, 2, 6), np.float32)
    y[0, 1, 0] = np.nan
    K.epilogue(y, None, np.ones((1, 2, 6), np.float32), (1, 0.0, 0.0))
    assert np.isnan(y).sum() == 1 and np.isnan(y[0, 1, 0])
    assert (y[~np.isnan(y)] == 2).all()


@pytest.mark.parametrize("nt", [2, 3, 7])
def test_depthwise_and_epilogue_split_among_threads(nt):
    """The planes shared among several native workers give what one thread gives by the
    definition (the window specialisations and the generic kernel), with Relu in the
    kernels and Sigmoid and SiLU after them in the machine code."""
    _compiled_or_skip()
    rng = np.random.default_rng(nt)
    x = rng.standard_normal((2, 5, 12, 10)).astype(np.float32)
    for (KH, stride, dil), act in itertools.product(
            ((3, (2, 2), (1, 1)), (5, (1, 1), (1, 1)), (3, (1, 1), (2, 2))), (1, 4, 8)):
        w = rng.standard_normal((10, 1, KH, KH)).astype(np.float32)
        b = rng.standard_normal(10).astype(np.float32)
        OH = (12 + 2 * (KH // 2) * dil[0] - (KH - 1) * dil[0] - 1) // stride[0] + 1
        OW = (10 + 2 * (KH // 2) * dil[1] - (KH - 1) * dil[1] - 1) // stride[1] + 1
        y = np.empty((2, 10, OH, OW), np.float32)
        begin = (KH // 2 * dil[0], KH // 2 * dil[1])
        K.depthwise(x, w, b, y, (*stride, *begin, *dil, 2, act, 0.0, 0.0), nt=nt)
        want = _ACTS[act](_direct64(x, w, b, stride, begin, dil, 2, (OH, OW)))
        assert np.abs(y - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), act
    y = rng.standard_normal((3, 7, 50)).astype(np.float32)
    res = rng.standard_normal((3, 7, 50)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    want = _ACTS[3](y.astype(np.float64) + b[None, :, None] + res)
    K.epilogue(y, b, res, (3, *_PARAMS[3]), nt=nt)
    assert np.abs(y - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


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


def test_silu_fused_where_nothing_else_reads_its_parts():
    """Conv -> Sigmoid -> Mul(conv, sigmoid) runs as one step (either Mul order, after a
    depthwise, a pointwise and a 3x3 convolution); a Sigmoid whose output is also read
    elsewhere stays a step of its own.  Against onnxruntime, with NaN and large inputs."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((1, 4, 9, 9)) * 30).astype(np.float32)
    x[0, 1, 2, 2] = np.nan
    inits = {"dw": rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
             "pw": rng.standard_normal((6, 4, 1, 1)).astype(np.float32),
             "cw": rng.standard_normal((6, 6, 3, 3)).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "dw"], ["a"], group=4, pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["a"], ["as"]),
        helper.make_node("Mul", ["a", "as"], ["a2"]),
        helper.make_node("Conv", ["a2", "pw"], ["b"]),
        helper.make_node("Sigmoid", ["b"], ["bs"]),
        helper.make_node("Mul", ["bs", "b"], ["b2"]),
        helper.make_node("Conv", ["b2", "cw"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["cs"]),
        helper.make_node("Mul", ["c", "cs"], ["c2"]),
        helper.make_node("Add", ["c2", "cs"], ["y"]),       # cs read twice: no fusion
    ]
    m = make_model(nodes, {"x": x}, ["y"], inits)
    model = load(m.SerializeToString())
    fused = {st.node.name or st.node.op: st.fused for st in model.steps}
    assert sorted(len(f) for f in fused.values() if f) == [2, 2]
    ours = [model.run(x)]
    ref = ort_session(m.SerializeToString()).run(None, {"x": x})
    for a, b in zip(ours, ref):
        assert np.array_equal(np.isnan(a), np.isnan(b))
        ok = ~np.isnan(b)
        assert np.abs(a[ok] - b[ok]).max() <= 1e-4 * max(1.0, np.abs(b[ok]).max())


@pytest.mark.parametrize("act", [4, 8])
def test_sigmoid_and_silu_over_float32s_whole_range(act):
    """The compiled Sigmoid and SiLU (their own vectorised e ** x) against float64 from
    -120 to 120, through the subnormal and overflow edges, with inf, -inf and NaN."""
    _compiled_or_skip()
    v = np.concatenate([np.linspace(-120, 120, 20001), [87.3, 88.5, 88.8, -87.4, -104, 0.0,
                                                         -0.0, 1e-30, np.inf, -np.inf, np.nan]])
    y = v.astype(np.float32).reshape(1, 1, -1).copy()
    K.epilogue(y, None, None, (act, 0.0, 0.0))
    with np.errstate(over="ignore", invalid="ignore"):
        s = 1 / (1 + np.exp(-v.astype(np.float32).astype(np.float64)))
        want = s if act == 4 else v.astype(np.float32) * s
    y = y.ravel()
    assert np.array_equal(np.isnan(y), np.isnan(want))
    ok = np.isfinite(want)
    assert np.array_equal(y[~ok & ~np.isnan(want)], want[~ok & ~np.isnan(want)])
    err = np.abs(y[ok] - want[ok]) / np.maximum(np.abs(want[ok]), 1e-30)
    small = np.abs(want[ok]) < 1e-37           # float32 subnormal results: absolute error
    assert err[~small].max() <= 1e-6, err[~small].max()
    assert np.abs(y[ok][small] - want[ok][small]).max() <= 1e-37


@pytest.mark.parametrize("case", [
    # (N, C, H, W, O, KH, KW, stride, begin, end, dilation)
    (1, 3, 17, 15, 8, 7, 7, (2, 2), (3, 3), (3, 3), (1, 1)),
    (2, 5, 9, 10, 6, 3, 3, (2, 2), (1, 1), (1, 1), (1, 1)),
    (1, 4, 11, 12, 5, 3, 2, (1, 3), (0, 2), (2, 0), (2, 1)),
    (1, 16, 3, 3, 20, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1)),
    (1, 2, 4, 5, 3, 5, 5, (1, 1), (4, 4), (4, 4), (1, 1)),   # windows mostly outside
    (1, 3, 40, 37, 10, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1)),  # blocks cutting output rows
    (2, 2, 45, 45, 4, 7, 7, (2, 2), (3, 3), (3, 3), (1, 1)),   # blocks, column phases
    (1, 30, 12, 12, 7, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1)),  # deep: unfolded whole
    (2, 3, 3, 3, 5, 3, 3, (1, 1), (0, 0), (0, 0), (1, 1)),     # one position: GEMV
    # the shifted GEMM's paths: taps in two register groups (9 x 64 rows), one sliced GEMM
    # per tap (600 channels), a stride-2 window reading four phases, a stride of 3, dilation
    (1, 64, 9, 8, 30, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1)),
    (1, 600, 4, 5, 17, 3, 3, (1, 1), (1, 0), (1, 2), (1, 1)),
    (2, 6, 13, 11, 33, 3, 3, (2, 2), (1, 1), (0, 1), (1, 1)),
    (1, 5, 14, 16, 9, 4, 2, (3, 2), (2, 1), (1, 0), (1, 2)),
    (3, 4, 10, 9, 40, 3, 3, (1, 1), (2, 2), (2, 2), (2, 2)),
    (1, 4, 9, 12, 5, 3, 3, (2, 2), (0, 2), (1, 0), (1, 1)),    # stride 2, column pads 2 / 0
    (1, 3, 8, 11, 6, 5, 5, (2, 2), (2, 0), (2, 1), (1, 1)),
    # the shifted GEMM row by row (depth at most SHIFT_ROWS_DEPTH, 16 or more columns): a
    # first layer of stride 2, 30 outputs (panels of mr cut), dilation, two images
    (1, 3, 40, 37, 30, 3, 3, (2, 2), (1, 1), (1, 1), (1, 1)),
    (2, 5, 19, 21, 17, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1)),
    (1, 4, 22, 24, 9, 3, 3, (1, 1), (2, 2), (2, 2), (2, 2)),
    # the direct convolution: 33 channels (a block and a lane), 70 outputs (two strips and
    # a narrow one), rows of 31 positions at stride 2
    (1, 33, 12, 31, 70, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1)),
    (2, 20, 13, 62, 24, 3, 3, (2, 2), (1, 1), (1, 1), (1, 1)),
])
@pytest.mark.parametrize("nt", [1, 3])
@pytest.mark.parametrize("kind", ["Im2col", "Shifted", "Direct"])
def test_conv_gemms_equal_the_definition(case, nt, kind):
    """Columns unfolded on the workers and the packed GEMM (``Im2col``), one GEMM per tap over
    the stride phases (``Shifted``, by blocks of its grid or row by row), the output rows'
    positions by the taps of a blocked copy of the input (``Direct``: channels past a whole
    block, strips of one vector and of two, panels cut by the row's end): with bias, residual
    and ReLU, with a bias and a clip but no residual (the shifted GEMM's other store), with a
    residual and SiLU (an activation after the store), and bare, against a float64 direct
    convolution written from the definition."""
    _compiled_or_skip()
    N, C, H, W, O, KH, KW, stride, begin, end, dil = case
    if kind == "Direct" and stride[1] not in (1, 2):
        with pytest.raises(ValueError, match="column stride of 1 or 2"):
            K.Direct(np.zeros((O, C, KH, KW), np.float32), None, (0, 0.0, 0.0), (N, C, H, W),
                     stride, begin, dil, (1, 1))
        return
    rng = np.random.default_rng(sum(case[:7]) + nt)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((O, C, KH, KW)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    OH = (H + begin[0] + end[0] - (KH - 1) * dil[0] - 1) // stride[0] + 1
    OW = (W + begin[1] + end[1] - (KW - 1) * dil[1] - 1) // stride[1] + 1
    res = rng.standard_normal((N, O, OH, OW)).astype(np.float32)
    conv = getattr(K, kind)
    y = conv(w, b, (1, 0.0, 0.0), x.shape, stride, begin, dil, (OH, OW))(x, res, nt=nt)
    y2 = conv(w, b, (2, -0.5, 0.75), x.shape, stride, begin, dil, (OH, OW))(x, nt=nt)
    y3 = conv(w, None, (0, 0.0, 0.0), x.shape, stride, begin, dil, (OH, OW))(x, nt=nt)
    y4 = conv(w, b, (8, 0.0, 0.0), x.shape, stride, begin, dil, (OH, OW))(x, res, nt=nt)
    if kind == "Shifted":           # the row-by-row cases are the ones the rule picks
        by_rows = conv(w, b, (1, 0.0, 0.0), x.shape, stride, begin, dil, (OH, OW)).by_rows
        assert by_rows == (C * KH * KW <= cpu_gemm.SHIFT_ROWS_DEPTH
                           and OW >= cpu_gemm.SHIFT_ROWS_FROM), case
    want = _conv64(x, w, stride, begin, dil, (OH, OW))
    pre = want + b[None, :, None, None] + res
    tol = 1e-5 * max(1.0, np.abs(pre).max(), np.sqrt(C * KH * KW))
    assert y.shape == want.shape and y2.shape == want.shape
    assert np.abs(y - np.maximum(pre, 0)).max() <= tol
    assert np.abs(y2 - np.clip(want + b[None, :, None, None], -0.5, 0.75)).max() <= tol
    assert np.abs(y3 - want).max() <= tol
    assert np.abs(y4 - pre / (1 + np.exp(-pre))).max() <= tol


@pytest.mark.parametrize("batch", [1, 3])
def test_fully_connected_steps_agree_with_onnxruntime(batch):
    """Gemm with transB, alpha, beta and a (1, N) C, a fused ReLU; MatMul by a constant; Gemm
    with a C of one value: the backend's fc steps against onnxruntime (NaN in the input)."""
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 7)).astype(np.float32)
    x[0, 3] = np.nan if batch > 1 else x[0, 3]          # a NaN row among finite ones
    inits = {"w1": rng.standard_normal((5, 7)).astype(np.float32),
             "c1": rng.standard_normal((1, 5)).astype(np.float32),
             "w2": rng.standard_normal((5, 4)).astype(np.float32),
             "w3": rng.standard_normal((4, 6)).astype(np.float32),
             "c3": np.array([0.5], np.float32)}
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "c1"], ["a"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Relu", ["a"], ["a2"]),
        helper.make_node("MatMul", ["a2", "w2"], ["b"]),
        helper.make_node("Gemm", ["b", "w3", "c3"], ["y"]),
    ]
    m = make_model(nodes, {"x": x}, ["y"], inits)
    model = load(m.SerializeToString())
    assert [st.info.get("algorithm") for st in model.steps] == ["fc GEMM"] * 3
    ours = model.run(x)
    ref = ort_session(m.SerializeToString()).run(None, {"x": x})[0]
    assert ours.shape == ref.shape
    assert np.array_equal(np.isnan(ours), np.isnan(ref))
    ok = ~np.isnan(ref)
    assert np.abs(ours[ok] - ref[ok]).max() <= 1e-5 * max(1.0, np.abs(ref[ok]).max())


def _pool64(x, p, hw):
    """Max or average pooling by its definition, in float64, one output at a time: the window's
    real elements (and, for an average with ``count_include_pad``, its padding inside the
    begin + end pads) counted; a window position in the ceil-mode extension never counts; a
    NaN anywhere in a max window gives NaN."""
    N, C, H, W = x.shape
    OH, OW = p.out
    y = np.zeros((N, C, OH, OW))
    for n in range(N):
        for c in range(C):
            for oh in range(OH):
                for ow in range(OW):
                    vals, count = [], 0
                    for i in range(p.kernel[0]):
                        for j in range(p.kernel[1]):
                            iy = oh * p.strides[0] + i * p.dilations[0] - p.begin[0]
                            ix = ow * p.strides[1] + j * p.dilations[1] - p.begin[1]
                            if 0 <= iy < H and 0 <= ix < W:
                                vals.append(float(x[n, c, iy, ix]))
                                count += 1
                            elif -p.begin[0] <= iy < H + p.end[0] and -p.begin[1] <= ix < W + p.end[1]:
                                count += p.count_include_pad
                    if p.is_max:
                        y[n, c, oh, ow] = np.nan if any(v != v for v in vals) else max(vals)
                    else:
                        y[n, c, oh, ow] = sum(vals) / max(count, 1)
    return y


@pytest.mark.parametrize("case", [
    # kernel, strides, dilations, begin, end, ceil, count_include_pad, shape
    ((3, 3), (2, 2), (1, 1), (0, 0), (0, 0), True, False, (1, 3, 13, 11)),    # SqueezeNet's
    ((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), False, False, (2, 3, 12, 12)),   # ResNet's
    ((2, 2), (2, 2), (1, 1), (0, 0), (0, 0), False, False, (1, 4, 9, 8)),
    ((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False, True, (1, 2, 7, 6)),
    ((3, 2), (1, 3), (2, 1), (1, 0), (2, 1), True, False, (1, 3, 10, 11)),    # the generic loop
    ((5, 5), (2, 2), (1, 1), (2, 2), (2, 2), False, False, (1, 2, 9, 9)),
    ((3, 3), (2, 2), (2, 2), (1, 2), (2, 1), True, False, (1, 3, 14, 15)),    # dilated
    ((3, 3), (2, 2), (1, 1), (0, 0), (0, 0), True, False, (1, 5, 40, 37)),    # rows of vectors
    ((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), False, False, (2, 37, 9, 10)),   # blocks of 16
])
@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("nt", [1, 3])
@pytest.mark.parametrize("xb, yb", [(False, False), (False, True), (True, True), (True, False)])
def test_pooling_loops_equal_the_definition(case, is_max, nt, xb, yb):
    """Every pooling kernel against the float64 definition, NaN and inf planes included,
    from and into planes and the blocked layout (the lanes past the channels zero); a
    blocked input only for a max of dilation 1 (others refused)."""
    from tensorlayout.backends.cpu_twins import from_blocked, to_blocked
    from tensorlayout.graph.ops import Pool
    from tensorlayout.graph.ops.conv import pool_output_side
    from tensorlayout.graph.ops.nn import pool_divisor

    if not K.ready():
        pytest.skip("the compiled kernels are not available")
    kernel, strides, dil, begin, end, ceil, cip, shape = case
    out = tuple(pool_output_side(s, k, st, d, b, e, ceil) for s, k, st, d, b, e
                in zip(shape[2:], kernel, strides, dil, begin, end))
    extra = tuple(max(0, (o - 1) * s + (k - 1) * d + 1 - (size + b + e)) for o, s, k, d, size, b, e
                  in zip(out, strides, kernel, dil, shape[2:], begin, end))
    p = Pool(is_max, kernel, strides, dil, begin, end, extra, cip, out)
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    x[0, 0, 1, 2] = np.nan                       # one NaN plane, one plane with an infinity
    x[-1, -1, -1, 0] = np.inf if is_max else -np.inf
    if xb and not (is_max and dil == (1, 1)):
        with pytest.raises(ValueError, match="blocked input takes a max pool of dilation 1"):
            K.Pool2d(p, shape, pool_divisor(p, shape[2:]), yb, xb)
        return
    xi = to_blocked(x) if xb else x
    y = K.Pool2d(p, shape, pool_divisor(p, shape[2:]), yb, xb)(xi, nt)
    if yb:
        C = shape[1]
        assert y.shape == (shape[0], -(-C // 16), *out, 16)
        assert not np.any(y[:, -1, ..., C % 16 or 16:])
        y = from_blocked(y, C)
    want = _pool64(x, p, shape[2:])
    assert np.array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("k,pad,ceil", [(2, 0, False), (2, 0, True), (2, 1, False),
                                        (2, 1, True), (3, 0, False), (3, 0, True),
                                        (3, 1, False), (3, 1, True), (3, 2, True)])
@pytest.mark.parametrize("W", [1, 16, 17, 33, 70])
def test_machine_code_max_pooling_equals_the_definition(k, pad, ceil, W):
    """The k x k / 2 max pooling of the machine code (rows of 16-float vectors, the even and
    odd columns dealt by shuffles) against the float64 definition, bit for bit: widths
    around one and two vectors, top and left padding, ceil-mode windows past the plane,
    a NaN plane and an infinity plane (pooled again by the generic loop), and a plane of
    signed zeros, whose signs are the separable compiled loop's (the same order of
    comparisons); a window wholly in the padding takes that loop instead."""
    from tensorlayout.backends.cpu_source_reduce import POOL_CTX
    from tensorlayout.graph.ops import Pool
    from tensorlayout.graph.ops.conv import pool_output_side

    if not K.ready():
        pytest.skip("the compiled kernels are not available")
    shape = (2, 3, 9, W)
    out = tuple(pool_output_side(s, k, 2, 1, pad, pad, ceil) for s in shape[2:])
    extra = tuple(max(0, (o - 1) * 2 + k - (s + 2 * pad)) for o, s in zip(out, shape[2:]))
    p = Pool(True, (k, k), (2, 2), (1, 1), (pad, pad), (pad, pad), extra, False, out)
    rng = np.random.default_rng(k * 100 + W + pad)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 2] = np.where(rng.random(x[0, 2].shape) < 0.5, np.float32(0.0), np.float32(-0.0))
    x[0, 2, ::3, 1::4] = -1.0
    x[1, 0, 4, W // 2] = np.nan
    x[1, 1, 8, W - 1] = -np.inf
    P = K.Pool2d(p, shape)
    whole = all((o - 1) * 2 - pad < s for o, s in zip(out, shape[2:]))
    kind, fast = POOL_CTX.index("kind"), POOL_CTX.index("fast")
    assert (P.template[kind] == -2) == whole
    y = P(x, 2)
    want = _pool64(x, p, shape[2:])
    assert np.array_equal(np.isnan(y), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(y[ok], want[ok].astype(np.float32))
    sep = K.Pool2d(p, shape)
    sep.template[kind], sep.template[fast] = -1, 0
    assert np.array_equal(np.signbit(y[0, 2]), np.signbit(sep(x, 2)[0, 2]))


@pytest.mark.parametrize("act, shape", [("Relu", (2, 37, 5, 7)), (None, (3, 20)),
                                        ("Clip", (1, 16, 3, 1))])
def test_batchnorm_steps_are_a_map_per_channel(act, shape, monkeypatch):
    """A BatchNormalization no Conv takes (DenseNet's, before its activation and 1 x 1
    layer) runs as the rows entry's map per channel with the activation after it: the
    graph's own float32 product and sum, bit for bit (onnxruntime's results too), a NaN
    kept; while the kernels compile, the graph's kernel."""
    _compiled_or_skip()
    rng = np.random.default_rng(len(shape))
    C = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[5] = np.nan
    inits = {"s": rng.uniform(0.5, 2, C).astype(np.float32),
             "b": rng.standard_normal(C).astype(np.float32),
             "m": rng.standard_normal(C).astype(np.float32),
             "v": rng.uniform(0.5, 2, C).astype(np.float32)}
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"],
                              epsilon=1e-3)]
    if act == "Clip":
        inits.update(lo=np.array(-0.5, np.float32), hi=np.array(0.75, np.float32))
        nodes.append(helper.make_node("Clip", ["n", "lo", "hi"], ["y"]))
    elif act:
        nodes.append(helper.make_node(act, ["n"], ["y"]))
    out = "y" if act else "n"
    data = make_model(nodes, {"x": x}, [out], inits).SerializeToString()
    m = load(data)
    assert [s.info.get("algorithm") for s in m.cpu().steps] == ["affine rows"]
    from tensorlayout.graph.ops import batchnorm_affine

    mul, add = batchnorm_affine(inits["s"], inits["b"], inits["m"], inits["v"], 1e-3)
    bshape = (1, C) + (1,) * (len(shape) - 2)
    want = x * mul.reshape(bshape) + add.reshape(bshape)
    want = {"Relu": lambda v: np.where(v < 0, np.float32(0), v),
            "Clip": lambda v: np.clip(v, np.float32(-0.5), np.float32(0.75)),
            None: lambda v: v}[act](want)
    for _ in range(2):          # the step alone, then in the bound run
        got = m.cpu().run({"x": x}, threads=2)[0][0]
        assert np.array_equal(got, want, equal_nan=True)
    compare(nodes, {"x": np.nan_to_num(x)}, [out], inits)
    monkeypatch.setattr(K, "ready", lambda: False)
    assert np.allclose(load(data).cpu().run({"x": x}, threads=2)[0][0], want, rtol=1e-6,
                       atol=1e-6, equal_nan=True)


def test_pooling_steps_agree_with_onnxruntime():
    x = np.random.default_rng(3).standard_normal((2, 5, 16, 15)).astype(np.float32)
    nodes = [helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2],
                              ceil_mode=1),
             helper.make_node("AveragePool", ["a"], ["y"], kernel_shape=[3, 3], strides=[1, 1],
                              pads=[1, 1, 1, 1])]
    data = make_model(nodes, {"x": x}, ["y"]).SerializeToString()
    assert [s.info.get("algorithm") for s in load(data).cpu().steps] == ["pool loops"] * 2
    compare(nodes, {"x": x}, ["y"], tol=1e-6)


@pytest.mark.parametrize("case", [
    # (N, C, H, W, KH, KW, stride, begin, end, dilation, act): channels past one vector and
    # not a multiple of it, padding on every side, stride 2, dilation, a batch
    (1, 37, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1), 5),
    (2, 16, 6, 5, 5, 5, (2, 2), (2, 2), (2, 2), (1, 1), 8),
    (1, 50, 9, 8, 3, 3, (2, 1), (0, 1), (1, 0), (2, 2), 2),
    (1, 5, 3, 3, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1), 1),
])
@pytest.mark.parametrize("nt", [1, 2, 5])
def test_channels_last_depthwise_equals_the_definition(case, nt):
    """The depthwise kernel vectorised over channels (small planes), NaN and inf included,
    for several thread counts, against the float64 definition."""
    _compiled_or_skip()
    N, C, H, W, KH, KW, stride, begin, end, dil, act = case
    rng = np.random.default_rng(sum(case[:4]) + nt)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    x[0, 1, 0, 0] = np.nan
    x[-1, -1, -1, -1] = np.inf
    w = rng.standard_normal((C, 1, KH, KW)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    OH = (H + begin[0] + end[0] - (KH - 1) * dil[0] - 1) // stride[0] + 1
    OW = (W + begin[1] + end[1] - (KW - 1) * dil[1] - 1) // stride[1] + 1
    a0, a1 = _PARAMS[act]
    y = K.DepthwiseChannelsLast(w, b, (*stride, *begin, *dil, 1, act, a0, a1), x.shape,
                                (OH, OW))(x, nt)
    with np.errstate(invalid="ignore", over="ignore"):
        want = _ACTS[act](_direct64(x, w, b, stride, begin, dil, 1, (OH, OW)))
    assert np.array_equal(np.isnan(y), np.isnan(want))
    ok = np.isfinite(want)
    assert np.array_equal(y[~ok & ~np.isnan(want)], want[~ok & ~np.isnan(want)])
    assert np.abs(y[ok] - want[ok]).max() <= 1e-5 * max(1.0, np.abs(want[ok]).max())


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 20, 9, 9), (1, 40, 1, 1), (3, 5, 17), (1, 3, 4, 4, 3)])
@pytest.mark.parametrize("nt", [1, 3])
def test_plane_means_and_scaling_equal_the_definition(shape, nt):
    """GlobalAveragePool (sixteen running sums a plane, then the rest) and the per-plane
    scaling against float64 sums written here, NaN and inf kept to their planes."""
    _compiled_or_skip()
    rng = np.random.default_rng(sum(shape) + nt)
    x = rng.standard_normal(shape).astype(np.float32) * 4 + 1
    x.flat[3] = np.nan
    x.flat[-1] = np.inf
    N, C = shape[:2]
    planes = x.astype(np.float64).reshape(N * C, -1)
    want = np.array([sum(float(v) for v in row) / row.size for row in planes])
    got = K.plane_means(x, nt)
    assert got.shape == (N, C) + (1,) * (len(shape) - 2)
    got = got.reshape(-1)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    ok = np.isfinite(want)
    assert np.abs(got[ok] - want[ok]).max() <= 1e-6 * max(1.0, np.abs(want[ok]).max())
    s = rng.standard_normal((N, C) + (1,) * (len(shape) - 2)).astype(np.float32)
    y = K.scale_planes(x, s, nt)
    with np.errstate(invalid="ignore"):
        want = np.array([[v * float(s.reshape(-1)[r]) for v in row] for r, row in enumerate(planes)])
    assert np.array_equal(y.reshape(N * C, -1), want.astype(np.float32), equal_nan=True)


def test_squeeze_excite_steps_agree_with_onnxruntime():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 24, 7, 6)).astype(np.float32)
    w1 = rng.standard_normal((8, 24, 1, 1)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((24, 8, 1, 1)).astype(np.float32) * 0.3
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]),
             helper.make_node("Conv", ["g", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["b"]),
             helper.make_node("HardSigmoid", ["b"], ["s"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["s", "x"], ["y"])]          # the factor first
    data = make_model(nodes, {"x": x}, ["y"], {"w1": w1, "w2": w2}).SerializeToString()
    algs = [s.info.get("algorithm") for s in load(data).cpu().steps]
    assert algs[0] == "plane loops" and algs[-1] == "plane loops", algs
    compare(nodes, {"x": x}, ["y"], {"w1": w1, "w2": w2}, tol=1e-6)


@pytest.mark.parametrize("case", [
    # (C, H, W, O, kernel, stride, pads, dilation, group, residual, algorithm of the step)
    (16, 23, 23, 64, 3, 1, (1, 1, 1, 1), 1, 1, False, "shifted GEMM"),     # 4.9M multiply-adds
    (64, 64, 64, 64, 3, 1, (1, 1, 1, 1), 1, 1, True, "winograd F(4,3)"),   # 151M: Winograd
    (64, 40, 40, 64, 3, 1, (1, 1, 1, 1), 1, 1, True, "shifted GEMM"),      # 59M
    (3, 20, 40, 8, 5, 1, (2, 1, 0, 3), 2, 1, True, "shifted GEMM"),        # im2col's, stride 1
    (3, 20, 17, 8, 5, 1, (2, 1, 0, 3), 2, 1, True, "im2col"),              # 8 of 13 dropped
    (48, 5, 5, 192, 3, 1, (1, 1, 1, 1), 1, 1, False, "im2col"),            # 2 of 5 dropped
    (16, 21, 21, 24, 3, 2, (1, 1, 1, 1), 1, 1, False, "shifted GEMM"),     # stride 2, 144 rows
    (3, 45, 40, 16, 7, 2, (3, 3, 2, 3), 1, 1, True, "shifted GEMM"),      # a stem: 147 rows
    (32, 21, 21, 24, 3, 2, (1, 1, 1, 1), 1, 1, False, "im2col"),           # stride 2, 288 rows
    (32, 12, 12, 32, 3, 1, (1, 1, 1, 1), 1, 2, False, "winograd F(4,3)"),  # two groups
    (16, 21, 21, 24, 5, 2, (2, 2, 2, 2), 1, 1, False, "im2col"),           # stride 2, 400 rows
    (64, 14, 6, 64, 3, 1, (1, 1, 1, 1), 1, 1, True, "im2col"),            # rows of 6
    (256, 14, 14, 256, 3, 1, (1, 1, 1, 1), 1, 1, True, "winograd F(4,3)"),  # 116M, 16 tiles
    (64, 56, 56, 64, 3, 1, (1, 1, 1, 1), 1, 1, True, "direct convolution"),  # 64 x 64 channels
    (128, 32, 32, 128, 3, 1, (1, 1, 1, 1), 1, 1, False, "winograd F(4,3)"),  # 64 tiles, 128^2
    (128, 28, 28, 128, 3, 1, (1, 1, 1, 1), 1, 1, False, "shifted GEMM"),   # 116M: small
])
def test_layers_take_the_shifted_gemm_where_the_rule_says(case):
    """The schedule's rules for the CPU backend (``SHIFT_MAX_MACS``, the shifted grid's
    overhang; a layer of 32 channels or more whose output rows fill enough of the
    micro-kernel's rows takes the direct convolution instead of either GEMM, or instead of
    Winograd of at most ``DIRECT_MAX_TILES`` tiles or at most ``DIRECT_MAX_PRODUCT`` input
    times output channels) and the layer it picks against
    onnxruntime, in a network of a Conv (with a residual Add) and a ReLU."""
    _compiled_or_skip()
    C, H, W, O, k, s, pads, d, g, residual, algorithm = case
    rng = np.random.default_rng(C + H + O)
    x = rng.standard_normal((1, C, H, W)).astype(np.float32)
    inits = {"w": (rng.standard_normal((O, C // g, k, k)) / np.sqrt(k * k * C // g)
                   ).astype(np.float32), "b": rng.standard_normal(O).astype(np.float32)}
    OH = (H + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    OW = (W + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s],
                              pads=list(pads), dilations=[d, d], group=g)]
    inputs = {"x": x}
    if residual:
        inputs["r"] = rng.standard_normal((1, O, OH, OW)).astype(np.float32)
        nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
    nodes.append(helper.make_node("Relu", ["a" if residual else "c"], ["y"]))
    compare(nodes, inputs, ["y"], inits)
    m = load(make_model(nodes, inputs, ["y"], inits).SerializeToString())
    from tensorlayout.schedule import winograd as rules
    from tensorlayout.winograd import _simd, _simd_block

    few_tiles = algorithm == "winograd F(4,3)" and (
        -(-OH // 4) * -(-OW // 4) <= rules.DIRECT_MAX_TILES or C * O <= rules.DIRECT_MAX_PRODUCT)
    if ((algorithm in ("shifted GEMM", "im2col") or few_tiles) and g == 1
            and C >= rules.DIRECT_MIN_CHANNELS
            and _simd_block.direct_panel(OH, OW, _simd.isa().mr)[1] >= rules.DIRECT_MIN_FILL):
        algorithm = "direct convolution"
    assert [st.info["algorithm"] for st in m.steps if st.node.op == "Conv"] == [algorithm]


@pytest.mark.parametrize("shape, perm", [
    ((1, 2, 58, 7, 7), (0, 2, 1, 3, 4)),     # a channel shuffle: rows of 49 floats
    ((2, 3, 4), (2, 0, 1)),                  # the last axis strided
    ((5, 1, 7, 3), (3, 1, 0, 2)),            # an axis of one dropped
    ((2, 3, 4, 5, 6, 7), (5, 3, 1, 0, 2, 4)),
    ((4, 0, 3), (2, 1, 0)),                  # empty
])
@pytest.mark.parametrize("nt", [1, 3])
def test_transpose_entry_equals_numpy(shape, perm, nt):
    """The compiled transpose against NumPy's, element for element, every float written."""
    _compiled_or_skip()
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    want = np.ascontiguousarray(np.transpose(x, perm))
    y = np.full(want.shape, np.nan, np.float32)
    K.run_calls(K.transpose_calls(perm, [x], y, nt))
    assert np.array_equal(y, want)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean_over_the_planes_and_a_shuffle_run_compiled(keepdims):
    """ReduceMean over the spatial axes (a plane mean) and a Reshape-Transpose-Reshape channel
    shuffle in one compiled stretch of the bound run, against onnxruntime."""
    _compiled_or_skip()
    rng = np.random.default_rng(keepdims)
    x = rng.standard_normal((1, 6, 5, 7)).astype(np.float32)
    inits = {"s5": np.array([1, 2, 3, 5, 7], np.int64), "s4": np.array([1, 6, 5, 7], np.int64),
             "ax": np.array([2, 3], np.int64)}
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "s5"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s4"], ["b"]),
             helper.make_node("ReduceMean", ["b", "ax"], ["y"], keepdims=keepdims)]
    compare(nodes, {"x": x}, ["y", "b"], inits, opset=18)
    m = load(make_model(nodes, {"x": x}, ["y", "b"], inits, opset=18).SerializeToString())
    m.run({"x": x}, threads=2)
    steps = m.cpu().steps
    assert [st.info.get("algorithm") for st in steps if st.node.op == "ReduceMean"] == ["plane loops"]
    segs = m.cpu()._bound_runs[2].segments           # the reshapes are views; the rest native
    assert [steps[s[1]].node.op for s in segs if s[0] == "python"] == ["Relu"]
    assert [s[0] for s in segs] == ["python", "native"]
