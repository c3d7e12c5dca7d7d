"""Host cost of one clEnqueueNDRangeKernel through PyOpenCL, on a queue with profiling and on
a plain one: 200 enqueues of a small kernel timed on the host (median of 5), with the
device idle at the start of each batch.  OpenCLSession.run enqueues plain runs on a queue
without profiling because of this difference on NVIDIA's driver.

    python benchmarks/bench_enqueue.py [--device SPEC]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

try:
    import pyopencl as cl
except ImportError:  # pragma: no cover
    print("bench_enqueue: PyOpenCL is not installed (pip install 'tensorlayout[opencl]'); skipped")
    sys.exit(0)

SOURCE = """
__kernel void k(__global float *a, int n) { int i = get_global_id(0); if (i < n) a[i] += 1.0f; }
__kernel void k8(__global float *a, int n, int b, int c, int d, int e, int f, int g)
{ int i = get_global_id(0); if (i < n) a[i] += 1.0f; }
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="OpenCL device: index or name substring")
    a = ap.parse_args()
    from tensorlayout.opencl import get_context

    cctx = get_context(a.device)
    ctx, dev = cctx.context, cctx.device
    prg = cl.Program(ctx, SOURCE).build()
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 << 20)
    print(f"device: {cctx.info.name} ({cctx.info.platform})")
    for prof in (True, False):
        q = cl.CommandQueue(ctx, dev, properties=cl.command_queue_properties.PROFILING_ENABLE
                            if prof else 0)
        for name, args in (("k", (buf, np.int32(1 << 20))),
                           ("k8", (buf, np.int32(1 << 20)) + (np.int32(0),) * 6)):
            k = cl.Kernel(prg, name)
            k.set_args(*args)
            for g, lsz in (((1 << 20,), (256,)), ((1 << 20,), None), ((1024,), (64,))):
                for _ in range(200):
                    cl.enqueue_nd_range_kernel(q, k, g, lsz)
                q.finish()
                ts = []
                for _ in range(5):
                    t = time.perf_counter()
                    for _ in range(200):
                        cl.enqueue_nd_range_kernel(q, k, g, lsz)
                    ts.append((time.perf_counter() - t) / 200 * 1e6)
                    q.finish()
                print(f"profiling={prof!s:5s} {name:3s} global={g} local={lsz}: "
                      f"{np.median(ts):.1f} us per enqueue (median of 5 x 200)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
