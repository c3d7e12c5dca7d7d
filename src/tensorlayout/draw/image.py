"""Figures of MACE RGBA images: which buffer element every lane of every pixel holds.

The figure is drawn from :func:`tensorlayout.image.image_layout`: the pixel
grid with x and y axes, each pixel split into its four lanes R, G, B, A, each
lane labelled with the buffer index it holds; padding lanes (written as 0) are
hatched grey.  Beside the image, the buffer it comes from: its format, shape
and, for small tensors, the buffer itself row by row, each element showing the
pixel and lane it goes to, in the same colours.  Lanes are coloured by the
lane group of the split dimension (``c // 4`` for IN_OUT_CHANNEL, ``o // 4``
for CONV2D_FILTER, ...), so the four elements that share a pixel share a colour.

>>> svg = image_figure("IN_OUT_CHANNEL", (1, 2, 3, 5))
>>> svg.count('data-kind="element"'), svg.count('data-kind="padding"')
(30, 18)
"""

from __future__ import annotations


import numpy as np

from ..errors import check_positive_int
from ..image import ImageType, buffer_format, image_layout, image_type, row
from ._sheet import fit_size
from ._svg import DUMMY_FILL, PALETTE, Svg, text_width

__all__ = ["image_figure", "IMAGE_FORMULAS"]

LANES = "RGBA"
DOT = "\u00b7"

#: What lane k of pixel (x, y) holds, per type (REFERENCE.md section 1, in words): the
#: ``holds`` formula of each type's row in :data:`tensorlayout.image.ROWS`.
IMAGE_FORMULAS = {kind: row(kind).holds for kind in ImageType}

MARGIN = 16
AXIS_W = 46
PIXEL_W = 100
LANE_H = 15
PIXEL_PAD = 3
LANE_LEFT = 16
PIXEL_H = 4 * LANE_H + 2 * PIXEL_PAD
GAP = 30


def _keep(n: int, limit: int) -> list[int]:
    if n <= limit:
        return list(range(n))
    head = max(1, limit - 2)
    return list(range(head)) + list(range(n - (limit - head), n))


def _tup(idx) -> str:
    return "(" + ",".join(str(int(v)) for v in idx) + ")"


def _split_dim(lay) -> int:
    """The logical dimension whose innermost digit is the lane (stride 1)."""
    for i, name in enumerate(lay.dims):
        if lay.digits_of(name)[0].stride == 1 and lay.digits_of(name)[0].radix == 4:
            return i
    return 0


def _place(values, start, step):
    """Positions of the drawn pixel columns (or rows) ``values``, a gap where they skip some.

    Returns ``(position of each value, gaps as (position, first skipped, last skipped), end)``.
    """
    pos, gaps, at = {}, [], start
    for j, v in enumerate(values):
        if j and v != values[j - 1] + 1:
            gaps.append((at, values[j - 1] + 1, v - 1))
            at += GAP
        pos[v] = at
        at += step
    return pos, gaps, at


