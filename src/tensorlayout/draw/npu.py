"""Figures of NPU local memory: where every byte of a tensor lies, NPU by NPU.

Everything drawn comes from the NPU model (:mod:`tensorlayout.npu`): the
tensor's ``byte_map()`` says which element each byte holds (``-1`` nothing of
this tensor, ``-2`` a dummy of 4N/2N/2IC), and the chip's ``split_address``
places addresses.  The figure has one column per NPU, rows of 4-byte blocks
folded ``blocks_per_row`` to a row, the byte offset of each row on the left,
and every block labelled with the element it holds and coloured by its
feature (n, c).  Blocks of the tensor's footprint that hold nothing are white
with a light outline; dummy blocks are hatched grey.

>>> from tensorlayout.npu import Chip, tensor_layout
>>> t = tensor_layout(Chip(4, 1024, 128), 0, (2, 3, 4, 5), layout="aligned")
>>> svg = npu_figure(t)
>>> svg.count('data-kind="element"'), svg.count('data-kind="empty"')
(120, 136)
"""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import LayoutError, check_positive_int, short
from ._sheet import Block, choose_rows, draw_sheet
from ._svg import DUMMY_FILL, EMPTY_FILL, PALETTE, Svg

__all__ = ["npu_figure", "address_figure", "footprint_bytes", "BLOCK_BYTES"]

#: The seed draws local memory in blocks of 4 bytes (one fp32 element).
BLOCK_BYTES = 4

def _mode_group(mode) -> int:
    """How many n share a packed unit in ``mode`` (1 without a mode)."""
    from ..npu.tensor import MODES

    return MODES[str(mode)][0] if mode else 1


def _tup(idx) -> str:
    return "(" + ",".join(str(int(v)) for v in idx) + ")"


def _csv(idx) -> str:
    return ",".join(str(int(v)) for v in idx)


def _feature(tensor, idx) -> tuple[int, int]:
    """The (n, c) feature an element belongs to, for its colour (a matrix: (row, col // W))."""
    idx = tuple(int(v) for v in idx)
    if getattr(tensor, "matrix_shape", None) is not None:
        return idx[0], idx[1] // int(tensor.cols_per_channel)
    return idx[0], idx[1]


def _element_shape(tensor) -> tuple[int, ...]:
    """The shape ``byte_map`` indexes into: (N, C, H, W), or (rows, cols) for a matrix."""
    return tensor.elements.shape


def footprint_bytes(tensor) -> int:
    """Bytes per NPU from the tensor's offset that the figure spans.

    For the aligned, compact and matrix layouts that is the N stride times the number of
    (packed) batches, so the padding after the last feature shows as it does in the seed;
    for explicit strides, up to the tensor's last byte.
    """
    if tensor.layout_name in ("aligned", "compact", "matrix"):
        outer = tensor.layout.digits_of(tensor.layout.dims[0])[-1]     # n's (a row's) outermost digit
        return int(outer.extent * outer.stride)
    return int(tensor.span)


def _per_row_default(npus_drawn: int, label: str) -> int:
    if label == "feature":
        return 1
    return 8 if npus_drawn <= 4 else 4 if npus_drawn <= 8 else 2


def _fmt_dtype(tensor) -> str:
    from ..npu import DTYPES

    names = {v: k for k, v in DTYPES.items()}
    dt = names.get(np.dtype(tensor.dtype), str(tensor.dtype))
    mode = getattr(tensor, "mode", None)
    if mode:
        k = _mode_group(mode)
        return f"{dt} in {mode} mode (viewed as {dt}x{k})"
    return dt


