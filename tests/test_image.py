"""OpenCL RGBA images against an oracle written straight from REFERENCE.md section 1.

The oracle works in the direction the reference table is written: for every
pixel (x, y) and lane k it computes which buffer element the lane holds, with
the table's own // and % formulas, and whether that element exists.  Those
formulas take Python ints (the per-element loops) or NumPy index arrays (the
large MACE shapes); nothing here calls the library to build an expected value.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorlayout import errors
from tensorlayout.image import (
    DEFAULT_MAX_IMAGE_SIZE,
    ImageType,
    buffer_format,
    check_image_limits,
    element_at,
    from_image,
    image_layout,
    image_nbytes,
    image_shape,
    pixel_of,
    to_image,
)

T = ImageType


def q(x):
    return (x + 3) // 4


# ----------------------------------------------------------------------------- the oracle
def ref_size(kind, shape, ff="OIHW", layout="NHWC", tile=None):
    """[width, height] from the reference table."""
    if kind in (T.IN_OUT_CHANNEL, T.IN_OUT_HEIGHT, T.IN_OUT_WIDTH):
        if layout == "NCHW":
            N, C, H, W = shape
        else:
            N, H, W, C = shape
        return {T.IN_OUT_CHANNEL: (q(C) * W, N * H),
                T.IN_OUT_HEIGHT: (W * C, N * q(H)),
                T.IN_OUT_WIDTH: (q(W) * C, N * H)}[kind]
    if kind == T.ARGUMENT:
        return (q(shape[0]), 1)
    if kind == T.CONV2D_FILTER:
        if ff == "HWOI":
            H, W, O, I = shape
            return (4 * q(I), H * W * q(O))
        O, I, H, W = shape
        return (I, H * W * q(O))
    if kind == T.DW_CONV2D_FILTER:
        if ff == "HWIM":
            H, W, I, M = shape
        else:
            M, I, H, W = shape
        return (M * H * W, q(I))
    O, I, H, W = shape
    if kind == T.WEIGHT_HEIGHT:
        return (I * H * W, q(O))
    if kind == T.WEIGHT_WIDTH:
        return (q(I) * H * W, O)
    if kind == T.WINOGRAD_FILTER:
        return (q(I), O * (tile + 2) ** 2)
    raise AssertionError(kind)


def ref_element(kind, shape, x, y, k, ff="OIHW", layout="NHWC", tile=None):
    """(buffer index tuple, valid) held by lane k of pixel (x, y), from the table."""
    if kind in (T.IN_OUT_CHANNEL, T.IN_OUT_HEIGHT, T.IN_OUT_WIDTH):
        if layout == "NCHW":
            N, C, H, W = shape
        else:
            N, H, W, C = shape
        if kind == T.IN_OUT_CHANNEL:
            n, h, w, c = y // H, y % H, x % W, 4 * (x // W) + k
            valid = c < C
        elif kind == T.IN_OUT_HEIGHT:
            n, h, w, c = y // q(H), 4 * (y % q(H)) + k, x % W, x // W
            valid = h < H
        else:
            n, h, w, c = y // H, y % H, 4 * (x % q(W)) + k, x // q(W)
            valid = w < W
        return ((n, c, h, w) if layout == "NCHW" else (n, h, w, c)), valid
    if kind == T.ARGUMENT:
        a = 4 * x + k
        return (a,), a < shape[0]
    if kind == T.CONV2D_FILTER:
        if ff == "HWOI":
            H, W, O, I = shape
        else:
            O, I, H, W = shape
        HW = H * W
        o, i, h, w = 4 * (y // HW) + k, x, (y % HW) // W, (y % HW) % W
        valid = (o < O) & (i < I)
        return ((h, w, o, i) if ff == "HWOI" else (o, i, h, w)), valid
    if kind == T.DW_CONV2D_FILTER:
        # MIHW value F[m, 4y+k, h, w] with x = m*H*W + h*W + w (m > 0: our extension).
        if ff == "HWIM":
            H, W, I, M = shape
        else:
            M, I, H, W = shape
        m, h, w, i = x // (H * W), (x % (H * W)) // W, x % W, 4 * y + k
        valid = i < I
        return ((h, w, i, m) if ff == "HWIM" else (m, i, h, w)), valid
    if kind == T.WEIGHT_HEIGHT:
        O, I, H, W = shape
        o, i, hw = 4 * y + k, x % I, x // I
        return (o, i, hw // W, hw % W), o < O
    if kind == T.WEIGHT_WIDTH:
        O, I, H, W = shape
        o, i, hw = y, 4 * (x % q(I)) + k, x // q(I)
        return (o, i, hw // W, hw % W), i < I
    if kind == T.WINOGRAD_FILTER:
        O, I, _, _ = shape
        t, o, i = y // O, y % O, 4 * x + k
        return (t, o, i), i < I
    raise AssertionError(kind)


def ref_image_loop(kind, src, dtype, **kw):
    """The image by a per-element loop over every pixel and lane."""
    width, height = ref_size(kind, src.shape, **kw)
    img = np.zeros((height, width, 4), dtype=dtype)
    for y in range(height):
        for x in range(width):
            for k in range(4):
                idx, valid = ref_element(kind, src.shape, x, y, k, **kw)
                if valid:
                    img[y, x, k] = dtype(src[idx])
    return img


def ref_image_vec(kind, src, dtype, **kw):
    """The same oracle with the table's formulas applied to index arrays (large shapes)."""
    width, height = ref_size(kind, src.shape, **kw)
    y, x, k = np.indices((height, width, 4))
    idx, valid = ref_element(kind, src.shape, x, y, k, **kw)
    idx = tuple(np.where(valid, i, 0) for i in idx)
    return np.where(valid, src[idx], 0).astype(dtype)


