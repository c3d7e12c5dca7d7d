"""Buffer <-> OpenCL image on a real device (PoCL in CI), against the NumPy path and the formulas.

The oracle for every pixel is twofold: ``tensorlayout.to_image`` (the layout core's
NumPy pack), compared byte for byte, and, for small shapes, a per-element loop written
from REFERENCE.md section 1's table.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorlayout.errors import DeviceLimitError, LayoutError, OpenCLUnavailable, ShapeError
from tensorlayout.image import from_image, to_image, winograd_filter_values

cl = pytest.importorskip("pyopencl", reason="PyOpenCL is not installed (extra 'opencl')")


def _context_or_skip():
    from tensorlayout.opencl import get_context

    try:
        return get_context()
    except OpenCLUnavailable as exc:
        pytest.skip(f"no OpenCL platform can be had on this machine: {exc}")


@pytest.fixture(scope="session")
def cctx():
    return _context_or_skip()


def read_pixels(queue, image):
    """The image's raw pixels, (height, width, 4), read with a plain enqueue_copy."""
    from tensorlayout.opencl import image_dtype

    w, h = image.shape
    out = np.empty((h, w, 4), dtype=image_dtype(image))
    cl.enqueue_copy(queue, out, image, origin=(0, 0), region=(w, h)).wait()
    return out


