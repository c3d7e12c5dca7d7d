"""Two runtimes side by side, tensor by tensor: where a port of a network goes wrong.

:func:`compare` runs one network on two of the runtimes (``cpu``, ``opencl``, ``opencl:half``,
``npu``) on the same input and reads every tensor back from where that runtime keeps it: the
CPU's NumPy arrays as each step writes them, the OpenCL session's images right after the layer
that writes them (before a later layer takes their memory block), the NPU's local memory
after the step's last instruction (system memory where local memory holds only the last slice
or image).  Each tensor becomes a row: max |a - b|, the relative L2 error ``|b - a| / |a|``
(``a`` is the reference), cosine similarity, SQNR in dB, NaN and inf on each side, and how
many dB of SQNR the layer itself lost.  The first row past the tolerance names its node.

A tensor one runtime never stores says so instead of being skipped: ``fused`` (an activation
applied in the kernel before it, on images), ``traced`` (a move the image schedule traces to
its sources; compared through the images of those sources), ``view`` (the same storage as
another tensor), ``host`` (an NPU step the chip does not run).  The CPU fuses too (a
convolution with its residual Add and activation); what its fused steps never store is
``recomputed`` from their stored inputs with each node's NumPy semantics, so the CPU, the
usual reference, has every tensor.

>>> import numpy as np
>>> from tensorlayout.model import load, zoo
>>> m = load(zoo.tiny_onnx())
>>> x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
>>> c = compare(m, a="cpu", b="cpu", x=x)
>>> all(r["cosine"] == 1.0 and r["max_abs"] == 0.0 for r in c.rows), c.first
(True, None)
>>> c = compare(m, a="cpu", b="opencl", x=x)
>>> [(r["tensor"], r["state_a"], r["state_b"], r["layer_b"]) for r in c.rows][1:4]
[('b', 'recomputed', 'fused', 'conv1'), ('c', 'computed', 'computed', 'conv1'), ('d', 'computed', 'computed', 'pool1')]
>>> max(r["rel_l2"] for r in c.rows if r["compared"]) < c.tol
True
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import LayoutError, ModelError, short
from ..graph import Graph, load_graph

__all__ = ["RUNTIMES", "DEFAULT_TOL", "Held", "Comparison", "compare", "capture", "metrics",
           "runtime_arg", "default_tol"]

#: The runtimes :func:`compare` takes, as ``a`` and ``b``.
RUNTIMES = ("cpu", "opencl", "opencl:half", "npu")

#: The default tolerance on the relative L2 error: float32 runtimes against each other, and any
#: pair with a float16 side.
DEFAULT_TOL = {"float32": 1e-4, "float16": 1e-2}


def runtime_arg(spec, argument="a") -> str:
    """A runtime name (case-insensitive), or a LayoutError naming ``argument``.

    >>> runtime_arg("OpenCL:Half")
    'opencl:half'
    >>> runtime_arg("gpu", "--b")
    Traceback (most recent call last):
    ...
    tensorlayout.errors.LayoutError: --b = 'gpu' is not allowed: it must be one of cpu, opencl, opencl:half, npu
    """
    t = str(spec).strip().lower() if isinstance(spec, str) else None
    if t not in RUNTIMES:
        raise LayoutError(f"{argument} = {short(spec)!r} is not allowed: it must be one of "
                          f"{', '.join(RUNTIMES)}")
    return t


def default_tol(a: str, b: str) -> float:
    """The tolerance of a pair: 1e-2 with a float16 side, else 1e-4."""
    return DEFAULT_TOL["float16" if "opencl:half" in (a, b) else "float32"]


@dataclass
class Held:
    """One tensor as one runtime holds it.

    ``state``: "input", "computed" (stored by the layer that writes it), "view" (the storage
    of another tensor), "traced" (a move with no storage of its own, read through its
    sources'), "host" (an NPU step run on the host), "fused" (never stored: applied inside
    another layer's kernel), "recomputed" (never stored by the CPU's fused step, computed
    again from its stored inputs with the node's NumPy semantics, so that the CPU reference
    has every tensor) or "absent".  ``value``: the logical tensor (its ONNX shape) as
    read back, None where the runtime has none.  ``layer``: the runtime's layer or step that
    writes it.  ``storage``: one line saying where it was read from.  ``pieces``: for dumps,
    ``(physical array, index, description)`` per piece of storage, ``index`` holding for each
    logical element its flat position in the physical array (-1 where another piece holds it).
    """

    state: str
    value: object = None
    layer: object = None
    storage: str = ""
    pieces: list = field(default_factory=list, repr=False)


def _graph_of(model) -> Graph:
    graph = getattr(model, "graph", model)
    return graph if isinstance(graph, Graph) else load_graph(model)


# ---------------------------------------------------------------------------- the CPU
def _flat_pieces(value, what):
    v = np.ascontiguousarray(value)
    return [(v, np.arange(v.size, dtype=np.int64).reshape(v.shape), {"storage": what})]


def _capture_cpu(model, graph, feeds, keep):
    from ..backends.cpu import CpuProgram
    from ..schedule import VIEWS, schedule_cpu

    prog = model.cpu() if hasattr(model, "cpu") else CpuProgram(schedule_cpu(graph))
    held = {}
    for name, v in feeds.items():
        held[name] = Held("input", np.array(v), None, "NumPy array (NCHW)")

    fused = []

    def tap(step, outs):
        node = step.node
        for name, v in zip(step.outputs, outs):
            if not name:
                continue
            where = (f"NumPy view of {node.inputs[0]}'s array" if node.op in VIEWS
                     else "NumPy array (NCHW), as the step wrote it")
            held[name] = Held("computed", np.array(v), node.name, where)
        if step.fused:
            fused.append((node, [graph.node(n) for n in step.fused]))

    prog.run(feeds, tap=tap)
    for node, after in fused:
        _recompute(graph, held, node, after)
    if keep:
        for h in held.values():
            if h.state == "computed" or h.state == "input":
                h.pieces = _flat_pieces(h.value, "the NumPy array itself (row-major)")
    return held


def _recompute(graph, held, node, after):
    """The tensors a fused CPU step never stores (its node's output, and each fused node's but
    the last), from their stored inputs with each node's NumPy semantics, in order."""
    names = ", ".join(f"{n.op} {n.name}" for n in after)
    for n in [node] + after[:-1]:
        ins = []
        for t in n.inputs:
            v = graph.consts.get(t) if t in graph.consts else held.get(t)
            ins.append(v if v is None or isinstance(v, np.ndarray) else v.value)
        if any(v is None for t, v in zip(n.inputs, ins) if t):
            return
        with np.errstate(all="ignore"):
            out = graph.kernel(n)(ins, None)
        held[n.outputs[0]] = Held(
            "recomputed", np.asarray(out[0]), node.name,
            f"never stored: step {node.name} applies {names} in the same pass; recomputed "
            "from its stored inputs with the node's NumPy semantics")


