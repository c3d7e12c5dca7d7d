"""Real models that nobody here wrote, from PyPI wheels: PP-OCRv4's text detector and
recognizer (rapidocr-onnxruntime) and ddddocr's text recognizer (convolutions and an LSTM).
They are never committed: ``python tests/_real_models.py`` (or ``make ocr-models``)
downloads the wheels with pip and keeps the models in ``~/.cache/tensorlayout/<wheel>``;
the tests that use them skip, saying so, where they are not there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

#: model -> (the wheel, the folder of the cache, the file inside the wheel)
MODELS = {
    "det": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime-1.4.4",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
    "rec": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime-1.4.4",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
    "ddddocr": ("ddddocr==1.6.1", "ddddocr-1.6.1", "ddddocr/common.onnx"),
}


def _cache(folder) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tensorlayout", folder)


def model_path(which):
    """The cached model's path, or None."""
    _, folder, member = MODELS[which]
    path = os.path.join(_cache(folder), os.path.basename(member))
    return path if os.path.isfile(path) else None


def fetch():
    """Download each wheel with pip and keep its models in the cache."""
    for wheel in sorted({w for w, _, _ in MODELS.values()}):
        members = [(folder, m) for w, folder, m in MODELS.values() if w == wheel]
        dest = _cache(members[0][0])
        os.makedirs(dest, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", wheel, "-d",
                            tmp], check=True)
            found = next(f for f in os.listdir(tmp) if f.endswith(".whl"))
            with zipfile.ZipFile(os.path.join(tmp, found)) as zf:
                for _, member in members:
                    name = os.path.basename(member)
                    with zf.open(member) as src, open(os.path.join(tmp, name), "wb") as out:
                        shutil.copyfileobj(src, out)
                    os.replace(os.path.join(tmp, name), os.path.join(dest, name))
        print(f"{wheel}: {', '.join(os.path.basename(m) for _, m in members)} in {dest}")


def text_page(h, w, seed=0, channels=3):
    """A white page with dark strokes in lines, like printed text, normalized as PP-OCR's
    preprocessing does ((pixel / 255 - 0.5) / 0.5), as a (1, channels, h, w) float32 array."""
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
    return np.ascontiguousarray(np.broadcast_to(x, (1, channels, h, w))).astype(np.float32)


if __name__ == "__main__":
    fetch()
