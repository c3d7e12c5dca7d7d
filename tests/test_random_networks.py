"""Random convolutional networks against onnxruntime.

Each seed draws a network of two to eight layers from the ops a vision network is built
of, with the parameters a real one takes and the awkward ones it may: convolutions of any
window, stride, dilation, symmetric or uneven padding and groups (depthwise too, with a
multiplier of 2), channel counts that are and are not multiples of the 16-channel blocks,
batch 1 or 2, maps of 5 to 29 rows and columns; max and average pooling in floor and ceil
mode; BatchNormalization; squeeze-and-excite blocks; residual Adds, Muls and Subs of any
earlier tensor of the same shape; Concat and Split along the channels; a channel shuffle
(Reshape, Transpose, Reshape); Resize; ConvTranspose; ReduceMean; Pad; a per-channel
constant; every activation the schedule fuses; sometimes a classifier head, sometimes a
second graph output taken from the middle.  The CPU runtime runs each twice on 1, 2 and 3
threads (the bound run and the scheduling of the blocked layout), and must give
onnxruntime's result (relative L2 at most 1e-4, the same shape) or refuse the network by
a ModelError.  The first networks also run with the kernels' NumPy twins (as while numba
compiles), on the OpenCL runtime, where PoCL is present,
and on Sophgo's BM1684 simulator (relative L2 at most 1e-3), seed 77 among them: a Concat
written in place inside a Concat assembled in system memory.
"""

from __future__ import annotations

import numpy as np
import pytest

from _model_util import make_model, ort_session, rel_l2
from _simulator import needs_sim

from onnx import helper  # noqa: E402  (after _model_util, which skips without onnx)

from tensorlayout.errors import ModelError
from tensorlayout.model import load

ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSwish", "HardSigmoid", "Tanh", None)
LAYERS = ("conv", "conv", "conv", "depthwise", "pool", "residual", "concat", "se", "bn",
          "resize", "shuffle", "split", "constant", "transposed", "mean", "pad")


