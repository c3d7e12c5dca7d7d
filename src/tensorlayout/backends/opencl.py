"""The OpenCL backend: a network's image schedule on a real device, prepared once.

:class:`OpenCLSession` reads the device's limits into an
:class:`~tensorlayout.schedule.ImageTarget`, asks :func:`~tensorlayout.schedule.schedule_images`
for the schedule and does only what is device-specific: it allocates the schedule's memory
blocks and weight images, builds the programs (``net.cl`` and ``conv.cl``'s Winograd stages),
binds every launch to its kernel and arguments and, per run, uploads the input, enqueues the
kernels and reads the outputs back.  :meth:`OpenCLSession.images` lists what it allocated,
read back from the images themselves.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from .._checks import q as _q
from ..errors import LayoutError
from ..graph import Graph, load_graph
from ..opencl._device import cl, get_context
from ..opencl.conv import wino_source
from ..opencl.transfer import empty_image
from ..opencl.tuning import choose_local_sizes, round_up
from ..schedule import ImageTarget, schedule_images
from ..schedule.images import Table, nchw_of

__all__ = ["OpenCLSession", "NETWORK_OPS", "target_of"]

#: Work-group sizes on CPU devices, by the launch's number of dimensions.
_CPU_LOCAL = {2: (16, 4), 3: (4, 4, 4)}


def _network_ops():
    from ..schedule.common import MOVES
    from ..schedule.image_ops import EMITTERS

    return tuple(sorted(set(EMITTERS) | MOVES))


#: The ONNX ops this runtime runs on images.
NETWORK_OPS = _network_ops()


def target_of(cctx, half=False, winograd="auto", max_image=None) -> ImageTarget:
    """The :class:`ImageTarget` of an OpenCL device (``max_image`` lowers its limits)."""
    info = cctx.info
    if not info.image_support:
        raise LayoutError(f"device {info.name!r} has no image support: choose another device")
    if half and not info.half_images:
        raise LayoutError(f"half = True is not allowed on {info.name!r}: it has no CL_RGBA / "
                          "CL_HALF_FLOAT images")
    limits = tuple(info.max_image_size)
    if max_image is not None:
        given = ImageTarget(max_image=max_image).max_image          # checked there
        limits = (min(given[0], limits[0]), min(given[1], limits[1]))
    return ImageTarget(limits, info.is_gpu, bool(half), winograd or 0,
                       f"OpenCL device {info.name!r}")


@dataclass
class _Bound:
    """A schedule's launch bound to its kernel object and arguments on the device."""

    launch: object
    program: tuple                  # (source name, options, source text or None)
    kernel: str
    gsize: tuple
    lsize: object = None
    base_gsize: tuple = ()
    kobj: object = None
    kargs: list = field(default_factory=list)

    @property
    def variants(self):
        return self.launch.variants


