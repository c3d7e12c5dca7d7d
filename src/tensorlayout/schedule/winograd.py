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

from ..winograd.auto import IMAGE_MIN_CHANNELS, IMAGE_TILES, image_mid_dtype, image_tile

__all__ = ["cpu_conv", "image_tile", "image_sizes", "image_mid_dtype", "IMAGE_TILES",
           "IMAGE_MIN_CHANNELS"]


def cpu_conv(graph, node):
    """``(algorithm, tile, reason)`` of a Conv node on the CPU engine: the auto rule over the
    shape it runs at (asymmetric padding is padded on the host, so the engine sees it padded)."""
    from ..winograd import choose_algorithm

    p = node.params
    n, c, h, w = graph.shapes[node.inputs[0]]
    if p.symmetric:
        shape, padding = (n, c, h, w), p.begin
    else:
        shape = (n, c, h + p.begin[0] + p.end[0], w + p.begin[1] + p.end[1])
        padding = (0, 0)
    return choose_algorithm(shape, graph.shapes[node.inputs[1]], p.strides, padding,
                            p.dilations, p.group)


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
