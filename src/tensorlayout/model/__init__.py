"""Whole networks: load an ONNX model, run it on the CPU, OpenCL images or the NPU, plan it.

Needs the ``onnx`` package (the ``model`` extra); imported only when a model is loaded.

* :func:`load` -> :class:`Model`: the graph read once (:mod:`tensorlayout.graph`: shape
  inference, constants folded to a fixed point, BatchNormalization folded into Conv);
  :meth:`Model.run` runs it on a runtime, prepared on first use (the CPU runtime: NumPy
  kernels, one :class:`~tensorlayout.winograd.ConvPlan` per convolution).
* :func:`plan_model` -> :class:`ModelPlan`: per tensor, its CPU buffer format, MACE image
  type and size, bytes, padding waste and device limits; the peak image memory with reuse;
  per layer, the NPU placement on a Sophgo chip and whether it fits one NPU's local memory.
* :class:`OpenCLSession`: a network with every activation in OpenCL images, prepared once
  (:mod:`tensorlayout.backends.opencl`).
* :func:`compare` -> :class:`~tensorlayout.model.workbench.Comparison`: two runtimes tensor by
  tensor, each tensor read back from its storage; :func:`where`: where one element of a tensor
  lives on images or the NPU (:mod:`tensorlayout.model.workbench`,
  :mod:`tensorlayout.model.workbench_where`).
* :mod:`tensorlayout.model.zoo`: networks built at run time with random weights.

>>> from tensorlayout.model import load, zoo
>>> m = load(zoo.tiny_onnx())
>>> [(s.node.name, s.info.get("algorithm")) for s in m.steps if s.node.op == "Conv"]
[('conv1', 'shifted GEMM'), ('conv2', 'direct convolution'), ('conv3', 'direct convolution')]
"""

from ..errors import ModelError
from ..graph import OP_TYPES, OPSET_RANGE
from ._model import RUNTIMES, Model, load
from .plan import ModelPlan, plan_model

__all__ = ["load", "Model", "ModelError", "OP_TYPES", "OPSET_RANGE", "RUNTIMES", "plan_model",
           "ModelPlan", "OpenCLSession", "compare", "where"]


def __getattr__(name):
    # the OpenCL backend (and PyOpenCL's lookup) only when a session is asked for
    if name == "OpenCLSession":
        from ..backends.opencl import OpenCLSession

        return OpenCLSession
    if name == "compare":
        from .workbench import compare

        return compare
    if name == "where":
        from .workbench_where import where

        return where
    raise AttributeError(f"module 'tensorlayout.model' has no attribute {name!r}")
