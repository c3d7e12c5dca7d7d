"""Element-wise arithmetic on the NPU: Add, Sub, Mul, Div, Max and Min of two tensors, with
a number, with a per-channel constant or computed factor (squeeze-excite), or with a constant
expanded to the output's shape; PRelu.

>>> from tensorlayout.graph import load_graph
>>> from tensorlayout.model import zoo
>>> from tensorlayout.schedule.npu_ops import local_forms
>>> from tensorlayout.npu import BM1684
>>> _per_channel((1, 8, 1, 1), (1, 8, 5, 5)), _per_channel((8,), (1, 8, 5, 5))
(True, False)
"""

from __future__ import annotations

import numpy as np

from .npu_plan import OpPlan, Param, bdc as _i, elementwise as _elementwise

__all__ = ["C_OPS", "binary", "scale_plan", "prelu"]

C_OPS = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "maximum", "Min": "minimum"}


def _per_channel(shape, out, per_image=False):
    """A (1, C, 1, 1)-like operand of a rank-4 output (C the output's channels); with
    ``per_image``, also (N, C, 1, 1): a factor per image (a computed one is cut into images
    as the output is)."""
    s = tuple(shape)
    if len(out) != 4:
        return False
    s = (1,) * (4 - len(s)) + s
    return (s[0] == 1 or (per_image and s[0] == out[0])) and s[1] == out[1] and s[2] == 1 \
        and s[3] == 1 and out[1] > 1


def binary(graph, node, forms):
    op = node.op
    if len(node.inputs) != 2:
        return None, f"{op} of {len(node.inputs)} inputs: the BDC takes two"
    a, b = node.inputs
    out = graph.shapes[node.outputs[0]]
    fn = C_OPS[op]
    ca, cb = a in graph.consts, b in graph.consts
    if ca and cb:
        return None, "both operands are constants"
    commutes = op in ("Add", "Mul", "Max", "Min")
    if ca:                                            # constant first
        c = np.asarray(graph.consts[a], np.float32)
        if c.size == 1:
            v = float(c.reshape(-1)[0])
            if commutes:
                return _elementwise(node, b, lambda X, Y, P, T, s: [_i(fn, {"b": v}, output=Y, a=X[0])]), \
                    f"BDC {fn} with the number {v:g}"
            if op in ("Sub", "Div"):
                r = "rsub" if op == "Sub" else "rdiv"
                return _elementwise(node, b, lambda X, Y, P, T, s: [_i(r, {"c": v}, output=Y, a=X[0])]), \
                    f"BDC {v:g} {'-' if op == 'Sub' else '/'} x"
        if commutes or op == "Sub":
            x, c_name, const_first = b, a, True
        else:
            return _expanded(graph, node, forms, a, b, fn, swap=True)
    elif cb:
        x, c_name, const_first = a, b, False
    else:
        sa, sb = graph.shapes[a], graph.shapes[b]
        if tuple(sa) == tuple(out) and tuple(sb) == tuple(out):
            if forms.get(a) != forms.get(b):
                return None, "its operands are matrices with different columns per channel"
            return _elementwise(node, a, lambda X, Y, P, T, s: [_i(fn, output=Y, a=X[0], b=X[1])],
                                extra=(b,), reqs=["same", "same"]), f"BDC {fn} of two tensors"
        for big, small in ((a, b), (b, a)):
            if tuple(graph.shapes[big]) == tuple(out) and _per_channel(graph.shapes[small], out, True) \
                    and len(graph.shapes[small]) == 4 and op in ("Mul", "Add") \
                    and (big == a or commutes):
                role = "scale" if op == "Mul" else "bias"
                return OpPlan(node, "bdc", "", ins=[big, small], reqs=["same", "compact"],
                              rows=[None, "all"],
                              emit=lambda X, Y, P, T, s: [_i("scale_bias", output=Y, input=X[0],
                                                             **{role: X[1]})]), \
                    f"BDC per-channel {'scale' if op == 'Mul' else 'bias'} by a computed (1, C, 1, 1) tensor"
        return None, (f"broadcasts a computed {list(sa)} and {list(sb)}: the BDC takes tensors of one "
                      "shape, or a per-channel factor of one image or each")
    c = np.asarray(graph.consts[c_name], np.float32)
    if c.size == 1:
        v = float(c.reshape(-1)[0])
        if const_first:      # c - x
            return _elementwise(node, x, lambda X, Y, P, T, s: [_i("rsub", {"c": v}, output=Y, a=X[0])]), \
                f"BDC {v:g} - x"
        return _elementwise(node, x, lambda X, Y, P, T, s: [_i(fn, {"b": v}, output=Y, a=X[0])]), \
            f"BDC {fn} with the number {v:g}"
    if _per_channel(c.shape, out) and tuple(graph.shapes[x]) == tuple(out) and op in ("Add", "Sub", "Mul"):
        ch = out[1]
        vals = c.reshape(-1).astype(np.float32)
        if op == "Mul":
            return scale_plan(node, x, scale=vals), "BDC per-channel scale"
        if op == "Add":
            return scale_plan(node, x, bias=vals), "BDC per-channel bias"
        if const_first:      # c - x = x * -1 + c
            return scale_plan(node, x, scale=np.full(ch, -1, np.float32), bias=vals), \
                "BDC per-channel x * -1 + c"
        return scale_plan(node, x, bias=-vals), "BDC per-channel bias (minus the constant)"
    return _expanded(graph, node, forms, x, c_name, fn, swap=const_first)


