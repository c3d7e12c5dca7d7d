"""``tensorlayout buffer``: offsets in a CPU runtime buffer, and where they go in another format.

>>> from tensorlayout.cli import main
>>> main(["buffer", "NCHW", "--shape", "1,3,5,6", "--where", "0,2,4,5", "--to", "NHWC"])
NCHW buffer (activation), shape (1, 3, 5, 6): 90 elements, no padding
  in NHWC the shape is (1, 5, 6, 3)
  element (0, 2, 4, 5)  offset 89  ->  NHWC index (0, 4, 5, 2), offset 89
0
"""

from __future__ import annotations

from ..buffer import BUFFER_FORMATS, buffer_layout, dims_of, kind_of
from ..errors import LayoutError, short
from ._common import int_list, print_json, print_table


def register(sub) -> None:
    p = sub.add_parser(
        "buffer", help="element offsets in a CPU buffer format and in another one",
        description="Offsets of elements in a dense CPU buffer (" + ", ".join(BUFFER_FORMATS)
                    + ") and where they go in another format of the same kind.")
    p.add_argument("format", metavar="FORMAT", help="buffer format: " + ", ".join(BUFFER_FORMATS))
    p.add_argument("--shape", required=True, help="tensor shape in FORMAT's order (a blocked "
                   "format's, NCHW16c: NCHW), e.g. 1,3,5,6")
    p.add_argument("--where", action="append", default=[], metavar="I,J,K,L",
                   help="an element index in FORMAT's order; repeatable")
    p.add_argument("--offset", action="append", default=[], type=int, metavar="K",
                   help="a flat offset into the buffer: the element there (or padding); "
                        "repeatable")
    p.add_argument("--to", default=None, metavar="FORMAT", help="another format of the same kind")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _a(word: str) -> str:
    """'an activation', 'a conv filter'."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def describe(fmt, shape, *, where=(), to=None, offsets=()) -> dict:
    """The answers of ``tensorlayout buffer`` as a dict (what ``--json`` prints)."""
    lay = buffer_layout(fmt, shape)
    fmt = lay.name
    letters = dims_of(fmt)
    out = {"format": fmt, "kind": kind_of(fmt), "shape": list(lay.shape), "elements": lay.count,
           "slots": int(lay.physical_size), "waste": float(lay.padding_waste), "where": [],
           "offsets": []}
    other = None
    if to is not None:
        to = {f.upper(): f for f in BUFFER_FORMATS}.get(str(to).upper(), str(to).upper())
        if to not in BUFFER_FORMATS:
            raise LayoutError(f"--to = {short(to)!r} is not a buffer format: it must be one of {', '.join(BUFFER_FORMATS)}")
        if kind_of(to) != kind_of(fmt):
            raise LayoutError(f"--to = {to!r} holds {_a(kind_of(to))} tensor and {fmt} {_a(kind_of(fmt))} "
                              "tensor: conversion needs two formats of the same kind")
        size = dict(zip(letters, lay.shape))
        other = buffer_layout(to, tuple(size[c] for c in dims_of(to)))
        out["to"] = {"format": to, "shape": list(other.shape)}
    for index in where:
        if len(index) != len(lay.shape):
            raise LayoutError(f"--where = {','.join(map(str, index))!r} is not allowed: an element of "
                              f"{fmt} has {len(lay.shape)} indices")
        entry = {"index": list(index), "offset": lay.locate_flat(tuple(index))}
        if other is not None:
            named = dict(zip(letters, index))
            j = tuple(named[c] for c in dims_of(other.name))
            entry["to"] = {"index": list(j), "offset": other.locate_flat(j)}
        out["where"].append(entry)
    for off in offsets:
        if not 0 <= off < lay.physical_size:
            raise LayoutError(f"--offset = {off} is not allowed: the buffer has "
                              f"{lay.physical_size} slots, 0 to {lay.physical_size - 1}")
        got = lay.element_at((off,))
        out["offsets"].append({"offset": off, "element": None if got is None else list(got)})
    return out


def run(args) -> int:
    info = describe(args.format, int_list(args.shape, "--shape"),
                    where=[int_list(w, "--where") for w in args.where], to=args.to,
                    offsets=args.offset)
    if args.json:
        print_json(info)
        return 0
    pad = ("no padding" if info["slots"] == info["elements"] else
           f"{info['slots']} slots, {info['waste']:.1%} padding")
    print(f"{info['format']} buffer ({info['kind']}), shape {tuple(info['shape'])}: "
          f"{info['elements']} elements, {pad}")
    if "to" in info:
        print(f"  in {info['to']['format']} the shape is {tuple(info['to']['shape'])}")
    rows = []
    for e in info["where"]:
        text = f"offset {e['offset']}"
        if "to" in e:
            text += f"  ->  {info['to']['format']} index {tuple(e['to']['index'])}, offset {e['to']['offset']}"
        rows.append((f"element {tuple(e['index'])}", text))
    for e in info["offsets"]:
        rows.append((f"offset {e['offset']}", "padding (no element)" if e["element"] is None
                     else f"element {tuple(e['element'])}"))
    width = max((len(r[0]) for r in rows), default=0)
    for label, text in rows:
        print(f"  {label:<{width}}  {text}")
    return 0


def demo(tour) -> None:
    tour.section("CPU buffers (seeds 000, 002)")
    tour.print("Dense row-major tensors; the CPU runtime uses NCHW, OIHW, MIHW and W, the GPU side NHWC,")
    tour.print("and MACE up to v0.6 HWOI and HWIM; this library's CPU runtime also blocks channels by 16")
    tour.print("(NCHW16c).  Each sample tensor in every format of its kind:")
    samples = [("activation", "NCHW", (1, 3, 5, 6)), ("conv filter", "OIHW", (8, 3, 3, 3)),
               ("depthwise", "MIHW", (1, 6, 3, 3)), ("bias", "W", (8,))]
    rows = []
    for label, fmt, shape in samples:
        size = dict(zip(fmt, shape))
        probe = tuple(s // 2 for s in shape)
        named = dict(zip(fmt, probe))
        for other in (f for f in BUFFER_FORMATS if kind_of(f) == kind_of(fmt)):
            oshape = tuple(size[c] for c in dims_of(other))
            lay = buffer_layout(other, oshape)
            idx = tuple(named[c] for c in dims_of(other))
            off = lay.locate_flat(idx)
            back = lay.element_at((off + 1,)) if off + 1 < lay.physical_size else None
            rows.append((label, other, "x".join(map(str, oshape)), str(lay.count), f"{lay.padding_waste:.0%}",
                         f"{idx} -> {off}", f"{off + 1} -> {'padding' if back is None else back}"))
    head = ("tensor", "format", "shape", "elements", "waste", "element -> offset", "offset -> element")
    print_table(tour, head, rows)
    tour.print("Try: tensorlayout buffer NCHW --shape 1,3,5,6 --where 0,2,4,5 --to NHWC")
