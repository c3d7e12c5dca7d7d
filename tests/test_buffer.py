"""CPU buffers: row-major offsets and conversions, checked letter by letter."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorlayout import errors
from tensorlayout.buffer import BUFFER_FORMATS, KINDS, buffer_layout, convert, kind_of

SIZES = {"N": 2, "C": 3, "H": 4, "W": 5, "O": 3, "I": 2, "M": 2}


def _shape(fmt):
    return tuple(SIZES[c] for c in fmt)


def _pairs():
    for a, b in itertools.product(BUFFER_FORMATS, repeat=2):
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


@pytest.mark.parametrize("fmt", list(BUFFER_FORMATS))
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
