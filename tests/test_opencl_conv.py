"""Convolution on OpenCL images against float64 direct convolution written here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensorlayout.errors import (
    AlgorithmError,
    ConvolutionError,
    DeviceLimitError,
    LayoutError,
    OpenCLUnavailable,
    ShapeError,
)

cl = pytest.importorskip("pyopencl", reason="PyOpenCL is not installed (extra 'opencl')")


@pytest.fixture(scope="session")
def cctx():
    from tensorlayout.opencl import get_context

    try:
        return get_context()
    except OpenCLUnavailable as exc:
        pytest.skip(f"no OpenCL platform can be had on this machine: {exc}")


def conv_ref(x, w, b=None, padding=(0, 0), stride=(1, 1)):
    """float64 direct convolution, NCHW x OIHW, one kernel tap at a time."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    (ph, pw), (sh, sw) = padding, stride
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    xp[:, :, ph:ph + H, pw:pw + W] = x
    OH, OW = (H + 2 * ph - KH) // sh + 1, (W + 2 * pw - KW) // sw + 1
    y = np.zeros((N, O, OH, OW))
    for kh in range(KH):
        for kw in range(KW):
            patch = xp[:, :, kh:kh + sh * (OH - 1) + 1:sh, kw:kw + sw * (OW - 1) + 1:sw]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, kh, kw])
    if b is not None:
        y += np.asarray(b, np.float64)[None, :, None, None]
    return y


def rel_l2(got, want):
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


def data(shape_x, shape_w, seed=0, bias=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape_x).astype(np.float32)
    w = (rng.standard_normal(shape_w) / math.sqrt(np.prod(shape_w[1:]))).astype(np.float32)
    b = rng.standard_normal(shape_w[0]).astype(np.float32) if bias else None
    return x, w, b


# (x shape NCHW, w shape OIHW, padding)
LAYERS = [
    ((2, 13, 11, 9), (7, 13, 3, 3), 1),
    ((1, 3, 17, 17), (16, 3, 3, 3), 1),
    ((1, 32, 14, 14), (32, 32, 3, 3), 1),
    ((1, 5, 10, 7), (6, 5, 3, 3), 0),
]


@pytest.mark.parametrize("tile", [2, 4, 6])
@pytest.mark.parametrize("xs,ws,pad", LAYERS)
def test_winograd_on_images_float(cctx, xs, ws, pad, tile):
    from tensorlayout.opencl import conv2d

    x, w, b = data(xs, ws, seed=tile)
    y = conv2d(x, w, b, padding=pad, algorithm="winograd", tile=tile, device=cctx)
    want = conv_ref(x, w, b, (pad, pad))
    assert y.shape == want.shape and y.dtype == np.float32
    assert rel_l2(y, want) < 1e-5


@pytest.mark.parametrize("xs,ws,pad,stride", [
    ((2, 13, 11, 9), (7, 13, 3, 3), 1, 1),
    ((1, 17, 6, 5), (9, 17, 1, 1), 0, 1),
    ((1, 6, 13, 12), (5, 6, 5, 3), (2, 1), 2),
    ((1, 4, 8, 8), (8, 4, 3, 3), 0, (2, 1)),
])
def test_direct_on_images_float(cctx, xs, ws, pad, stride):
    from tensorlayout.opencl import conv2d

    x, w, b = data(xs, ws, seed=3)
    y = conv2d(x, w, b, padding=pad, algorithm="direct", stride=stride, device=cctx)
    p = pad if isinstance(pad, tuple) else (pad, pad)
    s = stride if isinstance(stride, tuple) else (stride, stride)
    want = conv_ref(x, w, b, p, s)
    assert y.shape == want.shape
    assert rel_l2(y, want) < 2e-6


@pytest.mark.parametrize("algorithm,tile,tol", [
    ("direct", None, 2e-3), ("winograd", 2, 4e-3), ("winograd", 4, 1.5e-2), ("winograd", 6, 4e-3)])
def test_half_images_within_fp16_rounding(cctx, algorithm, tile, tol):
    """Inputs rounded to half, float arithmetic, half storage: error of a few half ulps."""
    from tensorlayout.opencl import conv2d

    x, w, b = data((1, 24, 12, 10), (20, 24, 3, 3), seed=11)
    y = conv2d(x, w, b, padding=1, algorithm=algorithm, tile=tile, dtype=np.float16, device=cctx)
    assert y.dtype == np.float16
    xh, wh, bh = (a.astype(np.float16) for a in (x, w, b))
    want = conv_ref(xh, wh, bh, (1, 1))
    assert rel_l2(y, want) < tol
    # and the float32 pipeline is far closer: the error above is the half storage
    y32 = conv2d(x, w, b, padding=1, algorithm=algorithm, tile=tile, device=cctx)
    assert rel_l2(y32, conv_ref(x, w, b, (1, 1))) < 1e-5


