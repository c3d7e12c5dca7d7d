"""The memory sheet: NPU columns of fixed-size blocks, rows folded and elided, drawn as SVG.

A sheet knows nothing about tensors: it is given the blocks to paint (what each
holds, its colour, its labels) and the byte range each NPU column spans, and
draws them with an offset axis, NPU headers, elision bands and a legend.  The
geometry it used is written on the ``<g class="sheet">`` element
(``data-block-width``, ``data-block-height``, ``data-blocks-per-row``), on
each NPU header (``data-npu`` with its column's left edge in ``data-x``) and on
each offset label (``data-offset`` with its row's top in ``data-y``), so a
reader of the SVG can check that every block sits where its data says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._svg import DUMMY_FILL, EMPTY_FILL, EMPTY_STROKE, Svg, text_width

MARGIN = 16
AXIS_W = 74
PANEL_GAP = 14
GAP_COL_W = 64
ELISION_H = 24
HEADER_H = 22


@dataclass
class Block:
    """One block to paint at ``(npu, offset)`` (offset = the block's first byte)."""

    npu: int
    offset: int
    kind: str  # element | dummy | empty | mark
    fill: str = EMPTY_FILL
    label: str = ""
    sublabel: str = ""
    dummy_bytes: tuple[int, ...] = ()
    data: dict = field(default_factory=dict)
    tooltip: str | None = None


def fit_size(s: str, width: float, size: float, minimum: float = 5.0) -> float | None:
    """The largest font size <= ``size`` at which ``s`` fits ``width``; None if below ``minimum``."""
    if not s:
        return size
    fs = min(size, (width - 4) / max(1, text_width(s, 1.0)))
    return round(fs, 1) if fs >= minimum else None


def choose_rows(n_rows: int, max_rows: int, keep=()) -> list[int]:
    """Which of ``n_rows`` rows to draw: all, or the first and last ones plus ``keep``.

    >>> choose_rows(5, 10)
    [0, 1, 2, 3, 4]
    >>> choose_rows(100, 6)
    [0, 1, 2, 3, 98, 99]
    >>> choose_rows(16, 6, keep=[3, 5, 7])
    [0, 3, 4, 5, 6, 7, 15]
    """
    if n_rows <= max_rows and not keep:
        return list(range(n_rows))
    if keep:
        rows = sorted({0, n_rows - 1} | {r for r in keep if 0 <= r < n_rows})
        # A gap of one row takes as much room as the row: draw it instead.
        rows += [a + 1 for a, b in zip(rows, rows[1:]) if b - a == 2]
        return sorted(rows)
    head = max(1, (2 * max_rows) // 3)
    tail = max(1, max_rows - head)
    return list(range(head)) + list(range(n_rows - tail, n_rows))


def choose_npus(npus: int, used: list[int], max_npus: int) -> list[int]:
    """Which NPU columns to draw: all when they fit, else the first used ones and the last used.

    >>> choose_npus(4, [0, 1], 8)
    [0, 1, 2, 3]
    >>> choose_npus(64, list(range(64)), 6)
    [0, 1, 2, 3, 4, 63]
    """
    if npus <= max_npus:
        return list(range(npus))
    used = sorted(set(used)) or [0]
    pick = used[: max_npus - 1] + [used[-1]]
    if len(pick) < max_npus:  # show a neighbour without data so empty columns are visible too
        extra = [q for q in range(npus) if q not in pick][: max_npus - len(pick)]
        pick += extra
    return sorted(set(pick))


def draw_sheet(svg: Svg, *, npus: int, lmem: int, block_bytes: int, per_row: int,
               first_block: int, end_block: int, blocks: dict, title: list[str],
               legend: list[tuple[str, str]], max_rows: int = 40, max_npus: int = 8,
               keep_rows=(), block_w: float = 60, block_h: float = 20, notes: list[str] = (),
               used_npus=None, label_size: float = 9.0) -> tuple[float, float]:
    """Draw the sheet; returns (width, height) of the figure.

    ``blocks`` maps ``(npu, block_index)`` to :class:`Block`; every other block index in
    ``[first_block, end_block)`` of a drawn NPU is drawn as an empty block.
    """
    row_bytes = per_row * block_bytes
    row0 = first_block // per_row
    row_end = (end_block - 1) // per_row + 1
    rows = [row0 + r for r in choose_rows(row_end - row0, max_rows, [k - row0 for k in keep_rows])]
    used = sorted({q for q, _ in blocks}) if used_npus is None else used_npus
    cols = choose_npus(npus, used, max_npus)

    y = MARGIN
    for k, line in enumerate(title):
        size = 15 if k == 0 else 11.5
        svg.text(MARGIN, y + size, line, size=size, weight="bold" if k == 0 else None, cls="title")
        y += size + 6
    y += 6

    # Column positions (NPU panels and gap columns for elided NPUs).
    panel_w = per_row * block_w
    x = MARGIN + AXIS_W
    col_x = {}
    gaps = []
    prev = None
    for q in cols:
        if prev is not None and q != prev + 1:
            gaps.append((x, prev + 1, q - 1))
            x += GAP_COL_W + PANEL_GAP
        col_x[q] = x
        x += panel_w + PANEL_GAP
        prev = q
    if cols[-1] != npus - 1:
        gaps.append((x, cols[-1] + 1, npus - 1))
        x += GAP_COL_W + PANEL_GAP
    width = x - PANEL_GAP + MARGIN

    sheet = svg.group(cls="sheet", data={
        "npus": npus, "lmem": lmem, "block-bytes": block_bytes, "blocks-per-row": per_row,
        "block-width": block_w, "block-height": block_h})
    head_y = y
    for q in cols:
        svg.text(col_x[q] + panel_w / 2, head_y + 14, f"NPU {q}", size=12, anchor="middle",
                 weight="bold", cls="npu-header", data={"npu": q, "x": col_x[q]}, parent=sheet)
    svg.text(MARGIN + AXIS_W - 6, head_y + 14, "byte offset", size=9.5, anchor="end", italic=True,
             parent=sheet)
    y = head_y + HEADER_H

    # Row positions with elision bands between non-consecutive rows.
    row_y = {}
    bands = []
    prev = None
    for r in rows:
        if prev is not None and r != prev + 1:
            bands.append((y, prev + 1, r - 1))
            y += ELISION_H
        row_y[r] = y
        y += block_h
        prev = r
    grid_bottom = y

    for r in rows:
        svg.text(MARGIN + AXIS_W - 6, row_y[r] + block_h / 2 + 3.5, str(r * row_bytes), size=9,
                 anchor="end", mono=True, cls="offset-label",
                 data={"offset": r * row_bytes, "y": row_y[r]}, parent=sheet)
    for by, ra, rb in bands:
        n = rb - ra + 1
        label = (f"\u22ee {n} row{'s' if n > 1 else ''} not drawn "
                 f"(bytes {ra * row_bytes}\u2013{(rb + 1) * row_bytes - 1})")
        svg.rect(MARGIN + AXIS_W, by + 3, width - MARGIN - AXIS_W - MARGIN, ELISION_H - 6,
                 fill="#f4f4f4", stroke="none", cls="elision",
                 data={"first-row-offset": ra * row_bytes, "end-offset": (rb + 1) * row_bytes},
                 parent=sheet)
        svg.text((MARGIN + AXIS_W + width - MARGIN) / 2, by + ELISION_H / 2 + 4, label, size=10.5,
                 anchor="middle", italic=True, fill="#444444", parent=sheet)
    for gx, qa, qb in gaps:
        n = qb - qa + 1
        svg.rect(gx, head_y, GAP_COL_W, grid_bottom - head_y, fill="#f4f4f4", stroke="none",
                 cls="npu-elision", data={"first-npu": qa, "last-npu": qb}, parent=sheet)
        svg.text(gx + GAP_COL_W / 2, head_y + 14, "\u22ef", size=14, anchor="middle", parent=sheet)
        svg.text(gx + GAP_COL_W / 2, head_y + 40, f"{n} NPU{'s' if n > 1 else ''}", size=9.5,
                 anchor="middle", italic=True, parent=sheet)
        svg.text(gx + GAP_COL_W / 2, head_y + 53, f"{qa}\u2013{qb}" if n > 1 else f"{qa}", size=9.5,
                 anchor="middle", italic=True, parent=sheet)

    # Blocks.
    layer = svg.group(parent=sheet, cls="blocks")
    for r in rows:
        b_lo = max(r * per_row, first_block)
        b_hi = min((r + 1) * per_row, end_block)
        for q in cols:
            for b in range(b_lo, b_hi):
                blk = blocks.get((q, b)) or Block(q, b * block_bytes, "empty")
                bx = col_x[q] + (b - r * per_row) * block_w
                _draw_block(svg, layer, blk, bx, row_y[r], block_w, block_h, block_bytes, label_size)
    y = grid_bottom + 14

    # Legend and notes.
    lx = MARGIN + AXIS_W
    for fill, text in legend:
        if lx + 22 + text_width(text, 10.5, mono=False) > width - MARGIN and lx > MARGIN + AXIS_W:
            lx = MARGIN + AXIS_W
            y += 20
        if fill is not None:
            svg.rect(lx, y, 16, 13, fill=fill, stroke=EMPTY_STROKE if fill == EMPTY_FILL else "#555555",
                     cls="legend")
        svg.text(lx + 21, y + 10.5, text, size=10.5)
        lx += 21 + text_width(text, 10.5, mono=False) + 18
    y += 20 if legend else 0
    for note in notes:
        svg.text(MARGIN + AXIS_W, y + 12, note, size=10.5, fill="#333333", cls="note")
        y += 17
        width = max(width, MARGIN + AXIS_W + text_width(note, 10.5, mono=False) + MARGIN)
    for k, line in enumerate(title):
        size = 15 if k == 0 else 11.5
        width = max(width, MARGIN + text_width(line, size, mono=False) + MARGIN)
    return width, y + MARGIN


def _draw_block(svg, parent, blk: Block, x, y, w, h, block_bytes, label_size):
    data = {"npu": blk.npu, "offset": blk.offset, "kind": blk.kind, **blk.data}
    if blk.kind == "empty":
        svg.rect(x + 1, y + 1, w - 2, h - 2, fill=EMPTY_FILL, stroke=EMPTY_STROKE, stroke_width=0.8,
                 cls="block", data=data, parent=parent,
                 tooltip=blk.tooltip or f"NPU {blk.npu}, bytes {blk.offset}\u2013{blk.offset + block_bytes - 1}: empty")
        return
    fill = DUMMY_FILL if blk.kind == "dummy" else blk.fill
    svg.rect(x + 1, y + 1, w - 2, h - 2, fill=fill, stroke="#555555", stroke_width=0.8, cls="block",
             data=data, parent=parent, tooltip=blk.tooltip)
    for j in blk.dummy_bytes:  # dummy bytes inside an element block: hatched strip
        bw = (w - 2) / block_bytes
        band = min(7.0, 0.22 * h)
        svg.rect(x + 1 + j * bw, y + h - 1 - band, bw, band, fill=DUMMY_FILL,
                 stroke="#555555", stroke_width=0.5, cls="dummy-byte", parent=parent)
    lines = [s for s in (blk.label, blk.sublabel) if s]
    if not lines:
        return
    if len(lines) == 1:
        fs = fit_size(lines[0], w, label_size)
        if fs:
            svg.text(x + w / 2, y + h / 2 + fs * 0.36, lines[0], size=fs, anchor="middle", mono=True,
                     cls="block-label", parent=parent)
        return
    fs = fit_size(lines[0], w, label_size)
    fs2 = fit_size(lines[1], w, label_size * 0.85)
    if fs:
        svg.text(x + w / 2, y + h * 0.36, lines[0], size=fs, anchor="middle", mono=True,
                 cls="block-label", parent=parent)
    if fs2:
        svg.text(x + w / 2, y + h * 0.36 + fs2 + 2, lines[1], size=fs2, anchor="middle", mono=True,
                 fill="#222222", cls="block-sublabel", parent=parent)
