"""Real models that nobody here wrote, from a PyPI wheel: PP-OCRv4's text detector and
recognizer, as rapidocr-onnxruntime ships them.  They are never committed: ``python
tests/_real_models.py`` (or ``make ocr-models``) downloads the wheel with pip and keeps the
two models in ``~/.cache/tensorlayout/rapidocr_onnxruntime-1.4.4``; the tests that use them
skip, saying so, where they are not there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

WHEEL = "rapidocr-onnxruntime==1.4.4"
MODELS = {"det": "ch_PP-OCRv4_det_infer.onnx", "rec": "ch_PP-OCRv4_rec_infer.onnx"}


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tensorlayout", "rapidocr_onnxruntime-1.4.4")


def model_path(which):
    """The cached model's path, or None."""
    path = os.path.join(cache_dir(), MODELS[which])
    return path if os.path.isfile(path) else None


def fetch() -> str:
    """Download the wheel with pip and keep its two PP-OCRv4 models in the cache."""
    dest = cache_dir()
    os.makedirs(dest, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d", tmp],
                       check=True)
        wheel = next(f for f in os.listdir(tmp) if f.endswith(".whl"))
        with zipfile.ZipFile(os.path.join(tmp, wheel)) as zf:
            for name in MODELS.values():
                with zf.open(f"rapidocr_onnxruntime/models/{name}") as src, \
                        open(os.path.join(tmp, name), "wb") as out:
                    shutil.copyfileobj(src, out)
                os.replace(os.path.join(tmp, name), os.path.join(dest, name))
    return dest


def text_page(h, w, seed=0):
    """A white page with dark strokes in lines, like printed text, normalized as PP-OCR's
    preprocessing does ((pixel / 255 - 0.5) / 0.5), as a (1, 3, h, w) float32 array."""
    rng = np.random.default_rng(seed)
    img = np.full((h, w), 235.0) + rng.normal(0, 6, (h, w))
    for top in range(8, h - 16, 24):
        x0 = int(rng.integers(4, 20))
        while x0 < w - 20:
            cw = int(rng.integers(6, 12))
            for _ in range(3):
                r, c = int(rng.integers(top, top + 12)), int(rng.integers(x0, x0 + cw))
                img[r:r + 3, x0:x0 + cw] = 30
                img[top:top + 14, c:c + 2] = 30
            x0 += cw + int(rng.integers(2, 6))
    x = (img / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(np.broadcast_to(x, (1, 3, h, w))).astype(np.float32)


if __name__ == "__main__":
    print(f"PP-OCRv4 models in {fetch()}")