# ---------------------------------------------------------------------------- OpenCL images
def _capture_opencl(graph, feeds, half, device, keep, max_image, winograd):
    from ..backends.opencl import OpenCLSession
    from ..image import row
    from ..schedule.images import Act, Virtual, full_nchw

    sess = OpenCLSession(graph, device, half=half, max_image=max_image, winograd=winograd)
    s = sess.schedule
    first, _ = s.slot_range()
    index = {id(layer): i for i, layer in enumerate(s.layers)}
    reads = {}                           # layer index (-1: the inputs) -> [tensor names]
    held = {}
    for name, t in s.acts.items():
        if not isinstance(t, Act) or t.slots()[0][1] != name:
            continue
        at = -1 if name in s.inputs else max(first.get(k, -2) for k in t.slots())
        if at == -2:
            held[name] = Held("absent", storage="no kernel writes its image")
            continue
        reads.setdefault(at, []).append(name)
        layer = None if at < 0 else s.layers[at]
        held[name] = Held("input" if at < 0 else "computed",
                          np.zeros(full_nchw(t), np.float32), None if layer is None else layer.name,
                          _image_words(s, t))
    itemsize = s.target.dtype.itemsize
    r = row("IN_OUT_CHANNEL", "NCHW")
    pixel = f"(x, y) = {r.pixel_text()}, lane = {r.lane} % 4"

    def tap(queue, items, layer):
        for name in reads.get(-1 if layer is None else index[id(layer)], ()):
            t, h = s.acts[name], held[name]
            n0 = items.start or 0
            for c0, c1, part in t.parts or [(0, t.nhwc[3], t)]:
                pixels = sess.read_image(part.slot, queue)
                lay = part.layout()
                h.value[items, c0:c1] = lay.unpack(pixels)
                if keep:
                    h.pieces.append((pixels, (lay, n0, c0), {
                        "storage": "image", "slot": str(part.slot), "block": int(s.where[part.slot]),
                        "image": [int(pixels.shape[1]), int(pixels.shape[0])],
                        "dtype": pixels.dtype.name, "bytes_per_lane": itemsize,
                        "image_type": "IN_OUT_CHANNEL", "buffer": "NCHW",
                        "batch": [n0, n0 + part.nhwc[0]], "channels": [int(c0), int(c1)],
                        "pixel": pixel}))

    sess.run_tapped(feeds, tap)
    for name, h in held.items():
        if h.value is not None:
            full = h.value.shape
            h.value = h.value.reshape(s.acts[name].shape)
            h.pieces = [(p, _index_of(full, *where).reshape(h.value.shape), d)
                        for p, where, d in h.pieces]
    # views of an image, traced moves, fused tensors
    for name, t in s.acts.items():
        if isinstance(t, Act) and name not in held:
            src = s.names[t.slots()[0]].split("[")[0]
            base = held.get(src)
            if base is None or base.value is None:
                held[name] = Held("absent", storage=f"the image of {src}, which is not read")
                continue
            held[name] = Held("view", base.value.reshape(t.shape), base.layer,
                              f"the image of {src} (the same memory)",
                              [(p, i.reshape(t.shape), d) for p, i, d in base.pieces])
    for name, t in s.acts.items():
        if isinstance(t, Virtual):
            held[name] = _traced(s, name, t, held)
    for layer in s.layers:
        if layer.fused:
            held[graph.node(layer.name).outputs[0]] = Held(
                "fused", None, layer.name, f"never stored: layer {layer.name} applies "
                f"{', '.join(layer.fused)} in the same kernel")
    return held


