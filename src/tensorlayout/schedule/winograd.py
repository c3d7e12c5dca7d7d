"""The Winograd tile of every target, from the rules of :mod:`tensorlayout.winograd.auto`:
the CPU engine's algorithm and tile (its cost model, over the shape the engine sees), and the
image pipeline's tile with its fallbacks when an image would pass the device's limits.

>>> image_sizes(1, (56, 56), 64, 64, 4)
{'V': (196, 576), 'M': (196, 576), 'U': (16, 2304)}
>>> image_tile((56, 56), (64, 64), lambda t: [])
(4, None)
>>> image_tile((56, 56), (64, 64), lambda t: ["V"] if t > 2 else [])
(2, 'Winograd tile 4 -> 2 (V past the limit)')
"""

from __future__ import annotations

from ..winograd._simd_block import direct_panel
from ..winograd.auto import IMAGE_MIN_CHANNELS, IMAGE_TILES, image_mid_dtype, image_tile

__all__ = ["cpu_conv", "direct_lanes", "SHIFT_MAX_MACS", "SHIFT_MAX_OVERHANG",
           "SHIFT_STRIDED_BELOW", "DIRECT_MIN_CHANNELS", "DIRECT_MIN_FILL", "DIRECT_MAX_TILES",
           "DIRECT_MAX_PRODUCT", "FIRST_DIRECT", "FIRST_DIRECT_BELOW", "FIRST_DIRECT_MIN_FILL",
           "image_tile", "image_sizes", "image_mid_dtype", "IMAGE_TILES", "IMAGE_MIN_CHANNELS"]


#: Multiply-adds up to which a one-group stride-1 convolution is "small" on the CPU backend
#: and runs as the shifted GEMM or im2col rather than Winograd: in a network its transformed
#: weights (1.8 to 4 times the weights) come from memory, its transforms and narrow GEMMs
#: cost more than its saved multiplications, and its step leaves the bound run.  Measured on
#: whole networks, 2 threads (``benchmarks/bench_setting.py ... SHIFT_MAX_MACS 8000000
#: 100000000``, ``benchmarks/results/setting_shift_max_macs_ci2.txt``).  ResNet's 3 x 3
#: layers at 224^2 (116M each) run faster as the direct convolution, in blocks between
#: blocked layers, than by Winograd over planes: ``... SHIFT_MAX_MACS 100000000 128000000
#: --nets resnet18:224,resnet50:224,vgg11:224``, ``setting_shift_max_macs_128m_ci2.txt``:
#: ResNet-18 1.03x, ResNet-50 1.04x, VGG-11 (layers of 231M and more) the same.
SHIFT_MAX_MACS = 128_000_000
#: The most columns the shifted GEMM's grid may compute and drop, as a fraction of the output
#: columns (its grid is (KW - 1) · dilation / stride columns wider than the output): past it
#: (3 x 3 on maps under 8 wide) im2col's unfolding costs less than the dropped columns.
SHIFT_MAX_OVERHANG = 0.25
#: Rows (C · KH · KW) under which a strided one-group convolution runs as the shifted GEMM
#: (a network's first layer: 3 channels, 3 x 3 or 7 x 7, stride 2), its input dealt into the
#: stride phases once instead of unfolded; deeper strided layers keep im2col (on whole
#: networks the two are within a few per cent there: ``benchmarks/bench_setting.py
#: tensorlayout.schedule.winograd.SHIFT_STRIDED_BELOW 256 5000 --nets resnet18:224,...``).
SHIFT_STRIDED_BELOW = 256
#: Input channels from which a layer the shifted GEMM or im2col would take runs as the
#: backend's direct convolution (:mod:`tensorlayout.backends.cpu_direct`: its input dealt
#: into blocks of 16 channels, a network's first layer of 3 would be mostly zeros): one
#: block's worth since the planes store is transposed in registers (SqueezeNet 1.1's
#: 16-channel 3 x 3 layers: 1.03x at 224^2, 1.04x at 96^2, ``python
#: benchmarks/bench_setting.py tensorlayout.schedule.winograd.DIRECT_MIN_CHANNELS 32 16
#: --nets squeezenet1_1:224,squeezenet1_1:96``, ``setting_direct_min_channels_ci2.txt``).
DIRECT_MIN_CHANNELS = 16
#: Whether a layer of fewer channels (a network's first) takes the direct convolution over
#: its NCHW input, a run of one float per (channel, kh, kw) (``tl_dcn``), where the schedule
#: then holds its output blocked (:func:`tensorlayout.schedule.cpu.schedule_cpu` gives it
#: back to the shifted GEMM where not: scattered into planes it is slower).
FIRST_DIRECT = True
#: Input channels under which a layer is a first layer to :data:`FIRST_DIRECT`.
FIRST_DIRECT_BELOW = 16
#: The least share of its strips of nr columns a first layer's outputs must fill for
#: :data:`FIRST_DIRECT` (16 or 24 outputs fill half or three quarters of a strip of 32,
#: where the shifted GEMM's narrow panels of 8 rows leave none empty).
FIRST_DIRECT_MIN_FILL = 0.8
#: The least share of the positions of its panels (up to mr output positions, of up to 4
#: output rows: ``_simd_block.direct_panel``) a map must fill for the direct convolution.
DIRECT_MIN_FILL = 0.6
#: Tiles per image up to which the direct convolution is tried before Winograd however many
#: multiply-adds the layer has: on a small map each transformed weight (α² per 3 x 3: 4x
#: the weights for F(4, 3)) serves few tiles, and the layer waits on reading them: ResNet-18
#: 224^2 (its 14^2 and 7^2 layers) 1.16x, ResNet-50 224^2 1.08x, VGG-11 96^2 1.07x; 49 (28^2
#: maps too) left VGG-11 224^2 10% slower (``benchmarks/bench_setting.py
#: tensorlayout.schedule.winograd.DIRECT_MAX_TILES 0 16 --nets ...``,
#: ``benchmarks/results/setting_direct_max_tiles_ci2.txt``).
DIRECT_MAX_TILES = 16
#: Input times output channels up to which the direct convolution is tried before Winograd
#: on any map: a 64 -> 64 layer between blocked 1 x 1 layers (a ResNet-50 bottleneck's)
#: keeps the blocks where Winograd would take the planes out and back (ResNet-50 1.04x at
#: 224^2 and 96^2; ResNet-18, whose 64-channel stage is all 3 x 3, within 1%; every layer
#: direct left VGG-11 224^2 21% slower: ``python benchmarks/bench_setting.py
#: tensorlayout.schedule.winograd.DIRECT_MAX_PRODUCT 0 4096 --nets ...``,
#: ``benchmarks/results/setting_direct_max_product_ci2.txt``).
DIRECT_MAX_PRODUCT = 64 * 64


