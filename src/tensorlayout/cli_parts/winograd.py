"""``tensorlayout winograd`` (exact transform matrices) and ``tensorlayout conv`` (a timed convolution)."""

from __future__ import annotations

import time

from ..errors import LayoutError
from ._common import int_list, print_json


def register(sub) -> None:
    p = sub.add_parser("winograd", help="print the exact Winograd matrices AT, G, BT of F(m, r)")
    p.add_argument("--m", type=int, default=6, help="output tile (default: %(default)s)")
    p.add_argument("--r", type=int, default=3, help="kernel size (default: %(default)s)")
    p.add_argument("--points", default=None,
                   help="finite interpolation points, comma-separated, e.g. '0,1,-1,1/2,-1/2'")
    p.add_argument("--json", action="store_true", help="print JSON (entries as strings)")
    p.set_defaults(func=_winograd)

    c = sub.add_parser("conv", help="run a random convolution; print the algorithm chosen, "
                       "the time and the error against float64 direct")
    c.add_argument("--input", required=True, help="N,C,H,W")
    c.add_argument("--out-channels", type=int, required=True)
    c.add_argument("--kernel", type=int, default=3)
    c.add_argument("--stride", type=int, default=1)
    c.add_argument("--padding", type=int, default=None, help="default: kernel // 2")
    c.add_argument("--groups", type=int, default=1)
    c.add_argument("--algorithm", default="auto",
                   help="auto, winograd, winograd:M, im2col or direct (default: %(default)s)")
    c.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    c.add_argument("--repeat", type=int, default=3, help="timed runs; the best is shown")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_conv)


def _matrix_lines(name, mat):
    cells = [[str(v) for v in row] for row in mat]
    width = max(len(s) for row in cells for s in row)
    lines = [f"{name} ({mat.shape[0]}x{mat.shape[1]}):"]
    lines += ["  [" + "  ".join(s.rjust(width) for s in row) + "]" for row in cells]
    return lines


def _winograd(args) -> int:
    from ..winograd import transforms

    points = None
    if args.points is not None:
        points = [p for p in args.points.split(",") if p.strip()]
    t = transforms(args.m, args.r, points)
    if args.json:
        print_json({"m": t.m, "r": t.r, "alpha": t.alpha,
                    "points": [str(p) for p in t.points] + ["inf"],
                    "AT": [[str(v) for v in row] for row in t.AT],
                    "G": [[str(v) for v in row] for row in t.G],
                    "BT": [[str(v) for v in row] for row in t.BT]})
        return 0
    print(f"F({t.m},{t.r}): input tile alpha = {t.alpha}, points "
          f"{', '.join(str(p) for p in t.points)}, inf")
    print(f"y = AT [(G g) * (BT d)] reproduces y[i] = sum_k d[i+k] g[k] exactly (checked).")
    for name, mat in (("AT", t.AT), ("G", t.G), ("BT", t.BT)):
        print("\n".join(_matrix_lines(name, mat)))
    return 0


def _conv(args) -> int:
    import numpy as np

    from ..winograd import plan_conv2d

    shape = int_list(args.input, "--input")
    if len(shape) != 4:
        raise LayoutError(f"--input = {args.input!r} is not allowed: give N,C,H,W (4 integers)")
    if args.repeat < 1:
        raise LayoutError(f"--repeat = {args.repeat} is not allowed: it must be at least 1")
    N, C, H, W = shape
    k = args.kernel
    pad = k // 2 if args.padding is None else args.padding
    if args.groups < 1 or C % args.groups:
        raise LayoutError(f"--groups = {args.groups} is not allowed: it must divide C = {C}")
    dt = np.dtype(args.dtype)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(shape).astype(dt)
    cg = C // args.groups
    w = (rng.standard_normal((args.out_channels, cg, k, k)) / np.sqrt(cg * k * k)).astype(dt)
    b = rng.standard_normal(args.out_channels).astype(dt)
    t0 = time.perf_counter()
    plan = plan_conv2d(shape, w, b, stride=args.stride, padding=pad, groups=args.groups,
                       algorithm=args.algorithm)
    t_plan = time.perf_counter() - t0
    y = plan(x)
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        y = plan(x)
        best = min(best, time.perf_counter() - t0)
    ref_plan = plan_conv2d(shape, w.astype(np.float64), b.astype(np.float64),
                           stride=args.stride, padding=pad, groups=args.groups,
                           algorithm="direct")
    ref = ref_plan(x.astype(np.float64))
    err = float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-300))
    info = plan.info
    flops = 2.0 * np.prod(plan.out_shape) * cg * k * k
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
