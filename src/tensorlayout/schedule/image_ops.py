"""The ops of the image schedule: one emitter per ONNX op, deciding the layer's kernels, work
sizes, arguments, weight images and temporaries (:data:`EMITTERS`).  Each takes the builder,
the node, its layer, the name and shape of the tensor it writes (the fused activation's
output when one is fused) and the activation ``(code, a0, a1)`` to apply.

Weights and the image type each gets:

* Conv, group 1: CONV2D_FILTER (OIHW), or WINOGRAD_FILTER for the 3x3 stride-1 layers that
  run Winograd; depthwise: DW_CONV2D_FILTER; other groups: CONV2D_FILTER of (O, C / group,
  KH, KW).  Biases, per-channel constants and BatchNormalization's scale and shift: ARGUMENT.
* Gemm / MatMul with a constant weight: WEIGHT_WIDTH, as MACE's fully connected layer does.
  Its pixel holds four consecutive input channels at one (h, w), the same four the input's
  IN_OUT_CHANNEL pixel holds, so a flattened (N, C, H, W) input is read in place (Flatten
  costs nothing); its width q(C)·H·W stays within the limits where WEIGHT_HEIGHT's would not.
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import q as _q
from ..errors import DeviceLimitError
from ..graph.ops import ACTIVATIONS, Conv, Pool, gemm_weight
from .images import Act, Virtual, full_nchw, node_error
from .winograd import image_mid_dtype, image_sizes, image_tile

__all__ = ["EMITTERS", "BINARY_CODES"]

#: The eltwise kernel's operation codes.
BINARY_CODES = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5}
# A direct convolution with fewer work-items than this splits its sums over slices of its
# input channels (conv2d_split + conv2d_sum), each slice at least 4 channel blocks long: on
# an H100 ResNet's stride-2 3x3 layers (256 -> 512 at 7x7: 1792 work-items of 2304 taps)
# left most of the GPU idle.  CPU devices have cores enough at any size: no split.
_SPLIT_ITEMS = {True: 16384, False: 0}
_GEMM_BLOCKS = ((4, 1), (8, 1), (8, 2))      # conv.cl's wino_matmul_{tiles}x{channel groups}
# A Winograd GEMM with at most half this many work-items (at 4 tiles each) splits its sums
# over slices of the input channels, each at least 8 channel blocks long, towards this many
# work-items (GPUs only, as above).  On an H100 a layer of 25k work-items (ResNet's 128
# channels at 28x28) got slower split: the output stage's second read cost what the GEMM saved.
_GEMM_SPLIT_ITEMS = {True: 32768, False: 0}
i32, f32 = np.int32, np.float32


def _const(b, node, i, what):
    name = node.inputs[i] if i < len(node.inputs) else ""
    if not name:
        return None
    if name not in b.graph.consts:
        raise node_error(node, f"the {what} must be a constant on this runtime")
    return np.asarray(b.graph.consts[name], np.float32)


# ---------------------------------------------------------------------------- convolution
def conv(b, node, layer, final, final_shape, act):
    if not isinstance(node.params, Conv):
        raise node_error(node, "only 2-D convolutions with constant weights run on images")
    x = b.device(node, node.inputs[0], split_ok=True)
    w = _const(b, node, 1, "weights")
    bias = _const(b, node, 2, "bias")
    bias = None if bias is None else bias.reshape(-1)
    p = node.params
    N, H, W, C = x.nhwc
    O, I, KH, KW = w.shape
    groups, begin = p.group, p.begin
    depthwise = p.depthwise and p.multiplier == 1
    if x.parts and groups != 1 and not depthwise:
        raise b.split_input(node, x)
    out = b.new_act(final, final_shape, node, split_ok=groups == 1 or depthwise)
    _, OH, OW, _ = out.nhwc
    acts = [i32(act[0]), f32(act[1]), f32(act[2])]
    geo = [i32(KH), i32(KW), i32(p.strides[0]), i32(p.strides[1]), i32(begin[0]), i32(begin[1]),
           i32(p.dilations[0]), i32(p.dilations[1])]
    if groups == 1:
        tile = _wino_tile(b, node, x.nhwc, O, (KH, KW), p, out.nhwc)
        if tile and (x.parts or out.parts):
            b.fallbacks.append(f"{node.name}: Winograd tile {tile} -> direct kernel (an image "
                               "split by channels)")
            tile = 0
        if tile:
            bk = b.weight(layer, node.inputs[2], bias, "ARGUMENT") if bias is not None else None
            _winograd(b, node, layer, x, w, bk if bk is not None else b.empty(),
                      i32(bk is not None), out, tile, begin, acts)
            return
        layer.kind = f"conv {KH}x{KW} direct" if (KH, KW) != (1, 1) else "conv 1x1 direct"
        _conv_direct(b, layer, node, x, w, bias, out, geo, acts)
        return
    if depthwise:
        layer.kind = f"depthwise {KH}x{KW}"

        def launch(c0, c1, xin, dst):
            tag = "" if (c0, c1) == (0, C) else f"[{c0}:{c1}]"
            bk = b.weight(layer, node.inputs[2] + tag, bias[c0:c1], "ARGUMENT") \
                if bias is not None else None
            filt = b.weight(layer, node.inputs[1] + tag, w[c0:c1], "DW_CONV2D_FILTER",
                            filter_format="C1HW")
            n = N * (c1 - c0)
            return ((_q(c1 - c0), -(-OW // 4), N * OH),
                    [xin, filt, bk if bk is not None else b.empty(), dst, i32(H), i32(W),
                     i32(c1 - c0), i32(OH), i32(OW), i32(N * OH), *geo, i32(bk is not None), *acts],
                    2.0 * n * OH * OW * KH * KW, n * (H * W + OH * OW) + (c1 - c0) * KH * KW)
        _per_channel(b, layer, "dwconv2d", x, out, launch)
        return
    layer.kind = f"grouped conv {KH}x{KW} (group {groups})"
    macs = N * OH * OW * O * I * KH * KW
    io = (x.nhwc[0] * H * W * C + N * OH * OW * O) * b.dtype.itemsize
    bk = b.weight(layer, node.inputs[2], bias, "ARGUMENT") if bias is not None else None
    filt = b.weight(layer, node.inputs[1], w, "CONV2D_FILTER")
    b.launch(layer, "conv2d_grouped", (_q(O), OW, N * OH),
             [x.slot, filt, bk if bk is not None else b.empty(), out.slot, i32(H), i32(W), i32(C),
              i32(OH), i32(OW), i32(O), i32(N * OH), *geo, i32(groups), i32(bk is not None), *acts],
             flops=2.0 * macs, nbytes=io + w.size * b.dtype.itemsize)


def _conv_direct(b, layer, node, x, w, bias, out, geo, acts):
    """The direct kernel, once per output part and input part where images are split by
    channels: each output part takes its rows of the filter, and where the input is split
    the parts' sums run through two float32 images (the bias with the first part, the
    activation with the last)."""
    N, H, W, C = x.nhwc
    _, OH, OW, O = out.nhwc
    KH, KW = w.shape[2:]
    ins = x.parts or [(0, C, x)]
    outs = out.parts or [(0, O, out)]
    prog = b.net()
    if len(ins) > 1:
        prog = ("net", "partial")
        P = [b.slot(("tmp", node.name, f"P{j}"),
                    (max(_q(o1 - o0) for o0, o1, _ in outs) * OW, N * OH, np.dtype(np.float32)),
                    f"{node.name}:P{j}") for j in (0, 1)]
        layer.kind += f", input in {len(ins)} channel parts"
    it = b.dtype.itemsize
    for o0, o1, dst in outs:
        tag = "" if (o0, o1) == (0, O) else f"[{o0}:{o1}]"
        bk = b.weight(layer, node.inputs[2] + tag, bias[o0:o1], "ARGUMENT") \
            if bias is not None else None
        S = _slices(b, _q(o1 - o0) * -(-OW // 4) * N * OH, _q(C), _q(C) * KH * KW) \
            if len(ins) == 1 else 1
        if S > 1:
            _conv_split(b, layer, node, x, w[o0:o1], bk, dst, geo, acts, S, tag)
            continue
        for k, (c0, c1, xin) in enumerate(ins):
            ctag = tag if len(ins) == 1 else f"[{o0}:{o1}, {c0}:{c1}]"
            filt = b.weight(layer, node.inputs[1] + ctag, w[o0:o1, c0:c1], "CONV2D_FILTER")
            last = k == len(ins) - 1
            first_bias = bk is not None and k == 0
            args = [xin.slot, filt, bk if first_bias else b.empty(),
                    dst.slot if last else P[k % 2], i32(H), i32(W), i32(c1 - c0), i32(OH),
                    i32(OW), i32(o1 - o0), i32(N * OH), *geo, i32(first_bias), *acts]
            if len(ins) > 1:
                args += [P[(k - 1) % 2] if k else b.empty(), i32(k > 0), i32(last)]
            macs = N * OH * OW * (o1 - o0) * (c1 - c0) * KH * KW
            b.launch(layer, "conv2d", (_q(o1 - o0), -(-OW // 4), N * OH), args, prog,
                     flops=2.0 * macs,
                     nbytes=(N * H * W * (c1 - c0) + N * OH * OW * (o1 - o0)
                             + (o1 - o0) * (c1 - c0) * KH * KW) * it)


def _slices(b, items, qc, taps):
    """How many slices of its input channels a direct convolution of ``items`` work-items,
    ``qc`` channel blocks and ``taps`` = qc * KH * KW steps per work-item splits its sums
    over (1: none).  Only long sums are split: the second kernel and launch cost about as
    much as a short sum saves (on an H100, 1x1 layers of under 96 channel blocks got
    slower split, ResNet's 3x3 layers and MobileNetV2's wide 1x1 layers 1.2-3.5x faster)."""
    target = _SPLIT_ITEMS[b.gpu]
    if items * 2 > target or qc < 8 or taps < 96:
        return 1
    return max(1, min(qc // 4, -(-target // items)))


def _conv_split(b, layer, node, x, w, bias, out, geo, acts, S, tag):
    """The direct convolution as S slices of its input channels, each storing float32
    sums in a temporary image S times as tall, and one kernel adding them, the bias and
    the activation."""
    N, H, W, C = x.nhwc
    _, OH, OW, O = out.nhwc
    KH, KW = w.shape[2:]
    filt = b.weight(layer, node.inputs[1] + tag, w, "CONV2D_FILTER")
    P = b.slot(("tmp", node.name, "S" + tag), (_q(O) * OW, S * N * OH, np.dtype(np.float32)),
               f"{node.name}:S{tag}")
    layer.kind += f", sums split over {S} channel slices"
    it = b.dtype.itemsize
    macs = N * OH * OW * O * C * KH * KW
    b.launch(layer, "conv2d_split", (_q(O), -(-OW // 4), S * N * OH),
             [x.slot, filt, P, i32(H), i32(W), i32(C), i32(OH), i32(OW), i32(O), i32(N * OH),
              *geo, i32(S)], flops=2.0 * macs,
             nbytes=(N * H * W * C + O * C * KH * KW) * it + S * N * OH * OW * O * 4)
    b.launch(layer, "conv2d_sum", (_q(O), OW, N * OH),
             [P, bias if bias is not None else b.empty(), out.slot, i32(OH), i32(OW), i32(O),
              i32(N * OH), i32(S), i32(bias is not None), *acts],
             nbytes=S * N * OH * OW * O * 4 + N * OH * OW * O * it)


def _wino_tile(b, node, nhwc, O, k, p, out_nhwc):
    N, H, W, C = nhwc
    if k != (3, 3) or tuple(p.strides) != (1, 1) or tuple(p.dilations) != (1, 1) or not b.winograd:
        return 0
    _, OH, OW, _ = out_nhwc

    def past_limit(tile):
        return [f"{name} {list(v)}" for name, v in image_sizes(N, (OH, OW), C, O, tile).items()
                if not b.fits(*v)]
    tile, note = image_tile((OH, OW), (C, O), past_limit, b.winograd)
    if note:
        b.fallbacks.append(f"{node.name}: {note[:-1]} {list(b.max_image)})")
    return tile


def _winograd(b, node, layer, x, w, bias_arg, has_b, out, tile, begin, acts):
    N, H, W, C = x.nhwc
    _, OH, OW, O = out.nhwc
    th, tw = -(-OH // tile), -(-OW // tile)
    tiles = N * th * tw
    T2 = (tile + 2) ** 2
    layer.kind = f"conv 3x3 Winograd F({tile},3)"
    u = b.weight(layer, node.inputs[1], w, "WINOGRAD_FILTER", tile=tile)
    mid = image_mid_dtype(tile, b.dtype)
    # Slices of the input channels for the GEMM where the layer has few work-items
    # (ResNet's 512-channel layers at 7x7: 8192 at 4 tiles each): each slice stores its
    # sums in its own rows of M, and wino_output adds them.
    items = -(-tiles // _GEMM_BLOCKS[0][0]) * T2 * _q(O)
    S = 1
    target = _GEMM_SPLIT_ITEMS[b.gpu]
    if 2 * items <= target:
        S = max(1, min(-(-target // items), _q(C) // 8, b.max_image[1] // (T2 * _q(O))))
    if S > 1:
        layer.kind += f", GEMM over {S} channel slices"
    sizes = image_sizes(N, (OH, OW), C, O, tile, S)
    V = b.slot(("tmp", node.name, "V"), (*sizes["V"], mid), f"{node.name}:V", "IN_OUT_HEIGHT")
    M = b.slot(("tmp", node.name, "M"), (*sizes["M"], mid), f"{node.name}:M", "IN_OUT_HEIGHT")
    prog = b.wino(tile, mid)
    # The GEMM's blockings (tiles x groups of 4 output channels per work-item), the
    # default first: 8 tiles where that still leaves 40k work-items (measured on an
    # H100: 10-20% faster on VGG's large layers, slower on small ones); the tuner times
    # all three.
    gemm = [(f"wino_matmul_{nt}x{no}", (-(-tiles // nt), S * T2 * -(-_q(O) // no)))
            for nt, no in _GEMM_BLOCKS]
    if len(gemm) > 1 and math.prod(gemm[1][1]) >= 40_000:
        gemm[0], gemm[1] = gemm[1], gemm[0]
    it = b.dtype.itemsize
    b.launch(layer, "wino_input", (tiles, _q(C)),
             [x.slot, V, i32(N), i32(H), i32(W), i32(C), i32(th), i32(tw), i32(begin[0]),
              i32(begin[1])], prog, nbytes=(N * H * W * C * it + tiles * T2 * C * mid.itemsize))
    b.launch(layer, gemm[0][0], gemm[0][1], [V, u, M, i32(C), i32(O), i32(tiles), i32(S)], prog,
             flops=2.0 * tiles * T2 * C * O,
             nbytes=(tiles * T2 * (C + O)) * mid.itemsize + T2 * C * O * it, variants=tuple(gemm))
    b.launch(layer, "wino_output", (tiles, _q(O)),
             [M, bias_arg, out.slot, i32(OH), i32(OW), i32(O), i32(th), i32(tw), i32(tiles),
              i32(S), has_b, *acts], prog,
             nbytes=S * tiles * T2 * O * mid.itemsize + N * OH * OW * O * it)


# ---------------------------------------------------------------------------- fully connected
def fc(b, node, layer, final, final_shape, act):
    src = b.acts.get(node.inputs[0])
    if node.inputs[1] not in b.graph.consts:
        raise node_error(node, "the second operand must be a constant weight on this runtime")
    p = node.params
    if p.trans_a:
        raise node_error(node, "transA = 1 is not supported on this runtime")
    B = gemm_weight(p, b.graph.consts[node.inputs[1]])      # (K, O), alpha folded in
    if B.ndim != 2:
        raise node_error(node, f"the weight has shape {list(B.shape)}: a 2-D (K, O) matrix is needed")
    K, O = B.shape
    # the input: an (N, K) image, or (N, C, H, W) flattened in NCHW order (read in place)
    x = _flat_source(b, src, K) if isinstance(src, Virtual) else None
    if x is None:
        x = b.device(node, node.inputs[0])
        if len(x.shape) != 2 or x.shape[1] != K:
            raise node_error(node, f"input of shape {list(x.shape)}: a 2-D (N, {K}) input is needed")
    if x.parts:
        raise b.split_input(node, x)
    N, H, W, C = x.nhwc
    wt = np.ascontiguousarray(B.T).reshape(O, C, H, W)
    bias = None
    if node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2]:
        cval = b.graph.consts.get(node.inputs[2])
        if cval is None or np.asarray(cval).size not in (1, O) or (
                np.asarray(cval).ndim == 2 and np.asarray(cval).shape[0] != 1):
            raise node_error(node, "the bias C must be a constant of O values on this runtime")
        cval = np.broadcast_to(np.asarray(cval, np.float32).reshape(-1), (O,)) * f32(p.beta)
        bias = b.weight(layer, node.inputs[2], cval, "ARGUMENT")
    out = b.new_act(final, final_shape, node)
    layer.kind = "fully connected" + (f" (flattened {C}x{H}x{W} read in place)" if H * W > 1 else "")
    filt = b.weight(layer, node.inputs[1], wt, "WEIGHT_WIDTH")
    pixels = H * W * _q(C)
    S = min(64, -(-pixels // 128))
    a = [i32(act[0]), f32(act[1]), f32(act[2])]
    bias_arg = bias if bias is not None else b.empty()
    if S > 1 and b.fits(_q(O), N * S):
        chunk = -(-pixels // S)
        S = -(-pixels // chunk)
        P = b.slot(("tmp", node.name, "P"), (_q(O), N * S, np.dtype(np.float32)), f"{node.name}:P")
        layer.kind += f", split over {S} input slices"
        b.launch(layer, "fc_partial", (_q(O), N * S),
                 [x.slot, filt, P, i32(N), i32(H), i32(W), i32(C), i32(O), i32(S), i32(chunk)],
                 flops=2.0 * N * K * O, nbytes=(K * O + N * K) * b.dtype.itemsize)
        b.launch(layer, "fc_reduce", (_q(O), N),
                 [P, bias_arg, out.slot, i32(N), i32(O), i32(S), i32(bias is not None), *a],
                 nbytes=N * O * (S * 4 + b.dtype.itemsize))
        return
    b.launch(layer, "fully_connected", (_q(O), N),
             [x.slot, filt, bias_arg, out.slot, i32(N), i32(H), i32(W), i32(C), i32(O),
              i32(bias is not None), *a],
             flops=2.0 * N * K * O, nbytes=(K * O + N * (K + O)) * b.dtype.itemsize)


def _flat_source(b, v, K):
    """The device tensor that ``v`` flattens in NCHW order to (N, K), or None."""
    ids = v.ids
    if ids.ndim != 2 or ids.shape[1] != K:
        return None
    t = b.acts[b.source_of(ids.reshape(-1)[:1])[0]]
    n, c, h, w = full_nchw(t)
    want = t.base + np.arange(n * c * h * w).reshape(n, c * h * w)
    if ids.shape != want.shape or not np.array_equal(ids, want):
        return None
    return t


# ---------------------------------------------------------------------------- element-wise
def binary(b, node, layer, final, final_shape, act):
    out_rank = len(final_shape)
    out4 = final_shape if out_rank == 4 else (final_shape + (1, 1) if out_rank == 2 else None)
    if out4 is None:
        raise node_error(node, f"output shape {list(final_shape)}: images hold 4-D or 2-D tensors")
    ops = []
    for n in node.inputs[:2]:
        if n in b.graph.consts:
            c = np.asarray(b.graph.consts[n], np.float32)
            if c.ndim > out_rank:
                raise node_error(node, f"constant {n!r} has more dimensions than the output")
            c = c.reshape((1,) * (out_rank - c.ndim) + c.shape)
            ops.append(("const", n, c if out_rank == 4 else c.reshape(c.shape + (1, 1))))
        else:
            ops.append(("act", n, b.device(node, n, split_ok=True)))

    def shape_of(o):
        return o[2].shape if o[0] == "const" else full_nchw(o[2])
    full = [shape_of(o) == tuple(out4) for o in ops]
    if not full[0] and not full[1]:
        raise node_error(node, "both operands are broadcast: one must have the output's shape")
    swap = 0
    x, y = ops
    if not full[0] or (x[0] == "const" and full[1] and y[0] == "act"):
        x, y, swap = y, x, 1
    if x[0] == "const":
        raise node_error(node, "an operand of the output's shape must be computed on the device")
    bs = shape_of(y)
    if any(d not in (1, o) for d, o in zip(bs, out4)):
        raise node_error(node, f"shape {list(bs)} does not broadcast to {list(out4)}")
    if y[0] == "const":
        if y[2].shape[0] > 1 and b.group != b.batch:
            raise DeviceLimitError(
                f"node {node.name!r} ({node.op}): constant {y[1]!r} has a batch dimension "
                f"of {y[2].shape[0]}, and the network's images hold the batch in groups of "
                f"{b.group}")
        operand = _const_image(b, layer, y[1], y[2])
    else:
        operand = y[2]
    out = b.new_act(final, final_shape, node, split_ok=True)
    layer.kind = f"eltwise {node.op}" + (" (broadcast)" if bs != tuple(out4) else "")
    if bs[0] > 1:
        bs = (out.nhwc[0],) + tuple(bs[1:])         # an image of the same batch group
    _eltwise(b, layer, x[2], (operand, bs), out, BINARY_CODES[node.op], swap, act)


def _const_image(b, layer, name, arr):
    """A function giving a constant's image for the output channels c0 .. c1."""
    def image(c0, c1):
        a, n = arr, name
        if a.shape[1] > 1 and (c0, c1) != (0, a.shape[1]):
            a, n = a[:, c0:c1], f"{name}[{c0}:{c1}]"
        if a.shape[0] == 1 and a.shape[2] == a.shape[3] == 1 and a.shape[1] > 1:
            return b.weight(layer, n, a.reshape(-1), "ARGUMENT")
        return b.weight(layer, n, np.ascontiguousarray(a.transpose(0, 2, 3, 1)), "IN_OUT_CHANNEL")
    return image


