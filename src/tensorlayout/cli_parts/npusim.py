"""``tensorlayout npu simulator``, ``npu plan-conv`` and ``npu run-onnx``: Sophgo's BM1684 simulator."""

from __future__ import annotations

import time

import numpy as np

from ..errors import LayoutError
from ._common import nonneg, positive, print_json


def register(sub) -> None:
    npu = sub.choices.get("npu")
    if npu is None:  # pragma: no cover - the npu part is always present
        return
    cmds = npu.add_subparsers(dest="npu_command", metavar="[simulator | plan-conv | run-onnx]",
                              title="subcommands (without one, place the tensor of --shape)")
    s = cmds.add_parser(
        "simulator",
        help="find, check or download Sophgo's BM1684 simulator (libcmodel_bm1684.so)",
        description="Say where the BM1684 simulator library is and check that it loads; with "
        "--fetch, download the tpu-mlir==1.30.2 wheel with pip (about 312 MB) and extract only "
        "libcmodel_bm1684.so into the cache folder. TENSORLAYOUT_CMODEL may name an existing copy.",
    )
    s.add_argument("--fetch", action="store_true", help="download and extract it when it is missing")
    s.add_argument("--quiet", action="store_true", help="no pip progress output")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=_simulator)
    register_plan(cmds)
    register_run_onnx(cmds)


def register_run_onnx(cmds) -> None:
    r = cmds.add_parser(
        "run-onnx", help="run an ONNX model on the BM1684 simulator in layer groups (what has no "
                         "BDC or GDMA form on the host); the same as tensorlayout run --runtime npu",
        description="Run an ONNX model on Sophgo's BM1684 simulator: each node as BDC instructions "
        "(convolutions, activations, arithmetic, pooling, Gemm) or GDMA placements (Concat, "
        "Slice, Split, Transpose, reshapes), consecutive nodes in layer groups whose activations "
        "stay in local memory, and the nodes without such a form on the host CPU runtime; print "
        "where each node ran and why, its group, the GDMA bytes against the layer-by-layer "
        "schedule, a cost estimate, and the difference from the model run wholly on the CPU "
        "runtime: over the values finite in both, with the NaN and inf counted apart. Exit "
        "status 1 when the two do not have NaN and inf at the same places (the chip's Relu, "
        "Clip and MaxPool turn NaN into numbers).")
    r.add_argument("model", metavar="MODEL.onnx", help="the ONNX file to run (one input)")
    r.add_argument("--input", action="append", default=[], metavar="X.npy",
                   help="input array (.npy, float32); default: random normal (--seed)")
    r.add_argument("--input-shape", action="append", default=[], metavar="[NAME=]N,C,H,W",
                   help="fix a dynamic input shape; repeatable")
    r.add_argument("--seed", type=nonneg, default=0, help="seed of the random input, >= 0 (default 0)")
    r.add_argument("--check", action="store_true", help="also compare with onnxruntime")
    r.add_argument("--layer-by-layer", action="store_true",
                   help="every node a layer group of its own (each activation to system memory "
                        "and back)")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=_run_onnx)


def _run_onnx(args) -> int:
    """``npu run-onnx``: the same as ``run --runtime npu``."""
    from .model import run_npu

    for name, default in (("save", None), ("chip", None), ("threads", None), ("profile", False)):
        setattr(args, name, getattr(args, name, default))
    return run_npu(args)


def _simulator(args) -> int:
    from ..npu import cmodel

    if args.fetch and not cmodel.library_path().is_file():
        if cmodel.ENV in __import__("os").environ:
            raise LayoutError(f"--fetch is not allowed while {cmodel.ENV} names a missing file: "
                              f"unset it to fetch into {cmodel.cache_dir()}")
        cmodel.fetch(quiet=args.quiet)
    sim = cmodel.simulator()
    info = {"library": str(sim.path), "sha256": sim.sha256(), "wheel": cmodel.WHEEL,
            "npus": sim.npus, "lmem_bytes": sim.lmem_bytes,
            "system_base": sim.SYSTEM_BASE, "system_bytes": sim.SYSTEM_BYTES}
    if args.json:
        print_json(info)
        return 0
    print(f"simulator   {info['library']}")
    print(f"from        {cmodel.WHEEL} (sha256 {info['sha256'][:16]}...)")
    print(f"chip        BM1684: {sim.npus} NPUs x {sim.lmem_bytes} bytes of local memory")
    print(f"system      {sim.SYSTEM_BYTES >> 20} MiB at GDMA address {sim.SYSTEM_BASE:#x}")
    return 0


