"""Load an ONNX model into a runnable graph: checks, shape inference, folding, the runtime.

:func:`load` reads the model, checks its opset and ops, fixes the input shapes, infers
every tensor's shape with ``onnx.shape_inference``, folds constant subgraphs (Shape /
Gather / Concat chains included) and BatchNormalization into the Conv before it, and makes
each remaining node's NumPy kernel once (a :class:`~tensorlayout.winograd.ConvPlan` per
convolution).  :meth:`Model.run` then runs the nodes in order, freeing every tensor after
its last reader and writing elementwise results over inputs that die there.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

import numpy as np

from .. import _backend
from ..errors import LayoutError, check_positive_int
from .ops import BUILDERS, IN_PLACE, OP_TYPES, VIEWS, Ctx, ModelError

__all__ = ["load", "Model", "Node", "Step", "OPSET_RANGE"]

#: The default-domain opsets the loader accepts.
OPSET_RANGE = (11, 21)

# Constants up to this many elements keep their values in the graph handed to shape
# inference (shape arguments); larger ones (weights) go in as typed inputs only.
_INFER_CONST_LIMIT = 4096


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ModelError("reading ONNX models needs the onnx package: pip install "
                         "'tensorlayout[model]'") from None
    return onnx


@dataclass
class Node:
    """One graph node: its name, op type, input / output tensor names and attributes."""

    name: str
    op: str
    inputs: list
    outputs: list
    attrs: dict
    proto: object = field(default=None, repr=False)


@dataclass
class Step:
    """A node ready to run: its kernel, static shapes and what the plan shows about it."""

    node: Node
    run: object = field(repr=False)
    in_shapes: list
    out_shapes: list
    info: dict
    conv_plan: object = field(default=None, repr=False)


def _attrs(onnx, node_proto) -> dict:
    out = {}
    for a in node_proto.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, onnx.TensorProto):
            v = onnx.numpy_helper.to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [t.decode("utf-8", "replace") for t in v]
        out[a.name] = v
    return out


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0].strip() if text else type(exc).__name__


def run_step(node, step, inputs, out=None, where: str = ""):
    """``step.run(inputs, out)`` for ``node``: a LayoutError passes through, any other
    failure becomes one ModelError line naming the node (and ``where`` it ran)."""
    try:
        return step.run(inputs, out)
    except LayoutError:
        raise
    except Exception as exc:  # noqa: BLE001 - named with the node
        raise ModelError(f"node {node.name!r} ({node.op}) failed{where}: {_first_line(exc)}") from None


def _read(onnx, source):
    """The ModelProto of a path, bytes or ModelProto; a clear error for anything else."""
    if isinstance(source, onnx.ModelProto):
        return source, "model"
    if isinstance(source, (bytes, bytearray)):
        data, label = bytes(source), "the model bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        label = repr(path)
        if not os.path.isfile(path):
            raise ModelError(f"model = {path!r} does not exist or is not a file")
        with open(path, "rb") as f:
            data = f.read()
    else:
        raise ModelError(f"model = {source!r} is not allowed: give a path, bytes or an onnx.ModelProto")
    if not data:
        raise ModelError(f"{label} is empty: it is not an ONNX model")
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and others
        raise ModelError(f"{label} is not an ONNX model: the protobuf does not parse "
                         f"({_first_line(exc)}); truncated or another format?") from None
    if not proto.graph.node or not proto.opset_import:
        raise ModelError(f"{label} is not an ONNX model: it parses but has no graph nodes or no "
                         "opset (truncated or another format?)")
    if isinstance(source, (str, os.PathLike)) and any(
            t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        onnx.external_data_helper.load_external_data_for_model(
            proto, os.path.dirname(os.path.abspath(os.fspath(source))))
    return proto, label


def _dims(onnx, type_proto):
    """(elem_type, shape) of a tensor type; shape entries are int or the dim's symbolic name."""
    t = type_proto.tensor_type
    if not t.HasField("shape"):
        return t.elem_type, None
    dims = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or "?")
    return t.elem_type, tuple(dims)


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _infer(onnx, nodes, inputs, consts, outputs, opset_imports, ir_version):
    """Shapes and element types of every tensor, by onnx.shape_inference on a slim graph."""
    helper, nh = onnx.helper, onnx.numpy_helper
    g_inputs = [helper.make_tensor_value_info(n, et, list(s)) for n, (et, s) in inputs.items()]
    inits = []
    used = {i for n in nodes for i in n.inputs if i}
    for name, arr in consts.items():
        if name not in used:
            continue
        if arr.size <= _INFER_CONST_LIMIT or arr.dtype.kind in "iub":
            inits.append(nh.from_array(np.asarray(arr), name))
        else:
            g_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
    g_outputs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    graph = helper.make_graph([n.proto for n in nodes], "infer", g_inputs, g_outputs, inits)
    model = helper.make_model(graph, opset_imports=opset_imports)
    model.ir_version = ir_version
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except Exception as exc:  # noqa: BLE001 - InferenceError and friends
        raise ModelError(f"shape inference failed: {_first_line(exc)}") from None
    out = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        et, shape = _dims(onnx, vi.type)
        if vi.name not in out or out[vi.name][1] is None:
            out[vi.name] = (et, shape)
    return out


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
            out[name] = tuple(check_positive_int(f"input shape of {name!r}[{i}]", d)
                              for i, d in enumerate(shape))
        except TypeError:
            raise ModelError(f"input shape of {name!r} = {shape!r} is not a sequence of "
                             "positive integers") from None
    return out


