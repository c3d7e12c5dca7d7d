"""CPU buffers: row-major offsets and conversions, checked letter by letter."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorlayout import errors
from tensorlayout.buffer import BUFFER_FORMATS, KINDS, block_of, buffer_layout, convert, kind_of

SIZES = {"N": 2, "C": 3, "H": 4, "W": 5, "O": 3, "I": 2, "M": 2}
#: The formats that are permutations of their kind's letters (not blocked).
DENSE = [f for f in BUFFER_FORMATS if not block_of(f)]
BLOCKED = [f for f in BUFFER_FORMATS if block_of(f)]


def _shape(fmt):
    return tuple(SIZES[c] for c in fmt)


def _pairs():
    for a, b in itertools.product(DENSE, repeat=2):
        if BUFFER_FORMATS[a][0] == BUFFER_FORMATS[b][0]:
            yield a, b


@pytest.mark.parametrize("src, dst", list(_pairs()))
def test_convert_matches_transpose_and_a_letter_loop(src, dst):
    x = np.random.default_rng(0).standard_normal(_shape(src)).astype(np.float32)
    y = convert(x, src, dst)
    assert y.shape == _shape(dst) and y.flags.c_contiguous
    # Oracle 1: np.transpose with the axes found by letter.
    np.testing.assert_array_equal(y, np.transpose(x, [src.index(c) for c in dst]))
    # Oracle 2: a per-element loop, element by named coordinates.
    for idx in itertools.product(*(range(s) for s in x.shape)):
        named = dict(zip(src, idx))
        assert y[tuple(named[c] for c in dst)] == x[idx]
    np.testing.assert_array_equal(convert(y, dst, src), x)


@pytest.mark.parametrize("fmt", DENSE)
def test_buffer_offsets_are_row_major(fmt):
    shape = _shape(fmt)
    lay = buffer_layout(fmt, shape)
    assert lay.physical_shape == (int(np.prod(shape)),)
    assert lay.padding_waste == 0
    for idx in itertools.product(*(range(s) for s in shape)):
        off = 0
        for i, s in zip(idx, shape):
            off = off * s + i
        assert lay.locate_flat(idx) == off
        assert lay.element_at((off,)) == idx
    x = np.arange(lay.count).reshape(shape)
    np.testing.assert_array_equal(lay.pack(x), x.reshape(-1))


@pytest.mark.parametrize("fmt", BLOCKED)
@pytest.mark.parametrize("shape", [(2, 20, 3, 4), (1, 3, 2, 2), (1, 16, 1, 3)])
def test_blocked_offsets_follow_the_definition(fmt, shape):
    """Element (n, c, h, w) of a blocked format at ((n·B + c // b)·H + h)·W·b + w·b + c % b
    (B = ceil(C/b) blocks of b), both ways; the lanes past C hold no element and pack
    writes them as zero."""
    b = block_of(fmt)
    N, C, H, W = shape
    B = -(-C // b)
    lay = buffer_layout(fmt, shape)
    assert lay.physical_shape == (N * B * H * W * b,)
    assert lay.padding_waste == pytest.approx((B * b - C) / (B * b))
    seen = set()
    for n, c, h, w in itertools.product(*(range(s) for s in shape)):
        off = ((n * B + c // b) * H + h) * W * b + w * b + c % b
        assert lay.locate_flat((n, c, h, w)) == off
        assert lay.element_at((off,)) == (n, c, h, w)
        seen.add(off)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) + 5
    flat = lay.pack(x)
    assert all(flat[o] == 0 for o in set(range(flat.size)) - seen)
    np.testing.assert_array_equal(lay.unpack(flat), x)


@pytest.mark.parametrize("fmt", BLOCKED)
def test_blocked_conversions_and_the_runtime_twins(fmt):
    """NCHW and NHWC to a blocked format and back (channels given), one blocked format to
    another, against a per-element loop; the CPU runtime's NumPy twins hold NCHW16c the
    same way."""
    from tensorlayout.backends.cpu_twins import from_blocked, to_blocked

    b = block_of(fmt)
    x = np.random.default_rng(2).standard_normal((2, 21, 3, 2)).astype(np.float32)
    xb = convert(x, "NCHW", fmt)
    assert xb.shape == (2, -(-21 // b), 3, 2, b)
    for n, c, h, w in itertools.product(*(range(s) for s in x.shape)):
        assert xb[n, c // b, h, w, c % b] == x[n, c, h, w]
    assert (xb[:, -1, :, :, 21 % b or b:] == 0).all()
    np.testing.assert_array_equal(convert(xb, fmt, "NCHW", channels=21), x)
    np.testing.assert_array_equal(convert(xb, fmt, "NHWC", channels=21), x.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(convert(x.transpose(0, 2, 3, 1), "NHWC", fmt), xb)
    other = BLOCKED[(BLOCKED.index(fmt) + 1) % len(BLOCKED)]
    np.testing.assert_array_equal(convert(convert(xb, fmt, other, channels=21), other, "NCHW",
                                          channels=21), x)
    if b == 16:
        np.testing.assert_array_equal(to_blocked(x), xb)
        np.testing.assert_array_equal(from_blocked(xb, 21), x)


@pytest.mark.parametrize("call, pattern", [
    (lambda: convert(np.zeros((1, 2, 3, 3, 16)), "NCHW16c", "NCHW"), r"channels = None"),
    (lambda: convert(np.zeros((1, 2, 3, 3, 16)), "NCHW16c", "NCHW", channels=16),
     r"channels = 16 .* 17 to 32"),
    (lambda: convert(np.zeros((1, 2, 3, 3, 8)), "NCHW16c", "NCHW", channels=20),
     r"array has shape \(1, 2, 3, 3, 8\)"),
    (lambda: convert(np.zeros((1, 2, 3, 3)), "NCHW", "NCHW8c", channels=2), r"only a blocked"),
    (lambda: convert(np.zeros((1, 2, 3, 3)), "NCHW", "OIHW8c"), r"dst = 'OIHW8c'"),
    (lambda: convert(np.zeros((1, 2, 3, 3)), "OIHW", "NCHW8c"), r"same kind"),
])
def test_blocked_conversion_errors_name_the_argument(call, pattern):
    with pytest.raises(errors.LayoutError, match=pattern):
        call()


def test_lower_case_names_and_kinds():
    assert kind_of("nhwc") == "activation" and kind_of("HWIM") == "depthwise"
    assert set(KINDS) == {BUFFER_FORMATS[f][0] for f in BUFFER_FORMATS}
    assert convert(np.zeros((1, 2, 3, 4)), "nchw", "nhwc").shape == (1, 3, 4, 2)


def test_convert_accepts_views_and_keeps_dtype():
    base = np.arange(2 * 3 * 8 * 5, dtype=np.float16).reshape(2, 3, 8, 5)
    view = base[:, :, ::2, :]
    y = convert(view, "NCHW", "NHWC")
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, view.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: convert(np.zeros((1, 2, 3, 4)), "NCHW", "OIHW"), errors.LayoutError,
     r"src = 'NCHW' holds an activation tensor and dst = 'OIHW' a filter"),
    (lambda: convert(np.zeros(4), "W", "NCHW"), errors.LayoutError, r"same kind"),
    (lambda: convert(np.zeros((1, 2, 3, 4)), "NCWH", "NHWC"), errors.LayoutError, r"src = 'NCWH'"),
    (lambda: convert(np.zeros((1, 2, 3, 4)), "NCHW", 7), errors.LayoutError, r"dst = 7"),
    (lambda: convert(np.zeros((2, 3, 4)), "NCHW", "NHWC"), errors.RankError, r"array has shape \(2, 3, 4\)"),
    (lambda: convert(np.zeros((1, 0, 3, 4)), "NCHW", "NHWC"), errors.ShapeError, r"array.shape\[1\] = 0"),
    (lambda: buffer_layout("NHWC", (1, 2, 3)), errors.RankError, r"shape = \(1, 2, 3\)"),
    (lambda: buffer_layout("NHWC", (1, 2, 3, -4)), errors.ShapeError, r"shape\[3\] = -4"),
    (lambda: buffer_layout("NHWC", (1, 2, 3, 4.0)), errors.ShapeError, r"shape\[3\] = 4.0"),
    (lambda: buffer_layout("XYZ", (1, 2, 3)), errors.LayoutError, r"format = 'XYZ'"),
    (lambda: kind_of("NCDHW"), errors.LayoutError, r"format = 'NCDHW'"),
    (lambda: buffer_layout("W", (5,)).locate_flat((5,)), errors.IndexOutOfRange, r"index w = 5"),
])
def test_errors_name_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()
