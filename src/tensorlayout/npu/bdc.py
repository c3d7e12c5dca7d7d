"""BDC compute instructions of the BM1684 on tensors that tensorlayout placed, run on Sophgo's simulator.

Every function takes a simulator-backed memory (``LocalMemory(BM1684, backend="cmodel")``),
the output :class:`~tensorlayout.npu.NpuTensor` and the operand tensors, checks what the
instruction requires of them (data type, layout, alignment, NPU, shape, hardware field limits,
no overlap between output and inputs), raising a named :class:`~tensorlayout.LayoutError`
before anything runs, and then calls the matching ``okk_bdc_*`` function. The rules are those
the simulator enforces or, where it silently computes garbage, those its results show; they are
listed in ``docs/npu.md``.

A 3 x 3 convolution, weights in the 2IC mode, with bias:

>>> import numpy as np
>>> from tensorlayout.npu import BM1684, LocalMemory, bdc
>>> mem = LocalMemory(BM1684, backend="cmodel")
>>> rng = np.random.default_rng(0)
>>> x = rng.standard_normal((1, 8, 6, 6), dtype=np.float32)
>>> w = rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
>>> b = rng.standard_normal(16, dtype=np.float32)
>>> xt = mem.s2l(0, x)
>>> wt = bdc.store_conv_weight(mem, 65536, w)         # [I, O, kh, kw] in 2IC, compact
>>> bt = bdc.store_bias(mem, 131072, b)                # (1, O, 1, 1) compact
>>> yt = mem.alloc(bdc.conv2d_output_shape(x.shape, w.shape, padding=1), address=196608)
>>> _ = bdc.conv2d(mem, yt, xt, wt, bt, padding=1)
>>> y = mem.load(yt)
>>> from tensorlayout.npu.reference import conv2d_reference
>>> float(np.abs(y - conv2d_reference(x, w, b, padding=1)).max()) < 1e-5
True
"""

from __future__ import annotations

import numpy as np

from .._checks import keyword_only, pair
from ..errors import (
    AlignmentError,
    ConvolutionError,
    DTypeError,
    LayoutError,
    ModeError,
    OverlapError,
    ShapeError,
    StrideError,
)
from .chip import BM1684
from .cmodel import dim2, dim4, padding as c_padding
from .tensor import NpuTensor, aligned_stride, compact_stride, dtype_name

__all__ = [
    "conv2d", "depthwise2d", "max_pool2d", "avg_pool2d", "add", "sub", "mul", "div", "rsub", "rdiv",
    "maximum", "minimum", "relu", "scale_bias", "copy", "sigmoid", "tanh", "exp", "matmul", "int8_4n_to_fp32", "fp32_to_int8_4n",
    "conv2d_output_shape", "pool_output_shape", "store_conv_weight", "store_bias", "SFU_RANGE",
    "store_depthwise_weight", "conv_weight_2ic",
]

_LIMIT_NHW = 1 << 16      # N, H, W fields: 16 bits
_LIMIT_C = 1 << 12        # conv input and output channels: 12 bits
_LIMIT_SPAD = 1 << 4      # stride and padding fields: 4 bits
_LIMIT_DIL = 1 << 4       # dilation - 1: 4 bits
_LIMIT_PADDED = 1 << 11   # input H (W) + padding of a convolution: below 2048
_LIMIT_STRIDE = 1 << 19   # N and C strides of an operand: 19 bits


# ------------------------------------------------------------------ helpers
def _padding(value):
    """(top, bottom, left, right) from an int, (h, w) or 4 integers."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value),) * 4
    v = tuple(value) if hasattr(value, "__iter__") else (value,)
    if len(v) == 2:
        v = (v[0], v[0], v[1], v[1])
    if len(v) != 4 or any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 0 for p in v):
        raise ConvolutionError(
            f"padding = {value!r} is not allowed: it must be an integer, (h, w) or (top, bottom, left, right) >= 0")
    return tuple(int(p) for p in v)


def _sim(mem):
    """``mem`` itself, once it is known to be simulator-backed: its ``call`` runs an instruction
    on its own bytes, the simulator's lock held."""
    from .memory import LocalMemory

    if not isinstance(mem, LocalMemory) or mem.simulator is None:
        raise LayoutError(f"mem = {mem!r} is not allowed: BDC instructions run on Sophgo's simulator, "
                          "LocalMemory(BM1684, backend='cmodel')")
    return mem


