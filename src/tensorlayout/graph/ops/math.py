"""Element-wise math beyond the fused activations: one-operand functions (Sqrt, Exp, Log,
Erf, the trigonometric ones...), the activations with parameters that no backend fuses (Elu,
Selu, Celu, Softplus, Gelu, PRelu...), Pow and Mod, the variadic Max, Min, Sum and Mean, and
Where.  Each computes in its input's type, as ONNX types its output."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import register

__all__ = ["Unary", "UNARY", "erf", "Pointwise", "Mod", "Pow"]


def erf(x):
    """The error function, element-wise, in float64: its Maclaurin series below |x| = 2.5,
    and above, 1 - erfc with erfc from its continued fraction (relative error below 1e-12
    over the whole line).

    >>> import math
    >>> xs = np.array([-4.0, -0.5, 1e-8, 0.3, 2.49, 2.51, 3.0, 6.5])
    >>> bool(np.allclose(erf(xs), [math.erf(v) for v in xs], rtol=1e-12, atol=0))
    True
    """
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    small = a < 2.5
    out = np.empty_like(x)
    # erf(z) = 2 / sqrt(pi) * sum_n (-1)^n z^(2n+1) / (n! (2n+1))
    z = np.where(small, a, 0.0)
    term = z.copy()
    total = z.copy()
    z2 = z * z
    for n in range(1, 50):
        term = term * (-z2) / n
        total += term / (2 * n + 1)
    out[small] = (2 / np.sqrt(np.pi) * total)[small]
    # erfc(z) = exp(-z^2) / sqrt(pi) / (z + (1/2) / (z + 1 / (z + (3/2) / (z + 2 / ...))))
    big = ~small
    if big.any():
        zb = a[big]
        k = zb.copy()
        for n in range(120, 0, -1):
            k = zb + (n / 2) / k
        with np.errstate(under="ignore"):
            out[big] = 1 - np.exp(-zb * zb) / (np.sqrt(np.pi) * k)
    return np.copysign(out, x)


def _typed(fn):
    """``fn`` computed in float64 for float16 / float32 inputs, returned in the input's type."""
    def run(x):
        return np.asarray(fn(x.astype(np.float64))).astype(x.dtype, copy=False)
    return run


def _softplus(x):
    return np.logaddexp(0, x)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


#: One-operand ops without attributes: op -> NumPy function of the input.
UNARY = {
    "Abs": np.abs, "Neg": np.negative, "Floor": np.floor, "Ceil": np.ceil, "Sqrt": np.sqrt,
    "Exp": np.exp, "Log": np.log, "Reciprocal": np.reciprocal, "Sign": np.sign,
    "Round": np.round, "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin,
    "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh,
    "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh,
    "Erf": _typed(erf), "Softsign": lambda x: x / (1 + np.abs(x)),
    "Softplus": _softplus,
}
_SINCE = {"Sign": 9, "Erf": 9, "Sin": 7, "Cos": 7, "Tan": 7, "Asin": 7, "Acos": 7, "Atan": 7,
          "Sinh": 9, "Cosh": 9, "Asinh": 9, "Acosh": 9, "Atanh": 9, "Round": 11}


@dataclass(frozen=True)
class Unary:
    """y = f(x) for an op of :data:`UNARY`."""

    kind: str


def _unary_kernel(node, ctx):
    fn = UNARY[node.params.kind]

    def run(inputs, out=None):
        x = inputs[0]
        return [np.asarray(fn(x)).astype(x.dtype, copy=False)]
    return run


for _op in UNARY:
    register(_op, lambda ctx: Unary(ctx.op), _unary_kernel, since=_SINCE.get(_op, 1), dynamic=True)


# ---------------------------------------------------------------------------- activations
@dataclass(frozen=True)
class Pointwise:
    """An element-wise op with parameters: Elu, Selu, Celu, ThresholdedRelu, Shrink, Gelu,
    Mish, IsInf (``alpha``, ``beta``, ``gamma`` as the op defines them; ``mode``: Gelu's
    approximation)."""

    kind: str
    alpha: float = 0.0
    beta: float = 0.0
    gamma: float = 0.0
    mode: str = ""


_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875


def _parse_pointwise(ctx):
    op = ctx.op
    if op == "Elu":
        return Pointwise(op, float(ctx.attr("alpha", 1.0)))
    if op == "Selu":
        return Pointwise(op, float(ctx.attr("alpha", _SELU_ALPHA)), 0.0,
                         float(ctx.attr("gamma", _SELU_GAMMA)))
    if op == "Celu":
        return Pointwise(op, float(ctx.attr("alpha", 1.0)))
    if op == "ThresholdedRelu":
        return Pointwise(op, float(ctx.attr("alpha", 1.0)))
    if op == "Shrink":
        return Pointwise(op, float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0)))
    if op == "Gelu":
        mode = ctx.attr("approximate", "none")
        if mode not in ("none", "tanh"):
            ctx.fail(f"approximate = {mode!r} is not allowed: none or tanh")
        return Pointwise(op, mode=mode)
    if op == "IsInf":
        return Pointwise(op, float(ctx.attr("detect_negative", 1)),
                         float(ctx.attr("detect_positive", 1)))
    return Pointwise(op)


