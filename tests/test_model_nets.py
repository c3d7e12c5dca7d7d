"""Whole networks (torchvision architectures in plain PyTorch, random weights) against
onnxruntime, and their layout plans against the seed's per-tensor formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _model_util import ort_session, rel_l2

pytest.importorskip("torch")

from tensorlayout import image_shape  # noqa: E402
from tensorlayout.model import load, plan_model, zoo  # noqa: E402
from tensorlayout.schedule.winograd import (DIRECT_MIN_CHANNELS, DIRECT_MIN_FILL,  # noqa: E402
                                            FIRST_DIRECT_BELOW)
from tensorlayout.winograd._simd_block import direct_panel  # noqa: E402
from tensorlayout.winograd import _simd  # noqa: E402

# (net, input side, exporter folds constants?) — small inputs keep the suite fast; odd sides
# and unfolded graphs (BatchNorm, Shape/Gather/Concat chains left for the loader) included.
CASES = [("resnet18", 32, True), ("resnet18", 33, False), ("mobilenet_v2", 32, False),
         ("vgg11", 32, True), ("squeezenet1_1", 47, True), ("shufflenet_v2", 32, False)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'fold' if c[2] else 'raw'}")
def net(request):
    name, size, fold = request.param
    data, _ = zoo.export(name, size=size, classes=100, fold=fold)
    return name, size, data, load(data)


def test_agrees_with_onnxruntime(net):
    name, size, data, model = net
    x = np.random.default_rng(size).standard_normal((1, 3, size, size)).astype(np.float32)
    y = model.run(x)
    ref = ort_session(data, threads=2).run(None, {"input": x})[0]
    assert y.shape == ref.shape == (1, 100)
    assert rel_l2(y, ref) <= 1e-4
    assert int(np.argmax(y)) == int(np.argmax(ref))


def test_loader_folded_what_it_should(net):
    name, size, data, model = net
    ops = {s.node.op for s in model.steps}
    assert "BatchNormalization" not in ops           # folded into the Conv before it
    assert not ops & {"Shape", "Gather", "Constant", "Unsqueeze", "Cast"}   # folded chains
    convs = [s for s in model.steps if s.node.op == "Conv"]
    # the shifted GEMM and the direct convolution keep the engine's im2col plan for while
    # the kernels compile
    assert convs and all(s.info["algorithm"] == s.conv_plan.info.name
                         or (s.info["algorithm"] in ("shifted GEMM", "direct convolution")
                             and s.conv_plan.info.name == "im2col")
                         if s.conv_plan is not None
                         else s.info["algorithm"] in ("depthwise loops", "pointwise GEMM")
                         for s in convs)
    for s in convs:            # the backend's own loops exactly where the kernel is theirs
        p = s.node.params
        if p.depthwise:
            assert s.info["algorithm"] == "depthwise loops"
        elif p.kernel == (1, 1) and p.group == 1 and p.begin == p.end == (0, 0):
            # a strided one may take the direct convolution (no sliced copy of its input)
            assert s.info["algorithm"] == "pointwise GEMM" or (
                tuple(p.strides) != (1, 1) and s.info["algorithm"] == "direct convolution")
        if s.info["algorithm"] == "shifted GEMM":    # one group; strided only when shallow
            assert p.group == 1 and p.kernel != (1, 1) and (
                tuple(p.strides) == (1, 1) or p.in_channels * p.kernel[0] * p.kernel[1] < 256)
        if s.info["algorithm"] == "direct convolution":     # deep enough, rows filled
            mr = _simd.isa().mr
            out_h, out_w = model.graph.shapes[s.node.outputs[0]][2:]
            assert p.group == 1 and p.strides[1] in (1, 2)
            assert p.kernel != (1, 1) or tuple(p.strides) != (1, 1)
            # or a first layer's, over its NCHW input, only where it writes blocks
            assert p.in_channels >= DIRECT_MIN_CHANNELS or (
                p.in_channels < FIRST_DIRECT_BELOW and s.outputs[-1] in model.cpu().blocked)
            assert direct_panel(out_h, out_w, mr)[1] >= DIRECT_MIN_FILL
    if (name, size) == ("resnet18", 33):     # 64 channels on a 9 x 9 map
        assert any(s.info["algorithm"] == "direct convolution" for s in convs) == (
            direct_panel(9, 9, _simd.isa().mr)[1] >= DIRECT_MIN_FILL)
    if name in ("resnet18", "vgg11"):    # every 3 x 3 layer small at 32^2: none on Winograd
        assert not any(s.info["algorithm"].startswith("winograd") for s in convs)


def _q(x):
    return -(-x // 4)


def _seed_image(itype, shape, tile=None):
    """[W, H] of each image type from the seed's table (REFERENCE.md), written out here."""
    if itype == "IN_OUT_CHANNEL":
        n, c, h, w = shape                     # NCHW
        return [_q(c) * w, n * h]
    if itype == "CONV2D_FILTER":
        o, i, h, w = shape
        return [i, h * w * _q(o)]
    if itype == "DW_CONV2D_FILTER":             # MIHW, or PyTorch's (C, 1, KH, KW) with M = 1
        m, i, h, w = shape
        if i == 1:
            m, i = 1, m
        return [m * h * w, _q(i)]
    if itype == "WINOGRAD_FILTER":
        o, i, _, _ = shape
        return [_q(i), o * (tile + 2) ** 2]
    if itype == "WEIGHT_WIDTH":
        o, i, h, w = shape
        return [_q(i) * h * w, o]
    if itype == "ARGUMENT":
        return [_q(shape[0]), 1]
    raise AssertionError(itype)