def _tensor(t, name, dtype="float32", mode=None, matrix=False):
    if not isinstance(t, NpuTensor) or t.chip != BM1684:
        raise LayoutError(f"{name} = {t!r} is not allowed: it must be an NpuTensor placed on BM1684")
    if t.dtype != np.dtype(dtype):
        raise DTypeError(f"{name} dtype = {dtype_name(t.dtype)} is not allowed: this instruction needs "
                         f"{dtype_name(np.dtype(dtype))}")
    if t.mode != mode:
        raise ModeError(f"{name} mode = {t.mode!r} is not allowed: this instruction needs mode {mode!r}")
    if t.is_matrix != matrix:
        raise LayoutError(f"{name} is {'a matrix' if t.is_matrix else 'a 4-D tensor'}: this instruction "
                          f"needs {'a matrix (matrix_layout)' if matrix else 'a 4-D tensor'}")
    if not matrix:
        if t.stride[3] != 1:
            raise StrideError(f"{name} stride w = {t.stride[3]} is not allowed: BDC operands need W stride 1")
        for d, v in zip("nhw", (t.shape[0], t.shape[2], t.shape[3])):
            if v >= _LIMIT_NHW:
                raise ShapeError(f"{name} {d} = {v} is not allowed: the instruction's {d} field holds at "
                                 f"most {_LIMIT_NHW - 1}")
        for d, v in zip("nc", t.stride[:2]):
            if v >= _LIMIT_STRIDE:
                raise StrideError(f"{name} stride {d} = {v} is not allowed: the instruction's stride "
                                  f"fields hold at most {_LIMIT_STRIDE - 1}")
    return t


def _aligned(t, name):
    want = aligned_stride(BM1684, t.shape, t.start_npu, t.dtype, t.mode)
    if t.offset % BM1684.align_bytes:
        raise AlignmentError(f"{name} address = {t.address} is not allowed: this instruction reads "
                             f"{name} in the aligned layout, at an address divisible by {BM1684.align_bytes}")
    if t.stride != want:
        raise StrideError(f"{name} stride = {t.stride} is not allowed: this instruction takes no strides "
                          f"for {name}, so it must have the aligned strides {want}")
    return t


def _compact(t, name):
    want = compact_stride(BM1684, t.shape, t.start_npu, t.mode)
    if t.stride != want:
        raise StrideError(f"{name} stride = {t.stride} is not allowed: it must have the compact strides {want}")
    return t


def _shape(t, name, want):
    got = t.matrix_shape if t.is_matrix else t.shape
    if tuple(got) != tuple(want):
        raise ShapeError(f"{name} shape = {tuple(got)} is not allowed: this instruction needs {tuple(want)}")


def _same_npu(t, name, other, other_name):
    if t.start_npu != other.start_npu:
        raise AlignmentError(f"{name} address = {t.address} (NPU {t.start_npu}) is not allowed: it must "
                             f"start in the NPU of {other_name} (NPU {other.start_npu})")


def _no_overlap(out, name, *inputs, allow_same=False):
    for t, tname in inputs:
        if t is None:
            continue
        if allow_same and t.address == out.address and t.stride == out.stride and t.shape == out.shape:
            continue  # element-wise in place: each element is read before it is written
        for p, (a, b) in enumerate(zip(out.npu_ranges(), t.npu_ranges())):
            if a and b and a[0] < b[1] and b[0] < a[1]:
                raise OverlapError(f"{name} address = {out.address} is not allowed: its bytes [{a[0]}, {a[1]}) "
                                   f"of NPU {p} overlap {tname}'s [{b[0]}, {b[1]})")


# ------------------------------------------------------------ placement helpers
def conv_weight_2ic(weight) -> np.ndarray:
    """OIHW convolution weights -> the ``[I, O, kh, kw]`` array that the 2IC mode stores.

    >>> conv_weight_2ic(np.zeros((4, 3, 3, 3), np.float32)).shape
    (3, 4, 3, 3)
    """
    w = np.asarray(weight)
    if w.ndim != 4:
        raise ShapeError(f"weight has shape {w.shape}: it must be OIHW, 4-D")
    return np.ascontiguousarray(w.transpose(1, 0, 2, 3))


