"""The CPU schedule: which nodes run as one step (a convolution with the residual Add and the
activation after it; a fully connected, element-wise or BatchNormalization node with its
activation), each convolution's kernel (depthwise and pointwise loops of the backend, the
Winograd / im2col engine with the algorithm and tile its cost model picks, or the backend's
shifted GEMM or direct convolution for layers im2col or a small Winograd would take), which
tensors it holds in the blocked layout, which element-wise steps write over their dying
input, and when each tensor is freed.

>>> from tensorlayout.graph import load_graph
>>> from tensorlayout.model import zoo
>>> s = schedule_cpu(load_graph(zoo.tiny_onnx()))
>>> [(st.node.name, st.kind, st.algorithm, st.tile, st.fused) for st in s.steps][:4]
[('conv1', 'conv', 'shifted', None, ('relu1',)), ('pool1', 'pool', None, None, ()), ('conv2', 'conv', 'direct', None, ('relu2',)), ('conv3', 'conv', 'direct', None, ('relu3',))]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..graph.ops import ACTIVATIONS, REDUCTIONS, Activation, BatchNorm, Conv, Pool
from ..graph.ops.reduce import Reduce
from .common import IN_PLACE, VIEWS, is_fc, live_ranges
from .winograd import cpu_conv, direct_lanes

__all__ = ["CpuStep", "CpuSchedule", "schedule_cpu", "blocked_tensors", "ALIASING",
           "plane_scale_input"]

#: Ops whose NumPy kernel may return a view of (share memory with) its first input (a
#: reduction over no axis returns its input).
ALIASING = VIEWS | {"Slice", "Split", "Transpose"} | set(REDUCTIONS)
#: Ops an activation after them runs in (their kernel's epilogue).
_FUSE_ACT = ("Conv", "Gemm", "MatMul", "BatchNormalization", "Add", "Sub", "Mul", "Div")


@dataclass(frozen=True)
class CpuStep:
    """One step on the CPU: its node and the nodes ``fused`` into it (an Add of a residual
    ``residual``, then an activation ``act``), the tensor it writes (``output``); its ``kind``:
    "depthwise", "pointwise", "fc", "pool", "gap", "scale" or "affine" (the backend's loops
    and GEMMs; "pool" a 2-D MaxPool or AveragePool, "gap" a GlobalAveragePool or a
    ReduceMean over the planes, "scale" a Mul by one factor per plane, "affine" a
    BatchNormalization of constant statistics, a map per channel, all of float32), "conv"
    (the engine, with ``algorithm`` and ``tile`` and the auto rule's ``reason``) or
    "kernel" (the graph's NumPy semantics); whether it writes its output over input 0
    (``in_place``), and the tensors that die after it (``free``)."""

    node: object
    kind: str = "kernel"
    algorithm: str | None = None
    tile: int | None = None
    reason: str | None = None
    act: object = None
    residual: str = ""
    fused: tuple = ()
    output: str = ""
    in_place: bool = False
    free: tuple = ()

    @property
    def writes(self) -> tuple:
        """The tensors the step computes: the last fused node's output, or its node's."""
        return (self.output,) if self.fused else tuple(self.node.outputs)


@dataclass
class CpuSchedule:
    """The steps in order, each tensor's live range (first and last step), and the tensors
    held in the blocked layout (:func:`blocked_tensors`)."""

    graph: object
    steps: list
    live: dict
    blocked: frozenset = frozenset()


#: Whether the direct convolution reads and writes the blocked layout (and with it the 1 x 1
#: layers and residuals between such steps): ResNet-50 6-7% faster at 96^2 and 224^2
#: (``benchmarks/bench_setting.py tensorlayout.schedule.cpu.BLOCK_DIRECT False True --nets
#: ...``, ``benchmarks/results/setting_block_direct_ci2.txt``).
BLOCK_DIRECT = True
#: Channels from which a 1 x 1 layer reads a blocked tensor into an NCHW output: its GEMM
#: turned over scatters each tile into the planes, which costs more than the NCHW GEMM's
#: contiguous store where the depth is shallow (SqueezeNet's 16- to 64-channel expansions),
#: so a shallower tensor a convolution writes stays NCHW (one a depthwise convolution or a
#: plane scaling writes does not: their blocked loops gain more, as in ShuffleNet's
#: branches and squeeze-and-excite blocks).  SqueezeNet 1.1 2-3% faster, the rest the same
#: (``benchmarks/bench_setting.py tensorlayout.schedule.cpu.MIXED_MIN_DEPTH 0 128 --nets
#: ...``, ``benchmarks/results/setting_mixed_min_depth_ci2.txt``).
MIXED_MIN_DEPTH = 128
#: Whether a Concat along the channels of inputs of whole blocks (channels a multiple of
#: 16) is held blocked where its inputs are: their producers then write their blocks in
#: place in its output, and its readers read blocks.
BLOCK_CONCAT = True
#: Whether a 2-D pooling step with nothing fused writes the blocked layout (from NCHW
#: planes) where its readers take it: ResNet-18's 56^2 blocks then read and write blocks
#: around the max pool instead of dealing its planes and scattering into planes.
BLOCK_POOL = True


def _blockable(graph, st, role: str) -> bool:
    """Whether step ``st`` can write (``role`` "out") or read as its data input ("in") a
    tensor in the blocked layout: a depthwise convolution of multiplier 1, a 1 x 1
    convolution of stride 1, the direct convolution (reading it only in runs of 16 lanes,
    :func:`~.winograd.direct_lanes`), a Mul by one factor per plane (both), a
    GlobalAveragePool or a ReduceMean over the planes (reading), a 2-D pooling with nothing
    fused (writing; reading too, a max of dilation 1), a Concat of whole blocks
    (:func:`_concat_blockable`; both).  A fused residual is read in the layout of the output
    (:func:`blocked_tensors` keeps the two alike)."""
    node = st.node
    if st.kind == "depthwise":
        return node.params.multiplier == 1
    if st.kind == "pointwise":
        return node.params.strides == (1, 1)
    if st.kind == "conv" and st.algorithm == "direct":
        return BLOCK_DIRECT and (role == "out" or direct_lanes(graph, node) == 16)
    if st.kind == "pool":
        p = st.node.params
        return BLOCK_POOL and not st.act and not st.residual and (
            role == "out" or (p.is_max and tuple(p.dilations) == (1, 1)))
    if _is_concat(st):
        return BLOCK_CONCAT and _concat_blockable(graph, st.node)
    return st.kind == "scale" or (st.kind == "gap" and role == "in")


def _is_concat(st) -> bool:
    return st.kind == "kernel" and st.node.op == "Concat"


def _concat_blockable(graph, node) -> bool:
    """Whether Concat ``node`` joins its inputs along the channels, each given once and of
    whole blocks (a multiple of 16 channels): then their blocks, one after another, are its
    output's.  The tensors must be blockable themselves (:func:`blocked_tensors` holds a
    Concat blocked with all its inputs or none)."""
    ins = node.inputs
    shapes = [graph.shapes.get(n) if n else None for n in ins]
    return bool(ins) and node.params.axis == 1 and len(set(ins)) == len(ins) and all(
        s is not None and len(s) == 4 and isinstance(s[1], (int, np.integer)) and s[1] % 16 == 0
        for s in shapes)


def _reads_blocked(graph, r, t) -> bool:
    """Whether step ``r`` can read ``t`` blocked as its data input (once; never as its
    residual): a Concat any of its inputs, another step its data input."""
    if not _blockable(graph, r, "in") or r.residual == t or r.node.inputs.count(t) != 1:
        return False
    return _is_concat(r) or _data_input(graph, r) == t


def _residual_blockable(st) -> bool:
    """Whether step ``st`` reads its fused residual in the blocked layout when its output is
    blocked (the 1 x 1 and the direct convolutions' stores)."""
    return st.kind == "pointwise" or (st.kind == "conv" and st.algorithm == "direct")


def _data_input(graph, st) -> str:
    """The input of step ``st`` that a blocked layout would be of (a plane scaling's
    tensor, not its factors; every other step's first input)."""
    if st.kind == "scale":
        return st.node.inputs[plane_scale_input(graph, st.node)]
    return st.node.inputs[0] if st.node.inputs else ""


def blocked_tensors(graph, steps) -> frozenset:
    """The tensors the CPU backend holds in the blocked layout (N, ceil(C/16), H, W, 16):
    16 channels side by side at each position, so that a depthwise convolution sums a whole
    vector of channels per tap with no transposes.  A tensor is blocked when the step that
    writes it and every step that reads it can take the layout (:func:`_blockable`; a
    reader reads it as its data input, never as a residual), it is 4-D float32 of static
    shape with more than one position (a squeeze-and-excite block's 1 x 1 maps take the
    matrix-vector product) and no graph output, and a depthwise or scaling step's output only
    where its input is blocked too, a scaling step's input only where its output is (a 1 x 1
    step converts between the layouts in its GEMM's reads and store, a depthwise step in
    its own; a scaling step would have to transpose).  A step's fused residual is blocked
    exactly where the step's output is: a tensor read as a residual is blocked only where
    every step reading it so writes a blocked output (and can read it so,
    :func:`_residual_blockable`), and a step whose residual stays in NCHW writes NCHW.  A
    Concat is blocked with all its inputs or with none."""
    outputs = set(graph.outputs)
    by_node = {}
    for st in steps:
        by_node[st.node.name] = st
        for n in st.fused:
            by_node[n] = st
    readers = graph.readers()
    made = {st.output: st for st in steps if st.output and len(st.node.outputs) == 1}
    got = set()
    readers_of = {}
    for t, st in made.items():
        shape = graph.shapes.get(t)
        rs = readers_of[t] = [by_node[r.name] for r in readers.get(t, [])]
        if (t in outputs or not rs or not _f32(graph, t) or shape is None or len(shape) != 4
                or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape)
                or shape[2] * shape[3] == 1 or not _blockable(graph, st, "out")):
            continue
        if all((r.residual == t and _residual_blockable(r) and r.node.inputs.count(t) == 0)
               or _reads_blocked(graph, r, t) for r in rs):
            got.add(t)
    changed = True
    while changed:
        changed = False
        for t in sorted(got):
            st = made[t]
            if ((st.kind in ("depthwise", "scale") and _data_input(graph, st) not in got)
                    # a plane scaling writes the layout it reads
                    or any(r.kind == "scale" and _data_input(graph, r) == t
                           and r.output not in got for r in readers_of[t])
                    or (st.residual and st.residual not in got)
                    or any(r.residual == t and r.output not in got for r in readers_of[t])
                    # a Concat blocked with all its inputs, or none
                    or (_is_concat(st) and any(n not in got for n in st.node.inputs))
                    or any(_is_concat(r) and r.output not in got for r in readers_of[t])
                    or (st.kind in ("pointwise", "conv", "pool")
                        and graph.shapes[t][1] < MIXED_MIN_DEPTH
                        and any(r.kind == "pointwise" and r.output not in got
                                for r in readers_of[t]))):
                got.discard(t)
                changed = True
    return frozenset(got)


def _f32(graph, *names) -> bool:
    return all(graph.dtypes.get(n) == np.float32 and n in graph.shapes for n in names)


def plane_scale_input(graph, node):
    """For a Mul of a tensor (N, C, ...) by one factor per plane (N, C, 1, ...), both float32
    (a squeeze-and-excite block's last step): the index of the tensor's input, else None."""
    if len(node.inputs) != 2 or not _f32(graph, *node.inputs, node.outputs[0]):
        return None
    shapes = [graph.shapes[n] for n in node.inputs]
    for big in (0, 1):
        x, s = shapes[big], shapes[1 - big]
        if (len(x) >= 3 and len(s) == len(x) and tuple(s[:2]) == tuple(x[:2])
                and all(d == 1 for d in s[2:]) and graph.shapes[node.outputs[0]] == x):
            return big
    return None


def _conv_kind(node) -> str:
    p = node.params
    if p.depthwise:
        return "depthwise"
    if (p.kernel == (1, 1) and p.group == 1 and p.begin == (0, 0) and p.end == (0, 0)):
        return "pointwise"
    return "conv"


def _fc_bias(graph, node) -> bool:
    """True when a fully connected node's C (Gemm's third input) is absent or a constant the
    backend adds per output column: one value, (N,) or (1, N)."""
    if node.op != "Gemm" or len(node.inputs) < 3 or not node.inputs[2]:
        return True
    c = graph.consts.get(node.inputs[2])
    n = graph.shapes[node.outputs[0]][1]
    return c is not None and (c.size == 1 or c.shape in ((n,), (1, n)))


def _fusions(graph):
    """``{producer name: (residual tensor or "", add node or None, activation nodes, the
    activation's parameters or None)}``: the activation nodes are one of ACTIVATIONS, or a
    Sigmoid and a Mul that make SiLU (:data:`SILU`)."""
    readers = graph.readers()
    outputs = set(graph.outputs)
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    producers = graph.producers()

    def only_reader(name, ops):
        nxt = readers.get(name, [])
        if len(nxt) == 1 and nxt[0].op in ops and name not in outputs:
            return nxt[0]
        return None

    out = {}
    for node in graph.nodes:
        if node.op not in _FUSE_ACT or not node.outputs or not _f32(graph, node.outputs[0]):
            continue
        if node.op == "Conv" and not isinstance(node.params, Conv):
            continue
        y = node.outputs[0]
        add = None
        res = ""
        if node.op == "Conv":
            a = only_reader(y, ("Add",))
            if a is not None and a.inputs.count(y) == 1:
                other = a.inputs[1] if a.inputs[0] == y else a.inputs[0]
                src = producers.get(other)
                if (other not in graph.consts and _f32(graph, other, a.outputs[0])
                        and graph.shapes[other] == graph.shapes[y] == graph.shapes[a.outputs[0]]
                        and (src is None or order[src.name] < order[node.name])):
                    add, res, y = a, other, a.outputs[0]
        act = only_reader(y, ACTIVATIONS)
        if act is not None and (act.inputs[0] != y or act.params.runtime_bounds):
            act = None
        acts = () if act is None else (act,)
        params = None if act is None else act.params
        if act is None:
            silu = _silu(graph, y, readers, outputs)
            if silu:
                acts, params = silu, SILU
        if add is not None or acts:
            out[node.name] = (res, add, acts, params)
    return out


#: x · sigmoid(x) (SiLU, Swish) as one activation: the Sigmoid and the Mul fused together.
SILU = Activation("SiLU")


def _silu(graph, y, readers, outputs) -> tuple:
    """(Sigmoid, Mul) when ``y`` is read by exactly a Sigmoid and a Mul of ``y`` by that
    Sigmoid's output (nothing else reading either, neither a graph output), else ()."""
    nxt = readers.get(y, [])
    if len(nxt) != 2 or y in outputs:
        return ()
    sig = next((n for n in nxt if n.op == "Sigmoid"), None)
    mul = next((n for n in nxt if n.op == "Mul"), None)
    if sig is None or mul is None or sig.inputs[0] != y or not sig.outputs:
        return ()
    s = sig.outputs[0]
    if (s in outputs or readers.get(s, []) != [mul] or sorted(mul.inputs) != sorted([y, s])
            or not mul.outputs or not _f32(graph, s, mul.outputs[0])
            or graph.shapes[mul.outputs[0]] != graph.shapes[y]):
        return ()
    return (sig, mul)


def _plane_mean(graph, node) -> bool:
    """A GlobalAveragePool, or a ReduceMean over every axis after the first two (either
    keepdims): each (image, channel) plane's mean."""
    shape = graph.shapes.get(node.inputs[0]) if node.inputs else None
    if shape is None or len(shape) < 3:
        return False
    if node.op == "GlobalAveragePool":
        return True
    p = node.params
    return (node.op == "ReduceMean" and isinstance(p, Reduce) and p.kind == "mean"
            and p.axes == tuple(range(2, len(shape))))


def schedule_cpu(graph) -> CpuSchedule:
    fused = _fusions(graph)
    skip = {n.name: p for p, (_, a, f, _) in fused.items() for n in (a, *f) if n is not None}
    step_of, i = {}, -1
    for node in graph.nodes:
        if node.name not in skip:
            i += 1
        step_of[node.name] = i
    for name, producer in skip.items():
        step_of[name] = step_of[producer]
    live = live_ranges(graph, step_of)
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
    for node in graph.nodes:
        if node.name in skip:
            continue
        i = step_of[node.name]
        res, add, acts, act = fused.get(node.name, ("", None, (), None))
        output = ((acts[-1] if acts else None) or add or node).outputs[0] if node.outputs else ""
        kind, algorithm, tile, reason = "kernel", None, None, None
        if node.op == "Conv" and isinstance(node.params, Conv) and _f32(graph, node.inputs[0]):
            kind = _conv_kind(node)
            if kind == "conv" or (kind == "pointwise" and node.params.strides != (1, 1)):
                algorithm, tile, reason = cpu_conv(graph, node)
                if kind == "pointwise":     # a strided 1 x 1 layer: direct, or sliced
                    if algorithm == "direct":
                        kind = "conv"
                    else:
                        algorithm, tile, reason = None, None, None
        elif is_fc(graph, node) and _f32(graph, node.inputs[0], node.outputs[0]) \
                and _fc_bias(graph, node):
            kind = "fc"
        elif node.op in ("MaxPool", "AveragePool") and isinstance(node.params, Pool) \
                and _f32(graph, node.inputs[0], node.outputs[0]):
            kind = "pool"
        elif _plane_mean(graph, node) and _f32(graph, node.inputs[0], node.outputs[0]):
            kind = "gap"
        elif node.op == "Mul" and not act and not res and plane_scale_input(graph, node) is not None:
            kind = "scale"
        elif (node.op == "BatchNormalization" and isinstance(node.params, BatchNorm)
              and node.params.mul is not None and not node.params.training
              and len(node.outputs) == 1 and _f32(graph, node.inputs[0], node.outputs[0])
              and len(graph.shapes[node.inputs[0]]) >= 2):
            kind = "affine"
        x = node.inputs[0] if node.inputs else ""
        out = node.outputs[0] if node.outputs else ""
        in_place = bool(
            node.op in IN_PLACE and x and out and x in producers and x not in aliased
            and producers[x].op not in ALIASING and live[x][1] == i
            and sum(1 for r in readers[x] if r is node) == 1 and node.inputs.count(x) == 1
            and x in graph.shapes and graph.shapes.get(x) == graph.shapes.get(out)
            and graph.dtypes.get(x) == graph.dtypes.get(out))
        free = tuple(t for t in dying.get(i, ()) if t not in graph.consts)
        steps.append(CpuStep(node, kind, algorithm, tile, reason, act, res,
                             tuple(n.name for n in (add, *acts) if n is not None), output,
                             in_place, free))
    blocked = blocked_tensors(graph, steps)
    asked = set()   # each step asked once: the rule may give "direct" again (one channel)
    while True:     # a first layer's direct convolution only where its output is blocked
        back = [k for k, st in enumerate(steps) if st.algorithm == "direct" and k not in asked
                and direct_lanes(graph, st.node) == 1 and st.output not in blocked]
        if not back:
            return CpuSchedule(graph, steps, live, blocked)
        asked.update(back)
        for k in back:
            algorithm, tile, reason = cpu_conv(graph, steps[k].node, first_direct=False)
            steps[k] = replace(steps[k], algorithm=algorithm, tile=tile, reason=reason)
        blocked = blocked_tensors(graph, steps)
