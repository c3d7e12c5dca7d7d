"""Winograd transforms, conv2d (every algorithm and tile) and the seed's WinogradLayer.

The oracle is a float64 direct convolution written here as a loop over output positions
(`reference_conv`), independent of the library; PyTorch float64 is used only for the
larger accuracy check.
"""

from __future__ import annotations

import zlib
from fractions import Fraction as Fr

import numpy as np
import pytest

import tensorlayout
from tensorlayout.errors import (AlgorithmError, ConvolutionError, DTypeError, LayoutError,
                                 RankError, ShapeError)
from tensorlayout.winograd import (Algorithm, WinogradLayer, choose_algorithm, conv2d,
                                   plan_conv2d, transforms)
from tensorlayout.winograd import Tuning, numba_available

# ----------------------------------------------------------------------------------------------
# oracle


def reference_conv(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """float64 direct convolution: explicit zero padding, then one window sum per output."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    N, C, H, W = x.shape
    K, Cg, KH, KW = w.shape
    s, p, d = stride, padding, dilation
    xp = np.zeros((N, C, H + 2 * p, W + 2 * p))
    xp[:, :, p:p + H, p:p + W] = x
    OH = (H + 2 * p - d * (KH - 1) - 1) // s + 1
    OW = (W + 2 * p - d * (KW - 1) - 1) // s + 1
    Kg = K // groups
    y = np.zeros((N, K, OH, OW))
    for g in range(groups):
        wg = w[g * Kg:(g + 1) * Kg]                       # (Kg, Cg, KH, KW)
        for oh in range(OH):
            for ow in range(OW):
                win = xp[:, g * Cg:(g + 1) * Cg,
                         oh * s:oh * s + d * (KH - 1) + 1:d,
                         ow * s:ow * s + d * (KW - 1) + 1:d]     # (N, Cg, KH, KW)
                for k in range(Kg):
                    y[:, g * Kg + k, oh, ow] = (win * wg[k]).sum(axis=(1, 2, 3))
    if bias is not None:
        y += np.asarray(bias, np.float64)[None, :, None, None]
    return y


def rel_err(y, ref):
    return float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref))


# Tolerances (relative L2) per algorithm for float32 on these small, well-scaled problems.
TOL32 = {"direct": 1e-6, "im2col": 1e-6, "winograd:2": 2e-6, "winograd:4": 1e-5,
         "winograd:6": 3e-5, "winograd": 3e-5, "auto": 3e-5}
TOL64 = 1e-12


@pytest.fixture(params=["numba", "numpy"])
def backend(request):
    """A :class:`Tuning` for the compiled kernels, and one for the NumPy fallback."""
    if request.param == "numba":
        pytest.importorskip("numba")
        tuning = Tuning()
        assert numba_available(tuning)
    else:
        tuning = Tuning(use_numba=False)
        assert not numba_available(tuning)
    return tuning


# ----------------------------------------------------------------------------------------------
# transforms

def _exact_check(t, rng):
    """AT((Gg)⊙(BTd)) equals the correlation exactly, for random integer d and g."""
    for _ in range(3):
        d = [Fr(int(v)) for v in rng.integers(-9, 10, t.alpha)]
        g = [Fr(int(v)) for v in rng.integers(-9, 10, t.r)]
        Gg = [sum((t.G[a, k] * g[k] for k in range(t.r)), Fr(0)) for a in range(t.alpha)]
        Bd = [sum((t.BT[a, j] * d[j] for j in range(t.alpha)), Fr(0)) for a in range(t.alpha)]
        y = [sum((t.AT[i, a] * Gg[a] * Bd[a] for a in range(t.alpha)), Fr(0))
             for i in range(t.m)]
        want = [sum((d[i + k] * g[k] for k in range(t.r)), Fr(0)) for i in range(t.m)]
        assert y == want


@pytest.mark.parametrize("m,r", [(2, 3), (4, 3), (6, 3), (4, 5), (1, 1), (3, 2), (2, 5),
                                 (8, 3), (5, 4), (1, 7)])
def test_transforms_exact(m, r):
    t = transforms(m, r)
    assert (t.m, t.r, t.alpha) == (m, r, m + r - 1)
    assert t.AT.shape == (m, t.alpha) and t.G.shape == (t.alpha, r)
    assert t.BT.shape == (t.alpha, t.alpha)
    assert t.G.dtype == object and all(isinstance(v, Fr) for v in t.G.flat)
    assert len(t.points) == t.alpha - 1
    _exact_check(t, np.random.default_rng(m * 10 + r))
    AT, G, BT = t.as_float()
    assert AT.dtype == np.float64
    d = np.random.default_rng(1).standard_normal(t.alpha)
    g = np.random.default_rng(2).standard_normal(r)
    want = np.array([d[i:i + r] @ g for i in range(m)])
    np.testing.assert_allclose(AT @ ((G @ g) * (BT @ d)), want, rtol=1e-9, atol=1e-9)
    AT32, G32, BT32 = t.as_float(np.float32)
    assert G32.dtype == np.float32 and not G32.flags.writeable


MACE_G = {
    2: [[1, 0, 0], ["1/2", "1/2", "1/2"], ["1/2", "-1/2", "1/2"], [0, 0, 1]],
    4: [["1/4", 0, 0], ["-1/6", "-1/6", "-1/6"], ["-1/6", "1/6", "-1/6"],
        ["1/24", "1/12", "1/6"], ["1/24", "-1/12", "1/6"], [0, 0, 1]],
    6: [[1, 0, 0], ["-2/9", "-2/9", "-2/9"], ["-2/9", "2/9", "-2/9"],
        ["1/90", "1/45", "2/45"], ["1/90", "-1/45", "2/45"],
        ["1/45", "1/90", "1/180"], ["1/45", "-1/90", "1/180"], [0, 0, 1]],
}


@pytest.mark.parametrize("m", [2, 4, 6])
def test_default_G_is_mace(m):
    t = transforms(m, 3)
    want = [[Fr(v) for v in row] for row in MACE_G[m]]
    assert [list(row) for row in t.G] == want


def test_default_points_and_cache():
    assert transforms(4, 5).points == (0, 1, -1, 2, -2, Fr(1, 2), Fr(-1, 2))
    assert transforms(6, 3) is transforms(6, 3)


@pytest.mark.parametrize("points", [
    [0, "1/2", "-1/2", 3, -3],
    [Fr(0), Fr(1, 3), Fr(-1, 3), Fr(2), Fr(-2)],
    [0.0, 0.5, -0.5, 1.5, -1.0],
])
def test_user_points(points):
    t = transforms(4, 3, points)
    assert t.points == tuple(Fr(str(p)) if isinstance(p, float) else Fr(p) for p in points)
    _exact_check(t, np.random.default_rng(7))


def test_user_points_equal_to_defaults_are_unscaled():
    # The same points as the MACE default but asked explicitly: a valid (differently scaled) G.
    t = transforms(2, 3, [0, 1, -1])
    _exact_check(t, np.random.default_rng(3))


@pytest.mark.parametrize("m,r,points,match", [
    (4, 3, [0, 1, -1, 2], "needs exactly"),
    (4, 3, [0, 1, -1, 2, 1], "distinct"),
    (2, 3, [0, 1, "x"], "rational"),
    (2, 3, [0, 1, float("nan")], "finite"),
    (2, 3, [0, 1, float("inf")], "finite"),
    (2, 3, [0, 1, True], "rational"),
    (2, 3, "012", "sequence"),
])
def test_bad_points(m, r, points, match):
    with pytest.raises(LayoutError, match=match):
        transforms(m, r, points)


def test_bad_m_r():
    with pytest.raises(ShapeError, match="m = 0"):
        transforms(0, 3)
    with pytest.raises(ShapeError, match="r = 2.5"):
        transforms(2, 2.5)
    with pytest.raises(AlgorithmError, match="at most"):
        transforms(30, 3)
    with pytest.raises(LayoutError, match="dtype"):
        transforms(2, 3).as_float(np.int32)


# ----------------------------------------------------------------------------------------------
# conv2d against the oracle

CASES = [
    # N, C, H, W, K, k, pad, groups        (H, W not multiples of the tiles)
    (2, 5, 11, 13, 7, 3, 1, 1),
    (1, 1, 9, 7, 1, 3, 0, 1),       # one channel
    (1, 24, 10, 15, 20, 3, 2, 1),   # many channels, pad 2
    (3, 4, 7, 8, 3, 3, 1, 1),       # batch 3
    (2, 6, 13, 9, 6, 3, 1, 6),      # depthwise
    (1, 8, 9, 11, 4, 3, 0, 2),      # grouped
    (2, 3, 12, 10, 5, 5, 2, 1),     # 5x5
    (1, 4, 6, 6, 8, 5, 0, 4),       # 5x5 grouped, K = 2 per group
]
ALGS = ["direct", "im2col", "winograd:2", "winograd:4", "winograd:6", "winograd", "auto"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("alg", ALGS)
def test_conv2d_matches_reference(case, alg, backend):
    N, C, H, W, K, k, pad, groups = case
    rng = np.random.default_rng(zlib.crc32(repr((case, alg)).encode()))
    x = rng.standard_normal((N, C, H, W))
    w = rng.standard_normal((K, C // groups, k, k))
    b = rng.standard_normal(K)
    for use_bias in (True, False):
        ref = reference_conv(x, w, b if use_bias else None, 1, pad, 1, groups)
        # F(6,5) has a 10x10 tile: its worst-case float32 error is past MAX_ERROR_BOUND
        tol32 = TOL32[alg]
        cases = [(np.float64, TOL64 * 10)]
        if (k, alg) == (5, "winograd:6"):
            with pytest.raises(AlgorithmError, match="F\\(6,5\\)\\) is not allowed in float32"):
                conv2d(x.astype(np.float32), w.astype(np.float32), padding=pad, groups=groups,
                       algorithm=alg, tuning=backend)
        else:
            cases.append((np.float32, tol32))
        for dt, tol in cases:
            y, info = conv2d(x.astype(dt), w.astype(dt), b.astype(dt) if use_bias else None,
                             padding=pad, groups=groups, algorithm=alg, return_info=True,
                             tuning=backend)
            assert y.dtype == dt and y.shape == ref.shape
            assert info.backend == ("numba" if backend.use_numba else "numpy")
            if alg.startswith("winograd"):
                assert info.algorithm == "winograd"
                if ":" in alg:
                    assert info.tile == int(alg.split(":")[1])
            assert rel_err(y, ref) < tol, (alg, dt, info)


@pytest.mark.parametrize("stride,dilation,pad", [(2, 1, 1), (1, 2, 2), (3, 2, 0), (2, 1, 0)])
@pytest.mark.parametrize("alg", ["direct", "im2col", "auto"])
def test_strided_and_dilated(stride, dilation, pad, alg, backend):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 13, 12))
    w = rng.standard_normal((4, 3, 3, 3))
    ref = reference_conv(x, w, None, stride, pad, dilation, 2)
    y = conv2d(x, w, stride=stride, padding=pad, dilation=dilation, groups=2, algorithm=alg,
               tuning=backend)
    assert rel_err(y, ref) < TOL64


def test_rectangular_kernel_and_pairs(backend):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 3, 9, 10))
    w = rng.standard_normal((2, 3, 3, 1))
    # oracle for a 3x1 kernel with padding (1, 0): pad by hand and use padding 0
    xp = np.zeros((1, 3, 11, 10))
    xp[:, :, 1:10] = x
    ref = reference_conv(xp, w)
    for alg in ("direct", "im2col", "auto"):
        y = conv2d(x, w, padding=(1, 0), algorithm=alg, tuning=backend)
        assert rel_err(y, ref) < TOL64
    with pytest.raises(AlgorithmError, match="square"):
        conv2d(x, w, algorithm="winograd")


def test_tile_keyword_and_points(backend):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 8, 14, 14))
    w = rng.standard_normal((8, 8, 3, 3))
    ref = reference_conv(x, w, None, 1, 1)
    y, info = conv2d(x, w, padding=1, algorithm="winograd", tile=4, return_info=True,
                     tuning=backend)
    assert info.tile == 4 and info.name == "winograd F(4,3)"
    assert rel_err(y, ref) < TOL64
    y, info = conv2d(x, w, padding=1, tile=3, points=[0, 1, -1, "1/2"], return_info=True,
                     tuning=backend)
    assert info.name == "winograd F(3,3)" and rel_err(y, ref) < TOL64


def test_accuracy_float32_vs_torch_float64():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 128, 20, 20)).astype(np.float32)
    w = (rng.standard_normal((64, 128, 3, 3)) / np.sqrt(128 * 9)).astype(np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                     padding=1).numpy()
    # 1.5x the per-tile figures measured with NumPy (REFERENCE section 3), plus direct.
    limits = {"direct": 6e-7, "im2col": 6e-7, "winograd:2": 7.2e-7, "winograd:4": 4.2e-6,
              "winograd:6": 9e-6}
    for alg, lim in limits.items():
        assert rel_err(conv2d(x, w, padding=1, algorithm=alg), ref) < lim, alg
    w5 = (rng.standard_normal((64, 128, 5, 5)) / np.sqrt(128 * 25)).astype(np.float32)
    ref5 = torch.nn.functional.conv2d(torch.from_numpy(x).double(),
                                      torch.from_numpy(w5).double(), padding=2).numpy()
    assert rel_err(conv2d(x, w5, padding=2, algorithm="winograd:4"), ref5) < 8.9e-6


# ----------------------------------------------------------------------------------------------
# NaN and Inf

@pytest.mark.parametrize("alg", ["direct", "im2col", "winograd:2", "winograd:4", "winograd:6"])
def test_nan_inf_in_the_input_follow_pytorch(alg, backend):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((1, 4, 16, 16))
    x[0, 1, 3, 4] = np.nan
    x[0, 2, 11, 12] = np.inf
    w = np.abs(rng.standard_normal((3, 4, 3, 3))) + 0.1      # positive: Inf stays +Inf
    ref = reference_conv(x, w, None, 1, 1)
    for dt in (np.float32, np.float64):
        y, info = conv2d(x.astype(dt), w.astype(dt), padding=1, algorithm=alg, return_info=True,
                         tuning=backend)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
        np.testing.assert_array_equal(np.isposinf(y), np.isposinf(ref))
        fin = np.isfinite(ref)
        assert 0 < fin.sum() < fin.size
        assert rel_err(np.where(fin, y, 0), np.where(fin, ref, 0)) < 1e-5
        if alg.startswith("winograd"):
            assert info.fallback is not None and "non-finite" in info.fallback


def test_finite_result_has_no_fallback():
    x = np.ones((1, 16, 8, 8), np.float32)
    _, info = conv2d(x, np.ones((16, 16, 3, 3), np.float32), algorithm="winograd",
                     return_info=True)
    assert info.fallback is None


# ----------------------------------------------------------------------------------------------
# auto and plans

def test_auto_rule():
    assert choose_algorithm((1, 3, 224, 224), (64, 3, 3, 3), 1, 1)[0] == "im2col"
    assert choose_algorithm((1, 64, 56, 56), (64, 64, 3, 3), 2, 1)[0] == "im2col"
    assert choose_algorithm((1, 64, 56, 56), (64, 64, 3, 3), 1, 2, 2)[0] == "im2col"
    assert choose_algorithm((1, 64, 56, 56), (64, 1, 3, 3), 1, 1, 1, 64)[0] == "direct"
    assert choose_algorithm((1, 64, 56, 56), (64, 64, 1, 1))[0] == "im2col"
    assert choose_algorithm((1, 64, 56, 56), (64, 64, 5, 5), 1, 2)[:2] == ("winograd", 4)
    assert choose_algorithm((1, 512, 2, 2), (512, 512, 3, 3), 1, 1)[0] == "im2col"
    # the canonical 3x3 layers all get Winograd when the weights are transformed once, and a
    # per-call transform never makes a larger tile pay better
    for C, H in ((64, 224), (128, 112), (256, 56), (512, 28), (512, 14), (512, 7)):
        once = choose_algorithm((1, C, H, H), (C, C, 3, 3), 1, 1)
        per_call = choose_algorithm((1, C, H, H), (C, C, 3, 3), 1, 1, weights="per-call")
        assert once[0] == "winograd"
        assert per_call[0] == "im2col" or per_call[1] <= once[1]
    # deep and small: the transformed weights are read on every call, im2col per call
    assert choose_algorithm((1, 512, 7, 7), (512, 512, 3, 3), 1, 1,
                            weights="per-call")[0] == "im2col"
    with pytest.raises(LayoutError, match="weights"):
        choose_algorithm((1, 64, 56, 56), (64, 64, 3, 3), weights="twice")
    alg, tile, reason = choose_algorithm((1, 3, 224, 224), (64, 3, 3, 3), 1, 1)
    assert "3 input" in reason


def test_auto_never_winograd_for_rgb_input():
    x = np.ones((1, 3, 32, 32), np.float32)
    _, info = conv2d(x, np.ones((64, 3, 3, 3), np.float32), padding=1, return_info=True)
    assert info.algorithm != "winograd" and info.reason
    assert info.as_dict()["name"] == info.algorithm


def test_plan_reuse_and_checks(backend):
    rng = np.random.default_rng(11)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    plan = plan_conv2d((2, 16, 10, 10), w, b, padding=1, algorithm="winograd:4", tuning=backend)
    for _ in range(2):
        x = rng.standard_normal((2, 16, 10, 10)).astype(np.float32)
        assert rel_err(plan(x), reference_conv(x, w, b, 1, 1)) < 1e-5
    with pytest.raises(ShapeError, match="plan was made for"):
        plan(np.zeros((1, 16, 10, 10), np.float32))
    with pytest.raises(DTypeError, match="must match"):
        plan(np.zeros((2, 16, 10, 10), np.float64))


def test_top_level_export():
    assert tensorlayout.conv2d is conv2d


# ----------------------------------------------------------------------------------------------
# bad input

X = np.zeros((1, 4, 8, 8), np.float32)
Wt = np.zeros((6, 4, 3, 3), np.float32)


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(w=np.zeros((6, 3, 3, 3), np.float32)), ConvolutionError, "w.shape\\[1\\] must be 4"),
    (dict(groups=3), ConvolutionError, "groups = 3 does not divide the 4 input"),
    (dict(w=np.zeros((5, 2, 3, 3), np.float32), groups=2), ConvolutionError, "5 output"),
    (dict(groups=0), ShapeError, "groups = 0"),
    (dict(padding=-1), LayoutError, "padding = -1"),
    (dict(padding=(1, -2)), LayoutError, "padding"),
    (dict(stride=0), LayoutError, "stride = 0"),
    (dict(dilation=1.5), LayoutError, "dilation"),
    (dict(x=np.zeros((4, 8, 8), np.float32)), RankError, "x has shape"),
    (dict(w=np.zeros((6, 4, 3), np.float32)), RankError, "w has shape"),
    (dict(x=np.zeros((1, 4, 8, 8), np.int32), w=np.zeros((6, 4, 3, 3), np.int32)), DTypeError, "x has dtype int32"),
    (dict(x=np.zeros((1, 4, 8, 8), np.float16)), DTypeError, "float16"),
    (dict(x=np.zeros((1, 4, 8, 8), np.float64)), DTypeError, "must match"),
    (dict(bias=np.zeros(5, np.float32)), ShapeError, "bias has 5"),
    (dict(bias=np.zeros(6, np.float64)), DTypeError, "bias has dtype"),
    (dict(bias=np.zeros((6, 1), np.float32)), RankError, "bias"),
    (dict(algorithm="fft"), LayoutError, "algorithm = 'fft'"),
    (dict(algorithm="winograd:x"), LayoutError, "winograd:M"),
    (dict(algorithm=3), LayoutError, "algorithm = 3"),
    (dict(algorithm="im2col", tile=4), LayoutError, "only Winograd"),
    (dict(algorithm="winograd:4", tile=6), LayoutError, "disagrees"),
    (dict(algorithm="winograd", stride=2), AlgorithmError, "stride = 2"),
    (dict(algorithm="winograd:6", dilation=2), AlgorithmError, "dilation"),
    (dict(algorithm="im2col", points=[0, 1, -1]), LayoutError, "points"),
    (dict(x=np.zeros((1, 4, 2, 2), np.float32)), ConvolutionError, "does not fit"),
])
def test_conv2d_errors(kwargs, err, match):
    args = dict(x=X, w=Wt)
    args.update(kwargs)
    with pytest.raises(err, match=match):
        conv2d(**args)


# ----------------------------------------------------------------------------------------------
# the seed's layer

@pytest.mark.parametrize("alg", list(Algorithm))
@pytest.mark.parametrize("pad,use_bias,batch", [(0, True, 1), (1, False, 2), (2, True, 3)])
def test_layer_matches_reference(alg, pad, use_bias, batch, backend):
    r = alg.r
    C, K, H, W = 3, 5, 11, 9
    rng = np.random.default_rng(alg.m * 100 + pad)
    layer = WinogradLayer(alg, batch, H, W, C, r, r, 1, 1, K, pad, bias=use_bias, tuning=backend)
    assert layer.out_h == (H + 2 * pad - r) // 1 + 1 and layer.out_w == (W + 2 * pad - r) + 1
    # the seed's tile count formula, written out
    m, t = alg.m, alg.tile_in
    assert layer.tile_h_in == t and layer.tile_h_out == m
    assert layer.ntiles_h == (max(H + pad - t + 1, layer.out_h) + m - 1) // m
    assert layer.ntiles_w == (max(W + pad - t + 1, layer.out_w) + m - 1) // m
    x = rng.standard_normal((batch, C, H, W))
    w = rng.standard_normal((K, C, r, r))
    b = rng.standard_normal(K)
    params = np.concatenate([w.ravel(), b]) if use_bias else w.ravel()
    assert params.size == layer.params_size
    ref = reference_conv(x, w, b if use_bias else None, 1, pad)
    y = layer.forward(x, params)
    assert y.shape == layer.output_shape
    assert rel_err(y, ref) < TOL64
    y32 = layer.forward(x.astype(np.float32).ravel(), params.astype(np.float32))
    assert y32.dtype == np.float32 and rel_err(y32, ref) < 3e-5


def test_layer_caches_weight_transform():
    layer = WinogradLayer("WT_8X8_F_6X6_3X3", 1, 8, 8, 2, 3, 3, 1, 1, 2, 1)
    assert layer.alg is Algorithm.F6X6_3X3
    rng = np.random.default_rng(12)
    params = rng.standard_normal(layer.params_size).astype(np.float32)
    x = rng.standard_normal(layer.input_shape).astype(np.float32)
    y1 = layer.forward(x, params)
    y2 = layer.get_inference_cpu(x, params.copy())
    assert layer.weight_transforms == 1
    np.testing.assert_array_equal(y1, y2)
    params2 = params.copy()
    params2[0] += 1
    layer.forward(x, params2)
    assert layer.weight_transforms == 2


@pytest.mark.parametrize("args,err,match", [
    (("F6X6_3X3", 1, 8, 8, 2, 3, 3, 2, 2, 2, 1), AlgorithmError, "stride-1"),
    (("F6X6_3X3", 1, 8, 8, 2, 5, 5, 1, 1, 2, 1), AlgorithmError, "3x3 kernel"),
    (("F4X4_5X5", 1, 8, 8, 2, 3, 3, 1, 1, 2, 1), AlgorithmError, "5x5 kernel"),
    (("F8X8_3X3", 1, 8, 8, 2, 3, 3, 1, 1, 2, 1), AlgorithmError, "convolution algorithm"),
    ((7, 1, 8, 8, 2, 3, 3, 1, 1, 2, 1), AlgorithmError, "alg = 7"),
    (("F2X2_3X3", 0, 8, 8, 2, 3, 3, 1, 1, 2, 1), ShapeError, "batch_size = 0"),
    (("F2X2_3X3", 1, 8, 8, 2, 3, 3, 1, 1, 2, -1), LayoutError, "pad = -1"),
    (("F2X2_3X3", 1, 1, 8, 2, 3, 3, 1, 1, 2, 0), ShapeError, "too small"),
])
def test_layer_errors(args, err, match):
    with pytest.raises(err, match=match):
        WinogradLayer(*args)
    with pytest.raises(LayoutError, match="bias"):
        WinogradLayer("F2X2_3X3", 1, 8, 8, 2, 3, 3, 1, 1, 2, 1, bias="yes")


def test_layer_forward_errors():
    layer = WinogradLayer(Algorithm.F2X2_3X3, 2, 6, 6, 2, 3, 3, 1, 1, 3, 1)
    good = np.zeros(layer.params_size, np.float32)
    x = np.zeros(layer.input_shape, np.float32)
    with pytest.raises(ShapeError, match="params has 56 values: this layer needs 57"):
        layer.forward(x, good[:-1])
    with pytest.raises(ShapeError, match="flat 1-D"):
        layer.forward(x, good.reshape(3, 19))
    with pytest.raises(ShapeError, match="data has shape"):
        layer.forward(x[:1], good)
    with pytest.raises(DTypeError, match="data has dtype"):
        layer.forward(x.astype(np.float64), good)
    with pytest.raises(DTypeError, match="params has dtype"):
        layer.forward(x, good.astype(np.int64))


# ----------------------------------------------------------------------------------------------
# the unrolled kernels

def test_generated_kernels_written_once_per_exact_transform(tmp_path, monkeypatch):
    """Kernels are generated at first use into the cache folder, one file per exact F(m, r):
    F(2, 3) on custom points gets a file of its own there (named by its exact matrices: the
    default points' name is another), a second plan of it writes nothing more, and the
    generated module's exact matrices are the plan's.  (The default points' module is
    generated into the regular cache by the first plan of every fresh install; compiling it
    a second time here only cost time.)"""
    pytest.importorskip("numba")
    from tensorlayout import _jit
    from tensorlayout.winograd import _codegen
    from tensorlayout.winograd.transforms import transforms

    monkeypatch.setenv("TENSORLAYOUT_CACHE", str(tmp_path))
    monkeypatch.setattr(_jit, "_MODULES", {})
    w = np.random.default_rng(1).standard_normal((8, 8, 3, 3)).astype(np.float32)
    x = np.random.default_rng(2).standard_normal((1, 8, 9, 9)).astype(np.float32)
    kwargs = dict(algorithm="winograd:2", points=[0, 2, -2])
    for _ in range(2):
        p = plan_conv2d(x.shape, w, padding=1, **kwargs)
        assert p.winograd.generated
        mod = _codegen.load_module(p.winograd.t)
        assert mod.EXACT == (tuple(tuple(str(v) for v in row) for row in p.winograd.t.AT),
                             tuple(tuple(str(v) for v in row) for row in p.winograd.t.BT))
        assert rel_err(p(x), reference_conv(x, w, None, 1, 1)) < 2e-6
        files = sorted(f.name for f in (tmp_path / "kernels").glob("*.py"))
        assert files == [f"wino_2_3_{_codegen._key(p.winograd.t)}.py"]
    assert _codegen._key(transforms(2, 3)) != _codegen._key(p.winograd.t)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_many_blocks(m, backend):
    """Small blocks force the multi-block paths (blocks split over threads, rows cut mid-way)."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 16, 23, 21)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    ref = reference_conv(x, w, b, 1, 1)
    for block in (7, 16):
        plan = plan_conv2d(x.shape, w, b, padding=1, algorithm=f"winograd:{m}", block=block,
                           tuning=backend)
        assert rel_err(plan(x), ref) < TOL32[f"winograd:{m}"]
    x[1, 3, 10, 10] = np.nan
    y = plan_conv2d(x.shape, w, b, padding=1, algorithm=f"winograd:{m}", block=7,
                    tuning=backend)(x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(reference_conv(x, w, b, 1, 1)))


@pytest.mark.parametrize("m,r", [(2, 3), (4, 3), (6, 3), (4, 5)])
def test_row_layout_blocks(m, r):
    """Blocks of whole tile rows (the layout wide images get) on small inputs: one row per
    block, whole images per block, and rows shared by threads (the split schedule), batch 2,
    sizes that are not multiples of m, padding 0 to 2, against the float64 loop; NaN lands
    where direct convolution puts it."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(29)
    x = rng.standard_normal((2, 5, 19, 23)).astype(np.float32)
    w = rng.standard_normal((6, 5, r, r)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    tol = {2: 2e-6, 4: 1e-5, 6: 3e-5}[m] if r == 3 else 3e-5
    tunings = (Tuning(row_layout=True, block_tiles=1),            # one tile row per block
               Tuning(row_layout=True, block_tiles=10 ** 6),      # whole images
               Tuning(row_layout=True, threads=3, min_block_tiles=10 ** 6))   # split
    for tuning in tunings:
        for pad in (0, 1, 2):
            plan = plan_conv2d(x.shape, w, b, padding=pad, algorithm=f"winograd:{m}",
                               tuning=tuning)
            assert plan.schedule().U2 > 0
            assert rel_err(plan(x), reference_conv(x, w, b, 1, pad)) < tol
    tuning = tunings[0]
    xn = x.copy()
    xn[1, 2, 0, 22] = np.nan
    xn[0, 4, 9, 0] = np.inf
    y = plan_conv2d(x.shape, w, b, padding=1, algorithm=f"winograd:{m}", tuning=tuning)(xn)
    ref = reference_conv(xn, w, b, 1, 1)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(ref))


def test_tiles_past_the_error_bound_are_refused():
    """The bound comes from the transforms: eps(dtype) times their worst-case growth."""
    from tensorlayout.winograd.transforms import MAX_ERROR_BOUND

    x = np.ones((1, 8, 24, 24), np.float32)
    w = np.ones((8, 8, 3, 3), np.float32)
    for m in (2, 4, 6, 8, 12, 16):
        t = transforms(m, 3)
        # the amplification, recomputed here from the exact matrices by brute force: the
        # largest output of the 1-D tile when every product is taken in absolute value
        AT, G, BT = (np.abs(np.array(a, dtype=float)) for a in (t.AT, t.G, t.BT))
        k = max(sum(AT[i, a] * G[a].sum() * BT[a].sum() for a in range(t.alpha))
                for i in range(m))
        assert t.amplification == pytest.approx(k * k)
        if np.finfo(np.float32).eps * k * k > MAX_ERROR_BOUND:
            with pytest.raises(AlgorithmError, match=f"tile = {m}.*largest tile within the bound is 6"):
                conv2d(x, w, padding=1, algorithm=f"winograd:{m}")
        else:
            conv2d(x, w, padding=1, algorithm=f"winograd:{m}")
    # float64 keeps large tiles, accurately
    x64 = np.random.default_rng(3).standard_normal((1, 8, 24, 24))
    w64 = np.random.default_rng(4).standard_normal((8, 8, 3, 3))
    assert rel_err(conv2d(x64, w64, padding=1, algorithm="winograd:12"),
                   reference_conv(x64, w64, None, 1, 1)) < 1e-6


def test_non_finite_weights_follow_pytorch_in_every_algorithm():
    """A NaN or Inf weight meets the padded zeros too (NaN there), as in PyTorch, whatever the
    algorithm, so auto answers the same whichever it picks."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    w[3, 5, 0, 0] = np.nan
    w[7, 2, 2, 1] = np.inf
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    for alg in ("direct", "im2col", "winograd:2", "winograd:4", "auto"):
        y = conv2d(x, w, padding=1, algorithm=alg)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg=alg)
        np.testing.assert_array_equal(np.isinf(y), np.isinf(ref), err_msg=alg)
        fin = np.isfinite(ref)
        np.testing.assert_allclose(y[fin], ref[fin], rtol=1e-4, atol=1e-4, err_msg=alg)


# ----------------------------------------------------------------------------------------------
# the engine: threads, blocks, schedules, concurrent calls

def test_same_result_for_every_thread_count_and_block():
    """Threads and blocks (blocks that cut tile rows included) change the schedule, never the
    numbers beyond float32 rounding; batch 2, odd sizes, both schedules."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(31)
    x = rng.standard_normal((2, 17, 23, 29)).astype(np.float32)
    w = rng.standard_normal((19, 17, 3, 3)).astype(np.float32)
    b = rng.standard_normal(19).astype(np.float32)
    ref = reference_conv(x, w, b, 1, 1)
    for m in (2, 4):
        seen = set()
        for tuning in (Tuning(threads=1), Tuning(threads=2), Tuning(threads=3, block_tiles=5),
                       Tuning(threads=5, block_tiles=13),
                       Tuning(threads=2, min_block_tiles=1 << 20, small_weights_bytes=1),
                       Tuning(threads=5),
                       Tuning(threads=3, row_layout=True, block_tiles=11)):
            plan = plan_conv2d(x.shape, w, b, padding=1, algorithm=f"winograd:{m}", tuning=tuning)
            seen.add(plan.schedule().mode)
            assert rel_err(plan(x), ref) < TOL32[f"winograd:{m}"], tuning
        assert seen == {"tiles", "split"}


@pytest.mark.parametrize("gemm", ["blas", "packed"])
def test_native_and_blas_engines(gemm):
    """float32 Winograd on the native workers with the packed-panel SIMD GEMM ("packed") and on
    Python threads with BLAS ("blas"), in both schedules, with the row layout and without,
    against the float64 loop; NaN input still lands where PyTorch puts it."""
    pytest.importorskip("numba")
    from tensorlayout.winograd import engine

    rng = np.random.default_rng(37)
    x = rng.standard_normal((2, 20, 15, 33)).astype(np.float32)
    w = rng.standard_normal((24, 20, 3, 3)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    ref = reference_conv(x, w, b, 1, 1)
    native = gemm == "packed" and engine.native_ok()
    for extra in (dict(), dict(min_block_tiles=1 << 20, small_weights_bytes=1),
                  dict(block_tiles=9, row_layout=False)):
        tuning = Tuning(threads=3, gemm=gemm, **extra)
        plan = plan_conv2d(x.shape, w, b, padding=1, algorithm="winograd:2", tuning=tuning)
        assert (plan.winograd.native is not None) == native
        assert (plan.winograd.packed is not None) == native
        assert rel_err(plan(x), ref) < TOL32["winograd:2"], extra
    xn = x.copy()
    xn[1, 4, 7, 30] = np.nan
    y = plan(xn)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(reference_conv(xn, w, b, 1, 1)))
    assert plan.last_fallback and "non-finite" in plan.last_fallback


@pytest.mark.parametrize("stride, padding, dilation, groups", [(1, 1, 1, 1), (2, 0, 1, 2), (1, 2, 2, 1)])
def test_im2col_engine_on_numbas_threads(stride, padding, dilation, groups):
    """From Tuning.parallel_min_threads threads on, float32 im2col runs as one parallel function
    calling BLAS's sgemm per (group, 16 output channels): same numbers as the float64 loop
    for strides, dilation, groups, odd sizes and batch 2, and as the threads' path below."""
    pytest.importorskip("numba")
    from tensorlayout.winograd import _pool
    from tensorlayout.winograd.im2col import engine_used

    if _pool.sgemm_entry() is None:
        pytest.skip("no sgemm entry point in NumPy's BLAS")
    rng = np.random.default_rng(43)
    x = rng.standard_normal((2, 6, 19, 23)).astype(np.float32)
    w = rng.standard_normal((34, 6 // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(34).astype(np.float32)
    ref = reference_conv(x, w, b, stride, padding, dilation, groups)
    for tuning in (Tuning(threads=3, parallel_min_threads=1), Tuning(threads=2)):
        plan = plan_conv2d(x.shape, w, b, stride=stride, padding=padding, dilation=dilation,
                           groups=groups, algorithm="im2col",
                           tuning=tuning)
        assert engine_used(plan, x.dtype, 3 if tuning.threads == 3 else 2) == (tuning.threads == 3)
        assert rel_err(plan(x), ref) < TOL32["im2col"], tuning


def test_plan_called_from_several_threads_at_once():
    import threading

    rng = np.random.default_rng(41)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    plan = plan_conv2d((1, 16, 30, 30), w, padding=1, algorithm="winograd:4",
                       tuning=Tuning(threads=2))
    xs = [rng.standard_normal((1, 16, 30, 30)).astype(np.float32) for _ in range(6)]
    refs = [reference_conv(x, w, None, 1, 1) for x in xs]
    out = [None] * len(xs)

    def work(i):
        for _ in range(3):
            out[i] = plan(xs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for y, ref in zip(out, refs):
        assert rel_err(y, ref) < TOL32["winograd:4"]


@pytest.mark.parametrize("call,err,match", [
    (lambda: choose_algorithm((1, 64, 56, 56), (64, 64, 3, 3), groups=0), ShapeError, "groups = 0"),
    (lambda: choose_algorithm((64, 56, 56), (64, 64, 3, 3)), RankError, "x.shape has 3 dimensions"),
    (lambda: choose_algorithm((1, 64, 56, 56), (64, 64, 3)), RankError, "w.shape has 3"),
    (lambda: plan_conv2d("1,16,8,8", np.ones((16, 16, 3, 3), np.float32)), ShapeError,
     "x.shape = '1,16,8,8' is not allowed: it must be a sequence of 4 positive integers"),
    (lambda: conv2d(np.ones((1, 2, 4, 4), np.float32), np.ones((2, 2, 3, 3), np.float32),
                    padding=2 ** 31), ConvolutionError, "elements: more than"),
    (lambda: plan_conv2d((1, 4, 8, 8), np.ones((4, 4, 3, 3), np.float32), tuning="fast"),
     LayoutError, "tuning = 'fast'"),
    (lambda: Tuning(threads=0), LayoutError, "Tuning.threads = 0"),
    (lambda: Tuning(gemm="mkl"), LayoutError, "Tuning.gemm = 'mkl'"),
    (lambda: Tuning(block_bytes=0), LayoutError, "Tuning.block_bytes = 0"),
])
def test_bad_arguments_are_named_before_anything_is_allocated(call, err, match):
    with pytest.raises(err, match=match):
        call()
