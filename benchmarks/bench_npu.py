"""NPU copies against numpy.copyto of the same bytes, measured in the same run.

Copies a (4, 256, 56, 56) float32 tensor system -> local in BM1684's aligned
layout and back, and the same shape in int8 in 4N mode, each as
ratio = copyto time / copy time (1.0 = as fast as a plain contiguous copy).

When Sophgo's BM1684 simulator is present (``tensorlayout npu simulator --fetch``) it also
times the same GDMA copies through the simulator's okk_gdma_* functions next to tensorlayout's
own engine (interleaved rounds, median and spread, results compared byte for byte), and prints
the layer planner's GDMA bytes per layer against the minimum (each input, weight and output
byte moved once) for VGG-16 and ResNet layers.

    python benchmarks/bench_npu.py [--repeat 7] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from tensorlayout.npu import BM1684, LocalMemory, tensor_layout


def best(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        model = ""
    return f"{platform.machine()} {model or platform.processor()}, {os.cpu_count()} CPUs, numpy {np.__version__}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the simulator comparison")
    args = ap.parse_args(argv)
    shape = (4, 256, 56, 56)
    rng = np.random.default_rng(0)
    cases = [
        ("fp32 aligned", rng.standard_normal(shape, dtype=np.float32), None),
        ("int8 4N aligned", rng.integers(-128, 128, shape, dtype=np.int8), "4N"),
    ]
    from tensorlayout import _copy
    copy_impl = _copy.engine() if hasattr(_copy, "engine") else "numpy"
    print(f"machine: {machine()}")
    print(f"chip: {BM1684}; strided copy: {copy_impl}")
    print(f"{'case':18} {'direction':16} {'MB':>6} {'copyto ms':>10} {'copy ms':>9} {'ratio':>6}")
    mem = LocalMemory(BM1684, system_bytes=64 << 20)
    for name, x, mode in cases:
        t = tensor_layout(BM1684, 0, shape, dtype=x.dtype, mode=mode)
        src = x.copy()
        dst = np.empty_like(x)
        base = best(lambda: np.copyto(dst, src), args.repeat)
        mem.write_system(0, x)
        runs = [
            ("host -> local", lambda: mem.store(t, x)),
            ("local -> host", lambda: mem.load(t)),
            ("S2L (GDMA)", lambda: mem.gdma_s2l(0, 0, shape, x.dtype, mode=mode)),
            ("L2S (GDMA)", lambda: mem.gdma_l2s(0, 0, shape, x.dtype, mode=mode)),
        ]
        for label, fn in runs:
            secs = best(fn, args.repeat)
            print(f"{name:18} {label:16} {x.nbytes / 1e6:6.1f} {base * 1e3:10.2f} {secs * 1e3:9.2f} "
                  f"{base / secs:6.2f}")
        assert np.array_equal(mem.load(t), x)
    print("goal: ratio >= 0.5")
    simulator_copies(args.rounds)
    planner_bytes()


def _median_spread(values):
    v = sorted(values)
    return v[len(v) // 2], v[0], v[-1]


def simulator_copies(rounds):
    """The same GDMA copies on tensorlayout's engine and on the simulator, interleaved."""
    from tensorlayout.npu import cmodel

    try:
        cmodel.simulator()
    except cmodel.SimulatorError as exc:
        print(f"\nsimulator: not available ({exc})")
        return
    shape = (4, 256, 56, 56)
    x = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    own = LocalMemory(BM1684, system_bytes=32 << 20)
    sim = LocalMemory(BM1684, system_bytes=32 << 20, backend="cmodel")
    print(f"\nGDMA through Sophgo's simulator vs tensorlayout's engine, {shape} fp32 aligned, "
          f"{x.nbytes / 1e6:.1f} MB, {rounds} interleaved rounds")
    print(f"{'direction':10} {'engine ms (median, min-max)':>30} {'simulator ms (median, min-max)':>32} "
          f"{'simulator / engine':>19}")
    for label, op in (("S2L", lambda m: m.gdma_s2l(0, 0, shape, "fp32")),
                      ("L2S", lambda m: m.gdma_l2s(16 << 20, 0, shape, "fp32"))):
        times = {id(own): [], id(sim): []}
        for mem in (own, sim):
            mem.write_system(0, x)
        for _ in range(rounds):
            for mem in (own, sim):
                t0 = time.perf_counter()
                op(mem)
                times[id(mem)].append(time.perf_counter() - t0)
        assert np.array_equal(own.local, sim.local) and np.array_equal(own.system, sim.system)
        e, s_ = _median_spread(times[id(own)]), _median_spread(times[id(sim)])
        print(f"{label:10} {e[0] * 1e3:12.2f} ({e[1] * 1e3:.2f}-{e[2] * 1e3:.2f}){'':6} "
              f"{s_[0] * 1e3:12.2f} ({s_[1] * 1e3:.2f}-{s_[2] * 1e3:.2f}){'':6} {s_[0] / e[0]:10.1f}x")
    print("both memories equal byte for byte after every copy")


LAYERS = [  # (name, input N,C,H,W, output channels, kernel, stride)
    ("VGG conv1_2", (1, 64, 224, 224), 64, 3, 1),
    ("VGG conv2_2", (1, 128, 112, 112), 128, 3, 1),
    ("VGG conv3_3", (1, 256, 56, 56), 256, 3, 1),
    ("VGG conv4_3", (1, 512, 28, 28), 512, 3, 1),
    ("VGG conv5_3", (1, 512, 14, 14), 512, 3, 1),
    ("ResNet conv1", (1, 3, 224, 224), 64, 7, 2),
    ("ResNet 64@56 x8", (8, 64, 56, 56), 64, 3, 1),
    ("ResNet 512@7 x8", (8, 512, 7, 7), 512, 3, 1),
    ("VGG conv1_2 x4", (4, 64, 224, 224), 64, 3, 1),
    ("VGG conv1_2 @448", (1, 64, 448, 448), 64, 3, 1),
    ("conv 1024@14 x4", (4, 1024, 14, 14), 1024, 3, 1),
    ("conv 2048@7", (1, 2048, 7, 7), 2048, 3, 1),
]


def planner_bytes():
    """The layer planner's GDMA bytes against the minimum for common layers (planning only)."""
    from tensorlayout.npu.planner import plan_conv

    print("\nlayer planner on BM1684: GDMA bytes per layer against the minimum (each byte moved once)")
    print(f"{'layer':18} {'input':>18} {'K':>4} {'k':>2} {'split n,k,h':>12} {'slices':>6} "
          f"{'local %':>7} {'GDMA MB':>8} {'min MB':>7} {'ratio':>6}")
    for name, shape, k, kern, stride in LAYERS:
        p = plan_conv(shape, k, kern, stride)
        print(f"{name:18} {str(shape):>18} {k:4d} {kern:2d} {','.join(map(str, p.split)):>12} "
              f"{p.slices_count:6d} {100 * p.bytes_per_npu / BM1684.lmem_bytes:7.1f} "
              f"{p.gdma_bytes / 1e6:8.2f} {p.minimum_gdma_bytes / 1e6:7.2f} "
              f"{p.gdma_bytes / p.minimum_gdma_bytes:6.3f}")


if __name__ == "__main__":
    main()