def _eltwise(b, layer, x, operand, out, op, swap, act):
    """``operand``: None (the activation of x alone) or (its device tensor, or a function giving
    a constant's image for a range of channels; its NCHW shape)."""
    N, H, W, C = out.nhwc
    src, (BN, BC, BH, BW) = (None, (N, C, H, W)) if operand is None else operand
    it = b.dtype.itemsize
    for c0, c1 in b.pieces(C, x, out, src if isinstance(src, Act) else None):
        xa, ac4 = b.piece(x, c0, c1)
        dst, oc4 = b.piece(out, c0, c1)
        if src is None:
            bimg, bc4 = xa.slot, ac4
        elif not isinstance(src, Act):
            bimg, bc4 = src(c0, c1), 0
        elif BC == 1:
            bimg, bc4 = src.slot, 0
        else:
            part, bc4 = b.piece(src, c0, c1)
            bimg = part.slot
        n = N * H * W * (c1 - c0)
        b.launch(layer, "eltwise", (_q(c1 - c0), W, N * H),
                 [xa.slot, bimg, dst.slot, i32(H), i32(W), i32(c1 - c0), i32(N * H), i32(BN),
                  i32(BH), i32(BW), i32(BC), i32(op), i32(swap), i32(act[0]), f32(act[1]),
                  f32(act[2]), i32(ac4), i32(bc4), i32(oc4), i32(dst.nhwc[3])],
                 flops=n, nbytes=(2 + (operand is not None)) * n * it)


