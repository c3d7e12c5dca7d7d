"""Resize and Upsample: nearest, linear and cubic over any axes, every coordinate
transformation mode of ONNX, antialiasing, exclude_outside, the aspect-ratio policies and
tf_crop_and_resize's region and extrapolation value.

Each resized axis is one small table: for every output index, the input indices it reads
and their weights (one tap for nearest, two for linear, four for cubic, more where an
antialiasing filter is stretched over a downscaled axis).  The axes are resized one after
the other, so an N-linear or N-cubic resize is the product of the 1-D ones, as ONNX
defines it.  Scales, sizes and the region may be computed at run time: the tables are then
made on each run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._base import axis, ints, register

__all__ = ["Resize", "source_coords", "resize_taps"]

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True)
class Resize:
    """``out``: the output shape; ``scales``: per axis, as ONNX uses them in the coordinate
    transformation (given, or out / in when sizes are given); both None when the scales or
    sizes are computed at run time.  ``roi``: tf_crop_and_resize's (start, end) per axis;
    ``axes``: the axes scales / sizes / roi name (None: all); ``policy``: how sizes keep the
    aspect ratio; ``cubic_a``, ``exclude_outside``, ``antialias``, ``extrapolation``: as
    ONNX names them."""

    mode: str
    coord: str
    nearest: str
    out: tuple | None
    scales: tuple | None
    roi: tuple | None = None
    axes: tuple | None = None
    policy: str = "stretch"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    extrapolation: float = 0.0

    @property
    def host_only(self) -> str:
        if self.out is None:
            return "its scales, sizes or region are computed at run time"
        if self.antialias or self.exclude_outside or self.roi is not None \
                or self.mode == "cubic" or self.coord == "half_pixel_symmetric":
            return "this resize (cubic, antialiased, cropped or half_pixel_symmetric) runs " \
                   "on the CPU runtime only"
        return ""


def source_coords(mode, out_len, in_len, scale, roi=(0.0, 1.0)):
    """The input coordinate of each output index along one axis (ONNX's formulas; the
    output length in align_corners and half_pixel_symmetric is the unrounded in_len * scale,
    as ONNX's reference does).

    >>> source_coords("align_corners", 2, 4, 0.6).tolist()
    [0.0, 2.142857142857143]
    """
    i = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (in_len * scale)
        offset = in_len / 2 * (1 - adjustment)
        return offset + (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        length = in_len * scale
        return i * (in_len - 1) / (length - 1) if length != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return i / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_len > 1:
            return start * (in_len - 1) + i * (end - start) * (in_len - 1) / (out_len - 1)
        return np.full(out_len, 0.5 * (start + end) * (in_len - 1))
    return (i + 0.5) / scale  # tf_half_pixel_for_nn


def _nearest_index(x, rule):
    if rule == "floor":
        return np.floor(x)
    if rule == "ceil":
        return np.ceil(x)
    half = x - np.floor(x) == 0.5
    if rule == "round_prefer_floor":
        return np.where(half, np.floor(x), np.round(x))
    return np.where(half, np.ceil(x), np.round(x))


def _cubic_kernel(t, coeff):
    t = np.abs(t)
    near = ((coeff + 2) * t - (coeff + 3)) * t * t + 1
    far = ((coeff * t - 5 * coeff) * t + 8 * coeff) * t - 4 * coeff
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def resize_taps(p: Resize, out_len, in_len, scale, roi=(0.0, 1.0)):
    """``(index, weight, outside)`` of one axis: the input indices (out_len, taps) each output
    reads, their weights, and the outputs tf_crop_and_resize puts outside the input (None for
    the other modes)."""
    x = source_coords(p.coord, out_len, in_len, scale, roi)
    outside = None
    if p.coord == "tf_crop_and_resize":
        outside = (x < 0) | (x > in_len - 1)
    if p.mode == "nearest":
        idx = np.clip(_nearest_index(x, p.nearest), 0, in_len - 1).astype(np.int64)
        return idx[:, None], np.ones((out_len, 1)), outside
    base = np.floor(x)
    ratio = x - base
    reach = 1 if p.mode == "linear" else 2
    stretch = scale if p.antialias and scale < 1 else 1.0
    first = int(math.floor(-reach / stretch)) + 1
    offsets = np.arange(first, 2 - first)
    t = offsets[None, :] - ratio[:, None]
    if p.mode == "linear":
        w = np.maximum(0.0, 1 - np.abs(t * stretch))
    else:
        w = _cubic_kernel(t * stretch, p.cubic_a)
    idx = base[:, None].astype(np.int64) + offsets[None, :]
    if p.exclude_outside:
        w = np.where((idx < 0) | (idx > in_len - 1), 0.0, w)
    if p.exclude_outside or stretch != 1:
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1, total)
    return np.clip(idx, 0, in_len - 1), w, outside


def _plan(fail, p: Resize, shape, scales, sizes, roi):
    """``(out, scales, roi)`` per axis of ``shape`` from the operands (arrays or None)."""
    rank = len(shape)
    axes = list(range(rank)) if p.axes is None else \
        [axis(fail, a, rank, "axes") for a in p.axes]
    k = len(axes)
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if sizes is not None and np.asarray(sizes).size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        fail("exactly one of scales and sizes must be given")
    out, scl = list(shape), [1.0] * rank
    if sizes is not None:
        sizes = ints(sizes)
        if len(sizes) != k:
            fail(f"sizes has {len(sizes)} entries for {k} axes")
        if p.policy != "stretch":
            pick = min if p.policy == "not_larger" else max
            common = pick(s / shape[a] for s, a in zip(sizes, axes))
            sizes = [int(math.floor(common * shape[a] + 0.5)) for a in axes]
            for a, s in zip(axes, sizes):
                out[a], scl[a] = s, common
        else:
            for a, s in zip(axes, sizes):
                out[a], scl[a] = s, (s / shape[a] if shape[a] else 1.0)
    else:
        given = [float(s) for s in np.asarray(scales).reshape(-1)]
        if len(given) != k:
            fail(f"scales has {len(given)} entries for {k} axes")
        if min(given, default=1) <= 0:
            fail(f"scales = {given} is not allowed: scales must be positive")
        for a, s in zip(axes, given):
            out[a], scl[a] = int(math.floor(shape[a] * s)), s
    if min(out, default=1) < 0:
        fail(f"sizes give the output shape {out}")
    region = None
    if p.coord == "tf_crop_and_resize":
        r = [] if roi is None else [float(v) for v in np.asarray(roi).reshape(-1)]
        if len(r) != 2 * k:
            fail(f"roi has {len(r)} entries: tf_crop_and_resize needs 2 x {k}")
        region = [(0.0, 1.0)] * rank
        for i, a in enumerate(axes):
            region[a] = (r[i], r[i + k])
        region = tuple(region)
    return tuple(out), tuple(scl), region


def _parse_resize(ctx):
    upsample = ctx.op == "Upsample"
    mode = ctx.attr("mode", "nearest")
    if upsample and mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear", "cubic"):
        ctx.fail(f"mode = {mode!r} is not supported: nearest, linear or cubic")
    legacy = upsample or ctx.opset < 11
    coord = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode", "half_pixel")
    if coord not in COORD_MODES:
        ctx.fail(f"coordinate_transformation_mode = {coord!r} is not supported: one of "
                 + ", ".join(COORD_MODES))
    rule = "floor" if legacy else ctx.attr("nearest_mode", "round_prefer_floor")
    if rule not in NEAREST_MODES:
        ctx.fail(f"nearest_mode = {rule!r} is not supported: " + ", ".join(NEAREST_MODES))
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        ctx.fail(f"keep_aspect_ratio_policy = {policy!r} is not allowed: stretch, not_larger "
                 "or not_smaller")
    axes = ctx.attr("axes")
    p = Resize(mode, coord, rule, None, None, None,
               None if axes is None else tuple(int(a) for a in axes), policy,
               float(ctx.attr("cubic_coeff_a", -0.75)), bool(ctx.attr("exclude_outside", 0)),
               bool(ctx.attr("antialias", 0)), float(ctx.attr("extrapolation_value", 0.0)))
    if upsample and ctx.opset < 9:
        scales, sizes, roi = ctx.attr("scales"), None, None
        if scales is None:
            ctx.fail("the scales attribute is missing")
        runtime = False
    else:
        where = {"scales": 1, "sizes": None, "roi": None} if legacy else \
            {"roi": 1, "scales": 2, "sizes": 3}
        runtime = ctx.runtime(*(i for i in where.values() if i is not None))
        scales, sizes, roi = (ctx.consts[i] if i is not None and ctx.has_input(i) else None
                              for i in (where["scales"], where["sizes"], where["roi"]))
    if legacy and mode == "nearest" and scales is not None and not runtime \
            and min(float(s) for s in np.asarray(scales).reshape(-1)) < 1:
        ctx.fail("nearest downscaling before opset 11 has no rounding rule runtimes agree on")
    if runtime or not ctx.known(0):
        return p
    out, scl, region = _plan(ctx.fail, p, ctx.shape(0), scales, sizes, roi)
    return Resize(mode, coord, rule, out, scl, region, p.axes, policy, p.cubic_a,
                  p.exclude_outside, p.antialias, p.extrapolation)


def _apply(p, x, out, scl, region):
    y = x
    outside = np.zeros((), bool)
    for a, (o, s, f) in enumerate(zip(out, x.shape, scl)):
        r = region[a] if region is not None else (0.0, 1.0)
        if p.mode == "nearest" and o == s and f == 1 and region is None:
            continue        # an axis kept as it is maps each index to itself, whatever the mode
        idx, w, off = resize_taps(p, o, s, f, r)
        if off is not None:
            outside = outside | off.reshape([-1 if k == a else 1 for k in range(x.ndim)])
        if w.shape[1] == 1 and o == s and np.array_equal(idx[:, 0], np.arange(s)):
            continue
        if s == 0 or o == 0:
            y = np.zeros(y.shape[:a] + (o,) + y.shape[a + 1:], y.dtype)
            continue
        if w.shape[1] == 1:
            y = np.take(y, idx[:, 0], axis=a)
            continue
        bshape = [-1 if k == a else 1 for k in range(y.ndim)]
        wt = np.float64 if x.dtype == np.float64 else np.float32
        acc = None
        for t in range(w.shape[1]):
            part = np.take(y, idx[:, t], axis=a).astype(wt, copy=False) * \
                w[:, t].astype(wt).reshape(bshape)
            acc = part if acc is None else acc + part
        y = acc
    if outside.any():
        y = np.where(outside, p.extrapolation, y)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return np.asarray(y).astype(x.dtype, copy=False)


def _resize_kernel(node, ctx):
    p = node.params
    if p.out is not None:
        return lambda inputs, out_=None: [_apply(p, inputs[0], p.out, p.scales, p.roi)]
    legacy = node.op == "Upsample" or ctx.opset < 11

    def run(inputs, out_=None):
        get = (lambda i: inputs[i] if i < len(inputs) else None)
        if legacy:
            scales, sizes, roi = get(1), None, None
        else:
            roi, scales, sizes = get(1), get(2), get(3)
        out, scl, region = _plan(ctx.fail, p, inputs[0].shape, scales, sizes, roi)
        return [_apply(p, inputs[0], out, scl, region)]
    return run


register("Resize", _parse_resize, _resize_kernel, since=10, dynamic=True)
register("Upsample", _parse_resize, _resize_kernel, since=7, dynamic=True)