# Shapes of MACE's own round-trip tests (REFERENCE.md), then odd shapes: ones, primes,
# C not a multiple of 4, both filter variants, both depthwise variants, multiplier > 1.
MACE_CASES = [
    (T.ARGUMENT, (1,), {}), (T.ARGUMENT, (11,), {}), (T.ARGUMENT, (256,), {}),
    (T.IN_OUT_CHANNEL, (1, 2, 3, 1), {}), (T.IN_OUT_CHANNEL, (1, 2, 3, 3), {}),
    (T.IN_OUT_CHANNEL, (3, 2, 3, 3), {}), (T.IN_OUT_CHANNEL, (3, 13, 17, 128), {}),
    (T.IN_OUT_CHANNEL, (3, 64, 64, 256), {}),
    (T.CONV2D_FILTER, (5, 3, 1, 1), {}), (T.CONV2D_FILTER, (13, 17, 1, 1), {}),
    (T.CONV2D_FILTER, (512, 128, 1, 1), {}), (T.CONV2D_FILTER, (3, 5, 3, 3), {}),
    (T.CONV2D_FILTER, (17, 13, 3, 3), {}), (T.CONV2D_FILTER, (256, 128, 3, 3), {}),
    (T.WEIGHT_WIDTH, (1, 3, 3, 3), {}), (T.WEIGHT_WIDTH, (11, 13, 13, 17), {}),
    (T.WEIGHT_WIDTH, (64, 64, 11, 13), {}),
    (T.WEIGHT_HEIGHT, (2, 1, 1, 1), {}), (T.WEIGHT_HEIGHT, (11, 13, 13, 17), {}),
    (T.WEIGHT_HEIGHT, (64, 16, 11, 13), {}),
]

ODD_CASES = [
    (T.IN_OUT_CHANNEL, (1, 1, 1, 1), {}), (T.IN_OUT_CHANNEL, (2, 5, 7, 5), {}),
    (T.IN_OUT_CHANNEL, (2, 5, 7, 6), {"layout": "NCHW"}),
    (T.IN_OUT_CHANNEL, (1, 3, 5, 6), {"layout": "NCHW"}),
    (T.IN_OUT_HEIGHT, (1, 1, 1, 1), {}), (T.IN_OUT_HEIGHT, (2, 7, 3, 5), {}),
    (T.IN_OUT_HEIGHT, (3, 5, 2, 7), {"layout": "NCHW"}),
    (T.IN_OUT_WIDTH, (1, 1, 1, 1), {}), (T.IN_OUT_WIDTH, (2, 3, 7, 5), {}),
    (T.IN_OUT_WIDTH, (2, 5, 3, 11), {"layout": "NCHW"}),
    (T.ARGUMENT, (7,), {}),
    (T.CONV2D_FILTER, (1, 1, 1, 1), {}), (T.CONV2D_FILTER, (7, 5, 3, 2), {}),
    (T.CONV2D_FILTER, (3, 2, 7, 5), {"ff": "HWOI"}), (T.CONV2D_FILTER, (1, 1, 1, 1), {"ff": "HWOI"}),
    (T.CONV2D_FILTER, (3, 3, 13, 17), {"ff": "HWOI"}),
    (T.DW_CONV2D_FILTER, (1, 1, 1, 1), {}), (T.DW_CONV2D_FILTER, (1, 7, 3, 3), {}),
    (T.DW_CONV2D_FILTER, (3, 5, 2, 3), {}),
    (T.DW_CONV2D_FILTER, (3, 3, 7, 1), {"ff": "HWIM"}), (T.DW_CONV2D_FILTER, (2, 3, 5, 2), {"ff": "HWIM"}),
    (T.WEIGHT_HEIGHT, (5, 3, 2, 7), {}), (T.WEIGHT_HEIGHT, (1, 1, 1, 1), {}),
    (T.WEIGHT_WIDTH, (3, 5, 7, 2), {}), (T.WEIGHT_WIDTH, (1, 1, 1, 1), {}),
]


