"""``tensorlayout run`` and ``tensorlayout plan``: a whole ONNX network on the CPU runtime,
OpenCL images or the NPU simulator, and every tensor's layout on each target.

>>> import os, tempfile
>>> from tensorlayout.cli import main
>>> from tensorlayout.model import zoo
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.onnx")
>>> _ = open(path, "wb").write(zoo.tiny_onnx())
>>> main(["plan", path, "--max-image", "40,40"])    # doctest: +ELLIPSIS, +NORMALIZE_WHITESPACE
model '...tiny.onnx': opset 17, 10 nodes, input x (1, 3, 16, 16)
image limits [40, 40] (given), float32 images; ! marks an image past them
  tensor            role        shape            cpu        buffer  image type      [W, H]    f32 bytes  f16 bytes  waste  note
  x                 input       (1, 3, 16, 16)   NCHW       NCHW    IN_OUT_CHANNEL  [16, 16]       4096       2048  25.0%
  b                 activation  (1, 16, 16, 16)  -          -       -               -                 -          -      -  fused: layer conv1 writes relu1 into c
  c                 activation  (1, 16, 16, 16)  NCHW       NCHW    IN_OUT_CHANNEL  [64, 16]      16384       8192   0.0%  held as 2 images of 8 channels
  d                 activation  (1, 16, 8, 8)    NCHW16c    NCHW    IN_OUT_CHANNEL  [32, 8]        4096       2048   0.0%
  e                 activation  (1, 16, 8, 8)    -          -       -               -                 -          -      -  fused: layer conv2 writes relu2 into f
  f                 activation  (1, 16, 8, 8)    NCHW16c    NCHW    IN_OUT_CHANNEL  [32, 8]        4096       2048   0.0%
  g                 activation  (1, 32, 4, 4)    -          -       -               -                 -          -      -  fused: layer conv3 writes relu3 into h
  h                 activation  (1, 32, 4, 4)    NCHW16c    NCHW    IN_OUT_CHANNEL  [32, 4]        2048       1024   0.0%
  i                 activation  (1, 32, 1, 1)    NCHW       NCHW    IN_OUT_CHANNEL  [8, 1]          128         64   0.0%
  j                 activation  (1, 32)          row-major  -       -               -                 -          -      -  moved by flatten (Flatten): no image of its own; read where used
  y                 output      (1, 10)          row-major  NCHW    IN_OUT_CHANNEL  [3, 1]           48         24  16.7%
  conv1.B_bn[0:8]   bias        (8,)             -          W       ARGUMENT        [2, 1]           32         16   0.0%
  conv1.W_bn[0:8]   weight      (8, 3, 3, 3)     -          OIHW    CONV2D_FILTER   [3, 18]         864        432   0.0%
  conv1.B_bn[8:16]  bias        (8,)             -          W       ARGUMENT        [2, 1]           32         16   0.0%
  conv1.W_bn[8:16]  weight      (8, 3, 3, 3)     -          OIHW    CONV2D_FILTER   [3, 18]         864        432   0.0%
  c2.b              bias        (16,)            -          W       ARGUMENT        [4, 1]           64         32   0.0%
  c2.w              weight      (16, 16, 3, 3)   -          OIHW    CONV2D_FILTER   [16, 36]       9216       4608   0.0%
  c3.b              bias        (32,)            -          W       ARGUMENT        [8, 1]          128         64   0.0%
! c3.w              weight      (32, 16, 3, 3)   -          OIHW    CONV2D_FILTER   [16, 72]      18432       9216   0.0%
  fc.b              bias        (10,)            -          W       ARGUMENT        [3, 1]           48         24  16.7%
  fc.w              weight      (10, 32, 1, 1)   -          OIHW    WEIGHT_WIDTH    [8, 10]        1280        640   0.0%
<BLANKLINE>
fallback           conv1: 'c' [64, 16] held as 2 images of 8 channels (width past the limit [40, 40])
fallback           conv2: Winograd tile 4 -> direct kernel (V [16, 64], M [16, 64], U [4, 256] past the limit [40, 40])
images             4 blocks for 8 activations and temporaries, 10 weight images (--json lists each)
peak image memory  24.0 KiB float32 as allocated, images reused after their last reader (most live at one layer: 20.0 KiB, at conv1)
weights            30.2 KiB float32
<BLANKLINE>
problems           1
  layer 'conv3' (Conv): the CONV2D_FILTER weight c3.w image [16, 72] is past the image limit [40, 40]
0
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import LayoutError
from ._common import (MAX_THREADS, check_array_size, difference, difference_line, input_arg,
                      int_list, nonneg, output_arg, print_json, threads, write_output)


def register(sub) -> None:
    from ..npu.chip import CHIPS

    r = sub.add_parser(
        "run", help="run an ONNX model on the CPU, OpenCL images or Sophgo's NPU simulator",
        description="Run an ONNX model: on the CPU runtime (compiled kernels on its own "
                    "threads, tensors in NCHW or blocks of 16 channels, NumPy for the other "
                    "ops), on an OpenCL device with every activation in MACE's images, or on "
                    "Sophgo's BM1684 simulator node by node (the rest on the host).")
    r.add_argument("model", metavar="MODEL.onnx", help="the ONNX file to run")
    r.add_argument("--input", action="append", default=[], metavar="[NAME=]X.npy",
                   help="input array (.npy, float32); default: random normal (--seed)")
    r.add_argument("--input-shape", action="append", default=[], metavar="[NAME=]N,C,H,W",
                   help="fix a dynamic input shape; repeatable")
    r.add_argument("--runtime", default="cpu", type=str.lower, choices=("cpu", "opencl", "npu"),
                   help="cpu: compiled kernels (default); opencl: every activation in MACE's RGBA "
                        "images on an OpenCL device, prepared once; npu: Sophgo's BM1684 "
                        "simulator, each node's placements as tensorlayout plan --chip prints them")
    r.add_argument("--device", default=None,
                   help="--runtime opencl: the OpenCL device (index or name substring)")
    r.add_argument("--half", action="store_true",
                   help="--runtime opencl: float16 images (CL_HALF_FLOAT), float32 arithmetic")
    r.add_argument("--winograd", default="auto",
                   help="--runtime opencl: auto (default), 0 (none) or a tile 2, 4 or 6")
    r.add_argument("--max-image", default=None, metavar="W,H",
                   help="--runtime opencl: image limits below the device's (layers fall back)")
    r.add_argument("--tune", action="store_true",
                   help="--runtime opencl: time work-group sizes per kernel (cached per device)")
    r.add_argument("--threads", type=threads, default=None,
                   help=f"threads for the runtime, 1 to {MAX_THREADS} (default: all)")
    r.add_argument("--chip", default=None, metavar="BM1684",
                   help="--runtime npu: the chip (only BM1684 has a simulator; the default)")
    r.add_argument("--layer-by-layer", action="store_true",
                   help="--runtime npu: every node a layer group of its own, each activation to "
                        "system memory and back (what the layer groups are measured against)")
    r.add_argument("--profile", action="store_true",
                   help="time each layer and each op type (after one warm-up run; on the "
                        "CPU inside the bound run where every layer is compiled; on OpenCL, "
                        "device time from profiling events)")
    r.add_argument("--check", action="store_true",
                   help="compare with onnxruntime on the same input (same threads)")
    r.add_argument("--save", default=None, metavar="OUT.npy", help="save the (first) output")
    r.add_argument("--seed", type=nonneg, default=0, help="seed of the random input, >= 0 (default 0)")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=run_cmd)

    p = sub.add_parser(
        "plan", help="every tensor's image, memory and NPU placement for an ONNX model",
        description="For every tensor of an ONNX model: the CPU runtime's layout (NCHW, or "
                    "NCHW16c: blocks of 16 channels, where its schedule puts them; - for a "
                    "tensor fused into its step), CPU buffer format, MACE image type and "
                    "size, bytes (float32 / float16), padding waste and the device's image "
                    "limits; the peak image memory with reuse; per layer, the NPU placement.")
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX file to plan")
    p.add_argument("--input-shape", action="append", default=[], metavar="[NAME=]N,C,H,W",
                   help="fix a dynamic input shape; repeatable")
    p.add_argument("--max-image", default=None, metavar="W,H",
                   help="image limits (default 16384,16384, many mobile GPUs)")
    p.add_argument("--device", default=None,
                   help="read the image limits from this OpenCL device (index or name)")
    p.add_argument("--half", action="store_true", help="float16 images (as run --runtime opencl --half)")
    p.add_argument("--winograd", default="auto",
                   help="auto (default), 0 (none) or a tile 2, 4 or 6, as run --runtime opencl takes it")
    p.add_argument("--chip", default=None, metavar="|".join(CHIPS),
                   help="place each layer's tensors in NPU local memory and check the fit")
    p.add_argument("--html", default=None, metavar="DIR", help="write an HTML/SVG report there")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=plan_cmd)


# ------------------------------------------------------------------------------ helpers
def _named(items, option, what):
    """'NAME=VALUE' or 'VALUE' items -> {name or None: value}."""
    out = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        key = name if sep else None
        if key in out:
            raise LayoutError(f"{option} = {item!r}: {what} {key or ''} given twice".replace("  ", " "))
        out[key] = value
    return out


def _input_shapes(args):
    given = _named(args.input_shape, "--input-shape", "the shape of input")
    shapes = {k: int_list(v, "--input-shape") for k, v in given.items()}
    if not shapes:
        return None
    if None in shapes:
        if len(shapes) > 1:
            raise LayoutError("--input-shape: give NAME=SHAPE for each input when there are several")
        return shapes[None]
    return shapes


def load_model(args):
    """The model of ``args.model`` (a regular file) with ``--input-shape`` applied."""
    from ..model import load

    input_arg(args.model, "MODEL.onnx")
    return load(args.model, input_shapes=_input_shapes(args))


def read_inputs(args, model):
    """The model's inputs from --input NAME=X.npy files, random ones (--seed) for the rest."""
    files = _named(args.input, "--input", "the array of input")
    names = list(model.inputs)
    if None in files:
        if len(names) != 1 or len(files) > 1:
            raise LayoutError(f"--input: the model has inputs {', '.join(names)}: give NAME=X.npy")
        files = {names[0]: files[None]}
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for name, shape in model.inputs.items():
        if name in files:
            path = input_arg(files[name], "--input")
            try:
                arr = np.load(path, allow_pickle=False)
            except (OSError, ValueError, EOFError) as exc:
                raise LayoutError(f"--input = {path!r} cannot be read as a .npy array: "
                                  f"{(str(exc) or 'it is empty').splitlines()[0]}") from None
            if not isinstance(arr, np.ndarray):          # an .npz archive holds several arrays
                arr.close()
                raise LayoutError(f"--input = {path!r} is not allowed: it is an .npz archive; "
                                  "give one array saved with numpy.save (.npy)")
            feeds[name] = arr
        else:
            check_array_size(f"input {name} (random, --seed)", shape, 8)
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
    for name in files:
        if name not in model.inputs:
            raise LayoutError(f"--input names {name!r}: the model's inputs are {', '.join(names)}")
    return model.feeds((feeds,), {})             # each checked against the model's shape