def load(source, input_shapes=None) -> "Model":
    """Load an ONNX model (path, bytes or ``onnx.ModelProto``) for the CPU runtime.

    ``input_shapes`` fixes dynamic input dimensions: a shape for a one-input model, or a
    dict name -> shape.  Every problem is a :class:`ModelError` raised here, before
    anything runs.

    >>> import numpy as np, onnx
    >>> from onnx import helper, TensorProto
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    >>> m = load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), input_shapes=(2, 3))
    >>> m.run(np.array([[-1, 0, 2], [3, -4, 5]], np.float32)).tolist()
    [[0.0, 0.0, 2.0], [3.0, 0.0, 5.0]]
    """
    onnx = _onnx()
    proto, label = _read(onnx, source)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    lo, hi = OPSET_RANGE
    if opset is None or not lo <= opset <= hi:
        raise ModelError(f"{label} uses opset {opset} of the default domain: supported are "
                         f"{lo} to {hi}")
    g = proto.graph
    nh = onnx.numpy_helper
    consts = {}
    for t in g.initializer:
        try:
            consts[t.name] = nh.to_array(t)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"initializer {t.name!r} cannot be read: {_first_line(exc)}") from None
    # graph inputs: the runtime inputs are those without an initializer
    declared = {}
    for vi in g.input:
        if vi.name in consts:
            continue
        et, shape = _dims(onnx, vi.type)
        if et != onnx.TensorProto.FLOAT:
            raise ModelError(f"input {vi.name!r} has element type "
                             f"{onnx.TensorProto.DataType.Name(et)}: the runtime takes float32 inputs")
        declared[vi.name] = shape
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
            dims = "unknown rank" if shape is None else str([d for d in shape])
            raise ModelError(f"input {name!r} has a dynamic shape ({dims}): give it with "
                             f"input_shapes (on the command line --input-shape {name}=N,C,H,W)")
        inputs[name] = (onnx.TensorProto.FLOAT, shape)
    # nodes: every op known, default domain
    nodes = []
    for i, p in enumerate(g.node):
        name = p.name or f"{p.op_type}_{i}"
        if p.domain not in ("", "ai.onnx"):
            raise ModelError(f"node {name!r} ({p.domain}.{p.op_type}): ops outside the default "
                             "ONNX domain are not supported")
        if p.op_type not in BUILDERS:
            raise ModelError(f"node {name!r} ({p.op_type}): op {p.op_type} is not supported; the "
                             f"runtime has {', '.join(OP_TYPES)}")
        nodes.append(Node(name, p.op_type, list(p.input), list(p.output), _attrs(onnx, p), p))
    outputs = [o.name for o in g.output]
    opsets = list(proto.opset_import)
    shapes = _infer(onnx, nodes, inputs, consts, outputs, opsets, proto.ir_version)
    runtime = _fold_constants(nodes, consts, shapes, opset)
    runtime, folded_bn = _fold_batchnorm(onnx, runtime, consts, outputs)
    # shapes again, now that shape arguments are constants
    shapes = _infer(onnx, runtime, inputs, consts, outputs, opsets, proto.ir_version)
    for name in outputs:
        if name not in consts and name not in inputs and not any(name in n.outputs for n in runtime):
            raise ModelError(f"graph output {name!r} is produced by no node")
    steps = []
    for node in runtime:
        in_shapes = [_shape_of(node, n, shapes, consts) if n else None for n in node.inputs]
        out_shapes = [_shape_of(node, n, shapes, consts, output=True) if n else None
                      for n in node.outputs]
        cvals = [consts.get(n) if n else None for n in node.inputs]
        ctx = Ctx(node, in_shapes, out_shapes, cvals, opset)
        run = BUILDERS[node.op](node, ctx)
        if node.name in folded_bn:
            ctx.info["folded"] = folded_bn[node.name]
        steps.append(Step(node, run, in_shapes, out_shapes, ctx.info, ctx.conv_plan))
    return Model(label, opset, inputs, outputs, steps, consts, shapes, g.name)


