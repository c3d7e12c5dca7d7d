"""ONNX's backend node tests, run through tensorlayout's runtimes.

Each case is one small model with its inputs and the outputs ONNX expects: read from the
installed onnx package's data (``onnx/backend/test/data/node/test_*``) when the wheel ships
it, else made by the package's own generators (``onnx.backend.test.case.node``), which write
the same models and data, once, into ``~/.cache/tensorlayout/onnx-VERSION-node-tests`` (in
the wheel's layout), read from there afterwards.  A case counts for a runtime when every op of its graph is one the
runtime lists; its outcome there is one of

- ``pass``: every output has the expected shape and type, and values as ONNX's runner
  compares them (floats within rtol 1e-3, atol 1e-7, NaN equal to NaN; bfloat16 within two
  of its steps; integers and booleans exactly);
- ``refused``: a ModelError or LayoutError whose message names a node, an input or an
  output of the graph;
- ``wrong``: an answer that differs, or a refusal that names neither;
- ``crashed``: any other exception, or one the runtime caught in its catch-all (a message
  "node ... failed: ...", named but foreseen by no check).

``python tests/_onnx_node.py [cpu|opencl|npu]`` prints the counts and every case that is
not a pass.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np

OUTCOMES = ("pass", "wrong", "refused", "crashed")


@dataclass
class Case:
    name: str
    model: object            # onnx.ModelProto
    inputs: list             # arrays, in the graph's input order
    outputs: list            # the expected arrays, in the graph's output order
    rtol: float = 1e-3
    atol: float = 1e-7

    @property
    def ops(self) -> set:
        return {(n.domain or "", n.op_type) for n in self.model.graph.node}


def _array(value):
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return value


def _proto_kinds(type_proto):
    """Which protobuf message holds a value of this graph input or output type."""
    if type_proto.HasField("sequence_type"):
        return "sequence"
    if type_proto.HasField("map_type"):
        return "map"
    if type_proto.HasField("optional_type"):
        return "optional"
    return "tensor"


def _read_value(path, kind):
    import onnx
    from onnx import numpy_helper

    message = {"tensor": onnx.TensorProto, "sequence": onnx.SequenceProto,
               "map": onnx.MapProto, "optional": onnx.OptionalProto}[kind]()
    with open(path, "rb") as fh:
        message.ParseFromString(fh.read())
    if kind == "sequence":
        return numpy_helper.to_list(message)
    if kind == "map":
        return numpy_helper.to_dict(message)
    if kind == "optional":
        return numpy_helper.to_optional(message)
    return message


def _write_value(path, value, name, kind):
    from onnx import TensorProto, numpy_helper

    if kind == "sequence":
        proto = numpy_helper.from_list(value, name)
    elif kind == "map":
        proto = numpy_helper.from_dict(value, name)
    elif kind == "optional":
        proto = numpy_helper.from_optional(value, name)
    else:
        proto = value if isinstance(value, TensorProto) else numpy_helper.from_array(
            np.asarray(value), name)
    with open(path, "wb") as fh:
        fh.write(proto.SerializeToString())


def _from_data(root):
    """The cases of a directory laid out as ONNX ships them: test_*/model.onnx and
    test_data_set_0/input_N.pb, output_N.pb."""
    import onnx

    out = []
    for d in sorted(glob.glob(os.path.join(root, "test_*"))):
        path = os.path.join(d, "model.onnx")
        data = os.path.join(d, "test_data_set_0")
        if not os.path.isfile(path) or not os.path.isdir(data):
            continue
        model = onnx.load(path)
        values = []
        for prefix, infos in (("input", model.graph.input), ("output", model.graph.output)):
            values.append([_read_value(os.path.join(data, f"{prefix}_{i}.pb"),
                                       _proto_kinds(vi.type))
                           for i, vi in enumerate(infos)
                           if os.path.isfile(os.path.join(data, f"{prefix}_{i}.pb"))])
        out.append(Case(os.path.basename(d), model, values[0], values[1]))
    return out


def _generated():
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    return [Case(c.name, c.model, list(c.data_sets[0][0]), list(c.data_sets[0][1]), c.rtol, c.atol)
            for c in cases if c.model is not None and c.data_sets]


def _write_data(root, found):
    """Write generated cases in the layout ONNX ships (a cache: generating takes seconds)."""
    import tempfile

    os.makedirs(os.path.dirname(root), exist_ok=True)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(root))
    for c in found:
        data = os.path.join(tmp, c.name, "test_data_set_0")
        os.makedirs(data)
        with open(os.path.join(tmp, c.name, "model.onnx"), "wb") as fh:
            fh.write(c.model.SerializeToString())
        for prefix, infos, values in (("input", c.model.graph.input, c.inputs),
                                      ("output", c.model.graph.output, c.outputs)):
            for i, (vi, v) in enumerate(zip(infos, values)):
                _write_value(os.path.join(data, f"{prefix}_{i}.pb"), v, vi.name,
                             _proto_kinds(vi.type))
    try:
        os.rename(tmp, root)
    except OSError:             # another process wrote it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def _cache_root():
    import onnx

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tensorlayout", f"onnx-{onnx.__version__}-node-tests")


@functools.lru_cache(maxsize=None)
def cases() -> tuple:
    """Every node test case of the installed onnx, sorted by name: the wheel's data, else
    the cases its generators make, written once to a cache directory and read from there."""
    import onnx

    shipped = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    found = _from_data(shipped) if os.path.isdir(shipped) else []
    if not found:
        cache = _cache_root()
        found = _from_data(cache) if os.path.isdir(cache) else []
        if not found:
            found = _generated()
            try:
                _write_data(cache, found)
            except Exception:  # noqa: BLE001 - an unwritable cache only costs time
                pass
    return tuple(sorted(found, key=lambda c: c.name))


def runtime_ops(runtime) -> set:
    """The ops a runtime lists."""
    if runtime == "cpu":
        from tensorlayout.graph import OP_TYPES

        return set(OP_TYPES)
    if runtime == "opencl":
        from tensorlayout.backends.opencl import NETWORK_OPS

        return set(NETWORK_OPS)
    from tensorlayout.schedule.npu import NPU_OPS

    return set(NPU_OPS)


def listed(runtime) -> list:
    """The cases every op of which the runtime lists."""
    ops = runtime_ops(runtime)
    return [c for c in cases() if all(d in ("", "ai.onnx") and o in ops for d, o in c.ops)]


def _mismatch(got, want, rtol, atol):
    """Why ``got`` differs from ``want`` as ONNX's runner compares them, or ''."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"type {got.dtype}, expected {want.dtype}"
    name = want.dtype.name
    if want.dtype.kind in "biu" or name.startswith(("int", "uint")):
        ok = np.array_equal(got.astype(np.int64) if name.startswith(("int", "uint")) else got,
                            want.astype(np.int64) if name.startswith(("int", "uint")) else want)
        return "" if ok else "integer values differ"
    rtol = max(rtol, 2.0 ** -6) if name == "bfloat16" else rtol
    g, w = got.astype(np.float64), want.astype(np.float64)
    same = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True) | (g == w)
    if same.all():
        return ""
    i = np.flatnonzero(~same.reshape(-1))[0]
    return (f"{int((~same).sum())} of {same.size} values differ (first at {i}: "
            f"{g.reshape(-1)[i]!r}, expected {w.reshape(-1)[i]!r})")


