"""Other CPU inference runtimes as benchmark peers: one 3x3 convolution each, weights given.

Used by ``bench_conv.py``; :func:`ort_options` by ``bench_model.py`` and
``bench_ort_spin.py``.  Each peer is an optional import: :func:`load` returns the
module, or ``None`` and a one-line reason.  A peer object is built once per layer (weights
loaded and transformed by the runtime, untimed); ``peer()`` runs one inference and returns
the runtime's own output object; ``peer.output(r)`` turns that into an NCHW float32 array
(for the error check, outside the timed call).

* ncnn (pip ``ncnn``): a two-layer net, ``Input`` + ``Convolution``, written at run time
  as a .param / .bin pair and loaded with ``Net.load_param`` / ``Net.load_model``.  The
  .bin holds the weights as raw float32 (a zero 4-byte tag, then OIHW) and the bias.
  Options: Winograd on, fp32 storage and arithmetic (fp16 / bf16 / int8 off, no Vulkan),
  light mode, ``num_threads = T``.  One call = new extractor, input, extract (which
  returns the output unpacked, NCHW).
* MNN (pip ``MNN``): a one-layer .mnn built at run time: MNN's JSON form of a net
  (Input NCHW -> ConvertTensor to NC4HW4 -> Convolution with the weights and bias inside
  the op -> ConvertTensor to NCHW, which is what MNN's converter makes of a one-conv ONNX
  model) turned into a .mnn by MNN's own converter, then loaded as a static module
  (``MNN.nn.load_module_from_file``, shapes fixed) on a CPU runtime manager with
  precision "high" and ``numThread = T``.  One call = ``module.forward(x)``.  The
  weights go into the JSON as a marker and zeros and are then written over the .mnn's
  weight vector (printing millions of floats as text costs seconds); the full JSON is
  the fallback.

  Why not ``MNN.expr.conv2d``: it makes a convolution whose weights are graph inputs, which
  MNN's CPU backend runs by a generic multi-input path (no Winograd), not the static
  convolution a converted model gets.  Why not ``MNN.tools.mnnconvert``: that Python
  wrapper imports a telemetry module that runs ``pip install aliyun-log-python-sdk`` into
  whatever ``pip`` is on PATH and contacts a remote log service; the converter itself is
  the C extension ``_tools``, called here directly.  ``rearrange=True`` is not used:
  it builds the convolution for a 2x2 placeholder output, so MNN's Winograd tile choice
  (made from the output size) would be the one for 2x2.

  Accuracy: on large outputs MNN's CPU Winograd picks F(6,3) built with interpolation
  points 0, +-1, +-2, +-3 (its WinogradGenerater with interp = 1), whose float32 error is
  1.5e-4 to 3e-4 on these layers, above the benchmark's 1e-4 check; tensorlayout's own
  F(6,3) given the same points has the same error, so this is MNN's choice of points, not
  a wrongly built layer.  ``precision="high"`` does not change it on x86.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time

import numpy as np


@contextlib.contextmanager
def quiet_stdout():
    """Silence file descriptor 1 (C-level printf of MNN: "The device supports", progress)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def load(name: str):
    """(module, version, None) or (None, None, reason) for 'ncnn' or 'MNN'."""
    try:
        if name == "ncnn":
            import ncnn

            return ncnn, getattr(ncnn, "__version__", "?"), None
        if name == "MNN":
            with quiet_stdout():
                import MNN
                import MNN.expr  # noqa: F401
                import MNN.nn  # noqa: F401
                try:
                    import _tools  # noqa: F401  (MNN's converter, a C extension)
                except ImportError:
                    return None, None, "MNN is installed but its converter (_tools) is not"
            return MNN, MNN.version(), None
    except ImportError as e:
        return None, None, f"{name} not installed ({e}); pip install {name}"
    raise ValueError(name)


# ----------------------------------------------------------------------------------- ncnn

NCNN_FP32_OFF = ("use_fp16_storage", "use_fp16_arithmetic", "use_fp16_packed",
                 "use_bf16_storage", "use_bf16_packed", "use_int8_inference",
                 "use_int8_storage", "use_int8_arithmetic", "use_int8_packed",
                 "use_vulkan_compute")


