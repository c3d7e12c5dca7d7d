"""Where one element of one tensor lives on a runtime, and which element a location holds.

:func:`where` reads the runtime's own schedule and layouts, never a formula of its own: on
OpenCL images (:func:`~tensorlayout.schedule.schedule_images`, as ``tensorlayout plan``
prints it) an activation's IN_OUT_CHANNEL image, its memory block, the pixel and the lane
(:func:`tensorlayout.image_layout`'s ``locate`` / ``element_at``), with the parts of a tensor
split by channels and the passes of a batch held in groups; a traced move answers with the
element of the tensor it reads, a fused tensor says it is never stored.  On the NPU
(:func:`~tensorlayout.schedule.npu.schedule_npu`) every placement of the tensor in local
memory, step by step (the layer planner's slices, the images a layer group takes in turn, a
matmul's matrices; in one group a tensor stays where its readers find it), as ``(NPU, byte)``
from :meth:`~tensorlayout.npu.NpuTensor.locate`.
Given ``at`` instead of an index, the answer runs backwards: the element each of those
storages holds at that location (and, on images, what else the memory block holds there).

>>> from tensorlayout.model import load, zoo
>>> m = load(zoo.tiny_onnx())
>>> r = where(m, "d", (0, 5, 2, 3), runtime="opencl")
>>> [(p["image"], p["pixel"], p["lane"]) for p in r["places"]]
[([32, 8], [11, 2], 1)]
>>> [p["element"] for p in where(m, "d", at=(11, 2, 1), runtime="opencl")["places"]]
[[0, 5, 2, 3]]
>>> [(p["step"], p["role"], p["npu"], p["byte"]) for p in where(m, "d", (0, 5, 2, 3), runtime="npu")["places"]]
[('pool1', 'output', 5, 1100), ('conv2', 'input', 5, 1100)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LayoutError, short

__all__ = ["where", "conv_sites", "WHERE_RUNTIMES"]

#: The runtimes :func:`where` answers for.
WHERE_RUNTIMES = ("opencl", "npu")


@dataclass
class _Site:
    """One storage of (part of) a tensor: ``local`` maps the tensor's index to the storage's
    own (``perm``: the tensor dimension of each local one; ``off``: subtracted; ``ext``: the
    local extents), ``turns``: the batch index is any image taken in turn (local n = 0)."""

    info: dict
    layout: object
    perm: tuple
    off: tuple
    ext: tuple
    turns: bool = False
    flat: bool = False

    def to_local(self, idx, shape):
        if self.flat:
            return (0, int(np.ravel_multi_index(idx, shape)), 0, 0)
        li = [idx[p] - o for p, o in zip(self.perm, self.off)]
        if self.turns:
            li[0] = 0
        return tuple(li) if all(0 <= v < e for v, e in zip(li, self.ext)) else None

    def from_local(self, li, shape):
        if self.flat:
            return tuple(int(v) for v in np.unravel_index(li[1], shape))
        idx = [0] * len(shape)
        for p, o, v in zip(self.perm, self.off, li):
            idx[p] = int(v + o)
        return tuple(idx)


def _bad(argument, value, rule):
    return LayoutError(f"{argument} = {short(value)!r} is not allowed: {rule}")


def _index(index, shape, argument="index"):
    try:
        idx = tuple(int(v) for v in index)
    except (TypeError, ValueError):
        raise _bad(argument, index, "it must be integers, one per dimension") from None
    if len(idx) != len(shape):
        raise _bad(argument, index, f"the tensor has shape {list(shape)}: give {len(shape)} "
                   "integers")
    for d, (v, s) in enumerate(zip(idx, shape)):
        if not 0 <= v < s:
            raise _bad(argument, index, f"item {d} = {v} is outside [0, {s}) of shape "
                       f"{list(shape)}")
    return idx


def where(model, tensor, index=None, *, at=None, runtime="opencl", half=False, device=None,
          max_image=None, chip="BM1684") -> dict:
    """Where element ``index`` of ``tensor`` lives on ``runtime`` ("opencl" or "npu"), or,
    with ``at`` ((x, y, lane) of an image; (NPU, byte) in local memory) instead, which
    element of ``tensor`` each of its storages holds there.  ``half``, ``device``,
    ``max_image``: the image schedule's, as :func:`~tensorlayout.model.plan_model` takes them;
    ``chip``: the NPU schedule's.  Returns ``{"tensor", "shape", "runtime", "index" or
    "at", "state", "note", "places": [...]}``, each place a dict with a one-line ``text``."""
    from ._model import Model

    if not isinstance(model, Model):
        from ._model import load

        model = load(model)
    rt = str(runtime).lower() if isinstance(runtime, str) else runtime
    if rt not in WHERE_RUNTIMES:
        raise _bad("runtime", runtime, f"it must be one of {', '.join(WHERE_RUNTIMES)}")
    if (index is None) == (at is None):
        raise LayoutError("index and at: give exactly one of them (an element of the tensor, "
                          "or a location to read backwards)")
    if rt == "opencl":
        return _where_images(model, tensor, index, at, half, device, max_image)
    return _where_npu(model, tensor, index, at, chip)


# ---------------------------------------------------------------------------- images
def _where_images(model, name, index, at, half, device, max_image):
    from ..image import image_layout
    from ..schedule.images import Act, Virtual
    from .plan import plan_model

    plan = plan_model(model, max_image=max_image, device=device, half=half)
    s = plan.schedule
    graph = model.graph
    weights = {w.name: w for w in s.weights.values()}
    out = {"runtime": "opencl" + (":half" if half else ""), "tensor": name,
           "limits": list(plan.max_image), "limits_from": plan.limits_from, "places": []}
    if name in weights:
        w = weights[name]
        lay = image_layout(w.image_type, w.array.shape, **w.kw)
        out.update(shape=list(lay.shape), state="weight",
                   note=f"a {w.image_type} weight image of its own, packed from an array of "
                        f"shape {list(w.array.shape)}" + (
                            f"; it holds U = G g G^T, indexed (t, o, i)"
                            if w.image_type == "WINOGRAD_FILTER" else ""))
        sites = [_Site({"image_key": str(w.key), "image": list(w.size), "block": None,
                        "image_type": w.image_type}, lay, tuple(range(lay.ndim)),
                       (0,) * lay.ndim, lay.shape)]
        return _answer(out, sites, lay.shape, index, at, _image_place, s)
    if name not in graph.shapes:
        raise _bad("tensor", name, _known(graph, list(weights)))
    shape = tuple(graph.shapes[name])
    out["shape"] = list(shape)
    t = s.acts.get(name)
    if t is None:
        for layer in s.layers:
            if layer.fused and graph.node(layer.name).outputs[0] == name:
                out.update(state="fused", note=f"never stored on images: layer {layer.name} "
                           f"applies {', '.join(layer.fused)} in the same kernel")
                return out
        out.update(state="absent", note="not held in images (a problem of the plan: "
                   "tensorlayout plan lists it)")
        return out
    if isinstance(t, Virtual):
        out["state"] = "traced"
        src = _traced_source(s, t, index, shape)
        out["note"] = (f"no image of its own: a move traced by {t.node.name} ({t.node.op}), "
                       "read where used")
        if index is not None and src is not None:
            sname, sidx = src
            out["note"] += f"; element {list(index)} is element {list(sidx)} of {sname}"
            inner = _where_images(model, sname, sidx, None, half, device, max_image)
            out["places"] = inner["places"]
            out["source"] = {"tensor": sname, "index": list(sidx)}
        return out
    owner = t.slots()[0][1]
    out["state"] = "view" if owner != name else "computed"
    if owner != name:
        out["note"] = f"the same image as {owner}"
    if len(shape) not in (2, 4):
        raise _bad("tensor", name, f"it has rank {len(shape)}: images hold 4-D or 2-D tensors")
    first, last = s.slot_range()
    sites = []
    p_items = t.nhwc[0]                        # the batch items an image holds
    for c0, c1, p in t.parts or [(0, t.nhwc[3], t)]:
        lay = p.layout()
        for n0 in range(0, shape[0], p_items):
            info = {"image_key": str(p.slot), "image": [int(v) for v in s.slots[p.slot][:2]],
                    "block": int(s.where[p.slot]),
                    "block_size": [int(v) for v in s.blocks[s.where[p.slot]][:2]],
                    "channels": [int(c0), int(c1)], "batch": [n0, n0 + p.nhwc[0]],
                    "layers": [_layer_name(s, first.get(p.slot)), _layer_name(s, last.get(p.slot))],
                    "image_type": "IN_OUT_CHANNEL", "slot": p.slot}
            sites.append(_Site(info, lay, (0, 1, 2, 3), (n0, c0, 0, 0), lay.shape))
    full4 = shape if len(shape) == 4 else tuple(shape) + (1, 1)
    idx4 = None if index is None else tuple(_index(index, shape)) + (0,) * (4 - len(shape))
    res = _answer(out, sites, full4, idx4, at, _image_place, s)
    if index is not None:
        res["index"] = list(_index(index, shape))
    for p in res["places"]:
        if p.get("element") is not None and len(shape) == 2:
            p["text"] = p["text"].replace(str(p["element"]), str(p["element"][:2]))
            p["element"] = p["element"][:2]
    if at is not None:
        res["others"] = _block_others(s, sites, at, name)
    return res


def _traced_source(s, t, index, shape):
    from ..schedule.images import Act

    if index is None:
        return None
    idx = _index(index, shape)
    eid = int(np.asarray(t.ids)[idx])
    best = None
    for n, a in s.acts.items():
        if isinstance(a, Act) and 0 <= a.base <= eid < a.base + int(np.prod(a.shape)):
            if best is None or a.slots()[0][1] == n:
                best = (n, tuple(int(v) for v in np.unravel_index(eid - a.base, a.shape)))
    return best


def _layer_name(s, i):
    return None if i is None else s.layers[i].name


def _image_place(site, li, s):
    y, x, k = site.layout.locate(li)
    info = {k_: v for k_, v in site.info.items() if k_ != "slot"}
    itemsize = s.target.dtype.itemsize
    w = site.info["image"][0]
    info.update(pixel=[int(x), int(y)], lane=int(k),
                byte=int(((y * w + x) * 4 + k) * itemsize))
    block = "" if info["block"] is None else f" in memory block {info['block']}"
    part = ""
    if site.info.get("channels") and (site.info["channels"][0] or s.part):
        part = f" (channels {site.info['channels'][0]}..{site.info['channels'][1] - 1})"
    if s.group != s.batch and site.info.get("batch"):
        part += f" (batch items {site.info['batch'][0]}..{site.info['batch'][1] - 1}, one pass)"
    info["text"] = (f"image {info['image_key']} [{w}, {site.info['image'][1]}]{part}{block}: "
                    f"pixel (x, y) = ({x}, {y}), lane {k} (byte {info['byte']} of the image "
                    "read back row by row)")
    return info


def _block_others(s, sites, at, name):
    """What else the memory blocks of ``sites`` hold at pixel ``at`` during the run."""
    from ..schedule.images import Act

    x, y, k = at
    by_slot = {}
    for n, a in s.acts.items():
        if isinstance(a, Act) and a.slots()[0][1] == n:
            for c0, _, p in a.parts or [(0, 0, a)]:
                by_slot[p.slot] = (n, p, c0)
    first, last = s.slot_range()
    mine = {site.info["slot"] for site in sites}
    blocks = {s.where[k_] for k_ in mine}
    out = []
    for key, b in s.where.items():
        if b not in blocks or key in mine or key[0] == "empty":
            continue
        w, h = s.slots[key][:2]
        row = {"block": int(b), "holds": s.names[key], "image": [int(w), int(h)],
               "layers": [_layer_name(s, first.get(key)), _layer_name(s, last.get(key))]}
        if x < w and y < h and key in by_slot:
            n, p, c0 = by_slot[key]
            e = p.layout().element_at((y, x, k))
            row["element"] = None if e is None else [int(e[0]), int(e[1]) + int(c0)] + \
                [int(v) for v in e[2:]]
        elif x >= w or y >= h:
            row["element"] = None
            row["outside"] = True
        out.append(row)
    return out


# ---------------------------------------------------------------------------- the NPU
def conv_sites(step, role, t):
    """The storages a convolution step's buffer ``role`` (placed as ``t``) takes, one per
    distinct slice: ``(slice index, placement, perm, offsets, extents)``, each slice's
    placement at the buffer's address with the slice's own shape (as the planner runs it) and
    how the tensor's index maps into it (see :class:`_Site`)."""
    from ..npu import compact_stride, tensor_layout

    plan = step.conv_plan
    chip, addr = plan.chip, t.address
    n, c, h, w = plan.input_shape
    _, k, ho, wo = plan.output_shape
    kh, kw = plan.kernel
    sites, seen = [], set()
    for i, sl in enumerate(plan.slices):
        ns, ks = sl.n1 - sl.n0, sl.k1 - sl.k0
        if role == "input":
            key = (sl.n0, sl.n1, sl.ih0, sl.ih1)
            shape = (ns, c, sl.ih1 - sl.ih0, w)
            pl, perm, off = tensor_layout(chip, addr, shape), (0, 1, 2, 3), (sl.n0, 0, sl.ih0, 0)
        elif role == "output":
            key = i
            shape = (ns, ks, sl.h1 - sl.h0, wo)
            pl, perm, off = tensor_layout(chip, addr, shape), (0, 1, 2, 3), (sl.n0, sl.k0, sl.h0, 0)
        elif role == "weight":
            key = (sl.k0, sl.k1)
            shape = (c, ks, kh, kw)
            pl = tensor_layout(chip, addr, shape, mode="2IC",
                               stride=compact_stride(chip, shape, 0, mode="2IC"))
            perm, off = (1, 0, 2, 3), (0, sl.k0, 0, 0)
        else:
            key = (sl.k0, sl.k1)
            shape = (ks,)
            pl, perm, off = tensor_layout(chip, addr, (1, ks, 1, 1), layout="compact"), \
                ("bias",), (sl.k0,)
        if key in seen:
            continue
        seen.add(key)
        sites.append((i, pl, perm, off, shape))
    return sites


