"""The OpenCL schedule's parts: a network kept in MACE's RGBA images, every decision made once.

For a :class:`~tensorlayout.graph.Graph` and an :class:`ImageTarget` (the device's limits
as data) :func:`~tensorlayout.schedule.schedule_images` decides: each activation's IN_OUT_CHANNEL image (the batch
held in groups where an image would be too tall, the channels in parts where too wide), the
moves of whole channels traced to a gather or to nothing, activations fused into the kernel
before them, each weight's image type (CONV2D_FILTER, WINOGRAD_FILTER with the layer's tile,
DW_CONV2D_FILTER, WEIGHT_WIDTH, ARGUMENT), the kernels, their work sizes and arguments, the
temporaries, and which images share memory (each image lives from its first kernel to its
last, then its block is reused).  :class:`~tensorlayout.backends.opencl.OpenCLSession`
allocates and runs exactly this, and ``tensorlayout plan`` prints it.

>>> from tensorlayout.graph import load_graph
>>> from tensorlayout.model import zoo
>>> from tensorlayout.schedule import schedule_images
>>> s = schedule_images(load_graph(zoo.tiny_onnx()), ImageTarget(max_image=(40, 100)))
>>> s.fallbacks[0]
"conv1: 'c' [64, 16] held as 2 images of 8 channels (width past the limit [40, 100])"
>>> [(i["tensor"], i["image_type"], i["image"]) for i in s.images() if i["role"] == "weight"][:2]
[('conv1.B_bn[0:8]', 'ARGUMENT', [2, 1]), ('conv1.W_bn[0:8]', 'CONV2D_FILTER', [3, 18])]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import LayoutError, ModelError
from ..image import DEFAULT_MAX_IMAGE_SIZE

__all__ = ["ImageTarget", "ImageSchedule", "Launch", "ImageLayer", "WeightImage", "Table",
           "Act", "Virtual", "nhwc_of", "nchw_of", "full_nchw", "node_error", "slot_range"]


@dataclass(frozen=True)
class ImageTarget:
    """What the image schedule knows of a device: its image limits ``max_image`` (width,
    height), whether it is a ``gpu`` (sums of long layers are split over slices of their
    input channels on GPUs only), float16 images (``half``), and the ``winograd`` choice:
    "auto", 0 (never) or a tile 2, 4 or 6 for every 3x3 stride-1 layer."""

    max_image: tuple = DEFAULT_MAX_IMAGE_SIZE
    gpu: bool = True
    half: bool = False
    winograd: object = "auto"
    name: str = "default (many mobile GPUs)"

    def __post_init__(self):
        if self.winograd not in ("auto", 0, 2, 4, 6, None):
            raise LayoutError(f"winograd = {self.winograd!r} is not allowed: 'auto', 0 (none) or "
                              "a tile 2, 4 or 6")
        try:
            mi = tuple(int(v) for v in self.max_image)
        except (TypeError, ValueError):
            mi = ()
        if len(mi) != 2 or min(mi) < 1 or any(isinstance(v, bool) for v in self.max_image):
            raise LayoutError(f"max_image = {self.max_image!r} is not allowed: give (width, "
                              "height), two positive integers")
        object.__setattr__(self, "max_image", mi)

    @property
    def dtype(self):
        return np.dtype(np.float16 if self.half else np.float32)


@dataclass
class Launch:
    """One kernel launch: ``program`` ("net",) or ("wino", tile, mid dtype name), the kernel,
    its global size and arguments (image slots as key tuples, :class:`WeightImage` keys,
    :class:`Table` objects and NumPy scalars); ``variants``: other (kernel, global size)
    doing the same work, for the tuner."""

    program: tuple
    kernel: str
    gsize: tuple
    args: list
    flops: float = 0.0
    nbytes: float = 0.0
    variants: tuple = ()


@dataclass
class ImageLayer:
    """One layer: the node it runs (and the nodes fused into it), its kernel choice, launches
    and weight images (tensor, image type, [w, h])."""

    name: str
    op: str
    kind: str = ""
    fused: list = field(default_factory=list)
    launches: list = field(default_factory=list)
    weights: list = field(default_factory=list)


@dataclass(eq=False)
class WeightImage:
    """A constant's image: its key ("w", name), image type, the array packed into it and the
    packing keywords (tile, filter_format)."""

    key: tuple
    name: str
    image_type: str
    array: np.ndarray = field(repr=False)
    kw: dict
    size: tuple


@dataclass(eq=False)
class Table:
    """A small int32 buffer a kernel reads (a gather's channel table)."""

    values: np.ndarray


@dataclass
class Act:
    """A tensor in images: its slot and NHWC shape (``parts``: split by channels)."""

    name: str
    nhwc: tuple
    shape: tuple                    # the ONNX shape
    slot: object = None
    base: int = -1                  # first id of its elements when moves are traced
    parts: list = None              # [(c0, c1, Act of those channels)]

    def slots(self):
        return [p.slot for _, _, p in self.parts] if self.parts else [self.slot]

    def layout(self):
        """The :class:`~tensorlayout.core.Layout` of this image (IN_OUT_CHANNEL): an NCHW index
        of the batch items and channels it holds -> (y, x, lane), the kernels' own map."""
        from ..image import image_layout

        return image_layout("IN_OUT_CHANNEL", nchw_of(self.nhwc), layout="NCHW")


@dataclass
class Virtual:
    """A tensor made by moves only: for each element, the id of the device element it is."""

    name: str
    ids: np.ndarray
    node: object = None
    shape: tuple = ()


@dataclass
class ImageSchedule:
    """What :func:`schedule_images` decided; :meth:`images` lists every image."""

    target: ImageTarget
    graph: object
    layers: list
    slots: dict                     # slot key -> (width, height, dtype)
    names: dict                     # slot key -> the tensor or temporary it holds
    types: dict                     # slot key -> its image type, where not IN_OUT_CHANNEL
    weights: dict                   # key -> WeightImage
    blocks: list                    # [width, height, dtype, kinds]
    where: dict                     # slot key -> block index
    acts: dict                      # tensor name -> Act (in images) or Virtual (traced)
    inputs: dict                    # name -> Act
    outputs: list                   # (name, Act or None, ids or None)
    batch: int
    group: int
    part: int                       # channels an image holds where a tensor is split (0: none)
    fallbacks: list
    problems: list                  # what a non-strict schedule could not do, one line each
    live: list                      # bytes of live activation and temporary images per layer

    def images(self) -> list:
        """Every image the network takes: one entry per weight image and per activation and
        temporary slot, ``{"tensor", "role", "image_type", "image": [w, h], "dtype", "slot",
        "block": [w, h]}``.  ``image`` is the tensor's own size; ``slot`` the memory block it
        occupies (the blocks are shared by tensors never live at once, each allocated at
        ``block``, the largest size it holds) or, for a weight, "w:" and its name (a weight has
        an image of its own)."""
        return [row for _, row in self.image_rows()]

    def slot_range(self):
        """``(first, last)`` layer index using each slot (:func:`slot_range`): the layer that
        writes it, and the last that reads it."""
        return slot_range(self.layers, self.slots)

    def image_rows(self):
        """``(key, row)`` of :meth:`images`: the slot or weight key of each entry."""
        for key, w in self.weights.items():
            yield key, {"tensor": w.name, "role": "weight", "image_type": w.image_type,
                        "image": list(w.size), "dtype": self.target.dtype.name,
                        "slot": f"w:{w.name}", "block": list(w.size)}
        for key, (w, h, dt) in self.slots.items():
            if key[0] == "empty":
                continue
            role = "activation" if key[0] == "act" else "temporary"
            b = self.where[key]
            yield key, {"tensor": self.names[key], "role": role,
                        "image_type": self.types.get(key, "IN_OUT_CHANNEL"),
                        "image": [int(w), int(h)], "dtype": np.dtype(dt).name,
                        "slot": int(b), "block": [int(self.blocks[b][0]), int(self.blocks[b][1])]}

    @property
    def peak_image_bytes(self) -> int:
        """Bytes of the activation and temporary images as allocated: each memory block once,
        at the largest size any of its tensors needs."""
        return int(sum(w * h * 4 * np.dtype(dt).itemsize for w, h, dt, _ in self.blocks))

    @property
    def weight_bytes(self) -> int:
        return int(sum(w.size[0] * w.size[1] * 4 * self.target.dtype.itemsize
                       for w in self.weights.values()))


def slot_range(layers, slots):
    """``(first, last)``: for each image slot of ``slots``, the index of the first and of the
    last of ``layers`` whose launches use it (the first one writes it)."""
    first, last = {}, {}
    for i, layer in enumerate(layers):
        for ln in layer.launches:
            for a in ln.args:
                if isinstance(a, tuple) and a in slots:
                    first.setdefault(a, i)
                    last[a] = i
    return first, last


def nhwc_of(shape):
    """The NHWC shape of the IN_OUT_CHANNEL image of an NCHW (or (N, C)) tensor, or None."""
    if len(shape) == 4:
        n, c, h, w = shape
        return (n, h, w, c)
    if len(shape) == 2:
        return (shape[0], 1, 1, shape[1])
    return None


def nchw_of(shape):
    return (shape[0], shape[3], shape[1], shape[2])


def full_nchw(t):
    """The NCHW shape of a device tensor over the whole batch (its image may hold a group)."""
    return (t.shape[0],) + nchw_of(t.nhwc)[1:]


def node_error(node, why):
    """The error of a node this runtime cannot run as the graph has it."""
    return ModelError(f"node {node.name!r} ({node.op}): {why}")