def same_bytes(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def q(x):
    return (x + 3) // 4


# --------------------------------------------------------------------- the formula oracle
def oracle_image(kind, a, tile=None, layout=None, filter_format="OIHW"):
    """Per-element loop straight from REFERENCE.md section 1 (float64 image)."""
    if kind in ("IN_OUT_CHANNEL", "IN_OUT_HEIGHT", "IN_OUT_WIDTH") and layout == "NCHW":
        a = a.transpose(0, 2, 3, 1)
    if kind == "CONV2D_FILTER" and filter_format == "HWOI":
        a = a.transpose(2, 3, 0, 1)        # HWOI -> OIHW values; width is RoundUp4(I)
    if kind == "DW_CONV2D_FILTER" and filter_format == "HWIM":
        a = a.transpose(3, 2, 0, 1)        # HWIM -> MIHW
    if kind == "WINOGRAD_FILTER":
        a = winograd_filter_values(a, tile)  # U[t, o, i]
    if kind == "IN_OUT_CHANNEL":
        N, H, W, C = a.shape
        img = np.zeros((N * H, q(C) * W, 4))
        for n, h, w, c in np.ndindex(a.shape):
            img[n * H + h, (c // 4) * W + w, c % 4] = a[n, h, w, c]
    elif kind == "IN_OUT_HEIGHT":
        N, H, W, C = a.shape
        img = np.zeros((N * q(H), W * C, 4))
        for n, h, w, c in np.ndindex(a.shape):
            img[n * q(H) + h // 4, c * W + w, h % 4] = a[n, h, w, c]
    elif kind == "IN_OUT_WIDTH":
        N, H, W, C = a.shape
        img = np.zeros((N * H, q(W) * C, 4))
        for n, h, w, c in np.ndindex(a.shape):
            img[n * H + h, c * q(W) + w // 4, w % 4] = a[n, h, w, c]
    elif kind == "ARGUMENT":
        (L,) = a.shape
        img = np.zeros((1, q(L), 4))
        for i in range(L):
            img[0, i // 4, i % 4] = a[i]
    elif kind == "CONV2D_FILTER":
        O, I, H, W = a.shape
        width = I if filter_format == "OIHW" else 4 * q(I)
        img = np.zeros((H * W * q(O), width, 4))
        for o, i, h, w in np.ndindex(a.shape):
            img[(o // 4) * H * W + h * W + w, i, o % 4] = a[o, i, h, w]
    elif kind == "DW_CONV2D_FILTER":
        M, I, H, W = a.shape
        img = np.zeros((q(I), M * H * W, 4))
        for m, i, h, w in np.ndindex(a.shape):
            img[i // 4, m * H * W + h * W + w, i % 4] = a[m, i, h, w]
    elif kind == "WEIGHT_HEIGHT":
        O, I, H, W = a.shape
        img = np.zeros((q(O), I * H * W, 4))
        for o, i, h, w in np.ndindex(a.shape):
            img[o // 4, (h * W + w) * I + i, o % 4] = a[o, i, h, w]
    elif kind == "WEIGHT_WIDTH":
        O, I, H, W = a.shape
        img = np.zeros((O, q(I) * H * W, 4))
        for o, i, h, w in np.ndindex(a.shape):
            img[o, (h * W + w) * q(I) + i // 4, i % 4] = a[o, i, h, w]
    elif kind == "WINOGRAD_FILTER":
        T2, O, I = a.shape
        img = np.zeros((O * T2, q(I), 4))
        for t, o, i in np.ndindex(a.shape):
            img[t * O + o, i // 4, i % 4] = a[t, o, i]
    return img


# (kind, buffer shape, keyword arguments): odd sizes, channels not a multiple of 4.
CASES = [
    ("IN_OUT_CHANNEL", (2, 3, 5, 7), {}),
    ("IN_OUT_CHANNEL", (2, 7, 3, 5), {"layout": "NCHW"}),
    ("IN_OUT_CHANNEL", (1, 2, 3, 1), {}),
    ("IN_OUT_CHANNEL", (3, 13, 17, 128), {}),
    ("IN_OUT_CHANNEL", (3, 128, 13, 17), {"layout": "NCHW"}),
    ("IN_OUT_HEIGHT", (2, 7, 3, 5), {}),
    ("IN_OUT_HEIGHT", (2, 5, 7, 3), {"layout": "NCHW"}),
    ("IN_OUT_WIDTH", (2, 3, 9, 5), {}),
    ("IN_OUT_WIDTH", (2, 5, 3, 9), {"layout": "NCHW"}),
    ("ARGUMENT", (11,), {}),
    ("ARGUMENT", (1,), {}),
    ("CONV2D_FILTER", (5, 3, 3, 3), {}),
    ("CONV2D_FILTER", (13, 17, 1, 1), {}),
    ("CONV2D_FILTER", (3, 3, 5, 7), {"filter_format": "HWOI"}),
    ("DW_CONV2D_FILTER", (1, 7, 3, 3), {}),
    ("DW_CONV2D_FILTER", (2, 5, 3, 3), {}),
    ("DW_CONV2D_FILTER", (3, 3, 1, 6), {"filter_format": "HWIM"}),
    ("WEIGHT_HEIGHT", (11, 13, 3, 2), {}),
    ("WEIGHT_WIDTH", (11, 13, 3, 2), {}),
    ("WINOGRAD_FILTER", (5, 7, 3, 3), {"tile": 2}),
    ("WINOGRAD_FILTER", (6, 9, 3, 3), {"tile": 4}),
    ("WINOGRAD_FILTER", (3, 5, 3, 3), {"tile": 6}),
]
IDS = [f"{k}-{'x'.join(map(str, s))}-{'-'.join(map(str, kw.values())) or 'default'}" for k, s, kw in CASES]


PATHS = ["direct", "staged"]


@pytest.mark.parametrize("kind,shape,kw", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "half"])
@pytest.mark.parametrize("path", PATHS)
def test_buffer_to_image_matches_numpy_path_bytes(cctx, kind, shape, kw, dtype, path):
    rng = np.random.default_rng(abs(hash((kind, shape))) % 2 ** 32)
    a = (rng.standard_normal(shape) * 3).astype(np.float32)
    from tensorlayout.opencl import from_cl_image, to_cl_image

    kw = dict(kw, path=path)
    img = to_cl_image(cctx.queue, a, kind, dtype=dtype, **kw)
    np_kw = {k: v for k, v in kw.items() if k != "path"}
    ref = to_image(a, kind, dtype=dtype, **np_kw)
    got = read_pixels(cctx.queue, img)
    assert same_bytes(got, ref)
    if np.prod(shape) <= 1000:            # the formula oracle (padding lanes exactly 0)
        want = oracle_image(kind, a.astype(np.float64), **np_kw).astype(dtype)
        assert same_bytes(got, want)
    back = from_cl_image(cctx.queue, img, kind, shape, **kw)
    assert same_bytes(back, from_image(ref, kind, shape, **np_kw))
    if kind != "WINOGRAD_FILTER":
        assert same_bytes(back, a.astype(dtype))


@pytest.mark.parametrize("src", [np.float16, np.float64], ids=["from-half", "from-double"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "half"])
def test_other_source_dtypes_match_numpy_path(cctx, src, dtype):
    from tensorlayout.opencl import to_cl_image

    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 5, 3, 6)).astype(src)
    for kw in ({}, {"layout": "NCHW"}):
        img = to_cl_image(cctx.queue, a, "IN_OUT_CHANNEL", dtype=dtype, **kw)
        assert same_bytes(read_pixels(cctx.queue, img), to_image(a, "IN_OUT_CHANNEL", dtype=dtype, **kw))


def _hard_floats():
    """float32 values that probe float -> half rounding: ties, subnormals, overflow, signs."""
    h = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)  # all finite halves
    nxt = np.nextafter(h, np.float32(np.inf))
    mids = (h[:-1].astype(np.float64) + h[1:].astype(np.float64)) / 2        # exact ties
    mids = mids.astype(np.float32)
    extra = np.array([65504, 65519.996, 65520, 65536, 1e6, 3e38, np.inf, 0.0, 2.0 ** -25,
                      2.0 ** -25 * 1.0000001, 2.0 ** -26, 1e-30, 5.96e-8, 6.1e-5], dtype=np.float32)
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 0x7F800000, 200_000, dtype=np.uint32).view(np.float32)
    vals = np.concatenate([h, nxt, mids, np.nextafter(mids, np.float32(0)), extra, bits])
    return np.concatenate([vals, -vals]).astype(np.float32)


@pytest.mark.parametrize("path", PATHS)
def test_half_images_round_to_nearest_even_like_numpy(cctx, path):
    from tensorlayout.opencl import from_cl_image, to_cl_image

    vals = _hard_floats()
    vals = vals[: (len(vals) // 4096) * 4096].reshape(1, -1, 1024, 4)   # NHWC, C = 4: one pixel each
    img = to_cl_image(cctx.queue, vals, "IN_OUT_CHANNEL", dtype=np.float16, path=path)
    got = read_pixels(cctx.queue, img).reshape(vals.shape)
    with np.errstate(over="ignore"):
        want = vals.astype(np.float16)      # NumPy's float -> half: round to nearest even
    bad = np.flatnonzero(got.view(np.uint16) != want.view(np.uint16))
    v, g, w = (t.reshape(-1)[bad[:5]] for t in (vals, got, want))
    assert bad.size == 0, f"{bad.size} values differ, first {v} -> {g} instead of {w}"
    back = from_cl_image(cctx.queue, img, "IN_OUT_CHANNEL", vals.shape, path=path)
    assert same_bytes(back, want)


def test_image_sizes_come_from_image_shape(cctx):
    from tensorlayout.image import image_shape
    from tensorlayout.opencl import to_cl_image

    a = np.ones((3, 64, 1, 1), np.float32)
    img = to_cl_image(cctx.queue, a, "CONV2D_FILTER")
    assert img.shape == image_shape("CONV2D_FILTER", a.shape) == (64, 1)


# ------------------------------------------------------------------------------- bad input
def test_image_past_device_limit_is_refused_before_allocation(cctx, monkeypatch):
    from tensorlayout.opencl import to_cl_image

    max_w, max_h = cctx.info.max_image_size
    calls = []
    monkeypatch.setattr(cl, "Image", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(cl, "Buffer", lambda *a, **k: calls.append(a))
    with pytest.raises(DeviceLimitError, match="width .* past the device maximum"):
        to_cl_image(cctx.queue, np.zeros((1, 1, max_w + 1, 1), np.float32), "IN_OUT_CHANNEL")
    with pytest.raises(DeviceLimitError, match="height"):
        to_cl_image(cctx.queue, np.zeros((max_h + 1, 1, 1, 1), np.float32), "IN_OUT_CHANNEL")
    assert calls == []


def test_half_images_on_a_device_without_them_are_refused(cctx, monkeypatch):
    import dataclasses

    from tensorlayout.opencl import to_cl_image

    monkeypatch.setattr(cctx, "info", dataclasses.replace(cctx.info, half_images=False))
    with pytest.raises(OpenCLUnavailable, match="HALF_FLOAT"):
        to_cl_image(cctx.queue, np.ones(5, np.float32), "ARGUMENT", dtype=np.float16)
    to_cl_image(cctx.queue, np.ones(5, np.float32), "ARGUMENT", dtype=np.float32)


def test_mismatched_image_is_refused(cctx):
    from tensorlayout.opencl import from_cl_image, to_cl_image

    img = to_cl_image(cctx.queue, np.ones((1, 2, 3, 5), np.float32), "IN_OUT_CHANNEL")
    with pytest.raises(ShapeError, match=r"6 x 2 pixels.*\[9, 2\]"):
        from_cl_image(cctx.queue, img, "IN_OUT_CHANNEL", (1, 2, 3, 9))
    with pytest.raises(ShapeError):
        from_cl_image(cctx.queue, img, "ARGUMENT", (5,))
    with pytest.raises(LayoutError, match="pyopencl.Image"):
        from_cl_image(cctx.queue, np.zeros((2, 6, 4), np.float32), "IN_OUT_CHANNEL", (1, 2, 3, 5))
    with pytest.raises(LayoutError):
        to_cl_image(cctx.queue, np.ones((1, 2, 3), np.float32), "IN_OUT_CHANNEL")
    with pytest.raises(LayoutError):
        to_cl_image(cctx.queue, np.ones((1, 2, 3, 4), np.int32), "IN_OUT_CHANNEL")
    with pytest.raises(LayoutError):
        to_cl_image(cctx.queue, np.ones((1, 2, 3, 4), np.float32), "IN_OUT_CHANNEL", dtype=np.float64)


def test_no_platform_gives_a_helpful_error(monkeypatch):
    from tensorlayout.opencl import _device

    def none():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", none)
    monkeypatch.delenv(_device.ENV_VAR, raising=False)
    with pytest.raises(OpenCLUnavailable, match="pocl-opencl-icd"):
        _device.get_context()
    monkeypatch.setattr(cl, "get_platforms", lambda: [])
    with pytest.raises(OpenCLUnavailable, match="pocl-opencl-icd"):
        _device.list_devices()


def test_device_choice_by_index_name_and_environment(cctx, monkeypatch):
    from tensorlayout.opencl import ENV_VAR, get_context, list_devices

    infos = list_devices()
    assert infos[0].max_image_size == (cctx.device.image2d_max_width, cctx.device.image2d_max_height)
    assert get_context(0) is get_context() or get_context(0).info.index == 0
    assert get_context(cctx.info.name[:6]).info.name == infos[
        next(i.index for i in infos if cctx.info.name[:6].lower() in (i.name + i.platform).lower())].name
    assert get_context(f"{cctx.info.platform[:4]}:{cctx.info.name[:4]}").info.index == cctx.info.index
    monkeypatch.setenv(ENV_VAR, str(cctx.info.index))
    assert get_context().info.index == cctx.info.index
    with pytest.raises(LayoutError, match="matches no OpenCL device"):
        get_context("no-such-device-anywhere")
    with pytest.raises(LayoutError, match="indices"):
        get_context(len(infos))


@pytest.mark.parametrize("kind,shape,kw", [
    ("IN_OUT_CHANNEL", (1, 130, 64, 127), {"layout": "NCHW"}),   # padding lanes
    ("IN_OUT_CHANNEL", (1, 64, 128, 128), {}),                    # no padding: checks compiled out
    ("CONV2D_FILTER", (260, 509, 3, 3), {}),
], ids=["act-NCHW", "act-NHWC-full", "filter"])
@pytest.mark.parametrize("path", PATHS)
def test_large_tensors_use_the_specialised_kernel_and_match(cctx, kind, shape, kw, path):
    from tensorlayout.opencl import from_cl_image, to_cl_image
    from tensorlayout.opencl.transfer import SPECIALIZE_MIN

    assert np.prod(shape) >= SPECIALIZE_MIN
    a = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    for dtype in (np.float32, np.float16):
        img = to_cl_image(cctx.queue, a, kind, dtype=dtype, path=path, **kw)
        assert same_bytes(read_pixels(cctx.queue, img), to_image(a, kind, dtype=dtype, **kw))
        assert same_bytes(from_cl_image(cctx.queue, img, kind, shape, path=path, **kw), a.astype(dtype))


def test_paths_device_rule_events_and_bad_path(cctx):
    from tensorlayout.image import image_shape
    from tensorlayout.opencl import (choose_path, empty_image, enqueue_buffer_to_image,
                                     enqueue_image_to_buffer, to_cl_image)

    assert choose_path(_with_kind(cctx, "CPU")) == "staged"
    assert choose_path(_with_kind(cctx, "GPU")) == "direct"
    shape = (1, 3, 5, 6)
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    buf = cl.Buffer(cctx.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    img = empty_image(cctx.queue, *image_shape("IN_OUT_CHANNEL", shape))
    evs = enqueue_buffer_to_image(cctx.queue, buf, img, "IN_OUT_CHANNEL", shape, path="staged",
                                  all_events=True)
    assert len(evs) == 2
    evs[-1].wait()
    assert same_bytes(read_pixels(cctx.queue, img), to_image(a, "IN_OUT_CHANNEL"))
    out = cl.Buffer(cctx.context, cl.mem_flags.READ_WRITE, a.nbytes)
    assert len(enqueue_image_to_buffer(cctx.queue, img, out, "IN_OUT_CHANNEL", shape, path="direct",
                                       all_events=True)) == 1
    back = np.empty_like(a)
    cl.enqueue_copy(cctx.queue, back, out).wait()
    assert same_bytes(back, a)
    with pytest.raises(LayoutError, match="path = 'fast'"):
        to_cl_image(cctx.queue, a, "IN_OUT_CHANNEL", path="fast")
    with pytest.raises(LayoutError, match="path = 'fast'"):
        enqueue_buffer_to_image(cctx.queue, buf, img, "IN_OUT_CHANNEL", shape, path="fast")
    with pytest.raises(LayoutError, match="kind = WINOGRAD_FILTER is not allowed here: its buffer side "
                                          "is the transformed filter U"):
        enqueue_buffer_to_image(cctx.queue, buf, img, "WINOGRAD_FILTER", (3, 5, 3, 3))


def _with_kind(cctx, kind):
    import dataclasses

    fake = type("C", (), {})()
    fake.info = dataclasses.replace(cctx.info, kind=kind)
    return fake


def test_cli_devices_roundtrip_conv_and_demo(cctx, capsys, tmp_path):
    from tensorlayout.cli import Tour, main
    from tensorlayout.cli_parts import opencl as part

    assert main(["opencl", "devices"]) == 0
    assert cctx.info.name in capsys.readouterr().out
    assert main(["opencl", "roundtrip", "WINOGRAD_FILTER", "--shape", "5,6,3,3", "--tile", "4"]) == 0
    assert main(["opencl", "roundtrip", "IN_OUT_WIDTH", "--shape", "1,3,9,5", "--layout", "NCHW", "--half"]) == 0
    out = capsys.readouterr().out
    assert out.count(": yes") == 4 and ": NO" not in out
    assert main(["opencl", "conv", "--input", "1,4,6,6", "--out-channels", "3", "--tile", "2"]) == 0
    err = float(capsys.readouterr().out.split("convolution: ")[1].split()[0])
    assert err < 1e-5
    w = cctx.info.max_image_size[0] + 1
    assert main(["opencl", "roundtrip", "IN_OUT_CHANNEL", "--shape", f"1,1,{w},1"]) == 2
    assert "past the device maximum" in capsys.readouterr().err
    import io
    buf = io.StringIO()
    part.demo(Tour(str(tmp_path), stream=buf))
    text = buf.getvalue()
    assert cctx.info.name in text and "byte for byte: yes" in text and ": NO" not in text