def _image_words(s, t):
    w = [f"image [{s.slots[k][0]}, {s.slots[k][1]}] in memory block {s.where[k]}" for k in t.slots()]
    text = w[0] if len(w) == 1 else f"{len(w)} images by channels ({', '.join(w)})"
    if s.group != s.batch:
        text += f", {s.group} batch item{'s' * (s.group > 1)} per pass"
    return text + (", read after the upload" if t.name in s.inputs else
                   ", read after the layer that writes it")


def _index_of(full, lay, n0, c0):
    """For every element of the NCHW tensor ``full``, its flat position in one piece's pixels
    (-1 where another piece holds it)."""
    idx = np.full(full, -1, np.int64)
    n, c, h, w = lay.shape
    grid = np.indices((n, c, h, w)).reshape(4, -1)
    idx[n0:n0 + n, c0:c0 + c] = np.asarray(lay.locate_flat(tuple(grid))).reshape(n, c, h, w)
    return idx


def _traced(s, name, t, held):
    """A traced move's values, gathered from its sources' read-back images by its ids."""
    from ..schedule.images import Act

    srcs = sorted(((a.base, n) for n, a in s.acts.items()
                   if isinstance(a, Act) and a.base >= 0 and held.get(n) is not None
                   and held[n].value is not None), key=lambda p: p[0])
    ids = np.asarray(t.ids, np.int64).reshape(-1)
    bases = np.array([b for b, _ in srcs], np.int64)
    which = np.searchsorted(bases, ids, side="right") - 1
    out = np.empty(ids.size, np.float32)
    used = []
    for k in np.unique(which):
        base, src = srcs[k]
        m = which == k
        out[m] = held[src].value.reshape(-1)[ids[m] - base]
        used.append(src)
    node = t.node.name if t.node is not None else None
    return Held("traced", out.reshape(t.ids.shape), node,
                f"no image of its own: a move traced to {', '.join(used)}, read where used")


# ---------------------------------------------------------------------------- the NPU
def _capture_npu(graph, feeds, keep):
    from ..backends.npu import NpuProgram

    prog = NpuProgram(graph)
    held = {name: Held("input", np.array(v), None, "system memory (the host's array)")
            for name, v in feeds.items()}

    def tap(step, outs, mem):
        node = step.node
        for name, v in zip(node.outputs, outs):
            if not name:
                continue
            if step.kind == "view":
                held[name] = Held("view", np.array(v), node.name,
                                  f"the placement of {node.inputs[0]} (a view)")
            elif mem is None and step.place == "npu":      # a move in system memory
                held[name] = Held("computed", np.array(v), node.name, f"system memory: {step.why}")
            elif mem is None:
                held[name] = Held("host", np.array(v), node.name, f"on the host: {step.why}")
            else:
                held[name] = _npu_held(step, name, np.asarray(v), mem, keep)

    prog.run(feeds, tap=tap)
    return held


