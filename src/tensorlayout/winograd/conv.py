"""2-D convolution (NCHW input, OIHW weights) by Winograd, im2col + GEMM, or direct loops.

:func:`conv2d` is the one-call entry point; :func:`plan_conv2d` chooses the algorithm,
transforms the weights once and returns a :class:`ConvPlan` that can be run on many
inputs of the same shape.  Both tell the caller what was chosen and why
(:class:`ConvInfo`).

Numba is optional: with it the transforms, the gathers and the direct loops are
compiled (``USE_NUMBA = True``, the default when numba imports); without it the same
algorithms run in NumPy, slower.  GEMMs always go to NumPy's BLAS.
"""

from __future__ import annotations

from contextlib import nullcontext as _nullcontext
from dataclasses import dataclass, field

import numpy as np

from ..errors import (AlgorithmError, ConvolutionError, DTypeError, LayoutError, RankError,
                      ShapeError, check_array, check_positive_int)
from . import _threads
from .transforms import transforms as _transforms

__all__ = ["conv2d", "plan_conv2d", "ConvPlan", "ConvInfo", "choose_algorithm",
           "ALGORITHMS", "numba_available"]

ALGORITHMS = ("auto", "winograd", "im2col", "direct")
_DTYPES = (np.float32, np.float64)

#: Set to False to force the NumPy code paths even when numba is installed.
USE_NUMBA = True

# auto's thresholds (see docs/winograd.md, "The auto rule").
AUTO_MIN_CHANNELS = 16          # per group, in and out
AUTO_TILE6_SIDES = (48, 96)     # F(6,3) when AUTO_TILE6_SIDES[0] <= min(OH, OW) < [1]
AUTO_TILE4_MIN_SIDE = 20        # else F(4,3) when min(OH, OW) >= this
AUTO_TILE2_MIN_SIDE = 4         # else F(2,3) when min(OH, OW) >= this (else no Winograd)
AUTO_F45_MIN_SIDE = 20          # F(4,5) when min(OH, OW) >= this

_KERNELS = None
BLOCK_BYTES = 2 << 20
ROW_LAYOUT_MIN_TILES = 16       # tiles per row from which blocks are whole rows (see _blocks)
ROW_LAYOUT_MIN_BLOCK = 128      # ... and hold at least about this many tiles
IM2COL_SPLIT_GEMM = True


def numba_available() -> bool:
    """True when the compiled kernels can be used (numba importable and ``USE_NUMBA``).

    >>> isinstance(numba_available(), bool)
    True
    """
    global _KERNELS
    if not USE_NUMBA:
        return False
    if _KERNELS is None:
        try:
            from . import _kernels
            _KERNELS = _kernels
        except ImportError:
            _KERNELS = False
    return _KERNELS is not False


@dataclass(frozen=True)
class ConvInfo:
    """What a convolution did: ``algorithm`` ('winograd', 'im2col', 'direct'), ``tile`` (m of
    F(m, r) or None), ``reason`` (why auto chose it), ``backend`` ('numba' or 'numpy') and
    ``fallback`` (set when the result was recomputed, e.g. non-finite values met)."""

    algorithm: str
    tile: int | None
    kernel: tuple
    reason: str
    backend: str
    fallback: str | None = None

    @property
    def name(self) -> str:
        """Short label: 'winograd F(6,3)', 'im2col', 'direct'."""
        if self.algorithm == "winograd":
            return f"winograd F({self.tile},{self.kernel[0]})"
        return self.algorithm

    def as_dict(self) -> dict:
        return {"algorithm": self.algorithm, "tile": self.tile, "name": self.name,
                "reason": self.reason, "backend": self.backend, "fallback": self.fallback}


def _pair(name: str, value, minimum: int) -> tuple[int, int]:
    vals = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(vals) != 2:
        raise LayoutError(f"{name} = {value!r} is not allowed: give one integer or a pair (h, w)")
    out = []
    for v in vals:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < minimum:
            kind = "a positive integer" if minimum > 0 else "a non-negative integer"
            raise LayoutError(f"{name} = {value!r} is not allowed: it must be {kind} "
                              "or a pair of them")
        out.append(int(v))
    return out[0], out[1]


