"""The auto rule: which algorithm and tile a convolution gets, and why.

Winograd pays for 3×3 and 5×5 kernels at stride 1, dilation 1, with enough channels.
Its tile trades multiplications for transform work and transformed-weight size:
F(m, 3) needs α²/m² multiplications per output (α = m + 2) against 9 for im2col, and
its transformed weights are α²/9 times the weights.  When the weights are transformed
once (a plan, a layer) only the per-call work counts; when they are transformed on every
call (``conv2d``) the transform is paid each time and small layers go to im2col.
"""

from __future__ import annotations

from ._args import pair

__all__ = ["choose_algorithm", "AUTO_MIN_CHANNELS", "image_tile", "image_mid_dtype", "IMAGE_TILES",
           "IMAGE_MIN_CHANNELS"]

AUTO_MIN_CHANNELS = 16          # per group, in and out
# Cost of transforming one weight element on every call, in multiply-adds of the GEMM it
# feeds (measured: writing the transformed weights costs about as much as this many
# multiply-adds of the GEMM per element; docs/winograd.md "The auto rule").
PER_CALL_WEIGHT_COST = 24
# Reading one transformed weight element from memory on each call (they rarely fit the
# cache), in multiply-adds.
WEIGHT_READ_COST = 2
# Transform work per tile and channel, in multiply-adds (input and output transforms).
# F(6,3)'s 8x8 tiles cost far more than F(4,3)'s beside the packed-panel GEMM (measured with
# benchmarks/sweep_engine.py: F(4,3) faster on every canonical layer but 512@7).
TILE_TRANSFORM_COST = {2: 2.0, 4: 3.5, 6: 20.0}
# GEMMs over few tiles run below the BLAS's best rate: a GEMM over P tiles costs as if it
# had P + GEMM_TILE_OVERHEAD (measured with benchmarks/sweep_engine.py).
GEMM_TILE_OVERHEAD = 8


