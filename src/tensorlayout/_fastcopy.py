"""A compiled strided copy (numba), the engine of :mod:`tensorlayout._copy` for large copies.

A copy arrives as axes ``(extent, dst stride, src stride)``: from pack, unpack and convert,
one box of a coalesced layout whose digits are already merged (:func:`schedule`, planned
once per layout value); from :func:`tensorlayout._copy.strided_copy`, the shape and
strides of two NumPy views (:func:`plan_copy`, planned once per shape and strides).
:func:`schedule` brings it to the form one small kernel serves every layout with:

1. axes of length 1 are dropped;
2. the axes are ordered by the destination's strides, largest first, so the
   writes walk memory forwards (ties keep the source's order);
3. neighbouring axes that are one run in both arrays are merged (for a layout's
   box with a row-major array there are none left: the layout merged them);
4. a run that is contiguous in both arrays (a pixel's 4 lanes, a channel row)
   is copied in the widest unsigned word that divides it (a float32 RGBA pixel is
   two 64-bit words);
5. a lane group of 4 words is written by four plain statements, and whole
   cache lines written in order use streaming (non-temporal) stores, so the
   destination's lines are not read before they are overwritten; k small lanes
   written into one word (an NPU's 4N int8 word) use the word interleave
   (``plan.lanes``, decided with the plan).

The outer axes are fused into one parallel loop (numba ``prange``); the inner
three are plain loops.  Nothing here runs unless numba is installed: the module
imports it lazily and :mod:`tensorlayout._copy` falls back to NumPy.

>>> import numpy as np
>>> a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
>>> b = np.empty((4, 2, 3), dtype=np.float32)
>>> plan = plan_copy(b, a.transpose(2, 0, 1))
>>> plan is not None and plan.unit
4
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from . import _backend

__all__ = ["plan_copy", "run", "available"]

_OUTER = 3  # axes fused into the parallel loop
_INNER = 3  # axes run as plain loops
_LINE = 64  # bytes in a cache line
# Cutting the source's unit-stride axis into cache-line blocks, moved innermost, measured slower than
# streaming the destination on the 2-core machine of benchmarks/bench_image.py: off.
_BLOCK_SOURCE_LINES = False
_STREAM_MIN_BYTES = 4 << 20  # below this the output is likely still in cache when used
_STRIP_BYTES = 16 << 10  # source bytes per block when an outer axis is moved inside
_STRIP_MAX_AXIS = 64
_MIN_STEP_WORK = 2048  # elements (words) each parallel step copies at least, where it can

_kernel = None
def merge_runs(axes) -> list:
    """Neighbouring axes ``(extent, dst stride, src stride)``, outermost first, merged where
    the outer one continues the inner one in both arrays (as :meth:`Layout.coalesce` merges
    digits); axes of extent 1 go.  An image row of 5 pixels read from a dense (5, 4) buffer
    is one run of 20 values:

    >>> merge_runs([(1, 80, 80), (5, 16, 16), (4, 4, 4)])
    [(20, 4, 4)]
    """
    out: list = []
    for n, sd, ss in axes:
        if n == 1:
            continue
        if out and out[-1][1] == sd * n and out[-1][2] == ss * n:
            out[-1] = (out[-1][0] * n, sd, ss)
        else:
            out.append((n, sd, ss))
    return out


_import_failed = False


def available() -> bool:
    """True when numba can be imported (checked once)."""
    return _get_kernel() is not None


def _get_kernel():
    global _kernel, _import_failed
    if _kernel is not None or _import_failed:
        return _kernel
    try:
        from ._fastcopy_kernel import copy_kernel
        if copy_kernel is None:
            raise ImportError("numba")
    except Exception:  # noqa: BLE001 - no numba (or a broken one) means: use NumPy
        _import_failed = True
        return None
    _kernel = copy_kernel
    return _kernel


@dataclass
class Plan:
    """A copy in canonical form: word size, shapes and strides in words, base offsets."""

    unit: int
    shape: tuple
    dst_strides: tuple
    src_strides: tuple
    dst_base: int  # lowest byte address touched
    dst_span: int  # bytes from the lowest to one past the highest
    src_base: int
    src_span: int
    dst_off: int  # offset of element 0 from the lowest address, in words
    src_off: int
    streaming: bool = False  # whole cache lines written in order: store past the cache
    arrays: tuple | None = None  # (dst strides, src strides, shape) as the kernels take them
    lanes: tuple | None = None  # ('pack' or 'unpack', k) for the word interleave (:func:`_lanes`)
    lane_arrays: tuple | None = None  # :attr:`arrays` with the word side counted in words


def _extent(axes, side: int, isz: int):
    """Lowest and one-past-highest byte offsets that ``axes`` (extent, dst stride, src stride)
    reach on one side (1: destination, 2: source), from the first element."""
    low = sum((a[0] - 1) * a[side] for a in axes if a[side] < 0)
    high = sum((a[0] - 1) * a[side] for a in axes if a[side] > 0) + isz
    return low, high


def plan_copy(dst: np.ndarray, src: np.ndarray):
    """Canonical form of ``dst[...] = src`` (same shape and dtype), or None if it has too many axes.

    The form depends on the shapes, the strides and the addresses modulo 8 only, so it is
    planned once for each of them.  (Pack, unpack and convert do not come here: they plan
    from their layouts' digits once per layout, see :func:`schedule`.)"""
    d_ptr = dst.__array_interface__["data"][0]
    s_ptr = src.__array_interface__["data"][0]
    plan = _plan_cached(dst.shape, dst.strides, src.strides, dst.itemsize, d_ptr % 8, s_ptr % 8)
    if plan is None:
        return None
    return dataclasses.replace(plan, dst_base=d_ptr + plan.dst_base, src_base=s_ptr + plan.src_base)


@functools.lru_cache(maxsize=1024)
def _plan_cached(shape, dst_strides, src_strides, isz, d_mod, s_mod):
    """:func:`plan_copy` for arrays at addresses ``d_mod``, ``s_mod`` (mod 8); the bases it
    returns are relative to the arrays' data pointers."""
    return schedule(tuple(zip(shape, dst_strides, src_strides)), isz, d_mod, s_mod)


def schedule(axes, isz: int, d_mod: int = 0, s_mod: int = 0):
    """The kernel's plan for a copy given as axes ``(extent, dst stride, src stride)`` in bytes,
    from the first element, whose first elements lie at ``d_mod`` and ``s_mod`` modulo 8; or
    None where the kernel does not take it (NumPy does).  Bases are relative to the first
    elements.

    The axes are put in the destination's order (largest stride first) and neighbours that
    are one run in both arrays merge (:func:`merge_runs`).  Pack and unpack
    hand in a box of their coalesced layout, already merged, so for a row-major array nothing
    is left to merge here; then come the engine's own choices: strip mining, lanes beside a
    unit-stride run, the word size, the parallel and plain loops, streaming stores and lane
    interleaves.

    Bytes into 32-bit words, 4 lanes each (an NPU's 4N int8 word), from 4 rows of 4096:

    >>> plan = schedule(((4096, 4, 1), (4, 1, 4096)), 1)
    >>> plan.unit, plan.shape[-1], plan.dst_strides[-1], plan.lanes
    (1, 4, 1, ('pack', 4))
    """
    axes = [tuple(int(v) for v in a) for a in axes if a[0] != 1] or [(1, isz, isz)]
    d_low, d_high = _extent(axes, 1, isz)
    s_low, s_high = _extent(axes, 2, isz)
    nbytes = math.prod(a[0] for a in axes) * isz
    # Largest destination stride first; for equal ones, largest source stride first.
    axes.sort(key=lambda a: (-abs(a[1]), -abs(a[2])))
    merged = [list(a) for a in merge_runs(axes)] or [[1, isz, isz]]
    if len(merged) < _OUTER + _INNER:
        merged = _strip_mine(merged)
    merged = _lanes_beside_run(merged, isz)
    # Cache blocking: the source's unit-stride axis, when it is not innermost, is cut into
    # blocks of one cache line and the block moves to the innermost position.
    inner = merged[-1]
    src_unit = [k for k, a in enumerate(merged[:-1]) if a[2] == isz and a[0] > 1]
    if src_unit and abs(inner[2]) != isz and _BLOCK_SOURCE_LINES:
        k = src_unit[-1]
        n, sd, ss = merged[k]
        b = max(1, _LINE // isz)
        if n % b == 0 and n > b:
            merged[k] = [n // b, sd * b, ss * b]
            merged.append([b, sd, ss])
        elif n <= b:
            merged.append(merged.pop(k))
    # Word size: a run contiguous in both arrays is copied in the widest word that divides it.
    d_addr = d_mod + d_low         # the address, as far as alignment to 8 goes
    s_addr = s_mod + s_low
    n, sd, ss = merged[-1]
    contiguous = sd == isz and ss == isz
    run_bytes = n * isz if contiguous else isz
    others = [v for a in (merged[:-1] if contiguous else merged) for v in a[1:]]
    unit = None
    for u in ((8, 4, 2, 1) if contiguous else (isz,)):
        if run_bytes % u == 0 and d_addr % u == 0 and s_addr % u == 0 and all(v % u == 0 for v in others):
            unit = u
            break
    if unit is None:
        return None
    if contiguous:
        merged[-1] = [run_bytes // unit, unit, unit]
    if len(merged) < 2 or len(merged) > _OUTER + _INNER:
        return None  # one run is a memcpy, NumPy's own; too many axes: NumPy too
    # The outer group (parallel) gets at least one real axis.
    outer, inner = merged[:-_INNER], merged[-_INNER:]
    if not outer:
        outer, inner = inner[:1], inner[1:]
    # Interleaving big copies into pixels: the pixels are stored past the cache (below), so
    # the order of the writes matters little; the parallel steps walk the source in order
    # instead (each step reads whole rows of the planes that the step before read).
    if nbytes >= _STREAM_MIN_BYTES and _interleaves(inner, isz):
        if len(outer) < _OUTER and len(inner) == _INNER:
            outer.append(inner.pop(0))
        outer.sort(key=lambda a: -abs(a[2]))
    # A free inner slot and little work per parallel step (a 3x3 filter's 36 elements): the
    # innermost parallel axis gives a block to the plain loops, saving the per-step index work.
    work = math.prod(a[0] for a in inner)
    if len(inner) < _INNER and work < _MIN_STEP_WORK and outer[-1][0] > 2:
        n, sd, ss = outer[-1]
        b = _divisor_near(n, -(-_MIN_STEP_WORK // work))
        if b is not None:
            outer[-1] = [n // b, sd * b, ss * b]
            inner = [[b, sd, ss]] + inner
    merged = [[1, 0, 0]] * (_OUTER - len(outer)) + outer + [[1, 0, 0]] * (_INNER - len(inner)) + inner
    shape = tuple(a[0] for a in merged)
    # Streaming stores pay off when the innermost loop writes whole words in order and the
    # next axis continues right after it (the writes fill whole cache lines), on big copies.
    dn, dsd = merged[-1][0], merged[-1][1]
    # Reading pixels back into planes (the kernel's deinterleave: 4 lanes, unit-stride rows of
    # at least a line), the kernel writes each row a line at a time: streaming pays there too.
    ln, lsd, lss = merged[-2]
    deinterleave = ln == 4 and lss == unit and dsd == unit and merged[-1][2] == 4 * unit
    streaming = nbytes >= _STREAM_MIN_BYTES and (
        (dsd == unit and unit >= 4 and lsd == dn * unit)
        or (deinterleave and dn * unit >= _LINE))
    plan = Plan(
        unit=unit, shape=shape,
        dst_strides=tuple(a[1] // unit for a in merged),
        src_strides=tuple(a[2] // unit for a in merged),
        dst_base=d_low, dst_span=d_high - d_low,
        src_base=s_low, src_span=s_high - s_low,
        dst_off=-d_low // unit, src_off=-s_low // unit, streaming=streaming,
        arrays=tuple(np.array(v, dtype=np.int64) for v in (
            [a[1] // unit for a in merged], [a[2] // unit for a in merged], shape)),
    )
    lanes = _lanes(plan, d_addr, s_addr)
    if lanes is None:
        return plan
    dstr, sstr, shp = plan.arrays
    k = lanes[1]
    arrays = (dstr // k, sstr, shp) if lanes[0] == "pack" else (dstr, sstr // k, shp)
    return dataclasses.replace(plan, lanes=lanes, lane_arrays=arrays)


def _lanes_beside_run(merged, isz):
    """Arrange a transpose so the kernel moves 4 elements at a time on its strided side.

    When the destination's innermost axis A has unit stride but the source does not, and
    another axis B has unit stride in the source, the copy is a transpose.  The kernel
    handles it in one pass when A and B are the two innermost axes and one of them has
    extent 4: writing pixels (A = the 4 lanes), each step reads four unit-stride source
    rows along B and writes one 16-byte pixel; reading pixels back (B = the 4 lanes), each
    step reads one pixel and writes four unit-stride rows along A.  Where neither has
    extent 4 (lanes merged with their neighbour, as IN_OUT_WIDTH's w % 4 and w // 4 are),
    A is cut into blocks of 4 to make them.  Axes shorter than 16 (a 3x3 filter's taps)
    are left where they are.
    """
    if len(merged) < 2:
        return merged
    n, sd, ss = merged[-1]
    if not (sd == isz and ss != isz):
        return merged
    cands = [k for k, a in enumerate(merged[:-1]) if a[2] == isz]
    if not cands:
        return merged
    k = cands[-1]
    B = merged[k]
    rest = merged[:k] + merged[k + 1:-1]
    if n == 4 and B[0] >= 16:                       # interleave into pixels
        return rest + [B, merged[-1]]
    if B[0] == 4 and n >= 16:                       # deinterleave pixels
        return rest + [B, merged[-1]]
    if n % 4 == 0 and n >= 16 and B[0] >= 16:       # block A by 4, then interleave
        return rest + [[n // 4, 4 * sd, 4 * ss], B, [4, sd, ss]]
    return merged


def _interleaves(inner, isz) -> bool:
    """True when the two innermost axes write 4-lane pixels from unit-stride source rows."""
    return (len(inner) >= 2 and inner[-1][0] == 4 and inner[-1][1] == isz
            and inner[-2][1] == 4 * isz and inner[-2][2] == isz)


def _divisor_near(n: int, target: int) -> int | None:
    """The divisor of ``n`` closest to ``target`` within ``[target // 2, 2 * target]``, if any."""
    for delta in range(target + 1):
        for b in (target - delta, target + delta):
            if max(2, target // 2) <= b <= min(n - 1, 2 * target) and n % b == 0:
                return b
    return None


def _strip_mine(merged):
    """Stop a copy from sweeping the source once per value of an outer destination axis.

    When an axis X outside axis Y in the destination's order lies inside one step of Y in the
    source (X's whole source extent is smaller than Y's source stride), walking X outermost
    reads every source line once per value of X.  Y is cut into blocks of about
    ``_STRIP_BYTES`` of source and X moves between the block and the position in the block,
    so each source block is read from memory once and X's destination runs stay long.
    """
    for k in range(len(merged) - 2):
        nx, sdx, ssx = merged[k]
        ny, sdy, ssy = merged[k + 1]
        if not (0 < ssx and 0 < ssy and nx * ssx <= ssy and nx <= _STRIP_MAX_AXIS and ny > 2):
            continue
        b = _divisor_near(ny, max(2, _STRIP_BYTES // ssy))
        if b is None:
            continue
        return (merged[:k] + [[ny // b, sdy * b, ssy * b], [nx, sdx, ssx], [b, sdy, ssy]]
                + merged[k + 2:])
    return merged


class _Memory:
    """An object exposing raw memory as a 1-D array of words (keeps the owner alive)."""

    def __init__(self, owner, addr, nbytes, unit, readonly):
        self._owner = owner
        self.__array_interface__ = {
            "data": (addr, readonly), "shape": (nbytes // unit,),
            "typestr": np.dtype(f"u{unit}").str, "version": 3,
        }


def _warm_kernel():
    """Compile the kernel for every word size (:func:`run` always reads the source as a
    read-only view, so that is the one signature each needs)."""
    kernel = _get_kernel()
    # the kernel reads all _OUTER + _INNER axes: one run of 4 words
    strides = np.array([0] * (_OUTER + _INNER - 1) + [1], dtype=np.int64)
    shape = np.array([1] * (_OUTER + _INNER - 1) + [4], dtype=np.int64)
    for unit in (1, 2, 4, 8):
        d = np.zeros(4, dtype=f"u{unit}")
        s = np.ones(4, dtype=f"u{unit}")
        s.flags.writeable = False
        kernel(d, 0, strides, s, 0, strides, shape, False)


def _lanes(plan: Plan, d_addr: int, s_addr: int):
    """``('pack', k)`` when the plan writes ``k`` lanes of small values into words (an NPU's
    4N/2N/2IC unit, ``k * unit`` = 4 or 8 bytes), ``('unpack', k)`` when it reads them back,
    else None; ``d_addr`` and ``s_addr`` are the lowest addresses (modulo 8 is enough).  Such
    a copy moves whole words with shifts instead of single values.  Decided with the plan."""
    k_out, k_in = plan.shape[-1], plan.shape[-2]
    d, s = plan.dst_strides, plan.src_strides
    if (plan.unit < 4 and k_out in (2, 4) and plan.unit * k_out in (4, 8) and d[-1] == 1
            and d[-2] == k_out and s[-2] == 1 and d_addr % (plan.unit * k_out) == 0
            and all(v % k_out == 0 for v in d[:-1]) and plan.dst_off % k_out == 0):
        return "pack", k_out
    if (plan.unit < 4 and k_in in (2, 4) and plan.unit * k_in in (4, 8) and s[-1] == k_in
            and s[-2] == 1 and d[-1] == 1 and s_addr % (plan.unit * k_in) == 0
            and all(v % k_in == 0 for v in s[:-2] + (s[-1],)) and plan.src_off % k_in == 0):
        return "unpack", k_in
    return None


@functools.lru_cache(maxsize=None)
def _lane_kernel(unit: int, k: int):
    """The compiled word interleave for ``k`` lanes of ``unit``-byte values (made once each;
    ``k`` and the shifts are constants of the closure, so the compiler vectorises).  The runs
    are shared out over numba's threads, as the copy kernel's steps are."""
    numba = _backend.numba()

    Wt = numba.uint32 if unit * k == 4 else numba.uint64
    Et = {1: numba.uint8, 2: numba.uint16, 4: numba.uint32}[unit]
    bits = 8 * unit

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def row_starts(doff, dstr, soff, sstr, shape):  # pragma: no cover - compiled
        """Where each run of the four outer axes starts, on either side."""
        rows = shape[0] * shape[1] * shape[2] * shape[3]
        ds = np.empty(rows, np.int64)
        ss = np.empty(rows, np.int64)
        r = 0
        for i0 in range(shape[0]):
            for i1 in range(shape[1]):
                for i2 in range(shape[2]):
                    for i3 in range(shape[3]):
                        ds[r] = doff + i0 * dstr[0] + i1 * dstr[1] + i2 * dstr[2] + i3 * dstr[3]
                        ss[r] = soff + i0 * sstr[0] + i1 * sstr[1] + i2 * sstr[2] + i3 * sstr[3]
                        r += 1
        return ds, ss

    @numba.njit(cache=True, nogil=True, boundscheck=False, parallel=True)
    def pack(dst, doff, dstr, src, soff, sstr, shape):  # pragma: no cover - compiled
        n, lane = shape[4], sstr[5]           # runs of n words; the k lanes are rows ``lane`` apart
        ds, ss = row_starts(doff, dstr, soff, sstr, shape)
        for r in numba.prange(ds.size):
            o = dst[ds[r]:ds[r] + n]
            a = src[ss[r]:ss[r] + n]
            b = src[ss[r] + lane:ss[r] + lane + n]
            if k == 4:                        # one pass: every word built from its k lanes
                c = src[ss[r] + 2 * lane:ss[r] + 2 * lane + n]
                e = src[ss[r] + 3 * lane:ss[r] + 3 * lane + n]
                for j in range(n):
                    o[j] = (Wt(a[j]) | (Wt(b[j]) << Wt(bits)) | (Wt(c[j]) << Wt(2 * bits))
                            | (Wt(e[j]) << Wt(3 * bits)))
            else:
                for j in range(n):
                    o[j] = Wt(a[j]) | (Wt(b[j]) << Wt(bits))

    @numba.njit(cache=True, nogil=True, boundscheck=False, parallel=True)
    def unpack(dst, doff, dstr, src, soff, sstr, shape):  # pragma: no cover - compiled
        lane, n = dstr[4], shape[5]           # k rows ``lane`` apart get the lanes of n words
        ds, ss = row_starts(doff, dstr, soff, sstr, shape)
        for r in numba.prange(ds.size):
            w, d = src[ss[r]:ss[r] + n], ds[r]
            lo, hi = dst[d:d + n], dst[d + lane:d + lane + n]
            if k == 2:
                for j in range(n):
                    lo[j], hi[j] = Et(w[j]), Et(w[j] >> Wt(bits))
                continue
            lo2, hi2 = dst[d + 2 * lane:d + 2 * lane + n], dst[d + 3 * lane:d + 3 * lane + n]
            for j in range(n):
                v = w[j]
                lo[j], hi[j] = Et(v), Et(v >> Wt(bits))
                lo2[j], hi2[j] = Et(v >> Wt(2 * bits)), Et(v >> Wt(3 * bits))

    return pack, unpack


def _run_lanes(dst, d_base, src, s_base, plan: Plan) -> None:
    """One lane copy: the word side is addressed in words, the value side in values."""
    how, k = plan.lanes
    pack, unpack = _lane_kernel(plan.unit, k)
    words = plan.unit * k
    dstr, sstr, shape = plan.lane_arrays
    if how == "pack":
        d = np.asarray(_Memory(dst, d_base, plan.dst_span, words, False))
        s = np.asarray(_Memory(src, s_base, plan.src_span, plan.unit, True))
        pack(d, plan.dst_off // k, dstr, s, plan.src_off, sstr, shape)
    else:
        d = np.asarray(_Memory(dst, d_base, plan.dst_span, plan.unit, False))
        s = np.asarray(_Memory(src, s_base, plan.src_span, words, True))
        unpack(d, plan.dst_off, dstr, s, plan.src_off // k, sstr, shape)


def _warm_lanes(unit: int, k: int):
    """Compile the lane kernels of one packed unit, both ways (read-only sources, as
    :func:`_run_lanes` passes them)."""
    i64 = np.int64
    pack, unpack = _lane_kernel(unit, k)
    word = f"u{unit * k}"
    vals, words = np.ones(2 * k, dtype=f"u{unit}"), np.ones(2, dtype=word)
    vals.flags.writeable = words.flags.writeable = False
    pack(np.zeros(2, dtype=word), 0, np.zeros(6, i64), vals, 0,
         np.array([0, 0, 0, 0, 0, 2], i64), np.array([1, 1, 1, 1, 2, k], i64))
    unpack(np.zeros(2 * k, dtype=f"u{unit}"), 0, np.array([0, 0, 0, 0, 2, 0], i64), words, 0,
           np.zeros(6, i64), np.array([1, 1, 1, 1, k, 2], i64))


def run(dst: np.ndarray, src: np.ndarray) -> bool:
    """Copy with the compiled kernel; False (nothing written) when it cannot take this copy
    (or when the kernel is not compiled yet: it then compiles in the background)."""
    if _get_kernel() is None:
        return False
    plan = plan_copy(dst, src)
    return plan is not None and execute(plan, dst, 0, src, 0)   # plan_copy's bases are addresses


# The kernels that have run in this process: later copies need not ask whether they compile.
_READY: set = set()


def _ready(key, dispatchers, warm) -> bool:
    """:func:`tensorlayout._jit.ready` for a kernel not yet run here; for one that has, only
    whether a background compile is running (then NumPy copies, as every caller does)."""
    from . import _jit

    if key in _READY:
        return _jit.mode() == "wait" or not _jit.busy()
    return _jit.ready(key, dispatchers(), warm)


def _ready_copy() -> bool:
    return _ready("copy", lambda: [_kernel], _warm_kernel)


def execute(plan: Plan, dst, d_ptr: int, src, s_ptr: int) -> bool:
    """Run ``plan`` between the memory of ``dst`` and ``src`` (the objects keep it alive),
    with the plan's bases counted from ``d_ptr`` and ``s_ptr``; False, with nothing written,
    while a kernel is compiling (NumPy copies meanwhile).

    The plan holds every choice (word size, loops, streaming, ``plan.lanes``); whether the
    kernel it needs is compiled is asked until a copy has run with it."""
    kernel = _get_kernel()
    if kernel is None or not _ready_copy():
        return False
    d_base, s_base = d_ptr + plan.dst_base, s_ptr + plan.src_base
    if plan.lanes is not None:
        unit, k = plan.unit, plan.lanes[1]
        key = ("copy-lanes", unit, k)
        if _ready(key, lambda: list(_lane_kernel(unit, k)), functools.partial(_warm_lanes, unit, k)):
            _run_lanes(dst, d_base, src, s_base, plan)
            _READY.add(key)
            return True
    d = np.asarray(_Memory(dst, d_base, plan.dst_span, plan.unit, False))
    s = np.asarray(_Memory(src, s_base, plan.src_span, plan.unit, True))
    dstr, sstr, shape = plan.arrays
    kernel(d, plan.dst_off, dstr, s, plan.src_off, sstr, shape, plan.streaming)
    _READY.add("copy")
    return True


def _threads() -> int:
    nb = _backend.numba()
    return int(nb.get_num_threads()) if nb is not None else 1


def describe() -> str:
    """'numba (N threads)' or 'numpy'."""
    return f"numba {_backend.numba().__version__} ({_threads()} threads)" if available() else "numpy"

