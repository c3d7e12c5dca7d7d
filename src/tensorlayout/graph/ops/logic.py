"""Comparisons (to bool), logic on bool tensors, and the bitwise ops on integers: each one
NumPy function of its operands, broadcast as ONNX broadcasts (multidirectionally)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import register

__all__ = ["COMPARISONS", "LOGIC", "BITWISE", "BitShift"]

COMPARISONS = {"Equal": np.equal, "Less": np.less, "Greater": np.greater,
               "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal}
LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
BITWISE = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
           "BitwiseXor": np.bitwise_xor}
_SINCE = {"LessOrEqual": 12, "GreaterOrEqual": 12, "BitwiseAnd": 18, "BitwiseOr": 18,
          "BitwiseXor": 18}


def _binary(fn, typed):
    def kernel(node, ctx):
        def run(inputs, out=None):
            a, b = inputs
            y = fn(a, b)
            return [y.astype(a.dtype, copy=False) if typed else y]
        return run
    return kernel


for _table, _typed in ((COMPARISONS, False), (LOGIC, False), (BITWISE, True)):
    for _op, _fn in _table.items():
        register(_op, None, _binary(_fn, _typed), since=_SINCE.get(_op, 1), dynamic=True)

register("Not", None, lambda node, ctx: (lambda inputs, out=None: [np.logical_not(inputs[0])]),
         dynamic=True)
register("BitwiseNot", None, lambda node, ctx: (
    lambda inputs, out=None: [np.invert(inputs[0])]), since=18, dynamic=True)


@dataclass(frozen=True)
class BitShift:
    """x shifted by y bits (unsigned integers), to the left or the right."""

    left: bool


def _parse_bitshift(ctx):
    direction = ctx.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        ctx.fail(f"direction = {direction!r} is not allowed: LEFT or RIGHT")
    return BitShift(direction == "LEFT")


def _bitshift_kernel(node, ctx):
    fn = np.left_shift if node.params.left else np.right_shift

    def run(inputs, out=None):
        x, y = inputs
        return [fn(x, y.astype(x.dtype, copy=False)).astype(x.dtype, copy=False)]
    return run


register("BitShift", _parse_bitshift, _bitshift_kernel, since=11, dynamic=True)
del _op, _fn, _table, _typed