class _Net:
    """A random network under construction: ``cur`` the tensor the next layer reads,
    ``shape`` its shape, ``made`` every tensor so far with its shape."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inits = [], {}
        self.shape = [int(rng.choice([1, 1, 2])), int(rng.choice([1, 3, 4, 8, 16, 17, 24, 32, 40])),
                      int(rng.integers(5, 30)), int(rng.integers(5, 30))]
        self.cur = "x"
        self.made = {"x": list(self.shape)}
        self.k = 0

    def name(self, prefix):
        self.k += 1
        return f"{prefix}{self.k}"

    def const(self, prefix, value):
        n = self.name(prefix)
        self.inits[n] = value
        return n

    def node(self, op, inputs, shape=None, **attrs):
        out = self.name(op.lower()[:4])
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        self.cur = out
        if shape is not None:
            self.shape = list(shape)
        return out

    def weights(self, *shape, fan=1):
        return (self.rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32)

    def activation(self):
        op = self.rng.choice(ACTIVATIONS)
        if op == "Clip":
            self.node(op, [self.cur, self.const("lo", np.array(0, np.float32)),
                           self.const("hi", np.array(6, np.float32))])
        elif op == "LeakyRelu":
            self.node(op, [self.cur], alpha=0.1)
        elif op is not None:
            self.node(str(op), [self.cur])

    # ------------------------------------------------------------------ layers
    def conv(self, depthwise=False):
        rng, (N, C, H, W) = self.rng, self.shape
        k = int(rng.choice([3, 5])) if depthwise else int(rng.choice([1, 1, 3, 3, 5, 7]))
        s, d = int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 1, 2]))
        span = d * (k - 1) + 1
        pads = ([int(rng.integers(0, k)) for _ in range(4)] if rng.random() < 0.3
                else [span // 2] * 4)
        OH, OW = (H + pads[0] + pads[2] - span) // s + 1, (W + pads[1] + pads[3] - span) // s + 1
        if OH < 1 or OW < 1:
            return
        if depthwise:
            g, O = C, C * int(rng.choice([1, 1, 2]))
        else:
            g = int(rng.choice([g for g in (1, 2, 4) if C % g == 0])) if rng.random() < 0.2 else 1
            O = max(g, int(rng.choice([4, 8, 16, 20, 32, 48, 64])) // g * g)
        ins = [self.cur, self.const("w", self.weights(O, C // g, k, k, fan=C // g * k * k))]
        if rng.random() < 0.7:
            ins.append(self.const("b", self.weights(O)))
        self.node("Conv", ins, (N, O, OH, OW), kernel_shape=[k, k], strides=[s, s],
                  dilations=[d, d], pads=pads, group=g)
        self.activation()

    def depthwise(self):
        self.conv(depthwise=True)

    def pool(self):
        rng, (N, C, H, W) = self.rng, self.shape
        op = str(rng.choice(["MaxPool", "AveragePool"]))
        k, s = int(rng.choice([2, 3])), int(rng.choice([1, 2]))
        p, ceil = int(rng.integers(0, k // 2 + 1)), int(rng.random() < 0.3)
        sides = []
        for n in (H, W):
            num = n + 2 * p - k
            out = (-(-num // s) if ceil else num // s) + 1
            if ceil and (out - 1) * s >= n + p:      # no window starts in the end padding
                out -= 1
            sides.append(out)
        if min(sides) < 1:
            return
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, ceil_mode=ceil)
        if op == "AveragePool":
            attrs["count_include_pad"] = int(rng.random() < 0.5)
        self.node(op, [self.cur], (N, C, *sides), **attrs)

    def bn(self):
        C, rng = self.shape[1], self.rng
        self.node("BatchNormalization", [
            self.cur, self.const("g", rng.uniform(0.5, 1.5, C).astype(np.float32)),
            self.const("b", self.weights(C)), self.const("m", self.weights(C)),
            self.const("v", rng.uniform(0.5, 1.5, C).astype(np.float32))])
        self.activation()

    def residual(self):
        same = [n for n, s in self.made.items() if s == self.shape and n != self.cur]
        if same:
            op = str(self.rng.choice(["Add", "Add", "Mul", "Sub"]))
            self.node(op, [self.cur, str(self.rng.choice(same))])
            self.activation()

    def concat(self):
        N, C, H, W = self.shape
        same = [n for n, s in self.made.items()
                if s[0] == N and s[2:] == [H, W] and len(s) == 4 and n != self.cur]
        if same:
            other = str(self.rng.choice(same))
            self.node("Concat", [self.cur, other], (N, C + self.made[other][1], H, W), axis=1)

    def se(self):
        C = self.shape[1]
        m = max(1, C // 4)
        x = self.cur
        self.node("GlobalAveragePool", [x])
        self.node("Conv", [self.cur, self.const("w", self.weights(m, C, 1, 1, fan=C)),
                           self.const("b", self.weights(m))], kernel_shape=[1, 1])
        self.node("Relu", [self.cur])
        self.node("Conv", [self.cur, self.const("w", self.weights(C, m, 1, 1, fan=m)),
                           self.const("b", self.weights(C))], kernel_shape=[1, 1])
        self.node(str(self.rng.choice(["Sigmoid", "HardSigmoid"])), [self.cur])
        self.node("Mul", [x, self.cur])

    def resize(self):
        N, C, H, W = self.shape
        f = int(self.rng.choice([2, 2, 3]))
        self.node("Resize", [self.cur, "", self.const("s", np.array([1, 1, f, f], np.float32))],
                  (N, C, H * f, W * f), mode=str(self.rng.choice(["nearest", "linear"])))

    def shuffle(self):
        N, C, H, W = self.shape
        if C % 2 == 0:
            self.node("Reshape", [self.cur, self.const("s", np.array([N, 2, C // 2, H, W]))])
            self.node("Transpose", [self.cur], perm=[0, 2, 1, 3, 4])
            self.node("Reshape", [self.cur, self.const("s", np.array([N, C, H, W]))], self.shape)

    def split(self):
        N, C, H, W = self.shape
        if C < 2:
            return
        c1 = int(self.rng.integers(1, C))
        a, b = self.name("sa"), self.name("sb")
        self.nodes.append(helper.make_node(
            "Split", [self.cur, self.const("s", np.array([c1, C - c1]))], [a, b], axis=1))
        self.made[b] = [N, C - c1, H, W]
        self.cur, self.shape = a, [N, c1, H, W]

    def constant(self):
        op = str(self.rng.choice(["Add", "Mul", "Sub", "Div"]))
        self.node(op, [self.cur, self.const("k", self.weights(1, self.shape[1], 1, 1))])
        self.activation()

    def transposed(self):
        rng, (N, C, H, W) = self.rng, self.shape
        k, s = int(rng.choice([2, 3, 4])), int(rng.choice([1, 2]))
        p, O = int(rng.integers(0, k // 2 + 1)), int(rng.choice([4, 8, 16]))
        OH, OW = (H - 1) * s - 2 * p + k, (W - 1) * s - 2 * p + k
        if min(OH, OW) >= 1:
            self.node("ConvTranspose", [self.cur, self.const("w", self.weights(
                C, O, k, k, fan=C * k * k))], (N, O, OH, OW), kernel_shape=[k, k],
                strides=[s, s], pads=[p] * 4)
            self.activation()

    def mean(self):
        self.node("ReduceMean", [self.cur], (*self.shape[:2], 1, 1), axes=[2, 3], keepdims=1)

    def pad(self):
        N, C, H, W = self.shape
        mode = str(self.rng.choice(["constant", "reflect", "edge"]))
        most = min(2, H - 1, W - 1) if mode == "reflect" else 2
        if most < 0:
            return
        p = [int(v) for v in self.rng.integers(0, most + 1, 4)]
        pads = np.array([0, 0, p[0], p[1], 0, 0, p[2], p[3]])
        self.node("Pad", [self.cur, self.const("p", pads)],
                  (N, C, H + p[0] + p[2], W + p[1] + p[3]), mode=mode)

    def head(self):
        C, M = self.shape[1], int(self.rng.choice([5, 10, 33]))
        self.node("GlobalAveragePool", [self.cur])
        self.node("Flatten", [self.cur])
        self.node("Gemm", [self.cur, self.const("w", self.weights(M, C, fan=C)),
                           self.const("b", self.weights(M))], (self.shape[0], M), transB=1)


def random_network(seed):
    """``(ONNX model, input)`` of seed ``seed`` (at least one layer)."""
    rng = np.random.default_rng(seed)
    net = _Net(rng)
    while len(net.nodes) == 0:
        for _ in range(int(rng.integers(2, 9))):
            getattr(net, str(rng.choice(LAYERS)))()
            net.made.setdefault(net.cur, list(net.shape))
    outputs = [net.cur]
    if rng.random() < 0.4 and len(net.shape) == 4:
        net.head()
        outputs = [net.cur]
    middle = [n for n in net.made if n not in ("x", *outputs)]
    if middle and rng.random() < 0.3:
        outputs.append(str(rng.choice(middle)))
    x = rng.standard_normal(net.made["x"]).astype(np.float32)
    return make_model(net.nodes, {"x": x}, outputs, net.inits), x


def _check(seed, runs):
    model, x = random_network(seed)
    data = model.SerializeToString()
    try:
        want = ort_session(data).run(None, {"x": x})
    except Exception:  # noqa: BLE001 - a network onnxruntime refuses (a reflect pad too wide)
        pytest.skip("onnxruntime refuses this network")
    try:
        m = load(data)
        for kw in runs:
            got = m.run(x, **kw)
            got = got if isinstance(got, list) else [got]
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.shape == w.shape, kw
                # (or within 1e-6 of it: a tensor of zeros has no relative error; the
                # simulator's tanh(0) is 1.8e-7)
                assert (rel_l2(g, w) <= (1e-4 if "threads" in kw else 1e-3)
                        or np.abs(g - w).max() <= 1e-6), kw
    except ModelError as exc:         # a clear refusal, never a wrong answer
        assert "not supported" in str(exc) or "runs on the CPU runtime only" in str(exc)


@pytest.mark.parametrize("seed", range(160))
def test_random_network_agrees_with_onnxruntime_on_the_cpu(seed):
    _check(seed, [dict(threads=t) for t in (1, 1, 2, 2, 3, 3)])


@pytest.mark.parametrize("seed", range(32))
def test_random_network_agrees_with_onnxruntime_before_the_kernels_compile(seed, monkeypatch):
    """The kernels' NumPy twins, which serve in a fresh process while numba compiles (the
    compiled kernels reported not ready), on the same networks and layouts."""
    from tensorlayout.backends import cpu_kernels

    monkeypatch.setattr(cpu_kernels, "ready", lambda: False)
    _check(seed, [dict(threads=2)])


@pytest.mark.parametrize("seed", range(32))
def test_random_network_agrees_with_onnxruntime_on_opencl(seed):
    from _model_util import opencl_context

    opencl_context()
    _check(seed, [dict(runtime="opencl")])


@needs_sim
@pytest.mark.parametrize("seed", [*range(8), 77])
def test_random_network_agrees_with_onnxruntime_on_the_npu_simulator(seed):
    _check(seed, [dict(runtime="npu")])