def _api_kwargs(kw):
    out = {}
    if "ff" in kw:
        out["filter_format"] = kw["ff"]
    if "layout" in kw:
        out["layout"] = kw["layout"]
    return out


def _case_id(case):
    kind, shape, kw = case
    extra = "-".join(str(v) for v in kw.values())
    return f"{kind.name}-{'x'.join(map(str, shape))}{'-' + extra if extra else ''}"


def _source(shape, seed):
    # float64 values with more precision than float32 or float16 hold, so rounding is exercised.
    return np.random.default_rng(seed).standard_normal(shape) * 3.0


# --------------------------------------------------------------- oracle comparisons
@pytest.mark.parametrize("case", MACE_CASES + ODD_CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_to_image_and_back_match_the_table(case, dtype):
    kind, shape, kw = case
    src = _source(shape, seed=len(shape) + sum(shape))
    small = np.prod(shape) <= 2000
    expected = (ref_image_loop if small else ref_image_vec)(kind, src, dtype, **kw)
    assert image_shape(kind, shape, **_api_kwargs(kw)) == ref_size(kind, shape, **kw)
    img = to_image(src, kind, dtype=dtype, **_api_kwargs(kw))
    assert img.dtype == dtype and img.shape == expected.shape
    np.testing.assert_array_equal(img, expected)
    # Padding lanes are exactly +0.0 (no -0.0, no leftovers).
    assert not np.any(np.signbit(img[img == 0]))
    back = from_image(expected, kind, shape, **_api_kwargs(kw))
    assert back.dtype == dtype
    np.testing.assert_array_equal(back, src.astype(dtype))


@pytest.mark.parametrize("case", [c for c in MACE_CASES + ODD_CASES if np.prod(c[1]) < 300_000],
                         ids=_case_id)
def test_pixel_of_and_element_at_match_the_table(case):
    kind, shape, kw = case
    api = _api_kwargs(kw)
    width, height = ref_size(kind, shape, **kw)
    y, x, k = (a.ravel() for a in np.indices((height, width, 4)))
    idx, valid = ref_element(kind, shape, x, y, k, **kw)
    got_idx, got_valid = element_at(kind, shape, x, y, k, **api)
    np.testing.assert_array_equal(got_valid, valid)
    for g, e in zip(got_idx, idx):
        np.testing.assert_array_equal(np.asarray(g)[valid], np.asarray(e)[valid])
    # Every element once: pixel_of on the valid lanes' elements returns those lanes.
    elems = np.stack([np.asarray(e)[valid] for e in idx], axis=-1)
    assert len(elems) == np.prod(shape)
    px, py, pk = pixel_of(kind, shape, elems, **api)
    np.testing.assert_array_equal(px, x[valid])
    np.testing.assert_array_equal(py, y[valid])
    np.testing.assert_array_equal(pk, k[valid])


def test_per_element_scalar_answers():
    # IN_OUT_CHANNEL, NHWC (1, 2, 3, 5): c = 4*(x // W) + k, so c=4 at w=2 sits at x = 1*3 + 2.
    assert pixel_of("IN_OUT_CHANNEL", (1, 2, 3, 5), (0, 1, 2, 4)) == (5, 1, 0)
    shape = (2, 7, 3, 5)
    for idx in itertools.product(*(range(s) for s in shape)):
        x, y, k = pixel_of(T.IN_OUT_HEIGHT, shape, idx)
        n, h, w, c = idx
        # Written forwards from the table: y = n*q(H) + h//4, x = c*W + w, k = h%4.
        assert (x, y, k) == (c * 3 + w, n * q(7) + h // 4, h % 4)
        assert element_at(T.IN_OUT_HEIGHT, shape, x, y, k) == idx
    assert element_at(T.IN_OUT_HEIGHT, shape, 0, 1, 3) is None  # h = 4*1 + 3 = 7 = H: padding


def test_float16_rounds_to_nearest_even():
    # 1 + 2**-11 lies halfway between 1 and the next half 1 + 2**-10: even is 1.
    # 1 + 3 * 2**-11 lies halfway between 1 + 2**-10 and 1 + 2**-9: even is 1 + 2**-9.
    a = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11), 65519.0, 65520.0])
    for src in (a, a.astype(np.float32)):
        with np.errstate(over="ignore"):  # 65520 overflows to inf, as IEEE rounding says
            img = to_image(src, "ARGUMENT", dtype=np.float16)
        got = img.reshape(-1)[:5]
        assert got[0] == 1.0 and got[1] == 1 + 2.0**-9 and got[2] == -1.0
        assert got[3] == 65504.0 and np.isinf(got[4])  # float16's largest finite and overflow


