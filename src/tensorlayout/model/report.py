"""A small HTML report of a :class:`~tensorlayout.model.ModelPlan`, with SVG charts.

Three charts, one row per layer: the image width and height of each layer's output
against the device's maximum, the bytes of live activation images while each layer runs
(the curve whose peak the plan reports), and, with a chip, each layer's working set in
one NPU against its local memory.  Bars past a limit are drawn red and carry
``data-over="1"``.  With a chip, a fourth picture is the network's local memory over time
(:func:`local_memory_svg`): which buffer holds which bytes of each NPU at each instruction of
the NPU program, layer group by layer group, and at the busiest instruction each NPU's bytes.

>>> import tempfile, os
>>> from tensorlayout.model import load, plan_model, zoo
>>> d = tempfile.mkdtemp()
>>> path = write_report(plan_model(load(zoo.tiny_onnx()), chip="BM1688"), d)
>>> os.path.basename(path), open(path).read().count("<svg")
('index.html', 4)
"""

from __future__ import annotations

import html
import os

from .._checks import check_output_path
from ..draw._svg import PALETTE, Svg
from ..errors import LayoutError, short

__all__ = ["write_report", "local_memory_svg"]

_OK, _OVER, _LIMIT = "#77AADD", "#EE6677", "#222222"


def _bars(title, rows, limit, unit, fmt):
    """rows: (label, [(name, value), ...]); one group of bars per row against ``limit``."""
    label_w, bar_w, row_h, top = 190, 420, 14, 34
    n_bars = max((len(v) for _, v in rows), default=1)
    height = top + len(rows) * row_h * n_bars + 30
    top_value = max([limit] + [v for _, vals in rows for _, v in vals]) or 1
    s = Svg()
    s.text(8, 18, title, size=13)
    x_limit = label_w + bar_w * limit / top_value
    y = top
    for label, vals in rows:
        s.text(8, y + row_h - 3, label[:30], size=10)
        for k, (name, v) in enumerate(vals):
            w = max(1.0, bar_w * v / top_value)
            over = v > limit
            s.rect(label_w, y + 1, w, row_h - 2, fill=_OVER if over else _OK, cls="bar",
                   data={"layer": label, "what": name, "value": v, "over": int(over)})
            s.text(label_w + w + 4, y + row_h - 3, f"{name} {fmt(v)}", size=9)
            y += row_h
    s.line(x_limit, top - 6, x_limit, y + 2, stroke=_LIMIT, width=1.5)
    s.text(x_limit + 3, top - 8, f"limit {fmt(limit)} {unit}", size=10)
    return s.finish(label_w + bar_w + 260, height)


def _kib(v):
    return f"{v / 1024:.1f} KiB"


_KIND_FILL = {"act": "#77AADD", "param": "#EE8866", "temp": "#DDDDDD"}
_KIND_NAME = {"act": "activation", "param": "constant", "temp": "temporary or copy"}


def _buffer_name(key):
    kind, _, rest = key.partition(":")
    return rest if kind in ("act", "param") else key