def _npu_sites(graph, sched, name):
    """Every placement of tensor ``name`` in the NPU schedule, as :class:`_Site` objects."""
    shape = tuple(graph.shapes[name]) if name in graph.shapes else \
        tuple(np.shape(graph.consts[name]))
    sites = []
    for st in sched.steps:
        for role, tname, t in st.tensors:
            if tname != name:
                continue
            info = {"step": st.node.name, "op": st.node.op, "kind": st.kind, "role": role,
                    "address": int(t.address), "layout": t.layout_name + (f" {t.mode}" if t.mode
                                                                          else "")}
            if st.kind == "conv":
                for i, pl, perm, off, ext in conv_sites(st, role, t):
                    d = dict(info, slice=i, slices=st.conv_plan.slices_count,
                             layout=pl.layout_name + (f" {pl.mode}" if pl.mode else ""))
                    sites.append(_Site(d, pl, perm, off, ext))
            elif st.kind == "matmul":
                trans = role == "weight" and st.node.params.trans_b
                if role == "bias":
                    sites.append(_Site(info, t, ("row",), (0,), (t.matrix_shape[1],)))
                else:
                    sites.append(_Site(info, t, (1, 0) if trans else (0, 1), (0, 0),
                                       t.matrix_shape))
            elif role in ("input", "output"):
                flat = len(shape) != 4
                sites.append(_Site(dict(info, images=shape[0] if not flat else 1), t,
                                   (0, 1, 2, 3), (0, 0, 0, 0), t.shape, turns=not flat, flat=flat))
            elif role == "weight":
                sites.append(_Site(info, t, (1, 0, 2, 3), (0, 0, 0, 0), t.shape))
            else:
                sites.append(_Site(info, t, ("bias",), (0,), (t.shape[1],)))
    return shape, sites


