"""The graph: an ONNX model read once into typed nodes with static shapes.

:func:`load_graph` reads the model, checks its opset and ops, fixes the input shapes, infers
every tensor's shape with ``onnx.shape_inference``, folds constant subgraphs to a fixed point
(Shape → Cast → Slice → Concat → Reshape chains included: a pass that makes a Shape known
lets the next inference pass see through it) and folds BatchNormalization into the Conv
before it.  Each remaining node is parsed once into its op's parameter object
(:mod:`tensorlayout.graph.ops`): after this, nothing reads an ONNX attribute again.

>>> import numpy as np
>>> from tensorlayout.model import zoo
>>> g = load_graph(zoo.tiny_onnx())
>>> [n.op for n in g.nodes][:4], g.folded
(['Conv', 'Relu', 'MaxPool', 'Conv'], {'conv1': 'bn1'})
>>> c = g.node("conv2").params
>>> c.kernel, c.begin, c.end, c.group, c.depthwise
((3, 3), (1, 1), (1, 1), 1, False)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import LayoutError, ModelError, check_nonneg_int
from . import _onnx
from .ops import OPS, OP_TYPES, Ctx, pool_output_side
from .ops._base import storage_only

__all__ = ["Graph", "Node", "load_graph", "OPSET_RANGE"]



def _newest_opset(oldest):
    try:
        return _onnx.newest_opset()
    except ModelError:          # no onnx installed: no model can be read anyway
        return oldest


#: The default-domain opsets the loader accepts: (oldest, newest of the installed onnx).
OPSET_RANGE = (7, _newest_opset(7))


@dataclass(eq=False)
class Node:
    """One node of the graph: name, op type, input and output tensor names ("" for an absent
    optional one) and the op's parameters (a frozen object of :mod:`tensorlayout.graph.ops`)."""

    name: str
    op: str
    inputs: tuple
    outputs: tuple
    params: object = field(repr=False)


@dataclass(eq=False)
class _Raw:
    """A node as read, before it is parsed (attributes still as ONNX gave them)."""

    name: str
    op: str
    inputs: list
    outputs: list
    attrs: dict
    proto: object