def local_memory_svg(schedule, width: int = 980) -> str:
    """The NPU program's local memory over time: per instruction (x) each buffer's bytes in
    every NPU (y: offset from the start of an NPU's memory), coloured by kind (activation,
    constant, temporary); layer groups between dashed lines, the steps between groups (moves
    in system memory, the host) shaded; under it, at the instruction where activations take
    the most bytes, each NPU's bytes as its tensors lay them out (a tensor's channels fill
    some NPUs more than others).  Every buffer rectangle carries ``data-name``, ``data-offset``,
    ``data-span``, ``data-first`` and ``data-last``.

    >>> from tensorlayout.graph import load_graph
    >>> from tensorlayout.model import zoo
    >>> from tensorlayout.npu import BM1684
    >>> from tensorlayout.schedule.npu import schedule_npu
    >>> svg = local_memory_svg(schedule_npu(load_graph(zoo.tiny_onnx()), BM1684))
    >>> svg.count('class="buffer"') > 10, 'class="npu-bytes"' in svg
    (True, True)
    """
    chip = schedule.chip
    instrs = schedule.instrs
    total = max(len(instrs), 1)
    lives = [(gi, b) for gi, g in enumerate(schedule.groups) for b in g.buffers]
    top = max([off + span for _, (_, _, _, off, span, _, _) in lives] + [1])
    top = int(top * 1.08) + 1
    left, plot_w, plot_h, y0 = 70, width - 230, 300, 40
    s = Svg()
    s.text(8, 18, f"Local memory of {chip.name} over the program's {len(instrs)} instructions: "
           f"bytes of each NPU (offset, of {chip.lmem_bytes // 1024} KiB) held by each buffer", size=13)

    def xs(i):
        return left + plot_w * i / total

    def ys(off):
        return y0 + plot_h * (1 - off / top)

    s.rect(left, y0, plot_w, plot_h, fill="#fafafa", stroke="#999999")
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        off = int(top * frac)
        s.text(left - 6, ys(off) + 4, f"{off / 1024:.0f} KiB", size=9, anchor="end")
    for g in schedule.groups:
        if g.kind != "group":
            s.rect(xs(g.first), y0, max(xs(g.last) - xs(g.first), 0.5), plot_h, fill="#eeeeee",
                   stroke="none", cls="between", data={"group": g.index, "kind": g.kind},
                   tooltip=f"{g.kind}: {', '.join(g.nodes)}")
        else:
            s.line(xs(g.first), y0, xs(g.first), y0 + plot_h, stroke="#666666", dash="3,3")
            s.text(xs(g.first) + 2, y0 + plot_h + 12, f"g{g.index}", size=9)
    for gi, (key, kind, q, off, span, a, b) in lives:
        name = _buffer_name(key)
        s.rect(xs(a), ys(off + span), max(xs(b + 1) - xs(a), 0.6), max(ys(off) - ys(off + span), 0.6),
               fill=_KIND_FILL.get(kind, "#CCCCCC"), stroke="#555555", stroke_width=0.3, cls="buffer",
               data={"name": name, "kind": kind, "group": gi, "npu": q, "offset": off, "span": span,
                     "first": a, "last": b},
               tooltip=f"{name} ({_KIND_NAME.get(kind, kind)}): bytes [{off}, {off + span}) of each NPU "
                       f"from NPU {q}, instructions {a}..{b}")
    s.text(left, y0 + plot_h + 26, "instructions of the NPU program (GDMA and BDC) ->", size=10)
    for k, (kind, fill) in enumerate(_KIND_FILL.items()):
        yy = y0 + 16 * k
        s.rect(left + plot_w + 14, yy, 12, 12, fill=fill)
        s.text(left + plot_w + 30, yy + 10, _KIND_NAME[kind], size=10)
    # the instruction with the most activation bytes: each NPU's bytes, tensor by tensor
    use = [0] * total
    for _, (_, kind, _, off, span, a, b) in lives:
        if kind == "act":
            for i in range(a, min(b + 1, total)):
                use[i] += span
    peak = max(range(total), key=lambda i: use[i]) if lives else 0
    live = [(gi, lb) for gi, lb in lives if lb[5] <= peak <= lb[6]]

    def placed(address, a, b):
        """The tensor an instruction of the buffer's lifetime placed at its address."""
        for ins in instrs[a:b + 1]:
            for _, _, t in ins.operands:
                if int(t.address) == address:
                    return t
        return None
    y1 = y0 + plot_h + 60
    h2 = 180
    s.text(8, y1 - 12, f"At instruction {peak}, where activations take the most ({use[peak] if lives else 0} "
           f"bytes per NPU): each NPU's bytes, {chip.npus} NPUs left to right", size=12)
    s.rect(left, y1, plot_w, h2, fill="#fafafa", stroke="#999999")
    col = plot_w / chip.npus
    names = []
    for gi, (key, kind, q, off, span, a, b) in live:
        name = _buffer_name(key)
        fill = PALETTE[len(names) % len(PALETTE)]
        names.append((name, fill))
        t = placed(q * chip.lmem_bytes + off, a, b)
        ranges = t.npu_ranges() if t is not None else [(off, off + span)] * chip.npus
        for p, r in enumerate(ranges):
            if not r:
                continue
            lo, hi = r
            s.rect(left + p * col, y1 + h2 * (1 - hi / top), max(col - 0.4, 0.4),
                   max(h2 * (hi - lo) / top, 0.5), fill=fill, stroke="none", cls="npu-bytes",
                   data={"name": name, "npu": p, "start": lo, "end": hi},
                   tooltip=f"{name}: NPU {p}, bytes [{lo}, {hi})")
    for k, (name, fill) in enumerate(names[:14]):
        yy = y1 + 14 * k
        s.rect(left + plot_w + 14, yy, 10, 10, fill=fill)
        s.text(left + plot_w + 28, yy + 9, name[:26], size=9)
    if len(names) > 14:
        s.text(left + plot_w + 14, y1 + 14 * 14 + 9, f"... {len(names) - 14} more", size=9)
    for p in range(0, chip.npus, 8):
        s.text(left + p * col, y1 + h2 + 12, str(p), size=9)
    return s.finish(width, y1 + h2 + 30)


