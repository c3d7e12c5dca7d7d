"""What every op of the graph layer shares: the context a parser reads, and the registry.

An op is one :class:`OpDef`: ``parse(ctx)`` turns the node's attributes and constant inputs
into a frozen parameter object once, checking them; ``kernel(node, ctx)`` returns the op's
NumPy semantics ``run(inputs, out=None) -> [outputs]`` for the node's static shapes.  The
kernel reads ``node.params`` only, never an attribute: the parameters are the op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import ModelError

__all__ = ["Ctx", "OpDef", "OPS", "register", "axis", "ints", "NoParams"]


class Ctx:
    """What a parser or a kernel may know about its node: attributes (parsers only), static
    input and output shapes and dtypes, constant input values, the opset."""

    def __init__(self, name, op, attrs, inputs, outputs, in_shapes, out_shapes, consts, opset,
                 in_dtypes=None):
        self.name = name
        self.op = op
        self.attrs = attrs
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.in_shapes = in_shapes      # tuples, or None when absent / unknown
        self.out_shapes = out_shapes
        self.consts = consts            # np.ndarray for constant inputs, else None
        self.opset = opset
        self.in_dtypes = in_dtypes or [None] * len(self.inputs)

    def fail(self, why: str):
        raise ModelError(f"node {self.name!r} ({self.op}): {why}")

    def attr(self, name, default=None):
        return self.attrs.get(name, default)

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] != ""

    def const(self, i: int, what: str, required=True):
        """Constant input ``i`` as an array, or None if absent; a run-time tensor is an error."""
        if not self.has_input(i):
            if required:
                self.fail(f"input {i} ({what}) is missing")
            return None
        c = self.consts[i]
        if c is None:
            self.fail(f"input {i} ({what}) {self.inputs[i]!r} must be a constant "
                      "(an initializer or a foldable subgraph): it is computed at run time")
        return c

    def runtime(self, *idx) -> bool:
        """Whether any of the inputs ``idx`` is present and computed at run time."""
        return any(self.has_input(i) and self.consts[i] is None for i in idx)

    def known(self, i: int) -> bool:
        """Whether input ``i``'s static shape is known."""
        return i < len(self.in_shapes) and self.in_shapes[i] is not None

    def shape(self, i: int, rank=None, what="input"):
        """Static shape of input ``i``, checked against ``rank`` (an int or a tuple of ints)."""
        s = self.in_shapes[i] if i < len(self.in_shapes) else None
        if s is None:
            self.fail(f"the shape of its {what} {i} is unknown")
        if rank is not None and len(s) not in ((rank,) if isinstance(rank, int) else rank):
            self.fail(f"{what} shape {tuple(s)} has rank {len(s)}: this op takes rank "
                      + (str(rank) if isinstance(rank, int) else " or ".join(map(str, rank))))
        return tuple(s)


@dataclass(frozen=True)
class NoParams:
    """The parameters of an op that has none."""


@dataclass(frozen=True)
class OpDef:
    """One op: its parser (attributes -> parameters) and its NumPy kernel builder.

    ``dynamic``: the parser and the kernel need no static shape (the kernel takes its
    shapes from its inputs at run time), so the op runs where a shape depends on values
    computed at run time.  ``any_dtype``: the op moves or casts data and takes any element
    type, storage-only ones (bfloat16, float8, 4- and 2-bit) included.
    ``reads_shape_only``: the op reads its input's shape only (folded once that is static).
    """

    op: str
    parse: Callable
    kernel: Callable
    since: int = 1                 # the first default-domain opset that has it
    dynamic: bool = False
    any_dtype: bool = False
    reads_shape_only: bool = False


OPS: dict = {}


def register(op, parse=None, kernel=None, since=1, **flags):
    """Add an op to :data:`OPS` (a parser without attributes returns :class:`NoParams`);
    ``flags``: :class:`OpDef`'s ``dynamic``, ``any_dtype`` and ``reads_shape_only``."""
    OPS[op] = OpDef(op, parse or (lambda ctx: NoParams()), kernel, since, **flags)


#: The float types NumPy computes in.
COMPUTE_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def storage_only(dtype) -> bool:
    """A type NumPy does not compute in: bfloat16 (which the graph computes in float32), the
    float8, float6 and float4 types, the 4- and 2-bit integers (ml_dtypes' types).

    >>> storage_only(np.dtype(np.float16)), storage_only(np.dtype(np.int64))
    (False, False)
    """
    dtype = np.dtype(dtype)
    return dtype.kind == "V" or (dtype.kind == "f" and dtype not in COMPUTE_FLOATS)


def axis(ctx, value, rank, name="axis"):
    """``value`` as an axis in [0, rank), or a ModelError naming ``name``; ``ctx``: the
    node's :class:`Ctx`, or the ``fail`` function of a check made on a run."""
    value = int(value)
    if not -rank <= value < rank:
        fail = ctx.fail if hasattr(ctx, "fail") else ctx
        fail(f"{name} = {value} is outside [{-rank}, {rank}) for a rank-{rank} input")
    return value % rank


def ints(v):
    return [int(t) for t in np.asarray(v).reshape(-1)]


def float32(ctx, a, what):
    a = np.asarray(a)
    if a.dtype == np.float32:
        return a
    if a.dtype.kind == "f":
        return a.astype(np.float32)
    ctx.fail(f"{what} have dtype {a.dtype}: the runtime computes in float32")