def _parse_algorithm(algorithm, tile):
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


def choose_algorithm(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1):
    """The auto rule: ``(algorithm, tile, reason)`` for a convolution of these shapes.

    Winograd only for square 3×3 / 5×5 kernels, stride 1, dilation 1 and at least
    ``AUTO_MIN_CHANNELS`` input and output channels per group.  Tile, from the smaller
    output side: F(6,3) for sides 48 to 95, F(4,3) for other sides from 20 (on 112- and
    224-wide layers F(6,3) is no faster and half as accurate), F(2,3) from 4 to 19 (on small
    layers with many channels the transformed filters, α²/r² times the weights, are read
    on every call: F(2,3)'s are the smallest), F(4,5) for 5×5 from 20; otherwise im2col
    (or direct loops for depthwise and other one-channel-per-group convolutions).

    >>> choose_algorithm((1, 64, 56, 56), (64, 64, 3, 3), padding=1)[:2]
    ('winograd', 6)
    >>> choose_algorithm((1, 512, 28, 28), (512, 512, 3, 3), padding=1)[:2]
    ('winograd', 4)
    >>> choose_algorithm((1, 3, 224, 224), (64, 3, 3, 3), padding=1)[:2]
    ('im2col', None)
    """
    N, C, H, W = x_shape
    K, Cg, KH, KW = w_shape
    sh, sw = _pair("stride", stride, 1)
    ph, pw = _pair("padding", padding, 0)
    dh, dw = _pair("dilation", dilation, 1)
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    Kg = K // groups
    fallback = "direct" if Cg == 1 else "im2col"
    if KH != KW or KH not in (3, 5):
        return fallback, None, f"kernel {KH}x{KW}: Winograd only for 3x3 and 5x5"
    if (sh, sw) != (1, 1) or (dh, dw) != (1, 1):
        return fallback, None, "stride or dilation is not 1"
    if Cg < AUTO_MIN_CHANNELS or Kg < AUTO_MIN_CHANNELS:
        return fallback, None, (f"{Cg} input / {Kg} output channels per group: Winograd pays "
                                f"from {AUTO_MIN_CHANNELS}")
    side = min(OH, OW)
    if KH == 3:
        lo, hi = AUTO_TILE6_SIDES
        if lo <= side < hi:
            return "winograd", 6, f"3x3, output side {side} in [{lo}, {hi}): F(6,3)"
        if side >= AUTO_TILE4_MIN_SIDE:
            return "winograd", 4, (f"3x3, output side {side} >= {AUTO_TILE4_MIN_SIDE}"
                                   + (f" (not in [{lo}, {hi}))" if side >= lo else "")
                                   + ": F(4,3)")
        if side >= AUTO_TILE2_MIN_SIDE:
            return "winograd", 2, (f"3x3, output side {side} < {AUTO_TILE4_MIN_SIDE}: F(2,3) "
                                   "(smallest transformed filters)")
        return fallback, None, f"output side {side} < {AUTO_TILE2_MIN_SIDE}: tiles too few"
    if side >= AUTO_F45_MIN_SIDE:
        return "winograd", 4, f"5x5, output side {side} >= {AUTO_F45_MIN_SIDE}: F(4,5)"
    return fallback, None, f"output side {side} < {AUTO_F45_MIN_SIDE}: tiles too few"


def _sparse(mat: np.ndarray):
    """Rows of ``mat`` as (indices, values, counts) of their non-zero entries."""
    rows, cols = mat.shape
    nnz = (mat != 0).sum(axis=1)
    width = max(1, int(nnz.max()))
    idx = np.zeros((rows, width), dtype=np.int64)
    val = np.zeros((rows, width), dtype=mat.dtype)
    for i in range(rows):
        nz = np.nonzero(mat[i])[0]
        idx[i, :len(nz)] = nz
        val[i, :len(nz)] = mat[i, nz]
    return idx, val, nnz.astype(np.int64)


