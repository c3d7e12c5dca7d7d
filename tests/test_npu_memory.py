"""LocalMemory: round trips against the seed's formulas, sentinel checks, every error path."""

import hashlib
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorlayout.errors import (
    AddressError,
    AlignmentError,
    DTypeError,
    FootprintError,
    LayoutError,
    ModeError,
    OverlapError,
    RankError,
    ShapeError,
    StrideError,
)
from tensorlayout.npu import BM1684, Chip, LocalMemory, matrix_layout, tensor_layout

DTYPES = {"fp32": "f4", "fp16": "f2", "int32": "i4", "uint32": "u4", "int16": "i2",
          "uint16": "u2", "int8": "i1", "uint8": "u1"}
MODE_OF = {"int8": "4N", "uint8": "4N", "int16": "2N", "uint16": "2N", "fp32": "2IC"}
K = {None: 1, "4N": 4, "2N": 2, "2IC": 2}
SENTINEL = 0xA5


def oracle_place(chip, address, stride, e, k, n, c, h, w):
    Q, R = divmod(address, chip.lmem_bytes)
    ns, cs, hs, ws = stride
    u = e * k
    return (Q + c) % chip.npus, R + u * ((n // k) * ns + ((Q + c) // chip.npus) * cs + h * hs + w * ws) + e * (n % k)


def oracle_expected(chip, address, stride, arr, k, before):
    """The whole local memory after writing ``arr``: element bytes, zero dummies, rest untouched."""
    e = arr.dtype.itemsize
    want = before.copy()
    raw = arr.view(np.uint8).reshape(arr.shape + (e,))
    N, C, H, W = arr.shape
    for n in range(-(-N // k) * k):
        for c in range(C):
            for h in range(H):
                for w in range(W):
                    p, off = oracle_place(chip, address, stride, e, k, n, c, h, w)
                    want[p, off:off + e] = raw[n, c, h, w] if n < N else 0
    return want


def random_bytes(rng, shape, dtype):
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    return np.frombuffer(rng.bytes(nbytes), dtype=dtype).reshape(shape).copy()


@st.composite
def placements(draw):
    X = draw(st.integers(1, 6))
    align = draw(st.sampled_from([4, 8, 16, 32, 64, 128]))
    S = align * draw(st.integers(max(1, 256 // align), 2048 // align))
    chip = Chip(X, S, align)
    dname = draw(st.sampled_from(sorted(DTYPES)))
    mode = draw(st.sampled_from([None, MODE_OF.get(dname)])) if dname in MODE_OF else None
    shape = (draw(st.integers(1, 5)), draw(st.integers(1, 9)), draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    layout = draw(st.sampled_from(["aligned", "compact", "stride"]))
    Q = draw(st.integers(0, X - 1))
    stride = None
    if layout == "stride":
        M = -(-shape[0] // K[mode])
        cpn = -(-(Q + shape[1]) // X)
        hs = shape[3] + draw(st.integers(0, 3))
        cs = shape[2] * hs + draw(st.integers(0, 5))
        ns = cpn * cs + draw(st.integers(0, 5))
        if draw(st.booleans()) and M > 1:  # n inside c: the other nesting order
            ns = shape[2] * hs + draw(st.integers(0, 3))
            cs = M * ns + draw(st.integers(0, 3))
        stride = (ns, cs, hs, 1)
    try:
        probe = tensor_layout(chip, Q * S, shape, stride, dname, mode, layout)
    except FootprintError:
        shape = (1, 1, 1, 1)
        stride = None if stride is None else (1, 1, 1, 1)
        probe = tensor_layout(chip, Q * S, shape, stride, dname, mode, layout)
    need = {"aligned": align, "compact": 4}.get(probe.layout_name, min(probe.unit_bytes, 4))
    room = (S - probe.span) // need
    R = need * draw(st.integers(0, room))
    return chip, Q * S + R, shape, dname, mode, stride, layout


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placements(), st.integers(0, 2**32 - 1))
def test_round_trip_against_oracle_with_sentinel(p, seed):
    chip, address, shape, dname, mode, stride, layout = p
    rng = np.random.default_rng(seed)
    arr = random_bytes(rng, shape, DTYPES[dname])
    mem = LocalMemory(chip, system_bytes=64)
    mem.reset(SENTINEL)
    before = mem.local.copy()
    t = tensor_layout(chip, address, shape, stride, dname, mode, layout)
    mem.store(t, arr)
    want = oracle_expected(chip, address, t.stride, arr, K[mode], before)
    np.testing.assert_array_equal(mem.local, want)  # elements exact, dummies 0, nothing else moved
    back = mem.load(t)
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back.view(np.uint8), arr.view(np.uint8))
    if layout == "aligned" and stride is None:
        back2 = mem.l2s(address, shape, dname, mode=mode)
        np.testing.assert_array_equal(back2.view(np.uint8), arr.view(np.uint8))
    # locate / element_at agree with the formula for a few elements
    e = arr.dtype.itemsize
    for _ in range(5):
        idx = tuple(int(rng.integers(0, d)) for d in shape)
        where = oracle_place(chip, address, t.stride, e, K[mode], *idx)
        assert t.locate(idx) == where
        assert t.element_at(where[0], where[1] + e - 1) == idx
    # byte_map agrees with the oracle's picture of which bytes belong to the tensor
    bm = t.byte_map()
    changed_or_owned = want != before
    assert not np.any(changed_or_owned & (bm == -1))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 40), st.data(), st.sampled_from(["fp32", "fp16", "int8"]),
       st.integers(0, 3))
def test_matrix_round_trip(rows, cols, data, dname, Q):
    chip = Chip(4, 2048, 32)
    W = data.draw(st.integers(1, cols))
    rng = np.random.default_rng(rows * 1000 + cols)
    a = random_bytes(rng, (rows, cols), DTYPES[dname])
    mem = LocalMemory(chip, system_bytes=4096)
    mem.reset(SENTINEL)
    try:
        t = mem.matrix_s2l(Q * 2048, a, W)
    except FootprintError:
        return
    e = a.dtype.itemsize
    want = np.full((4, 2048), SENTINEL, np.uint8)
    for r in range(rows):
        for col in range(cols):
            c, w = divmod(col, W)
            p, off = oracle_place(chip, Q * 2048, t.stride, e, 1, r, c, 0, w)
            want[p, off:off + e] = a.view(np.uint8).reshape(rows, cols, e)[r, col]
    np.testing.assert_array_equal(mem.local, want)
    back = mem.matrix_l2s(Q * 2048, rows, cols, W, dname)
    np.testing.assert_array_equal(back.view(np.uint8), a.view(np.uint8))
    # through system memory with a row stride
    rs = cols + 3
    sys = np.zeros((rows, rs), a.dtype)
    sys[:, :cols] = a
    mem.write_system(0, sys.reshape(1, 1, rows, rs))
    mem.reset(SENTINEL)
    mem.gdma_matrix_s2l(Q * 2048, 0, rows, cols, W, dname, src_row_stride=rs)
    np.testing.assert_array_equal(mem.local, want)
    mem.gdma_matrix_l2s(rows * rs * e + 8, Q * 2048, rows, cols, W, dname, dst_row_stride=cols + 1)
    got = mem.read_system(rows * rs * e + 8, (1, 1, rows, cols), dname, stride=(1, 1, cols + 1, 1))
    np.testing.assert_array_equal(got[0, 0].view(np.uint8), a.view(np.uint8))


@settings(max_examples=40, deadline=None)
@given(placements(), st.integers(0, 3), st.integers(0, 2**32 - 1))
def test_gdma_system_local_system(p, pad, seed):
    chip, address, shape, dname, mode, stride, layout = p
    rng = np.random.default_rng(seed)
    arr = random_bytes(rng, shape, DTYPES[dname])
    N, C, H, W = shape
    hs = W + pad
    cs = H * hs + pad
    sstride = (C * cs + pad, cs, hs, 1)  # padded system strides
    e = arr.dtype.itemsize
    size = e * (N * sstride[0]) + 64
    mem = LocalMemory(chip, system_bytes=2 * size + 64)
    mem.reset(SENTINEL, system=True)
    mem.write_system(8, arr, stride=sstride)
    before = mem.local.copy()
    t = tensor_layout(chip, address, shape, stride, dname, mode, layout)
    mem.gdma_s2l(address, 8, shape, dname, dst_stride=t.stride, src_stride=sstride, mode=mode)
    np.testing.assert_array_equal(mem.local, oracle_expected(chip, address, t.stride, arr, K[mode], before))
    sys_before = mem.system.copy()
    mem.gdma_l2s(size, address, shape, dname, src_stride=t.stride, mode=mode)
    got = mem.read_system(size, shape, dname)
    np.testing.assert_array_equal(got.view(np.uint8), arr.view(np.uint8))
    untouched = np.ones(mem.system.size, bool)
    untouched[size:size + arr.nbytes] = False
    np.testing.assert_array_equal(mem.system[untouched], sys_before[untouched])
    # local -> local into a fresh aligned place at NPU 0 and system -> system
    mem2 = LocalMemory(chip, system_bytes=2 * size + 64)
    mem2.reset(SENTINEL)
    mem2.store(t, arr)
    try:
        dst = tensor_layout(chip, 0, shape, None, dname, mode)
    except FootprintError:
        return
    mem2.gdma_l2l(0, address, shape, dname, src_stride=t.stride, mode=mode)  # may overlap the source
    np.testing.assert_array_equal(mem2.load(dst).view(np.uint8), arr.view(np.uint8))
    mem.gdma_s2s(size, 8, shape, dname, src_stride=sstride)
    np.testing.assert_array_equal(mem.read_system(size, shape, dname).view(np.uint8), arr.view(np.uint8))


def test_fills():
    chip = Chip(4, 1024, 128)
    mem = LocalMemory(chip, system_bytes=256)
    mem.reset(SENTINEL)
    mem.fill_local(0, (3, 5, 1, 2), "int8", -3, mode="4N")
    t = tensor_layout(chip, 0, (3, 5, 1, 2), dtype="int8", mode="4N")
    np.testing.assert_array_equal(mem.load(t), np.full((3, 5, 1, 2), -3, np.int8))
    bm = t.byte_map()
    assert (mem.local[bm == -2] == 0).all() and (mem.local[bm == -1] == SENTINEL).all()
    mem.fill_system(4, (1, 2, 2, 3), "fp16", 1.5, stride=(12, 6, 3, 1))
    assert (mem.read_system(4, (1, 2, 2, 3), "fp16", (12, 6, 3, 1)) == 1.5).all()


# ------------------------------------------------------------------ allocator
def test_allocator_refuses_overlap_and_empty_block_reuse():
    chip = Chip(4, 1024, 128)
    mem = LocalMemory(chip)
    a = mem.alloc((1, 6, 4, 8), start_npu=3)        # C = X + 2 at NPU X - 1: 3 block rows
    assert a.empty_blocks() == 6
    b = mem.alloc((1, 2, 4, 8))
    assert b.offset >= a.end_offset
    with pytest.raises(OverlapError, match="empty blocks"):
        mem.alloc((1, 1, 4, 8), address=0)          # NPU 0, row 0 is one of a's empty blocks
    c = mem.alloc((1, 1, 4, 8), address=0, reuse_empty_blocks=True)
    assert c.address == 0
    with pytest.raises(OverlapError):
        mem.alloc((1, 1, 4, 8), address=3 * 1024, reuse_empty_blocks=True)  # a's data in NPU 3
    mem.free(b)
    d = mem.alloc((1, 2, 4, 8))
    assert d.offset == b.offset
    with pytest.raises(FootprintError):
        mem.alloc((1, 4, 16, 16))                   # 1 KiB per NPU: no room left
    with pytest.raises(LayoutError):
        mem.free(b)
    assert [t.address for t in mem.allocations] == [a.address, 0, d.address]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 3), st.integers(1, 6),
                          st.integers(0, 3), st.booleans(), st.sampled_from(["fp32", "int8", "fp16"])),
                min_size=1, max_size=8))
def test_allocations_never_share_bytes(requests):
    chip = Chip(4, 1024, 16)
    mem = LocalMemory(chip)
    owner = np.full((4, 1024), -1)
    for i, (n, c, h, w, q, reuse, dname) in enumerate(requests):
        before = mem.allocations
        try:
            t = mem.alloc((n, c, h, w), dname, start_npu=q, reuse_empty_blocks=reuse)
        except FootprintError:
            continue
        used = t.byte_map() != -1
        assert (owner[used] == -1).all(), "two allocations share a byte"
        owner[used] = i
        if not reuse:  # a default allocation claims [offset, end) of every NPU, empty blocks too
            assert all(o.end_offset <= t.offset or o.offset >= t.end_offset for o in before)


# ---------------------------------------------------------------- error paths
def digest(mem):
    return hashlib.sha256(mem.local.tobytes() + mem.system.tobytes()).hexdigest()


CHIP = Chip(4, 1024, 128)
F = np.ones((2, 3, 4, 5), np.float32)
I8 = np.ones((6, 5, 4, 5), np.int8)

ERRORS = [
    ("address past memory", AddressError, "address", lambda m: m.s2l(4 * 1024, F)),
    ("negative address", AddressError, "address", lambda m: m.l2s(-128, F.shape, "fp32")),
    ("footprint past NPU end", FootprintError, "runs past", lambda m: m.s2l(1024 - 128, F)),
    ("big tensor", FootprintError, "runs past", lambda m: m.s2l(0, np.ones((9, 9, 9, 9), np.float32))),
    ("aligned needs 128", AlignmentError, "divisible by 128", lambda m: m.s2l(64, F)),
    ("compact needs 4", AlignmentError, "divisible by 4", lambda m: m.fill_local(2, (1, 1, 1, 4), "int8", 0,
                                                                              stride=(4, 4, 4, 1), mode="4N")),
    ("stride fp32 needs 4", AlignmentError, "divisible by 4", lambda m: m.s2l(2, F, stride=(60, 20, 5, 1))),
    ("local W stride 2", StrideError, "W stride 1", lambda m: m.s2l(0, F, stride=(120, 40, 10, 2))),
    ("system W stride 2", StrideError, "W stride 1",
     lambda m: m.gdma_s2l(0, 0, F.shape, "fp32", src_stride=(120, 40, 10, 2))),
    ("4N with fp32", ModeError, "4N", lambda m: m.s2l(0, F, mode="4N")),
    ("2N with int8", ModeError, "2N", lambda m: m.s2l(0, I8, mode="2N")),
    ("2IC with fp16", ModeError, "2IC", lambda m: m.s2l(0, F.astype(np.float16), mode="2IC")),
    ("unknown mode", LayoutError, "mode", lambda m: m.s2l(0, I8, mode="8N")),
    ("zero dim", ShapeError, "shape[0]", lambda m: m.l2s(0, (0, 1, 1, 1), "fp32")),
    ("float dim", ShapeError, "shape[2]", lambda m: m.fill_local(0, (1, 1, 1.5, 1), "fp32", 0)),
    ("rank 3", RankError, "shape", lambda m: m.l2s(0, (1, 1, 1), "fp32")),
    ("zero stride", StrideError, "stride n", lambda m: m.s2l(0, F, stride=(0, 20, 5, 1))),
    ("float stride", StrideError, "stride c", lambda m: m.s2l(0, F, stride=(60, 2.5, 5, 1))),
    ("short stride", StrideError, "stride", lambda m: m.s2l(0, F, stride=(60, 20, 1))),
    ("aliasing local strides", StrideError, "share", lambda m: m.s2l(0, F, stride=(1, 1, 1, 1))),
    ("aliasing system dst", StrideError, "share",
     lambda m: m.gdma_l2s(0, 0, F.shape, "fp32", dst_stride=(1, 1, 1, 1))),
    ("bad dtype name", DTypeError, "dtype", lambda m: m.l2s(0, F.shape, "fp64")),
    ("complex array", DTypeError, "dtype", lambda m: m.s2l(0, F.astype(np.complex64))),
    ("value out of range", DTypeError, "value", lambda m: m.fill_local(0, F.shape, "int8", 300)),
    ("system address", AddressError, "src address", lambda m: m.gdma_s2l(0, 1 << 20, F.shape, "fp32")),
    ("system unaligned", AlignmentError, "src address", lambda m: m.gdma_s2l(0, 2, F.shape, "fp32")),
    ("system footprint", FootprintError, "system memory",
     lambda m: m.gdma_l2s((1 << 20) - 64, 0, F.shape, "fp32")),
    ("matrix W > cols", ShapeError, "cols_per_channel", lambda m: m.matrix_s2l(0, np.ones((2, 4), np.float32), 5)),
    ("matrix 3-D", ShapeError, "matrix", lambda m: m.matrix_s2l(0, np.ones((2, 4, 1), np.float32), 2)),
    ("matrix footprint", FootprintError, "runs past",
     lambda m: m.matrix_s2l(0, np.ones((40, 40), np.float32), 40)),
    ("matrix row stride", StrideError, "row_stride",
     lambda m: m.gdma_matrix_l2s(0, 0, 3, 8, 4, "fp32", dst_row_stride=4)),
    ("store wrong shape", ShapeError, "shape",
     lambda m: m.store(tensor_layout(CHIP, 0, (1, 2, 3, 4)), np.ones((1, 2, 3, 5), np.float32))),
    ("store wrong dtype", DTypeError, "dtype",
     lambda m: m.store(tensor_layout(CHIP, 0, (1, 2, 3, 4)), np.ones((1, 2, 3, 4), np.float16))),
    ("store foreign chip", LayoutError, "tensor",
     lambda m: m.store(tensor_layout(Chip(2, 1024, 128), 0, (1, 2, 3, 4)), np.ones((1, 2, 3, 4), np.float32))),
    ("l2l dst past end", FootprintError, "runs past",
     lambda m: m.gdma_l2l(1024 - 128, 0, F.shape, "fp32")),
    ("reset byte", LayoutError, "byte", lambda m: m.reset(256)),
    ("overlap", OverlapError, "share bytes", lambda m: m.alloc(F.shape, address=128)),
]


@pytest.mark.parametrize("name, exc, words, call", ERRORS, ids=[e[0] for e in ERRORS])
def test_error_leaves_memory_unchanged(name, exc, words, call):
    mem = LocalMemory(CHIP)
    rng = np.random.default_rng(7)
    mem._local[...] = rng.integers(0, 256, mem._local.shape, dtype=np.uint8)
    mem._system[...] = rng.integers(0, 256, mem._system.shape, dtype=np.uint8)
    mem.alloc(F.shape, address=0)
    before = digest(mem)
    allocated = mem.allocations
    with pytest.raises(exc) as info:
        call(mem)
    assert words.lower() in str(info.value).lower()
    assert digest(mem) == before
    assert mem.allocations == allocated


def test_chip_and_query_errors():
    with pytest.raises(LayoutError, match="align_bytes"):
        Chip(4, 1024, 6)
    with pytest.raises(LayoutError, match="lmem_bytes"):
        Chip(4, 1000, 128)
    with pytest.raises(ShapeError, match="npus"):
        Chip(0, 1024, 128)
    with pytest.raises(AddressError):
        CHIP.split_address(4096)
    with pytest.raises(AddressError):
        CHIP.address(4, 0)
    t = tensor_layout(CHIP, 0, (1, 2, 3, 4))
    with pytest.raises(LayoutError):
        t.locate((1, 0, 0, 0))
    with pytest.raises(LayoutError):
        t.element_at(0, 1024)
    with pytest.raises(LayoutError):
        t.matrix_locate(0, 0)
    m = matrix_layout(CHIP, 0, 2, 40, 15)
    with pytest.raises(LayoutError, match="column 44"):
        m.locate((0, 2, 0, 14))
    with pytest.raises(LayoutError):
        tensor_layout(CHIP, 0, (1, 2, 3, 4), layout="tiled")
    with pytest.raises(LayoutError):
        tensor_layout("BM1684", 0, (1, 2, 3, 4))


def test_bm1684_contract_example():
    t = tensor_layout(BM1684, 0, (4, 256, 56, 56), dtype="fp32")
    assert t.stride == (4 * 3136, 3136, 56, 1)  # 56*56 = 3136 is a multiple of 32
    assert t.locate((1, 65, 2, 3)) == (1, 4 * (4 * 3136 + 3136 + 2 * 56 + 3))
    assert t.bytes_per_npu().tolist() == [4 * 4 * 3136 * 4] * 64


@pytest.mark.parametrize("dname, mode, N", [("int8", "4N", 6), ("uint16", "2N", 3), ("fp32", "2IC", 5),
                                            ("fp32", None, 3)])
def test_large_round_trip_vectorised_oracle(dname, mode, N):
    """Big enough for the compiled interleave and copy paths; oracle: the seed formula, vectorised."""
    chip = Chip(16, 128 * 1024, 128)
    shape = (N, 37, 29, 31)  # > 2**15 elements
    k = K[mode]
    rng = np.random.default_rng(3)
    arr = random_bytes(rng, shape, DTYPES[dname])
    e = arr.dtype.itemsize
    address = 5 * chip.lmem_bytes + 256
    mem = LocalMemory(chip, system_bytes=64)
    mem.reset(SENTINEL)
    t = mem.s2l(address, arr, mode=mode)
    Q, R = 5, 256
    ns, cs, hs, ws = t.stride
    u = e * k
    n, c, h, w, b = np.meshgrid(*(np.arange(d) for d in (-(-N // k) * k,) + shape[1:] + (e,)), indexing="ij")
    p = (Q + c) % chip.npus
    off = R + u * ((n // k) * ns + ((Q + c) // chip.npus) * cs + h * hs + w * ws) + e * (n % k) + b
    raw = np.zeros((-(-N // k) * k,) + shape[1:] + (e,), np.uint8)
    raw[:N] = arr.view(np.uint8).reshape(shape + (e,))
    want = np.full(mem.local.shape, SENTINEL, np.uint8)
    want[p, off] = raw
    np.testing.assert_array_equal(mem.local, want)
    back = mem.l2s(address, shape, dname, mode=mode)
    np.testing.assert_array_equal(back.view(np.uint8), arr.view(np.uint8))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_span_ranges_bytes_and_dummies_against_the_seed_formula(data):
    """Every answer read from the byte layout, against a per-element loop over the seed's formula."""
    X = data.draw(st.sampled_from([2, 3, 4]))
    chip = Chip(X, 2048, 32)
    dname = data.draw(st.sampled_from(["fp32", "fp16", "int8", "uint16"]))
    mode = data.draw(st.sampled_from([None, MODE_OF.get(dname)]))
    shape = tuple(data.draw(st.integers(1, n)) for n in (6, 7, 3, 4))
    Q = data.draw(st.integers(0, X - 1))
    try:
        t = tensor_layout(chip, Q * chip.lmem_bytes + 64, shape, dtype=dname, mode=mode,
                          layout=data.draw(st.sampled_from(["aligned", "compact"])))
    except FootprintError:
        return
    e, k = np.dtype(DTYPES[dname]).itemsize, K[mode]
    u, (ns, cs, hs, ws), R = e * k, t.stride, 64
    owned = {}                                     # (npu, byte) -> "element" or "dummy"
    for n in range(-(-shape[0] // k) * k):
        for c, h, w, b in itertools.product(*(range(v) for v in shape[1:]), range(e)):
            p = (Q + c) % X
            off = R + u * ((n // k) * ns + ((Q + c) // X) * cs + h * hs + w * ws) + e * (n % k) + b
            owned[(p, off)] = "element" if n < shape[0] else "dummy"
    for p in range(X):
        offs = [o for (q, o) in owned if q == p]
        assert t.npu_ranges()[p] == ((min(offs), max(offs) + 1) if offs else None)
        assert t.bytes_per_npu()[p] == len(offs)
    assert t.end_offset == max(o for _, o in owned) + 1 and t.span == t.end_offset - R
    for (p, o), kind in list(owned.items())[::7]:
        assert t.is_dummy(p, o) == (kind == "dummy")
        assert (t.element_at(p, o) is None) == (kind == "dummy")


@pytest.mark.parametrize("rows, cols, W, Q", [(2, 40, 15, 0), (3, 17, 4, 2), (5, 9, 9, 3), (2, 8, 4, 1)])
def test_matrix_ranges_and_bytes_against_the_formula(rows, cols, W, Q):
    """npu_ranges claim whole channels (the 4-D view), bytes_per_npu count the matrix's own bytes."""
    chip = Chip(4, 8192, 64)
    t = matrix_layout(chip, Q * 8192 + 64, rows, cols, W)
    ns, cs = t.stride[0], t.stride[1]
    whole, own = {}, {}
    for r, col in itertools.product(range(rows), range(t.shape[1] * W)):
        ch = Q + col // W
        p, off = ch % 4, 64 + 4 * (r * ns + (ch // 4) * cs + col % W)
        for b in range(4):
            whole.setdefault(p, []).append(off + b)
            if col < cols:
                own.setdefault(p, []).append(off + b)
    assert t.npu_ranges() == [(min(whole[p]), max(whole[p]) + 1) if p in whole else None for p in range(4)]
    assert t.bytes_per_npu().tolist() == [len(own.get(p, [])) for p in range(4)]