def _shape_of(node, name, shapes, consts, output=False):
    if name in consts:
        return tuple(consts[name].shape)
    s = shapes.get(name, (None, None))[1]
    if not _static(s):
        where = "output" if output else "input"
        raise ModelError(f"node {node.name!r} ({node.op}): the shape of its {where} {name!r} is "
                         f"unknown after shape inference ({s})")
    return tuple(s)


def _fold_constants(nodes, consts, shapes, opset):
    """Evaluate every node whose inputs are all known now; return the others, in order."""
    runtime = []
    for node in nodes:
        ins = [n for n in node.inputs if n]
        foldable = all(n in consts for n in ins)
        if node.op == "Shape" and not foldable:
            foldable = _static(shapes.get(node.inputs[0], (None, None))[1])
        if not foldable:
            runtime.append(node)
            continue
        in_shapes = []
        for n in node.inputs:
            if not n:
                in_shapes.append(None)
            elif n in consts:
                in_shapes.append(tuple(consts[n].shape))
            else:
                in_shapes.append(tuple(shapes[n][1]))
        cvals = [consts.get(n) if n else None for n in node.inputs]
        ctx = Ctx(node, in_shapes, [None] * len(node.outputs), cvals, opset)
        fn = BUILDERS[node.op](node, ctx)
        try:
            outs = fn([consts.get(n) if n else None for n in node.inputs])
        except LayoutError:
            raise
        except Exception as exc:  # noqa: BLE001 - NumPy's errors, named with the node
            raise ModelError(f"node {node.name!r} ({node.op}): folding its constant inputs "
                             f"failed: {_first_line(exc)}") from None
        for name, value in zip(node.outputs, outs):
            if name:
                consts[name] = np.asarray(value)
    return runtime