@dataclass(eq=False)
class ConvPlan:
    """A convolution ready to run on inputs of one shape and dtype (weights already transformed).

    Build it with :func:`plan_conv2d`; call ``plan(x)`` (or ``plan.run(x)``); read ``plan.info``.

    >>> w = np.ones((16, 16, 3, 3), np.float32)
    >>> plan = plan_conv2d((1, 16, 8, 8), w, padding=1, algorithm="winograd:2")
    >>> plan.info.name, float(plan(np.ones((1, 16, 8, 8), np.float32))[0, 0, 3, 3])
    ('winograd F(2,3)', 144.0)
    """

    x_shape: tuple
    w: np.ndarray
    bias: np.ndarray
    stride: tuple
    padding: tuple
    dilation: tuple
    groups: int
    out_shape: tuple
    info: ConvInfo
    block: int | None = None
    last_fallback: str | None = None
    _wino: dict = field(default_factory=dict, repr=False)

    @property
    def dtype(self):
        return self.w.dtype

    def __call__(self, x) -> np.ndarray:
        return self.run(x)

    def run(self, x) -> np.ndarray:
        """Convolve ``x`` (the shape and dtype the plan was made for); returns a new array."""
        x = check_array("x", x, rank=4, dtypes=_DTYPES)
        if tuple(x.shape) != self.x_shape:
            raise ShapeError(f"x has shape {tuple(x.shape)}: this plan was made for {self.x_shape}")
        if x.dtype != self.w.dtype:
            raise DTypeError(f"x has dtype {x.dtype} but the weights have {self.w.dtype}: "
                             "they must match (float32 or float64)")
        x = np.ascontiguousarray(x)
        # Non-finite values are handled explicitly (see below); NumPy need not warn on the way.
        with np.errstate(invalid="ignore", over="ignore"):
            return self._run(x)

    def _run(self, x):
        alg = self.info.algorithm
        if alg == "winograd":
            y, ok = _winograd(self, x)
            if not ok:
                # Non-finite values met: recompute so NaN/Inf land where direct puts them.
                self.last_fallback = "non-finite values: recomputed direct"
                return _direct(self, x)
            self.last_fallback = None
            return y
        if alg == "im2col":
            return _im2col(self, x)
        return _direct(self, x)


def _check_conv_args(x_shape, w, bias, stride, padding, dilation, groups):
    x_shape = tuple(x_shape)
    if len(x_shape) != 4:
        raise RankError(f"x has shape {x_shape} ({len(x_shape)} dimensions): conv2d needs "
                        "exactly 4 (N, C, H, W)")
    for i, d in enumerate(x_shape):
        check_positive_int(f"x.shape[{i}]", d)
    w = check_array("w", w, rank=4, dtypes=_DTYPES)
    for i, d in enumerate(w.shape):
        check_positive_int(f"w.shape[{i}]", d)
    groups = check_positive_int("groups", groups)
    N, C, H, W = x_shape
    K, Cg, KH, KW = w.shape
    if C % groups:
        raise ConvolutionError(f"groups = {groups} does not divide the {C} input channels of x")
    if K % groups:
        raise ConvolutionError(f"groups = {groups} does not divide the {K} output channels of w")
    if Cg * groups != C:
        raise ConvolutionError(f"w has {Cg} input channels per group (w.shape[1]) but x has "
                               f"{C} channels in {groups} group(s): w.shape[1] must be "
                               f"{C // groups}")
    sh, sw = _pair("stride", stride, 1)
    ph, pw = _pair("padding", padding, 0)
    dh, dw = _pair("dilation", dilation, 1)
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    if OH < 1 or OW < 1:
        raise ConvolutionError(
            f"kernel {KH}x{KW} (dilation {dh},{dw}) does not fit input {H}x{W} with padding "
            f"{ph},{pw}: the output would be {OH}x{OW}")
    if bias is None:
        b = np.zeros(K, dtype=w.dtype)
    else:
        b = check_array("bias", bias, rank=1, dtypes=_DTYPES)
        if b.shape[0] != K:
            raise ShapeError(f"bias has {b.shape[0]} values: it needs one per output channel ({K})")
        if b.dtype != w.dtype:
            raise DTypeError(f"bias has dtype {b.dtype} but w has {w.dtype}: they must match")
    return (x_shape, np.ascontiguousarray(w), np.ascontiguousarray(b), (sh, sw), (ph, pw),
            (dh, dw), groups, (N, K, OH, OW))


