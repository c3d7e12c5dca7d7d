"""3x3 convolutions on OpenCL images, side by side in one run: MACE's own image kernels,
tensorlayout's prepared network kernels, and cuDNN through PyTorch.

For each layer (batch 1, float32, 3x3, stride 1, padding 1, with bias; VGG-16's and
ResNet's stride-1 3x3 layers) the same input tensor, weights and bias go to:

- **MACE** (``--mace DIR``, the ``mace/ops/opencl/cl`` folder of a MACE checkout: its
  ``common.h``, ``conv_2d_3x3.cl``, ``winograd_transform.cl``, ``matmul.cl`` and
  ``buffer_to_image.cl``, read and built at run time, never copied here).  ``direct``
  is ``conv_2d_3x3``; ``wino2`` / ``wino4`` are ``winograd_transform_{2x2,4x4}`` +
  ``matmul`` + ``winograd_inverse_transform_{2x2,4x4}``, with the filter transformed by
  MACE's own ``winograd_filter_buffer_to_image_{2x2,4x4}``.  The arguments, global sizes
  and intermediate image shapes follow MACE's host code (``conv_2d_3x3.cc``,
  ``winograd_conv2d.cc``); the input, filter and bias images are MACE's formats
  (IN_OUT_CHANNEL, CONV2D_FILTER, ARGUMENT), written by tensorlayout.  Work-group sizes
  are tuned per kernel as MACE's tuner does, over a wider candidate set (MACE's own
  candidates plus every power-of-two shape), so MACE's times here are if anything better
  than MACE would pick.
- **tensorlayout**: a one-layer ONNX model in :class:`tensorlayout.model.OpenCLSession`
  with ``winograd`` = 0 (direct), 2, 4, 6 and ``tune=True``; its conv kernels' times.
- **cuDNN**: ``torch.nn.functional.conv2d`` on CUDA, TF32 off, ``cudnn.benchmark`` on; CUDA
  events around one call, which also count the launch of the call on an idle stream (a few
  microseconds), where the OpenCL times are the kernels' own.

Times are device times: OpenCL profiling events (start to end of each kernel, summed over
the kernels of one convolution; the filter transform is done once beforehand and not
counted) and CUDA events around one call, medians over ``--runs`` runs after warm-up, with
the spread (lowest-highest).  Every output is checked against a float64 direct convolution
(relative L2 error printed; a path above 1e-3 is marked ``BAD`` and left out of "best").
Ratios: ``MACE/tl`` = MACE's best time / tensorlayout's best time (above 1: tensorlayout
faster); ``cuDNN/tl`` likewise.

    python benchmarks/bench_mace_opencl.py [--device SPEC] [--mace DIR] [--layers all|vgg|resnet]
        [--only TEXT] [--runs 15] [--no-torch] [--json OUT.json] [--any-device]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys

import numpy as np

# kernels compile in the untimed warm-up calls, never in a background thread while timing
os.environ.setdefault("TENSORLAYOUT_COMPILE", "wait")

try:
    import pyopencl as cl
except ImportError:  # pragma: no cover
    print("bench_mace_opencl: PyOpenCL is not installed (pip install 'tensorlayout[opencl]'); skipped")
    sys.exit(0)

# name, in channels, out channels, height = width
LAYERS = (
    ("VGG 64->64 @224", 64, 64, 224),
    ("VGG 128->128 @112", 128, 128, 112),
    ("VGG 256->256 @56", 256, 256, 56),
    ("VGG 512->512 @28", 512, 512, 28),
    ("VGG 512->512 @14", 512, 512, 14),
    ("ResNet 64 @56", 64, 64, 56),
    ("ResNet 128 @28", 128, 128, 28),
    ("ResNet 256 @14", 256, 256, 14),
    ("ResNet 512 @7", 512, 512, 7),
)

MACE_FILES = ("common.h", "conv_2d_3x3.cl", "winograd_transform.cl", "matmul.cl", "buffer_to_image.cl")


def q4(n: int) -> int:
    return -(-n // 4)


def stats(v):
    v = np.asarray(v, dtype=float)
    return float(np.median(v)), float(v.min()), float(v.max())


def reference(x, w, b):
    """float64 direct convolution, padding 1, stride 1 (NCHW, OIHW)."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    w64 = w.astype(np.float64)
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("oc,nchw->nohw", w64[:, :, dy, dx], xp[:, :, dy:dy + h, dx:dx + wd],
                             optimize=True)
    return out + b.astype(np.float64)[None, :, None, None]


def rel_l2(y, ref):
    return float(np.linalg.norm(y.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))


