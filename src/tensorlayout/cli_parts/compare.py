"""``tensorlayout compare`` and ``tensorlayout where``: the porting workbench.

``compare`` runs a network on two runtimes and compares every tensor, read back from where
each runtime keeps it (:func:`tensorlayout.model.compare`); ``where`` tells where one
element of one tensor lives in a runtime's storage, or which element a location holds
(:func:`tensorlayout.model.where`).

>>> import os, tempfile
>>> from tensorlayout.cli import main
>>> from tensorlayout.model import zoo
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.onnx")
>>> _ = open(path, "wb").write(zoo.tiny_onnx())
>>> main(["where", path, "d", "0,5,2,3", "--runtime", "opencl"])    # doctest: +NORMALIZE_WHITESPACE
tensor d (1, 16, 8, 8) on opencl images (limits [16384, 16384], default (many mobile GPUs)):
  written by layer pool1
element [0, 5, 2, 3]:
  image ('act', 'd') [32, 8] in memory block 2: pixel (x, y) = (11, 2), lane 1 (byte 1204 of
  the image read back row by row)
0
"""

from __future__ import annotations

import math

from .._checks import renamed
from ..errors import LayoutError, short
from ._common import int_list, nonneg, output_arg, print_json
from .model import load_model, max_image_arg, print_columns, read_inputs, winograd_arg


def register(sub) -> None:
    from ..model.workbench import RUNTIMES

    c = sub.add_parser(
        "compare", help="run a network on two runtimes and compare every tensor, layer by layer",
        description="Run an ONNX network on two runtimes (cpu, opencl, opencl:half, npu) on the "
                    "same input and compare every tensor, each read back from where its runtime "
                    "keeps it (NumPy arrays, OpenCL images after the layer that writes them, NPU "
                    "local memory): max |b-a|, relative L2 |b-a|/|a| (a is the reference), cosine "
                    "similarity, SQNR in dB, NaN and inf per side, and the first tensor past the "
                    "tolerance with its node. Exit status 1 when a tensor is past it.")
    c.add_argument("model", metavar="MODEL.onnx", help="the ONNX file to run")
    c.add_argument("--a", default="cpu", metavar="RUNTIME",
                   help=f"the reference runtime: {', '.join(RUNTIMES)} (default: %(default)s)")
    c.add_argument("--b", default="opencl", metavar="RUNTIME",
                   help=f"the runtime compared with it: {', '.join(RUNTIMES)} (default: %(default)s)")
    c.add_argument("--input", action="append", default=[], metavar="[NAME=]X.npy",
                   help="input array (.npy); default: random normal (--seed)")
    c.add_argument("--input-shape", action="append", default=[], metavar="[NAME=]N,C,H,W",
                   help="fix a dynamic input shape; repeatable")
    c.add_argument("--seed", type=nonneg, default=0, help="seed of the random input, >= 0 (default 0)")
    c.add_argument("--tol", default=None, metavar="T",
                   help="relative L2 error past which a tensor diverges (default 1e-4, or 1e-2 "
                        "with an opencl:half side)")
    c.add_argument("--b-model", default=None, metavar="OTHER.onnx",
                   help="run this model on --b instead (an edited or converted copy with the same "
                        "tensor names)")
    c.add_argument("--device", default=None, help="the OpenCL device (index or name substring)")
    c.add_argument("--max-image", default=None, metavar="W,H",
                   help="OpenCL image limits below the device's (layers fall back as run does)")
    c.add_argument("--winograd", default="auto",
                   help="OpenCL: auto (default), 0 (none) or a tile 2, 4 or 6, as run takes it")
    c.add_argument("--html", default=None, metavar="DIR",
                   help="write DIR/index.html: SQNR along the network, the worst tensors first, "
                        "the table")
    c.add_argument("--dump", default=None, metavar="DIR",
                   help="write every tensor of each side as .npz: logical NCHW, the physical form "
                        "(image pixels, NPU bytes) and the layout between them; DIR/index.json")
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(func=compare_cmd)

    w = sub.add_parser(
        "where", help="where one element of a tensor lives on OpenCL images or the NPU",
        description="Where one element of one tensor of an ONNX network lives in a runtime's "
                    "storage: on OpenCL images (the schedule tensorlayout plan prints) its image, "
                    "memory block, pixel and lane; on the NPU every placement in local memory, "
                    "step by step, as NPU and byte. With --at instead of INDEX, the element each "
                    "of those storages holds at that location.")
    w.add_argument("model", metavar="MODEL.onnx", help="the ONNX file")
    w.add_argument("tensor", metavar="TENSOR", help="a tensor of the network (or a weight)")
    w.add_argument("index", metavar="INDEX", nargs="?", default=None,
                   help="the element, comma-separated (N,C,H,W for a 4-D tensor)")
    w.add_argument("--at", default=None, metavar="LOCATION",
                   help="the reverse: X,Y,LANE of the tensor's image (opencl) or NPU,BYTE of local "
                        "memory (npu)")
    w.add_argument("--runtime", default="opencl", type=str.lower,
                   choices=("opencl", "opencl:half", "npu"),
                   help="opencl (default), opencl:half or npu")
    w.add_argument("--input-shape", action="append", default=[], metavar="[NAME=]N,C,H,W",
                   help="fix a dynamic input shape; repeatable")
    w.add_argument("--device", default=None,
                   help="opencl: read the image limits from this device (as plan --device)")
    w.add_argument("--max-image", default=None, metavar="W,H",
                   help="opencl: image limits (default 16384,16384, as plan)")
    w.add_argument("--chip", default=None, metavar="BM1684",
                   help="npu: the chip whose schedule places the tensor (default BM1684)")
    w.add_argument("--json", action="store_true", help="print JSON")
    w.set_defaults(func=where_cmd)


