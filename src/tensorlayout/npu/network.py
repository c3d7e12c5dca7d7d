"""Small networks run end to end on Sophgo's BM1684 simulator, layer by layer.

A network is a list of named layers (``conv``, ``relu``, ``max_pool``, ``avg_pool``, ``add``),
each reading earlier layers by name (``"x"`` is the input). Convolutions go through the layer
planner (:mod:`tensorlayout.npu.planner`); the other layers run one image at a time as GDMA
load, BDC instruction, GDMA store. :func:`run_reference` computes the same network in float64
NumPy, the yardstick.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> net = resnet_basic_block(8, rng)
>>> [layer.op for layer in net]
['conv', 'relu', 'conv', 'add', 'relu']
>>> x = rng.standard_normal((2, 8, 10, 10), dtype=np.float32)
>>> y, report = run_on_simulator(net, x)
>>> ref = run_reference(net, x)
>>> bool(np.abs(y - ref).max() / np.abs(ref).max() < 1e-5), len(report)
(True, 5)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import FootprintError, LayoutError, ShapeError
from .chip import BM1684
from .reference import avg_pool_reference, conv2d_reference, max_pool_reference

__all__ = ["Layer", "conv", "relu", "max_pool", "avg_pool", "add", "resnet_basic_block", "small_vgg",
           "run_on_simulator", "run_reference", "run_onnx"]

OPS = ("conv", "relu", "max_pool", "avg_pool", "add")


@dataclass(frozen=True)
class Layer:
    """One layer: ``name``, ``op``, the names it reads, and its parameters."""

    name: str
    op: str
    inputs: tuple[str, ...]
    params: dict = field(default_factory=dict, compare=False)


def conv(name, input, weight, bias=None, stride=1, padding=None, dilation=1) -> Layer:
    """A convolution layer (OIHW ``weight``; ``padding=None`` is "same" for odd kernels)."""
    weight = np.asarray(weight, np.float32)
    if weight.ndim != 4:
        raise ShapeError(f"weight has shape {weight.shape}: it must be OIHW")
    kh, kw = weight.shape[2:]
    if padding is None:
        padding = ((kh - 1) * dilation // 2, (kw - 1) * dilation // 2)
    return Layer(name, "conv", (input,), dict(weight=weight, bias=None if bias is None else
                                             np.asarray(bias, np.float32), stride=stride, padding=padding,
                                             dilation=dilation))


def relu(name, input) -> Layer:
    """``max(x, 0)``."""
    return Layer(name, "relu", (input,))


def max_pool(name, input, kernel, stride=None, padding=0) -> Layer:
    """Max pooling (stride defaults to the kernel)."""
    return Layer(name, "max_pool", (input,), dict(kernel=kernel, stride=stride or kernel, padding=padding))


def avg_pool(name, input, kernel, stride=None, padding=0) -> Layer:
    """Average pooling over the whole window (padding counts as 0)."""
    return Layer(name, "avg_pool", (input,), dict(kernel=kernel, stride=stride or kernel, padding=padding))


def add(name, a, b) -> Layer:
    """Element-wise sum of two earlier layers (a residual connection)."""
    return Layer(name, "add", (a, b))


def _he(rng, o, i, k):
    return (rng.standard_normal((o, i, k, k)) * np.sqrt(2.0 / (i * k * k))).astype(np.float32)


def resnet_basic_block(channels: int, rng) -> list[Layer]:
    """ResNet's basic block: conv 3x3, relu, conv 3x3, add the input, relu (random weights)."""
    c = channels
    return [conv("conv1", "x", _he(rng, c, c, 3), rng.standard_normal(c).astype(np.float32) * 0.1),
            relu("relu1", "conv1"),
            conv("conv2", "relu1", _he(rng, c, c, 3), rng.standard_normal(c).astype(np.float32) * 0.1),
            add("sum", "conv2", "x"),
            relu("out", "sum")]


def small_vgg(in_channels: int, rng, widths=(16, 32)) -> list[Layer]:
    """A VGG-style chain: per width two conv 3x3 + relu, then a 2x2 max pool; an average pool at the end."""
    layers, prev, c = [], "x", in_channels
    for i, wdt in enumerate(widths):
        for j in range(2):
            layers.append(conv(f"conv{i}{j}", prev, _he(rng, wdt, c, 3),
                               rng.standard_normal(wdt).astype(np.float32) * 0.1))
            layers.append(relu(f"relu{i}{j}", f"conv{i}{j}"))
            prev, c = f"relu{i}{j}", wdt
        layers.append(max_pool(f"pool{i}", prev, 2))
        prev = f"pool{i}"
    layers.append(avg_pool("avg", prev, 2))
    return layers


