"""Both query directions on arrays, and the bad inputs the other suites do not reach.

Expected answers come from seed 003's formulas and REFERENCE.md's table written out
here; nothing is computed with the library to be compared with the library.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tensorlayout import errors
from tensorlayout.buffer import buffer_layout
from tensorlayout.cli import main
from tensorlayout.image import check_image_limits, element_at, pixel_of, to_image
from tensorlayout.npu import BM1684, Chip, LocalMemory, NpuTensor, matrix_layout, tensor_layout

SEED = Chip(4, 1024, 128)


def seed_place(address, stride, e, k, n, c, h, w, X=4, S=1024):
    """(npu, byte) of element (n, c, h, w): seed 003's address formula, modes included."""
    Q, R = divmod(address, S)
    ns, cs, hs, ws = stride
    return (Q + c) % X, R + e * k * ((n // k) * ns + ((Q + c) // X) * cs + h * hs + w * ws) + e * (n % k)


# ------------------------------------------------------------- NPU, both directions, arrays
@pytest.mark.parametrize("address, shape, stride, dtype, e, k, mode", [
    (0, (2, 5, 3, 4), (120, 56, 16, 2), "fp32", 4, 1, None),        # seed stride example 1
    (1024, (2, 3, 1, 10), (120, 20, 20, 2), "fp32", 4, 1, None),    # seed stride example 2
    (0, (6, 5, 4, 5), (64, 32, 5, 1), "int8", 1, 4, "4N"),          # seed 4N example
    (0, (3, 5, 4, 5), (64, 32, 5, 1), "int16", 2, 2, "2N"),         # seed 2N example
    (2048, (3, 5, 2, 3), (32, 16, 3, 1), "fp32", 4, 2, "2IC"),      # 8-byte units: C stride 16
])
def test_npu_locate_element_at_and_is_dummy_on_arrays(address, shape, stride, dtype, e, k, mode):
    kw = {"stride": stride} if mode is None else {}
    t = tensor_layout(SEED, address, shape, dtype=dtype, mode=mode, **kw)
    assert t.stride == stride
    idx = np.indices(shape).reshape(4, -1)
    want = np.array([seed_place(address, stride, e, k, *i) for i in idx.T]).T
    for query in (tuple(idx), idx.T.copy()):          # a tuple of arrays, or (..., 4)
        npu, off = t.locate(query)
        np.testing.assert_array_equal(npu, want[0])
        np.testing.assert_array_equal(off, want[1])
    # Location -> element over every byte of every NPU, against the same formula.
    P, B = (a.ravel() for a in np.indices((4, 1024)))
    owner = {}
    dummy = set()
    for i in idx.T:
        p, o = seed_place(address, stride, e, k, *i)
        owner.update({(p, o + j): tuple(i) for j in range(e)})
    for n in range(shape[0], -(-shape[0] // k) * k):                 # the mode's dummies
        for c in range(shape[1]):
            for h in range(shape[2]):
                for w in range(shape[3]):
                    p, o = seed_place(address, stride, e, k, n, c, h, w)
                    dummy.update((p, o + j) for j in range(e))
    index, valid = t.element_at(P, B)
    assert valid.sum() == len(owner)
    got = {(p, b): tuple(int(v[j]) for v in index)
           for j, (p, b) in enumerate(zip(P, B)) if valid[j]}
    assert got == owner
    is_d = t.is_dummy(P, B)
    assert {(int(p), int(b)) for p, b in zip(P[is_d], B[is_d])} == dummy
    assert t.is_dummy(0, 1023) is False


def test_npu_matrix_queries_on_arrays():
    t = matrix_layout(SEED, 0, 2, 40, 15)               # seed: 2 x 40 fp32, W = 15
    r, col = (a.ravel() for a in np.indices((2, 40)))
    npu, off = t.matrix_locate(r, col)
    # channel col // 15 at NPU (col // 15) % 4, C stride 32 fp32 (aligned), N stride 32
    np.testing.assert_array_equal(npu, (col // 15) % 4)
    np.testing.assert_array_equal(off, 4 * (32 * r + col % 15))
    index, valid = t.matrix_element_at(npu, off + 3)
    assert valid.all() and len(index) == 2
    np.testing.assert_array_equal(index[0], r)
    np.testing.assert_array_equal(index[1], col)
    npu4, off4 = t.locate((r, col // 15, np.zeros_like(r), col % 15))
    np.testing.assert_array_equal(npu4, npu)
    np.testing.assert_array_equal(off4, off)


@pytest.mark.parametrize("call, exc, pattern", [
    (lambda t: t.locate((np.array([0, 2]), 0, 0, 0)), errors.IndexOutOfRange, r"index n = 2"),
    (lambda t: t.locate(np.zeros((2, 3), int)), errors.RankError, r"last axis 3"),
    (lambda t: t.locate(5), errors.RankError, r"index = 5"),
    (lambda t: t.locate((0, 0, 0, 1.5)), errors.IndexOutOfRange, r"index w = 1.5 .* integers"),
    (lambda t: t.locate((0, True, 0, 0)), errors.IndexOutOfRange, r"index c = True"),
    (lambda t: t.element_at(0, 2.5), errors.IndexOutOfRange, r"location byte = 2.5 .* integers"),
    (lambda t: t.element_at(True, 0), errors.IndexOutOfRange, r"location npu = True"),
    (lambda t: t.is_dummy(np.array([0, 4]), 0), errors.IndexOutOfRange, r"location npu = 4"),
    (lambda t: t.byte_map(5, 4), errors.IndexOutOfRange, r"start, stop = 5, 4"),
    (lambda t: t.byte_map(0, 1025), errors.IndexOutOfRange, r"stop <= 1024"),
    (lambda t: t.byte_map(-1), errors.LayoutError, r"start = -1"),
])
def test_npu_query_errors(call, exc, pattern):
    t = tensor_layout(SEED, 0, (2, 5, 3, 4))
    with pytest.raises(exc, match=pattern):
        call(t)


@pytest.mark.parametrize("rows, cols, W, Q, dtype", [(2, 40, 15, 0, "fp32"), (3, 17, 4, 2, "fp32"),
                                                     (2, 9, 4, 3, "int8"), (4, 10, 3, 1, "fp16")])
def test_matrix_4d_view_both_directions(rows, cols, W, Q, dtype):
    """The 4-D view (rows, ceil(cols / W), 1, W): every index and every byte, scalar and array,
    against seed 003's formula with the aligned strides from NPU 0; the short last channel's
    columns hold nothing."""
    chip, R = Chip(4, 2048, 64), 128
    e = {"fp32": 4, "fp16": 2, "int8": 1}[dtype]
    C = -(-cols // W)
    cs = -(-W // (64 // e)) * (64 // e)
    ns = cs * -(-C // 4)
    t = matrix_layout(chip, Q * 2048 + R, rows, cols, W, dtype)
    owner = {}
    for r in range(rows):
        for c in range(C):
            for w in range(W):
                p, off = seed_place(Q * 2048 + R, (ns, cs, W, 1), e, 1, r, c, 0, w, S=2048)
                if c * W + w < cols:
                    assert t.locate((r, c, 0, w)) == (p, off)
                    owner.update({(p, off + b): (r, c, 0, w) for b in range(e)})
                else:
                    with pytest.raises(errors.IndexOutOfRange, match=rf"\(c, w\) = \({c}, {w}\) is column "
                                                                     rf"{c * W + w}: .* only {cols} columns"):
                        t.locate((r, c, 0, w))
    P, B = (a.ravel() for a in np.indices((4, 2048)))
    index, valid = t.element_at(P, B)
    got = {(int(p), int(b)): tuple(int(v[j]) for v in index) for j, (p, b) in enumerate(zip(P, B)) if valid[j]}
    assert got == owner
    for (p, b), idx in list(owner.items())[::5]:
        assert t.element_at(p, b) == idx
    assert t.element_at(0, 0) is None and t.element_at(3, 2047) is None
    keys = list(owner.values())
    npu, off = t.locate(np.array(keys))
    assert {(int(p), int(o)) for p, o in zip(npu, off)} == {(p, b - b % e) for p, b in owner}


def test_matrix_column_past_the_end_on_arrays():
    t = matrix_layout(SEED, 0, 2, 40, 15)
    with pytest.raises(errors.IndexOutOfRange, match=r"\(c, w\) = \(2, 12\) is column 42"):
        t.locate((np.array([0, 0]), np.array([0, 2]), 0, np.array([0, 12])))


def test_byte_map_window_equals_the_seed_formula():
    # Seed 4N example: int8x4 words, dummies for n = 6, 7.  Any window [a, b) of the map
    # holds what the formula puts there.
    t = tensor_layout(SEED, 0, (6, 5, 4, 5), dtype="int8", mode="4N")
    want = np.full((4, 1024), -1, dtype=np.int64)
    for n in range(8):
        for c in range(5):
            for h in range(4):
                for w in range(5):
                    p, o = seed_place(0, (64, 32, 5, 1), 1, 4, n, c, h, w)
                    want[p, o] = ((n * 5 + c) * 4 + h) * 5 + w if n < 6 else -2
    np.testing.assert_array_equal(t.byte_map(), want)
    for a, b in ((0, 1024), (250, 300), (128, 129), (7, 7), (500, 1024)):
        np.testing.assert_array_equal(t.byte_map(a, b), want[:, a:b])


def test_npu_figure_reads_only_the_rows_it_draws(monkeypatch):
    # A BM1684 tensor spans 64 NPUs x 100 KB; the figure shows 40 block rows of it and must
    # not build the whole 64 x 512 KiB map (256 MiB of int64) to do so.
    from tensorlayout.draw import npu_figure

    t = tensor_layout(BM1684, 0, (1, 64, 160, 160), dtype="fp32")
    windows = []
    real = NpuTensor.byte_map

    def spy(self, start=0, stop=None):
        windows.append((start, BM1684.lmem_bytes if stop is None else stop))
        return real(self, start, stop)

    monkeypatch.setattr(NpuTensor, "byte_map", spy)
    svg = npu_figure(t, max_rows=10, blocks_per_row=8)
    assert 'data-element="0,0,0,0"' in svg and 'data-element="0,63,159,159"' in svg
    assert windows and sum(b - a for a, b in windows) <= 10 * 8 * 4


# ----------------------------------------------------------- NPU copies: no reinterpretation
def _digest(mem):
    return hashlib.sha256(mem.local.tobytes() + mem.system.tobytes()).hexdigest()


@pytest.mark.parametrize("array", [
    np.ones((1, 2, 3, 4), np.int32),            # same size as fp32: would be written as bits
    np.ones((1, 2, 3, 4), np.uint32),
    np.ones((1, 2, 3, 4), ">f4"),               # big-endian float32
])
def test_store_refuses_another_dtype_before_writing(array):
    mem = LocalMemory(SEED, system_bytes=256)
    mem.reset(0x5A, system=True)
    before = _digest(mem)
    t = tensor_layout(SEED, 0, (1, 2, 3, 4), dtype="fp32")
    with pytest.raises(errors.DTypeError, match=r"array has dtype .*this tensor holds fp32"):
        mem.store(t, array)
    assert _digest(mem) == before


# ------------------------------------------------------------------- core and images
def test_core_location_and_out_arguments_are_checked():
    lay = buffer_layout("NCHW", (1, 2, 3, 4))
    for bad in (2.7, True, "a", None):
        with pytest.raises(errors.IndexOutOfRange, match="locations must be integers"):
            lay.element_at((bad,))
    with pytest.raises(errors.IndexOutOfRange, match=r"location = (np.float64\(2.5\)|2.5) "):
        lay.element_at_flat(np.array([1, 2.5]))
    assert lay.element_at((np.int64(23),)) == (0, 1, 2, 3)     # 23 = ((0*2+1)*3+2)*4+3
    with pytest.raises(errors.RankError, match="index = 7"):
        lay.locate(7)
    with pytest.raises(errors.ShapeError, match="out = list"):
        lay.pack(np.zeros((1, 2, 3, 4)), out=[0] * 24)
    with pytest.raises(errors.ShapeError, match="out = ndarray"):
        lay.pack(np.zeros((1, 2, 3, 4)), out=np.broadcast_to(np.zeros(1), (24,)))
    with pytest.raises(errors.DTypeError, match="out has dtype int8"):
        lay.unpack(np.full(24, 0.5), out=np.zeros((1, 2, 3, 4), np.int8))
    out = np.zeros((1, 2, 3, 4))                                 # a safe cast is fine
    lay.unpack(np.arange(24, dtype=np.float32), out=out)
    assert out[0, 1, 2, 3] == 23


def test_image_queries_reject_non_integers():
    shape = (1, 2, 3, 5)                                 # NHWC; IN_OUT_CHANNEL [q(5)*3, 2]
    assert element_at("IN_OUT_CHANNEL", shape, np.int64(5), 1, 0) == (0, 1, 2, 4)
    with pytest.raises(errors.IndexOutOfRange, match="location x = 1.5"):
        element_at("IN_OUT_CHANNEL", shape, 1.5, 0, 0)
    with pytest.raises(errors.IndexOutOfRange, match="location k = True"):
        element_at("IN_OUT_CHANNEL", shape, 0, 0, True)
    with pytest.raises(errors.RankError, match="index = 3"):
        pixel_of("IN_OUT_CHANNEL", shape, 3)
    with pytest.raises(errors.RankError, match="index = None"):
        pixel_of("IN_OUT_CHANNEL", shape, None)


@pytest.mark.parametrize("args, exc, pattern", [
    ((0, 5), errors.ShapeError, r"width = 0"),
    ((5, "7"), errors.ShapeError, r"height = '7'"),
    ((5, 7, 16), errors.DeviceLimitError, r"max_size = 16"),
    ((5, 7, (16, -1)), errors.DeviceLimitError, r"max_size = \(16, -1\)"),
])
def test_check_image_limits_arguments(args, exc, pattern):
    with pytest.raises(exc, match=pattern):
        check_image_limits(*args)


def test_to_image_max_size_is_checked():
    with pytest.raises(errors.DeviceLimitError, match="max_size = 5"):
        to_image(np.ones((1, 2, 3, 5), np.float32), "IN_OUT_CHANNEL", max_size=5)


# ---------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("argv", [
    ["figures", "--out", "/proc/no-such-folder"],
    ["draw", "image", "ARGUMENT", "--shape", "5", "-o", "/proc/x.svg"],
])
def test_cli_unwritable_output_is_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not allowed" in err[0] and "Traceback" not in err[0]