def store_conv_weight(mem, address: int, weight) -> NpuTensor:
    """Write OIHW fp32 ``weight`` at local ``address`` in the 2IC mode, compact, as conv2d reads it."""
    w2 = conv_weight_2ic(np.asarray(weight, dtype=np.float32))
    q = BM1684.split_address(address)[0]
    return mem.s2l(address, w2, stride=compact_stride(BM1684, w2.shape, q, mode="2IC"), mode="2IC")


def store_bias(mem, address: int, bias) -> NpuTensor:
    """Write a per-channel fp32 ``bias`` of C values at ``address`` as the compact ``(1, C, 1, 1)`` tensor."""
    b = np.asarray(bias, dtype=np.float32).reshape(1, -1, 1, 1)
    q = BM1684.split_address(address)[0]
    return mem.s2l(address, b, stride=compact_stride(BM1684, b.shape, q))


def store_depthwise_weight(mem, address: int, weight) -> NpuTensor:
    """Write ``(C, 1, kh, kw)`` depthwise weights at ``address`` as the compact ``(1, C, kh, kw)`` tensor."""
    w = np.asarray(weight, dtype=np.float32)
    if w.ndim != 4 or w.shape[1] != 1:
        raise ShapeError(f"weight has shape {w.shape}: depthwise weights are (C, 1, kh, kw)")
    w = w.reshape(1, w.shape[0], w.shape[2], w.shape[3])
    q = BM1684.split_address(address)[0]
    return mem.s2l(address, w, stride=compact_stride(BM1684, w.shape, q))


def conv2d_output_shape(input_shape, weight_shape, padding=0, stride=1, dilation=1):
    """Output ``(N, O, Ho, Wo)`` of a convolution of ``input_shape`` with OIHW ``weight_shape``.

    >>> conv2d_output_shape((1, 8, 6, 6), (16, 8, 3, 3), padding=1, stride=2)
    (1, 16, 3, 3)
    """
    n, c, h, w = input_shape
    o, i, kh, kw = weight_shape
    pt, pb, pl, pr = _padding(padding)
    sh, sw = pair("stride", stride)
    dh, dw = pair("dilation", dilation)
    ho = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    wo = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if ho < 1 or wo < 1:
        raise ConvolutionError(f"input {tuple(input_shape)} with kernel {kh}x{kw}, padding {padding} and "
                               f"dilation {dilation} leaves no output")
    return (n, o, ho, wo)


def pool_output_shape(input_shape, kernel, padding=0, stride=None):
    """Output shape of a pooling window ``kernel`` (stride defaults to the kernel).

    >>> pool_output_shape((1, 3, 7, 7), 2)
    (1, 3, 3, 3)
    """
    kh, kw = pair("kernel", kernel)
    c = input_shape[1]
    return conv2d_output_shape(input_shape, (c, 1, kh, kw), padding, stride or (kh, kw))


def _window(padding, stride, dilation=1):
    pad = _padding(padding)
    st = pair("stride", stride)
    dil = pair("dilation", dilation)
    for name, vals in (("padding", pad), ("stride", st)):
        if any(v >= _LIMIT_SPAD for v in vals):
            raise ConvolutionError(f"{name} = {vals} is not allowed: the instruction's {name} fields hold "
                                   f"at most {_LIMIT_SPAD - 1}")
    if any(d - 1 >= _LIMIT_DIL for d in dil):
        raise ConvolutionError(f"dilation = {dil} is not allowed: the instruction holds dilations up to {_LIMIT_DIL}")
    return pad, st, dil


# --------------------------------------------------------------- convolutions
#: conv2d's and depthwise2d's parameters after ``bias`` in their old positional order.
_OLD_ORDER = ("padding", "stride", "dilation")