class OpenCLSession:
    """Run an ONNX network with every activation in OpenCL images; prepared once.

    ``model``: a :class:`tensorlayout.model.Model`, a :class:`~tensorlayout.graph.Graph`, or
    anything :func:`tensorlayout.model.load` takes.  ``device``: as :func:`tensorlayout.opencl.get_context`.  ``half``: float16 images
    (CL_HALF_FLOAT) throughout, float32 arithmetic in the kernels.  ``winograd``: "auto"
    (tile 4 for 3x3 stride-1 layers with at least 16 input and output channels, tile 2 when
    the output is under 8 x 8), 0 for none, or a tile 2 / 4 / 6 for every such layer.
    ``max_image``: (width, height) limits below the device's.  Where an image would not fit,
    a Winograd layer falls back to a smaller tile, then the direct kernel; activations too
    tall hold the batch in groups (the network runs once per group), too wide are held as one
    image per part of their channels (:attr:`fallbacks` lists each place).  ``tune``: pick
    each kernel's work-group size by timing (cached per device, see
    :mod:`tensorlayout.opencl.tuning`).  One session runs one call at a time: a second
    thread's :meth:`run` waits for the first.

    >>> import numpy as np
    >>> from tensorlayout.model import load, zoo
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
        graph = getattr(model, "graph", model)
        if not isinstance(graph, Graph):
            graph = load_graph(model)
        if winograd not in ("auto", 0, 2, 4, 6, None):
            raise LayoutError(f"winograd = {winograd!r} is not allowed: 'auto', 0 (none) or a "
                              "tile 2, 4 or 6")
        self.model = model
        self.graph = graph
        self.cctx = get_context(device)
        self.queue = self.cctx.queue      # with profiling: loading, tuning, profiled runs
        # Plain runs go to a queue without profiling: on NVIDIA's driver an enqueue costs
        # about 6 us there and 11.5 us on a profiling queue (an H100, measured).
        self.run_queue = cl().CommandQueue(self.cctx.context, self.cctx.device)
        self.target = target_of(self.cctx, half, winograd, max_image)
        self.schedule = schedule_images(graph, self.target)
        s = self.schedule
        self.max_image = self.target.max_image
        self.half = self.target.half
        self.dtype = self.target.dtype
        self.layers = s.layers
        self.fallbacks = s.fallbacks
        self.batch, self.group, self.part = s.batch, s.group, s.part
        self._lock = threading.Lock()
        self._events, self._profile = None, None
        self._pins: list = []           # page-locked buffers behind the input/output arrays
        self._allocate()
        self._bind()
        self._transfers()
        self.tuned = 0
        if tune:
            self.tuned = self._tune()

    # ------------------------------------------------------------------ preparing
    def _program(self, desc):
        """The (source name, options, source) of a schedule's program descriptor."""
        opts = (f"-DIMG_HALF={int(self.half)}",)
        if desc[0] == "net":
            return ("net.cl", opts + tuple("-DCONV_PARTIAL=1" for _ in desc[1:]), None)
        _, m, mid = desc
        return (f"conv.cl:wino{m}", opts + (f"-DMID_HALF={int(mid == 'float16')}",),
                wino_source(m))

    def _allocate(self):
        """The schedule's memory blocks and weight images, weights packed on the host (one
        program for every layout) and copied once."""
        from ..image import to_image

        s = self.schedule
        blocks = [empty_image(self.queue, w, h, dt) for w, h, dt, _ in s.blocks]
        self._blocks = blocks
        self._images = {k: blocks[b] for k, b in s.where.items()}
        for key, wi in s.weights.items():
            w, h = wi.size
            pixels = to_image(wi.array, wi.image_type, dtype=self.dtype, max_size=None, **wi.kw)
            img = empty_image(self.queue, w, h, self.dtype)
            cl().enqueue_copy(self.queue, img, pixels, origin=(0, 0), region=(w, h),
                              is_blocking=True)
            self._images[key] = img

    def _arg(self, a):
        if isinstance(a, tuple):
            return self._images[a]
        if isinstance(a, Table):
            pcl = cl()
            return pcl.Buffer(self.cctx.context, pcl.mem_flags.READ_ONLY | pcl.mem_flags.COPY_HOST_PTR,
                              hostbuf=a.values)
        return a

    def _bind(self):
        pcl = cl()
        # On a CPU device (PoCL) a fixed work-group size: one work-group function per kernel
        # to compile (PoCL builds one per local size) and, measured on PoCL, 5-35% less
        # device time than leaving the choice to the driver.  GPUs: the driver's choice
        # unless tuned.
        cpu = "CPU" in self.cctx.info.kind.split("/")
        self._bound = []
        for layer in self.layers:
            for ln in layer.launches:
                prog = self._program(ln.program)
                bd = _Bound(ln, prog, ln.kernel, tuple(ln.gsize), base_gsize=tuple(ln.gsize))
                if cpu:
                    bd.lsize = _CPU_LOCAL[len(ln.gsize)]
                    bd.gsize = round_up(ln.gsize, bd.lsize)
                bd.kobj = pcl.Kernel(self.cctx.program(*prog), ln.kernel)
                bd.kargs = [self._arg(a) for a in ln.args]
                bd.kobj.set_args(*bd.kargs)
                self._bound.append((layer, bd))

    def _transfers(self):
        pcl = cl()
        s = self.schedule
        prog = self.cctx.program(*self._program(("net",)))
        mf = pcl.mem_flags
        g = self.group
        # the groups of batch items a run takes in turn: all at once unless the images hold fewer
        self._groups = [slice(None)] if g == self.batch else \
            [slice(n0, n0 + g) for n0 in range(0, self.batch, g)]
        i32 = np.int32
        self._uploads = []
        for name, a in s.inputs.items():
            n, c, h, w = nchw_of(a.nhwc)              # n: the items of one group
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
        for name, t, ids in s.outputs:
            n, c, h, w = nchw_of(t.nhwc)
            host = self._pinned((t.shape[0], c, h, w))
            buf = pcl.Buffer(self.cctx.context, mf.WRITE_ONLY, max(n * c * h * w * 4, 4))
            kernels = []
            for c0, c1, part in t.parts or [(0, c, t)]:
                k = pcl.Kernel(prog, "download")
                k.set_args(self._images[part.slot], buf, i32(n), i32(c1 - c0), i32(h), i32(w),
                           i32(c0), i32(c))
                kernels.append((k, (_q(c1 - c0), w, n * h)))
            self._downloads.append((name, host, buf, kernels, ids, self.graph.shapes[name]))

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

    def _tune(self) -> int:
        """Each launch's work-group size (and the Winograd GEMM's blocking) chosen by timing."""
        pcl = cl()
        chosen = 0
        for (_, bd), (name, need, best) in zip(self._bound, choose_local_sizes(
                self.cctx, self.queue, [bd for _, bd in self._bound])):
            if name != bd.kernel:
                bd.kernel = name
                bd.kobj = pcl.Kernel(self.cctx.program(*bd.program), name)
                bd.kobj.set_args(*bd.kargs)
                bd.base_gsize = tuple(need)
            bd.lsize = best
            bd.gsize = tuple(need) if best is None else round_up(need, best)
            chosen += best is not None
        return chosen

    # ------------------------------------------------------------------ running
    def run(self, *args, profile=False, **kwargs):
        """Run on float32 NCHW inputs; the output array (a list for several outputs).

        ``profile=True`` keeps each kernel's device time from OpenCL profiling events in
        :attr:`last_profile` (see :meth:`profile_table`).
        """
        feeds = self.graph.feeds(args, kwargs, options=("profile",))
        with self._lock:
            return self._run(feeds, profile)

    def run_tapped(self, feeds: dict, tap):
        """Run on checked ``feeds`` (as :meth:`run`) and call ``tap(queue, items, layer)``
        after the input's upload (``layer`` None) and after each layer's kernels are
        enqueued: the same kernels on the same images, so an image ``tap`` reads there
        (:meth:`read_image` on ``queue``) holds what that layer wrote, before a later layer
        takes its memory block.  ``items``: the batch items of this pass (a slice)."""
        with self._lock:
            return self._run(feeds, False, tap)

    def read_image(self, key, queue=None) -> np.ndarray:
        """The pixels ``(height, width, 4)`` of a schedule slot or weight image ``key``, at the
        size the schedule gives it (its memory block may be larger), in the image's dtype."""
        if key in self.schedule.weights:
            w, h = self.schedule.weights[key].size
        else:
            w, h = self.schedule.slots[key][:2]
        host = np.empty((h, w, 4), self.dtype)
        cl().enqueue_copy(queue or self.queue, host, self._images[key], origin=(0, 0),
                          region=(w, h), is_blocking=True)
        return host

    def _run(self, feeds, profile, tap=None):
        pcl = cl()
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
            if tap is not None:
                tap(q, items, None)
            for j, (layer, bd) in enumerate(self._bound):
                ev = pcl.enqueue_nd_range_kernel(q, bd.kobj, bd.gsize, bd.lsize)
                if profile:
                    events.append((layer.name, layer.op, bd.kernel, ev))
                if tap is not None and (j + 1 == len(self._bound) or self._bound[j + 1][0] is not layer):
                    tap(q, items, layer)
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
    def images(self) -> list:
        """Every image this session allocated, in the schedule's order and form
        (:meth:`~tensorlayout.schedule.images.ImageSchedule.images`): the memory block each
        tensor sits in, that block's size and channel type read back from the OpenCL image
        itself (a weight's block is its own image)."""
        pcl = cl()
        block = {id(b): i for i, b in enumerate(self._blocks)}
        out = []
        for key, row in self.schedule.image_rows():
            img = self._images[key]
            fmt = img.get_image_info(pcl.image_info.FORMAT)
            dt = "float16" if fmt.channel_data_type == pcl.channel_type.HALF_FLOAT else "float32"
            size = [int(img.get_image_info(pcl.image_info.WIDTH)),
                    int(img.get_image_info(pcl.image_info.HEIGHT))]
            weight = row["role"] == "weight"
            out.append({**row, "image": size if weight else row["image"], "dtype": dt,
                        "slot": row["slot"] if weight else block[id(img)], "block": size})
        return out

    def summary(self) -> dict:
        """What was prepared: layers, kernels, images allocated (read from the device), fallbacks."""
        pcl = cl()

        def nbytes(img):
            return int(img.get_image_info(pcl.image_info.WIDTH) * img.get_image_info(
                pcl.image_info.HEIGHT) * img.get_image_info(pcl.image_info.ELEMENT_SIZE))
        kinds = [k for _, _, _, k in self.schedule.blocks]
        return {
            "device": self.cctx.info.name,
            "dtype": str(self.dtype),
            "layers": len(self.layers),
            "kernels": len(self._bound),
            "images_allocated": len(self._blocks),
            "image_bytes": sum(nbytes(b) for b in self._blocks),
            "activation_bytes": sum(nbytes(b) for b, k in zip(self._blocks, kinds) if "act" in k),
            "temporary_bytes": sum(nbytes(b) for b, k in zip(self._blocks, kinds)
                                   if "act" not in k and "tmp" in k),
            "peak_image_bytes": sum(nbytes(b) for b in self._blocks),
            "weight_bytes": sum(nbytes(self._images[k]) for k in self.schedule.weights),
            "fallbacks": list(self.fallbacks),
            "tuned_kernels": self.tuned,
        }

    def layer_table(self) -> list:
        """Per layer: name, op, kernel choice, fused ops, weight image types."""
        kernels = {}
        for layer, bd in self._bound:
            kernels.setdefault(id(layer), []).append(bd.kernel)
        return [{"layer": layer.name, "op": layer.op, "kind": layer.kind, "fused": layer.fused,
                 "kernels": kernels.get(id(layer), []),
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
        """Every bound kernel launch with its layer: (layer, launch)."""
        return list(self._bound)
