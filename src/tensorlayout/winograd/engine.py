"""The Winograd engine: weights transformed once, then blocks of tiles through three steps.

For a block of ``Pb`` tiles (tile p = n·T + ty·ntx + tx, T = nty·ntx tiles per image):

1. input transform, Bᵀ d B of every tile and channel, into ``V`` (α², C, Pb);
2. α² GEMMs ``M[t] = U[t] @ V[t]``, ``U`` (α², K, C) being the transformed weights;
3. output transform Aᵀ M A plus bias, scattered into the output.

float32 with the generated kernels runs on the native workers (:class:`NativeCall`): the
weights packed once into the panels of the SIMD GEMM (``_simd.tl_sgemm``), each thread's
share a generated cfunc.  Other calls (float64, ``Tuning(gemm="blas")``, no native
engine here) run the same steps from our Python threads with NumPy's BLAS (:func:`run`),
or all in NumPy (:func:`run_numpy`).  Two schedules share the cores (:func:`schedule`):

* ``tiles``: enough tiles for every thread to get blocks of at least
  ``Tuning.min_block_tiles``, and transformed weights small enough that reading them once
  per block costs less than letting one shared block's V and M leave the cache: each
  thread takes whole blocks, one after the other, and runs the three steps on its own
  buffers while they are in its cache, with no barrier;
* ``split``: few tiles and many channels (deep, small layers): all threads work on one
  block: the input transform split by input channels, then the GEMMs (native: equal runs
  of (point, panel) units; BLAS: by output channels) and the output transform by output
  channels, so each thread reads only its share of ``U``.

Wide images use the row layout of the generated kernels: a block is whole rows of tiles
(see ``_codegen``).  Non-finite outputs are detected on the way (``value * 0``) and the
caller recomputes such calls with im2col, whose NaN/Inf follow PyTorch's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from dataclasses import dataclass

import numpy as np

from . import _pool
from .transforms import Transforms


def sparse_rows(mat: np.ndarray):
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


@dataclass(frozen=True, eq=False)
class WinogradWeights:
    """Transformed weights of one convolution and the kernels that use them.

    ``U`` is (α², groups, K/groups, C/groups) in the data's dtype, for the BLAS and NumPy
    paths; the native engine reads ``packed`` instead, the same values as ``tl_sgemm``'s
    panels: (α², Lp), row t the panels (groups, nkb, C/groups, mr) of point t then padding
    (``U`` is then None; :meth:`panels` gives them as such).  ``kernels`` is the pair
    of compiled block kernels ``(input, output)`` (None: NumPy path); ``native`` the
    generated module whose ``ENTRY`` runs a whole call on the native workers."""

    t: Transforms
    U: np.ndarray | None
    AT: np.ndarray
    BT: np.ndarray
    kernels: tuple | None
    generated: bool
    packed: np.ndarray | None = None       # U as tl_sgemm's panels (native engine)
    native: object = None                  # the generated module of the native engine
    coef: np.ndarray | None = None         # the generated kernels' constants

    @property
    def m(self) -> int:
        return self.t.m

    def panels(self, K: int, C: int, groups: int) -> np.ndarray:
        """``packed`` as (α², groups, nkb, C/groups, mr) for a convolution of C input and K
        output channels: a view (native engine only)."""
        from . import _simd

        mr = _simd.module().isa.mr
        nkb = -(-(K // groups) // mr)
        n = groups * nkb * (C // groups) * mr
        return self.packed[:, :n].reshape(-1, groups, nkb, C // groups, mr)

    @property
    def alpha(self) -> int:
        return self.t.alpha


_SCRATCH = []                 # transformed-weight buffers returned by one-shot calls
_SCRATCH_LOCK = threading.Lock()
_SCRATCH_BYTES = 512 << 20


def scratch(shape, dtype) -> np.ndarray:
    """An uninitialised array, reusing one given back with :func:`give_back` if one fits.

    Large arrays come fresh from the operating system on every allocation (past the C
    library's mmap threshold), and touching their pages costs more than transforming the
    weights: a one-shot :func:`~tensorlayout.winograd.conv2d` keeps its buffer here."""
    n = int(np.prod(shape))
    dtype = np.dtype(dtype)
    with _SCRATCH_LOCK:
        for i, buf in enumerate(_SCRATCH):
            if buf.dtype == dtype and buf.size >= n:
                del _SCRATCH[i]
                return buf[:n].reshape(shape)
    return aligned_empty(shape, dtype)


def give_back(arr) -> None:
    """Return an array from :func:`scratch` (or any array no longer used) for reuse."""
    base = arr
    while isinstance(base.base, np.ndarray) and base.base.dtype == base.dtype:
        base = base.base
    if base.ndim != 1 or not base.flags.c_contiguous:
        base = base.reshape(-1) if base.flags.c_contiguous else None
    if base is None or base.nbytes > _SCRATCH_BYTES:
        return
    with _SCRATCH_LOCK:
        _SCRATCH.append(base)
        _SCRATCH.sort(key=lambda b: b.nbytes)
        while sum(b.nbytes for b in _SCRATCH) > _SCRATCH_BYTES:
            _SCRATCH.pop(0)


def transform_weights(w: np.ndarray, t: Transforms, groups: int, use_numba: bool,
                      threads: int, reuse: bool = False) -> np.ndarray:
    """U (α², groups, K/groups, C/groups) = G w Gᵀ per filter, in w's dtype (in a
    :func:`scratch` buffer with ``reuse``); compiled on the Python threads of :func:`run`,
    else NumPy in float64."""
    K, Cg, r, _ = w.shape
    alpha = t.alpha
    AT, G, BT = t.as_float(np.float64)
    if use_numba:
        from . import _kernels

        Gd = G.astype(w.dtype)
        U = (scratch if reuse else np.empty)((alpha * alpha, K, Cg), w.dtype)
        _pool.run_split(lambda k0, k1: _kernels.weight_transform(w, Gd, U, k0, k1), K, threads)
    else:
        w64 = w.astype(np.float64, copy=False)
        tmp = np.tensordot(w64, G, axes=([3], [1]))           # (K, Cg, r, b)
        U = np.tensordot(G, tmp, axes=([1], [2]))             # (a, K, Cg, b)
        U = np.ascontiguousarray(U.transpose(0, 3, 1, 2)).astype(w.dtype)
    return U.reshape(alpha * alpha, groups, K // groups, Cg)


def plane_floats(n: int) -> int:
    """Floats per plane for ``n`` values: at least n, a whole number of 64-byte lines, and an
    odd number of them, so that the α² planes of one array, walked in step by the
    transforms and the GEMM, start in different sets of the cache (planes of a multiple of
    4 KiB all fall into one set, and 16 to 64 streams then evict each other)."""
    lines = max(1, -(-n // 16))
    return (lines | 1) * 16


def plane_rows(rows: int, row_floats: int) -> int:
    """Rows per plane of ``row_floats``-float rows with the same aim as :func:`plane_floats`
    (rows past ``rows`` unused); rows of a whole even number of lines cannot get there and
    are left as they are (:func:`schedule` avoids them)."""
    if row_floats % 16 or (row_floats // 16) % 2 == 0:
        return rows
    return rows | 1


def transform_packed(w: np.ndarray, mod, coef, groups: int, alpha: int, threads: int,
                     reuse: bool = False) -> np.ndarray:
    """The float32 weight transform written straight into ``tl_sgemm``'s panels in one pass,
    by the generated ``weights_{m}_{r}`` of ``mod`` on the native workers (in a
    :func:`scratch` buffer with ``reuse``).  Returns (α², Lp): row t holds the panels
    (groups, nkb, C/groups, mr) of point t, then padding (:func:`plane_floats`)."""
    from . import _simd

    mr = _simd.module().isa.mr
    K, Cg = w.shape[:2]
    nkb = -(-(K // groups) // mr)
    Lp = plane_floats(groups * nkb * Cg * mr)
    Up = (scratch if reuse else aligned_empty)((alpha * alpha, Lp), np.float32)
    ctx = np.array([w.ctypes.data, *w.shape, Up.ctypes.data, alpha * alpha, Lp, groups, nkb,
                    mr, coef.ctypes.data, coef.size, 0, 0, 0], np.int64)
    _pool.workers().run(mod.WEIGHT_ENTRY.address, ctx.ctypes.data, min(threads, groups * nkb))
    return Up


def complete(ww: WinogradWeights, w, groups: int, threads: int, reuse=False):
    """``ww`` with its deferred weight transform done (see :func:`prepare`)."""
    Up = transform_packed(w, ww.native, ww.coef, groups, ww.alpha, threads, reuse)
    return dataclasses.replace(ww, packed=Up)


def native_ok() -> bool:
    """True when the native engine can run here (llvmlite's module and the workers)."""
    return _pool.workers() is not None


def prepare(w, t: Transforms, groups: int, use_numba: bool, threads: int, tuning=None,
            reuse=False, defer=False) -> WinogradWeights:
    """Transform the weights and pick the kernels for F(m, r) with transforms ``t``: the
    generated ones with packed weights and the native engine (float32, ``Tuning.gemm =
    "packed"``), the generated ones with BLAS (float32, ``gemm="blas"`` or no native
    engine here), the generic ones with BLAS (float64), or none (NumPy).  ``defer``: on the
    native path leave the weights untransformed (``packed`` None), for :func:`complete` or
    for a call that transforms each panel as it uses it (:class:`NativeCall`)."""
    dt = w.dtype
    AT, BT = (a.astype(dt) for a in t.as_float(np.float64)[::2])
    gen = None
    if use_numba and dt == np.float32:
        from . import _codegen

        gen = _codegen.kernels_for(t, dt)
    if gen is not None:
        gin, gout, coef, mod = gen
        kernels = (
            lambda x, V, ph, pw, nty, ntx, p0, npb, c0, c1, U2:
                gin(x, V, coef, ph, pw, nty, ntx, p0, npb, c0, c1, U2),
            lambda M, y, bias, nty, ntx, p0, npb, bad, k0, k1, U2:
                gout(M, y, bias, coef, nty, ntx, p0, npb, bad, k0, k1, U2))
        if (tuning is None or tuning.gemm == "packed") and native_ok():
            Up = None if defer else transform_packed(w, mod, coef, groups, t.alpha, threads,
                                                     reuse)
            return WinogradWeights(t, None, AT, BT, kernels, True, Up, mod, coef)
        U = transform_weights(w, t, groups, True, threads, reuse)
        return WinogradWeights(t, U, AT, BT, kernels, True, None, None, coef)
    U = transform_weights(w, t, groups, use_numba, threads, reuse)
    if not use_numba:
        return WinogradWeights(t, U, AT, BT, None, False)
    from . import _kernels

    BTi, BTv, BTn = sparse_rows(BT)
    ATi, ATv, ATn = sparse_rows(AT)
    m, alpha = t.m, t.alpha
    kernels = (
        lambda x, V, ph, pw, nty, ntx, p0, npb, c0, c1, U2:
            _kernels.wino_input(x, V, BTi, BTv, BTn, m, ph, pw, nty, ntx, p0, npb, c0, c1),
        lambda M, y, bias, nty, ntx, p0, npb, bad, k0, k1, U2:
            _kernels.wino_output(M, y, bias, ATi, ATv, ATn, m, alpha, nty, ntx, p0, npb,
                                 bad, k0, k1))
    return WinogradWeights(t, U, AT, BT, kernels, False)


class NativeCall:
    """One plan's calls on the native workers (the generated ``share_{m}_{r}``), for one
    schedule: everything that stays the same from call to call (the int64 context the
    workers read, the blocks, the entry's address) is made once here; a call fills in the
    addresses of its input, its output and its scratch.  Weights not transformed yet
    (``ww.packed`` None, a one-shot call in the split schedule with one block) are taken as
    ``w`` and transformed panel by panel by the thread that uses each."""

    def __init__(self, ww: WinogradWeights, x_shape, bias, out_shape, padding, groups, sched,
                 w=None):
        from . import _simd

        mod = _simd.module()
        mr = mod.isa.mr
        N, C, H, W = x_shape
        K = out_shape[1]
        m, alpha = ww.m, ww.alpha
        OH, OW = out_shape[2:]
        nty, ntx = -(-OH // m), -(-OW // m)
        a2 = alpha * alpha
        split = 1 if sched.mode == "split" else 0
        self.nt = sched.threads if split else min(sched.threads, len(sched.blocks))
        nbuf = 1 if split else self.nt
        self.blocks = np.array([(p0, npb, npb if sched.U2 == 0 else npb // ntx * sched.U2)
                                for p0, npb in sched.blocks], dtype=np.int64)
        Cp, Kp = plane_rows(C, sched.Pb), plane_rows(K, sched.Pb)
        fused = ww.packed is None
        if fused and (not split or len(sched.blocks) != 1):
            raise ValueError("weights transformed per panel need the split schedule, one block")
        Lq = plane_floats((C // groups) * mr) if fused else 0
        self.shapes = ((nbuf, a2, Cp, sched.Pb), (nbuf, a2, Kp, sched.Pb), (self.nt, K),
                       (self.nt if fused else 0, a2, Lq))
        self.out_shape = tuple(out_shape)
        Up = ww.packed if not fused else np.zeros((a2, 0), np.float32)
        wf = w if fused else np.zeros((0, 1, 1, 1), np.float32)
        coef = ww.coef
        self.keep = (Up, wf, coef, bias)
        nkb = -(-(K // groups) // mr)
        self.template = np.array(
            [0, N, C, H, W, Up.ctypes.data, *Up.shape, groups, nkb, mr, 0, *out_shape,
             bias.ctypes.data, coef.ctypes.data, coef.size, self.blocks.ctypes.data,
             len(self.blocks), 0, nbuf, a2, Cp, sched.Pb, 0, 0, self.nt, 0, padding[0],
             padding[1], nty, ntx, sched.U2, split, mod.addr["tl_sgemm"],
             mod.addr["tl_barrier"], mod.addr["tl_fetch_add"], _pool.SPIN_TICKS, Kp,
             wf.ctypes.data, *wf.shape, 0, self.nt, Lq] + [0] * 15, dtype=np.int64)
        self.entry = ww.native.ENTRY.address
        self.key = ("native",) + self.shapes

    def _scratch(self, workspace):
        return workspace.take_bundle(self.key, lambda: _NativeScratch(workspace, self.shapes))

    def __call__(self, x, workspace):
        """Convolve float32 ``x``; returns ``(y, all outputs finite)``."""
        s = self._scratch(workspace)
        try:
            s.bad.fill(0)
            s.ctl.fill(0)
            y = np.empty(self.out_shape, dtype=np.float32)
            ctx = self.template.copy()
            ctx[0] = _pool.address(x)
            ctx[11] = _pool.address(y)
            ctx[21], ctx[26], ctx[27], ctx[29], ctx[46] = s.addrs
            _pool.workers().run(self.entry, _pool.address(ctx), self.nt)
            ok = not s.bad.any()
        finally:
            workspace.give_bundle(self.key, s)
        return y, ok


class _NativeScratch:
    """V, M, the weight panels of a fused call, the non-finite flags and the block counter of
    one call, and their addresses."""

    def __init__(self, workspace, shapes):
        vs, ms, bs, us = shapes
        self.V = workspace.array(vs, np.float32)
        self.M = workspace.array(ms, np.float32)
        self.U = workspace.array(us, np.float32)          # per-thread weight panels (fused)
        self.bad = np.zeros(bs, np.float32)
        self.ctl = np.zeros(4, np.int64)
        self.addrs = (self.V.ctypes.data, self.M.ctypes.data, self.bad.ctypes.data,
                      self.ctl.ctypes.data, self.U.ctypes.data)

    def arrays(self):
        return (self.V, self.M, self.U)


_ENGINE_LOCK = threading.Lock()


@contextlib.contextmanager
def on_numba_threads(threads: int):
    """Run a parallel numba function on ``threads`` of numba's threads: the thread count set
    and restored, the engine lock held where the threading layer needs it, and BLAS held to
    one thread (each numba thread calls it on its own)."""
    import numba

    saved = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        with _engine_lock(), _pool.single_threaded_blas():
            yield
    finally:
        numba.set_num_threads(saved)


def _engine_lock():
    """A lock around the parallel engine unless numba's threading layer is thread-safe
    (OpenMP and TBB are; the workqueue layer is not, nor is an uninitialised one)."""
    import numba

    try:
        if numba.threading_layer() in ("omp", "tbb"):
            return contextlib.nullcontext()
    except ValueError:                     # no parallel function has run yet
        pass
    return _ENGINE_LOCK


LANE_TILES = 16
"""Rows of V and M hold a multiple of this many tiles (64 bytes of float32), so that the
GEMM's vector loads and stores of them are aligned; blocks of tiles are cut to multiples of
it too where the schedule is free to."""


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``align``-byte boundary."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + align, dtype=np.uint8)
    off = -raw.ctypes.data % align
    return raw[off:off + n].view(dtype).reshape(shape)


@dataclass(frozen=True)
class Schedule:
    """How one call is cut: ``mode`` ('tiles' or 'split'), the blocks as (first tile,
    tile count), the columns ``Pb`` of V and M per block, ``U2`` (> 0: row layout) and the
    number of threads."""

    mode: str
    blocks: tuple
    Pb: int
    U2: int
    threads: int


def schedule(N, nty, ntx, C, K, m, alpha, itemsize, threads, tuning, row_ok,
             odd_rows=False, groups=1) -> Schedule:
    """Cut a call into blocks for ``threads`` threads (see the module docstring).
    ``odd_rows``: rows of V and M an odd number of 16-tile vectors long (the native engine,
    whose planes :func:`plane_rows` then spreads over the cache's sets)."""
    T = nty * ntx
    P = N * T
    per_tile = alpha * alpha * (C + K) * itemsize
    if tuning.block_tiles is not None:
        pb = min(tuning.block_tiles, P)
        mode = "tiles"
    else:
        min_tiles = tuning.min_block_tiles
        if alpha * alpha * C * K * itemsize <= tuning.small_weights_bytes:
            min_tiles = min(min_tiles, tuning.small_min_block_tiles)
        pb = max(min_tiles, tuning.block_bytes // per_tile)
        mode = "split"
        if P >= threads * min_tiles or threads == 1:
            nblocks = max(threads, -(-P // pb))
            nblocks = -(-nblocks // threads) * threads          # a multiple of the threads
            # every block reads all of U; one shared block reads it once, but its V and M
            # leave the cache: blocks of their own while U's re-reads cost less
            u_bytes = alpha * alpha * K * (C // groups) * itemsize
            if (nblocks - 1) * u_bytes <= alpha * alpha * (C + K) * P * itemsize:
                mode = "tiles"
                pb = -(-P // nblocks)
        if mode == "split":
            pb = P
    use_rows = row_ok and (tuning.row_layout if tuning.row_layout is not None
                           else ntx >= tuning.row_layout_min_tiles)
    if use_rows:
        U2 = ntx + (alpha - 1) // m
        R = max(1, min(nty, int(round(pb / ntx)))) if mode == "tiles" else nty
        while R > 1 and N * -(-nty // R) < threads:        # a block for every thread
            R -= 1
        blocks = tuple((n * T + ty0 * ntx, min(R, nty - ty0) * ntx)
                       for n in range(N) for ty0 in range(0, nty, R))
        return Schedule(mode, blocks, R * U2, U2, threads)
    if mode == "tiles" and tuning.block_tiles is None and pb > LANE_TILES:
        whole = -(-pb // LANE_TILES) * LANE_TILES       # whole vectors of tiles per block,
        if -(-P // whole) >= -(-P // pb):                # unless that leaves a thread idle
            pb = whole
    blocks = tuple((p0, min(pb, P - p0)) for p0 in range(0, P, pb))
    vectors = -(-pb // LANE_TILES)
    return Schedule(mode, blocks, (vectors | (1 if odd_rows else 0)) * LANE_TILES, 0, threads)


def _quiet(fn):
    """``fn`` with NumPy's warnings on invalid values and overflow off in whichever thread
    runs it (non-finite results are detected and handled by the caller)."""
    def quiet(*args):
        with np.errstate(invalid="ignore", over="ignore"):
            return fn(*args)
    return quiet


def _gemm(U, V, M, groups, Kg, Cg):
    a2 = U.shape[0]
    Pb = V.shape[2]
    V4 = V.reshape(a2, groups, Cg, Pb)
    M4 = M.reshape(a2, groups, Kg, Pb)
    if Cg == 1:
        np.multiply(U, V4, out=M4)
    else:
        np.matmul(U, V4, out=M4)


def run(ww: WinogradWeights, x, bias, out_shape, padding, groups, sched: Schedule, workspace):
    """Convolve ``x`` with the compiled kernels; returns ``(y, all outputs finite)``."""
    N, C, H, W = x.shape
    K = out_shape[1]
    Kg, Cg = K // groups, C // groups
    m, alpha = ww.m, ww.alpha
    OH, OW = out_shape[2:]
    ph, pw = padding
    nty, ntx = -(-OH // m), -(-OW // m)
    gin, gout = ww.kernels
    U = ww.U
    Pb, U2 = sched.Pb, sched.U2
    y = np.empty(out_shape, dtype=x.dtype)
    blocks = sched.blocks
    a2 = alpha * alpha
    if sched.mode == "tiles":
        nw = min(sched.threads, len(blocks))
        bads = np.zeros((nw, K), dtype=x.dtype)
        bufs = workspace.take(nw, ((a2, C, Pb), (a2, K, Pb)), x.dtype)
        nxt = iter(range(len(blocks)))
        lock = threading.Lock()

        @_quiet
        def worker(i):
            V, M = bufs[i]
            bad = bads[i]
            while True:
                with lock:
                    b = next(nxt, None)
                if b is None:
                    return
                p0, npb = blocks[b]
                gin(x, V, ph, pw, nty, ntx, p0, npb, 0, C, U2)
                _gemm(U, V, M, groups, Kg, Cg)
                gout(M, y, bias, nty, ntx, p0, npb, bad, 0, K, U2)

        try:
            with _pool.single_threaded_blas():
                _pool.run([(lambda i=i: worker(i)) for i in range(nw)])
        finally:
            workspace.give(bufs)
        return y, not bads.any()
    # split: every thread on each block, by input channels, then by output channels
    nt = sched.threads
    bad = np.zeros(K, dtype=x.dtype)
    (V, M), = bufs = workspace.take(1, ((a2, C, Pb), (a2, K, Pb)), x.dtype)
    V4 = V.reshape(a2, groups, Cg, Pb)
    M4 = M.reshape(a2, groups, Kg, Pb)
    if groups == 1:
        step = 16 if K >= 16 * nt else 1
        units, per = -(-K // step), step
    else:
        units, per = groups, Kg

    @_quiet
    def out_part(u0, u1):
        k0, k1 = u0 * per, min(K, u1 * per)
        if k0 >= k1:
            return
        if groups == 1:
            np.matmul(U[:, 0, k0:k1], V, out=M[:, k0:k1])
        elif Cg == 1:
            np.multiply(U[:, u0:u1], V4[:, u0:u1], out=M4[:, u0:u1])
        else:
            np.matmul(U[:, u0:u1], V4[:, u0:u1], out=M4[:, u0:u1])
        gout(M, y, bias, nty, ntx, p0, npb, bad, k0, k1, U2)

    try:
        with _pool.single_threaded_blas():
            for p0, npb in blocks:
                _pool.run_split(lambda c0, c1: gin(x, V, ph, pw, nty, ntx, p0, npb, c0, c1, U2),
                                C, nt)
                _pool.run_split(out_part, units, nt)
    finally:
        workspace.give(bufs)
    return y, not bad.any()


def run_numpy(ww: WinogradWeights, x, bias, out_shape, padding, groups):
    """The same algorithm in NumPy (no numba): all tiles at once."""
    m, alpha = ww.m, ww.alpha
    N, C, H, W = x.shape
    K = out_shape[1]
    Kg, Cg = K // groups, C // groups
    ph, pw = padding
    OH, OW = out_shape[2:]
    nty, ntx = -(-OH // m), -(-OW // m)
    Hp, Wp = nty * m + alpha - m, ntx * m + alpha - m
    xp = np.zeros((N, C, Hp, Wp), dtype=x.dtype)
    hh, ww_ = min(H, Hp - ph), min(W, Wp - pw)
    xp[:, :, ph:ph + hh, pw:pw + ww_] = x[:, :, :hh, :ww_]
    s = xp.strides
    tiles = np.lib.stride_tricks.as_strided(
        xp, (N, C, nty, ntx, alpha, alpha), (s[0], s[1], m * s[2], m * s[3], s[2], s[3]),
        writeable=False)
    BT, AT = ww.BT, ww.AT
    Vt = BT @ tiles @ BT.T                                   # (N, C, nty, ntx, a, b)
    P = N * nty * ntx
    V = np.ascontiguousarray(Vt.transpose(4, 5, 1, 0, 2, 3)).reshape(alpha * alpha, C, P)
    M = np.empty((alpha * alpha, K, P), dtype=x.dtype)
    _gemm(ww.U, V, M, groups, Kg, Cg)
    Mt = M.reshape(alpha, alpha, K, N, nty, ntx).transpose(3, 2, 4, 5, 0, 1)
    Yt = AT @ Mt @ AT.T                                      # (N, K, nty, ntx, m, m)
    Y = Yt.transpose(0, 1, 2, 4, 3, 5).reshape(N, K, nty * m, ntx * m)
    y = np.ascontiguousarray(Y[:, :, :OH, :OW]) + bias[None, :, None, None]
    return y, bool(np.isfinite(y).all())


class Workspace:
    """Buffers kept between calls of one plan; concurrent calls get buffers of their own."""

    def __init__(self):
        self._free = []
        self._bundles = {}
        self._lock = threading.Lock()

    def array(self, shape, dtype):
        """A new scratch array (64-byte aligned)."""
        return aligned_empty(shape, dtype)

    def take(self, n, shapes, dtype):
        out = []
        with self._lock:
            while self._free and len(out) < n:
                bufs = self._free.pop()
                if all(b.shape == s and b.dtype == dtype for b, s in zip(bufs, shapes)):
                    out.append(bufs)
        while len(out) < n:
            out.append(tuple(aligned_empty(s, dtype) for s in shapes))
        return out

    def give(self, bufs):
        with self._lock:
            self._free.extend(bufs)
            del self._free[64:]

    def take_bundle(self, key, make):
        """A scratch object kept under ``key`` by an earlier call, or ``make()``."""
        with self._lock:
            free = self._bundles.get(key)
            if free:
                return free.pop()
        return make()

    def give_bundle(self, key, bundle):
        with self._lock:
            free = self._bundles.setdefault(key, [])
            if len(free) < 8:
                free.append(bundle)


class SharedWorkspace(Workspace):
    """Buffers from the process-wide :func:`scratch` pool, for plans used once (a one-shot
    :func:`~tensorlayout.winograd.conv2d`): the next call, of any layer that fits, reuses
    pages that are already mapped instead of faulting in fresh ones."""

    def array(self, shape, dtype):
        return scratch(shape, dtype)

    def take(self, n, shapes, dtype):
        return [tuple(scratch(s, dtype) for s in shapes) for _ in range(n)]

    def give(self, bufs):
        for group in bufs:
            for b in group:
                give_back(b)

    def take_bundle(self, key, make):
        return make()

    def give_bundle(self, key, bundle):
        for b in bundle.arrays():
            give_back(b)


ONE_SHOT = SharedWorkspace()