def _npu_held(step, name, value, mem, keep):
    """An NPU step's output: read from its local-memory placement where that holds all of
    it, else the system memory it was copied out to (local memory keeps the last part)."""
    t = next(t for r, n, t in step.tensors if r == "output" and n == name)
    part, t = _last_part(step, t, value.shape)
    where = (f"local memory at {t.address:#x}, {t.layout_name}"
             + (f" {t.mode}" if t.mode else "") + f", {t.channels_per_npu} channel(s) per NPU")
    whole = int(np.prod(t.elements.shape)) == value.size
    if whole:
        got = mem.load(t).reshape(value.shape)
        h = Held("computed", got, step.node.name, where)
    else:
        h = Held("computed", np.array(value), step.node.name,
                 f"read back image by image and slice by slice as the run left each ({where} "
                 f"keeps the last {part[1]})")
    if keep:
        h.pieces = [_npu_piece(t, mem, value.shape, part[0])]
    return h


def _last_part(step, t, shape):
    """The part of the output the step's local placement holds when it ends: ``((box,
    words), placement)``, box the NCHW ranges (None: all of it)."""
    from .workbench_where import conv_sites

    plan = step.conv_plan
    if plan is not None and plan.slices_count > 1:
        last = [j for kind, _, j, _ in plan.steps if kind == "conv"][-1]
        _, t, _, off, ext = next(c for c in conv_sites(step, "output", t) if c[0] == last)
        return ([(o, o + e) for o, e in zip(off, ext)], f"slice of {plan.slices_count}"), t
    if len(shape) == 4 and not t.is_matrix and t.shape[0] < shape[0]:
        n = shape[0]
        return ([(n - 1, n), (0, shape[1]), (0, shape[2]), (0, shape[3])], "image"), t
    if len(shape) == 2 and t.is_matrix and t.matrix_shape[0] < shape[0]:   # a row per image
        n = shape[0]
        return ([(n - 1, n), (0, shape[1])], "image"), t
    return (None, "all"), t


def _npu_piece(t, mem, shape, box):
    """The output placement's bytes (every NPU, from its offset to its end) and, for each
    element of the part it holds, the flat byte position of its first byte there."""
    lo, hi = t.offset, t.end_offset
    window = np.array(mem.local[:, lo:hi])
    el = t.elements
    grid = np.indices(el.shape).reshape(len(el.shape), -1)
    flat = np.asarray(el.locate_flat(tuple(grid))) * t.dtype.itemsize
    npu, byte = np.divmod(flat, t.chip.lmem_bytes)
    pos = (npu * (hi - lo) + byte - lo).reshape(el.shape)
    idx = np.full(shape, -1, np.int64)
    if box is None:
        idx[...] = pos.reshape(shape)
    else:
        idx[tuple(slice(a, b) for a, b in box)] = pos.reshape([b - a for a, b in box])
    return window, idx, {
        "storage": "NPU local memory", "address": int(t.address), "start_npu": int(t.start_npu),
        "bytes": [int(lo), int(hi)], "shape": list(t.shape), "stride": list(t.stride),
        "layout": t.layout_name, "mode": t.mode, "dtype": t.dtype.name,
        "holds": None if box is None else [list(map(int, r)) for r in box],
        "element": "index = npu * (end - start) + byte - start, the element's first byte"}


# ---------------------------------------------------------------------------- capture
def capture(model, runtime, feeds, *, device=None, max_image=None, winograd="auto",
            keep=False) -> dict:
    """``{tensor name: Held}``: every tensor of one run of ``model`` on ``runtime`` (one of
    :data:`RUNTIMES`) on checked ``feeds``, read back from its storage.  ``device``,
    ``max_image`` and ``winograd``: the OpenCL session's (as
    :class:`~tensorlayout.model.OpenCLSession` takes them).  ``keep``: keep each tensor's physical form (image pixels, local-memory bytes)."""
    runtime = runtime_arg(runtime, "runtime")
    graph = _graph_of(model)
    if runtime == "cpu":
        return _capture_cpu(model, graph, feeds, keep)
    if runtime == "npu":
        return _capture_npu(graph, feeds, keep)
    return _capture_opencl(graph, feeds, runtime == "opencl:half", device, keep, max_image,
                           winograd)


