"""Buffer <-> OpenCL image for the nine MACE image types, on a real device.

The sizes and the element -> pixel map come from :func:`tensorlayout.image.image_layout`,
the same description the NumPy path packs with, so the two paths agree by construction;
the kernels (``transfer.cl``) only decode a pixel with the digits of that layout.
"""

from __future__ import annotations

import numpy as np

from .. import _checks
from ..errors import DTypeError, LayoutError, ShapeError, check_shape, dtype_text
from ..image import (
    buffer_format,
    checked_source,
    image_layout,
    image_type,
    row,
    stored_dtype,
)
from ._device import cl, context_of

__all__ = ["to_cl_image", "from_cl_image", "enqueue_buffer_to_image", "enqueue_image_to_buffer",
           "empty_image", "image_dtype", "write_image", "read_image", "pixel_digits", "pixel_axes",
           "choose_path", "PATHS"]

_UNUSED = (1, 0, 0, 0)   # extent 0: skipped
_NO_AXIS = (1, 0, 0, 0, 1, 0)
MAX_AXES = 8

#: The two ways a transfer runs.  "direct": one kernel reads or writes the image with
#: write_imagef / read_imagef.  "staged": a kernel moves the pixels to or from a plain
#: buffer in the image's row-major order, and clEnqueueCopyBufferToImage /
#: clEnqueueCopyImageToBuffer moves that buffer to or from the image.  Staged is chosen
#: on CPU devices (PoCL), whose image accesses are a library call per pixel; direct on
#: GPUs, whose texture path is fast.
PATHS = ("direct", "staged")


