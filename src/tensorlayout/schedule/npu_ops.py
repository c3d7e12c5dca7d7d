"""How each node runs on a Sophgo NPU: its BDC instructions, or the GDMA moves, or why not.

:func:`lower` turns one graph node into an :class:`OpPlan`: the ``kind`` of work (``"bdc"``
instructions, a local ``"move"`` that places data without computing, a ``"view"``, a
system-memory ``"sysmove"`` or ``"sysview"``, a standalone ``"matmul"``, or ``"host"`` with
the reason), what each input needs of its placement (any strides and NPU; the output's NPU;
the aligned layout there; the compact layout there), which output rows need which input rows
(for slicing along H), the constants it loads into local memory, the temporaries it needs,
and an ``emit`` function that writes its instructions once the schedule has placed
everything.  Activations are float32; a tensor of rank 4 lives in the aligned layout, a
matrix (rank 2) in the matrix layout with the columns per channel its producer chose.

>>> from tensorlayout.graph import load_graph
>>> from tensorlayout.model import zoo
>>> from tensorlayout.npu import BM1684
>>> g = load_graph(zoo.tiny_onnx())
>>> forms = local_forms(g, BM1684)
>>> [(n.name, lower(g, n, BM1684, forms).kind) for n in g.nodes][:3]
[('conv1', 'bdc'), ('relu1', 'bdc'), ('pool1', 'bdc')]
"""

from __future__ import annotations

import numpy as np

from ..graph.ops import ACTIVATIONS
from .common import VIEWS
from .npu_arith import C_OPS, binary, prelu, scale_plan
from .npu_layers import conv, gemm, pool, reduce
from .npu_plan import OpPlan, bdc as _i, elementwise as _elementwise, float_tensor


def _rank(graph, t):
    return len(graph.shapes[t])


