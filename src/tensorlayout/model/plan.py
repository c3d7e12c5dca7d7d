"""The layout plan of a whole network: every tensor's image, the peak memory, NPU placement.

For each tensor of a loaded :class:`~tensorlayout.model.Model` (activations and weights) the
plan gives its CPU buffer format, MACE image type and size, bytes in float32 and float16,
padding waste and whether it fits the device's image limits.  Every figure comes from the
per-tensor functions (:func:`tensorlayout.image_layout`, :func:`tensorlayout.image_shape`,
:func:`tensorlayout.image.check_image_limits`, :func:`tensorlayout.npu.tensor_layout`).

Which image a tensor gets:

* activations (inputs, layer outputs): IN_OUT_CHANNEL of the NCHW tensor; a tensor of rank
  below 4 is read as NCHW with trailing 1s, (N, C) -> (N, C, 1, 1); rank 5 and more has no
  image (marked);
* convolution weights: WINOGRAD_FILTER with the layer's tile where the layer runs Winograd
  F(m, 3) with m in 2, 4, 6; DW_CONV2D_FILTER (MIHW, M = O / C) for depthwise layers;
  CONV2D_FILTER (OIHW) otherwise;
* fully connected weights (Gemm, MatMul by a constant): WEIGHT_WIDTH of (O, I, 1, 1);
* biases and other 1-D constants: ARGUMENT; other float constants as activations.
  Integer constants (shape arguments) stay on the host and are not listed.

Peak image memory: activation images live from the layer that writes them to their last
reader (graph outputs to the end), the way MACE's memory optimizer frees and reuses them;
the peak is the largest sum of live images over the layers, next to the sum of all of them.

NPU placement (``chip``): per layer, its activation inputs and its output in the aligned
layout from NPU 0, convolution weights as [I, O, KH, KW] in the 2IC mode (compact),
depthwise weights as (1, C, KH, KW), fully connected weights as (1, O, 1, I) and biases as
(1, O, 1, 1), compact; the layer's working set is the sum of their spans in the fullest NPU,
each rounded up to the chip's alignment, against one NPU's local memory.

>>> from tensorlayout.model import load, zoo
>>> p = plan_model(load(zoo.tiny_onnx()))
>>> row = p.tensor("d")                      # the MaxPool output, (1, 16, 8, 8)
>>> row["image_type"], row["image"], row["bytes_f32"]
('IN_OUT_CHANNEL', [32, 8], 4096)
>>> p.tensor("c2.w")["image_type"], p.tensor("c2.w")["tile"]       # conv2 runs F(2,3)
('WINOGRAD_FILTER', 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import DeviceLimitError, LayoutError, ModelError
from ..image import (DEFAULT_MAX_IMAGE_SIZE, buffer_format, check_image_limits, image_layout,
                     image_shape)
from ..npu import CHIPS, Chip, get_chip, tensor_layout
from ..schedule import VIEWS, cpu_conv

__all__ = ["plan_model", "ModelPlan", "tensor_image"]

_FC = ("Gemm", "MatMul")


def _as4(shape):
    shape = tuple(shape)
    if len(shape) == 0:
        return (1, 1, 1, 1)
    if len(shape) == 1:
        return (1, shape[0], 1, 1)
    return shape + (1,) * (4 - len(shape))


def tensor_image(kind: str, shape, tile=None, channels=None):
    """``(image_type, buffer_shape, kwargs)`` of a tensor in the plan's rules, or None when it
    has no image.  ``kind``: 'activation', 'conv', 'winograd' (with the layer's ``tile``),
    'depthwise' (with the layer's input ``channels``), 'fc', 'bias'.

    >>> tensor_image("activation", (1, 10))
    ('IN_OUT_CHANNEL', (1, 10, 1, 1), {'layout': 'NCHW'})
    >>> tensor_image("depthwise", (32, 1, 3, 3), channels=32)[:2]   # M = 1, C = 32: MIHW
    ('DW_CONV2D_FILTER', (1, 32, 3, 3))
    """
    shape = tuple(int(d) for d in shape)
    if kind == "bias":
        return "ARGUMENT", (int(np.prod(shape)),), {}
    if kind == "winograd":
        return "WINOGRAD_FILTER", shape, {"tile": tile}
    if kind == "conv":
        return "CONV2D_FILTER", shape, {}
    if kind == "depthwise":
        o, _, kh, kw = shape
        return "DW_CONV2D_FILTER", (o // channels, channels, kh, kw), {}
    if kind == "fc":
        return "WEIGHT_WIDTH", (shape[0], shape[1], 1, 1), {}
    if len(shape) > 4:
        return None
    return "IN_OUT_CHANNEL", _as4(shape), {"layout": "NCHW"}


@dataclass
class ModelPlan:
    """The plan: ``tensors`` (dict rows), ``layers`` (NPU rows, with a chip), the memory
    figures and the limits it was made for.  :meth:`as_dict` is what ``--json`` prints."""

    model: str
    max_image: tuple
    limits_from: str
    tensors: list
    steps: list
    live_f32: list
    live_f16: list
    chip: object = None
    layers: list = field(default_factory=list)

    def tensor(self, name: str) -> dict:
        for r in self.tensors:
            if r["name"] == name:
                return r
        raise ModelError(f"tensor {name!r} is not in the plan")

    @property
    def activations(self):
        return [r for r in self.tensors if r["role"] in ("input", "activation", "output")]

    def memory(self) -> dict:
        acts = [r for r in self.activations if r["image"] is not None]
        weights = [r for r in self.tensors if r["role"] in ("weight", "bias", "constant")
                   and r["image"] is not None]
        peak = int(np.argmax(self.live_f32)) if self.live_f32 else 0
        return {
            "peak_f32": int(max(self.live_f32, default=0)),
            "peak_f16": int(max(self.live_f16, default=0)),
            "peak_layer": self.steps[peak] if self.steps else None,
            "sum_f32": int(sum(r["bytes_f32"] for r in acts)),
            "sum_f16": int(sum(r["bytes_f16"] for r in acts)),
            "weights_f32": int(sum(r["bytes_f32"] for r in weights)),
            "weights_f16": int(sum(r["bytes_f16"] for r in weights)),
        }

    def problems(self) -> list:
        out = [f"tensor {r['name']}: {r['problem']}" for r in self.tensors if r["problem"]]
        out += [f"layer {r['layer']}: working set {r['working_set']} bytes > {r['lmem_bytes']} "
                "bytes of one NPU" for r in self.layers if not r["fits"]]
        return out

    def as_dict(self) -> dict:
        return {"model": self.model, "max_image": list(self.max_image),
                "limits_from": self.limits_from, "tensors": self.tensors,
                "memory": self.memory(), "live_bytes_f32": self.live_f32,
                "layers_in_order": self.steps,
                "chip": None if self.chip is None else {
                    "name": self.chip.name, "npus": self.chip.npus,
                    "lmem_bytes": self.chip.lmem_bytes, "align_bytes": self.chip.align_bytes},
                "npu_layers": self.layers}


def _image_row(name, role, shape, kind, tile, max_image, producer, last_reader, dtype="float32"):
    row = {"name": name, "role": role, "shape": list(shape), "dtype": dtype, "buffer": None,
           "image_type": None, "buffer_shape": None, "image": None, "bytes_f32": 0,
           "bytes_f16": 0, "waste": None, "fits": None, "problem": None,
           "producer": producer, "last_reader": last_reader}
    got = (tensor_image(kind, shape, channels=tile) if kind == "depthwise"
           else tensor_image(kind, shape, tile))
    if got is None:
        row["problem"] = f"rank {len(shape)}: MACE images hold tensors of rank 4 or less"
        row["buffer"] = "ND"
        return row
    itype, bshape, kw = got
    lay = image_layout(itype, bshape, **kw)
    w, h = image_shape(itype, bshape, **kw)
    fmt = buffer_format(itype, layout=kw.get("layout"))
    row.update(buffer=fmt, image_type=itype, buffer_shape=list(bshape),
               image=[w, h], bytes_f32=w * h * 4 * 4, bytes_f16=w * h * 4 * 2,
               waste=float(lay.padding_waste), fits=True)
    if kw.get("tile"):
        row["tile"] = kw["tile"]
    try:
        check_image_limits(w, h, max_image)
    except DeviceLimitError as exc:
        row["fits"] = False
        row["problem"] = str(exc)
    return row


def _device_limits(device):
    from ..opencl import get_context

    ctx = get_context(device)
    return tuple(ctx.info.max_image_size), f"OpenCL device {ctx.info.name!r}"


def plan_model(model, max_image=None, device=None, chip=None) -> ModelPlan:
    """Plan every tensor of ``model`` (a :class:`~tensorlayout.model.Model`).

    ``max_image``: (max width, max height) of an image (default 16384 x 16384, many mobile
    GPUs); ``device``: read them from this OpenCL device instead; ``chip``: a
    :class:`~tensorlayout.npu.Chip` or the name of a preset (BM1684, BM1684X, BM1688) for the
    per-layer NPU placement.
    """
    if max_image is not None and device is not None:
        raise ModelError("max_image and device are both given: the limits come from one of them")
    if device is not None:
        max_image, source = _device_limits(device)
    elif max_image is not None:
        max_image = tuple(max_image)
        if len(max_image) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                      or v < 1 for v in max_image):
            raise ModelError(f"max_image = {max_image!r} is not allowed: it must be two positive "
                             "integers W,H")
        source = "given"
    else:
        max_image, source = DEFAULT_MAX_IMAGE_SIZE, "default (many mobile GPUs)"
    max_image = tuple(int(v) for v in max_image)
    if chip is not None and not isinstance(chip, Chip):
        chip = get_chip(str(chip).upper()) if str(chip).upper() in CHIPS else get_chip(chip)

    graph = model.graph
    nodes = graph.nodes
    consts = graph.consts
    last = {}
    first_seen = {}
    for i, node in enumerate(nodes):
        for n in node.inputs:
            if n:
                last[n] = i
                first_seen.setdefault(n, i)
    rows = []
    # activations: inputs, then every layer output in order
    for name, shape in model.inputs.items():
        rows.append(_image_row(name, "input", shape, "activation", None, max_image, None,
                               _name_at(nodes, last.get(name))))
    weight_kind = {}
    for i, node in enumerate(nodes):
        op = node.op
        if op == "Conv":
            p = node.params
            w = consts[node.inputs[1]]
            if p.depthwise:
                weight_kind[node.inputs[1]] = ("depthwise", p.in_channels)
            else:
                algorithm, tile, _ = cpu_conv(graph, node)
                if algorithm == "winograd" and tile in (2, 4, 6) and tuple(w.shape[2:]) == (3, 3):
                    weight_kind[node.inputs[1]] = ("winograd", tile)
                else:
                    weight_kind[node.inputs[1]] = ("conv", None)
            if p.has_bias:
                weight_kind[node.inputs[2]] = ("bias", None)
        elif op in _FC and node.inputs[1] in consts and consts[node.inputs[1]].ndim == 2:
            weight_kind[node.inputs[1]] = ("fc", None)
            if op == "Gemm" and len(node.inputs) > 2 and node.inputs[2] in consts:
                weight_kind[node.inputs[2]] = ("bias", None)
        for name in node.outputs:
            if name:
                role = "output" if name in model.outputs else "activation"
                rows.append(_image_row(name, role, graph.shapes[name], "activation", None,
                                       max_image, node.name, _name_at(nodes, last.get(name))))
    # constants the layers read, in the order they are first read
    for name in sorted((n for n in first_seen if n in consts), key=lambda n: first_seen[n]):
        arr = consts[name]
        if arr.dtype.kind != "f":
            continue
        kind, tile = weight_kind.get(name, ("bias" if arr.ndim == 1 else "activation", None))
        shape = arr.shape
        if kind == "fc":
            node = nodes[first_seen[name]]
            trans = node.op == "Gemm" and node.params.trans_b
            shape = arr.shape if trans else arr.shape[::-1]      # (O, I)
        role = {"bias": "bias", "activation": "constant"}.get(kind, "weight")
        rows.append(_image_row(name, role, shape, kind, tile, max_image,
                               None, _name_at(nodes, last.get(name))))
    live32, live16 = _live_bytes(model, rows)
    plan = ModelPlan(model.label, max_image, source, rows, [n.name for n in nodes],
                     live32, live16, chip)
    if chip is not None:
        plan.layers = _npu_layers(model, chip, weight_kind)
    return plan


def _name_at(nodes, i):
    return None if i is None else nodes[i].name


def _live_bytes(model, rows):
    """Bytes of the activation images live while each layer runs (f32, f16)."""
    index = {node.name: i for i, node in enumerate(model.graph.nodes)}
    n = len(index)
    live32, live16 = [0] * n, [0] * n
    for r in rows:
        if r["role"] not in ("input", "activation", "output") or r["image"] is None:
            continue
        start = 0 if r["producer"] is None else index[r["producer"]]
        end = n - 1 if r["role"] == "output" else (
            start if r["last_reader"] is None else index[r["last_reader"]])
        for i in range(start, end + 1):
            live32[i] += r["bytes_f32"]
            live16[i] += r["bytes_f16"]
    return live32, live16


def _virtual(chip: Chip) -> Chip:
    # the same NPUs and alignment with room for any tensor: placements are computed, then
    # compared with the real local memory
    return Chip(chip.npus, 1 << 40, chip.align_bytes, chip.name)


def _place(vchip, shape, mode=None, layout="aligned"):
    t = tensor_layout(vchip, 0, _as4(shape), dtype="fp32", mode=mode, layout=layout)
    return {"shape": list(_as4(shape)), "layout": layout + (f" {mode}" if mode else ""),
            "channels_per_npu": int(t.channels_per_npu), "bytes_per_npu": int(t.span),
            "bytes_fullest_npu_data": int(t.bytes_per_npu().max())}


def _round_up(v, a):
    return -(-v // a) * a


def _npu_layers(model, chip, weight_kind):
    vchip = _virtual(chip)
    consts = model.consts
    out = []
    graph = model.graph
    for node in graph.nodes:
        if node.op in VIEWS:
            continue
        ins, weights, outs = [], [], []
        try:
            for name in node.inputs:
                shape = graph.shapes.get(name) if name else None
                if not name or shape is None or len(shape) > 4:
                    continue
                if name in consts:
                    arr = consts[name]
                    if arr.dtype.kind != "f":
                        continue
                    kind = weight_kind.get(name, (None, None))[0]
                    if kind in ("conv", "winograd"):
                        o, i, kh, kw = arr.shape
                        p = _place(vchip, (i, o, kh, kw), mode="2IC", layout="compact")
                    elif kind == "depthwise":
                        p = _place(vchip, (1, arr.shape[0], arr.shape[2], arr.shape[3]),
                                   layout="compact")
                    elif kind == "fc":
                        trans = node.op == "Gemm" and node.params.trans_b
                        o, i = arr.shape if trans else arr.shape[::-1]
                        p = _place(vchip, (1, o, 1, i), layout="compact")
                    else:
                        p = _place(vchip, (1, int(arr.size), 1, 1), layout="compact")
                    p["name"] = name
                    weights.append(p)
                else:
                    p = _place(vchip, shape)
                    p["name"] = name
                    ins.append(p)
            for name in node.outputs:
                shape = graph.shapes.get(name) if name else None
                if name and shape is not None and len(shape) <= 4:
                    p = _place(vchip, shape)
                    p["name"] = name
                    outs.append(p)
        except LayoutError as exc:
            raise ModelError(f"node {node.name!r} ({node.op}): NPU placement failed: {exc}") from None
        ws = sum(_round_up(p["bytes_per_npu"], chip.align_bytes) for p in ins + weights + outs)
        out.append({"layer": node.name, "op": node.op, "inputs": ins, "weights": weights,
                    "outputs": outs, "working_set": int(ws), "lmem_bytes": chip.lmem_bytes,
                    "fits": ws <= chip.lmem_bytes})
    return out
