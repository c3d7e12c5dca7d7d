"""The NPU backend: a network's NPU schedule on Sophgo's BM1684 simulator.

:class:`NpuProgram` runs :func:`~tensorlayout.schedule.npu.schedule_npu`'s steps in order:
a convolution as its layer plan (GDMA loads, ``okk_bdc_conv2d`` per slice, GDMA stores), a
per-image step as GDMA loads into the step's placements, its one BDC instruction and a GDMA
store, a matmul in the matrix layout, views as reshapes, and host steps with the graph's
NumPy kernels.  The report of a run lists each node's place, reason and the placements its
instructions used, read from the placed tensors themselves.  The simulator is one global
state: one program runs one call at a time, and programs take turns.
"""

from __future__ import annotations

import threading

import numpy as np

from ..errors import LayoutError, ModelError
from ..graph import Graph, load_graph
from ..npu import BM1684, CHIPS, Chip, get_chip
from ..schedule.npu import placement, schedule_npu

__all__ = ["NpuProgram", "run_onnx"]

_LOCK = threading.Lock()        # the simulator is one process-wide state


class NpuProgram:
    """A graph prepared for the NPU path on ``chip`` (only BM1684 has a simulator to run on).

    >>> import numpy as np
    >>> from tensorlayout.model import load, zoo
    >>> m = load(zoo.tiny_onnx())
    >>> x = np.random.default_rng(0).standard_normal((1, 3, 16, 16), dtype=np.float32)
    >>> y, report = NpuProgram(m).run({"x": x})
    >>> [(r["op"], r["where"]) for r in report][:4]
    [('Conv', 'npu'), ('Relu', 'npu'), ('MaxPool', 'npu'), ('Conv', 'npu')]
    >>> [(r["op"], r["where"]) for r in report][-2:]
    [('Flatten', 'view'), ('Gemm', 'npu')]
    >>> ref = m.run(x)
    >>> bool(np.abs(y[0] - ref).max() / np.abs(ref).max() < 1e-5)
    True
    """

    def __init__(self, model, chip=BM1684):
        graph = getattr(model, "graph", model)
        if not isinstance(graph, Graph):
            graph = load_graph(model)
        if not isinstance(chip, Chip):
            chip = get_chip(str(chip).upper()) if str(chip).upper() in CHIPS else get_chip(chip)
        if chip != BM1684:
            raise ModelError(f"chip = {chip.name} is not allowed for a run: Sophgo's simulator here "
                             "is a BM1684 (plan other chips with tensorlayout plan --chip)")
        self.graph = graph
        self.schedule = schedule_npu(graph, chip)
        self._kernels = {s.node.name: graph.kernel(s.node) for s in self.schedule.steps
                         if s.kind in ("host", "view")}
        self._memory = None             # the LocalMemory of the step running

    def run(self, feeds: dict, tap=None):
        """``(outputs, report)`` for checked ``feeds``: the outputs in the graph's order, and
        per node ``name``, ``op``, ``where`` ("npu", "host" or "view"), ``why``, ``shape`` and
        ``tensors`` (the placements its instructions used).  ``tap(step, outputs, memory)``,
        if given, is called after each step with its outputs (as read back to the host) and,
        for a step on the chip, the :class:`~tensorlayout.npu.memory.LocalMemory` it ran in,
        its local memory as the step's last instruction left it (None on the host)."""
        from ..npu import cmodel

        cmodel.simulator()              # a missing simulator is one error, before any work
        graph = self.graph
        values = dict(graph.consts)
        values.update(feeds)
        report = []
        with _LOCK, np.errstate(all="ignore"):
            for step in self.schedule.steps:
                node = step.node
                ins = [values[n] if n else None for n in node.inputs]
                used = []
                self._memory = None
                if step.kind in ("host", "view"):
                    try:
                        outs = self._kernels[node.name](ins, None)
                    except LayoutError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - named with the node
                        raise ModelError(f"node {node.name!r} ({node.op}) failed on the host: "
                                         f"{str(exc).splitlines()[0]}") from None
                elif step.kind == "conv":
                    outs = [self._conv(step, ins)]
                    used = [placement(n, r, t) for r, n, t in step.tensors]
                elif step.kind == "matmul":
                    outs, used = self._matmul(step, ins)
                else:
                    outs, used = self._image(step, ins)
                for name, value in zip(node.outputs, outs):
                    if name:
                        value = np.asarray(value)
                        values[name] = value.reshape(graph.shapes.get(name, value.shape))
                if tap is not None:
                    tap(step, [values.get(n) for n in node.outputs], self._memory)
                report.append({"name": node.name, "op": node.op,
                               "where": "view" if step.kind == "view" else step.place,
                               "why": step.why, "shape": tuple(values[node.outputs[0]].shape),
                               "tensors": used})
            self._memory = None
        return [values[n] for n in graph.outputs], report

    def _conv(self, step, ins):
        from ..npu.memory import LocalMemory
        from ..npu.planner import run_conv_plan

        node = step.node
        w = np.asarray(self.graph.consts[node.inputs[1]], np.float32)
        b = self.graph.consts[node.inputs[2]] if node.params.has_bias else None
        # the plan's system memory: its input, 2IC weights, bias and output, each once
        plan = step.conv_plan
        self._memory = LocalMemory(step.chip, system_bytes=plan.minimum_gdma_bytes, backend="cmodel")
        return run_conv_plan(plan, np.ascontiguousarray(ins[0], np.float32), w, b, mem=self._memory)

    def _image(self, step, ins):
        """GDMA each image into the step's input placements, one BDC instruction, GDMA out."""
        from ..npu import bdc
        from ..npu.memory import LocalMemory
        from ..npu.network import run_bdc

        node, chip = step.node, step.chip
        placed = {r: [(n, t) for r_, n, t in step.tensors if r_ == r]
                  for r in ("input", "output", "weight", "bias")}
        xin = [t for _, t in placed["input"]]
        out = placed["output"][0][1]
        xs = [np.ascontiguousarray(a, np.float32) for a in ins[:len(xin)]]
        n = xs[0].shape[0] if xs[0].ndim == 4 else 1
        xs = [x.reshape((n,) + xin[0].shape[1:]) for x in xs]
        img = int(np.prod(xin[0].shape)) * 4
        mem = self._memory = LocalMemory(chip, system_bytes=len(xs) * img
                                         + int(np.prod(out.shape)) * 4, backend="cmodel")
        used = [(r, name, t) for r in ("input", "output") for name, t in placed[r]]
        weight = bias = None
        if placed["weight"]:
            if node.op == "BatchNormalization":
                wv, bv = node.params.mul.reshape(-1, 1, 1, 1), node.params.add
            else:
                wv = np.asarray(self.graph.consts[node.inputs[1]], np.float32)
                bv = self.graph.consts[node.inputs[2]] if node.params.has_bias else None
            name, t = placed["weight"][0]
            weight = bdc.store_depthwise_weight(mem, t.address, wv)
            used.append(("weight", name, weight))
            if bv is not None:
                name, t = placed["bias"][0]
                bias = bdc.store_bias(mem, t.address, bv)
                used.append(("bias", name, bias))
        result = np.empty((n,) + out.shape[1:], np.float32)
        for i in range(n):
            for j, (t, x) in enumerate(zip(xin, xs)):
                mem.write_system(j * img, x[i:i + 1])
                mem.gdma_s2l(t.address, j * img, t.shape, "fp32")
            run_bdc(mem, step.op, step.args, xin, out, weight, bias)
            mem.gdma_l2s(len(xs) * img, out.address, out.shape, "fp32")
            result[i] = mem.read_system(len(xs) * img, out.shape, "fp32")[0]
        return [result], [placement(name, r, t) for r, name, t in used]

    def _matmul(self, step, ins):
        """``A @ B + C`` on the simulator: matrices in by GDMA, one ``okk_bdc_matmul``, out by GDMA."""
        from ..npu import bdc
        from ..npu.memory import LocalMemory

        node, chip = step.node, step.chip
        placed = {r: t for r, _, t in step.tensors}
        a = np.ascontiguousarray(ins[0], np.float32)
        p = node.params
        w = np.asarray(self.graph.consts[node.inputs[1]], np.float32)
        w = np.ascontiguousarray(w.T if p.trans_b else w)
        c = self.graph.consts[node.inputs[2]] if "bias" in placed else None
        m, k = a.shape
        n = w.shape[1]
        sys_a, sys_w = 0, 4 * m * k
        sys_b = sys_w + 4 * k * n
        sys_y = sys_b + 4 * n
        mem = self._memory = LocalMemory(chip, system_bytes=sys_y + 4 * m * n, backend="cmodel")
        for role, addr, arr in (("input", sys_a, a), ("weight", sys_w, w),
                                ("bias", sys_b, None if c is None else np.asarray(c, np.float32).reshape(1, n))):
            if arr is None:
                continue
            t = placed[role]
            mem.write_system(addr, np.ascontiguousarray(arr, np.float32).reshape((1, 1) + arr.shape))
            mem.gdma_matrix_s2l(t.address, addr, arr.shape[0], arr.shape[1], t.cols_per_channel, "fp32")
        out = placed["output"]
        bdc.matmul(mem, out, placed["input"], placed["weight"], placed.get("bias"))
        mem.gdma_matrix_l2s(sys_y, out.address, m, n, out.cols_per_channel, "fp32")
        y = mem.read_system(sys_y, (1, 1, m, n), "fp32")[0, 0]
        return [y], [placement(name, r, t) for r, name, t in step.tensors]


def run_onnx(model, x):
    """Run a one-input model on the NPU path; ``(output, report)`` as :meth:`NpuProgram.run`
    gives them (the output alone when the model has one)."""
    graph = getattr(model, "graph", model)
    if not isinstance(graph, Graph):
        graph = load_graph(model)
    if len(graph.inputs) != 1:
        raise ModelError(f"the model takes {len(graph.inputs)} inputs: run_onnx runs one-input models")
    outs, report = NpuProgram(graph).run(graph.feeds((x,), {}))
    return (outs[0] if len(outs) == 1 else outs), report
