"""The packed-panel GEMM micro-kernel alone, against one core's peak multiply-add rate.

Three contestants take turns in each round, on one thread:

* peak    ``tl_peak``: independent vector multiply-adds on registers only (24 chains of
          16 lanes with AVX-512, 12 of 8 with AVX2), the most this core does with the
          vector width the kernel uses;
* kernel  ``tl_sgemm`` on an m×k panel product: A (m×k) packed once into panels
          (untimed), B (k×n) and C (m×n) plain row-major, C overwritten;
* numpy   ``numpy.matmul`` of the same float32 matrices, BLAS held to one thread
          (threadpoolctl), as a familiar yardstick.

Each turn is the best of ``--inner`` calls; a round is one turn each; the figures are
medians over ``--rounds`` rounds with the lowest and highest round in brackets, and the
kernel's fraction of peak is computed per round (kernel rate / peak rate of that round).
Rates are GFLOP/s counting a multiply-add as two operations.

``--winograd`` then times the kernel on the GEMM shapes of the Winograd engine: for each
canonical 3×3 layer (batch 1, the tile the auto rule picks), one point's product of K
output channels by the layer's tiles (all of them, as one block) by C input channels,
B's rows padded as the engine pads them, against the same peak.  Every call here goes
through ctypes (a couple of microseconds, which the engine's compiled callers do not pay),
so the smallest shapes read low by up to about 15 %.

    python benchmarks/bench_gemm.py [--size 256] [--rounds 9] [--isa avx512|avx2|portable]
                                    [--winograd]
    taskset -c 1 python benchmarks/bench_gemm.py          # pinned, as reported
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256, help="m = n = k (default 256)")
    ap.add_argument("--m", type=int)
    ap.add_argument("--n", type=int)
    ap.add_argument("--k", type=int)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--inner", type=int, default=20, help="calls per turn (best counts)")
    ap.add_argument("--isa", help="avx512, avx2 or portable (default: the widest here)")
    ap.add_argument("--winograd", action="store_true",
                    help="also the per-point GEMM shapes of the canonical 3x3 layers")
    args = ap.parse_args()
    m, n, k = (args.m or args.size), (args.n or args.size), (args.k or args.size)

    from tensorlayout.winograd import _simd

    mod = _simd.module(args.isa)
    isa = mod.isa
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.empty((m, n), np.float32)
    ap_ = _simd.pack_rows(a, isa.mr)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    mod.sgemm(m, n, k, ap_.ctypes.data, b.ctypes.data, n, c.ctypes.data, n, 0)
    err = float(np.abs(c - ref).max() / np.abs(ref).max())
    if err > 1e-5:
        print(f"kernel result wrong: max error {err:.1e}")
        return 1
    flops = 2.0 * m * n * k

    chains = {16: 24, 8: 12}.get(isa.lanes, 8)
    peak_buf = np.full(isa.lanes, 1e-3, np.float32)
    peak_n = max(1000, int(flops / (2 * chains * isa.lanes)))   # about one GEMM's work
    peak_flops = 2.0 * chains * isa.lanes * peak_n

    try:
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(1, user_api="blas")
    except ImportError:
        limit = None

    def t_peak():
        mod.peak(peak_buf.ctypes.data, peak_n)

    def t_kernel():
        mod.sgemm(m, n, k, ap_.ctypes.data, b.ctypes.data, n, c.ctypes.data, n, 0)

    def t_numpy():
        np.matmul(a, b, out=c)

    runs = {"peak": (t_peak, peak_flops), "kernel": (t_kernel, flops), "numpy": (t_numpy, flops)}
    rates = {key: [] for key in runs}
    for fn, _ in runs.values():
        fn()
    for _ in range(args.rounds):
        for key, (fn, fl) in runs.items():
            best = float("inf")
            for _ in range(args.inner):
                t = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t)
            rates[key].append(fl / best / 1e9)
    if limit is not None:
        limit.restore_original_limits()
    frac = np.array(rates["kernel"]) / np.array(rates["peak"])

    def stat(v, fmt="{:7.1f}"):
        v = np.asarray(v)
        return (fmt.format(np.median(v)) + " [" + fmt.format(v.min()).strip() + "-"
                + fmt.format(v.max()).strip() + "]")

    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.lower().startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"cpu: {cpu}; load average {load}; isa {isa.name} ({isa.lanes} lanes), micro-kernel "
          f"{isa.mr} x {isa.nr}; {m}x{n}x{k} (A packed, untimed); {args.rounds} rounds of "
          f"best-of-{args.inner}; one thread")
    print(f"peak    {stat(rates['peak'])} GFLOP/s")
    print(f"kernel  {stat(rates['kernel'])} GFLOP/s   {stat(100 * frac, '{:5.1f}')} % of peak "
          f"(goal >= 80)")
    print(f"numpy   {stat(rates['numpy'])} GFLOP/s   (BLAS on one thread)")
    if args.winograd:
        winograd_shapes(mod, args, peak_n, peak_flops, peak_buf, stat)
    return 0


LAYERS = [("vgg conv1_2", 64, 64, 224), ("vgg conv2_1", 64, 128, 112),
          ("vgg conv2_2", 128, 128, 112), ("vgg conv3_1", 128, 256, 56),
          ("vgg conv3_x", 256, 256, 56), ("vgg conv4_1", 256, 512, 28),
          ("vgg conv4_x", 512, 512, 28), ("vgg conv5_x", 512, 512, 14),
          ("resnet 64@56", 64, 64, 56), ("resnet 128@28", 128, 128, 28),
          ("resnet 256@14", 256, 256, 14), ("resnet 512@7", 512, 512, 7)]


def winograd_shapes(mod, args, peak_n, peak_flops, peak_buf, stat):
    """The kernel on one point's GEMM of each canonical layer (see the module docstring)."""
    from tensorlayout.winograd import choose_algorithm
    from tensorlayout.winograd.engine import LANE_TILES

    print(f"\nper-point GEMMs of the canonical layers (K x tiles x C), {args.rounds} rounds")
    rng = np.random.default_rng(1)
    for name, C, K, H in LAYERS:
        alg, tile, _ = choose_algorithm((1, C, H, H), (K, C, 3, 3), padding=1)
        if alg != "winograd":
            continue
        n = (-(-H // tile)) ** 2
        ldb = -(-n // LANE_TILES) * LANE_TILES
        a = _simd_pack(rng, K, C, mod)
        b = rng.standard_normal((C, ldb)).astype(np.float32)
        c = np.empty((K, ldb), np.float32)
        flops = 2.0 * K * n * C
        inner = max(3, int(2e8 / flops))
        rates, fracs = [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            mod.peak(peak_buf.ctypes.data, peak_n)
            peak = peak_flops / (time.perf_counter() - t) / 1e9
            best = float("inf")
            for _ in range(inner):
                t = time.perf_counter()
                mod.sgemm(K, n, C, a.ctypes.data, b.ctypes.data, ldb, c.ctypes.data, ldb, 0)
                best = min(best, time.perf_counter() - t)
            rates.append(flops / best / 1e9)
            fracs.append(100 * rates[-1] / peak)
        print(f"{name:14s} F({tile},3) {K:4d} x {n:4d} x {C:4d}  {stat(rates)} GFLOP/s  "
              f"{stat(fracs, '{:5.1f}')} % of peak")


def _simd_pack(rng, K, C, mod):
    from tensorlayout.winograd import _simd

    return _simd.pack_rows(rng.standard_normal((K, C)).astype(np.float32), mod.isa.mr)


if __name__ == "__main__":
    raise SystemExit(main())
