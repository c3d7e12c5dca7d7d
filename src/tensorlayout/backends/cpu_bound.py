"""A CPU program's run bound once to fixed memory: the compiled steps' contexts written at
bind time, their tensors in one arena laid out from the schedule's liveness.

:class:`BoundRun` takes a :class:`~tensorlayout.backends.cpu.CpuProgram` and a thread
count.  Every step whose kernel is compiled (``Step.calls`` is set: the pointwise, im2col,
depthwise, pooling, fully connected and plane steps) gets its native calls built once,
with the addresses of its input and output in the arena; consecutive such steps form a
segment that one compiled loop hands to the native workers (``run_table``), with no Python
between them.  The other steps (the Winograd engine's plans, NumPy kernels) run as the
program's own loop runs them, reading the arena's tensors as arrays; a tensor they give a
compiled step is copied into its place in the arena.

Arena slots: a tensor gets a slot from the step that writes it (the start, for a graph
input) to its last reader (the end, for a graph output), first fit, 64-byte aligned; a
slot is reused only after its last reader has run.  Some tensors are parts of another's
slot, and the steps between them vanish: a reshape's or a leading slice's output is a view
of its input, and the inputs of a Concat that are whole blocks of its output are written in
place there by their producers; such a root's slot lives from the first write of any part
to the last read of any.  A graph output the compiled steps
write is copied out of the arena, so a run's results outlive the next run.

A bound run serves one caller at a time (:meth:`BoundRun.try_run` says no while another
thread is inside it, and the program then takes its per-step path).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..winograd._pool import SPIN_TICKS
from . import cpu_native as native

__all__ = ["BoundRun", "ALIGN"]

#: Bytes each arena slot is aligned to (a cache line; a whole vector of 16 floats).
ALIGN = 64


def _static_f32(graph, name) -> bool:
    shape = graph.shapes.get(name)
    return (shape is not None and all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape)
            and graph.dtypes.get(name) == np.float32)


#: Ops whose kernel may give a view of its first input (tried on a probe at bind time).
_VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Split")


def _views(graph, st, consts):
    """``{output: float offset}`` when every output of step ``st`` is a C-contiguous view of
    its first input at a fixed offset (the other inputs constants, the shapes static
    float32): its kernel run once on a probe array shows it; else None."""
    node = st.node
    if node.op not in _VIEW_OPS or not st.inputs or not st.inputs[0]:
        return None
    x = st.inputs[0]
    outs = [n for n in st.outputs if n]
    if (x in consts or any(n and n not in consts for n in st.inputs[1:])
            or not outs or len(outs) != len(st.outputs)
            or not all(_static_f32(graph, n) for n in [x] + outs)):
        return None
    probe = np.zeros(graph.shapes[x], np.float32)
    try:
        got = st.run([probe] + [consts.get(n) if n else None for n in st.inputs[1:]], None)
    except Exception:  # noqa: BLE001 - a kernel that refuses the probe runs in Python
        return None
    res, lo = {}, probe.ctypes.data
    for n, v in zip(st.outputs, got):
        if (not isinstance(v, np.ndarray) or v.dtype != np.float32 or not v.flags.c_contiguous
                or tuple(v.shape) != tuple(graph.shapes[n]) or v.base is None
                or not np.shares_memory(v, probe)):
            return None
        off = v.ctypes.data - lo
        if off % 4 or off < 0 or off + v.nbytes > probe.nbytes:
            return None
        res[n] = off // 4
    return res


def _parts(graph, st, consts, alias, made_by, i):
    """``{input: float offset}`` when Concat step ``st`` (step ``i``)'s inputs can be written
    straight into its output: each a whole block of it (nothing before the axis but ones),
    made by an earlier step (``made_by``), float32 of static shape, no constant, none twice,
    none already part of another tensor; else None."""
    y = st.outputs[0]
    ins = list(st.inputs)
    if (len(st.outputs) != 1 or not ins or len(set(ins)) != len(ins)
            or not all(n and n not in consts and made_by.get(n, i) < i and n not in alias
                       and _static_f32(graph, n) for n in ins)
            or not _static_f32(graph, y)):
        return None
    shape = graph.shapes[y]
    axis = st.node.params.axis % len(shape)
    if any(d != 1 for d in shape[:axis]):
        return None
    res, off = {}, 0
    for n in ins:           # (a blocked Concat's parts are whole blocks: the same offsets)
        res[n] = off
        off += int(np.prod(graph.shapes[n], dtype=np.int64))
    return res if off == int(np.prod(shape, dtype=np.int64)) else None


class _Arena:
    """First-fit offsets of slots in one buffer (sizes rounded up to :data:`ALIGN`)."""

    def __init__(self):
        self.free = []              # (offset, size), sorted by offset
        self.end = 0

    def take(self, nbytes: int) -> int:
        size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        for i, (off, n) in enumerate(self.free):
            if n >= size:
                self.free[i:i + 1] = [(off + size, n - size)] if n > size else []
                return off
        off, self.end = self.end, self.end + size
        return off

    def give(self, off: int, nbytes: int) -> None:
        size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        self.free.append((off, size))
        self.free.sort()
        merged = []
        for o, n in self.free:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((o, n))
        self.free = merged


class BoundRun:
    """``program``'s run on ``threads`` threads with its compiled steps bound to one arena.
    ``segments``: ``("native", r0, r1)`` (rows r0..r1 of ``table``, the calls of
    consecutive compiled steps, in one compiled loop) or ``("python", i)`` (step i);
    ``arena_bytes``: the arena's size; ``roots``: the tensors that are parts of another's
    slot (a reshape's, a leading slice's output, a Concat's input), each to its root;
    ``view_steps``: the steps that thereby run nothing; ``native_only``: no step runs in
    Python."""

    def __init__(self, program, threads: int):
        graph, steps = program.graph, program.steps
        self.program = program
        consts = graph.consts
        bound = []
        for st in steps:
            outs = [n for n in st.outputs if n]
            ins = [n for n in st.inputs if n and n not in consts]
            bound.append(st.calls is not None and len(outs) == 1 and len(st.outputs) == 1
                         and all(_static_f32(graph, n) for n in outs + ins))
        # steps whose outputs are views of their input (a reshape, a slice of whole leading
        # blocks), and Concats whose inputs can be written in place into their output (each
        # a whole block of it): their tensors are places in one root's slot, and the steps
        # vanish.  alias: tensor -> (the tensor it is a part of, float offset there)
        last, made_by = {}, {}
        for i, st in enumerate(steps):
            for n in st.inputs:
                if n and n not in consts:
                    last[n] = i
            for n in st.outputs:
                if n:
                    made_by[n] = i
        for n in graph.outputs:
            last[n] = len(steps)
        alias = {}
        for i, st in enumerate(steps):
            got = None
            if not bound[i]:
                got = _views(graph, st, consts)
                parent = st.inputs[0] if got else None
            elif st.node.op == "Concat":
                got = _parts(graph, st, consts, alias, made_by, i)
                parent = st.outputs[0]
            if got:
                for n, off in got.items():
                    alias[n] = (parent, off)
                bound[i] = None                     # bound, with no calls

        def resolve(n):
            off = 0
            while n in alias:
                n, o = alias[n]
                off += o
            return n, off
        alias = {n: resolve(n) for n in alias}
        # tensors in the arena: what the compiled steps write and read (a view's root)
        slot_names = set()
        for i, st in enumerate(steps):
            if bound[i] is not False:
                touched = [n for n in st.inputs if n and n not in consts]
                touched += [n for n in st.outputs if n]
                slot_names.update(alias.get(n, (n, 0))[0] for n in touched)
        # a root's slot lives from the first write of any of its parts to their last read
        first = {n: made_by.get(n, -1) for n in slot_names}
        end = {n: last.get(n, made_by.get(n, -1)) for n in slot_names}
        for n, (root, _) in alias.items():
            if root in first:
                first[root] = min(first[root], made_by.get(n, -1))
                end[root] = max(end[root], last.get(n, made_by.get(n, -1)))
        starts, ends = {}, {}
        for n in slot_names:
            starts.setdefault(first[n], []).append(n)
            ends.setdefault(end[n], []).append(n)
        arena, offsets = _Arena(), {}
        shape = program.stored_shape            # a blocked tensor's slot holds its blocks
        for i in range(-1, len(steps) + 1):
            for n in sorted(starts.get(i, ())):
                offsets[n] = arena.take(int(np.prod(shape(n), dtype=np.int64)) * 4)
            for n in sorted(ends.get(i, ())):
                arena.give(offsets[n], int(np.prod(shape(n), dtype=np.int64)) * 4)
        self.arena_bytes = arena.end
        self.arena = np.empty(max(1, arena.end // 4 + ALIGN // 4), np.float32)
        shift = (-self.arena.ctypes.data % ALIGN) // 4
        base = self.arena[shift:]
        self.views = {n: base[o // 4: o // 4 + int(np.prod(shape(n), dtype=np.int64))]
                      .reshape(shape(n)) for n, o in offsets.items()}
        #: each view's root tensor (its slot's owner)
        self.roots = {n: root for n, (root, _) in alias.items()}
        for n, (root, off) in alias.items():
            r = self.views[root].reshape(-1)
            self.views[n] = r[off:off + int(np.prod(shape(n), dtype=np.int64))].reshape(shape(n))
        self.feeds = [n for n in self.views if n not in made_by]
        # the compiled steps' calls, and the segments they form
        rows, keep, self.segments, want = [], [], [], []
        #: each compiled step's rows of ``table``: (step, first row, past its last)
        self.step_rows = []
        for i, st in enumerate(steps):
            if bound[i] is None:
                continue
            if not bound[i]:
                self.segments.append(("python", i))
                continue
            ins = [None if not n else (consts[n] if n in consts else self.views[n])
                   for n in st.inputs]
            calls = st.calls(ins, self.views[st.outputs[0]],
                             max(1, min(threads, st.max_threads)))
            keep.append(calls)
            first = len(rows)
            for fn, ctx, nt, _ in calls:
                rows.append((fn, ctx.ctypes.data, nt))
                want.append(nt)
            self.step_rows.append((i, first, len(rows)))
            if self.segments and self.segments[-1][0] == "native":
                self.segments[-1] = ("native", self.segments[-1][1], len(rows))
            else:
                self.segments.append(("native", first, len(rows)))
        self.table = np.array(rows or [(0, 0, 0)], np.int64).reshape(-1, 3)
        self._keep = keep
        self.bound_steps = sum(b is not False for b in bound)
        self.view_steps = sum(b is None for b in bound)
        #: every step compiled or a view: a run calls no Python step
        self.native_only = all(seg[0] == "native" for seg in self.segments)
        native.pool().reserve(max(want, default=1))
        # tensors a Python step writes that a compiled step reads: copied into the arena
        self.copy_in = {n for n in self.views if n in made_by and bound[made_by[n]] is False}
        self.copy_out = [n for n in graph.outputs if n in self.views
                         and n in made_by and bound[made_by[n]] is not False]
        self._lock = threading.Lock()

    def try_run(self, values, run_python, times=None) -> bool:
        """Run into ``values`` (constants and feeds in, every graph output out); False, having
        done nothing, while another thread is inside this bound run.  ``run_python(i, ins)``
        runs step i in Python and returns its outputs, checked.  ``times``, a dict, if given:
        each step's seconds into it by step, a compiled step's calls handed to the workers
        by themselves (a profile; a view step has none)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._run(values, run_python, times)
        finally:
            self._lock.release()
        return True

    def _run(self, values, run_python, times):
        steps, views = self.program.steps, self.views
        for n in self.feeds:
            np.copyto(views[n], values[n])
        pool, mod = native.pool(), native.module()
        run, base, pending = pool.run_address, pool.base, pool.pending
        for seg in self.segments:
            if seg[0] == "native" and times is None:
                with pool.lock:
                    mod.run_table(self.table, seg[1], seg[2], run, base, pending, SPIN_TICKS)
                continue
            if seg[0] == "native":          # a profile: each step's rows in a call of its own
                for i, r0, r1 in self.step_rows:
                    if seg[1] <= r0 < seg[2]:
                        t0 = time.perf_counter()
                        with pool.lock:
                            mod.run_table(self.table, r0, r1, run, base, pending, SPIN_TICKS)
                        times[i] = time.perf_counter() - t0
                continue
            i = seg[1]
            t0 = time.perf_counter()
            st = steps[i]
            ins = [None if not n else (views[n] if n in views else values[n]) for n in st.inputs]
            outs = run_python(i, ins)
            if times is not None:
                times[i] = time.perf_counter() - t0
            for n, v in zip(st.outputs, outs):
                if not n:
                    continue
                if isinstance(v, np.ndarray) and np.may_share_memory(v, self.arena):
                    v = v.copy()                    # a view of a slot that will be reused
                if n in self.copy_in:
                    np.copyto(views[n], v)
                values[n] = v
            for n in st.free:
                if n not in views:
                    values.pop(n, None)
        for n in self.copy_out:
            values[n] = views[n].copy()
