"""Shared helpers of the model tests: build a one-off ONNX graph, run it here and in onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tensorlayout.model import load  # noqa: E402


def make_model(nodes, inputs, outputs, inits=None, opset=17):
    """``inputs``: {name: array or shape}; ``outputs``: list of names; ``inits``: {name: array}."""
    g_in = [helper.make_tensor_value_info(n, TensorProto.FLOAT,
                                          list(a.shape) if hasattr(a, "shape") else list(a))
            for n, a in inputs.items()]
    g_out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    g = helper.make_graph(nodes, "t", g_in, g_out,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def ort_session(data, threads=1):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def compare(nodes, inputs, outputs, inits=None, opset=17, tol=1e-5):
    """Run the graph here and in onnxruntime on the same inputs; assert they agree: relative L2
    error and largest error (relative to the largest reference value) both at most ``tol``."""
    model = make_model(nodes, inputs, outputs, inits, opset)
    data = model.SerializeToString()
    ours = load(data).run(dict(inputs))
    ours = ours if isinstance(ours, list) else [ours]
    ref = ort_session(data).run(None, dict(inputs))
    assert len(ours) == len(ref)
    for name, a, b in zip(outputs, ours, ref):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        assert a.dtype == b.dtype, (name, a.dtype, b.dtype)
        scale = max(float(np.abs(b).max(initial=0)), 1e-30)
        assert rel_l2(a, b) <= tol, (name, rel_l2(a, b))
        assert float(np.abs(a.astype(np.float64) - b).max(initial=0)) <= tol * scale, name
    return ours


def opencl_context():
    """The default OpenCL context, or a skip of the calling test module when none can be had."""
    import pytest

    from tensorlayout.errors import OpenCLUnavailable
    from tensorlayout.opencl import get_context

    try:
        return get_context()
    except OpenCLUnavailable as exc:
        pytest.skip(f"no OpenCL platform can be had on this machine: {exc}")
