"""Errors raised by tensorlayout, and the input checks every public call shares.

Every error is a :class:`LayoutError` (itself a :class:`ValueError`), and every
message names the argument, the value it had and the rule it broke, for example::

    shape[2] = 0 is not allowed: every dimension must be a positive integer

The checks live here so that each module validates its input the same way,
before anything is computed or written.
"""

from __future__ import annotations

import numbers
import re
from typing import Iterable, Sequence

import numpy as np

__all__ = [
    "LayoutError",
    "ShapeError",
    "ModelError",
    "RankError",
    "DTypeError",
    "IndexOutOfRange",
    "DeviceLimitError",
    "AddressError",
    "AlignmentError",
    "StrideError",
    "ModeError",
    "OverlapError",
    "FootprintError",
    "ConvolutionError",
    "AlgorithmError",
    "OpenCLUnavailable",
    "check_shape",
    "check_positive_int",
    "check_nonneg_int",
    "check_choice",
    "check_array",
    "short",
    "dtype_text",
]

#: Longest message a LayoutError keeps; longer ones lose their middle (a huge argument echoed).
MAX_MESSAGE = 600


def short(value, limit: int = 80):
    """``value`` itself, or for a long string / repr, its start and end around an ellipsis.

    >>> short("x" * 10)
    'xxxxxxxxxx'
    >>> short("1," * 100, limit=20)
    '1,1,1,1,1,... (200 characters)'
    """
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return value
    return f"{text[:limit // 2]}... ({len(text)} characters)"


def dtype_text(value) -> str:
    """How a dtype argument is written in a message: 'int8', not "dtype('int8')" or "<class ...>".

    >>> dtype_text(np.dtype("int8")), dtype_text(np.float16), dtype_text("fp33")
    ('int8', 'float16', "'fp33'")
    """
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value).name
    return repr(short(value))


class LayoutError(ValueError):
    """Base class of every error tensorlayout raises for bad input.

    A message longer than :data:`MAX_MESSAGE` characters keeps its start (the argument) and
    its end (the rule) around an ellipsis, so that no whole array or 100 KB argument is echoed.
    ``argument`` is the name of the argument the message starts with (``shape[2]`` in
    "shape[2] = 0 is not allowed: ..."), or None.

    >>> LayoutError("--shape = '1,0' is not allowed: ...").argument
    '--shape'
    """

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], str) and len(args[0]) > MAX_MESSAGE:
            m = args[0]
            args = (f"{m[:MAX_MESSAGE // 2]} ... ({len(m) - MAX_MESSAGE + 100} characters cut) ... "
                    f"{m[-(MAX_MESSAGE // 2 - 100):]}",)
        super().__init__(*args)

    @property
    def argument(self):
        m = _ARGUMENT.match(str(self)) if self.args else None
        return m.group(1) if m else None


class ShapeError(LayoutError):
    """A shape, or an array's shape, breaks a rule (non-positive, non-integer, mismatch)."""


class RankError(ShapeError):
    """A shape or array has the wrong number of dimensions."""


class DTypeError(LayoutError):
    """A data type the layout, image or mode cannot hold."""


class IndexOutOfRange(LayoutError):
    """An element index or a physical location outside the tensor or the storage."""


class DeviceLimitError(LayoutError):
    """An image or buffer larger than the device allows."""


class AddressError(LayoutError):
    """An address outside memory."""


class AlignmentError(AddressError):
    """An address that is not aligned as its layout requires."""


class StrideError(LayoutError):
    """Strides that are not positive integers, or break a rule of the copy (W stride 1)."""


class ModeError(LayoutError):
    """A storage mode used with a data type or tensor it does not apply to."""


class OverlapError(LayoutError):
    """Two tensors in local memory that would share bytes."""


class FootprintError(LayoutError):
    """A tensor whose footprint runs past the end of its memory."""


class ConvolutionError(LayoutError):
    """Convolution arguments that do not agree (channels, groups, padding, shapes)."""


class AlgorithmError(ConvolutionError):
    """An algorithm asked to do what it cannot (stride 2 Winograd, wrong kernel size)."""


class OpenCLUnavailable(LayoutError):
    """No OpenCL platform, or the device lacks a capability that was asked for."""


class ModelError(LayoutError):
    """A network that cannot be loaded, planned or run as asked, or an input it cannot take:
    the message names the node (or the argument), the value and the rule."""


_ARGUMENT = re.compile(r"(-{0,2}[A-Za-z_][\w\-.]*)(?:\[[^\]]*\])?(?: =| has|:| must| is| holds)")


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_positive_int(name: str, value) -> int:
    """Return ``value`` as an int, or raise ShapeError if it is not an integer >= 1."""
    if not _is_int(value):
        raise ShapeError(f"{name} = {short(value)!r} is not allowed: it must be a positive integer")
    if value < 1:
        raise ShapeError(f"{name} = {value} is not allowed: it must be a positive integer")
    return int(value)


def check_nonneg_int(name: str, value) -> int:
    """Return ``value`` as an int, or raise LayoutError if it is not an integer >= 0."""
    if not _is_int(value) or value < 0:
        raise LayoutError(f"{name} = {short(value)!r} is not allowed: it must be a non-negative integer")
    return int(value)


def check_shape(name: str, shape, rank: int | Sequence[int] | None = None) -> tuple[int, ...]:
    """Validate a shape: a sequence of positive integers, of the given rank(s).

    >>> check_shape("shape", (1, 2, 3, 4), rank=4)
    (1, 2, 3, 4)
    """
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise ShapeError(f"{name} = {short(shape)!r} is not allowed: it must be a sequence of positive integers")
    shape = tuple(shape)
    if rank is not None:
        ranks = (rank,) if isinstance(rank, int) else tuple(rank)
        if len(shape) not in ranks:
            want = " or ".join(str(r) for r in ranks)
            raise RankError(
                f"{name} = {short(shape)!r} has {len(shape)} dimensions: this needs exactly {want}"
            )
    for i, d in enumerate(shape):
        check_positive_int(f"{name}[{i}]", d)
    return tuple(int(d) for d in shape)


def check_choice(name: str, value, choices: Iterable):
    """Raise LayoutError unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise LayoutError(
            f"{name} = {short(value)!r} is not allowed: it must be one of {', '.join(repr(c) for c in choices)}"
        )
    return value


def check_array(name: str, array, shape: Sequence[int] | None = None, rank: int | None = None,
                dtypes: Iterable | None = None) -> np.ndarray:
    """Validate an array argument's rank, shape and dtype; return it as an ndarray (no copy)."""
    if not isinstance(array, np.ndarray):
        try:
            array = np.asarray(array)
        except Exception as exc:  # noqa: BLE001 - re-raised as a LayoutError naming the argument
            raise ShapeError(f"{name} could not be read as an array: {exc}") from exc
    if rank is not None and array.ndim != rank:
        raise RankError(
            f"{name} has shape {array.shape} ({array.ndim} dimensions): this needs exactly {rank}"
        )
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise ShapeError(f"{name} has shape {tuple(array.shape)}: expected {tuple(shape)}")
    if dtypes is not None:
        allowed = tuple(np.dtype(d) for d in dtypes)
        if array.dtype not in allowed:
            raise DTypeError(
                f"{name} has dtype {array.dtype}: allowed are {', '.join(str(d) for d in allowed)}"
            )
    return array