def activation(b, node, layer, final, final_shape, act):
    x = b.device(node, node.inputs[0], split_ok=True)
    out = b.new_act(final, final_shape, node, split_ok=True)
    layer.kind = "eltwise (activation)"
    _eltwise(b, layer, x, None, out, -1, 0, b.act_params(node))


def batchnorm(b, node, layer, final, final_shape, act):
    """y = x * mul + add per channel: one eltwise Mul by the scale's ARGUMENT image, then an
    Add of the shift's, the fused activation on the second."""
    x = b.device(node, node.inputs[0], split_ok=True)
    if len(x.shape) not in (2, 4):
        raise node_error(node, f"input shape {list(x.shape)}: images hold 4-D or 2-D tensors")
    p = node.params
    C = p.channels
    bs = (1, C, 1, 1)
    mid = b.new_act(final, final_shape, node, split_ok=True, temp="scaled")
    out = b.new_act(final, final_shape, node, split_ok=True)
    layer.kind = "batch normalization (scale, shift)"
    scale = _const_image(b, layer, f"{node.name}.scale", p.mul.reshape(bs))
    shift = _const_image(b, layer, f"{node.name}.shift", p.add.reshape(bs))
    _eltwise(b, layer, x, (scale, bs), mid, BINARY_CODES["Mul"], 0, (0, 0.0, 0.0))
    _eltwise(b, layer, mid, (shift, bs), out, BINARY_CODES["Add"], 0, act)