def scale_plan(node, x, scale=None, bias=None):
    params = []
    ch = len(scale if scale is not None else bias)
    for role, vals in (("scale", scale), ("bias", bias)):
        if vals is not None:
            arr = np.asarray(vals, np.float32).reshape(1, ch, 1, 1)
            params.append(Param(f"{node.name}.{role}", role, "compact", (1, ch, 1, 1),
                                make=lambda arr=arr: arr))
    return OpPlan(node, "bdc", "", ins=[x], reqs=["same"], rows=[None], params=params,
                  emit=lambda X, Y, P, T, s: [_i("scale_bias", output=Y, input=X[0], scale=P.get("scale"),
                                                 bias=P.get("bias"))])


def _expanded(graph, node, forms, x, c_name, fn, swap=False):
    """A constant of another broadcast shape, expanded to the output's shape on the host and
    loaded like an activation."""
    out = graph.shapes[node.outputs[0]]
    if tuple(graph.shapes[x]) != tuple(out):
        return None, f"broadcasts the computed operand {list(graph.shapes[x])} to {list(out)}"
    key = f"{node.name}.{c_name}.expanded"
    arr = np.ascontiguousarray(np.broadcast_to(np.asarray(graph.consts[c_name], np.float32), out))
    if swap:
        if fn == "sub":
            emit = lambda X, Y, P, T, s: [_i("sub", output=Y, a=X[1], b=X[0])]   # noqa: E731
        elif fn == "div":
            emit = lambda X, Y, P, T, s: [_i("div", output=Y, a=X[1], b=X[0])]   # noqa: E731
        else:
            emit = lambda X, Y, P, T, s: [_i(fn, output=Y, a=X[1], b=X[0])]       # noqa: E731
    else:
        emit = lambda X, Y, P, T, s: [_i(fn, output=Y, a=X[0], b=X[1])]           # noqa: E731
    plan = _elementwise(node, x, emit, extra=(key,), reqs=["same", "same"])
    plan.consts = {key: arr}
    return plan, f"BDC {fn} with the constant expanded to {list(out)} (loaded by GDMA)"


def prelu(graph, node):
    x, s = node.inputs
    if s not in graph.consts:
        return None, "its slope is computed at run time"
    slope = np.asarray(graph.consts[s], np.float32)
    out = graph.shapes[node.outputs[0]]
    if slope.size == 1:
        a = float(slope.reshape(-1)[0])
        return _elementwise(node, x, lambda X, Y, P, T, s_: [
            _i("minimum", {"b": 0.0}, output=T[0], a=X[0]), _i("mul", {"b": a}, output=T[0], a=T[0]),
            _i("relu", output=Y, input=X[0]), _i("add", output=Y, a=Y, b=T[0])], temps=["out"]), \
            "BDC relu(x) + slope * min(x, 0)"
    if not _per_channel(slope.shape, out):
        return None, f"slope of shape {list(slope.shape)}: the BDC path takes one slope or one per channel"
    arr = slope.reshape(1, -1, 1, 1)
    plan = OpPlan(node, "bdc", "", ins=[x], reqs=["same"], rows=[None], temps=["out"],
                  params=[Param(f"{node.name}.slope", "scale", "compact", arr.shape, make=lambda: arr)],
                  emit=lambda X, Y, P, T, s_: [
                      _i("minimum", {"b": 0.0}, output=T[0], a=X[0]),
                      _i("scale_bias", output=T[0], input=T[0], scale=P["scale"]),
                      _i("relu", output=Y, input=X[0]), _i("add", output=Y, a=Y, b=T[0])])
    return plan, "BDC relu(x) + slope[c] * min(x, 0)"
