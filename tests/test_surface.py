"""The public surface: what the top level exports, one argument order for conv2d everywhere,
and no private name reached across modules."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import tensorlayout as tl
from tensorlayout.errors import LayoutError

PACKAGE = pathlib.Path(tl.__file__).parent


def test_top_level_names_resolve_and_stay_few():
    for name in tl.__all__:
        assert getattr(tl, name) is not None, name
    for sub in ("core", "buffer", "image", "npu", "winograd", "opencl", "draw", "model", "errors"):
        assert sub in dir(tl)
    assert len(tl.__all__) <= 16
    # what moved to its subpackage is reached there
    assert tl.npu.Chip and tl.errors.ShapeError and tl.winograd.transforms and tl.draw.image_figure
    with pytest.raises(AttributeError):
        tl.Chip  # noqa: B018


X = np.ones((1, 4, 6, 6), np.float32)
W = np.ones((2, 4, 3, 3), np.float32)


@pytest.mark.parametrize("call, old", [
    (lambda: tl.conv2d(X, W, None, 1), "stride"),
    (lambda: tl.conv2d(X, W, None, 1, 1, 1, 1, "direct"), "stride, padding, dilation, groups, algorithm"),
    (lambda: tl.winograd.plan_conv2d(X.shape, W, None, 2), "stride"),
    (lambda: tl.opencl.conv2d(X, W, None, 1, "direct"), "padding, algorithm"),
    (lambda: __import__("tensorlayout.npu.bdc").npu.bdc.conv2d(None, None, None, None, None, 1, 2),
     "padding, stride"),
    (lambda: __import__("tensorlayout.npu.bdc").npu.bdc.depthwise2d(None, None, None, None, None, 1),
     "padding"),
])
def test_conv2d_old_positional_form_is_refused_with_the_keyword_form(call, old):
    with pytest.raises(LayoutError, match="old positional form") as err:
        call()
    assert f"{old} " in str(err.value) and "=" in str(err.value).split("write ")[1]


def test_conv2d_keyword_form_is_the_same_in_every_cpu_runtime():
    y = tl.conv2d(X, W, None, padding=1, algorithm="direct")
    p = tl.winograd.plan_conv2d(X.shape, W, None, padding=1, algorithm="direct")
    ref = np.zeros((1, 2, 6, 6))
    xp = np.pad(X.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    for o in range(2):                     # float64 direct loop, the oracle
        for i in range(6):
            for j in range(6):
                ref[0, o, i, j] = (xp[0, :, i:i + 3, j:j + 3] * W[o]).sum()
    assert np.array_equal(y, ref.astype(np.float32)) and np.array_equal(p(X), y)


def test_image_layout_is_built_once_per_shape():
    a = tl.image_layout("IN_OUT_CHANNEL", (1, 2, 3, 5))
    assert tl.image_layout("in_out_channel", [1, 2, 3, 5]) is a


# (module, name) pairs still allowed (none).
_PENDING: set = set()


def test_no_private_name_is_imported_across_modules():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = path.parent
            for _ in range(max(node.level - 1, 0)):
                base = base.parent
            where = base.joinpath(*node.module.split(".")) if node.module else base
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__") or (rel, name) in _PENDING:
                    continue
                if (where / f"{name}.py").exists() or (where / name).is_dir():
                    continue                  # a private module of the package: fine
                found.append(f"{rel}:{node.lineno} imports {name}")
    assert not found, found


def test_an_error_from_inside_names_the_callers_argument():
    with pytest.raises(tl.errors.ShapeError) as err:
        tl.to_image(np.zeros((1, 0, 2, 8), np.float32), "IN_OUT_CHANNEL")
    assert str(err.value).startswith("array.shape[1] = 0 is not allowed") and \
        str(err.value).endswith("(in tensorlayout.to_image)")
    assert err.value.argument == "array.shape"
    with pytest.raises(tl.errors.ShapeError, match=r"^array.shape = \(3, 2, 3, 3\) is not allowed .* C1HW"):
        tl.to_image(np.zeros((3, 2, 3, 3), np.float32), "DW_CONV2D_FILTER", filter_format="C1HW")