def plan_conv2d(x_shape, w, bias=None, stride=1, padding=0, dilation=1, groups=1,
                algorithm="auto", tile=None, points=None, block=None) -> ConvPlan:
    """Choose the algorithm, transform the weights once, and return a runnable :class:`ConvPlan`.

    ``x_shape`` is (N, C, H, W); ``w`` is OIHW with I = C / groups.  ``algorithm``: "auto",
    "winograd" (``tile`` = m of F(m, r), or "winograd:6"), "im2col" or "direct".
    ``points`` passes custom interpolation points to :func:`transforms`; ``block`` sets
    how many tiles are transformed per GEMM batch (default: sized for the cache).

    >>> w = np.zeros((64, 64, 3, 3), np.float32)
    >>> p = plan_conv2d((1, 64, 56, 56), w, padding=1)
    >>> p.info.name, p.out_shape
    ('winograd F(6,3)', (1, 64, 56, 56))
    >>> plan_conv2d((1, 64, 14, 14), w, padding=1).info.name
    'winograd F(2,3)'

    """
    name, tile = _parse_algorithm(algorithm, tile)
    x_shape, w, b, st, pad, dil, groups, out_shape = _check_conv_args(
        x_shape, w, bias, stride, padding, dilation, groups)
    K, Cg, KH, KW = w.shape
    if name == "auto":
        name, tile, reason = choose_algorithm(x_shape, w.shape, st, pad, dil, groups)
    elif name == "winograd":
        if KH != KW:
            raise AlgorithmError(f"w has a {KH}x{KW} kernel: Winograd here needs a square kernel")
        if st != (1, 1):
            raise AlgorithmError(f"stride = {st[0] if st[0] == st[1] else st} is not allowed "
                                 "with Winograd: it computes stride-1 convolutions only "
                                 "(use algorithm='im2col' or 'auto')")
        if dil != (1, 1):
            raise AlgorithmError(f"dilation = {dil} is not allowed with Winograd: it needs "
                                 "dilation 1 (use algorithm='im2col' or 'auto')")
        if tile is None:
            if KH == 3:
                # auto's tile rule, without its channel and size conditions
                side = min(out_shape[2:])
                lo, hi = AUTO_TILE6_SIDES
                tile = 6 if lo <= side < hi else (4 if side >= AUTO_TILE4_MIN_SIDE else 2)
            elif KH == 5:
                tile = 4
            else:
                tile = 2
        reason = "asked for"
    else:
        if points is not None:
            raise LayoutError(f"points = {points!r} is only used by algorithm='winograd'")
        reason = "asked for"
    backend = "numba" if numba_available() else "numpy"
    info = ConvInfo(name, tile, (KH, KW), reason, backend)
    plan = ConvPlan(x_shape, w, b, st, pad, dil, groups, out_shape, info, block)
    if name == "winograd":
        _prepare_winograd(plan, tile, KH, points)
    return plan


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, algorithm="auto",
           tile=None, points=None, return_info=False):
    """2-D convolution (cross-correlation, as in CNNs) of NCHW ``x`` with OIHW ``w``.

    ``algorithm``: "auto" (Winograd where it pays, see :func:`choose_algorithm`),
    "winograd" / "winograd:M" (F(M, r); ``tile=M`` works too), "im2col", "direct".
    float32 and float64; grouped and depthwise (``groups = C``).  With
    ``return_info=True`` the result is ``(y, info)`` and ``info`` (a :class:`ConvInfo`)
    says which algorithm and tile ran.

    >>> x = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
    >>> w = np.ones((1, 1, 3, 3))
    >>> conv2d(x, w, algorithm="direct")[0, 0]
    array([[45., 54.],
           [81., 90.]])
    >>> y, info = conv2d(np.ones((1, 32, 24, 24), np.float32), np.ones((32, 32, 3, 3), np.float32),
    ...                  padding=1, return_info=True)
    >>> info.name, float(y[0, 0, 5, 5])
    ('winograd F(4,3)', 288.0)
    """
    x = check_array("x", x, rank=4, dtypes=_DTYPES)
    w_arr = check_array("w", w, rank=4, dtypes=_DTYPES)
    if x.dtype != w_arr.dtype:
        raise DTypeError(f"x has dtype {x.dtype} but w has {w_arr.dtype}: they must match "
                         "(float32 or float64)")
    plan = plan_conv2d(x.shape, w_arr, bias, stride, padding, dilation, groups, algorithm,
                       tile, points)
    y = plan.run(x)
    if return_info:
        info = plan.info
        if plan.last_fallback:
            info = ConvInfo(info.algorithm, info.tile, info.kernel, info.reason, info.backend,
                            plan.last_fallback)
        return y, info
    return y


