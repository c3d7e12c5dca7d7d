"""The graph layer of the network pipeline: an ONNX model read once into typed nodes.

Three layers carry a network, each importing only the ones below it:

1. **graph** (this package): ONNX parsed once -- each node's attributes become a frozen
   parameter object (a Conv knows its pads, strides, group and whether it is depthwise, a
   Gemm its transposes, a Clip its bounds), every tensor's static shape is inferred and
   constant subgraphs are folded to a fixed point.  Each op also has its NumPy semantics.
2. **schedule** (:mod:`tensorlayout.schedule`): per target, every decision -- fusion,
   views, each tensor's layout, liveness and memory reuse, the Winograd tile.
3. **backends** (:mod:`tensorlayout.backends`): cpu, opencl and npu run a schedule.

Needs the ``onnx`` package to read a model (the ``model`` extra).
"""

from .graph import OPSET_RANGE, Graph, Node, load_graph
from .ops import OP_TYPES, OPS

__all__ = ["load_graph", "Graph", "Node", "OPS", "OP_TYPES", "OPSET_RANGE"]