def conv2d(mem, output: NpuTensor, input: NpuTensor, weight: NpuTensor, bias: NpuTensor | None = None,
           *args, stride=1, padding=0, dilation=1, accumulate: bool = False) -> NpuTensor:
    """``okk_bdc_conv2d``: fp32 convolution, weights ``[I, O, kh, kw]`` in the 2IC mode.

    ``input`` any strides (W stride 1); ``weight`` from :func:`store_conv_weight`, starting in
    the output's NPU at an address divisible by 8; ``bias`` (optional) the compact ``(1, O, 1, 1)``
    tensor; ``output`` aligned. ``accumulate`` adds the result to what ``output`` holds.
    Everything after ``bias`` is keyword-only, as in :func:`tensorlayout.conv2d`.
    """
    keyword_only("tensorlayout.npu.bdc.conv2d", args, _OLD_ORDER + ("accumulate",),
                 "mem, output, input, weight, bias")
    run = _sim(mem).call
    _tensor(input, "input")
    _tensor(weight, "weight", mode="2IC")
    _aligned(_tensor(output, "output"), "output")
    pad, st, dil = _window(padding, stride, dilation)
    n, ic, h, w = input.shape
    wi, oc, kh, kw = weight.shape
    if wi != ic:
        raise ConvolutionError(f"weight shape = {weight.shape} is not allowed: its first dimension (I) must "
                               f"equal the input's {ic} channels")
    if ic >= _LIMIT_C:
        raise ShapeError(f"input c = {ic} is not allowed: the convolution's channel field holds at most {_LIMIT_C - 1}")
    if oc >= _LIMIT_C:
        raise ShapeError(f"weight O = {oc} output channels is not allowed: the convolution's output channel "
                         f"field holds at most {_LIMIT_C - 1}")
    if h + pad[0] + pad[1] >= _LIMIT_PADDED or w + pad[2] + pad[3] >= _LIMIT_PADDED:
        raise ConvolutionError(f"input {h}x{w} with padding {pad} is not allowed: padded H and W must stay "
                               f"below {_LIMIT_PADDED}")
    _shape(output, "output", conv2d_output_shape(input.shape, (oc, ic, kh, kw), pad, st, dil))
    _same_npu(weight, "weight", output, "output")
    if weight.offset % 8:
        raise AlignmentError(f"weight address = {weight.address} is not allowed: 2IC weights need an address "
                             "divisible by 8")
    if bias is not None:
        _compact(_tensor(bias, "bias"), "bias")
        _shape(bias, "bias", (1, oc, 1, 1))
    _no_overlap(output, "output", (input, "input"), (weight, "weight"), (bias, "bias"))
    run("okk_bdc_conv2d", output.address, input.address, weight.address,
             0 if bias is None else bias.address, dim4(input.shape), oc, kh, kw, dim4(input.stride),
             dim4(weight.stride), bias is not None, bool(accumulate), c_padding(pad), dim2(st), dim2(dil))
    return output


def depthwise2d(mem, output: NpuTensor, input: NpuTensor, weight: NpuTensor, bias: NpuTensor | None = None,
                *args, stride=1, padding=0, dilation=1) -> NpuTensor:
    """``okk_bdc_depthwise2d``: per-channel convolution; input and output aligned, weight the compact
    ``(1, C, kh, kw)`` tensor of :func:`store_depthwise_weight` in the output's NPU, bias ``(1, C, 1, 1)``;
    everything after ``bias`` keyword-only."""
    keyword_only("tensorlayout.npu.bdc.depthwise2d", args, _OLD_ORDER, "mem, output, input, weight, bias")
    run = _sim(mem).call
    _aligned(_tensor(input, "input"), "input")
    _aligned(_tensor(output, "output"), "output")
    _compact(_tensor(weight, "weight"), "weight")
    pad, st, dil = _window(padding, stride, dilation)
    n, c, h, w = input.shape
    if weight.shape[:2] != (1, c):
        raise ShapeError(f"weight shape = {weight.shape} is not allowed: depthwise weights are (1, {c}, kh, kw)")
    kh, kw = weight.shape[2:]
    _shape(output, "output", conv2d_output_shape(input.shape, (c, 1, kh, kw), pad, st, dil))
    _same_npu(weight, "weight", output, "output")
    _same_npu(output, "output", input, "input")
    if bias is not None:
        _compact(_tensor(bias, "bias"), "bias")
        _shape(bias, "bias", (1, c, 1, 1))
        _same_npu(bias, "bias", output, "output")
    _no_overlap(output, "output", (input, "input"), (weight, "weight"), (bias, "bias"))
    run("okk_bdc_depthwise2d", output.address, input.address, weight.address,
             0 if bias is None else bias.address, dim4(input.shape), kh, kw, bias is not None,
             c_padding(pad), dim2(st), dim2(dil))
    return output


