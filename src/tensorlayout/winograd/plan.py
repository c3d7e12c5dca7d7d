"""2-D convolution (NCHW input, OIHW weights) by Winograd, im2col + GEMM, or direct loops.

:func:`conv2d` is the one-call entry point; :func:`plan_conv2d` chooses the algorithm,
transforms the weights once and returns a :class:`ConvPlan` that can be run on many
inputs of the same shape, from several threads at once.  Both tell the caller what was
chosen and why (:class:`ConvInfo`).

Numba is optional: with it the transforms, the gathers and the direct loops are
compiled; without it (or with ``Tuning(use_numba=False)``) the same algorithms run in
NumPy, slower.  GEMMs always go to NumPy's BLAS.

Non-finite values follow PyTorch's semantics for every algorithm: the result is as if
the input were zero-padded and every product of the kernel window taken, so a NaN or
Inf weight makes NaN where it meets a padded zero too.  Winograd spreads a non-finite
value over whole tiles, so a Winograd call that meets one is recomputed with im2col.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

import numpy as np

from .._checks import keyword_only
from ..errors import AlgorithmError, DTypeError, LayoutError, ShapeError, check_array
from .. import _backend, _jit
from . import _args, _pool, engine
from .auto import choose_algorithm
from .direct import direct as _direct
from .im2col import im2col as _im2col
from .transforms import MAX_ERROR_BOUND, transforms as _transforms
from .tuning import DEFAULT, Tuning

__all__ = ["conv2d", "plan_conv2d", "ConvPlan", "ConvInfo", "choose_algorithm",
           "ALGORITHMS", "numba_available", "Tuning"]

ALGORITHMS = _args.ALGORITHMS
_NUMBA = None


def numba_available(tuning: Tuning = DEFAULT) -> bool:
    """True when the compiled kernels can be used (numba importable and ``tuning.use_numba``).

    >>> isinstance(numba_available(), bool)
    True
    """
    global _NUMBA
    if not tuning.use_numba:
        return False
    if _NUMBA is None:
        _NUMBA = _backend.has_numba()
        if _NUMBA:
            try:
                from . import _kernels  # noqa: F401
            except ImportError:
                _NUMBA = False
    return _NUMBA


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


@dataclass(eq=False)
class ConvPlan:
    """A convolution ready to run on inputs of one shape and dtype (weights already transformed).

    Build it with :func:`plan_conv2d`; call ``plan(x)`` (or ``plan.run(x)``); read ``plan.info``.
    A plan may be called from several threads at once: each call has scratch buffers of
    its own (the transformed weights are only read), calls on the native workers take
    turns, and ``last_fallback`` is kept per calling thread.

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
    tuning: Tuning = DEFAULT
    winograd: engine.WinogradWeights | None = field(default=None, repr=False)
    _schedules: dict = field(default_factory=dict, repr=False)
    _workspace: engine.Workspace = field(default_factory=engine.Workspace, repr=False)
    _finite_w: bool = True          # False: direct weights hold NaN/Inf (im2col computes)
    _points: object = None
    _pending: bool = False          # built with NumPy while its kernels compile
    _calls: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def last_fallback(self) -> str | None:
        """Why this thread's last call was recomputed (e.g. non-finite values met), or None."""
        return getattr(self._calls, "fallback", None)

    @property
    def dtype(self):
        return self.w.dtype

    def __call__(self, x) -> np.ndarray:
        return self.run(x)

    def run(self, x) -> np.ndarray:
        """Convolve ``x`` (the shape and dtype the plan was made for); returns a new array."""
        x = check_array("x", x, rank=4, dtypes=_args.DTYPES)
        if tuple(x.shape) != self.x_shape:
            raise ShapeError(f"x has shape {tuple(x.shape)}: this plan was made for {self.x_shape}")
        if x.dtype != self.w.dtype:
            raise DTypeError(f"x has dtype {x.dtype} but the weights have {self.w.dtype}: "
                             "they must match (float32 or float64)")
        x = np.ascontiguousarray(x)
        # Non-finite values are handled explicitly (see the module docstring).
        with np.errstate(invalid="ignore", over="ignore"):
            y, fallback = self._run(x)
        self._calls.fallback = fallback
        return y

    def _threads(self) -> int:
        return _pool.num_threads(self.tuning.threads)

    def _upgrade(self) -> None:
        """Switch to the compiled kernels once their background compile has finished."""
        key, dispatchers, _ = _needed(self, self._points)
        if _jit.busy() or not _jit.loadable(dispatchers):
            return
        if self.info.algorithm == "winograd":
            self.winograd = engine.prepare(self.w, self.winograd.t, self.groups, True,
                                           self._threads(), tuning=self.tuning)
        self._schedules.clear()
        self.info = dataclasses.replace(self.info, backend="numba")
        self._pending = False

    def _run(self, x):
        if self._pending:
            self._upgrade()
        alg = self.info.algorithm
        use_nb = numba_available(self.tuning) and not self._pending
        if alg == "winograd":
            ww = self.winograd
            if ww.kernels is None:
                y, ok = engine.run_numpy(ww, x, self.bias, self.out_shape, self.padding,
                                         self.groups)
            elif ww.native is not None:
                y, ok = self._native_call()(x, self._workspace)
            else:
                y, ok = engine.run(ww, x, self.bias, self.out_shape, self.padding, self.groups,
                                   self.schedule(), self._workspace)
            if ok:
                return y, None
            return (_im2col(self, x, use_nb, self._threads()),
                    "non-finite values: recomputed with im2col")
        if alg == "im2col" or not self._finite_w:
            y = _im2col(self, x, use_nb, self._threads())
            return y, (None if alg == "im2col" else "non-finite weights: computed with im2col")
        return _direct(self, x, use_nb), None

    def _native_call(self) -> engine.NativeCall:
        nt = self._threads()
        c = self._schedules.get(("native", nt))
        if c is None:
            c = engine.NativeCall(self.winograd, self.x_shape, self.bias, self.out_shape,
                                  self.padding, self.groups, self.schedule(), self.w)
            self._schedules[("native", nt)] = c
        return c

    def schedule(self) -> engine.Schedule:
        """How a call is cut into blocks and threads (see :mod:`tensorlayout.winograd.engine`)."""
        nt = self._threads()
        s = self._schedules.get(nt)
        if s is None:
            N, C = self.x_shape[:2]
            K, OH, OW = self.out_shape[1:]
            ww = self.winograd
            m = ww.m
            s = engine.schedule(N, -(-OH // m), -(-OW // m), C, K, m, ww.alpha,
                                self.w.dtype.itemsize, nt, self.tuning, ww.generated,
                                ww.native is not None, self.groups)
            self._schedules[nt] = s
        return s


def plan_conv2d(x_shape, w, bias=None, *args, stride=1, padding=0, dilation=1, groups=1,
                algorithm="auto", tile=None, points=None, block=None, tuning=None,
                weights="once") -> ConvPlan:
    """Choose the algorithm, transform the weights once, and return a runnable :class:`ConvPlan`.

    ``x_shape`` is (N, C, H, W); ``w`` is OIHW with I = C / groups; everything after
    ``bias`` is keyword-only, as in :func:`conv2d`.  ``algorithm``: "auto",
    "winograd" (``tile`` = m of F(m, r), or "winograd:6"), "im2col" or "direct".
    ``points`` passes custom interpolation points to :func:`transforms`; ``block`` sets
    how many tiles are transformed per GEMM batch (default: chosen per layer), ``tuning``
    every other knob (:class:`Tuning`).  ``weights`` tells the auto rule whether the plan is
    run many times ("once", the default) or once ("per-call", what :func:`conv2d` passes).

    >>> w = np.zeros((64, 64, 3, 3), np.float32)
    >>> p = plan_conv2d((1, 64, 56, 56), w, padding=1)
    >>> p.info.name, p.out_shape
    ('winograd F(4,3)', (1, 64, 56, 56))
    >>> plan_conv2d((1, 512, 7, 7), np.zeros((512, 512, 3, 3), np.float32), padding=1).info.name
    'winograd F(2,3)'

    """
    keyword_only("tensorlayout.winograd.plan_conv2d", args, _OLD_ORDER[:7] +
                 ("block", "tuning", "weights"), "x_shape, w, bias")
    name, tile = _args.parse_algorithm(algorithm, tile)
    if tuning is None:
        tuning = DEFAULT
    elif not isinstance(tuning, Tuning):
        raise LayoutError(f"tuning = {str(tuning)[:80]!r} is not allowed: it must be a "
                          "tensorlayout.winograd.Tuning")
    if block is not None:
        tuning = tuning.replace(block_tiles=block)
    w, b = _args.weights(w, bias)
    x_shape, _, st, pad, dil, groups, out_shape = _args.geometry(
        x_shape, w.shape, stride, padding, dilation, groups)
    K, Cg, KH, KW = w.shape
    if name == "auto":
        name, tile, reason = choose_algorithm(x_shape, w.shape, st, pad, dil, groups, weights)
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
            tile = _default_tile(x_shape, w.shape, st, pad, groups, weights)
        reason = "asked for"
    else:
        if points is not None:
            raise LayoutError(f"points = {points!r} is only used by algorithm='winograd'")
        reason = "asked for"
    use_nb = numba_available(tuning)
    info = ConvInfo(name, tile, (KH, KW), reason, "numba" if use_nb else "numpy")
    plan = ConvPlan(x_shape, w, b, st, pad, dil, groups, out_shape, info, tuning,
                    _finite_w=name != "direct" or bool(np.isfinite(w).all()), _points=points)
    if use_nb:
        key, dispatchers, warm = _needed(plan, points)
        # compiled in this process already: nothing to check (no cache index to read)
        if not all(d.overloads for d in dispatchers) and not _jit.ready(
                key, dispatchers, warm, tuning.compile):
            use_nb = False
            plan._pending = True
            plan.info = dataclasses.replace(info, backend="numpy")
    if name == "winograd":
        t = _transforms(tile, KH, points)
        bound = t.error_bound(w.dtype)
        if bound > MAX_ERROR_BOUND:
            ok = [m for m in range(2, tile)
                  if _transforms(m, KH).error_bound(w.dtype) <= MAX_ERROR_BOUND]
            raise AlgorithmError(
                f"tile = {tile} (F({tile},{KH})) is not allowed in {w.dtype}: its transforms can "
                f"grow rounding errors {t.amplification:.1e} times, a worst-case relative error of "
                f"{bound:.1e} (more than MAX_ERROR_BOUND = {MAX_ERROR_BOUND:g}); "
                + (f"the largest tile within the bound is {max(ok)}" if ok else "use im2col")
                + (" (or float64)" if w.dtype == np.float32 else ""))
        threads = _pool.num_threads(tuning.threads)
        per_call = weights == "per-call"
        plan.winograd = engine.prepare(w, t, groups, use_nb, threads, tuning=tuning,
                                       reuse=per_call, defer=per_call)
        if plan.winograd.native is not None and plan.winograd.packed is None:
            # used once: a call in the split schedule with one block transforms each panel
            # where it is used; anything else transforms them all first
            s = plan.schedule()
            if s.mode != "split" or len(s.blocks) != 1:
                plan.winograd = engine.complete(plan.winograd, w, groups, threads, reuse=True)
    return plan


def _needed(plan, points):
    """``(key, dispatchers, warm)``: the numba kernels ``plan`` calls, and a function that
    compiles them by running a tiny convolution of the same kind (see :mod:`tensorlayout._jit`)."""
    from . import _kernels

    info, dt = plan.info, plan.w.dtype
    threads = plan._threads()
    # one thread: no Python thread pool, which refuses work once the interpreter exits (a
    # process waits for its background compiles at exit)
    tuning = plan.tuning.replace(compile="wait", threads=1)
    if info.algorithm == "winograd":
        t = _transforms(info.tile, info.kernel[0], points)
        native = dt == np.float32 and tuning.gemm == "packed" and engine.native_ok()
        dispatchers = [] if native else [_kernels.weight_transform]
        if dt == np.float32:
            from . import _codegen

            mod = _codegen.load_module(t)
            dispatchers += [getattr(mod, f"wino_input_{t.m}_{t.r}"),
                            getattr(mod, f"wino_output_{t.m}_{t.r}")]
            if native:                   # the cfuncs' code includes the kernels they call
                dispatchers = [mod.ENTRY, mod.WEIGHT_ENTRY]
        else:
            dispatchers += [_kernels.wino_input, _kernels.wino_output]
        key = ("winograd", dt.str, t.m, t.r, repr(t.points), native)
        r = info.kernel[0]
        x = np.zeros((1, 4, 2 * r, 2 * r), dt)
        w = np.ones((4, 4, r, r), dt)
        kwargs = dict(algorithm=f"winograd:{t.m}", points=points, padding=r // 2)
    elif info.algorithm == "im2col" or not plan._finite_w:
        from .im2col import engine_used

        dispatchers, key = [_kernels.im2col], ("im2col",)
        if engine_used(plan, dt, threads):
            dispatchers, key = [_kernels.im2col_engine], ("im2col", "engine")
        x, w, kwargs = np.zeros((1, 4, 5, 5), dt), np.ones((4, 4, 3, 3), dt), dict(algorithm="im2col")
    else:
        dispatchers, key = [_kernels.direct], ("direct", dt.str)
        x, w = np.zeros((1, 4, 5, 5), dt), np.ones((4, 1, 3, 3), dt)
        kwargs = dict(algorithm="direct", groups=4)

    def warm():
        plan_conv2d(x.shape, w, tuning=tuning, **kwargs)(x)

    return key, dispatchers, warm


def _default_tile(x_shape, w_shape, st, pad, groups, weights):
    """The auto rule's tile for a convolution that asked for Winograd without one."""
    KH = w_shape[2]
    if KH not in (3, 5):
        return 2
    # the rule without its channel condition
    N, C, H, W = x_shape
    big = (N, max(C, 16 * groups), H, W)
    wshape = (max(w_shape[0], 16 * groups), max(w_shape[1], 16), KH, KH)
    alg, tile, _ = choose_algorithm(big, wshape, st, pad, 1, groups, weights)
    return tile if alg == "winograd" else (4 if KH == 5 else 2)


#: The parameters after ``bias`` in their old positional order (now keyword-only).
_OLD_ORDER = ("stride", "padding", "dilation", "groups", "algorithm", "tile", "points",
              "return_info", "tuning")


def conv2d(x, w, bias=None, *args, stride=1, padding=0, dilation=1, groups=1, algorithm="auto",
           tile=None, points=None, return_info=False, tuning=None):
    """2-D convolution (cross-correlation, as in CNNs) of NCHW ``x`` with OIHW ``w``.

    Everything after ``bias`` is keyword-only (``conv2d(x, w, b, padding=1)``), in every
    runtime: :func:`plan_conv2d` and :func:`tensorlayout.opencl.conv2d` read the same way.

    ``algorithm``: "auto" (Winograd where it pays, counting the weight transform that
    each call does, see :func:`choose_algorithm`), "winograd" / "winograd:M" (F(M, r);
    ``tile=M`` works too), "im2col", "direct".  float32 and float64; grouped and
    depthwise (``groups = C``).  With ``return_info=True`` the result is ``(y, info)`` and
    ``info`` (a :class:`ConvInfo`) says which algorithm and tile ran.  To run many inputs
    with the same weights, :func:`plan_conv2d` transforms them once.

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
    keyword_only("tensorlayout.conv2d", args, _OLD_ORDER)
    x = check_array("x", x, rank=4, dtypes=_args.DTYPES)
    w_arr = check_array("w", w, rank=4, dtypes=_args.DTYPES)
    if x.dtype != w_arr.dtype:
        raise DTypeError(f"x has dtype {x.dtype} but w has {w_arr.dtype}: they must match "
                         "(float32 or float64)")
    plan = plan_conv2d(x.shape, w_arr, bias, stride=stride, padding=padding, dilation=dilation,
                       groups=groups, algorithm=algorithm, tile=tile, points=points,
                       tuning=tuning, weights="per-call")
    plan._workspace = engine.ONE_SHOT
    try:
        y = plan.run(x)
    finally:
        ww = plan.winograd                        # the next one-shot call reuses its pages
        if ww is not None and (ww.U is not None or ww.packed is not None):
            engine.give_back(ww.U if ww.packed is None else ww.packed)
    if return_info:
        info = plan.info
        if plan.last_fallback:
            info = ConvInfo(info.algorithm, info.tile, info.kernel, info.reason, info.backend,
                            plan.last_fallback)
        return y, info
    return y
