"""Sophgo NPU local memory (seed 003): chips, addresses, strides, layouts, storage modes,
and a byte-exact simulated local memory with GDMA-style copies and an allocator.

>>> from tensorlayout.npu import Chip, tensor_layout
>>> chip = Chip(4, 1024, 128)
>>> tensor_layout(chip, 0, (2, 3, 4, 5)).stride
(32, 32, 5, 1)
"""

from .chip import BM1684, BM1684X, BM1688, CHIPS, Chip, get_chip
from .memory import LocalMemory
from .tensor import (
    DTYPES,
    MODES,
    NpuTensor,
    aligned_stride,
    as_dtype,
    channels_per_npu,
    compact_stride,
    continuous_stride,
    feature_block,
    locate,
    matrix_layout,
    packed_shape,
    tensor_layout,
)

__all__ = [
    "Chip", "BM1684", "BM1684X", "BM1688", "CHIPS", "get_chip",
    "DTYPES", "MODES", "NpuTensor", "as_dtype", "channels_per_npu", "feature_block",
    "aligned_stride", "compact_stride", "continuous_stride", "packed_shape",
    "tensor_layout", "matrix_layout", "locate", "LocalMemory",
]