@dataclass
class Graph:
    """A loaded network: ``nodes`` in topological order, every tensor's static ``shapes`` and
    ``dtypes``, constant tensors in ``consts``, graph ``inputs`` (name -> shape) and
    ``outputs`` (names); ``folded`` maps each Conv to the BatchNormalization folded into it."""

    label: str
    name: str
    opset: int
    inputs: dict
    input_dtypes: dict
    outputs: list
    nodes: list
    consts: dict
    shapes: dict
    dtypes: dict
    folded: dict = field(default_factory=dict)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise ModelError(f"node {name!r} is not in the graph")

    def ctx(self, node: Node) -> Ctx:
        """The shapes and constant inputs a kernel of ``node`` is built from."""
        return Ctx(node.name, node.op, {}, node.inputs, node.outputs,
                   [self.shapes.get(n) if n else None for n in node.inputs],
                   [self.shapes.get(n) if n else None for n in node.outputs],
                   [self.consts.get(n) if n else None for n in node.inputs], self.opset,
                   [self.dtypes.get(n) if n else None for n in node.inputs])

    def kernel(self, node: Node):
        """The NumPy semantics of ``node``: ``run(inputs, out=None) -> [outputs]``.  An op that
        computes on bfloat16 inputs computes in float32 and rounds its bfloat16 outputs once."""
        run = OPS[node.op].kernel(node, self.ctx(node))
        if OPS[node.op].any_dtype or not any(
                _is_bfloat16(self.dtypes.get(n)) for n in node.inputs if n):
            return run
        narrow = [_is_bfloat16(self.dtypes.get(n)) if n else False for n in node.outputs]
        target = next(self.dtypes[n] for n in node.inputs if n and _is_bfloat16(self.dtypes.get(n)))

        def widened(inputs, out=None):
            wide = [a.astype(np.float32) if a is not None and _is_bfloat16(a.dtype) else a
                    for a in inputs]
            return [np.asarray(r).astype(target) if nb else r
                    for r, nb in zip(run(wide, None), narrow)]
        return widened

    def readers(self) -> dict:
        """tensor name -> the nodes that read it, in order."""
        out: dict = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def producers(self) -> dict:
        """tensor name -> the node that writes it."""
        return {o: n for n in self.nodes for o in n.outputs if o}

    def host_only(self) -> list:
        """``(node, why)`` for each node only the CPU runtime runs: a tensor of it whose shape
        is known only at run time, or an operand (weights, statistics, scales, shapes) that it
        reads at run time (its parameters' ``host_only`` reason)."""
        out = []
        for n in self.nodes:
            unknown = [t for t in n.inputs + n.outputs if t and t not in self.shapes]
            if unknown:
                out.append((n, f"the shape of {unknown[0]!r} is known only at run time"))
            elif getattr(n.params, "host_only", ""):
                out.append((n, n.params.host_only))
        return out

    @property
    def output_shapes(self) -> dict:
        return {n: self.shapes[n] for n in self.outputs}

    def feeds(self, args, kwargs, options=("runtime", "threads", "profile")) -> dict:
        """The checked ``{input name: array}`` of a run's ``args`` (one dict, or the inputs in
        order) or ``kwargs`` (the inputs by name): every input given once, a NumPy array of
        its loaded shape and dtype; a ModelError naming the input otherwise.  ``options``: the
        caller's own keywords, named when a keyword is neither one nor an input."""
        names = list(self.inputs)
        unknown = [k for k in kwargs if k not in self.inputs]
        if unknown:
            raise ModelError(f"run got the keyword {unknown[0]!r}, which is neither an option "
                             f"({', '.join(options)}) nor an input of the model "
                             f"({', '.join(repr(n) for n in names)})")
        if args and kwargs:
            raise ModelError(f"run got {len(args)} positional inputs and the keywords "
                             f"{', '.join(repr(k) for k in kwargs)}: give the inputs either in "
                             "order or by name (the model's inputs are "
                             f"{', '.join(repr(n) for n in names)})")
        if len(args) == 1 and isinstance(args[0], dict):
            feeds = dict(args[0])
        elif kwargs:
            feeds = dict(kwargs)
        else:
            if len(args) != len(names):
                raise ModelError(f"run got {len(args)} inputs: the model takes {len(names)} "
                                 f"({', '.join(names)})")
            feeds = dict(zip(names, args))
        for name in feeds:
            if name not in self.inputs:
                raise ModelError(f"input {name!r} is not an input of the model: it takes "
                                 f"{', '.join(repr(n) for n in names)}")
        out = {}
        for name, shape in self.inputs.items():
            if name not in feeds:
                raise ModelError(f"input {name!r} is missing")
            x = feeds[name]
            if isinstance(x, np.generic):
                x = np.asarray(x)
            if not isinstance(x, np.ndarray):
                raise ModelError(f"input {name!r} is a {type(x).__name__}: give a NumPy array")
            want = self.input_dtypes[name]
            if x.dtype != want:
                raise ModelError(f"input {name!r} has dtype {x.dtype}: the model takes {want}")
            if tuple(x.shape) != shape:
                raise ModelError(f"input {name!r} has shape {tuple(x.shape)}: the model was loaded "
                                 f"for {shape} (load it with input_shapes to change it)")
            out[name] = x
        return out


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _same_as_oldest(proto, opset) -> bool:
    """Whether every default-domain op of the model has, at ``opset``, the definition it has
    at the oldest opset the loader takes (an op that did not change in between)."""
    lo = OPSET_RANGE[0]
    for p in proto.graph.node:
        if p.domain in ("", "ai.onnx"):
            then, oldest = _onnx.op_version(p.op_type, opset), _onnx.op_version(p.op_type, lo)
            if then is None or then != oldest:
                return False
    return True