class NcnnConv:
    """One ncnn Convolution layer (3x3, stride 1, padding p, bias) on an NCHW batch-1 input."""

    def __init__(self, ncnn, x, w, b, padding, threads):
        _, C, H, W = x.shape
        K, C2, KH, KW = w.shape
        assert x.shape[0] == 1 and C2 == C
        net = ncnn.Net()
        opt = net.opt
        opt.lightmode = True
        opt.num_threads = threads
        opt.use_winograd_convolution = True
        for k in NCNN_FP32_OFF:
            if hasattr(opt, k):
                setattr(opt, k, False)
        net.opt = opt
        p = padding
        with tempfile.TemporaryDirectory(prefix="bench_ncnn_") as d:
            param, binf = os.path.join(d, "conv.param"), os.path.join(d, "conv.bin")
            with open(param, "w") as f:
                # magic, layer and blob counts, then: type name n_in n_out inputs outputs k=v...
                # Input: 0=w 1=h 2=c.  Convolution: 0=num_output 1/11=kernel w/h 2/12=dilation
                # 3/13=stride 4/14/15/16=pad left/top/right/bottom 5=bias 6=weight count.
                f.write("7767517\n2 2\n")
                f.write(f"Input data 0 1 data 0={W} 1={H} 2={C}\n")
                f.write(f"Convolution conv 1 1 data out 0={K} 1={KW} 11={KH} 2=1 12=1 3=1 13=1 "
                        f"4={p} 14={p} 15={p} 16={p} 5=1 6={w.size}\n")
            with open(binf, "wb") as f:
                f.write(np.zeros(1, np.uint32).tobytes())   # tag 0: raw float32 weights follow
                f.write(np.ascontiguousarray(w, np.float32).tobytes())
                f.write(np.ascontiguousarray(b, np.float32).tobytes())
            if net.load_param(param) != 0 or net.load_model(binf) != 0:
                raise RuntimeError("ncnn could not load the generated .param/.bin")
        self.net = net
        self._x = np.ascontiguousarray(x[0], np.float32)   # the Mat may share this memory
        self.mat = ncnn.Mat(self._x)
        self.out_shape = (1, K, H + 2 * p - KH + 1, W + 2 * p - KW + 1)

    def options(self) -> dict:
        """The options as read back from the loaded net."""
        o = self.net.opt
        keys = ("num_threads", "lightmode", "use_winograd_convolution",
                "use_winograd23_convolution", "use_winograd43_convolution",
                "use_winograd63_convolution", "use_sgemm_convolution", "use_packing_layout",
                "openmp_blocktime") + NCNN_FP32_OFF
        return {k: getattr(o, k) for k in keys if hasattr(o, k)}

    def __call__(self):
        ex = self.net.create_extractor()
        ex.input("data", self.mat)
        ret, out = ex.extract("out")
        if ret != 0:
            raise RuntimeError(f"ncnn extract returned {ret}")
        return out

    def output(self, r) -> np.ndarray:
        return np.array(r, dtype=np.float32).reshape(self.out_shape)


# ------------------------------------------------------------------------------------ MNN

_MARK = np.array([0.5, -0.25, 3.0, -7.0, 0.125, 11.0, -13.0, 0.0625], np.float32)


def _mnn_json_text(C, H, W, w, b, padding, placeholder: bool) -> str:
    """The net as MNN's JSON.  With ``placeholder`` the weights are a marker and zeros
    (cheap to print and parse), to be overwritten in the .mnn by :func:`_patch_weights`;
    otherwise every weight is printed (float64 repr of each float32: exact, but about
    3 s per million weights)."""
    doc = _mnn_json(C, H, W, w, b, padding)
    if not placeholder:
        doc["oplists"][2]["main"]["weight"] = np.asarray(w, np.float32).ravel().tolist()
        return json.dumps(doc)        # dumps: the C encoder (dump streams in Python)
    doc["oplists"][2]["main"]["weight"] = "@WEIGHTS@"
    text = ("[" + ",".join(repr(float(v)) for v in _MARK) + ","
            + ",".join(["0"] * (w.size - _MARK.size)) + "]")
    return json.dumps(doc).replace('"@WEIGHTS@"', text, 1)


def _patch_weights(model: str, w) -> bool:
    """Overwrite the placeholder weights in the .mnn with ``w`` (float32, OIHW order).
    A flatbuffers vector of floats is a uint32 count followed by the little-endian values;
    the marker must occur exactly once, right after a count equal to the weight count."""
    with open(model, "rb") as f:
        data = bytearray(f.read())
    mark = _MARK.astype("<f4").tobytes()
    at = data.find(mark)
    if at < 4 or data.find(mark, at + 1) != -1:
        return False
    n = w.size
    if int.from_bytes(data[at - 4:at], "little") != n or at + 4 * n > len(data):
        return False
    if any(data[at + len(mark):at + 4 * n]):
        return False
    data[at:at + 4 * n] = np.ascontiguousarray(w, "<f4").tobytes()
    with open(model, "wb") as f:
        f.write(data)
    return True


def _mnn_json(C, H, W, w, b, padding):
    K, _, KH, KW = w.shape

    def op(name, typ, ins, outs, main_type, main):
        d = {"name": name, "type": typ, "outputIndexes": outs, "main_type": main_type,
             "main": main}
        if ins:
            d["inputIndexes"] = ins
        return d

    common = {"padX": padding, "padY": padding, "kernelX": KW, "kernelY": KH,
              "strideX": 1, "strideY": 1, "dilateX": 1, "dilateY": 1, "padMode": "CAFFE",
              "group": 1, "outputCount": K, "inputCount": C, "relu": False, "relu6": False}
    # float32 values printed as float64 reprs: exact, parsed back to the same float32
    conv = {"common": common, "weight": [], "bias": np.asarray(b, np.float32).tolist()}
    return {
        "oplists": [
            op("x", "Input", [], [0], "Input",
               {"dims": [1, C, H, W], "dtype": "DT_FLOAT", "dformat": "NCHW"}),
            op("x_c4", "ConvertTensor", [0], [1], "TensorConvertInfo",
               {"source": "NCHW", "dest": "NC4HW4"}),
            op("conv", "Convolution", [1], [2], "Convolution2D", conv),
            op("y", "ConvertTensor", [2], [3], "TensorConvertInfo",
               {"source": "NC4HW4", "dest": "NCHW"}),
        ],
        "tensorName": ["x", "x_c4", "conv", "y"],
        "sourceType": "ONNX", "preferForwardType": "CPU", "usage": "INFERENCE",
    }


