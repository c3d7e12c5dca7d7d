"""``tensorlayout image``: where a tensor's elements sit in one of MACE's RGBA images.

>>> from tensorlayout.cli import main
>>> main(["image", "IN_OUT_CHANNEL", "--shape", "1,2,3,5", "--where", "0,1,2,4"])
IN_OUT_CHANNEL image, NHWC tensor (1, 2, 3, 5), float32
  image [width, height]  [6, 2]
  bytes                  192
  padding waste          37.5% (18 of 48 lanes)
  element (0, 1, 2, 4)   -> pixel x=5, y=1, lane 0
0
"""

from __future__ import annotations

import argparse

import numpy as np

from ..errors import DeviceLimitError, LayoutError, short
from ..image import (ImageType, table, buffer_format, check_image_limits, element_at, from_image, image_from_dump,
                     image_layout, image_nbytes, image_shape, pixel_of, row)
from ._common import (dtype_arg, input_arg, int_list, integer, output_arg, positive, print_json, print_table,
                      write_output)


def register(sub) -> None:
    p = sub.add_parser(
        "image", help="element <-> pixel of an OpenCL RGBA image (MACE's 9 image types)",
        description="Image size, bytes, padding waste, and element -> pixel / pixel -> element "
                    "answers for one of MACE's RGBA image types.",
        epilog="The image types (q(x) = (x + 3) // 4; c4 = c // 4 is a pixel of four channels, "
               "lane c % 4):\n\n" + table(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", metavar="KIND", help="image type: " + ", ".join(t.name for t in ImageType)
                   + " (case-insensitive, or MACE's number 0-8)")
    p.add_argument("--shape", required=True, help="tensor shape in the buffer format, e.g. 1,2,3,5")
    p.add_argument("--layout", default=None, help="activations: NHWC (default) or NCHW")
    p.add_argument("--filter-format", default=None,
                   help="filters only. CONV2D_FILTER: OIHW (default) or HWOI; DW_CONV2D_FILTER: MIHW "
                        "(default), HWIM, or C1HW (PyTorch's depthwise (C, 1, KH, KW))")
    p.add_argument("--tile", type=integer, default=None, help="WINOGRAD_FILTER output tile m: 2, 4 or 6")
    p.add_argument("--dtype", default="float32",
                   help="float32 (fp32; CL_FLOAT, default) or float16 (fp16, half; CL_HALF_FLOAT)")
    p.add_argument("--where", action="append", default=[], metavar="I,J,K,L",
                   help="an element index (buffer order): which pixel and lane holds it; repeatable")
    p.add_argument("--pixel", action="append", default=[], metavar="X,Y",
                   help="a pixel: which element each of its 4 lanes holds; repeatable")
    p.add_argument("--from-dump", default=None, metavar="FILE",
                   help="a raw image dump read back from a device: print the tensor it holds")
    p.add_argument("--row-pitch", type=positive, default=None, metavar="BYTES",
                   help="with --from-dump: bytes from one image row to the next (default: no gap)")
    p.add_argument("--save", default=None, metavar="FILE.npy",
                   help="with --from-dump: write the tensor to FILE.npy")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _kind_arg(text):
    text = str(text)
    return int(text) if text.isascii() and text.isdigit() else text


def describe(kind, shape, *, layout=None, filter_format=None, tile=None, dtype="float32",
             where=(), pixels=()) -> dict:
    """The answers of ``tensorlayout image`` as a dict (what ``--json`` prints)."""
    kw = dict(layout=layout, filter_format=filter_format, tile=tile)
    lay = image_layout(kind, shape, **kw)
    kind = ImageType[lay.name]
    width, height = image_shape(kind, shape, **kw)
    dt = dtype_arg(dtype, "--dtype", ("float32", "float16"))
    nbytes = image_nbytes(kind, shape, dtype=dt, **kw)
    fmt = "TOI" if row(kind).transform else buffer_format(kind, layout=layout,
                                                          filter_format=filter_format)
    lanes = width * height * 4
    out = {
        "kind": kind.name, "number": int(kind), "buffer_format": fmt, "shape": list(lay.shape),
        "dtype": dt.name, "image": [width, height], "bytes": nbytes,
        "padding_waste": lay.padding_waste, "padding_lanes": lanes - lay.count, "lanes": lanes,
        "where": [], "pixels": [], "device_limit": None,
    }
    try:
        check_image_limits(width, height)
    except DeviceLimitError as exc:
        out["device_limit"] = str(exc)
    for index in where:
        if len(index) != len(lay.shape):
            raise LayoutError(f"--where = {','.join(map(str, index))!r} is not allowed: an element of "
                              f"{fmt} has {len(lay.shape)} indices")
        x, y, k = pixel_of(kind, shape, tuple(index), **kw)
        out["where"].append({"index": list(index), "x": x, "y": y, "lane": k})
    for px in pixels:
        if len(px) != 2:
            raise LayoutError(f"--pixel = {','.join(map(str, px))!r} is not allowed: it must be x,y")
        x, y = px
        held = [element_at(kind, shape, x, y, k, **kw) for k in range(4)]
        out["pixels"].append({"x": x, "y": y, "lanes": [None if h is None else list(h) for h in held]})
    return out


def read_dump(kind, shape, path, *, layout=None, filter_format=None, tile=None, dtype="float32",
              row_pitch=None):
    """The tensor held by the raw image dump in file ``path`` (see :func:`image_from_dump`)."""
    kw = dict(layout=layout, filter_format=filter_format, tile=tile)
    width, height = image_shape(kind, shape, **kw)
    dt = dtype_arg(dtype, "--dtype", ("float32", "float16"))
    try:
        with open(path, "rb") as f:
            data = f.read(2 ** 31)
    except OSError as exc:
        raise LayoutError(f"--from-dump = {short(path)!r} is not allowed: it cannot be read "
                          f"({exc.strerror or exc})") from None
    try:
        img = image_from_dump(data, width, height, dtype=dt, row_pitch=row_pitch)
    except LayoutError as exc:
        raise LayoutError(f"--from-dump = {short(path)!r} is not allowed: {exc}") from None
    return from_image(img, kind, shape, **kw)


def _run_dump(args, shape) -> int:
    t = read_dump(_kind_arg(args.kind), shape, args.from_dump, layout=args.layout,
                  filter_format=args.filter_format, tile=args.tile, dtype=args.dtype,
                  row_pitch=args.row_pitch)
    if args.save is not None:
        write_output(args.save, "--save", t)
    if args.json:
        print_json({"shape": list(t.shape), "dtype": t.dtype.name, "values": t.tolist(),
                    "saved": args.save})
        return 0
    print(f"tensor {tuple(t.shape)} {t.dtype.name} from {args.from_dump}"
          + (f", saved to {args.save}" if args.save is not None else ""))
    with np.printoptions(threshold=200, edgeitems=3):
        print(t)
    return 0


def run(args) -> int:
    if args.from_dump is None and (args.row_pitch is not None or args.save is not None):
        raise LayoutError("--row-pitch and --save are not allowed without --from-dump FILE")
    if args.from_dump is not None:
        input_arg(args.from_dump, "--from-dump")
        if args.save is not None:
            output_arg(args.save, "--save")
        return _run_dump(args, int_list(args.shape, "--shape"))
    info = describe(_kind_arg(args.kind), int_list(args.shape, "--shape"), layout=args.layout,
                    filter_format=args.filter_format, tile=args.tile, dtype=args.dtype,
                    where=[int_list(w, "--where") for w in args.where],
                    pixels=[int_list(p, "--pixel") for p in args.pixel])
    if args.json:
        print_json(info)
        return 0
    shape = tuple(info["shape"])
    what = "transformed filter U[t, o, i]" if row(info["kind"]).transform else \
        f"{info['buffer_format']} tensor"
    print(f"{info['kind']} image, {what} {shape}, {info['dtype']}")
    w, h = info["image"]
    rows = [("image [width, height]", f"[{w}, {h}]"), ("bytes", str(info["bytes"])),
            ("padding waste", f"{info['padding_waste']:.1%} ({info['padding_lanes']} of {info['lanes']} lanes)")]
    if info["device_limit"]:
        rows.append(("device limit", info["device_limit"] + " (16384 x 16384 on many mobile GPUs)"))
    for e in info["where"]:
        rows.append((f"element {tuple(e['index'])}", f"-> pixel x={e['x']}, y={e['y']}, lane {e['lane']}"))
    for p in info["pixels"]:
        held = ", ".join(f"lane {k} = {'padding' if v is None else tuple(v)}" for k, v in enumerate(p["lanes"]))
        rows.append((f"pixel ({p['x']}, {p['y']})", held))
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    return 0


# ------------------------------------------------------------------------------ the tour
def _last(shape):
    return tuple(s - 1 for s in shape)


def demo(tour) -> None:
    tour.section("OpenCL RGBA images (MACE; seeds 000, 001, 002)")
    tour.print("A pixel holds 4 lanes; q(x) = (x + 3) // 4.  Each tensor of the sample set goes into")
    tour.print("every image type that takes it; bytes are for float32 / float16 (CL_FLOAT / CL_HALF_FLOAT).")
    tour.print("'last element' is the tensor's last index; 'last lane' is lane 3 of the last pixel.")
    act, conv, dw, bias = (1, 3, 5, 6), (8, 3, 3, 3), (1, 6, 3, 3), (8,)
    hwoi = (conv[2], conv[3], conv[0], conv[1])
    hwim = (dw[2], dw[3], dw[1], dw[0])
    rows = [
        ("activation NCHW", act, "IN_OUT_CHANNEL", dict(layout="NCHW")),
        ("activation NCHW", act, "IN_OUT_HEIGHT", dict(layout="NCHW")),
        ("activation NCHW", act, "IN_OUT_WIDTH", dict(layout="NCHW")),
        ("conv filter OIHW", conv, "CONV2D_FILTER", {}),
        ("conv filter HWOI", hwoi, "CONV2D_FILTER", dict(filter_format="HWOI")),
        ("conv filter OIHW", conv, "WEIGHT_HEIGHT", {}),
        ("conv filter OIHW", conv, "WEIGHT_WIDTH", {}),
        ("conv filter OIHW", conv, "WINOGRAD_FILTER", dict(tile=2)),
        ("depthwise MIHW", dw, "DW_CONV2D_FILTER", {}),
        ("depthwise HWIM", hwim, "DW_CONV2D_FILTER", dict(filter_format="HWIM")),
        ("bias W", bias, "ARGUMENT", {}),
    ]
    table = []
    for label, shape, kind, kw in rows:
        lay = image_layout(kind, shape, **kw)
        w, h = image_shape(kind, shape, **kw)
        b32 = image_nbytes(kind, shape, np.float32, **kw)
        b16 = image_nbytes(kind, shape, np.float16, **kw)
        logical = lay.shape  # for WINOGRAD_FILTER: U[t, o, i]
        x, y, k = pixel_of(kind, shape, _last(logical), **kw)
        held = element_at(kind, shape, w - 1, h - 1, 3, **kw)
        name = kind + (" (U)" if row(kind).transform else "")
        table.append((label, "x".join(map(str, shape)), name, f"[{w}, {h}]", f"{b32} / {b16}",
                      f"{lay.padding_waste:.0%}", f"{_last(logical)} -> ({x}, {y}, {k})",
                      "padding" if held is None else str(held)))
    head = ("tensor", "shape", "image type", "[W, H]", "bytes f32/f16", "waste",
            "last element -> (x, y, lane)", "last lane holds")
    print_table(tour, head, table)
    tour.print("WINOGRAD_FILTER holds U = G g G^T of the 3x3 filter (tile 2: T = 4, t in [0, 16)).")
    tour.print("Try: tensorlayout image IN_OUT_CHANNEL --shape 1,5,6,3 --where 0,4,5,2 --pixel 5,4")