# ---------------------------------------------------------------------------- metrics
def metrics(a, b) -> dict:
    """``b`` against the reference ``a`` over the values finite in both: max |b - a|, the
    relative L2 error |b - a| / |a|, the cosine similarity, the SQNR |a|^2 / |b - a|^2 in dB;
    the NaN and inf of each side and whether they sit at the same places.  Equal arrays give
    exactly 0, 0, 1 and inf.

    >>> m = metrics(np.array([1.0, 2.0, np.nan]), np.array([1.0, 2.5, np.nan]))
    >>> m["max_abs"], round(m["rel_l2"], 4), round(m["sqnr_db"], 2), m["nan_b"], m["same_nonfinite"]
    (0.5, 0.2236, 13.01, 1, True)
    """
    x = np.asarray(a, np.float64).reshape(-1)
    y = np.asarray(b, np.float64).reshape(-1)
    fx, fy = np.isfinite(x), np.isfinite(y)
    out = {"finite": 0, "max_abs": None, "rel_l2": None, "cosine": None, "sqnr_db": None,
           "nan_a": int(np.isnan(x).sum()), "inf_a": int(np.isinf(x).sum()),
           "nan_b": int(np.isnan(y).sum()), "inf_b": int(np.isinf(y).sum()),
           "same_nonfinite": bool(np.array_equal(np.isnan(x), np.isnan(y)) and np.array_equal(
               np.where(np.isinf(x), x, 0), np.where(np.isinf(y), y, 0)))}
    both = fx & fy
    if not both.any():
        return out
    x, y = x[both], y[both]
    d = y - x
    nx, ny, nd = (float(np.linalg.norm(v)) for v in (x, y, d))
    out["finite"] = int(both.sum())
    out["max_abs"] = float(np.abs(d).max())
    if nd == 0.0:
        out.update(rel_l2=0.0, cosine=1.0, sqnr_db=math.inf)
        return out
    out["rel_l2"] = nd / nx if nx > 0 else math.inf
    out["cosine"] = float(np.clip(x @ y / (nx * ny), -1.0, 1.0)) if nx * ny > 0 else 0.0
    out["sqnr_db"] = 20.0 * math.log10(nx / nd) if nx > 0 else -math.inf
    return out


# ---------------------------------------------------------------------------- the comparison
@dataclass
class Comparison:
    """What :func:`compare` found: ``rows`` (one per tensor, in the network's order), ``first``
    (the first row past ``tol``, with its node and layers; None if none), the two runtimes,
    the seconds each run took, and each side's :class:`Held` tensors."""

    model: str
    a: str
    b: str
    tol: float
    rows: list
    first: object
    seconds: dict
    held: dict = field(repr=False)
    feeds: dict = field(repr=False)

    def as_dict(self) -> dict:
        return {"model": self.model, "a": self.a, "b": self.b, "tol": self.tol,
                "tensors": len(self.rows), "compared": sum(r["compared"] for r in self.rows),
                "past_tol": sum(r["past"] for r in self.rows), "first": self.first,
                "worst": self.worst(), "seconds": self.seconds, "rows": self.rows}

    def worst(self, n=5) -> list:
        """The ``n`` compared tensors of lowest SQNR, worst first: (tensor, node, SQNR dB,
        dB lost in the layer)."""
        rows = [r for r in self.rows if r["compared"] and r["sqnr_db"] is not None]
        rows.sort(key=lambda r: (r["sqnr_db"], -(r["sqnr_drop_db"] or 0.0)))
        return [{"tensor": r["tensor"], "node": r["node"], "op": r["op"], "sqnr_db": r["sqnr_db"],
                 "sqnr_drop_db": r["sqnr_drop_db"]} for r in rows[:n] if r["sqnr_db"] < math.inf]


def _feeds(graph, x, seed):
    if x is None:
        rng = np.random.default_rng(seed)
        return {n: rng.standard_normal(s).astype(graph.input_dtypes[n])
                for n, s in graph.inputs.items()}
    return graph.feeds((x,) if not isinstance(x, (list, tuple)) else tuple(x), {},
                       options=())


