"""The NPU schedule: which node runs on a Sophgo chip, how, and where its tensors sit.

For each node :func:`schedule_npu` decides once: a convolution goes to the layer planner
(:func:`tensorlayout.npu.planner.plan_conv`: its slices and local-memory buffers); a depthwise
convolution, standalone BatchNormalization (a depthwise 1 x 1 of scale and shift), Relu,
Clip, Add of two tensors, pooling and global average pooling run one image at a time (GDMA
load, one BDC instruction, GDMA store) with the inputs in the aligned layout from address 0,
the output after them and depthwise weights and biases compact after that, each start
rounded up to the chip's alignment; Gemm with constant weights runs as one BDC matmul in
the matrix layout; views cost nothing.  Every other node runs on the host and says why.
Each step lists its tensors' placements (address, shape, layout, bytes in the fullest
NPU); ``tensorlayout plan --chip`` prints them and the NPU backend runs with exactly them.

>>> from tensorlayout.graph import load_graph
>>> from tensorlayout.model import zoo
>>> from tensorlayout.npu import BM1684
>>> s = schedule_npu(load_graph(zoo.tiny_onnx()), BM1684)
>>> [(st.node.name, st.kind) for st in s.steps][:4]
[('conv1', 'conv'), ('relu1', 'image'), ('pool1', 'image'), ('conv2', 'conv')]
>>> r = s.steps[1].row()
>>> [(t["name"], t["role"], t["address"], t["shape"]) for t in r["tensors"]]
[('b', 'input', 0, [1, 16, 16, 16]), ('c', 'output', 1024, [1, 16, 16, 16])]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import LayoutError
from ..graph.ops import Conv, Pool
from ..npu import BM1684, Chip, matrix_layout, tensor_layout
from .common import VIEWS, is_fc

__all__ = ["NpuStep", "NpuSchedule", "schedule_npu", "npu_layers", "as4", "placement", "NPU_OPS"]

#: The ops a step runs one image at a time, one BDC instruction each.
IMAGE_OPS = ("Relu", "Clip", "Add", "MaxPool", "AveragePool", "GlobalAveragePool",
             "BatchNormalization")
#: The ops with a BDC form (where their parameters fit it; the rest run on the host).
NPU_OPS = tuple(sorted(IMAGE_OPS + ("Conv", "Gemm")))


def as4(shape):
    """A tensor of rank below 4 read as NCHW with trailing 1s; (C,) as (1, C, 1, 1)."""
    shape = tuple(shape)
    if len(shape) == 0:
        return (1, 1, 1, 1)
    if len(shape) == 1:
        return (1, shape[0], 1, 1)
    return shape + (1,) * (4 - len(shape))


def placement(name, role, t) -> dict:
    """The row of one placed tensor (an :class:`~tensorlayout.npu.NpuTensor`)."""
    return {"name": name, "role": role, "address": int(t.address), "shape": list(t.shape),
            "layout": t.layout_name + (f" {t.mode}" if t.mode else ""),
            "channels_per_npu": int(t.channels_per_npu), "bytes_per_npu": int(t.span)}


@dataclass
class NpuStep:
    """One node on the NPU path: ``kind`` "conv" (the planner), "image" (one BDC instruction
    per image), "matmul", "view" or "host"; ``why`` the reason; ``tensors`` the placements
    (role, name and the :class:`~tensorlayout.npu.NpuTensor`); ``op`` and ``args``: the BDC
    instruction and its parameters; ``conv_plan``: the planner's plan."""

    node: object
    kind: str
    why: str
    chip: Chip
    tensors: list = field(default_factory=list)       # (role, name, NpuTensor)
    op: str = ""
    args: dict = field(default_factory=dict)
    conv_plan: object = None

    @property
    def place(self) -> str:
        return "host" if self.kind == "host" else "npu"

    @property
    def working_set(self) -> int:
        """Bytes per NPU from address 0 to the end of the last placement."""
        if self.conv_plan is not None:
            return int(self.conv_plan.bytes_per_npu)
        return max((int(t.end_offset) for _, _, t in self.tensors), default=0)

    def row(self) -> dict:
        out = {"layer": self.node.name, "op": self.node.op, "place": self.place, "kind": self.kind,
               "why": self.why, "tensors": [placement(n, r, t) for r, n, t in self.tensors],
               "working_set": self.working_set, "lmem_bytes": self.chip.lmem_bytes,
               "fits": self.working_set <= self.chip.lmem_bytes}
        if self.conv_plan is not None:
            p = self.conv_plan
            out.update(split=list(p.split), slices=p.slices_count, gdma_bytes=int(p.gdma_bytes),
                       minimum_gdma_bytes=int(p.minimum_gdma_bytes))
        return out


