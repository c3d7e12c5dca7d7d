"""The argument checks public entry points share, done once at the boundary.

A public function checks its arguments with these helpers, then calls unchecked internals
with the checked values.  Where an internal still raises (a device limit met deep inside),
:func:`renamed` re-raises the error at the entry point under the caller's argument names,
as einops does with its patterns.

The basic checks (:func:`check_shape`, :func:`check_array`, ...) live in
:mod:`tensorlayout.errors` and are re-exported here, so that an entry point imports its
checks from one place.

>>> pair("stride", 2), pair("padding", (0, 1), minimum=0), q(5)
((2, 2), (0, 1), 2)
"""

from __future__ import annotations

import contextlib

import numpy as np

from .errors import (ConvolutionError, DTypeError, LayoutError, check_array, check_choice,
                     check_nonneg_int, check_positive_int, check_shape, dtype_text, short)

__all__ = ["q", "round_up", "pair", "image_dtype", "IMAGE_DTYPES", "renamed", "keyword_only",
           "check_array", "check_choice", "check_nonneg_int", "check_positive_int",
           "check_shape"]

#: Channel types an image can hold: CL_FLOAT and CL_HALF_FLOAT.
IMAGE_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def q(x: int) -> int:
    """Groups of four needed for ``x``: ceil(x / 4), the RGBA pixels of x values."""
    return (x + 3) // 4


def round_up(n: int, k: int) -> int:
    """``n`` rounded up to a multiple of ``k``: ``round_up(10, 4) == 12``."""
    return (n + k - 1) // k * k


def pair(name: str, value, minimum: int = 1) -> tuple[int, int]:
    """``value`` (one integer or two) as an ``(h, w)`` pair of integers >= ``minimum``.

    >>> pair("dilation", [1, 2])
    (1, 2)
    >>> pair("stride", 0)
    Traceback (most recent call last):
    ...
    tensorlayout.errors.ConvolutionError: stride = 0 is not allowed: it must be a positive integer or a pair of them
    """
    vals = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(vals) != 2:
        raise ConvolutionError(f"{name} = {short(value)!r} is not allowed: give one integer "
                               "or a pair (h, w)")
    for v in vals:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < minimum:
            what = "a positive integer" if minimum == 1 else (
                "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}")
            raise ConvolutionError(f"{name} = {short(value)!r} is not allowed: it must be {what} "
                                   "or a pair of them")
    return int(vals[0]), int(vals[1])


def image_dtype(dtype, name: str = "dtype") -> np.dtype:
    """``dtype`` as float32 or float16, the two channel types an image holds.

    >>> image_dtype("float16")
    dtype('float16')
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in IMAGE_DTYPES:
        raise DTypeError(f"{name} = {dtype_text(dtype)} is not allowed: an image holds float32 "
                         "(CL_FLOAT) or float16 (CL_HALF_FLOAT)")
    return dt


@contextlib.contextmanager
def renamed(names: dict, entry: str | None = None):
    """Re-raise a LayoutError from inside under the caller's argument names.

    ``names`` maps an internal argument name to the caller's (``{"shape": "x.shape"}``);
    an error whose message starts with a mapped name is raised again, of the same class,
    starting with the caller's name, and with ``entry`` (the public function) named.

    >>> with renamed({"shape": "x.shape (NHWC)"}, "conv2d"):
    ...     check_shape("shape", (1, 0))
    Traceback (most recent call last):
    ...
    tensorlayout.errors.ShapeError: x.shape (NHWC)[1] = 0 is not allowed: it must be a positive integer (in conv2d)
    """
    try:
        yield
    except LayoutError as exc:
        text = str(exc)
        arg = exc.argument
        base = arg.split("[", 1)[0] if arg else None
        if base not in names:
            raise
        text = names[base] + text[len(base):]
        if entry:
            text += f" (in {entry})"
        raise type(exc)(text) from None


def keyword_only(entry: str, extra: tuple, old_names: tuple, head: str = "x, w, bias") -> None:
    """Refuse arguments passed by position where the old signature took them.

    ``extra`` are the positional values after the last positional parameter; ``old_names``
    the parameters they used to fill, in order; ``head`` names the positional parameters.

    >>> keyword_only("tensorlayout.conv2d", (), ("stride",))
    >>> keyword_only("tensorlayout.conv2d", (1, 2), ("stride", "padding"))
    Traceback (most recent call last):
    ...
    tensorlayout.errors.LayoutError: tensorlayout.conv2d(x, w, bias, 1, 2) is the old positional form: stride, padding are keyword-only after bias; write tensorlayout.conv2d(x, w, bias, stride=1, padding=2)
    """
    if not extra:
        return
    if len(extra) > len(old_names):
        n = len(head.split(","))
        raise LayoutError(f"{entry} takes {n} arguments by position ({head}) and got "
                          f"{n + len(extra)}: pass everything after bias by keyword")
    vals = ", ".join(short(repr(v), 40) for v in extra)
    names = ", ".join(old_names[:len(extra)])
    kw = ", ".join(f"{n}={short(repr(v), 40)}" for n, v in zip(old_names, extra))
    raise LayoutError(f"{entry}({head}, {vals}) is the old positional form: {names} "
                      f"{'is' if len(extra) == 1 else 'are'} keyword-only after bias; write "
                      f"{entry}({head}, {kw})")