def _npu_local(site, idx, shape):
    """The tensor index ``idx`` as the placement's own index, or None where it holds it not."""
    if site.perm == ("bias",):
        v = idx[0] - site.off[0]
        return (0, v, 0, 0) if 0 <= v < site.ext[0] else None
    if site.perm == ("row",):
        return (0, idx[-1])
    return site.to_local(idx, shape)


def _npu_back(site, li, shape):
    if site.perm == ("bias",):
        return (int(li[1]) + site.off[0],)
    if site.perm == ("row",):
        return (0,) * (len(shape) - 1) + (int(li[1]),)
    return site.from_local(li, shape)


def _where_npu(model, name, index, at, chip):
    from ..npu import CHIPS, get_chip
    from ..schedule.npu import schedule_npu

    chip = get_chip(str(chip).upper()) if str(chip).upper() in CHIPS else get_chip(chip)
    graph = model.graph
    sched = schedule_npu(graph, chip)
    if name not in graph.shapes and name not in graph.consts:
        raise _bad("tensor", name, _known(graph, []))
    shape, sites = _npu_sites(graph, sched, name)
    out = {"runtime": "npu", "chip": chip.name, "tensor": name, "shape": list(shape),
           "places": []}
    producer = {o: st for st in sched.steps for o in st.node.outputs if o}
    st = producer.get(name)
    if name in graph.inputs:
        out.update(state="input", note="the host's array in system memory, loaded by each "
                   "step that reads it")
    elif name in graph.consts:
        out.update(state="weight", note="a constant, loaded into local memory by the steps "
                   "that read it")
    elif st is not None and st.kind == "view":
        out.update(state="view", note=f"a view of {st.node.inputs[0]} ({st.node.op}): the same "
                   "placement, read in its shape")
    elif st is not None and st.kind == "host":
        out.update(state="host", note=f"written on the host by {st.node.name}: {st.why}")
    else:
        stored = any(i.kind == "store" and any(n == name for _, n, _ in i.operands)
                     for i in sched.instrs)
        out.update(state="computed", note=f"written by step {st.node.name} ({st.kind}) into local "
                   "memory" + (", then copied out to system memory" if stored else
                               f", kept there for the rest of layer group {st.group}"))
    if not sites:
        out["note"] += "; no step places it in local memory"
        return out
    if index is not None:
        idx = _index(index, shape)
        for site in sites:
            li = _npu_local(site, idx, shape)
            if li is None:
                continue
            t = site.layout
            npu, byte = t.matrix_locate(*li) if t.is_matrix else t.locate(li)
            out["places"].append(_npu_place(site, npu, byte, li, idx))
        out["index"] = list(idx)
        return out
    npu, byte = _at(at, 2, "at", "NPU,BYTE")
    if not (0 <= npu < chip.npus and 0 <= byte < chip.lmem_bytes):
        raise _bad("at", at, f"{chip.name} has NPUs 0..{chip.npus - 1} of {chip.lmem_bytes} bytes")
    for site in sites:
        t = site.layout
        li = t.matrix_element_at(npu, byte) if t.is_matrix else t.element_at(npu, byte)
        place = _npu_place(site, npu, byte, li, None if li is None else _npu_back(site, li, shape),
                           reverse=True)
        out["places"].append(place)
    out["at"] = [npu, byte]
    return out