class MnnConv:
    """One MNN Convolution op (weights in the op) as a static module, NCHW in and out."""

    def __init__(self, MNN, x, w, b, padding, threads):
        import _tools

        F, nn = MNN.expr, MNN.nn
        _, C, H, W = x.shape
        K, _, KH, KW = w.shape
        self.config = {"backend": "CPU", "precision": "high", "numThread": int(threads)}
        with tempfile.TemporaryDirectory(prefix="bench_mnn_") as d:
            js, model = os.path.join(d, "conv.json"), os.path.join(d, "conv.mnn")
            self.weights_via = None
            for placeholder in (True, False):
                with open(js, "w") as f:
                    f.write(_mnn_json_text(C, H, W, w, b, padding, placeholder))
                with quiet_stdout():
                    _tools.mnnconvert(["mnnconvert", "-f", "JSON", "--modelFile", js,
                                       "--MNNModel", model, "--bizCode", "bench"])
                if not os.path.exists(model):
                    raise RuntimeError("MNN's converter did not write the .mnn "
                                       "(see its messages)")
                if not placeholder:
                    self.weights_via = "JSON text"
                elif _patch_weights(model, w):
                    self.weights_via = "written into the .mnn's weight vector"
                else:
                    os.remove(model)
                    continue
                break
            with quiet_stdout():
                self.rt = nn.create_runtime_manager((self.config,))
                self.module = nn.load_module_from_file(
                    model, ["x"], ["y"], runtime_manager=self.rt, dynamic=False,
                    shape_mutable=False, rearrange=False,
                    backend=F.Backend.CPU, precision_mode=F.PrecisionMode.High,
                    thread_num=int(threads))
        if self.module is None:
            raise RuntimeError("MNN could not load the generated .mnn")
        self.x = F.const(np.ascontiguousarray(x, np.float32), list(x.shape), F.NCHW)
        self.out_shape = (1, K, H + 2 * padding - KH + 1, W + 2 * padding - KW + 1)

    def options(self) -> dict:
        return dict(self.config, module="static (shape_mutable=False, rearrange=False)",
                    model="Input NCHW -> NC4HW4 -> Convolution (weights in op) -> NCHW",
                    weights=self.weights_via)

    def __call__(self):
        return self.module.forward(self.x)

    def output(self, r) -> np.ndarray:
        return np.array(r.read(), dtype=np.float32).reshape(self.out_shape)


PEERS = {"ncnn": NcnnConv, "MNN": MnnConv}


# ----------------------------------------------------------------------- onnxruntime

#: How onnxruntime's worker threads wait between its calls (``--ort-spin``): "on" spinning
#: after each call (its default), "off" never spinning (``session.intra_op.allow_spinning``
#: 0), "stop" spinning within a call and stopping when it returns
#: (``session.force_spinning_stop`` 1).
ORT_SPIN_CONFIG = {"on": {}, "off": {"session.intra_op.allow_spinning": "0"},
                   "stop": {"session.force_spinning_stop": "1"}}


def ort_options(ort, threads: int, spin: str = "on"):
    """onnxruntime's session options for a whole-network benchmark: ``threads`` intra-op
    threads, one inter-op thread, all graph optimisations (its default), its workers
    waiting as ``spin`` says (:data:`ORT_SPIN_CONFIG`)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    for key, value in ORT_SPIN_CONFIG[spin].items():
        opts.add_session_config_entry(key, value)
    return opts


# ----------------------------------------------------------------------- thread check

def _task_cpu_ticks() -> dict:
    """CPU time (clock ticks, user + system) of every thread of this process."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        out[t] = int(fields[11]) + int(fields[12])
    return out


def busy_threads(fn, seconds=0.3, settle=0.3):
    """How many threads of this process did work while ``fn`` ran back to back for
    ``seconds``: a thread counts when it used at least 30% of the busiest thread's CPU time.
    Waits ``settle`` seconds first so that other pools' spinning workers park.  Returns
    None where /proc is not available (not Linux)."""
    if not os.path.isdir("/proc/self/task"):
        return None
    time.sleep(settle)
    a = _task_cpu_ticks()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()
    b = _task_cpu_ticks()
    d = sorted((b[t] - a.get(t, 0) for t in b), reverse=True)
    if not d or d[0] <= 0:
        return None
    return sum(1 for v in d if v >= 0.3 * d[0])