# ---------------------------------------------------------------------------------------------
# Winograd

def _prepare_winograd(plan: ConvPlan, m: int, r: int, points) -> None:
    t = _transforms(m, r, points)
    alpha = t.alpha
    AT64, G64, BT64 = t.as_float(np.float64)
    w = plan.w
    K, Cg = w.shape[:2]
    # U[a, b, k, c] = sum_ij G[a, i] w[k, c, i, j] G[b, j], in float64 then rounded once.
    w64 = w.astype(np.float64, copy=False)
    tmp = np.tensordot(w64, G64, axes=([3], [1]))          # (K, Cg, r, b)
    U = np.tensordot(G64, tmp, axes=([1], [2]))            # (a, K, Cg, b)
    U = np.ascontiguousarray(U.transpose(0, 3, 1, 2)).reshape(alpha * alpha, K, Cg)
    dt = w.dtype
    G_ = plan.groups
    Kg = K // G_
    gen = None
    if points is None and dt == np.float32 and numba_available():
        # float32 is the fast path; float64 (for accuracy) keeps the generic kernels, which
        # also halves the compilation time.
        gen = _generated_kernels(t, dt)
    plan._wino.update(
        t=t, m=m, r=r, alpha=alpha, gen=gen,
        U=U.reshape(alpha * alpha, G_, Kg, Cg).astype(dt),
        AT=AT64.astype(dt), BT=BT64.astype(dt),
        BTs=_sparse(BT64.astype(dt)), ATs=_sparse(AT64.astype(dt)),
    )


def _generated_kernels(t, dt):
    """The unrolled kernels for this F(m, r) when its exact matrices are the generated ones."""
    try:
        from . import _generated
    except ImportError:  # pragma: no cover - numba present but the file missing
        return None
    key = (t.m, t.r)
    exact = (tuple(tuple(str(v) for v in row) for row in t.AT),
             tuple(tuple(str(v) for v in row) for row in t.BT))
    if _generated.EXACT.get(key) != exact:
        return None
    from fractions import Fraction

    coef = np.array([float(Fraction(c)) for c in _generated.COEFS[key]] or [1.0], dtype=dt)
    return (getattr(_generated, f"wino_input_{t.m}_{t.r}"),
            getattr(_generated, f"wino_output_{t.m}_{t.r}"), coef)