# ---------------------------------------------------------------------------- compare
def _tol(text):
    if text is None:
        return None
    try:
        v = float(text)
    except ValueError:
        v = None
    if v is None or not math.isfinite(v) or v < 0:
        raise LayoutError(f"--tol = {short(text)!r} is not allowed: it must be a number >= 0 "
                          "(a relative L2 error, such as 1e-3)")
    return v


def compare_cmd(args) -> int:
    from ..model.workbench import compare, runtime_arg
    from ..model.workbench_report import write_dump, write_html

    a = runtime_arg(args.a, "--a")
    b = runtime_arg(args.b, "--b")
    tol = _tol(args.tol)
    if not any(rt.startswith("opencl") for rt in (a, b)):
        for opt, val in (("--device", args.device), ("--max-image", args.max_image),
                         ("--winograd", None if args.winograd == "auto" else args.winograd)):
            if val is not None:
                raise LayoutError(f"{opt} applies to an opencl side only (--a {a}, --b {b})")
    max_image = max_image_arg(args.max_image)
    winograd = winograd_arg(args.winograd)
    for opt, path in (("--html", args.html), ("--dump", args.dump)):
        if path is not None:
            output_arg(path, opt, folder=True)
    model = load_model(args)
    other = None
    if args.b_model is not None:
        from ..model import load
        from ._common import input_arg

        other = load(input_arg(args.b_model, "--b-model"), input_shapes=None)
    feeds = read_inputs(args, model)
    with renamed({"model_b": "--b-model"}):
        c = compare(model, a, b, feeds, tol=tol, model_b=other, device=args.device,
                    max_image=max_image, winograd=winograd, keep=args.dump is not None)
    files = {}
    if args.html is not None:
        with renamed({"out_dir": "--html"}):
            files["html"] = write_html(c, args.html)
    if args.dump is not None:
        with renamed({"out_dir": "--dump"}):
            files["dump"] = write_dump(c, args.dump)
    rc = 1 if c.first is not None else 0
    if args.json:
        print_json({**c.as_dict(), **files})
        return rc
    _print(c, model, feeds, args)
    for k, v in files.items():
        print(f"{k:<9} {v}")
    return rc


def _num(v, fmt):
    if v is None:
        return ""
    if v != v:
        return "NaN"
    return ("inf" if v > 0 else "-inf") if abs(v) == math.inf else fmt.format(v)


