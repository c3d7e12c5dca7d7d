"""Whole networks on OpenCL images (PoCL here) against onnxruntime: the five test networks,
float32 images (relative L2 <= 1e-4, same top-1) and float16 images (cosine >= 0.999, same
top-1); what was prepared (image types, fusion, memory) and the profile."""

from __future__ import annotations

import numpy as np
import pytest


cl = pytest.importorskip("pyopencl", reason="PyOpenCL is not installed (extra 'opencl')")
pytest.importorskip("torch")

from _model_util import opencl_context, ort_session, rel_l2  # noqa: E402

from tensorlayout.model import load, zoo  # noqa: E402

NETS = [("resnet18", 32, True), ("mobilenet_v2", 32, False), ("vgg11", 32, True),
        ("squeezenet1_1", 33, True), ("shufflenet_v2", 32, False)]


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
    from tensorlayout.opencl import OpenCLSession

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
    # activations fused: no layer of their own
    assert not any(la.op in ("Relu", "Clip") for la in sess.layers)
    s = sess.summary()
    acts = [t for t in model.shapes if t not in model.consts]
    assert s["images_allocated"] < len(acts)


def test_float16_images(net):
    from tensorlayout.opencl import OpenCLSession

    name, model, x, ref = net
    sess = OpenCLSession(model, half=True)
    y = sess.run(x, profile=True)
    assert cosine(y, ref) >= 0.999
    assert (np.argmax(y, 1) == np.argmax(ref, 1)).all()
    per_layer, per_op = sess.profile_table()
    assert len(per_layer) == len(sess.layers) + 2          # + upload and download
    assert all(t >= 0 for _, t in per_layer)
    assert {op for op, _ in per_op} >= {"Conv", "upload", "download"}