def _pool(fn, mem, output, input, kernel, padding, stride):
    run = _sim(mem).call
    _aligned(_tensor(input, "input"), "input")
    _aligned(_tensor(output, "output"), "output")
    kh, kw = pair("kernel", kernel)
    pad, st, _ = _window(padding, stride or (kh, kw))
    if any(p >= k for p, k in zip(pad, (kh, kh, kw, kw))):
        raise ConvolutionError(f"padding = {pad} is not allowed: each side must be smaller than the window {kh}x{kw}")
    _shape(output, "output", pool_output_shape(input.shape, (kh, kw), pad, st))
    _same_npu(output, "output", input, "input")
    _no_overlap(output, "output", (input, "input"))
    run(fn, output.address, input.address, dim4(input.shape), kh, kw, c_padding(pad), dim2(st))
    return output


def max_pool2d(mem, output: NpuTensor, input: NpuTensor, kernel, padding=0, stride=None) -> NpuTensor:
    """``okk_bdc_max_pool2d`` (padding never wins the max); aligned input and output in one NPU.
    The chip's compare drops NaN: a window holding NaN gives the max of its numbers."""
    return _pool("okk_bdc_max_pool2d", mem, output, input, kernel, padding, stride)


def avg_pool2d(mem, output: NpuTensor, input: NpuTensor, kernel, padding=0, stride=None) -> NpuTensor:
    """``okk_bdc_avg_pool2d``: the window's sum over kh*kw (padding counts as 0)."""
    return _pool("okk_bdc_avg_pool2d", mem, output, input, kernel, padding, stride)


# -------------------------------------------------------------- element-wise
def _binary(op, mem, output, a, b):
    run = _sim(mem).call
    _tensor(output, "output")
    _tensor(a, "a")
    _shape(a, "a", output.shape)
    if isinstance(b, NpuTensor):
        _tensor(b, "b")
        _shape(b, "b", output.shape)
        _no_overlap(output, "output", (a, "a"), (b, "b"), allow_same=True)
        run(f"okk_bdc_{op}", output.address, a.address, b.address, dim4(output.shape),
                 dim4(output.stride), dim4(a.stride), dim4(b.stride))
        return output
    return _with_number(run, f"okk_bdc_{op}_C", output, a, b, "b", "an NpuTensor or a number")


