"""One setting of the CPU runtime at two values, on whole networks: what measured the
schedule's thresholds (``SHIFT_MAX_MACS``, ``SHIFT_STRIDED_BELOW``, ...).

Each network is loaded twice in one process, once with the module attribute set to each
value (the attribute is read while the network is loaded and bound, so each model keeps
its own), both checked to give the same result within float32 rounding, then timed in
turns: each round takes the best of ``--inner`` runs of A, then of B; the table shows the
median over ``--rounds`` rounds and the ratio A / B per round (median and spread; above 1:
B faster).  The kernels are compiled before timing; no other runtime is in the process.
A setting of the machine code (``tensorlayout.winograd._simd`` or ``._simd_block``: a
constant its IR is written from) builds the module anew for each value, the default
while that value's model is loaded and bound.

    python benchmarks/bench_setting.py tensorlayout.schedule.winograd.SHIFT_MAX_MACS \\
        8000000 100000000 --nets resnet18:96,squeezenet1_1:224 [--threads 2] [--rounds 15]

Without a setting and values it runs that one (``make bench`` runs every script bare).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting", nargs="?",
                    default="tensorlayout.schedule.winograd.SHIFT_MAX_MACS",
                    help="module.ATTRIBUTE (default: tensorlayout.schedule.winograd."
                         "SHIFT_MAX_MACS)")
    ap.add_argument("a", nargs="?", default="8000000",
                    help="value A (a Python literal; default 8000000)")
    ap.add_argument("b", nargs="?", default="100000000",
                    help="value B (a Python literal; default 100000000)")
    ap.add_argument("--nets", default="resnet18:96,squeezenet1_1:224",
                    help="comma-separated NAME:SIZE of tensorlayout.model.zoo networks")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--inner", type=int, default=5, help="runs per turn (best counts)")
    args = ap.parse_args()
    os.environ.setdefault("TENSORLAYOUT_COMPILE", "wait")
    from tensorlayout.model import load, zoo

    modname, _, attr = args.setting.rpartition(".")
    try:
        mod = importlib.import_module(modname)
        getattr(mod, attr)
    except (ImportError, AttributeError, ValueError):
        print(f"setting {args.setting!r}: no such module attribute")
        return 2
    try:
        values = [ast.literal_eval(args.a), ast.literal_eval(args.b)]
    except (ValueError, SyntaxError):
        print(f"values {args.a!r}, {args.b!r}: each must be a Python literal")
        return 2
    old = getattr(mod, attr)
    machine = modname in ("tensorlayout.winograd._simd", "tensorlayout.winograd._simd_block")
    if machine:
        from tensorlayout.backends import cpu_kernels
        from tensorlayout.winograd import _simd

        base = _simd.module()
        cpu_kernels.ready()         # the workers' pool comes from the first module
        built = []                  # each value's module, alive while its model runs
    print(f"# python benchmarks/bench_setting.py {args.setting} {args.a} {args.b} "
          f"--nets {args.nets} --threads {args.threads} --rounds {args.rounds}")
    print(f"{'network':>22}  {'A ms':>8}  {'B ms':>8}  {'A / B':>6} [spread]   rel. diff")
    for spec in args.nets.split(","):
        name, _, size = spec.partition(":")
        size = int(size or 224)
        data, _ = zoo.export(name, size=size)
        x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
        models, outs = [], []
        for v in values:
            setattr(mod, attr, v)
            try:
                if machine:                 # this value's code, the default while bound
                    built.append(_simd.Module(base.isa))
                    _simd._DEFAULT[0] = built[-1]
                m = load(data)
                for _ in range(3):
                    y = m.run(x, threads=args.threads)
            finally:
                setattr(mod, attr, old)
                if machine:
                    _simd._DEFAULT[0] = base
            models.append(m)
            outs.append(np.asarray(y[0] if isinstance(y, (list, tuple)) else y, np.float64))
        rel = float(np.linalg.norm(outs[0] - outs[1]) / np.linalg.norm(outs[0]))
        if not rel <= 1e-4:
            print(f"{spec}: A and B differ (relative L2 {rel:.1e})")
            return 1
        times = [[], []]
        for _ in range(args.rounds):
            for i, m in enumerate(models):
                best = np.inf
                for _ in range(args.inner):
                    t = time.perf_counter()
                    m.run(x, threads=args.threads)
                    best = min(best, time.perf_counter() - t)
                times[i].append(best)
        a, b = np.array(times[0]), np.array(times[1])
        r = a / b
        print(f"{spec:>22}  {np.median(a) * 1e3:8.3f}  {np.median(b) * 1e3:8.3f}  "
              f"{np.median(r):6.3f} [{r.min():.2f}-{r.max():.2f}]   {rel:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
