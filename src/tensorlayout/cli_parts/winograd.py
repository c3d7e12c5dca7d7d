"""``tensorlayout winograd`` (exact transform matrices) and ``tensorlayout conv`` (a timed convolution)."""

from __future__ import annotations

import time

from ..errors import ConvolutionError, ShapeError, short
from . import _common
from ._common import (check_array_size, dtype_arg, nonneg, positive, print_json,
                      shape_arg, str_list)


def register(sub) -> None:
    p = sub.add_parser("winograd", help="print the exact Winograd matrices AT, G, BT of F(m, r)",
                       description="The exact F(m, r) transforms, as fractions.  The default points "
                       "for r = 3, m = 2, 4, 6 use MACE's scaling of G; --points uses the Lagrange "
                       "scaling (denominators in G).  The output says which.")
    p.add_argument("--m", type=positive, default=6, help="output tile (default: %(default)s)")
    p.add_argument("--r", type=positive, default=3, help="kernel size (default: %(default)s)")
    p.add_argument("--points", default=None,
                   help="the m + r - 2 finite interpolation points, comma-separated, e.g. '0,1,-1,1/2,-1/2'")
    p.add_argument("--json", action="store_true", help="print JSON (entries as strings)")
    p.set_defaults(func=_winograd)

    c = sub.add_parser("conv", help="run a random convolution; print the algorithm chosen, "
                       "the time and the error against float64 direct",
                       description="Convolve a random NCHW tensor with random weights; print the "
                       "algorithm chosen, its time and its error against float64 direct convolution. "
                       "--compare runs every applicable algorithm on the same input side by side.")
    c.add_argument("--shape", "--input", dest="shape", required=True, metavar="N,C,H,W",
                   help="input shape N,C,H,W (--input is the old spelling)")
    c.add_argument("--out-channels", type=positive, required=True, help="output channels K")
    c.add_argument("--kernel", type=positive, default=3, help="square kernel size (default: %(default)s)")
    c.add_argument("--stride", type=positive, default=1, help="stride (default: %(default)s)")
    c.add_argument("--padding", type=nonneg, default=None,
                   help="zero padding on each side (default: dilation * (kernel - 1) // 2)")
    c.add_argument("--dilation", type=positive, default=1, help="kernel dilation (default: %(default)s)")
    c.add_argument("--groups", type=positive, default=1,
                   help="groups; must divide the input and output channels (default: %(default)s)")
    c.add_argument("--algorithm", default="auto",
                   help="auto, winograd, winograd:M, im2col or direct (default: %(default)s)")
    c.add_argument("--compare", action="store_true",
                   help="run every applicable algorithm on the same input; print time and error side by side")
    c.add_argument("--dtype", default="float32",
                   help="float32 (fp32, single) or float64 (fp64, double); default %(default)s")
    c.add_argument("--repeat", type=positive, default=3, help="timed runs, 1 to 1000; the best is shown (default: %(default)s)")
    c.add_argument("--seed", type=nonneg, default=0, help="seed of the random input and weights (default: %(default)s)")
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(func=_conv)


def _matrix_lines(name, mat):
    cells = [[str(v) for v in row] for row in mat]
    width = max(len(s) for row in cells for s in row)
    lines = [f"{name} ({mat.shape[0]}x{mat.shape[1]}):"]
    lines += ["  [" + "  ".join(s.rjust(width) for s in row) + "]" for row in cells]
    return lines


def scaling_note(m: int, r: int, points) -> str:
    """Which of the two scalings of G and BT ``tensorlayout winograd`` prints.

    >>> scaling_note(2, 3, None)[:11]
    "MACE's G: r"
    """
    if points is None and r == 3 and m in (2, 4, 6):
        return ("MACE's G: rows of G scaled as in MACE's OpenCL runtime (filter images are "
                "byte-compatible with it), BT scaled to match")
    return ("Lagrange scaling: the interpolation denominators are in G, BT holds the node "
            "polynomials' coefficients (MACE's scaling is used only without --points, for r = 3, "
            "m = 2, 4, 6; both give the same y exactly)")