def _parse_input_shapes(input_shapes, declared):
    if input_shapes is None:
        return {}
    if isinstance(input_shapes, dict):
        given = dict(input_shapes)
    else:
        if len(declared) != 1:
            raise ModelError(f"input_shapes = {input_shapes!r} is not allowed: the model has "
                             f"{len(declared)} inputs ({', '.join(declared)}), name each one")
        given = {next(iter(declared)): input_shapes}
    out = {}
    for name, shape in given.items():
        if name not in declared:
            raise ModelError(f"input_shapes names {name!r}: the model's inputs are "
                             f"{', '.join(repr(d) for d in declared)}")
        try:
            out[name] = tuple(check_nonneg_int(f"input shape of {name!r}[{i}]", d)
                              for i, d in enumerate(shape))
        except TypeError:
            raise ModelError(f"input shape of {name!r} = {shape!r} is not a sequence of "
                             "non-negative integers") from None
    return out


def load_graph(source, input_shapes=None) -> Graph:
    """Read an ONNX model (path, bytes or ``onnx.ModelProto``) into a :class:`Graph`.

    ``input_shapes`` fixes dynamic input dimensions: a shape for a one-input model, or a
    dict name -> shape.  Every problem is a ModelError raised here, naming the node.
    """
    onnx = _onnx.onnx_module()
    proto, label = _onnx.read(source)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    lo, hi = OPSET_RANGE
    if opset is None or not 1 <= opset <= hi or (opset < lo and not _same_as_oldest(proto, opset)):
        raise ModelError(f"{label} uses opset {opset} of the default domain: supported are "
                         f"{lo} to {hi} (and older ones whose ops did not change before {lo})")
    g = proto.graph
    consts = {}
    for t in g.initializer:
        try:
            consts[t.name] = _onnx.to_array(t)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"initializer {t.name!r} cannot be read: "
                             f"{_onnx.first_line(exc)}") from None
    declared, types = {}, {}
    for vi in g.input:
        if vi.name in consts:
            continue
        et, shape = _onnx.tensor_type(vi.type)
        dt = _onnx.np_dtype(et)
        if dt is None:
            raise ModelError(f"input {vi.name!r} has element type {_onnx.type_name(et)}: the "
                             "runtimes take bool, integer and float inputs")
        declared[vi.name], types[vi.name] = shape, (et, dt)
    given = _parse_input_shapes(input_shapes, declared)
    inputs = {}
    for name, shape in declared.items():
        if name in given:
            want = given[name]
            if shape is not None and (len(shape) != len(want) or any(
                    isinstance(d, int) and d != w for d, w in zip(shape, want))):
                raise ModelError(f"input shape of {name!r} = {list(want)} disagrees with the "
                                 f"model's {list(shape)}")
            shape = want
        if not _static(shape):
            dims = "unknown rank" if shape is None else str(list(shape))
            raise ModelError(f"input {name!r} has a dynamic shape ({dims}): give it with "
                             f"input_shapes (on the command line --input-shape {name}=N,C,H,W)")
        inputs[name] = (types[name][0], tuple(shape))
    raws, seen = [], set()
    for i, p in enumerate(g.node):
        name = p.name or f"{p.op_type}_{i}"
        while name in seen:
            name += "_"
        seen.add(name)
        if p.domain not in ("", "ai.onnx"):
            raise ModelError(f"node {name!r} ({p.domain}.{p.op_type}): ops outside the default "
                             "ONNX domain are not supported")
        if p.op_type not in OPS:
            raise ModelError(f"node {name!r} ({p.op_type}): op {p.op_type} is not supported; the "
                             f"runtime has {', '.join(OP_TYPES)}")
        if OPS[p.op_type].since > opset:
            raise ModelError(f"node {name!r} ({p.op_type}): op {p.op_type} came in opset "
                             f"{OPS[p.op_type].since}; the model imports opset {opset}")
        attrs = _onnx.attributes(p)
        unknown = sorted(set(attrs) - _onnx.attribute_names(p.op_type, opset))
        if unknown:
            raise ModelError(f"node {name!r} ({p.op_type}): attribute {unknown[0]!r} is not an "
                             f"attribute of {p.op_type} at opset {opset}")
        raws.append(_Raw(name, p.op_type, list(p.input), list(p.output), attrs, p))
    outputs = [o.name for o in g.output]
    infer = _Inference(list(proto.opset_import), proto.ir_version, inputs, consts, outputs)
    shapes = infer(raws)
    raws, shapes = _fold_constants(raws, consts, shapes, opset, infer)
    raws, folded = _fold_batchnorm(raws, consts, outputs)
    if folded:
        shapes = infer(raws)
    for name in outputs:
        if name not in consts and name not in inputs and not any(name in r.outputs for r in raws):
            raise ModelError(f"graph output {name!r} is produced by no node")
    shapes = _with_declared(shapes, g)
    all_shapes = {n: s for n, (_, s) in shapes.items() if _static(s)}
    dtypes = {n: _onnx.np_dtype(et) for n, (et, _) in shapes.items()}
    for n, (_, s) in inputs.items():
        all_shapes[n], dtypes[n] = s, types[n][1]
    for n, a in consts.items():
        all_shapes[n], dtypes[n] = tuple(a.shape), a.dtype
    nodes = [_parse(r, all_shapes, dtypes, consts, opset) for r in raws]
    return Graph(label, g.name, opset, {n: s for n, (_, s) in inputs.items()},
                 {n: types[n][1] for n in inputs}, outputs, nodes, consts, all_shapes, dtypes,
                 folded)