def _title_lines(tensor, heading, per_row):
    chip = tensor.chip
    ms = getattr(tensor, "matrix_shape", None)
    q, r = tensor.start_npu, tensor.offset
    lines = [heading] if heading else []
    if ms is not None:
        W = tensor.cols_per_channel
        lines.append(f"{ms[0]} × {ms[1]} matrix, {_fmt_dtype(tensor)}, matrix layout with W = {W} "
                     f"columns per channel: the aligned tensor {tuple(tensor.shape)}; blocks show (row, column)")
    else:
        shape_s = "(" + ", ".join(f"{a} = {v}" for a, v in zip("NCHW", tensor.shape)) + ")"
        lines.append(f"tensor {shape_s}, {_fmt_dtype(tensor)}, {tensor.layout_name} layout")
    mode = getattr(tensor, "mode", None)
    unit = "32-bit words" if mode in ("4N", "2N") else "fp32x2 pairs" if mode == "2IC" else "elements"
    stride = tuple(int(s) for s in tensor.stride)
    lines.append(f"strides (n, c, h, w) = {stride} in {unit}; start address {tensor.address} "
                 f"= {q}·{chip.lmem_bytes} + {r}: NPU {q}, offset {r}")
    lines.append(f"{chip.name}: {chip.npus} NPUs × {chip.lmem_bytes} bytes of local memory; "
                 f"blocks of {BLOCK_BYTES} bytes, {per_row} to a row")
    return lines


