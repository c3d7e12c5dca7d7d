"""CPU runtime buffers (seeds 000 and 002): dense row-major tensors in a named dimension order.

The CPU runtime keeps activations in NCHW, convolution filters in OIHW,
depthwise filters in MIHW and 1-D arguments as W; the older MACE releases and
the GPU side also use NHWC, HWOI and HWIM.  Each format is a permutation of
its kind's canonical dimensions, so a buffer is a :class:`~tensorlayout.core.Layout`
whose digits are the row-major strides of that permutation, and conversion
between two formats of the same kind is one strided copy.

The blocked activation formats NCHW4c, NCHW8c and NCHW16c (this library's CPU runtime
holds the tensors between its 1 x 1 and depthwise layers in NCHW16c, see
:func:`tensorlayout.schedule.cpu.blocked_tensors`) split the channels into blocks of c
held side by side at each position: element (n, c, h, w) at
``((n·ceil(C/c) + c // b)·H + h)·W·b + w·b + c % b`` for blocks of b, the lanes past C
zero.  Their shape is given, and their elements indexed, in NCHW; the array
:func:`convert` makes of one is (N, ceil(C/b), H, W, b).

>>> buffer_layout("NCHW16c", (1, 20, 2, 3)).locate_flat((0, 17, 1, 2))   # block 1, lane 1
177

>>> import numpy as np
>>> x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)       # NCHW
>>> y = convert(x, "NCHW", "NHWC")
>>> y.shape, int(y[1, 2, 3, 0]) == int(x[1, 0, 2, 3])
((2, 4, 5, 3), True)
"""

from __future__ import annotations

import math

import numpy as np

from .core import Layout
from .errors import LayoutError, check_array, check_shape

__all__ = ["BUFFER_FORMATS", "KINDS", "buffer_layout", "convert", "kind_of", "block_of", "dims_of"]

#: The canonical dimension order of each kind of tensor.
KINDS = {
    "activation": "NCHW",
    "filter": "OIHW",
    "depthwise": "MIHW",
    "argument": "W",
}

#: Every buffer format: its kind and where it comes from.
BUFFER_FORMATS = {
    "NCHW": ("activation", "CPU runtime input/output (seeds 000, 002)"),
    "NHWC": ("activation", "GPU runtime input/output buffer (seeds 000, 001, 002)"),
    "OIHW": ("filter", "CPU conv filter; GPU conv filter from MACE v0.7 (seeds 000, 002)"),
    "HWOI": ("filter", "GPU conv filter up to MACE v0.6 (seeds 000, 001)"),
    "MIHW": ("depthwise", "CPU depthwise filter; GPU depthwise from MACE v0.7 (seeds 000, 002)"),
    "HWIM": ("depthwise", "GPU depthwise filter up to MACE v0.6 (seeds 000, 001)"),
    "W": ("argument", "1-D argument such as a bias (seeds 000, 001, 002)"),
    "NCHW4c": ("activation", "blocks of 4 channels at each position (a 4-lane vector)"),
    "NCHW8c": ("activation", "blocks of 8 channels at each position (an AVX2 vector)"),
    "NCHW16c": ("activation", "blocks of 16 channels at each position: the CPU runtime's "
                              "tensors between its 1 x 1 and depthwise layers"),
}


def block_of(fmt: str) -> int:
    """The channels per block of a blocked format (NCHW16c: 16), else 0."""
    fmt = _check_format("format", fmt)
    return int(fmt[4:-1]) if fmt.startswith("NCHW") and fmt.endswith("c") else 0


def dims_of(fmt: str) -> str:
    """The letters a format's shape and indices are given in (a blocked format's: NCHW)."""
    fmt = _check_format("format", fmt)
    return "NCHW" if block_of(fmt) else fmt


def _check_format(name: str, fmt: str) -> str:
    """``fmt`` as :data:`BUFFER_FORMATS` spells it (any case given)."""
    found = {k.upper(): k for k in BUFFER_FORMATS}.get(fmt.upper()) if isinstance(fmt, str) else None
    if found is None:
        raise LayoutError(
            f"{name} = {fmt!r} is not a buffer format: it must be one of {', '.join(BUFFER_FORMATS)}"
        )
    return found


def _article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def kind_of(fmt: str) -> str:
    """The kind of tensor a format holds: activation, filter, depthwise or argument."""
    return BUFFER_FORMATS[_check_format("format", fmt)][0]