def _npu_place(site, npu, byte, li, idx, reverse=False):
    element = None if idx is None else [int(v) for v in idx]
    if element is not None and site.turns and reverse:
        element[0] = None                  # every image passes through it in turn
    d = dict(site.info, npu=int(npu), byte=int(byte), local_index=None if li is None else
             [int(v) for v in li], element=element)
    where = f"step {d['step']} ({d['op']}), {d['role']}"
    if "slice" in d:
        where += f", slice {d['slice'] + 1} of {d['slices']}"
    if site.turns:
        n = element[0] if element is not None and element[0] is not None else "n"
        where += f", image {n} of {d['images']} in its turn"
    held = "nothing of this tensor" if element is None else \
        "element [" + ", ".join("n" if v is None else str(v) for v in element) + "]"
    d["text"] = (f"{where}: {d['layout']} at {d['address']:#x}: NPU {npu}, byte {byte} "
                 f"({held}" + (f", its placement's index {list(li)})" if li is not None else ")"))
    return d


# ---------------------------------------------------------------------------- shared
def _at(at, n, argument, what):
    try:
        v = tuple(int(a) for a in at)
    except (TypeError, ValueError):
        raise _bad(argument, at, f"it must be {what}, {n} integers") from None
    if len(v) != n:
        raise _bad(argument, at, f"it must be {what}, {n} integers")
    return v


