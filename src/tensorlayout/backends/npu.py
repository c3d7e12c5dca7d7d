"""The NPU backend: a network's NPU program on Sophgo's BM1684 simulator.

:class:`NpuProgram` runs the instructions :func:`~tensorlayout.schedule.npu.schedule_npu`
wrote, in order, on one simulated memory: the host first writes the inputs and the packed
constants into system memory (as an OKKernel host program does), then each GDMA copy and BDC
instruction runs on the simulator at exactly the schedule's placements (every operand checked
by :mod:`tensorlayout.npu.bdc` and :class:`~tensorlayout.npu.LocalMemory` before the call),
and a host step reads its inputs out of system memory, runs the graph's NumPy kernel and
writes its outputs back. The report of a run lists each node's place, reason, layer group,
the placements its instructions used (read from the tensors handed to the simulator) and the
GDMA bytes it moved. The simulator is one global state: one program runs at a time.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..errors import LayoutError, ModelError
from ..graph import Graph, load_graph
from ..npu import BM1684, CHIPS, Chip, get_chip
from ..schedule.npu import placement, reported, schedule_npu

__all__ = ["NpuProgram", "run_onnx"]

_LOCK = threading.Lock()        # the simulator is one process-wide state
#: The LocalMemory copy that runs each kind of GDMA instruction on tensors.
_COPIES = {"load": "gdma_s2l", "store": "gdma_l2s", "copy": "gdma_l2l", "s2s": "gdma_s2s"}


class NpuProgram:
    """A graph prepared for the NPU path on ``chip`` (only BM1684 has a simulator to run on);
    ``groups=False`` runs the layer-by-layer schedule (every activation to system memory).

    >>> import numpy as np
    >>> from tensorlayout.model import load, zoo
    >>> m = load(zoo.tiny_onnx())
    >>> x = np.random.default_rng(0).standard_normal((1, 3, 16, 16), dtype=np.float32)
    >>> prog = NpuProgram(m)
    >>> y, report = prog.run({"x": x})
    >>> [(r["op"], r["where"], r["group"]) for r in report][:3]
    [('Conv', 'npu', 0), ('Relu', 'npu', 0), ('MaxPool', 'npu', 0)]
    >>> [(r["op"], r["where"]) for r in report][-2:]
    [('Flatten', 'view'), ('Gemm', 'npu')]
    >>> prog.gdma_moved == prog.schedule.gdma_bytes()["total"]
    True
    >>> ref = m.run(x)
    >>> bool(np.abs(y[0] - ref).max() / np.abs(ref).max() < 1e-5)
    True
    """

    def __init__(self, model, chip=BM1684, groups=True):
        graph = getattr(model, "graph", model)
        if not isinstance(graph, Graph):
            graph = load_graph(model)
        if not isinstance(chip, Chip):
            chip = get_chip(str(chip).upper()) if str(chip).upper() in CHIPS else get_chip(chip)
        if chip != BM1684:
            raise ModelError(f"chip = {chip.name} is not allowed for a run: Sophgo's simulator here "
                             "is a BM1684 (plan other chips with tensorlayout plan --chip)")
        self.graph = graph
        self.schedule = schedule_npu(graph, chip, groups=groups)
        self._kernels = {s.node.name: graph.kernel(s.node) for s in self.schedule.steps
                         if s.kind == "host"}
        self._kinds = {s.node.name: s.kind for s in self.schedule.steps}
        self._steps = {s.node.name: s for s in self.schedule.steps}
        self.planner_memory = None      # the layer planner's own memory, after its last run
        self.gdma_moved = 0

    def run(self, feeds: dict, tap=None):
        """``(outputs, report)`` for checked ``feeds``: the outputs in the graph's order, and
        per node ``name``, ``op``, ``where`` ("npu", "host" or "view"), ``why``, ``group``,
        ``shape``, ``tensors`` (the placements its instructions used: the first image and
        row slice) and ``gdma_bytes`` (what its GDMA instructions moved).

        ``tap(step, outputs, memory)``, if given, is called for each node in the graph's
        order right after its last instruction, with its outputs as they are stored (read
        from system memory where the program put them there, else from local memory after
        each slice that computed them) and, for a node on the chip, the
        :class:`~tensorlayout.npu.memory.LocalMemory` as that instruction left it (None on the
        host and for views)."""
        from ..npu import cmodel
        from ..npu.memory import LocalMemory

        sim = cmodel.simulator()        # a missing simulator is one error, before any work
        prog = self.schedule.program
        if prog.system_bytes > sim.SYSTEM_BYTES:
            raise ModelError(f"the network needs {prog.system_bytes} bytes of system memory: the "
                             f"simulator has {sim.SYSTEM_BYTES}")
        graph = self.graph
        used, moved = {}, {}
        host = dict(graph.consts)
        taps = _Taps(self, tap) if tap is not None else None
        with _LOCK:
            mem = LocalMemory(self.schedule.chip, system_bytes=prog.system_bytes, backend="cmodel")
            with mem.exclusive(), np.errstate(all="ignore"):
                for name, value in feeds.items():
                    if name in prog.sys:
                        _write(mem, prog.sys[name], np.asarray(value, np.float32))
                    else:
                        host[name] = value
                for at, key, make in prog.uploads:
                    arr = np.ascontiguousarray(make(), np.float32)
                    mem.write_system(at, arr.reshape(1, 1, 1, -1))
                if taps is not None:
                    taps.start(mem, feeds, host)
                for k, ins in enumerate(prog.instrs):
                    self._one(mem, ins, host, used, moved)
                    if taps is not None:
                        taps.after(k, ins, mem)
                outs = [_read(mem, prog.sys[t]) if t in prog.sys else host[t] for t in graph.outputs]
        self.gdma_moved = sum(moved.values())
        report = []
        for step in self.schedule.steps:
            node = step.node
            t0 = node.outputs[0] if node.outputs else ""
            shape = tuple(graph.shapes[t0]) if t0 in graph.shapes else tuple(np.shape(host.get(t0)))
            report.append({"name": node.name, "op": node.op,
                           "where": "view" if step.kind == "view" else step.place,
                           "why": step.why, "group": step.group, "shape": shape,
                           "tensors": used.get(node.name, [0, []])[1],
                           "gdma_bytes": moved.get(node.name, 0)})
        return outs, report

    def _one(self, mem, ins, host, used, moved):
        from ..npu import bdc

        a = ins.args
        k = ins.kind
        if k == "bdc":
            if ins.node not in used or used[ins.node][0] == ins.slice:
                seen = used.setdefault(ins.node, [ins.slice, []])
                for role, name, t in reported(self._kinds[ins.node], ins.operands):
                    row = placement(name, role, t)
                    if row not in seen[1]:
                        seen[1].append(row)
            getattr(bdc, ins.op)(mem, **{role: t for role, _, t in ins.operands}, **a)
            return
        if k == "host":
            self._host(mem, ins, host)
            return
        if k == "conv_plan":
            self._conv_plan(mem, ins)
            step = self._steps[ins.node]
            used[ins.node] = [0, [placement(name, role, t) for role, name, t in step.tensors]]
            n = ins.nbytes
        elif k in ("load", "store") and ins.op == "matrix":
            fn = mem.gdma_matrix_s2l if k == "load" else mem.gdma_matrix_l2s
            kw = {"src_row_stride" if k == "load" else "dst_row_stride": a["row_stride"]}
            fn(a["dst"], a["src"], a["rows"], a["cols"], a["cols_per_channel"], "fp32", **kw)
            n = 4 * a["rows"] * a["cols"]
        else:
            copy = getattr(mem, _COPIES[k])
            copy(a["dst"], a["src"], a["shape"], "fp32", dst_stride=a["dst_stride"],
                 src_stride=a["src_stride"])
            n = 4 * math.prod(a["shape"])
        moved[ins.node] = moved.get(ins.node, 0) + n

    def _host(self, mem, ins, host):
        node = self.graph.node(ins.node)
        ins_vals = []
        for t, st in ins.args["inputs"]:
            ins_vals.append(None if not t else _read(mem, st) if st is not None else host[t])
        try:
            outs = self._kernels[node.name](ins_vals, None)
        except LayoutError:
            raise
        except Exception as exc:  # noqa: BLE001 - named with the node
            raise ModelError(f"node {node.name!r} ({node.op}) failed on the host: "
                             f"{str(exc).splitlines()[0]}") from None
        for (t, st), value in zip(ins.args["outputs"], outs):
            if not t:
                continue
            value = np.asarray(value)
            if st is not None:
                _write(mem, st, value.astype(np.float32, copy=False).reshape(st.shape))
            else:
                host[t] = value

    def _conv_plan(self, mem, ins):
        from ..npu.memory import LocalMemory
        from ..npu.planner import run_conv_plan

        node = self.graph.node(ins.node)
        x = _read(mem, ins.args["input"])
        w = np.asarray(self.graph.consts[node.inputs[1]], np.float32)
        b = self.graph.consts[node.inputs[2]] if node.params.has_bias else None
        # the planner runs on a memory of its own (its input, 2IC weights, bias and output,
        # each once); the simulator switches ours back in after it
        plan = ins.args["plan"]
        self.planner_memory = LocalMemory(plan.chip, system_bytes=plan.minimum_gdma_bytes,
                                          backend="cmodel")
        y = run_conv_plan(plan, np.ascontiguousarray(x), w, b, mem=self.planner_memory)
        _write(mem, ins.args["output"], y)


def _four(st):
    """A system tensor as the (shape, strides) of a 4-D GDMA view."""
    if len(st.shape) == 4:
        return st.shape, st.strides
    if st.is_continuous:
        return (1, 1, 1, max(math.prod(st.shape), 1)), None
    raise LayoutError(f"a strided system tensor of rank {len(st.shape)} is not allowed here")


def _read(mem, st):
    shape, strides = _four(st)
    return mem.read_system(st.address, shape, "fp32", stride=strides).reshape(st.shape)


def _write(mem, st, value):
    shape, strides = _four(st)
    mem.write_system(st.address, np.ascontiguousarray(value, np.float32).reshape(shape), stride=strides)


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


class _Taps:
    """A run's tap: each node's outputs read back from where the program keeps them, handed
    over right after the node's last instruction (views and moves without one after the node
    before them)."""

    def __init__(self, program, tap):
        self.program, self.tap = program, tap
        sched = program.schedule
        last = {}
        for k, ins in enumerate(sched.instrs):
            last[ins.node] = k
        self.due, running = {}, -1
        for step in sched.steps:
            running = max(running, last.get(step.node.name, running))
            self.due.setdefault(running, []).append(step)
        self.parts = {}                 # tensor -> the slices' local reads, assembled

    def start(self, mem, feeds, host):
        self.host = host
        self.values = dict(feeds)
        for step in self.due.get(-1, []):
            self._hand(step, mem)

    def after(self, k, ins, mem):
        g = self.program.graph
        for name, t, n, r0 in ins.holds:
            shape = tuple(g.shapes[name])
            acc = self.parts.get(name)
            if acc is None:
                acc = self.parts[name] = np.zeros(shape, np.float32)
            got = mem.load(t)
            if len(shape) == 4:
                acc[n, :, r0:r0 + got.shape[2], :] = got[0]
            else:
                acc[n] = got.reshape(-1)[:shape[-1]]
        for step in self.due.get(k, []):
            self._hand(step, mem)

    def _hand(self, step, mem):
        prog = self.program.schedule.program
        node = step.node
        outs, moved = [], None
        for t in node.outputs:
            if not t:
                outs.append(None)
            elif t in self.parts:
                outs.append(self.parts.pop(t))
            elif t in prog.sys and prog.group_of.get(node.name, -1) >= 0 and self._stored(t):
                outs.append(_read(mem, prog.sys[t]))
            elif t in self.host:
                outs.append(self.host[t])
            else:                       # a view or a move of values already handed over
                if moved is None:
                    g = self.program.graph
                    ins = [self.values.get(i, g.consts.get(i)) if i else None for i in node.inputs]
                    moved = g.kernel(node)(ins, None)
                outs.append(np.asarray(moved[list(node.outputs).index(t)]))
            if t:
                self.values[t] = outs[-1]
        on_chip = step.kind not in ("host", "view") and not (step.kind == "move" and not step.tensors)
        if step.kind == "conv":
            mem = self.program.planner_memory
        self.tap(step, outs, mem if on_chip else None)

    def _stored(self, t):
        """Whether the program writes ``t`` into system memory (a store, a move, the host)."""
        prog = self.program.schedule.program
        if not hasattr(self, "_written"):
            self._written = set()
            for ins in prog.instrs:
                if ins.kind in ("store", "s2s", "conv_plan", "host"):
                    for _, name, _ in ins.operands:
                        self._written.add(name)
                    if ins.kind == "host":
                        self._written.update(name for name, _ in ins.args["outputs"] if name)
                    if ins.kind == "conv_plan":
                        self._written.add(self.program.graph.node(ins.node).outputs[0])
                    if ins.kind == "s2s":
                        self._written.update(o for o in self.program.graph.node(ins.node).outputs if o)
        return t in self._written
