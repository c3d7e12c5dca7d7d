"""A compiled strided copy (numba), used by :func:`tensorlayout._copy.strided_copy` for large copies.

The copy ``dst[...] = src`` of two equal-shaped strided views is brought to a
canonical form first, so one small kernel serves every layout:

1. axes of length 1 are dropped;
2. the axes are ordered by the destination's strides, largest first, so the
   writes walk memory forwards (ties keep the source's order);
3. neighbouring axes that are one run in both arrays are merged
   (a contiguous NHWC row and a row of RGBA pixels become one axis);
4. a run that is contiguous in both arrays (a pixel's 4 lanes, a channel row)
   is copied in the widest unsigned word that divides it (a float32 RGBA pixel is
   two 64-bit words);
5. a lane group of 4 words is written by four plain statements, and whole
   cache lines written in order use streaming (non-temporal) stores, so the
   destination's lines are not read before they are overwritten.

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

import math
from dataclasses import dataclass

import numpy as np

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


def _extent(arr: np.ndarray):
    low = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides) if s > 0) + arr.itemsize
    return low, high


def plan_copy(dst: np.ndarray, src: np.ndarray):
    """Canonical form of ``dst[...] = src`` (same shape and dtype), or None if it has too many axes."""
    isz = dst.itemsize
    axes = [(n, sd, ss) for n, sd, ss in zip(dst.shape, dst.strides, src.strides) if n != 1]
    if not axes:
        axes = [(1, isz, isz)]
    # Largest destination stride first; for equal ones, largest source stride first.
    axes.sort(key=lambda a: (-abs(a[1]), -abs(a[2])))
    merged = [list(axes[0])]
    for n, sd, ss in axes[1:]:
        on, osd, oss = merged[-1]
        if osd == sd * n and oss == ss * n:
            merged[-1] = [on * n, sd, ss]
        else:
            merged.append([n, sd, ss])
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
    d_low, d_high = _extent(dst)
    s_low, s_high = _extent(src)
    d_addr = dst.__array_interface__["data"][0] + d_low
    s_addr = src.__array_interface__["data"][0] + s_low
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
    if dst.nbytes >= _STREAM_MIN_BYTES and _interleaves(inner, isz):
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
    streaming = dst.nbytes >= _STREAM_MIN_BYTES and (
        (dsd == unit and unit >= 4 and lsd == dn * unit)
        or (deinterleave and dn * unit >= _LINE))
    return Plan(
        unit=unit, shape=shape,
        dst_strides=tuple(a[1] // unit for a in merged),
        src_strides=tuple(a[2] // unit for a in merged),
        dst_base=d_addr, dst_span=d_high - d_low,
        src_base=s_addr, src_span=s_high - s_low,
        dst_off=-d_low // unit, src_off=-s_low // unit, streaming=streaming,
    )


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
    """Compile the kernel for every word size, source writable and read-only."""
    kernel = _get_kernel()
    # the kernel reads all _OUTER + _INNER axes: one run of 4 words
    strides = np.array([0] * (_OUTER + _INNER - 1) + [1], dtype=np.int64)
    shape = np.array([1] * (_OUTER + _INNER - 1) + [4], dtype=np.int64)
    for unit in (1, 2, 4, 8):
        d = np.zeros(4, dtype=f"u{unit}")
        for readonly in (False, True):
            s = np.ones(4, dtype=f"u{unit}")
            s.flags.writeable = not readonly
            kernel(d, 0, strides, s, 0, strides, shape, False)


def run(dst: np.ndarray, src: np.ndarray) -> bool:
    """Copy with the compiled kernel; False (nothing written) when it cannot take this copy
    (or when the kernel is not compiled yet: it then compiles in the background)."""
    kernel = _get_kernel()
    if kernel is None:
        return False
    from . import _jit

    if not _jit.ready("copy", [kernel], _warm_kernel):
        return False
    plan = plan_copy(dst, src)
    if plan is None:
        return False
    d = np.asarray(_Memory(dst, plan.dst_base, plan.dst_span, plan.unit, False))
    s = np.asarray(_Memory(src, plan.src_base, plan.src_span, plan.unit, True))
    if not s.flags.writeable:
        s = s.view()
    kernel(d, plan.dst_off, np.array(plan.dst_strides, dtype=np.int64), s, plan.src_off,
           np.array(plan.src_strides, dtype=np.int64), np.array(plan.shape, dtype=np.int64),
           plan.streaming)
    return True


def _threads() -> int:
    try:
        import numba

        return int(numba.get_num_threads())
    except Exception:  # noqa: BLE001
        return 1


def describe() -> str:
    """'numba (N threads)' or 'numpy'."""
    return f"numba {__import__('numba').__version__} ({_threads()} threads)" if available() else "numpy"