def compare(model, a="cpu", b="opencl", x=None, *, tol=None, model_b=None, device=None,
            max_image=None, winograd="auto", seed=0, keep=False) -> Comparison:
    """Run ``model`` on runtimes ``a`` (the reference) and ``b`` on the same input and compare
    every tensor (see the module's docstring).

    ``x``: the input (one array, a list in the inputs' order, or a dict by name); None draws
    a standard normal one from ``seed``.  ``tol``: the relative L2 error past which a tensor
    diverges (default :func:`default_tol` of the pair).  ``model_b``: another model with the
    same tensor names run on ``b`` (a converted or edited copy); default ``model``.
    ``device``, ``max_image``, ``winograd``: the OpenCL device, image limits below its own and
    the Winograd choice (as :class:`~tensorlayout.model.OpenCLSession` takes them).  ``keep``: keep each tensor's physical form, for
    :func:`tensorlayout.model.workbench_report.write_dump`.
    """
    a = runtime_arg(a, "a")
    b = runtime_arg(b, "b")
    if tol is None:
        tol = default_tol(a, b)
    elif isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) \
            or not math.isfinite(tol) or tol < 0:
        raise LayoutError(f"tol = {short(tol)!r} is not allowed: it must be a finite number >= 0 "
                          "(a relative L2 error)")
    graph = _graph_of(model)
    other = graph if model_b is None else _graph_of(model_b)
    if other is not graph and dict(other.inputs) != dict(graph.inputs):
        raise ModelError(f"model_b takes inputs {dict(other.inputs)}: model takes "
                         f"{dict(graph.inputs)}; the two must take the same")
    feeds = _feeds(graph, x, seed)
    held, seconds = {}, {}
    for side, rt, m in (("a", a, model), ("b", b, model if model_b is None else model_b)):
        t0 = time.perf_counter()
        held[side] = capture(m, rt, feeds, device=device, max_image=max_image, winograd=winograd,
                             keep=keep)
        seconds[side] = time.perf_counter() - t0
    rows = _rows(graph, held["a"], held["b"], float(tol))
    first = next((r for r in rows if r["past"]), None)
    if first is not None:
        first = {k: first[k] for k in ("tensor", "node", "op", "layer_a", "layer_b", "rel_l2",
                                        "cosine", "sqnr_db", "nan_b", "inf_b")}
        first["tol"] = float(tol)
    return Comparison(graph.label, a, b, float(tol), rows, first, seconds, held, feeds)


def _rows(graph, ha, hb, tol):
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    names = list(graph.inputs) + [o for n in graph.nodes for o in n.outputs if o]
    rows, sqnr = [], {}
    for name in names:
        node = producer.get(name)
        x, y = ha.get(name, Held("absent")), hb.get(name, Held("absent"))
        r = {"tensor": name, "node": node.name if node else None,
             "op": node.op if node else "input", "shape": list(graph.shapes.get(name, ())),
             "state_a": x.state, "layer_a": x.layer, "storage_a": x.storage,
             "state_b": y.state, "layer_b": y.layer, "storage_b": y.storage}
        ok = x.value is not None and y.value is not None
        if ok and np.shape(x.value) != np.shape(y.value):
            r["note"] = f"shapes differ: {list(np.shape(x.value))} and {list(np.shape(y.value))}"
            ok = False
        r["compared"] = ok
        r.update(metrics(x.value, y.value) if ok else
                 {k: None for k in ("finite", "max_abs", "rel_l2", "cosine", "sqnr_db", "nan_a",
                                    "inf_a", "nan_b", "inf_b", "same_nonfinite")})
        if ok:
            sqnr[name] = math.inf if r["sqnr_db"] is None else r["sqnr_db"]
        r["sqnr_drop_db"] = None
        if ok and node is not None and r["sqnr_db"] is not None:
            before = _upstream(graph, producer, sqnr, node)
            if before < math.inf and r["sqnr_db"] < math.inf:
                r["sqnr_drop_db"] = before - r["sqnr_db"]
        r["past"] = bool(ok and (not r["same_nonfinite"] or
                                 (r["rel_l2"] is not None and r["rel_l2"] > tol)))
        rows.append(r)
    return rows


def _upstream(graph, producer, sqnr, node, seen=None):
    """The lowest SQNR among the compared tensors ``node`` reads (through tensors not
    compared, to theirs); inf where every input is exact or a constant."""
    seen = set() if seen is None else seen
    worst = math.inf
    for t in node.inputs:
        if not t or t in graph.consts or t in seen:
            continue
        seen.add(t)
        if t in sqnr:
            worst = min(worst, sqnr[t])
        elif t in producer:
            worst = min(worst, _upstream(graph, producer, sqnr, producer[t], seen))
    return worst
