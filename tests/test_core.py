"""The layout core against per-element loops written from its defining formula.

A location is ``base + sum(digit * stride)`` with ``digit_k = ((d + offset) // div_k) % radix_k``;
the helper ``ref_locate`` below computes exactly that with plain Python ints.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorlayout import _copy, errors
from tensorlayout.core import Layout, _interval_boxes


def ref_locate(shape, digits, offsets, base, index, dims):
    loc = base
    for name, d in zip(dims, index):
        spec = digits[name]
        j = d + offsets.get(name, 0)
        if isinstance(spec, int):
            loc += j * spec
            continue
        div = 1
        for radix, stride in spec:
            v = j // div
            if radix is not None:
                v %= radix
                div *= radix
            loc += v * stride
        # (the outermost digit keeps j // div with no modulo)
    return loc


def npu_like(N=2, C=5, H=2, W=3, X=4, Q=3, base=7, owned=("n", "h", "w")):
    """Channels spread over X lanes starting at lane Q; the lanes before Q are foreign."""
    rows = -(-(Q + C) // X)
    lane = 64  # slots per lane
    digits = {"n": rows * H * W, "c": [(X, lane), (None, H * W)], "h": W, "w": 1}
    return Layout("npu", ("n", "c", "h", "w"), (N, C, H, W), (X, lane), digits,
                  offsets={"c": Q}, base=base, owned_padding=owned), digits


def test_locate_and_element_at_match_the_formula_with_offsets():
    lay, digits = npu_like()
    seen = {}
    for idx in itertools.product(*(range(s) for s in lay.shape)):
        loc = ref_locate(lay.shape, digits, {"c": 3}, 7, idx, lay.dims)
        assert lay.locate_flat(idx) == loc
        assert lay.locate(idx) == divmod(loc, 64)
        assert loc not in seen
        seen[loc] = idx
    for loc in range(lay.physical_size):
        got = lay.element_at(divmod(loc, 64))
        assert got == seen.get(loc)
    # Vectorised forms agree with the scalar ones.
    grid = np.indices(lay.shape).reshape(4, -1)
    flat = lay.locate_flat(tuple(grid))
    assert flat.tolist() == [seen_loc for seen_loc in sorted(seen, key=lambda l: seen[l])]
    index, valid = lay.element_at_flat(np.arange(lay.physical_size))
    assert valid.sum() == lay.count


def test_pack_touches_only_element_slots_when_padding_is_foreign():
    lay, digits = npu_like()
    src = np.arange(1, lay.count + 1, dtype=np.float32).reshape(lay.shape)
    sentinel = np.full(lay.physical_shape, -5.0, dtype=np.float32)
    out = lay.pack(src, out=sentinel.copy())
    expected = sentinel.copy().reshape(-1)
    for idx in itertools.product(*(range(s) for s in lay.shape)):
        expected[ref_locate(lay.shape, digits, {"c": 3}, 7, idx, lay.dims)] = src[idx]
    # The c padding (lanes before Q and after Q + C) is foreign: untouched.  n, h, w have none.
    np.testing.assert_array_equal(out.reshape(-1), expected)
    np.testing.assert_array_equal(lay.unpack(out), src)
    assert lay.mask().sum() == lay.count


def test_pack_fills_owned_padding_with_zero_and_leaves_the_rest():
    # RGBA-style: c split by 4 lanes; the padded lanes of the last pixel are owned.
    C, W = 5, 3
    lay = Layout("img", ("w", "c"), (W, C), (1, 2 * W + 1, 4),
                 {"w": 4, "c": [(4, 1), (None, W * 4)]})
    src = np.arange(1, W * C + 1, dtype=np.float64).reshape(W, C)
    buf = np.full(lay.physical_shape, 9.0)
    lay.pack(src, out=buf)
    flat = buf.reshape(-1)
    for w in range(W):
        for c in range(8):
            loc = w * 4 + (c // 4) * W * 4 + c % 4
            assert flat[loc] == (src[w, c] if c < C else 0.0)
    # The last pixel (x = 6) is outside the grid: never written.
    assert np.all(buf[0, 6] == 9.0)
    buf2 = np.full(lay.physical_shape, -9.0)
    lay.pack(src, out=buf2, fill_padding=False)
    assert np.sum(buf2 == -9.0) == buf2.size - lay.count
    fresh = lay.pack(src)
    assert fresh.dtype == np.float64 and np.sum(fresh != 0) == lay.count


def test_non_nested_strides_use_the_dense_inverse():
    # Locations 4a + 3b: not decodable greedily, but injective on a < 2, b < 4.
    lay = Layout("skew", ("a", "b"), (2, 4), (14,), {"a": 4, "b": 3})
    assert not lay.nested
    table = {4 * a + 3 * b: (a, b) for a in range(2) for b in range(4)}
    for loc in range(14):
        assert lay.element_at((loc,)) == table.get(loc)
    index, valid = lay.element_at_flat(np.arange(14))
    assert valid.sum() == 8
    src = np.arange(1, 9, dtype=np.int64).reshape(2, 4)
    packed = lay.pack(src)
    for (a, b), v in np.ndenumerate(src):
        assert packed[4 * a + 3 * b] == v
    np.testing.assert_array_equal(lay.unpack(packed), src)


@settings(max_examples=200, deadline=None)
@given(radices=st.lists(st.integers(1, 6), min_size=0, max_size=3), data=st.data())
def test_interval_boxes_cover_exactly_the_interval(radices, data):
    radices = radices + [None]
    span = math.prod(r for r in radices if r is not None) * data.draw(st.integers(1, 4))
    a = data.draw(st.integers(0, span - 1))
    b = data.draw(st.integers(a + 1, span))
    divs = [1]
    for r in radices[:-1]:
        divs.append(divs[-1] * r)
    covered = []
    for ranges, start in _interval_boxes(a, b, radices):
        assert len(ranges) == len(radices)
        values = []
        for digits in itertools.product(*(range(lo, hi) for lo, hi in ranges)):
            for r, (lo, hi) in zip(radices, ranges):
                assert 0 <= lo < hi and (r is None or hi <= r)
            values.append(sum(d * div for d, div in zip(digits, divs)))
        values.sort()
        # Each box is a contiguous run of values starting at ``start``.
        assert values == list(range(start, start + len(values)))
        covered += values
    assert sorted(covered) == list(range(a, b))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_split_layouts_round_trip(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    dims = tuple("abc"[: len(shape)])
    # Each dim: an offset and a radix (or none); strides laid out densely, outermost first.
    specs, grid = {}, []
    for name, extent in zip(dims, shape):
        off = data.draw(st.integers(0, 3))
        radix = data.draw(st.sampled_from([None, 2, 3, 4]))
        span = off + extent
        if radix is None:
            grid.append((name, None, span))
        else:
            grid.append((name, radix, -(-span // radix)))
        specs[name] = (off, radix)
    order = data.draw(st.permutations([(n, part) for n, r, _ in grid for part in (["in", "out"] if r else ["one"])]))
    extent_of = {}
    for name, radix, outer in grid:
        if radix:
            extent_of[(name, "in")] = radix
            extent_of[(name, "out")] = outer
        else:
            extent_of[(name, "one")] = outer
    stride, strides = 1, {}
    for key in reversed(order):
        strides[key] = stride
        stride *= extent_of[key]
    digits = {}
    for name, radix, _ in grid:
        digits[name] = [(radix, strides[(name, "in")]), (None, strides[(name, "out")])] if radix \
            else strides[(name, "one")]
    offsets = {n: o for n, (o, _) in specs.items()}
    lay = Layout("rand", dims, shape, (stride,), digits, offsets=offsets)
    src = np.arange(1, lay.count + 1, dtype=np.int64).reshape(shape)
    packed = lay.pack(src)
    expected = np.zeros(stride, dtype=np.int64)
    for idx in itertools.product(*(range(s) for s in shape)):
        expected[ref_locate(shape, digits, offsets, 0, idx, dims)] = src[idx]
    np.testing.assert_array_equal(packed, expected)
    np.testing.assert_array_equal(lay.unpack(packed), src)


def test_properties_and_repr():
    lay, _ = npu_like()
    assert lay.ndim == 4 and lay.count == 60 and lay.physical_size == 256
    assert lay.padding_waste == pytest.approx(1 - 60 / 256)
    assert [d.radix for d in lay.digits_of("c")] == [4, None]
    assert "npu" in repr(lay)
    assert lay.footprint == math.prod(lay.grid_shape)


def test_strided_copy_casts_like_copyto():
    dst = np.zeros((3, 4), dtype=np.float16)
    src = np.arange(12, dtype=np.float64).reshape(4, 3).T + 0.25
    _copy.strided_copy(dst, src)
    np.testing.assert_array_equal(dst, src.astype(np.float16))


@pytest.mark.parametrize("shape, strides_of", [
    ((64, 33, 5), lambda a: a[:, ::-1, :]),
    ((7, 300, 4), lambda a: a.transpose(1, 0, 2)),
    ((40, 40, 40), lambda a: a.transpose(2, 0, 1)[:, 3:, ::2]),
    ((3, 200, 200), lambda a: a.transpose(1, 2, 0)),
    ((1, 1, 1), lambda a: a),
    ((300, 70, 4), lambda a: a[::-1, :, ::-1]),
    ((4, 70, 300), lambda a: a.transpose(2, 1, 0)[::-1]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8])
def test_strided_copy_equals_elementwise_assignment(shape, strides_of, dtype):
    rng = np.random.default_rng(1)
    base = (rng.standard_normal(shape) * 100).astype(dtype)
    src = strides_of(base)
    big = np.full((src.size * 3 + 8,), 7, dtype=dtype)
    dst = np.lib.stride_tricks.as_strided(big[3:], shape=src.shape,
                                          strides=tuple(s * big.itemsize * 3 for s in
                                                        np.cumprod((1,) + src.shape[:0:-1])[::-1]))
    _copy.strided_copy(dst, src)
    for idx in itertools.islice(np.ndindex(src.shape), 0, None, 37):
        assert dst[idx] == src[idx]
    np.testing.assert_array_equal(dst, src)
    # Only every third slot after the first three is written.
    untouched = np.ones(big.size, bool)
    untouched[3:3 + src.size * 3:3] = False
    assert np.all(big[untouched] == 7)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("make, exc, pattern", [
    (lambda: Layout("x", ("a",), (0,), (4,), {"a": 1}), errors.ShapeError, r"x shape\[0\] = 0"),
    (lambda: Layout("x", ("a", "b"), (2,), (4,), {"a": 1}), errors.RankError, r"x shape = \(2,\)"),
    (lambda: Layout("x", ("a",), (2,), (4,), {"z": 1, "a": 1}), errors.LayoutError, r"unknown dimensions \['z'\]"),
    (lambda: Layout("x", ("a", "b"), (2, 2), (4,), {"a": 2}), errors.LayoutError, r"'b' has no stride"),
    (lambda: Layout("x", ("a",), (2,), (4,), {"a": -1}), errors.LayoutError, r"stride of 'a' = -1"),
    (lambda: Layout("x", ("a",), (2,), (4,), {"a": 1}, offsets={"a": -1}), errors.LayoutError,
     r"offset of 'a' = -1"),
    (lambda: Layout("x", ("a",), (5,), (4,), {"a": 1}), errors.FootprintError, r"reaches location 4"),
    (lambda: Layout("x", ("a",), (2,), (4,), {"a": 1}, base=3), errors.FootprintError, r"base 3"),
    (lambda: Layout("x", ("a",), (6,), (8,), {"a": [(None, 1), (4, 4)]}), errors.LayoutError,
     r"only the outermost digit"),
])
def test_construction_errors(make, exc, pattern):
    with pytest.raises(exc, match=pattern):
        make()


def test_use_errors_leave_memory_alone():
    lay, _ = npu_like()
    mem = np.full(lay.physical_shape, 3.0)
    with pytest.raises(errors.ShapeError, match=r"array has shape \(2, 5, 2\)"):
        lay.pack(np.zeros((2, 5, 2)), out=mem)
    with pytest.raises(errors.ShapeError, match=r"out has shape \(4, 63\)"):
        lay.pack(np.zeros(lay.shape), out=np.zeros((4, 63)))
    with pytest.raises(errors.ShapeError, match=r"out has shape"):
        lay.pack(np.zeros(lay.shape), out=np.zeros((64, 4)).T)
    assert np.all(mem == 3.0)
    with pytest.raises(errors.ShapeError, match=r"physical array has shape \(3,\)"):
        lay.unpack(np.zeros(3))
    with pytest.raises(errors.ShapeError, match=r"out has shape \(1,\)"):
        lay.unpack(mem, out=np.zeros(1))
    with pytest.raises(errors.IndexOutOfRange, match=r"index c = 5"):
        lay.locate((0, 5, 0, 0))
    with pytest.raises(errors.IndexOutOfRange, match=r"location 256 is outside"):
        lay.element_at_flat(256)
    with pytest.raises(errors.IndexOutOfRange, match=r"axis 1 = 64"):
        lay.element_at((0, 64))
    with pytest.raises(errors.RankError, match=r"location = \(0,\) has 1 components"):
        lay.element_at((0,))
    with pytest.raises(errors.RankError, match=r"last axis 3"):
        lay.locate_flat(np.zeros((2, 3), dtype=int))
    with pytest.raises(errors.ShapeError, match=r"index n = 'a'"):
        lay.locate(("a", 0, 0, 0))


# --------------------------------------------------------------------------- compiled copy plans
def _copy_pair(rng, shape, perm, dtype, step):
    """A transposed source and a destination view inside a sentinel-filled buffer."""
    base = (rng.standard_normal(shape) * 100).astype(dtype)
    src = base.transpose(perm)
    big = np.full(src.size * step + 5, 7, dtype=dtype)
    strides = tuple(int(s) * big.itemsize * step for s in np.cumprod((1,) + src.shape[:0:-1])[::-1])
    dst = np.lib.stride_tricks.as_strided(big[5:], shape=src.shape, strides=strides)
    return src, dst, big


def _compiled_or_skip():
    from tensorlayout import _fastcopy
    if not _fastcopy.available():
        pytest.skip("numba is not installed: the compiled copy is absent")
    return _fastcopy


@pytest.mark.parametrize("shape, perm", [
    ((9, 2000, 4), (1, 0, 2)),          # depthwise HWIM -> image and back: the strip-mined case
    ((2000, 4, 9), (2, 0, 1)),
    ((3, 3, 3000, 4), (2, 3, 0, 1)),
    ((5000, 4, 9), (0, 2, 1)),          # 36-element transposes: the blocked parallel step
    ((5000, 9, 4), (0, 2, 1)),
    ((1, 64, 32, 4, 8), (0, 2, 4, 1, 3)),
    ((16, 4, 33, 37), (0, 2, 3, 1)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.uint8])
@pytest.mark.parametrize("step", [1, 2])
def test_compiled_copy_matches_copyto(shape, perm, dtype, step):
    fast = _compiled_or_skip()
    rng = np.random.default_rng(7)
    src, dst, big = _copy_pair(rng, shape, perm, dtype, step)
    expect = big.copy()
    np.copyto(np.lib.stride_tricks.as_strided(expect[5:], shape=dst.shape, strides=dst.strides), src)
    before = big.copy()
    if fast.run(dst, src):
        np.testing.assert_array_equal(big, expect)  # the elements, and every slot between them untouched
    else:  # declined (left to NumPy): nothing may have been written
        assert fast.plan_copy(dst, src) is None
        np.testing.assert_array_equal(big, before)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=5), st.randoms(use_true_random=False),
       st.sampled_from([np.float32, np.float16, np.int64, np.uint8]), st.integers(1, 2),
       st.booleans())
def test_compiled_copy_random_strides(shape, rnd, dtype, step, flip):
    fast = _compiled_or_skip()
    perm = list(range(len(shape)))
    rnd.shuffle(perm)
    src, dst, big = _copy_pair(np.random.default_rng(rnd.randrange(1 << 30)), tuple(shape), perm, dtype, step)
    if flip:
        src = src[..., ::-1]
    expect = big.copy()
    np.copyto(np.lib.stride_tricks.as_strided(expect[5:], shape=dst.shape, strides=dst.strides), src)
    before = big.copy()
    np.testing.assert_array_equal(big, expect if fast.run(dst, src) else before)


def test_plans_move_a_small_outer_axis_inside_and_block_tiny_steps():
    fast = _compiled_or_skip()
    # (9, 2000) planes of 4 lanes from (2000, 9, 4): the 9 planes must not each sweep the source.
    src = np.zeros((2000, 9, 4), np.float32).transpose(1, 0, 2)
    plan = fast.plan_copy(np.empty(src.shape, np.float32), src)
    real = [n for n in plan.shape if n > 1]
    assert 9 in real and real[0] != 9 and math.prod(real) * plan.unit == src.nbytes
    # 5000 transposes of 9 x 4: each parallel step copies a block of them, not one.
    src = np.zeros((5000, 4, 9), np.float32).transpose(0, 2, 1)
    plan = fast.plan_copy(np.empty(src.shape, np.float32), src)
    assert math.prod(plan.shape[3:]) >= 1024 and math.prod(plan.shape) == src.size


@pytest.mark.parametrize("case", ["nchw-to-pixels", "pixels-to-nchw", "rows-to-pixels-blocked"])
def test_transposes_put_four_lanes_beside_a_unit_stride_run(case):
    fast = _compiled_or_skip()
    if case == "nchw-to-pixels":      # 4 channel planes -> RGBA pixels (IN_OUT_CHANNEL from NCHW)
        src = np.zeros((16, 4, 300), np.float32).transpose(0, 2, 1)
        dst = np.empty(src.shape, np.float32)
    elif case == "pixels-to-nchw":    # RGBA pixels -> 4 channel planes
        dst = np.empty((16, 4, 300), np.float32)
        src = np.zeros((16, 300, 4), np.float32).transpose(0, 2, 1)
    else:                             # (W, C) -> (C, W): lanes are 4 consecutive w (IN_OUT_WIDTH, NHWC)
        src = np.zeros((64, 512), np.float32).T
        dst = np.empty(src.shape, np.float32)
    plan = fast.plan_copy(dst, src)
    if case == "pixels-to-nchw":
        # Lanes just outside the innermost run: each pixel read once, 4 unit-stride rows written.
        assert plan.shape[-2] == 4 and plan.src_strides[-2] == 1 and plan.dst_strides[-2] > 1
        assert plan.dst_strides[-1] == 1 and plan.src_strides[-1] == 4
    else:
        # Lanes innermost, written contiguously; beside them the source's unit-stride run.
        assert plan.shape[-1] == 4 and plan.dst_strides[-1] == 1 and plan.src_strides[-1] > 1
        assert plan.src_strides[-2] == 1 and plan.shape[-2] >= 16


# --------------------------------------------------------------------------- the layout algebra
from tensorlayout.core import convert  # noqa: E402


def draw_layout(data, max_rank=3, offsets=True, padding=True, gap=True, shape=None):
    """A random split layout: per dim an offset and up to two radices, digits in a random order,
    strides dense (or with gaps) in that order, some dims' padding foreign."""
    if shape is None:
        shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=max_rank)))
    dims = tuple("abcd"[: len(shape)])
    parts, specs = [], {}
    for name, extent in zip(dims, shape):
        off = data.draw(st.integers(0, 3)) if offsets else 0
        radices = data.draw(st.lists(st.sampled_from([1, 2, 3, 4]), max_size=2)) if padding else []
        if not padding:
            radices = []
        span, div, exts = off + extent, 1, []
        for r in radices:
            exts.append(r)
            div *= r
        exts.append(-(-span // div))
        specs[name] = (off, radices)
        parts += [(name, k, e) for k, e in enumerate(exts)]
    order = data.draw(st.permutations(parts))
    stride, strides = 1, {}
    for name, k, e in reversed(order):
        strides[(name, k)] = stride
        stride *= e + (data.draw(st.integers(0, 1)) if gap else 0)
    digits = {}
    for name in dims:
        off, radices = specs[name]
        digits[name] = [(r, strides[(name, k)]) for k, r in enumerate(radices)] + \
            [(None, strides[(name, len(radices))])]
    owned = tuple(d for d in dims if data.draw(st.booleans()))
    base = data.draw(st.integers(0, 3))
    lay = Layout("rand", dims, shape, (base + stride,), digits,
                 offsets={n: specs[n][0] for n in dims}, base=base, owned_padding=owned)
    return lay, digits


def ref_all(lay, digits):
    """Flat row-major index -> location, from the defining formula."""
    offs = dict(zip(lay.dims, lay.offsets))
    return [ref_locate(lay.shape, digits, offs, lay.base, idx, lay.dims)
            for idx in itertools.product(*(range(s) for s in lay.shape))]


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_coalesce_is_the_same_map_and_pads_the_same_slots(data):
    lay, digits = draw_layout(data)
    co = lay.coalesce()
    assert co.count == lay.count and co.physical_shape == lay.physical_shape
    assert sum(len(d) for d in co.digits) <= sum(len(d) for d in lay.digits)
    expect = ref_all(lay, digits)
    for i, idx in enumerate(itertools.product(*(range(s) for s in co.shape))):
        assert co.locate_flat(idx) == expect[i]           # coalesce(L)(i) == L(i)
    np.testing.assert_array_equal(co.padding_mask(), lay.padding_mask())
    assert co.coalesce() == co                            # a fixed point


@settings(max_examples=80, deadline=None)
@given(data=st.data(), e=st.sampled_from([2, 4]))
def test_recast_round_trips(data, e):
    lay, _ = draw_layout(data)
    as_bytes = lay.recast(e, 1)                           # each slot becomes e bytes
    assert as_bytes.physical_size == lay.physical_size * e
    assert as_bytes.recast(1, e) == lay
    for idx in itertools.islice(itertools.product(*(range(s) for s in lay.shape)), 0, None, 3):
        for b in range(e):
            assert as_bytes.locate_flat(idx + (b,)) == lay.locate_flat(idx) * e + b


def test_recast_folds_a_4n_digit_into_words():
    # int8 n split by 4 inside a 32-bit word: bytes -> words keeps only n's outer digit.
    lay = Layout("4N", ("n", "c", "b"), (6, 3, 1), (40,), {"n": [(4, 1), (None, 16)], "c": 4, "b": 1},
                 base=4, owned_padding=("n", "b"))
    words = lay.recast(1, 4)
    assert words.shape == (2, 3) and words.physical_shape == (10,) and words.base == 1
    for m, c in itertools.product(range(2), range(3)):
        assert words.locate_flat((m, c)) * 4 == lay.locate_flat((4 * m, c, 0))
    with pytest.raises(errors.LayoutError, match="cannot count in units of 8"):
        lay.recast(1, 8)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_convert_equals_a_per_element_loop(data):
    src, sd = draw_layout(data)
    dst, _ = draw_layout(data, shape=src.shape)       # another layout of the same tensor
    dshape = src.shape
    rng = np.random.default_rng(0)
    phys = rng.integers(1, 1000, src.physical_size).astype(np.int64)
    before = np.full(dst.physical_size, -7, dtype=np.int64)
    got = convert(src, dst, phys, out=before.copy())
    expect = before.copy()
    pad = dst.padding_mask().reshape(-1)
    expect[pad] = 0
    for idx in itertools.product(*(range(s) for s in dshape)):
        expect[dst.locate_flat(idx)] = phys[src.locate_flat(idx)]
    np.testing.assert_array_equal(got, expect)
    # and equals unpack-then-pack
    np.testing.assert_array_equal(convert(src, dst, phys), dst.pack(src.unpack(phys)))


def check_compose_law(outer, inner, comp):
    for idx in itertools.product(*(range(s) for s in inner.shape)):
        mid = np.unravel_index(inner.locate_flat(idx), outer.shape)
        assert comp.locate_flat(idx) == outer.locate_flat(tuple(int(v) for v in mid))


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_compose_law(data):
    # outer: a plain mixed-radix buffer layout (no offsets, no padding), dims in random order
    outer, _ = draw_layout(data, offsets=False, padding=False, gap=data.draw(st.booleans()))
    # inner 1: a transpose of outer's logical tensor (each digit one whole digit of outer)
    perm = data.draw(st.permutations(range(outer.ndim)))
    rowmajor = [math.prod(outer.shape[k + 1:]) for k in range(outer.ndim)]
    dims = tuple("pqrs"[: outer.ndim])
    inner = Layout("T", dims, tuple(outer.shape[k] for k in perm), outer.shape,
                   {d: rowmajor[k] for d, k in zip(dims, perm)})
    check_compose_law(outer, inner, outer.compose(inner))
    # inner 2: the elements read in rows of f: composes, or says it cannot (never a wrong map)
    n = outer.count
    f = data.draw(st.sampled_from([f for f in (1, 2, 3, 5) if n % f == 0]))
    col = data.draw(st.booleans())
    inner = Layout("in", ("p", "q"), (n // f, f), outer.shape, {"p": 1, "q": n // f} if col else {"p": f, "q": 1})
    try:
        comp = outer.compose(inner)
    except errors.LayoutError:
        return
    check_compose_law(outer, inner, comp)


def test_layouts_are_values():
    a, _ = npu_like()
    b, _ = npu_like()
    c, _ = npu_like(Q=2)
    assert a == b and hash(a) == hash(b) and a != c
    assert len({a, b, c}) == 2
    with pytest.raises(AttributeError):
        a.base = 3
    # spelled differently, the same map
    d = Layout("other", ("n", "c", "h", "w"), [2, 5, 2, 3], (4, 64), (((None, 12),), ((4, 64), (None, 6)),
               [(None, 3)], 1), offsets=(0, 3, 0, 0), base=7, owned_padding=("w", "n", "h"))
    assert d == a


def test_reach_and_row_ranges_against_element_locations():
    lay, _ = npu_like()
    grid = np.indices(lay.shape).reshape(4, -1)
    npu, byte = lay.locate(tuple(grid))
    for p, rng in enumerate(lay.row_ranges(64)):
        here = byte[npu == p]
        assert rng == ((int(here.min()), int(here.max()) + 1) if here.size else None)
    assert lay.reach(64) == max(r[1] for r in lay.row_ranges(64) if r)


def test_convert_between_an_image_and_npu_memory():
    """An NHWC IN_OUT_CHANNEL image straight into an NPU tensor's elements, and back:
    against unpack-then-pack through the dense tensor."""
    from tensorlayout.image import image_layout
    from tensorlayout.npu import Chip, tensor_layout
    rng = np.random.default_rng(5)
    shape = (2, 6, 3, 5)                                    # N, C, H, W
    img = image_layout("IN_OUT_CHANNEL", (2, 3, 5, 6), layout="NHWC").transpose("n", "c", "h", "w")
    t = tensor_layout(Chip(4, 4096, 64), 2 * 4096 + 64, shape, dtype="fp32")
    x = rng.standard_normal(shape).astype(np.float32)
    pixels = img.pack(x)
    local = np.full(t.elements.physical_shape, -1.0, np.float32)
    convert(img, t.elements, pixels, out=local)
    want = np.full_like(local, -1.0)
    t.elements.pack(x, out=want)
    np.testing.assert_array_equal(local, want)
    np.testing.assert_array_equal(convert(t.elements, img, local), pixels)


# --------------------------------------------------------------------------- layouts into the engine
@pytest.fixture
def kernel_everywhere(monkeypatch):
    """Every copy step of a layout, however small, planned for the compiled kernel, and the
    kernel compiled in the caller rather than in the background (so it surely runs)."""
    from tensorlayout import core
    fast = _compiled_or_skip()
    monkeypatch.setattr(_copy, "FAST_MIN_ELEMENTS", 1)
    monkeypatch.setenv("TENSORLAYOUT_COMPILE", "wait")
    monkeypatch.delenv("TENSORLAYOUT_NUMPY_COPY", raising=False)
    ran = []
    execute = fast.execute

    def counted(*args):
        done = execute(*args)
        ran.append(done)
        return done

    monkeypatch.setattr(fast, "execute", counted)
    core._copy_program.cache_clear()
    core._convert_program.cache_clear()
    yield ran
    core._copy_program.cache_clear()
    core._convert_program.cache_clear()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), dtype=st.sampled_from([np.uint8, np.float16, np.float32, np.int64]),
       fill=st.booleans())
def test_layout_copies_through_the_kernel_equal_a_per_element_loop(kernel_everywhere, data, dtype, fill):
    lay, digits = draw_layout(data, max_rank=4)
    offsets = dict(zip(lay.dims, lay.offsets))
    src = np.arange(1, lay.count + 1).astype(dtype).reshape(lay.shape)
    got = lay.pack(src, out=np.full(lay.physical_shape, 99, dtype), fill_padding=fill)
    expect = np.full(lay.physical_size, 99, dtype)
    if fill:                            # owned padding: the slots NumPy's copy writes as 0
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TENSORLAYOUT_NUMPY_COPY", "1")
            np_run = lay.pack(src, out=np.full(lay.physical_shape, 99, dtype))
        expect[np_run == 0] = 0
    for idx in itertools.product(*(range(s) for s in lay.shape)):
        expect[ref_locate(lay.shape, digits, offsets, lay.base, idx, lay.dims)] = src[idx]
    np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(lay.unpack(got), src)
    # into a non-contiguous array (the logical side's strides are part of the plan)
    back = np.zeros(lay.shape[::-1], dtype).T
    lay.unpack(got, out=back)
    np.testing.assert_array_equal(back, src)
    flipped = np.ascontiguousarray(src[::-1])[::-1]     # negative strides, the same values
    np.testing.assert_array_equal(lay.pack(flipped, out=np.full(lay.physical_shape, 99, dtype),
                                           fill_padding=fill), expect.reshape(lay.physical_shape))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_convert_through_the_kernel_equals_a_per_element_loop(kernel_everywhere, data):
    src, _ = draw_layout(data)
    dst, _ = draw_layout(data, shape=src.shape)
    phys = np.random.default_rng(1).integers(1, 1000, src.physical_size).astype(np.float32)
    got = convert(src, dst, phys, out=np.full(dst.physical_size, -7, np.float32), fill_padding=False)
    expect = np.full(dst.physical_size, -7, np.float32)
    for idx in itertools.product(*(range(s) for s in src.shape)):
        expect[dst.locate_flat(idx)] = phys[src.locate_flat(idx)]
    np.testing.assert_array_equal(got, expect)


def test_images_and_4n_words_run_the_kernel(kernel_everywhere):
    """The RGBA interleave and an NPU's 4N word interleave both reach the compiled kernel."""
    rgba = Layout("rgba", ("h", "w", "c"), (6, 40, 7), (6, 80, 4),
                  {"h": 320, "w": 4, "c": [(4, 1), (None, 160)]})
    x = np.random.default_rng(2).standard_normal(rgba.shape).astype(np.float32)
    img = rgba.pack(x)
    want = np.zeros(rgba.physical_size, np.float32)
    for h, w, c in itertools.product(range(6), range(40), range(7)):
        want[h * 320 + w * 4 + c % 4 + (c // 4) * 160] = x[h, w, c]
    np.testing.assert_array_equal(img.reshape(-1), want)
    words = Layout("4N", ("n", "c", "hw"), (8, 3, 64), (2 * 3 * 256,),
                   {"n": [(4, 1), (None, 3 * 256)], "c": 256, "hw": 4})
    v = np.arange(words.count, dtype=np.uint8).reshape(words.shape)
    packed = words.pack(v)
    want = np.zeros(words.physical_size, np.uint8)
    for n, c, hw in itertools.product(range(8), range(3), range(64)):
        want[n % 4 + (n // 4) * 768 + c * 256 + hw * 4] = v[n, c, hw]
    np.testing.assert_array_equal(packed, want)
    np.testing.assert_array_equal(words.unpack(packed), v)
    assert kernel_everywhere and all(kernel_everywhere)


def test_a_planned_copy_is_not_planned_again(kernel_everywhere, monkeypatch):
    """The second pack of a layout value runs the plan: no axes found again, no readiness
    asked, no views of the boxes made."""
    from tensorlayout import _fastcopy, _jit, core
    lay = Layout("rgba", ("h", "w", "c"), (6, 40, 8), (6, 80, 4),
                 {"h": 320, "w": 4, "c": [(4, 1), (None, 160)]})
    x = np.random.default_rng(3).standard_normal(lay.shape).astype(np.float32)
    first = lay.pack(x)
    same = Layout("again", ("a", "b", "c"), (6, 40, 8), (6, 80, 4),
                  {"a": 320, "b": 4, "c": [(4, 1), (None, 160)]})    # an equal value
    for name, mod in (("schedule", _fastcopy), ("_plan_cached", _fastcopy), ("_lanes", _fastcopy),
                      ("ready", _jit), ("_plan", core)):
        monkeypatch.setattr(mod, name, lambda *a, **k: pytest.fail("planned again"))
    monkeypatch.setattr(core, "_view", lambda *a, **k: pytest.fail("a NumPy view of a box"))
    kernel_everywhere.clear()
    np.testing.assert_array_equal(same.pack(x), first)
    assert kernel_everywhere and all(kernel_everywhere)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), to_physical=st.booleans())
def test_the_axes_a_layout_hands_the_engine_are_merged(data, to_physical):
    """The copy's axes come merged from the coalesced layout: for a row-major array, ordering
    them as the engine does (by destination stride) leaves nothing more to merge."""
    from tensorlayout import core
    lay = draw_layout(data, max_rank=4)[0].coalesce()
    strides = np.zeros(lay.shape, np.float32).strides
    for step in core._copy_program(lay, to_physical, to_physical, 4, strides, True).steps:
        if step.pad:
            continue
        order = sorted(step.axes, key=lambda a: (-abs(a[1]), -abs(a[2])))
        assert _copy.merge_runs(order) == order
        assert math.prod(a[0] for a in step.axes) == math.prod(step.shape)


def test_a_kernel_that_ran_still_waits_for_a_background_compile(kernel_everywhere, monkeypatch):
    """While another kernel compiles in the background, copies take NumPy (numba's lock, and
    threading layers that cannot run two parallel kernels at once), kernel run before or not."""
    from tensorlayout import _jit
    lay = Layout("rgba", ("h", "w", "c"), (6, 40, 8), (6, 80, 4),
                 {"h": 320, "w": 4, "c": [(4, 1), (None, 160)]})
    x = np.random.default_rng(4).standard_normal(lay.shape).astype(np.float32)
    first = lay.pack(x)
    assert kernel_everywhere and all(kernel_everywhere)
    monkeypatch.setenv("TENSORLAYOUT_COMPILE", "background")
    monkeypatch.setattr(_jit, "busy", lambda: True)
    kernel_everywhere.clear()
    np.testing.assert_array_equal(lay.pack(x), first)
    assert kernel_everywhere and not any(kernel_everywhere)