def buffer_layout(fmt: str, shape) -> Layout:
    """The layout of a dense buffer in format ``fmt`` holding a tensor of ``shape``.

    ``shape`` is given in the format's own order; the layout's logical dimensions
    are the format's letters (lower case) and its physical space is the flat buffer.

    >>> buffer_layout("NHWC", (1, 2, 3, 4)).locate_flat((0, 1, 2, 3))   # n, h, w, c
    23
    """
    fmt = _check_format("format", fmt)
    b = block_of(fmt)
    if b:
        N, C, H, W = check_shape("shape", shape, rank=4)
        blocks = -(-C // b)
        digits = {"n": blocks * H * W * b, "c": [(b, 1), (None, H * W * b)], "h": W * b, "w": b}
        return Layout(fmt, ("n", "c", "h", "w"), (N, C, H, W),
                      (N * blocks * H * W * b,), digits)
    shape = check_shape("shape", shape, rank=len(fmt))
    strides = {}
    step = 1
    for letter, extent in zip(reversed(fmt.lower()), reversed(shape)):
        strides[letter] = step
        step *= extent
    return Layout(fmt, tuple(fmt.lower()), shape, (math.prod(shape),), strides)


def convert(array, src: str, dst: str, channels: int | None = None) -> np.ndarray:
    """Convert a dense tensor from format ``src`` to format ``dst`` of the same kind.
    A blocked array (N, ceil(C/b), H, W, b) does not say C: converting from one takes
    ``channels``.

    >>> w = np.zeros((8, 3, 3, 3))            # OIHW: 8 filters of 3 channels, 3x3
    >>> convert(w, "OIHW", "HWOI").shape
    (3, 3, 8, 3)
    >>> x = np.arange(2 * 20 * 3 * 3, dtype=np.float32).reshape(2, 20, 3, 3)
    >>> xb = convert(x, "NCHW", "NCHW16c")
    >>> xb.shape, float(xb[1, 1, 2, 0, 3]) == float(x[1, 19, 2, 0])
    ((2, 2, 3, 3, 16), True)
    >>> bool((convert(xb, "NCHW16c", "NHWC", channels=20) == x.transpose(0, 2, 3, 1)).all())
    True
    """
    src = _check_format("src", src)
    dst = _check_format("dst", dst)
    if block_of(src) or block_of(dst):
        return _convert_blocked(array, src, dst, channels)
    if kind_of(src) != kind_of(dst):
        raise LayoutError(
            f"src = {src!r} holds {_article(kind_of(src))} tensor and dst = {dst!r} "
            f"{_article(kind_of(dst))} tensor: "
            "conversion needs two formats of the same kind"
        )
    array = check_array("array", array, rank=len(src))
    check_shape("array.shape", array.shape, rank=len(src))
    # View the source in the destination's dimension order, then one strided copy.
    perm = [src.index(letter) for letter in dst]
    dst_shape = tuple(array.shape[p] for p in perm)
    out = buffer_layout(dst, dst_shape).pack(np.transpose(array, perm))
    return out.reshape(dst_shape)


def _convert_blocked(array, src: str, dst: str, channels) -> np.ndarray:
    """:func:`convert` where either format is blocked: through NCHW; a blocked side is its
    layout's element order, (n, c // b, h, w, c % b), as one reshape and transpose (the
    lanes past C zero), which the layout's own pack would do one element at a time."""
    if kind_of(src) != kind_of(dst):
        raise LayoutError(f"dst = {dst!r} holds {_article(kind_of(dst))} tensor and src = "
                          f"{src!r} an activation: conversion needs two formats of the same kind")
    b = block_of(src)
    if b:
        array = check_array("array", array, rank=5)
        N, B, H, W, lanes = array.shape
        if lanes != b:
            raise LayoutError(f"array has shape {array.shape}: a {src} array is "
                              f"(N, ceil(C/{b}), H, W, {b})")
        if channels is None or isinstance(channels, bool) or not isinstance(
                channels, (int, np.integer)) or not (B - 1) * b < channels <= B * b:
            raise LayoutError(f"channels = {channels!r} is not allowed: converting from {src} "
                              f"blocks of shape {array.shape} needs the channel count C, "
                              f"{(B - 1) * b + 1} to {B * b}")
        nchw = np.ascontiguousarray(
            array.transpose(0, 1, 4, 2, 3).reshape(N, B * b, H, W)[:, :int(channels)])
    else:
        if channels is not None:
            raise LayoutError(f"channels = {channels!r} is not allowed: only a blocked source "
                              "needs it (its array does not say C)")
        nchw = array if src == "NCHW" else convert(array, src, "NCHW")
        nchw = check_array("array", nchw, rank=4)
    if not block_of(dst):
        return nchw if dst == "NCHW" else convert(nchw, "NCHW", dst)
    b = block_of(dst)
    N, C, H, W = nchw.shape
    B = -(-C // b)
    z = np.zeros((N, B * b, H, W), nchw.dtype)
    z[:, :C] = nchw
    return np.ascontiguousarray(z.reshape(N, B, b, H, W).transpose(0, 1, 3, 4, 2))