def _with_declared(shapes, g):
    """Inferred types and shapes, completed by the shapes the model declares (``value_info``,
    graph outputs) where inference found none: the output of an op whose operands arrive at
    run time.  A run checks each computed shape against them."""
    out = dict(shapes)
    for vi in list(g.value_info) + list(g.output):
        et, shape = _onnx.tensor_type(vi.type)
        known = out.get(vi.name, (0, None))
        if not _static(known[1]) and _static(shape):
            out[vi.name] = (known[0] or et, shape)
        elif not known[0] and et:
            out[vi.name] = (et, known[1])
    return out


class _Inference:
    """onnx's shape inference over the nodes left, with the constants known so far.

    A pooling in ceil mode whose last window would start inside the end padding has that
    window dropped (:func:`~tensorlayout.graph.ops.pool_output_side`: what onnxruntime and
    PyTorch compute, and ONNX from opset 22); onnx's inference for the earlier opsets keeps
    it.  Such a node is given to the inference as its stand-in (:func:`_ceil_stand_in`), and
    the inference runs again, so that the tensors after it get their true shapes too."""

    def __init__(self, opsets, ir_version, inputs, consts, outputs):
        self.opsets, self.ir, self.inputs = opsets, ir_version, inputs
        self.consts, self.outputs = consts, outputs

    def __call__(self, raws):
        stand_in = {}
        while True:
            shapes = _onnx.infer([stand_in.get(i, r.proto) for i, r in enumerate(raws)],
                                 self.inputs, self.consts, self.outputs, self.opsets, self.ir,
                                 [r.name for r in raws])
            more = {i: p for i, r in enumerate(raws) if i not in stand_in
                    for p in [_ceil_stand_in(r, shapes)] if p is not None}
            if not more:
                return shapes
            stand_in.update(more)


