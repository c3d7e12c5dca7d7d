"""The image types' rows are the one table: the docs, the figures and the OpenCL kernels read them.

The rows themselves are checked element by element against per-element loops written from
REFERENCE.md's formulas in test_image.py; here the copies that people read are checked
against the rows.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from tensorlayout.image import ROWS, ImageType, image_layout, row

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOT = "\u00b7"


def _cells(path, first):
    """The cells of every markdown table row of ``path`` whose first cell starts with ``first``."""
    out = []
    for line in (ROOT / path).read_text().splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0].startswith(first):
                out.append(cells)
    return out


def test_readme_image_table_matches_the_rows():
    cells = [c[1] for c in _cells("README.md", "OpenCL image")]
    assert len(cells) == 7
    text = " ".join(cells)
    sizes = {r.size_text(DOT) for r in ROWS.values()}
    # every size the README prints is a row's, and every row's size is printed after its name
    assert set(re.findall(r"\[[^\]]*\]", text)) == sizes
    for (kind, fmt), r in ROWS.items():
        cell = next(c for c in cells if kind.name in c)
        assert r.size_text(DOT) in cell, (kind.name, cell)
        if fmt is not None:
            assert f"{fmt} {r.size_text(DOT)}" in cell, (kind.name, fmt, cell)


def test_images_md_table_matches_the_rows():
    for (kind, fmt), r in ROWS.items():
        cells = [c for c in _cells("docs/images.md", f"{kind.name} (") if fmt is None or fmt in c[2]]
        assert cells, (kind.name, fmt)
        assert cells[0][3].startswith(r.size_text(DOT)), (cells[0], r.size_text(DOT))
        assert cells[0][0] == f"{kind.name} ({int(kind)})"


def test_pixels_cl_is_generated_from_the_rows():
    from tensorlayout.opencl.conv import pixel_macros

    text = (ROOT / "src/tensorlayout/opencl/pixels.cl").read_text()
    assert text == pixel_macros(), "run: python -c 'from tensorlayout.opencl.conv import " \
        "pixel_macros; print(pixel_macros(), end=\"\")' > src/tensorlayout/opencl/pixels.cl"


def _c_eval(macro_line, args):
    """Evaluate a generated C macro with integer arguments, independently of the rows:
    C's / on non-negative ints is Python's //."""
    m = re.match(r"#define PIXEL_(\w+)\(([^)]*)\) \(\(int2\)\((.*)\)\)$", macro_line)
    names = [a.strip() for a in m.group(2).split(",")]
    body = m.group(3).replace("TL_Q", "_q")
    x, y = eval(f"({body})", {"_q": lambda v: (v + 3) // 4}, dict(zip(names, args)))  # noqa: S307
    return m.group(1), x, y


@pytest.mark.parametrize("kind", list(ImageType))
def test_pixel_macros_agree_with_the_layout(kind):
    """Each kernel macro, evaluated on every element, gives the pixel image_layout gives."""
    from tensorlayout.opencl.conv import pixel_macros

    line = next(l for l in pixel_macros().splitlines() if l.startswith(f"#define PIXEL_{kind.name}("))
    r = row(kind)
    if kind == ImageType.ARGUMENT:
        shape = (11,)
    elif kind == ImageType.WINOGRAD_FILTER:
        shape = (5, 6, 3, 3)
    else:
        shape = (3, 5, 2, 7)
    lay = image_layout(kind, shape, tile=2 if kind == ImageType.WINOGRAD_FILTER else None)
    dims, lshape = lay.dims, lay.shape
    lane = dims.index(r.lane)
    for idx in np.ndindex(*lshape):
        y, x, k = lay.locate(idx)
        args = list(idx)
        args[lane] //= 4
        _, mx, my = _c_eval(line, args + list(lshape))
        assert (mx, my, k) == (x, y, idx[lane] % 4), (idx, (x, y, k), (mx, my))
