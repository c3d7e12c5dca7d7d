"""The layout plan of a whole network: a view of its schedules.

:func:`plan_model` asks the image schedule (:func:`tensorlayout.schedule.schedule_images`)
for the network, with the device's limits given as data, and reads it out: per tensor, the
CPU runtime's layout (NCHW, or NCHW16c where :func:`tensorlayout.schedule.cpu.blocked_tensors`
blocks it), its CPU buffer format, MACE image type and size (activations IN_OUT_CHANNEL; weights the type
their layer's kernel reads: WINOGRAD_FILTER with the layer's tile, CONV2D_FILTER,
DW_CONV2D_FILTER, WEIGHT_WIDTH, ARGUMENT), bytes, padding waste and whether it fits; every
image the network allocates (:meth:`ModelPlan.images`, the same list an
:class:`~tensorlayout.model.OpenCLSession` of the same limits and dtype allocates); the
memory those images take with reuse; and, with a chip, each layer's placement in NPU local
memory and layer groups (:func:`tensorlayout.schedule.npu.schedule_npu`).  Problems (an op images lack, an image
past the limits) are listed, not raised.

>>> from tensorlayout.model import load, zoo
>>> p = plan_model(load(zoo.tiny_onnx()))
>>> row = p.tensor("d")                      # the MaxPool output, (1, 16, 8, 8)
>>> row["image_type"], row["image"], row["bytes_f32"]
('IN_OUT_CHANNEL', [32, 8], 4096)
>>> p.tensor("c2.w")["image_type"], p.tensor("c2.w")["tile"]   # conv2's 8 x 8 output: F(4,3)
('WINOGRAD_FILTER', 4)
>>> p.tensor("b")["image"], p.tensor("b")["note"]    # conv1's output: its Relu is fused
(None, 'fused: layer conv1 writes relu1 into c')
>>> p.tensor("d")["cpu"]       # the CPU runtime's layout (NCHW16c where its schedule blocks it)
'NCHW16c'
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ModelError
from ..image import buffer_format, image_layout, image_shape
from ..npu import CHIPS, Chip, get_chip
from ..schedule import ImageTarget, schedule_images
from ..schedule.images import Act, Virtual
from ..schedule.cpu import schedule_cpu
from ..schedule.npu import as4, schedule_npu

__all__ = ["plan_model", "ModelPlan"]


@dataclass
class ModelPlan:
    """The plan: ``tensors`` (dict rows), ``layers`` (NPU rows, with a chip), the image
    schedule it reads (``schedule``), and the limits it was made for.  :meth:`as_dict` is
    what ``--json`` prints."""

    model: str
    max_image: tuple
    limits_from: str
    dtype: str
    schedule: object = field(repr=False)
    tensors: list = field(default_factory=list)
    chip: object = None
    layers: list = field(default_factory=list)
    npu: object = field(default=None, repr=False)    # the NPU schedule, with a chip

    @property
    def steps(self) -> list:
        """The image layers' names, in order."""
        return [layer.name for layer in self.schedule.layers]

    @property
    def live(self) -> list:
        """Bytes of the activation and temporary images live while each layer runs."""
        return self.schedule.live

    def tensor(self, name: str) -> dict:
        for r in self.tensors:
            if r["name"] == name:
                return r
        raise ModelError(f"tensor {name!r} is not in the plan")

    @property
    def activations(self):
        return [r for r in self.tensors if r["role"] in ("input", "activation", "output")]

    def images(self) -> list:
        """Every image the network takes (:meth:`~tensorlayout.schedule.images.ImageSchedule.images`)."""
        return self.schedule.images()

    def memory(self) -> dict:
        """``peak_image_bytes``: the activation and temporary images as allocated (each shared
        block once); ``live_peak_bytes``: the most live at one layer (``peak_layer``);
        ``weight_bytes``; all in the plan's ``dtype``."""
        live = self.schedule.live
        peak = int(np.argmax(live)) if live else 0
        return {"dtype": self.dtype, "peak_image_bytes": self.schedule.peak_image_bytes,
                "live_peak_bytes": int(max(live, default=0)),
                "peak_layer": self.steps[peak] if live else None,
                "weight_bytes": self.schedule.weight_bytes}

    def problems(self) -> list:
        out = list(self.schedule.problems)
        out += [f"layer {r['layer']}: working set {r['working_set']} bytes > {r['lmem_bytes']} "
                "bytes of one NPU" for r in self.layers if not r["fits"]]
        return out

    def as_dict(self) -> dict:
        return {"model": self.model, "max_image": list(self.max_image),
                "limits_from": self.limits_from, "dtype": self.dtype, "tensors": self.tensors,
                "images": self.images(), "peak_image_bytes": self.schedule.peak_image_bytes,
                "memory": self.memory(), "live_bytes": self.live, "layers_in_order": self.steps,
                "fallbacks": list(self.schedule.fallbacks),
                "chip": None if self.chip is None else {
                    "name": self.chip.name, "npus": self.chip.npus,
                    "lmem_bytes": self.chip.lmem_bytes, "align_bytes": self.chip.align_bytes},
                "npu_layers": self.layers,
                "npu_groups": None if self.npu is None else self.npu.group_rows(),
                "npu_gdma": None if self.npu is None else self.npu.gdma_bytes()}


