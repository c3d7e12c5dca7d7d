"""Whole networks on OpenCL images (PoCL here) against onnxruntime: the six test networks,
float32 images (relative L2 <= 1e-4, same top-1) and float16 images (cosine >= 0.999, same
top-1); what was prepared (image types, fusion, memory), that it is image for image what
the plan says, and the profile."""

from __future__ import annotations

import numpy as np
import pytest


cl = pytest.importorskip("pyopencl", reason="PyOpenCL is not installed (extra 'opencl')")
pytest.importorskip("torch")

from _model_util import opencl_context, ort_session, rel_l2  # noqa: E402

from tensorlayout.model import load, zoo  # noqa: E402

NETS = [("resnet18", 32, True), ("mobilenet_v2", 32, False), ("vgg11", 32, True),
        ("squeezenet1_1", 33, True), ("shufflenet_v2", 32, False), ("densenet121", 32, False)]


@pytest.fixture(scope="module", autouse=True)
def cctx():
    return opencl_context()


@pytest.fixture(scope="module", params=NETS, ids=lambda c: c[0])
def net(request):
    name, size, fold = request.param
    data, _ = zoo.export(name, size=size, classes=100, fold=fold)
    x = np.random.default_rng(size).standard_normal((1, 3, size, size)).astype(np.float32)
    model = load(data)
    ref = ort_session(data, threads=2).run(None, {"input": x})[0]
    return name, model, x, ref


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_float32_images(net):
    from tensorlayout.model import OpenCLSession

    name, model, x, ref = net
    sess = OpenCLSession(model)
    y = sess.run(x)
    assert y.shape == ref.shape == (1, 100)
    assert rel_l2(y, ref) <= 1e-4
    assert (np.argmax(y, 1) == np.argmax(ref, 1)).all()
    # the second inference reuses everything prepared and gives the same bits
    assert np.array_equal(sess.run(x), y)
    kinds = {t for layer in sess.layers for _, t, _ in layer.weights}
    assert "CONV2D_FILTER" in kinds and "ARGUMENT" in kinds
    if name in ("resnet18", "vgg11"):
        assert "WINOGRAD_FILTER" in kinds and "WEIGHT_WIDTH" in kinds
    if name in ("mobilenet_v2", "shufflenet_v2"):
        assert "DW_CONV2D_FILTER" in kinds
    if name == "densenet121":       # BatchNormalization after each Concat: a layer of its own
        assert any(la.op == "BatchNormalization" for la in sess.layers)
    # activations fused: no layer of their own
    assert not any(la.op in ("Relu", "Clip") for la in sess.layers)
    s = sess.summary()
    acts = [t for t in model.shapes if t not in model.consts]
    assert s["images_allocated"] < len(acts)


def test_float16_images(net):
    from tensorlayout.model import OpenCLSession

    name, model, x, ref = net
    sess = OpenCLSession(model, half=True)
    y = sess.run(x, profile=True)
    assert cosine(y, ref) >= 0.999
    assert (np.argmax(y, 1) == np.argmax(ref, 1)).all()
    per_layer, per_op = sess.profile_table()
    assert len(per_layer) == len(sess.layers) + 2          # + upload and download
    assert all(t >= 0 for _, t in per_layer)
    assert {op for op, _ in per_op} >= {"Conv", "upload", "download"}


def test_the_session_allocates_what_the_plan_says(net):
    """The plan's list of images (each tensor's image, its memory block and that block's
    size) equals the one the session reads back from the images it allocated, and so does
    the memory they take; float32 and float16."""
    from tensorlayout.model import OpenCLSession, plan_model

    name, model, x, ref = net
    for half in (False, True):
        sess = OpenCLSession(model, half=half)
        plan = plan_model(model, device=sess.cctx, half=half)
        got, want = sess.images(), plan.images()
        assert got == want
        assert {i["role"] for i in got} >= {"weight", "activation"}
        assert sess.summary()["peak_image_bytes"] == plan.memory()["peak_image_bytes"]
        assert all(i["dtype"] == ("float16" if half else "float32") for i in got
                   if i["role"] != "temporary")


def test_plan_and_run_agree_on_the_command_line(tmp_path, capsys):
    import json

    from tensorlayout.cli import main

    data, _ = zoo.export("squeezenet1_1", size=33, classes=10)
    path = str(tmp_path / "sq.onnx")
    open(path, "wb").write(data)
    assert main(["plan", path, "--device", "0", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert main(["run", path, "--runtime", "opencl", "--device", "0", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert plan["images"] == run["images"] and len(run["images"]) > 20
    assert plan["peak_image_bytes"] == run["peak_image_bytes"] > 0
