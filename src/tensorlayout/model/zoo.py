"""Networks built at run time, with random weights (nothing is downloaded).

* :func:`tiny_onnx` — a small conv net written with ``onnx.helper`` (needs only ``onnx``);
* :func:`torch_net` — ResNet-18, MobileNetV2, VGG-11, SqueezeNet 1.1, ShuffleNetV2 x1.0,
  DenseNet-121, ResNet-50, MobileNetV3-Small and EfficientNet-B0 in plain PyTorch, following the torchvision architectures layer by layer (torchvision
  itself is not needed);
* :func:`export` — one of them as ONNX bytes, through ``torch.onnx.export``.

>>> NETS[:6]
('resnet18', 'mobilenet_v2', 'vgg11', 'squeezenet1_1', 'shufflenet_v2', 'densenet121')
>>> import onnx; [n.op_type for n in onnx.load_from_string(tiny_onnx()).graph.node][:4]
['Conv', 'BatchNormalization', 'Relu', 'MaxPool']
"""

from __future__ import annotations

import io

import numpy as np

from ..errors import LayoutError, check_choice, check_nonneg_int, check_positive_int

__all__ = ["NETS", "MIN_SIZE", "MAX_SIZE", "MAX_CLASSES", "OPSETS", "tiny_onnx", "torch_net", "export"]

NETS = ("resnet18", "mobilenet_v2", "vgg11", "squeezenet1_1", "shufflenet_v2", "densenet121",
        "resnet50", "mobilenet_v3_small", "efficientnet_b0")
#: Smallest input side each network runs on (five 2x2 max pools in VGG-11 and in DenseNet-121's
#: stem and transitions; SqueezeNet's unpadded first convolution and three ceil-mode pools);
#: the others run on any side.
MIN_SIZE = {"vgg11": 32, "squeezenet1_1": 17, "densenet121": 32}
#: Largest input side and number of classes the zoo builds (its networks are for tests and demos).
MAX_SIZE, MAX_CLASSES = 1024, 100_000
#: Opsets :func:`export` writes: those tensorlayout's loader reads.
OPSETS = (11, 21)


def _check(classes, seed, name=None, size=None):
    """The zoo's arguments, checked before anything is built."""
    check_positive_int("classes", classes)
    if classes > MAX_CLASSES:
        raise LayoutError(f"classes = {classes} is not allowed: the zoo builds at most {MAX_CLASSES}")
    check_nonneg_int("seed", seed)
    if seed >= 1 << 63:
        raise LayoutError(f"seed = {seed} is not allowed: it must be below 2**63")
    if name is not None:
        check_choice("name", name, NETS)
    if size is not None:
        check_positive_int("size", size)
        low = MIN_SIZE.get(name, 1)
        if not low <= size <= MAX_SIZE:
            raise LayoutError(f"size = {size} is not allowed: {name} takes input sides from {low} to {MAX_SIZE}")


