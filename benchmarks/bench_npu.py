"""NPU copies against numpy.copyto of the same bytes, measured in the same run.

Copies a (4, 256, 56, 56) float32 tensor system -> local in BM1684's aligned
layout and back, and the same shape in int8 in 4N mode, each as
ratio = copyto time / copy time (1.0 = as fast as a plain contiguous copy).

    python benchmarks/bench_npu.py [--repeat 7]
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


if __name__ == "__main__":
    main()