def _print(c, model, feeds, args):
    from ..model.workbench_report import state_text

    ins = ", ".join(f"{k} {tuple(v.shape)}" for k, v in feeds.items())
    how = "given" if args.input else f"random normal, seed {args.seed}"
    print(f"model {model.label}: {len(model.graph.nodes)} nodes, input {ins} ({how})")
    print(f"a = {c.a} (the reference, {c.seconds['a']:.2f} s), b = {c.b} ({c.seconds['b']:.2f} s);"
          f" tolerance {c.tol:g} on the relative L2 error |b - a| / |a|")
    print()
    rows, marks = [], []
    for k, r in enumerate(c.rows):
        nonfinite = ""
        if r["compared"] and (r["nan_a"] or r["inf_a"] or r["nan_b"] or r["inf_b"]):
            nonfinite = f"a {r['nan_a']}/{r['inf_a']}, b {r['nan_b']}/{r['inf_b']}" + (
                "" if r["same_nonfinite"] else " (DIFFERENT places)")
        rows.append((str(k), r["tensor"], r["op"], state_text(r, "a"), state_text(r, "b"),
                     _num(r["max_abs"], "{:.3g}"), _num(r["rel_l2"], "{:.3g}"),
                     _num(r["cosine"], "{:.9f}"),
                     "exact" if r["sqnr_db"] == math.inf else _num(r["sqnr_db"], "{:.1f}"),
                     _num(r["sqnr_drop_db"], "{:+.1f}"), nonfinite))
        first = c.first is not None and r["tensor"] == c.first["tensor"]
        marks.append("> " if first else "! " if r["past"] else "  ")
    print_columns(("#", "tensor", "op", f"a: {c.a}", f"b: {c.b}", "max |b-a|", "rel. L2", "cosine",
            "SQNR dB", "lost dB", "NaN/inf"), rows, right=(0, 5, 6, 7, 8, 9), mark=marks)
    print()
    states = {}
    for r in c.rows:
        if not r["compared"]:
            side = "b" if r["state_b"] in ("fused", "absent") else "a"
            key = (r[f"state_{side}"], c.b if side == "b" else c.a)
            states[key] = states.get(key, 0) + 1
    extra = "".join(f", {n} {k} on {rt}" for (k, rt), n in sorted(states.items()))
    print(f"tensors   {len(c.rows)}: {sum(r['compared'] for r in c.rows)} compared{extra}"
          + (" (fused: applied inside the layer before, never stored)"
             if any(k == "fused" for k, _ in states) else ""))
    f = c.first
    if f is None:
        print(f"first     none past the tolerance {c.tol:g}")
    else:
        print(f"first     {f['tensor']} (node {f['node']}, {f['op']}{_layer(f, c.b)}) is the first past "
              f"the tolerance: relative L2 {_num(f['rel_l2'], '{:.3g}')}, cosine "
              f"{_num(f['cosine'], '{:.6f}')}; marked > above, ! the others past it")
    by_name = {r["tensor"]: r for r in c.rows}
    for w in c.worst(3):
        lost = "" if w["sqnr_drop_db"] is None else f", {w['sqnr_drop_db']:+.1f} dB in the layer"
        print(f"worst     {w['sqnr_db']:.1f} dB  {w['tensor']} ({w['op']}"
              f"{_layer(by_name[w['tensor']], c.b)}{lost})")
    drops = sorted((r for r in c.rows if r["sqnr_drop_db"] is not None and r["sqnr_drop_db"] > 0),
                   key=lambda r: -r["sqnr_drop_db"])[:3]
    for r in drops:
        print(f"lost most {r['sqnr_drop_db']:.1f} dB  {r['tensor']} ({r['op']}{_layer(r, c.b)})")


def _layer(r, b):
    return f", layer {r['layer_b']} on {b}" if r["layer_b"] != r["node"] else ""


# ---------------------------------------------------------------------------- where
def where_cmd(args) -> int:
    from ..model.workbench_where import where

    rt = args.runtime
    if rt == "npu":
        for opt, val in (("--device", args.device), ("--max-image", args.max_image)):
            if val is not None:
                raise LayoutError(f"{opt} applies to --runtime opencl only")
    elif args.chip is not None:
        raise LayoutError("--chip applies to --runtime npu only")
    if args.index is None and args.at is None:
        raise LayoutError("INDEX or --at: give the element (N,C,H,W) or a location to read back")
    if args.index is not None and args.at is not None:
        raise LayoutError("INDEX and --at are both given: give one (an element, or a location)")
    index = None if args.index is None else int_list(args.index, "INDEX")
    at = None if args.at is None else int_list(args.at, "--at")
    max_image = max_image_arg(args.max_image)
    if max_image is not None and args.device is not None:
        raise LayoutError("--max-image and --device are both given: the limits come from one of them")
    model = load_model(args)
    with renamed({"index": "INDEX", "at": "--at", "tensor": "TENSOR"}):
        r = where(model, args.tensor, index, at=at, runtime="npu" if rt == "npu" else "opencl",
                  half=rt == "opencl:half", device=args.device, max_image=max_image,
                  chip=args.chip or "BM1684")
    if args.json:
        print_json(r)
        return 0
    _print_where(r)
    return 0


def _print_where(r):
    if r["runtime"] == "npu":
        on = f"the NPU schedule of {r['chip']}"
    else:
        on = (f"{r['runtime']} images (limits [{r['limits'][0]}, {r['limits'][1]}], "
              f"{r['limits_from']})")
    print(f"tensor {r['tensor']} {tuple(r['shape'])} on {on}:")
    if r.get("note"):
        print(f"  {r['note']}")
    elif r["places"] and r["places"][0].get("layers"):
        print(f"  written by layer {r['places'][0]['layers'][0]}")
    if "index" in r:
        print(f"element {r['index']}:")
    elif "at" in r:
        what = "NPU, byte" if r["runtime"] == "npu" else "pixel (x, y), lane"
        print(f"{what} {tuple(r['at'])}:")
    for p in r["places"]:
        print(f"  {p['text']}")
    if not r["places"] and r["state"] not in ("fused", "absent"):
        print("  (no storage holds it there)")
    if r.get("others"):
        print("the same memory block holds, at other times:")
        for o in r["others"]:
            held = ("outside its image" if o.get("outside") else "no element (padding)"
                    if o.get("element") is None else f"element {o['element']}")
            print(f"  {o['holds']} [{o['image'][0]}, {o['image'][1]}], layers "
                  f"{o['layers'][0]} .. {o['layers'][1]}: {held}")
