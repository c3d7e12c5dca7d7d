"""Layer groups: consecutive nodes whose activations stay in NPU local memory.

A :class:`Group` takes the :class:`~tensorlayout.schedule.npu_ops.OpPlan` of a run of nodes
and lays them out for one image at a time (the batch is cut into images) and, when that does
not fit, for slices of rows (each slice with the halo rows its windows read, the padding only
at the image's edges).  Activations produced and read inside the group never leave local
memory; a tensor is loaded from system memory before its first reader in the group and
stored right after it is produced when something outside the group reads it.  Concat parts
are written straight into their channels of the output where their producers can write
there; channel slices and reshapes are the same bytes seen again.  Constants (weights,
biases, scales) are loaded once for the group when they fit beside the slices' activations,
else before each use.  Every buffer (activation, constant, temporary) gets an offset in each
NPU for its lifetime, first fit; :class:`NoRoom` when the group does not fit.

The instructions are :class:`Instr` values: GDMA ``load`` / ``store`` / ``copy`` (local to
local) / ``s2s``, ``bdc`` (a function of :mod:`tensorlayout.npu.bdc` with its operands) and
``host``.
"""

from __future__ import annotations

from ..npu.tensor import channels_per_npu
from .npu_emit import Emitter
from .npu_plan import MOST_PADDED, NoRoom, align_up, Buffer, span_of

__all__ = ["Group"]