def _names_the_graph(message, model) -> bool:
    g = model.graph
    # a node's name, or the loader's name for an unnamed one (op_index, "_" added for repeats)
    nodes = {n.name or f"{n.op_type}_{i}" for i, n in enumerate(g.node)}
    tensors = {v.name for v in list(g.input) + list(g.output)}
    named = re.findall(r"(?:node|input|output) '([^']*)'", message)
    return any(n in nodes or n.rstrip("_") in nodes or n in tensors for n in named)


#: The messages of the runtime's catch-alls: an exception no check foresaw, named with the
#: node (a crash as far as these tests are concerned).
_CAUGHT = re.compile(r"\) failed( on the host)?: |folding its constant inputs failed|"
                     r"its attributes cannot be read")


def outcome(case, runtime="cpu"):
    """``(outcome, detail)`` of one case on ``runtime``."""
    from tensorlayout.errors import LayoutError
    from tensorlayout.model import load

    try:
        model = load(case.model)
        feeds = {vi.name: _array(v) for vi, v in zip(case.model.graph.input, case.inputs)}
        with np.errstate(all="ignore"):
            got = model.run(feeds, runtime=runtime)
    except LayoutError as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if _CAUGHT.search(text):
            return "crashed", f"an unexpected exception, caught and named: {text}"
        if _names_the_graph(text, case.model):
            return "refused", text
        return "wrong", f"a refusal that names no node or input: {text}"
    except Exception as exc:  # noqa: BLE001 - every other exception is a crash to report
        return "crashed", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    got = got if isinstance(got, list) else [got]
    if len(got) != len(case.outputs):
        return "wrong", f"{len(got)} outputs, expected {len(case.outputs)}"
    for i, (g, w) in enumerate(zip(got, case.outputs)):
        why = _mismatch(g, _array(w), case.rtol, case.atol)
        if why:
            return "wrong", f"output {i}: {why}"
    return "pass", ""


def run_all(runtime="cpu", chosen=None) -> dict:
    """``{case name: (outcome, detail)}`` over the listed cases (or ``chosen`` ones)."""
    return {c.name: outcome(c, runtime) for c in (listed(runtime) if chosen is None else chosen)}


def table_row(runtime, results) -> str:
    c = Counter(o for o, _ in results.values())
    total = sum(c.values())
    return (f"{runtime}: {total} listed, " + ", ".join(f"{k} {c[k]}" for k in OUTCOMES)
            + (f" ({100 * c['pass'] / total:.1f}% pass)" if total else ""))


if __name__ == "__main__":
    rt = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    res = run_all(rt)
    print(table_row(rt, res))
    for name, (o, why) in sorted(res.items(), key=lambda kv: (OUTCOMES.index(kv[1][0]), kv[0])):
        if o != "pass":
            print(f"{o:8} {name}: {why}")