def _block_size(plan, P, C, K, alpha, itemsize):
    if plan.block is not None:
        return max(1, min(int(plan.block), P))
    # Keep the transformed block (alpha^2 x max(C, K) x Pb) around BLOCK_BYTES, in multiples of
    # 16 tiles, and never below 128 tiles (narrower GEMMs lose more than the cache saves).
    target = BLOCK_BYTES // (alpha * alpha * max(C, K) * itemsize)
    pb = max(128, (target // 16) * 16)
    return min(pb, P)


def _blocks(plan, N, nty, ntx, C, K, m, alpha, itemsize, gen):
    """``(blocks, Pb, U2)``: the blocks as (first tile, tile count), the columns of V and M
    per block, and U2 (> 0 for the row layout of the compiled kernels, 0 otherwise).

    Row layout (wide images, float32 generated kernels): a block is R whole rows of tiles
    of one image, each row taking ``U2 = ntx + (alpha - 1) // m`` columns (the extra ones
    spare tiles), so that the input transform runs unit-stride over the whole block."""
    T = nty * ntx
    P = N * T
    if gen is not None and plan.block is None and ntx >= ROW_LAYOUT_MIN_TILES:
        U2 = ntx + (alpha - 1) // m
        target = BLOCK_BYTES // (alpha * alpha * max(C, K) * itemsize)
        R = max(1, min(nty, int(round(max(target, ROW_LAYOUT_MIN_BLOCK) / ntx))))
        blocks = [(n * T + ty0 * ntx, min(R, nty - ty0) * ntx)
                  for n in range(N) for ty0 in range(0, nty, R)]
        return blocks, R * U2, U2
    Pb = _block_size(plan, P, C, K, alpha, itemsize)
    return [(p0, min(Pb, P - p0)) for p0 in range(0, P, Pb)], Pb, 0


def _gemm(U, V, M, groups, Kg, Cg):
    a2 = U.shape[0]
    Pb = V.shape[2]
    V4 = V.reshape(a2, groups, Cg, Pb)
    M4 = M.reshape(a2, groups, Kg, Pb)
    if Cg == 1:
        np.multiply(U, V4, out=M4)
    else:
        np.matmul(U, V4, out=M4)


def _winograd(plan: ConvPlan, x: np.ndarray):
    wd = plan._wino
    m, alpha = wd["m"], wd["alpha"]
    N, C, H, W = x.shape
    K, Cg = plan.w.shape[:2]
    groups = plan.groups
    Kg = K // groups
    OH, OW = plan.out_shape[2:]
    ph, pw = plan.padding
    nty, ntx = -(-OH // m), -(-OW // m)
    dt = x.dtype
    if not numba_available():
        return _winograd_numpy(plan, x, nty, ntx)
    k = _KERNELS
    gen = wd["gen"]
    blocks, Pb, U2 = _blocks(plan, N, nty, ntx, C, K, m, alpha, dt.itemsize, gen)
    V = np.empty((alpha * alpha, C, Pb), dtype=dt)
    M = np.empty((alpha * alpha, K, Pb), dtype=dt)
    y = np.empty(plan.out_shape, dtype=dt)
    bad = np.zeros(K, dtype=dt)
    BTi, BTv, BTn = wd["BTs"]
    ATi, ATv, ATn = wd["ATs"]
    U = wd["U"]
    bias = plan.bias
    nt = _threads.num_threads()
    split = _threads.run_split

    def gemm(t0, t1):
        _gemm(U[t0:t1], V[t0:t1], M[t0:t1], groups, Kg, Cg)

    nblocks = len(blocks)
    if gen is not None and nt > 1 and nblocks >= 2 * nt:
        # Many blocks: each thread runs whole blocks (transform, GEMMs, inverse) on its own
        # buffers; no barrier between the phases and each block stays in one core's cache.
        gin, gout, coef = gen
        bads = np.zeros((nt, K), dtype=dt)

        def worker(t0, t1):
            for tid in range(t0, t1):
                Vt = V if tid == 0 else np.empty_like(V)
                Mt = M if tid == 0 else np.empty_like(M)
                for blk in range(tid, nblocks, nt):
                    p0, npb = blocks[blk]
                    gin(x, Vt, coef, ph, pw, nty, ntx, p0, npb, 0, C, U2)
                    _gemm(U, Vt, Mt, groups, Kg, Cg)
                    gout(Mt, y, bias, coef, nty, ntx, p0, npb, bads[tid], 0, K, U2)

        with _threads.single_threaded_blas():
            split(worker, nt, nt)
        return y, not bads.any()
    with _threads.single_threaded_blas():
        for p0, npb in blocks:
            if gen is not None:
                gin, gout, coef = gen
                split(lambda c0, c1: gin(x, V, coef, ph, pw, nty, ntx, p0, npb, c0, c1, U2),
                      C, nt)
                split(gemm, alpha * alpha, nt)
                split(lambda k0, k1: gout(M, y, bias, coef, nty, ntx, p0, npb, bad, k0, k1, U2),
                      K, nt)
                continue
            split(lambda c0, c1: k.wino_input(x, V, BTi, BTv, BTn, m, ph, pw, nty, ntx, p0, npb,
                                              c0, c1), C, nt)
            split(gemm, alpha * alpha, nt)
            split(lambda k0, k1: k.wino_output(M, y, bias, ATi, ATv, ATn, m, alpha, nty, ntx, p0,
                                               npb, bad, k0, k1), K, nt)
    return y, not bad.any()


def _winograd_numpy(plan, x, nty, ntx):
    wd = plan._wino
    m, alpha = wd["m"], wd["alpha"]
    N, C, H, W = x.shape
    K, Cg = plan.w.shape[:2]
    groups = plan.groups
    Kg = K // groups
    ph, pw = plan.padding
    Hp, Wp = nty * m + alpha - m, ntx * m + alpha - m
    xp = np.zeros((N, C, Hp, Wp), dtype=x.dtype)
    hh, ww = min(H, Hp - ph), min(W, Wp - pw)
    xp[:, :, ph:ph + hh, pw:pw + ww] = x[:, :, :hh, :ww]
    s = xp.strides
    tiles = np.lib.stride_tricks.as_strided(
        xp, (N, C, nty, ntx, alpha, alpha), (s[0], s[1], m * s[2], m * s[3], s[2], s[3]),
        writeable=False)
    BT, AT = wd["BT"], wd["AT"]
    Vt = BT @ tiles @ BT.T                                   # (N, C, nty, ntx, a, b)
    P = N * nty * ntx
    V = np.ascontiguousarray(Vt.transpose(4, 5, 1, 0, 2, 3)).reshape(alpha * alpha, C, P)
    M = np.empty((alpha * alpha, K, P), dtype=x.dtype)
    _gemm(wd["U"], V, M, groups, Kg, Cg)
    Mt = M.reshape(alpha, alpha, K, N, nty, ntx).transpose(3, 2, 4, 5, 0, 1)
    Yt = AT @ Mt @ AT.T                                      # (N, K, nty, ntx, m, m)
    Y = Yt.transpose(0, 1, 2, 4, 3, 5).reshape(N, K, nty * m, ntx * m)
    OH, OW = plan.out_shape[2:]
    y = np.ascontiguousarray(Y[:, :, :OH, :OW]) + plan.bias[None, :, None, None]
    return y, bool(np.isfinite(y).all())


# ---------------------------------------------------------------------------------------------
# im2col + GEMM

def _im2col(plan: ConvPlan, x: np.ndarray) -> np.ndarray:
    N, C, H, W = x.shape
    K, Cg, KH, KW = plan.w.shape
    groups = plan.groups
    Kg = K // groups
    OH, OW = plan.out_shape[2:]
    sh, sw = plan.stride
    ph, pw = plan.padding
    dh, dw = plan.dilation
    dt = x.dtype
    KK = KH * KW
    rows_per = max(1, min(OH, (8 << 20) // max(1, C * KK * OW * dt.itemsize)))
    W3 = plan.w.reshape(groups, Kg, Cg * KK)
    y = np.empty(plan.out_shape, dtype=dt)
    use_nb = numba_available()
    if not use_nb:
        xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=dt)
        xp[:, :, ph:ph + H, pw:pw + W] = x
    cols_buf = np.empty((C * KK, rows_per * OW), dtype=dt)
    nt = _threads.num_threads() if use_nb else 1
    # Columns are filled, and the GEMM split by output channels, on our threads with BLAS
    # held to one thread: BLAS's own worker threads keep spinning after a call and slow down
    # whatever runs next on the same cores (another library's convolution included).
    with _nullcontext():
        for n in range(N):
            yn = y[n].reshape(groups, Kg, OH * OW)
            for oh0 in range(0, OH, rows_per):
                rows = min(rows_per, OH - oh0)
                cols = cols_buf[:, :rows * OW]
                if use_nb:
                    _threads.run_split(
                        lambda r0, r1: _KERNELS.im2col(x, cols, n, oh0, KH, KW, sh, sw, ph, pw,
                                                       dh, dw, OW, r0, r1), C * KK, nt)
                else:
                    c5 = cols.reshape(C, KH, KW, rows, OW)
                    for kh in range(KH):
                        for kw in range(KW):
                            y0 = oh0 * sh + kh * dh
                            x0 = kw * dw
                            c5[:, kh, kw] = xp[n, :, y0:y0 + sh * (rows - 1) + 1:sh,
                                               x0:x0 + sw * (OW - 1) + 1:sw]
                cols3 = cols.reshape(groups, Cg * KK, rows * OW)

                if IM2COL_SPLIT_GEMM and use_nb:
                    def gemm(k0, k1):
                        yn[:, k0:k1, oh0 * OW:(oh0 + rows) * OW] = np.matmul(W3[:, k0:k1], cols3)

                    with _threads.single_threaded_blas():
                        _threads.run_split(gemm, Kg, nt)
                else:
                    yn[:, :, oh0 * OW:(oh0 + rows) * OW] = np.matmul(W3, cols3)
    y += plan.bias[None, :, None, None]
    return y


# ---------------------------------------------------------------------------------------------
# direct

def _direct(plan: ConvPlan, x: np.ndarray) -> np.ndarray:
    N, C, H, W = x.shape
    K, Cg, KH, KW = plan.w.shape
    sh, sw = plan.stride
    ph, pw = plan.padding
    dh, dw = plan.dilation
    groups = plan.groups
    y = np.empty(plan.out_shape, dtype=x.dtype)
    if numba_available():
        _KERNELS.direct(x, plan.w, plan.bias, y, sh, sw, ph, pw, dh, dw, groups)
        return y
    Kg = K // groups
    OH, OW = plan.out_shape[2:]
    y[...] = plan.bias[None, :, None, None]
    yg = y.reshape(N, groups, Kg, OH, OW)
    wg = plan.w.reshape(groups, Kg, Cg, KH, KW)
    for kh in range(KH):
        lo_h, hi_h = _valid(kh * dh - ph, sh, H, OH)
        for kw in range(KW):
            lo_w, hi_w = _valid(kw * dw - pw, sw, W, OW)
            if lo_h >= hi_h or lo_w >= hi_w:
                continue
            iy0 = lo_h * sh + kh * dh - ph
            ix0 = lo_w * sw + kw * dw - pw
            xs = x[:, :, iy0:iy0 + sh * (hi_h - lo_h - 1) + 1:sh,
                   ix0:ix0 + sw * (hi_w - lo_w - 1) + 1:sw]
            xs = xs.reshape(N, groups, Cg, hi_h - lo_h, hi_w - lo_w)
            yg[:, :, :, lo_h:hi_h, lo_w:hi_w] += np.einsum("gkc,ngchw->ngkhw", wg[:, :, :, kh, kw], xs)
    return y


def _valid(off: int, s: int, size: int, out: int):
    """Output range [lo, hi) whose input index o·s + off lies in [0, size)."""
    lo = 0 if off >= 0 else (-off + s - 1) // s
    hi = (size - 1 - off) // s + 1 if size - 1 - off >= 0 else 0
    return min(lo, out), max(min(hi, out), 0)