def test_plan_rows_match_the_per_tensor_formulas(net):
    name, size, data, model = net
    plan = plan_model(model, max_image=(64, 64))
    graph = model.graph
    # every conv weight image is the type its layer's kernel reads
    for layer in plan.schedule.layers:
        if layer.op != "Conv":
            continue
        types = {t for _, t, _ in layer.weights if t != "ARGUMENT"}
        p = graph.node(layer.name).params
        if p.depthwise:
            assert types == {"DW_CONV2D_FILTER"}, layer
        elif "Winograd" in layer.kind:
            assert types == {"WINOGRAD_FILTER"}, layer
        else:
            assert types == {"CONV2D_FILTER"}, layer
    held_as = {}
    for i in plan.images():
        held_as.setdefault(i["tensor"].split("[")[0], []).append(i["image"])
    problems = "\n".join(plan.problems())
    for r in plan.tensors:
        if r["image"] is None:
            assert r["note"], r                       # no image, and the plan says why
            continue
        bshape = r["buffer_shape"]
        if r["role"] in ("input", "activation", "output"):
            assert bshape == list(r["shape"]) + [1] * (4 - len(r["shape"]))
        want = _seed_image(r["image_type"], bshape, r.get("tile"))
        assert r["image"] == want, r
        kw = {"layout": "NCHW"} if r["role"] in ("input", "activation", "output") else (
            {"tile": r["tile"]} if r.get("tile") else {})
        if r["image_type"] != "DW_CONV2D_FILTER":
            assert tuple(want) == image_shape(r["image_type"], bshape, **kw)
        assert r["bytes_f32"] == want[0] * want[1] * 16 and r["bytes_f16"] == want[0] * want[1] * 8
        logical = (math.prod(bshape) if r["image_type"] != "WINOGRAD_FILTER"
                   else bshape[0] * bshape[1] * (r["tile"] + 2) ** 2)
        assert r["waste"] == pytest.approx(1 - logical / (want[0] * want[1] * 4))
        # fits: every image the tensor is held in is within 64 x 64
        held = held_as[r["name"].split("[")[0]] if "[" in r["name"] else held_as[r["name"]]
        if "[" in r["name"]:        # a weight cut into parts: its own image
            held = [r["image"]]
        assert held, r
        assert r["fits"] is all(w <= 64 and h <= 64 for w, h in held), r
        if r["fits"] is False:
            assert r["name"] in problems, r


def test_npu_placements_match_the_seed_formulas(net):
    name, size, data, model = net
    plan = plan_model(model, chip="BM1684")
    X, S, A = 64, 512 * 1024, 128
    assert plan.layers and any(r["place"] == "npu" for r in plan.layers)
    for layer in plan.layers:
        if layer["place"] == "host":
            assert layer["why"] and not layer["tensors"], layer
            continue
        end, claimed = 0, []
        for p in layer["tensors"]:
            n, c, h, w = p["shape"]
            cpn = -(-c // X)
            if p["layout"] == "aligned":
                cs = -(-(h * w) // (A // 4)) * (A // 4)
                span = 4 * ((n - 1) * cpn * cs + (cpn - 1) * cs + h * w)
                assert p["address"] % A == 0
            elif p["layout"].endswith("2IC"):       # [I, O, KH, KW], two input channels a word
                span = 8 * ((-(-n // 2) - 1) * h * w * cpn + (cpn - 1) * h * w + h * w)
            elif p["layout"] == "compact":
                span = 4 * ((n - 1) * h * w * cpn + (cpn - 1) * h * w + h * w)
            else:                                   # a matrix: its own test module checks it
                span = p["bytes_per_npu"]
            assert (p["channels_per_npu"], p["bytes_per_npu"]) == (cpn, span), (layer["layer"], p)
            # a tensor claims its bytes [offset, offset + span) in every NPU
            claimed.append((p["address"] % S, p["address"] % S + span, p["name"]))
            end = max(end, p["address"] % S + span)
        # the tensors of one layer never share bytes (an element-wise op may write in place)
        claimed = sorted(set(claimed))
        for (a0, a1, n0), (b0, b1, n1) in zip(claimed, claimed[1:]):
            assert a1 <= b0, (layer["layer"], n0, n1)
        assert layer["working_set"] >= end and layer["fits"] is (layer["working_set"] <= S)
