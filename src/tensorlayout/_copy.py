"""The one copy every pack and unpack goes through: ``dst[...] = src`` for two strided views.

Both views have the same shape.  NumPy's strided assignment is the portable
path; a compiled path may replace it where it is faster.
"""

from __future__ import annotations

import numpy as np


def strided_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """Copy ``src`` into ``dst`` (same shape, any strides, dtype cast as NumPy's copyto does)."""
    np.copyto(dst, src, casting="unsafe")