def _winograd(args) -> int:
    from ..winograd import transforms

    points = None if args.points is None else str_list(args.points, "--points")
    t = transforms(args.m, args.r, points)
    note = scaling_note(args.m, args.r, points)
    if args.json:
        print_json({"m": t.m, "r": t.r, "alpha": t.alpha,
                    "points": [str(p) for p in t.points] + ["inf"], "scaling": note,
                    "AT": [[str(v) for v in row] for row in t.AT],
                    "G": [[str(v) for v in row] for row in t.G],
                    "BT": [[str(v) for v in row] for row in t.BT]})
        return 0
    print(f"F({t.m},{t.r}): input tile alpha = {t.alpha}, points "
          f"{', '.join(str(p) for p in t.points)}, inf")
    print("y = AT [(G g) * (BT d)] reproduces y[i] = sum_k d[i+k] g[k] exactly (checked).")
    print(f"scaling: {note}")
    for name, mat in (("AT", t.AT), ("G", t.G), ("BT", t.BT)):
        print("\n".join(_matrix_lines(name, mat)))
    return 0


def _conv_inputs(args):
    import numpy as np

    if args.repeat > 1000:
        raise ShapeError(f"--repeat = {args.repeat} is not allowed: at most 1000 timed runs")
    shape = shape_arg(args.shape, "--shape", 4, "N,C,H,W")
    N, C, H, W = shape
    k, d, s = args.kernel, args.dilation, args.stride
    pad = d * (k - 1) // 2 if args.padding is None else args.padding
    if C % args.groups:
        raise ConvolutionError(f"--groups = {args.groups} is not allowed: it must divide the "
                               f"{C} input channels")
    if args.out_channels % args.groups:
        raise ConvolutionError(f"--groups = {args.groups} is not allowed: it must divide the "
                               f"{args.out_channels} output channels (--out-channels)")
    span = d * (k - 1) + 1
    OH, OW = (H + 2 * pad - span) // s + 1, (W + 2 * pad - span) // s + 1
    if OH < 1 or OW < 1:
        raise ConvolutionError(f"--kernel = {k} (dilation {d}) is not allowed: it does not fit the "
                               f"{H}x{W} input with padding {pad}")
    dt = dtype_arg(args.dtype, "--dtype", ("float32", "float64"))
    cg = C // args.groups
    # What the run holds at once: x and y in dt and in float64 (the reference), the weights,
    # and an im2col / Winograd work area of about the output times C*k*k / groups.
    need = [N * C * (H + 2 * pad) * (W + 2 * pad), N * args.out_channels * OH * OW,
            args.out_channels * cg * k * k, N * OH * OW * cg * k * k]
    check_array_size("--shape", shape, 1)   # a clear refusal for absurd sizes before the sum
    total = sum(need) * (dt.itemsize + 8)
    if total > _common.MAX_ARRAY_BYTES:
        raise ShapeError(f"--shape = {short(args.shape)!r} is not allowed: this convolution needs about "
                         f"{total} bytes, more than the {_common.MAX_ARRAY_BYTES} bytes this command allocates")
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(shape).astype(dt)
    w = (rng.standard_normal((args.out_channels, cg, k, k)) / np.sqrt(cg * k * k)).astype(dt)
    b = rng.standard_normal(args.out_channels).astype(dt)
    return shape, x, w, b, pad, cg


def _run_one(shape, x, w, b, pad, args, algorithm, ref):
    import numpy as np

    from ..winograd import plan_conv2d

    t0 = time.perf_counter()
    plan = plan_conv2d(shape, w, b, stride=args.stride, padding=pad, dilation=args.dilation,
                       groups=args.groups, algorithm=algorithm)
    t_plan = time.perf_counter() - t0
    y = plan(x)
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        y = plan(x)
        best = min(best, time.perf_counter() - t0)
    err = float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-300))
    return plan, t_plan, best, err


def _conv(args) -> int:
    import numpy as np

    from ..winograd import plan_conv2d

    shape, x, w, b, pad, cg = _conv_inputs(args)
    k = args.kernel
    ref_plan = plan_conv2d(shape, w.astype(np.float64), b.astype(np.float64), stride=args.stride,
                           padding=pad, dilation=args.dilation, groups=args.groups,
                           algorithm="direct")
    ref = ref_plan(x.astype(np.float64))
    flops = 2.0 * np.prod(ref_plan.out_shape) * cg * k * k
    if args.compare:
        return _compare(shape, x, w, b, pad, args, ref, flops)
    plan, t_plan, best, err = _run_one(shape, x, w, b, pad, args, args.algorithm, ref)
    info = plan.info
    out = {"input": list(shape), "weights": list(w.shape), "output": list(plan.out_shape),
           "algorithm": info.name, "reason": info.reason, "backend": info.backend,
           "plan_ms": round(t_plan * 1e3, 3), "run_ms": round(best * 1e3, 3),
           "gflops_direct_equivalent": round(flops / best / 1e9, 1),
           "rel_l2_error_vs_float64_direct": float(f"{err:.3g}")}
    if args.json:
        print_json(out)
    else:
        for key, val in out.items():
            print(f"{key:32s} {val}")
    return 0


