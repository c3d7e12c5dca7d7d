"""The NPU schedule: which node runs on a Sophgo chip, how, in which layer group, and where
its tensors sit.

:func:`schedule_npu` decides everything once (:mod:`tensorlayout.schedule.npu_program`):
each node's BDC instructions (:mod:`~tensorlayout.schedule.npu_ops`), the layer groups whose
activations stay in local memory (:mod:`~tensorlayout.schedule.npu_groups`), the moves in
system memory between them and the nodes left to the host, with the reason. The result is a
program of instructions that the NPU backend runs as it is, and per node an
:class:`NpuStep` whose ``row()`` is what ``tensorlayout plan --chip`` prints: its place, the
placements its instructions use (the first image and row slice), its group, the GDMA bytes
it moves and an estimate of its cost (:mod:`~tensorlayout.schedule.npu_cost`).

>>> from tensorlayout.graph import load_graph
>>> from tensorlayout.model import zoo
>>> from tensorlayout.npu import BM1684
>>> s = schedule_npu(load_graph(zoo.tiny_onnx()), BM1684)
>>> [(st.node.name, st.kind) for st in s.steps][:4]
[('conv1', 'bdc'), ('relu1', 'bdc'), ('pool1', 'bdc'), ('conv2', 'bdc')]
>>> len(s.groups), s.steps[1].group                  # the whole network: one layer group
(1, 0)
>>> [(t["name"], t["role"], t["shape"]) for t in s.steps[1].row()["tensors"]]
[('c', 'output', [1, 16, 16, 16]), ('b', 'input', [1, 16, 16, 16])]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..npu import BM1684, Chip

__all__ = ["NpuStep", "NpuSchedule", "schedule_npu", "npu_layers", "as4", "placement", "NPU_OPS",
           "reported"]

#: The ops with a BDC or GDMA form on the NPU (where their parameters fit it; the rest of a
#: network, and these where they do not fit, run on the host and say why).
NPU_OPS = tuple(sorted((
    "Abs", "Add", "AveragePool", "BatchNormalization", "Clip", "Concat", "Conv", "Div",
    "Dropout", "Elu", "Exp", "Flatten", "Gemm", "GlobalAveragePool", "GlobalMaxPool",
    "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "MatMul", "Max", "MaxPool", "Min",
    "Mul", "Neg", "PRelu", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceSum", "Relu",
    "Reshape", "Sigmoid", "Slice", "Split", "Squeeze", "Sub", "Tanh", "Transpose", "Unsqueeze")))


def as4(shape):
    """A tensor of rank below 4 read as NCHW with trailing 1s; (C,) as (1, C, 1, 1)."""
    shape = tuple(shape)
    if len(shape) == 0:
        return (1, 1, 1, 1)
    if len(shape) == 1:
        return (1, shape[0], 1, 1)
    return shape + (1,) * (4 - len(shape))


#: The roles reports give the instructions' operands (their own names are the arguments of
#: :mod:`tensorlayout.npu.bdc`): an element-wise instruction's a and b and a matmul's left
#: matrix are inputs, its right matrix the weight.
_ROLES = {"a": "input", "b": "input", "left": "input", "right": "weight"}


def reported(kind, operands):
    """An instruction's ``(role, name, NpuTensor)`` operands under the roles reports use."""
    return [(_ROLES.get(role, role), name, t) for role, name, t in operands]


def placement(name, role, t) -> dict:
    """The row of one placed tensor (an :class:`~tensorlayout.npu.NpuTensor`)."""
    return {"name": name, "role": role, "address": int(t.address), "shape": list(t.shape),
            "layout": t.layout_name + (f" {t.mode}" if t.mode else ""),
            "channels_per_npu": int(t.channels_per_npu), "bytes_per_npu": int(t.span)}


@dataclass
class NpuStep:
    """One node: ``kind`` "bdc" (BDC instructions, convolutions included), "matmul" (Gemm
    in the matrix layout; its operands reported as input, weight, bias and output), "conv" (a
    convolution through the layer planner, ``conv_plan``), "move" (GDMA placements and
    copies), "view" (no work) or "host"; ``why`` the reason; ``group`` its layer group;
    ``tensors`` the placements its instructions use, as (role, name, NpuTensor) (a move's
    output: the channels of local memory it is placed in);
    ``gdma`` the bytes its GDMA instructions move ({"load", "store", "local", "system"});
    ``cost`` the estimate (:func:`~tensorlayout.schedule.npu_cost.estimate`)."""

    node: object
    kind: str
    why: str
    chip: Chip
    group: int = -1
    tensors: list = field(default_factory=list)
    gdma: dict = field(default_factory=dict)
    cost: dict = field(default_factory=dict)
    working_set: int = 0
    conv_plan: object = None

    @property
    def place(self) -> str:
        return "host" if self.kind == "host" else "npu"

    @property
    def gdma_bytes(self) -> int:
        return int(sum(self.gdma.values()))

    def row(self) -> dict:
        out = {"layer": self.node.name, "op": self.node.op, "place": self.place, "kind": self.kind,
               "why": self.why, "group": self.group,
               "tensors": [placement(n, r, t) for r, n, t in self.tensors],
               "working_set": self.working_set, "lmem_bytes": self.chip.lmem_bytes,
               "fits": self.working_set <= self.chip.lmem_bytes, "gdma_bytes": self.gdma_bytes,
               "gdma": dict(self.gdma), "cost": dict(self.cost)}
        if self.conv_plan is not None:
            p = self.conv_plan
            out.update(split=list(p.split), slices=p.slices_count,
                       minimum_gdma_bytes=int(p.minimum_gdma_bytes))
        return out