# ---------------------------------------------------------------------------- pooling, softmax, resize
def pool(b, node, layer, final, final_shape, act):
    if not isinstance(node.params, Pool):
        raise node_error(node, "only 2-D pooling runs on images")
    x = b.device(node, node.inputs[0], split_ok=True)
    N, H, W, C = x.nhwc
    p = node.params
    k, s, d, begin, end = p.kernel, p.strides, p.dilations, p.begin, p.end
    out = b.new_act(final, final_shape, node, split_ok=True)
    _, OH, OW, _ = out.nhwc
    layer.kind = f"{'max' if p.is_max else 'average'} pool {k[0]}x{k[1]}"
    _per_channel(b, layer, "pool2d", x, out, lambda c0, c1, xin, dst: (
        (_q(c1 - c0), OW, N * OH),
        [xin, dst, i32(H), i32(W), i32(c1 - c0), i32(OH), i32(OW), i32(N * OH), i32(k[0]),
         i32(k[1]), i32(s[0]), i32(s[1]), i32(begin[0]), i32(begin[1]), i32(end[0]),
         i32(end[1]), i32(d[0]), i32(d[1]), i32(p.is_max), i32(p.count_include_pad)],
        N * (c1 - c0) * OH * OW * k[0] * k[1], N * (c1 - c0) * (H * W + OH * OW)))


