"""The source of how the CPU backend's entries share a call's work among its threads,
generated as text: the work counter's units taken from either end (:func:`source` is part of
:func:`tensorlayout.backends.cpu_source.module_source`'s module, which imports ``fetch_add``
and ``njit``)."""

from __future__ import annotations

__all__ = ["source"]

_SOURCE = '''

@njit(inline="always")
def next_unit(work, tid, units):
    """The next of ``units`` units for thread ``tid`` (``units`` when none is left).  The
    entries take their work from the call's counter ``work`` (zero when the call starts)
    with an atomic add instead of a fixed share per thread: a thread the system holds back
    (another process, or another library's threads spinning on the same cores) then delays
    only the unit it holds.  The counter's low 32 bits count the units taken from the front, its high 32 bits those
    taken from the back: even threads take from the front, odd ones from the back, so that
    two threads each walk a run of consecutive units (what a fixed half each would read,
    in the cache) and meet wherever the faster one has got to.  A claim counts if the two
    counts before it sum to less than ``units``."""
    if tid % 2 == 0:
        old = fetch_add(work, 1)
    else:
        old = fetch_add(work, 1 << 32)
    lo = old & 0xFFFFFFFF
    hi = old >> 32
    if lo + hi >= units:
        return units
    return lo if tid % 2 == 0 else units - 1 - hi


@njit(inline="always")
def next_range(work, tid, nt, total):
    """Thread ``tid``'s next range ``[lo, hi)`` of ``total`` indices (``lo`` at least
    ``total`` when none is left), for a call on ``nt`` threads: ranges of a quarter of an
    even share (at least one index), handed out as :func:`next_unit` hands out units, so
    the counter is touched a few times per thread."""
    step = max(1, (total + 4 * nt - 1) // (4 * nt))
    lo = next_unit(work, tid, (total + step - 1) // step) * step
    return lo, min(total, lo + step)
'''


def source() -> str:
    """The claiming helpers' source."""
    return _SOURCE