@dataclass
class NpuSchedule:
    """``steps`` (one :class:`NpuStep` per node), ``program`` (the instructions),
    ``groups`` (:class:`~tensorlayout.schedule.npu_program.GroupInfo`), ``system_bytes`` and
    ``uploads`` (what the host writes into system memory first)."""

    graph: object
    chip: Chip
    steps: list
    program: object = None

    @property
    def instrs(self):
        return self.program.instrs

    @property
    def groups(self):
        return self.program.groups

    def rows(self) -> list:
        """The steps as :meth:`NpuStep.row` gives them, views excepted."""
        return [s.row() for s in self.steps if s.kind != "view"]

    def gdma_bytes(self) -> dict:
        """GDMA bytes of the whole program: ``load`` and ``store`` (system <-> local, constants
        included), ``local`` (local -> local), ``system`` (system -> system), ``total``."""
        from .npu_cost import gdma_totals

        return gdma_totals(self.program.instrs)

    def group_rows(self) -> list:
        """Per group: its nodes, images and row slices, peak local bytes, GDMA bytes and the
        estimate."""
        from .npu_cost import group_rows

        return group_rows(self)


_KINDS = {"bdc": "bdc", "move": "move", "view": "view", "sysmove": "move", "sysview": "view",
          "matmul": "matmul", "conv": "conv", "host": "host"}


def schedule_npu(graph, chip=BM1684, groups=True) -> NpuSchedule:
    """Decide each node of ``graph`` on ``chip``; ``groups=False``: every node a group of its
    own (each activation to system memory and back: the layer-by-layer schedule)."""
    from .npu_cost import estimate
    from .npu_program import build_program

    prog = build_program(graph, chip, groups=groups)
    steps = []
    by_node = {}
    for ins in prog.instrs:
        by_node.setdefault(ins.node, []).append(ins)
    for node in graph.nodes:
        plan = prog.plans[node.name]
        gi = prog.group_of.get(node.name, -1)
        info = prog.groups[gi] if gi >= 0 else None
        kind = _KINDS[plan.kind]
        if info is not None and info.kind == "sysview" and plan.kind in ("move", "view"):
            kind = "view"
        if kind == "bdc" and node.op in ("Gemm", "MatMul"):
            kind = "matmul"
        why = plan.why
        if kind == "view" and plan.kind in ("move", "sysmove", "view"):
            why = (plan.why if plan.kind == "view" else plan.why)
        step = NpuStep(node, kind, why, chip, gi)
        instrs = by_node.get(node.name, [])
        seen = set()
        first_slice = min((i.slice for i in instrs if i.kind == "bdc"), default=0)
        for ins in instrs:
            if ins.kind != "bdc" or ins.slice != first_slice:
                continue
            for role, name, t in reported(kind, ins.operands):
                if (role, name) not in seen:
                    seen.add((role, name))
                    step.tensors.append((role, name, t))
        if kind == "move" and node.name in prog.placed:
            step.tensors = [("output", t, v) for t, v in prog.placed[node.name]]
        for ins in instrs:
            if ins.kind in ("load", "store", "copy", "s2s", "conv_plan"):
                k = {"load": "load", "store": "store", "copy": "local", "s2s": "system",
                     "conv_plan": "load"}[ins.kind]
                step.gdma[k] = step.gdma.get(k, 0) + ins.nbytes
            if ins.kind == "conv_plan":
                step.conv_plan = ins.args["plan"]
                step.tensors = _conv_placements(step.conv_plan, node)
        step.cost = estimate(chip, instrs)
        step.working_set = info.peak_bytes if info is not None and info.kind == "group" else (
            int(step.conv_plan.bytes_per_npu) if step.conv_plan is not None else 0)
        if step.working_set == 0 and step.tensors:
            step.working_set = max(int(t.end_offset) for _, _, t in step.tensors)
        steps.append(step)
    return NpuSchedule(graph, chip, steps, prog)


def _conv_placements(plan, node):
    """The layer planner's buffers as placements (their largest slice)."""
    from ..npu import compact_stride, tensor_layout

    out = []
    for name, b in plan.buffers.items():
        if name == "weight":
            _, ks, kh, kw = b.shape
            shape = (plan.input_shape[1], ks, kh, kw)
            t = tensor_layout(plan.chip, b.offset, shape, mode="2IC",
                              stride=compact_stride(plan.chip, shape, 0, mode="2IC"))
        else:
            t = tensor_layout(plan.chip, b.offset, b.shape,
                              layout="compact" if name == "bias" else "aligned")
        tensor = {"input": node.inputs[0], "weight": node.inputs[1], "output": node.outputs[0],
                  "bias": node.inputs[2] if len(node.inputs) > 2 else ""}[name]
        out.append((name, tensor, t))
    return out


def npu_layers(graph, chip) -> list:
    """The rows of :func:`schedule_npu`: one per node that is not a view."""
    return schedule_npu(graph, chip).rows()
