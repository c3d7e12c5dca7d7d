"""Resize: nearest and (bi)linear, every coordinate transformation mode of ONNX."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._base import ints, register

__all__ = ["Resize", "source_coords"]

COORD_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "cubic", "ceil")


@dataclass(frozen=True)
class Resize:
    """``out``: the output shape; ``scales``: per axis, as ONNX uses them in the coordinate
    transformation (given, or out / in when sizes are given)."""

    mode: str
    coord: str
    nearest: str
    out: tuple
    scales: tuple


def source_coords(mode, out_len, in_len, scale):
    """The input coordinate of each output index along one axis (ONNX's formulas; align_corners
    uses the unrounded output length in_len * scale, as ONNX's reference does)."""
    i = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        length = in_len * scale
        return i * (in_len - 1) / (length - 1) if length != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return i / scale
    return (i + 0.5) / scale  # tf_half_pixel_for_nn


def _nearest_index(x, rule, in_len):
    if rule == "floor":
        idx = np.floor(x)
    elif rule == "ceil":
        idx = np.ceil(x)
    elif rule == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    else:
        idx = np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def _parse_resize(ctx):
    shape = ctx.shape(0)
    rank = len(shape)
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        ctx.fail(f"mode = {mode!r} is not supported: nearest or linear")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 11 else "asymmetric")
    if coord not in COORD_MODES:
        ctx.fail(f"coordinate_transformation_mode = {coord!r} is not supported: one of "
                 + ", ".join(COORD_MODES))
    rule = ctx.attr("nearest_mode", "round_prefer_floor")
    if rule not in NEAREST_MODES or rule == "cubic":
        ctx.fail(f"nearest_mode = {rule!r} is not supported: round_prefer_floor, "
                 "round_prefer_ceil, floor or ceil")
    if ctx.attr("antialias", 0):
        ctx.fail("antialias = 1 is not supported")
    if ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        ctx.fail(f"keep_aspect_ratio_policy = {ctx.attr('keep_aspect_ratio_policy')!r} is not "
                 "supported: stretch only")
    if ctx.attr("axes") is not None:
        ctx.fail("the axes attribute is not supported")
    scales_in = 2 if ctx.opset >= 11 else 1
    scales = ctx.const(scales_in, "scales", required=False)
    sizes = ctx.const(3, "sizes", required=False) if ctx.opset >= 11 else None
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if sizes is not None and np.asarray(sizes).size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        ctx.fail("exactly one of scales and sizes must be given")
    if sizes is not None:
        out = ints(sizes)
        scl = [o / s if s else 1.0 for o, s in zip(out, shape)]
    else:
        scl = [float(s) for s in np.asarray(scales).reshape(-1)]
        if min(scl, default=1) <= 0:
            ctx.fail(f"scales = {scl} is not allowed: scales must be positive")
        out = [int(math.floor(s * f)) for s, f in zip(shape, scl)]
    if len(out) != rank or len(scl) != rank:
        ctx.fail(f"scales / sizes have {len(out)} entries for a rank-{rank} input")
    if mode == "linear" and (rank < 2 or any(o != s for o, s in zip(out[:-2], shape[:-2]))):
        ctx.fail("linear mode resizes the last two axes only (1-D or 2-D linear)")
    return Resize(mode, coord, rule, tuple(out), tuple(scl))


def _resize_kernel(node, ctx):
    p = node.params
    shape = ctx.in_shapes[0]
    rank = len(shape)
    out, scl = p.out, p.scales
    if p.mode == "nearest":
        # an axis kept as it is (scale 1) maps each index to itself, whatever the mode
        index = tuple(
            (np.arange(s) if (o == s and f == 1) else
             _nearest_index(source_coords(p.coord, o, s, f), p.nearest, s)).reshape(
                [-1 if k == a else 1 for k in range(rank)])
            for a, (o, s, f) in enumerate(zip(out, shape, scl)))
        return lambda inputs, out_=None: [inputs[0][index]]

    weights = []
    for a in (rank - 2, rank - 1):
        x = np.clip(source_coords(p.coord, out[a], shape[a], scl[a]), 0, shape[a] - 1)
        x0 = np.floor(x).astype(np.int64)
        x1 = np.minimum(x0 + 1, shape[a] - 1)
        frac = (x - x0).astype(np.float32)
        weights.append((x0, x1, frac))
    (h0, h1, fh), (w0, w1, fw) = weights
    fh = fh[:, None]

    def run(inputs, out_=None):
        x = inputs[0]
        top = x[..., h0, :]
        bot = x[..., h1, :]
        rows = top + (bot - top) * fh
        left = rows[..., w0]
        right = rows[..., w1]
        return [(left + (right - left) * fw).astype(x.dtype, copy=False)]
    return run


register("Resize", _parse_resize, _resize_kernel)
