"""A small HTML report of a :class:`~tensorlayout.model.ModelPlan`, with SVG charts.

Three charts, one row per layer: the image width and height of each layer's output
against the device's maximum, the bytes of live activation images while each layer runs
(the curve whose peak the plan reports), and, with a chip, each layer's working set in
one NPU against its local memory.  Bars past a limit are drawn red and carry
``data-over="1"``.

>>> import tempfile, os
>>> from tensorlayout.model import load, plan_model, zoo
>>> d = tempfile.mkdtemp()
>>> path = write_report(plan_model(load(zoo.tiny_onnx()), chip="BM1688"), d)
>>> os.path.basename(path), open(path).read().count("<svg")
('index.html', 3)
"""

from __future__ import annotations

import html
import os

from .._checks import check_output_path
from ..draw._svg import Svg
from ..errors import LayoutError, short

__all__ = ["write_report"]

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