def _with_number(run, fn, output, a, value, name, what):
    """An instruction of ``a`` and a number (checked: finite in fp32) into ``output``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(np.float32(value)):
        raise DTypeError(f"{name} = {value!r} is not allowed: it must be {what} fp32 holds "
                         "(it is rounded to fp32)")
    _no_overlap(output, "output", (a, "a"), allow_same=True)
    run(fn, output.address, a.address, float(value), dim4(output.shape), dim4(output.stride),
        dim4(a.stride))
    return output


def add(mem, output, a, b):
    """``output = a + b`` (``b`` a tensor of the same shape or a number); any strides, W stride 1."""
    return _binary("add", mem, output, a, b)


def sub(mem, output, a, b):
    """``output = a - b``."""
    return _binary("sub", mem, output, a, b)


def mul(mem, output, a, b):
    """``output = a * b``."""
    return _binary("mul", mem, output, a, b)


def div(mem, output, a, b):
    """``output = a / b`` (``b`` a tensor of the same shape or a number).

    The chip divides through its own reciprocal: results are within 4e-7 relative of the
    float64 quotient, not always the correctly rounded float32 one; a finite number divided
    by inf comes out inf (IEEE: 0), and x / 0 is ±inf, 0 / 0 NaN as IEEE has them.
    """
    return _binary("div", mem, output, a, b)


def _reverse(op, mem, output, a, c):
    run = _sim(mem).call
    _tensor(output, "output")
    _tensor(a, "a")
    _shape(a, "a", output.shape)
    return _with_number(run, f"okk_bdc_C_{op}", output, a, c, "c", "a number")


def rsub(mem, output, a, c):
    """``output = c - a`` for a number ``c`` (``okk_bdc_C_sub``); any strides, W stride 1."""
    return _reverse("sub", mem, output, a, c)


def rdiv(mem, output, a, c):
    """``output = c / a`` for a number ``c`` (``okk_bdc_C_div``; precision as :func:`div`)."""
    return _reverse("div", mem, output, a, c)


def maximum(mem, output, a, b):
    """``output = max(a, b)``, computed as ``a > b ? a : b``: NaN comes out only where ``b`` is a
    NaN tensor element (a NaN in ``a``, or against a number, gives the other operand)."""
    return _binary("max", mem, output, a, b)


def minimum(mem, output, a, b):
    """``output = min(a, b)``, computed as ``a < b ? a : b`` (NaN as in :func:`maximum`)."""
    return _binary("min", mem, output, a, b)


def relu(mem, output: NpuTensor, input: NpuTensor) -> NpuTensor:
    """``okk_bdc_relu``: ``max(x, 0)``; any strides (W stride 1), in place allowed. relu(NaN) is 0
    on the chip (ONNX's Relu keeps NaN)."""
    run = _sim(mem).call
    _tensor(output, "output")
    _tensor(input, "input")
    _shape(input, "input", output.shape)
    _no_overlap(output, "output", (input, "input"), allow_same=True)
    run("okk_bdc_relu", output.address, input.address, dim4(output.shape), dim4(output.stride),
             dim4(input.stride))
    return output


def scale_bias(mem, output: NpuTensor, input: NpuTensor, scale: NpuTensor | None = None,
               bias: NpuTensor | None = None) -> NpuTensor:
    """``output = input * scale[c] + bias[c]`` per channel (``okk_bdc_scale``, ``okk_bdc_bias``
    or ``okk_bdc_scale_bias``, whichever of the two is given).

    ``input`` and ``output`` take any strides (W stride 1) and may be the same tensor;
    ``scale`` and ``bias`` are compact ``(1, C, 1, 1)`` tensors (:func:`store_bias` writes one)
    starting in the output's NPU, where each channel's lane reads them. The product and
    the sum are rounded one after the other, as two float32 operations.
    """
    run = _sim(mem).call
    _tensor(output, "output")
    _tensor(input, "input")
    _shape(input, "input", output.shape)
    c = output.shape[1]
    if scale is None and bias is None:
        raise LayoutError("scale and bias are both None: give at least one")
    for t, name in ((scale, "scale"), (bias, "bias")):
        if t is not None:
            _compact(_tensor(t, name), name)
            _shape(t, name, (1, c, 1, 1))
            _same_npu(t, name, output, "output")
    _no_overlap(output, "output", (input, "input"), allow_same=True)
    _no_overlap(output, "output", (scale, "scale"), (bias, "bias"))
    args = (dim4(output.shape), dim4(output.stride), dim4(input.stride))
    if scale is not None and bias is not None:
        run("okk_bdc_scale_bias", output.address, input.address, scale.address, bias.address, *args)
    elif scale is not None:
        run("okk_bdc_scale", output.address, input.address, scale.address, *args)
    else:
        run("okk_bdc_bias", output.address, input.address, bias.address, *args)
    return output


def copy(mem, output: NpuTensor, input: NpuTensor) -> NpuTensor:
    """``okk_bdc_32bit_cpy``: copy 32-bit elements inside each NPU, each side with its own
    strides (W stride 1): a change of layout (aligned to compact, say) without leaving the
    NPUs. ``input`` and ``output`` start in the same NPU and do not overlap."""
    run = _sim(mem).call
    _tensor(output, "output")
    _tensor(input, "input")
    _shape(input, "input", output.shape)
    _same_npu(output, "output", input, "input")
    _no_overlap(output, "output", (input, "input"))
    run("okk_bdc_32bit_cpy", output.address, input.address, dim4(output.shape), dim4(output.stride),
        dim4(input.stride))
    return output


#: The input range on which each special-function instruction is right; inputs are clamped to it.
#: The simulator computes exp(x) as a table entry for the integer part of x (truncated) times a
#: series for the rest, and its table is right only for integer parts from -88 to 88: exp(89)
#: comes out 0 and exp(-200) inf. sigmoid and tanh go through the same exp (of -x and of 2x).
#: Past these bounds each function is already at its limit in float32 (exp: 0 or inf; sigmoid:
#: 0 or 1; tanh: -1 or 1), so the clamp changes no right answer.
SFU_RANGE = {"exp": (-88.0, 88.75), "sigmoid": (-88.0, 88.0), "tanh": (-9.0, 9.0)}


def _sfu(name, mem, output, input, work):
    run = _sim(mem).call
    _aligned(_tensor(output, "output"), "output")
    _aligned(_tensor(input, "input"), "input")
    _aligned(_tensor(work, "work"), "work")
    _shape(input, "input", output.shape)
    _shape(work, "work", output.shape)
    _no_overlap(output, "output", (input, "input"), (work, "work"))
    _no_overlap(work, "work", (input, "input"))
    lo, hi = SFU_RANGE[name]
    shape, strides = dim4(output.shape), [dim4(t.stride) for t in (work, output, input)]
    with mem.exclusive():
        # work = min(hi, max(lo, x)). The chip's max(a, b) is "a > b ? a : b" (min alike), so
        # with the bound first a NaN input stays NaN; the bound comes from a filled tensor.
        mem.fill_local(output.address, output.shape, "fp32", lo, stride=output.stride)
        run("okk_bdc_max", work.address, output.address, input.address, shape, *strides)
        mem.fill_local(output.address, output.shape, "fp32", hi, stride=output.stride)
        run("okk_bdc_min", work.address, output.address, work.address, shape, *strides[:2], strides[0])
        # the clamped input in the work buffer may be the instruction's source and work at once:
        # it reads its source once, first (checked on the simulator, tests/test_npu_bdc.py)
        run(f"okk_bdc_{name}", output.address, work.address, work.address, shape)
    return output


def sigmoid(mem, output: NpuTensor, input: NpuTensor, work: NpuTensor) -> NpuTensor:
    """``okk_bdc_sigmoid``: ``1 / (1 + exp(-x))``.

    Output, input and a work buffer of the same shape, all aligned (the instruction takes no
    strides), none overlapping; ``input`` is left as it was, ``work`` is overwritten. The input
    is first clamped to ``SFU_RANGE["sigmoid"]`` = [-88, 88], NaN staying NaN: unclamped, the
    simulator gives sigmoid(-89) = 0.99999988 and sigmoid(±inf) = inf. Results within 4e-7
    relative of float64, or within 1.2e-38 (float32's smallest normal number) where they are
    that small: the chip flushes subnormal numbers to 0.
    """
    return _sfu("sigmoid", mem, output, input, work)


def tanh(mem, output: NpuTensor, input: NpuTensor, work: NpuTensor) -> NpuTensor:
    """``okk_bdc_tanh`` (operands as :func:`sigmoid`).

    The input is first clamped to ``SFU_RANGE["tanh"]`` = [-9, 9], NaN staying NaN:
    unclamped, the simulator gives tanh(-88) = -inf. Results within 1e-6 of float64
    (absolute: the chip's tanh is off by up to 2e-7 near 0 and may pass ±1 by that much).
    """
    return _sfu("tanh", mem, output, input, work)


def exp(mem, output: NpuTensor, input: NpuTensor, work: NpuTensor) -> NpuTensor:
    """``okk_bdc_exp`` (operands as :func:`sigmoid`).

    The input is first clamped to ``SFU_RANGE["exp"]`` = [-88, 88.75], NaN staying NaN:
    unclamped, the simulator gives exp(89) = 0 and exp(-200) = inf. At the bounds the chip
    gives inf and 0 (float32 has inf and the subnormal 6e-39). Results within 4e-7 relative
    of float64, or within 1.2e-38 where they are that small, as :func:`sigmoid`.
    """
    return _sfu("exp", mem, output, input, work)


# --------------------------------------------------------------------- matmul
def matmul(mem, output: NpuTensor, left: NpuTensor, right: NpuTensor, bias: NpuTensor | None = None,
           accumulate: bool = False) -> NpuTensor:
    """``okk_bdc_matmul``: ``output = left @ right (+ bias)`` on fp32 matrices in the matrix layout.

    ``left`` is M x K (any columns per channel), ``right`` K x N, ``output`` M x N and ``bias``
    1 x N, the last three with the same columns per channel.
    """
    run = _sim(mem).call
    for t, name in ((output, "output"), (left, "left"), (right, "right")):
        _tensor(t, name, matrix=True)
    m, k = left.matrix_shape
    k2, n = right.matrix_shape
    if k2 != k:
        raise ShapeError(f"right shape = {right.matrix_shape} is not allowed: it must have {k} rows "
                         "(the left matrix's columns)")
    _shape(output, "output", (m, n))
    if bias is not None:
        _tensor(bias, "bias", matrix=True)
        _shape(bias, "bias", (1, n))
    rw = right.cols_per_channel
    for t, name in ((output, "output"), (bias, "bias")):
        if t is not None and t.cols_per_channel != rw:
            raise LayoutError(f"{name} cols_per_channel = {t.cols_per_channel} is not allowed: it must equal "
                              f"the right matrix's {rw}")
    for v, name in ((m, "rows"), (left.cols_per_channel, "left cols per channel"), (rw, "right cols per channel")):
        if v >= _LIMIT_NHW:
            raise ShapeError(f"{name} = {v} is not allowed: the instruction's field holds at most {_LIMIT_NHW - 1}")
    _no_overlap(output, "output", (left, "left"), (right, "right"), (bias, "bias"))
    run("okk_bdc_matmul", output.address, left.address, right.address,
             0 if bias is None else bias.address, m, k, n, left.cols_per_channel, rw,
             bias is not None, bool(accumulate))
    return output


# --------------------------------------------------------------------- int8
def int8_4n_to_fp32(mem, output: NpuTensor, input: NpuTensor, work: NpuTensor) -> NpuTensor:
    """``okk_bdc_4N_int8_to_fp32``: int8 or uint8 in the 4N mode, aligned, to aligned fp32.

    ``work`` is an aligned fp32 tensor of the same shape; none of the three overlap.
    """
    run = _sim(mem).call
    if not isinstance(input, NpuTensor) or input.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise DTypeError(f"input = {input!r} is not allowed: it must be an int8 or uint8 NpuTensor in the 4N mode")
    _aligned(_tensor(input, "input", dtype=input.dtype, mode="4N"), "input")
    _aligned(_tensor(output, "output"), "output")
    _aligned(_tensor(work, "work"), "work")
    _shape(output, "output", input.shape)
    _shape(work, "work", input.shape)
    _same_npu(output, "output", input, "input")
    _no_overlap(output, "output", (input, "input"), (work, "work"))
    _no_overlap(work, "work", (input, "input"))
    run("okk_bdc_4N_int8_to_fp32", output.address, input.address, work.address, dim4(input.shape),
             input.dtype == np.int8, True)
    return output


def fp32_to_int8_4n(mem, output: NpuTensor, input: NpuTensor, work: NpuTensor) -> NpuTensor:
    """``okk_bdc_fp32_to_4N_int8``: aligned fp32 to int8 (or uint8) in the 4N mode, aligned.

    Values are truncated toward zero and saturated to the output type's range (what the
    simulator does). ``work`` is an aligned fp32 tensor of the same shape; none of the three
    overlap; ``input`` is left unchanged.
    """
    run = _sim(mem).call
    if not isinstance(output, NpuTensor) or output.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise DTypeError(f"output = {output!r} is not allowed: it must be an int8 or uint8 NpuTensor in the 4N mode")
    _aligned(_tensor(output, "output", dtype=output.dtype, mode="4N"), "output")
    _aligned(_tensor(input, "input"), "input")
    _aligned(_tensor(work, "work"), "work")
    _shape(input, "input", output.shape)
    _shape(work, "work", output.shape)
    _same_npu(output, "output", input, "input")
    _same_npu(work, "work", input, "input")
    _no_overlap(output, "output", (input, "input"), (work, "work"))
    _no_overlap(work, "work", (input, "input"))
    run("okk_bdc_fp32_to_4N_int8", output.address, input.address, work.address, dim4(input.shape),
             output.dtype == np.int8)
    return output
