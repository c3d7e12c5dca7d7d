"""Convolution, pooling, reductions over H and W, and Gemm on the NPU: the plans whose
instructions read windows of rows (and so decide the halos of row slices) or whole images.

>>> import numpy as np
>>> _pack_2ic(np.arange(12, dtype=np.float32).reshape(2, 3, 1, 2)).shape   # O=2, I=3, 1x2
(2, 2, 1, 4)
"""

from __future__ import annotations

import numpy as np

from ..graph.ops import Conv, Pool
from .npu_plan import (MOST_C, MOST_DIL, MOST_GROUPS, MOST_PADDED, MOST_SPAD, OpPlan, Param, Window,
                       bdc as _i)

__all__ = ["conv", "pool", "reduce", "gemm", "gemm_parts", "pack_2ic", "window_counts"]

# --------------------------------------------------------------------------- convolution
def pack_2ic(w):
    """OIHW float32 -> the [ceil(I/2), O, kh, 2*kw] array whose words are 2IC pairs."""
    k, c, kh, kw = w.shape
    c2 = -(-c // 2)
    out = np.zeros((c2, k, kh, kw, 2), np.float32)
    wt = w.transpose(1, 0, 2, 3)
    out[: c // 2, ..., 0] = wt[0:c - c % 2:2]
    out[: c // 2, ..., 1] = wt[1:c - c % 2:2]
    if c % 2:
        out[c2 - 1, ..., 0] = wt[c - 1]
    return out.reshape(c2, k, kh, 2 * kw)


def conv(graph, node):
    p = node.params
    if not isinstance(p, Conv):
        return None, "not a 2-D convolution of constant weights"
    x = node.inputs[0]
    n, c, h, w = graph.shapes[x]
    pads = (p.begin[0], p.end[0], p.begin[1], p.end[1])
    for name, vals, most in (("stride", p.strides, MOST_SPAD), ("padding", pads, MOST_SPAD),
                             ("dilation", p.dilations, MOST_DIL)):
        if max(vals) > most:
            return None, f"{name} {list(vals)}: the BDC instruction holds at most {most}"
    if w + pads[2] + pads[3] > MOST_PADDED:
        return None, f"padded width {w + pads[2] + pads[3]}: the convolution takes at most {MOST_PADDED}"
    wname = node.inputs[1]
    wt = np.asarray(graph.consts[wname], np.float32)
    bname = node.inputs[2] if p.has_bias else ""
    bias = np.asarray(graph.consts[bname], np.float32).reshape(1, -1, 1, 1) if p.has_bias else None
    kh, kw = p.kernel
    ext = (kh - 1) * p.dilations[0] + 1
    win = Window(ext, p.strides[0], pads[0], pads[1], h)
    args = {"stride": p.strides, "dilation": p.dilations}
    k = p.out_channels
    macs = int(np.prod(graph.shapes[node.outputs[0]])) * (c // p.group) * kh * kw

    def padding(s):
        return (s.pad_top, s.pad_bottom, pads[2], pads[3])

    if p.depthwise and p.multiplier == 1:
        params = [Param(wname, "weight", "compact", (1, c, kh, kw), make=lambda: wt.reshape(1, c, kh, kw))]
        if bias is not None:
            params.append(Param(bname, "bias", "compact", (1, c, 1, 1), make=lambda: bias))
        plan = OpPlan(node, "bdc", "", ins=[x], reqs=["aligned"], rows=[win], params=params,
                      emit=lambda X, Y, P, T, s: [_i("depthwise2d", {"padding": padding(s), **args},
                                                     output=Y, input=X[0], weight=P["weight"],
                                                     bias=P.get("bias"))], macs=macs)
        return plan, "BDC depthwise convolution"
    g = p.group
    cg, kg = c // g, k // g
    if cg > MOST_C or kg > MOST_C:
        return None, (f"{cg} input and {kg} output channels per group: the convolution instruction "
                      f"holds at most {MOST_C}")
    if g > MOST_GROUPS:
        return None, f"group = {g}: more than {MOST_GROUPS} convolution instructions"
    params = []
    for j in range(g):
        wj = np.ascontiguousarray(wt[j * kg:(j + 1) * kg])
        key = wname if g == 1 else f"{wname}[group {j}]"
        params.append(Param(key, f"weight{j}", "2IC", (cg, kg, kh, kw),
                            make=lambda wj=wj: pack_2ic(wj), npu_offset=j * kg))
        if bias is not None:
            bj = np.ascontiguousarray(bias[:, j * kg:(j + 1) * kg])
            params.append(Param(bname if g == 1 else f"{bname}[group {j}]", f"bias{j}", "compact",
                                (1, kg, 1, 1), make=lambda bj=bj: bj, npu_offset=j * kg))

    def emit(X, Y, P, T, s):
        from ..npu.tensor import sub_channels

        if g == 1:
            return [_i("conv2d", {"padding": padding(s), **args}, output=Y, input=X[0],
                       weight=P["weight0"], bias=P.get("bias0"))]
        out = []
        for j in range(g):
            xj = (X[0][0], sub_channels(X[0][1], j * cg, (j + 1) * cg))
            yj = (Y[0], sub_channels(Y[1], j * kg, (j + 1) * kg))
            out.append(_i("conv2d", {"padding": padding(s), **args}, output=yj, input=xj,
                          weight=P[f"weight{j}"], bias=P.get(f"bias{j}")))
        return out

    plan = OpPlan(node, "bdc", "", ins=[x], reqs=["any"], rows=[win], params=params, out_npu="any",
                  emit=emit, macs=macs)
    if g == 1:
        return plan, "BDC convolution (weights in the 2IC mode)"
    return plan, f"{g} BDC convolutions, one per group (each group's weights in its output's NPUs)"


# ------------------------------------------------------------------------------ pooling
def pool(graph, node):
    p = node.params
    if not isinstance(p, Pool):
        return None, "not a 2-D pooling"
    if p.dilations != (1, 1):
        return None, "dilated pooling: the BDC pool has no dilation"
    x = node.inputs[0]
    n, c, h, w = graph.shapes[x]
    kh, kw = p.kernel
    pad = (p.begin[0], p.end[0] + p.extra[0], p.begin[1], p.end[1] + p.extra[1])
    if max(pad) > MOST_SPAD or max(p.strides) > MOST_SPAD:
        return None, f"padding {list(pad)} or stride {list(p.strides)}: the BDC pool holds at most 15"
    if pad[0] >= kh or pad[1] >= kh or pad[2] >= kw or pad[3] >= kw:
        return None, f"padding {list(pad)} as wide as the {kh}x{kw} window: the BDC pool refuses it"
    win = Window(kh, p.strides[0], pad[0], pad[1], h)
    fn = "max_pool2d" if p.is_max else "avg_pool2d"

    def args(s):
        return {"kernel": (kh, kw), "padding": (s.pad_top, s.pad_bottom, pad[2], pad[3]),
                "stride": p.strides}

    plan = OpPlan(node, "bdc", "", ins=[x], reqs=["aligned"], rows=[win],
                  emit=lambda X, Y, P, T, s: [_i(fn, args(s), output=Y, input=X[0])])
    if p.is_max:
        return plan, "BDC max pool" + (" (ceil mode as end padding)" if any(p.extra) else "")
    if not any(pad) or (p.count_include_pad and not any(p.extra)):
        return plan, "BDC average pool"
    # the instruction divides by kh*kw; windows that count fewer elements get a factor
    out = graph.shapes[node.outputs[0]]
    ho, wo = out[2:]
    cnt = window_counts(h, w, (kh, kw), p.strides, (p.begin[0], p.begin[1]),
                         (p.end[0], p.end[1]), ho, wo, p.count_include_pad)
    factor = np.broadcast_to((kh * kw / cnt).astype(np.float32), out)
    key = f"{node.name}.divisor"
    plan.ins.append(key)
    plan.reqs.append("same")
    plan.rows.append(None)
    plan.consts = {key: np.ascontiguousarray(factor)}
    plan.emit = lambda X, Y, P, T, s: [_i(fn, args(s), output=Y, input=X[0]),
                                       _i("mul", output=Y, a=Y, b=X[1])]
    return plan, ("BDC average pool, then a multiply by kh*kw / (elements counted) where windows "
                  "leave padding out")


def window_counts(h, w, kernel, strides, begin, end, ho, wo, include_pad):
    """Elements each window divides by: those inside the input (or inside the padded input
    with ``include_pad``; ceil-mode rows past the padding never count)."""
    out = []
    for size, k, s, b, e, n_out in zip((h, w), kernel, strides, begin, end, (ho, wo)):
        lo = -b if include_pad else 0
        hi = size + e if include_pad else size
        starts = np.arange(n_out) * s - b
        out.append(np.clip(np.minimum(starts + k, hi) - np.maximum(starts, lo), 1, None))
    return np.outer(out[0], out[1]).astype(np.float64)


def reduce(graph, node, forms):
    p = node.params
    x = node.inputs[0]
    shape = graph.shapes[x]
    if len(shape) != 4 or p.axes is None or tuple(p.axes) != (2, 3) or p.kind not in ("mean", "max", "sum"):
        return None, (f"{p.kind} over axes {p.axes}: the BDC path reduces over H and W of a 4-D "
                      "tensor (mean, max or sum)")
    h, w = shape[2:]
    fn = "max_pool2d" if p.kind == "max" else "avg_pool2d"
    args = {"kernel": (h, w), "padding": (0, 0, 0, 0), "stride": (1, 1)}

    def emit(X, Y, P, T, s):
        out = [_i(fn, args, output=Y, input=X[0])]
        if p.kind == "sum":
            out.append(_i("mul", {"b": float(h * w)}, output=Y, a=Y))
        return out
    plan = OpPlan(node, "bdc", "", ins=[x], reqs=["aligned"], rows=["all"], whole=True, emit=emit)
    what = {"mean": "average", "max": "max", "sum": "average (times H*W)"}[p.kind]
    return plan, f"BDC {what} pool over the whole image"


# -------------------------------------------------------------------------------- Gemm
def gemm_parts(graph, node):
    """``(A, B (K x N, constant, transposes applied), C expanded to (M, N) times beta or None,
    C as one row or None, alpha, transA)``, or a string saying why the node is not a
    fully-connected layer of constant weights."""
    p = node.params
    a, b = node.inputs[:2]
    if b not in graph.consts or a in graph.consts:
        return "B must be a constant matrix and A computed"
    bm = np.asarray(graph.consts[b], np.float32)
    sa = graph.shapes[a]
    if bm.ndim != 2 or len(sa) != 2:
        return f"A {list(sa)} and B {list(bm.shape)}: the BDC matmul takes 2-D matrices"
    if p.trans_b:
        bm = bm.T
    m, n = graph.shapes[node.outputs[0]]
    cname = node.inputs[2] if len(node.inputs) > 2 else ""
    cfull = crow = None
    if cname:
        if cname not in graph.consts:
            return "C is computed at run time"
        c = np.asarray(graph.consts[cname], np.float32) * np.float32(p.beta)
        if c.size == n and (c.ndim < 2 or c.shape[0] == 1) and p.alpha == 1.0:
            crow = np.ascontiguousarray(c.reshape(1, n))
        elif np.any(c != 0) or p.beta != 0:
            cfull = np.ascontiguousarray(np.broadcast_to(c, (m, n)))
    return a, np.ascontiguousarray(bm), cfull, crow, float(p.alpha), bool(p.trans_a)


def gemm(graph, node, chip):
    p = node.params
    parts = gemm_parts(graph, node)
    if isinstance(parts, str):
        return None, parts
    a, bm, cfull, crow, alpha, trans_a = parts
    k, n = bm.shape
    rw = -(-n // chip.npus)
    macs = graph.shapes[node.outputs[0]][0] * k * n
    # the weights must leave room for the rest in one NPU's share (else a matmul of its own, in chunks)
    weight_share = k * -(-rw * 4 // chip.align_bytes) * chip.align_bytes * -(-(-(-n // rw)) // chip.npus)
    if trans_a or weight_share > chip.lmem_bytes // 2:
        plan = OpPlan(node, "matmul", "", macs=macs)
        return plan, ("BDC matmul in chunks of K and N, A loaded transposed by GDMA" if trans_a
                      else f"BDC matmul in chunks: the {k}x{n} weights pass half of one NPU's memory")
    params = [Param(node.inputs[1] + (".T" if p.trans_b else ""), "right", "matrix", (k, n),
                    make=lambda: bm, cpc=rw, label=node.inputs[1])]
    if crow is not None:
        params.append(Param(node.inputs[2] + (".beta" if p.beta != 1 else ""), "bias", "matrix", (1, n),
                            make=lambda: crow, cpc=rw, label=node.inputs[2]))
    plan = OpPlan(node, "bdc", "", ins=[a], reqs=["any"], rows=["all"], whole=True, params=params,
                  out_npu="any", macs=macs)
    if cfull is not None:
        key = f"{node.name}.C"
        plan.ins.append(key)
        plan.reqs.append("same")
        plan.rows.append("all")
        plan.consts = {key: cfull}

    def emit(X, Y, P, T, s):
        from ..npu.tensor import matrix_as_4d

        out = [_i("matmul", output=Y, left=X[0], right=P["right"], bias=P.get("bias"))]
        y4 = (Y[0], matrix_as_4d(Y[1]))
        if alpha != 1.0:
            out.append(_i("mul", {"b": alpha}, output=y4, a=y4))
        if cfull is not None:
            out.append(_i("add", output=y4, a=y4, b=(X[1][0], matrix_as_4d(X[1][1]))))
        return out
    plan.emit = emit
    why = "BDC matmul in the matrix layout"
    if alpha != 1.0 or cfull is not None:
        why += ", then " + " and ".join(w for w, on in (("alpha times", alpha != 1.0),
                                                        ("plus beta * C", cfull is not None)) if on)
    return plan, why



_pack_2ic = pack_2ic
