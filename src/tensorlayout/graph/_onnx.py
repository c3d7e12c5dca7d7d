"""Everything that touches ONNX's protobufs: reading a model, its attributes, its tensor types,
and onnx's shape inference.  The rest of the package sees Python values and NumPy arrays.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ModelError

__all__ = ["onnx_module", "read", "attributes", "tensor_type", "to_array", "infer",
           "newest_opset", "np_dtype", "op_version"]

# Constants up to this many elements keep their values in the graph handed to shape
# inference (shape arguments); larger ones (weights) go in as typed inputs only.
_INFER_CONST_LIMIT = 4096


def onnx_module():
    """The ``onnx`` package, or a ModelError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise ModelError("reading ONNX models needs the onnx package: pip install "
                         "'tensorlayout[model]'") from None
    return onnx


def first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0].strip() if text else type(exc).__name__


def newest_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` knows."""
    return int(onnx_module().defs.onnx_opset_version())


def op_version(op: str, opset: int):
    """The version of default-domain ``op``'s definition in force at ``opset``, or None when
    the op does not exist there."""
    try:
        return int(onnx_module().defs.get_schema(op, opset, "").since_version)
    except Exception:  # noqa: BLE001 - SchemaError: no such op at that opset
        return None


def read(source):
    """``(ModelProto, label)`` of a path, bytes or ModelProto; a clear error for anything else,
    for bytes that are not a model and for external weights that cannot be found."""
    onnx = onnx_module()
    if isinstance(source, onnx.ModelProto):
        return source, "model"
    if isinstance(source, (bytes, bytearray)):
        data, label = bytes(source), "the model bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        label = repr(path)
        if not os.path.isfile(path):
            raise ModelError(f"model = {path!r} does not exist or is not a file")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ModelError(f"model = {path!r} cannot be read: {exc.strerror}") from None
    else:
        raise ModelError(f"model = {type(source).__name__} is not allowed: give a path, bytes or "
                         "an onnx.ModelProto")
    if not data:
        raise ModelError(f"{label} is empty: it is not an ONNX model")
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and others
        raise ModelError(f"{label} is not an ONNX model: the protobuf does not parse "
                         f"({first_line(exc)}); truncated or another format?") from None
    if not proto.graph.node and proto.opset_import and proto.graph.output:
        raise ModelError(f"{label} has no nodes: its graph computes nothing (its outputs "
                         f"{', '.join(repr(o.name) for o in proto.graph.output)} are given "
                         "as they are); a network needs at least one node")
    if not proto.graph.node or not proto.opset_import:
        raise ModelError(f"{label} is not an ONNX model: it parses but has no graph nodes or no "
                         "opset (truncated or another format?)")
    external = [t for t in proto.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        if not isinstance(source, (str, os.PathLike)):
            raise ModelError(f"{label} keeps initializer {external[0].name!r} in an external file: "
                             "load it from its path, beside that file")
        base = os.path.dirname(os.path.abspath(os.fspath(source)))
        for t in external:
            where = {e.key: e.value for e in t.external_data}.get("location", "")
            full = os.path.normpath(os.path.join(base, where))
            if not where or not os.path.isfile(full):
                raise ModelError(f"{label}: initializer {t.name!r} is stored in the external file "
                                 f"{where!r}, which is not beside the model ({full})")
        try:
            onnx.external_data_helper.load_external_data_for_model(proto, base)
        except Exception as exc:  # noqa: BLE001 - onnx's checker and OS errors
            raise ModelError(f"{label}: its external weights cannot be read: "
                             f"{first_line(exc)}") from None
    return proto, label


def attributes(node_proto) -> dict:
    """A node's attributes as Python values (bytes decoded, tensors as arrays)."""
    onnx = onnx_module()
    out = {}
    for a in node_proto.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, onnx.TensorProto):
            v = to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [t.decode("utf-8", "replace") for t in v]
        out[a.name] = v
    return out


def attribute_names(op: str, opset: int) -> set:
    """The attributes ONNX defines for ``op`` at ``opset`` (the schema in force then)."""
    onnx = onnx_module()
    try:
        return set(onnx.defs.get_schema(op, opset, "").attributes)
    except Exception:  # noqa: BLE001 - an op the installed onnx does not know
        return set()


def np_dtype(elem_type: int):
    """The NumPy dtype of an ONNX element type (bfloat16, float8, 4- and 2-bit types as
    ml_dtypes' types), or None when there is none here (strings, complex, undefined)."""
    onnx = onnx_module()
    if elem_type == onnx.TensorProto.STRING or elem_type == 0:
        return None
    try:
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # noqa: BLE001 - types NumPy cannot hold
        return None
    return dt if dt.kind in "biufV" else None


def type_name(elem_type: int) -> str:
    return onnx_module().TensorProto.DataType.Name(elem_type)


def tensor_type(type_proto):
    """``(elem_type, shape)`` of a tensor type; shape entries are int (0 included) or the
    dimension's symbolic name ('?' when it has none); shape None when the rank is unknown."""
    t = type_proto.tensor_type
    if not t.HasField("shape"):
        return t.elem_type, None
    dims = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or "?")
    return t.elem_type, tuple(dims)


def to_array(tensor_proto) -> np.ndarray:
    return onnx_module().numpy_helper.to_array(tensor_proto)


def make_node_proto(op, inputs, outputs, name, attrs: dict):
    """A NodeProto (for shape inference of a node the graph rewrote)."""
    return onnx_module().helper.make_node(op, list(inputs), list(outputs), name=name, **attrs)


def _culprit(text, protos, names) -> str:
    """"node 'name' (Op): " for the node an inference message is about, or ''."""
    import re

    m = re.search(r"op_type:(\w+)(?:, node name: ([^)]*))?", text)
    if not m:
        return ""
    op, name = m.group(1), (m.group(2) or "").strip()
    names = names or [p.name or p.op_type for p in protos]
    found = [n for p, n in zip(protos, names) if p.op_type == op and (not name or p.name == name)]
    return f"node {found[0]!r} ({op}): " if len(found) == 1 else ""


def infer(protos, inputs, consts, outputs, opset_imports, ir_version, names=None):
    """Element types and shapes of every tensor, by onnx.shape_inference on a slim graph.

    ``inputs``: {name: (elem_type, shape)}; ``consts``: {name: array}; ``names``: the nodes'
    names, for a message about one of them.  Returns
    {name: (elem_type, shape)} as :func:`tensor_type` gives them.
    """
    onnx = onnx_module()
    helper, nh = onnx.helper, onnx.numpy_helper
    g_inputs = [helper.make_tensor_value_info(n, et, list(s)) for n, (et, s) in inputs.items()]
    inits = []
    used = {i for p in protos for i in p.input if i}
    for name, arr in consts.items():
        if name not in used:
            continue
        arr = np.asarray(arr)
        if arr.size <= _INFER_CONST_LIMIT or arr.dtype.kind in "iub":
            inits.append(nh.from_array(arr, name))
        else:
            g_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
    g_outputs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    graph = helper.make_graph(list(protos), "infer", g_inputs, g_outputs, inits)
    model = helper.make_model(graph, opset_imports=opset_imports)
    model.ir_version = ir_version
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except Exception as exc:  # noqa: BLE001 - InferenceError and friends
        text = first_line(exc)
        if text.count("op_type:") < 2:
            raise ModelError(f"{_culprit(text, protos, names)}shape inference failed: {text}") from None
        # the failure is inside the function body onnx expands an op into (a fault of onnx's
        # inference, not of the model): infer what it can, the shapes it leaves unknown are
        # refused by name where an op needs them
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False,
                                                     data_prop=True)
    out = {}
    for vi in (list(inferred.graph.input) + list(inferred.graph.value_info)
               + list(inferred.graph.output)):
        et, shape = tensor_type(vi.type)
        if vi.name not in out or out[vi.name][1] is None:
            out[vi.name] = (et, shape)
    return out
