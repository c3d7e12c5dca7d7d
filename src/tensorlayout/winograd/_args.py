"""Argument checks of the convolution entry points, done once at the public boundary."""

from __future__ import annotations

import numpy as np

from .._checks import pair
from ..errors import (ConvolutionError, DTypeError, LayoutError, RankError, ShapeError,
                      check_array, check_positive_int)

ALGORITHMS = ("auto", "winograd", "im2col", "direct")
DTYPES = (np.float32, np.float64)

# The largest output, transformed input or weight array a call may allocate (elements).
MAX_ELEMENTS = 1 << 32


def parse_algorithm(algorithm, tile):
    """``(name, tile)`` from "auto", "winograd", "winograd:M", "im2col" or "direct"."""
    if not isinstance(algorithm, str):
        raise LayoutError(f"algorithm = {algorithm!r} is not allowed: it must be one of "
                          f"{', '.join(ALGORITHMS)} (or 'winograd:M')")
    name = algorithm.strip().lower()
    if name.startswith("winograd:"):
        try:
            t = int(name.split(":", 1)[1])
        except ValueError:
            raise LayoutError(f"algorithm = {algorithm!r} is not allowed: write 'winograd:M' "
                              "with M the output tile, e.g. 'winograd:6'") from None
        if tile is not None and tile != t:
            raise LayoutError(f"tile = {tile!r} disagrees with algorithm = {algorithm!r}")
        name, tile = "winograd", t
    if name not in ALGORITHMS:
        raise LayoutError(f"algorithm = {algorithm!r} is not allowed: it must be one of "
                          f"{', '.join(ALGORITHMS)} (or 'winograd:M')")
    if tile is not None:
        tile = check_positive_int("tile", tile)
        if name not in ("winograd", "auto"):
            raise LayoutError(f"tile = {tile} is not allowed with algorithm = {algorithm!r}: "
                              "only Winograd has a tile")
        name = "winograd"
    return name, tile


def _shape4(name: str, shape, dims: str) -> tuple:
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__"):
        raise ShapeError(f"{name} = {str(shape)[:80]!r} is not allowed: it must be a sequence of "
                         f"4 positive integers ({dims})")
    shape = tuple(shape)
    if len(shape) != 4:
        raise RankError(f"{name} has {len(shape)} dimensions {shape[:8]}: conv2d needs exactly "
                        f"4 ({dims})")
    return tuple(check_positive_int(f"{name}[{i}]", d) for i, d in enumerate(shape))


def geometry(x_shape, w_shape, stride, padding, dilation, groups):
    """Checked ``(x_shape, w_shape, stride, padding, dilation, groups, out_shape)``."""
    x_shape = _shape4("x.shape", x_shape, "N, C, H, W")
    w_shape = _shape4("w.shape", w_shape, "K, C/groups, KH, KW")
    groups = check_positive_int("groups", groups)
    N, C, H, W = x_shape
    K, Cg, KH, KW = w_shape
    if C % groups:
        raise ConvolutionError(f"groups = {groups} does not divide the {C} input channels of x")
    if K % groups:
        raise ConvolutionError(f"groups = {groups} does not divide the {K} output channels of w")
    if Cg * groups != C:
        raise ConvolutionError(f"w has {Cg} input channels per group (w.shape[1]) but x has "
                               f"{C} channels in {groups} group(s): w.shape[1] must be "
                               f"{C // groups}")
    sh, sw = pair("stride", stride, 1)
    ph, pw = pair("padding", padding, 0)
    dh, dw = pair("dilation", dilation, 1)
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    if OH < 1 or OW < 1:
        raise ConvolutionError(
            f"kernel {KH}x{KW} (dilation {dh},{dw}) does not fit input {H}x{W} with padding "
            f"{ph},{pw}: the output would be {OH}x{OW}")
    for what, n in (("x", N * C * H * W), ("w", K * Cg * KH * KW), ("the output", N * K * OH * OW),
                    ("the padded input", N * C * (H + 2 * ph) * (W + 2 * pw))):
        if n > MAX_ELEMENTS:
            raise ConvolutionError(f"{what} would hold {n} elements: more than the {MAX_ELEMENTS} "
                                   "a convolution here may allocate (check shape, padding and "
                                   "dilation)")
    return x_shape, w_shape, (sh, sw), (ph, pw), (dh, dw), groups, (N, K, OH, OW)


def weights(w, bias):
    """Checked contiguous ``(w, bias)`` arrays (bias zeros when None)."""
    w = check_array("w", w, rank=4, dtypes=DTYPES)
    K = w.shape[0]
    if bias is None:
        b = np.zeros(K, dtype=w.dtype)
    else:
        b = check_array("bias", bias, rank=1, dtypes=DTYPES)
        if b.shape[0] != K:
            raise ShapeError(f"bias has {b.shape[0]} values: it needs one per output channel ({K})")
        if b.dtype != w.dtype:
            raise DTypeError(f"bias has dtype {b.dtype} but w has {w.dtype}: they must match")
    return np.ascontiguousarray(w), np.ascontiguousarray(b)