def _row(name, role, shape, dtype, producer, last_reader):
    return {"name": name, "role": role, "shape": list(shape), "dtype": dtype, "cpu": None,
            "buffer": None,
            "image_type": None, "buffer_shape": None, "image": None, "bytes_f32": 0,
            "bytes_f16": 0, "waste": None, "fits": None, "note": None,
            "producer": producer, "last_reader": last_reader}


def _with_image(row, itype, bshape, size, fits, **kw):
    lay = image_layout(itype, tuple(bshape), **kw)
    w, h = size
    row.update(buffer=buffer_format(itype, layout=kw.get("layout"),
                                    filter_format=kw.get("filter_format")), image_type=itype,
               buffer_shape=list(bshape), image=[int(w), int(h)], bytes_f32=int(w * h * 16),
               bytes_f16=int(w * h * 8), waste=float(lay.padding_waste), fits=bool(fits))
    if kw.get("tile"):
        row["tile"] = kw["tile"]
    return row


def _activation_row(s, row, name, fused_into):
    """The row of an activation from the schedule: its IN_OUT_CHANNEL image, or why it has none."""
    t = s.acts.get(name)
    shape = tuple(row["shape"])
    if t is None:
        row["note"] = fused_into.get(name) or "not computed on images (see problems)"
        return row
    if isinstance(t, Virtual):
        row["note"] = f"moved by {t.node.name} ({t.node.op}): no image of its own; read where used"
        return row
    if t.slot[:2] != ("act", name):
        row["note"] = f"the same image as {s.names[t.slot].split('[')[0]}"
        return row
    if len(shape) > 4 or len(shape) == 3:
        row["note"] = f"rank {len(shape)}: images hold 4-D or 2-D tensors"
        return row
    keys = t.slots()
    fits = all(s.slots[k][0] <= s.target.max_image[0] and s.slots[k][1] <= s.target.max_image[1]
               for k in keys)
    nchw = as4(shape)
    _with_image(row, "IN_OUT_CHANNEL", nchw, image_shape("IN_OUT_CHANNEL", nchw, layout="NCHW"),
                fits, layout="NCHW")
    if t.parts:
        row["note"] = f"held as {len(t.parts)} images of {s.part} channels"
    elif s.group != s.batch:
        row["note"] = f"held as {s.batch // s.group} images of {s.group} batch items"
    return row