def global_pool(b, node, layer, final, final_shape, act):
    x = b.device(node, node.inputs[0], split_ok=True)
    p = node.params
    if len(x.shape) != 4 or p.axes != (2, 3) or p.kind not in ("mean", "max"):
        raise node_error(node, f"{node.op} runs on images over axes (2, 3) of a 4-D tensor only")
    N, H, W, C = x.nhwc
    out = b.new_act(final, final_shape, node, split_ok=True)
    is_max = p.kind == "max"
    layer.kind = f"global {'max' if is_max else 'average'} pool"
    _per_channel(b, layer, "global_pool", x, out, lambda c0, c1, xin, dst: (
        (_q(c1 - c0), N), [xin, dst, i32(N), i32(H), i32(W), i32(c1 - c0), i32(is_max)],
        N * (c1 - c0) * H * W, N * (c1 - c0) * (H * W + 1)))


def _per_channel(b, layer, kernel, x, out, make):
    """A per-channel kernel, launched once, or once per part where ``x`` or ``out`` is split
    by channels: ``make(c0, c1, x's slot, out's slot)`` gives the launch's global size, its
    arguments, flops and elements moved; the channels' first pixel in each image and the
    output image's channel count follow the arguments."""
    for c0, c1 in b.pieces(x.nhwc[3], x, out):
        xin, ic4 = b.piece(x, c0, c1)
        dst, oc4 = b.piece(out, c0, c1)
        gsize, args, flops, elems = make(c0, c1, xin.slot, dst.slot)
        b.launch(layer, kernel, gsize, [*args, i32(ic4), i32(oc4), i32(dst.nhwc[3])],
                 flops=flops, nbytes=elems * b.dtype.itemsize)


