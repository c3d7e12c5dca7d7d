"""Seed 003's nineteen figures, one figure per MACE image type, and an index page.

Every figure is drawn from the layout code with the parameters the seed
states: X = 4 NPUs of S = 1024 bytes, 4-byte blocks, 128-byte alignment.
Where the seed leaves X symbolic (the scatter figures, C = X - 1 and C = X + 2)
X = 4, and the figure's heading says so.

>>> [name for name, _, _ in GALLERY][:3]
['address.svg', 'scatter_0.svg', 'scatter_1.svg']
>>> len([g for g in GALLERY if not g[0].startswith("image_")])
19
"""

from __future__ import annotations

import html
import os

from .._checks import check_output_path
from ..errors import LayoutError
from .image import image_figure
from .npu import address_figure, npu_figure

__all__ = ["GALLERY", "SEED_CHIP", "gallery_figures", "write_gallery"]

X, S, ALIGN = 4, 1024, 128


def _chip():
    from ..npu import Chip

    return Chip(X, S, ALIGN, name="seed chip")


SEED_CHIP = (X, S, ALIGN)


def _tensor(address, shape, stride=None, dtype="fp32", mode=None, layout="aligned"):
    from ..npu import tensor_layout

    return tensor_layout(_chip(), address, shape, stride=stride, dtype=dtype, mode=mode, layout=layout)


def _address():
    return address_figure(_chip(), {"A": 340, "B": 1472, "C": 2300, "D": 3088},
                          heading="Four local addresses in 4 NPUs \u00d7 1024 bytes")


def _scatter(c, q, case):
    def build():
        t = _tensor(q * S, (2, c, 1, 1), layout="compact")
        rel = "X \u2212 1" if c == X - 1 else "X + 2"
        start = "0" if q == 0 else "1" if q == 1 else "X \u2212 1"
        return npu_figure(
            t, label="feature", blocks_per_row=1,
            heading=f"Features (n, c) scattered over the NPUs: C = {rel}, start NPU {start} (drawn with X = 4)",
            notes=["Each block stands for the memory area of one feature (n, c, :, :) "
                   "(drawn here with H = W = 1, so one block is one feature)."])
    build.__name__ = f"scatter_{case}"
    return build


def _npu(heading, *args, **kwargs):
    def build():
        return npu_figure(_tensor(*args, **kwargs), heading=heading)
    return build


def _matrix(w):
    def build():
        from ..npu import matrix_layout

        return npu_figure(matrix_layout(_chip(), 0, 2, 40, w),
                          heading=f"A 2 \u00d7 40 fp32 matrix in the matrix layout, W = {w}")
    return build


def _image(kind, shape, **kwargs):
    def build():
        return image_figure(kind, shape, heading=f"{kind}: which element each lane of each pixel holds",
                            **kwargs)
    return build


