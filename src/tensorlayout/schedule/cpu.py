"""The CPU schedule: each node's algorithm (convolutions: the engine's algorithm and tile),
which element-wise steps write over their dying input, and when each tensor is freed.

>>> from tensorlayout.graph import load_graph
>>> from tensorlayout.model import zoo
>>> s = schedule_cpu(load_graph(zoo.tiny_onnx()))
>>> [(st.node.name, st.algorithm, st.tile) for st in s.steps if st.node.op == "Conv"]
[('conv1', 'im2col', None), ('conv2', 'winograd', 2), ('conv3', 'im2col', None)]
>>> [st.node.name for st in s.steps if st.in_place]       # each Relu over its conv's output
['relu1', 'relu2', 'relu3']
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph.ops import REDUCTIONS, Conv
from .common import IN_PLACE, VIEWS, live_ranges
from .winograd import cpu_conv

__all__ = ["CpuStep", "CpuSchedule", "schedule_cpu", "ALIASING"]

#: Ops whose NumPy kernel may return a view of (share memory with) its first input (a
#: reduction over no axis returns its input).
ALIASING = VIEWS | {"Slice", "Split", "Transpose"} | set(REDUCTIONS)


@dataclass(frozen=True)
class CpuStep:
    """One node on the CPU: its convolution algorithm and tile (with the auto rule's reason),
    whether it writes its output over input 0 (``in_place``), and the tensors that die after
    it (``free``)."""

    node: object
    algorithm: str | None = None
    tile: int | None = None
    reason: str | None = None
    in_place: bool = False
    free: tuple = ()


@dataclass
class CpuSchedule:
    graph: object
    steps: list
    live: dict


def schedule_cpu(graph) -> CpuSchedule:
    live = live_ranges(graph)
    producers = graph.producers()
    readers = graph.readers()
    aliased = set()          # tensors some op may view: never written over
    for node in graph.nodes:
        if node.op in ALIASING:
            aliased.update(t for t in node.inputs if t)
            aliased.update(t for t in node.outputs if t)
    dying: dict = {}
    for t, (_, last) in live.items():
        dying.setdefault(last, []).append(t)
    steps = []
    for i, node in enumerate(graph.nodes):
        algorithm = tile = reason = None
        if node.op == "Conv" and isinstance(node.params, Conv):
            algorithm, tile, reason = cpu_conv(graph, node)
        x = node.inputs[0] if node.inputs else ""
        out = node.outputs[0] if node.outputs else ""
        in_place = bool(
            node.op in IN_PLACE and x and out and x in producers and x not in aliased
            and producers[x].op not in ALIASING and live[x][1] == i
            and sum(1 for r in readers[x] if r is node) == 1 and node.inputs.count(x) == 1
            and x in graph.shapes and graph.shapes.get(x) == graph.shapes.get(out)
            and graph.dtypes.get(x) == graph.dtypes.get(out))
        free = tuple(t for t in dying.get(i, ()) if t not in graph.consts)
        steps.append(CpuStep(node, algorithm, tile, reason, in_place, free))
    return CpuSchedule(graph, steps, live)
