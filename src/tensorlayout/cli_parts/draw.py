"""``tensorlayout figures`` and ``tensorlayout draw``: SVG figures of layouts, and the demo's gallery."""

from __future__ import annotations

import os

from ._common import image_arguments, int_list, no_action, output_arg, positive, print_json, write_output
from .npu import add_tensor_options, place


def register(sub) -> None:
    p = sub.add_parser("figures", help="write seed 003's figures, one per image type, and index.html")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the SVG files and index.html")
    p.add_argument("--json", action="store_true", help="print JSON: the files written")
    p.set_defaults(func=_figures)

    d = sub.add_parser("draw", help="draw one layout as an SVG figure")
    dsub = d.add_subparsers(dest="what", metavar="WHAT")
    d.set_defaults(func=no_action(d))

    n = dsub.add_parser("npu", help="a tensor in NPU local memory",
                        description="Draw where a tensor lies in NPU local memory, NPU by NPU.")
    add_tensor_options(n)
    n.add_argument("--blocks-per-row", type=positive, default=None, help="4-byte blocks drawn to a row")
    n.add_argument("--max-rows", type=positive, default=40, help="rows drawn before eliding (default 40)")
    n.add_argument("-o", "--output", required=True, metavar="FILE.svg", help="where to write the figure")
    n.add_argument("--json", action="store_true", help="print JSON: the file written")
    n.set_defaults(func=_draw_npu)

    i = dsub.add_parser("image", help="a tensor in a MACE RGBA image",
                        description="Draw which element each lane of each pixel of a MACE image holds.")
    image_arguments(i, "IN_OUT_CHANNEL, IN_OUT_HEIGHT, IN_OUT_WIDTH, ARGUMENT, CONV2D_FILTER, "
                    "DW_CONV2D_FILTER, WEIGHT_HEIGHT, WEIGHT_WIDTH or WINOGRAD_FILTER (case-insensitive)",
                    "the buffer's shape in its format's order",
                    "activation buffer format: NHWC (default) or NCHW")
    i.add_argument("--max-width", type=positive, default=10, help="pixel columns drawn before eliding")
    i.add_argument("--max-height", type=positive, default=12, help="pixel rows drawn before eliding")
    i.add_argument("-o", "--output", required=True, metavar="FILE.svg", help="where to write the figure")
    i.add_argument("--json", action="store_true", help="print JSON: the file written")
    i.set_defaults(func=_draw_image)


def _figures(args) -> int:
    from .._checks import renamed
    from ..draw import write_gallery

    output_arg(args.out, "--out", folder=True)
    with renamed({"out_dir": "--out"}):
        paths = write_gallery(args.out)
    if args.json:
        print_json({"folder": args.out, "files": [str(p) for p in paths]})
    else:
        print(f"wrote {len(paths) - 1} figures and index.html to {args.out}")
    return 0


def _wrote(args) -> int:
    if args.json:
        print_json({"file": args.output})
    else:
        print(f"wrote {args.output}")
    return 0


def _draw_npu(args) -> int:
    from ..draw import npu_figure

    output_arg(args.output, "--output")
    t = place(args)
    svg = npu_figure(t, blocks_per_row=args.blocks_per_row, max_rows=args.max_rows)
    write_output(args.output, "--output", svg)
    return _wrote(args)


def _draw_image(args) -> int:
    from ..draw import image_figure

    output_arg(args.output, "--output")
    shape = int_list(args.shape, "--shape")
    svg = image_figure(args.kind, shape, layout=args.layout, filter_format=args.filter_format,
                       tile=args.tile, max_width=args.max_width, max_height=args.max_height)
    write_output(args.output, "--output", svg)
    return _wrote(args)


def demo(tour) -> None:
    from ..draw import write_gallery

    tour.section("Figures: every layout drawn from the layout code")
    out = os.path.join(tour.out_dir, "figures")
    paths = write_gallery(out)
    tour.print(f"Seed 003's 19 NPU figures and one figure per MACE image type: {len(paths) - 1} SVG files")
    tour.print(f"and an index page, in {out}/ (open {os.path.join(out, 'index.html')} in a browser).")
    tour.print("Draw your own: tensorlayout draw npu --chip BM1684 --shape 1,96,8,8 -o t.svg")
    tour.print("               tensorlayout draw image CONV2D_FILTER --shape 5,3,3,3 -o f.svg")