def image_figure(kind, shape, *, layout=None, filter_format=None, tile=None,
                 heading: str | None = None, max_width: int = 10, max_height: int = 12,
                 max_buffer: int = 96) -> str:
    """SVG text of the RGBA image of ``kind`` holding a tensor of ``shape`` (buffer-format order).

    Image columns past ``max_width`` and rows past ``max_height`` are elided between the
    first and the last ones.  The buffer is drawn element by element when it has at most
    ``max_buffer`` elements.  For WINOGRAD_FILTER (``tile`` 2, 4 or 6) the lanes hold the
    transformed filter U[t, o, i].

    >>> svg = image_figure("CONV2D_FILTER", (5, 3, 1, 1))          # OIHW, image [3, 2]
    >>> 'data-x="2" data-y="1" data-lane="0" data-kind="element" data-element="4,2,0,0"' in svg
    True
    """
    check_positive_int("max_width", max_width)
    check_positive_int("max_height", max_height)
    kind = image_type(kind)
    fmt = buffer_format(kind, layout=layout, filter_format=filter_format)
    lay = image_layout(kind, shape, layout=layout, filter_format=filter_format, tile=tile)
    height, width, _ = lay.physical_shape
    xs, ys = _keep(width, max_width), _keep(height, max_height)
    split = _split_dim(lay)
    dims = "".join(lay.dims).upper()

    # What every drawn lane holds, from the layout's location -> element map.
    Y, Xg, K = np.meshgrid(np.array(ys), np.array(xs), np.arange(4), indexing="ij")
    index, valid = lay.element_at((Y, Xg, K))
    index = np.stack([np.asarray(i) for i in index], axis=-1)  # (len(ys), len(xs), 4, ndim)

    svg = Svg(title=heading or f"{kind.name} image")
    y = MARGIN
    shape_t = tuple(int(s) for s in shape)
    title = []
    if heading:
        title.append(heading)
    fmt_s = "(" + ", ".join(f"{a} = {v}" for a, v in zip(fmt, shape_t)) + ")"
    title.append(f"{kind.name} image (MACE type {int(kind)}) of a buffer in {fmt} format, {fmt_s}"
                 + (f", Winograd tile {tile}" if tile else ""))
    r = row(kind, fmt)
    title.append(f"image [width, height] = {r.size_text(dot=DOT)} = [{width}, {height}] RGBA pixels; "
                 f"lane k of pixel (x, y) holds {r.holds}")
    for k, line in enumerate(title):
        size = 15 if k == 0 else 11.5
        svg.text(MARGIN, y + size, line, size=size, weight="bold" if k == 0 else None, cls="title")
        y += size + 6
    y += 8

    grid = svg.group(cls="image-grid", data={
        "width": width, "height": height, "pixel-width": PIXEL_W, "pixel-height": PIXEL_H,
        "lane-height": LANE_H, "lane-top": PIXEL_PAD, "lane-left": LANE_LEFT, "dims": dims})
    x0 = MARGIN + AXIS_W
    col_x, col_gaps, grid_right = _place(xs, x0, PIXEL_W)
    svg.text(x0 - 8, y + 12, "y \\ x", size=10, anchor="end", italic=True, parent=grid)
    for x in xs:
        svg.text(col_x[x] + PIXEL_W / 2, y + 12, f"x = {x}", size=10.5, anchor="middle", weight="bold",
                 cls="x-label", data={"x": x, "left": col_x[x]}, parent=grid)
    y += 20
    row_y, row_gaps, grid_bottom = _place(ys, y, PIXEL_H)
    for yy in ys:
        svg.text(x0 - 8, row_y[yy] + PIXEL_H / 2 + 4, f"y = {yy}", size=10.5, anchor="end", weight="bold",
                 cls="y-label", data={"y": yy, "top": row_y[yy]}, parent=grid)
    for top, a, b in row_gaps:
        svg.rect(x0, top + 3, grid_right - x0, GAP - 6, fill="#f4f4f4", stroke="none", cls="elision",
                 data={"first-y": a, "last-y": b}, parent=grid)
        svg.text((x0 + grid_right) / 2, top + GAP / 2 + 4, f"\u22ee rows y = {a}\u2013{b} not drawn",
                 size=10, anchor="middle", italic=True, parent=grid)
    for left, a, b in col_gaps:
        svg.rect(left + 3, y, GAP - 6, grid_bottom - y, fill="#f4f4f4", stroke="none", cls="elision",
                 data={"first-x": a, "last-x": b}, parent=grid)
        svg.text(left + GAP / 2, y + 14, "\u22ef", size=13, anchor="middle", parent=grid)

    lanes = svg.group(parent=grid, cls="lanes")
    colour_of = {}
    for iy, yy in enumerate(ys):
        for ix, x in enumerate(xs):
            px, py = col_x[x], row_y[yy]
            svg.rect(px + 1, py + 1, PIXEL_W - 2, PIXEL_H - 2, fill="#fafafa", stroke="#333333",
                     stroke_width=1.2, cls="pixel", data={"x": x, "y": yy}, parent=lanes)
            for k in range(4):
                ly = py + PIXEL_PAD + k * LANE_H
                data = {"x": x, "y": yy, "lane": k}
                if valid[iy, ix, k]:
                    idx = index[iy, ix, k]
                    group = int(idx[split]) // 4
                    fill = colour_of.setdefault(group, PALETTE[group % len(PALETTE)])
                    data.update({"kind": "element", "element": ",".join(str(int(v)) for v in idx)})
                    label = _tup(idx)
                    tip = f"pixel ({x}, {yy}) lane {LANES[k]}: element {label}"
                else:
                    fill, label = DUMMY_FILL, "padding 0"
                    data["kind"] = "padding"
                    tip = f"pixel ({x}, {yy}) lane {LANES[k]}: padding, written as 0"
                svg.rect(px + LANE_LEFT, ly, PIXEL_W - LANE_LEFT - 4, LANE_H, fill=fill, stroke="#666666", stroke_width=0.6,
                         cls="lane", data=data, tooltip=tip, parent=lanes)
                svg.text(px + 9, ly + LANE_H - 4, LANES[k], size=9, anchor="middle", weight="bold",
                         fill="#444444", parent=lanes)
                fs = fit_size(label, PIXEL_W - LANE_LEFT - 4, 9.5)
                if fs:
                    svg.text(px + LANE_LEFT + (PIXEL_W - LANE_LEFT - 4) / 2, ly + LANE_H - 4, label, size=fs, anchor="middle",
                             mono=True, parent=lanes)

    # The buffer beside the image.
    bx = grid_right + 40
    by = y
    count = lay.count
    n_pad = width * height * 4 - count
    split_name = lay.dims[split]
    transformed = row(kind).transform is not None
    src = "transformed filter U" if transformed else f"{fmt} buffer"
    info = [f"buffer: {fmt}" + (f" weights {tuple(shape_t)} \u2192 U[t, o, i] {lay.shape}"
                                if transformed else f" {shape_t}"),
            f"lanes label the {src} index ({', '.join(lay.dims)})",
            f"{count} elements in {width * height} pixels: {n_pad} padding lanes",
            f"colour: {split_name} // 4, the lane group of {split_name}"]
    for line in info:
        svg.text(bx, by + 12, line, size=11, cls="buffer-info")
        by += 17
    buf_right = bx + max(text_width(s, 11, mono=False) for s in info)
    by += 8
    if count <= max_buffer:
        inner = lay.shape[-1]
        rows = count // inner
        cell_w, cell_h = 46, 16
        svg.text(bx, by + 11, f"{src}, row by row (last index {lay.dims[-1]} across); "
                 "each cell: pixel x,y and lane", size=10, italic=True)
        buf_right = max(buf_right, bx + text_width("x" * 78, 10, mono=False))
        by += 18
        all_idx = np.indices(lay.shape).reshape(lay.ndim, -1)
        yy_, xx_, kk_ = lay.locate(tuple(all_idx))
        bufg = svg.group(cls="buffer")
        for r in range(rows):
            prefix = _tup(all_idx[:-1, r * inner]) if lay.ndim > 1 else ""
            prefix = prefix[:-1] + ",\u00b7)" if prefix else ""
            svg.text(bx + 64, by + r * cell_h + 12, prefix, size=9, anchor="end", mono=True, parent=bufg)
            for j in range(inner):
                e = r * inner + j
                idx = all_idx[:, e]
                group = int(idx[split]) // 4
                fill = colour_of.get(group, PALETTE[group % len(PALETTE)])
                cx = bx + 68 + j * cell_w
                lab = f"{int(xx_[e])},{int(yy_[e])}{LANES[int(kk_[e])]}"
                svg.rect(cx, by + r * cell_h, cell_w - 2, cell_h - 2, fill=fill, stroke="#666666",
                         stroke_width=0.6, cls="buffer-cell",
                         data={"element": ",".join(str(int(v)) for v in idx), "x": int(xx_[e]),
                               "y": int(yy_[e]), "lane": int(kk_[e])}, parent=bufg)
                fs = fit_size(lab, cell_w - 2, 9)
                if fs:
                    svg.text(cx + (cell_w - 2) / 2, by + r * cell_h + 11, lab, size=fs, anchor="middle",
                             mono=True, parent=bufg)
            buf_right = max(buf_right, bx + 68 + inner * cell_w)
        by += rows * cell_h
    else:
        svg.text(bx, by + 11, f"(the buffer has {count} elements: too many to draw one by one)",
                 size=10, italic=True)
        by += 18

    bottom = max(grid_bottom, by) + 16
    svg.rect(x0, bottom, 16, 12, fill=DUMMY_FILL, stroke="#666666", cls="legend")
    svg.text(x0 + 22, bottom + 10, "padding lane: holds no element, written as exactly 0", size=10.5)
    bottom += 20
    total_w = max(buf_right, grid_right) + MARGIN
    for k, line in enumerate(title):
        total_w = max(total_w, MARGIN + text_width(line, 15 if k == 0 else 11.5, mono=False) + MARGIN)
    return svg.finish(total_w, bottom + MARGIN, data={"figure": "image", "kind": kind.name})