def _ceil_stand_in(raw, shapes):
    """For a MaxPool, AveragePool or LpPool in ceil mode with explicit pads whose output onnx
    inferred with a last window that would start inside the end padding (its sizes not
    :func:`~tensorlayout.graph.ops.pool_output_side`'s, given its input's inferred shape):
    the same node in floor mode with end pads that give pool_output_side's sizes; else
    None.  Only onnx's shape inference sees it."""
    a = raw.attrs
    if (raw.op not in ("MaxPool", "AveragePool", "LpPool") or not a.get("ceil_mode")
            or a.get("auto_pad", "NOTSET") != "NOTSET" or not raw.inputs or not raw.outputs):
        return None
    x = shapes.get(raw.inputs[0], (0, None))[1]
    y = shapes.get(raw.outputs[0], (0, None))[1]
    kernel = a.get("kernel_shape")
    if (not _static(x) or not _static(y) or kernel is None
            or not len(x) == len(y) == len(kernel) + 2):
        return None
    d = len(kernel)
    strides = list(a.get("strides") or [1] * d)
    dil = list(a.get("dilations") or [1] * d)
    pads = list(a.get("pads") or [0] * (2 * d))
    if len(strides) != d or len(dil) != d or len(pads) != 2 * d or min(strides) < 1:
        return None
    outs = [pool_output_side(size, k, s, dd, b, e, True)
            for size, k, s, dd, b, e in zip(x[2:], kernel, strides, dil, pads[:d], pads[d:])]
    if min(outs) < 1 or tuple(y[2:]) == tuple(outs):
        return None                         # (too small: the node's own parse names it)
    # end pads for which floor((size + begin + end - span) / s) + 1 is the output's size
    ends = [max(0, (o - 1) * s + (k - 1) * dd + 1 - size - b)
            for o, size, k, s, dd, b in zip(outs, x[2:], kernel, strides, dil, pads[:d])]
    helper = _onnx.onnx_module().helper
    p = type(raw.proto)()
    p.CopyFrom(raw.proto)
    keep = [t for t in p.attribute if t.name not in ("ceil_mode", "pads")]
    del p.attribute[:]
    p.attribute.extend(keep + [helper.make_attribute("pads", pads[:d] + ends)])
    return p


def _shape_of(raw, name, shapes, consts, output=False, dynamic=False):
    """The static shape of tensor ``name``; None when it is unknown and the op reads its
    shapes at run time (``dynamic``), else a ModelError naming the node."""
    if name in consts:
        return tuple(consts[name].shape)
    s = shapes.get(name)
    if not _static(s):
        if dynamic:
            return None
        where = "output" if output else "input"
        raise ModelError(f"node {raw.name!r} ({raw.op}): the shape of its {where} {name!r} is "
                         f"unknown after shape inference ({s}): it depends on values computed "
                         f"at run time, and {raw.op} here needs it when the model loads")
    return tuple(s)


def _is_bfloat16(dtype) -> bool:
    return dtype is not None and dtype.name == "bfloat16"


def _check_dtypes(raw, dtypes):
    """Inputs of a storage-only type (float8, float4, 4- and 2-bit) reach only the ops that
    move or cast data; bfloat16 is computed in float32 (:meth:`Graph.kernel`)."""
    if OPS[raw.op].any_dtype:
        return
    for i, n in enumerate(raw.inputs):
        dt = dtypes.get(n) if n else None
        if dt is not None and storage_only(dt) and not _is_bfloat16(dt):
            raise ModelError(f"node {raw.name!r} ({raw.op}): input {i} {n!r} has type {dt.name}: "
                             f"{raw.op} computes on bool, integer, bfloat16 and float16/32/64 "
                             "tensors here (only Cast, CastLike and the ops that move data take "
                             "it)")


def _parse(raw, shapes, dtypes, consts, opset, folding=False) -> Node:
    dynamic = OPS[raw.op].dynamic
    _check_dtypes(raw, dtypes)
    in_shapes = [_shape_of(raw, n, shapes, consts, dynamic=dynamic) if n else None
                 for n in raw.inputs]
    out_shapes = [_shape_of(raw, n, shapes, consts, True, dynamic or folding) if n else None
                  for n in raw.outputs]
    ctx = Ctx(raw.name, raw.op, raw.attrs, raw.inputs, raw.outputs, in_shapes, out_shapes,
              [consts.get(n) if n else None for n in raw.inputs], opset,
              [dtypes.get(n) if n else None for n in raw.inputs])
    try:
        params = OPS[raw.op].parse(ctx)
    except LayoutError:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed attribute, named with the node
        raise ModelError(f"node {raw.name!r} ({raw.op}): its attributes cannot be read: "
                         f"{_onnx.first_line(exc)}") from None
    return Node(raw.name, raw.op, tuple(raw.inputs), tuple(raw.outputs), params)