def tiny_onnx(seed: int = 0, classes: int = 10) -> bytes:
    """A small classifier as ONNX bytes: Conv-BN-ReLU, MaxPool, two 3x3 convs (the second on
    16 channels, where Winograd pays), GlobalAveragePool and Gemm, input (1, 3, 16, 16).
    ``seed`` is a non-negative integer, ``classes`` a positive one (at most :data:`MAX_CLASSES`)."""
    _check(classes, seed)
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def w(*shape, scale=None):
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return (rng.standard_normal(shape) * (scale or np.sqrt(2.0 / fan))).astype(np.float32)

    inits = {
        "c1.w": w(16, 3, 3, 3), "bn.g": (1 + 0.1 * rng.standard_normal(16)).astype(np.float32),
        "bn.b": w(16, scale=0.1), "bn.m": w(16, scale=0.1),
        "bn.v": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "c2.w": w(16, 16, 3, 3), "c2.b": w(16, scale=0.1),
        "c3.w": w(32, 16, 3, 3), "c3.b": w(32, scale=0.1),
        "fc.w": w(classes, 32), "fc.b": w(classes, scale=0.1),
    }
    nodes = [
        helper.make_node("Conv", ["x", "c1.w"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["a", "bn.g", "bn.b", "bn.m", "bn.v"], ["b"], name="bn1"),
        helper.make_node("Relu", ["b"], ["c"], name="relu1"),
        helper.make_node("MaxPool", ["c"], ["d"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["d", "c2.w", "c2.b"], ["e"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["e"], ["f"], name="relu2"),
        helper.make_node("Conv", ["f", "c3.w", "c3.b"], ["g"], name="conv3", pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["g"], ["h"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["h"], ["i"], name="gap"),
        helper.make_node("Flatten", ["i"], ["j"], name="flatten"),
        helper.make_node("Gemm", ["j", "fc.w", "fc.b"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="tensorlayout")
    model.ir_version = 8
    return model.SerializeToString()


def _torch():
    try:
        import torch
    except ImportError:
        from .ops import ModelError

        raise ModelError("the zoo's networks need PyTorch: pip install 'tensorlayout[torch]'") from None
    return torch


def torch_net(name: str, classes: int = 1000, seed: int = 0, size: int = 224):
    """One of :data:`NETS` as a ``torch.nn.Module`` in eval mode, with random weights and
    random BatchNorm statistics (so that folding them is tested).  ``size`` is the input
    side; only VGG-11 depends on it (its pooled grid, 7 x 7 at 224, is size / 32), and the
    network must run on it (:data:`MIN_SIZE`, at most :data:`MAX_SIZE`)."""
    _check(classes, seed, name, size)
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(seed)

    def bn(c):
        b = nn.BatchNorm2d(c)
        with torch.no_grad():
            b.weight.uniform_(0.5, 1.5)
            b.bias.uniform_(-0.2, 0.2)
            b.running_mean.uniform_(-0.2, 0.2)
            b.running_var.uniform_(0.5, 1.5)
        return b

    def conv_bn(cin, cout, k, s=1, groups=1, act=True, relu6=False):
        layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False), bn(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True) if relu6 else nn.ReLU(inplace=True))
        return nn.Sequential(*layers)

    def divisible(v, d=8):
        """torchvision's channel rounding: to a multiple of d, never below 90% of v."""
        out = max(d, int(v + d / 2) // d * d)
        return out + d if out < 0.9 * v else out

    class SqueezeExcite(nn.Module):
        """Global average, a 1x1 squeeze with ``act``, a 1x1 expand with ``gate``, the scale."""

        def __init__(self, c, squeezed, act, gate):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, squeezed, 1), nn.Conv2d(squeezed, c, 1)
            self.act, self.gate = act, gate

        def forward(self, x):
            s = self.act(self.fc1(torch.nn.functional.adaptive_avg_pool2d(x, 1)))
            return x * self.gate(self.fc2(s))

    class MBConv(nn.Module):
        """MobileNetV3's and EfficientNet's inverted residual: expand 1x1, depthwise kxk,
        squeeze-excite, project 1x1 (no activation), the input added when shapes allow."""

        def __init__(self, cin, exp, cout, k, s, act, se):
            super().__init__()
            body = []
            if exp != cin:
                body += [nn.Conv2d(cin, exp, 1, bias=False), bn(exp), act()]
            body += [nn.Conv2d(exp, exp, k, s, (k - 1) // 2, groups=exp, bias=False), bn(exp), act()]
            if se:
                body.append(se(exp))
            body += [nn.Conv2d(exp, cout, 1, bias=False), bn(cout)]
            self.body = nn.Sequential(*body)
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    if name == "resnet18":
        class Basic(nn.Module):
            def __init__(self, cin, cout, s):
                super().__init__()
                self.body = nn.Sequential(conv_bn(cin, cout, 3, s), conv_bn(cout, cout, 3, act=False))
                self.down = (conv_bn(cin, cout, 1, s, act=False) if s != 1 or cin != cout else None)

            def forward(self, x):
                idt = x if self.down is None else self.down(x)
                return torch.relu(self.body(x) + idt)

        layers, cin = [], 64
        for cout, s in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Basic(cin, cout, s), Basic(cout, cout, 1)]
            cin = cout
        net = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), *layers,
                            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))
    elif name == "mobilenet_v2":
        class Inverted(nn.Module):
            def __init__(self, cin, cout, s, t):
                super().__init__()
                hid = cin * t
                body = [] if t == 1 else [conv_bn(cin, hid, 1, relu6=True)]
                body += [conv_bn(hid, hid, 3, s, groups=hid, relu6=True), conv_bn(hid, cout, 1, act=False)]
                self.body = nn.Sequential(*body)
                self.res = s == 1 and cin == cout

            def forward(self, x):
                return x + self.body(x) if self.res else self.body(x)

        layers, cin = [conv_bn(3, 32, 3, 2, relu6=True)], 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n):
                layers.append(Inverted(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, 1280, 1, relu6=True))
        net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                            nn.Linear(1280, classes))
    elif name == "vgg11":
        layers, cin = [], 3
        for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
                cin = v
        g = max(1, size // 32)
        net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(g), nn.Flatten(),
                            nn.Linear(512 * g * g, 4096), nn.ReLU(True), nn.Dropout(),
                            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(),
                            nn.Linear(4096, classes))
    elif name == "squeezenet1_1":
        class Fire(nn.Module):
            def __init__(self, cin, sq, e1, e3):
                super().__init__()
                self.sq = nn.Sequential(nn.Conv2d(cin, sq, 1), nn.ReLU(inplace=True))
                self.e1 = nn.Sequential(nn.Conv2d(sq, e1, 1), nn.ReLU(inplace=True))
                self.e3 = nn.Sequential(nn.Conv2d(sq, e3, 3, padding=1), nn.ReLU(inplace=True))

            def forward(self, x):
                x = self.sq(x)
                return torch.cat([self.e1(x), self.e3(x)], 1)

        net = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256),
            Fire(512, 64, 256, 256), nn.Dropout(0.5), nn.Conv2d(512, classes, 1),
            nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    elif name == "resnet50":
        class Bottleneck(nn.Module):
            def __init__(self, cin, width, s):
                super().__init__()
                cout = 4 * width
                self.body = nn.Sequential(conv_bn(cin, width, 1), conv_bn(width, width, 3, s),
                                          conv_bn(width, cout, 1, act=False))
                self.down = (conv_bn(cin, cout, 1, s, act=False) if s != 1 or cin != cout else None)

            def forward(self, x):
                idt = x if self.down is None else self.down(x)
                return torch.relu(self.body(x) + idt)

        layers, cin = [], 64
        for width, n, s in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                layers.append(Bottleneck(cin, width, s if i == 0 else 1))
                cin = 4 * width
        net = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), *layers,
                            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))
    elif name == "mobilenet_v3_small":
        def se(c):
            return SqueezeExcite(c, divisible(c // 4), nn.ReLU(), nn.Hardsigmoid())
        cfg = ((3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
               (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
               (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
               (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1))
        layers, cin = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), bn(16), nn.Hardswish()], 16
        for k, exp, cout, use_se, act, s in cfg:
            layers.append(MBConv(cin, exp, cout, k, s, nn.ReLU if act == "RE" else nn.Hardswish,
                                 se if use_se else None))
            cin = cout
        layers += [nn.Conv2d(cin, 576, 1, bias=False), bn(576), nn.Hardswish()]
        net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(576, 1024),
                            nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, classes))
    elif name == "efficientnet_b0":
        layers, cin = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), bn(32), nn.SiLU()], 32
        for t, k, s, cout, n in ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                                 (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
            for i in range(n):
                squeezed = max(1, cin // 4)
                layers.append(MBConv(cin, cin * t, cout, k, s if i == 0 else 1, nn.SiLU,
                                     lambda c, q=squeezed: SqueezeExcite(c, q, nn.SiLU(), nn.Sigmoid())))
                cin = cout
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), bn(1280), nn.SiLU()]
        net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                            nn.Linear(1280, classes))
    elif name == "densenet121":
        # dense blocks of BN-ReLU-conv 1x1 (4 x 32 channels) and BN-ReLU-conv 3x3 (32): each
        # layer's input is the concatenation of everything before it in the block, so its
        # BatchNormalization follows a Concat and folds into nothing
        def dense_layer(cin):
            return nn.Sequential(bn(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, 128, 1, bias=False),
                                 bn(128), nn.ReLU(inplace=True),
                                 nn.Conv2d(128, 32, 3, padding=1, bias=False))

        class Block(nn.Module):
            def __init__(self, cin, n):
                super().__init__()
                self.layers = nn.ModuleList(dense_layer(cin + 32 * i) for i in range(n))

            def forward(self, x):
                feats = [x]
                for layer in self.layers:
                    feats.append(layer(torch.cat(feats, 1)))
                return torch.cat(feats, 1)

        layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), bn(64), nn.ReLU(inplace=True),
                       nn.MaxPool2d(3, 2, 1)], 64
        for i, n in enumerate((6, 12, 24, 16)):
            layers.append(Block(cin, n))
            cin += 32 * n
            if i < 3:
                layers += [bn(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, cin // 2, 1, bias=False),
                           nn.AvgPool2d(2, 2)]
                cin //= 2
        net = nn.Sequential(*layers, bn(cin), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(cin, classes))
    else:  # shufflenet_v2 x1.0
        def shuffle(x, groups=2):
            n, c, h, w = x.shape
            return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)

        class Unit(nn.Module):
            def __init__(self, cin, cout, s):
                super().__init__()
                half = cout // 2
                self.s = s
                if s > 1:
                    self.left = nn.Sequential(conv_bn(cin, cin, 3, s, groups=cin, act=False),
                                              conv_bn(cin, half, 1))
                bin_ = cin if s > 1 else half
                self.right = nn.Sequential(conv_bn(bin_, half, 1), conv_bn(half, half, 3, s, groups=half,
                                                                          act=False),
                                           conv_bn(half, half, 1))

            def forward(self, x):
                if self.s == 1:
                    a, b = x.chunk(2, dim=1)
                    out = torch.cat((a, self.right(b)), 1)
                else:
                    out = torch.cat((self.left(x), self.right(x)), 1)
                return shuffle(out)

        layers, cin = [conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)], 24
        for cout, n in ((116, 4), (232, 8), (464, 4)):
            for i in range(n):
                layers.append(Unit(cin, cout, 2 if i == 0 else 1))
                cin = cout
        layers.append(conv_bn(cin, 1024, 1))

        class Head(nn.Module):
            def forward(self, x):
                return x.mean([2, 3])

        net = nn.Sequential(*layers, Head(), nn.Linear(1024, classes))
    return net.eval()


