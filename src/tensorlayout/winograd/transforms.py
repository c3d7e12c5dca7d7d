"""Exact Winograd transforms F(m, r) from Cook–Toom / Lagrange interpolation.

For an output tile of ``m`` values and a kernel of ``r`` taps, ``alpha = m + r - 1``
input values are turned into ``m`` outputs of the correlation

    y[i] = sum_k d[i + k] * g[k]        (i = 0 .. m-1, k = 0 .. r-1)

with ``alpha`` multiplications::

    y = AT @ ((G @ g) * (BT @ d))

The matrices come from evaluating polynomials at ``alpha - 1`` finite points and at
infinity.  Writing the linear convolution ``s = a * g`` of a length-``m`` and a
length-``r`` sequence as ``s = C (A_e a ⊙ G_e g)`` (evaluate, multiply, interpolate),
the correlation is its transpose with respect to ``a``:  ``AT = A_eᵀ``, ``G = G_e``,
``BT = Cᵀ``.  Every entry is a :class:`fractions.Fraction`; the identity is checked
exactly, for every (i, k, j), before a transform is handed out.

Scaling a row of G by ``s`` and the same row of BT by ``1/s`` changes nothing in exact
arithmetic; it does change the rounding in floating point.  The defaults put the Lagrange
denominators into G (so BT holds the coefficients of the node polynomials), and for
r = 3, m = 2, 4, 6 use exactly the G of MACE's OpenCL runtime, so that filter images are
byte-compatible with it.
"""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from ..errors import AlgorithmError, LayoutError, check_positive_int

__all__ = ["Transforms", "transforms", "default_points", "ALPHA_MAX", "MAX_ERROR_BOUND"]

#: A convolution refuses transforms whose :meth:`Transforms.error_bound` in the data's dtype
#: exceeds this: their worst case no longer promises two correct digits.
MAX_ERROR_BOUND = 1e-2

#: Largest input tile ``alpha = m + r - 1`` the generator accepts.  Beyond ~10 the float
#: transforms lose most of their precision anyway; the cap keeps exact arithmetic quick.
ALPHA_MAX = 24

F = Fraction

# MACE's G for r = 3 (REFERENCE section 1), as (points in row order, row scale of the
# Vandermonde row [1, p, p^2]; the last row is the point at infinity, [0, 0, 1]).
_MACE = {
    2: ((F(0), F(1), F(-1)), (F(1), F(1, 2), F(1, 2), F(1))),
    4: ((F(0), F(1), F(-1), F(2), F(-2)),
        (F(1, 4), F(-1, 6), F(-1, 6), F(1, 24), F(1, 24), F(1))),
    6: ((F(0), F(1), F(-1), F(2), F(-2), F(1, 2), F(-1, 2)),
        (F(1), F(-2, 9), F(-2, 9), F(1, 90), F(1, 90), F(1, 45), F(1, 45), F(1))),
}


def default_points(n: int) -> tuple[Fraction, ...]:
    """The first ``n`` finite interpolation points: 0, 1, -1, 2, -2, 1/2, -1/2, 3, -3, 1/3, ...

    These are the standard choices (small integers and their reciprocals, which keep the
    transforms well conditioned).

    >>> [str(p) for p in default_points(7)]
    ['0', '1', '-1', '2', '-2', '1/2', '-1/2']
    """
    pts: list[Fraction] = [F(0)]
    k = 1
    while len(pts) < n:
        for p in (F(k), F(-k), F(1, k), F(-1, k)):
            if p not in pts:
                pts.append(p)
        k += 1
    return tuple(pts[:n])


def _to_fraction(name: str, value) -> Fraction:
    if isinstance(value, (bool, np.bool_)):
        raise LayoutError(f"{name} = {value!r} is not allowed: a point must be a rational number")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, numbers.Integral):
        return F(int(value))
    if isinstance(value, numbers.Rational):
        return F(value.numerator, value.denominator)
    if isinstance(value, str):
        try:
            return F(value.strip())
        except (ValueError, ZeroDivisionError):
            raise LayoutError(f"{name} = {value!r} is not allowed: a point must be a rational "
                              "number such as '1/2' or '-2'") from None
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v):
            raise LayoutError(f"{name} = {value!r} is not allowed: a point must be a finite "
                              "rational number (the point at infinity is always included)")
        # floats are read as the decimal they print as: 0.5 -> 1/2, 0.1 -> 1/10
        return F(repr(v))
    raise LayoutError(f"{name} = {value!r} is not allowed: a point must be a rational number")