def _answer(out, sites, shape, index, at, place, s):
    if index is not None:
        idx = _index(index, shape)
        out["index"] = list(idx)
        for site in sites:
            li = site.to_local(idx, shape)
            if li is not None:
                out["places"].append(place(site, li, s))
        return out
    x, y, k = _at(at, 3, "at", "X,Y,LANE")
    sizes = {tuple(site.info["image"]) for site in sites}
    if not any(0 <= x < w and 0 <= y < h for w, h in sizes) or not 0 <= k < 4:
        raise _bad("at", at, "it is outside the tensor's image"
                   + ("s" if len(sizes) > 1 else "") + " "
                   + ", ".join(f"[{w}, {h}]" for w, h in sorted(sizes)) + " of 4 lanes")
    out["at"] = [x, y, k]
    for site in sites:
        w, h = site.info["image"]
        info = {k_: v for k_, v in site.info.items() if k_ != "slot"}
        e = site.layout.element_at((y, x, k)) if x < w and y < h else None
        idx = None if e is None else site.from_local(e, shape)
        info.update(pixel=[x, y], lane=k, element=None if idx is None else list(idx))
        info["text"] = (f"image {info['image_key']} [{w}, {h}]: pixel ({x}, {y}) lane {k} holds "
                        + ("no element of it (padding)" if idx is None else f"element {list(idx)}"))
        out["places"].append(info)
    return out


def _known(graph, extra):
    names = list(graph.inputs) + [o for n in graph.nodes for o in n.outputs if o] + extra
    shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
    return f"it is not a tensor of the model; its tensors are {shown}"

