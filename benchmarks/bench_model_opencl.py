"""Whole networks on OpenCL images: tensorlayout's prepared OpenCL session, next to its CPU
runtime and onnxruntime on the same machine, and per layer how far each kernel is from the
device's FLOP rate and memory bandwidth.

Networks: the test networks of ``tensorlayout.model.zoo`` (torchvision's architectures in
plain PyTorch, random weights, exported at run time: needs torch), or ONNX files given with
``--model``.  Batch 1, float32 (``--half``: float16 images).  Each runtime runs twice
untimed first.  In each of ``--rounds`` rounds the three take turns (the order rotates) and
each is timed once on the same input (wall clock, host to host); the timed OpenCL run is a
plain one (the session's queue without profiling, as a user runs it), followed in the same
round by one profiled run, untimed, whose kernels' events (the layers' and the input and
output conversion kernels'; the host<->device buffer copies are not profiled) give the
device time.  Columns: medians over rounds with the spread (lowest-highest); ``wall/dev``:
wall time over the summed device time; ``host/layer``: (wall - device) / layers, the time
outside the profiled kernels (host work the GPU does not hide, the buffer copies, gaps)
spread over the layers; ratios are the other
runtime's time / OpenCL wall time per round, median [lowest-highest] (above 1: OpenCL
faster).  Per layer (``--layers N`` slowest per network): device time, GFLOP/s of the
operations the kernels run (Winograd counts its GEMMs and transforms' minimum traffic),
GB/s of the minimum bytes moved, each as a fraction of the device's peak (``--peak-gflops``,
``--peak-gbs``, or the table below by device name; a CPU device without figures gets its
FLOP peak from compute units x clock x 32 FLOP/cycle (AVX2 FMA)).

    python benchmarks/bench_model_opencl.py [--device SPEC] [--nets resnet18,vgg11] [--size 224]
        [--rounds 5] [--threads 2] [--half] [--tune] [--layers 8] [--json OUT.json]

onnxruntime and the CPU runtime are skipped with a note when missing (``--no-cpu`` and
``--no-ort`` skip them on purpose, e.g. on a GPU machine where only OpenCL matters).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

# kernels compile in the untimed warm-up calls, never in a background thread while timing
os.environ.setdefault("TENSORLAYOUT_COMPILE", "wait")

NETS = ("resnet18", "vgg11", "mobilenet_v2", "squeezenet1_1", "shufflenet_v2")

# Peak figures (float32 GFLOP/s without tensor cores, GB/s) by a substring of the device name.
PEAKS = {
    "H100 PCIe": (51200.0, 2000.0),
    "H100": (66900.0, 3350.0),          # SXM
    "H200": (66900.0, 4800.0),
    "A100": (19500.0, 2039.0),
    "L40S": (91600.0, 864.0),
    "RTX 4090": (82600.0, 1008.0),
}


def peaks(info, device, gflops, gbs):
    name = info.name
    found = next((v for k, v in PEAKS.items() if k.lower() in name.lower()), None)
    if gflops is None:
        gflops = found[0] if found else None
        if gflops is None and "CPU" in info.kind:
            clock = float(device.max_clock_frequency or 0)
            gflops = info.compute_units * clock * 1e-3 * 32 if clock else None
    if gbs is None and found:
        gbs = found[1]
    return gflops, gbs


def stats(v):
    v = np.asarray(v, np.float64)
    return float(np.median(v)), float(v.min()), float(v.max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="OpenCL device: index or name substring")
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--model", action="append", default=[], metavar="PATH.onnx",
                    help="an ONNX file to run instead of the zoo networks (repeatable)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="threads of the CPU runtimes")
    ap.add_argument("--half", action="store_true", help="float16 images")
    ap.add_argument("--tune", action="store_true", help="tune work-group sizes first (cached)")
    ap.add_argument("--layers", type=int, default=8, help="slowest layers listed per network")
    ap.add_argument("--peak-gflops", type=float, default=None)
    ap.add_argument("--peak-gbs", type=float, default=None)
    ap.add_argument("--no-cpu", action="store_true", help="skip tensorlayout's CPU runtime")
    ap.add_argument("--no-ort", action="store_true", help="skip onnxruntime")
    ap.add_argument("--json", default=None, metavar="OUT.json", help="also write the results as JSON")
    args = ap.parse_args()

    from tensorlayout.errors import LayoutError
    from tensorlayout.model import load
    from tensorlayout.backends.cpu import threads_limit
    from tensorlayout.model import OpenCLSession
    from tensorlayout.opencl import get_context

    try:
        cctx = get_context(args.device)
    except LayoutError as exc:
        print(f"bench_model_opencl: {exc}", file=sys.stderr)
        return 2
    ort = None
    if not args.no_ort:
        try:
            import onnxruntime as ort
        except ImportError:
            print("note: onnxruntime is not installed: its column is skipped")
    gflops, gbs = peaks(cctx.info, cctx.device, args.peak_gflops, args.peak_gbs)
    print(f"device: {cctx.info.name} ({cctx.info.platform}, {cctx.info.version}); host: "
          f"{platform.processor() or platform.machine()}; {'float16' if args.half else 'float32'} "
          f"images; batch 1; {args.rounds} rounds; CPU runtimes {args.threads} threads")
    print(f"peaks: {f'{gflops:.0f} GFLOP/s' if gflops else 'FLOP rate unknown'}, "
          f"{f'{gbs:.0f} GB/s' if gbs else 'bandwidth unknown (--peak-gbs)'}")

    jobs = []
    if args.model:
        jobs = [(p, p) for p in args.model]
    else:
        from tensorlayout.model import zoo

        try:
            jobs = [(n, zoo.export(n, size=args.size)[0]) for n in args.nets.split(",")]
        except LayoutError as exc:
            print(f"bench_model_opencl: {exc} (or give --model PATH.onnx)", file=sys.stderr)
            return 2
    results = []
    head = (f"{'network':14s} {'OpenCL wall ms':>22s} {'device ms':>10s} {'wall/dev':>8s} "
            f"{'host/layer':>10s} {'CPU ms':>8s} {'CPU/OCL':>18s} {'ort ms':>8s} {'ort/OCL':>18s} "
            f"{'rel L2':>8s} {'top-1':>5s}")
    rows, layer_blocks = [], []
    for name, source in jobs:
        model = load(source)
        sess = OpenCLSession(model, cctx, half=args.half, tune=args.tune)
        shape = next(iter(model.inputs.values()))
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        runners = {"ocl": lambda: sess.run(x)}     # a plain run: the queue without profiling
        if not args.no_cpu:
            def cpu():
                with threads_limit(args.threads):
                    return model.run(x)
            runners["cpu"] = cpu
        if ort is not None:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = args.threads
            opts.inter_op_num_threads = 1
            osess = ort.InferenceSession(source if isinstance(source, str) else source, opts,
                                         providers=["CPUExecutionProvider"])
            feed = {osess.get_inputs()[0].name: x}
            runners["ort"] = lambda: osess.run(None, feed)[0]
        outs = {}
        for _ in range(2):
            for k, fn in runners.items():
                outs[k] = fn()
        times = {k: [] for k in runners}
        dev, keys = [], list(runners)
        prof = None
        for r in range(args.rounds):
            order = keys[r % len(keys):] + keys[:r % len(keys)]
            for k in order:
                t0 = time.perf_counter()
                runners[k]()
                times[k].append((time.perf_counter() - t0) * 1e3)
                if k == "ocl":                   # then a profiled run, untimed, for the device time
                    sess.run(x, profile=True)
                    prof = sess.last_profile
                    dev.append(sum(t for *_, t in prof) * 1e3)
        wall = stats(times["ocl"])
        d = stats(dev)
        y = outs["ocl"]
        ref = outs.get("ort", outs.get("cpu"))
        err = float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref)) if ref is not None else None
        same = bool(np.argmax(y) == np.argmax(ref)) if ref is not None else None
        nlayers = len(sess.layers)
        row = {"network": name, "size": list(shape), "wall_ms": wall, "device_ms": d,
               "wall_over_device": wall[0] / d[0], "host_us_per_layer": (wall[0] - d[0]) * 1e3 / nlayers,
               "layers": nlayers, "kernels": sum(len(la.launches) for la in sess.layers),
               "rel_l2_vs": "onnxruntime" if "ort" in outs else "cpu", "rel_l2": err, "top1_same": same,
               "images_bytes": sess.summary()["image_bytes"], "fallbacks": sess.fallbacks}
        cells = [f"{name:14s} {wall[0]:8.2f} {wall[1]:6.2f}-{wall[2]:<6.2f} {d[0]:10.2f} "
                 f"{wall[0] / d[0]:8.2f} {row['host_us_per_layer']:8.1f}us"]
        for k in ("cpu", "ort"):
            if k in times:
                t = stats(times[k])
                ratio = np.array(times[k]) / np.array(times["ocl"])
                row[f"{k}_ms"] = t
                row[f"{k}_over_ocl"] = stats(ratio)
                cells.append(f"{t[0]:8.2f} {np.median(ratio):6.2f} [{ratio.min():4.2f}-{ratio.max():<4.2f}]")
            else:
                cells.append(f"{'-':>8s} {'-':>18s}")
        cells.append(f"{err:8.1e} {('same' if same else 'DIFF'):>5s}" if err is not None else f"{'-':>8s} {'-':>5s}")
        rows.append(" ".join(cells))
        # per layer, from the last profiled run
        per = {}
        for ln, op, kern, t in prof:
            per.setdefault(ln, 0.0)
            per[ln] += t
        layers = []
        for la in sess.layers:
            t = per.get(la.name, 0.0)
            fl = sum(x_.flops for x_ in la.launches)
            nb = sum(x_.nbytes for x_ in la.launches)
            g = fl / t * 1e-9 if t > 0 else 0.0
            b = nb / t * 1e-9 if t > 0 else 0.0
            layers.append({"layer": la.name, "kind": la.kind, "device_ms": t * 1e3, "gflops": g,
                           "gbs": b, "flop_share": g / gflops if gflops else None,
                           "bw_share": b / gbs if gbs else None})
        row["per_layer"] = layers
        results.append(row)
        layer_blocks.append((name, sorted(layers, key=lambda r_: -r_["device_ms"])[:args.layers]))

    print()
    print(head)
    print("-" * len(head))
    for r in rows:
        print(r)
    for name, layers in layer_blocks:
        print()
        print(f"{name}: the {len(layers)} slowest layers (device time, last profiled run)")
        h = f"  {'layer':40s} {'kernels':34s} {'ms':>8s} {'GFLOP/s':>9s} {'of peak':>8s} {'GB/s':>8s} {'of peak':>8s}"
        print(h)
        for r in layers:
            fs = f"{r['flop_share']:8.1%}" if r["flop_share"] is not None else f"{'-':>8s}"
            bs = f"{r['bw_share']:8.1%}" if r["bw_share"] is not None else f"{'-':>8s}"
            print(f"  {r['layer'][:40]:40s} {r['kind'][:34]:34s} {r['device_ms']:8.3f} "
                  f"{r['gflops']:9.1f} {fs} {r['gbs']:8.1f} {bs}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": cctx.info.name, "platform": cctx.info.platform,
                       "half": args.half, "peak_gflops": gflops, "peak_gbs": gbs,
                       "rounds": args.rounds, "threads": args.threads, "networks": results}, f, indent=1)
        print(f"\nJSON written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
