"""Whole networks: load an ONNX model, run it on the CPU, plan every tensor's layout.

Needs the ``onnx`` package (the ``model`` extra); imported only when a model is loaded.

* :func:`load` -> :class:`Model`: shape inference, BatchNormalization folded into Conv,
  constant subgraphs folded, one :class:`~tensorlayout.winograd.ConvPlan` per convolution;
  :meth:`Model.run` runs it in NumPy (NCHW, float32).
* :func:`plan_model` -> :class:`ModelPlan`: per tensor, its CPU buffer format, MACE image
  type and size, bytes, padding waste and device limits; the peak image memory with reuse;
  per layer, the NPU placement on a Sophgo chip and whether it fits one NPU's local memory.
* :mod:`tensorlayout.model.zoo`: networks built at run time with random weights.

>>> from tensorlayout.model import load, zoo
>>> m = load(zoo.tiny_onnx())
>>> [(s.node.name, s.info.get("algorithm")) for s in m.steps if s.node.op == "Conv"]
[('conv1', 'im2col'), ('conv2', 'winograd F(2,3)'), ('conv3', 'im2col')]
"""

from .graph import OPSET_RANGE, Model, load
from .ops import OP_TYPES, ModelError
from .plan import ModelPlan, plan_model


__all__ = ["load", "Model", "ModelError", "OP_TYPES", "OPSET_RANGE", "plan_model", "ModelPlan"]