def _fold_batchnorm(onnx, nodes, consts, outputs):
    """Fold each BatchNormalization that is the only reader of a Conv's output into it."""
    readers = {}
    for node in nodes:
        for n in node.inputs:
            if n:
                readers.setdefault(n, []).append(node)
    folded, drop, out = {}, set(), []
    by_output = {o: n for n in nodes for o in n.outputs}
    for node in nodes:
        if node.op != "BatchNormalization" or id(node) in drop:
            continue
        conv = by_output.get(node.inputs[0])
        if (conv is None or conv.op != "Conv" or len(readers.get(node.inputs[0], ())) != 1
                or node.inputs[0] in outputs or node.attrs.get("training_mode", 0)
                or len([o for o in node.outputs if o]) != 1
                or not all(n in consts for n in node.inputs[1:5])
                or conv.inputs[1] not in consts
                or (len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in consts)):
            continue
        w = np.asarray(consts[conv.inputs[1]], np.float64)
        b = (np.asarray(consts[conv.inputs[2]], np.float64)
             if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(w.shape[0]))
        gamma, beta, mean, var = (np.asarray(consts[n], np.float64).reshape(-1)
                                  for n in node.inputs[1:5])
        if not gamma.shape == beta.shape == mean.shape == var.shape == (w.shape[0],):
            continue
        # in float64, so that the fold adds no rounding of its own
        sc = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        wname, bname = f"{conv.name}.W_bn", f"{conv.name}.B_bn"
        consts[wname] = (w * sc[:, None, None, None]).astype(np.float32)
        consts[bname] = ((b - mean) * sc + beta).astype(np.float32)
        new_inputs = [conv.inputs[0], wname, bname]
        proto = onnx.helper.make_node("Conv", new_inputs, [node.outputs[0]], name=conv.name)
        proto.attribute.extend(conv.proto.attribute)
        conv.inputs, conv.outputs, conv.proto = new_inputs, [node.outputs[0]], proto
        folded[conv.name] = node.name
        drop.add(id(node))
    for node in nodes:
        if id(node) not in drop:
            out.append(node)
    return out, folded


# ---------------------------------------------------------------------------- threads
_CONTROLLER = []


def _blas_controller():
    """threadpoolctl's view of the loaded BLAS libraries, found once (finding them takes ms)."""
    if not _CONTROLLER:
        try:
            from threadpoolctl import ThreadpoolController

            _CONTROLLER.append(ThreadpoolController())
        except ImportError:
            _CONTROLLER.append(None)
    return _CONTROLLER[0]


@contextlib.contextmanager
def threads_limit(n):
    """Run with ``n`` threads: numba's pool (Winograd transforms) and the BLAS library."""
    if n is None:
        yield
        return
    n = check_positive_int("threads", n)
    restore = []
    numba = _backend.numba()
    if numba is not None:
        old = numba.get_num_threads()
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        restore.append(lambda: numba.set_num_threads(old))
    controller = _blas_controller()
    if controller is not None:
        limiter = controller.limit(limits=n, user_api="blas")
        restore.append(limiter.restore_original_limits)
    try:
        yield
    finally:
        for fn in reversed(restore):
            fn()


