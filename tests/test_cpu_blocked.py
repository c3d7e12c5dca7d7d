"""The blocked layout (N, ceil(C/16), H, W, 16) of the CPU backend: its machine code
(``tl_dw_block``, ``tl_gemm_at``) on every vector path this CPU has, its kernels in every
pairing of layouts, the schedule's choice of blocked tensors, and networks that run through
them, each against a float64 definition written here or onnxruntime."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import helper

from _model_util import compare, make_model, ort_session, rel_l2
from test_cpu_kernels import _ACTS, _PARAMS, _compiled_or_skip, _conv64, _direct64
from test_winograd_simd import _isas

from tensorlayout.backends import cpu_kernels as K
from tensorlayout.backends.cpu_twins import from_blocked, to_blocked
from tensorlayout.model import load
from tensorlayout.schedule.cpu import schedule_cpu
from tensorlayout.winograd import _simd
from tensorlayout.winograd._simd_block import BLOCK_NAMES, BLOCK_SPECIAL, block_function


def _fn(mod, name, nargs):
    return ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * nargs)(mod.addr[name])


@pytest.fixture(params=_isas())
def isa(request):
    if not _simd.available():
        pytest.skip("llvmlite cannot compile the SIMD module here")
    return request.param


@pytest.mark.parametrize("window", [
    # (H, W, KH, KW, stride, dilation, begin pads)
    (6, 6, 3, 3, 1, 1, (1, 1)), (7, 9, 3, 3, 2, 1, (1, 0)), (12, 11, 5, 5, 1, 1, (2, 2)),
    (13, 10, 5, 5, 2, 1, (2, 1)), (9, 9, 3, 3, 1, 2, (2, 2)), (5, 7, 2, 3, 3, 1, (0, 1)),
    (1, 1, 3, 3, 1, 1, (1, 1)), (5, 23, 3, 3, 1, 1, (1, 1)), (6, 29, 5, 5, 2, 1, (2, 2)),
    (4, 26, 3, 3, 2, 1, (1, 1)), (3, 2, 5, 5, 1, 1, (2, 2))])
def test_block_kernel_equals_the_definition(isa, window):
    """Every exported form of ``tl_dw_block`` that takes the window, from a padded block
    plane and from the unpadded plane it copies itself, and of ``tl_dw_direct``, from the
    unpadded plane where it lies (its buffer NaN, which it must not read), with Relu, Clip
    and none: the float64 definition within float32 rounding, nothing written past the
    output."""
    H, W, KH, KW, s, d, (ph, pw) = window
    mod = _simd.module(isa)
    rng = np.random.default_rng(H * W + KH)
    OH = (H + 2 * ph - d * (KH - 1) - 1) // s + 1
    OW = (W + 2 * pw - d * (KW - 1) - 1) // s + 1
    PH = max(H + ph, (OH - 1) * s + d * (KH - 1) + 1)
    PW = max(W + pw, (OW - 1) * s + d * (KW - 1) + 1)
    x = rng.standard_normal((H, W, 16)).astype(np.float32)
    w = rng.standard_normal((KH, KW, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    xp = np.zeros((PH, PW, 16))
    xp[ph:ph + H, pw:pw + W] = x
    want = np.tile(b.astype(np.float64), (OH, OW, 1))
    for i in range(KH):
        for j in range(KW):
            want += w[i, j] * xp[i * d:i * d + (OH - 1) * s + 1:s, j * d:j * d + (OW - 1) * s + 1:s]
    names = ["tl_dw_block", "tl_dw_direct"]
    for direct in (False, True):
        if block_function(KH, KW, s, s, d, d, direct) not in names:
            names.append(block_function(KH, KW, s, s, d, d, direct))
    assert len(names) == (4 if KH in (3, 5) and KW == KH and d == 1 and s < 3 else 2)
    lohi = np.array([-0.5, 0.75], np.float32)
    for name in names:
        for act, ref in ((0, want), (1, np.maximum(want, 0)), (2, np.clip(want, -0.5, 0.75))):
            for copy in (False, True) if "block" in name else (True,):
                pad = np.zeros((PH, PW, 16), np.float32)
                if "direct" in name:
                    pad[:] = np.nan
                elif not copy:
                    pad[ph:ph + H, pw:pw + W] = x
                y = np.full((OH * OW + 1, 16), 7.5, np.float32)
                _fn(mod, name, 20)(pad.ctypes.data, PW * 16, w.ctypes.data, b.ctypes.data,
                                   y.ctypes.data, OH, OW, KH, KW, s, s, d, d,
                                   x.ctypes.data if copy else 0, H, W, ph, pw, act,
                                   lohi.ctypes.data)
                got = y[:-1].reshape(OH, OW, 16)
                assert np.abs(got - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max()), (name, act)
                assert (y[-1] == 7.5).all(), name


def test_block_functions_cover_their_windows():
    assert set(BLOCK_NAMES) == {f"tl_dw_{k}{f}" for k in ("block", "direct") for f in
                                [""] + [f"{a}x{b}s{c}" for a, b, c in BLOCK_SPECIAL]}
    for k in ("block", "direct"):
        assert block_function(3, 3, 2, 2, 1, 1, k == "direct") == f"tl_dw_{k}3x3s2"
        assert block_function(3, 3, 1, 2, 1, 1, k == "direct") == f"tl_dw_{k}"  # unequal strides
        assert block_function(5, 5, 1, 1, 2, 2, k == "direct") == f"tl_dw_{k}"  # dilated


@pytest.mark.parametrize("dims", [(5, 37, 20), (1, 16, 3), (30, 70, 33), (14, 1, 1), (61, 9, 16)])
@pytest.mark.parametrize("name", ["tl_gemm_at", "tl_gemm_at1"])
def test_gemm_at_reads_either_layout_and_writes_each_store(isa, dims, name):
    """``tl_gemm_at`` (and ``tl_gemm_at1``, twice the rows by one vector of columns) over an
    NCHW input (positions at stride 1, channels at stride P) and a blocked one (runs of 16
    channels), into a row-major tile, a blocked tensor's positions and NCHW planes with a
    residual; bias, Relu and Clip; against float64, nothing written outside the m x n
    columns it owns."""
    P, C, O = dims
    mod = _simd.module(isa)
    nr = mod.isa.nr
    O = min(O, nr if name == "tl_gemm_at" else mod.isa.lanes)
    fn = _fn(mod, name, 17)
    rng = np.random.default_rng(P + C)
    x = rng.standard_normal((C, P)).astype(np.float32)
    w = rng.standard_normal((O, C)).astype(np.float32)
    bias = np.zeros(nr, np.float32)
    bias[:O] = rng.standard_normal(O)
    res = rng.standard_normal((O, P)).astype(np.float32)
    lohi = np.array([-0.5, 0.75], np.float32)
    B = -(-C // 16)
    xb = to_blocked(x.reshape(1, C, P, 1))[0, :, :, 0]           # (B, P, 16)
    wz = np.zeros((O, B * 16), np.float32)
    wz[:, :C] = w
    base = w.astype(np.float64) @ x.astype(np.float64)            # (O, P)
    for blocked in (False, True):
        wb = _simd.pack_rows(wz if blocked else w, nr)
        a = (xb.ctypes.data, 16, 1, 16, B, P * 16) if blocked else (x.ctypes.data, 1, P, C, 1, 0)
        for act, f in ((0, lambda v: v), (1, lambda v: np.maximum(v, 0)),
                       (2, lambda v: np.clip(v, -0.5, 0.75))):
            # a row-major tile, ldc wider than n
            t = np.full((P, O + 3), 7.5, np.float32)
            fn(P, O, a[3], a[0], a[1], a[2], a[4], a[5], wb.ctypes.data, t.ctypes.data, O + 3,
               16, bias.ctypes.data, act, lohi.ctypes.data, 0, 0)
            want = f(base + bias[:O, None]).T
            assert np.abs(t[:, :O] - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
            assert (t[:, O:] == 7.5).all()
            # NCHW planes with the residual
            y = np.full((O + 1, P), 7.5, np.float32)
            fn(P, O, a[3], a[0], a[1], a[2], a[4], a[5], wb.ctypes.data, y.ctypes.data, 0, 16,
               bias.ctypes.data, act, lohi.ctypes.data, P, res.ctypes.data)
            want = f(base + bias[:O, None] + res)
            assert np.abs(y[:O] - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
            assert (y[O] == 7.5).all()
        # a blocked output (one block per 16 columns, positions 16 floats apart)
        OB = -(-O // 16)
        yb = np.full((OB, P, 16), 7.5, np.float32)
        fn(P, O, a[3], a[0], a[1], a[2], a[4], a[5], wb.ctypes.data, yb.ctypes.data, 16,
           P * 16, 0, 0, lohi.ctypes.data, 0, 0)
        got = yb.transpose(0, 2, 1).reshape(OB * 16, P)
        assert np.abs(got[:O] - base).max() <= 1e-5 * max(1.0, np.abs(base).max())
        assert (got[O:] == 7.5).all()


@pytest.mark.parametrize("P", [1, 5, 37])
@pytest.mark.parametrize("lanes", [16, 5])
def test_block_means_and_scaling_equal_the_definition(isa, P, lanes):
    """``tl_block_mean`` (the lanes' means over the positions, only ``lanes`` of them
    written) and ``tl_block_scale`` (each position times the block's factors, lanes past
    ``lanes`` times 0) on every vector path, against float64."""
    mod = _simd.module(isa)
    rng = np.random.default_rng(P + lanes)
    x = rng.standard_normal((P, 16)).astype(np.float32)
    y = np.full(17, 7.5, np.float32)
    _fn(mod, "tl_block_mean", 4)(x.ctypes.data, P, y.ctypes.data, lanes)
    want = x.astype(np.float64).mean(axis=0)
    assert np.abs(y[:lanes] - want[:lanes]).max() <= 1e-6 * max(1.0, np.abs(want).max())
    assert (y[lanes:] == 7.5).all()
    s = rng.standard_normal(lanes).astype(np.float32)
    out = np.full((P + 1, 16), 7.5, np.float32)
    _fn(mod, "tl_block_scale", 5)(x.ctypes.data, s.ctypes.data, out.ctypes.data, P, lanes)
    f = np.zeros(16, np.float32)
    f[:lanes] = s
    assert np.array_equal(out[:P], x * f) and (out[P] == 7.5).all()


@pytest.mark.parametrize("act", [1, 3, 4, 5, 6, 7, 8])
def test_act_pass_equals_the_definition(isa, act):
    """``tl_act`` in place over any count of floats (NaN, infinities, both ends of float32's
    range), for the activations a store leaves to it; Relu (done in the stores) and Tanh
    (done by the compiled loops) leave the floats as they are."""
    from tensorlayout.winograd._simd_block import POST_ACTS

    mod = _simd.module(isa)
    rng = np.random.default_rng(act)
    x = np.concatenate([rng.standard_normal(37) * 8, [np.nan, np.inf, -np.inf, 88.5, -88.5,
                                                      -104.0, 0.0, -0.0],
                        np.linspace(-87, 87, 1001)]).astype(np.float32)
    for n in (len(x), 1, 0):
        y = np.concatenate([x, [7.5]]).astype(np.float32)
        lohi = np.array(_PARAMS[act], np.float32)
        _fn(mod, "tl_act", 4)(y.ctypes.data, n, act, lohi.ctypes.data)
        assert y[-1] == 7.5 and np.array_equal(y[n:-1], x[n:], equal_nan=True)
        if act not in POST_ACTS:
            assert np.array_equal(y[:-1], x, equal_nan=True)
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            want = _ACTS[act](x[:n].astype(np.float64))
        _agree(y[:n], want)
        if act in (4, 8):               # e ** x: each value within 1e-6 of its own size
            ok = np.isfinite(want) & (np.abs(want) > 1e-30)
            assert (np.abs(y[:n][ok] - want[ok]) <= 1e-6 * np.abs(want[ok])).all()


def _depthwise_case(case, seed):
    N, C, H, W, KH, KW, stride, begin, end, dil, act = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    x[0, 1 % C, 0, 0] = np.nan
    x[-1, -1, -1, -1] = np.inf
    w = rng.standard_normal((C, 1, KH, KW)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    OH = (H + begin[0] + end[0] - (KH - 1) * dil[0] - 1) // stride[0] + 1
    OW = (W + begin[1] + end[1] - (KW - 1) * dil[1] - 1) // stride[1] + 1
    return x, w, b, (OH, OW)


def _agree(y, want):
    assert np.array_equal(np.isnan(y), np.isnan(want))
    ok = np.isfinite(want)
    assert np.array_equal(y[~ok & ~np.isnan(want)], want[~ok & ~np.isnan(want)])
    assert np.abs(y[ok] - want[ok]).max(initial=0) <= 1e-5 * max(1.0, np.abs(want[ok]).max(initial=0))


@pytest.mark.parametrize("case", [
    # (N, C, H, W, KH, KW, stride, begin, end, dilation, act)
    (1, 37, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1), 5),
    (2, 16, 6, 5, 5, 5, (2, 2), (2, 2), (2, 2), (1, 1), 8),
    (1, 20, 9, 8, 3, 3, (2, 1), (0, 1), (1, 0), (2, 2), 2),
    (1, 5, 3, 3, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1), 1),
    (2, 33, 12, 13, 3, 3, (2, 2), (1, 1), (1, 1), (1, 1), 6),
    (1, 48, 10, 10, 5, 5, (1, 1), (2, 2), (2, 2), (1, 1), 0),
])
@pytest.mark.parametrize("layouts", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("nt, band", [(1, 0), (2, 0), (5, 0), (2, 1), (1, 3), (5, 3)])
def test_blocked_depthwise_equals_the_definition(case, layouts, nt, band, monkeypatch):
    """The blocked depthwise kernel in each pairing of input and output layouts, NaN and inf
    included, channels that fill no whole block, against the float64 definition; a blocked
    input's lanes past C hold garbage that must not reach an output, a blocked output's
    lanes past C are zero.  Each block's plane whole (band 0) or in bands of 1 or 3 output
    rows (DW_BAND_BYTES: the input rows of that many, each band's own rows copied in)."""
    _compiled_or_skip()
    xb, yb = layouts
    x, w, b, out_hw = _depthwise_case(case, sum(case[:4]) + nt)
    act = case[-1]
    a0, a1 = _PARAMS[act]
    N, C, H, W, KH, KW, stride, begin, end, dil, act = case
    PW = max(W + begin[1], (out_hw[1] - 1) * stride[1] + (KW - 1) * dil[1] + 1)
    rows_in = (band - 1) * stride[0] + (KH - 1) * dil[0] + 1
    monkeypatch.setattr(K, "DW_BAND_BYTES", rows_in * PW * 64 if band else 0)
    kern = K.DepthwiseBlocked(w, b, (*case[6], *case[7], *case[9], 1, act, a0, a1), x.shape,
                              out_hw, xb, yb)
    assert kern.rows == (min(band, out_hw[0]) if band else out_hw[0])
    xi = to_blocked(x) if xb else x
    C = x.shape[1]
    if xb and C % 16:
        xi[:, -1, :, :, C % 16:] = 3.0
    y = kern(xi, nt)
    if yb:
        assert (y[:, -1, :, :, C % 16 or 16:] == 0).all()
        y = from_blocked(y, C)
    with np.errstate(invalid="ignore", over="ignore"):
        want = _ACTS[act](_direct64(x, w, b, case[6], case[7], case[9], 1, out_hw))
    _agree(y, want)


@pytest.mark.parametrize("dims", [(2, 20, 36, 5, 7), (1, 16, 16, 1, 1), (1, 70, 9, 13, 11),
                                  (2, 3, 100, 4, 4)])
@pytest.mark.parametrize("layouts", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("act", [0, 2, 5])
@pytest.mark.parametrize("nt", [1, 3])
def test_blocked_pointwise_equals_the_definition(dims, layouts, act, nt):
    """The 1 x 1 convolution with a blocked input or output: bias, the residual (in the
    output's layout), the activation in the machine code's store (Relu, Clip) or after it
    (HardSwish), NaN in the input; against float64; a blocked output's lanes past O zero."""
    _compiled_or_skip()
    N, C, O, H, W = dims
    xb, yb = layouts
    rng = np.random.default_rng(C * O + nt)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    w = (rng.standard_normal((O, C)) / np.sqrt(C)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    res = rng.standard_normal((N, O, H, W)).astype(np.float32)
    a0, a1 = _PARAMS[act]
    kern = K.PointwiseBlocked(w, b, (act, a0, a1), x.shape, xb, yb)
    xi = to_blocked(x) if xb else x
    if xb and C % 16:
        xi[:, -1, :, :, C % 16:] = 3.0
    y = kern(xi, to_blocked(res) if yb else res, nt)
    if yb:
        assert (y[:, -1, :, :, O % 16 or 16:] == 0).all()
        y = from_blocked(y, O)
    want = np.einsum("oc,nchw->nohw", w.astype(np.float64), x.astype(np.float64))
    want += b[None, :, None, None]
    if res is not None:
        want += res
    with np.errstate(invalid="ignore"):
        want = _ACTS[act](want)
    _agree(y, want)


@pytest.mark.parametrize("case", [
    # (N, C, H, W, O, KH, KW, stride, begin, end): a block and a lane of input channels and
    # 70 outputs (two strips, the last block's lanes partly past O), a stride of 2 on rows
    # of 31, a strided 1 x 1 layer, one block of 16 outputs
    (1, 33, 12, 13, 70, 3, 3, (1, 1), (1, 1), (1, 1)),
    (2, 20, 13, 31, 24, 3, 3, (2, 2), (1, 1), (1, 1)),
    (1, 40, 9, 9, 36, 1, 1, (2, 2), (0, 0), (0, 0)),
    (1, 64, 7, 7, 16, 3, 3, (1, 1), (1, 1), (1, 1)),
    (2, 3, 23, 21, 40, 7, 7, (2, 2), (3, 3), (2, 3)),     # a first layer
])
@pytest.mark.parametrize("layouts", [(False, False, 16), (False, True, 16), (True, False, 16),
                                     (True, True, 16), (False, False, 1), (False, True, 1)])
@pytest.mark.parametrize("nt", [1, 3, 8])
def test_blocked_direct_convolution_equals_the_definition(case, layouts, nt):
    """The direct convolution reading a blocked input (its lanes past C not read as data)
    or writing a blocked output (the residual blocked too), or neither, or reading NCHW
    planes a float per (channel, kh, kw) run (``lanes`` 1); a strided 1 x 1
    layer dealing only the positions it reads: bias, residual and Relu; bias
    and a Clip whose floor is above zero (the lanes past O stay zero all the same); no bias;
    SiLU and Sigmoid after the store (Sigmoid(0) is not 0: the lanes past O zeroed after it);
    against a float64 convolution from the definition."""
    _compiled_or_skip()
    N, C, H, W, O, KH, KW, stride, begin, end = case
    xb, yb, lanes = layouts
    rng = np.random.default_rng(C * O + nt)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((O, C, KH, KW)) / np.sqrt(C * KH * KW)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    OH = (H + begin[0] + end[0] - KH) // stride[0] + 1
    OW = (W + begin[1] + end[1] - KW) // stride[1] + 1
    res = rng.standard_normal((N, O, OH, OW)).astype(np.float32)
    xi = to_blocked(x) if xb else x
    if xb and C % 16:
        xi[:, -1, :, :, C % 16:] = 3.0
    want = _conv64(x, w, stride, begin, (1, 1), (OH, OW))
    runs = [((1, 0.0, 0.0), b, res, np.maximum(want + b[None, :, None, None] + res, 0)),
            ((2, 0.25, 0.5), b, None, np.clip(want + b[None, :, None, None], 0.25, 0.5)),
            ((0, 0.0, 0.0), None, None, want),
            ((8, 0.0, 0.0), b, res, _ACTS[8](want + b[None, :, None, None] + res)),
            ((4, 0.0, 0.0), None, None, _ACTS[4](want))]
    for act, bias, r, expect in runs:
        conv = K.Direct(w, bias, act, x.shape, stride, begin, (1, 1), (OH, OW), xb, yb, lanes)
        y = conv(xi, None if r is None else (to_blocked(r) if yb else r), nt)
        if yb:
            assert y.shape == (N, -(-O // 16), OH, OW, 16)
            assert (y[:, -1, :, :, O % 16 or 16:] == 0).all()
            y = from_blocked(y, O)
        _agree(y, expect)



def _chain(C=20, E=40, H=9, res=True, se=False):
    """A MobileNetV2-like block: 1 x 1 expand + Clip, depthwise 3 x 3 + Clip (with a
    squeeze-and-excite pair after it if ``se``), 1 x 1 project, the residual Add."""
    rng = np.random.default_rng(C + E + H)
    inits = {"we": rng.standard_normal((E, C, 1, 1)).astype(np.float32) * 0.3,
             "be": rng.standard_normal(E).astype(np.float32) * 0.1,
             "wd": rng.standard_normal((E, 1, 3, 3)).astype(np.float32) * 0.3,
             "wp": rng.standard_normal((C, E, 1, 1)).astype(np.float32) * 0.3,
             "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "we", "be"], ["e"]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["ec"]),
             helper.make_node("Conv", ["ec", "wd"], ["d"], group=E, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["dc"])]
    last = "dc"
    if se:
        nodes += [helper.make_node("GlobalAveragePool", ["dc"], ["g"]),
                  helper.make_node("Sigmoid", ["g"], ["s"]),
                  helper.make_node("Mul", ["dc", "s"], ["m"])]
        last = "m"
    nodes.append(helper.make_node("Conv", [last, "wp"], ["p"]))
    out = "p"
    if res:
        nodes.append(helper.make_node("Add", ["p", "x"], ["y"]))
        out = "y"
    x = rng.standard_normal((2, C, H, H)).astype(np.float32)
    return nodes, x, inits, out


@pytest.mark.parametrize("case", ["plain", "se", "shown"])
def test_the_schedule_blocks_what_only_blocked_steps_touch(case):
    """Between an expansion and a projection the expanded tensors are blocked, the
    squeeze-and-excite pair's plane mean and scaling reading them too (the scaled tensor
    blocked as well); a tensor that is also a graph output, the input and the output stay
    NCHW."""
    from tensorlayout.graph import load_graph

    nodes, x, inits, out = _chain(se=case == "se")
    outs = [out] + (["dc"] if case == "shown" else [])
    s = schedule_cpu(load_graph(make_model(nodes, {"x": x}, outs, inits).SerializeToString()))
    assert s.blocked == {"plain": {"ec", "dc"}, "se": {"ec", "dc", "m"}, "shown": {"ec"}}[case]


def test_the_plan_shows_each_tensors_cpu_layout(capsys, tmp_path):
    """``plan_model`` and ``tensorlayout plan`` give each tensor's CPU layout: NCHW16c for a
    blocked one, NCHW for the input and output, none for a tensor fused into its step."""
    import json

    from tensorlayout.cli import main
    from tensorlayout.model import plan_model

    nodes, x, inits, out = _chain()
    data = make_model(nodes, {"x": x}, [out], inits).SerializeToString()
    p = plan_model(load(data))
    assert [p.tensor(n)["cpu"] for n in ("x", "e", "ec", "d", "dc", "p", out)] == [
        "NCHW", None, "NCHW16c", None, "NCHW16c", None, "NCHW"]
    assert all(r["cpu"] is None for r in p.tensors if r["role"] in ("weight", "bias"))
    path = tmp_path / "chain.onnx"
    path.write_bytes(data)
    assert main(["plan", str(path), "--json"]) == 0
    rows = {r["name"]: r["cpu"] for r in json.loads(capsys.readouterr().out)["tensors"]}
    assert rows["ec"] == "NCHW16c" and rows["x"] == "NCHW"


def test_squeeze_excite_convolutions_on_one_position_stay_nchw():
    """The 1 x 1 convolutions of a squeeze-and-excite block run on (N, C, 1, 1) maps (the
    matrix-vector product): their tensors are not blocked, the tensors around them are; the
    network agrees with onnxruntime."""
    from tensorlayout.graph import load_graph

    nodes, x, inits, out = _chain()
    rng = np.random.default_rng(3)
    inits.update(w1=rng.standard_normal((8, 40, 1, 1)).astype(np.float32) * 0.3,
                 w2=rng.standard_normal((40, 8, 1, 1)).astype(np.float32) * 0.3)
    se = [helper.make_node("GlobalAveragePool", ["dc"], ["g"]),
          helper.make_node("Conv", ["g", "w1"], ["s1"]),
          helper.make_node("Relu", ["s1"], ["s1r"]),
          helper.make_node("Conv", ["s1r", "w2"], ["s2"]),
          helper.make_node("Sigmoid", ["s2"], ["s"]),
          helper.make_node("Mul", ["dc", "s"], ["m"])]
    nodes = nodes[:4] + se + [helper.make_node("Conv", ["m", "wp"], ["p"])] + nodes[5:]
    data = make_model(nodes, {"x": x}, [out], inits).SerializeToString()
    s = schedule_cpu(load_graph(data))
    assert s.blocked == {"ec", "dc", "m"}
    compare(nodes, {"x": x}, [out], inits)


@pytest.mark.parametrize("C", [16, 24])
@pytest.mark.parametrize("tail", [False, True])
def test_a_plane_scaling_reads_blocks_only_where_it_writes_them(C, tail):
    """A squeeze-and-excite block's Mul writes the layout it reads: where its output stays
    NCHW (a graph output), its input does too, though the 1 x 1 layer that writes it and
    the plane mean that also reads it could take blocks.  (It read blocks into the NCHW
    output: a wrong answer at 16 channels, and past the output's end at 24.)  With a 1 x 1
    layer after it, its input and output are blocked.  onnxruntime's results, on 1 and 3
    threads."""
    from tensorlayout.graph import load_graph

    _compiled_or_skip()
    rng = np.random.default_rng(C)
    inits = {"w": rng.standard_normal((C, 8, 1, 1)).astype(np.float32) * 0.3,
             "w1": rng.standard_normal((4, C, 1, 1)).astype(np.float32) * 0.3,
             "w2": rng.standard_normal((C, 4, 1, 1)).astype(np.float32) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Conv", ["g", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["h2"]),
             helper.make_node("Sigmoid", ["h2"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["m"])]
    out = "m"
    if tail:
        nodes.append(helper.make_node("Conv", ["m", "wt"], ["y"]))
        inits["wt"] = rng.standard_normal((8, C, 1, 1)).astype(np.float32) * 0.3
        out = "y"
    x = rng.standard_normal((2, 8, 15, 21)).astype(np.float32)
    data = make_model(nodes, {"x": x}, [out], inits).SerializeToString()
    s = schedule_cpu(load_graph(data))
    assert s.blocked == ({"c", "m"} if tail else set())
    ref = ort_session(data).run(None, {"x": x})[0]
    model = load(data)
    for nt in (1, 3):
        assert rel_l2(model.run(x, threads=nt), ref) <= 1e-5


def test_a_layer_the_rule_keeps_direct_without_blocks_is_scheduled():
    """A strided 5 x 5 layer of one input channel after a plane scaling (so not the graph's
    input) is the backend's direct convolution by the engine's rule, with NCHW planes of
    one lane, and its output is not blocked: the schedule asks the rule again once
    (FIRST_DIRECT) and keeps its answer.  (It asked again for ever.)  onnxruntime's
    results."""
    import threading

    from tensorlayout.graph import load_graph

    rng = np.random.default_rng(3)
    inits = {"w1": rng.standard_normal((1, 1, 1, 1)).astype(np.float32),
             "w": rng.standard_normal((20, 1, 5, 5)).astype(np.float32) * 0.3}
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]),
             helper.make_node("Conv", ["g", "w1"], ["h"]),
             helper.make_node("Sigmoid", ["h"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["m"]),
             helper.make_node("Conv", ["m", "w"], ["c"], strides=[2, 2], pads=[2, 2, 2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    x = rng.standard_normal((2, 1, 9, 10)).astype(np.float32)
    data = make_model(nodes, {"x": x}, ["y"], inits).SerializeToString()
    got = []
    t = threading.Thread(target=lambda: got.append(schedule_cpu(load_graph(data))), daemon=True)
    t.start()
    t.join(60)
    assert got, "the schedule did not finish in 60 s"
    conv = [st for st in got[0].steps if st.node.op == "Conv" and st.node.inputs[0] == "m"][0]
    assert conv.algorithm == "direct" and "c" not in got[0].blocked
    compare(nodes, {"x": x}, ["y"], inits)


def test_a_depthwise_step_writes_blocks_only_from_blocks():
    """A depthwise convolution of the graph's input would have to transpose: its output
    stays NCHW, and so the projection reads NCHW."""
    from tensorlayout.graph import load_graph

    nodes, x, inits, _ = _chain(res=False)
    nodes = [n for n in nodes[2:]]
    nodes[0] = helper.make_node("Conv", ["x", "wd"], ["d"], group=20, pads=[1, 1, 1, 1])
    inits["wd"] = inits["wd"][:20]
    inits["wp"] = inits["wp"][:, :20]
    s = schedule_cpu(load_graph(make_model(nodes, {"x": x}, ["p"], inits).SerializeToString()))
    assert s.blocked == frozenset()


@pytest.mark.parametrize("se", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_networks_agree_with_onnxruntime_on_every_path(se, threads, monkeypatch):
    """The chain through the bound run, a profile (inside the bound run where every step is
    compiled, else the per-step loop), a tap (the per-step loop, which sees every tensor in
    NCHW) and the NumPy twins: onnxruntime's results each time."""
    _compiled_or_skip()
    nodes, x, inits, out = _chain(se=se)
    compare(nodes, {"x": x}, [out], inits)
    data = make_model(nodes, {"x": x}, [out], inits).SerializeToString()
    ref = ort_session(data).run(None, {"x": x})[0]
    m = load(data)
    prog = m.cpu()
    assert prog.blocked
    assert rel_l2(prog.run({"x": x}, threads=threads)[0][0], ref) <= 1e-5
    assert rel_l2(prog.run({"x": x}, threads=threads, profile=True)[0][0], ref) <= 1e-5
    seen = {}
    prog.run({"x": x}, threads=threads, tap=lambda st, outs: seen.update(
        {n: v.copy() for n, v in zip(st.outputs, outs) if n}))
    for name in prog.blocked:
        assert seen[name].shape == prog.graph.shapes[name]
    ec = np.clip(np.einsum("oc,nchw->nohw", inits["we"][:, :, 0, 0], x)
                 + inits["be"][None, :, None, None], 0, 6)
    assert np.abs(seen["ec"] - ec).max() <= 1e-4
    monkeypatch.setattr(K, "ready", lambda: False)
    assert rel_l2(load(data).cpu().run({"x": x}, threads=threads)[0][0], ref) <= 1e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_a_profile_of_a_run_bound_whole_times_its_steps_inside_it(threads, monkeypatch):
    """``profile=True`` where every step is compiled (two bottlenecks, a plane mean, a
    Flatten that is a view): the bound run's steps timed one by one in its arena, the
    per-step loop never called; every layer listed in order, each compiled step's time
    above 0 and the view's 0; onnxruntime's result."""
    _compiled_or_skip()
    nodes, x, inits, out = _bottlenecks(gap=True)
    nodes = nodes + [helper.make_node("Flatten", [out], ["f"])]
    data = make_model(nodes, {"x": x}, ["f"], inits).SerializeToString()
    ref = ort_session(data).run(None, {"x": x})[0]
    prog = load(data).cpu()
    prog.run({"x": x}, threads=threads)
    (bound,) = [b for b in prog._bound_runs.values() if b]
    assert bound.native_only and bound.view_steps == 1

    def per_step(*args):
        raise AssertionError("the per-step loop ran")
    monkeypatch.setattr(type(prog), "_steps", per_step)
    (y,), prof = prog.run({"x": x}, threads=threads, profile=True)
    assert rel_l2(y, ref) <= 1e-5
    assert [p[0] for p in prof] == [st.node.name for st in prog.steps]
    timed = {i for i, _, _ in bound.step_rows}
    assert len(timed) == len(prog.steps) - 1
    for i, (_, op, seconds, _) in enumerate(prof):
        assert (seconds > 0) if i in timed else (seconds == 0.0 and op == "Flatten")


def _bottlenecks(gap=False, stem=True):
    """Two ResNet bottlenecks after a 1 x 1 stem (or none: the first block adds the graph's
    input): 1 x 1 + Relu, 3 x 3 + Relu (the direct convolution's), 1 x 1, the residual Add
    and Relu; the second block strided, its residual a strided 1 x 1 layer (the direct
    convolution's too); a plane mean after it if ``gap``."""
    rng = np.random.default_rng(7)

    def wt(o, c, k):
        return (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)

    inits = {"ws": wt(64, 16, 1), "a1": wt(128, 64, 1), "a2": wt(128, 128, 3),
             "a3": wt(64, 128, 1), "b1": wt(128, 64, 1), "b2": wt(128, 128, 3),
             "b3": wt(96, 128, 1), "bd": wt(96, 64, 1),
             "bias": rng.standard_normal(96).astype(np.float32)}
    conv = helper.make_node
    nodes = [conv("Conv", ["x", "ws"], ["s0"]), conv("Relu", ["s0"], ["s"])] if stem else []
    if not stem:
        nodes.append(conv("Identity", ["x"], ["s"]))
    nodes += [conv("Conv", ["s", "a1"], ["a1o"]), conv("Relu", ["a1o"], ["a1r"]),
             conv("Conv", ["a1r", "a2"], ["a2o"], pads=[1, 1, 1, 1]),
             conv("Relu", ["a2o"], ["a2r"]), conv("Conv", ["a2r", "a3"], ["a3o"]),
             conv("Add", ["a3o", "s"], ["ya"]), conv("Relu", ["ya"], ["y1"]),
             conv("Conv", ["y1", "b1"], ["b1o"]), conv("Relu", ["b1o"], ["b1r"]),
             conv("Conv", ["b1r", "b2"], ["b2o"], pads=[1, 1, 1, 1], strides=[2, 2]),
             conv("Relu", ["b2o"], ["b2r"]), conv("Conv", ["b2r", "b3", "bias"], ["b3o"]),
             conv("Conv", ["y1", "bd"], ["ds"], strides=[2, 2]),
             conv("Add", ["b3o", "ds"], ["yb"]), conv("Relu", ["yb"], ["y2"])]
    out = "y2"
    if gap:
        nodes.append(conv("GlobalAveragePool", ["y2"], ["g"]))
        out = "g"
    x = rng.standard_normal((1, 16 if stem else 64, 12, 12)).astype(np.float32)
    return nodes, x, inits, out


@pytest.mark.parametrize("gap, stem", [(False, True), (True, True), (True, False)])
def test_residual_blocks_run_blocked_between_their_edges(gap, stem, monkeypatch):
    """Bottlenecks whose 3 x 3 and strided 1 x 1 layers take the direct convolution hold
    every tensor between the stem and the last block in the blocked layout, residuals
    included (a residual is blocked exactly where the step adding it writes blocks); the
    last block's residual stays NCHW where its output is a graph output, and is blocked
    where a plane mean reads that output; a block adding the graph's input (NCHW) writes
    NCHW; onnxruntime's results on every path (the bound run, a profile, the NumPy
    twins)."""
    from tensorlayout.graph import load_graph

    _compiled_or_skip()
    nodes, x, inits, out = _bottlenecks(gap, stem)
    data = make_model(nodes, {"x": x}, [out], inits).SerializeToString()
    s = schedule_cpu(load_graph(data))
    by_conv = {st.node.outputs[0]: st for st in s.steps}
    assert {by_conv[t].algorithm for t in ("a2o", "b2o", "ds")} == {"direct"}
    inner = {"a1r", "a2r", "b1r", "b2r"} | ({"s", "y1"} if stem else set())
    assert s.blocked == (inner | {"b3o", "y2"} if gap else inner)
    for st in s.steps:                       # a residual in the layout of its step's output
        if st.residual:
            assert (st.residual in s.blocked) == (st.output in s.blocked)
    ref = ort_session(data).run(None, {"x": x})[0]
    prog = load(data).cpu()
    for profile in (False, True):
        assert rel_l2(prog.run({"x": x}, threads=2, profile=profile)[0][0], ref) <= 1e-5
    compare(nodes, {"x": x}, [out], inits)
    monkeypatch.setattr(K, "ready", lambda: False)
    assert rel_l2(load(data).cpu().run({"x": x}, threads=2)[0][0], ref) <= 1e-5


@pytest.mark.parametrize("squeeze", [32, 128])
def test_a_shallow_tensor_stays_nchw_for_a_1x1_layer_writing_nchw(squeeze):
    """A fire module (1 x 1 squeeze, then a 1 x 1 and a 3 x 3 expansion concatenated): the
    squeezed tensor is blocked for the 3 x 3 layer's direct convolution only where it is
    deep enough (MIXED_MIN_DEPTH) for the 1 x 1 expansion to read it into its NCHW output;
    onnxruntime's results either way."""
    from tensorlayout.graph import load_graph
    from tensorlayout.schedule import cpu as rules

    rng = np.random.default_rng(squeeze)
    inits = {"ws": rng.standard_normal((squeeze, 48, 1, 1)).astype(np.float32) * 0.2,
             "w1": rng.standard_normal((64, squeeze, 1, 1)).astype(np.float32) * 0.1,
             "w3": rng.standard_normal((64, squeeze, 3, 3)).astype(np.float32) * 0.05}
    nodes = [helper.make_node("Conv", ["x", "ws"], ["s0"]), helper.make_node("Relu", ["s0"], ["s"]),
             helper.make_node("Conv", ["s", "w1"], ["e1"]),
             helper.make_node("Conv", ["s", "w3"], ["e3"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["e1", "e3"], ["y"], axis=1)]
    x = rng.standard_normal((1, 48, 14, 14)).astype(np.float32)
    data = make_model(nodes, {"x": x}, ["y"], inits).SerializeToString()
    s = schedule_cpu(load_graph(data))
    assert [st.algorithm for st in s.steps if st.node.outputs[0] == "e3"] == ["direct"]
    assert s.blocked == ({"s"} if squeeze >= rules.MIXED_MIN_DEPTH else set())
    compare(nodes, {"x": x}, ["y"], inits)


def _fires(e: int, tail: str):
    """Two fire modules (a 1 x 1 squeeze, then a 1 x 1 and a 3 x 3 expansion of ``e``
    outputs each, concatenated) with a 3 x 3 / 2 max pool between them, and a 1 x 1 layer
    and a plane mean after them; ``tail`` "sigmoid" puts a Sigmoid (the graph's NumPy
    kernel) between the second Concat and that layer."""
    rng = np.random.default_rng(e)
    inits = {}
    nodes, x = [], "x"

    def conv(name, src, o, c, k):
        inits["w" + name] = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(
            np.float32)
        inits["b" + name] = rng.standard_normal(o).astype(np.float32) * 0.1
        nodes.extend([helper.make_node("Conv", [src, "w" + name, "b" + name], [name + "c"],
                                       pads=[k // 2] * 4),
                      helper.make_node("Relu", [name + "c"], [name])])
        return name

    c = 32
    for f in range(2):
        s = conv(f"s{f}", x, 16, c, 1)
        parts = [conv(f"e{f}a", s, e, 16, 1), conv(f"e{f}b", s, e, 16, 3)]
        nodes.append(helper.make_node("Concat", parts, [f"cat{f}"], axis=1))
        x, c = f"cat{f}", 2 * e
        if f == 0:
            nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3],
                                          strides=[2, 2], ceil_mode=1))
            x = "pool"
    if tail == "sigmoid":
        nodes.append(helper.make_node("Sigmoid", [x], ["sig"]))
        x = "sig"
    conv("last", x, 24, c, 1)
    nodes.append(helper.make_node("GlobalAveragePool", ["last"], ["y"]))
    return nodes, inits


@pytest.mark.parametrize("e, tail, N", [(32, "", 1), (32, "", 2), (24, "", 1),
                                        (32, "sigmoid", 1)])
def test_a_concat_of_whole_blocks_is_blocked_with_its_inputs(e, tail, N, monkeypatch):
    """Fire modules whose expansions have 32 outputs each: every tensor from the first
    squeeze to the last 1 x 1 layer is blocked, the Concats too (their producers write
    their blocks in place in them, or with two images a compiled copy joins them), the max
    pool reading and writing blocks.  Expansions of 24 outputs (not whole blocks) keep both
    Concats and their inputs NCHW; a Sigmoid reading the second Concat keeps that one and
    its inputs NCHW, the first still blocked; no Concat with BLOCK_CONCAT off.  onnxruntime's
    results on the bound run (1 and 2 threads), a profile and the NumPy twins."""
    from tensorlayout.graph import load_graph
    from tensorlayout.schedule import cpu as rules

    _compiled_or_skip()
    nodes, inits = _fires(e, tail)
    x = np.random.default_rng(1).standard_normal((N, 32, 23, 21)).astype(np.float32)
    data = make_model(nodes, {"x": x}, ["y"], inits).SerializeToString()
    s = schedule_cpu(load_graph(data))
    first = {"cat0", "e0a", "e0b"}
    second = {"cat1", "e1a", "e1b"}
    if e % 16:
        assert not (first | second) & s.blocked
    elif tail:
        assert first <= s.blocked and not second & s.blocked
    else:
        assert first | second | {"s0", "pool", "s1", "last"} <= s.blocked
    monkeypatch.setattr(rules, "BLOCK_CONCAT", False)
    assert not {"cat0", "cat1"} & schedule_cpu(load_graph(data)).blocked
    monkeypatch.undo()
    ref = ort_session(data).run(None, {"x": x})[0]
    prog = load(data).cpu()
    if N == 1 and not e % 16:       # an input written in place: its view holds its blocks
        from tensorlayout.backends.cpu_bound import BoundRun

        bound = BoundRun(prog, 2)
        assert bound.roots["e0a"] == "cat0"
        assert bound.views["e0a"].shape == (1, e // 16, 23, 21, 16)
    for threads, profile in ((1, False), (2, False), (2, True)):
        assert rel_l2(prog.run({"x": x}, threads=threads, profile=profile)[0][0],
                      ref) <= 1e-5
    monkeypatch.setattr(K, "ready", lambda: False)
    assert rel_l2(load(data).cpu().run({"x": x}, threads=2)[0][0], ref) <= 1e-5


@pytest.mark.parametrize("block_pool", [True, False])
@pytest.mark.parametrize("C", [40, 64])
def test_a_max_pool_writes_blocks_for_the_residual_block_after_it(block_pool, C, monkeypatch):
    """A ResNet stem (a first layer, its max pool) and a basic block whose two 3 x 3 layers
    take the direct convolution, the pool's output their input and the second one's
    residual: the pool writes that tensor in the blocked layout (BLOCK_POOL), so that the
    block reads and writes blocks and adds a blocked residual; else the tensor and the
    block's output stay NCHW.  A stem of 64 outputs takes the direct convolution and writes
    blocks, which the pool reads; one of 40 (under FIRST_DIRECT_MIN_FILL of two strips of
    32) keeps the shifted GEMM and NCHW.  onnxruntime's results every way, on the bound run
    and the NumPy twins."""
    from tensorlayout.graph import load_graph
    from tensorlayout.schedule import cpu as rules
    from tensorlayout.schedule import winograd as conv_rules
    from tensorlayout.winograd import _simd

    _compiled_or_skip()
    monkeypatch.setattr(rules, "BLOCK_POOL", block_pool)
    rng = np.random.default_rng(11)
    inits = {"ws": rng.standard_normal((C, 3, 5, 5)).astype(np.float32) * 0.2,
             "w1": rng.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.05,
             "w2": rng.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.05}
    nodes = [helper.make_node("Conv", ["x", "ws"], ["s0"], strides=[2, 2], pads=[2, 2, 2, 2]),
             helper.make_node("Relu", ["s0"], ["s"]),
             helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p"], ["a"]),
             helper.make_node("Relu", ["a"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["y"])]
    x = rng.standard_normal((2, 3, 62, 58)).astype(np.float32)
    data = make_model(nodes, {"x": x}, ["y"], inits).SerializeToString()
    s = schedule_cpu(load_graph(data))
    assert {st.algorithm for st in s.steps if st.node.outputs[0] in ("c1", "c2")} == {"direct"}
    nr = _simd.isa().nr
    stem = block_pool and C / (-(-C // nr) * nr) >= conv_rules.FIRST_DIRECT_MIN_FILL
    assert s.blocked == ({"p", "r1", "r2"} | ({"s"} if stem else set()) if block_pool
                         else {"r1"})
    assert [st.algorithm for st in s.steps if st.node.outputs[0] == "s0"] == [
        "direct" if stem else "shifted"]
    ref = ort_session(data).run(None, {"x": x})[0]
    assert rel_l2(load(data).cpu().run({"x": x}, threads=2)[0][0], ref) <= 1e-5
    monkeypatch.setattr(K, "ready", lambda: False)
    assert rel_l2(load(data).cpu().run({"x": x}, threads=2)[0][0], ref) <= 1e-5


@pytest.mark.parametrize("reader, O", [("depthwise", 64), ("depthwise", 16), ("concat", 64),
                                       ("concat-sigmoid", 64)])
def test_a_first_layer_takes_the_direct_convolution_only_writing_blocks(reader, O):
    """A first layer of 3 channels (3 x 3, stride 2, Clip) takes the direct convolution over
    its NCHW input, a float per (channel, kh, kw) run, where its output is blocked (a
    depthwise layer reads it, or a Concat of whole blocks that a 1 x 1 layer reads); where a
    reader keeps it NCHW (a Concat whose output a Sigmoid reads) it goes back to the
    shifted GEMM (FIRST_DIRECT), as it keeps 16 outputs, half a strip of the micro-kernel's
    32 columns (FIRST_DIRECT_MIN_FILL).  onnxruntime's results every way."""
    from tensorlayout.graph import load_graph

    _compiled_or_skip()
    rng = np.random.default_rng(5)
    inits = {"ws": rng.standard_normal((O, 3, 3, 3)).astype(np.float32) * 0.3,
             "wd": rng.standard_normal((O, 1, 3, 3)).astype(np.float32) * 0.3,
             "wp": rng.standard_normal((8, O, 1, 1)).astype(np.float32) * 0.3,
             "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "ws"], ["s0"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["s0", "lo", "hi"], ["s"]),
             helper.make_node("Conv", ["s", "wd"], ["d"], group=O, pads=[1, 1, 1, 1])]
    if reader.startswith("concat"):
        nodes.append(helper.make_node("Concat", ["s", "d"], ["c"], axis=1))
        last = "c"
        if reader == "concat-sigmoid":
            nodes.append(helper.make_node("Sigmoid", ["c"], ["cs"]))
            last = "cs"
        inits["wp"] = rng.standard_normal((8, 2 * O, 1, 1)).astype(np.float32) * 0.3
    else:
        last = "d"
    nodes.append(helper.make_node("Conv", [last, "wp"], ["y"]))
    x = rng.standard_normal((2, 3, 45, 38)).astype(np.float32)
    data = make_model(nodes, {"x": x}, ["y"], inits).SerializeToString()
    s = schedule_cpu(load_graph(data))
    stem = [st for st in s.steps if st.node.outputs[0] == "s0"][0]
    from tensorlayout.winograd import _simd

    direct = reader in ("depthwise", "concat") and (O > 16 or _simd.isa().nr <= 16)
    assert stem.algorithm == ("direct" if direct else "shifted")
    assert ("s" in s.blocked) == direct
    assert ("c" in s.blocked) == (reader == "concat")
    ref = ort_session(data).run(None, {"x": x})[0]
    assert rel_l2(load(data).cpu().run({"x": x}, threads=2)[0][0], ref) <= 1e-5
    compare(nodes, {"x": x}, ["y"], inits)


def test_a_direct_convolution_of_few_channels_reads_nchw_from_a_blocked_writer():
    """A 3 x 3 layer of 8 input channels takes the direct convolution over NCHW (a float per
    run) where a depthwise layer reads its output: the 1 x 1 layer before it, which could
    write blocks, writes NCHW for it (its output is not blocked); onnxruntime's results."""
    from tensorlayout.graph import load_graph

    _compiled_or_skip()
    rng = np.random.default_rng(9)
    inits = {"w1": rng.standard_normal((8, 32, 1, 1)).astype(np.float32) * 0.2,
             "w2": rng.standard_normal((64, 8, 3, 3)).astype(np.float32) * 0.2,
             "wd": rng.standard_normal((64, 1, 3, 3)).astype(np.float32) * 0.2}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Conv", ["br", "wd"], ["y"], group=64, pads=[1, 1, 1, 1])]
    x = rng.standard_normal((1, 32, 20, 20)).astype(np.float32)
    data = make_model(nodes, {"x": x}, ["y"], inits).SerializeToString()
    s = schedule_cpu(load_graph(data))
    assert [st.algorithm for st in s.steps if st.node.outputs[0] == "b"] == ["direct"]
    assert "ar" not in s.blocked and "br" in s.blocked
    ref = ort_session(data).run(None, {"x": x})[0]
    assert rel_l2(load(data).cpu().run({"x": x}, threads=2)[0][0], ref) <= 1e-5
    compare(nodes, {"x": x}, ["y"], inits)
