"""A small SVG writer: rectangles, text and lines with plain presentation attributes.

Figures are built as :mod:`xml.etree.ElementTree` elements, so they are valid
XML by construction and any renderer (a browser, cairo) shows them the same
way.  Every drawn block carries ``data-*`` attributes that say what it shows,
which makes a figure something a test can read back.

>>> s = Svg()
>>> _ = s.rect(10, 20, 30, 40, fill="#fff", cls="block", data={"npu": 1})
>>> text = s.finish(100, 80)
>>> 'data-npu="1"' in text and text.startswith("<?xml")
True
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

__all__ = ["Svg", "PALETTE", "EMPTY_FILL", "EMPTY_STROKE", "DUMMY_FILL", "FONT", "MONO", "text_width"]

SVG_NS = "http://www.w3.org/2000/svg"

#: Paul Tol's "light" scheme less its grey: distinguishable with the common colour-vision
#: deficiencies and light enough for black text on top.
PALETTE = ("#77AADD", "#EE8866", "#EEDD88", "#FFAABB", "#99DDFF", "#44BB99", "#BBCC33", "#AAAA00")

EMPTY_FILL = "#ffffff"
EMPTY_STROKE = "#c8c8c8"
DUMMY_FILL = "url(#dummy-hatch)"
BLOCK_STROKE = "#555555"
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"


def text_width(s: str, size: float, mono: bool = True) -> float:
    """An estimate of the drawn width of ``s`` (monospace: 0.6 em per character)."""
    return len(s) * size * (0.6 if mono else 0.55)


def _fmt(v) -> str:
    if isinstance(v, float):
        r = round(v, 2)
        return str(int(r)) if r == int(r) else str(r)
    return str(v)


class Svg:
    """One SVG document; coordinates are user units (pixels at 100 % zoom)."""

    def __init__(self, title: str | None = None):
        ET.register_namespace("", SVG_NS)
        self.root = ET.Element("svg", {"xmlns": SVG_NS, "version": "1.1"})
        if title:
            ET.SubElement(self.root, "title").text = title
        defs = ET.SubElement(self.root, "defs")
        pat = ET.SubElement(defs, "pattern", {
            "id": "dummy-hatch", "patternUnits": "userSpaceOnUse", "width": "6", "height": "6",
            "patternTransform": "rotate(45)"})
        ET.SubElement(pat, "rect", {"x": "0", "y": "0", "width": "6", "height": "6", "fill": "#d0d0d0"})
        ET.SubElement(pat, "line", {"x1": "0", "y1": "0", "x2": "0", "y2": "6",
                                    "stroke": "#808080", "stroke-width": "2.5"})
        self.body = ET.SubElement(self.root, "g", {"font-family": FONT})

    def group(self, parent=None, cls: str | None = None, data: dict | None = None) -> ET.Element:
        attrs = {}
        if cls:
            attrs["class"] = cls
        for k, v in (data or {}).items():
            attrs[f"data-{k}"] = _fmt(v)
        return ET.SubElement(self.body if parent is None else parent, "g", attrs)

    def rect(self, x, y, w, h, *, fill="none", stroke=BLOCK_STROKE, stroke_width=0.8, cls=None,
             data=None, parent=None, tooltip=None, dash=None) -> ET.Element:
        attrs = {"x": _fmt(x), "y": _fmt(y), "width": _fmt(w), "height": _fmt(h), "fill": fill,
                 "stroke": stroke, "stroke-width": _fmt(stroke_width)}
        if dash:
            attrs["stroke-dasharray"] = dash
        if cls:
            attrs["class"] = cls
        for k, v in (data or {}).items():
            attrs[f"data-{k}"] = _fmt(v)
        el = ET.SubElement(self.body if parent is None else parent, "rect", attrs)
        if tooltip:
            ET.SubElement(el, "title").text = tooltip
        return el

    def text(self, x, y, s, *, size=11, anchor="start", weight=None, mono=False, fill="#000000",
             cls=None, data=None, parent=None, italic=False) -> ET.Element:
        attrs = {"x": _fmt(x), "y": _fmt(y), "font-size": _fmt(size), "text-anchor": anchor,
                 "fill": fill}
        if weight:
            attrs["font-weight"] = weight
        if italic:
            attrs["font-style"] = "italic"
        if mono:
            attrs["font-family"] = MONO
        if cls:
            attrs["class"] = cls
        for k, v in (data or {}).items():
            attrs[f"data-{k}"] = _fmt(v)
        el = ET.SubElement(self.body if parent is None else parent, "text", attrs)
        el.text = s
        return el

    def line(self, x1, y1, x2, y2, *, stroke="#444444", width=1.0, dash=None, parent=None) -> ET.Element:
        attrs = {"x1": _fmt(x1), "y1": _fmt(y1), "x2": _fmt(x2), "y2": _fmt(y2), "stroke": stroke,
                 "stroke-width": _fmt(width)}
        if dash:
            attrs["stroke-dasharray"] = dash
        return ET.SubElement(self.body if parent is None else parent, "line", attrs)

    def finish(self, width, height, data: dict | None = None) -> str:
        """The document as text, sized ``width`` x ``height`` with a white background."""
        width, height = int(round(width)), int(round(height))
        self.root.set("width", str(width))
        self.root.set("height", str(height))
        self.root.set("viewBox", f"0 0 {width} {height}")
        for k, v in (data or {}).items():
            self.root.set(f"data-{k}", _fmt(v))
        bg = ET.Element("rect", {"x": "0", "y": "0", "width": str(width), "height": str(height),
                                 "fill": "#ffffff"})
        self.body.insert(0, bg)
        ET.indent(self.root, space=" ")
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(self.root, encoding="unicode") + "\n"
