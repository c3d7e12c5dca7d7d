"""OpenCL devices: finding one, describing it, and a context that compiles each program once.

PyOpenCL is imported lazily, so ``import tensorlayout.opencl`` works without it; the
first call that needs a device raises :class:`~tensorlayout.errors.OpenCLUnavailable`
with a hint when PyOpenCL or an OpenCL platform is missing.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from importlib import resources

import numpy as np

from .. import _backend
from ..errors import DeviceLimitError, LayoutError, OpenCLUnavailable

ENV_VAR = "TENSORLAYOUT_CL_DEVICE"

_HINT = ("install an OpenCL runtime: PoCL for the CPU (Debian/Ubuntu package 'pocl-opencl-icd') "
         "or your GPU vendor's driver")


def cl():
    """The ``pyopencl`` module, or OpenCLUnavailable saying how to get it."""
    pyopencl, why = _backend.pyopencl()
    if pyopencl is None:  # pragma: no cover - depends on the environment
        raise OpenCLUnavailable(
            f"PyOpenCL is not installed ({why}): install the 'opencl' extra, "
            "pip install 'tensorlayout[opencl]', and " + _HINT)
    return pyopencl


def all_devices():
    """Every ``(platform, device)`` pair, in platform order then device order."""
    pcl = cl()
    try:
        platforms = pcl.get_platforms()
    except pcl.Error as exc:
        raise OpenCLUnavailable(f"no OpenCL platform is available ({exc}): " + _HINT) from None
    out = []
    for p in platforms:
        try:
            devs = p.get_devices()
        except pcl.Error:
            continue
        out.extend((p, d) for d in devs)
    if not out:
        raise OpenCLUnavailable("no OpenCL platform is available (no platform lists a device): " + _HINT)
    return out


@dataclass(frozen=True)
class DeviceInfo:
    """What tensorlayout needs to know about a device, read from the device itself."""

    index: int
    platform: str
    name: str
    kind: str
    version: str
    max_image_size: tuple[int, int]   # (CL_DEVICE_IMAGE2D_MAX_WIDTH, _HEIGHT)
    image_support: bool
    fp16_compute: bool                 # cl_khr_fp16
    half_images: bool                  # CL_RGBA / CL_HALF_FLOAT is a supported image format
    float_images: bool                 # CL_RGBA / CL_FLOAT
    max_alloc: int                     # CL_DEVICE_MAX_MEM_ALLOC_SIZE in bytes
    compute_units: int

    @property
    def is_gpu(self) -> bool:
        """True for a GPU (``kind`` lists the device's types, "/"-separated)."""
        return "GPU" in self.kind.split("/")

    def describe(self) -> str:
        w, h = self.max_image_size
        return (f"[{self.index}] {self.name} ({self.platform}; {self.kind}): images up to "
                f"{w} x {h}, half images {'yes' if self.half_images else 'no'}, "
                f"cl_khr_fp16 {'yes' if self.fp16_compute else 'no'}")


def _rgba_types(pcl, ctx) -> set:
    try:
        fmts = pcl.get_supported_image_formats(ctx, pcl.mem_flags.READ_WRITE,
                                               pcl.mem_object_type.IMAGE2D)
    except pcl.Error:
        return set()
    return {f.channel_data_type for f in fmts if f.channel_order == pcl.channel_order.RGBA}


def _info(index, platform, device, ctx) -> DeviceInfo:
    pcl = cl()
    types = _rgba_types(pcl, ctx) if device.image_support else set()
    kinds = []
    for flag in ("GPU", "CPU", "ACCELERATOR"):
        if device.type & getattr(pcl.device_type, flag):
            kinds.append(flag)
    return DeviceInfo(
        index=index, platform=platform.name.strip(), name=device.name.strip(),
        kind="/".join(kinds) or "OTHER", version=device.version.strip(),
        max_image_size=(int(device.image2d_max_width), int(device.image2d_max_height)),
        image_support=bool(device.image_support),
        fp16_compute="cl_khr_fp16" in device.extensions.split(),
        half_images=pcl.channel_type.HALF_FLOAT in types,
        float_images=pcl.channel_type.FLOAT in types,
        max_alloc=int(device.max_mem_alloc_size),
        compute_units=int(device.max_compute_units))


def list_devices() -> list[DeviceInfo]:
    """Describe every OpenCL device: image limits and half support, read from each device.

    >>> infos = list_devices()
    >>> w, h = infos[0].max_image_size          # PoCL: (8192, 8192); an H100: (32768, 32768)
    >>> w >= 8192 and h >= 8192
    True
    """
    pcl = cl()
    out = []
    for i, (p, d) in enumerate(all_devices()):
        ctx = pcl.Context([d])
        out.append(_info(i, p, d, ctx))
    return out


def _pick(spec):
    """Resolve a device choice: None, an index, 'substring' or 'platform-substring:device-substring'."""
    pairs = all_devices()
    if spec is None:
        spec = os.environ.get(ENV_VAR) or None
        if spec is None:
            return 0, pairs[0]
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        i = int(spec)
        if not 0 <= i < len(pairs):
            raise LayoutError(f"device = {spec} is not allowed: there are {len(pairs)} OpenCL "
                              f"device(s), indices 0..{len(pairs) - 1}")
        return i, pairs[i]
    if not isinstance(spec, str):
        raise LayoutError(f"device = {spec!r} is not allowed: give an index, a name substring or "
                          "'platform:device' substrings")
    text = spec.strip()
    if text.isdigit():
        return _pick(int(text))
    if ":" in text:
        ps, ds = (t.strip().lower() for t in text.split(":", 1))
        match = lambda p, d: ps in p.name.lower() and ds in d.name.lower()  # noqa: E731
    else:
        s = text.lower()
        match = lambda p, d: any(s in t.lower() for t in (  # noqa: E731
            d.name, p.name, p.vendor, p.version, d.vendor))
    for i, (p, d) in enumerate(pairs):
        if match(p, d):
            return i, (p, d)
    names = "; ".join(f"[{i}] {p.name.strip()}: {d.name.strip()}" for i, (p, d) in enumerate(pairs))
    raise LayoutError(f"device = {spec!r} matches no OpenCL device: the devices are {names}")


class CLContext:
    """One device, its context, a profiling-enabled queue and the compiled programs.

    Programs are built once per context and kept (PoCL compiles slowly).  Get one with
    :func:`get_context`; pass ``ctx.queue`` to :func:`~tensorlayout.opencl.to_cl_image`.
    """

    def __init__(self, context, device, info: DeviceInfo):
        pcl = cl()
        self.context = context
        self.device = device
        self.info = info
        self.queue = pcl.CommandQueue(
            context, device, properties=pcl.command_queue_properties.PROFILING_ENABLE)
        self._programs: dict = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CLContext({self.info.name!r} on {self.info.platform!r})"

    def program(self, source_name: str, options: tuple[str, ...] = (), source: str | None = None):
        """The built program of ``source_name`` (a .cl file of this package) with ``options``."""
        key = (source_name, tuple(options), source)
        with self._lock:
            prg = self._programs.get(key)
            if prg is None:
                text = source if source is not None else read_source(source_name)
                prg = cl().Program(self.context, text).build(options=list(options))
                self._programs[key] = prg
            return prg

    def kernel(self, source_name: str, name: str, options: tuple[str, ...] = (),
               source: str | None = None):
        """The kernel ``name`` of :meth:`program`, made once and reused."""
        key = (source_name, tuple(options), source, name)
        got = self._programs.get(key)
        if got is None:
            got = cl().Kernel(self.program(source_name, options, source), name)
            with self._lock:
                self._programs[key] = got
        return got

    def staging_buffer(self, queue, nbytes: int):
        """A device buffer of at least ``nbytes``, kept per queue and grown when needed (the
        commands of one queue run in order, so one buffer serves them all)."""
        key = ("stage", queue.int_ptr)
        with self._lock:
            buf = self._programs.get(key)
            if buf is None or buf.size < nbytes:
                if buf is not None:
                    buf.release()
                buf = cl().Buffer(self.context, cl().mem_flags.READ_WRITE, max(nbytes, 16))
                self._programs[key] = buf
        return buf

    # ------------------------------------------------------------ limits
    def check_image(self, width: int, height: int, dtype) -> None:
        """Raise before allocating if the device cannot hold a ``width`` x ``height`` image of ``dtype``."""
        from ..image import check_image_limits

        info = self.info
        if not info.image_support:
            raise OpenCLUnavailable(f"device {info.name!r} has no image support (CL_DEVICE_IMAGE_SUPPORT "
                                    "is false): choose another device")
        dt = np.dtype(dtype)
        if dt == np.float16 and not info.half_images:
            raise OpenCLUnavailable(
                f"device {info.name!r} does not support CL_RGBA / CL_HALF_FLOAT images: use "
                "dtype=np.float32 or another device")
        if dt == np.float32 and not info.float_images:
            raise OpenCLUnavailable(f"device {info.name!r} does not support CL_RGBA / CL_FLOAT images")
        try:
            check_image_limits(width, height, info.max_image_size)
        except DeviceLimitError as exc:
            raise DeviceLimitError(f"{exc} on {info.name!r} (CL_DEVICE_IMAGE2D_MAX_WIDTH/HEIGHT = "
                                   f"{info.max_image_size[0]} / {info.max_image_size[1]})") from None
        nbytes = width * height * 4 * dt.itemsize
        if nbytes > info.max_alloc:
            raise DeviceLimitError(f"image of {nbytes} bytes is past the device's largest allocation "
                                   f"{info.max_alloc} (CL_DEVICE_MAX_MEM_ALLOC_SIZE) on {info.name!r}")

    def check_buffer(self, nbytes: int) -> None:
        if nbytes > self.info.max_alloc:
            raise DeviceLimitError(f"buffer of {nbytes} bytes is past the device's largest allocation "
                                   f"{self.info.max_alloc} (CL_DEVICE_MAX_MEM_ALLOC_SIZE) on "
                                   f"{self.info.name!r}")


_SOURCES: dict = {}
_CONTEXTS: dict = {}
_BY_CTX: dict = {}
_GLOBAL_LOCK = threading.Lock()


_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_]+\.cl)"[ \t]*$', re.M)