def export(name: str, size: int = 224, classes: int = 1000, seed: int = 0, opset: int = 17,
           fold: bool = True):
    """``(onnx_bytes, torch_module)`` of one of :data:`NETS` for a (1, 3, size, size) input.

    ``fold=False`` asks the exporter not to fold constants: BatchNormalization nodes and
    Shape / Gather / Concat chains stay in the graph, for the loader to fold.

    >>> export("vgg11", size=16)
    Traceback (most recent call last):
    ...
    tensorlayout.errors.LayoutError: size = 16 is not allowed: vgg11 takes input sides from 32 to 1024
    """
    _check(classes, seed, name, size)
    check_positive_int("opset", opset)
    if not OPSETS[0] <= opset <= OPSETS[1]:
        raise LayoutError(f"opset = {opset} is not allowed: it must be from {OPSETS[0]} to {OPSETS[1]}, "
                          "the opsets tensorlayout reads")
    torch = _torch()
    net = torch_net(name, classes, seed, size)
    buf = io.BytesIO()
    import warnings

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(net, torch.randn(1, 3, size, size), buf, dynamo=False,
                              opset_version=opset, do_constant_folding=fold,
                              input_names=["input"], output_names=["logits"])
        except Exception as exc:  # noqa: BLE001 - the exporter's own errors, whatever their type
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise LayoutError(f"opset = {opset} is not allowed for {name}: torch.onnx.export "
                              f"refused it ({first})") from None
    return buf.getvalue(), net
