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
from .ops import OPS, OP_TYPES, Ctx

__all__ = ["Graph", "Node", "load_graph", "OPSET_RANGE"]

#: The default-domain opsets the loader accepts: (oldest, newest of the installed onnx).
OPSET_RANGE = (11, 21)


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
        """The NumPy semantics of ``node``: ``run(inputs, out=None) -> [outputs]``."""
        return OPS[node.op].kernel(node, self.ctx(node))

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
    if opset is None or not lo <= opset <= hi:
        raise ModelError(f"{label} uses opset {opset} of the default domain: supported are "
                         f"{lo} to {hi}")
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


class _Inference:
    """onnx's shape inference over the nodes left, with the constants known so far."""

    def __init__(self, opsets, ir_version, inputs, consts, outputs):
        self.opsets, self.ir, self.inputs = opsets, ir_version, inputs
        self.consts, self.outputs = consts, outputs

    def __call__(self, raws):
        return _onnx.infer([r.proto for r in raws], self.inputs, self.consts, self.outputs,
                           self.opsets, self.ir)


def _shape_of(raw, name, shapes, consts, output=False):
    if name in consts:
        return tuple(consts[name].shape)
    s = shapes.get(name)
    if not _static(s):
        where = "output" if output else "input"
        raise ModelError(f"node {raw.name!r} ({raw.op}): the shape of its {where} {name!r} is "
                         f"unknown after shape inference ({s})")
    return tuple(s)


def _parse(raw, shapes, dtypes, consts, opset) -> Node:
    in_shapes = [_shape_of(raw, n, shapes, consts) if n else None for n in raw.inputs]
    out_shapes = [_shape_of(raw, n, shapes, consts, True) if n else None for n in raw.outputs]
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
    return raw.op == "Shape" and _static(shapes.get(raw.inputs[0], (None, None))[1])


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
            node = _parse(raw, flat, dt, consts, opset)
            g = Graph("", "", opset, {}, {}, [], [], consts, flat, dt)
            try:
                with np.errstate(all="ignore"):     # ONNX's arithmetic: inf and nan, no warnings
                    outs = g.kernel(node)([consts.get(n) if n else None for n in raw.inputs])
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