def _check(layers):
    seen = {"x"}
    for layer in layers:
        if not isinstance(layer, Layer) or layer.op not in OPS:
            raise LayoutError(f"layer = {layer!r} is not allowed: it must be a Layer with op in {OPS}")
        for name in layer.inputs:
            if name not in seen:
                raise LayoutError(f"layer {layer.name!r} reads {name!r}, which no earlier layer produces")
        if layer.name in seen:
            raise LayoutError(f"layer name {layer.name!r} is used twice")
        seen.add(layer.name)
    if not layers:
        raise LayoutError("layers is empty: a network needs at least one layer")


def run_reference(layers, x) -> np.ndarray:
    """The network in float64 NumPy (direct convolution, textbook pooling)."""
    _check(layers)
    vals = {"x": np.asarray(x, np.float64)}
    for layer in layers:
        a = [vals[n] for n in layer.inputs]
        p = layer.params
        if layer.op == "conv":
            y = conv2d_reference(a[0], p["weight"], p["bias"], p["padding"], p["stride"], p["dilation"])
        elif layer.op == "relu":
            y = np.maximum(a[0], 0)
        elif layer.op == "max_pool":
            y = max_pool_reference(a[0], p["kernel"], p["padding"], p["stride"])
        elif layer.op == "avg_pool":
            y = avg_pool_reference(a[0], p["kernel"], p["padding"], p["stride"])
        else:
            y = a[0] + a[1]
        vals[layer.name] = y
    return vals[layers[-1].name]


