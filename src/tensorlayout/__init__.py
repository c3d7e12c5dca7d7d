"""tensorlayout: where every element of a neural-network tensor lives.

CPU runtime buffers (NCHW, OIHW, MIHW, 1-D), MACE's OpenCL RGBA images, Sophgo
NPU local memory, and Winograd convolution, all described by one layout core
(:class:`tensorlayout.core.Layout`).  Public names are imported lazily so that
``import tensorlayout`` stays cheap and optional dependencies stay optional.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    # errors
    "LayoutError": "errors", "ShapeError": "errors", "RankError": "errors", "DTypeError": "errors",
    "IndexOutOfRange": "errors", "DeviceLimitError": "errors", "AddressError": "errors",
    "AlignmentError": "errors", "StrideError": "errors", "ModeError": "errors",
    "OverlapError": "errors", "FootprintError": "errors", "ConvolutionError": "errors",
    "AlgorithmError": "errors", "OpenCLUnavailable": "errors",
    # the core
    "Layout": "core",
    # CPU buffers
    "BUFFER_FORMATS": "buffer", "buffer_layout": "buffer", "convert": "buffer",
    # OpenCL images
    "ImageType": "image", "image_shape": "image", "image_layout": "image", "to_image": "image",
    "from_image": "image", "image_from_dump": "image", "pixel_of": "image", "element_at": "image",
    "check_image_limits": "image", "DEFAULT_MAX_IMAGE_SIZE": "image", "image_nbytes": "image",
    "buffer_format": "image", "kind_of": "buffer",
    # NPU local memory
    "Chip": "npu", "BM1684": "npu", "BM1684X": "npu", "BM1688": "npu", "tensor_layout": "npu",
    "matrix_layout": "npu", "LocalMemory": "npu",
    # figures
    "npu_figure": "draw", "image_figure": "draw", "write_gallery": "draw",
    # real OpenCL images (PyOpenCL)
    "to_cl_image": "opencl", "from_cl_image": "opencl",
    # convolution
    "conv2d": "winograd", "WinogradLayer": "winograd", "transforms": "winograd",
}

__all__ = sorted(_LAZY) + ["__version__"]


#: Subpackages and modules reachable as attributes (``tensorlayout.npu``) without an import.
_SUBMODULES = ("core", "buffer", "image", "npu", "winograd", "opencl", "draw", "errors")


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
