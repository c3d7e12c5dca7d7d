"""What a :class:`~tensorlayout.model.workbench.Comparison` writes: an HTML page with SVG charts,
and a dump of every tensor, logical and physical.

:func:`write_html` draws the SQNR of every compared tensor along the network (the tolerance
as a line, tensors past it red, the first one marked), the compared tensors of lowest SQNR
worst first, the layers that lost the most SQNR themselves, and the whole table.
:func:`write_dump` writes, per side and tensor, an ``.npz`` holding ``logical`` (the tensor
in its ONNX shape, NCHW) and, beside it, each piece of its storage: ``physical_K`` (image
pixels ``(height, width, 4)`` in the image's dtype, NPU local-memory bytes ``(NPUs, bytes)``,
the CPU's array itself) and ``index_K`` (for each logical element its flat position in
``physical_K``, -1 where another piece holds it; a byte offset for NPU bytes), with the
layout that relates them in ``layout`` (JSON).  For every piece,
``logical[i >= 0] == physical.reshape(-1)[i[i >= 0]]`` (NPU bytes: read as float32 words,
``physical.view(numpy.float32).reshape(-1)[i[i >= 0] // 4]``).

>>> import json, os, tempfile, numpy as np
>>> from tensorlayout.model import load, zoo
>>> from tensorlayout.model.workbench import compare
>>> c = compare(load(zoo.tiny_onnx()), a="cpu", b="opencl", keep=True)
>>> d = tempfile.mkdtemp()
>>> html_path = write_html(c, d)
>>> open(html_path).read().count("<svg")
3
>>> index = write_dump(c, os.path.join(d, "dump"))
>>> row = json.load(open(index))["rows"][3]               # d, the MaxPool output
>>> z = np.load(os.path.join(d, "dump", row["file_b"]))
>>> z["logical"].shape, z["physical_0"].shape, json.loads(str(z["layout"]))["pieces"][0]["image"]
((1, 16, 8, 8), (8, 32, 4), [32, 8])
>>> i = z["index_0"]; bool((z["physical_0"].reshape(-1)[i] == z["logical"]).all())
True
"""

from __future__ import annotations

import html
import json
import math
import os
import re

import numpy as np

from .._checks import check_output_path
from ..draw._svg import Svg
from ..errors import LayoutError, short

__all__ = ["write_html", "write_dump", "side_folder", "state_text"]

_OK, _PAST, _EXACT, _LINE = "#77AADD", "#EE6677", "#BBCCEE", "#222222"


def _db(v):
    return "exact" if v is None or v == math.inf else f"{v:.1f}"


def _label(r):
    text = f"{r['node'] or r['tensor']} ({r['op']})"
    if r["layer_b"] and r["node"] and r["layer_b"] != r["node"]:
        text += f" [b: {r['layer_b']}]"
    return text