def _per_image(layer, arrays):
    """relu / pooling / add on the simulator, one image at a time: GDMA loads, one BDC op, GDMA store."""
    from . import bdc
    from .memory import LocalMemory
    from .tensor import tensor_layout

    S = BM1684.lmem_bytes
    x0 = arrays[0]
    n, c, h, w = x0.shape
    p = layer.params
    if layer.op in ("max_pool", "avg_pool"):
        out_shape = bdc.pool_output_shape((1, c, h, w), p["kernel"], p["padding"], p["stride"])
    elif layer.op == "depthwise":
        out_shape = bdc.conv2d_output_shape((1, c, h, w), p["weight"].shape, p["padding"], p["stride"],
                                            p["dilation"])
    else:
        out_shape = (1, c, h, w)
    ins = [tensor_layout(BM1684, 0, (1, c, h, w))]
    if layer.op == "add":
        ins.append(tensor_layout(BM1684, -(-ins[0].end_offset // 128) * 128, (1, c, h, w)))
    out_at = -(-ins[-1].end_offset // 128) * 128
    if out_at >= S:
        raise FootprintError(f"layer {layer.name!r}: one image {(1, c, h, w)} does not fit one NPU's local memory")
    out = tensor_layout(BM1684, out_at, out_shape)
    result = np.empty((n,) + out_shape[1:], np.float32)
    img = c * h * w * 4
    mem = LocalMemory(BM1684, system_bytes=2 * img + 4 * int(np.prod(out_shape)), backend="cmodel")
    if layer.op == "depthwise":  # weights and bias written once by the host, after the output
        wt = bdc.store_depthwise_weight(mem, -(-out.end_offset // 128) * 128, p["weight"])
        bt = None if p["bias"] is None else bdc.store_bias(mem, -(-wt.end_offset // 128) * 128, p["bias"])
        if (bt or wt).end_offset >= S:
            raise FootprintError(f"layer {layer.name!r}: one image {(1, c, h, w)} does not fit one NPU's local memory")
    for i in range(n):
        for j, (t, a) in enumerate(zip(ins, arrays)):
            mem.write_system(j * img, np.ascontiguousarray(a[i:i + 1], np.float32))
            mem.gdma_s2l(t.address, j * img, t.shape, "fp32")
        if layer.op == "relu":
            bdc.relu(mem, out, ins[0])
        elif layer.op == "add":
            bdc.add(mem, out, ins[0], ins[1])
        elif layer.op == "depthwise":
            bdc.depthwise2d(mem, out, ins[0], wt, bt, padding=p["padding"], stride=p["stride"],
                            dilation=p["dilation"])
        elif layer.op == "clip":
            src = ins[0]
            if p["low"] is not None:
                src = bdc.maximum(mem, out, src, p["low"])
            if p["high"] is not None:
                bdc.minimum(mem, out, src, p["high"])
        elif layer.op == "max_pool":
            bdc.max_pool2d(mem, out, ins[0], p["kernel"], p["padding"], p["stride"])
        else:
            bdc.avg_pool2d(mem, out, ins[0], p["kernel"], p["padding"], p["stride"])
        mem.gdma_l2s(2 * img, out.address, out_shape, "fp32")
        result[i] = mem.read_system(2 * img, out_shape, "fp32")[0]
    return result


def run_on_simulator(layers, x):
    """Run the network on the BM1684 simulator; return the output and one report line per layer.

    Each report entry is a dict: ``name``, ``op``, ``shape`` (output), ``where`` ("simulator"),
    and for convolutions the planner's ``split`` and GDMA bytes against the minimum.
    """
    from .planner import plan_conv, run_conv_plan

    _check(layers)
    x = np.ascontiguousarray(x, np.float32)
    if x.ndim != 4:
        raise ShapeError(f"x has shape {x.shape}: it must be NCHW")
    vals, report = {"x": x}, []
    for layer in layers:
        a = [vals[nm] for nm in layer.inputs]
        if layer.op == "add" and a[0].shape != a[1].shape:
            raise ShapeError(f"layer {layer.name!r} adds shapes {a[0].shape} and {a[1].shape}: they must match")
        entry = {"name": layer.name, "op": layer.op, "where": "simulator"}
        if layer.op == "conv":
            p = layer.params
            w = p["weight"]
            plan = plan_conv(a[0].shape, w.shape[0], w.shape[2:], p["stride"], p["padding"], p["dilation"],
                             bias=p["bias"] is not None)
            y = run_conv_plan(plan, a[0], w, p["bias"])
            entry.update(split=plan.split, gdma_bytes=plan.gdma_bytes, minimum_gdma_bytes=plan.minimum_gdma_bytes)
        else:
            y = _per_image(layer, a)
        vals[layer.name] = y
        entry["shape"] = tuple(y.shape)
        report.append(entry)
    return vals[layers[-1].name], report


# ------------------------------------------------------------------ ONNX models
_NPU_OPS = ("Conv", "Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool", "Add")
_ELEMENTWISE = ("Relu", "Clip", "Add")   # other ranks run as (1, size, 1, 1)


def _onnx_layer(step, consts):
    """The :class:`Layer` that runs ``step`` exactly on the simulator, or ``(None, why)``."""
    node = step.node
    op, p = node.op, node.params
    if op == "Gemm":
        return _gemm_layer(step, consts)
    if op not in _NPU_OPS:
        return None, "no BDC instruction for this op"
    x_shape = step.in_shapes[0]
    if x_shape is None or (op not in _ELEMENTWISE and (len(x_shape) != 4 or len(step.out_shapes[0]) != 4)):
        return None, f"input shape {x_shape}: the BDC path takes 4-D NCHW tensors"
    if node.inputs[0] in consts:
        return None, "its input is a constant"
    x = node.inputs[0]
    if op == "Relu":
        return relu(node.name, x), "BDC relu"
    if op == "Clip":
        if p.runtime_bounds:
            return None, "its bounds are not constants"
        low = None if p.alpha == -np.inf else p.alpha
        high = None if p.beta == np.inf else p.beta
        if low is None and high is None:
            return None, "no bounds: nothing to compute"
        return Layer(node.name, "clip", (x,), dict(low=low, high=high)), "BDC max / min with constants"
    if op == "Add":
        if len(node.inputs) != 2 or node.inputs[1] in consts or step.in_shapes[1] != x_shape:
            return None, "adds a constant or broadcasts: the BDC add takes two tensors of one shape"
        return add(node.name, x, node.inputs[1]), "BDC add"
    if op == "GlobalAveragePool":
        return avg_pool(node.name, x, tuple(x_shape[2:]), 1), "BDC average pool over the whole image"
    if op == "Conv":
        w = consts.get(node.inputs[1])
        b = consts.get(node.inputs[2]) if p.has_bias else None
        pad = (p.begin[0], p.end[0], p.begin[1], p.end[1])
        if p.depthwise and p.multiplier == 1:
            return Layer(node.name, "depthwise", (x,), dict(weight=np.asarray(w, np.float32), bias=b,
                                                            padding=pad, stride=p.strides,
                                                            dilation=p.dilations)), \
                "BDC depthwise convolution"
        if p.group != 1:
            return None, f"group = {p.group}: only ungrouped and depthwise convolutions have BDC instructions"
        return conv(node.name, x, w, b, p.strides, pad, p.dilations), "conv"
    if p.dilations != (1, 1):
        return None, "dilated pooling: the BDC pool has no dilation"
    # ceil mode: the last windows reach past the end padding; extend it (never counted)
    pad = (p.begin[0], p.end[0] + p.extra[0], p.begin[1], p.end[1] + p.extra[1])
    if op == "AveragePool":
        if any(p.extra) or (any(pad) and not p.count_include_pad):
            return None, ("average over part of a window (padding not counted): the BDC pool "
                          "divides by the whole window")
        return avg_pool(node.name, x, p.kernel, p.strides, pad), "BDC average pool"
    return max_pool(node.name, x, p.kernel, p.strides, pad), \
        "BDC max pool" + (" (ceil mode as end padding)" if any(p.extra) else "")


def _gemm_layer(step, consts):
    """Gemm ``A @ B + C`` with constant B and C (alpha = beta = 1, A not transposed), or ``(None, why)``."""
    node, p = step.node, step.node.params
    if p.alpha != 1.0 or p.beta != 1.0 or p.trans_a:
        return None, "alpha, beta or transA: the BDC matmul computes A @ B + bias"
    a_shape = step.in_shapes[0]
    if a_shape is None or len(a_shape) != 2 or node.inputs[0] in consts:
        return None, "A must be a 2-D tensor"
    w = consts.get(node.inputs[1])
    c = consts.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if w is None or (len(node.inputs) > 2 and node.inputs[2] and c is None):
        return None, "B or C is not a constant"
    w = np.asarray(w, np.float32)
    w = w.T if p.trans_b else w
    n = w.shape[1]
    if c is not None and np.asarray(c).size != n:
        return None, f"C of shape {np.asarray(c).shape} broadcasts over rows: the BDC bias is one row of {n}"
    bias = None if c is None else np.asarray(c, np.float32).reshape(1, n)
    return Layer(node.name, "matmul", (node.inputs[0],), dict(weight=np.ascontiguousarray(w), bias=bias)), \
        "BDC matmul in the matrix layout"


def _matmul(layer, a):
    """``a @ weight + bias`` on the simulator: matrices in by GDMA, one ``okk_bdc_matmul``, out by GDMA."""
    from . import bdc
    from .memory import LocalMemory
    from .tensor import matrix_layout

    w, b = layer.params["weight"], layer.params["bias"]
    m, k = a.shape
    n = w.shape[1]
    lw, rw = -(-k // BM1684.npus), -(-n // BM1684.npus)
    at = 0
    tensors = []
    for rows, cols, cpc in ((m, k, lw), (k, n, rw), (1, n, rw), (m, n, rw)):
        t = matrix_layout(BM1684, at, rows, cols, cpc)
        tensors.append(t)
        at = -(-t.end_offset // 128) * 128
    if at >= BM1684.lmem_bytes:
        raise FootprintError(f"layer {layer.name!r}: matrices {m}x{k} @ {k}x{n} do not fit one NPU's local memory")
    lt, rt, bt, ot = tensors
    sys_a, sys_w = 0, 4 * m * k
    sys_b = sys_w + 4 * k * n
    sys_y = sys_b + 4 * n
    mem = LocalMemory(BM1684, system_bytes=sys_y + 4 * m * n, backend="cmodel")
    for addr, arr, t, cpc in ((sys_a, a, lt, lw), (sys_w, w, rt, rw), (sys_b, b, bt, rw)):
        if arr is not None:
            mem.write_system(addr, np.ascontiguousarray(arr, np.float32).reshape((1, 1) + arr.shape))
            mem.gdma_matrix_s2l(t.address, addr, arr.shape[0], arr.shape[1], cpc, "fp32")
    bdc.matmul(mem, ot, lt, rt, None if b is None else bt)
    mem.gdma_matrix_l2s(sys_y, ot.address, m, n, rw, "fp32")
    return mem.read_system(sys_y, (1, 1, m, n), "fp32")[0, 0]


def run_onnx(model, x):
    """Run an ONNX model with the BDC-expressible nodes on the BM1684 simulator, the rest on the host.

    ``model`` is a :class:`tensorlayout.model.Model`, a path or ONNX bytes; ``x`` its one float32
    input. Nodes run in the model's order: Conv (with its bias, BatchNormalization folded in)
    through the layer planner; depthwise Conv, Relu, Clip, MaxPool, AveragePool,
    GlobalAveragePool and same-shape Add one image at a time as GDMA load, BDC instruction, GDMA
    store; everything else (and the cases the instructions cannot compute exactly, such as grouped
    convolutions or averages that leave padding out of the divisor) with the model's own
    NumPy kernels. Gemm with constant weights (alpha = beta = 1) runs as one BDC matmul in the
    matrix layout. Returns the output and one dict per node: ``name``, ``op``, ``where``
    (``"npu"`` or ``"host"``), ``why`` and ``shape``.

    >>> import numpy as np
    >>> from tensorlayout.model import load, zoo
    >>> m = load(zoo.tiny_onnx())
    >>> x = np.random.default_rng(0).standard_normal((1, 3, 16, 16), dtype=np.float32)
    >>> y, report = run_onnx(m, x)
    >>> [(r["op"], r["where"]) for r in report][:4]
    [('Conv', 'npu'), ('Relu', 'npu'), ('MaxPool', 'npu'), ('Conv', 'npu')]
    >>> [(r["op"], r["where"]) for r in report][-2:]
    [('Flatten', 'host'), ('Gemm', 'npu')]
    >>> ref = m.run(x)
    >>> bool(np.abs(y - ref).max() / np.abs(ref).max() < 1e-5)
    True
    """
    from ..backends.cpu import run_step
    from ..errors import ModelError
    from ..model import Model, load
    from .planner import plan_conv, run_conv_plan

    if not isinstance(model, Model):
        model = load(model)
    if len(model.inputs) != 1:
        raise ModelError(f"the model takes {len(model.inputs)} inputs: run_onnx runs one-input models")
    values = dict(model.consts)
    values.update(model.feeds((x,), {}))
    report = []
    for st in model.steps:
        node = st.node
        ins = [values[n] if n else None for n in node.inputs]
        layer, why = _onnx_layer(st, model.consts)
        entry = {"name": node.name, "op": node.op}
        y = None
        if layer is not None and any(a.dtype != np.float32 for a in ins[:len(layer.inputs)]):
            layer, why = None, f"dtype {next(a.dtype for a in ins if a.dtype != np.float32)}: the BDC path is fp32"
        if layer is not None:
            try:
                if layer.op == "conv":
                    p = layer.params
                    w = p["weight"]
                    plan = plan_conv(ins[0].shape, w.shape[0], w.shape[2:], p["stride"], p["padding"],
                                     p["dilation"], bias=p["bias"] is not None)
                    y = run_conv_plan(plan, ins[0], w, p["bias"])
                    why = f"planner, {plan.slices_count} slice(s), GDMA {plan.gdma_bytes} bytes"
                elif layer.op == "matmul":
                    y = _matmul(layer, np.ascontiguousarray(ins[0], np.float32))
                else:
                    arrays = [np.ascontiguousarray(a, np.float32) for a in ins[:len(layer.inputs)]]
                    if arrays[0].ndim != 4:
                        arrays = [a.reshape(1, -1, 1, 1) for a in arrays]
                    y = _per_image(layer, arrays)
            except LayoutError as exc:  # an instruction limit: say which, run on the host
                y, why = None, f"host fallback: {str(exc).splitlines()[0]}"
        if y is not None:
            outs = [y.reshape(st.out_shapes[0])]
            entry.update(where="npu", why=why)
        else:
            outs = run_step(node, st, ins, None, " on the host")
            entry.update(where="host", why=why)
        for name, value in zip(node.outputs, outs):
            if name:
                values[name] = value
        entry["shape"] = tuple(outs[0].shape)
        report.append(entry)
    results = [values[n] for n in model.outputs]
    return (results[0] if len(results) == 1 else results), report
