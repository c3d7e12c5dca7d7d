"""A layer planner: place a convolution's input, 2IC weights, bias and output in NPU local memory.

When the whole working set does not fit one NPU's local memory, the output is cut into slices
along H (each input slice carries its halo), batch and output channels, choosing the fewest
slices (then the fewest GDMA bytes). The plan is a list of GDMA loads, BDC convolutions and GDMA
stores; :func:`run_conv_plan` executes it on Sophgo's simulator.

>>> plan = plan_conv((1, 64, 56, 56), 64, 3)
>>> plan.slices_count, plan.output_shape
(1, (1, 64, 56, 56))
>>> big = plan_conv((8, 256, 56, 56), 256, 3)      # 2 x 4 images: each half fills 85% of an NPU
>>> big.split, big.fits, big.gdma_bytes == big.minimum_gdma_bytes
((2, 1, 1), True, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._checks import pair
from ..errors import ConvolutionError, FootprintError, LayoutError, check_positive_int
from .chip import BM1684, Chip

__all__ = ["ConvSlice", "Buffer", "ConvPlan", "plan_conv", "run_conv_plan", "timeline_svg"]

_E = 4  # fp32
#: Most output channels and images one convolution instruction takes (its 12- and 16-bit fields).
_MOST_K, _MOST_N = (1 << 12) - 1, (1 << 16) - 1
#: Most slices a plan is cut into: a layer that needs more is refused, not planned for minutes.
MAX_SLICES = 4096


@dataclass(frozen=True)
class ConvSlice:
    """One piece of the output: batch ``[n0, n1)``, output channels ``[k0, k1)``, output rows ``[h0, h1)``,
    computed from input rows ``[ih0, ih1)`` with ``pad_top`` / ``pad_bottom`` zero rows around them."""

    n0: int
    n1: int
    k0: int
    k1: int
    h0: int
    h1: int
    ih0: int
    ih1: int
    pad_top: int
    pad_bottom: int


@dataclass(frozen=True)
class Buffer:
    """A local-memory buffer of the plan: ``name``, the largest shape it holds, offset and bytes per NPU."""

    name: str
    shape: tuple[int, int, int, int]
    offset: int
    bytes: int

    @property
    def end(self) -> int:
        return self.offset + self.bytes


@dataclass
class ConvPlan:
    """What :func:`plan_conv` decided; ``steps`` lists ``(kind, buffer, slice index, bytes)``."""

    chip: Chip
    input_shape: tuple[int, int, int, int]
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    bias: bool
    output_shape: tuple[int, int, int, int]
    split: tuple[int, int, int]          # slices along (batch, output channels, H)
    slices: list[ConvSlice]
    buffers: dict[str, Buffer]
    weights_outer: bool                 # loop order: weight slices outside the input slices
    steps: list[tuple[str, str, int, int]] = field(default_factory=list)

    @property
    def slices_count(self) -> int:
        return len(self.slices)

    @property
    def fits(self) -> bool:
        return max(b.end for b in self.buffers.values()) <= self.chip.lmem_bytes

    @property
    def bytes_per_npu(self) -> int:
        """Local bytes per NPU the buffers take (from offset 0 to the end of the last)."""
        return max(b.end for b in self.buffers.values())

    @property
    def gdma_bytes(self) -> int:
        """Bytes the plan's GDMA copies move (loads and stores)."""
        return sum(b for kind, _, _, b in self.steps if kind in ("load", "store"))

    @property
    def minimum_gdma_bytes(self) -> int:
        """Each input, weight (2IC-packed), bias and output byte moved once."""
        n, c, h, w = self.input_shape
        k, (kh, kw) = self.out_channels, self.kernel
        return _E * (n * c * h * w + 2 * -(-c // 2) * k * kh * kw + (k if self.bias else 0)
                     + math.prod(self.output_shape))

    def describe(self) -> list[str]:
        """The plan as text lines (what ``tensorlayout npu plan-conv`` prints)."""
        n, c, h, w = self.input_shape
        out = [f"layer       conv {self.kernel[0]}x{self.kernel[1]}, input {self.input_shape} -> output "
               f"{self.output_shape}, stride {self.stride}, padding {self.padding}, dilation {self.dilation}"
               + ("" if self.bias else ", no bias"),
               f"chip        {self.chip.name}: {self.chip.npus} NPUs x {self.chip.lmem_bytes} bytes",
               f"split       {self.split[0]} batch x {self.split[1]} output-channel x {self.split[2]} row slices"
               f" = {self.slices_count} slice{'s' * (self.slices_count > 1)}"
               + (", weights loaded once per weight slice (outer loop)" if self.weights_outer
                  else ", inputs loaded once per input slice (outer loop)"),
               "buffers     (all start at NPU 0; bytes per NPU)"]
        for b in self.buffers.values():
            out.append(f"  {b.name:<8}  {str(b.shape):<22} offsets [{b.offset}, {b.end})  {b.bytes} bytes")
        shown = self.slices if len(self.slices) <= 8 else self.slices[:4] + [None] + self.slices[-3:]
        for i, sl in enumerate(shown):
            if sl is None:
                out.append(f"  ... {len(self.slices) - 7} more slices")
                continue
            j = self.slices.index(sl)
            out.append(f"  slice {j:<3} n [{sl.n0}, {sl.n1}) k [{sl.k0}, {sl.k1}) output rows [{sl.h0}, {sl.h1}) "
                       f"<- input rows [{sl.ih0}, {sl.ih1}), padding top {sl.pad_top} bottom {sl.pad_bottom}")
        out.append(f"local       {self.bytes_per_npu} of {self.chip.lmem_bytes} bytes per NPU "
                   f"({100 * self.bytes_per_npu / self.chip.lmem_bytes:.1f}%)")
        g, m = self.gdma_bytes, self.minimum_gdma_bytes
        out.append(f"GDMA        {g} bytes moved, minimum {m} ({g / m:.3f}x)")
        out.append(f"steps       {sum(s[0] == 'load' for s in self.steps)} loads, "
                   f"{sum(s[0] == 'conv' for s in self.steps)} convolutions, "
                   f"{sum(s[0] == 'store' for s in self.steps)} stores")
        return out


# --------------------------------------------------------------- footprints
def _cpn(chip, c):
    return -(-c // chip.npus)


def _aligned_bytes(chip, n, c, h, w):
    step = chip.align_bytes // _E
    cs = -(-(h * w) // step) * step
    return _E * ((n - 1) * cs * _cpn(chip, c) + (_cpn(chip, c) - 1) * cs + h * w)


def _weight_bytes(chip, c, k, kh, kw):
    # 2IC compact from NPU 0, in 8-byte words: (ceil(C/2), k, kh, kw) with strides (kh*kw*cpn, kh*kw, kw, 1)
    cs = kh * kw
    return 8 * ((-(-c // 2) - 1) * cs * _cpn(chip, k) + (_cpn(chip, k) - 1) * cs + cs)


def _round(chip, b):
    return -(-b // chip.align_bytes) * chip.align_bytes


def _in_rows(oh, sh, ext):
    return (oh - 1) * sh + ext


def _footprint(chip, c, h, w, wo, kh, kw, sh, ext_h, bias, ns, ks, hs):
    """Bytes per NPU of the four buffers for a slice of ns batch x ks channels x hs output rows."""
    return (_round(chip, _aligned_bytes(chip, ns, c, min(_in_rows(hs, sh, ext_h), h), w))
            + _round(chip, _weight_bytes(chip, c, ks, kh, kw))
            + (_round(chip, _E * _cpn(chip, ks)) if bias else 0)
            + _round(chip, _aligned_bytes(chip, ns, ks, hs, wo)))


def _pad4(padding):
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        return (int(padding),) * 4
    p = tuple(padding)
    p = (p[0], p[0], p[1], p[1]) if len(p) == 2 else p
    if len(p) != 4 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in p):
        raise ConvolutionError(f"padding = {padding!r} is not allowed: it must be an integer, (h, w) or "
                               "(top, bottom, left, right) >= 0")
    return tuple(int(v) for v in p)


def plan_conv(input_shape, out_channels: int, kernel, stride=1, padding=None, dilation=1,
              bias: bool = True, chip: Chip = BM1684) -> ConvPlan:
    """Plan an fp32 convolution of ``input_shape`` (N, C, H, W) into ``out_channels`` on ``chip``.

    ``padding=None`` means "same" for odd kernels: ``dilation * (k - 1) // 2`` on each side.
    Raises :class:`~tensorlayout.errors.FootprintError` when not even one output row of one
    image and one output channel fits, or when the layer needs more than :data:`MAX_SLICES`
    slices, and ConvolutionError for limits of the instruction (stride and padding at most 15,
    at most 4095 input channels, padded width below 2048). A slice holds at most 4095 output
    channels and 65535 images, what one instruction takes.

    >>> p = plan_conv((4, 3, 300, 300), 2, 3)          # 2 images x 100 rows per slice
    >>> p.output_shape, p.split, [(s.ih0, s.ih1, s.pad_top, s.pad_bottom) for s in p.slices[:3]]
    ((4, 2, 300, 300), (2, 1, 3), [(0, 101, 1, 0), (99, 201, 0, 0), (199, 300, 0, 1)])
    """
    if not isinstance(chip, Chip):
        raise LayoutError(f"chip = {chip!r} is not allowed: it must be a Chip")
    if isinstance(input_shape, (str, bytes)) or len(tuple(input_shape)) != 4:
        raise ConvolutionError(f"input_shape = {input_shape!r} is not allowed: it must be (N, C, H, W)")
    n, c, h, w = (check_positive_int(f"input_shape[{i}]", v) for i, v in enumerate(input_shape))
    k = check_positive_int("out_channels", out_channels)
    kh, kw = pair("kernel", kernel)
    sh, sw = pair("stride", stride)
    dh, dw = pair("dilation", dilation)
    pad = ((dh * (kh - 1) // 2,) * 2 + (dw * (kw - 1) // 2,) * 2) if padding is None else _pad4(padding)
    ext_h, ext_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    ho = (h + pad[0] + pad[1] - ext_h) // sh + 1
    wo = (w + pad[2] + pad[3] - ext_w) // sw + 1
    if ho < 1 or wo < 1:
        raise ConvolutionError(f"input {h}x{w} with kernel {kh}x{kw}, padding {pad} and dilation ({dh}, {dw}) "
                               "leaves no output")
    for name, vals in (("stride", (sh, sw)), ("padding", pad)):
        if max(vals) > 15:
            raise ConvolutionError(f"{name} = {vals} is not allowed: the convolution instruction holds at most 15")
    if max(dh, dw) > 16:
        raise ConvolutionError(f"dilation = {(dh, dw)} is not allowed: the convolution instruction holds at most 16")
    if c >= 4096:
        raise ConvolutionError(f"input channels = {c} is not allowed: the convolution instruction holds at most 4095")
    if w + pad[2] + pad[3] >= 2048:
        raise ConvolutionError(f"input width {w} with padding {pad[2:]} is not allowed: the padded width must "
                               "stay below 2048 (the planner splits along H only)")
    fewest = -(-n // _MOST_N) * -(-k // _MOST_K)
    if fewest > MAX_SLICES:
        raise FootprintError(
            f"input_shape = {(n, c, h, w)} with {k} output channels is not allowed: a slice holds at most "
            f"{_MOST_K} output channels and {_MOST_N} images, so it needs at least {fewest} slices, more "
            f"than the planner's {MAX_SLICES}")
    fp = lambda ns, ks, hs: _footprint(chip, c, h, w, wo, kh, kw, sh, ext_h, bias, ns, ks, hs)  # noqa: E731
    best = None
    for ns in _slice_sizes(n, _MOST_N):
        nb = -(-n // ns)
        for ks in _slice_sizes(k, _MOST_K):
            kb = -(-k // ks)
            if best is not None and nb * kb > best[0]:
                break
            # the most output rows that fit (footprint grows with rows); the input slice stays < 2048 rows
            lo, hi = 0, ho
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if fp(ns, ks, mid) <= chip.lmem_bytes and _in_rows(mid, sh, ext_h) < 2048:
                    lo = mid
                else:
                    hi = mid - 1
            if lo == 0:
                continue
            hb = -(-ho // lo)
            hs = -(-ho // hb)  # even rows per slice
            count = nb * kb * hb
            if count > MAX_SLICES:
                continue
            key = (count, _moved(n, c, h, w, k, kh, kw, ho, wo, bias, nb, kb, hb, sh, ext_h, pad[0]))
            if best is None or key < best[:2]:
                best = (count, key[1], ns, ks, hs)
    if best is None and fp(1, 1, 1) <= chip.lmem_bytes:
        raise FootprintError(
            f"input_shape = {(n, c, h, w)} with {k} output channels and kernel {kh}x{kw} is not allowed: "
            f"the slices that fit one NPU are more than the planner's {MAX_SLICES}")
    if best is None:
        raise FootprintError(
            f"input_shape = {(n, c, h, w)} with kernel {kh}x{kw} does not fit: even one image, one output "
            f"channel and one output row need {fp(1, 1, 1)} bytes per NPU, more than {chip.lmem_bytes}")
    _, (moved, weights_outer), ns, ks, hs = best
    slices = []
    for n0 in range(0, n, ns):
        for k0 in range(0, k, ks):
            for h0 in range(0, ho, hs):
                h1 = min(h0 + hs, ho)
                top, bottom = h0 * sh - pad[0], (h1 - 1) * sh - pad[0] + ext_h
                slices.append(ConvSlice(n0, min(n0 + ns, n), k0, min(k0 + ks, k), h0, h1,
                                        max(top, 0), min(bottom, h), max(-top, 0), max(bottom - h, 0)))
    offset, buffers = 0, {}
    rows = min(_in_rows(hs, sh, ext_h), h)
    sizes = (("input", (ns, c, rows, w), _aligned_bytes(chip, ns, c, rows, w)),
             ("weight", (-(-c // 2), ks, kh, kw), _weight_bytes(chip, c, ks, kh, kw)),
             *((("bias", (1, ks, 1, 1), _E * _cpn(chip, ks)),) if bias else ()),
             ("output", (ns, ks, hs, wo), _aligned_bytes(chip, ns, ks, hs, wo)))
    for name, shape, nbytes in sizes:
        buffers[name] = Buffer(name, shape, offset, nbytes)
        offset = _round(chip, offset + nbytes)
    plan = ConvPlan(chip, (n, c, h, w), k, (kh, kw), (sh, sw), pad, (dh, dw), bool(bias), (n, k, ho, wo),
                    (-(-n // ns), -(-k // ks), -(-ho // hs)), slices, buffers, weights_outer)
    plan.steps = _steps(plan)
    return plan


def _slice_sizes(total: int, most: int) -> list[int]:
    """The distinct sizes ceil(total / b) of b even slices, largest first, at most ``most``:
    found in O(sqrt(total)) steps, not one per b.

    >>> _slice_sizes(10, 4)
    [4, 3, 2, 1]
    """
    sizes, b = [], 1
    while True:
        size = -(-total // b)
        if size <= most:
            sizes.append(size)
        if size == 1:
            return sizes
        b = -(-total // (size - 1))        # the fewest slices with a smaller size


def _moved(n, c, h, w, k, kh, kw, ho, wo, bias, nb, kb, hb, sh, ext_h, pad_top):
    """(GDMA bytes, weights_outer) of the better loop order for an (nb, kb, hb) split."""
    hs = -(-ho // hb)
    rows = sum(min((min(h0 + hs, ho) - 1) * sh - pad_top + ext_h, h) - max(h0 * sh - pad_top, 0)
               for h0 in range(0, ho, hs))  # input rows of all H slices, halos included
    inputs = _E * n * c * rows * w
    weights = _E * (2 * -(-c // 2) * k * kh * kw + (k if bias else 0))
    out = _E * n * k * ho * wo
    inner = -(-n // -(-n // nb)) * hb  # input slices
    w_outer = out + weights + (kb if inner > 1 else 1) * inputs
    i_outer = out + inputs + (inner if kb > 1 else 1) * weights
    return min((w_outer, True), (i_outer, False))


def _steps(plan: ConvPlan):
    n, c, h, w = plan.input_shape
    kh, kw = plan.kernel
    wo = plan.output_shape[3]
    steps = []
    loaded_in = loaded_w = None
    order = sorted(range(len(plan.slices)), key=lambda i: (
        (plan.slices[i].k0, plan.slices[i].n0, plan.slices[i].h0) if plan.weights_outer
        else (plan.slices[i].n0, plan.slices[i].h0, plan.slices[i].k0)))
    for i in order:
        s = plan.slices[i]
        if loaded_w != (s.k0, s.k1):
            steps.append(("load", "weight", i, _E * 2 * -(-c // 2) * (s.k1 - s.k0) * kh * kw))
            if plan.bias:
                steps.append(("load", "bias", i, _E * (s.k1 - s.k0)))
            loaded_w = (s.k0, s.k1)
        if loaded_in != (s.n0, s.n1, s.ih0, s.ih1):
            steps.append(("load", "input", i, _E * (s.n1 - s.n0) * c * (s.ih1 - s.ih0) * w))
            loaded_in = (s.n0, s.n1, s.ih0, s.ih1)
        steps.append(("conv", "output", i, 0))
        steps.append(("store", "output", i, _E * (s.n1 - s.n0) * (s.k1 - s.k0) * (s.h1 - s.h0) * wo))
    return steps


# ---------------------------------------------------------------- running
def run_conv_plan(plan: ConvPlan, x, weight, bias=None, mem=None) -> np.ndarray:
    """Run ``plan`` on Sophgo's simulator: GDMA loads, ``okk_bdc_conv2d`` per slice, GDMA stores.

    ``x`` is NCHW fp32, ``weight`` OIHW, ``bias`` K values (when the plan has a bias). The host packs
    the weights in the 2IC mode into system memory (as an OKKernel host program does); everything
    else moves by GDMA. Returns the NCHW output read back from system memory.
    """
    from . import bdc
    from .memory import LocalMemory
    from .tensor import compact_stride, tensor_layout

    if plan.chip != BM1684:
        raise LayoutError(f"plan chip = {plan.chip.name} is not allowed: the simulator is a BM1684")
    n, c, h, w = plan.input_shape
    k, (kh, kw) = plan.out_channels, plan.kernel
    x = np.ascontiguousarray(x, dtype=np.float32)
    weight = np.ascontiguousarray(weight, dtype=np.float32)
    if x.shape != plan.input_shape:
        raise ConvolutionError(f"x shape = {x.shape} is not allowed: the plan is for {plan.input_shape}")
    if weight.shape != (k, c, kh, kw):
        raise ConvolutionError(f"weight shape = {weight.shape} is not allowed: the plan needs {(k, c, kh, kw)}")
    if plan.bias:
        if bias is None or np.asarray(bias).size != k:
            raise ConvolutionError(f"bias = {bias!r} is not allowed: the plan needs {k} bias values")
        bias = np.ascontiguousarray(bias, dtype=np.float32).reshape(1, k, 1, 1)
    elif bias is not None:
        raise ConvolutionError("bias is not allowed: the plan was made with bias=False")
    c2 = -(-c // 2)
    w2ic = np.zeros((c2, k, kh, kw, 2), np.float32)  # [I/2, O, kh, kw, 2]: 2 input channels per word
    wt = weight.transpose(1, 0, 2, 3)
    w2ic[: c // 2, ..., 0] = wt[0:c - c % 2:2]
    w2ic[: c // 2, ..., 1] = wt[1:c - c % 2:2]
    if c % 2:
        w2ic[c2 - 1, ..., 0] = wt[c - 1]
    ho, wo = plan.output_shape[2:]
    sys_x, sys_w = 0, x.nbytes
    sys_b = sys_w + w2ic.nbytes
    sys_y = sys_b + (bias.nbytes if plan.bias else 0)
    need = sys_y + _E * n * k * ho * wo
    if mem is None:
        mem = LocalMemory(BM1684, system_bytes=need, backend="cmodel")
    elif mem.simulator is None or mem.system_bytes < need:
        raise LayoutError(f"mem = {mem!r} is not allowed: it must be a cmodel-backed LocalMemory with at "
                          f"least {need} bytes of system memory")
    mem.write_system(sys_x, x)
    mem.write_system(sys_w, w2ic.reshape(c2, k, kh, kw * 2))
    if plan.bias:
        mem.write_system(sys_b, bias)
    buf = plan.buffers
    for kind, name, i, _ in plan.steps:
        s = plan.slices[i]
        ns, ks, hs, rows = s.n1 - s.n0, s.k1 - s.k0, s.h1 - s.h0, s.ih1 - s.ih0
        if kind == "load" and name == "weight":
            ws = compact_stride(BM1684, (c2, ks, kh, kw), 0, mode="2IC")
            mem.gdma_s2l(buf["weight"].offset, sys_w + _E * s.k0 * kh * kw * 2, (c2, ks, kh, kw * 2), "fp32",
                         dst_stride=(2 * ws[0], 2 * ws[1], 2 * kw, 1),
                         src_stride=(k * kh * kw * 2, kh * kw * 2, kw * 2, 1))
        elif kind == "load" and name == "bias":
            mem.gdma_s2l(buf["bias"].offset, sys_b + _E * s.k0, (1, ks, 1, 1), "fp32",
                         dst_stride=compact_stride(BM1684, (1, ks, 1, 1), 0))
        elif kind == "load":
            mem.gdma_s2l(buf["input"].offset, sys_x + _E * (s.n0 * c * h * w + s.ih0 * w), (ns, c, rows, w),
                         "fp32", src_stride=(c * h * w, h * w, w, 1))
        elif kind == "conv":
            xt = tensor_layout(BM1684, buf["input"].offset, (ns, c, rows, w))
            wt2 = tensor_layout(BM1684, buf["weight"].offset, (c, ks, kh, kw),
                                stride=compact_stride(BM1684, (c, ks, kh, kw), 0, mode="2IC"), mode="2IC")
            bt = tensor_layout(BM1684, buf["bias"].offset, (1, ks, 1, 1), layout="compact") if plan.bias else None
            yt = tensor_layout(BM1684, buf["output"].offset, (ns, ks, hs, wo))
            bdc.conv2d(mem, yt, xt, wt2, bt, padding=(s.pad_top, s.pad_bottom) + plan.padding[2:],
                       stride=plan.stride, dilation=plan.dilation)
        else:
            mem.gdma_l2s(sys_y + _E * ((s.n0 * k + s.k0) * ho * wo + s.h0 * wo), buf["output"].offset,
                         (ns, ks, hs, wo), "fp32", dst_stride=(k * ho * wo, ho * wo, wo, 1))
    return mem.read_system(sys_y, plan.output_shape, "fp32")


# ---------------------------------------------------------------- timeline
_COLORS = {"input": "#4e79a7", "weight": "#f28e2b", "bias": "#59a14f", "output": "#e15759"}


def timeline_svg(plan: ConvPlan, width: int = 900, height: int = 360) -> str:
    """The plan's local-memory timeline as SVG: one column per step, local offsets (bytes per NPU)
    upwards; a buffer's band is filled where a step writes it (GDMA load, BDC output), outlined where
    a step reads it (the convolution reads input, weight and bias; the store reads the output)."""
    steps = plan.steps
    left, top, bottom = 70, 30, 40
    plot_w, plot_h = width - left - 150, height - top - bottom
    S = plan.chip.lmem_bytes
    col = plot_w / max(len(steps), 1)
    y = lambda off: top + plot_h * (1 - off / S)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#999"/>',
             f'<text x="{left}" y="18">local memory per NPU over the plan\'s {len(steps)} steps '
             f'({plan.slices_count} slices, {plan.bytes_per_npu} of {S} bytes)</text>']
    for frac in (0, 0.25, 0.5, 0.75, 1):
        off = int(S * frac)
        parts.append(f'<text x="{left - 6}" y="{y(off) + 4:.1f}" text-anchor="end">{off // 1024} KiB</text>')
    for i, (kind, name, _, _) in enumerate(steps):
        x0 = left + i * col
        touched = [name] if kind != "conv" else ["input", "weight", "bias", "output"]
        for b in touched:
            if b not in plan.buffers:
                continue
            buf = plan.buffers[b]
            filled = kind == "load" or (kind == "conv" and b == "output")
            style = (f'fill="{_COLORS[b]}"' if filled else f'fill="none" stroke="{_COLORS[b]}"')
            parts.append(f'<rect x="{x0:.2f}" y="{y(buf.end):.2f}" width="{max(col - 0.5, 0.5):.2f}" '
                         f'height="{max(y(buf.offset) - y(buf.end), 0.5):.2f}" {style}><title>{kind} {b} '
                         f'(step {i})</title></rect>')
    parts.append(f'<text x="{left}" y="{height - 12}">steps: GDMA load, BDC conv, GDMA store</text>')
    for j, (b, color) in enumerate(_COLORS.items()):
        if b in plan.buffers:
            buf = plan.buffers[b]
            yy = top + 16 * j
            parts.append(f'<rect x="{left + plot_w + 12}" y="{yy}" width="12" height="12" fill="{color}"/>')
            parts.append(f'<text x="{left + plot_w + 30}" y="{yy + 10}">{b} [{buf.offset}, {buf.end})</text>')
    parts.append("</svg>")
    return "\n".join(parts)
