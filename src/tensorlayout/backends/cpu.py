"""The CPU backend: a schedule's steps as prepared NumPy kernels, run in order.

Each node's kernel is built once from its parameters (:mod:`.cpu_steps`; convolutions through
:func:`tensorlayout.winograd.plan_conv2d` with the algorithm and tile the schedule chose,
weights transformed once), tensors in the layout the schedule gives them (NCHW, or the
blocked NCHW16c of :func:`tensorlayout.schedule.cpu.blocked_tensors`).  A run goes through :class:`~.cpu_bound.BoundRun` once the
compiled kernels are ready: the compiled steps bound to one arena laid out from liveness,
each run of consecutive compiled steps handed to the native workers by one compiled loop.
The per-step loop (:meth:`CpuProgram._steps`: a profile, a tap, the NumPy twins while the
kernels compile, a second caller while the binding is busy) calls the kernels one by one,
writes the steps the schedule marks in place over their dying input, and drops every tensor
after its last reader, keeping its tensors to itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from .. import _backend
from ..errors import LayoutError, ModelError, check_positive_int
from ..graph.ops import conv_kernel
from ..schedule.winograd import direct_lanes
from . import cpu_kernels as kernels
from .cpu_bound import BoundRun
from .cpu_steps import (affine_step, depthwise_step, fc_step, im2col_step, planes_step,
                        pointwise_step, pool_step, with_epilogue, work)
from .cpu_twins import blocked_shape, from_blocked

__all__ = ["CpuProgram", "Step", "threads_limit", "available_cpus", "run_step", "MAX_THREADS"]

#: The most threads a run may ask for.
MAX_THREADS = 4096
#: Multiply-adds a thread must have in a step before the step takes it.  A worker still
#: spinning from the step before takes a call in well under a microsecond, so a small step
#: pays for its threads: on the 16-core Xeon 100,000 left MobileNetV2 96^2 1.15-1.25x and
#: EfficientNet-B0 1.08-1.13x slower at 8 and 16 threads than 25,000, which was 1-8% slower
#: than 6,000 there (1,500 no faster); on the 2-core machine all three within 2%, but for
#: MobileNetV3-Small 96^2 1.07x and MobileNetV2 96^2 1.03x faster at 25,000 than 100,000
#: (``python benchmarks/bench_setting.py tensorlayout.backends.cpu.WORK_PER_THREAD 100000
#: 25000 --threads T --nets ...``, ``benchmarks/results/setting_work_per_thread_xeon.txt``
#: and ``setting_work_per_thread_ci2.txt``).
WORK_PER_THREAD = 6_000


@dataclass
class Step:
    """A step ready to run: its kernel, the tensors it reads and writes, static shapes and
    what the plan shows about it (``node``: the first node; ``fused``: the others it runs)."""

    node: object
    run: object = field(repr=False)
    in_shapes: list
    out_shapes: list
    info: dict
    conv_plan: object = field(default=None, repr=False)
    in_place: bool = False
    free: tuple = ()
    inputs: tuple = ()
    outputs: tuple = ()
    fused: tuple = ()
    max_threads: int = MAX_THREADS
    #: ``calls(inputs, output, threads)`` -> the native calls that compute the step into
    #: ``output`` (see :mod:`.cpu_bound`); None for a step that runs in Python.
    calls: object = field(default=None, repr=False)


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
        graph = self.graph = schedule.graph
        self.steps = []
        self._bound_runs, self._bind_lock = {}, threading.Lock()
        #: the tensors held in the blocked layout (N, ceil(C/16), H, W, 16)
        self.blocked = blocked = getattr(schedule, "blocked", frozenset())
        for s in schedule.steps:
            node = s.node
            ctx = graph.ctx(node)
            info, plan = {}, None
            act = kernels.act_code(s.act)
            residual = s.residual or None
            bias, own_epilogue = None, False
            xb = bool(node.inputs) and node.inputs[0] in blocked
            yb = s.output in blocked
            if s.kind == "conv":
                own = {"shifted": (kernels.Shifted, "shifted GEMM"),
                       "direct": (kernels.Direct, "direct convolution")}.get(s.algorithm)
                run, plan = conv_kernel(node, ctx, "im2col" if own else s.algorithm, s.tile)
                info.update(algorithm=own[1] if own else plan.info.name,
                            tile=plan.info.tile, reason=s.reason)
                if plan.info.name == "im2col" and node.params.group == 1:
                    engine = (with_epilogue(run, None, act, residual)
                              if residual or act[0] else run)
                    run = im2col_step(node, ctx, engine, act, residual,
                                      own[0] if own else kernels.Im2col, xb, yb,
                                      direct_lanes(graph, node) if s.algorithm == "direct"
                                      else 16)
                    own_epilogue = True
            elif s.kind == "depthwise":
                # the activation in the loops' own pass, unless a residual comes first
                run = depthwise_step(node, ctx,
                                     act if residual is None else kernels.act_code(None), xb, yb)
                info.update(algorithm="depthwise loops")
                if residual is None:
                    act = kernels.act_code(None)
            elif s.kind == "fc":
                run = fc_step(node, ctx, act)
                info.update(algorithm="fc GEMM")
                own_epilogue = True
            elif s.kind == "pointwise":
                if node.params.has_bias:
                    bias = np.ascontiguousarray(ctx.consts[2], np.float32).reshape(-1)
                run = pointwise_step(node, ctx, bias, act, residual, xb, yb)
                info.update(algorithm="pointwise GEMM")
                own_epilogue = True
            elif s.kind == "pool":
                run = pool_step(node, ctx, graph.kernel(node), yb, xb)
                info.update(algorithm="pool loops")
            elif s.kind in ("gap", "scale"):
                run = planes_step(node, graph, s.kind, graph.kernel(node), blocked)
                info.update(algorithm="plane loops")
            elif s.kind == "affine":
                run = affine_step(node, ctx, act, graph.kernel(node))
                info.update(algorithm="affine rows")
                own_epilogue = True
            else:
                run = graph.kernel(node)
                if node.op == "Concat" and None not in node.inputs:      # copies, compiled
                    run.calls = functools.partial(kernels.concat_calls, node.params.axis)
                elif node.op == "Transpose" and node.params.perm is not None:
                    run.calls = functools.partial(kernels.transpose_calls, node.params.perm)
            if node.op == "Conv" and s.kind != "kernel":
                p = node.params
                info.update(groups=p.group, stride=list(p.strides), pads=list(p.begin + p.end))
            if s.fused:
                info["fused"] = list(s.fused)
                if (bias is not None or residual or act[0]) and not own_epilogue:
                    run = with_epilogue(run, bias, act, residual)
            elif bias is not None and not own_epilogue:
                run = with_epilogue(run, bias, act, None)
            if node.name in graph.folded:
                info["folded"] = graph.folded[node.name]
            inputs = tuple(node.inputs) + ((residual,) if residual else ())
            outputs = s.writes
            in_shapes = list(ctx.in_shapes) + ([graph.shapes[residual]] if residual else [])
            out_shapes = [self.stored_shape(o) if o else None for o in outputs]
            self.steps.append(Step(node, run, in_shapes, out_shapes, info, plan, s.in_place,
                                   s.free, inputs, outputs, s.fused,
                                   max(1, work(s.kind, node, ctx) // WORK_PER_THREAD),
                                   getattr(run, "calls", None)))

    def stored_shape(self, name):
        """The shape tensor ``name`` is held in: the graph's, or its blocked layout's."""
        shape = self.graph.shapes.get(name)
        return blocked_shape(shape) if name in self.blocked else shape

    def run(self, feeds: dict, threads=None, profile=False, tap=None):
        """The outputs (a list, in the graph's order) for checked ``feeds``; with ``profile``,
        also ``[(layer, op, seconds, algorithm)]`` (else None): where every step is compiled,
        each step's native calls timed on their own inside the bound run (its arena and
        threads; a view step 0), else each step run and timed on its own outside it.
        ``tap(step, outputs)``, if given, sees each step (its node, the nodes fused into it,
        the tensors it writes: ``step.outputs``) with its outputs as soon as they are
        computed, before a later step writes over them or drops them (it must copy what it
        keeps)."""
        graph = self.graph
        values = dict(graph.consts)
        values.update(feeds)
        prof = [] if profile else None
        numba = _backend.numba()
        if tap is None and numba is not None:
            # a run bound whole (no Python step) touches neither numba's threads nor BLAS:
            # it takes its threads without setting either; a profile times its steps in it
            base = min(_wanted(threads), numba.config.NUMBA_NUM_THREADS)
            bound = self._bound(base)
            if bound is not None and bound.native_only:
                times = {} if profile else None
                kernels.set_threads(base)
                try:
                    if bound.try_run(values, None, times):
                        return [values[n] for n in graph.outputs], None if times is None else [
                            (st.node.name, st.node.op, times.get(i, 0.0),
                             st.info.get("algorithm")) for i, st in enumerate(self.steps)]
                finally:
                    kernels.set_threads(0)
        with threads_limit(threads), np.errstate(over="ignore", invalid="ignore",
                                                 divide="ignore", under="ignore"):
            base = numba.get_num_threads() if numba is not None else 1
            kernels.set_threads(base)
            try:
                step = self._runner(base, numba)
                bound = None if profile or tap is not None else self._bound(base)
                if bound is None or not bound.try_run(values, step):
                    self._steps(values, step, profile, prof, tap)
            finally:
                kernels.set_threads(0)
        return [values[n] for n in graph.outputs], prof

    def _bound(self, base):
        """The :class:`~.cpu_bound.BoundRun` for ``base`` threads (built on first use), or
        None while the compiled kernels are not ready or where no step is compiled."""
        if not kernels.ready():
            return None
        got = self._bound_runs.get(base, False)
        if got is False:
            with self._bind_lock:
                got = self._bound_runs.get(base, False)
                if got is False:
                    got = BoundRun(self, base)
                    got = got if got.bound_steps else None
                    self._bound_runs[base] = got
        return got

    def _runner(self, base, numba):
        """``run(i, inputs, out=None)``: step i on its threads (a small step takes fewer than
        ``base``; numba's setting, which the engine's plans read, changed only when it must),
        its outputs checked."""
        engine = [base]

        def run(i, ins, out=None):
            st = self.steps[i]
            want = min(base, st.max_threads)
            kernels.set_threads(want)
            if st.conv_plan is not None and want != engine[0]:
                numba.set_num_threads(want)
                engine[0] = want
            outs = run_step(st.node, st, ins, out)
            return [self._checked(st, name, value, shape)
                    for name, value, shape in zip(st.outputs, outs, st.out_shapes)]
        return run

    def _checked(self, st, name, value, shape):
        """``value`` (an array) as step ``st`` computed ``name``, its shape and dtype checked
        against the graph's."""
        node = st.node
        if not name:
            return value
        if not isinstance(value, np.ndarray):    # NumPy gives scalars for 0-d
            value = np.asarray(value)
        if shape is not None and tuple(value.shape) != shape:
            raise ModelError(f"node {node.name!r} ({node.op}) computed shape "
                             f"{tuple(value.shape)} where the model's shapes say "
                             f"{shape} (inferred, or declared in the model)")
        dtype = self.graph.dtypes.get(name)
        if dtype is not None and value.dtype != dtype:
            raise ModelError(f"node {node.name!r} ({node.op}) computed {name!r} as "
                             f"{value.dtype} where the model's types say {dtype}")
        return value

    def _steps(self, values, step, profile, prof, tap):
        """Every step in order through ``step`` (:meth:`_runner`), in place where the schedule
        says, each tensor dropped after its last reader."""
        for i, st in enumerate(self.steps):
            ins = [values[n] if n else None for n in st.inputs]
            t0 = time.perf_counter() if profile else 0.0
            outs = step(i, ins, ins[0] if st.in_place else None)
            if profile:
                prof.append((st.node.name, st.node.op, time.perf_counter() - t0,
                             st.info.get("algorithm")))
            for name, value in zip(st.outputs, outs):
                if name:
                    values[name] = value
            if tap is not None:
                tap(st, [from_blocked(v, self.graph.shapes[n][1]) if n in self.blocked else v
                         for n, v in zip(st.outputs, outs)])
            for n in st.free:
                values.pop(n, None)


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