def pixel_digits(lay):
    """The kernels' decoding of a layout: up to 3 digits on x, 3 on y, the lane dimension.

    Returns ``(dx, dy, lane_stride, lane_len)``; each digit is ``(stride, extent,
    buffer stride, lane weight)`` with strides in pixels (x) or rows (y), outermost first.
    """
    height, width, _ = lay.physical_shape
    row = width * 4
    strides = [int(np.prod(lay.shape[i + 1:])) for i in range(lay.ndim)]  # C-order buffer
    lane = None
    xs, ys = [], []
    for i, name in enumerate(lay.dims):
        for dig in lay.digits_of(name):
            if dig.stride == 1 and dig.radix == 4:
                lane = i
                continue
            if dig.extent <= 1:
                continue
            src = dig.div * strides[i]
            if dig.stride < row:
                if dig.stride % 4 or dig.stride * dig.extent > row:
                    raise LayoutError(f"{lay.name}: digit of {name!r} straddles image rows")  # pragma: no cover
                xs.append([dig.stride // 4, dig.extent, src, i])
            else:
                if dig.stride % row:
                    raise LayoutError(f"{lay.name}: digit of {name!r} is not whole rows")  # pragma: no cover
                ys.append([dig.stride // row, dig.extent, src, i])
    if lane is None or len(xs) > 3 or len(ys) > 3:  # pragma: no cover - all nine types fit
        raise LayoutError(f"{lay.name}: layout does not fit the transfer kernels")

    def finish(ds):
        ds.sort(key=lambda d: -d[0])
        out = [(s, e, src, (lay.digits_of(lay.dims[i])[-1].div if i == lane else 0))
               for s, e, src, i in ds]
        return out + [_UNUSED] * (3 - len(out))

    return finish(xs), finish(ys), strides[lane], lay.shape[lane]


def image_dtype(image) -> np.dtype:
    """float32 or float16: the channel type of a pyopencl image."""
    pcl = cl()
    ct = image.format.channel_data_type
    if ct == pcl.channel_type.FLOAT:
        return np.dtype(np.float32)
    if ct == pcl.channel_type.HALF_FLOAT:
        return np.dtype(np.float16)
    raise DTypeError(f"image has channel type {ct}: tensorlayout images are CL_FLOAT or CL_HALF_FLOAT")


def empty_image(queue, width: int, height: int, dtype=np.float32):
    """An uninitialised CL_RGBA image of ``width`` x ``height`` pixels, checked against the device."""
    pcl = cl()
    cctx = context_of(queue)
    dt = _checks.image_dtype(dtype)
    cctx.check_image(width, height, dt)
    ctype = pcl.channel_type.FLOAT if dt == np.float32 else pcl.channel_type.HALF_FLOAT
    fmt = pcl.ImageFormat(pcl.channel_order.RGBA, ctype)
    make = getattr(pcl, "create_image", None) or pcl.Image
    return make(cctx.context, pcl.mem_flags.READ_WRITE, fmt, shape=(width, height))


def pixel_axes(lay, order="buffer"):
    """The kernels' description of a layout: axes over the pixels, fastest work-item first.

    Returns ``(axes, lane_stride, lane_len)``; each axis is ``(radix, x stride, y stride,
    buffer stride, extent, lane weight)``.  The radices multiply to width * height; an
    axis value at or past its extent is a padding pixel.  With ``order="buffer"`` axes are
    ordered by buffer stride, so consecutive work-items touch consecutive buffer elements
    where the layout has any (c4 for NHWC activations, w for NCHW, kh/kw for OIHW
    filters); with ``order="image"`` they walk the image row by row (x fastest), which
    suits a GPU writing an image.

    >>> from tensorlayout.image import image_layout
    >>> pixel_axes(image_layout("IN_OUT_CHANNEL", (1, 2, 3, 8)))[0]   # c4, w, h
    [(2, 3, 0, 4, 2, 4), (3, 1, 0, 8, 3, 0), (2, 0, 1, 24, 2, 0)]
    """
    dx, dy, ls, ll = pixel_digits(lay)
    height, width, _ = lay.physical_shape
    axes = []
    for ds, size, on_x in ((dx, width, True), (dy, height, False)):
        prev = size
        for s, e, b, lw in (d for d in ds if d[1] > 0):
            if prev % s:  # pragma: no cover - all nine types nest
                raise LayoutError(f"{lay.name}: pixel digits do not nest")
            axes.append((prev // s, s if on_x else 0, 0 if on_x else s, b, e, lw))
            prev = s
        if prev > 1:     # pixels between the finest digit's steps: padding
            axes.append((prev, 1 if on_x else 0, 0 if on_x else 1, 0, 1, 0))
    axes = [a for a in axes if a[0] > 1]
    if order == "image":
        axes.sort(key=lambda a: (a[2] != 0, a[1] if a[2] == 0 else a[2]))
    else:
        axes.sort(key=lambda a: (a[3] == 0, a[3]))
    if len(axes) > MAX_AXES:  # pragma: no cover
        raise LayoutError(f"{lay.name}: layout does not fit the transfer kernels")
    return axes, ls, ll


def _int8(v):
    return np.array(tuple(int(t) for t in v) + (0,) * (8 - len(v)), dtype=cl().cltypes.int8)


def choose_path(cctx) -> str:
    """The transfer path a device gets by default: "staged" on CPUs, "direct" elsewhere."""
    return "staged" if "CPU" in cctx.info.kind.split("/") else "direct"


#: Tensors of at least this many elements get a kernel compiled for their exact
#: layout (constant divisors), built once per layout and process.
SPECIALIZE_MIN = 1 << 20

_GPU_LOCAL = 128          # work-items per group on the flattened range (GPUs)
_CPU_LOCAL = (16, 4)      # on the first two axes (CPUs, where PoCL vectorises groups)


def _geometry(axes, staged):
    """(G0, G1, global size, local size) for the NDRange."""
    radix = [a[0] for a in axes] + [1] * (3 - len(axes))
    if not staged:            # GPU: one flattened dimension, groups along the buffer
        n = int(np.prod(radix))
        loc = min(_GPU_LOCAL, _checks.round_up(n, 32))
        return len(radix), len(radix), (_checks.round_up(n, loc), 1, 1), (loc, 1, 1), (n, 1)
    rest = int(np.prod(radix[2:]))
    l0, l1 = (min(lc, r) for lc, r in zip(_CPU_LOCAL, radix[:2]))
    return 1, 2, (_checks.round_up(radix[0], l0), _checks.round_up(radix[1], l1), rest), (l0, l1, 1), \
        (radix[0], radix[1])


def _enqueue(queue, cctx, name, buf_half, img_half, a, b, lay, path=None):
    """Enqueue one transfer; returns the list of its events in order."""
    pcl = cl()
    path = choose_path(cctx) if path is None else path
    if path not in PATHS:
        raise LayoutError(f"path = {path!r} is not allowed: one of {PATHS} or None")
    staged = path == "staged"
    height, width, _ = lay.physical_shape
    # Work-items walk the buffer contiguously, except where a GPU writes an image and the
    # buffer's contiguous axis jumps across it (NHWC's c4 steps W pixels in x): then they
    # walk the image row by row.  Measured on an H100, as a fraction of a copy's speed:
    # NHWC to image 0.59 row by row vs 0.45 along the buffer; OIHW filter (contiguous
    # kh*kw steps one pixel in y) 0.78 along the buffer vs 0.47; reading an image back,
    # along the buffer is always best (NHWC 0.76 vs 0.20).
    axes, ls, ll = pixel_axes(lay)
    if name == "buffer_to_image" and not staged and axes and 1 not in axes[0][1:3]:
        axes, ls, ll = pixel_axes(lay, order="image")
    g0, g1, gsize, lsize, (n0, n1) = _geometry(axes, staged)
    opts = [f"-DBUF_HALF={int(buf_half)}", f"-DIMG_HALF={int(img_half)}", f"-DSTAGED={int(staged)}"]
    if staged:
        opts += ["-DG0=1", "-DG1=2"]
    if lay.count >= SPECIALIZE_MIN:
        nax = max(len(axes), 3)
        full = ll % 4 == 0 and all(ax[0] == ax[4] for ax in axes) and \
            all(g % lc == 0 for g, lc in zip(gsize, lsize)) and gsize[:2] == (n0, n1)
        pad = list(axes) + [_NO_AXIS] * (MAX_AXES - len(axes))
        opts += ["-DSPEC", f"-DNAX={nax}", f"-DFULL={int(full)}", f"-DSPEC_LS={ls}", f"-DSPEC_LL={ll}"]
        opts += [f"-DSPEC_A{i}={','.join(str(int(v)) for v in ax + (0, 0))}" for i, ax in enumerate(pad)]
        if not staged:
            opts += [f"-DG0={nax}", f"-DG1={nax}"]
    kern = cctx.kernel("transfer.cl", name, tuple(opts))
    pad = list(axes) + [_NO_AXIS] * (MAX_AXES - len(axes))
    args = (np.int32(n0), np.int32(n1), np.int32(width), *[_int8(ax) for ax in pad],
            np.int32(ls), np.int32(ll))
    if not staged:
        return [kern(queue, gsize, lsize, a, b, *args)]
    stage = cctx.staging_buffer(queue, width * height * 4 * (2 if img_half else 4))
    region = dict(offset=0, origin=(0, 0), region=(width, height))
    if name == "buffer_to_image":
        ev = kern(queue, gsize, lsize, a, stage, *args)
        return [ev, pcl.enqueue_copy(queue, b, stage, wait_for=[ev], **region)]
    ev = pcl.enqueue_copy(queue, stage, a, **region)
    return [ev, kern(queue, gsize, lsize, stage, b, *args, wait_for=[ev])]


def _device_layout(queue, image, kind, shape, buffer, buffer_dtype, layout, filter_format, tile):
    pcl = cl()
    cctx = context_of(queue)
    kind = image_type(kind)
    if row(kind).transform:
        raise LayoutError(f"kind = {kind.name} is not allowed here: its buffer side is the "
                          "transformed filter U; use to_cl_image / from_cl_image")
    fmt = buffer_format(kind, layout=layout, filter_format=filter_format)
    shape = check_shape("shape", shape, rank=len(fmt))
    lay = image_layout(kind, shape, layout=layout, filter_format=filter_format, tile=tile)
    height, width, _ = lay.physical_shape
    if not isinstance(image, pcl.Image) or tuple(image.shape) != (width, height):
        raise ShapeError(f"image must be a pyopencl.Image of [{width}, {height}] for {kind.name} "
                         f"of shape {shape}")
    bdt = np.dtype(buffer_dtype)
    if bdt not in (np.float16, np.float32):
        raise DTypeError(f"buffer_dtype = {dtype_text(buffer_dtype)} is not allowed: float32 or float16")
    need = int(np.prod(shape)) * bdt.itemsize
    if not isinstance(buffer, pcl.Buffer) or buffer.size < need:
        raise ShapeError(f"buffer must be a pyopencl.Buffer of at least {need} bytes")
    return cctx, lay, bdt == np.float16, image_dtype(image) == np.float16


def enqueue_buffer_to_image(queue, buffer, image, kind, shape, *, buffer_dtype=np.float32,
                            layout=None, filter_format=None, path=None, all_events=False):
    """Enqueue the buffer -> image transfer on device-resident data; returns its last event.

    ``buffer`` holds the tensor of ``shape`` (C order, ``buffer_dtype`` float32 or
    float16) in the kind's buffer format; ``image`` is an image of the right size (see
    :func:`empty_image`).  Nothing is waited for or copied to the host.  ``path``:
    "direct", "staged" or None for the device's default (:func:`choose_path`);
    ``all_events=True`` returns the list of every command's event (a staged transfer is
    a kernel and a copy).

    >>> import numpy as np, pyopencl as cl
    >>> from tensorlayout.opencl import get_context, empty_image, enqueue_buffer_to_image
    >>> ctx = get_context()
    >>> x = np.ones((1, 8, 8, 32), np.float32)                                # NHWC, on the device
    >>> buf = cl.Buffer(ctx.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    >>> img = empty_image(ctx.queue, 64, 8)                                   # [q(C) * W, N * H]
    >>> ev = enqueue_buffer_to_image(ctx.queue, buf, img, "IN_OUT_CHANNEL", x.shape)
    >>> ev.wait()
    >>> from tensorlayout.opencl import from_cl_image
    >>> np.array_equal(from_cl_image(ctx.queue, img, "IN_OUT_CHANNEL", x.shape), x)
    True
    """
    cctx, lay, bh, ih = _device_layout(queue, image, kind, shape, buffer, buffer_dtype, layout,
                                       filter_format, None)
    evs = _enqueue(queue if queue is not cctx else cctx.queue, cctx, "buffer_to_image", bh, ih,
                   buffer, image, lay, path)
    return evs if all_events else evs[-1]


def enqueue_image_to_buffer(queue, image, buffer, kind, shape, *, layout=None, filter_format=None,
                            path=None, all_events=False):
    """Enqueue the image -> buffer transfer on device-resident data; returns its last event.

    The buffer receives the tensor of ``shape`` in the image's channel type; ``path`` and
    ``all_events`` as for :func:`enqueue_buffer_to_image`.
    """
    bdt = image_dtype(image)
    cctx, lay, bh, ih = _device_layout(queue, image, kind, shape, buffer, bdt, layout,
                                       filter_format, None)
    evs = _enqueue(queue if queue is not cctx else cctx.queue, cctx, "image_to_buffer", bh, ih,
                   image, buffer, lay, path)
    return evs if all_events else evs[-1]


def _prepare(array, kind, dtype, layout, filter_format, tile):
    kind, array = checked_source(array, kind, layout, filter_format)
    out_dtype = stored_dtype(array, dtype)
    with _checks.renamed({"shape": "array.shape"}, "tensorlayout.opencl.to_cl_image"):
        lay = image_layout(kind, array.shape, layout=layout, filter_format=filter_format, tile=tile)
    return kind, array, out_dtype, lay


def to_cl_image(queue, array, kind, *, dtype=np.float32, layout=None, filter_format=None,
                tile=None, wait=True, path=None):
    """Write a buffer tensor into a new CL_RGBA image on the queue's device; returns a ``pyopencl.Image``.

    ``array`` is in the kind's buffer format, as for :func:`tensorlayout.to_image`
    (NHWC activations or NCHW with ``layout="NCHW"``, OIHW or HWOI conv filters, MIHW or
    HWIM depthwise, OIHW weights, a 1-D argument, 3x3 OIHW weights for WINOGRAD_FILTER
    with ``tile`` 2, 4 or 6).  ``dtype`` float32 gives a CL_FLOAT image, float16 a
    CL_HALF_FLOAT one (rounded to nearest even).  The image is byte-identical to
    ``to_image(array, kind, ...)``; padding lanes are 0.  A size past the device's
    CL_DEVICE_IMAGE2D_MAX_WIDTH/HEIGHT raises DeviceLimitError before any allocation.
    ``path`` picks the transfer path ("direct" or "staged"; None: :func:`choose_path`).

    >>> import numpy as np
    >>> from tensorlayout.opencl import get_context, to_cl_image, from_cl_image
    >>> q = get_context().queue
    >>> img = to_cl_image(q, np.arange(1, 6, dtype=np.float32), "ARGUMENT")
    >>> img.shape, from_cl_image(q, img, "ARGUMENT", (5,)).tolist()
    ((2, 1), [1.0, 2.0, 3.0, 4.0, 5.0])
    """
    cctx = context_of(queue)
    if isinstance(queue, type(cctx)):
        queue = cctx.queue
    kind, array, out_dtype, lay = _prepare(array, kind, dtype, layout, filter_format, tile)
    if path is not None and path not in PATHS:
        raise LayoutError(f"path = {path!r} is not allowed: one of {PATHS} or None")
    return write_image(cctx, queue, array, lay, out_dtype, tile=tile, wait=wait, path=path)


def write_image(cctx, queue, array, lay, out_dtype, *, tile=None, wait=True, path=None):
    """:func:`to_cl_image` for checked arguments: ``lay`` is the image layout of ``array``
    (:func:`tensorlayout.image.image_layout`), ``out_dtype`` the image's channel type."""
    pcl = cl()
    height, width, _ = lay.physical_shape
    cctx.check_image(width, height, out_dtype)
    transform = row(lay.name).transform
    if transform:
        array = transform.forward(array, tile)
    if array.dtype not in (np.float16, np.float32):
        # float64 (or wider): one correctly rounded conversion on the host, as the NumPy
        # path does; float32 -> half is rounded by the kernel, to nearest even.
        array = array.astype(out_dtype)
    src = np.ascontiguousarray(array)
    cctx.check_buffer(src.nbytes)
    if src.size >= 2 ** 31:
        raise ShapeError(f"array has {src.size} elements: the kernels index with 32-bit integers")
    buf_half = src.dtype == np.float16
    img_half = out_dtype == np.float16
    image = empty_image(queue, width, height, out_dtype)
    mf = pcl.mem_flags
    dev_src = pcl.Buffer(cctx.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=src)
    ev = _enqueue(queue, cctx, "buffer_to_image", buf_half, img_half, dev_src, image, lay, path)[-1]
    if wait:
        ev.wait()
        dev_src.release()
    return image


def from_cl_image(queue, image, kind, shape, *, layout=None, filter_format=None, tile=None,
                  path=None):
    """Read the buffer tensor of ``shape`` back out of a CL_RGBA image; returns a NumPy array.

    The inverse of :func:`to_cl_image` and byte-identical to
    :func:`tensorlayout.from_image` of the same image's pixels.  The result has the
    image's channel type (float32 or float16).  For WINOGRAD_FILTER, ``shape`` is the
    3x3 OIHW weights' shape and they are recovered from U on the host.  An image whose
    size or type does not match ``kind`` and ``shape`` raises ShapeError.  ``path`` as
    for :func:`to_cl_image`.

    >>> from tensorlayout.opencl import get_context, to_cl_image, from_cl_image
    >>> q = get_context().queue
    >>> x = np.arange(30, dtype=np.float32).reshape(1, 2, 3, 5)               # NHWC
    >>> img = to_cl_image(q, x, "IN_OUT_CHANNEL")
    >>> np.array_equal(from_cl_image(q, img, "IN_OUT_CHANNEL", x.shape), x)
    True
    """
    pcl = cl()
    cctx = context_of(queue)
    if isinstance(queue, type(cctx)):
        queue = cctx.queue
    kind = image_type(kind)
    fmt = buffer_format(kind, layout=layout, filter_format=filter_format)
    shape = check_shape("shape", shape, rank=len(fmt))
    lay = image_layout(kind, shape, layout=layout, filter_format=filter_format, tile=tile)
    if not isinstance(image, pcl.Image):
        raise LayoutError(f"image = {image!r} is not allowed: it must be a pyopencl.Image")
    height, width, _ = lay.physical_shape
    got = tuple(image.shape)
    if got != (width, height):
        raise ShapeError(
            f"image is {got[0]} x {got[1]} pixels: a {kind.name} image of a tensor of shape "
            f"{shape} is [{width}, {height}] (width, height)")
    if image.format.channel_order != pcl.channel_order.RGBA:
        raise DTypeError("image channel order is not CL_RGBA: tensorlayout images are RGBA")
    if path is not None and path not in PATHS:
        raise LayoutError(f"path = {path!r} is not allowed: one of {PATHS} or None")
    return read_image(cctx, queue, image, lay, tile=tile, path=path)


def read_image(cctx, queue, image, lay, *, tile=None, path=None):
    """:func:`from_cl_image` for checked arguments: ``image`` a CL_RGBA image of the size
    of ``lay``, the image layout of the tensor read back."""
    pcl = cl()
    dt = image_dtype(image)
    out = np.empty(lay.shape, dtype=dt)
    cctx.check_buffer(out.nbytes)
    dev_dst = pcl.Buffer(cctx.context, pcl.mem_flags.WRITE_ONLY, size=max(out.nbytes, 1))
    half = dt == np.float16
    ev = _enqueue(queue, cctx, "image_to_buffer", half, half, image, dev_dst, lay, path)[-1]
    pcl.enqueue_copy(queue, out, dev_dst, wait_for=[ev]).wait()
    dev_dst.release()
    transform = row(lay.name).transform
    if transform:
        return transform.inverse(out, tile).astype(dt)
    return out
