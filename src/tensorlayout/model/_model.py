"""The model a user holds: a loaded graph, run on any of the three runtimes.

:func:`load` reads the graph once (:func:`tensorlayout.graph.load_graph`); nothing is
prepared for a runtime until it is asked for: the CPU kernels (one convolution plan per
layer) on the first CPU run, an OpenCL session or an NPU program on the first run there.
"""

from __future__ import annotations

import threading

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
        self.last_report = None
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
        return self.graph.feeds(args, kwargs)

    def run(self, *args, runtime="cpu", threads=None, profile=False, **inputs):
        """Run the model on inputs of the loaded shapes; the output array (a list when the model
        has several outputs).  Inputs: in order, one dict, or by name as keywords.
        ``runtime``: "cpu" (default), "opencl" (a session on the default OpenCL device,
        prepared on first use) or "npu" (Sophgo's simulator).  ``threads``: the CPU runtime's
        threads (default: the CPUs the process may use, its affinity and cgroup quota);
        ``profile`` records seconds per layer in :attr:`last_profile`.

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
        with self._lock:
            key = "_" + runtime
            sess = getattr(self, key, None)
            if sess is None:
                if runtime == "opencl":
                    from ..backends.opencl import OpenCLSession

                    sess = OpenCLSession(self.graph)
                else:
                    from ..backends.npu import NpuProgram

                    sess = NpuProgram(self.graph)
                setattr(self, key, sess)
        if runtime == "npu":
            out, self.last_report = sess.run(feeds)
            self.last_profile = None
        else:
            out = sess.run(feeds, profile=profile)
            self.last_profile = sess.last_profile if profile else None
        return out if isinstance(out, list) else [out]