def local_forms(graph, chip) -> dict:
    """Each float tensor's local form: ``("4d",)`` for rank 4, ``("matrix", cpc)`` for rank 2
    (a Gemm's output spreads its columns over the NPUs; a flattened image keeps ``H*W``
    columns per channel; everything else one column per channel), None for other ranks."""
    forms = {}
    producers = graph.producers()

    def form(t):
        if t in forms:
            return forms[t]
        shape = graph.shapes.get(t)
        f = None
        if shape is not None and len(shape) == 4:
            f = ("4d",)
        elif shape is not None and len(shape) == 2:
            node = producers.get(t)
            cpc = 1
            if node is not None and node.op in ("Gemm", "MatMul"):
                cpc = -(-shape[1] // chip.npus)
            elif node is not None and node.op in ("Flatten", "Reshape", "Squeeze") \
                    and node.inputs[0] in graph.shapes and len(graph.shapes[node.inputs[0]]) == 4:
                s = graph.shapes[node.inputs[0]]
                if s[0] == shape[0] and s[1] * s[2] * s[3] == shape[1]:
                    cpc = s[2] * s[3]
            elif node is not None and node.op in ACTIVATIONS + ("Dropout", "Identity", "Add", "Mul",
                                                                 "Sub", "Div"):
                src = form(node.inputs[0]) if node.inputs[0] in graph.shapes else None
                if src is not None and src[0] == "matrix":
                    cpc = src[1]
            f = ("matrix", cpc)
        forms[t] = f
        return f

    for name in graph.inputs:
        form(name)
    for node in graph.nodes:
        for t in node.outputs:
            if t:
                form(t)
    return forms


def _host(node, why):
    return OpPlan(node, "host", why)


# --------------------------------------------------------------------------- activations
def _activation(graph, node):
    p = node.params
    x = node.inputs[0]
    k = p.kind
    if k == "Relu":
        return _elementwise(node, x, lambda X, Y, P, T, s: [_i("relu", output=Y, input=X[0])]), "BDC relu"
    if k == "Clip":
        if p.runtime_bounds:
            return None, "its bounds are computed at run time: the BDC takes them as numbers"
        lo = None if p.alpha == -np.inf else p.alpha
        hi = None if p.beta == np.inf else p.beta
        if lo is None and hi is None:
            return _elementwise(node, x, lambda X, Y, P, T, s: [_i("mul", {"b": 1.0}, output=Y, a=X[0])]), \
                "no bounds: a copy (BDC multiply by 1)"

        def clip(X, Y, P, T, s):
            out, src = [], X[0]
            if lo is not None:
                out.append(_i("maximum", {"b": lo}, output=Y, a=src))
                src = Y
            if hi is not None:
                out.append(_i("minimum", {"b": hi}, output=Y, a=src))
            return out
        return _elementwise(node, x, clip), "BDC max / min with the constant bounds"
    if k == "LeakyRelu":
        a = p.alpha
        if 0.0 <= a <= 1.0:
            return _elementwise(node, x, lambda X, Y, P, T, s: [
                _i("mul", {"b": a}, output=T[0], a=X[0]),
                _i("maximum", output=Y, a=X[0], b=T[0])], temps=["out"]), "BDC max(x, alpha * x)"
        return _elementwise(node, x, lambda X, Y, P, T, s: [
            _i("minimum", {"b": 0.0}, output=T[0], a=X[0]), _i("mul", {"b": a}, output=T[0], a=T[0]),
            _i("relu", output=Y, input=X[0]), _i("add", output=Y, a=Y, b=T[0])], temps=["out"]), \
            "BDC relu(x) + alpha * min(x, 0)"
    if k in ("Sigmoid", "Tanh"):
        fn = k.lower()
        return OpPlan(node, "bdc", "", ins=[x], reqs=["aligned"], rows=[None], temps=["out"],
                      emit=lambda X, Y, P, T, s: [_i(fn, output=Y, input=X[0], work=T[0])]), \
            f"BDC {fn} (input clamped to its exact range first)"
    if k in ("HardSigmoid", "HardSwish"):
        a, b = p.alpha, p.beta

        def hard(X, Y, P, T, s):
            g = Y if k == "HardSigmoid" else T[0]
            out = [_i("mul", {"b": a}, output=g, a=X[0]), _i("add", {"b": b}, output=g, a=g),
                   _i("maximum", {"b": 0.0}, output=g, a=g), _i("minimum", {"b": 1.0}, output=g, a=g)]
            if k == "HardSwish":
                out.append(_i("mul", output=Y, a=X[0], b=g))
            return out
        why = ("BDC clip(alpha * x + beta, 0, 1)" if k == "HardSigmoid"
               else "BDC x * clip(x / 6 + 1/2, 0, 1)")
        return _elementwise(node, x, hard, temps=["out"] if k == "HardSwish" else []), why
    raise AssertionError(k)


def _unary_math(graph, node):
    x = node.inputs[0]
    op = node.op
    if op == "Neg":
        return _elementwise(node, x, lambda X, Y, P, T, s: [_i("mul", {"b": -1.0}, output=Y, a=X[0])]), \
            "BDC multiply by -1"
    if op == "Abs":
        return _elementwise(node, x, lambda X, Y, P, T, s: [
            _i("mul", {"b": -1.0}, output=T[0], a=X[0]), _i("maximum", output=Y, a=X[0], b=T[0])],
            temps=["out"]), "BDC max(x, -x)"
    if op == "Reciprocal":
        return _elementwise(node, x, lambda X, Y, P, T, s: [_i("rdiv", {"c": 1.0}, output=Y, a=X[0])]), \
            "BDC 1 / x"
    if op == "Exp":
        return OpPlan(node, "bdc", "", ins=[x], reqs=["aligned"], rows=[None], temps=["out"],
                      emit=lambda X, Y, P, T, s: [_i("exp", output=Y, input=X[0], work=T[0])]), \
            "BDC exp (input clamped to its exact range first)"
    if op == "Elu":
        a = node.params.alpha
        return OpPlan(node, "bdc", "", ins=[x], reqs=["same"], rows=[None], temps=["out", "out", "out"],
                      emit=lambda X, Y, P, T, s: [
                          _i("minimum", {"b": 0.0}, output=T[0], a=X[0]),
                          _i("exp", output=T[1], input=T[0], work=T[2]),
                          _i("add", {"b": -1.0}, output=T[1], a=T[1]),
                          _i("mul", {"b": a}, output=T[1], a=T[1]),
                          _i("relu", output=Y, input=X[0]), _i("add", output=Y, a=Y, b=T[1])]), \
            "BDC relu(x) + alpha * (exp(min(x, 0)) - 1)"
    raise AssertionError(op)


# ------------------------------------------------------------------------------- moves
def _concat(graph, node):
    p = node.params
    shapes = [graph.shapes[t] for t in node.inputs if t]
    if any(t in graph.consts for t in node.inputs if t):
        return OpPlan(node, "sysmove", ""), "GDMA copies in system memory (a constant part)"
    if len(shapes[0]) == 4 and p.axis == 1:
        offs, at = [], 0
        for s in shapes:
            offs.append(at)
            at += s[1]
        return OpPlan(node, "move", "", ins=[t for t in node.inputs if t], local="concat",
                      offsets=tuple(offs)), "placement: each part written in its channels of the output"
    return OpPlan(node, "sysmove", ""), f"GDMA copies along axis {p.axis} in system memory"


def _slice(graph, node):
    p = node.params
    x = node.inputs[0]
    shape = graph.shapes[x]
    if node.op == "Split":
        if len(shape) == 4 and p.axis == 1:
            offs = tuple(int(v) for v in np.cumsum((0,) + tuple(p.sizes))[:-1])
            return OpPlan(node, "move", "", ins=[x], local="slice", offsets=offs), \
                "placement: each part is its channels of the input"
        return OpPlan(node, "sysmove", ""), f"GDMA copies along axis {p.axis} in system memory"
    index = p.index
    if any(step < 0 for _, _, step in index):
        return None, "a negative step: GDMA copies run forwards"
    if len(shape) == 4 and all(t == (0, s, 1) for i, (t, s) in enumerate(zip(index, shape)) if i != 1) \
            and index[1][2] == 1:
        return OpPlan(node, "move", "", ins=[x], local="slice", offsets=(index[1][0],)), \
            "placement: its channels of the input"
    return OpPlan(node, "sysmove", ""), "GDMA strided copy in system memory"


def lower(graph, node, chip, forms) -> OpPlan:
    """The :class:`OpPlan` of ``node`` on ``chip`` (``forms`` from :func:`local_forms`)."""
    op = node.op
    x = node.inputs[0] if node.inputs else ""
    data = [t for t in node.inputs + node.outputs if t and t not in graph.consts]
    if op in ("Reshape", "Slice", "Split", "Squeeze", "Unsqueeze", "Clip"):
        data = [t for t in [x] + list(node.outputs) if t and t not in graph.consts]
    bad = [t for t in data if not float_tensor(graph, t)]
    if bad:
        t = bad[0]
        if t in graph.shapes and any(int(d) == 0 for d in graph.shapes[t]):
            return _host(node, f"{t!r} has no elements: nothing for the NPU to compute")
        dt = graph.dtypes.get(t, graph.input_dtypes.get(t))
        return _host(node, f"dtype {np.dtype(dt).name if dt is not None else 'unknown'} of {t!r}: "
                           "the BDC path is float32")
    outs = [t for t in node.outputs if t]
    if op in VIEWS:
        return OpPlan(node, "view", "a view: the same placement", ins=[x], local="view")
    if op in ("Concat",):
        got = _concat(graph, node)
    elif op in ("Slice", "Split"):
        got = _slice(graph, node)
    elif op == "Transpose":
        got = OpPlan(node, "sysmove", ""), "GDMA copy with permuted strides in system memory"
    elif any(forms.get(t) is None for t in [x] + outs if t and t not in graph.consts):
        bad = next(t for t in [x] + outs if t and t not in graph.consts and forms.get(t) is None)
        return _host(node, f"{bad!r} has rank {len(graph.shapes[bad])}: local memory holds 4-D "
                           "tensors and matrices")
    elif op in ACTIVATIONS:
        got = _activation(graph, node)
    elif op in ("Neg", "Abs", "Reciprocal", "Exp", "Elu"):
        got = _unary_math(graph, node)
    elif op in C_OPS:
        got = binary(graph, node, forms)
    elif op == "PRelu":
        got = prelu(graph, node)
    elif op == "BatchNormalization":
        p = node.params
        if p.mul is None or p.training or len(graph.shapes[x]) != 4:
            return _host(node, "statistics computed at run time or training mode")
        got = scale_plan(node, x, scale=p.mul, bias=p.add), "BDC per-channel scale and shift"
    elif op == "Conv":
        got = conv(graph, node)
    elif op in ("MaxPool", "AveragePool"):
        got = pool(graph, node)
    elif op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceSum"):
        got = reduce(graph, node, forms)
    elif op in ("Gemm", "MatMul"):
        got = gemm(graph, node, chip)
    else:
        return _host(node, f"{op} has no BDC instruction or GDMA form")
    plan, why = got
    if plan is None:
        return _host(node, why)
    plan.why = why
    return plan
