"""A network's NPU program: its layer groups, the moves in system memory between them, the
standalone matmuls and host steps, and where every tensor sits in system memory.

:func:`build_program` lowers each node (:func:`~tensorlayout.schedule.npu_ops.lower`), cuts
the nodes into layer groups (the longest run that fits, trying row slices before giving up;
``groups=False`` makes every node a group of its own: the layer-by-layer schedule) and writes
the instructions. System memory is one flat space: the graph's inputs, then each constant as
the host packs it (2IC weights, compact vectors, matrices), then each tensor a group stores,
each at an address divisible by 128; a reshape of a continuous tensor and a channel slice are
the same bytes seen again (no copy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import LayoutError
from .npu_groups import Group
from .npu_plan import Instr, NoRoom, OpPlan, SysTensor, float_tensor
from .npu_layers import gemm_parts
from .npu_ops import local_forms, lower

__all__ = ["Program", "GroupInfo", "build_program", "strided_copies"]

_SYS_ALIGN = 128


@dataclass
class GroupInfo:
    """One layer group as the plan reports it."""

    index: int
    nodes: list
    images: int = 1
    row_slices: int = 1
    resident: bool = True
    peak_bytes: int = 0
    first: int = 0             # its instructions: program[first:last]
    last: int = 0
    #: (key, kind, start NPU, offset, bytes per NPU, first instruction, last instruction):
    #: each buffer of each slice, over the instructions during which it holds its data
    buffers: list = field(default_factory=list)
    kind: str = "group"        # group | sysmove | sysview | matmul | conv | host


@dataclass
class Program:
    graph: object
    chip: object
    instrs: list = field(default_factory=list)
    sys: dict = field(default_factory=dict)        # tensor -> SysTensor
    uploads: list = field(default_factory=list)    # (address, key, make())
    groups: list = field(default_factory=list)
    plans: dict = field(default_factory=dict)      # node name -> OpPlan
    group_of: dict = field(default_factory=dict)   # node name -> group index
    placed: dict = field(default_factory=dict)     # a local move -> [(output, its placement)]
    top: int = 0
    _params: dict = field(default_factory=dict)

    def alloc(self, nbytes) -> int:
        at = self.top
        self.top = -(-(self.top + max(int(nbytes), 4)) // _SYS_ALIGN) * _SYS_ALIGN
        return at

    def sys_of(self, t):
        st = self.sys.get(t)
        if st is None:
            shape = tuple(self.graph.shapes[t])
            st = SysTensor.continuous(self.alloc(4 * math.prod(shape)), shape)
            self.sys[t] = st
        return st

    def param_address(self, prm):
        at = self._params.get(prm.key)
        if at is None:
            at = self.alloc(prm.nbytes)
            self._params[prm.key] = at
            self.uploads.append((at, prm.key, prm.make))
        return at

    def upload_const(self, key, array):
        if key not in self.sys:
            arr = np.ascontiguousarray(array, np.float32)
            at = self.alloc(arr.nbytes)
            self.uploads.append((at, key, lambda arr=arr: arr))
            self.sys[key] = SysTensor.continuous(at, arr.shape)
        return self.sys[key]

    @property
    def system_bytes(self) -> int:
        return max(self.top, _SYS_ALIGN)


# ---------------------------------------------------------------- strided copies
def strided_copies(shape, dst_strides, src_strides):
    """A copy of ``shape`` elements between two strided tensors as GDMA copies of at most
    4 dimensions with W stride 1 on both sides: ``[(dst offset, src offset, shape4,
    dst strides4, src strides4)]`` (offsets and strides in elements).

    >>> strided_copies((2, 3, 4), (12, 4, 1), (12, 4, 1))
    [(0, 0, (1, 1, 1, 24), (24, 24, 24, 1), (24, 24, 24, 1))]
    >>> strided_copies((2, 3), (3, 1), (1, 2))          # a transpose: one element per row
    [(0, 0, (1, 2, 3, 1), (6, 3, 1, 1), (2, 1, 2, 1))]
    """
    dims = [(int(n), int(d), int(s)) for n, d, s in zip(shape, dst_strides, src_strides) if n != 1]
    merged = []
    for n, d, s in dims:
        if merged and merged[-1][1] == d * n and merged[-1][2] == s * n:
            m = merged.pop()
            merged.append((m[0] * n, d, s))
        else:
            merged.append((n, d, s))
    if not merged or merged[-1][1] != 1 or merged[-1][2] != 1:
        merged.append((1, 1, 1))
    outer, inner = merged[:-4], merged[-4:]
    while len(inner) < 4:
        n0, d0, s0 = inner[0]
        inner.insert(0, (1, n0 * d0, n0 * s0))
    shape4 = tuple(n for n, _, _ in inner)
    d4 = tuple(d for _, d, _ in inner)
    s4 = tuple(s for _, _, s in inner)
    out = []
    for idx in np.ndindex(*[n for n, _, _ in outer]) if outer else [()]:
        od = sum(i * d for i, (_, d, _) in zip(idx, outer))
        os_ = sum(i * s for i, (_, _, s) in zip(idx, outer))
        out.append((od, os_, shape4, d4, s4))
    return out


def _s2s(node, dst, src, shape, dst_strides, src_strides, gi):
    out = []
    for od, os_, sh, d4, s4 in strided_copies(shape, dst_strides, src_strides):
        args = dict(dst=dst + 4 * od, src=src + 4 * os_, shape=sh, dst_stride=d4, src_stride=s4)
        out.append(Instr("s2s", node, "tensor", (), args, gi, 0, 4 * math.prod(sh)))
    return out


# ------------------------------------------------------------------- system moves
def _system_step(prog, node, plan, gi):
    """Views, channel slices and moves between groups, in system memory."""
    g = prog.graph
    op = node.op
    outs = [t for t in node.outputs if t]
    if plan.local == "view" or (plan.kind == "view"):
        src = prog.sys_of(node.inputs[0])
        shape = tuple(g.shapes[outs[0]])
        if src.is_continuous:
            prog.sys[outs[0]] = SysTensor.continuous(src.address, shape)
            return []
        dst = prog.sys_of(outs[0])
        return _s2s(node.name, dst.address, src.address, src.shape, _cont(src.shape), src.strides, gi)
    if plan.local == "slice":
        src = prog.sys_of(node.inputs[0])
        for t, off in zip(node.outputs, plan.offsets):
            if t:
                prog.sys[t] = SysTensor(src.address + 4 * off * src.strides[1], tuple(g.shapes[t]),
                                        src.strides)
        return []
    instrs = []
    if op == "Transpose":
        src = prog.sys_of(node.inputs[0])
        dst = prog.sys_of(outs[0])
        perm = node.params.perm
        return _s2s(node.name, dst.address, src.address, dst.shape, dst.strides,
                    tuple(src.strides[p] for p in perm), gi)
    if op == "Slice":
        src = prog.sys_of(node.inputs[0])
        dst = prog.sys_of(outs[0])
        base = src.address + 4 * sum(st * s for (st, _, _), s in zip(node.params.index, src.strides))
        return _s2s(node.name, dst.address, base, dst.shape, dst.strides,
                    tuple(step * s for (_, _, step), s in zip(node.params.index, src.strides)), gi)
    if op == "Split":
        src = prog.sys_of(node.inputs[0])
        ax = node.params.axis
        at = 0
        for t, size in zip(node.outputs, node.params.sizes):
            if t:
                dst = prog.sys_of(t)
                instrs += _s2s(node.name, dst.address, src.address + 4 * at * src.strides[ax], dst.shape,
                               dst.strides, src.strides, gi)
            at += size
        return instrs
    if op == "Concat":
        dst = prog.sys_of(outs[0])
        ax = node.params.axis
        at = 0
        for t in node.inputs:
            if not t:
                continue
            src = prog.upload_const(t, g.consts[t]) if t in g.consts else prog.sys_of(t)
            instrs += _s2s(node.name, dst.address + 4 * at * dst.strides[ax], src.address, src.shape,
                           dst.strides, src.strides, gi)
            at += src.shape[ax]
        return instrs
    raise AssertionError(op)


def _cont(shape):
    return SysTensor.continuous(0, shape).strides


# ---------------------------------------------------------------- standalone matmul
def _matmul_step(prog, node, gi):
    """A Gemm whose weights do not stay in local memory (or whose A is transposed): chunks of
    N output columns, each summed over chunks of K (the instruction's accumulate), A and B
    loaded per chunk from system memory."""
    from ..npu.tensor import matrix_as_4d, matrix_layout, tensor_layout
    from .npu_plan import span_of

    chip, g = prog.chip, prog.graph
    a, bm, cfull, crow, alpha, trans_a = gemm_parts(g, node)
    k, n = bm.shape
    m = g.shapes[node.outputs[0]][0]
    X, S = chip.npus, chip.lmem_bytes
    sa = prog.sys_of(a)
    if not sa.is_continuous:
        raise NoRoom(f"{a!r} is not continuous in system memory")
    wkey = f"{node.inputs[1]}{'.T' if node.params.trans_b else ''}"
    wsys = prog.upload_const(wkey, bm)
    wname, bname = node.inputs[1], node.inputs[2] if crow is not None else ""
    csys = prog.upload_const(f"{node.name}.C", cfull) if cfull is not None else None
    rsys = prog.upload_const(f"{node.name}.bias", crow) if crow is not None else None
    out = prog.sys_of(node.outputs[0])

    def fits(kc, nc):
        lw = 1 if trans_a else -(-kc // X)
        rw = -(-nc // X)
        sizes = [span_of(chip, "matrix", (m, kc), cpc=lw), span_of(chip, "matrix", (kc, nc), cpc=rw),
                 span_of(chip, "matrix", (m, nc), cpc=rw)]
        if crow is not None:
            sizes.append(span_of(chip, "matrix", (1, nc), cpc=rw))
        if cfull is not None:
            sizes.append(span_of(chip, "matrix", (m, nc), cpc=rw))
        return sum(-(-v // chip.align_bytes) * chip.align_bytes for v in sizes) <= S

    nc = n
    while nc > 1 and not fits(min(k, 64), nc):
        nc = -(-nc // 2)
    kc = k
    while kc > 1 and not fits(kc, nc):
        kc = -(-kc // 2)
    if not fits(kc, nc) or m >= 1 << 16:
        raise NoRoom(f"a {m}x{k} by {k}x{n} matmul does not fit one NPU's memory even in chunks")
    instrs = []

    def place(at, rows, cols, cpc):
        t = matrix_layout(chip, at, rows, cols, cpc)
        return t, -(-(at + t.span) // chip.align_bytes) * chip.align_bytes

    for n0 in range(0, n, nc):
        n1 = min(n0 + nc, n)
        rw = -(-(n1 - n0) // X)
        for k0 in range(0, k, kc):
            k1 = min(k0 + kc, k)
            lw = 1 if trans_a else -(-(k1 - k0) // X)
            at = 0
            left, at = place(at, m, k1 - k0, lw)
            right, at = place(at, k1 - k0, n1 - n0, rw)
            y, at = place(at, m, n1 - n0, rw)
            bias = None
            if crow is not None and k0 == 0:
                bias, at = place(at, 1, n1 - n0, rw)
            if trans_a:      # A is (K, M): its rows k0..k1 as columns, one element per channel
                args = dict(src=sa.address + 4 * k0 * m, dst=left.address, shape=(m, k1 - k0, 1, 1),
                            dst_stride=left.stride, src_stride=(1, m, 1, 1))
                instrs.append(Instr("load", node.name, "tensor", (("local", a, left),), args, gi, 0,
                                    4 * m * (k1 - k0)))
            else:
                args = dict(src=sa.address + 4 * k0, dst=left.address, rows=m, cols=k1 - k0,
                            cols_per_channel=lw, row_stride=k)
                instrs.append(Instr("load", node.name, "matrix", (("local", a, left),), args, gi, 0,
                                    4 * m * (k1 - k0)))
            args = dict(src=wsys.address + 4 * (k0 * n + n0), dst=right.address, rows=k1 - k0,
                        cols=n1 - n0, cols_per_channel=rw, row_stride=n)
            instrs.append(Instr("load", node.name, "matrix", (("local", wname, right),), args, gi, 0,
                                4 * (k1 - k0) * (n1 - n0)))
            ops = [("output", node.outputs[0], y), ("left", a, left), ("right", wname, right)]
            if bias is not None:
                args = dict(src=rsys.address + 4 * n0, dst=bias.address, rows=1, cols=n1 - n0,
                            cols_per_channel=rw, row_stride=n)
                instrs.append(Instr("load", node.name, "matrix", (("local", bname, bias),),
                                    args, gi, 0, 4 * (n1 - n0)))
                ops.append(("bias", bname, bias))
            instrs.append(Instr("bdc", node.name, "matmul", tuple(ops), {"accumulate": k0 > 0}, gi, 0))
        y4 = matrix_as_4d(y)
        if alpha != 1.0:
            instrs.append(Instr("bdc", node.name, "mul", (("output", node.outputs[0], y4),
                                                          ("a", node.outputs[0], y4)), {"b": alpha}, gi, 0))
        if cfull is not None:
            c, _ = place(at, m, n1 - n0, rw)
            args = dict(src=csys.address + 4 * n0, dst=c.address, rows=m, cols=n1 - n0,
                        cols_per_channel=rw, row_stride=n)
            instrs.append(Instr("load", node.name, "matrix", (("local", f"{node.name}.C", c),), args, gi, 0,
                                4 * m * (n1 - n0)))
            c4 = tensor_layout(chip, c.address, y4.shape)
            instrs.append(Instr("bdc", node.name, "add", (("output", node.outputs[0], y4),
                                                          ("a", node.outputs[0], y4),
                                                          ("b", f"{node.name}.C", c4)), {}, gi, 0))
        args = dict(src=y.address, dst=out.address + 4 * n0, rows=m, cols=n1 - n0, cols_per_channel=rw,
                    row_stride=n)
        instrs.append(Instr("store", node.name, "matrix", (("local", node.outputs[0], y),), args, gi, 0,
                            4 * m * (n1 - n0)))
    return instrs


def on_npu_side(graph, t) -> bool:
    """Whether ``t`` lives in (simulated) system memory: a float32 tensor of known shape with
    elements. Other tensors (integers, shapes known only at run time, empty) stay with the host."""
    return float_tensor(graph, t)


def _host_step(prog, node, gi):
    g = prog.graph
    ins = [(t, prog.sys_of(t) if on_npu_side(g, t) else None) for t in node.inputs]
    outs = [(t, prog.sys_of(t) if on_npu_side(g, t) else None) for t in node.outputs]
    return [Instr("host", node.name, node.op, (), dict(inputs=ins, outputs=outs), gi, 0, 0)]


# ---------------------------------------------------------------------- the program
class _Ctx:
    def __init__(self, graph, chip, forms, position):
        self.graph, self.chip, self.forms = graph, chip, forms
        self.readers = graph.readers()
        self.position = position

    def outside(self, t, names):
        return any(r.name not in names for r in self.readers.get(t, []))


def _view_ok(graph, forms, src, dst):
    """A reshape that is the same bytes in local memory."""
    fs, fd = forms.get(src), forms.get(dst)
    ss, sd = tuple(graph.shapes[src]), tuple(graph.shapes[dst])
    if fs is None or fd is None:
        return False
    if ss == sd and fs == fd:
        return True
    if fs[0] == "4d" and fd[0] == "matrix":
        return sd == (ss[0], ss[1] * ss[2] * ss[3]) and fd[1] == ss[2] * ss[3]
    if fs[0] == "matrix" and fd[0] == "4d":
        return fs[1] == 1 and sd == (ss[0], ss[1], 1, 1)
    return False


def _joins(plan, cur_outputs, graph, forms):
    """Whether a local move joins the group being built (its input is produced there)."""
    if plan.local == "concat":
        return any(t in cur_outputs for t in plan.ins)
    if plan.local == "view":
        return plan.ins[0] in cur_outputs and _view_ok(graph, forms, plan.ins[0], plan.node.outputs[0])
    return plan.ins[0] in cur_outputs


def _fit(ctx, plans, cheap=True):
    """The first layout of ``plans`` that fits: whole images, then more and more row slices;
    constants loaded once for the group where there are several slices (``cheap``: only
    that; else also loaded again for each slice). None when none fits."""
    g = ctx.graph
    heights = [g.shapes[t][2] for p in plans for t in p.node.outputs
               if t and len(g.shapes.get(t, ())) == 4]
    most = max(heights, default=1)
    batch = {g.shapes[t][0] for p in plans for t in p.node.outputs if t and t in g.shapes}
    images = batch.pop() if len(batch) == 1 else 1
    for hb in [1] + [h for h in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256) if h <= most]:
        one = hb * images == 1
        for resident in ((False,) if one else (True,) if cheap else (True, False)):
            try:
                return Group(ctx, plans, hb, resident).layout()
            except NoRoom as exc:
                if "matrices" in str(exc) or "batches" in str(exc):
                    return None
    return None


def build_program(graph, chip, groups=True) -> Program:
    """Lower, group and write the instructions of ``graph`` on ``chip`` (see the module)."""
    forms = local_forms(graph, chip)
    host = dict((n.name, why) for n, why in graph.host_only())
    prog = Program(graph, chip)
    for node in graph.nodes:
        if node.name in host:
            prog.plans[node.name] = OpPlan(node, "host", f"{host[node.name]}: on the host")
        else:
            prog.plans[node.name] = lower(graph, node, chip, forms)
    for name in graph.inputs:
        if on_npu_side(graph, name):
            prog.sys_of(name)
    ctx = _Ctx(graph, chip, forms, {n.name: i for i, n in enumerate(graph.nodes)})
    nodes = list(graph.nodes)
    i = 0
    while i < len(nodes):
        plan = prog.plans[nodes[i].name]
        if plan.kind == "bdc":
            run = [plan]
            outs = {t for t in plan.node.outputs if t}
            j = i + 1
            while groups and j < len(nodes):
                q = prog.plans[nodes[j].name]
                if q.kind == "bdc" or (q.local and _joins(q, outs, graph, forms)):
                    run.append(q)
                    outs.update(t for t in q.node.outputs if t)
                    j += 1
                else:
                    break
            got, k = _longest(ctx, run, True)
            if got is None:
                got, k = _longest(ctx, run, False)
            if got is None:
                _single(prog, ctx, nodes[i], plan)
                i += 1
                continue
            _commit(prog, ctx, got)
            i += k
            continue
        _single(prog, ctx, nodes[i], plan)
        i += 1
    return prog


def _longest(ctx, run, cheap):
    """The longest prefix of ``run`` that fits as one group (doubling, then halving)."""
    best, size = None, 1
    lo = 0
    while size <= len(run):
        got = _fit(ctx, _trim(run[:size]), cheap)
        if got is None:
            break
        best, lo = got, size
        if size == len(run):
            return best, size
        size = min(size * 2, len(run))
    hi = min(size, len(run) + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = _fit(ctx, _trim(run[:mid]), cheap)
        if got is None:
            hi = mid
        else:
            best, lo = got, mid
    if best is None:
        return None, 0
    return best, lo


def _trim(plans):
    """A group does not end with local moves whose outputs nobody inside reads (they run in
    system memory after it instead)."""
    return plans


def _single(prog, ctx, node, plan):
    gi = len(prog.groups)
    first = len(prog.instrs)
    kind = plan.kind
    if kind == "bdc":              # a node that does not fit alone: its fallback
        if node.op in ("Gemm", "MatMul"):
            kind = "matmul"
        elif node.op == "Conv" and node.params.group == 1:
            kind = "conv"
        else:
            plan.kind, plan.why = "host", "host fallback: one image does not fit one NPU's local memory"
            kind = "host"
    try:
        if kind in ("view", "move", "sysmove"):
            prog.instrs += _system_step(prog, node, plan, gi)
            kind = "sysview" if not prog.instrs[first:] else "sysmove"
        elif kind == "matmul":
            prog.instrs += _matmul_step(prog, node, gi)
            plan.kind = "matmul"
        elif kind == "conv":
            prog.instrs += _planner_step(prog, node, gi)
            plan.kind = "conv"
            plan.why = "the layer planner (output-channel slices)"
        else:
            prog.instrs += _host_step(prog, node, gi)
    except (NoRoom, LayoutError) as exc:
        del prog.instrs[first:]
        plan.kind, plan.why = "host", f"host fallback: {str(exc).splitlines()[0]}"
        prog.instrs += _host_step(prog, node, gi)
        kind = "host"
    prog.groups.append(GroupInfo(gi, [node.name], first=first, last=len(prog.instrs), kind=kind))
    prog.group_of[node.name] = gi


def _planner_step(prog, node, gi):
    from ..npu.planner import plan_conv

    p = node.params
    x = node.inputs[0]
    plan = plan_conv(prog.graph.shapes[x], p.out_channels, p.kernel, p.strides,
                     (p.begin[0], p.end[0], p.begin[1], p.end[1]), p.dilations, bias=p.has_bias,
                     chip=prog.chip)
    args = dict(plan=plan, input=prog.sys_of(x), output=prog.sys_of(node.outputs[0]))
    return [Instr("conv_plan", node.name, "conv2d", (), args, gi, 0, int(plan.gdma_bytes))]


def _commit(prog, ctx, group):
    gi = len(prog.groups)
    first = len(prog.instrs)
    for p in group.plans:
        if p.local == "concat" and group.concat_mode[p.node.name] == "sys":
            out = p.node.outputs[0]
            st = prog.sys_of(out)
            for t, off in zip(p.ins, p.offsets):
                if t in group.prod and t not in prog.sys:
                    prog.sys[t] = SysTensor(st.address + 4 * off * st.strides[1], tuple(prog.graph.shapes[t]),
                                            st.strides)
    for key, arr in ((k, v) for p in group.plans for k, v in p.consts.items()):
        prog.upload_const(key, arr)
    prog.instrs += group.emit(prog, gi)
    for t, out, off in group.sys_copies:
        src = prog.sys_of(t)
        dst = prog.sys_of(out)
        prog.instrs += _s2s(out, dst.address + 4 * off * dst.strides[1], src.address, src.shape,
                            dst.strides, src.strides, gi)
    info = GroupInfo(gi, [p.node.name for p in group.plans], images=group.N, row_slices=group.hb,
                     resident=group.resident, peak_bytes=group.peak, first=first, last=len(prog.instrs))
    info.buffers = [(k, kind, q, off, span, first + a, first + b)
                    for k, kind, q, off, span, a, b in group.lifetimes]
    prog.groups.append(info)
    for p in group.plans:
        prog.group_of[p.node.name] = gi
        if p.local in ("concat", "slice") and group.concat_mode.get(p.node.name) != "sys":
            outs = [t for t in p.node.outputs if t and "act:" + group._root(t)[0] in group.bufs]
            prog.placed[p.node.name] = [(t, group.tensor_for(t, 0)) for t in outs]