def register_plan(cmds) -> None:
    from ..npu.chip import CHIPS

    p = cmds.add_parser(
        "plan-conv",
        help="plan a convolution layer in NPU local memory (slices, addresses, GDMA bytes) and run it",
        description="Place a convolution's input, 2IC weights, bias and output in local memory; when "
        "they do not fit one NPU, split the output along H (with the input halo), batch and output "
        "channels, choosing the fewest slices. With --run, run the plan on Sophgo's BM1684 simulator "
        "with random data and compare it with float64 direct convolution.",
    )
    p.add_argument("--chip", default="BM1684", help=f"{', '.join(CHIPS)} (--run needs BM1684)")
    p.add_argument("--input", required=True, help="N,C,H,W")
    p.add_argument("--out-channels", type=positive, required=True, help="output channels K")
    p.add_argument("--kernel", required=True, help="k or kh,kw")
    p.add_argument("--stride", default="1", help="s or sh,sw (default 1)")
    p.add_argument("--padding", help="p, ph,pw or top,bottom,left,right (default: 'same', dilation*(k-1)//2)")
    p.add_argument("--dilation", default="1", help="d or dh,dw (default 1)")
    p.add_argument("--no-bias", action="store_true", help="a convolution without bias")
    p.add_argument("--run", action="store_true", help="run it on the simulator and check it")
    p.add_argument("--seed", type=nonneg, default=0, help="random data seed for --run, >= 0")
    p.add_argument("--svg", help="write the local-memory timeline as SVG to this file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_plan_conv)


def _one_or_more(text, name, sizes):
    from ._common import int_list

    v = int_list(text, name)
    if len(v) not in sizes:
        raise LayoutError(f"{name} = {text!r} is not allowed: it must have {' or '.join(map(str, sizes))} numbers")
    return v[0] if len(v) == 1 else v


def _plan_conv(args) -> int:
    import time

    import numpy as np

    from ..npu import get_chip
    from ..npu.planner import plan_conv, run_conv_plan, timeline_svg
    from ..npu.reference import conv2d_reference
    from .._checks import renamed
    from ._common import check_array_size, int_list, output_arg, write_output

    if args.svg is not None:
        output_arg(args.svg, "--svg")
    shape = int_list(args.input, "--input")
    if len(shape) != 4:
        raise LayoutError(f"--input = {args.input!r} is not allowed: it must be N,C,H,W")
    with renamed({"input_shape": "--input", "out_channels": "--out-channels", "kernel": "--kernel",
                  "stride": "--stride", "padding": "--padding", "dilation": "--dilation"}):
        plan = plan_conv(shape, args.out_channels, _one_or_more(args.kernel, "--kernel", (1, 2)),
                         stride=_one_or_more(args.stride, "--stride", (1, 2)),
                         padding=None if args.padding is None else _one_or_more(args.padding, "--padding", (1, 2, 4)),
                         dilation=_one_or_more(args.dilation, "--dilation", (1, 2)), bias=not args.no_bias,
                         chip=get_chip(args.chip))
    info = {"input": list(plan.input_shape), "output": list(plan.output_shape), "split": list(plan.split),
            "slices": plan.slices_count, "bytes_per_npu": plan.bytes_per_npu,
            "buffers": {b.name: {"shape": list(b.shape), "offset": b.offset, "bytes": b.bytes}
                        for b in plan.buffers.values()},
            "gdma_bytes": plan.gdma_bytes, "minimum_gdma_bytes": plan.minimum_gdma_bytes}
    lines = plan.describe()
    if args.run:
        n, c, h, w = plan.input_shape
        for what, dims in (("--input", plan.input_shape), ("weights of --out-channels", (plan.out_channels, c)
                                                             + plan.kernel), ("output", plan.output_shape)):
            check_array_size(what, dims, 4)
        rng = np.random.default_rng(args.seed)
        x = rng.standard_normal(plan.input_shape, dtype=np.float32)
        wt = rng.standard_normal((plan.out_channels, c) + plan.kernel, dtype=np.float32)
        b = rng.standard_normal(plan.out_channels, dtype=np.float32) if plan.bias else None
        t0 = time.perf_counter()
        y = run_conv_plan(plan, x, wt, b)
        seconds = time.perf_counter() - t0
        ref = conv2d_reference(x, wt, b, plan.padding, plan.stride, plan.dilation)
        err = float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))
        info["run"] = {"relative_error": err, "seconds": seconds, "ok": err < 1e-5}
        lines.append(f"run         on the BM1684 simulator in {seconds:.2f} s: max |y - ref| / max |ref| = "
                     f"{err:.2e} against float64 direct convolution ({'ok' if err < 1e-5 else 'TOO LARGE'})")
    if args.svg is not None:
        write_output(args.svg, "--svg", timeline_svg(plan))
        info["svg"] = args.svg
        lines.append(f"timeline    {args.svg}")
    if args.json:
        print_json(info)
    else:
        print("\n".join(lines))
    return 0 if not args.run or info["run"]["ok"] else 1


