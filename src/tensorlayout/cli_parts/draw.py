"""``tensorlayout figures`` and ``tensorlayout draw``: SVG figures of layouts, and the demo's gallery."""

from __future__ import annotations

import os

from ..errors import LayoutError
from ._common import int_list


def register(sub) -> None:
    p = sub.add_parser("figures", help="write seed 003's figures, one per image type, and index.html")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the SVG files and index.html")
    p.set_defaults(func=_figures)

    d = sub.add_parser("draw", help="draw one layout as an SVG figure")
    dsub = d.add_subparsers(dest="what", metavar="WHAT")
    d.set_defaults(func=lambda a: (d.print_help(), 0)[1])

    n = dsub.add_parser("npu", help="a tensor in NPU local memory",
                        description="Draw where a tensor lies in NPU local memory, NPU by NPU.")
    n.add_argument("--chip", help="a preset: BM1684, BM1684X or BM1688")
    n.add_argument("--npus", type=int, help="number of NPUs X (with --lmem and --align, instead of --chip)")
    n.add_argument("--lmem", type=int, help="bytes of local memory per NPU S")
    n.add_argument("--align", type=int, default=None, help="feature alignment in bytes (default 128)")
    n.add_argument("--shape", required=True, help="N,C,H,W (rows,cols for --layout matrix:W)")
    n.add_argument("--dtype", default="fp32", help="fp32, fp16, int32, int16, int8, ... (default fp32)")
    n.add_argument("--layout", default="aligned",
                   help="aligned, compact, matrix:W or stride:n,c,h,w (default aligned)")
    n.add_argument("--mode", choices=("4N", "2N", "2IC"), default=None, help="storage mode")
    where = n.add_mutually_exclusive_group()
    where.add_argument("--address", type=int, help="local address A (default 0)")
    where.add_argument("--start-npu", type=int, help="start at NPU Q, offset 0 (address Q*S)")
    n.add_argument("--blocks-per-row", type=int, default=None, help="4-byte blocks drawn to a row")
    n.add_argument("--max-rows", type=int, default=40, help="rows drawn before eliding (default 40)")
    n.add_argument("-o", "--output", required=True, metavar="FILE.svg", help="where to write the figure")
    n.set_defaults(func=_draw_npu)

    i = dsub.add_parser("image", help="a tensor in a MACE RGBA image",
                        description="Draw which element each lane of each pixel of a MACE image holds.")
    i.add_argument("kind", help="IN_OUT_CHANNEL, IN_OUT_HEIGHT, IN_OUT_WIDTH, ARGUMENT, CONV2D_FILTER, "
                   "DW_CONV2D_FILTER, WEIGHT_HEIGHT, WEIGHT_WIDTH or WINOGRAD_FILTER")
    i.add_argument("--shape", required=True, help="the buffer's shape in its format's order")
    i.add_argument("--layout", default=None, help="activation buffer format: NHWC (default) or NCHW")
    i.add_argument("--filter-format", default="OIHW", help="OIHW (default) or HWOI")
    i.add_argument("--tile", type=int, default=None, help="Winograd tile for WINOGRAD_FILTER: 2, 4 or 6")
    i.add_argument("--max-width", type=int, default=10, help="pixel columns drawn before eliding")
    i.add_argument("--max-height", type=int, default=12, help="pixel rows drawn before eliding")
    i.add_argument("-o", "--output", required=True, metavar="FILE.svg", help="where to write the figure")
    i.set_defaults(func=_draw_image)


def _write(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise LayoutError(f"output = {path!r} is not allowed: folder {folder!r} does not exist")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise LayoutError(f"output = {path!r} is not allowed: it cannot be written "
                          f"({exc.strerror or exc})") from None


def _figures(args) -> int:
    from ..draw import write_gallery

    paths = write_gallery(args.out)
    print(f"wrote {len(paths) - 1} figures and index.html to {args.out}")
    return 0


def _chip(args):
    from ..npu import Chip, get_chip

    if args.chip is not None:
        if args.npus is not None or args.lmem is not None or args.align is not None:
            raise LayoutError("--chip is not allowed with --npus, --lmem or --align: give one or the other")
        return get_chip(args.chip)
    if args.npus is None or args.lmem is None:
        raise LayoutError("the chip is missing: give --chip NAME, or --npus X --lmem S [--align A]")
    return Chip(args.npus, args.lmem, 128 if args.align is None else args.align, name="custom chip")


def _draw_npu(args) -> int:
    from ..draw import npu_figure
    from ..npu import matrix_layout, tensor_layout

    chip = _chip(args)
    if args.start_npu is not None:
        if not 0 <= args.start_npu < chip.npus:
            raise LayoutError(f"--start-npu = {args.start_npu} is not allowed: it must be in [0, {chip.npus})")
        address = args.start_npu * chip.lmem_bytes
    else:
        address = 0 if args.address is None else args.address
    layout = args.layout.strip()
    if layout.startswith("matrix:"):
        w = int_list(layout[len("matrix:"):], "--layout matrix:W")
        shape = int_list(args.shape, "--shape")
        if len(w) != 1 or len(shape) != 2:
            raise LayoutError(f"--layout {layout!r} with --shape {args.shape!r} is not allowed: "
                              "the matrix layout takes --layout matrix:W and --shape rows,cols")
        if args.mode is not None:
            raise LayoutError(f"--mode = {args.mode!r} is not allowed with the matrix layout")
        t = matrix_layout(chip, address, shape[0], shape[1], w[0], dtype=args.dtype)
    else:
        shape = int_list(args.shape, "--shape")
        stride = None
        if layout.startswith("stride:"):
            stride = int_list(layout[len("stride:"):], "--layout stride:n,c,h,w")
            layout = "stride"
        elif layout not in ("aligned", "compact"):
            raise LayoutError(f"--layout = {args.layout!r} is not allowed: it must be aligned, compact, "
                              "matrix:W or stride:n,c,h,w")
        t = tensor_layout(chip, address, shape, stride=stride, dtype=args.dtype, mode=args.mode,
                          layout=layout)
    svg = npu_figure(t, blocks_per_row=args.blocks_per_row, max_rows=args.max_rows)
    _write(args.output, svg)
    print(f"wrote {args.output}")
    return 0


def _draw_image(args) -> int:
    from ..draw import image_figure

    shape = int_list(args.shape, "--shape")
    svg = image_figure(args.kind, shape, layout=args.layout, filter_format=args.filter_format,
                       tile=args.tile, max_width=args.max_width, max_height=args.max_height)
    _write(args.output, svg)
    print(f"wrote {args.output}")
    return 0


def demo(tour) -> None:
    from ..draw import write_gallery

    tour.section("Figures: every layout drawn from the layout code")
    out = os.path.join(tour.out_dir, "figures")
    paths = write_gallery(out)
    tour.print(f"Seed 003's 19 NPU figures and one figure per MACE image type: {len(paths) - 1} SVG files")
    tour.print(f"and an index page, in {out}/ (open {os.path.join(out, 'index.html')} in a browser).")
    tour.print("Draw your own: tensorlayout draw npu --chip BM1684 --shape 1,96,8,8 -o t.svg")
    tour.print("               tensorlayout draw image CONV2D_FILTER --shape 5,3,3,3 -o f.svg")
