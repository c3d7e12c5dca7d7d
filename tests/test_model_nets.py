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
    assert convs and all(s.conv_plan is not None and s.info["algorithm"] == s.conv_plan.info.name
                         for s in convs)
    if name in ("resnet18", "vgg11"):
        assert any(s.info["algorithm"].startswith("winograd") for s in convs)


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
    if itype == "DW_CONV2D_FILTER":
        m, i, h, w = shape
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
    steps = {s.node.name: s for s in model.steps}
    by_name = {r["name"]: r for r in plan.tensors}
    # every conv weight gets the image its layer needs
    for s in model.steps:
        if s.node.op != "Conv":
            continue
        w = model.consts[s.node.inputs[1]]
        row = by_name[s.node.inputs[1]]
        groups = s.node.params.group
        if groups > 1 and groups == s.in_shapes[0][1]:
            assert row["image_type"] == "DW_CONV2D_FILTER"
            assert row["buffer_shape"] == [w.shape[0] // groups, groups, *w.shape[2:]]
        elif s.conv_plan.info.algorithm == "winograd":
            assert (row["image_type"], row["tile"]) == ("WINOGRAD_FILTER", s.conv_plan.info.tile)
        else:
            assert row["image_type"] == "CONV2D_FILTER"
    for r in plan.tensors:
        if r["image"] is None:
            assert len(r["shape"]) > 4 and r["problem"]
            continue
        bshape = r["buffer_shape"]
        if r["role"] in ("input", "activation", "output"):
            assert bshape == list(r["shape"]) + [1] * (4 - len(r["shape"]))
        want = _seed_image(r["image_type"], bshape, r.get("tile"))
        assert r["image"] == want, r
        kw = {"layout": "NCHW"} if r["image_type"] == "IN_OUT_CHANNEL" else (
            {"tile": r["tile"]} if r.get("tile") else {})
        assert tuple(want) == image_shape(r["image_type"], bshape, **kw)
        assert r["bytes_f32"] == want[0] * want[1] * 16 and r["bytes_f16"] == want[0] * want[1] * 8
        logical = (math.prod(bshape) if r["image_type"] != "WINOGRAD_FILTER"
                   else bshape[0] * bshape[1] * (r["tile"] + 2) ** 2)
        assert r["waste"] == pytest.approx(1 - logical / (want[0] * want[1] * 4))
        over = want[0] > 64 or want[1] > 64
        assert r["fits"] is (not over)
        assert bool(r["problem"]) is over
        if r["producer"] is not None:
            assert r["producer"] in steps


def test_npu_working_sets_match_the_seed_formulas(net):
    name, size, data, model = net
    plan = plan_model(model, chip="BM1684")
    X, S, A = 64, 512 * 1024, 128
    for layer in plan.layers:
        total = 0
        for p in layer["inputs"] + layer["outputs"]:
            n, c, h, w = p["shape"]
            cpn = -(-c // X)
            cs = -(-(h * w) // (A // 4)) * (A // 4)
            span = 4 * ((n - 1) * cpn * cs + (cpn - 1) * cs + h * w)
            assert (p["channels_per_npu"], p["bytes_per_npu"]) == (cpn, span), (layer["layer"], p)
            total += -(-span // A) * A
        for p in layer["weights"]:
            n, c, h, w = p["shape"]
            cpn = -(-c // X)
            if p["layout"] == "compact 2IC":       # [I, O, KH, KW], two input channels a word
                span = 8 * ((-(-n // 2) - 1) * h * w * cpn + (cpn - 1) * h * w + h * w)
            else:
                span = 4 * ((n - 1) * h * w * cpn + (cpn - 1) * h * w + h * w)
            assert p["bytes_per_npu"] == span, (layer["layer"], p)
            total += -(-span // A) * A
        assert layer["working_set"] == total
        assert layer["fits"] is (total <= S)