def _along(c):
    """SQNR of every compared tensor, in the network's order."""
    order = {id(r): k for k, r in enumerate(c.rows)}
    rows = [r for r in c.rows if r["compared"]]
    finite = [r["sqnr_db"] for r in rows if r["sqnr_db"] is not None and r["sqnr_db"] < math.inf]
    line = -20 * math.log10(c.tol) if c.tol > 0 else math.inf
    top = 20 * math.ceil(max(finite + [line if line < math.inf else 0, 20]) / 20)
    left, plot_h, top_y = 56, 260, 40
    bar = min(24.0, max(3.0, 900.0 / max(len(rows), 1)))
    width = left + bar * len(rows) + 40
    s = Svg()
    s.text(8, 18, f"SQNR of every compared tensor along the network ({c.b} against {c.a}); "
           f"higher is better; red: past the tolerance {c.tol:g}", size=13)
    y0 = top_y + plot_h
    for v in range(0, int(top) + 1, 20):
        y = y0 - plot_h * v / top
        s.line(left - 4, y, left + bar * len(rows), y, stroke="#dddddd", width=0.6)
        s.text(left - 8, y + 4, str(v), size=9, anchor="end")
    s.text(12, top_y - 8, "dB", size=10)
    first = c.first["tensor"] if c.first else None
    for k, r in enumerate(rows):
        v = r["sqnr_db"]
        exact = v is None or v == math.inf
        h = plot_h if exact else plot_h * max(0.0, min(v, top)) / top
        x = left + k * bar
        s.rect(x, y0 - h, max(bar - 1, 1), h, fill=_EXACT if exact else _PAST if r["past"] else _OK,
               stroke="none", cls="bar",
               data={"tensor": r["tensor"], "sqnr": _db(v), "past": int(r["past"]),
                     "row": order[id(r)]},
               tooltip=f"{order[id(r)]}: {_label(r)} - SQNR {_db(v)} dB, rel. L2 {r['rel_l2']:.3g}, cosine "
                       f"{r['cosine']:.9f}" if r["rel_l2"] is not None else _label(r))
        if r["tensor"] == first:
            s.line(x + bar / 2, top_y - 4, x + bar / 2, y0 - h, stroke=_PAST, width=1.2, dash="3,2")
            s.text(x + bar / 2 + 3, top_y - 6, f"first past: {order[id(r)]}", size=10, fill=_PAST)
        if len(rows) <= 40 or k % max(1, len(rows) // 20) == 0:
            s.text(x + bar / 2, y0 + 12, str(order[id(r)]), size=8, anchor="middle")
    if line < math.inf and line <= top:
        y = y0 - plot_h * line / top
        s.line(left, y, left + bar * len(rows), y, stroke=_LINE, width=1.2, dash="5,3")
        s.text(left + bar * len(rows) + 4, y + 4, f"tolerance {line:.0f} dB", size=9)
    s.text(left, y0 + 28, "compared tensors in the network's order, numbered as in the table "
           "below; pale bars: exactly equal", size=10)
    return s.finish(max(width + 70, 640), y0 + 40)


def _ranked(title, items, unit):
    """Horizontal bars: ``items`` (label, value, past, note), worst first."""
    label_w, bar_w, row_h, top = 440, 360, 16, 34
    s = Svg()
    s.text(8, 18, title, size=13)
    most = max([v for _, v, _, _ in items if v is not None and v < math.inf] + [1.0])
    y = top
    for label, v, past, note in items:
        short_label = label if len(label) <= 76 else label[:36] + "..." + label[-37:]
        s.text(8, y + row_h - 4, short_label, size=10)
        w = bar_w * max(0.0, v) / most if v is not None and v < math.inf else 0
        s.rect(label_w, y + 2, max(w, 1), row_h - 4, fill=_PAST if past else _OK, stroke="none",
               cls="bar", data={"label": label, "value": _db(v), "past": int(past)})
        s.text(label_w + w + 4, y + row_h - 4, f"{_db(v)} {unit}{note}", size=9)
        y += row_h
    if not items:
        s.text(8, y + 12, "(none)", size=10)
        y += row_h
    return s.finish(label_w + bar_w + 230, y + 12)


def _drop(r):
    v = r["sqnr_drop_db"]
    if v is None:
        return ""
    return f", {v:.1f} dB lost in the layer" if v >= 0 else f", {-v:.1f} dB regained in the layer"


def _table(c):
    head = ["#", "tensor", "node", "op", f"a: {c.a}", f"b: {c.b}", "max |b-a|", "rel. L2",
            "cosine", "SQNR dB", "lost dB", "NaN/inf a", "NaN/inf b"]
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for k, r in enumerate(c.rows):
        def f(v, fmt):
            return "" if v is None else (fmt.format(v) if v == v and abs(v) != math.inf else str(v))
        cells = [k, r["tensor"], r["node"] or "", r["op"], state_text(r, "a"), state_text(r, "b"),
                 f(r["max_abs"], "{:.3g}"), f(r["rel_l2"], "{:.3g}"), f(r["cosine"], "{:.9f}"),
                 _db(r["sqnr_db"]) if r["compared"] else "",
                 f(r["sqnr_drop_db"], "{:.1f}"),
                 "" if r["nan_a"] is None else f"{r['nan_a']}/{r['inf_a']}",
                 "" if r["nan_b"] is None else f"{r['nan_b']}/{r['inf_b']}"]
        cls = " class='past'" if r["past"] else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in cells) + "</tr>")
    return "\n".join(out + ["</table>"])


def state_text(r, side):
    """A row's state on one side, in a few words (what the command's table prints)."""
    state, layer = r[f"state_{side}"], r[f"layer_{side}"]
    if state == "fused":
        return f"fused in {layer}"
    if state == "computed":
        return "stored" if layer in (None, r["node"]) else f"by {layer}"
    if state == "recomputed":
        return f"recomputed ({layer})"
    return state