def test_float16_source_keeps_float16_and_float64_source_defaults_to_float32():
    x16 = np.arange(6, dtype=np.float16)
    assert to_image(x16, "ARGUMENT").dtype == np.float16
    assert to_image(np.arange(6.0), "ARGUMENT").dtype == np.float32


def test_nchw_and_nhwc_sources_give_the_same_image():
    src = _source((2, 6, 5, 7), 3).astype(np.float32)  # NHWC
    nchw = np.ascontiguousarray(src.transpose(0, 3, 1, 2))
    for kind in (T.IN_OUT_CHANNEL, T.IN_OUT_HEIGHT, T.IN_OUT_WIDTH):
        a = to_image(src, kind)
        b = to_image(nchw, kind, layout="NCHW")
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(from_image(b, kind, nchw.shape, layout="NCHW"), nchw)


@pytest.mark.parametrize("shape", [(1, 64, 128, 128), (2, 70, 96, 100)])
def test_large_nchw_activations_round_trip(shape):
    # 4 MiB and more: the compiled copy writes past the cache (streaming stores) in both
    # directions; W = 100 leaves a tail shorter than a cache line in each row
    nchw = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    expected = ref_image_vec(T.IN_OUT_CHANNEL, np.ascontiguousarray(nchw.transpose(0, 2, 3, 1)),
                             np.float32)
    out = np.full(expected.shape, np.nan, dtype=np.float32)
    to_image(nchw, T.IN_OUT_CHANNEL, layout="NCHW", out=out)
    np.testing.assert_array_equal(out, expected)
    back = np.full(shape, np.nan, dtype=np.float32)
    from_image(expected, T.IN_OUT_CHANNEL, shape, layout="NCHW", out=back)
    np.testing.assert_array_equal(back, nchw)


def test_non_contiguous_sources_are_read_correctly():
    base = _source((2, 5, 8, 9), 5).astype(np.float32)
    view = base[:, ::2, 1:7, ::2]  # strided, offset
    expected = ref_image_loop(T.IN_OUT_CHANNEL, np.ascontiguousarray(view), np.float32)
    np.testing.assert_array_equal(to_image(view, T.IN_OUT_CHANNEL), expected)
    rev = base[::-1, :, ::-1, :]
    np.testing.assert_array_equal(
        to_image(rev, T.IN_OUT_WIDTH), ref_image_vec(T.IN_OUT_WIDTH, np.ascontiguousarray(rev), np.float32))