# ---------------------------------------------------------------------------- the model
class Model:
    """A loaded model: run it (:meth:`run`), read its layers (:attr:`steps`), plan it
    (:func:`tensorlayout.model.plan_model`)."""

    def __init__(self, label, opset, inputs, outputs, steps, consts, shapes, name=""):
        self.label = label
        self.name = name
        self.opset = opset
        self.inputs = {n: tuple(s) for n, (_, s) in inputs.items()}
        self.outputs = list(outputs)
        self.steps = steps
        self.consts = consts
        self.shapes = shapes
        self.last_profile = None
        last = {}
        for i, st in enumerate(steps):
            for n in st.node.inputs:
                if n:
                    last[n] = i
        for n in self.outputs:
            last[n] = len(steps)
        self._last = last

    def __repr__(self):
        return (f"Model({self.label}, opset {self.opset}, {len(self.steps)} layers, "
                f"inputs {self.inputs})")

    @property
    def output_shapes(self) -> dict:
        out = {}
        for n in self.outputs:
            if n in self.consts:
                out[n] = tuple(self.consts[n].shape)
            elif n in self.inputs:
                out[n] = self.inputs[n]
            else:
                out[n] = next(s for st in self.steps for o, s in zip(st.node.outputs, st.out_shapes)
                              if o == n)
        return out

    def feeds(self, args, kwargs) -> dict:
        """The checked ``{input name: array}`` of a call's ``args`` (one dict, or the inputs in
        order) or ``kwargs`` (the inputs by name), as :meth:`run` takes them."""
        if len(args) == 1 and isinstance(args[0], dict):
            feeds = dict(args[0])
        elif kwargs and not args:
            feeds = dict(kwargs)
        else:
            if len(args) != len(self.inputs):
                raise ModelError(f"run got {len(args)} inputs: the model takes {len(self.inputs)} "
                                 f"({', '.join(self.inputs)})")
            feeds = dict(zip(self.inputs, args))
        for name in feeds:
            if name not in self.inputs:
                raise ModelError(f"input {name!r} is not an input of the model: it takes "
                                 f"{', '.join(repr(n) for n in self.inputs)}")
        out = {}
        for name, shape in self.inputs.items():
            if name not in feeds:
                raise ModelError(f"input {name!r} is missing")
            x = feeds[name]
            if not isinstance(x, np.ndarray):
                raise ModelError(f"input {name!r} is a {type(x).__name__}: give a NumPy array")
            if x.dtype != np.float32:
                raise ModelError(f"input {name!r} has dtype {x.dtype}: the model takes float32")
            if tuple(x.shape) != shape:
                raise ModelError(f"input {name!r} has shape {tuple(x.shape)}: the model was loaded "
                                 f"for {shape} (load it with input_shapes to change it)")
            out[name] = x
        return out

    def run(self, *args, threads=None, profile=False, **kwargs):
        """Run the model on float32 inputs of the loaded shapes; the output array (a list when
        the model has several outputs).  ``threads`` caps numba's and BLAS's threads;
        ``profile`` records seconds per layer in :attr:`last_profile`.

        >>> import numpy as np
        >>> from tensorlayout.model import zoo
        >>> m = load(zoo.tiny_onnx())
        >>> m.run(np.zeros((1, 3, 16, 16), np.float32)).shape
        (1, 10)
        """
        feeds = self.feeds(args, kwargs)
        values = dict(self.consts)
        values.update(feeds)
        owned = set()
        last = self._last
        prof = [] if profile else None
        with threads_limit(threads), np.errstate(over="ignore", invalid="ignore",
                                                 divide="ignore", under="ignore"):
            for i, st in enumerate(self.steps):
                node = st.node
                ins = [values[n] if n else None for n in node.inputs]
                out = None
                first = node.inputs[0] if node.inputs else ""
                if (node.op in IN_PLACE and first in owned and last.get(first) == i
                        and node.inputs.count(first) == 1
                        and tuple(ins[0].shape) == st.out_shapes[0]):
                    out = ins[0]
                t0 = time.perf_counter() if profile else 0.0
                outs = run_step(node, st, ins, out)
                if profile:
                    prof.append((node.name, node.op, time.perf_counter() - t0, st.info.get("algorithm")))
                for name, value, shape in zip(node.outputs, outs, st.out_shapes):
                    if not name:
                        continue
                    if tuple(value.shape) != shape:
                        raise ModelError(f"node {node.name!r} ({node.op}) computed shape "
                                         f"{tuple(value.shape)} where shape inference says {shape}")
                    values[name] = value
                    if node.op not in VIEWS and node.op not in ("Transpose", "ReduceMean"):
                        owned.add(name)
                if node.op in VIEWS or node.op in ("Transpose", "ReduceMean"):
                    owned.difference_update(node.inputs)
                for n in set(node.inputs):
                    if n and last.get(n) == i and n not in self.consts:
                        values.pop(n, None)
                        owned.discard(n)
        self.last_profile = prof
        results = [values[n] for n in self.outputs]
        return results[0] if len(results) == 1 else results