def test_image_level_pipeline_and_shapes(cctx):
    """NHWC images in, an IN_OUT_CHANNEL image out; winograd and direct agree with the oracle."""
    from tensorlayout.image import image_shape
    from tensorlayout.opencl import (conv2d_direct_image, conv2d_winograd_image, from_cl_image,
                                     to_cl_image, winograd_image_shapes)

    q = cctx.queue
    x, w, b = data((2, 6, 9, 7), (5, 6, 3, 3), seed=4)
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))          # NHWC
    xi = to_cl_image(q, xh, "IN_OUT_CHANNEL")
    bi = to_cl_image(q, b, "ARGUMENT")
    fi = to_cl_image(q, w, "CONV2D_FILTER")
    out, oshape = conv2d_direct_image(q, xi, xh.shape, fi, w.shape, bi, padding=1)
    assert oshape == (2, 9, 7, 5) and out.shape == image_shape("IN_OUT_CHANNEL", oshape)
    want = conv_ref(x, w, b, (1, 1)).transpose(0, 2, 3, 1)
    assert rel_l2(from_cl_image(q, out, "IN_OUT_CHANNEL", oshape), want) < 2e-6
    ui = to_cl_image(q, w, "WINOGRAD_FILTER", tile=4)
    out, oshape = conv2d_winograd_image(q, xi, xh.shape, ui, w.shape, bi, tile=4, padding=1)
    assert rel_l2(from_cl_image(q, out, "IN_OUT_CHANNEL", oshape), want) < 1e-5
    # the intermediate images as REFERENCE.md section 1 gives them: [tiles, T*T*q(C)]
    sizes = winograd_image_shapes(xh.shape, 5, 4, 1)
    tiles = 2 * 3 * 2
    assert sizes["V"] == (tiles, 36 * 2) and sizes["M"] == (tiles, 36 * 2)
    assert sizes["U"] == (2, 5 * 36) == ui.shape


def test_conv_bad_input(cctx):
    from tensorlayout.opencl import conv2d, conv2d_direct_image, to_cl_image

    x, w, b = data((1, 4, 6, 6), (3, 4, 3, 3), seed=1)
    with pytest.raises(AlgorithmError, match="3x3"):
        conv2d(x, np.ones((3, 4, 5, 5), np.float32), algorithm="winograd", device=cctx)
    with pytest.raises(AlgorithmError, match="stride"):
        conv2d(x, w, algorithm="winograd", stride=2, device=cctx)
    with pytest.raises(ConvolutionError, match="C = 4"):
        conv2d(x, np.ones((3, 5, 3, 3), np.float32), device=cctx)
    with pytest.raises(ConvolutionError, match="O = 3"):
        conv2d(x, w, np.ones(4, np.float32), device=cctx)
    with pytest.raises(LayoutError, match="algorithm"):
        conv2d(x, w, algorithm="fft", device=cctx)
    with pytest.raises(AlgorithmError, match="tile"):
        conv2d(x, w, algorithm="winograd", tile=3, device=cctx)
    q = cctx.queue
    xi = to_cl_image(q, x.transpose(0, 2, 3, 1), "IN_OUT_CHANNEL")
    fi = to_cl_image(q, w, "CONV2D_FILTER")
    with pytest.raises(ShapeError, match="image is"):
        conv2d_direct_image(q, xi, (1, 6, 6, 5), fi, (3, 5, 3, 3))
    with pytest.raises(ShapeError, match="bias"):
        conv2d_direct_image(q, xi, (1, 6, 6, 4), fi, (3, 4, 3, 3), to_cl_image(q, np.ones(9, np.float32), "ARGUMENT"))


def test_winograd_tiles_past_the_device_width(cctx):
    """More tiles than the device's image width: an explicit tile is refused, tile=None picks one that fits."""
    from tensorlayout.opencl import conv2d

    max_w = cctx.info.max_image_size[0]
    side = 2 * math.isqrt(max_w) + 4             # (side / 2)^2 tiles of F(2,3) > max width
    x, w, b = data((1, 1, side, side), (1, 1, 3, 3), seed=2)
    with pytest.raises(DeviceLimitError, match="smaller tile"):
        conv2d(x, w, b, padding=1, tile=2, device=cctx)
    y = conv2d(x, w, b, padding=1, device=cctx)     # tile 4 fits
    assert rel_l2(y, conv_ref(x, w, b, (1, 1))) < 1e-5
