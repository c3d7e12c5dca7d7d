"""CPU runtime buffers (seeds 000 and 002): dense row-major tensors in a named dimension order.

The CPU runtime keeps activations in NCHW, convolution filters in OIHW,
depthwise filters in MIHW and 1-D arguments as W; the older MACE releases and
the GPU side also use NHWC, HWOI and HWIM.  Each format is a permutation of
its kind's canonical dimensions, so a buffer is a :class:`~tensorlayout.core.Layout`
whose digits are the row-major strides of that permutation, and conversion
between two formats of the same kind is one strided copy.

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

__all__ = ["BUFFER_FORMATS", "KINDS", "buffer_layout", "convert", "kind_of"]

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
}


def _check_format(name: str, fmt: str) -> str:
    if not isinstance(fmt, str) or fmt.upper() not in BUFFER_FORMATS:
        raise LayoutError(
            f"{name} = {fmt!r} is not a buffer format: it must be one of {', '.join(BUFFER_FORMATS)}"
        )
    return fmt.upper()


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
    shape = check_shape("shape", shape, rank=len(fmt))
    strides = {}
    step = 1
    for letter, extent in zip(reversed(fmt.lower()), reversed(shape)):
        strides[letter] = step
        step *= extent
    return Layout(fmt, tuple(fmt.lower()), shape, (math.prod(shape),), strides)


def convert(array, src: str, dst: str) -> np.ndarray:
    """Convert a dense tensor from format ``src`` to format ``dst`` of the same kind.

    >>> w = np.zeros((8, 3, 3, 3))            # OIHW: 8 filters of 3 channels, 3x3
    >>> convert(w, "OIHW", "HWOI").shape
    (3, 3, 8, 3)
    """
    src = _check_format("src", src)
    dst = _check_format("dst", dst)
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
