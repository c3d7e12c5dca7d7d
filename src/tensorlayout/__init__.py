"""tensorlayout: where every element of a neural-network tensor lives.

CPU runtime buffers (NCHW, OIHW, MIHW, 1-D), MACE's OpenCL RGBA images, Sophgo
NPU local memory, and Winograd convolution, all described by one layout core
(:class:`tensorlayout.core.Layout`).  Public names are imported lazily so that
``import tensorlayout`` stays cheap and optional dependencies stay optional.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: What a user needs at the top level: the layout type, buffers, images, conv2d and the base
#: error.  Everything else lives in its subpackage (``tensorlayout.npu.Chip``,
#: ``tensorlayout.opencl.to_cl_image``, ``tensorlayout.errors.ShapeError``, ...).
_LAZY = {
    "LayoutError": "errors",
    "Layout": "core",
    "BUFFER_FORMATS": "buffer", "buffer_layout": "buffer", "convert": "buffer",
    "ImageType": "image", "image_layout": "image", "image_shape": "image", "image_nbytes": "image",
    "to_image": "image", "from_image": "image", "image_from_dump": "image", "pixel_of": "image",
    "element_at": "image",
    "conv2d": "winograd",
}

#: Subpackages and modules reachable as attributes (``tensorlayout.npu``) without an import.
_SUBMODULES = ("core", "buffer", "image", "npu", "winograd", "opencl", "draw", "model", "errors")

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        module = importlib.import_module(f"tensorlayout.{name}")
        globals()[name] = module
        return module
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tensorlayout' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tensorlayout.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__ + list(_SUBMODULES)