def read_source(name: str) -> str:
    """A .cl file of this package, with its ``#include "x.cl"`` lines replaced by those files."""
    text = _SOURCES.get(name)
    if text is None:
        text = resources.files(__package__).joinpath(name).read_text()
        text = _INCLUDE.sub(lambda m: read_source(m.group(1)), text)
        _SOURCES[name] = text
    return text


def get_context(device=None) -> CLContext:
    """The cached :class:`CLContext` for a device choice.

    ``device``: None (the ``TENSORLAYOUT_CL_DEVICE`` environment variable if set, else
    the first device of the first platform), an index into :func:`list_devices`, a
    substring of the device's or platform's name, vendor or version (``"pocl"``,
    ``"NVIDIA"``, ``"H100"``), or
    ``"platform:device"`` substrings.  A :class:`CLContext` is returned as is.

    >>> ctx = get_context()
    >>> ctx.info.name == list_devices()[0].name   # e.g. 'pthread-haswell-AMD EPYC' on PoCL
    True
    """
    if isinstance(device, CLContext):
        return device
    pcl = cl()
    index, (platform, dev) = _pick(device)
    with _GLOBAL_LOCK:
        got = _CONTEXTS.get(index)
        if got is None:
            ctx = pcl.Context([dev])
            got = CLContext(ctx, dev, _info(index, platform, dev, ctx))
            _CONTEXTS[index] = got
            _BY_CTX[ctx.int_ptr] = got
        return got


def context_of(queue) -> CLContext:
    """The :class:`CLContext` that owns ``queue`` (made and cached on first use of a foreign queue)."""
    pcl = cl()
    if isinstance(queue, CLContext):
        return queue
    if not isinstance(queue, pcl.CommandQueue):
        raise LayoutError(f"queue = {queue!r} is not allowed: it must be a pyopencl.CommandQueue "
                          "(for example get_context().queue)")
    ctx = queue.context
    with _GLOBAL_LOCK:
        got = _BY_CTX.get(ctx.int_ptr)
        if got is None:
            dev = queue.device
            pairs = all_devices()
            index = next((i for i, (_, d) in enumerate(pairs) if d == dev), -1)
            platform = dev.platform
            got = CLContext.__new__(CLContext)
            got.context, got.device = ctx, dev
            got.info = _info(index, platform, dev, ctx)
            got.queue = queue
            got._programs, got._lock = {}, threading.Lock()
            _BY_CTX[ctx.int_ptr] = got
        return got