# Winograd filter: U = G g G^T with MACE's G typed in from REFERENCE.md section 1.
MACE_G = {
    2: [[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
    4: [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
        [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
    6: [[1, 0, 0], [-2 / 9, -2 / 9, -2 / 9], [-2 / 9, 2 / 9, -2 / 9], [1 / 90, 1 / 45, 2 / 45],
        [1 / 90, -1 / 45, 2 / 45], [1 / 45, 1 / 90, 1 / 180], [1 / 45, -1 / 90, 1 / 180], [0, 0, 1]],
}


@pytest.mark.parametrize("tile", [2, 4, 6])
@pytest.mark.parametrize("shape", [(5, 3, 3, 3), (2, 9, 3, 3)])
def test_winograd_filter_matches_per_element_transform(tile, shape):
    g = _source(shape, tile)
    G = MACE_G[tile]
    T_ = tile + 2
    O, I = shape[:2]
    width, height = ref_size(T.WINOGRAD_FILTER, shape, tile=tile)
    expected = np.zeros((height, width, 4), dtype=np.float32)
    for y in range(height):
        for x in range(width):
            for k in range(4):
                (t, o, i), valid = ref_element(T.WINOGRAD_FILTER, shape, x, y, k, tile=tile)
                if valid:
                    row, col = divmod(t, T_)
                    u = sum(G[row][a] * g[o, i, a, b] * G[col][b] for a in range(3) for b in range(3))
                    expected[y, x, k] = np.float32(u)
    assert image_shape(T.WINOGRAD_FILTER, shape, tile=tile) == (width, height)
    img = to_image(g, T.WINOGRAD_FILTER, tile=tile)
    np.testing.assert_allclose(img, expected, rtol=2e-6, atol=1e-6)
    lanes = np.arange(4 * width).reshape(width, 4)
    assert np.all(img[:, lanes >= I] == 0)
    back = from_image(img, T.WINOGRAD_FILTER, shape, tile=tile)
    np.testing.assert_allclose(back, g, rtol=1e-5, atol=1e-5)
    assert pixel_of(T.WINOGRAD_FILTER, shape, (T_ * T_ - 1, O - 1, I - 1), tile=tile) == (
        (I - 1) // 4, (T_ * T_ - 1) * O + O - 1, (I - 1) % 4)


# ------------------------------------------------------------------- property tests
def _activation_shapes():
    return st.tuples(*[st.integers(1, 4)] + [st.integers(1, 9)] * 3)


def _filter_shapes():
    return st.tuples(*[st.integers(1, 9)] * 2 + [st.integers(1, 4)] * 2)


CASE_STRATEGY = st.one_of(
    st.tuples(st.sampled_from([T.IN_OUT_CHANNEL, T.IN_OUT_HEIGHT, T.IN_OUT_WIDTH]),
              _activation_shapes(), st.sampled_from([{}, {"layout": "NCHW"}])),
    st.tuples(st.just(T.ARGUMENT), st.tuples(st.integers(1, 40)), st.just({})),
    st.tuples(st.just(T.CONV2D_FILTER), _filter_shapes(), st.sampled_from([{}, {"filter_format": "HWOI"}])),
    st.tuples(st.just(T.DW_CONV2D_FILTER), _filter_shapes(), st.sampled_from([{"filter_format": "MIHW"}, {"filter_format": "HWIM"}])),
    st.tuples(st.sampled_from([T.WEIGHT_HEIGHT, T.WEIGHT_WIDTH]), _filter_shapes(), st.just({})),
)


@settings(max_examples=150, deadline=None)
@given(case=CASE_STRATEGY, dtype=st.sampled_from([np.float32, np.float16]))
def test_property_round_trip_each_element_in_exactly_one_lane(case, dtype):
    kind, shape, kw = case
    count = int(np.prod(shape))
    # Distinct nonzero values 1..count (exact in float16 up to 2048).
    values = (np.arange(count, dtype=np.float64) % 2000 + 1).reshape(shape)
    unique = count <= 2000
    img = to_image(values, kind, dtype=dtype, **kw)
    width, height = image_shape(kind, shape, **kw)
    assert img.shape == (height, width, 4)
    nonzero = img != 0
    assert nonzero.sum() == count  # every element in one lane; every other lane is zero
    if unique:
        assert sorted(img[nonzero].astype(int).tolist()) == list(range(1, count + 1))
    np.testing.assert_array_equal(from_image(img, kind, shape, **kw), values.astype(dtype))


@settings(max_examples=100, deadline=None)
@given(case=CASE_STRATEGY)
def test_property_pixel_of_and_element_at_are_inverse(case):
    kind, shape, kw = case
    width, height = image_shape(kind, shape, **kw)
    y, x, k = (a.ravel() for a in np.indices((height, width, 4)))
    idx, valid = element_at(kind, shape, x, y, k, **kw)
    assert valid.sum() == np.prod(shape)
    index = np.stack([np.asarray(i)[valid] for i in idx], axis=-1)
    assert len({tuple(r) for r in index.tolist()}) == len(index)  # one lane per element
    px, py, pk = pixel_of(kind, shape, index, **kw)
    np.testing.assert_array_equal(px, x[valid])
    np.testing.assert_array_equal(py, y[valid])
    np.testing.assert_array_equal(pk, k[valid])


# ----------------------------------------------------------------------- the API bits
def test_image_type_numbering_is_maces():
    assert [t.name for t in sorted(ImageType)] == [
        "CONV2D_FILTER", "IN_OUT_CHANNEL", "ARGUMENT", "IN_OUT_HEIGHT", "IN_OUT_WIDTH",
        "WINOGRAD_FILTER", "DW_CONV2D_FILTER", "WEIGHT_HEIGHT", "WEIGHT_WIDTH"]
    assert [int(t) for t in sorted(ImageType)] == list(range(9))
    assert image_shape(1, (1, 2, 3, 5)) == image_shape("in_out_channel", (1, 2, 3, 5)) == (6, 2)


def test_image_nbytes_and_buffer_format():
    assert image_nbytes("IN_OUT_CHANNEL", (1, 2, 3, 5)) == 6 * 2 * 4 * 4
    assert image_nbytes("IN_OUT_CHANNEL", (1, 2, 3, 5), dtype=np.float16) == 6 * 2 * 4 * 2
    assert buffer_format("CONV2D_FILTER", filter_format="hwoi") == "HWOI"
    assert buffer_format("DW_CONV2D_FILTER", filter_format="hwim") == "HWIM"
    # A conv filter's order names no depthwise order: refused, with the depthwise names as a hint.
    for ff in ("OIHW", "HWOI"):
        with pytest.raises(errors.LayoutError, match="C1HW"):
            buffer_format("DW_CONV2D_FILTER", filter_format=ff)
    assert buffer_format("ARGUMENT") == "W"
    assert buffer_format("WEIGHT_WIDTH") == "OIHW"


def test_layout_physical_size_and_waste():
    lay = image_layout("IN_OUT_CHANNEL", (1, 2, 3, 5))
    assert lay.physical_shape == (2, 6, 4) and lay.count == 30
    assert lay.padding_waste == pytest.approx(1 - 30 / 48)


def test_device_limit_default_and_max_size_none():
    assert DEFAULT_MAX_IMAGE_SIZE == (16384, 16384)
    check_image_limits(16384, 16384)
    x = np.zeros((1, 1, 16385, 4), dtype=np.float32)
    with pytest.raises(errors.DeviceLimitError, match=r"width 16385 .* 16384 by 1 pixels"):
        to_image(x, "IN_OUT_CHANNEL")
    assert to_image(x, "IN_OUT_CHANNEL", max_size=None).shape == (1, 16385, 4)
    with pytest.raises(errors.DeviceLimitError, match=r"height 20000 .* 16384 by 3616 pixels"):
        to_image(np.zeros((20000, 1, 1, 4), np.float32), "IN_OUT_CHANNEL")
    with pytest.raises(errors.DeviceLimitError, match=r"width 9 .* maximum 8 by 1"):
        to_image(np.zeros((1, 1, 9, 4), np.float32), "IN_OUT_CHANNEL", max_size=(8, 8))


# ------------------------------------------------------------------------- errors
SRC = np.zeros((1, 2, 3, 5), dtype=np.float32)


@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: to_image(np.zeros((2, 3), np.float32), "IN_OUT_CHANNEL"), errors.RankError, r"array has shape \(2, 3\)"),
    (lambda: image_shape("IN_OUT_CHANNEL", (1, 2, 3)), errors.RankError, r"shape = \(1, 2, 3\) has 3"),
    (lambda: image_shape("IN_OUT_CHANNEL", (1, 0, 3, 4)), errors.ShapeError, r"shape\[1\] = 0"),
    (lambda: image_shape("IN_OUT_CHANNEL", (1, -2, 3, 4)), errors.ShapeError, r"shape\[1\] = -2"),
    (lambda: image_shape("IN_OUT_CHANNEL", (1, 2.5, 3, 4)), errors.ShapeError, r"shape\[1\] = 2.5"),
    (lambda: image_shape("IN_OUT_CHANNEL", (1, True, 3, 4)), errors.ShapeError, r"shape\[1\] = True"),
    (lambda: image_shape("IN_OUT_CHANNEL", "1234"), errors.ShapeError, r"shape = '1234'"),
    (lambda: to_image(SRC, "IN_OUT_CHANNEL", dtype=np.float64), errors.DTypeError, r"dtype = .*float64"),
    (lambda: to_image(SRC, "IN_OUT_CHANNEL", dtype="int8"), errors.DTypeError, r"dtype = 'int8'"),
    (lambda: to_image(SRC.astype(np.int32), "IN_OUT_CHANNEL"), errors.DTypeError, r"array has dtype int32"),
    (lambda: to_image(SRC.astype(bool), "IN_OUT_CHANNEL"), errors.DTypeError, r"array has dtype bool"),
    (lambda: from_image(np.zeros((2, 5, 4), np.float32), "IN_OUT_CHANNEL", (1, 2, 3, 5)),
     errors.ShapeError, r"image has shape \(2, 5, 4\).*\[6, 2\]"),
    (lambda: from_image(np.zeros((2, 6, 3), np.float32), "IN_OUT_CHANNEL", (1, 2, 3, 5)),
     errors.ShapeError, r"image has shape \(2, 6, 3\)"),
    (lambda: from_image(np.zeros((12, 4), np.float32), "IN_OUT_CHANNEL", (1, 2, 3, 5)),
     errors.RankError, r"image has shape \(12, 4\)"),
    (lambda: from_image(np.zeros((2, 6, 4)), "IN_OUT_CHANNEL", (1, 2, 3, 5)),
     errors.DTypeError, r"image has dtype float64"),
    (lambda: from_image(np.zeros((2, 6, 4), np.int32), "IN_OUT_CHANNEL", (1, 2, 3, 5)),
     errors.DTypeError, r"image has dtype int32"),
    (lambda: pixel_of("IN_OUT_CHANNEL", (1, 2, 3, 5), (0, 2, 0, 0)), errors.IndexOutOfRange,
     r"index h = 2 .*\[0, 2\)"),
    (lambda: pixel_of("IN_OUT_CHANNEL", (1, 2, 3, 5), (0, 0, -1, 0)), errors.IndexOutOfRange, r"index w = -1"),
    (lambda: pixel_of("IN_OUT_CHANNEL", (1, 2, 3, 5), (0, 0, 0)), errors.RankError, r"index = \(0, 0, 0\)"),
    (lambda: pixel_of("IN_OUT_CHANNEL", (1, 2, 3, 5), (0, 0.5, 0, 0)), errors.ShapeError, r"index h = 0.5"),
    (lambda: pixel_of("IN_OUT_CHANNEL", (1, 2, 3, 5), np.array([[0, 0, 0, 9]])), errors.IndexOutOfRange,
     r"index c = 9"),
    (lambda: element_at("IN_OUT_CHANNEL", (1, 2, 3, 5), 6, 0, 0), errors.IndexOutOfRange, r"x = 6 .*\[0, 6\)"),
    (lambda: element_at("IN_OUT_CHANNEL", (1, 2, 3, 5), 0, 2, 0), errors.IndexOutOfRange, r"y = 2"),
    (lambda: element_at("IN_OUT_CHANNEL", (1, 2, 3, 5), 0, 0, 4), errors.IndexOutOfRange, r"k = 4 .*\[0, 4\)"),
    (lambda: element_at("IN_OUT_CHANNEL", (1, 2, 3, 5), -1, 0, 0), errors.IndexOutOfRange, r"x = -1"),
    (lambda: to_image(SRC, "NOT_A_KIND"), errors.LayoutError, r"kind = 'NOT_A_KIND'"),
    (lambda: image_shape(42, (3,)), errors.LayoutError, r"kind = 42"),
    (lambda: image_shape(True, (3,)), errors.LayoutError, r"kind = True"),
    (lambda: to_image(SRC, "IN_OUT_CHANNEL", layout="NCWH"), errors.LayoutError, r"layout = 'NCWH'"),
    (lambda: image_shape("CONV2D_FILTER", (1, 1, 1, 1), layout="NCHW"), errors.LayoutError, r"layout = 'NCHW'"),
    (lambda: image_shape("CONV2D_FILTER", (1, 1, 1, 1), filter_format="IOHW"), errors.LayoutError,
     r"filter_format = 'IOHW'"),
    (lambda: image_shape("DW_CONV2D_FILTER", (1, 1, 1, 1), filter_format="OHWI"), errors.LayoutError,
     r"filter_format = 'OHWI'"),
    (lambda: image_shape("WEIGHT_WIDTH", (1, 1, 1, 1), filter_format="HWOI"), errors.LayoutError,
     r"filter_format = 'HWOI'"),
    (lambda: image_shape("IN_OUT_CHANNEL", (1, 1, 1, 1), tile=2), errors.LayoutError,
     r"tile = 2 is not allowed for IN_OUT_CHANNEL: only WINOGRAD_FILTER takes a tile"),
    (lambda: image_shape("WINOGRAD_FILTER", (1, 1, 3, 3)), errors.AlgorithmError, r"tile = None"),
    (lambda: image_shape("WINOGRAD_FILTER", (1, 1, 3, 3), tile=3), errors.AlgorithmError, r"tile = 3"),
    (lambda: image_shape("WINOGRAD_FILTER", (1, 1, 5, 5), tile=2), errors.AlgorithmError,
     r"5x5 kernel: WINOGRAD_FILTER holds 3x3 filters only"),
    (lambda: image_shape("WINOGRAD_FILTER", (1, 1, 5, 5), tile=3), errors.AlgorithmError,
     r"tile = 3 is not allowed for WINOGRAD_FILTER: it must be one of \(2, 4, 6\)"),
    (lambda: check_image_limits(10, 16390), errors.DeviceLimitError, r"height 16390 .* by 6 pixels"),
])
def test_errors_name_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_every_error_is_a_value_error():
    with pytest.raises(ValueError):
        to_image(SRC, "IN_OUT_CHANNEL", dtype=np.float64)


def test_out_arguments_write_in_place_and_check_first():
    src = _source((1, 3, 5, 6), 9).astype(np.float32)
    expected = ref_image_loop(T.IN_OUT_CHANNEL, src, np.float32)
    out = np.full(expected.shape, np.nan, dtype=np.float32)
    assert to_image(src, T.IN_OUT_CHANNEL, out=out) is out
    np.testing.assert_array_equal(out, expected)  # padding lanes rewritten as 0
    half = np.full(expected.shape, np.nan, dtype=np.float16)
    np.testing.assert_array_equal(to_image(src, T.IN_OUT_CHANNEL, out=half), expected.astype(np.float16))
    back = np.empty_like(src)
    assert from_image(expected, T.IN_OUT_CHANNEL, src.shape, out=back) is back
    np.testing.assert_array_equal(back, src)
    bad = np.full((3, 11, 4), 7.0, dtype=np.float32)
    with pytest.raises(errors.ShapeError, match=r"out has shape \(3, 11, 4\)"):
        to_image(src, T.IN_OUT_CHANNEL, out=bad)
    assert np.all(bad == 7.0)
    with pytest.raises(errors.DTypeError, match=r"out has dtype float64"):
        to_image(src, T.IN_OUT_CHANNEL, out=np.zeros(expected.shape))
    with pytest.raises(errors.DTypeError, match=r"dtype = .*float16.* out"):
        to_image(src, T.IN_OUT_CHANNEL, out=out, dtype=np.float16)
    with pytest.raises(errors.ShapeError, match=r"out has shape \(1, 3, 5, 5\)"):
        from_image(expected, T.IN_OUT_CHANNEL, src.shape, out=np.empty((1, 3, 5, 5), np.float32))
    with pytest.raises(errors.DTypeError, match=r"out has dtype float16"):
        from_image(expected, T.IN_OUT_CHANNEL, src.shape, out=np.empty(src.shape, np.float16))


@pytest.mark.parametrize("kind, shape", [
    ("IN_OUT_CHANNEL", (1, 2, 3, 3)), ("IN_OUT_HEIGHT", (2, 3, 2, 2)), ("IN_OUT_WIDTH", (1, 2, 1, 3)),
    ("ARGUMENT", (1,)), ("CONV2D_FILTER", (2, 3, 1, 1)), ("DW_CONV2D_FILTER", (1, 3, 2, 2)),
    ("WEIGHT_HEIGHT", (3, 2, 1, 1)), ("WEIGHT_WIDTH", (2, 3, 1, 1)),
])
def test_padding_lanes_are_zero_when_writing_into_an_existing_image(kind, shape):
    # Every dimension split into lanes is shorter than 4 here, so a lane past the tensor's
    # end lies outside any element's reach; writing into a sentinel-filled image must still
    # leave exactly 0 in it, as the oracle (a fresh zero image) has.
    x = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape)
    fresh = to_image(x, kind)
    dirty = np.full_like(fresh, 7.0)
    assert to_image(x, kind, out=dirty) is dirty
    np.testing.assert_array_equal(dirty, fresh)
    assert np.count_nonzero(fresh == 0) == fresh.size - x.size