def write_report(plan, out_dir) -> str:
    """Write ``index.html`` into ``out_dir`` (created if needed); returns its path.

    ``out_dir`` is checked before anything is written: an existing folder that may be written,
    or a new one in such a folder (see :func:`tensorlayout._checks.check_output_path`).

    >>> from tensorlayout.model import load, plan_model, zoo
    >>> write_report(plan_model(load(zoo.tiny_onnx())), "")
    Traceback (most recent call last):
    ...
    tensorlayout.errors.LayoutError: out_dir = '' is not allowed: it must name a folder
    """
    from .plan import ModelPlan

    if not isinstance(plan, ModelPlan):
        raise LayoutError(f"plan = {short(plan)!r} is not allowed: it must be a ModelPlan "
                          "(tensorlayout.model.plan_model(...))")
    out_dir = check_output_path("out_dir", out_dir, folder=True)
    mem = plan.memory()
    by_producer = {}
    for r in plan.activations:
        if r["producer"] is not None and r["image"] is not None:
            by_producer.setdefault(r["producer"], r)
    limit = max(plan.max_image)
    rows = []
    for name in plan.steps:
        r = by_producer.get(name)
        if r is not None:
            rows.append((name, [("W", r["image"][0]), ("H", r["image"][1])]))
    parts = [_bars(f"Output image [W, H] per layer, against {plan.max_image[0]} x "
                   f"{plan.max_image[1]} ({plan.limits_from})", rows, limit, "px", str)]
    live = [(name, [("live", v)]) for name, v in zip(plan.steps, plan.live)]
    parts.append(_bars(f"Live activation and temporary images while each layer runs ({plan.dtype}); "
                       "limit line = the blocks allocated", live, mem["peak_image_bytes"], "", _kib))
    if plan.chip is not None:
        npu = [(r["layer"], [("set", r["working_set"])]) for r in plan.layers]
        parts.append(_bars(f"Working set in one NPU of {plan.chip.name}, against its "
                           f"{plan.chip.lmem_bytes // 1024} KiB of local memory", npu,
                           plan.chip.lmem_bytes, "", _kib))
        if plan.npu is not None:
            parts.append(local_memory_svg(plan.npu))
    problems = plan.problems()
    body = [f"<h1>Layout plan: {html.escape(plan.model)}</h1>",
            f"<p>Image memory with reuse ({plan.dtype}): {_kib(mem['peak_image_bytes'])} allocated; "
            f"the most live at one layer {_kib(mem['live_peak_bytes'])}, at layer "
            f"{html.escape(str(mem['peak_layer']))}. Weights: {_kib(mem['weight_bytes'])}.</p>",
            "<p>" + (f"{len(problems)} problems:</p><ul>" + "".join(
                f"<li>{html.escape(p)}</li>" for p in problems) + "</ul>" if problems
                     else "No tensor breaks the limits.</p>")]
    for svg in parts:
        body.append("<div>" + svg.split("?>", 1)[-1] + "</div>")
    text = ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>tensorlayout plan</title>"
            "<style>body{font-family:sans-serif;margin:1.5em}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
    path = os.path.join(out_dir, "index.html")
    try:
        os.makedirs(out_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise LayoutError(f"out_dir = {short(out_dir)!r} is not allowed: the report cannot be written "
                          f"there ({exc.strerror or exc})") from None
    return path