def onnxruntime_outputs(path, feeds, threads=None):
    """The outputs of onnxruntime on ``feeds`` (a list, in the model's output order)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise LayoutError("--check needs onnxruntime: pip install onnxruntime "
                          "(it is in tensorlayout's 'test' extra)") from None
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types, whatever they are
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LayoutError(f"--check: onnxruntime could not run it: {first}") from None


def _compare(names, outs, ref) -> list:
    """Each output against onnxruntime's: relative L2 and cosine similarity over the values
    finite in both (None where there are none), the NaN and inf of each and whether they sit
    at the same places, and, for one row of scores, both top-1 classes."""
    checks = []
    for name, y, r in zip(names, outs, ref):
        a, b = np.asarray(y, np.float64).ravel(), np.asarray(r, np.float64).ravel()
        d = difference(a, b)
        both = np.isfinite(a) & np.isfinite(b)
        a, b = a[both], b[both]
        c = {"name": name, "rel_l2": _rel_l2(a, b) if both.any() else None,
             "cosine": float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300)) if both.any() else None,
             **{k: d[k] for k in ("finite", "nan", "inf", "same_nonfinite")},
             "nan_onnxruntime": d["nan_reference"], "inf_onnxruntime": d["inf_reference"]}
        if y.ndim == 2 and y.shape[0] == 1 and np.isfinite(y).all() and np.isfinite(r).all():
            c["top1"] = int(np.argmax(y[0]))
            c["top1_onnxruntime"] = int(np.argmax(r[0]))
        checks.append(c)
    return checks


def _rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


# ------------------------------------------------------------------------------ run
def _only(args, runtime, options):
    """Refuse the options given that do not apply to ``runtime``."""
    for opt, val in options:
        if val:
            raise LayoutError(f"{opt} does not apply to --runtime {runtime}")


def run_cmd(args) -> int:
    if args.runtime != "opencl":
        _only(args, args.runtime, (("--device", args.device), ("--half", args.half),
                                   ("--max-image", args.max_image), ("--tune", args.tune),
                                   ("--winograd", None if args.winograd == "auto" else args.winograd)))
    if args.runtime != "npu":
        _only(args, args.runtime, (("--chip", args.chip), ("--layer-by-layer", args.layer_by_layer)))
    if args.save is not None:
        output_arg(args.save, "--save")
    if args.runtime == "opencl":
        return _run_opencl(args)
    if args.runtime == "npu":
        return run_npu(args)
    model = load_model(args)
    feeds = read_inputs(args, model)
    if args.profile:
        model.run(feeds, threads=args.threads)            # warm-up: first-call costs
    t0 = time.perf_counter()
    out = model.run(feeds, threads=args.threads, profile=args.profile)
    seconds = time.perf_counter() - t0
    outs = out if isinstance(out, list) else [out]
    if args.save is not None:
        write_output(args.save, "--save", outs[0])
    info = {"model": model.label, "inputs": {k: list(v.shape) for k, v in feeds.items()},
            "seconds": seconds, "threads": args.threads,
            "outputs": _outputs_info(model, outs)}
    info["layers"] = [{"layer": s.node.name, "op": s.node.op, **{k: s.info[k] for k in
                                                                   ("algorithm", "tile") if k in s.info}}
                      for s in model.steps if s.node.op == "Conv"]
    if args.profile:
        info["profile"] = [{"layer": n, "op": op, "ms": t * 1e3, "algorithm": alg}
                           for n, op, t, alg in model.last_profile]
    if args.check:
        info["check"] = _compare(model.outputs, outs,
                                 onnxruntime_outputs(args.model, feeds, args.threads))
    if args.json:
        print_json(info)
        return 0
    ins = ", ".join(f"{k} {tuple(v)}" for k, v in info["inputs"].items())
    print(f"model {model.label}: opset {model.opset}, {len(model.graph.nodes)} layers, input {ins}")
    print(f"ran in {seconds * 1e3:.1f} ms" + (f" with {args.threads} threads" if args.threads else ""))
    _print_outputs(info["outputs"])
    if args.profile:
        _print_profile(model.last_profile)
    if args.check:
        _print_check(info["check"], cosine=False)
    return 0


def winograd_arg(text):
    """``--winograd``: "auto", or the tile 0 (none), 2, 4 or 6."""
    t = str(text).strip().lower()
    if t == "auto":
        return "auto"
    if t in ("0", "2", "4", "6"):
        return int(t)
    raise LayoutError(f"--winograd = {text!r} is not allowed: it must be auto, 0, 2, 4 or 6")


def _outputs_info(model, outs):
    res = []
    for name, y in zip(model.outputs, outs):
        o = {"name": name, "shape": list(y.shape), "min": float(y.min()), "max": float(y.max()),
             "mean": float(y.mean())}
        if y.ndim == 2 and y.shape[0] == 1 and y.shape[1] > 1:
            top = np.argsort(-y[0], kind="stable")[:5]
            o["top5"] = [[int(i), float(y[0, i])] for i in top]
        res.append(o)
    return res


def _print_outputs(outputs):
    for o in outputs:
        print(f"output {o['name']} {tuple(o['shape'])}: min {o['min']:.6g}, max {o['max']:.6g}, "
              f"mean {o['mean']:.6g}")
        if "top5" in o:
            print("  top 5: " + ", ".join(f"{i} ({v:.4g})" for i, v in o["top5"]))


def run_npu(args) -> int:
    """``run --runtime npu`` (and ``npu run-onnx``): the NPU schedule on the simulator."""
    from ..backends.npu import NpuProgram
    from ..npu import BM1684, cmodel
    from ..schedule.npu import schedule_npu
    from ..schedule.npu_cost import CLOCKS, estimate

    _only(args, "npu", (("--threads", getattr(args, "threads", None)),
                        ("--profile", getattr(args, "profile", False))))
    model = load_model(args)
    feeds = read_inputs(args, model)
    by_layer = bool(getattr(args, "layer_by_layer", False))
    prog = NpuProgram(model.graph, getattr(args, "chip", None) or BM1684, groups=not by_layer)
    cmodel.simulator()  # a missing simulator is one line, before any work
    t0 = time.perf_counter()
    outs, report = prog.run(feeds)
    seconds = time.perf_counter() - t0
    if getattr(args, "save", None):
        write_output(args.save, "--save", outs[0])
    cpu, _ = model.cpu().run(feeds)
    sched = prog.schedule
    chip = sched.chip
    npu = sum(r["where"] == "npu" for r in report)
    steps = {s.node.name: s for s in sched.steps}
    nodes = [{**r, "shape": list(r["shape"]), "cost": steps[r["name"]].cost} for r in report]
    plan_gdma = sched.gdma_bytes()
    single = sched if by_layer else schedule_npu(model.graph, chip, groups=False)
    lbl = single.gdma_bytes()
    clock, bw = CLOCKS.get(chip.name, CLOCKS["BM1684"])
    info = {"model": model.label, "runtime": "npu", "chip": chip.name,
            "inputs": {k: list(v.shape) for k, v in feeds.items()}, "seconds": seconds,
            "outputs": _outputs_info(model, outs), "nodes": nodes, "npu_nodes": npu,
            "host_nodes": sum(r["where"] == "host" for r in report),
            "layer_groups": not by_layer, "groups": sched.group_rows(),
            "gdma": {"plan": plan_gdma, "moved": prog.gdma_moved, "layer_by_layer": lbl,
                     "ratio": plan_gdma["total"] / max(lbl["total"], 1)},
            "estimate": {**estimate(chip, sched.instrs), "clock_hz": clock, "gdma_bytes_per_s": bw,
                         "model": "docs/npu.md, 'What a program costs'"}}
    info["vs_cpu"] = difference(outs[0], cpu[0])
    info["rel_max_vs_cpu"] = info["vs_cpu"]["rel_max"]
    if args.check:
        ref = onnxruntime_outputs(args.model, feeds)
        info["check"] = _compare(model.outputs, outs, ref)
        info["vs_onnxruntime"] = difference(outs[0], ref[0])
        info["rel_max_vs_onnxruntime"] = info["vs_onnxruntime"]["rel_max"]
    # NaN or inf where the reference has none (or the other way round) is a wrong answer
    rc = 0 if all(d["same_nonfinite"] for k, d in info.items() if k.startswith("vs_")) else 1
    if args.json:
        print_json(info)
        return rc
    views = len(report) - npu - info["host_nodes"]
    groups = [g for g in info["groups"] if g["kind"] == "group"]
    print(f"model {model.label}: {len(report)} nodes, {npu} on the {info['chip']} simulator, "
          f"{info['host_nodes']} on the host, {views} view{'s' * (views != 1)}, "
          f"{len(groups)} layer group{'s' * (len(groups) != 1)} ({seconds:.1f} s)")
    wn = max(len(r["name"]) for r in report)
    wo = max(len(r["op"]) for r in report)
    for r in report:
        g = "-" if r["group"] < 0 else str(r["group"])
        print(f"  {r['name']:<{wn}}  {r['op']:<{wo}}  {r['where']:<4}  {g:>3}  {str(r['shape']):<18}  "
              f"{r['why']}")
    for g in groups:
        names = g["nodes"]
        span = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
        print(f"group {g['index']:<3} {len(names)} nodes ({span}): {g['images']} image(s) x "
              f"{g['row_slices']} row slice(s), constants {g['constants']}, {g['peak_bytes']} "
              f"bytes of local memory per NPU, GDMA {g['gdma']['total']} bytes")
    gd = info["gdma"]
    print(f"GDMA   {gd['plan']['total']} bytes (loads {gd['plan']['load']}, stores "
          f"{gd['plan']['store']}, local {gd['plan']['local']}, system {gd['plan']['system']}); "
          f"layer by layer {gd['layer_by_layer']['total']} ({gd['ratio']:.3f}x)")
    e = info["estimate"]
    print(f"estimate  {e['bdc_cycles']} BDC cycles, {e['macs']} MACs: {1e3 * e['seconds']:.3f} ms at "
          f"{clock / 1e6:.0f} MHz with GDMA at {bw / 1e9:.0f} GB/s, nothing overlapped "
          f"({1e3 * e['overlapped']:.3f} ms if everything did); a model, not a measurement")
    _print_outputs(info["outputs"])
    print(f"output {tuple(outs[0].shape)}: " + difference_line(info["vs_cpu"], "the CPU runtime"))
    if args.check:
        print(difference_line(info["vs_onnxruntime"], "onnxruntime"))
    return rc


def _run_opencl(args) -> int:
    from ..backends.opencl import OpenCLSession

    if args.threads is not None:
        raise LayoutError("--threads applies to --runtime cpu only (OpenCL uses the device)")
    winograd = winograd_arg(args.winograd)
    max_image = max_image_arg(args.max_image)
    model = load_model(args)
    feeds = read_inputs(args, model)
    t0 = time.perf_counter()
    sess = OpenCLSession(model, args.device, half=args.half, winograd=winograd,
                         max_image=max_image, tune=args.tune)
    prep = time.perf_counter() - t0
    sess.run(feeds)                                          # warm-up
    t0 = time.perf_counter()
    out = sess.run(feeds)
    seconds = time.perf_counter() - t0
    if args.profile:
        sess.run(feeds, profile=True)
    outs = out if isinstance(out, list) else [out]
    if args.save is not None:
        write_output(args.save, "--save", outs[0])
    summ = sess.summary()
    info = {"model": model.label, "runtime": "opencl", **summ,
            "inputs": {k: list(v.shape) for k, v in feeds.items()},
            "prepare_seconds": prep, "seconds": seconds, "outputs": _outputs_info(model, outs),
            "layers": sess.layer_table(), "images": sess.images()}
    if args.profile:
        info["profile"] = [{"layer": ln, "op": op, "kernel": k, "ms": t * 1e3}
                           for ln, op, k, t in sess.last_profile]
    if args.check:
        info["check"] = _compare(model.outputs, outs, onnxruntime_outputs(args.model, feeds))
    if args.json:
        print_json(info)
        return 0
    ins = ", ".join(f"{k} {tuple(v)}" for k, v in info["inputs"].items())
    print(f"model {model.label}: opset {model.opset}, {len(model.graph.nodes)} nodes, input {ins}")
    print(f"device {summ['device']}: {summ['dtype']} images, {summ['layers']} layers, "
          f"{summ['kernels']} kernels, prepared in {prep:.2f} s")
    print(f"images {summ['images_allocated']} blocks allocated: {_kib(summ['peak_image_bytes'])} "
          f"({_kib(summ['activation_bytes'])} holding activations, "
          f"{_kib(summ['temporary_bytes'])} temporaries only); weights {_kib(summ['weight_bytes'])}")
    for f in summ["fallbacks"]:
        print(f"fallback {f}")
    print(f"ran in {seconds * 1e3:.2f} ms (wall, one inference after a warm-up)")
    _print_outputs(info["outputs"])
    if args.profile:
        per_layer, per_op = sess.profile_table()
        kinds = {f"{la.name} ({la.op})": la.kind for la in sess.layers}
        total = sum(t for _, t in per_layer) or 1e-12
        print_columns(("layer", "kernels", "device ms", "share"),
               [(n, kinds.get(n, ""), f"{t * 1e3:.3f}", f"{t / total:.1%}") for n, t in per_layer],
               right=(2, 3))
        print()
        print_columns(("op type", "device ms", "share"),
               [(op, f"{t * 1e3:.3f}", f"{t / total:.1%}") for op, t in per_op], right=(1, 2))
        print(f"total {total * 1e3:.3f} ms of device time")
    if args.check:
        _print_check(info["check"], cosine=True)
    return 0


def _print_check(checks, cosine):
    for c in checks:
        if c["rel_l2"] is None:
            line = f"onnxruntime: {c['name']} has no value finite in both"
        else:
            line = f"onnxruntime: {c['name']} relative L2 error {c['rel_l2']:.2e}"
            if cosine:
                line += f", cosine {c['cosine']:.6f}"
        if c["nan"] or c["inf"] or c["nan_onnxruntime"] or c["inf_onnxruntime"]:
            line += "" if c["rel_l2"] is None else f" over the {c['finite']} values finite in both"
            line += (f"; NaN and inf {c['nan']} and {c['inf']} "
                     f"here, {c['nan_onnxruntime']} and {c['inf_onnxruntime']} in onnxruntime, "
                     + ("at the same places" if c["same_nonfinite"] else "at DIFFERENT places"))
        if "top1" in c:
            same = "same" if c["top1"] == c["top1_onnxruntime"] else "DIFFERENT"
            line += f", top-1 {c['top1']} vs {c['top1_onnxruntime']} ({same})"
        print(line)


def _print_profile(prof):
    total = sum(t for _, _, t, _ in prof) or 1e-12
    rows = [(n, op, alg or "", f"{t * 1e3:.3f}", f"{t / total:.1%}") for n, op, t, alg in prof]
    print_columns(("layer", "op", "algorithm", "ms", "share"), rows, right=(3, 4))
    by_op = {}
    for _, op, t, alg in prof:
        key = op if not alg else f"{op} {alg}"
        n, s = by_op.get(key, (0, 0.0))
        by_op[key] = (n + 1, s + t)
    print()
    rows = [(k, str(n), f"{s * 1e3:.3f}", f"{s / total:.1%}")
            for k, (n, s) in sorted(by_op.items(), key=lambda kv: -kv[1][1])]
    print_columns(("op type (algorithm)", "layers", "ms", "share"), rows, right=(1, 2, 3))
    print(f"total {total * 1e3:.3f} ms in layers")


def print_columns(head, rows, right=(), mark=None, out=print):
    """``rows`` under ``head`` in aligned columns (``right``: the right-aligned ones; ``mark``: a
    two-character prefix per row)."""
    widths = [max(len(str(r[i])) for r in list(rows) + [head]) for i in range(len(head))]

    def fmt(r):
        cells = [f"{str(c):>{w}}" if i in right else f"{str(c):<{w}}" for i, (c, w) in
                 enumerate(zip(r, widths))]
        return "  ".join(cells).rstrip()

    prefix = (lambda m: m) if mark is not None else (lambda m: "")
    out((prefix("  ") + fmt(head)))
    for k, r in enumerate(rows):
        out(prefix(mark[k] if mark is not None else "") + fmt(r))


# ------------------------------------------------------------------------------ plan
def _kib(v):
    return f"{v / 1024:.1f} KiB" if v < 1 << 20 else f"{v / 2 ** 20:.2f} MiB"


def max_image_arg(text):
    """``--max-image W,H`` as a list of two positive integers, or None when not given."""
    if text is None:
        return None
    max_image = int_list(text, "--max-image")
    if len(max_image) != 2 or min(max_image) < 1:
        raise LayoutError(f"--max-image = {text!r} is not allowed: it must be W,H, "
                          "two positive integers")
    return max_image


def plan_cmd(args) -> int:
    from .._checks import renamed
    from ..model import plan_model

    if args.html is not None:
        output_arg(args.html, "--html", folder=True)
    max_image = max_image_arg(args.max_image)
    if args.max_image is not None and args.device is not None:
        raise LayoutError("--max-image and --device are both given: the limits come from one of them")
    winograd = winograd_arg(args.winograd)
    from ..schedule.npu import schedule_npu

    model = load_model(args)
    plan = plan_model(model, max_image=max_image, device=args.device, chip=args.chip,
                      half=args.half, winograd=winograd)
    report = None
    if args.html is not None:
        from ..model.report import write_report

        with renamed({"out_dir": "--html"}):
            report = write_report(plan, args.html)
    if args.json:
        d = plan.as_dict()
        d["problems"] = plan.problems()
        d["html"] = report
        print_json(d)
        return 0
    ins = ", ".join(f"{k} {v}" for k, v in model.inputs.items())
    print(f"model {model.label}: opset {model.opset}, {len(model.graph.nodes)} nodes, input {ins}")
    print(f"image limits [{plan.max_image[0]}, {plan.max_image[1]}] ({plan.limits_from}), "
          f"{plan.dtype} images; ! marks an image past them")
    rows, marks = [], []
    for r in plan.tensors:
        cpu = r["cpu"] or "-"
        if r["image"] is None:
            rows.append((r["name"], r["role"], str(tuple(r["shape"])), cpu, "-", "-", "-", "-",
                         "-", "-", r["note"] or ""))
        else:
            itype = r["image_type"] + (f" F({r['tile']},3)" if r.get("tile") else "")
            rows.append((r["name"], r["role"], str(tuple(r["shape"])), cpu, r["buffer"], itype,
                         f"[{r['image'][0]}, {r['image'][1]}]", str(r["bytes_f32"]),
                         str(r["bytes_f16"]), f"{r['waste']:.1%}", r["note"] or ""))
        marks.append("! " if r["fits"] is False else "  ")
    print_columns(("tensor", "role", "shape", "cpu", "buffer", "image type", "[W, H]", "f32 bytes",
                   "f16 bytes", "waste", "note"), rows, right=(7, 8, 9), mark=marks)
    mem = plan.memory()
    images = plan.images()
    blocks = len({i["slot"] for i in images if i["role"] != "weight"})
    print()
    for f in plan.schedule.fallbacks:
        print(f"fallback           {f}")
    print(f"images             {blocks} blocks for {sum(i['role'] != 'weight' for i in images)} "
          f"activations and temporaries, {sum(i['role'] == 'weight' for i in images)} weight "
          "images (--json lists each)")
    print(f"peak image memory  {_kib(mem['peak_image_bytes'])} {mem['dtype']} as allocated, images "
          f"reused after their last reader (most live at one layer: "
          f"{_kib(mem['live_peak_bytes'])}, at {mem['peak_layer']})")
    print(f"weights            {_kib(mem['weight_bytes'])} {mem['dtype']}")
    if plan.chip is not None:
        c = plan.chip
        print()
        print(f"NPU schedule on {c.name}: {c.npus} NPUs x {c.lmem_bytes // 1024} KiB, align "
              f"{c.align_bytes} bytes; each tensor at its local address, with its channels and "
              "bytes in the fullest NPU (the placements a run uses; the first image and row slice "
              "of its layer group); ! = working set past one NPU")
        rows, marks = [], []
        for r in plan.layers:
            cell = ", ".join(f"{t['role']} {t['channels_per_npu']}ch/{t['bytes_per_npu']}B@{t['address']}"
                             for t in r["tensors"]) or "-"
            rows.append((r["layer"], r["op"], r["place"], "-" if r["group"] < 0 else str(r["group"]),
                         cell, str(r["working_set"]) if r["tensors"] else "-",
                         str(r["gdma_bytes"]) if r["gdma_bytes"] else "-", r["why"]))
            marks.append("  " if r["fits"] else "! ")
        print_columns(("layer", "op", "place", "group", "tensors (channels/NPU, bytes/NPU @ address)",
                       "working set", "GDMA bytes", "why"), rows, right=(3, 5, 6), mark=marks)
        print()
        single = schedule_npu(model.graph, c, groups=False).gdma_bytes()
        total = plan.npu.gdma_bytes()
        for g in plan.npu.group_rows():
            if g["kind"] != "group":
                continue
            names = g["nodes"]
            span = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
            print(f"group {g['index']:<3} {len(names)} nodes ({span}): {g['images']} image(s) x "
                  f"{g['row_slices']} row slice(s), constants {g['constants']}, {g['peak_bytes']} "
                  f"bytes per NPU, GDMA {g['gdma']['total']} bytes, estimate {g['bdc_cycles']} BDC "
                  "cycles")
        print(f"GDMA               {total['total']} bytes in layer groups; layer by layer "
              f"{single['total']} ({total['total'] / max(single['total'], 1):.3f}x)")
    problems = plan.problems()
    print()
    print(f"problems           {len(problems)}")
    for line in problems:
        print(f"  {line}")
    if report:
        print(f"report             {report}")
    return 0


# ------------------------------------------------------------------------------ the tour
def demo(tour) -> None:
    tour.section("Models: a whole network planned and run (tensorlayout plan / run)")
    try:
        import onnx  # noqa: F401
    except ImportError:
        tour.print("(skipped: reading ONNX needs the onnx package, pip install 'tensorlayout[model]')")
        return
    import os

    from ..model import load, plan_model, zoo

    how = "onnx.helper"
    data = None
    try:
        import torch  # noqa: F401

        data, _ = zoo.export("squeezenet1_1", size=64, classes=10)
        how = "PyTorch (SqueezeNet 1.1, random weights, 64 x 64, torch.onnx.export)"
    except Exception:  # noqa: BLE001 - any exporter problem: fall back to the helper-built net
        data = None
    if data is None:
        data = zoo.tiny_onnx()
        how = "onnx.helper (a small conv net, random weights)"
    os.makedirs(tour.out_dir, exist_ok=True)
    path = os.path.join(tour.out_dir, "demo_model.onnx")
    with open(path, "wb") as f:
        f.write(data)
    model = load(path)
    tour.print(f"A network built now with {how}: {len(model.graph.nodes)} nodes, written to {path}.")
    plan = plan_model(model, chip="BM1688")
    mem = plan.memory()
    convs = [s for s in model.steps if s.node.op == "Conv"]
    algs = {}
    for s in convs:
        algs[s.info["algorithm"]] = algs.get(s.info["algorithm"], 0) + 1
    tour.print(f"Convolutions: {len(convs)} ("
               + ", ".join(f"{n} {a}" for a, n in sorted(algs.items())) + "), plans made once at load.")
    acts = sum(r["bytes_f32"] for r in plan.activations if r["image"])
    tour.print(f"Image memory on a GPU: {_kib(mem['peak_image_bytes'])} (float32) allocated with images "
               f"reused after their last reader, {_kib(acts)} if each activation had its own; "
               f"weights {_kib(mem['weight_bytes'])}.")
    for what, rows in (("activation", plan.activations),
                       ("weight", [r for r in plan.tensors if r["role"] == "weight"])):
        big = max((r for r in rows if r["image"]), key=lambda r: r["bytes_f32"])
        tour.print(f"Largest {what} image: {big['name']} {tuple(big['shape'])} -> {big['image_type']} "
                   f"[{big['image'][0]}, {big['image'][1]}], {big['bytes_f32']} bytes, "
                   f"{big['waste']:.0%} padding.")
    over = [r for r in plan.layers if not r["fits"]]
    tour.print(f"On BM1688 ({plan.chip.lmem_bytes // 1024} KiB per NPU) {len(plan.layers) - len(over)} of "
               f"{len(plan.layers)} layers fit one NPU's local memory untiled.")
    x = np.random.default_rng(0).standard_normal(next(iter(model.inputs.values()))).astype(np.float32)
    y = model.run(x)
    tour.print(f"Run on the CPU runtime: output {y.shape}, top-1 class {int(np.argmax(y))}.")
    try:
        ref = onnxruntime_outputs(path, {next(iter(model.inputs)): x})[0]
        tour.print(f"onnxruntime on the same input: relative L2 error {_rel_l2(y, ref):.1e}, top-1 "
                   f"{int(np.argmax(ref))} ({'same' if np.argmax(ref) == np.argmax(y) else 'different'}).")
    except LayoutError:
        tour.print("(onnxruntime is not installed: no reference to compare with)")
    tour.print(f"Try: tensorlayout plan {path} --chip BM1684 --html {tour.out_dir}/plan")
    tour.print(f"     tensorlayout run {path} --profile --check")
