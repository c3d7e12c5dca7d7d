"""The ops of the graph layer: each one a parser (ONNX attributes and constant inputs -> a frozen
parameter object) and its NumPy semantics.  :data:`OPS` maps an ONNX op type to its
:class:`OpDef`; :data:`OP_TYPES` lists them.

>>> OPS["Conv"].op, sorted(OPS)[:4]
('Conv', ['Abs', 'Acos', 'Acosh', 'Add'])
"""

from ._base import OPS, Ctx, NoParams, OpDef
from . import (detect, elementwise, index, logic, make, math, nn, norm, reduce, repeat,  # noqa: F401
               quant, resize, rnn, shape)  # each module registers its ops
from .elementwise import ACTIVATIONS, Activation, BatchNorm, batchnorm_affine
from .nn import Conv, Gemm, Pool, Softmax, conv_kernel, conv_padding, gemm_weight, pool_output_side
from .reduce import REDUCTIONS, ArgReduce, Reduce
from .resize import Resize
from .shape import Concat, Pad, Reshape, Slice, Split, Transpose, reshape_target

OP_TYPES = tuple(sorted(OPS))

__all__ = ["OPS", "OP_TYPES", "Ctx", "OpDef", "NoParams", "ACTIVATIONS", "Activation",
           "BatchNorm", "Conv", "Pool", "Reduce", "ArgReduce", "REDUCTIONS", "Gemm", "Softmax", "Resize", "Concat",
           "Split", "Slice", "Reshape", "Transpose", "Pad", "batchnorm_affine",
           "conv_kernel", "conv_padding", "gemm_weight", "pool_output_side", "reshape_target"]