def npu_figure(tensor, *, heading: str | None = None, blocks_per_row: int | None = None,
               label: str = "element", max_rows: int = 40, max_npus: int = 8,
               notes=()) -> str:
    """SVG text of the local memory a tensor occupies (an ``NpuTensor`` of :mod:`tensorlayout.npu`).

    ``label="element"`` writes each block's element, ``(n,c,h,w)`` (a packed 4N/2N/2IC
    block shows its packed element, e.g. ``(1,0,0,0)x4``, and the n it holds);
    ``label="feature"`` writes only ``(n,c)``, for tensors whose features are one block each.
    Rows past ``max_rows`` are elided between the first and the last ones; with more
    than ``max_npus`` NPUs only the first used ones and the last used one are drawn.

    >>> from tensorlayout.npu import Chip, tensor_layout
    >>> t = tensor_layout(Chip(4, 1024, 128), 2048, (2, 3, 4, 5), layout="aligned")  # NPU 2
    >>> 'data-element="1,2,3,4"' in npu_figure(t)
    True
    """
    from ..npu import NpuTensor

    if not isinstance(tensor, NpuTensor):
        raise LayoutError(f"tensor = {short(tensor)!r} is not allowed: it must be an NpuTensor "
                          "(from tensorlayout.npu.tensor_layout or matrix_layout)")
    if label not in ("element", "feature"):
        raise LayoutError(f"label = {short(label)!r} is not allowed: it must be 'element' or 'feature'")
    check_positive_int("max_rows", max_rows)
    check_positive_int("max_npus", max_npus)
    chip = tensor.chip
    X, S = chip.npus, chip.lmem_bytes
    R = int(tensor.offset)
    span = footprint_bytes(tensor)
    lo = (R // BLOCK_BYTES) * BLOCK_BYTES
    hi = min(S, -(-(R + span) // BLOCK_BYTES) * BLOCK_BYTES)
    used = [q for q, r in enumerate(tensor.npu_ranges()) if r is not None]
    per_row = (_per_row_default(min(X, max_npus), label) if blocks_per_row is None
               else check_positive_int("blocks_per_row", blocks_per_row))
    # Only the rows the sheet will draw are read (the sheet elides the others): a large
    # tensor costs what its figure shows, not X * S bytes of map and a block loop over them.
    first_block, end_block = lo // BLOCK_BYTES, hi // BLOCK_BYTES
    row0, row_end = first_block // per_row, (end_block - 1) // per_row + 1
    drawn = [row0 + r for r in choose_rows(row_end - row0, max_rows)]
    windows = []
    for r in drawn:
        a, b = max(first_block, r * per_row), min(end_block, (r + 1) * per_row)
        if windows and windows[-1][1] == a:
            windows[-1] = (windows[-1][0], b)
        else:
            windows.append((a, b))
    shape = _element_shape(tensor)
    mode = getattr(tensor, "mode", None)
    group = _mode_group(mode)
    ncols = int(tensor.shape[1])
    itemsize = int(np.dtype(tensor.dtype).itemsize)

    blocks = {}
    colours = {}
    any_dummy = any_empty = False
    drawn_blocks = 0
    for wa, wb in windows:
        region = tensor.byte_map(wa * BLOCK_BYTES, wb * BLOCK_BYTES).reshape(X, wb - wa, BLOCK_BYTES)
        drawn_blocks += X * (wb - wa)
        for q, b in zip(*np.nonzero((region != -1).any(axis=2))):
            any_dummy |= _add_block(blocks, colours, tensor, region[q, b], int(q), wa + int(b),
                                    shape, group, ncols, itemsize, label, mode)
    any_empty = len(blocks) < drawn_blocks
    n_batches = -(-int(tensor.shape[0]) // group)
    n_features = n_batches * ncols

    legend = []  # the first features of the whole tensor, drawn or elided
    for feat in itertools.islice(itertools.product(range(n_batches), range(ncols)), 8):
        fill = PALETTE[(feat[0] * ncols + feat[1]) % len(PALETTE)]
        if getattr(tensor, "matrix_shape", None) is not None:
            legend.append((fill, f"row {feat[0]}, channel {feat[1]}"))
        else:
            legend.append((fill, f"{'packed feature' if group > 1 else 'feature'} {_tup(feat)}"))
    if n_features > 8:
        legend.append((None, f"\u2026 {n_features} features in all: the {len(PALETTE)} colours repeat"))
    if any_empty:
        legend.append((EMPTY_FILL, "empty: holds nothing of this tensor"))
    if any_dummy:
        legend.append((DUMMY_FILL, f"dummy (padding of the {mode} mode)"))
    two_lines = label == "element" and any(b.sublabel for b in blocks.values())
    block_w = 60 if label == "element" else 64
    block_h = 32 if two_lines else 20 if label == "element" else 24
    svg = Svg(title=heading or f"{tensor.layout_name} tensor {shape} in NPU local memory")
    width, height = draw_sheet(
        svg, npus=X, lmem=S, block_bytes=BLOCK_BYTES, per_row=per_row, first_block=first_block,
        end_block=end_block, blocks=blocks, title=_title_lines(tensor, heading, per_row),
        legend=legend, max_rows=max_rows, max_npus=max_npus, block_w=block_w, block_h=block_h,
        notes=list(notes), used_npus=used)
    return svg.finish(width, height, data={"figure": "npu", "address": tensor.address,
                                            "start-npu": tensor.start_npu, "offset": R})


def _add_block(blocks, colours, tensor, vals, q, blk, shape, group, ncols, itemsize, label, mode) -> bool:
    """Describe block ``blk`` of NPU ``q`` from its bytes' ``vals``; True if it holds a dummy."""
    valid = vals[vals >= 0]
    offset = blk * BLOCK_BYTES
    if valid.size == 0:
        blocks[(q, blk)] = Block(
            q, offset, "dummy", DUMMY_FILL, data={"bytes": "|".join(
                "dummy" if v == -2 else "-" for v in vals)},
            tooltip=f"NPU {q}, bytes {offset}\u2013{offset + BLOCK_BYTES - 1}: dummy")
        return True
    elems = []
    for f in dict.fromkeys(int(v) for v in valid):
        elems.append(tuple(int(i) for i in np.unravel_index(f, shape)))
    per_byte = []
    for v in vals:
        per_byte.append(_csv(np.unravel_index(int(v), shape)) if v >= 0 else
                        "dummy" if v == -2 else "-")
    feat = _feature(tensor, elems[0])
    if group > 1:  # a packed block belongs to the packed feature (n // k, c)
        feat = (feat[0] // group, feat[1])
    if feat not in colours:
        colours[feat] = PALETTE[(feat[0] * ncols + feat[1]) % len(PALETTE)]
    dummies = tuple(j for j, v in enumerate(vals) if v == -2)
    if label == "feature":
        text, sub = _tup(feat), ""
    elif group > 1:  # the packed int8x4 / int16x2 / fp32x2 element and what it holds here
        packed = (elems[0][0] // group,) + elems[0][1:]
        text = _tup(packed) + f"\u00d7{group}"
        sub = ("i " if mode == "2IC" else "n ") + ",".join(str(e[0]) for e in elems)
        if dummies:
            sub += f" +{len(dummies) // itemsize} dummy"
    elif len(elems) == 1:
        text, sub = _tup(elems[0]), ""
    else:
        text, sub = _tup(elems[0]), "\u2026" + _tup(elems[-1])
    blocks[(q, blk)] = Block(
        q, offset, "element", colours[feat], text, sub, dummies,
        data={"element": " ".join(_csv(e) for e in elems), "bytes": "|".join(per_byte),
              "feature": _csv(feat)},
        tooltip=f"NPU {q}, bytes {offset}\u2013{offset + BLOCK_BYTES - 1}: "
                + ", ".join(_tup(e) for e in elems) + (f" and {len(dummies)} dummy byte(s)" if dummies else ""))
    return bool(dummies)


def address_figure(chip, addresses: dict, *, heading: str | None = None, blocks_per_row: int = 16,
                   max_rows: int = 12) -> str:
    """SVG text marking local addresses in a chip's memory (seed 003's address figure).

    ``addresses`` maps a name to an address (a plain sequence of addresses is named A, B, C,
    ...); each is split by ``chip.split_address`` into (NPU Q, offset R) and the 4-byte block
    holding it is marked.  Rows between the marked ones are elided.

    >>> from tensorlayout.npu import Chip
    >>> svg = address_figure(Chip(4, 1024, 128), {"A": 340, "B": 1472})
    >>> 'data-npu="1" data-offset="448" data-kind="mark" data-address="1472"' in svg
    True
    """
    from ..npu import Chip

    if not isinstance(chip, Chip):
        raise LayoutError(f"chip = {short(chip)!r} is not allowed: it must be a tensorlayout.npu.Chip")
    check_positive_int("blocks_per_row", blocks_per_row)
    check_positive_int("max_rows", max_rows)
    if isinstance(addresses, (list, tuple)):
        if len(addresses) > 26:
            raise LayoutError(f"addresses has {len(addresses)} entries: a plain list is named A to Z, "
                              "so at most 26 (pass a dict of names for more)")
        addresses = {chr(ord("A") + i): a for i, a in enumerate(addresses)}
    if not isinstance(addresses, dict) or not addresses:
        raise LayoutError(f"addresses = {short(addresses)!r} is not allowed: it must be a non-empty "
                          "dict {name: address} or a list of addresses")
    X, S = chip.npus, chip.lmem_bytes
    blocks = {}
    keep = []
    notes = []
    marks = list(addresses.items())
    for k, (name, address) in enumerate(marks):
        q, r = chip.split_address(address)
        b = r // BLOCK_BYTES
        fill = PALETTE[k % len(PALETTE)]
        blocks[(q, b)] = Block(q, b * BLOCK_BYTES, "mark", fill, str(name),
                               data={"address": address, "name": name, "byte": r},
                               tooltip=f"{name} = {address} = {q}\u00b7{S} + {r}: NPU {q}, offset {r}")
        keep.append(b // blocks_per_row)
        notes.append(f"{name} = {address} = {q} \u00b7 {S} + {r}: NPU {q}, offset {r} (block {b} of the NPU)")
    title = [heading] if heading else []
    title.append(f"{chip.name}: {X} NPUs \u00d7 S = {S} bytes; address A = Q\u00b7S + R is NPU Q = A // S, "
                 f"offset R = A mod S")
    title.append(f"blocks of {BLOCK_BYTES} bytes, {blocks_per_row} to a row; the marked block holds the "
                 f"addressed byte")
    svg = Svg(title=heading or "addresses in NPU local memory")
    width, height = draw_sheet(
        svg, npus=X, lmem=S, block_bytes=BLOCK_BYTES, per_row=blocks_per_row, first_block=0,
        end_block=S // BLOCK_BYTES, blocks=blocks, title=title, legend=[], max_rows=max_rows,
        max_npus=8, keep_rows=keep, block_w=24, block_h=20, notes=notes, label_size=11,
        used_npus=sorted({q for q, _ in blocks}))
    return svg.finish(width, height, data={"figure": "address"})
