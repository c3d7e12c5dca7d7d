"""A whole ONNX network on OpenCL images, prepared once, the way MACE's GPU runtime runs it.

:class:`OpenCLSession` takes a loaded :class:`tensorlayout.model.Model` (or a path) and
prepares everything once: the weights go into their MACE image types, the programs are
built, every activation gets an IN_OUT_CHANNEL image (reused once its last reader has
run), and each kernel gets its arguments and work sizes.  :meth:`OpenCLSession.run` then
only uploads the input, enqueues the kernels and reads the output back.

Weights and the image type each gets:

* Conv, group 1: CONV2D_FILTER (OIHW), or WINOGRAD_FILTER for the 3x3 stride-1 layers that
  run Winograd; depthwise (group = C = O): DW_CONV2D_FILTER; other groups: CONV2D_FILTER of
  (O, C / group, KH, KW).
* Biases and per-channel constants: ARGUMENT.
* Gemm / MatMul with a constant weight: WEIGHT_WIDTH, as MACE's fully connected layer does.
  Its pixel holds four consecutive input channels at one (h, w), the same four the
  input's IN_OUT_CHANNEL pixel holds, so a flattened (N, C, H, W) input is read in place
  (Flatten costs nothing) and each output takes one dot product per input pixel; and its
  width q(C)·H·W stays within the image limits where WEIGHT_HEIGHT's C·H·W would not
  (VGG-16's 25088 inputs: 6272 pixels wide against 25088).

Fused into the kernel that produces their input (when that tensor has no other reader):
Relu, Clip (ReLU6), LeakyRelu, Sigmoid, HardSwish, HardSigmoid, Tanh after Conv, Gemm /
MatMul and element-wise ops.  Moves of whole channels (Concat, Slice and Split along
channels, the Reshape-Transpose-Reshape channel shuffle, Flatten) are traced on channel
indices at load and become one ``gather_channels`` kernel, or nothing at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import math

import numpy as np

from .._checks import q as _q
from ..errors import DeviceLimitError, LayoutError, ModelError
from ..image import image_shape
from ._device import cl, get_context
from ..winograd.auto import image_mid_dtype as default_mid_dtype
from .conv import wino_source
from .tuning import round_up

__all__ = ["OpenCLSession", "NETWORK_OPS"]

_ACT = {"Relu": 1, "Clip": 2, "LeakyRelu": 3, "Sigmoid": 4, "HardSwish": 5, "HardSigmoid": 6,
        "Tanh": 7}
_BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5}
_MOVES = {"Reshape", "Transpose", "Slice", "Concat", "Split", "Flatten", "Squeeze",
          "Unsqueeze", "Identity", "Dropout"}
_COMPUTE = {"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
            "GlobalMaxPool", "ReduceMean", "Softmax", "Resize"}

#: The ONNX ops this runtime runs on images.
NETWORK_OPS = tuple(sorted(set(_ACT) | set(_BINARY) | _MOVES | _COMPUTE))

#: Work-group sizes on CPU devices, by the launch's number of dimensions.
_CPU_LOCAL = {2: (16, 4), 3: (4, 4, 4)}
# A direct convolution with fewer work-items than this splits its sums over slices of its
# input channels (conv2d_split + conv2d_sum), each slice at least 4 channel blocks long: on
# an H100 ResNet's stride-2 3x3 layers (256 -> 512 at 7x7: 1792 work-items of 2304 taps)
# left most of the GPU idle.  CPU devices have cores enough at any size: no split.
_SPLIT_ITEMS = {"GPU": 16384, "CPU": 0}
_GEMM_BLOCKS = ((4, 1), (8, 1), (8, 2))      # conv.cl's wino_matmul_{tiles}x{channel groups}
# A Winograd GEMM with at most half this many work-items (at 4 tiles each) splits its sums
# over slices of the input channels, each at least 8 channel blocks long, towards this many
# work-items (GPUs only, as above).  On an H100 a layer of 25k work-items (ResNet's 128
# channels at 28x28) got slower split: the output stage's second read cost what the GEMM saved.
_GEMM_SPLIT_ITEMS = {"GPU": 32768, "CPU": 0}

#: Winograd tiles tried, largest first, when a layer's images do not fit the device.
_TILE_FALLBACK = {6: (6, 4, 2), 4: (4, 2), 2: (2,)}


def _err(node, why):
    return ModelError(f"node {node.name!r} ({node.op}): {why}")


def _nhwc(shape):
    """The NHWC shape of the IN_OUT_CHANNEL image of an NCHW (or (N, C)) tensor, or None."""
    if len(shape) == 4:
        n, c, h, w = shape
        return (n, h, w, c)
    if len(shape) == 2:
        return (shape[0], 1, 1, shape[1])
    return None


def _nchw(shape):
    return (shape[0], shape[3], shape[1], shape[2])


def _full_nchw(t):
    """The NCHW shape of a device tensor over the whole batch (its image may hold a group)."""
    return (t.shape[0],) + _nchw(t.nhwc)[1:]


@dataclass
class _Act:
    """A tensor on the device: the image (``slot``) and its NHWC shape."""

    name: str
    nhwc: tuple
    shape: tuple                    # the ONNX shape
    slot: object = None             # key of its image in the memory plan
    base: int = -1                  # first id of its elements when moves are traced
    parts: list = None              # split by channels: [(c0, c1, _Act of those channels)]

    def slots(self):
        """The keys of its images: one, or one per part."""
        return [p.slot for _, _, p in self.parts] if self.parts else [self.slot]


@dataclass
class _Virtual:
    """A tensor made by moves only: for each element, the id of the device element it is."""

    name: str
    ids: np.ndarray
    node: object = None
    shape: tuple = ()


@dataclass
class _Launch:
    program: tuple                  # (source name, options, source text or None)
    kernel: str
    gsize: tuple
    args: list
    flops: float = 0.0
    nbytes: float = 0.0
    kobj: object = None
    lsize: object = None
    base_gsize: tuple = ()          # the work-items the kernel needs, before rounding up
    variants: tuple = ()            # other (kernel, global size) doing the same work
    kargs: list = None              # the arguments as set, with images resolved


@dataclass
class Layer:
    """One prepared layer: the nodes it covers, its kernels, what it chose and why."""

    name: str
    op: str
    kind: str
    fused: list = field(default_factory=list)
    launches: list = field(default_factory=list)
    weights: list = field(default_factory=list)     # (tensor, image type, [w, h])
    note: str = ""


class OpenCLSession:
    """Run an ONNX network with every activation in OpenCL images; prepared once.

    ``model``: a :class:`tensorlayout.model.Model`, or anything :func:`tensorlayout.model.load`
    takes.  ``device``: as :func:`tensorlayout.opencl.get_context`.  ``half``: float16
    images (CL_HALF_FLOAT) throughout, float32 arithmetic in the kernels.  ``winograd``:
    "auto" (tile 4 for 3x3 stride-1 layers with at least 16 input and output channels,
    tile 2 when the output is under 8 x 8), 0 for none, or a tile 2 / 4 / 6 for every
    such layer.  ``max_image``: (width, height) limits instead of the device's.  Where an
    image would not fit, a Winograd layer falls back to a smaller tile, then the direct
    kernel; activations too tall hold the batch in groups (the network runs once per group),
    too wide are held as one image per part of their channels (:attr:`fallbacks` lists each
    place).  ``tune``: pick each kernel's work-group size by timing (cached per device, see
    :mod:`tensorlayout.opencl.tuning`).

    >>> import numpy as np
    >>> from tensorlayout.model import load, zoo
    >>> from tensorlayout.opencl import OpenCLSession
    >>> m = load(zoo.tiny_onnx())
    >>> s = OpenCLSession(m)
    >>> x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    >>> y = s.run(x)
    >>> y.shape, bool(np.abs(y - m.run(x)).max() < 1e-4)
    ((1, 10), True)

    Under a 40-pixel width the first convolution's 16 channels at 16 columns ([64, 16]) are
    held as two images of 8 channels:

    >>> s = OpenCLSession(m, max_image=(40, 100))
    >>> s.fallbacks[0]
    "conv1: 'c' [64, 16] held as 2 images of 8 channels (width past the limit [40, 100])"
    >>> bool(np.abs(s.run(x) - m.run(x)).max() < 1e-4)
    True
    """

    def __init__(self, model, device=None, *, half=False, winograd="auto", max_image=None,
                 tune=False):
        from ..model import Model, load

        if not isinstance(model, Model):
            model = load(model)
        if winograd not in ("auto", 0, 2, 4, 6, None):
            raise LayoutError(f"winograd = {winograd!r} is not allowed: 'auto', 0 (none) or a "
                              "tile 2, 4 or 6")
        self.model = model
        self.cctx = get_context(device)
        self.queue = self.cctx.queue      # with profiling: loading, tuning, profiled runs
        # Plain runs go to a queue without profiling: on NVIDIA's driver an enqueue costs
        # about 6 us there and 11.5 us on a profiling queue (an H100, measured).
        self.run_queue = cl().CommandQueue(self.cctx.context, self.cctx.device)
        info = self.cctx.info
        self.dtype = np.dtype(np.float16 if half else np.float32)
        if not info.image_support:
            raise LayoutError(f"device {info.name!r} has no image support: choose another device")
        if half and not info.half_images:
            raise LayoutError(f"half = True is not allowed on {info.name!r}: it has no CL_RGBA / "
                              "CL_HALF_FLOAT images")
        if max_image is None:
            max_image = info.max_image_size
        else:
            try:
                max_image = tuple(int(v) for v in max_image)
            except (TypeError, ValueError):
                raise LayoutError(f"max_image = {max_image!r} is not allowed: give (width, height), "
                                  "two positive integers") from None
            if len(max_image) != 2 or min(max_image) < 1:
                raise LayoutError(f"max_image = {max_image!r} is not allowed: give (width, height), "
                                  "both positive")
            max_image = (min(max_image[0], info.max_image_size[0]),
                         min(max_image[1], info.max_image_size[1]))
        self.max_image = max_image
        self.winograd = winograd or 0
        self.half = bool(half)
        self.layers: list[Layer] = []
        self.fallbacks: list[str] = []
        self._events, self._profile = None, None
        self._acts: dict = {}
        self._slots: dict = {}          # slot -> (width, height, dtype)
        self._next_base = 0
        self._weights_bytes = 0
        self._pins: list = []           # page-locked buffers behind the input/output arrays
        self._batch_groups()
        self._channel_parts()
        self._build()
        self._plan_memory()
        self._make_kernels()
        self.tuned = 0
        if tune:
            from .tuning import tune_session

            self.tuned = tune_session(self)

    # ------------------------------------------------------------------ building
    def _net_program(self):
        return ("net.cl", (f"-DIMG_HALF={int(self.half)}",), None)

    def _wino_program(self, m, mid):
        """conv.cl's Winograd stages, which single convolutions run too."""
        return (f"conv.cl:wino{m}", (f"-DIMG_HALF={int(self.half)}",
                                     f"-DMID_HALF={int(mid == np.float16)}"), wino_source(m))

    def _batch_groups(self):
        """How many batch items each image holds: all of them, or where some activation's
        IN_OUT_CHANNEL image [W * q(C), N * H] would be taller than the limit, the largest
        divisor g of the batch N whose images fit.  The network then runs once per group of g
        items, on images of g items (no op of this runtime mixes batch items)."""
        m = self.model
        batch = {s[0] for s in m.inputs.values()}
        #: the batch, and the batch items each image holds (the same unless split)
        self.batch = self.group = next(iter(batch)) if len(batch) == 1 else None
        if len(batch) != 1 or self.batch == 1:
            return
        N = self.batch
        shapes = self._tensor_shapes()
        rows = max((s[2] if len(s) == 4 else 1) for s in shapes if len(s) in (2, 4) and s[0] == N)
        if N * rows <= self.max_image[1]:
            return
        self.group = g = max([d for d in range(1, N + 1)
                              if N % d == 0 and d * rows <= self.max_image[1]], default=1)
        self.fallbacks.append(
            f"network: batch {N} runs as {N // g} groups of {g} (images of {N} items up to "
            f"{N * rows} rows are past the limit {list(self.max_image)}); split images:")

    def _tensor_shapes(self):
        """The shapes of the graph's inputs and of every node's outputs."""
        g = self.model.graph
        return list(g.inputs.values()) + [g.shapes[o] for n in g.nodes for o in n.outputs if o]

    def _channel_parts(self):
        """The channels each image holds where an activation's image [W * q(C), N * H] is wider
        than the limit: ``self.part`` channels (a multiple of 4, the same for every split
        tensor, so that the parts of two tensors line up and lanes never shift), the most
        that the widest such tensor's W leaves room for; 0 when no tensor needs it or none fits."""
        shapes = self._tensor_shapes()
        wide = [(s[3] if len(s) == 4 else 1) for s in shapes if len(s) in (2, 4)
                and image_shape("IN_OUT_CHANNEL", _nhwc(s))[0] > self.max_image[0]]
        self.part = 4 * (self.max_image[0] // max(wide)) if wide else 0

    def _pieces(self, C, *acts):
        """The channel ranges a per-channel op runs over: the parts when any of ``acts`` is split."""
        return self._ranges(C) if any(a is not None and a.parts for a in acts) else [(0, C)]

    def _ranges(self, C):
        return [(c0, min(c0 + self.part, C)) for c0 in range(0, C, self.part)]

    @staticmethod
    def _piece(t, c0, c1):
        """The image holding channels c0 .. c1 of ``t`` and their first pixel's c4 in it."""
        for p0, p1, p in t.parts or ():
            if (p0, p1) == (c0, c1):
                return p, 0
        return t, c0 // 4

    def _fits(self, w, h):
        return w <= self.max_image[0] and h <= self.max_image[1]

    def _why_not_split(self, w, h, node=None):
        if h > self.max_image[1]:
            return ("even one batch item is too tall: splitting the rows of an item is not "
                    "implemented")
        if not self.part:
            return "even four channels are too wide: splitting the columns is not implemented"
        return (f"{node.op if node is not None else 'this op'} cannot write an image split by "
                "channels")

    def _weight(self, layer, name, array, kind, **kw):
        """The weight's image: packed on the host by the NumPy path (one program for every
        layout, where the device transfer would build a kernel per large layout), copied once."""
        from ..image import to_image
        from .transfer import empty_image

        w, h = image_shape(kind, array.shape, **kw)
        self._check_fits_layer(layer, f"{kind} weight {name}", w, h)
        pixels = to_image(np.ascontiguousarray(array, np.float32), kind, dtype=self.dtype,
                          max_size=None, **kw)
        img = empty_image(self.queue, w, h, self.dtype)
        cl().enqueue_copy(self.queue, img, pixels, origin=(0, 0), region=(w, h), is_blocking=True)
        layer.weights.append((name, kind, [w, h]))
        self._weights_bytes += w * h * 4 * self.dtype.itemsize
        return img

    def _check_fits_layer(self, layer, what, w, h):
        if not self._fits(w, h):
            raise DeviceLimitError(
                f"layer {layer.name!r} ({layer.op}): the {what} image [{w}, {h}] is past the "
                f"image limit {list(self.max_image)}")

    def _new_act(self, name, shape, node, split_ok=False):
        nhwc = _nhwc(shape)
        if nhwc is None:
            raise _err(node, f"output {name!r} has shape {list(shape)}: images hold 4-D NCHW or "
                       "2-D (N, C) tensors")
        if self.group != self.batch:
            if shape[0] != self.batch:
                raise DeviceLimitError(
                    f"node {node.name!r} ({node.op}): output {name!r} of shape {list(shape)} "
                    f"does not lead with the batch {self.batch}, which the network's images "
                    f"hold in groups of {self.group}")
            nhwc = (self.group,) + nhwc[1:]
            fw, fh = image_shape("IN_OUT_CHANNEL", _nhwc(shape))
            if fh > self.max_image[1]:
                where = "input" if node.op == "input" else node.name
                self.fallbacks.append(f"{where}: {name!r} [{fw}, {fh}] held as "
                                      f"{self.batch // self.group} images of {self.group} "
                                      f"batch item{'s' * (self.group > 1)}")
        w, h = image_shape("IN_OUT_CHANNEL", nhwc)
        a = _Act(name, nhwc, tuple(shape), slot=("act", name))
        self._acts[name] = a
        if w > self.max_image[0] and h <= self.max_image[1] and self.part and split_ok:
            N, H, W, C = nhwc
            a.parts = []
            for c0, c1 in self._ranges(C):
                p = _Act(f"{name}[{c0}:{c1}]", (N, H, W, c1 - c0), tuple(shape),
                         slot=("act", name, c0))
                self._slots[p.slot] = (*image_shape("IN_OUT_CHANNEL", p.nhwc), self.dtype)
                a.parts.append((c0, c1, p))
            where = "input" if node.op == "input" else node.name
            self.fallbacks.append(f"{where}: {name!r} [{w}, {h}] held as {len(a.parts)} images "
                                  f"of {self.part} channels (width past the limit "
                                  f"{list(self.max_image)})")
            return a
        if not self._fits(w, h):
            raise DeviceLimitError(
                f"node {node.name!r} ({node.op}): the {'input' if node.op == 'input' else 'output'} "
                f"{name!r} image [{w}, {h}] is past the "
                f"image limit {list(self.max_image)} and this runtime has no smaller form for it "
                f"({self._why_not_split(w, h, node)})")
        self._slots[a.slot] = (w, h, self.dtype)
        return a

    def _device(self, node, name, split_ok=False):
        """The image tensor ``name``: a device tensor, or a traced move materialized now;
        one split by channels only where the op takes it (``split_ok``)."""
        t = self._device_any(node, name)
        if t.parts and not split_ok:
            raise self._split_input(node, t)
        return t

    def _split_input(self, node, t):
        w, h = image_shape("IN_OUT_CHANNEL", t.nhwc)
        return DeviceLimitError(
            f"node {node.name!r} ({node.op}): input {t.name!r} is held as {len(t.parts)} images "
            f"split by channels (its image [{w}, {h}] is past the limit {list(self.max_image)}), "
            f"and {node.op} cannot take a split operand on this runtime")

    def _device_any(self, node, name):
        t = self._acts.get(name)
        if t is None:
            raise _err(node, f"input {name!r} is not computed on the device (a constant input "
                       "where this runtime needs a tensor)")
        if isinstance(t, _Virtual):
            got = self._materialize(t.node, name, t.ids, t.shape)
            if got is None:
                raise _err(node, f"input {name!r} is a rearrangement (shape {list(t.ids.shape)}) "
                           "that is not a gather of whole channels: this runtime cannot keep it "
                           "in an image")
            return got
        return t

    def _empty(self):
        key = ("empty",)
        self._slots[key] = (1, 1, self.dtype)
        return key

    def _build(self):
        m = self.model
        g = m.graph
        readers = g.readers()
        outputs = set(m.outputs)
        self._inputs = {}
        for name, shape in m.inputs.items():
            a = self._new_act(name, shape, type("N", (), {"name": name, "op": "input"})(),
                              split_ok=True)
            self._inputs[name] = a
        skip = set()
        self._order = []                 # (layer, reads, writes) per layer, in order
        for st in g.nodes:
            node = st
            if node.name in skip:
                continue
            op = node.op
            if op in _MOVES:
                self._move(st)
                continue
            fused_act = None
            out_name = node.outputs[0]
            nxt = readers.get(out_name, [])
            if (op in ("Conv", "Gemm", "MatMul") or op in _BINARY) and len(nxt) == 1 \
                    and nxt[0].op in _ACT and out_name not in outputs \
                    and not nxt[0].params.runtime_bounds:
                fused_act = nxt[0]
                skip.add(fused_act.name)
            layer = Layer(node.name, op, "")
            act = (0, 0.0, 0.0)
            if fused_act is not None:
                act = self._act_params(fused_act)
                layer.fused.append(f"{fused_act.op} {fused_act.name}")
                final = fused_act.outputs[0]
                final_shape = g.shapes[final]
            else:
                final, final_shape = out_name, g.shapes[out_name]
            if op == "Conv":
                self._conv(st, layer, final, final_shape, act)
            elif op in ("Gemm", "MatMul"):
                self._fc(st, layer, final, final_shape, act)
            elif op in _BINARY:
                self._binary(st, layer, final, final_shape, act)
            elif op in _ACT:
                x = self._device(node, node.inputs[0], split_ok=True)
                out = self._new_act(final, final_shape, node, split_ok=True)
                a = self._act_params(st)
                layer.kind = "eltwise (activation)"
                self._eltwise(layer, x, None, out, -1, 0, a)
            elif op in ("MaxPool", "AveragePool"):
                self._pool(st, layer, final, final_shape)
            elif op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean"):
                self._global_pool(st, layer, final, final_shape)
            elif op == "Softmax":
                self._softmax(st, layer, final, final_shape)
            elif op == "Resize":
                self._resize(st, layer, final, final_shape)
            else:
                raise _err(node, f"op {op} is not supported on OpenCL images; this runtime runs "
                           f"{', '.join(NETWORK_OPS)}")
            self.layers.append(layer)
        for name in m.outputs:
            if name not in self._acts:
                raise LayoutError(f"graph output {name!r} is a constant: nothing runs on the device")
            t = self._acts[name]
            if isinstance(t, _Virtual):
                self._materialize(t.node, name, t.ids, t.shape)

    # ---- activations
    def _act_params(self, node):
        p = node.params
        if p.runtime_bounds:
            raise _err(node, "its bounds are computed at run time: this runtime takes constant "
                       "bounds")
        return (_ACT[p.kind], p.alpha, p.beta)

    # ---- convolution
    def _conv(self, st, layer, final, final_shape, act):
        node = st
        x = self._device(node, node.inputs[0], split_ok=True)
        w = np.asarray(self.model.consts.get(node.inputs[1]), np.float32) \
            if node.inputs[1] in self.model.consts else None
        if w is None or w.ndim != 4:
            raise _err(node, "the weights must be a constant 4-D OIHW tensor")
        b = None
        if len(node.inputs) > 2 and node.inputs[2]:
            if node.inputs[2] not in self.model.consts:
                raise _err(node, "the bias must be a constant")
            b = np.asarray(self.model.consts[node.inputs[2]], np.float32).reshape(-1)
        N, H, W, C = x.nhwc
        O, I, KH, KW = w.shape
        p = node.params
        strides, dil, groups, begin = p.strides, p.dilations, p.group, p.begin
        depthwise = p.depthwise and p.multiplier == 1
        if x.parts and groups != 1 and not depthwise:
            raise self._split_input(node, x)
        out = self._new_act(final, final_shape, node, split_ok=groups == 1 or depthwise)
        _, OH, OW, _ = out.nhwc
        i32, f32 = np.int32, np.float32
        acts = [i32(act[0]), f32(act[1]), f32(act[2])]
        geo = [i32(KH), i32(KW), i32(strides[0]), i32(strides[1]), i32(begin[0]), i32(begin[1]),
               i32(dil[0]), i32(dil[1])]
        if groups == 1:
            tile = self._wino_tile(node, x.nhwc, O, (KH, KW), strides, dil, begin, out.nhwc)
            if tile and (x.parts or out.parts):
                self.fallbacks.append(f"{node.name}: Winograd tile {tile} -> direct kernel (an "
                                      "image split by channels)")
                tile = 0
            if tile:
                bias = self._weight(layer, node.inputs[2], b, "ARGUMENT") if b is not None else None
                self._winograd(node, layer, x, w, bias if bias is not None else self._empty(),
                               i32(bias is not None), out, tile, begin, acts)
                return
            layer.kind = f"conv {KH}x{KW} direct" if (KH, KW) != (1, 1) else "conv 1x1 direct"
            self._conv_direct(layer, node, x, w, b, out, geo, acts)
            return
        if depthwise:
            layer.kind = f"depthwise {KH}x{KW}"

            def launch(c0, c1, xin, dst):
                tag = "" if (c0, c1) == (0, C) else f"[{c0}:{c1}]"
                bias = self._weight(layer, node.inputs[2] + tag, b[c0:c1], "ARGUMENT") \
                    if b is not None else None
                filt = self._weight(layer, node.inputs[1] + tag, w[c0:c1], "DW_CONV2D_FILTER",
                                    filter_format="C1HW")
                n = N * (c1 - c0)
                return ((_q(c1 - c0), -(-OW // 4), N * OH),
                        [xin, filt, bias if bias is not None else self._empty(), dst, i32(H),
                         i32(W), i32(c1 - c0), i32(OH), i32(OW), i32(N * OH), *geo,
                         i32(bias is not None), *acts],
                        2.0 * n * OH * OW * KH * KW, n * (H * W + OH * OW) + (c1 - c0) * KH * KW)
            self._per_channel(layer, "dwconv2d", x, out, launch)
            return
        if C % groups or O % groups or I != C // groups:
            raise _err(node, f"group = {groups} does not divide C = {C} and O = {O}")
        layer.kind = f"grouped conv {KH}x{KW} (group {groups})"
        macs = N * OH * OW * O * I * KH * KW
        io = (x.nhwc[0] * H * W * C + N * OH * OW * O) * self.dtype.itemsize
        bias = self._weight(layer, node.inputs[2], b, "ARGUMENT") if b is not None else None
        filt = self._weight(layer, node.inputs[1], w, "CONV2D_FILTER")
        layer.launches.append(_Launch(
            self._net_program(), "conv2d_grouped", (_q(O), OW, N * OH),
            [x, filt, bias if bias is not None else self._empty(), out, i32(H), i32(W), i32(C),
             i32(OH), i32(OW), i32(O), i32(N * OH), *geo, i32(groups), i32(bias is not None),
             *acts],
            flops=2.0 * macs, nbytes=io + w.size * self.dtype.itemsize))

    def _conv_direct(self, layer, node, x, w, b, out, geo, acts):
        """The direct kernel, once per output part and input part where images are split by
        channels: each output part takes its rows of the filter, and where the input is split
        the parts' sums run through two float32 images (the bias with the first part, the
        activation with the last)."""
        N, H, W, C = x.nhwc
        _, OH, OW, O = out.nhwc
        KH, KW = w.shape[2:]
        i32 = np.int32
        ins = x.parts or [(0, C, x)]
        outs = out.parts or [(0, O, out)]
        prog = self._net_program()
        if len(ins) > 1:
            prog = (prog[0], prog[1] + ("-DCONV_PARTIAL=1",), None)
            P = [("tmp", node.name, "P", j) for j in (0, 1)]
            for key in P:
                self._slots[key] = (max(_q(o1 - o0) for o0, o1, _ in outs) * OW, N * OH,
                                    np.dtype(np.float32))
            layer.kind += f", input in {len(ins)} channel parts"
        it = self.dtype.itemsize
        for o0, o1, dst in outs:
            tag = "" if (o0, o1) == (0, O) else f"[{o0}:{o1}]"
            bias = self._weight(layer, node.inputs[2] + tag, b[o0:o1], "ARGUMENT") \
                if b is not None else None
            S = self._slices(_q(o1 - o0) * -(-OW // 4) * N * OH, _q(C), _q(C) * KH * KW) \
                if len(ins) == 1 else 1
            if S > 1:
                self._conv_split(layer, node, x, w[o0:o1], bias, dst, geo, acts, S, tag)
                continue
            for k, (c0, c1, xin) in enumerate(ins):
                ctag = tag if len(ins) == 1 else f"[{o0}:{o1}, {c0}:{c1}]"
                filt = self._weight(layer, node.inputs[1] + ctag, w[o0:o1, c0:c1], "CONV2D_FILTER")
                last = k == len(ins) - 1
                first_bias = bias is not None and k == 0
                args = [xin, filt, bias if first_bias else self._empty(),
                        dst if last else P[k % 2], i32(H), i32(W), i32(c1 - c0), i32(OH), i32(OW),
                        i32(o1 - o0), i32(N * OH), *geo, i32(first_bias), *acts]
                if len(ins) > 1:
                    args += [P[(k - 1) % 2] if k else self._empty(), i32(k > 0), i32(last)]
                macs = N * OH * OW * (o1 - o0) * (c1 - c0) * KH * KW
                layer.launches.append(_Launch(
                    prog, "conv2d", (_q(o1 - o0), -(-OW // 4), N * OH), args, flops=2.0 * macs,
                    nbytes=(N * H * W * (c1 - c0) + N * OH * OW * (o1 - o0)
                            + (o1 - o0) * (c1 - c0) * KH * KW) * it))

    def _slices(self, items, qc, taps):
        """How many slices of its input channels a direct convolution of ``items`` work-items,
        ``qc`` channel blocks and ``taps`` = qc * KH * KW steps per work-item splits its sums
        over (1: none).  Only long sums are split: the second kernel and launch cost about as
        much as a short sum saves (on an H100, 1x1 layers of under 96 channel blocks got
        slower split, ResNet's 3x3 layers and MobileNetV2's wide 1x1 layers 1.2-3.5x faster)."""
        target = _SPLIT_ITEMS["GPU" if self.cctx.info.is_gpu else "CPU"]
        if items * 2 > target or qc < 8 or taps < 96:
            return 1
        return max(1, min(qc // 4, -(-target // items)))

    def _conv_split(self, layer, node, x, w, bias, out, geo, acts, S, tag):
        """The direct convolution as S slices of its input channels, each storing float32
        sums in a temporary image S times as tall, and one kernel adding them, the bias and
        the activation."""
        N, H, W, C = x.nhwc
        _, OH, OW, O = out.nhwc
        KH, KW = w.shape[2:]
        i32 = np.int32
        prog = self._net_program()
        filt = self._weight(layer, node.inputs[1] + tag, w, "CONV2D_FILTER")
        P = ("tmp", node.name, "S" + tag)
        self._slots[P] = (_q(O) * OW, S * N * OH, np.dtype(np.float32))
        layer.kind += f", sums split over {S} channel slices"
        it = self.dtype.itemsize
        macs = N * OH * OW * O * C * KH * KW
        layer.launches += [
            _Launch(prog, "conv2d_split", (_q(O), -(-OW // 4), S * N * OH),
                    [x, filt, P, i32(H), i32(W), i32(C), i32(OH), i32(OW), i32(O), i32(N * OH),
                     *geo, i32(S)], flops=2.0 * macs,
                    nbytes=(N * H * W * C + O * C * KH * KW) * it + S * N * OH * OW * O * 4),
            _Launch(prog, "conv2d_sum", (_q(O), OW, N * OH),
                    [P, bias if bias is not None else self._empty(), out, i32(OH), i32(OW), i32(O),
                     i32(N * OH), i32(S), i32(bias is not None), *acts],
                    nbytes=S * N * OH * OW * O * 4 + N * OH * OW * O * it),
        ]

    def _wino_tile(self, node, nhwc, O, k, strides, dil, begin, out_nhwc):
        N, H, W, C = nhwc
        if k != (3, 3) or tuple(strides) != (1, 1) or tuple(dil) != (1, 1) or not self.winograd:
            return 0
        _, OH, OW, _ = out_nhwc
        if self.winograd == "auto":
            if C < 16 or O < 16:
                return 0
            want = 4 if min(OH, OW) >= 8 else 2
        else:
            want = int(self.winograd)
        for tile in _TILE_FALLBACK[want]:
            T2 = (tile + 2) ** 2
            tiles = N * -(-OH // tile) * -(-OW // tile)
            sizes = {"V": (tiles, T2 * _q(C)), "M": (tiles, T2 * _q(O)), "U": (_q(C), O * T2)}
            bad = [f"{k} {list(v)}" for k, v in sizes.items() if not self._fits(*v)]
            if not bad:
                if tile != want:
                    self.fallbacks.append(f"{node.name}: Winograd tile {want} -> {tile} "
                                          f"(images past the limit {list(self.max_image)})")
                return tile
            last = bad
        self.fallbacks.append(f"{node.name}: Winograd tile {want} -> direct kernel ({', '.join(last)} "
                              f"past the limit {list(self.max_image)})")
        return 0

    def _winograd(self, node, layer, x, w, bias_arg, has_b, out, tile, begin, acts):
        N, H, W, C = x.nhwc
        _, OH, OW, O = out.nhwc
        th, tw = -(-OH // tile), -(-OW // tile)
        tiles = N * th * tw
        T2 = (tile + 2) ** 2
        layer.kind = f"conv 3x3 Winograd F({tile},3)"
        u = self._weight(layer, node.inputs[1], w, "WINOGRAD_FILTER", tile=tile)
        mid = default_mid_dtype(tile, self.dtype)
        # Slices of the input channels for the GEMM where the layer has few work-items
        # (ResNet's 512-channel layers at 7x7: 8192 at 4 tiles each): each slice stores its
        # sums in its own rows of M, and wino_output adds them.
        items = -(-tiles // _GEMM_BLOCKS[0][0]) * T2 * _q(O)
        S = 1
        target = _GEMM_SPLIT_ITEMS["GPU" if self.cctx.info.is_gpu else "CPU"]
        if 2 * items <= target:
            S = max(1, min(-(-target // items), _q(C) // 8,
                           self.max_image[1] // (T2 * _q(O))))
        if S > 1:
            layer.kind += f", GEMM over {S} channel slices"
        V, M = ("tmp", node.name, "V"), ("tmp", node.name, "M")
        self._slots[V] = (tiles, T2 * _q(C), mid)
        self._slots[M] = (tiles, S * T2 * _q(O), mid)
        prog = self._wino_program(tile, mid)
        i32 = np.int32
        # The GEMM's blockings (tiles x groups of 4 output channels per work-item), the
        # default first: 8 tiles where that still leaves 40k work-items (measured on an
        # H100: 10-20% faster on VGG's large layers, slower on small ones); the tuner times
        # all three.
        gemm = [(f"wino_matmul_{nt}x{no}", (-(-tiles // nt), S * T2 * -(-_q(O) // no)))
                for nt, no in _GEMM_BLOCKS]
        if len(gemm) > 1 and math.prod(gemm[1][1]) >= 40_000:
            gemm[0], gemm[1] = gemm[1], gemm[0]
        it = self.dtype.itemsize
        layer.launches += [
            _Launch(prog, "wino_input", (tiles, _q(C)),
                    [x, V, i32(N), i32(H), i32(W), i32(C), i32(th), i32(tw), i32(begin[0]),
                     i32(begin[1])], nbytes=(N * H * W * C * it + tiles * T2 * C * mid.itemsize)),
            _Launch(prog, *gemm[0], [V, u, M, i32(C), i32(O), i32(tiles), i32(S)],
                    flops=2.0 * tiles * T2 * C * O,
                    nbytes=(tiles * T2 * (C + O)) * mid.itemsize + T2 * C * O * it,
                    variants=tuple(gemm)),
            _Launch(prog, "wino_output", (tiles, _q(O)),
                    [M, bias_arg, out, i32(OH), i32(OW), i32(O), i32(th), i32(tw), i32(tiles),
                     i32(S), has_b, *acts],
                    nbytes=S * tiles * T2 * O * mid.itemsize + N * OH * OW * O * it),
        ]

    # ---- fully connected
    def _fc(self, st, layer, final, final_shape, act):
        node = st
        src = self._acts.get(node.inputs[0])
        if node.inputs[1] not in self.model.consts:
            raise _err(node, "the second operand must be a constant weight on this runtime")
        B = np.asarray(self.model.consts[node.inputs[1]], np.float32)
        alpha, beta = 1.0, 1.0
        if node.op == "Gemm":
            p = node.params
            if p.trans_a:
                raise _err(node, "transA = 1 is not supported on this runtime")
            alpha, beta = p.alpha, p.beta
            if p.trans_b:
                B = B.T
        if B.ndim != 2:
            raise _err(node, f"the weight has shape {list(B.shape)}: a 2-D (K, O) matrix is needed")
        K, O = B.shape
        # the input: an (N, K) image, or (N, C, H, W) flattened in NCHW order (read in place)
        x = self._flat_source(src, K) if isinstance(src, _Virtual) else None
        if x is None:
            x = self._device(node, node.inputs[0])
            if len(x.shape) != 2 or x.shape[1] != K:
                raise _err(node, f"input of shape {list(x.shape)}: a 2-D (N, {K}) input is needed")
        if x.parts:
            raise self._split_input(node, x)
        N, H, W, C = x.nhwc
        wt = (B.T * np.float32(alpha)).astype(np.float32).reshape(O, C, H, W)
        bias = None
        if node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2]:
            cval = self.model.consts.get(node.inputs[2])
            if cval is None or np.asarray(cval).size not in (1, O) or (
                    np.asarray(cval).ndim == 2 and np.asarray(cval).shape[0] != 1):
                raise _err(node, "the bias C must be a constant of O values on this runtime")
            cval = np.broadcast_to(np.asarray(cval, np.float32).reshape(-1), (O,)) * np.float32(beta)
            bias = self._weight(layer, node.inputs[2], cval, "ARGUMENT")
        out = self._new_act(final, final_shape, node)
        layer.kind = "fully connected" + (f" (flattened {C}x{H}x{W} read in place)" if H * W > 1 else "")
        filt = self._weight(layer, node.inputs[1], wt, "WEIGHT_WIDTH")
        i32, f32 = np.int32, np.float32
        pixels = H * W * _q(C)
        S = min(64, -(-pixels // 128))
        if S > 1 and self._fits(_q(O), N * S):
            chunk = -(-pixels // S)
            S = -(-pixels // chunk)
            P = ("tmp", node.name, "P")
            self._slots[P] = (_q(O), N * S, np.dtype(np.float32))
            layer.kind += f", split over {S} input slices"
            layer.launches += [
                _Launch(self._net_program(), "fc_partial", (_q(O), N * S),
                        [x, filt, P, i32(N), i32(H), i32(W), i32(C), i32(O), i32(S), i32(chunk)],
                        flops=2.0 * N * K * O, nbytes=(K * O + N * K) * self.dtype.itemsize),
                _Launch(self._net_program(), "fc_reduce", (_q(O), N),
                        [P, bias if bias is not None else self._empty(), out, i32(N), i32(O), i32(S),
                         i32(bias is not None), i32(act[0]), f32(act[1]), f32(act[2])],
                        nbytes=N * O * (S * 4 + self.dtype.itemsize))]
            return
        layer.launches.append(_Launch(
            self._net_program(), "fully_connected", (_q(O), N),
            [x, filt, bias if bias is not None else self._empty(), out, i32(N), i32(H), i32(W),
             i32(C), i32(O), i32(bias is not None), i32(act[0]), f32(act[1]), f32(act[2])],
            flops=2.0 * N * K * O, nbytes=(K * O + N * (K + O)) * self.dtype.itemsize))

    def _flat_source(self, v, K):
        """The device tensor that ``v`` flattens in NCHW order to (N, K), or None."""
        ids = v.ids
        if ids.ndim != 2 or ids.shape[1] != K:
            return None
        t = self._acts[self._source_of(ids.reshape(-1)[:1])[0]]
        n, c, h, w = _full_nchw(t)
        want = t.base + np.arange(n * c * h * w).reshape(n, c * h * w)
        if ids.shape != want.shape or not np.array_equal(ids, want):
            return None
        return t

    # ---- element-wise
    def _binary(self, st, layer, final, final_shape, act):
        node = st
        out_rank = len(final_shape)
        out4 = final_shape if out_rank == 4 else (final_shape + (1, 1) if out_rank == 2 else None)
        if out4 is None:
            raise _err(node, f"output shape {list(final_shape)}: images hold 4-D or 2-D tensors")
        ops = []
        for i, n in enumerate(node.inputs[:2]):
            if n in self.model.consts:
                c = np.asarray(self.model.consts[n], np.float32)
                if c.ndim > out_rank:
                    raise _err(node, f"constant {n!r} has more dimensions than the output")
                c = c.reshape((1,) * (out_rank - c.ndim) + c.shape)
                c4 = c if out_rank == 4 else c.reshape(c.shape + (1, 1))
                ops.append(("const", n, c4))
            else:
                t = self._device(node, n, split_ok=True)
                ops.append(("act", n, t))
        shape_of = lambda o: o[2].shape if o[0] == "const" else (  # noqa: E731
            _full_nchw(o[2]))
        full = [shape_of(o) == tuple(out4) for o in ops]
        if not full[0] and not full[1]:
            raise _err(node, "both operands are broadcast: one must have the output's shape")
        swap = 0
        a, b = ops
        if not full[0] or (a[0] == "const" and full[1] and b[0] == "act"):
            a, b, swap = b, a, 1
        if a[0] == "const":
            raise _err(node, "an operand of the output's shape must be computed on the device")
        bs = shape_of(b)
        if any(d not in (1, o) for d, o in zip(bs, out4)):
            raise _err(node, f"shape {list(bs)} does not broadcast to {list(out4)}")
        if b[0] == "const":
            arr = b[2]
            if arr.shape[0] > 1 and self.group != self.batch:
                raise DeviceLimitError(
                    f"node {node.name!r} ({node.op}): constant {b[1]!r} has a batch dimension "
                    f"of {arr.shape[0]}, and the network's images hold the batch in groups of "
                    f"{self.group}")
            def bimg(c0, c1, arr=arr, name=b[1]):
                """The constant's image for the output channels c0 .. c1."""
                if arr.shape[1] > 1 and (c0, c1) != (0, arr.shape[1]):
                    arr, name = arr[:, c0:c1], f"{name}[{c0}:{c1}]"
                if arr.shape[0] == 1 and arr.shape[2] == arr.shape[3] == 1 and arr.shape[1] > 1:
                    return self._weight(layer, name, arr.reshape(-1), "ARGUMENT")
                nhwc = np.ascontiguousarray(arr.transpose(0, 2, 3, 1))
                return self._weight(layer, name, nhwc, "IN_OUT_CHANNEL")
        else:
            bimg = b[2]
        x = a[2]
        out = self._new_act(final, final_shape, node, split_ok=True)
        layer.kind = f"eltwise {node.op}" + (" (broadcast)" if bs != tuple(out4) else "")
        if bs[0] > 1:
            bs = (out.nhwc[0],) + tuple(bs[1:])         # an image of the same batch group
        self._eltwise(layer, x, (bimg, bs), out, _BINARY[node.op], swap, act)

    def _eltwise(self, layer, x, b, out, op, swap, act):
        """``b``: None (the activation of x alone) or (its device tensor, or a function giving
        a constant's image for a range of channels; its NCHW shape)."""
        N, H, W, C = out.nhwc
        i32, f32 = np.int32, np.float32
        src, (BN, BC, BH, BW) = (None, (N, C, H, W)) if b is None else b
        it = self.dtype.itemsize
        for c0, c1 in self._pieces(C, x, out, src if isinstance(src, _Act) else None):
            xa, ac4 = self._piece(x, c0, c1)
            dst, oc4 = self._piece(out, c0, c1)
            if src is None:
                bimg, bc4 = xa, ac4
            elif not isinstance(src, _Act):
                bimg, bc4 = src(c0, c1), 0
            elif BC == 1:
                bimg, bc4 = src, 0
            else:
                bimg, bc4 = self._piece(src, c0, c1)
            n = N * H * W * (c1 - c0)
            layer.launches.append(_Launch(
                self._net_program(), "eltwise", (_q(c1 - c0), W, N * H),
                [xa, bimg, dst, i32(H), i32(W), i32(c1 - c0), i32(N * H), i32(BN), i32(BH),
                 i32(BW), i32(BC), i32(op), i32(swap), i32(act[0]), f32(act[1]), f32(act[2]),
                 i32(ac4), i32(bc4), i32(oc4), i32(dst.nhwc[3])],
                flops=n, nbytes=(2 + (b is not None)) * n * it))

    # ---- pooling, softmax, resize
    def _pool(self, st, layer, final, final_shape):
        node = st
        x = self._device(node, node.inputs[0], split_ok=True)
        N, H, W, C = x.nhwc
        p = node.params
        k, s, d, begin, end = p.kernel, p.strides, p.dilations, p.begin, p.end
        out = self._new_act(final, final_shape, node, split_ok=True)
        _, OH, OW, _ = out.nhwc
        is_max = node.op == "MaxPool"
        layer.kind = f"{'max' if is_max else 'average'} pool {k[0]}x{k[1]}"
        i32 = np.int32
        count_pad = int(p.count_include_pad)
        self._per_channel(layer, "pool2d", x, out, lambda c0, c1, xin, dst: (
            (_q(c1 - c0), OW, N * OH),
            [xin, dst, i32(H), i32(W), i32(c1 - c0), i32(OH), i32(OW), i32(N * OH), i32(k[0]),
             i32(k[1]), i32(s[0]), i32(s[1]), i32(begin[0]), i32(begin[1]), i32(end[0]),
             i32(end[1]), i32(d[0]), i32(d[1]), i32(is_max), i32(count_pad)],
            N * (c1 - c0) * OH * OW * k[0] * k[1], N * (c1 - c0) * (H * W + OH * OW)))

    def _global_pool(self, st, layer, final, final_shape):
        node = st
        x = self._device(node, node.inputs[0], split_ok=True)
        if node.op == "ReduceMean":
            if len(x.shape) != 4 or node.params.axes != (2, 3) or node.params.kind != "mean":
                raise _err(node, "ReduceMean runs on images over axes (2, 3) of a 4-D tensor only")
        N, H, W, C = x.nhwc
        out = self._new_act(final, final_shape, node, split_ok=True)
        is_max = node.op == "GlobalMaxPool"
        layer.kind = f"global {'max' if is_max else 'average'} pool"
        i32 = np.int32
        self._per_channel(layer, "global_pool", x, out, lambda c0, c1, xin, dst: (
            (_q(c1 - c0), N), [xin, dst, i32(N), i32(H), i32(W), i32(c1 - c0), i32(is_max)],
            N * (c1 - c0) * H * W, N * (c1 - c0) * (H * W + 1)))

    def _per_channel(self, layer, kernel, x, out, make):
        """A per-channel kernel, launched once, or once per part where ``x`` or ``out`` is split
        by channels: ``make(c0, c1, x's image, out's image)`` gives the launch's global size,
        its arguments, flops and elements moved; the channels' first pixel in each image and
        the output image's channel count follow the arguments."""
        for c0, c1 in self._pieces(x.nhwc[3], x, out):
            xin, ic4 = self._piece(x, c0, c1)
            dst, oc4 = self._piece(out, c0, c1)
            gsize, args, flops, elems = make(c0, c1, xin, dst)
            layer.launches.append(_Launch(
                self._net_program(), kernel, gsize,
                [*args, np.int32(ic4), np.int32(oc4), np.int32(dst.nhwc[3])], flops=flops,
                nbytes=elems * self.dtype.itemsize))

    def _softmax(self, st, layer, final, final_shape):
        node = st
        x = self._device(node, node.inputs[0])
        rank = len(x.shape)
        axis = node.params.axis
        if axis != 1 or (node.params.coerced and rank != 2):
            raise _err(node, f"softmax over axis {axis} of a rank-{rank} tensor: this runtime "
                       "takes the channel axis (1)")
        N, H, W, C = x.nhwc
        out = self._new_act(final, final_shape, node)
        layer.kind = "softmax over channels"
        i32 = np.int32
        layer.launches.append(_Launch(
            self._net_program(), "softmax_channels", (W, N * H),
            [x, out, i32(H), i32(W), i32(C), i32(N * H)], flops=5 * N * H * W * C,
            nbytes=4 * N * H * W * C * self.dtype.itemsize))

    def _resize(self, st, layer, final, final_shape):
        node = st
        x = self._device(node, node.inputs[0])
        p = node.params
        mode, ctm, nearest = p.mode, p.coord, p.nearest
        ok = ((mode == "nearest" and ((ctm == "asymmetric" and nearest == "floor") or
                                      (ctm == "half_pixel" and nearest == "round_prefer_floor")))
              or (mode == "linear" and ctm in ("half_pixel", "pytorch_half_pixel")))
        if not ok or len(x.shape) != 4 or tuple(final_shape[:2]) != tuple(x.shape[:2]):
            raise _err(node, f"mode {mode!r} with coordinate_transformation_mode {ctm!r} is not "
                       "supported on images (nearest asymmetric/floor, nearest half_pixel, "
                       "linear half_pixel are)")
        N, H, W, C = x.nhwc
        out = self._new_act(final, final_shape, node)
        _, OH, OW, _ = out.nhwc
        scales = p.scales[2:]
        if ctm == "pytorch_half_pixel" and (OH == 1 or OW == 1):
            raise _err(node, "pytorch_half_pixel with an output side of 1 is not supported")
        layer.kind = f"resize {mode}"
        i32, f32 = np.int32, np.float32
        layer.launches.append(_Launch(
            self._net_program(), "resize2d", (_q(C), OW, N * OH),
            [x, out, i32(H), i32(W), i32(C), i32(OH), i32(OW), i32(N * OH), f32(scales[0]),
             f32(scales[1]), i32(mode == "linear"), i32(ctm != "asymmetric")],
            nbytes=(N * H * W * C + N * OH * OW * C) * self.dtype.itemsize))

    # ---- moves of whole channels
    def _ids(self, node, name):
        t = self._acts.get(name)
        if t is None:
            return np.asarray(self.model.consts[name]) if name in self.model.consts else None
        if isinstance(t, _Virtual):
            return t.ids
        if t.base < 0:
            t.base = self._next_base
            self._next_base += int(np.prod(t.shape))
        return t.base + np.arange(int(np.prod(t.shape)), dtype=np.int64).reshape(t.shape)

    def _source_of(self, ids):
        """The device tensors (by name) that the element ids come from."""
        traced = sorted((t.base, n) for n, t in self._acts.items()
                        if isinstance(t, _Act) and t.base >= 0)
        bases = np.array([b for b, _ in traced])
        idx = np.searchsorted(bases, ids, side="right") - 1
        return [traced[i][1] for i in np.unique(idx)]

    def _move(self, st):
        outs = self._trace(st)
        if any(len(self._source_of(np.asarray(o).reshape(-1))) > 4 for o in outs if o is not None):
            # the gather kernel reads at most four images: make the traced inputs images first
            for n in st.inputs:
                if n and isinstance(self._acts.get(n), _Virtual):
                    self._device(st, n)
            outs = self._trace(st)
        for name, ids in zip(st.outputs, outs):
            if name:
                # kept as traced ids: an image is made only where a kernel reads it
                self._acts[name] = _Virtual(name, np.asarray(ids), st,
                                            tuple(self.model.graph.shapes[name]))

    def _trace(self, st):
        """The element ids of the move's outputs, from those of its inputs."""
        node = st
        ins = []
        for i, n in enumerate(node.inputs):
            if not n:
                ins.append(None)
                continue
            if n in self.model.consts and (i == 0 or node.op == "Concat"):
                raise _err(node, f"input {n!r} is a constant: on images a {node.op} moves "
                           "computed tensors only")
            v = self._ids(node, n)
            if v is None:
                raise _err(node, f"input {n!r} is neither on the device nor a constant")
            ins.append(v)
        try:
            outs = self.model.graph.kernel(node)(ins, None)
        except LayoutError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _err(node, f"tracing the move failed: {exc}") from None
        return list(outs)

    def _materialize(self, node, name, ids, shape):
        """Turn a traced move into an image when it is a channel gather (or the same image);
        None when it is not."""
        if len(shape) not in (2, 4):
            return None
        out4 = shape if len(shape) == 4 else tuple(shape) + (1, 1)
        ids4 = ids.reshape(out4)
        srcs = self._source_of(ids4.reshape(-1))
        if len(srcs) > 4:
            return None
        N, C, H, W = out4
        lut = np.empty(C, np.int64)
        offsets, acc = {}, 0
        for s in srcs:
            offsets[s] = acc
            acc += self._acts[s].nhwc[3]
        for s in srcs:
            tn, _, th, tw = _full_nchw(self._acts[s])
            if (tn, th, tw) != (N, H, W):
                return None
        # each output element must be (n, c', h, w) of its source, with c' fixed per channel
        first = ids4[0, :, 0, 0]
        owner = [self._source_of(np.array([i]))[0] for i in first]
        for c in range(C):
            t = self._acts[owner[c]]
            tn, th, tw, tc = t.nhwc
            local = int(first[c] - t.base)
            cc = local // (th * tw)
            want = t.base + (np.arange(N)[:, None, None] * tc + cc) * th * tw + \
                np.arange(H)[None, :, None] * tw + np.arange(W)[None, None, :]
            if not np.array_equal(ids4[:, c], want):
                return None
            lut[c] = offsets[owner[c]] + cc
        if len(srcs) == 1 and np.array_equal(lut, np.arange(C)) and \
                self._acts[srcs[0]].nhwc[3] == C:
            src = self._acts[srcs[0]]
            alias = _Act(name, src.nhwc, tuple(shape), slot=src.slot, base=src.base,
                         parts=src.parts)
            # the alias shares the image and the ids
            self._acts[name] = alias
            return alias
        for s in srcs:
            if self._acts[s].parts:
                raise self._split_input(node, self._acts[s])
        layer = Layer(node.name, node.op, "gather channels")
        out = self._new_act(name, shape, node)
        # the new image is traced from now on under its own ids
        pcl = cl()
        table = pcl.Buffer(self.cctx.context, pcl.mem_flags.READ_ONLY | pcl.mem_flags.COPY_HOST_PTR,
                           hostbuf=lut.astype(np.int32))
        imgs = [self._acts[s] for s in srcs]
        starts = [offsets[s] for s in srcs] + [1 << 30] * (4 - len(srcs))
        imgs += [imgs[0]] * (4 - len(imgs))
        i32 = np.int32
        layer.kind = f"gather channels ({len(srcs)} source{'s' if len(srcs) > 1 else ''})"
        NH = out.nhwc[0] * H
        layer.launches.append(_Launch(
            self._net_program(), "gather_channels", (_q(C), W, NH),
            [*imgs, table, out, i32(W), i32(NH), i32(starts[1]), i32(starts[2]),
             i32(starts[3]), i32(C)], nbytes=2 * N * H * W * C * self.dtype.itemsize))
        self.layers.append(layer)
        return out

    # ------------------------------------------------------------------ memory
    def _plan_memory(self):
        """Give every slot an image: free after the last reader, then reused (and grown)."""
        last: dict = {}
        first: dict = {}
        for i, layer in enumerate(self.layers):
            for ln in layer.launches:
                for a in ln.args:
                    key = a.slot if isinstance(a, _Act) else a if isinstance(a, tuple) else None
                    if key is None or key not in self._slots:
                        continue
                    first.setdefault(key, i)
                    last[key] = i
        end = len(self.layers)
        for name in self.model.outputs:
            t = self._acts.get(name)
            if isinstance(t, _Virtual):
                for s in self._source_of(t.ids.reshape(-1)):
                    for key in self._acts[s].slots():
                        last[key] = end
            elif t is not None:
                for key in t.slots():
                    last[key] = end
        for a in self._inputs.values():
            for key in a.slots():
                first[key] = -1
                last.setdefault(key, -1)
        # Blocks first, images last: a tensor takes the free block of its channel type that
        # fits with the least area added (growing a block to the larger width and height),
        # unless a new block would add less; blocks are allocated at their final size.
        blocks: list = []              # [width, height, dtype, kinds]
        free: list = []                # indices into blocks
        where: dict = {}               # slot -> block

        def take(key):
            w, h, dt = self._slots[key]
            dt = np.dtype(dt)
            best, cost = None, w * h
            for b in free:
                bw, bh, bdt, _ = blocks[b]
                if bdt != dt:
                    continue
                added = max(bw, w) * max(bh, h) - bw * bh
                if added < cost or (added == cost and best is not None and
                                    bw * bh < blocks[best][0] * blocks[best][1]):
                    best, cost = b, added
            if best is None:
                blocks.append([w, h, dt, set()])
                best = len(blocks) - 1
            else:
                free.remove(best)
                blocks[best][0] = max(blocks[best][0], w)
                blocks[best][1] = max(blocks[best][1], h)
            blocks[best][3].add(key[0])
            where[key] = best

        def give(key):
            free.append(where[key])

        order = sorted(first, key=lambda k: first[k])
        by_first: dict = {}
        for k in order:
            by_first.setdefault(first[k], []).append(k)
        by_last: dict = {}
        for k, i in last.items():
            by_last.setdefault(i, []).append(k)
        for k in by_first.get(-1, []):
            take(k)
        for i in range(end):
            for k in by_first.get(i, []):
                take(k)
            for k in by_last.get(i, []):
                if k in where and k[0] != "empty":
                    give(k)
        from .transfer import empty_image

        images = [empty_image(self.queue, w, h, dt) for w, h, dt, _ in blocks]
        self._images = {k: images[b] for k, b in where.items()}
        # a block that any activation uses counts as activation memory
        self.allocated = [(w, h, dt, "act" if "act" in kinds else min(kinds))
                          for w, h, dt, kinds in blocks]
        nbytes = lambda kinds: int(sum(w * h * 4 * dt.itemsize  # noqa: E731
                                       for w, h, dt, k in self.allocated if k in kinds))
        self.allocated_bytes = nbytes(("act", "tmp", "empty"))
        self.activation_bytes = nbytes(("act",))
        self.temporary_bytes = nbytes(("tmp",))

    # ------------------------------------------------------------------ kernels
    def _make_kernels(self):
        pcl = cl()
        # On a CPU device (PoCL) a fixed work-group size: one work-group function per kernel
        # to compile (PoCL builds one per local size) and, measured on PoCL, 5-35% less
        # device time than leaving the choice to the driver.  GPUs: the driver's choice
        # unless tuned.
        cpu = "CPU" in self.cctx.info.kind.split("/")
        for layer in self.layers:
            for ln in layer.launches:
                ln.base_gsize = tuple(ln.gsize)
                if cpu:
                    ln.lsize = _CPU_LOCAL[len(ln.gsize)]
                    ln.gsize = round_up(ln.gsize, ln.lsize)
                prog = self.cctx.program(*ln.program)
                k = pcl.Kernel(prog, ln.kernel)
                args = []
                for a in ln.args:
                    if isinstance(a, _Act):
                        args.append(self._images[a.slot])
                    elif isinstance(a, tuple):
                        args.append(self._images[a])
                    else:
                        args.append(a)
                k.set_args(*args)
                ln.kobj, ln.kargs = k, args
        prog = self.cctx.program(*self._net_program())
        mf = pcl.mem_flags
        g = self.group
        # the groups of batch items a run takes in turn: all at once unless the images hold fewer
        self._groups = [slice(None)] if g == self.batch else \
            [slice(n0, n0 + g) for n0 in range(0, self.batch, g)]
        self._uploads = []
        i32 = np.int32
        for name, a in self._inputs.items():
            n, c, h, w = _nchw(a.nhwc)              # n: the items of one group
            host = self._pinned(a.shape)
            host[...] = 0
            buf = pcl.Buffer(self.cctx.context, mf.READ_ONLY, max(n * c * h * w * 4, 4))
            kernels = []
            for c0, c1, part in a.parts or [(0, c, a)]:
                k = pcl.Kernel(prog, "upload")
                k.set_args(buf, self._images[part.slot], i32(n), i32(c1 - c0), i32(h), i32(w),
                           i32(c0), i32(c))
                kernels.append((k, (_q(c1 - c0), w, n * h)))
            self._uploads.append((name, host, buf, kernels))
        self._downloads = []
        for name in self.model.outputs:
            t = self._acts[name]
            ids = None
            if isinstance(t, _Virtual):
                sources = self._source_of(t.ids.reshape(-1))
                if len(sources) != 1:
                    raise LayoutError(f"graph output {name!r} is a rearrangement of several tensors: "
                                      "not supported on this runtime")
                virtual, t = t, self._acts[sources[0]]
                ids = virtual.ids - t.base                 # positions in the source, made once
            n, c, h, w = _nchw(t.nhwc)
            host = self._pinned(_full_nchw(t))
            buf = pcl.Buffer(self.cctx.context, mf.WRITE_ONLY, max(n * c * h * w * 4, 4))
            kernels = []
            for c0, c1, part in t.parts or [(0, c, t)]:
                k = pcl.Kernel(prog, "download")
                k.set_args(self._images[part.slot], buf, i32(n), i32(c1 - c0), i32(h), i32(w),
                           i32(c0), i32(c))
                kernels.append((k, (_q(c1 - c0), w, n * h)))
            shape = self.model.output_shapes[name]
            self._downloads.append((name, host, buf, kernels, ids, shape))

    def _pinned(self, shape):
        """A float32 host array in page-locked memory (a mapped ALLOC_HOST_PTR buffer, kept
        mapped): the driver copies from it by DMA without staging, which on an H100 saves
        tens of microseconds per 224x224 input."""
        pcl = cl()
        nbytes = max(int(np.prod(shape)) * 4, 4)
        pin = pcl.Buffer(self.cctx.context, pcl.mem_flags.READ_WRITE | pcl.mem_flags.ALLOC_HOST_PTR,
                         nbytes)
        arr, _ = pcl.enqueue_map_buffer(self.queue, pin, pcl.map_flags.READ | pcl.map_flags.WRITE,
                                        0, tuple(shape), np.float32, is_blocking=True)
        self._pins.append(pin)
        return arr

    # ------------------------------------------------------------------ running
    def run(self, *args, profile=False, **kwargs):
        """Run on float32 NCHW inputs; the output array (a list for several outputs).

        ``profile=True`` keeps each kernel's device time from OpenCL profiling events in
        :attr:`last_profile` (see :meth:`profile_table`).
        """
        pcl = cl()
        feeds = self.model.feeds(args, kwargs)
        q = self.queue if profile else self.run_queue
        events = [] if profile else None
        for name, host, *_ in self._uploads:
            np.copyto(host, feeds[name])
        for items in self._groups:
            for name, host, buf, kernels in self._uploads:
                pcl.enqueue_copy(q, buf, host[items], is_blocking=False)
                for k, gs in kernels:
                    ev = pcl.enqueue_nd_range_kernel(q, k, gs, None)
                    if profile:
                        events.append(("(input)", "upload", "upload", ev))
            for layer in self.layers:
                for ln in layer.launches:
                    ev = pcl.enqueue_nd_range_kernel(q, ln.kobj, ln.gsize, ln.lsize)
                    if profile:
                        events.append((layer.name, layer.op, ln.kernel, ev))
            for name, host, buf, kernels, ids, shape in self._downloads:
                for k, gs in kernels:
                    ev = pcl.enqueue_nd_range_kernel(q, k, gs, None)
                    if profile:
                        events.append(("(output)", "download", "download", ev))
                pcl.enqueue_copy(q, host[items], buf, is_blocking=True)
        outs = []
        for name, host, buf, kernels, ids, shape in self._downloads:
            # a copy: the page-locked array is written again by the next run
            outs.append(host.reshape(shape).copy() if ids is None
                        else host.reshape(-1)[ids].reshape(shape))
        self._events, self._profile = events, None
        return outs[0] if len(outs) == 1 else outs

    @property
    def last_profile(self):
        """The last profiled run: (layer, op, kernel, device seconds) per kernel, in order
        (read from the events on first access, so the run itself only keeps them)."""
        if self._profile is None and self._events:
            self.queue.finish()
            self._profile = [(ln, op, kn, (ev.profile.end - ev.profile.start) * 1e-9)
                             for ln, op, kn, ev in self._events]
        return self._profile

    # ------------------------------------------------------------------ reports
    def summary(self) -> dict:
        """What was prepared: layers, kernels, images allocated, the plan's figure, fallbacks."""
        from ..model import plan_model

        try:
            mem = plan_model(self.model).memory()
            plan_peak = mem["peak_f16" if self.half else "peak_f32"]
        except LayoutError:
            plan_peak = None
        return {
            "device": self.cctx.info.name,
            "dtype": str(self.dtype),
            "layers": len(self.layers),
            "kernels": sum(len(layer.launches) for layer in self.layers),
            "images_allocated": len(self.allocated),
            "image_bytes": self.allocated_bytes,
            "activation_bytes": self.activation_bytes,
            "temporary_bytes": self.temporary_bytes,
            "plan_peak_bytes": plan_peak,
            "weight_bytes": self._weights_bytes,
            "fallbacks": list(self.fallbacks),
            "tuned_kernels": self.tuned,
        }

    def layer_table(self) -> list:
        """Per layer: name, op, kernel choice, fused ops, weight image types."""
        return [{"layer": layer.name, "op": layer.op, "kind": layer.kind, "fused": layer.fused,
                 "kernels": [ln.kernel for ln in layer.launches],
                 "weights": [{"tensor": n, "image_type": k, "image": s} for n, k, s in layer.weights]}
                for layer in self.layers]

    def profile_table(self):
        """From :attr:`last_profile`: ``(per layer, per op type)`` lists of (name, seconds)."""
        if not self.last_profile:
            raise LayoutError("no profile yet: run with profile=True first")
        per_layer: dict = {}
        per_op: dict = {}
        for layer, op, _, sec in self.last_profile:
            per_layer[(layer, op)] = per_layer.get((layer, op), 0.0) + sec
            per_op[op] = per_op.get(op, 0.0) + sec
        return ([(f"{ln} ({op})", s) for (ln, op), s in per_layer.items()],
                sorted(per_op.items(), key=lambda kv: -kv[1]))

    def launches(self):
        """Every prepared kernel launch with its layer: (layer, launch)."""
        return [(layer, ln) for layer in self.layers for ln in layer.launches]
