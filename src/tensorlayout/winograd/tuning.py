"""One explicit object for every knob of the convolution engine.

A :class:`Tuning` is a frozen value: plans take one (``plan_conv2d(..., tuning=...)``) and
keep it, so tests and benchmarks pass the setting they want instead of changing module
globals.  ``DEFAULT`` is what plans get when none is given.

>>> from tensorlayout.winograd.tuning import Tuning, DEFAULT
>>> DEFAULT.block_tiles is None, DEFAULT.use_numba
(True, True)
>>> Tuning(block_tiles=7).block_tiles
7
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .. import _jit
from ..errors import LayoutError

__all__ = ["Tuning", "DEFAULT"]


@dataclass(frozen=True)
class Tuning:
    """Knobs of the engine; every default is chosen from measurements (docs/winograd.md).

    * ``use_numba``: use the compiled kernels when numba imports (False: NumPy only);
    * ``threads``: threads per call (None: ``numba.get_num_threads()``, else the CPU count);
    * ``block_tiles``: tiles per block of the Winograd pipeline (None: chosen per layer);
    * ``min_block_tiles``: fewest tiles a block is given when blocks are split over
      threads (narrower GEMMs lose more than the cache saves);
    * ``small_weights_bytes``, ``small_min_block_tiles``: transformed weights up to this
      size are cheap for every thread to read whole, so blocks may be as small as
      ``small_min_block_tiles`` tiles (each thread then runs whole blocks instead of all
      threads sharing one);
    * ``block_bytes``: the size the transformed input and output of one block aim at;
    * ``row_layout``: blocks of whole tile rows on wide images (None: from
      ``row_layout_min_tiles`` tiles per row);
    * ``row_layout_min_tiles``: tiles per row from which the row layout is used;
    * ``parallel_min_threads``: from this many threads on, float32 im2col runs as one
      compiled parallel function on numba's pool (below, our Python threads hand out BLAS
      calls);
    * ``gemm``: the GEMMs of float32 Winograd: "packed" (the weights packed once into the
      panels of the project's SIMD micro-kernel, the whole call on the native workers of
      ``_pool``; where that engine is not available, as "blas"), "blas" (NumPy's BLAS
      from our Python threads); float64 and custom kernels use BLAS, the NumPy fallback
      plain NumPy;
    * ``compile``: "background" (a plan whose kernels are neither compiled nor cached
      computes with NumPy while they compile in a background thread, and switches to them
      once they are ready) or "wait" (compile first); default from ``TENSORLAYOUT_COMPILE``.
    """

    use_numba: bool = True
    threads: int | None = None
    block_tiles: int | None = None
    min_block_tiles: int = 48
    small_weights_bytes: int = 1 << 20
    small_min_block_tiles: int = 8
    block_bytes: int = 3 << 20
    row_layout: bool | None = None
    row_layout_min_tiles: int = 32
    parallel_min_threads: int = 4
    gemm: str = "packed"
    compile: str = field(default_factory=_jit.mode)

    def __post_init__(self):
        for name in ("threads", "block_tiles"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise LayoutError(f"Tuning.{name} = {v!r} is not allowed: it must be a positive "
                                  "integer or None")
        if self.compile not in ("background", "wait"):
            raise LayoutError(f"Tuning.compile = {self.compile!r} is not allowed: it must be "
                              "'background' or 'wait'")
        if self.gemm not in ("packed", "blas"):
            raise LayoutError(f"Tuning.gemm = {self.gemm!r} is not allowed: it must be 'packed' "
                              "or 'blas'")
        for name in ("min_block_tiles", "small_weights_bytes", "small_min_block_tiles",
                     "block_bytes", "row_layout_min_tiles", "parallel_min_threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise LayoutError(f"Tuning.{name} = {v!r} is not allowed: it must be a positive "
                                  "integer")

    def replace(self, **changes) -> "Tuning":
        """A copy with some knobs changed: ``DEFAULT.replace(threads=1)``."""
        return replace(self, **changes)


DEFAULT = Tuning()