@dataclass
class NpuSchedule:
    graph: object
    chip: Chip
    steps: list

    def rows(self) -> list:
        """The steps that run on the NPU (views excepted), as :meth:`NpuStep.row` gives them,
        and the host steps with their reasons."""
        return [s.row() for s in self.steps if s.kind != "view"]


_WHY = {"BatchNormalization": "BDC depthwise 1x1: scale and shift per channel",
        "Clip": "BDC max / min with constants", "MaxPool": "BDC max pool",
        "AveragePool": "BDC average pool",
        "GlobalAveragePool": "BDC average pool over the whole image"}


def _round(chip, v):
    return -(-v // chip.align_bytes) * chip.align_bytes


class _Placer:
    """Tensors placed one after another from address 0, each start aligned."""

    def __init__(self, chip):
        self.chip, self.at, self.tensors = chip, 0, []

    def put(self, role, name, shape, layout="aligned", mode=None, stride=None):
        t = tensor_layout(self.chip, self.at, shape, stride=stride, layout=layout, mode=mode)
        self.tensors.append((role, name, t))
        self.at = _round(self.chip, t.end_offset)
        return t

    def matrix(self, role, name, rows, cols, cpc):
        t = matrix_layout(self.chip, self.at, rows, cols, cpc)
        self.tensors.append((role, name, t))
        self.at = _round(self.chip, t.end_offset)
        return t


def _image_step(graph, node, chip):
    """A node run one image at a time: its placements and BDC instruction, or (None, why)."""
    p = node.params
    x = node.inputs[0]
    if x in graph.consts:
        return None, "its input is a constant"
    shape = graph.shapes[x]
    out_shape = graph.shapes[node.outputs[0]]
    op, args = node.op, {}
    if op in ("Relu", "Clip", "Add"):
        # other ranks run whole as (1, size, 1, 1)
        shape = (1, int(np.prod(shape, dtype=np.int64)), 1, 1) if len(shape) != 4 else \
            (1,) + tuple(shape[1:])
        out_shape = shape
    elif len(shape) != 4 or len(out_shape) != 4:
        return None, f"input shape {list(shape)}: the BDC path takes 4-D NCHW tensors"
    else:
        shape, out_shape = (1,) + tuple(shape[1:]), (1,) + tuple(out_shape[1:])
    if op == "Relu":
        bdc = "relu"
    elif op == "Clip":
        if p.runtime_bounds:
            return None, "its bounds are not constants"
        lo = None if p.alpha == -np.inf else p.alpha
        hi = None if p.beta == np.inf else p.beta
        if lo is None and hi is None:
            return None, "no bounds: nothing to compute"
        bdc, args = "clip", {"low": lo, "high": hi}
    elif op == "Add":
        if node.inputs[1] in graph.consts or graph.shapes[node.inputs[1]] != graph.shapes[x]:
            return None, "adds a constant or broadcasts: the BDC add takes two tensors of one shape"
        bdc = "add"
    elif op == "GlobalAveragePool":
        bdc, args = "avg_pool", {"kernel": tuple(shape[2:]), "padding": (0, 0, 0, 0), "stride": 1}
    elif op == "BatchNormalization":
        bdc, args = "depthwise", {"padding": (0, 0, 0, 0), "stride": (1, 1), "dilation": (1, 1)}
    else:
        if p.dilations != (1, 1):
            return None, "dilated pooling: the BDC pool has no dilation"
        # ceil mode: the last windows reach past the end padding; extend it (never counted)
        pad = (p.begin[0], p.end[0] + p.extra[0], p.begin[1], p.end[1] + p.extra[1])
        if not p.is_max and (any(p.extra) or (any(pad) and not p.count_include_pad)):
            return None, ("average over part of a window (padding not counted): the BDC pool "
                          "divides by the whole window")
        bdc = "max_pool" if p.is_max else "avg_pool"
        args = {"kernel": p.kernel, "padding": pad, "stride": p.strides}
    pl = _Placer(chip)
    pl.put("input", x, shape)
    if op == "Add":
        pl.put("input", node.inputs[1], shape)
    pl.put("output", node.outputs[0], out_shape)
    if op == "BatchNormalization":
        pl.put("weight", f"{node.name}.scale", (1, shape[1], 1, 1), layout="compact")
        pl.put("bias", f"{node.name}.shift", (1, shape[1], 1, 1), layout="compact")
    return (bdc, args, pl.tensors), None


def _depthwise_step(graph, node, chip):
    p = node.params
    shape = (1,) + tuple(graph.shapes[node.inputs[0]][1:])
    out_shape = (1,) + tuple(graph.shapes[node.outputs[0]][1:])
    w = graph.consts[node.inputs[1]]
    pl = _Placer(chip)
    pl.put("input", node.inputs[0], shape)
    pl.put("output", node.outputs[0], out_shape)
    pl.put("weight", node.inputs[1], (1, w.shape[0], w.shape[2], w.shape[3]), layout="compact")
    if p.has_bias:
        pl.put("bias", node.inputs[2], (1, w.shape[0], 1, 1), layout="compact")
    pad = (p.begin[0], p.end[0], p.begin[1], p.end[1])
    return "depthwise", {"padding": pad, "stride": p.strides, "dilation": p.dilations}, pl.tensors


def _conv_placements(plan, node):
    """The planner's buffers as placements (their largest slice)."""
    from ..npu import compact_stride

    out = []
    for name, b in plan.buffers.items():
        if name == "weight":
            c2, ks, kh, kw = b.shape
            shape = (plan.input_shape[1], ks, kh, kw)
            t = tensor_layout(plan.chip, b.offset, shape, mode="2IC",
                              stride=compact_stride(plan.chip, shape, 0, mode="2IC"))
        else:
            t = tensor_layout(plan.chip, b.offset, b.shape,
                              layout="compact" if name == "bias" else "aligned")
        tensor = {"input": node.inputs[0], "weight": node.inputs[1], "output": node.outputs[0],
                  "bias": node.inputs[2] if len(node.inputs) > 2 else ""}[name]
        out.append((name if name in ("input", "output", "bias") else "weight", tensor, t))
    return out


def _matmul_step(graph, node, chip):
    p = node.params
    if p.alpha != 1.0 or p.beta != 1.0 or p.trans_a:
        return None, "alpha, beta or transA: the BDC matmul computes A @ B + bias"
    if not is_fc(graph, node):
        return None, "A must be a 2-D tensor and B a constant matrix"
    has_c = len(node.inputs) > 2 and node.inputs[2] != ""
    if has_c and node.inputs[2] not in graph.consts:
        return None, "C is not a constant"
    m, k = graph.shapes[node.inputs[0]]
    n = graph.shapes[node.outputs[0]][1]
    if has_c and graph.consts[node.inputs[2]].size != n:
        return None, (f"C of shape {list(graph.consts[node.inputs[2]].shape)} broadcasts over rows: "
                      f"the BDC bias is one row of {n}")
    lw, rw = -(-k // chip.npus), -(-n // chip.npus)
    pl = _Placer(chip)
    pl.matrix("input", node.inputs[0], m, k, lw)
    pl.matrix("weight", node.inputs[1], k, n, rw)
    if has_c:
        pl.matrix("bias", node.inputs[2], 1, n, rw)
    pl.matrix("output", node.outputs[0], m, n, rw)
    return ("matmul", {}, pl.tensors), None


def schedule_npu(graph, chip=BM1684) -> NpuSchedule:
    """Decide each node of ``graph`` on ``chip`` (see the module's docstring)."""
    from ..npu.planner import plan_conv

    steps = []
    host = dict((n.name, why) for n, why in graph.host_only())
    for node in graph.nodes:
        step = NpuStep(node, "host", "no BDC instruction for this op", chip)
        try:
            if node.name in host:
                step.why = f"{host[node.name]}: on the host"
            elif node.op in VIEWS:
                step.kind, step.why = "view", "a view: the same placement"
            elif any(graph.dtypes.get(t) not in (None, np.float32) for t in node.inputs[:1] if t
                     and t not in graph.consts):
                step.why = f"dtype {graph.dtypes[node.inputs[0]]}: the BDC path is fp32"
            elif node.op == "Conv" and not isinstance(node.params, Conv):
                step.why = "not a 2-D convolution of constant weights: on the host"
            elif node.op in ("MaxPool", "AveragePool") and not isinstance(node.params, Pool):
                step.why = "not a 2-D pooling: on the host"
            elif node.op == "Conv":
                p = node.params
                x = graph.shapes[node.inputs[0]]
                if p.depthwise and p.multiplier == 1:
                    step.kind, step.why = "image", "BDC depthwise convolution"
                    step.op, step.args, step.tensors = _depthwise_step(graph, node, chip)
                elif p.group != 1:
                    step.why = (f"group = {p.group}: only ungrouped and depthwise convolutions "
                                "have BDC instructions")
                else:
                    plan = plan_conv(x, p.out_channels, p.kernel, p.strides,
                                     (p.begin[0], p.end[0], p.begin[1], p.end[1]), p.dilations,
                                     bias=p.has_bias, chip=chip)
                    step.kind, step.conv_plan = "conv", plan
                    step.why = (f"planner, {plan.slices_count} slice(s), GDMA {plan.gdma_bytes} "
                                "bytes")
                    step.tensors = _conv_placements(plan, node)
            elif node.op in IMAGE_OPS:
                got, why = _image_step(graph, node, chip)
                if got is None:
                    step.why = why
                else:
                    step.kind, (step.op, step.args, step.tensors) = "image", got
                    step.why = _WHY.get(node.op, f"BDC {step.op}")
                    if node.op == "MaxPool" and any(node.params.extra):
                        step.why += " (ceil mode as end padding)"
            elif node.op == "Gemm":
                got, why = _matmul_step(graph, node, chip)
                if got is None:
                    step.why = why
                else:
                    step.kind, (step.op, step.args, step.tensors) = "matmul", got
                    step.why = "BDC matmul in the matrix layout"
        except LayoutError as exc:          # an instruction limit, or no room: on the host
            step.kind, step.why, step.tensors, step.conv_plan = (
                "host", f"host fallback: {str(exc).splitlines()[0]}", [], None)
        if step.kind != "host" and step.working_set > chip.lmem_bytes:
            step.kind, step.why, step.tensors = (
                "host", f"host fallback: one image needs {step.working_set} bytes of one NPU's "
                f"{chip.lmem_bytes}", [])
        steps.append(step)
    return NpuSchedule(graph, chip, steps)


def npu_layers(graph, chip) -> list:
    """The rows of :func:`schedule_npu`: one per node that is not a view."""
    return schedule_npu(graph, chip).rows()