# ----------------------------------------------------------------------------- MACE
class Mace:
    """MACE's image kernels, built from the given folder, launched as MACE's host code does."""

    def __init__(self, cctx, folder):
        self.cctx, self.q, self.ctx = cctx, cctx.queue, cctx.context
        missing = [f for f in MACE_FILES if not os.path.exists(os.path.join(folder, f))]
        if missing:
            raise SystemExit(f"--mace {folder}: missing {', '.join(missing)} (give MACE's "
                             "mace/ops/opencl/cl folder)")
        self.folder = folder
        self._progs = {}

    def kernel(self, file, name, *defines):
        opts = (f"-I{self.folder}", "-DDATA_TYPE=float", "-DCMD_DATA_TYPE=f") + defines
        key = (file, opts)
        if key not in self._progs:
            with open(os.path.join(self.folder, file)) as f:
                src = f.read()
            self._progs[key] = cl.Program(self.ctx, src).build(options=list(opts))
        return cl.Kernel(self._progs[key], name)

    def image(self, w, h):
        fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
        return cl.create_image(self.ctx, cl.mem_flags.READ_WRITE, fmt, shape=(w, h))

    def winograd_filter(self, w, m):
        """MACE's filter transform kernel: OIHW buffer -> WINOGRAD_FILTER image."""
        O, I = w.shape[:2]
        buf = cl.Buffer(self.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                        hostbuf=np.ascontiguousarray(w, np.float32))
        img = self.image(q4(I), (m + 2) ** 2 * O)
        k = self.kernel("buffer_to_image.cl", f"winograd_filter_buffer_to_image_{m}x{m}")
        gws = (q4(I), O)
        k.set_args(np.int32(gws[0]), np.int32(gws[1]), buf, np.int32(0), np.int32(I),
                   np.int32(3), np.int32(3), img)
        lws = (1, 1)
        cl.enqueue_nd_range_kernel(self.q, k, gws, lws).wait()
        return img


def tune(q, kernel, gws, max_wg, extra=()):
    """The fastest local size for ``kernel`` over MACE's candidates and every power-of-two
    shape (each timed twice, the faster kept): global sizes rounded up to it, as MACE does
    without non-uniform work-groups."""
    dims = len(gws)
    pw = [1 << i for i in range(11)]
    cands = set()
    for shape in itertools.product(pw, repeat=dims):
        if np.prod(shape) <= max_wg and all(s <= max(g, 1) * 2 for s, g in zip(shape, gws)):
            cands.add(shape)
    cands.update(tuple(c) for c in extra if 0 < np.prod(c) <= max_wg)
    best = None
    for lws in sorted(cands):
        g = tuple(-(-a // b) * b for a, b in zip(gws, lws))
        try:
            times = []
            for _ in range(2):
                ev = cl.enqueue_nd_range_kernel(q, kernel, g, lws)
                ev.wait()
                times.append((ev.profile.end - ev.profile.start) * 1e-6)
        except cl.Error:
            continue
        t = min(times)
        if best is None or t < best[0]:
            best = (t, lws, g)
    return best[1], best[2]


def mace_max_wg(kernel, device):
    return int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device))


def time_launches(q, launches, runs):
    """Median (spread) of the summed device time of ``launches`` [(kernel, gsize, lsize)]."""
    for _ in range(3):
        for k, g, lsz in launches:
            cl.enqueue_nd_range_kernel(q, k, g, lsz)
    q.finish()
    out, each = [], []
    for _ in range(runs):
        evs = [cl.enqueue_nd_range_kernel(q, k, g, lsz) for k, g, lsz in launches]
        evs[-1].wait()
        each.append([(e.profile.end - e.profile.start) * 1e-6 for e in evs])
        out.append(sum(each[-1]))
    parts = " + ".join(f"{k.function_name} {m:.4f}" for (k, _, _), m in zip(launches, np.median(each, axis=0)))
    return (*stats(out), parts)