def _foldable(raw, consts, shapes):
    ins = [n for n in raw.inputs if n]
    if all(n in consts for n in ins):
        return True
    return OPS[raw.op].reads_shape_only and _static(shapes.get(raw.inputs[0], (None, None))[1])


def _value_or_stand_in(name, consts, shapes):
    """A constant's value; for a computed tensor whose shape is known (the input of Shape or
    Size), an array of that shape that holds no memory."""
    if not name:
        return None
    if name in consts:
        return consts[name]
    return np.broadcast_to(np.zeros((), np.float32), shapes[name])


def _fold_constants(raws, consts, shapes, opset, infer):
    """Evaluate every node whose inputs are known, then infer shapes again and repeat until a
    pass folds nothing (a Shape whose input became static folds on the next pass)."""
    while True:
        left, changed = [], False
        for raw in raws:
            if not _foldable(raw, consts, shapes):
                left.append(raw)
                continue
            flat = {n: s for n, (_, s) in shapes.items() if _static(s)}
            dt = {n: _onnx.np_dtype(et) for n, (et, _) in shapes.items()}
            for n, a in consts.items():
                flat[n], dt[n] = tuple(np.shape(a)), np.asarray(a).dtype
            node = _parse(raw, flat, dt, consts, opset, folding=True)
            g = Graph("", "", opset, {}, {}, [], [], consts, flat, dt)
            try:
                with np.errstate(all="ignore"):     # ONNX's arithmetic: inf and nan, no warnings
                    outs = g.kernel(node)([_value_or_stand_in(n, consts, flat) for n in raw.inputs])
            except LayoutError:
                raise
            except Exception as exc:  # noqa: BLE001 - NumPy's errors, named with the node
                raise ModelError(f"node {raw.name!r} ({raw.op}): folding its constant inputs "
                                 f"failed: {_onnx.first_line(exc)}") from None
            for name, value in zip(raw.outputs, outs):
                if name:
                    consts[name] = np.asarray(value)
            changed = True
        raws = left
        if not changed:
            return raws, shapes
        shapes = infer(raws)


def _fold_batchnorm(raws, consts, outputs):
    """Fold each BatchNormalization that is the only reader of a Conv's output into it."""
    readers: dict = {}
    for r in raws:
        for n in r.inputs:
            if n:
                readers.setdefault(n, []).append(r)
    by_output = {o: r for r in raws for o in r.outputs}
    folded, drop = {}, set()
    for bn in raws:
        if bn.op != "BatchNormalization":
            continue
        conv = by_output.get(bn.inputs[0])
        if (conv is None or conv.op != "Conv" or len(readers.get(bn.inputs[0], ())) != 1
                or bn.inputs[0] in outputs or bn.attrs.get("training_mode", 0)
                or len([o for o in bn.outputs if o]) != 1
                or not all(n in consts for n in bn.inputs[1:5])
                or len(conv.inputs) < 2 or conv.inputs[1] not in consts
                or (len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in consts)):
            continue
        w = np.asarray(consts[conv.inputs[1]], np.float64)
        b = (np.asarray(consts[conv.inputs[2]], np.float64).reshape(-1)
             if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(w.shape[0]))
        gamma, beta, mean, var = (np.asarray(consts[n], np.float64).reshape(-1)
                                  for n in bn.inputs[1:5])
        if w.ndim < 3 or not gamma.shape == beta.shape == mean.shape == var.shape == (w.shape[0],):
            continue
        # in float64, so that the fold adds no rounding of its own
        sc = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
        wname, bname = f"{conv.name}.W_bn", f"{conv.name}.B_bn"
        consts[wname] = (w * sc.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
        consts[bname] = ((b - mean) * sc + beta).astype(np.float32)
        conv.inputs = [conv.inputs[0], wname, bname]
        conv.outputs = [bn.outputs[0]]
        conv.proto = _onnx.make_node_proto("Conv", conv.inputs, conv.outputs, conv.name, conv.attrs)
        folded[conv.name] = bn.name
        drop.add(id(bn))
    return [r for r in raws if id(r) not in drop], folded