def _direct_rows(cols: bool = False):
    """The micro-kernel's rows (``cols``: its columns) on this machine, or 0 where its code
    cannot be built."""
    try:
        from ..winograd._simd import isa

        return isa().nr if cols else isa().mr
    except Exception:  # noqa: BLE001 - no llvmlite or no usable CPU: no direct convolution
        return 0


def direct_lanes(graph, node) -> int:
    """The floats of each run of the backend's direct convolution of ``node``: 16 (a block
    of channels), or 1 under :data:`FIRST_DIRECT_BELOW` input channels, where it reads its
    input as NCHW planes, a float per (channel, kh, kw)."""
    return 1 if graph.shapes[node.inputs[0]][1] < FIRST_DIRECT_BELOW else 16


def cpu_conv(graph, node, first_direct: bool = True):
    """``(algorithm, tile, reason)`` of a Conv node on the CPU backend: the engine's auto rule
    over the shape it runs at (asymmetric padding is padded on the host, so the engine sees it
    padded); then, for a one-group window wider than 1 x 1 (or a strided 1 x 1, which the
    CPU schedule otherwise runs as a 1 x 1 layer over the sliced input) where the rule gives
    im2col, Winograd with at most :data:`SHIFT_MAX_MACS` multiply-adds or Winograd of at
    most :data:`DIRECT_MAX_TILES` tiles per image or at most :data:`DIRECT_MAX_PRODUCT`
    input times output channels: "direct" (the backend's direct
    convolution) from :data:`DIRECT_MIN_CHANNELS` input channels, a column stride of 1 or 2
    and a map that fills at least :data:`DIRECT_MIN_FILL` of its best panels' positions
    (under :data:`FIRST_DIRECT_BELOW` channels, where ``first_direct`` and
    :data:`FIRST_DIRECT`, a window wider than 1 x 1 whose outputs fill
    :data:`FIRST_DIRECT_MIN_FILL` of the micro-kernel's strips and that the rule does not
    keep on Winograd: over its NCHW input, a float per run; the schedule asks again with
    ``first_direct`` False where that layer's output is not blocked); else Winograd where the rule gave it, or (strided: under :data:`SHIFT_STRIDED_BELOW`
    rows C · KH · KW) "shifted" (the backend's
    one GEMM per tap over the stride phases, no unfolded matrix) where the shifted
    grid's overhang is at most :data:`SHIFT_MAX_OVERHANG`; a small layer past that overhang
    takes im2col (``python benchmarks/bench_cpu_conv.py``)."""
    from ..winograd import choose_algorithm

    p = node.params
    n, c, h, w = graph.shapes[node.inputs[0]]
    if p.symmetric:
        shape, padding = (n, c, h, w), p.begin
    else:
        shape = (n, c, h + p.begin[0] + p.end[0], w + p.begin[1] + p.end[1])
        padding = (0, 0)
    w_shape = graph.shapes[node.inputs[1]]
    algorithm, tile, reason = choose_algorithm(shape, w_shape, p.strides, padding, p.dilations,
                                               p.group)
    out = graph.shapes.get(node.outputs[0]) if node.outputs else None
    strided = tuple(p.strides) != (1, 1)
    rows = w_shape[1] * w_shape[2] * w_shape[3]
    if (p.group != 1 or (w_shape[2] * w_shape[3] == 1 and not strided) or out is None
            or len(out) != 4 or out[2] * out[3] == 1):
        return algorithm, tile, reason
    macs = int(out[0]) * out[2] * out[3] * w_shape[0] * rows
    small = macs <= SHIFT_MAX_MACS
    keep = algorithm == "winograd" and not small    # Winograd's, unless the direct's
    if (keep and -(-out[2] // tile) * -(-out[3] // tile) > DIRECT_MAX_TILES
            and c * w_shape[0] > DIRECT_MAX_PRODUCT):
        return algorithm, tile, reason
    few = direct_lanes(graph, node) == 1 and w_shape[2] * w_shape[3] > 1   # NCHW planes
    nr = _direct_rows(cols=True) if few else 0
    ok = (p.strides[1] in (1, 2) and (c >= DIRECT_MIN_CHANNELS or (
        few and first_direct and FIRST_DIRECT and not keep
        and nr and w_shape[0] / (-(-w_shape[0] // nr) * nr) >= FIRST_DIRECT_MIN_FILL)))
    mr = _direct_rows() if ok else 0
    if mr:
        (R, cw), fill = direct_panel(out[2], out[3], mr)
        if fill >= DIRECT_MIN_FILL:
            runs = "a float per (channel, kh, kw) run of the NCHW input" if few else "blocks"
            return "direct", None, (f"{macs / 1e6:.1f}M multiply-adds, {c} channels: the "
                                    f"direct convolution (panels of {R} x {cw} positions, "
                                    f"{fill:.0%} filled; {runs})")
    if keep or (strided and rows >= SHIFT_STRIDED_BELOW):
        return algorithm, tile, reason
    overhang = ((w_shape[3] - 1) * p.dilations[1] // p.strides[1]) / out[3]
    if overhang <= SHIFT_MAX_OVERHANG:
        why = ("im2col's layer" if algorithm == "im2col" else
               f"{macs / 1e6:.1f}M multiply-adds") + (f", {rows} rows" if strided else "")
        return "shifted", None, (f"{why}: the shifted GEMM (no unfolded matrix; "
                                 f"{overhang:.0%} of its columns dropped)")
    if algorithm == "winograd":
        return "im2col", None, (f"{macs / 1e6:.1f}M multiply-adds on {out[3]} columns: im2col "
                                f"(Winograd pays from {SHIFT_MAX_MACS / 1e6:.0f}M)")
    return algorithm, tile, reason


def image_sizes(batch, out_hw, channels, out_channels, tile, slices=1) -> dict:
    """``(width, height)`` of the Winograd pipeline's images: the transformed input V
    (IN_OUT_HEIGHT of (α², C, tiles, 1)), the GEMM's output M (``slices`` stacks of it when
    the sums are split over input channel slices) and the transformed filter U."""
    from ..image import image_shape

    T2 = (tile + 2) ** 2
    tiles = batch * -(-out_hw[0] // tile) * -(-out_hw[1] // tile)
    v = image_shape("IN_OUT_HEIGHT", (T2, channels, tiles, 1))
    m = image_shape("IN_OUT_HEIGHT", (T2, out_channels, tiles, 1))
    return {"V": v, "M": (m[0], slices * m[1]),
            "U": image_shape("WINOGRAD_FILTER", (out_channels, channels, 3, 3), tile=tile)}
