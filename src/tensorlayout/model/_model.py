"""The model a user holds: a loaded graph, run on any of the three runtimes.

:func:`load` reads the graph once (:func:`tensorlayout.graph.load_graph`); nothing is
prepared for a runtime until it is asked for: the CPU kernels (one convolution plan per
layer) on the first CPU run, an OpenCL session or an NPU program on the first run there.
"""

from __future__ import annotations

import threading

import numpy as np

from ..errors import ModelError
from ..graph import load_graph

__all__ = ["load", "Model", "RUNTIMES"]

#: The runtimes :meth:`Model.run` takes.
RUNTIMES = ("cpu", "opencl", "npu")


def load(source, input_shapes=None) -> "Model":
    """Load an ONNX model (path, bytes or ``onnx.ModelProto``).

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
    return Model(load_graph(source, input_shapes))


class Model:
    """A loaded model: run it (:meth:`run`), read its graph (:attr:`graph`) and its CPU steps
    (:attr:`steps`), plan it (:func:`tensorlayout.model.plan_model`)."""

    def __init__(self, graph):
        self.graph = graph
        self.label = graph.label
        self.name = graph.name
        self.opset = graph.opset
        self.inputs = dict(graph.inputs)
        self.outputs = list(graph.outputs)
        self.consts = graph.consts
        self.shapes = graph.shapes
        self.last_profile = None
        self._lock = threading.Lock()
        self._cpu = None

    def __repr__(self):
        return (f"Model({self.label}, opset {self.opset}, {len(self.graph.nodes)} nodes, "
                f"inputs {self.inputs})")

    @property
    def output_shapes(self) -> dict:
        return self.graph.output_shapes

    def cpu(self):
        """The prepared CPU program (:class:`tensorlayout.backends.cpu.CpuProgram`), made on
        first use."""
        with self._lock:
            if self._cpu is None:
                from ..backends.cpu import CpuProgram
                from ..schedule import schedule_cpu

                self._cpu = CpuProgram(schedule_cpu(self.graph))
            return self._cpu

    @property
    def steps(self):
        """The CPU program's steps, one per node: node, kernel, shapes, ``info`` (the
        convolution algorithm and tile, a folded BatchNormalization)."""
        return self.cpu().steps

    def feeds(self, args, kwargs) -> dict:
        """The checked ``{input name: array}`` of a call's ``args`` (one dict, or the inputs in
        order) or ``kwargs`` (the inputs by name), as :meth:`run` takes them."""
        names = list(self.inputs)
        unknown = [k for k in kwargs if k not in self.inputs]
        if unknown:
            raise ModelError(f"run got the keyword {unknown[0]!r}, which is neither an option "
                             "(runtime, threads, profile) nor an input of the model "
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
            want = self.graph.input_dtypes[name]
            if x.dtype != want:
                raise ModelError(f"input {name!r} has dtype {x.dtype}: the model takes {want}")
            if tuple(x.shape) != shape:
                raise ModelError(f"input {name!r} has shape {tuple(x.shape)}: the model was loaded "
                                 f"for {shape} (load it with input_shapes to change it)")
            out[name] = x
        return out

    def run(self, *args, runtime="cpu", threads=None, profile=False, **inputs):
        """Run the model on inputs of the loaded shapes; the output array (a list when the model
        has several outputs).  Inputs: in order, one dict, or by name as keywords.
        ``runtime``: "cpu" (default), "opencl" (a session on the default OpenCL device,
        prepared on first use) or "npu" (Sophgo's simulator).  ``threads`` caps the CPU
        runtime's threads; ``profile`` records seconds per layer in :attr:`last_profile`.

        >>> import numpy as np
        >>> from tensorlayout.model import zoo
        >>> m = load(zoo.tiny_onnx())
        >>> m.run(np.zeros((1, 3, 16, 16), np.float32)).shape
        (1, 10)
        >>> m.run(np.zeros((1, 3, 16, 16), np.float32), runtme="opencl")
        Traceback (most recent call last):
        ...
        tensorlayout.errors.ModelError: run got the keyword 'runtme', which is neither an option (runtime, threads, profile) nor an input of the model ('x')
        """
        if runtime not in RUNTIMES:
            raise ModelError(f"runtime = {runtime!r} is not allowed: it must be one of "
                             f"{', '.join(RUNTIMES)}")
        feeds = self.feeds(args, inputs)
        if runtime == "cpu":
            outs, prof = self.cpu().run(feeds, threads, profile)
            self.last_profile = prof
        else:
            if threads is not None:
                raise ModelError(f"threads = {threads!r} applies to the cpu runtime only "
                                 f"(runtime = {runtime!r})")
            outs = self._device_run(runtime, feeds, profile)
        return outs[0] if len(outs) == 1 else outs

    def _device_run(self, runtime, feeds, profile):
        host = self.graph.host_only()
        if runtime == "npu":
            # the NPU runtime runs the ops it has no instruction for on the host: only its
            # own ops must take the forms its instructions do
            from ..npu.network import _NPU_OPS

            host = [(n, why) for n, why in host if n.op in _NPU_OPS or n.op == "Gemm"]
        if host:
            node, why = host[0]
            raise ModelError(f"node {node.name!r} ({node.op}): {why}; the {runtime} runtime "
                             "does not run it (runtime='cpu' does)")
        with self._lock:
            key = "_" + runtime
            sess = getattr(self, key, None)
            if sess is None:
                if runtime == "opencl":
                    from ..opencl.network import OpenCLSession

                    sess = OpenCLSession(self)
                else:
                    from ..npu.network import run_onnx

                    sess = run_onnx
                setattr(self, key, sess)
        if runtime == "npu":
            if len(feeds) != 1:
                names = list(feeds)
                raise ModelError(f"input {names[1]!r}: the npu runtime runs one-input models, "
                                 f"and this one takes {len(names)} "
                                 f"({', '.join(repr(n) for n in names)}); runtime='cpu' runs it")
            out, _ = sess(self, *feeds.values())
            self.last_profile = None
        else:
            out = sess.run(feeds, profile=profile)
            self.last_profile = sess.last_profile if profile else None
        return out if isinstance(out, list) else [out]