def run_mace(mace, x, w, b, runs):
    """Per path: (median, lo, hi, rel error vs nothing yet, output)."""
    from tensorlayout.opencl import from_cl_image, to_cl_image

    q, dev = mace.q, mace.cctx.device
    N, C, H, W = x.shape
    O = w.shape[0]
    xin = to_cl_image(q, x, "IN_OUT_CHANNEL", layout="NCHW")
    bias = to_cl_image(q, b, "ARGUMENT")
    results = {}

    # direct: conv_2d_3x3
    filt = to_cl_image(q, w, "CONV2D_FILTER")
    out = mace.image(W * q4(O), N * H)
    k = mace.kernel("conv_2d_3x3.cl", "conv_2d_3x3", "-DBIAS")
    gws = (q4(O), -(-W // 5), H * N)
    k.set_args(np.int32(gws[0]), np.int32(gws[1]), np.int32(gws[2]), xin, filt, bias, out,
               np.float32(0), np.float32(0), np.int32(H), np.int32(W), np.int32(q4(C)),
               np.int32(H), np.int32(W), np.int32(1), np.int32(1), np.int32(1), np.int32(1),
               np.int32(1), np.int32(1))
    lws, g = tune(q, k, gws, mace_max_wg(k, dev))
    *t, parts = time_launches(q, [(k, g, lws)], runs)
    y = from_cl_image(q, out, "IN_OUT_CHANNEL", (N, O, H, W), layout="NCHW")
    results["direct"] = (*t, y, f"lws {lws}")

    for m in (2, 4):
        T = m + 2
        rh, rw = -(-H // m), -(-W // m)
        ow = N * rh * rw
        uf = mace.winograd_filter(w, m)
        t_in = mace.image(ow, T * T * q4(C))
        mm = mace.image(ow, T * T * q4(O))
        out = mace.image(W * q4(O), N * H)
        k0 = mace.kernel("winograd_transform.cl", f"winograd_transform_{m}x{m}")
        g0 = (ow, q4(C))
        k0.set_args(np.int32(g0[0]), np.int32(g0[1]), xin, t_in, np.int32(H), np.int32(W),
                    np.int32(C), np.int32(rh * rw), np.int32(rw), np.int32(1), np.int32(1))
        k1 = mace.kernel("matmul.cl", "matmul")
        g1 = (q4(ow), q4(O) * T * T)
        k1.set_args(np.int32(g1[0]), np.int32(g1[1]), uf, t_in, mm, np.int32(O), np.int32(ow),
                    np.int32(C), np.int32(q4(O)), np.int32(q4(C)))
        k2 = mace.kernel("winograd_transform.cl", f"winograd_inverse_transform_{m}x{m}", "-DBIAS")
        g2 = (ow, q4(O))
        k2.set_args(np.int32(g2[0]), np.int32(g2[1]), mm, bias, out, np.int32(H), np.int32(W),
                    np.int32(rh * rw), np.int32(rw), np.float32(0), np.float32(0))
        launches = []
        for kk, gg in ((k0, g0), (k1, g1), (k2, g2)):
            kwg = mace_max_wg(kk, dev)
            extra = [(kwg // 8, 8), (kwg // 64, 64), (kwg // 2, 2), (kwg // 4, 4), (kwg // 16, 16),
                     (kwg // 32, 32), (kwg // 128, 128), (kwg // 256, 256), (kwg, 1), (1, kwg)]
            lws, g = tune(q, kk, gg, kwg, extra)
            launches.append((kk, g, lws))
            cl.enqueue_nd_range_kernel(q, kk, g, lws)   # produce its output for the next tuning
        *t, parts = time_launches(q, launches, runs)
        y = from_cl_image(q, out, "IN_OUT_CHANNEL", (N, O, H, W), layout="NCHW")
        results[f"wino{m}"] = (*t, y, parts + "; lws " + " ".join(str(ls) for _, _, ls in launches))
    return results


# ----------------------------------------------------------------------------- tensorlayout
def conv_model(C, O, H, W, w, b):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        "conv3x3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, O, H, W])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def run_tensorlayout(device, x, w, b, runs):
    from tensorlayout.model import load
    from tensorlayout.model import OpenCLSession

    N, C, H, W = x.shape
    O = w.shape[0]
    model = load(conv_model(C, O, H, W, w, b))
    results = {}
    for tile in (0, 2, 4, 6):
        sess = OpenCLSession(model, device, winograd=tile, tune=True)
        for _ in range(3):
            y = sess.run(x)
        times, each = [], []
        for _ in range(runs):
            y = sess.run(x, profile=True)
            ks = [(kn, s * 1e3) for _, op, kn, s in sess.last_profile if op not in ("upload", "download")]
            each.append([s for _, s in ks])
            times.append(sum(each[-1]))
        parts = " + ".join(f"{kn} {m:.4f}" for (kn, _), m in zip(ks, np.median(each, axis=0)))
        parts += "; lws " + " ".join(str(ln.lsize) for _, ln in sess.launches())
        results["direct" if tile == 0 else f"tile{tile}"] = (*stats(times), y, parts)
    return results


# ----------------------------------------------------------------------------- cuDNN
def run_cudnn(x, w, b, runs):
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    xt, wt, bt = (torch.from_numpy(a).to(dev) for a in (x, w, b))
    f = torch.nn.functional.conv2d
    for _ in range(5):
        y = f(xt, wt, bt, padding=1)
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        y = f(xt, wt, bt, padding=1)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return (*stats(times), y.cpu().numpy())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="OpenCL device: index or name substring")
    ap.add_argument("--mace", default=None, metavar="DIR",
                    help="MACE's mace/ops/opencl/cl folder (its kernels are built at run time)")
    ap.add_argument("--layers", default="all", choices=("all", "vgg", "resnet"))
    ap.add_argument("--only", default=None, metavar="TEXT", help="only layers whose name has TEXT")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--no-torch", action="store_true", help="skip cuDNN")
    ap.add_argument("--json", default=None, metavar="OUT.json")
    ap.add_argument("--any-device", action="store_true",
                    help="run on a CPU OpenCL device too (PoCL: minutes per layer)")
    a = ap.parse_args()

    from tensorlayout.opencl import get_context

    cctx = get_context(a.device)
    info = cctx.info
    if "GPU" not in info.kind.split("/") and not a.any_device:
        print(f"bench_mace_opencl: {info.name} is not a GPU; this comparison is made on GPUs "
              "(--any-device runs it anyway); skipped")
        return 0
    cudnn_ok = False
    if not a.no_torch:
        try:
            import torch
            cudnn_ok = torch.cuda.is_available()
            tname = torch.cuda.get_device_name(0) if cudnn_ok else None
        except ImportError:
            tname = None
    print(f"OpenCL device: {info.name} ({info.platform})")
    print(f"cuDNN: {'torch ' + torch.__version__ + ' on ' + tname if cudnn_ok else 'not run'}")
    print(f"MACE kernels: {a.mace or 'not given (--mace DIR)'}")
    print(f"host: {platform.node()} {platform.machine()}, Python {platform.python_version()}, "
          f"PyOpenCL {cl.VERSION_TEXT}")
    print("device ms, median [lowest-highest] over", a.runs, "runs; rel = relative L2 error "
          "vs float64\n")
    mace = Mace(cctx, a.mace) if a.mace else None
    rng = np.random.default_rng(0)
    rows = []
    for name, C, O, S in LAYERS:
        if a.layers != "all" and not name.lower().startswith(a.layers):
            continue
        if a.only and a.only.lower() not in name.lower():
            continue
        x = rng.standard_normal((1, C, S, S)).astype(np.float32)
        w = (rng.standard_normal((O, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
        b = rng.standard_normal(O).astype(np.float32) * 0.1
        ref = reference(x, w, b)
        row = {"layer": name, "C": C, "O": O, "size": S, "paths": {}}

        def add(who, path, med, lo, hi, y, note=""):
            err = rel_l2(y, ref)
            row["paths"][f"{who} {path}"] = {"ms": med, "lo": lo, "hi": hi, "rel_l2": err,
                                             "ok": err < 1e-3, "note": note}

        for path, (med, lo, hi, y, kinds) in run_tensorlayout(a.device, x, w, b, a.runs).items():
            add("tl", path, med, lo, hi, y, kinds)
        if mace is not None:
            for path, (med, lo, hi, y, parts) in run_mace(mace, x, w, b, a.runs).items():
                add("mace", path, med, lo, hi, y, parts)
        if cudnn_ok:
            med, lo, hi, y = run_cudnn(x, w, b, a.runs)
            add("cudnn", "fp32", med, lo, hi, y)
        for who in ("tl", "mace", "cudnn"):
            ok = {k: v for k, v in row["paths"].items() if k.startswith(who + " ") and v["ok"]}
            if ok:
                k = min(ok, key=lambda k: ok[k]["ms"])
                row[f"{who}_best"] = (k.split(" ", 1)[1], ok[k]["ms"])
        print(f"{name}  ({C}->{O}, {S}x{S})")
        for k, v in row["paths"].items():
            bad = "" if v["ok"] else "  BAD"
            print(f"  {k:14s} {v['ms']:8.4f} [{v['lo']:.4f}-{v['hi']:.4f}]  rel {v['rel_l2']:.1e}"
                  f"{bad}  {v['note']}")
        rows.append(row)

    def ratio(row, who):
        if f"{who}_best" in row and "tl_best" in row:
            return row[f"{who}_best"][1] / row["tl_best"][1]
        return None

    print("\n| layer | cuDNN fp32 ms | MACE best ms | tensorlayout best ms | MACE/tl | cuDNN/tl |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        def cell(who):
            bst = row.get(f"{who}_best")
            return "-" if bst is None else (f"{bst[1]:.3f}" if who == "cudnn" else f"{bst[1]:.3f} ({bst[0]})")
        rm, rc = ratio(row, "mace"), ratio(row, "cudnn")
        print(f"| {row['layer']} | {cell('cudnn')} | {cell('mace')} | {cell('tl')} | "
              f"{'-' if rm is None else f'{rm:.2f}'} | {'-' if rc is None else f'{rc:.2f}'} |")
    for who, label in (("mace", "MACE"), ("cudnn", "cuDNN")):
        rs = [r for r in (ratio(row, who) for row in rows) if r is not None]
        if rs:
            gm = float(np.exp(np.mean(np.log(rs))))
            print(f"{label} best / tensorlayout best: geometric mean {gm:.2f}, lowest {min(rs):.2f}, "
                  f"highest {max(rs):.2f} over {len(rs)} layers (above 1: tensorlayout faster)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": info.name, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