def available_cpus() -> int:
    """The CPUs this process may use: its affinity mask (``taskset``), capped by a cgroup's
    CPU quota where one is set (a container's ``--cpus``), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpus()
    return max(1, n if quota is None else min(n, quota))


@functools.lru_cache(maxsize=1)
def _cgroup_cpus():
    """The cgroup's CPU quota in whole CPUs (rounded up), None without one; read once (a
    container's quota is set when it starts)."""
    for path, parse in (("/sys/fs/cgroup/cpu.max", lambda t: t.split()[:2]),
                        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", None)):
        try:
            with open(path) as f:
                text = f.read()
            if parse is not None:
                quota, period = parse(text)
            else:
                quota = text.strip()
                with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
                    period = f.read().strip()
            if quota not in ("max", "-1"):
                return max(1, -(-int(quota) // int(period)))
            return None
        except (OSError, ValueError):
            continue
    return None


def _wanted(n) -> int:
    """The threads a run asks for: ``n`` checked, or :func:`available_cpus` for None."""
    n = available_cpus() if n is None else check_positive_int("threads", n)
    if n > MAX_THREADS:
        raise LayoutError(f"threads = {n} is not allowed: it must be at most {MAX_THREADS}")
    return n


@contextlib.contextmanager
def threads_limit(n):
    """Run with ``n`` threads on the native workers (the backend's kernels and the Winograd
    engine take numba's thread setting, which this sets).  None: as many as
    :func:`available_cpus` (not the machine's core count: a process pinned to 2 cores of 16
    runs 2 threads).  BLAS is held to one thread meanwhile: its threads keep spinning long
    after a call (OpenBLAS for about a tenth of a second) and would take the cores the
    workers need; what still calls BLAS (products of two computed tensors, the engine's
    paths while kernels compile) runs on the calling thread."""
    n = _wanted(n)
    restore = []
    numba = _backend.numba()
    if numba is not None:
        old = numba.get_num_threads()
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        restore.append(lambda: numba.set_num_threads(old))
    controller = _blas_controller()
    if controller is not None:
        limiter = controller.limit(limits=1, user_api="blas")
        restore.append(limiter.restore_original_limits)
    try:
        yield
    finally:
        for fn in reversed(restore):
            fn()