def _compare(shape, x, w, b, pad, args, ref, flops) -> int:
    from ..errors import AlgorithmError

    rows, skipped = [], []
    for alg in ("auto", "winograd:2", "winograd:4", "winograd:6", "im2col", "direct"):
        try:
            plan, t_plan, best, err = _run_one(shape, x, w, b, pad, args, alg, ref)
        except AlgorithmError as exc:
            skipped.append({"algorithm": alg, "why": str(exc)})
            continue
        rows.append({"algorithm": alg, "ran": plan.info.name, "plan_ms": round(t_plan * 1e3, 3),
                     "run_ms": round(best * 1e3, 3),
                     "gflops_direct_equivalent": round(flops / best / 1e9, 1),
                     "rel_l2_error_vs_float64_direct": float(f"{err:.3g}")})
    if args.json:
        print_json({"input": list(shape), "weights": list(w.shape), "results": rows,
                    "not_applicable": skipped})
        return 0
    print(f"x {tuple(shape)}  w {tuple(w.shape)}  stride {args.stride}  padding {pad}  "
          f"dilation {args.dilation}  groups {args.groups}  {x.dtype}")
    head = ("algorithm", "ran", "run ms", "GFLOP/s", "error vs float64")
    table = [(r["algorithm"], r["ran"], f"{r['run_ms']:.3f}", f"{r['gflops_direct_equivalent']:.1f}",
              f"{r['rel_l2_error_vs_float64_direct']:.2e}") for r in rows]
    widths = [max(len(t[i]) for t in table + [head]) for i in range(len(head))]
    for t in [head] + table:
        print("  ".join(v.ljust(wd) for v, wd in zip(t, widths)).rstrip())
    for s_ in skipped:
        print(f"{s_['algorithm']}: not applicable ({s_['why']})")
    return 0


def demo(tour) -> None:
    import numpy as np

    from ..winograd import conv2d, transforms

    tour.section("Winograd convolution: exact transforms, reported choices")
    t = transforms(2, 3)
    tour.print("F(2,3) turns a 4-value input tile and a 3-tap kernel into 2 outputs with 4 "
               "multiplications instead of 6.")
    tour.print("Its matrices, exact Fractions checked against direct correlation:")
    for name, mat in (("AT", t.AT), ("G", t.G), ("BT", t.BT)):
        for line in _matrix_lines(name, mat):
            tour.print("  " + line)
    t6 = transforms(6, 3)
    tour.print(f"F(6,3) uses points {', '.join(str(p) for p in t6.points)}, inf and MACE's G "
               f"(row 5: {', '.join(str(v) for v in t6.G[5])}).")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 32, 20, 20)).astype(np.float32)
    w = (rng.standard_normal((32, 32, 3, 3)) / np.sqrt(288)).astype(np.float32)
    ref = conv2d(x.astype(np.float64), w.astype(np.float64), padding=1, algorithm="direct")
    tour.print("conv2d of (1,32,20,20) by (32,32,3,3), padding 1, float32; error vs float64 direct:")
    for alg in ("auto", "winograd:2", "winograd:4", "winograd:6", "im2col", "direct"):
        y, info = conv2d(x, w, padding=1, algorithm=alg, return_info=True)
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        tour.print(f"  algorithm={alg!r:13s} ran {info.name:16s} rel. error {err:.1e}"
                   + (f"   ({info.reason})" if alg == "auto" else ""))
    x3 = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    _, info = conv2d(x3, rng.standard_normal((16, 3, 3, 3)).astype(np.float32), padding=1,
                     return_info=True)
    tour.print(f"A first layer with 3 input channels: auto ran {info.name} ({info.reason}).")
