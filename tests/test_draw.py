"""Figures are data: read every SVG back and check each block against the seed's formulas.

The oracles here are written straight from seed 003 and REFERENCE.md (NPU
(Q + c) % X at byte R + e*(n*ns + ((Q + c)//X)*cs + h*hs + w*ws); the image
lane table), never from the drawing code.
"""

from __future__ import annotations

import itertools
import os
import xml.etree.ElementTree as ET

import pytest

from tensorlayout.cli import Tour, main
from tensorlayout.draw import address_figure, image_figure, npu_figure, write_gallery
from tensorlayout.draw.gallery import GALLERY
from tensorlayout.errors import LayoutError
from tensorlayout.npu import Chip, tensor_layout

NS = "{http://www.w3.org/2000/svg}"
X, S = 4, 1024
SEED = Chip(X, S, 128, name="seed chip")


# ----------------------------------------------------------------- oracles
def cdiv(a, b):
    return -(-a // b)


def seed_strides(layout, shape, q, unit_bytes, align=128, X=X):
    """(ns, cs, hs, ws) in units, from seed 003's definitions of the aligned and compact layouts."""
    n, c, h, w = shape
    cpn = cdiv(q + c, X)
    if layout == "aligned":
        per = align // unit_bytes
        cs = cdiv(h * w, per) * per
    else:
        cs = h * w
    return (cs * cpn, cs, w, 1)


def seed_location(address, index, stride, e, k=1, X=X, S=S):
    """Seed 003: (npu, byte) of element (n, c, h, w); k = 4 / 2 packs n in the 4N / 2N modes."""
    Q, R = address // S, address % S
    n, c, h, w = index
    ns, cs, hs, ws = stride
    u = e * k
    byte = R + u * ((n // k) * ns + ((Q + c) // X) * cs + h * hs + w * ws) + e * (n % k)
    return (Q + c) % X, byte


class Figure:
    """An NPU figure read back: its geometry and its blocks keyed by (npu, offset)."""

    def __init__(self, text):
        self.root = ET.fromstring(text)
        sheet = self.root.find(f".//{NS}g[@class='sheet']")
        self.bw = float(sheet.get("data-block-width"))
        self.bh = float(sheet.get("data-block-height"))
        self.per_row = int(sheet.get("data-blocks-per-row"))
        self.block_bytes = int(sheet.get("data-block-bytes"))
        self.col_x = {int(t.get("data-npu")): float(t.get("data-x"))
                      for t in sheet.iter(f"{NS}text") if t.get("class") == "npu-header"}
        self.row_y = {int(t.get("data-offset")): float(t.get("data-y"))
                      for t in sheet.iter(f"{NS}text") if t.get("class") == "offset-label"}
        self.blocks = {}
        for r in sheet.iter(f"{NS}rect"):
            if r.get("class") == "block":
                key = (int(r.get("data-npu")), int(r.get("data-offset")))
                assert key not in self.blocks, f"block {key} drawn twice"
                self.blocks[key] = r
        self.row_bands = [(int(r.get("data-first-row-offset")), int(r.get("data-end-offset")))
                          for r in sheet.iter(f"{NS}rect") if r.get("class") == "elision"]
        self.npu_bands = [(int(r.get("data-first-npu")), int(r.get("data-last-npu")))
                          for r in sheet.iter(f"{NS}rect") if r.get("class") == "npu-elision"]

    def kinds(self, kind):
        return {k for k, r in self.blocks.items() if r.get("data-kind") == kind}

    def elided(self, npu, byte):
        return (any(a <= byte < b for a, b in self.row_bands)
                or any(a <= npu <= b for a, b in self.npu_bands))

    def block_at(self, npu, byte):
        """The rect drawn for the block holding ``byte`` of ``npu``, after checking its position."""
        off = byte // self.block_bytes * self.block_bytes
        rect = self.blocks.get((npu, off))
        assert rect is not None, f"no block drawn at NPU {npu}, offset {off}"
        row_bytes = self.per_row * self.block_bytes
        row_off = off // row_bytes * row_bytes
        assert npu in self.col_x and row_off in self.row_y, f"NPU {npu} / row {row_off} has no axis label"
        cell_x = self.col_x[npu] + (off // self.block_bytes - row_off // self.block_bytes) * self.bw
        cell_y = self.row_y[row_off]
        x, y = float(rect.get("x")), float(rect.get("y"))
        w, h = float(rect.get("width")), float(rect.get("height"))
        assert cell_x <= x and x + w <= cell_x + self.bw, f"block NPU {npu} offset {off} is in the wrong column"
        assert cell_y <= y and y + h <= cell_y + self.bh, f"block NPU {npu} offset {off} is in the wrong row"
        return rect


def check_npu_figure(text, address, shape, stride, e, k=1, footprint=None, X=X, S=S, label_of=None):
    """Every element where seed 003 puts it; dummies and empty blocks as the footprint implies."""
    fig = Figure(text)
    R = address % S
    occupied = set()
    N = shape[0]
    fullN = cdiv(N, k) * k
    drawn = 0
    last = R
    for index in itertools.product(range(fullN), *(range(s) for s in shape[1:])):
        npu, byte = seed_location(address, index, stride, e, k, X, S)
        last = max(last, byte + e)
        occupied.add((npu, byte // 4 * 4))
        if fig.elided(npu, byte):
            continue
        rect = fig.block_at(npu, byte)
        per_byte = rect.get("data-bytes").split("|")
        want = "dummy" if index[0] >= N else ",".join(map(str, label_of(index) if label_of else index))
        for j in range(e):
            assert per_byte[(byte + j) % 4] == want, (index, rect.attrib)
        if index[0] < N:
            assert rect.get("data-kind") == "element"
            drawn += 1
    visible_occupied = {b for b in occupied if not fig.elided(*b)}
    assert fig.kinds("element") | fig.kinds("dummy") == visible_occupied
    end = R + (footprint if footprint is not None else last - R)
    first_blk, end_blk = R // 4, cdiv(end, 4)
    frame = {(q, b * 4) for q in range(X) for b in range(first_blk, end_blk)}
    frame = {f for f in frame if not fig.elided(*f)}
    assert set(fig.blocks) == frame
    assert len(fig.kinds("empty")) == len(frame - visible_occupied)
    return fig


# ------------------------------------------------------------------ gallery
@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    out = tmp_path_factory.mktemp("gallery")
    paths = write_gallery(out)
    return {os.path.basename(p): open(p, encoding="utf-8").read() for p in paths}


SEED_NAMES = ["address.svg"] + [f"scatter_{i}.svg" for i in range(4)] + [
    "stride_local_0.svg", "stride_local_1.svg", "align_fp32_start_0_2_3_4_5.svg",
    "align_fp32_start_2_2_3_4_5.svg", "compact_fp32_start_0_2_3_4_5.svg",
    "compact_fp32_start_2_2_3_4_5.svg"] + [f"matrix_w_{w}.svg" for w in (40, 20, 10, 8, 15, 6)] + [
    "aligned_4N.svg", "aligned_2N.svg"]
IMAGE_NAMES = [f"image_{k}.svg" for k in ("IN_OUT_CHANNEL", "IN_OUT_HEIGHT", "IN_OUT_WIDTH", "ARGUMENT",
                                          "CONV2D_FILTER", "DW_CONV2D_FILTER", "WEIGHT_HEIGHT",
                                          "WEIGHT_WIDTH", "WINOGRAD_FILTER")]


def test_gallery_has_the_seed_names_and_an_index(gallery):
    assert len(SEED_NAMES) == 19
    assert set(gallery) == set(SEED_NAMES) | set(IMAGE_NAMES) | {"index.html"}
    index = gallery["index.html"]
    for name, caption, _ in GALLERY:
        assert f'src="{name}"' in index
        assert len(caption) > 40
    for name in SEED_NAMES + IMAGE_NAMES:
        ET.fromstring(gallery[name])  # well-formed XML


def test_address_figure_marks_the_four_addresses(gallery):
    fig = Figure(gallery["address.svg"])
    marks = fig.kinds("mark")
    assert len(marks) == 4
    for name, a in (("A", 340), ("B", 1472), ("C", 2300), ("D", 3088)):
        q, r = a // S, a % S  # seed: A = Q*S + R
        rect = fig.block_at(q, r)
        assert (rect.get("data-kind"), rect.get("data-name")) == ("mark", name)
        assert int(rect.get("data-address")) == a and int(rect.get("data-byte")) == r
    assert fig.row_bands, "the rows between the addresses are elided"
    assert (0, 340 // 4 * 4) in marks and (3, 16) in marks


@pytest.mark.parametrize("case,C,Q", [(0, X - 1, 0), (1, X - 1, 1), (2, X + 2, 0), (3, X + 2, X - 1)])
def test_scatter_figures_place_one_block_per_feature(gallery, case, C, Q):
    fig = Figure(gallery[f"scatter_{case}.svg"])
    N = 2
    cpn = cdiv(Q + C, X)  # seed: channels per NPU
    assert fig.per_row == 1
    for n, c in itertools.product(range(N), range(C)):
        npu, row = (Q + c) % X, n * cpn + (Q + c) // X  # one 4-byte block per feature
        rect = fig.block_at(npu, Q * 0 + row * 4)
        assert rect.get("data-element") == f"{n},{c},0,0"
    assert len(fig.kinds("element")) == N * C
    assert len(fig.kinds("empty")) == N * (cpn * X - C)
    empty_rows = {}
    for npu, off in fig.kinds("empty"):
        empty_rows[off // 4] = empty_rows.get(off // 4, 0) + 1
    if case == 2:  # seed: X - 2 empty blocks in the second block row
        assert empty_rows == {1: X - 2, 3: X - 2}
    if case == 3:  # seed: X - 1 empty blocks in the first and the third row of each batch
        assert cpn == 3 and empty_rows == {0: X - 1, 2: X - 1, 3: X - 1, 5: X - 1}
    if case in (0, 1):  # NPU X - 1 (start 0) or NPU 0 (start 1) holds nothing
        assert {q for q, _ in fig.kinds("empty")} == {X - 1 if Q == 0 else 0}


@pytest.mark.parametrize("name,address,shape,stride", [
    ("stride_local_0.svg", 0, (2, 5, 3, 4), (120, 56, 16, 2)),
    ("stride_local_1.svg", S, (2, 3, 1, 10), (120, 20, 20, 2)),
])
def test_stride_figures(gallery, name, address, shape, stride):
    fig = check_npu_figure(gallery[name], address, shape, stride, 4)
    assert not fig.row_bands


@pytest.mark.parametrize("layout,q", [("aligned", 0), ("aligned", 2), ("compact", 0), ("compact", 2)])
def test_aligned_and_compact_figures(gallery, layout, q):
    shape = (2, 3, 4, 5)
    stride = seed_strides(layout, shape, q, 4)
    prefix = "align" if layout == "aligned" else "compact"
    text = gallery[f"{prefix}_fp32_start_{q}_2_3_4_5.svg"]
    fig = check_npu_figure(text, q * S, shape, stride, 4, footprint=4 * shape[0] * stride[0])
    if layout == "aligned" and q == 0:
        # seed: 32 - 4*5 = 12 empty blocks after each feature; NPU 3 holds nothing
        assert stride == (32, 32, 5, 1)
        assert len(fig.kinds("empty")) == 6 * 12 + 64
    if layout == "aligned" and q == 2:
        assert stride == (64, 32, 5, 1)


@pytest.mark.parametrize("W", [40, 20, 10, 8, 15, 6])
def test_matrix_figures(gallery, W):
    rows, cols = 2, 40
    C = cdiv(cols, W)  # seed: the aligned tensor (N, ceil(M / W), 1, W)
    stride = seed_strides("aligned", (rows, C, 1, W), 0, 4)
    fig = Figure(gallery[f"matrix_w_{W}.svg"])
    held = set()
    for r, col in itertools.product(range(rows), range(cols)):
        npu, byte = seed_location(0, (r, col // W, 0, col % W), stride, 4)
        rect = fig.block_at(npu, byte)
        assert rect.get("data-element") == f"{r},{col}" and rect.get("data-kind") == "element"
        held.add((npu, byte))
    assert fig.kinds("element") == held
    per_npu = rows * stride[0]  # blocks each NPU spans
    assert len(fig.kinds("empty")) == X * per_npu - rows * cols
    if W == 40:
        assert per_npu == 2 * 64  # seed: one row takes 64 blocks
    if W == 15:  # seed: NPU 2 holds only 40 - 2*15 = 10 columns of each row
        assert sum(1 for q, _ in held if q == 2) == rows * 10


@pytest.mark.parametrize("name,shape,dtype,k,e", [
    ("aligned_4N.svg", (6, 5, 4, 5), "int8", 4, 1),
    ("aligned_2N.svg", (3, 5, 4, 5), "int16", 2, 2),
])
def test_mode_figures(gallery, name, shape, dtype, k, e):
    packed = (cdiv(shape[0], k),) + shape[1:]
    stride = seed_strides("aligned", packed, 0, 4)
    fig = check_npu_figure(gallery[name], 0, shape, stride, e, k=k, footprint=4 * packed[0] * stride[0])
    # seed: the packed element (1, 0, 0, 0) holds n = 4, 5 and two dummies (4N) / n = 2 and one dummy (2N)
    rect = fig.blocks[seed_location(0, (k, 0, 0, 0), stride, e, k)[0], 4 * stride[0]]
    assert rect.get("data-bytes") == ("4,0,0,0|5,0,0,0|dummy|dummy" if k == 4 else
                                      "2,0,0,0|2,0,0,0|dummy|dummy")


def test_a_figure_that_disagrees_with_the_layout_fails(gallery):
    text = gallery["align_fp32_start_2_2_3_4_5.svg"]
    root = ET.fromstring(text)
    rects = [r for r in root.iter(f"{NS}rect") if r.get("data-kind") == "element"]
    # Moved one column to the right: the position check must catch it.
    moved = ET.fromstring(text)
    r = [r for r in moved.iter(f"{NS}rect") if r.get("data-kind") == "element"][0]
    r.set("x", str(float(r.get("x")) + float(Figure(text).bw)))
    # Two labels swapped: the data check must catch it.
    swapped = ET.fromstring(text)
    a, b = [r for r in swapped.iter(f"{NS}rect") if r.get("data-kind") == "element"][:2]
    ab, bb = a.get("data-bytes"), b.get("data-bytes")
    a.set("data-bytes", bb)
    b.set("data-bytes", ab)
    stride = seed_strides("aligned", (2, 3, 4, 5), 2, 4)
    for bad in (moved, swapped):
        with pytest.raises(AssertionError):
            check_npu_figure(ET.tostring(bad, encoding="unicode"), 2 * S, (2, 3, 4, 5), stride, 4,
                             footprint=4 * 2 * stride[0])
    assert rects


# -------------------------------------------------------- beyond the gallery
def test_large_tensor_elides_rows_and_npus():
    chip = Chip(64, 65536, 128, name="big")
    shape = (3, 70, 8, 8)  # 70 channels from NPU 60: 3 rows of channels per NPU, elided rows
    t = tensor_layout(chip, 60 * 65536 + 256, shape)
    stride = seed_strides("aligned", shape, 60, 4, X=64)
    text = npu_figure(t, max_rows=12)
    fig = check_npu_figure(text, 60 * 65536 + 256, shape, stride, 4, footprint=4 * 3 * stride[0],
                           X=64, S=65536)
    assert fig.row_bands and fig.npu_bands
    assert len(fig.col_x) <= 8 and len(fig.row_y) <= 12


def test_fp16_and_int8_blocks_hold_several_elements():
    t = tensor_layout(SEED, 4, (1, 2, 3, 3), dtype="int8", layout="compact")
    check_npu_figure(npu_figure(t), 4, (1, 2, 3, 3), seed_strides("compact", (1, 2, 3, 3), 0, 1), 1)
    t = tensor_layout(SEED, 1024 + 8, (2, 5, 1, 3), stride=(12, 3, 3, 1), dtype="fp16")
    check_npu_figure(npu_figure(t), 1024 + 8, (2, 5, 1, 3), (12, 3, 3, 1), 2)


def test_2ic_dummies():
    t = tensor_layout(SEED, 0, (3, 2, 1, 2), dtype="fp32", mode="2IC", layout="compact")
    packed = (2, 2, 1, 2)
    stride = seed_strides("compact", packed, 0, 8)
    check_npu_figure(npu_figure(t), 0, (3, 2, 1, 2), stride, 4, k=2, footprint=8 * 2 * stride[0])


def test_address_figure_of_a_real_chip():
    from tensorlayout.npu import BM1688

    a = 17 * BM1688.lmem_bytes + 4000
    fig = Figure(address_figure(BM1688, {"P": a}))
    rect = fig.block_at(17, 4000)
    assert rect.get("data-kind") == "mark" and int(rect.get("data-address")) == a


def test_npu_figure_rejects_bad_options():
    t = tensor_layout(SEED, 0, (1, 1, 1, 1))
    with pytest.raises(LayoutError, match="label"):
        npu_figure(t, label="colour")
    with pytest.raises(LayoutError, match="max_rows"):
        npu_figure(t, max_rows=0)
    with pytest.raises(LayoutError):
        address_figure(SEED, {"Z": X * S})


# ------------------------------------------------------------------ images
def q4(x):
    return (x + 3) // 4


def image_oracle(kind, shape):
    """(element index -> (x, y, k)) and the image [W, H], from REFERENCE.md section 1."""
    out = {}
    if kind in ("IN_OUT_CHANNEL", "IN_OUT_HEIGHT", "IN_OUT_WIDTH"):
        N, H, W, C = shape
        for n, h, w, c in itertools.product(range(N), range(H), range(W), range(C)):
            if kind == "IN_OUT_CHANNEL":
                out[(n, h, w, c)] = ((c // 4) * W + w, n * H + h, c % 4)
            elif kind == "IN_OUT_HEIGHT":
                out[(n, h, w, c)] = (c * W + w, n * q4(H) + h // 4, h % 4)
            else:
                out[(n, h, w, c)] = (c * q4(W) + w // 4, n * H + h, w % 4)
        size = {"IN_OUT_CHANNEL": (q4(C) * W, N * H), "IN_OUT_HEIGHT": (W * C, N * q4(H)),
                "IN_OUT_WIDTH": (q4(W) * C, N * H)}[kind]
        return out, size
    if kind == "ARGUMENT":
        (L,) = shape
        return {(a,): (a // 4, 0, a % 4) for a in range(L)}, (q4(L), 1)
    if kind == "WINOGRAD_FILTER":
        O, I, _, _ = shape
        T2 = 16  # tile 2: T = 4
        return ({(t, o, i): (i // 4, t * O + o, i % 4)
                 for t, o, i in itertools.product(range(T2), range(O), range(I))}, (q4(I), O * T2))
    A, B, H, W = shape
    for a, b, h, w in itertools.product(range(A), range(B), range(H), range(W)):
        if kind == "CONV2D_FILTER":  # OIHW: a = o, b = i
            out[(a, b, h, w)] = (b, (a // 4) * H * W + h * W + w, a % 4)
        elif kind == "DW_CONV2D_FILTER":  # MIHW: a = m, b = i
            out[(a, b, h, w)] = (a * H * W + h * W + w, b // 4, b % 4)
        elif kind == "WEIGHT_HEIGHT":
            out[(a, b, h, w)] = ((h * W + w) * B + b, a // 4, a % 4)
        elif kind == "WEIGHT_WIDTH":
            out[(a, b, h, w)] = ((h * W + w) * q4(B) + b // 4, a, b % 4)
    size = {"CONV2D_FILTER": (B, H * W * q4(A)), "DW_CONV2D_FILTER": (A * H * W, q4(B)),
            "WEIGHT_HEIGHT": (B * H * W, q4(A)), "WEIGHT_WIDTH": (q4(B) * H * W, A)}[kind]
    return out, size


def check_image_figure(text, kind, shape):
    root = ET.fromstring(text)
    grid = root.find(f".//{NS}g[@class='image-grid']")
    pw, lh = float(grid.get("data-pixel-width")), float(grid.get("data-lane-height"))
    top, left = float(grid.get("data-lane-top")), float(grid.get("data-lane-left"))
    xs = {int(t.get("data-x")): float(t.get("data-left")) for t in grid.iter(f"{NS}text")
          if t.get("class") == "x-label"}
    ys = {int(t.get("data-y")): float(t.get("data-top")) for t in grid.iter(f"{NS}text")
          if t.get("class") == "y-label"}
    lanes = {}
    for r in grid.iter(f"{NS}rect"):
        if r.get("class") == "lane":
            lanes[int(r.get("data-x")), int(r.get("data-y")), int(r.get("data-lane"))] = r
    oracle, (W, H) = image_oracle(kind, shape)
    assert (int(grid.get("data-width")), int(grid.get("data-height"))) == (W, H)
    assert set(lanes) == {(x, y, k) for x in xs for y in ys for k in range(4)}
    seen = 0
    for index, (x, y, k) in oracle.items():
        if x not in xs or y not in ys:
            continue
        r = lanes[x, y, k]
        assert r.get("data-kind") == "element" and r.get("data-element") == ",".join(map(str, index))
        assert float(r.get("x")) == xs[x] + left and float(r.get("x")) + float(r.get("width")) <= xs[x] + pw
        assert float(r.get("y")) == ys[y] + top + k * lh
        seen += 1
    padding = [r for r in lanes.values() if r.get("data-kind") == "padding"]
    assert len(padding) == 4 * len(xs) * len(ys) - seen
    return xs, ys


IMAGE_CASES = {
    "IN_OUT_CHANNEL": (1, 2, 3, 5), "IN_OUT_HEIGHT": (1, 5, 2, 2), "IN_OUT_WIDTH": (1, 2, 5, 2),
    "ARGUMENT": (11,), "CONV2D_FILTER": (5, 3, 1, 1), "DW_CONV2D_FILTER": (1, 5, 2, 2),
    "WEIGHT_HEIGHT": (5, 2, 1, 2), "WEIGHT_WIDTH": (2, 5, 1, 2), "WINOGRAD_FILTER": (2, 5, 3, 3),
}


@pytest.mark.parametrize("kind", list(IMAGE_CASES))
def test_image_gallery_figures(gallery, kind):
    xs, ys = check_image_figure(gallery[f"image_{kind}.svg"], kind, IMAGE_CASES[kind])
    if kind == "WINOGRAD_FILTER":
        assert len(ys) < 32  # 32 rows: elided


@pytest.mark.parametrize("kind,shape", [
    ("IN_OUT_CHANNEL", (2, 3, 17, 9)), ("CONV2D_FILTER", (6, 5, 3, 3)), ("WEIGHT_WIDTH", (3, 9, 2, 2)),
    ("IN_OUT_HEIGHT", (2, 7, 3, 2)), ("DW_CONV2D_FILTER", (2, 6, 2, 2)),
])
def test_larger_images_elide_and_stay_right(kind, shape):
    xs, ys = check_image_figure(image_figure(kind, shape, max_width=6, max_height=5), kind, shape)
    assert len(xs) <= 6 and len(ys) <= 5


def test_image_figure_rejects_bad_input():
    with pytest.raises(LayoutError):
        image_figure("IN_OUT_CHANNEL", (1, 2, 3))
    with pytest.raises(LayoutError):
        image_figure("NOT_A_TYPE", (1,))
    with pytest.raises(LayoutError):
        image_figure("ARGUMENT", (4,), max_width=0)


# --------------------------------------------------------------------- CLI
def test_cli_figures_and_draw(tmp_path, capsys):
    assert main(["figures", "--out", str(tmp_path / "g")]) == 0
    assert len(os.listdir(tmp_path / "g")) == 29
    out = tmp_path / "t.svg"
    assert main(["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "2,3,4,5",
                 "--start-npu", "2", "-o", str(out)]) == 0
    check_npu_figure(out.read_text(), 2 * S, (2, 3, 4, 5), seed_strides("aligned", (2, 3, 4, 5), 2, 4), 4,
                     footprint=4 * 2 * 64)
    assert main(["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "6,5,4,5", "--dtype", "int8",
                 "--mode", "4N", "--layout", "compact", "--address", "4", "-o", str(out)]) == 0
    stride = seed_strides("compact", (2, 5, 4, 5), 0, 4)
    check_npu_figure(out.read_text(), 4, (6, 5, 4, 5), stride, 1, k=4, footprint=4 * 2 * stride[0])
    assert main(["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "2,40", "--layout", "matrix:15",
                 "-o", str(out)]) == 0
    assert 'data-element="1,39"' in out.read_text()
    assert main(["draw", "npu", "--chip", "BM1688", "--shape", "1,3,2,2", "--layout", "stride:12,4,2,1",
                 "-o", str(out)]) == 0
    check_npu_figure(out.read_text(), 0, (1, 3, 2, 2), (12, 4, 2, 1), 4, X=32, S=128 * 1024)
    assert main(["draw", "image", "WEIGHT_HEIGHT", "--shape", "5,2,1,2", "-o", str(out)]) == 0
    check_image_figure(out.read_text(), "WEIGHT_HEIGHT", (5, 2, 1, 2))
    assert main(["draw", "image", "IN_OUT_CHANNEL", "--shape", "1,5,2,3", "--layout", "NCHW",
                 "-o", str(out)]) == 0
    assert 'data-element="0,4,1,2"' in out.read_text()


@pytest.mark.parametrize("argv", [
    ["draw", "npu", "--shape", "1,1,1,1"],                                         # no chip
    ["draw", "npu", "--chip", "BM1684", "--npus", "4", "--shape", "1,1,1,1"],       # both
    ["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "1,2,3"],
    ["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "1,1,1,1", "--layout", "tiled"],
    ["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "1,1,1,1", "--start-npu", "4"],
    ["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "1,1,1,1", "--address", "4"],  # aligned
    ["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "1,1,1,1", "--mode", "4N"],    # fp32
    ["draw", "npu", "--npus", "4", "--lmem", "1024", "--shape", "2,40,1", "--layout", "matrix:8"],
    ["draw", "image", "IN_OUT_CHANNEL", "--shape", "1,x,2,3"],
    ["draw", "image", "CONV2D_FILTER", "--shape", "5,3,3,3", "--filter-format", "XYZW"],
])
def test_cli_bad_input_writes_nothing(tmp_path, capsys, argv):
    out = tmp_path / "bad.svg"
    assert main(argv + ["-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err
    assert not out.exists()


def test_cli_missing_folder(tmp_path, capsys):
    assert main(["draw", "image", "ARGUMENT", "--shape", "5", "-o", str(tmp_path / "no" / "x.svg")]) == 2


def test_demo_part_writes_the_gallery(tmp_path):
    import io

    from tensorlayout.cli_parts import draw

    stream = io.StringIO()
    draw.demo(Tour(str(tmp_path), stream))
    text = stream.getvalue()
    folder = tmp_path / "figures"
    assert str(folder) in text and "28 SVG files" in text
    assert len(list(folder.glob("*.svg"))) == 28 and (folder / "index.html").exists()