def plan_model(model, max_image=None, device=None, chip=None, half=False, winograd="auto",
               gpu=True) -> ModelPlan:
    """Plan every tensor of ``model`` (a :class:`~tensorlayout.model.Model`) on images.

    ``max_image``: (max width, max height) of an image (default 16384 x 16384, many mobile
    GPUs); ``device``: read the limits (and whether it is a GPU) from this OpenCL device
    instead; ``half``: float16 images; ``winograd``: as :class:`~tensorlayout.model.OpenCLSession`
    takes it; ``gpu``: plan for a GPU (long sums split over channel slices) or a CPU device;
    ``chip``: a :class:`~tensorlayout.npu.Chip` or the name of a preset (BM1684, BM1684X,
    BM1688) for the per-layer NPU placement.
    """
    from ._model import Model

    if not isinstance(model, Model):
        raise ModelError(f"model = {type(model).__name__} is not allowed: give a loaded "
                         "tensorlayout.model.Model (tensorlayout.model.load(path))")
    if max_image is not None and device is not None:
        raise ModelError("max_image and device are both given: the limits come from one of them")
    if device is not None:
        from ..backends.opencl import target_of
        from ..opencl import get_context

        target = target_of(get_context(device), half, winograd)
    else:
        if max_image is not None and (isinstance(max_image, (str, bytes)) or
                                      not hasattr(max_image, "__len__")):
            raise ModelError(f"max_image = {max_image!r} is not allowed: it must be two positive "
                             "integers W,H")
        target = ImageTarget(*(() if max_image is None else (tuple(max_image),)), gpu=bool(gpu),
                             half=bool(half), winograd=winograd,
                             name="given" if max_image is not None else "default (many mobile GPUs)")
    if chip is not None and not isinstance(chip, Chip):
        chip = get_chip(str(chip).upper()) if str(chip).upper() in CHIPS else get_chip(chip)
    graph = model.graph
    s = schedule_images(graph, target, strict=False)
    readers = graph.readers()
    layer_of = {}
    fused_into = {}
    for layer in s.layers:
        layer_of.setdefault(layer.name, layer.name)
        for f in layer.fused:
            op, name = f.split(" ", 1)
            node = graph.node(name)
            layer_of[name] = layer.name
            fused_into[node.inputs[0]] = (f"fused: layer {layer.name} writes {name} into "
                                          f"{node.outputs[0]}")
    last = {}
    for name, nodes in readers.items():
        last[name] = layer_of.get(nodes[-1].name, nodes[-1].name)
    rows = []
    for name, shape in graph.inputs.items():
        r = _row(name, "input", shape, graph.input_dtypes[name].name, None, last.get(name))
        rows.append(_activation_row(s, r, name, fused_into))
    for node in graph.nodes:
        for name in node.outputs:
            if not name:
                continue
            role = "output" if name in graph.outputs else "activation"
            dt = graph.dtypes.get(name)
            r = _row(name, role, graph.shapes.get(name, ()), dt.name if dt is not None else "?",
                     layer_of.get(node.name, node.name), last.get(name))
            rows.append(_activation_row(s, r, name, fused_into))
    reader = {n: la.name for la in s.layers for n, _, _ in la.weights}
    for key, w in s.weights.items():
        role = "bias" if w.image_type == "ARGUMENT" else "weight"
        r = _row(w.name, role, w.array.shape, "float32", None, reader[w.name])
        fits = w.size[0] <= target.max_image[0] and w.size[1] <= target.max_image[1]
        rows.append(_with_image(r, w.image_type, w.array.shape, w.size, fits, **w.kw))
    # the CPU runtime's layout of each tensor it holds (none for one fused into its step):
    # NCHW16c where its schedule blocks it
    cpu = schedule_cpu(graph)
    held = set(graph.inputs) | {o for st in cpu.steps for o in st.writes if o}
    for r in rows:
        if r["role"] in ("input", "activation", "output") and r["name"] in held:
            r["cpu"] = ("NCHW16c" if r["name"] in cpu.blocked else
                        "NCHW" if len(r["shape"]) == 4 else "row-major")
    plan = ModelPlan(model.label, target.max_image, target.name, target.dtype.name, s, rows, chip)
    if chip is not None:
        plan.npu = schedule_npu(graph, chip)
        plan.layers = plan.npu.rows()
    return plan
