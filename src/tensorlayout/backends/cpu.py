"""The CPU backend: a schedule's steps as prepared NumPy kernels, run in order.

Each node's kernel is built once from its parameters (convolutions through
:func:`tensorlayout.winograd.plan_conv2d` with the algorithm and tile the schedule chose,
weights transformed once); a run then calls the kernels, writes the steps the schedule marks
in place over their dying input, and drops every tensor after its last reader.  A run keeps
its tensors to itself, so one prepared program serves concurrent callers.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from .. import _backend
from ..errors import LayoutError, ModelError, check_positive_int
from ..graph.ops import conv_kernel

__all__ = ["CpuProgram", "Step", "threads_limit", "run_step", "MAX_THREADS"]

#: The most threads a run may ask for.
MAX_THREADS = 4096


@dataclass
class Step:
    """A node ready to run: its kernel, static shapes and what the plan shows about it."""

    node: object
    run: object = field(repr=False)
    in_shapes: list
    out_shapes: list
    info: dict
    conv_plan: object = field(default=None, repr=False)
    in_place: bool = False
    free: tuple = ()


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0].strip() if text else type(exc).__name__


def run_step(node, step, inputs, out=None, where: str = ""):
    """``step.run(inputs, out)`` for ``node``: a LayoutError passes through, any other
    failure becomes one ModelError line naming the node (and ``where`` it ran)."""
    try:
        return step.run(inputs, out)
    except LayoutError:
        raise
    except Exception as exc:  # noqa: BLE001 - named with the node
        raise ModelError(f"node {node.name!r} ({node.op}) failed{where}: {_first_line(exc)}") from None


class CpuProgram:
    """The prepared CPU run of a :class:`~tensorlayout.schedule.CpuSchedule`."""

    def __init__(self, schedule):
        graph = schedule.graph
        self.graph = graph
        self.steps = []
        for s in schedule.steps:
            node = s.node
            ctx = graph.ctx(node)
            info, plan = {}, None
            if node.op == "Conv":
                run, plan = conv_kernel(node, ctx, s.algorithm, s.tile)
                p = node.params
                info.update(algorithm=plan.info.name, tile=plan.info.tile, reason=s.reason,
                            groups=p.group, stride=list(p.strides), pads=list(p.begin + p.end))
            else:
                run = graph.kernel(node)
            if node.name in graph.folded:
                info["folded"] = graph.folded[node.name]
            self.steps.append(Step(node, run, list(ctx.in_shapes), list(ctx.out_shapes), info,
                                   plan, s.in_place, s.free))

    def run(self, feeds: dict, threads=None, profile=False, tap=None):
        """The outputs (a list, in the graph's order) for checked ``feeds``; with ``profile``,
        also ``[(layer, op, seconds, algorithm)]`` (else None).  ``tap(node, outputs)``, if
        given, sees each node's outputs as soon as they are computed, before a later step
        writes over them or drops them (it must copy what it keeps)."""
        graph = self.graph
        values = dict(graph.consts)
        values.update(feeds)
        prof = [] if profile else None
        with threads_limit(threads), np.errstate(over="ignore", invalid="ignore",
                                                 divide="ignore", under="ignore"):
            for st in self.steps:
                node = st.node
                ins = [values[n] if n else None for n in node.inputs]
                t0 = time.perf_counter() if profile else 0.0
                outs = run_step(node, st, ins, ins[0] if st.in_place else None)
                if profile:
                    prof.append((node.name, node.op, time.perf_counter() - t0,
                                 st.info.get("algorithm")))
                for name, value, shape in zip(node.outputs, outs, st.out_shapes):
                    if not name:
                        continue
                    if tuple(value.shape) != shape:
                        raise ModelError(f"node {node.name!r} ({node.op}) computed shape "
                                         f"{tuple(value.shape)} where shape inference says {shape}")
                    values[name] = value
                if tap is not None:
                    tap(node, outs)
                for n in st.free:
                    values.pop(n, None)
        return [values[n] for n in graph.outputs], prof


# ---------------------------------------------------------------------------- threads
_CONTROLLER = []


def _blas_controller():
    """threadpoolctl's view of the loaded BLAS libraries, found once (finding them takes ms)."""
    if not _CONTROLLER:
        try:
            from threadpoolctl import ThreadpoolController

            _CONTROLLER.append(ThreadpoolController())
        except ImportError:
            _CONTROLLER.append(None)
    return _CONTROLLER[0]


@contextlib.contextmanager
def threads_limit(n):
    """Run with ``n`` threads: numba's pool (Winograd transforms) and the BLAS library."""
    if n is None:
        yield
        return
    n = check_positive_int("threads", n)
    if n > MAX_THREADS:
        raise LayoutError(f"threads = {n} is not allowed: it must be at most {MAX_THREADS}")
    restore = []
    numba = _backend.numba()
    if numba is not None:
        old = numba.get_num_threads()
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        restore.append(lambda: numba.set_num_threads(old))
    controller = _blas_controller()
    if controller is not None:
        limiter = controller.limit(limits=n, user_api="blas")
        restore.append(limiter.restore_original_limits)
    try:
        yield
    finally:
        for fn in reversed(restore):
            fn()