#: (file name, caption, builder) for every figure of the gallery, in the seed's order.
GALLERY = (
    ("address.svg",
     "With X = 4 NPUs of S = 1024 bytes, address A = Q\u00b7S + R lies in NPU Q = A // S at offset "
     "R = A mod S: 340 is NPU 0 offset 340, 1472 is NPU 1 offset 448, 2300 is NPU 2 offset 252 and "
     "3088 is NPU 3 offset 16. Each block is 4 bytes; the rows between the marked ones are elided.",
     _address),
    ("scatter_0.svg",
     "C = X \u2212 1 channels starting at NPU 0: channel c goes to NPU c, so NPU X \u2212 1 gets nothing "
     "and feature (1, 0) comes back to NPU 0. One block row per batch: ceil((0 + X \u2212 1) / X) = 1 "
     "channel per NPU.", _scatter(X - 1, 0, 0)),
    ("scatter_1.svg",
     "C = X \u2212 1 channels starting at NPU 1: now NPU 0 is the one left out, and there is still one "
     "channel per NPU, ceil((1 + X \u2212 1) / X) = 1.", _scatter(X - 1, 1, 1)),
    ("scatter_2.svg",
     "C = X + 2 channels starting at NPU 0: channels X and X + 1 wrap around to NPUs 0 and 1 in a second "
     "block row, which leaves X \u2212 2 empty blocks; 2 channels per NPU. Features (*, c0) and (*, c1) "
     "share an NPU exactly when c0 mod X = c1 mod X.", _scatter(X + 2, 0, 2)),
    ("scatter_3.svg",
     "C = X + 2 channels starting at NPU X \u2212 1: one batch needs three block rows, with X \u2212 1 "
     "empty blocks in the first and in the third; 3 channels per NPU. A wasteful placement, and the empty "
     "blocks are best not reused.", _scatter(X + 2, X - 1, 3)),
    ("stride_local_0.svg",
     "A (2, 5, 3, 4) fp32 tensor at NPU 0 with W stride 2, H stride 16, C stride 56 and N stride 120 "
     "(in elements; the C stride steps from c to c + X).",
     _npu("Local strides: (2, 5, 3, 4) fp32, strides (n, c, h, w) = (120, 56, 16, 2)",
          0, (2, 5, 3, 4), stride=(120, 56, 16, 2))),
    ("stride_local_1.svg",
     "A (2, 3, 1, 10) fp32 tensor at NPU 1 with W stride 2 and N stride 120. With H = 1 and "
     "ceil((1 + 3) / 4) = 1 channel per NPU, the H and C strides play no part (20 is drawn for both).",
     _npu("Local strides: (2, 3, 1, 10) fp32 at NPU 1, strides (n, c, h, w) = (120, 20, 20, 2)",
          S, (2, 3, 1, 10), stride=(120, 20, 20, 2))),
    ("align_fp32_start_0_2_3_4_5.svg",
     "Aligned layout, (2, 3, 4, 5) fp32 from NPU 0: the C stride is ceil(20 / 32)\u00b732 = 32, so 12 "
     "empty blocks follow each feature; one channel per NPU, so the N stride is 32.",
     _npu("Aligned layout: (2, 3, 4, 5) fp32 starting at NPU 0", 0, (2, 3, 4, 5))),
    ("align_fp32_start_2_2_3_4_5.svg",
     "The same tensor from NPU 2: channel 2 wraps to NPU 0, two channels per NPU, so the C stride (32) "
     "now matters and the N stride is 64.",
     _npu("Aligned layout: (2, 3, 4, 5) fp32 starting at NPU 2", 2 * S, (2, 3, 4, 5))),
    ("compact_fp32_start_0_2_3_4_5.svg",
     "Compact layout, (2, 3, 4, 5) fp32 from NPU 0: features are packed back to back, C stride "
     "H\u00b7W = 20, N stride 20.",
     _npu("Compact layout: (2, 3, 4, 5) fp32 starting at NPU 0", 0, (2, 3, 4, 5), layout="compact")),
    ("compact_fp32_start_2_2_3_4_5.svg",
     "Compact layout from NPU 2: two channels per NPU, C stride 20, N stride 40.",
     _npu("Compact layout: (2, 3, 4, 5) fp32 starting at NPU 2", 2 * S, (2, 3, 4, 5), layout="compact")),
    ("matrix_w_40.svg",
     "A 2 \u00d7 40 fp32 matrix with W = 40: C = 1, so every column is in NPU 0, and each row takes "
     "ceil(40 / 32)\u00b732 = 64 blocks.", _matrix(40)),
    ("matrix_w_20.svg",
     "W = 20: the columns split evenly over NPUs 0 and 1 and a row takes 32 blocks per NPU: a smaller W "
     "relieves the memory of each NPU.", _matrix(20)),
    ("matrix_w_10.svg",
     "W = 10: the columns spread over all four NPUs; a row still takes 32 blocks in each.", _matrix(10)),
    ("matrix_w_8.svg",
     "W = 8: C = ceil(40 / 8) = 5 is more than X, so channel 4 wraps to NPU 0 and a row takes more "
     "blocks again. The best W keeps C at most X.", _matrix(8)),
    ("matrix_w_15.svg",
     "W = 15 does not divide 40: NPUs 0 and 1 hold 15 columns of each row, NPU 2 only "
     "40 \u2212 2\u00b715 = 10.", _matrix(15)),
    ("matrix_w_6.svg",
     "W = 6 gives C = 7 channels: more memory than W = 15. W should be moderately small so that more "
     "NPUs share the matrix, but C is better not above X.", _matrix(6)),
    ("aligned_4N.svg",
     "4N mode, aligned: a (6, 5, 4, 5) int8 tensor viewed as (2, 5, 4, 5) int8x4. Four consecutive n share "
     "one 32-bit word; N = 6 leaves 2 dummy bytes in each word of the second packed batch, e.g. the word "
     "(1, 0, 0, 0) holds n = 4, 5 and two dummies.",
     _npu("4N mode, aligned layout: (6, 5, 4, 5) int8", 0, (6, 5, 4, 5), dtype="int8", mode="4N")),
    ("aligned_2N.svg",
     "2N mode, aligned: a (3, 5, 4, 5) int16 tensor viewed as (2, 5, 4, 5) int16x2. Pairs of n share a "
     "32-bit word; N = 3 is odd, so the word (1, 0, 0, 0) holds element (2, 0, 0, 0) and a dummy.",
     _npu("2N mode, aligned layout: (3, 5, 4, 5) int16", 0, (3, 5, 4, 5), dtype="int16", mode="2N")),
    ("image_IN_OUT_CHANNEL.svg",
     "IN_OUT_CHANNEL: an NHWC activation (1, 2, 3, 5); the channels go four to a pixel, pixel columns "
     "walk w inside each group of four channels. The last group holds only c = 4, so its G, B and A lanes "
     "are padding.", _image("IN_OUT_CHANNEL", (1, 2, 3, 5))),
    ("image_IN_OUT_HEIGHT.svg",
     "IN_OUT_HEIGHT: NHWC (1, 5, 2, 2); four rows h go into the lanes of one pixel, image [W\u00b7C, "
     "N\u00b7q(H)].", _image("IN_OUT_HEIGHT", (1, 5, 2, 2))),
    ("image_IN_OUT_WIDTH.svg",
     "IN_OUT_WIDTH: NHWC (1, 2, 5, 2); four columns w go into the lanes of one pixel, image [q(W)\u00b7C, "
     "N\u00b7H].", _image("IN_OUT_WIDTH", (1, 2, 5, 2))),
    ("image_ARGUMENT.svg",
     "ARGUMENT: a bias of 11 values, four to a pixel in a one-row image [q(11), 1] = [3, 1].",
     _image("ARGUMENT", (11,))),
    ("image_CONV2D_FILTER.svg",
     "CONV2D_FILTER: OIHW weights (5, 3, 1, 1); pixel column x is the input channel, four output channels "
     "share a pixel; image [I, H\u00b7W\u00b7q(O)] = [3, 2].", _image("CONV2D_FILTER", (5, 3, 1, 1))),
    ("image_DW_CONV2D_FILTER.svg",
     "DW_CONV2D_FILTER: MIHW depthwise weights (1, 5, 2, 2); four input channels share a pixel, image "
     "[M\u00b7H\u00b7W, q(I)] = [4, 2].", _image("DW_CONV2D_FILTER", (1, 5, 2, 2))),
    ("image_WEIGHT_HEIGHT.svg",
     "WEIGHT_HEIGHT: OIHW (5, 2, 1, 2); four output channels per pixel, image [I\u00b7H\u00b7W, q(O)] = "
     "[4, 2].", _image("WEIGHT_HEIGHT", (5, 2, 1, 2))),
    ("image_WEIGHT_WIDTH.svg",
     "WEIGHT_WIDTH: OIHW (2, 5, 1, 2); four input channels per pixel, one pixel row per output channel, "
     "image [q(I)\u00b7H\u00b7W, O] = [4, 2].", _image("WEIGHT_WIDTH", (2, 5, 1, 2))),
    ("image_WINOGRAD_FILTER.svg",
     "WINOGRAD_FILTER: 3\u00d73 OIHW weights (2, 5, 3, 3) transformed for tile 2 into U[t, o, i], 16 "
     "values t per (o, i); image [q(I), O\u00b7T\u00b2] = [2, 32], rows elided in the middle.",
     _image("WINOGRAD_FILTER", (2, 5, 3, 3), tile=2)),
)


