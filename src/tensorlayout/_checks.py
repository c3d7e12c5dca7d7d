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
import os
import stat

import numpy as np

from .errors import (ConvolutionError, DTypeError, LayoutError, check_array, check_choice,
                     check_nonneg_int, check_positive_int, check_shape, dtype_text, short)

__all__ = ["q", "round_up", "pair", "image_dtype", "IMAGE_DTYPES", "renamed", "keyword_only",
           "check_output_path", "check_array", "check_choice", "check_nonneg_int", "check_positive_int",
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




#: Folders of the kernel's virtual files: nothing tensorlayout writes belongs there.
VIRTUAL_ROOTS = ("/proc", "/sys")


def check_output_path(name: str, path, folder: bool = False) -> str:
    """``path`` as a str, once it is known that a file (``folder=True``: a folder) can be written
    there; else a LayoutError naming ``name``, the value and the rule, before anything is written.

    A file: an existing regular file that may be written, or a new name in an existing folder
    that may be written. A folder: an existing one that may be written, or a new one (the writer
    creates it, and the missing folders above it) under an existing folder that may be written.
    Never under ``/proc`` or ``/sys``, never a device, a pipe or a socket (``/dev/null``
    included), never under a file.

    >>> check_output_path("out", "/proc/x.svg")
    Traceback (most recent call last):
    ...
    tensorlayout.errors.LayoutError: out = '/proc/x.svg' is not allowed: it is under /proc, where the kernel keeps its virtual files; write to a folder on a disk
    """
    what = "folder" if folder else "file"
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bool):
        raise LayoutError(f"{name} = {short(path)!r} is not allowed: it must be the path of a {what} (a str)")
    p = os.fspath(path)

    def refuse(rule):
        return LayoutError(f"{name} = {short(p)!r} is not allowed: {rule}")

    if p.strip() == "":
        raise refuse(f"it must name a {what}")
    if "\0" in p:
        raise refuse("a path cannot hold a NUL character")
    real = os.path.realpath(p)
    for root in VIRTUAL_ROOTS:
        if real == root or real.startswith(root + "/"):
            raise refuse(f"it is under {root}, where the kernel keeps its virtual files; write to a "
                         "folder on a disk")
    st = _stat(p, refuse)
    if st is not None:
        if folder and not stat.S_ISDIR(st.st_mode):
            raise refuse("it is a file, not a folder" if stat.S_ISREG(st.st_mode)
                         else "it exists and is not a folder (a device, a pipe or a socket)")
        if not folder and stat.S_ISDIR(st.st_mode):
            raise refuse("it is a folder: name a file (inside it, for example)")
        if not folder and not stat.S_ISREG(st.st_mode):
            raise refuse("it is not a regular file (a device, a pipe or a socket): name a file")
        if not os.access(p, os.W_OK | (os.X_OK if folder else 0)):
            raise refuse(f"the {what} cannot be written (no permission, or a read-only disk)")
        return p
    parent = os.path.dirname(real) or "."
    pst = _stat(parent, refuse)
    if folder:                      # a new folder: the writer creates the missing ones above it too
        while pst is None and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
            pst = _stat(parent, refuse)
    if pst is None:
        raise refuse(f"its folder {short(parent)!r} does not exist: create it first")
    if not stat.S_ISDIR(pst.st_mode):
        raise refuse(f"it lies under {short(parent)!r}, which is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise refuse(f"the folder {short(parent)!r} cannot be written (no permission, or a read-only disk)")
    return p


def _stat(path, refuse):
    """os.stat of ``path``, None when nothing is there; a path through a file or one the system
    cannot reach is refused."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise refuse("it lies under a file, not a folder") from None
    except OSError as exc:
        raise refuse(f"it cannot be reached ({exc.strerror or exc})") from None
    except ValueError as exc:  # a path the system cannot hold at all
        raise refuse(str(exc)) from None