def softmax(b, node, layer, final, final_shape, act):
    x = b.device(node, node.inputs[0])
    rank = len(x.shape)
    axis = node.params.axis
    if axis != 1 or (node.params.coerced and rank != 2):
        raise node_error(node, f"softmax over axis {axis} of a rank-{rank} tensor: this runtime "
                         "takes the channel axis (1)")
    N, H, W, C = x.nhwc
    out = b.new_act(final, final_shape, node)
    layer.kind = "softmax over channels"
    b.launch(layer, "softmax_channels", (W, N * H),
             [x.slot, out.slot, i32(H), i32(W), i32(C), i32(N * H)], flops=5 * N * H * W * C,
             nbytes=4 * N * H * W * C * b.dtype.itemsize)


def resize(b, node, layer, final, final_shape, act):
    x = b.device(node, node.inputs[0])
    p = node.params
    mode, ctm, nearest = p.mode, p.coord, p.nearest
    ok = ((mode == "nearest" and ((ctm == "asymmetric" and nearest == "floor") or
                                  (ctm == "half_pixel" and nearest == "round_prefer_floor")))
          or (mode == "linear" and ctm in ("half_pixel", "pytorch_half_pixel")))
    if not ok or len(x.shape) != 4 or tuple(final_shape[:2]) != tuple(x.shape[:2]):
        raise node_error(node, f"mode {mode!r} with coordinate_transformation_mode {ctm!r} is not "
                         "supported on images (nearest asymmetric/floor, nearest half_pixel, "
                         "linear half_pixel are)")
    N, H, W, C = x.nhwc
    out = b.new_act(final, final_shape, node)
    _, OH, OW, _ = out.nhwc
    if ctm == "pytorch_half_pixel" and (OH == 1 or OW == 1):
        raise node_error(node, "pytorch_half_pixel with an output side of 1 is not supported")
    layer.kind = f"resize {mode}"
    b.launch(layer, "resize2d", (_q(C), OW, N * OH),
             [x.slot, out.slot, i32(H), i32(W), i32(C), i32(OH), i32(OW), i32(N * OH),
              f32(p.scales[2]), f32(p.scales[3]), i32(mode == "linear"), i32(ctm != "asymmetric")],
             nbytes=(N * H * W * C + N * OH * OW * C) * b.dtype.itemsize)


EMITTERS = {"Conv": conv, "Gemm": fc, "MatMul": fc, "BatchNormalization": batchnorm,
            "MaxPool": pool, "AveragePool": pool, "GlobalAveragePool": global_pool,
            "GlobalMaxPool": global_pool, "ReduceMean": global_pool, "Softmax": softmax,
            "Resize": resize, **{op: binary for op in ("Add", "Sub", "Mul", "Div")},
            **{op: activation for op in ACTIVATIONS}}