def write_html(c, out_dir) -> str:
    """Write ``index.html`` for the comparison ``c`` into ``out_dir`` (made if needed, checked
    first); returns its path."""
    out_dir = check_output_path("out_dir", out_dir, folder=True)
    worst = sorted((r for r in c.rows if r["compared"] and r["sqnr_db"] is not None
                    and r["sqnr_db"] < math.inf), key=lambda r: r["sqnr_db"])[:20]
    lost = sorted((r for r in c.rows if r["sqnr_drop_db"] is not None and r["sqnr_drop_db"] > 0),
                  key=lambda r: -r["sqnr_drop_db"])[:20]
    charts = [_along(c),
              _ranked("Lowest SQNR first (worst 20)",
                      [(_label(r), r["sqnr_db"], r["past"], _drop(r)) for r in worst], "dB"),
              _ranked("SQNR lost in the layer itself, most first (its inputs' SQNR minus its "
                      "output's)", [(_label(r), r["sqnr_drop_db"], r["past"],
                                     f" lost, SQNR {_db(r['sqnr_db'])} dB") for r in lost], "dB")]
    first = c.first
    head = (f"<p>First tensor past the tolerance {c.tol:g} (relative L2): "
            f"<b>{html.escape(first['tensor'])}</b>, node {html.escape(str(first['node']))} "
            f"({html.escape(first['op'])}), written on {c.b} by layer "
            f"{html.escape(str(first['layer_b']))}: relative L2 {first['rel_l2']:.3g}.</p>"
            if first else f"<p>Every compared tensor is within the tolerance {c.tol:g} "
            "(relative L2).</p>")
    counts = {}
    for r in c.rows:
        counts[r["state_b"]] = counts.get(r["state_b"], 0) + 1
    body = [f"<h1>{html.escape(c.b)} against {html.escape(c.a)}: {html.escape(c.model)}</h1>",
            f"<p>{len(c.rows)} tensors, {sum(r['compared'] for r in c.rows)} compared; on {c.b}: "
            + ", ".join(f"{n} {html.escape(k)}" for k, n in sorted(counts.items())) + ".</p>",
            head]
    body += ["<div>" + svg.split("?>", 1)[-1] + "</div>" for svg in charts]
    body.append(_table(c))
    text = ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>tensorlayout compare"
            "</title><style>body{font-family:sans-serif;margin:1.5em} table{border-collapse:"
            "collapse;font-size:12px} td,th{border:1px solid #ccc;padding:2px 6px;text-align:"
            "left} tr.past td{background:#fde0e0}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
    path = os.path.join(out_dir, "index.html")
    _write(out_dir, path, text, "out_dir")
    return path


def _write(out_dir, path, data, argument):
    try:
        os.makedirs(out_dir, exist_ok=True)
        if isinstance(data, str):
            with open(path, "w", encoding="utf-8") as f:
                f.write(data)
        else:
            np.savez(path, **data)
    except OSError as exc:
        raise LayoutError(f"{argument} = {short(out_dir)!r} is not allowed: it cannot be written "
                          f"there ({exc.strerror or exc})") from None


def side_folder(side, runtime) -> str:
    """The dump's folder for one side: ``a-cpu``, ``b-opencl-half``."""
    return f"{side}-{runtime.replace(':', '-')}"


def write_dump(c, out_dir) -> str:
    """Write every tensor each side holds (see the module's docstring) under ``out_dir`` and
    an ``index.json`` of the rows with each side's file; returns the index's path.  The
    comparison must have been made with ``keep=True``."""
    out_dir = check_output_path("out_dir", out_dir, folder=True)
    rows = []
    for k, r in enumerate(c.rows):
        row = dict(r)
        for side, rt in (("a", c.a), ("b", c.b)):
            h = c.held[side].get(r["tensor"])
            row[f"file_{side}"] = None
            if h is None or h.value is None:
                continue
            name = f"{k:04d}_{re.sub(r'[^A-Za-z0-9._-]+', '_', r['tensor']).strip('_')[:80]}.npz"
            rel = os.path.join(side_folder(side, rt), name)
            data = {"logical": np.asarray(h.value)}
            pieces = []
            for j, (phys, idx, desc) in enumerate(h.pieces):
                data[f"physical_{j}"] = phys
                small = phys.size * phys.itemsize < 2 ** 31
                data[f"index_{j}"] = idx.astype(np.int32 if small else np.int64)
                pieces.append(desc)
            data["layout"] = np.array(json.dumps({
                "tensor": r["tensor"], "runtime": rt, "state": h.state, "layer": h.layer,
                "storage": h.storage, "shape": list(np.shape(h.value)), "pieces": pieces}))
            _write(os.path.join(out_dir, side_folder(side, rt)), os.path.join(out_dir, rel),
                   data, "out_dir")
            row[f"file_{side}"] = rel
        rows.append(row)
    path = os.path.join(out_dir, "index.json")
    _write(out_dir, path, json.dumps(_json({"model": c.model, "a": c.a, "b": c.b, "tol": c.tol,
                                            "rows": rows}), indent=1, allow_nan=False), "out_dir")
    return path


def _json(o):
    """``o`` with the numbers JSON lacks written as strings ("Infinity", "NaN")."""
    if isinstance(o, dict):
        return {k: _json(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_json(v) for v in o]
    if isinstance(o, (float, np.floating)) and not math.isfinite(o):
        return "NaN" if o != o else ("Infinity" if o > 0 else "-Infinity")
    return o.item() if isinstance(o, np.generic) else o