class Group(Emitter):
    """The layout of ``plans`` (consecutive nodes) cut into ``hb`` row slices per image.

    ``ctx`` gives ``graph``, ``chip``, ``forms``, ``outside(t, names)`` (does anything outside
    the group read ``t``?) and ``sys`` (tensor -> :class:`SysTensor` for those already in
    system memory).  :meth:`layout` decides everything or raises :class:`NoRoom`; :meth:`emit`
    appends the instructions."""

    def __init__(self, ctx, plans, hb=1, resident=True):
        self.ctx, self.plans, self.hb, self.resident = ctx, list(plans), int(hb), bool(resident)
        self.graph, self.chip = ctx.graph, ctx.chip
        self.names = {p.node.name for p in self.plans}

    # ------------------------------------------------------------------ tensors
    def _shape(self, t):
        if t in self.graph.shapes:
            return tuple(self.graph.shapes[t])
        return tuple(self._consts[t].shape)

    def _form(self, t):
        if t in self._consts:
            return self.ctx.forms.get(self._const_of[t].node.outputs[0])
        return self.ctx.forms.get(t)

    def layout(self):
        g = self.graph
        self._consts, self._const_of = {}, {}
        for p in self.plans:
            for k, v in p.consts.items():
                self._consts[k] = v
                self._const_of[k] = p
        self.prod = {}
        for p in self.plans:
            for t in p.node.outputs:
                if t:
                    self.prod[t] = p
        tensors = set(self.prod)
        for p in self.plans:
            tensors.update(t for t in p.ins if t)
        batches = {self._shape(t)[0] for t in tensors}
        if len(batches) != 1:
            raise NoRoom(f"tensors of batches {sorted(batches)}: a group cuts one batch into images")
        self.N = batches.pop()
        self.live_out = {t for t in self.prod if t in g.outputs or self.ctx.outside(t, self.names)}
        if self.hb > 1:
            if any(p.whole for p in self.plans) or any(len(self._shape(t)) != 4 for t in tensors):
                raise NoRoom("a node of the group reads whole images or matrices: no row slices")
        self._aliases()
        self._npus()
        self._ranges()
        self._padded_rows()
        self._events()
        self._allocate()
        return self

    def _aliases(self):
        """root[t] = (buffer tensor, first channel): views, channel slices, concat parts."""
        self.root = {}
        self.concat_mode = {}
        for p in self.plans:
            if p.local == "view":
                self.root[p.node.outputs[0]] = self._root(p.ins[0])
            elif p.local == "slice":
                base, c0 = self._root(p.ins[0])
                for t, off in zip(p.node.outputs, p.offsets):
                    if t:
                        self.root[t] = (base, c0 + off)
        # concats, the last first: a later concat's output can hold an earlier one's parts
        self.family = {}
        for p in reversed([p for p in self.plans if p.local == "concat"]):
            self.concat_mode[p.node.name] = self._concat_mode(p)
        # what is stored right after it is produced: what is read outside the group, and the
        # parts of a concat assembled in system memory (into their channels of its output)
        self.stored = self.live_out | {t for p in self.plans if p.local == "concat"
                                       and self.concat_mode[p.node.name] == "sys" for t in p.ins}

    def _root(self, t):
        return self.root.get(t, (t, 0))

    def _concat_mode(self, p):
        """"place": the parts are written in their channels of the output (a family of
        buffers, a later concat's output holding an earlier one's parts); "sys": the output is
        only read outside the group, so the parts go straight to its channels in system
        memory; "copy": GDMA copies of the parts into the output."""
        out = p.node.outputs[0]
        parts = list(zip(p.ins, p.offsets))
        if self.hb == 1 and out not in self.root:
            homes = [self.family.get(t) for t, _ in parts]
            if all(h is not None for h in homes):
                root, start = homes[0][0], homes[0][1] - parts[0][1]
                if start % self.chip.npus == 0 and all(
                        h == (root, start + off) for h, (_, off) in zip(homes, parts)):
                    self.root[out] = (root, start)
                    return "place"
            elif all(h is None for h in homes) and self._placeable(parts):
                for t, off in parts:
                    self.family[t] = (out, off)
                    self.root[t] = (out, off)
                return "place"
        if out not in self.root and not any(out in q.ins for q in self.plans):
            return "sys"
        return "copy"

    def _placeable(self, parts):
        seen = set()
        for t, off in parts:
            if t in seen or t in self.root or t in self._consts or len(self._shape(t)) != 4:
                return False
            seen.add(t)
            p = self.prod.get(t)
            if p is None:
                continue                      # loaded from system memory into its channels
            if p.local or p.kind != "bdc":
                return False
            if p.out_npu != "any" and off % self.chip.npus:
                return False
            if p.out_npu != "any" and self._default_npu(p.ins[0]) != 0:
                return False
        return True

    def _default_npu(self, t):
        base, c0 = self._root(t)
        p = self.prod.get(base)
        q = 0
        if p is not None and not p.local and p.out_npu == "same":
            q = self._default_npu(p.ins[0])
        return (q + c0) % self.chip.npus

    def _npus(self):
        """The start NPU of each buffer (the root of each alias)."""
        self.qroot = {}
        for p in self.plans:
            if p.local:
                continue
            for t in p.node.outputs:
                if not t:
                    continue
                base, c0 = self._root(t)
                if base != t:
                    continue                  # a concat part: the family root's buffer
                q = 0
                if p.out_npu == "same" and p.ins:
                    q = self.npu_of(p.ins[0])
                self.qroot[t] = q

    def npu_of(self, t):
        base, c0 = self._root(t)
        return (self.qroot.get(base, 0) + c0) % self.chip.npus

    # -------------------------------------------------------------------- rows
    def _ranges(self):
        """rng[i][t] = (lo, hi): rows of ``t`` slice ``i`` holds (all rows without slicing)."""
        self.rng = []
        self.own = []
        if self.hb == 1:
            full = {}
            for t in self._all_tensors():
                s = self._shape(t)
                full[t] = (0, s[2] if len(s) == 4 else 1)
            self.rng.append(full)
            self.own.append(full)
            return
        for i in range(self.hb):
            need, own = {}, {}

            def add(t, r):
                if r is None:
                    return
                old = need.get(t)
                need[t] = r if old is None else (min(old[0], r[0]), max(old[1], r[1]))

            for t in self.live_out:
                h = self._shape(t)[2]
                own[t] = (h * i // self.hb, h * (i + 1) // self.hb)
                if own[t][0] >= own[t][1]:
                    raise NoRoom(f"{self.hb} row slices leave {t!r} ({h} rows) a slice without rows")
                add(t, own[t])
            for p in reversed(self.plans):
                outs = [t for t in p.node.outputs if t]
                if p.local == "concat":
                    r = need.get(outs[0])
                    for t in p.ins:
                        add(t, r)
                    continue
                if p.local in ("view", "slice"):
                    for t in outs:
                        add(p.ins[0], need.get(t))
                    continue
                r = need.get(outs[0])
                if r is None:
                    continue
                for t, rule in zip(p.ins, p.rows):
                    if rule is None:
                        add(t, r)
                    elif rule == "all":
                        add(t, (0, self._shape(t)[2]))
                    else:
                        a, b, _, _ = rule.need(*r)
                        if b <= a:
                            raise NoRoom(f"slice {i} of {p.node.name} reads no rows")
                        add(t, (a, b))
            self.rng.append(need)
            self.own.append(own)

    def _padded_rows(self):
        """A convolution reads at most 2047 padded rows (its instruction's field)."""
        for p in self.plans:
            if p.node.op != "Conv" or not p.rows or not hasattr(p.rows[0], "need"):
                continue
            for i in range(self.hb):
                r = self.rng[i].get(p.node.outputs[0])
                if r is None:
                    continue
                a, b, top, bottom = p.rows[0].need(*r)
                if b - a + top + bottom > MOST_PADDED:
                    raise NoRoom(f"{p.node.name} reads {b - a + top + bottom} padded rows: the "
                                 f"convolution takes at most {MOST_PADDED}")

    def _all_tensors(self):
        out = set(self.prod)
        for p in self.plans:
            out.update(t for t in p.ins if t)
        return out

    # ------------------------------------------------------------------ events
    def _source(self, t):
        """The tensor to load so that ``t`` is in local memory (None: produced in the group)."""
        if t not in self.prod:
            return t                              # itself (into its channels, for a concat part)
        base = self._root(t)[0]
        return None if base in self.prod else base

    def _events(self):
        """The sequence of one slice (loads, copies in, constant loads, runs, stores) and each
        buffer's lifetime in it."""
        ev, bufs, loaded = [], {}, set()
        X = self.chip.npus

        def use(key, kind, q, span, at):
            b = bufs.get(key)
            if b is None:
                bufs[key] = Buffer(key, kind, q, span, at, at)
            else:
                b.first, b.last = min(b.first, at), max(b.last, at)
                b.span = max(b.span, span)

        def use_act(t, at):
            base = self._root(t)[0]
            use("act:" + base, "act", self.qroot.get(base, 0), self._act_span(base), at)

        def ensure(t):
            src = self._source(t)
            if src is not None and src not in loaded:
                loaded.add(src)
                ev.append(("load", src))
                use_act(src, len(ev) - 1)

        self.copyin, self.sys_copies = {}, []
        params = {}
        for p in self.plans:
            outs = [t for t in p.node.outputs if t]
            if p.local == "concat":
                mode = self.concat_mode[p.node.name]
                out = outs[0]
                if mode == "sys":
                    self.sys_copies += [(t, out, off) for t, off in zip(p.ins, p.offsets)
                                        if t not in self.prod]
                    continue
                for t, off in zip(p.ins, p.offsets):
                    ensure(t)
                    if mode == "copy":
                        ev.append(("concat_copy", p, t, off))
                        use_act(t, len(ev) - 1)
                        use_act(out, len(ev) - 1)
                if out in self.stored:
                    ev.append(("store", out))
                    use_act(out, len(ev) - 1)
                continue
            if p.local:
                for t in outs:
                    if t in self.stored:
                        ensure(p.ins[0])
                        ev.append(("store", t))
                        use_act(t, len(ev) - 1)
                continue
            q_out = self.npu_of(outs[0])
            for j, t in enumerate(p.ins):
                ensure(t)
                if self._needs_copy(p, j, q_out):
                    key = f"copy:{p.node.name}:{j}"
                    self.copyin[(p.node.name, j)] = key
                    ev.append(("copy_in", p, j))
                    use_act(t, len(ev) - 1)
                    use(key, "temp", q_out, self._temp_span(p, j, q_out), len(ev) - 1)
            for prm in p.params:
                q = (q_out + prm.npu_offset) % X
                params.setdefault(prm.key, (prm, q))
                if not self.resident:
                    ev.append(("param", prm.key))
                    use("param:" + prm.key, "param", q, self._param_span(prm, q), len(ev) - 1)
            ev.append(("run", p))
            at = len(ev) - 1
            for j, t in enumerate(p.ins):
                key = self.copyin.get((p.node.name, j))
                if key:
                    use(key, "temp", q_out, 0, at)
                else:
                    use_act(t, at)
            if not self.resident:
                for prm in p.params:
                    use("param:" + prm.key, "param", params[prm.key][1], 0, at)
            for k in range(len(p.temps)):
                use(f"temp:{p.node.name}:{k}", "temp", q_out, self._out_span(outs[0], q_out), at)
            for t in outs:
                use_act(t, at)
                if t in self.stored:
                    ev.append(("store", t))
                    use_act(t, len(ev) - 1)
        self.events = ev
        self.param_list = params
        if self.resident:
            for key, (prm, q) in params.items():
                bufs["param:" + key] = Buffer("param:" + key, "param", q, self._param_span(prm, q),
                                            0, max(len(ev) - 1, 0))
        self.bufs = bufs

    def _act_span(self, base):
        shape = self._shape(base)
        q = self.qroot.get(base, 0)
        if len(shape) == 2:
            return span_of(self.chip, "matrix", (1, shape[1]), cpc=self._form(base)[1])
        return max(span_of(self.chip, "aligned", (1, shape[1], r[base][1] - r[base][0], shape[3]), q)
                   for r in self.rng if base in r)

    def _param_span(self, prm, q):
        if prm.layout == "matrix":
            return span_of(self.chip, "matrix", prm.shape, cpc=prm.cpc)
        return span_of(self.chip, prm.layout, prm.shape, q)

    def _out_span(self, t, q):
        shape = self._shape(t)
        if len(shape) == 2:
            return span_of(self.chip, "matrix", (1, shape[1]), cpc=self._form(t)[1])
        rows = max(r[t][1] - r[t][0] for r in self.rng if t in r)
        return span_of(self.chip, "aligned", (1, shape[1], rows, shape[3]), q)

    def _temp_span(self, p, j, q):
        t = p.ins[j]
        shape = self._shape(t)
        if len(shape) == 2:
            return span_of(self.chip, "matrix", (1, shape[1]), cpc=self._form(t)[1])
        rows = max(b - a for a, b in (self._need(p, j, i) for i in range(self.hb)))
        kind = "compact" if p.reqs[j] == "compact" else "aligned"
        return span_of(self.chip, kind, (1, shape[1], rows, shape[3]), q)

    def _need(self, p, j, i):
        """Rows of input ``j`` that ``p`` reads in slice ``i``."""
        t = p.ins[j]
        shape = self._shape(t)
        if len(shape) != 4:
            return (0, 1)
        rule = p.rows[j]
        r = self.rng[i].get(p.node.outputs[0])
        if r is None or rule == "all":
            return (0, shape[2])
        if rule is None:
            return r
        a, b, _, _ = rule.need(*r)
        return (a, b)

    def _needs_copy(self, p, j, q_out):
        """Whether input ``j`` of ``p`` must be copied first: to the output's NPU, into the
        aligned layout (whole rows of an aligned block) or into the compact layout."""
        req = p.reqs[j]
        if req == "any":
            return False
        t = p.ins[j]
        if self.npu_of(t) != q_out:
            return True
        shape = self._shape(t)
        if req == "same" or len(shape) == 2:
            return req == "compact"
        if req == "compact":
            return shape[2:] != (1, 1) or channels_per_npu(self.chip, q_out, shape[1]) > 1
        base = self._root(t)[0]
        return any(self._need(p, j, i) != self.rng[i][base] for i in range(self.hb))

    # --------------------------------------------------------------- allocation
    def _allocate(self):
        S = self.chip.lmem_bytes
        order = sorted(self.bufs.values(), key=lambda b: (b.first, -b.span))
        active = []
        peak = 0
        for b in order:
            active = [a for a in active if a.last >= b.first]
            size = align_up(self.chip, max(b.span, 4))
            at = 0
            for a in sorted(active, key=lambda a: a.offset):
                if at + size <= a.offset:
                    break
                at = max(at, a.offset + align_up(self.chip, max(a.span, 4)))
            if at + size > S:
                raise NoRoom(f"{b.key} needs {size} bytes at offset {at}: past the {S} bytes of an NPU")
            b.offset = at
            peak = max(peak, at + size)
            active.append(b)
        self.peak = peak