def _pointwise(p, x):
    k = p.kind
    if k == "Elu":
        return np.where(x < 0, p.alpha * np.expm1(x), x)
    if k == "Selu":
        return p.gamma * np.where(x <= 0, p.alpha * np.expm1(x), x)
    if k == "Celu":
        return np.maximum(x, 0) + np.minimum(0, p.alpha * np.expm1(x / p.alpha))
    if k == "ThresholdedRelu":
        return np.where(x > p.alpha, x, 0)
    if k == "Shrink":
        lam, bias = p.alpha, p.beta
        return np.where(x < -lam, x + bias, np.where(x > lam, x - bias, 0))
    if k == "Gelu":
        if p.mode == "tanh":
            return _gelu_tanh(x)
        return 0.5 * x * (1 + erf(x / np.sqrt(2)))
    if k == "Mish":
        return x * np.tanh(_softplus(x))
    raise AssertionError(k)


def _pointwise_kernel(node, ctx):
    p = node.params
    if p.kind == "IsInf":
        def isinf(inputs, out=None):
            x = inputs[0]
            return [(np.isposinf(x) & bool(p.beta)) | (np.isneginf(x) & bool(p.alpha))]
        return isinf

    def run(inputs, out=None):
        x = inputs[0]
        wide = x.astype(np.float64) if x.dtype.kind == "f" else x
        return [np.asarray(_pointwise(p, wide)).astype(x.dtype, copy=False)]
    return run


for _op, _since in (("Elu", 1), ("Selu", 1), ("Celu", 12), ("ThresholdedRelu", 10),
                    ("Shrink", 9), ("Gelu", 20), ("Mish", 18), ("IsInf", 10)):
    register(_op, _parse_pointwise, _pointwise_kernel, since=_since, dynamic=True)
register("IsNaN", None, lambda node, ctx: (lambda inputs, out=None: [np.isnan(inputs[0])]),
         since=9, dynamic=True)


def _prelu_kernel(node, ctx):
    def run(inputs, out=None):
        x, slope = inputs
        return [np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)]
    return run


register("PRelu", None, _prelu_kernel, dynamic=True)


# ---------------------------------------------------------------------------- Pow, Mod
@dataclass(frozen=True)
class Pow:
    """x ** y in x's type (an integer base with a float exponent truncates toward zero)."""


def _pow_kernel(node, ctx):
    def run(inputs, out=None):
        x, y = inputs
        if x.dtype.kind in "iu" and y.dtype.kind in "iu" and not (y < 0).any():
            return [np.power(x, y.astype(x.dtype, copy=False))]
        wide = np.power(x.astype(np.float64), y.astype(np.float64))
        if x.dtype.kind in "iu":
            wide = np.trunc(wide)
        return [wide.astype(x.dtype)]
    return run


register("Pow", lambda ctx: Pow(), _pow_kernel, dynamic=True)


@dataclass(frozen=True)
class Mod:
    """The remainder: a - floor(a / b) * b, with the divisor's sign (``fmod`` false), or
    a - trunc(a / b) * b, with the dividend's sign, as C's fmod (``fmod`` true); for floats,
    NaN where a is infinite or b is 0."""

    fmod: bool


def _parse_mod(ctx):
    return Mod(bool(ctx.attr("fmod", 0)))


def _mod_kernel(node, ctx):
    fn = np.fmod if node.params.fmod else np.mod

    def run(inputs, out=None):
        a, b = inputs
        if a.dtype.kind in "iu" and (b == 0).any():
            ctx.fail("an integer divisor is 0")
        return [fn(a, b).astype(np.result_type(a, b), copy=False)]
    return run


register("Mod", _parse_mod, _mod_kernel, since=10, dynamic=True)


# ---------------------------------------------------------------------------- variadic, Where
_VARIADIC = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add, "Mean": np.add}


def _variadic_kernel(node, ctx):
    fn = _VARIADIC[node.op]
    mean = node.op == "Mean"

    def run(inputs, out=None):
        arrays = [a for a in inputs if a is not None]
        acc = arrays[0]
        for a in arrays[1:]:
            acc = fn(acc, a)
        acc = np.array(acc, copy=True) if len(arrays) == 1 else acc
        if mean:
            acc = acc / acc.dtype.type(len(arrays)) if acc.dtype.kind == "f" else \
                acc // len(arrays)
        return [acc.astype(arrays[0].dtype, copy=False)]
    return run


for _op in _VARIADIC:
    register(_op, None, _variadic_kernel, dynamic=True)


def _where_kernel(node, ctx):
    def run(inputs, out=None):
        c, a, b = inputs
        return [np.where(c, a, b).astype(a.dtype, copy=False)]
    return run


register("Where", None, _where_kernel, since=9, dynamic=True, any_dtype=True)
del _op, _since


def _parse_einsum(ctx):
    eq = ctx.attr("equation", "")
    if not isinstance(eq, str) or not eq:
        ctx.fail("equation is missing")
    return Unary(eq.replace(" ", ""))


def _einsum_kernel(node, ctx):
    eq = node.params.kind

    def run(inputs, out=None):
        try:
            y = np.einsum(eq, *inputs, optimize=len(inputs) > 2)
        except ValueError as exc:
            ctx.fail(f"equation = {eq!r} does not fit the inputs' shapes "
                     f"{[a.shape for a in inputs]}: {exc}")
        return [np.asarray(y).astype(inputs[0].dtype, copy=False)]
    return run


register("Einsum", _parse_einsum, _einsum_kernel, since=12, dynamic=True)
