"""Real OpenCL images: MACE's RGBA image types and its image convolutions on an OpenCL device.

Needs PyOpenCL (the ``opencl`` extra) and an OpenCL platform (PoCL on any CPU, or a GPU
driver); both are looked for only when a function is called.

- :func:`get_context`, :func:`list_devices`: device choice (first device by default, or by
  index / name substring / the ``TENSORLAYOUT_CL_DEVICE`` variable), limits read from it.
- :func:`to_cl_image`, :func:`from_cl_image`: buffer <-> CL_RGBA image for all nine types,
  CL_FLOAT and CL_HALF_FLOAT, byte-identical to :func:`tensorlayout.to_image`.
- :func:`conv2d_direct_image`, :func:`conv2d_winograd_image`: convolution on images;
  :func:`conv2d`: the same from NumPy NCHW arrays.

Whole networks on images run through :class:`tensorlayout.model.OpenCLSession` (the OpenCL
backend of the network pipeline, :mod:`tensorlayout.backends.opencl`).
"""

from __future__ import annotations

from ._device import CLContext, DeviceInfo, ENV_VAR, get_context, list_devices
from .transfer import (PATHS, choose_path, empty_image, enqueue_buffer_to_image,
                       enqueue_image_to_buffer, from_cl_image, image_dtype, to_cl_image)
from .conv import conv2d, conv2d_direct_image, conv2d_winograd_image, winograd_image_shapes

__all__ = [
    "CLContext", "DeviceInfo", "ENV_VAR", "get_context", "list_devices",
    "to_cl_image", "from_cl_image", "empty_image", "image_dtype",
    "enqueue_buffer_to_image", "enqueue_image_to_buffer", "choose_path", "PATHS",
    "conv2d", "conv2d_direct_image", "conv2d_winograd_image", "winograd_image_shapes",
]