def _polymul(a: list[Fraction], b: list[Fraction]) -> list[Fraction]:
    out = [F(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b):
                out[i + j] += x * y
    return out


@dataclass(frozen=True, eq=False)
class Transforms:
    """Exact F(m, r) transforms: ``AT`` (m×α), ``G`` (α×r), ``BT`` (α×α), Fractions.

    >>> t = transforms(2, 3)
    >>> t.alpha, [str(v) for v in t.G[1]]
    (4, ['1/2', '1/2', '1/2'])
    """

    m: int
    r: int
    alpha: int
    points: tuple
    AT: np.ndarray
    G: np.ndarray
    BT: np.ndarray

    @property
    def amplification(self) -> float:
        """How much the 2-D transforms can grow a rounding error, at worst: κ² with
        κ = max |Aᵀ| (|G|·1 ∘ |Bᵀ|·1), the largest sum of absolute products from a weight and
        an input value to one output of a 1-D tile.  Rounding errors in a tile's products
        reach the output multiplied by up to this much, so ``eps · amplification`` bounds the
        relative error a dtype can promise (float32 tiles past :data:`MAX_ERROR_BOUND` are
        refused by the convolution).

        >>> [round(transforms(m, 3).amplification) for m in (2, 4, 6)]
        [64, 2304, 4579]
        """
        got = self.__dict__.get("_amplification")
        if got is None:
            AT, G, BT = self.as_float(np.float64)
            k = float((np.abs(AT) @ (np.abs(G).sum(axis=1) * np.abs(BT).sum(axis=1))).max())
            got = self.__dict__.setdefault("_amplification", k * k)
        return got

    def error_bound(self, dtype=np.float32) -> float:
        """``eps(dtype) · amplification``: the worst relative error these transforms can add
        in ``dtype`` (measured errors on random data are 10 to 1000 times smaller).

        >>> f"{transforms(6, 3).error_bound(np.float32):.1e}", f"{transforms(16, 3).error_bound():.0e}"
        ('5.5e-04', '2e+05')
        """
        return float(np.finfo(dtype).eps) * self.amplification

    def as_float(self, dtype=np.float64):
        """``(AT, G, BT)`` as read-only float arrays of ``dtype`` (rounded once from the exact values).

        >>> AT, G, BT = transforms(2, 3).as_float(np.float32)
        >>> G.dtype, G.shape
        (dtype('float32'), (4, 3))
        """
        dt = np.dtype(dtype)
        if dt.kind != "f":
            raise LayoutError(f"dtype = {dt} is not allowed: transforms are float (float16/32/64)")
        key = dt.str
        cache = self.__dict__.setdefault("_float_cache", {})
        got = cache.get(key)
        if got is None:
            got = tuple(_frozen(np.array([[float(v) for v in row] for row in mat], dtype=dt))
                        for mat in (self.AT, self.G, self.BT))
            cache[key] = got
        return got

    def __repr__(self) -> str:
        pts = ", ".join(str(p) for p in self.points)
        return f"Transforms(F({self.m},{self.r}), alpha={self.alpha}, points=[{pts}, inf])"


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _generate(m: int, r: int, points: tuple[Fraction, ...], scale: tuple | None) -> Transforms:
    alpha = m + r - 1
    n = alpha - 1
    # Vandermonde rows of the evaluation maps, point at infinity last.
    A_e = [[p ** j for j in range(m)] for p in points] + [[F(0)] * (m - 1) + [F(1)]]
    G_e = [[p ** j for j in range(r)] for p in points] + [[F(0)] * (r - 1) + [F(1)]]
    # Interpolation: s(x) = sum_i s(p_i) N_i(x)/N_i(p_i) + s_inf * M(x), N_i = prod_{j!=i}(x - p_j).
    # BT = Cᵀ: row i = coefficients of N_i (the 1/N_i(p_i) moves into G's row i), last row = M.
    BT_rows = []
    G_rows = []
    for i, p in enumerate(points):
        node = [F(1)]
        denom = F(1)
        for j, q in enumerate(points):
            if j != i:
                node = _polymul(node, [-q, F(1)])
                denom *= p - q
        BT_rows.append(node + [F(0)] * (alpha - len(node)))
        G_rows.append([v / denom for v in G_e[i]])
    M = [F(1)]
    for q in points:
        M = _polymul(M, [-q, F(1)])
    BT_rows.append(M)
    G_rows.append(list(G_e[n]))
    if scale is not None:
        # Rescale rows of G to the requested G = diag(scale) G_e; BT rows take the inverse.
        for i in range(alpha):
            base = G_e[i]
            cur = G_rows[i]
            j = next(k for k, v in enumerate(base) if v != 0)
            factor = scale[i] * base[j] / cur[j]
            G_rows[i] = [v * factor for v in cur]
            BT_rows[i] = [v / factor for v in BT_rows[i]]
    AT = [[A_e[t][i] for t in range(alpha)] for i in range(m)]
    AT_a = _frozen(np.array(AT, dtype=object).reshape(m, alpha))
    G_a = _frozen(np.array(G_rows, dtype=object).reshape(alpha, r))
    BT_a = _frozen(np.array(BT_rows, dtype=object).reshape(alpha, alpha))
    _verify(m, r, alpha, AT_a, G_a, BT_a)
    return Transforms(m, r, alpha, tuple(points), AT_a, G_a, BT_a)


def _verify(m, r, alpha, AT, G, BT) -> None:
    """Exact check: sum_t AT[i,t] G[t,k] BT[t,j] == [j == i + k] for every i, k, j."""
    for i in range(m):
        for k in range(r):
            for j in range(alpha):
                s = sum((AT[i, t] * G[t, k] * BT[t, j] for t in range(alpha)), F(0))
                if s != (1 if j == i + k else 0):
                    raise AlgorithmError(  # pragma: no cover - would mean a generator bug
                        f"F({m},{r}) transforms fail the exact check at (i={i}, k={k}, j={j})")


_CACHE: dict = {}
_LOCK = threading.Lock()


def transforms(m: int, r: int, points: Sequence | None = None) -> Transforms:
    """Exact Winograd transforms for F(m, r), checked against direct correlation, cached.

    ``points`` are the ``m + r - 2`` finite interpolation points (the point at infinity is
    always added); ints, Fractions, strings such as ``"1/2"`` or floats (read as the
    decimal they print as).  Default: :func:`default_points`, and for r = 3, m = 2, 4, 6
    exactly MACE's G.

    >>> t = transforms(2, 3)
    >>> [[str(v) for v in row] for row in t.BT]
    [['1', '0', '-1', '0'], ['0', '1', '1', '0'], ['0', '-1', '1', '0'], ['0', '-1', '0', '1']]
    >>> AT, G, BT = t.as_float()
    >>> d, g = np.array([1., 2, 3, 4]), np.array([1., 0, -1])
    >>> AT @ ((G @ g) * (BT @ d))     # y[i] = sum_k d[i+k] g[k]
    array([-2., -2.])
    """
    m = check_positive_int("m", m)
    r = check_positive_int("r", r)
    alpha = m + r - 1
    if alpha > ALPHA_MAX:
        raise AlgorithmError(f"m + r - 1 = {alpha} (m = {m}, r = {r}) is not allowed: the input "
                             f"tile alpha must be at most {ALPHA_MAX}")
    n = alpha - 1
    scale = None
    if points is None:
        if r == 3 and m in _MACE:
            pts, scale = _MACE[m]
        else:
            pts = default_points(n)
    else:
        if isinstance(points, (str, bytes)) or not hasattr(points, "__iter__"):
            raise LayoutError(f"points = {points!r} is not allowed: it must be a sequence of "
                              f"{n} rational numbers")
        pts = tuple(_to_fraction(f"points[{i}]", p) for i, p in enumerate(points))
        if len(pts) != n:
            raise LayoutError(f"points has {len(pts)} values: F({m},{r}) needs exactly "
                              f"m + r - 2 = {n} finite points (infinity is added)")
        seen = {}
        for i, p in enumerate(pts):
            if p in seen:
                raise LayoutError(f"points[{i}] = {p} repeats points[{seen[p]}]: the "
                                  "interpolation points must be distinct")
            seen[p] = i
    key = (m, r, pts, scale is not None)
    with _LOCK:
        got = _CACHE.get(key)
    if got is None:
        got = _generate(m, r, pts, scale)
        with _LOCK:
            got = _CACHE.setdefault(key, got)
    return got
