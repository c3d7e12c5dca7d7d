"""The OpenCL schedule: :func:`schedule_images`, and how it builds its schedule: tensors and
their images (batch groups, channel parts), moves traced on element ids, weights, the
problems of a non-strict plan, and the memory plan.  The ops' emitters are in
:mod:`tensorlayout.schedule.image_ops`."""

from __future__ import annotations

import numpy as np

from .._checks import q as _q
from ..errors import DeviceLimitError, LayoutError, ModelError
from ..image import image_shape
from .common import MOVES, fusions
from .image_ops import EMITTERS
from .images import (Act, ImageLayer, ImageSchedule, ImageTarget, Launch, Table, Virtual,
                     WeightImage, full_nchw, nhwc_of, node_error, slot_range)
from .memory import reuse_blocks

__all__ = ["Builder", "schedule_images"]

_ACT = {"Relu": 1, "Clip": 2, "LeakyRelu": 3, "Sigmoid": 4, "HardSwish": 5, "HardSigmoid": 6,
        "Tanh": 7}
#: Ops whose output an activation after them fuses into.
_FUSE_INTO = ("Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "BatchNormalization")


class _Input:
    name = "input"
    op = "input"


class Builder:
    """The state of one scheduling: tensors on the device, slots, weights, layers."""

    def __init__(self, graph, target, strict=True):
        self.graph = graph
        self.target = target
        self.strict = strict
        self.max_image = target.max_image
        self.winograd = target.winograd or 0
        self.half = target.half
        self.dtype = target.dtype
        self.gpu = target.gpu
        self.layers = []
        self.fallbacks = []
        self.problems = []
        self.acts = {}
        self.slots = {}                 # slot -> (width, height, dtype)
        self.names = {}                 # slot -> the tensor (or temporary) it holds
        self.types = {}                 # slot -> image type, where not IN_OUT_CHANNEL
        self.weights = {}               # key -> WeightImage
        self._next_base = 0

    # ------------------------------------------------------------------ problems
    def problem(self, exc):
        """Raise ``exc`` (strict) or record it and go on (a plan listing every problem)."""
        if self.strict:
            raise exc
        self.problems.append(str(exc))

    def fits(self, w, h):
        return w <= self.max_image[0] and h <= self.max_image[1]

    # ------------------------------------------------------------------ programs
    def net(self):
        return ("net",)

    def wino(self, tile, mid):
        return ("wino", tile, np.dtype(mid).name)

    def launch(self, layer, kernel, gsize, args, program=None, **kw):
        layer.launches.append(Launch(program or self.net(), kernel, tuple(gsize), list(args), **kw))

    # ------------------------------------------------------------------ tensors
    def _batch_groups(self):
        """How many batch items each image holds: all of them, or where some activation's
        IN_OUT_CHANNEL image [W * q(C), N * H] would be taller than the limit, the largest
        divisor g of the batch N whose images fit.  The network then runs once per group of g
        items, on images of g items (no op of this runtime mixes batch items)."""
        batch = {s[0] for s in self.graph.inputs.values() if len(s) >= 1}
        self.batch = self.group = next(iter(batch)) if len(batch) == 1 else None
        if len(batch) != 1 or self.batch <= 1:
            return
        N = self.batch
        rows = max(((s[2] if len(s) == 4 else 1) for s in self._tensor_shapes()
                    if len(s) in (2, 4) and s[0] == N), default=1)
        if N * rows <= self.max_image[1]:
            return
        self.group = g = max([d for d in range(1, N + 1)
                              if N % d == 0 and d * rows <= self.max_image[1]], default=1)
        self.fallbacks.append(
            f"network: batch {N} runs as {N // g} groups of {g} (images of {N} items up to "
            f"{N * rows} rows are past the limit {list(self.max_image)}); split images:")

    def _tensor_shapes(self):
        g = self.graph
        return list(g.inputs.values()) + [g.shapes[o] for n in g.nodes for o in n.outputs
                                          if o in g.shapes]

    def _channel_parts(self):
        """The channels each image holds where an activation's image [W * q(C), N * H] is wider
        than the limit: ``self.part`` channels (a multiple of 4, the same for every split
        tensor, so that the parts of two tensors line up and lanes never shift), the most
        that the widest such tensor's W leaves room for; 0 when no tensor needs it or none fits."""
        wide = [(s[3] if len(s) == 4 else 1) for s in self._tensor_shapes() if len(s) in (2, 4)
                and image_shape("IN_OUT_CHANNEL", nhwc_of(s))[0] > self.max_image[0]]
        self.part = 4 * (self.max_image[0] // max(wide)) if wide else 0

    def pieces(self, C, *acts):
        """The channel ranges a per-channel op runs over: the parts when any of ``acts`` is split."""
        return self.ranges(C) if any(a is not None and a.parts for a in acts) else [(0, C)]

    def ranges(self, C):
        return [(c0, min(c0 + self.part, C)) for c0 in range(0, C, self.part)]

    @staticmethod
    def piece(t, c0, c1):
        """The image holding channels c0 .. c1 of ``t`` and their first pixel's c4 in it."""
        for p0, p1, p in t.parts or ():
            if (p0, p1) == (c0, c1):
                return p, 0
        return t, c0 // 4

    def _why_not_split(self, w, h, node=None):
        if h > self.max_image[1]:
            return ("even one batch item is too tall: splitting the rows of an item is not "
                    "implemented")
        if not self.part:
            return "even four channels are too wide: splitting the columns is not implemented"
        return (f"{node.op if node is not None else 'this op'} cannot write an image split by "
                "channels")

    def weight(self, layer, name, array, kind, **kw):
        """The key of a constant's image of ``kind``, packed from ``array``."""
        array = np.ascontiguousarray(array, np.float32)
        w, h = image_shape(kind, array.shape, **kw)
        if not self.fits(w, h):
            self.problem(DeviceLimitError(
                f"layer {layer.name!r} ({layer.op}): the {kind} weight {name} image [{w}, {h}] is "
                f"past the image limit {list(self.max_image)}"))
        key = ("w", name)
        self.weights[key] = WeightImage(key, name, kind, array, dict(kw), (w, h))
        layer.weights.append((name, kind, [w, h]))
        return key

    def slot(self, key, size, name, image_type="IN_OUT_CHANNEL"):
        """Register an image slot of ``size`` (width, height, dtype) holding ``name``."""
        self.slots[key] = size
        self.names[key] = name
        if image_type != "IN_OUT_CHANNEL":
            self.types[key] = image_type
        return key

    def new_act(self, name, shape, node, split_ok=False, temp=None):
        """The images of tensor ``name``; ``temp``: a temporary of ``node`` named so (a slot
        of its own, not a graph tensor), with the same form the tensor would get."""
        nhwc = nhwc_of(shape)
        if nhwc is None:
            raise node_error(node, f"output {name!r} has shape {list(shape)}: images hold 4-D NCHW "
                             "or 2-D (N, C) tensors")
        if self.group != self.batch:
            if shape[0] != self.batch:
                raise DeviceLimitError(
                    f"node {node.name!r} ({node.op}): output {name!r} of shape {list(shape)} "
                    f"does not lead with the batch {self.batch}, which the network's images "
                    f"hold in groups of {self.group}")
            nhwc = (self.group,) + nhwc[1:]
            fw, fh = image_shape("IN_OUT_CHANNEL", nhwc_of(shape))
            if fh > self.max_image[1]:
                where = "input" if node.op == "input" else node.name
                self.fallbacks.append(f"{where}: {name!r} [{fw}, {fh}] held as "
                                      f"{self.batch // self.group} images of {self.group} "
                                      f"batch item{'s' * (self.group > 1)}")
        w, h = image_shape("IN_OUT_CHANNEL", nhwc)
        key = ("act", name) if temp is None else ("tmp", node.name, temp)
        label = name if temp is None else f"{node.name}:{temp}"
        a = Act(label, nhwc, tuple(shape), slot=key)
        if temp is None:
            self.acts[name] = a
        if w > self.max_image[0] and h <= self.max_image[1] and self.part and split_ok:
            N, H, W, C = nhwc
            a.parts = []
            for c0, c1 in self.ranges(C):
                p = Act(f"{label}[{c0}:{c1}]", (N, H, W, c1 - c0), tuple(shape), slot=key + (c0,))
                self.slot(p.slot, (*image_shape("IN_OUT_CHANNEL", p.nhwc), self.dtype), p.name)
                a.parts.append((c0, c1, p))
            if temp is None:
                where = "input" if node.op == "input" else node.name
                self.fallbacks.append(f"{where}: {name!r} [{w}, {h}] held as {len(a.parts)} "
                                      f"images of {self.part} channels (width past the limit "
                                      f"{list(self.max_image)})")
            return a
        if not self.fits(w, h):
            self.problem(DeviceLimitError(
                f"node {node.name!r} ({node.op}): the {'input' if node.op == 'input' else 'output'} "
                f"{name!r} image [{w}, {h}] is past the image limit {list(self.max_image)} and "
                f"this runtime has no smaller form for it ({self._why_not_split(w, h, node)})"))
        self.slot(a.slot, (w, h, self.dtype), label)
        return a

    def device(self, node, name, split_ok=False):
        """The image tensor ``name``: a device tensor, or a traced move materialized now;
        one split by channels only where the op takes it (``split_ok``)."""
        t = self.acts.get(name)
        if t is None:
            raise node_error(node, f"input {name!r} is not computed on the device (a constant "
                             "input where this runtime needs a tensor)")
        if isinstance(t, Virtual):
            t = self.materialize(t.node, name, t.ids, t.shape)
            if t is None:
                raise node_error(node, f"input {name!r} is a rearrangement (shape "
                                 f"{list(self.acts[name].ids.shape)}) that is not a gather of "
                                 "whole channels: this runtime cannot keep it in an image")
        if t.parts and not split_ok:
            raise self.split_input(node, t)
        return t

    def split_input(self, node, t):
        w, h = image_shape("IN_OUT_CHANNEL", t.nhwc)
        return DeviceLimitError(
            f"node {node.name!r} ({node.op}): input {t.name!r} is held as {len(t.parts)} images "
            f"split by channels (its image [{w}, {h}] is past the limit {list(self.max_image)}), "
            f"and {node.op} cannot take a split operand on this runtime")

    def empty(self):
        return self.slot(("empty",), (1, 1, self.dtype), "(no operand)")

    def act_params(self, node):
        p = node.params
        if p.runtime_bounds:
            raise node_error(node, "its bounds are computed at run time: this runtime takes "
                             "constant bounds")
        return (_ACT[p.kind], p.alpha, p.beta)

    # ------------------------------------------------------------------ the walk
    def build(self) -> ImageSchedule:
        g = self.graph
        host = dict((n.name, why) for n, why in g.host_only())
        if host and self.strict:        # a node only the CPU runs: say which, first
            node = next(n for n in g.nodes if n.name in host)
            raise node_error(node, f"{host[node.name]}; the opencl runtime does not run it "
                             "(runtime='cpu' does)")
        self._batch_groups()
        self._channel_parts()
        self.inputs = {}
        for name, shape in g.inputs.items():
            if g.input_dtypes[name].kind != "f":
                raise ModelError(f"input {name!r} has dtype {g.input_dtypes[name]}: images hold "
                                 "floating-point tensors")
            self.inputs[name] = self.new_act(name, shape, _Input(), split_ok=True)
        fused = fusions(g, _FUSE_INTO)
        skip = {a.name for acts in fused.values() for a in acts}
        for node in g.nodes:
            if node.name in skip:
                continue
            try:
                if node.name in host:
                    raise node_error(node, f"{host[node.name]}; the opencl runtime does not run it "
                                     "(runtime='cpu' does)")
                if node.op in MOVES:
                    self._move(node)
                    continue
                emit = EMITTERS.get(node.op)
                if emit is None:
                    raise node_error(node, f"op {node.op} is not supported on OpenCL images; this "
                                     f"runtime runs {', '.join(sorted(EMITTERS) + sorted(MOVES))}")
                layer = ImageLayer(node.name, node.op)
                act = (0, 0.0, 0.0)
                final = node.outputs[0]
                for a in fused.get(node.name, ()):
                    act = self.act_params(a)
                    layer.fused.append(f"{a.op} {a.name}")
                    final = a.outputs[0]
                emit(self, node, layer, final, g.shapes[final], act)
                self.layers.append(layer)
            except LayoutError as exc:
                if self.strict:
                    raise
                self.problems.append(str(exc).splitlines()[0])
                for a in fused.get(node.name, ()) or [node]:
                    for o in a.outputs:
                        if o and o not in self.acts and len(g.shapes.get(o, ())) in (2, 4):
                            self.new_act(o, g.shapes[o], node)
        outputs = []
        for name in g.outputs:
            t = self.acts.get(name)
            if t is None:
                raise LayoutError(f"graph output {name!r} is a constant: nothing runs on the device")
            ids = None
            if isinstance(t, Virtual):
                got = self.materialize(t.node, name, t.ids, t.shape)
                if got is None:
                    sources = self.source_of(t.ids.reshape(-1))
                    if len(sources) != 1:
                        raise LayoutError(f"graph output {name!r} is a rearrangement of several "
                                          "tensors: not supported on this runtime")
                    src = self.acts[sources[0]]
                    ids = t.ids - src.base                 # positions in the source, made once
                    t = src
                else:
                    t = got
            outputs.append((name, t, ids))
        return self._finish(outputs)

    # ------------------------------------------------------------------ moves of whole channels
    def _ids(self, name):
        t = self.acts.get(name)
        if t is None:
            return np.asarray(self.graph.consts[name]) if name in self.graph.consts else None
        if isinstance(t, Virtual):
            return t.ids
        if t.base < 0:
            t.base = self._next_base
            self._next_base += int(np.prod(t.shape))
        return t.base + np.arange(int(np.prod(t.shape)), dtype=np.int64).reshape(t.shape)

    def source_of(self, ids):
        """The device tensors (by name) that the element ids come from."""
        traced = sorted((t.base, n) for n, t in self.acts.items()
                        if isinstance(t, Act) and t.base >= 0)
        bases = np.array([b for b, _ in traced])
        idx = np.searchsorted(bases, ids, side="right") - 1
        return [traced[i][1] for i in np.unique(idx)]

    def _move(self, node):
        outs = self._trace(node)
        if any(len(self.source_of(np.asarray(o).reshape(-1))) > 4 for o in outs if o is not None):
            # a gather reads four images at once: where the traced inputs already gather from
            # more, make them images first, so that the gathers stay single kernels
            for n in node.inputs:
                if n and isinstance(self.acts.get(n), Virtual):
                    self.device(node, n)
            outs = self._trace(node)
        for name, ids in zip(node.outputs, outs):
            if name:
                # kept as traced ids: an image is made only where a kernel reads it
                self.acts[name] = Virtual(name, np.asarray(ids), node, tuple(self.graph.shapes[name]))

    def _trace(self, node):
        """The element ids of the move's outputs, from those of its inputs."""
        ins = []
        for i, n in enumerate(node.inputs):
            if not n:
                ins.append(None)
                continue
            if n in self.graph.consts and (i == 0 or node.op == "Concat"):
                raise node_error(node, f"input {n!r} is a constant: on images a {node.op} moves "
                                 "computed tensors only")
            v = self._ids(n)
            if v is None:
                raise node_error(node, f"input {n!r} is neither on the device nor a constant")
            ins.append(v)
        try:
            outs = self.graph.kernel(node)(ins, None)
        except LayoutError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise node_error(node, f"tracing the move failed: {exc}") from None
        return list(outs)

    def materialize(self, node, name, ids, shape):
        """Turn a traced move into an image when it is a channel gather (or the same image);
        None when it is not."""
        if len(shape) not in (2, 4):
            return None
        out4 = shape if len(shape) == 4 else tuple(shape) + (1, 1)
        ids4 = ids.reshape(out4)
        srcs = self.source_of(ids4.reshape(-1))
        N, C, H, W = out4
        for s in srcs:
            tn, _, th, tw = full_nchw(self.acts[s])
            if (tn, th, tw) != (N, H, W):
                return None
        # each output element must be (n, c', h, w) of its source, with c' fixed per channel
        first = ids4[0, :, 0, 0]
        owner = [self.source_of(np.array([i]))[0] for i in first]
        local = np.empty(C, np.int64)
        for c in range(C):
            t = self.acts[owner[c]]
            tn, th, tw, tc = t.nhwc
            cc = int(first[c] - t.base) // (th * tw)
            want = t.base + (np.arange(N)[:, None, None] * tc + cc) * th * tw + \
                np.arange(H)[None, :, None] * tw + np.arange(W)[None, None, :]
            if not np.array_equal(ids4[:, c], want):
                return None
            local[c] = cc
        if len(srcs) == 1 and np.array_equal(local, np.arange(C)) and \
                self.acts[srcs[0]].nhwc[3] == C:
            src = self.acts[srcs[0]]
            alias = Act(name, src.nhwc, tuple(shape), slot=src.slot, base=src.base,
                        parts=src.parts)
            # the alias shares the image and the ids
            self.acts[name] = alias
            return alias
        for s in srcs:
            if self.acts[s].parts:
                raise self.split_input(node, self.acts[s])
        layer = ImageLayer(node.name, node.op)
        out = self.new_act(name, shape, node)
        # The gather kernel reads four images: more sources take stages, each reading the
        # previous stage's image (channels gathered so far, in place) and three new sources.
        stages = [srcs[:4]] + [srcs[k:k + 3] for k in range(4, len(srcs), 3)]
        done, prev = set(), None
        for k, group in enumerate(stages):
            imgs = ([] if prev is None else [prev]) + [self.acts[s].slot for s in group]
            offsets, acc = {}, (0 if prev is None else C)
            for s in group:
                offsets[s] = acc
                acc += self.acts[s].nhwc[3]
            lut = np.array([offsets[o] + cc if o in offsets else (c if o in done else 0)
                            for c, (o, cc) in enumerate(zip(owner, local))], np.int32)
            starts = ([] if prev is None else [0]) + [offsets[s] for s in group]
            starts += [1 << 30] * (4 - len(starts))
            imgs += [imgs[0]] * (4 - len(imgs))
            dst = out.slot if k == len(stages) - 1 else self.slot(
                ("tmp", node.name, f"G{k % 2}"), self.slots[out.slot], f"{node.name}:G{k % 2}")
            self.launch(layer, "gather_channels", (_q(C), W, out.nhwc[0] * H),
                        [*imgs, Table(lut), dst, np.int32(W), np.int32(out.nhwc[0] * H),
                         np.int32(starts[1]), np.int32(starts[2]), np.int32(starts[3]),
                         np.int32(C)], nbytes=2 * N * H * W * C * self.dtype.itemsize)
            done.update(group)
            prev = dst
        layer.kind = (f"gather channels ({len(srcs)} source{'s' if len(srcs) > 1 else ''}"
                      + (f", {len(stages)} stages)" if len(stages) > 1 else ")"))
        self.layers.append(layer)
        return out

    # ------------------------------------------------------------------ memory
    def _finish(self, outputs) -> ImageSchedule:
        """Every slot's live range over the layers, and the blocks they share."""
        first, last = slot_range(self.layers, self.slots)
        end = len(self.layers)
        for _, t, _ in outputs:
            for key in t.slots():
                last[key] = end
        for a in self.inputs.values():
            for key in a.slots():
                first[key] = -1
                last.setdefault(key, -1)
        for key in self.slots:           # an image no kernel touches still gets its block
            first.setdefault(key, end)
            last.setdefault(key, end)
        blocks, where = reuse_blocks(self.slots, first, last, end + 1)
        live = []
        for i in range(end):
            live.append(int(sum(w * h * 4 * np.dtype(dt).itemsize for k, (w, h, dt)
                                in self.slots.items() if k[0] != "empty"
                                and first[k] <= i <= last[k])))
        return ImageSchedule(self.target, self.graph, self.layers, self.slots, self.names,
                             self.types, self.weights, blocks, where, self.acts, self.inputs,
                             outputs, self.batch,
                             self.group, self.part, self.fallbacks, self.problems, live)


def schedule_images(graph, target=None, strict=True) -> ImageSchedule:
    """Schedule ``graph`` on images for ``target`` (default: 16384 x 16384 limits, a GPU,
    float32).  ``strict``: raise the first problem (an op this runtime lacks, an image past
    the limits with no smaller form); otherwise record each in ``problems`` and go on, as a
    plan that shows them all does."""
    return Builder(graph, target or ImageTarget(), strict).build()