def demo(tour) -> None:
    import numpy as np

    from ..npu import cmodel

    tour.section("Sophgo's BM1684 simulator (libcmodel_bm1684.so from tpu-mlir==1.30.2)")
    try:
        sim = cmodel.simulator()
    except cmodel.SimulatorError as exc:
        tour.print(f"Not available here: {exc}")
        tour.print("Get it with 'make simulator' or 'tensorlayout npu simulator --fetch' (about 312 MB once).")
        return
    from ..npu import BM1684, LocalMemory, bdc, tensor_layout
    from ..npu.network import resnet_basic_block, run_on_simulator, run_reference
    from ..npu.planner import plan_conv, run_conv_plan
    from ..npu.reference import conv2d_reference

    tour.print(f"Loaded {sim.path}: {sim.npus} NPUs x {sim.lmem_bytes} bytes.")
    rng = np.random.default_rng(0)
    own = LocalMemory(BM1684, system_bytes=1 << 20)
    mem = LocalMemory(BM1684, system_bytes=1 << 20, backend="cmodel")
    x = rng.standard_normal((2, 70, 5, 9), dtype=np.float32)
    for m in (own, mem):
        m.write_system(0, x)
        m.gdma_s2l(3 * BM1684.lmem_bytes + 256, 0, x.shape, "fp32", dst_stride=(300, 50, 10, 1))
    same = np.array_equal(own.local, mem.local)
    tour.print(f"GDMA S2L of {x.shape} fp32 to NPU 3 with strides (300, 50, 10, 1): tensorlayout's engine and "
               f"the simulator leave all {mem.local.size} local bytes {'identical' if same else 'DIFFERENT'}.")
    w = rng.standard_normal((16, 70, 3, 3), dtype=np.float32)
    b = rng.standard_normal(16, dtype=np.float32)
    xt = mem.s2l(0, x)
    wt = bdc.store_conv_weight(mem, 64 * 1024, w)
    bt = bdc.store_bias(mem, 128 * 1024, b)
    yt = tensor_layout(BM1684, 192 * 1024, bdc.conv2d_output_shape(x.shape, w.shape, padding=1))
    bdc.conv2d(mem, yt, xt, wt, bt, padding=1)
    ref = conv2d_reference(x, w, b, padding=1)
    err = np.abs(mem.load(yt) - ref).max() / np.abs(ref).max()
    tour.print(f"okk_bdc_conv2d, 70 -> 16 channels 3x3, 2IC weights placed by tensorlayout: relative error "
               f"{err:.1e} against float64.")
    try:
        bdc.conv2d(mem, tensor_layout(BM1684, BM1684.lmem_bytes + 192 * 1024, yt.shape), xt, wt, bt, padding=1)
    except LayoutError as exc:
        tour.print(f"A bad operand is refused before the simulator runs: {exc}")
    plan = plan_conv((2, 3, 500, 160), 2, 3)
    tour.print("The layer planner on a layer that does not fit one NPU:")
    for line in plan.describe()[2:3] + plan.describe()[-3:]:
        tour.print("  " + line)
    xx = rng.standard_normal(plan.input_shape, dtype=np.float32)
    ww = rng.standard_normal((2, 3, 3, 3), dtype=np.float32)
    bb = rng.standard_normal(2, dtype=np.float32)
    y = run_conv_plan(plan, xx, ww, bb)
    ref = conv2d_reference(xx, ww, bb, plan.padding)
    tour.print(f"  run on the simulator: relative error {np.abs(y - ref).max() / np.abs(ref).max():.1e}")
    net = resnet_basic_block(16, rng)
    xn = rng.standard_normal((1, 16, 12, 12), dtype=np.float32)
    y, report = run_on_simulator(net, xn)
    ref = run_reference(net, xn)
    tour.print(f"A ResNet basic block ({' -> '.join(r['op'] for r in report)}) on the simulator: relative "
               f"error {np.abs(y - ref).max() / np.abs(ref).max():.1e} against float64 NumPy.")
    try:
        from ..model import load, zoo

        model = load(zoo.tiny_onnx())
    except ImportError:  # the onnx package (the 'model' extra) is missing
        return
    from ..backends.npu import run_onnx

    xm = rng.standard_normal(model.inputs["x"], dtype=np.float32)
    y, report = run_onnx(model, xm)
    ref = model.run(xm)
    tour.print(f"A small ONNX classifier node by node: {', '.join(r['op'] + ' ' + r['where'] for r in report)}; "
               f"relative error {np.abs(y - ref).max() / np.abs(ref).max():.1e} against the CPU runtime.")
