"""Convolution and pooling in their general forms, on the CPU only: any number of spatial
axes, weights computed at run time, ConvTranspose, pooling with dilations, MaxPool's
Indices output and LpPool; and the padding and output-size rules every window op shares.
The 2-D forms every runtime takes (constant weights, windows without those extras) are
:class:`~tensorlayout.graph.ops.nn.Conv` and :class:`~tensorlayout.graph.ops.nn.Pool`; their
parsers hand the rest to this module."""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ._base import register

__all__ = ["ConvND", "PoolND", "parse_conv_nd", "parse_pool_nd", "conv_nd", "conv_transpose",
           "conv_padding", "pool_output_side", "auto_pad"]


def conv_padding(auto_pad, pads, in_sides, kernel, strides, dilations):
    """Begin and end padding per spatial axis from ONNX ``auto_pad`` / ``pads``.

    >>> conv_padding("SAME_UPPER", None, (7, 7), (3, 3), (2, 2), (1, 1))
    ([1, 1], [1, 1])
    >>> conv_padding("SAME_UPPER", None, (8, 8), (3, 3), (2, 2), (1, 1))
    ([0, 0], [1, 1])
    >>> conv_padding("NOTSET", [0, 1, 2, 3], (8, 8), (3, 3), (1, 1), (1, 1))
    ([0, 1], [2, 3])
    """
    n = len(in_sides)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(in_sides, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            b = small if auto_pad == "SAME_UPPER" else total - small
            begin.append(b)
            end.append(total - b)
        return begin, end
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    pads = [0] * (2 * n) if pads is None else list(pads)
    return pads[:n], pads[n:]


def auto_pad(ctx):
    ap = ctx.attr("auto_pad", "NOTSET")
    if ap not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        ctx.fail(f"auto_pad = {ap!r} is not allowed: it must be NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    return ap


def _per_axis(ctx, name, default, d, low=1):
    v = ctx.attr(name)
    v = tuple(default for _ in range(d)) if v is None else tuple(int(t) for t in v)
    if len(v) != d or min(v, default=low) < low:
        ctx.fail(f"{name} = {list(v)} is not allowed: {d} integers of at least {low}, one per "
                 "spatial axis")
    return v


def _pads(ctx, ap, sides, kernel, strides, dilations):
    d = len(sides)
    pads = _per_axis(ctx, "pads", 0, 2 * d, low=0) if ctx.attr("pads") is not None else None
    begin, end = conv_padding(ap, pads, sides, kernel, strides, dilations)
    return tuple(begin), tuple(end)


# ---------------------------------------------------------------------------- convolutions
@dataclass(frozen=True)
class ConvND:
    """A convolution (or, ``transpose``, a ConvTranspose) over ``len(kernel)`` spatial axes,
    its weights and bias read from its inputs on each run: ``begin`` / ``end`` padding per
    axis; ConvTranspose's ``output_padding`` and its output's spatial ``out`` sides."""

    kernel: tuple
    strides: tuple
    dilations: tuple
    begin: tuple
    end: tuple
    group: int
    transpose: bool = False
    output_padding: tuple = ()
    out: tuple = ()

    @property
    def host_only(self) -> str:
        if self.transpose:
            return "ConvTranspose runs on the CPU runtime only"
        return (f"a convolution over {len(self.kernel)} axes, or with weights or bias computed "
                "at run time, runs on the CPU runtime only")


def parse_conv_nd(ctx, w_index=1, b_index=2):
    """:class:`ConvND` of a Conv or ConvTranspose node (static input and weight shapes); the
    weights and bias are inputs ``w_index`` and ``b_index`` (None: no bias) of the node."""
    x = ctx.shape(0, None, "input")
    w = ctx.shape(w_index, len(x), "W")
    d = len(x) - 2
    if d < 1:
        ctx.fail(f"input shape {x} has no spatial axis")
    kernel = _per_axis(ctx, "kernel_shape", 1, d) if ctx.attr("kernel_shape") is not None else w[2:]
    if tuple(kernel) != tuple(w[2:]):
        ctx.fail(f"kernel_shape = {list(kernel)} disagrees with the weights' {list(w[2:])}")
    strides = _per_axis(ctx, "strides", 1, d)
    dil = _per_axis(ctx, "dilations", 1, d)
    group = int(ctx.attr("group", 1))
    C = x[1]
    transpose = ctx.op == "ConvTranspose"
    in_per_group = w[0] // group if transpose else w[1]
    if group < 1 or C % group or (not transpose and w[0] % group) or in_per_group * group != C \
            or (transpose and w[0] != C):
        ctx.fail(f"group = {group} does not fit {C} input channels and weights {list(w)}")
    out_ch = w[1] * group if transpose else w[0]
    if b_index is not None and ctx.has_input(b_index):
        b = ctx.in_shapes[b_index]
        if b is not None and int(np.prod(b)) != out_ch:
            ctx.fail(f"bias has shape {b} for {out_ch} output channels")
    ap = auto_pad(ctx)
    if not transpose:
        begin, end = _pads(ctx, ap, x[2:], kernel, strides, dil)
        return ConvND(tuple(kernel), strides, dil, begin, end, group)
    opad = _per_axis(ctx, "output_padding", 0, d, low=0)
    span = [(k - 1) * dd + 1 for k, dd in zip(kernel, dil)]
    full = [s * (i - 1) + op + sp for s, i, op, sp in zip(strides, x[2:], opad, span)]
    shape = ctx.attr("output_shape")
    if shape is None and ap in ("SAME_UPPER", "SAME_LOWER"):
        shape = [i * s for i, s in zip(x[2:], strides)]
    if shape is not None:
        shape = [int(v) for v in shape][-d:]
        total = [f - o for f, o in zip(full, shape)]
        upper = ap == "SAME_UPPER"
        begin = tuple(t // 2 if upper else t - t // 2 for t in total)
        end = tuple(t - b for t, b in zip(total, begin))
    else:
        begin, end = _pads(ctx, "VALID" if ap == "VALID" else "NOTSET", x[2:], kernel,
                           strides, dil)
    out = tuple(f - b - e for f, b, e in zip(full, begin, end))
    if min(out) < 0:
        ctx.fail(f"the pads {list(begin) + list(end)} leave an output of {list(out)}")
    return ConvND(tuple(kernel), strides, dil, begin, end, group, True, opad, out)


def _letters(n, skip):
    return "".join(c for c in string.ascii_letters if c not in skip)[:n]


def conv_nd(x, w, b, p: ConvND):
    """The convolution ``p`` of ``x`` (N, C, *spatial) by ``w`` (O, C / group, *kernel)."""
    n, c = x.shape[:2]
    d = x.ndim - 2
    g = p.group
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(p.begin, p.end)))
    span = tuple((k - 1) * dd + 1 for k, dd in zip(p.kernel, p.dilations))
    win = sliding_window_view(xp, span, axis=tuple(range(2, 2 + d)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in p.strides)
              + tuple(slice(None, None, dd) for dd in p.dilations)]
    out = win.shape[2:2 + d]
    win = win.reshape((n, g, c // g) + out + tuple(p.kernel))
    wg = w.reshape((g, w.shape[0] // g, c // g) + tuple(p.kernel))
    o, k = _letters(d, "ngcm"), _letters(2 * d, "ngcm")[d:]
    y = np.einsum(f"ngc{o}{k},gmc{k}->ngm{o}", win, wg, optimize=True)
    y = y.reshape((n, w.shape[0]) + out)
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * d)
    return y.astype(x.dtype, copy=False)


def conv_transpose(x, w, b, p: ConvND):
    """The transposed convolution ``p`` of ``x`` (N, C, *spatial) by ``w`` (C, O / group,
    *kernel): each input element adds its kernel times itself at stride spacing."""
    n, c = x.shape[:2]
    g = p.group
    m = w.shape[1]
    sides = x.shape[2:]
    full = [s * (i - 1) + op + (k - 1) * dd + 1 for s, i, op, k, dd in
            zip(p.strides, sides, p.output_padding, p.kernel, p.dilations)]
    y = np.zeros((n, g, m) + tuple(full), np.float64 if x.dtype == np.float64 else np.float32)
    xg = x.reshape((n, g, c // g) + sides)
    wg = w.reshape((g, c // g, m) + tuple(p.kernel))
    for kk in itertools.product(*(range(k) for k in p.kernel)):
        part = np.einsum("ngc...,gcm->ngm...", xg, wg[(Ellipsis,) + kk], optimize=True)
        where = tuple(slice(i * dd, i * dd + (size - 1) * s + 1, s)
                      for i, dd, size, s in zip(kk, p.dilations, sides, p.strides))
        y[(slice(None),) * 3 + where] += part
    y = y.reshape((n, g * m) + tuple(full))
    cut = np.zeros((n, g * m) + p.out, y.dtype)
    src, dst = [], []
    for b0, o, f in zip(p.begin, p.out, full):
        lo, hi = max(b0, 0), min(b0 + o, f)
        src.append(slice(lo, max(lo, hi)))
        dst.append(slice(lo - b0, lo - b0 + max(0, hi - lo)))
    cut[(slice(None), slice(None)) + tuple(dst)] = y[(slice(None), slice(None)) + tuple(src)]
    if b is not None:
        cut = cut + b.reshape((1, -1) + (1,) * len(sides))
    return cut.astype(x.dtype, copy=False)


def conv_nd_kernel(node, ctx):
    p = node.params
    fn = conv_transpose if p.transpose else conv_nd

    def run(inputs, out=None):
        b = inputs[2].reshape(-1) if len(inputs) > 2 and inputs[2] is not None else None
        return [fn(inputs[0], inputs[1], b, p)]
    return run


register("ConvTranspose", parse_conv_nd, conv_nd_kernel)


# ---------------------------------------------------------------------------- pooling
def pool_output_side(size, k, s, d, begin, end, ceil_mode):
    """Output length of a pooling window along one axis (ONNX / PyTorch rule for ceil mode:
    a window may not start inside the end padding).

    >>> pool_output_side(112, 3, 2, 1, 1, 1, False), pool_output_side(55, 3, 2, 1, 0, 0, True)
    (56, 27)
    >>> pool_output_side(6, 3, 2, 1, 0, 0, True)    # the ceil window starts at 4 < 6
    3
    """
    span = (k - 1) * d + 1
    num = size + begin + end - span
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + begin:
        out -= 1
    return out


@dataclass(frozen=True)
class PoolND:
    """MaxPool, AveragePool or LpPool (``kind`` max, avg, lp) over ``len(kernel)`` spatial
    axes: ``extra`` rows the ceil-mode windows reach past ``end`` (never counted); ``indices``:
    MaxPool's second output, the flat index of each maximum (``column_major``: storage_order
    1); ``p``: LpPool's norm."""

    kind: str
    kernel: tuple
    strides: tuple
    dilations: tuple
    begin: tuple
    end: tuple
    extra: tuple
    count_include_pad: bool
    out: tuple
    indices: bool = False
    column_major: bool = False
    p: int = 2

    @property
    def host_only(self) -> str:
        return "this pooling (its rank, dilations, Indices or Lp norm) runs on the CPU runtime only"


def parse_pool_nd(ctx):
    x = ctx.shape(0, None, "input")
    d = len(x) - 2
    if d < 1:
        ctx.fail(f"input shape {x} has no spatial axis")
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != d:
        ctx.fail(f"kernel_shape = {kernel} is not allowed: it must have {d} entries")
    kernel = tuple(int(k) for k in kernel)
    strides, dil = _per_axis(ctx, "strides", 1, d), _per_axis(ctx, "dilations", 1, d)
    kind = {"MaxPool": "max", "AveragePool": "avg", "LpPool": "lp"}[ctx.op]
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    ap = auto_pad(ctx)
    begin, end = _pads(ctx, ap, x[2:], kernel, strides, dil)
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        ceil_mode = False
    out = tuple(pool_output_side(size, k, s, dd, b, e, ceil_mode) for size, k, s, dd, b, e in
                zip(x[2:], kernel, strides, dil, begin, end))
    if min(out) < 1:
        ctx.fail(f"kernel {kernel} does not fit the padded input {x[2:]}")
    extra = tuple(max(0, (o - 1) * s + (k - 1) * dd + 1 - (size + b + e)) for o, s, k, dd, size,
                  b, e in zip(out, strides, kernel, dil, x[2:], begin, end))
    order = int(ctx.attr("storage_order", 0))
    return PoolND(kind, kernel, strides, dil, begin, end, extra,
                  bool(ctx.attr("count_include_pad", 0)), out,
                  len([o for o in ctx.outputs if o]) > 1, order == 1, int(ctx.attr("p", 2)))


def _windows(xp, p):
    d = len(p.kernel)
    span = tuple((k - 1) * dd + 1 for k, dd in zip(p.kernel, p.dilations))
    win = sliding_window_view(xp, span, axis=tuple(range(2, 2 + d)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in p.strides)
              + tuple(slice(None, None, dd) for dd in p.dilations)]
    return win[(slice(None), slice(None)) + tuple(slice(0, o) for o in p.out)]


def pool_nd_kernel(node, ctx):
    p = node.params
    d = len(p.kernel)
    win_axes = tuple(range(2 + d, 2 + 2 * d))
    widths = [(0, 0), (0, 0)] + [(b, e + x) for b, e, x in zip(p.begin, p.end, p.extra)]

    def run(inputs, out=None):
        x = inputs[0]
        if p.kind == "max":
            low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
            win = _windows(np.pad(x, widths, constant_values=low), p)
            y = win.max(axis=win_axes)
            if not p.indices:
                return [y]
            return [y, _argmax_indices(win, x.shape, p)]
        xd = x.astype(np.float64)
        if p.kind == "lp":
            win = _windows(np.pad(np.abs(xd) ** p.p, widths), p)
            return [(win.sum(axis=win_axes) ** (1 / p.p)).astype(x.dtype)]
        total = _windows(np.pad(xd, widths), p).sum(axis=win_axes)
        # the divisor: the window's real elements, and its padding with count_include_pad;
        # never the part ceil mode reaches past the end padding
        if p.count_include_pad:
            sides = tuple(s + b + e for s, b, e in zip(x.shape[2:], p.begin, p.end))
            mask = np.pad(np.ones((1, 1) + sides), [(0, 0), (0, 0)] + [(0, e) for e in p.extra])
        else:
            mask = np.pad(np.ones((1, 1) + x.shape[2:]), widths)
        count = _windows(mask, p).sum(axis=win_axes)
        return [(total / np.maximum(count, 1)).astype(x.dtype)]
    return run


def _argmax_indices(win, shape, p):
    d = len(p.kernel)
    flat = win.reshape(win.shape[:2 + d] + (-1,))
    pick = np.unravel_index(flat.argmax(axis=-1), p.kernel)
    n, c = shape[:2]
    sides = shape[2:]
    grid = np.meshgrid(*(np.arange(o) for o in p.out), indexing="ij")
    coords = [g * s - b + k * dd for g, s, b, k, dd in
              zip(grid, p.strides, p.begin, pick, p.dilations)]
    order = range(d - 1, -1, -1) if p.column_major else range(d)
    spatial = np.zeros(coords[0].shape, np.int64)
    for a in order:
        spatial = spatial * sides[a] + coords[a]
    base = (np.arange(n).reshape(-1, 1) * c + np.arange(c)).reshape((n, c) + (1,) * d)
    return base * int(np.prod(sides)) + spatial


register("LpPool", parse_pool_nd, pool_nd_kernel)