def _tiles(side_h, side_w, m):
    return -(-side_h // m) * -(-side_w // m)


def _wino_cost(m, r, N, OH, OW, C, K, per_call):
    """Multiply-add equivalents of one call of F(m, r)."""
    alpha = m + r - 1
    P = N * _tiles(OH, OW, m)
    cost = (alpha * alpha * (P + GEMM_TILE_OVERHEAD) * C * K
            + TILE_TRANSFORM_COST.get(m, 6.0) * alpha * alpha * P * (C + K))
    cost += (PER_CALL_WEIGHT_COST if per_call else WEIGHT_READ_COST) * alpha * alpha * C * K
    return cost


def choose_algorithm(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1,
                     weights="once"):
    """The auto rule: ``(algorithm, tile, reason)`` for a convolution of these shapes.

    Winograd only for square 3×3 / 5×5 kernels, stride 1, dilation 1 and at least
    ``AUTO_MIN_CHANNELS`` input and output channels per group.  The tile (F(2,3), F(4,3),
    F(6,3); F(4,5) for 5×5) is the one with the fewest multiply-add equivalents per call,
    counting the GEMMs, the input and output transforms and, with ``weights="per-call"``
    (what :func:`conv2d` does), the weight transform too; im2col wins when no tile beats
    its 9 (or 25) multiply-adds per output.  Depthwise and other one-channel-per-group
    convolutions run direct loops.

    >>> choose_algorithm((1, 128, 112, 112), (128, 128, 3, 3), padding=1)[:2]
    ('winograd', 4)
    >>> choose_algorithm((1, 256, 56, 56), (256, 256, 3, 3), padding=1)[:2]
    ('winograd', 4)
    >>> choose_algorithm((1, 512, 7, 7), (512, 512, 3, 3), padding=1)[:2]
    ('winograd', 2)
    >>> choose_algorithm((1, 512, 7, 7), (512, 512, 3, 3), padding=1, weights="per-call")[:2]
    ('im2col', None)
    >>> choose_algorithm((1, 3, 224, 224), (64, 3, 3, 3), padding=1)[:2]
    ('im2col', None)
    """
    from ._args import geometry

    if weights not in ("once", "per-call"):
        from ..errors import LayoutError

        raise LayoutError(f"weights = {weights!r} is not allowed: it must be 'once' (a plan) or "
                          "'per-call' (conv2d)")
    x_shape, w_shape, (sh, sw), (ph, pw), (dh, dw), groups, out = geometry(
        x_shape, w_shape, stride, padding, dilation, groups)
    N, C, H, W = x_shape
    K, Cg, KH, KW = w_shape
    OH, OW = out[2:]
    Kg = K // groups
    fallback = "direct" if Cg == 1 else "im2col"
    if KH != KW or KH not in (3, 5):
        return fallback, None, f"kernel {KH}x{KW}: Winograd only for 3x3 and 5x5"
    if (sh, sw) != (1, 1) or (dh, dw) != (1, 1):
        return fallback, None, "stride or dilation is not 1"
    if Cg < AUTO_MIN_CHANNELS or Kg < AUTO_MIN_CHANNELS:
        return fallback, None, (f"{Cg} input / {Kg} output channels per group: Winograd pays "
                                f"from {AUTO_MIN_CHANNELS}")
    per_call = weights == "per-call"
    tiles = (2, 4, 6) if KH == 3 else (4,)
    costs = {m: _wino_cost(m, KH, N, OH, OW, Cg, Kg, per_call) for m in tiles}
    best = min(costs, key=costs.get)
    # im2col: KH·KW multiply-adds per output (its GEMM as thin as the output is small), the
    # columns gathered, the weights read
    im2col = ((N * OH * OW + GEMM_TILE_OVERHEAD) * Cg * Kg * KH * KW
              + 2.0 * N * OH * OW * Cg * KH * KW + WEIGHT_READ_COST * KH * KW * Cg * Kg)
    when = "weights transformed per call" if per_call else "weights transformed once"
    if costs[best] >= im2col:
        return fallback, None, (f"{KH}x{KW}, {when}: no Winograd tile beats im2col here "
                                f"(best F({best},{KH}) {costs[best] / im2col:.2f}x its work)")
    return "winograd", best, (f"{KH}x{KW}, {when}: F({best},{KH}) has the least work "
                              f"({im2col / costs[best]:.1f}x fewer multiply-adds than im2col)")


# ---------------------------------------------------------------------------- images
#: The tiles of the OpenCL image pipeline, and the smaller ones tried when a tile's images
#: do not fit the device.
IMAGE_TILES = {6: (6, 4, 2), 4: (4, 2), 2: (2,)}
#: Input and output channels from which the image pipeline's auto rule takes Winograd.
IMAGE_MIN_CHANNELS = 16


def image_tile(out_hw, channels, past_limit, want="auto"):
    """``(tile, note)``: the Winograd tile of a 3x3 stride-1 convolution on images, 0 for the
    direct kernel.  ``want``: "auto" (tile 4, or 2 when the output is under 8 x 8; direct
    below :data:`IMAGE_MIN_CHANNELS` input or output channels), "any" (the same without the
    channel rule: a caller that asked for Winograd), or a tile 2, 4 or 6.  ``past_limit(tile)``
    lists the images of that tile past the device's limits; a smaller tile is tried, then
    the direct kernel, and ``note`` says so (None when the wanted tile fits)."""
    C, O = channels
    if want in ("auto", "any"):
        if want == "auto" and (C < IMAGE_MIN_CHANNELS or O < IMAGE_MIN_CHANNELS):
            return 0, None
        want = 4 if min(out_hw) >= 8 else 2
    bad = []
    for tile in IMAGE_TILES[want]:
        bad = past_limit(tile)
        if not bad:
            return tile, None if tile == want else (
                f"Winograd tile {want} -> {tile} ({', '.join(last)} past the limit)")
        last = bad
    return 0, f"Winograd tile {want} -> direct kernel ({', '.join(bad)} past the limit)"


def image_mid_dtype(tile: int, dtype):
    """The channel type of the image pipeline's V and M images: the images' own, but float32
    for tile 6, whose MACE-scaled transforms overflow float16.

    >>> image_mid_dtype(6, "float16").name, image_mid_dtype(4, "float16").name
    ('float32', 'float16')
    """
    import numpy as np

    return np.dtype(np.float32) if tile == 6 else np.dtype(dtype)
