"""What every target's schedule shares: which ops are views and moves, which activations
fuse into the op before them, and each tensor's live range.

>>> from tensorlayout.graph import load_graph
>>> from tensorlayout.model import zoo
>>> g = load_graph(zoo.tiny_onnx())
>>> {k: [n.name for n in v] for k, v in fusions(g, ("Conv", "Gemm")).items()}
{'conv1': ['relu1'], 'conv2': ['relu2'], 'conv3': ['relu3']}
>>> live = live_ranges(g)
>>> live["d"], live["y"]              # MaxPool's output: written by step 2, last read by 3
((2, 3), (9, 10))
"""

from __future__ import annotations

from ..graph.ops import ACTIVATIONS

__all__ = ["VIEWS", "MOVES", "ELEMENTWISE", "IN_PLACE", "fusions", "live_ranges", "is_fc",
           "view_source"]

#: Ops whose output is the input's elements in the same row-major order: a new shape over
#: the same storage on every target (no data moves).
VIEWS = frozenset({"Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})

#: Ops that only move elements: the views, and rearrangements of whole slices.
MOVES = VIEWS | {"Transpose", "Slice", "Split", "Concat"}

#: Element-wise arithmetic on two operands (broadcasting).
BINARY = frozenset({"Add", "Sub", "Mul", "Div"})

#: Ops computed element by element (each output element from the same-index input elements).
ELEMENTWISE = frozenset(ACTIVATIONS) | BINARY | {"BatchNormalization"}

#: Ops that may write their output over their first input when that input dies there.
IN_PLACE = ELEMENTWISE


def fusions(graph, producers) -> dict:
    """Activation nodes fused into the node that writes their input: ``{producer name: [the
    activation node]}`` for each producer whose op is in ``producers``, whose output has
    exactly that one reader, an activation of :data:`ACTIVATIONS` with constant bounds, and is
    not a graph output."""
    readers = graph.readers()
    outputs = set(graph.outputs)
    out = {}
    for node in graph.nodes:
        if node.op not in producers or not node.outputs:
            continue
        name = node.outputs[0]
        nxt = readers.get(name, [])
        if (len(nxt) == 1 and nxt[0].op in ACTIVATIONS and name not in outputs
                and nxt[0].inputs[0] == name and not getattr(nxt[0].params, "runtime_bounds", False)):
            out[node.name] = [nxt[0]]
    return out


def live_ranges(graph, step_of=None) -> dict:
    """``{tensor: (first step, last step)}``: written at its first step (-1 for graph inputs),
    live until its last reader; graph outputs to the end (the number of steps).  ``step_of``
    maps each node's name to the step that runs it (a step may cover several nodes); by
    default each node is its own step.  Constants are not listed."""
    if step_of is None:
        step_of = {n.name: i for i, n in enumerate(graph.nodes)}
    end = max(step_of.values(), default=-1) + 1
    first, last = {}, {}
    for name in graph.inputs:
        first[name] = last[name] = -1
    for node in graph.nodes:
        pos = step_of[node.name]
        for t in node.inputs:
            if t and t not in graph.consts:
                last[t] = max(last.get(t, pos), pos)
        for t in node.outputs:
            if t:
                first.setdefault(t, pos)
                last.setdefault(t, pos)
    for t in graph.outputs:
        if t in first:
            last[t] = end
    return {t: (first[t], last[t]) for t in first}


def is_fc(graph, node) -> bool:
    """A fully connected layer: Gemm (A not transposed) or MatMul of a 2-D tensor by a constant
    2-D weight."""
    if node.op not in ("Gemm", "MatMul") or len(node.inputs) < 2:
        return False
    w = graph.consts.get(node.inputs[1])
    if w is None or w.ndim != 2 or node.inputs[0] in graph.consts:
        return False
    if node.op == "Gemm" and node.params.trans_a:
        return False
    return len(graph.shapes[node.inputs[0]]) == 2


def view_source(graph, name):
    """The tensor ``name`` is a view of, following chains of :data:`VIEWS` (itself if none)."""
    producers = graph.producers()
    while True:
        node = producers.get(name)
        if node is None or node.op not in VIEWS or node.outputs[0] != name:
            return name
        name = node.inputs[0]