def gallery_figures():
    """Yield ``(file name, caption, svg text)`` for every figure of the gallery.

    >>> name, caption, svg = next(gallery_figures())
    >>> name, svg.startswith("<?xml")
    ('address.svg', True)
    """
    for name, caption, build in GALLERY:
        yield name, caption, build()


def _index_html(items) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>tensorlayout figures</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:110em;color:#222}"
             "figure{margin:2em 0;border-top:1px solid #ddd;padding-top:1em}"
             "figure img{max-width:100%;height:auto}figcaption{max-width:60em;margin-top:.5em}"
             "code{background:#f3f3f3;padding:0 .2em}</style></head><body>",
             "<h1>tensorlayout figures</h1>",
             "<p>Every figure below is drawn from the layout code. NPU figures: X = 4 NPUs of S = 1024 "
             "bytes, 4-byte blocks, 128-byte alignment (seed 003). Image figures: MACE's RGBA images, "
             "lanes R, G, B, A of each pixel.</p>"]
    section = None
    for name, caption in items:
        sec = "MACE RGBA images" if name.startswith("image_") else "NPU local memory (seed 003)"
        if sec != section:
            parts.append(f"<h2>{html.escape(sec)}</h2>")
            section = sec
        parts.append(f'<figure id="{html.escape(name[:-4])}"><img src="{html.escape(name)}" '
                     f'alt="{html.escape(name)}"><figcaption><code>{html.escape(name)}</code>: '
                     f"{html.escape(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_gallery(out_dir) -> list[str]:
    """Write every gallery figure and ``index.html`` into ``out_dir``; return the paths written.

    Every figure is built first, so a failure leaves the folder as it was.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> paths = write_gallery(d)
    >>> len(paths), os.path.basename(paths[-1])
    (29, 'index.html')
    """
    out_dir = check_output_path("out_dir", out_dir, folder=True)
    figures = list(gallery_figures())
    files = [(name, svg) for name, _, svg in figures]
    files.append(("index.html", _index_html([(n, c) for n, c, _ in figures])))
    paths = []
    try:
        os.makedirs(out_dir, exist_ok=True)
        for name, text in files:
            path = os.path.join(out_dir, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            paths.append(path)
    except OSError as exc:
        raise LayoutError(f"out_dir = {out_dir!r} is not allowed: the gallery cannot be written there "
                          f"({exc.strerror or exc})") from None
    return paths
