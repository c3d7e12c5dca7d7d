"""The instructions of a laid-out layer group (:class:`~tensorlayout.schedule.npu_groups.Group`):
per image and row slice, the GDMA loads into each buffer, the copies that move an input into
the layout its instruction needs, the constants, each node's BDC instructions on the tensors
placed for that slice, and the stores.
"""

from __future__ import annotations

from ..npu.tensor import (as_aligned, as_compact, compact_stride, matrix_as_4d, matrix_layout,
                          sub_channels, sub_rows, tensor_layout)
from .npu_plan import Instr, SliceInfo

__all__ = ["Emitter"]


class Emitter:
    """Emission methods of a :class:`~tensorlayout.schedule.npu_groups.Group` (mixed in)."""

    # ------------------------------------------------------------------- emission
    def slices(self):
        return [SliceInfo(n, i) for n in range(self.N) for i in range(self.hb)]

    def _addr(self, key):
        b = self.bufs[key]
        return b.q * self.chip.lmem_bytes + b.offset

    def tensor_for(self, t, i):
        """The NpuTensor of ``t`` in slice ``i``: its buffer, or its channels or view of one."""
        chip = self.chip
        base, c0 = self._root(t)
        bshape, shape = self._shape(base), self._shape(t)
        addr = self._addr("act:" + base)
        if len(bshape) == 2:
            cpc = self._form(base)[1]
            if len(shape) == 4:
                return tensor_layout(chip, addr, (1, shape[1], 1, 1))
            return matrix_layout(chip, addr, 1, shape[1], self._form(t)[1] if self._form(t) else cpc)
        lo, hi = self.rng[i][base]
        buf = tensor_layout(chip, addr, (1, bshape[1], hi - lo, bshape[3]))
        if len(shape) == 2:
            return matrix_layout(chip, addr, 1, shape[1], self._form(t)[1])
        v = buf if (c0 == 0 and shape[1] == bshape[1]) else sub_channels(buf, c0, c0 + shape[1])
        r = self.rng[i].get(t, (lo, hi))
        return sub_rows(v, r[0] - lo, r[1] - lo)

    def _rows_of(self, v, t, i, rows):
        lo = self.rng[i].get(t, (0, 0))[0]
        if v.is_matrix or len(self._shape(t)) != 4:
            return v
        return sub_rows(v, rows[0] - lo, rows[1] - lo)

    def _param_tensor(self, prm):
        q = self.param_list[prm.key][1]
        addr = self._addr("param:" + prm.key)
        if prm.layout == "2IC":
            return tensor_layout(self.chip, addr, prm.shape, mode="2IC",
                                 stride=compact_stride(self.chip, prm.shape, q, mode="2IC"))
        if prm.layout == "matrix":
            return matrix_layout(self.chip, addr, prm.shape[0], prm.shape[1], prm.cpc)
        return tensor_layout(self.chip, addr, prm.shape, layout="compact")

    def _gdma_tensor(self, kind, node, v, st, n, rows, gi, si, name):
        """A load (system -> local) or store of the rows ``rows`` of image ``n``."""
        e = 4
        if v.is_matrix:
            rows_, cols = v.matrix_shape
            sys_addr = st.address + e * n * st.strides[0]
            args = dict(src=sys_addr, dst=v.address) if kind == "load" else dict(src=v.address, dst=sys_addr)
            args.update(rows=1, cols=cols, cols_per_channel=v.cols_per_channel, row_stride=st.strides[0])
            return Instr(kind, node, "matrix", (("local", name, v),), args, gi, si, e * cols)
        sys_addr = st.address + e * (n * st.strides[0] + rows[0] * st.strides[2])
        if kind == "load":
            args = dict(src=sys_addr, dst=v.address, src_stride=tuple(st.strides), dst_stride=v.stride)
        else:
            args = dict(src=v.address, dst=sys_addr, src_stride=v.stride, dst_stride=tuple(st.strides))
        args["shape"] = v.shape
        return Instr(kind, node, "tensor", (("local", name, v),), args, gi, si,
                     e * v.shape[1] * v.shape[2] * v.shape[3])

    def _param_load(self, prm, node, ctx, gi, si):
        t = self._param_tensor(prm)
        src = ctx.param_address(prm)
        if prm.layout == "2IC":
            c, k, kh, kw = prm.shape
            c2 = -(-c // 2)
            ws = t.stride
            args = dict(src=src, dst=t.address, shape=(c2, k, kh, 2 * kw),
                        dst_stride=(2 * ws[0], 2 * ws[1], 2 * kw, 1),
                        src_stride=(k * kh * kw * 2, kh * kw * 2, kw * 2, 1))
            return Instr("load", node, "tensor", (("local", prm.name, t),), args, gi, si, prm.nbytes)
        if prm.layout == "matrix":
            args = dict(src=src, dst=t.address, rows=prm.shape[0], cols=prm.shape[1],
                        cols_per_channel=prm.cpc, row_stride=prm.shape[1])
            return Instr("load", node, "matrix", (("local", prm.name, t),), args, gi, si, prm.nbytes)
        sh = prm.shape
        args = dict(src=src, dst=t.address, shape=sh, dst_stride=t.stride,
                    src_stride=(sh[1] * sh[2] * sh[3], sh[2] * sh[3], sh[3], 1))
        return Instr("load", node, "tensor", (("local", prm.name, t),), args, gi, si, prm.nbytes)

    def _copy(self, node, dst, src, names, gi, si):
        args = dict(dst=dst.address, src=src.address, shape=src.shape, dst_stride=dst.stride,
                    src_stride=src.stride)
        return Instr("copy", node, "tensor", (("output", names[0], dst), ("input", names[1], src)),
                     args, gi, si, 4 * int(src.shape[0] * src.shape[1] * src.shape[2] * src.shape[3]))

    def emit(self, ctx, gi):
        """The group's instructions (``ctx``: ``sys_of(t)``, ``param_address(param)``)."""
        out = []
        chip = self.chip
        if self.resident:
            for key, (prm, q) in self.param_list.items():
                out.append(self._param_load(prm, self._param_reader(key), ctx, gi, -1))
        self.lifetimes = []          # (key, kind, start NPU, offset, span, first, last instr)
        prologue = len(out)
        for si, sl in enumerate(self.slices()):
            n, i = sl.n, sl.index
            at = []                  # each event's first instruction in this slice
            for ev in self.events:
                at.append(len(out))
                kind = ev[0]
                if kind == "load":
                    t = ev[1]
                    v = self.tensor_for(t, i)
                    rows = self.rng[i].get(t, (0, 1))
                    out.append(self._gdma_tensor("load", self._first_reader(t), v, ctx.sys_of(t), n,
                                                 rows, gi, si, t))
                elif kind == "store":
                    t = ev[1]
                    v = self.tensor_for(t, i)
                    own = self.own[i].get(t, self.rng[i].get(t, (0, 1)))
                    v = self._rows_of(v, t, i, own)
                    node = self.prod[t].node.name
                    out.append(self._gdma_tensor("store", node, v, ctx.sys_of(t), n, own, gi, si, t))
                elif kind == "concat_copy":
                    p, t, off = ev[1:]
                    o = p.node.outputs[0]
                    dst_full = self.tensor_for(o, i)
                    dst = sub_channels(dst_full, off, off + self._shape(t)[1])
                    src = self._rows_of(self.tensor_for(t, i), t, i, self.rng[i][o])
                    out.append(self._copy(p.node.name, dst, src, (o, t), gi, si))
                elif kind == "copy_in":
                    p, j = ev[1:]
                    src = self._input_view(p, j, i)
                    q_out = self.npu_of(p.node.outputs[0])
                    addr = q_out * chip.lmem_bytes + self.bufs[self.copyin[(p.node.name, j)]].offset
                    layout = "compact" if p.reqs[j] == "compact" else "aligned"
                    shape = src.shape
                    dst = (matrix_layout(chip, addr, 1, src.matrix_shape[1], src.cols_per_channel)
                           if src.is_matrix else tensor_layout(chip, addr, shape, layout=layout))
                    key = self.copyin[(p.node.name, j)]
                    out.append(self._copy(p.node.name, dst, src, (key, p.ins[j]), gi, si))
                elif kind == "param":
                    prm = self.param_list[ev[1]][0]
                    out.append(self._param_load(prm, self._param_reader(ev[1]), ctx, gi, si))
                elif kind == "run":
                    out += self._run(ev[1], sl, gi, si)
            at.append(len(out))
            for b in self.bufs.values():
                if b.kind == "param" and self.resident:
                    continue
                self.lifetimes.append((b.key, b.kind, b.q, b.offset, b.span, at[b.first],
                                       max(at[b.last + 1] - 1, at[b.first])))
        for b in self.bufs.values():
            if b.kind == "param" and self.resident:
                self.lifetimes.append((b.key, b.kind, b.q, b.offset, b.span, 0, max(len(out) - 1, prologue)))
        return out

    def _param_reader(self, key):
        for p in self.plans:
            if any(prm.key == key for prm in p.params):
                return p.node.name
        return ""

    def _first_reader(self, t):
        for p in self.plans:
            if t in p.ins or any(self._root(x)[0] == t for x in p.ins):
                return p.node.name
        return self.plans[0].node.name

    def _input_view(self, p, j, i):
        t = p.ins[j]
        v = self.tensor_for(t, i)
        return self._rows_of(v, t, i, self._need(p, j, i))

    def _run(self, p, sl, gi, si):
        chip = self.chip
        i = sl.index
        matrices = p.node.op in ("Gemm", "MatMul")
        outs = [t for t in p.node.outputs if t]
        y = self.tensor_for(outs[0], i)
        whole = y
        q_out = self.npu_of(outs[0])
        X = []
        for j, t in enumerate(p.ins):
            key = self.copyin.get((p.node.name, j))
            if key:
                src = self._input_view(p, j, i)
                addr = q_out * chip.lmem_bytes + self.bufs[key].offset
                if src.is_matrix:
                    v = matrix_layout(chip, addr, 1, src.matrix_shape[1], src.cols_per_channel)
                else:
                    v = tensor_layout(chip, addr, src.shape,
                                      layout="compact" if p.reqs[j] == "compact" else "aligned")
                name = key
            else:
                v = self._input_view(p, j, i)
                name = t
                if p.reqs[j] == "compact":
                    v = as_compact(v)
                elif p.reqs[j] == "aligned":
                    v = as_aligned(v)
            if v.is_matrix and not matrices:
                v = matrix_as_4d(v)
            X.append((name, v))
        if y.is_matrix and not matrices:
            y = matrix_as_4d(y)
        P = {prm.role: (prm.name, self._param_tensor(prm)) for prm in p.params}
        T = []
        for k, kind in enumerate(p.temps):
            addr = q_out * chip.lmem_bytes + self.bufs[f"temp:{p.node.name}:{k}"].offset
            T.append((f"{p.node.name}.temp{k}", tensor_layout(chip, addr, y.shape)))
        pads = SliceInfo(sl.n, i)
        rule = p.rows[0] if p.rows else None
        if rule is not None and rule != "all":
            r = self.rng[i][outs[0]]
            _, _, pads.pad_top, pads.pad_bottom = rule.need(*r)
        instrs = []
        for op, operands, args in p.emit(X, (outs[0], y), P, T, pads):
            instrs.append(Instr("bdc", p.node.name, op, operands, args, gi, si, 0))
        if instrs:
            first_row = self.rng[i].get(outs[0], (0, 1))[0]
            instrs[-1].holds = ((outs[0], whole, sl.n, first_row),)
        return instrs
