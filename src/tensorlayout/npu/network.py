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
           "run_on_simulator", "run_reference", "run_bdc"]

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


def run_bdc(mem, op, args, ins, out, weight=None, bias=None):
    """One BDC instruction of the per-image ops on placed tensors: ``op`` "relu", "add",
    "clip" (``args`` low / high), "max_pool" / "avg_pool" (kernel, padding, stride) or
    "depthwise" (padding, stride, dilation; ``weight`` and ``bias`` placed compact)."""
    from . import bdc

    if op == "relu":
        bdc.relu(mem, out, ins[0])
    elif op == "add":
        bdc.add(mem, out, ins[0], ins[1])
    elif op == "depthwise":
        bdc.depthwise2d(mem, out, ins[0], weight, bias, padding=args["padding"],
                        stride=args["stride"], dilation=args["dilation"])
    elif op == "clip":
        src = ins[0]
        if args["low"] is not None:
            src = bdc.maximum(mem, out, src, args["low"])
        if args["high"] is not None:
            bdc.minimum(mem, out, src, args["high"])
    elif op == "max_pool":
        bdc.max_pool2d(mem, out, ins[0], args["kernel"], args["padding"], args["stride"])
    else:
        bdc.avg_pool2d(mem, out, ins[0], args["kernel"], args["padding"], args["stride"])
    return out


def _per_image(layer, arrays):
    """relu / pooling / add on the simulator, one image at a time: GDMA loads, one BDC op, GDMA store."""
    from . import bdc
    from .memory import LocalMemory
    from .tensor import tensor_layout

    S, A = BM1684.lmem_bytes, BM1684.align_bytes
    x0 = arrays[0]
    n, c, h, w = x0.shape
    p = layer.params
    if layer.op in ("max_pool", "avg_pool"):
        out_shape = bdc.pool_output_shape((1, c, h, w), p["kernel"], p["padding"], p["stride"])
    else:
        out_shape = (1, c, h, w)
    ins = [tensor_layout(BM1684, 0, (1, c, h, w))]
    if layer.op == "add":
        ins.append(tensor_layout(BM1684, -(-ins[0].end_offset // A) * A, (1, c, h, w)))
    out_at = -(-ins[-1].end_offset // A) * A
    if out_at >= S:
        raise FootprintError(f"layer {layer.name!r}: one image {(1, c, h, w)} does not fit one NPU's local memory")
    out = tensor_layout(BM1684, out_at, out_shape)
    result = np.empty((n,) + out_shape[1:], np.float32)
    img = c * h * w * 4
    mem = LocalMemory(BM1684, system_bytes=2 * img + 4 * int(np.prod(out_shape)), backend="cmodel")
    for i in range(n):
        for j, (t, a) in enumerate(zip(ins, arrays)):
            mem.write_system(j * img, np.ascontiguousarray(a[i:i + 1], np.float32))
            mem.gdma_s2l(t.address, j * img, t.shape, "fp32")
        run_bdc(mem, layer.op, p, ins, out)
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
