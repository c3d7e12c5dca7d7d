"""Seed 003's worked examples, and a per-element oracle written from its formulas."""

import itertools
import math

import numpy as np
import pytest

from tensorlayout.npu import (
    BM1684,
    BM1684X,
    BM1688,
    Chip,
    aligned_stride,
    channels_per_npu,
    compact_stride,
    continuous_stride,
    feature_block,
    locate,
    matrix_layout,
    packed_shape,
    tensor_layout,
)

SEED = Chip(4, 1024, 128, "seed")  # the seed's illustration: X = 4 NPUs, S = 1024 bytes
X = 4


# ----------------------------------------------------------------- the oracle
def oracle_byte(chip, address, stride, e, k, n, c, h, w):
    """Seed 003 / REFERENCE 2: NPU (Q + c) % X, byte R + u*(...) + e*(n % k)."""
    Q, R = address // chip.lmem_bytes, address % chip.lmem_bytes
    ns, cs, hs, ws = stride
    u = e * k
    npu = (Q + c) % chip.npus
    off = R + u * ((n // k) * ns + ((Q + c) // chip.npus) * cs + h * hs + w * ws) + e * (n % k)
    return npu, off


def oracle_map(chip, address, shape, stride, e, k):
    N, C, H, W = shape
    m = np.full((chip.npus, chip.lmem_bytes), -1, dtype=np.int64)
    M = -(-N // k)
    for n in range(M * k):
        for c in range(C):
            for h in range(H):
                for w in range(W):
                    p, off = oracle_byte(chip, address, stride, e, k, n, c, h, w)
                    v = ((n * C + c) * H + h) * W + w if n < N else -2
                    for b in range(e):
                        assert m[p, off + b] == -1, "oracle found two elements on one byte"
                        m[p, off + b] = v
    return m


# ------------------------------------------------------------------ addresses
def test_seed_four_addresses():
    got = [SEED.split_address(a) for a in (340, 1472, 2300, 3088)]
    assert got == [(0, 340), (1, 448), (2, 252), (3, 16)]
    assert [SEED.address(*qr) for qr in got] == [340, 1472, 2300, 3088]


def test_presets_follow_reference():
    assert (BM1684.npus, BM1684.lmem_bytes, BM1684.align_bytes) == (64, 512 * 1024, 128)
    assert (BM1684X.npus, BM1684X.lmem_bytes, BM1684X.align_bytes) == (64, 256 * 1024, 64)
    assert (BM1688.npus, BM1688.lmem_bytes, BM1688.align_bytes) == (32, 128 * 1024, 16)


# -------------------------------------------------------------------- scatter
@pytest.mark.parametrize("Q, C, cpn, empty_npus", [
    (0, X - 1, 1, [X - 1]),     # no features in NPU X-1
    (1, X - 1, 1, [0]),         # no features in NPU 0
    (0, X + 2, 2, []),
    (X - 1, X + 2, 3, []),
])
def test_seed_scatter(Q, C, cpn, empty_npus):
    assert channels_per_npu(SEED, Q, C) == cpn == math.ceil((Q + C) / X)
    t = tensor_layout(SEED, Q * 1024, (2, C, 1, 1), stride=(cpn, 1, 1, 1))
    per = t.bytes_per_npu()
    for p in range(X):
        assert (per[p] == 0) == (p in empty_npus)
    for n, c in itertools.product(range(2), range(C)):
        npu, row = feature_block(SEED, Q, C, n, c)
        assert npu == (Q + c) % X and row == n * cpn + (Q + c) // X
        assert t.locate((n, c, 0, 0)) == (npu, 4 * row)
    # features (*, c0) and (*, c1) share an NPU iff c0 = c1 mod X
    for c0, c1 in itertools.product(range(C), repeat=2):
        same = feature_block(SEED, Q, C, 0, c0)[0] == feature_block(SEED, Q, C, 1, c1)[0]
        assert same == (c0 % X == c1 % X)


def test_seed_scatter_first_case_batch_one_in_npu0():
    # C = X - 1 at NPU 0: feature (1, 0) is in NPU 0, not NPU X - 1
    assert feature_block(SEED, 0, X - 1, 1, 0)[0] == 0


def test_seed_scatter_empty_blocks():
    # C = X + 2 at NPU 0: X - 2 empty blocks in the second row; at NPU X - 1: X - 1 in rows 1 and 3
    assert tensor_layout(SEED, 0, (1, X + 2, 1, 1)).empty_blocks() == X - 2
    assert tensor_layout(SEED, (X - 1) * 1024, (1, X + 2, 1, 1)).empty_blocks() == 2 * (X - 1)
    assert feature_block(SEED, 0, X + 2, 0, X) == (0, 1)
    assert feature_block(SEED, 0, X + 2, 0, X + 1) == (1, 1)


# -------------------------------------------------------------------- strides
def test_seed_stride_example_1():
    shape, stride = (2, 5, 3, 4), (120, 56, 16, 2)
    t = tensor_layout(SEED, 0, shape, stride=stride, dtype="fp32")
    for idx in itertools.product(*map(range, shape)):
        assert t.locate(idx) == oracle_byte(SEED, 0, stride, 4, 1, *idx)
        assert locate(SEED, 0, shape, stride, "fp32", idx) == t.locate(idx)
    # C stride steps c to c + X: (0, 4) sits right after 56 elements of (0, 0) in NPU 0
    assert t.locate((0, 4, 0, 0)) == (0, 56 * 4)
    assert t.locate((1, 0, 0, 0)) == (0, 120 * 4)
    assert t.locate((0, 0, 1, 0)) == (0, 16 * 4)
    assert t.locate((0, 0, 0, 1)) == (0, 2 * 4)
    np.testing.assert_array_equal(t.byte_map(), oracle_map(SEED, 0, shape, stride, 4, 1))


def test_seed_stride_example_2_meaningless_strides():
    shape = (2, 3, 1, 10)
    assert channels_per_npu(SEED, 1, 3) == 1
    maps = []
    for cs, hs in ((20, 20), (7, 999), (1000, 1)):   # H = 1 and cpn = 1: H and C strides make no sense
        t = tensor_layout(SEED, 1024, shape, stride=(120, cs, hs, 2))
        assert t.locate((1, 2, 0, 9)) == (3, 4 * (120 + 18))
        maps.append(t.byte_map())
    assert all(np.array_equal(maps[0], m) for m in maps[1:])
    np.testing.assert_array_equal(maps[0], oracle_map(SEED, 1024, shape, (120, 20, 20, 2), 4, 1))


def test_continuous_stride():
    assert continuous_stride((2, 3, 4, 5)) == (60, 20, 5, 1)


# -------------------------------------------------------------------- layouts
@pytest.mark.parametrize("Q, want", [(0, (32, 32, 5, 1)), (2, (64, 32, 5, 1))])
def test_seed_aligned(Q, want):
    shape = (2, 3, 4, 5)
    assert aligned_stride(SEED, shape, Q, "fp32") == want
    t = tensor_layout(SEED, Q * 1024, shape, dtype="fp32", layout="aligned")
    assert t.stride == want
    m = t.byte_map()
    np.testing.assert_array_equal(m, oracle_map(SEED, Q * 1024, shape, want, 4, 1))
    # each feature takes 32 blocks of 4 bytes of which 4*5 hold data: 12 empty blocks appended
    used = (m[(Q + 0) % X, :128] >= 0).sum()
    assert used == 20 * 4 and 32 - 20 == 12


def test_aligned_other_widths_and_chips():
    # C stride = ceil(HW / 32) * 32 (32-bit), / 64 (16-bit), / 128 (8-bit) at 128-byte alignment
    for dtype, step in (("fp32", 32), ("fp16", 64), ("int8", 128)):
        for hw in (1, 20, 33, 64, 129):
            assert aligned_stride(SEED, (1, 1, 1, hw), 0, dtype)[1] == math.ceil(hw / step) * step
    # the chip's own alignment: BM1688 aligns to 16 bytes (4 fp32)
    assert aligned_stride(BM1688, (1, 1, 3, 5), 0, "fp32")[1] == 16
    assert aligned_stride(BM1684X, (1, 1, 3, 5), 0, "int8")[1] == 64


@pytest.mark.parametrize("Q, want", [(0, (20, 20, 5, 1)), (2, (40, 20, 5, 1))])
def test_seed_compact(Q, want):
    shape = (2, 3, 4, 5)
    assert compact_stride(SEED, shape, Q) == want
    t = tensor_layout(SEED, Q * 1024 + 4, shape, layout="compact")
    assert t.stride == want and t.layout_name == "compact"
    np.testing.assert_array_equal(t.byte_map(), oracle_map(SEED, Q * 1024 + 4, shape, want, 4, 1))


# --------------------------------------------------------------------- matrix
@pytest.mark.parametrize("W, C, cs, npus_used", [
    (40, 1, 64, [0]),             # all in NPU 0, a row takes 64 blocks
    (20, 2, 32, [0, 1]),
    (10, 4, 32, [0, 1, 2, 3]),
    (8, 5, 32, [0, 1, 2, 3]),     # C > X: two block rows per matrix row
    (15, 3, 32, [0, 1, 2]),       # NPU 2 holds only 40 - 30 = 10 columns
    (6, 7, 32, [0, 1, 2, 3]),
])
def test_seed_matrix(W, C, cs, npus_used):
    rows, cols = 2, 40
    t = matrix_layout(SEED, 0, rows, cols, W, "fp32")
    assert t.shape == (rows, C, 1, W)
    cpn = math.ceil(C / X)
    assert t.stride == (cs * cpn, cs, W, 1)
    m = t.byte_map()
    want = np.full_like(m, -1)
    for r in range(rows):
        for col in range(cols):
            c, w = divmod(col, W)
            p, off = oracle_byte(SEED, 0, t.stride, 4, 1, r, c, 0, w)
            assert t.matrix_locate(r, col) == (p, off)
            assert t.locate((r, c, 0, w)) == (p, off)
            assert t.matrix_element_at(p, off + 3) == (r, col)
            want[p, off:off + 4] = r * cols + col
    np.testing.assert_array_equal(m, want)
    per = t.bytes_per_npu() // (4 * rows)
    assert [p for p in range(X) if per[p]] == npus_used
    if W == 15:
        assert per.tolist() == [15, 15, 10, 0]
    if W == 8:
        assert t.stride[0] == 64  # more blocks per row than W = 10


def test_matrix_smaller_w_saves_memory():
    def blocks_per_row(W):  # blocks of 4 bytes one matrix row takes in each NPU
        return matrix_layout(SEED, 0, 2, 40, W).stride[0]
    assert blocks_per_row(40) == 64 and blocks_per_row(20) == 32 and blocks_per_row(10) == 32
    assert blocks_per_row(8) == 64 and blocks_per_row(15) == 32 and blocks_per_row(6) == 64


# ---------------------------------------------------------------------- modes
def test_seed_4N():
    shape = (6, 5, 4, 5)
    assert packed_shape(shape, "4N") == (2, 5, 4, 5)
    t = tensor_layout(SEED, 0, shape, dtype="int8", mode="4N")
    m = t.byte_map()
    np.testing.assert_array_equal(m, oracle_map(SEED, 0, shape, t.stride, 1, 4))
    # the int8x4 element (1, 0, 0, 0) holds (4, 0, 0, 0), (5, 0, 0, 0) and two dummies
    p, off = t.locate((4, 0, 0, 0))
    flat = lambda n: ((n * 5 + 0) * 4 + 0) * 5 + 0  # noqa: E731
    assert m[p, off:off + 4].tolist() == [flat(4), flat(5), -2, -2]
    assert t.element_at(p, off + 2) is None


def test_seed_2N():
    shape = (3, 5, 4, 5)
    t = tensor_layout(SEED, 0, shape, dtype="int16", mode="2N")
    assert t.packed_shape == (2, 5, 4, 5)
    m = t.byte_map()
    np.testing.assert_array_equal(m, oracle_map(SEED, 0, shape, t.stride, 2, 2))
    p, off = t.locate((2, 0, 0, 0))
    assert m[p, off:off + 4].tolist() == [200, 200, -2, -2]


def test_2IC_reference_stride():
    # REFERENCE: O = 66, KH = 2, KW = 3 compact on BM1684: (12, 6, 3, 1) in fp32x2 units
    assert compact_stride(BM1684, (5, 66, 2, 3), 0, mode="2IC") == (12, 6, 3, 1)
    t = tensor_layout(SEED, 0, (3, 5, 2, 3), dtype="fp32", mode="2IC")
    np.testing.assert_array_equal(t.byte_map(), oracle_map(SEED, 0, (3, 5, 2, 3), t.stride, 4, 2))


# ------------------------------------------------------ oracle over many cases
CASES = [
    (Chip(3, 512, 16), 16 * 5, (3, 4, 2, 3), "fp16", None, "aligned"),
    (Chip(2, 256, 8), 256 + 4, (5, 3, 1, 2), "int8", "4N", "compact"),
    (Chip(5, 640, 32), 2 * 640 + 32, (3, 7, 1, 3), "uint16", "2N", "aligned"),
    (Chip(4, 1024, 128), 3 * 1024 + 128, (3, 6, 2, 2), "fp32", "2IC", "aligned"),
    (Chip(1, 512, 64), 64, (2, 3, 2, 2), "uint8", None, "compact"),
]


@pytest.mark.parametrize("chip, address, shape, dtype, mode, layout", CASES)
def test_oracle_locate_element_at_byte_map(chip, address, shape, dtype, mode, layout):
    t = tensor_layout(chip, address, shape, dtype=dtype, mode=mode, layout=layout)
    k = {None: 1, "4N": 4, "2N": 2, "2IC": 2}[mode]
    e = np.dtype({"fp16": "f2", "int8": "i1", "uint16": "u2", "fp32": "f4", "uint8": "u1"}[dtype]).itemsize
    want = oracle_map(chip, address, shape, t.stride, e, k)
    np.testing.assert_array_equal(t.byte_map(), want)
    for idx in itertools.product(*map(range, shape)):
        assert t.locate(idx) == oracle_byte(chip, address, t.stride, e, k, *idx)
    for p in range(chip.npus):
        for off in range(0, chip.lmem_bytes, 3):
            v = want[p, off]
            got = t.element_at(p, off)
            if v < 0:
                assert got is None
            else:
                assert got == tuple(int(i) for i in np.unravel_index(v, shape))
    counts = [(want[p] >= 0).sum() + (want[p] == -2).sum() for p in range(chip.npus)]
    assert t.bytes_per_npu().tolist() == counts
