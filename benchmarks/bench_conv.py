"""tensorlayout's 3x3 convolution against PyTorch, ncnn and MNN on the CPU, same threads.

Layers: the VGG-16 3x3 layers with C >= 64 and the ResNet-50 stride-1 3x3 layers
(REFERENCE.md section 3), batch 1, float32, padding 1.  Contestants, in this order:

* plan     ``plan = tensorlayout.winograd.plan_conv2d(x.shape, w, b, padding=1,
             algorithm="auto")``, timed ``plan(x)`` (weights transformed once, untimed);
* 1shot    ``tensorlayout.conv2d(x, w, b, padding=1)`` (weight transform in every call);
* torch    ``torch.nn.functional.conv2d`` (``torch.set_num_threads(T)``);
* ncnn     one Convolution layer, Winograd on, fp32 only, light mode, T threads
           (see ``_peers.py`` for how it is built and the exact options);
* MNN      one static convolution module, precision "high", T threads (``_peers.py``).

ncnn and MNN are optional: a missing package skips that peer with one line.  tensorlayout
runs as a user would call it, after ``numba.set_num_threads(T)``.  ``--alone`` times only
tensorlayout's plan and one-shot call, with neither PyTorch nor a peer imported (the
float64 reference is then tensorlayout's own float64 im2col): comparing its plan times with
a full run's shows what the other libraries' thread pools in the same process cost.  On the first layer the
script counts, from /proc, how many threads of the process work during each library's
calls (it should be T for all of them).  "plan U ms" is the time to build the plan.

In each of ``--repeat`` rounds the libraries take turns in that order, so that all see the
same machine load; a turn starts with 20 ms of busy waiting (OpenMP workers of the previous
library keep spinning for a while after a call and would otherwise slow down whichever
library runs next; a sleep instead lets the cores clock down), then one untimed call, then
three back-to-back calls of which the best counts.  Per layer: the median time of each
library over the rounds; ratios other_time / our_time per round (above 1: we are faster)
as the median and, in brackets, the lowest and highest round; plan/best is against the
faster of ncnn and MNN on that layer, by median time (plan/best-ok: the faster of those
that passed the 1e-4 check).  Errors are relative L2 against float64 (PyTorch's
conv2d in float64); a peer must be below 1e-4 (it is then "ok"); up to 1e-2 it is timed but
flagged "inaccurate"; above, it computed something else and is left out of that layer.
At the end, geometric means over the VGG layers, the ResNet layers and all layers, with
the goals: plan >= 1.0x the faster of ncnn/MNN, plan >= 1.5x torch, one-shot >= 1.0x torch
and never below 0.8x.

    python benchmarks/bench_conv.py [--threads 2] [--repeat 7] [--quick] [--alone]
                                    [--layers "vgg conv1_2,resnet 64@56"] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

# kernels compile in the untimed warm-up calls, never in a background thread while timing
os.environ.setdefault("TENSORLAYOUT_COMPILE", "wait")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peers  # noqa: E402

LAYERS = [
    ("vgg conv1_2", 64, 64, 224), ("vgg conv2_1", 64, 128, 112), ("vgg conv2_2", 128, 128, 112),
    ("vgg conv3_1", 128, 256, 56), ("vgg conv3_x", 256, 256, 56), ("vgg conv4_1", 256, 512, 28),
    ("vgg conv4_x", 512, 512, 28), ("vgg conv5_x", 512, 512, 14),
    ("resnet 64@56", 64, 64, 56), ("resnet 128@28", 128, 128, 28),
    ("resnet 256@14", 256, 256, 14), ("resnet 512@7", 512, 512, 7),
]
QUICK = ("vgg conv1_2", "vgg conv3_x", "resnet 512@7")
PEERS = ("ncnn", "MNN")
CHECK_TOL = 1e-4        # a peer below this computes the right convolution
WRONG_TOL = 1e-2        # above this it computed something else: not timed
BUSY_WAIT = 0.02
BEST_OF = 3

# summary rows: key, label, goal for the geometric mean (None: no goal of its own)
SUMMARY = [
    ("plan/torch", "plan vs torch", 1.5),
    ("plan/ncnn", "plan vs ncnn", None),
    ("plan/MNN", "plan vs MNN", None),
    ("plan/best", "plan vs faster of ncnn/MNN", 1.0),
    ("plan/best-ok", "  same, peers with err < 1e-4", None),
    ("1shot/torch", "one-shot vs torch", 1.0),
]
RATIOS = [k for k, _, _ in SUMMARY]
ONESHOT_FLOOR = 0.8     # one-shot/torch on every layer (issue 24's goal 3)


def _busy(seconds=BUSY_WAIT):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _turn(fn):
    """One library's turn: busy wait, one untimed call, best of three back-to-back calls."""
    _busy()
    fn()
    best = float("inf")
    for _ in range(BEST_OF):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _norm(s: str) -> str:
    return s.strip().lower().replace("_", " ").replace("-", " ").replace(" ", "")


def select_layers(spec: str | None, quick: bool):
    if not spec:
        return [L for L in LAYERS if L[0] in QUICK] if quick else list(LAYERS)
    chosen = []
    for tok in spec.split(","):
        t = _norm(tok)
        if not t:
            continue
        hits = [L for L in LAYERS if t in (_norm(L[0]), _norm(L[0].split(" ", 1)[1]))
                or t == _norm(L[0].split(" ", 1)[0])]
        if not hits:
            raise SystemExit(f"bench_conv.py: unknown layer {tok.strip()!r}; layers: "
                             + ", ".join(L[0] for L in LAYERS) + " (or vgg, resnet)")
        chosen += [L for L in hits if L not in chosen]
    return [L for L in LAYERS if L in chosen]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_state():
    """HEAD of this checkout and whether src/ differs from it (read-only git calls)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        def git(*a):
            return subprocess.run(["git", "--no-optional-locks", "-C", root, *a],
                                  capture_output=True, text=True, timeout=10)
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return None
        changed = git("status", "--porcelain", "--", "src").stdout.strip()
        return {"commit": head.stdout.strip(), "src_changed": bool(changed)}
    except (OSError, subprocess.SubprocessError):
        return None


def _stats(r):
    r = np.asarray(r, dtype=float)
    return {"median": float(np.median(r)), "min": float(r.min()), "max": float(r.max())}


def _gmean(v):
    v = [x for x in v if x is not None and x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--quick", action="store_true",
                    help="three layers only: " + ", ".join(QUICK))
    ap.add_argument("--layers", help="comma-separated layer names (e.g. 'vgg conv1_2,resnet "
                    "64@56'; 'conv1_2', '64@56', 'vgg', 'resnet' work too)")
    ap.add_argument("--json", metavar="FILE", help="write everything here as JSON")
    ap.add_argument("--alone", action="store_true",
                    help="tensorlayout only: no PyTorch, ncnn or MNN in the process")
    args = ap.parse_args()
    if args.threads < 1 or args.repeat < 1:
        ap.error("--threads and --repeat must be at least 1")
    layers = select_layers(args.layers, args.quick)
    T = args.threads

    versions = {"python": platform.python_version(), "numpy": np.__version__}
    if not args.alone:
        import torch

        torch.set_num_threads(T)
        versions["torch"] = torch.__version__
    try:
        import numba

        numba.set_num_threads(T)
        versions["numba"] = numba.__version__
    except ImportError:
        versions["numba"] = None
    except ValueError as e:          # more threads than numba was started with
        print(f"numba.set_num_threads({T}) failed: {e}", file=sys.stderr)
        return 2
    import tensorlayout
    from tensorlayout.winograd import plan_conv2d

    versions["tensorlayout"] = getattr(tensorlayout, "__version__", "?")
    git = git_state()
    if git:
        versions["tensorlayout"] += (f" (git {git['commit']}"
                                     + (" + uncommitted src changes)" if git["src_changed"]
                                        else ")"))

    peers = {}
    peer_info = {}
    for name in () if args.alone else PEERS:
        mod, ver, why = _peers.load(name)
        versions[name] = ver
        peer_info[name] = {"available": mod is not None, "skipped": why}
        if mod is None:
            print(f"{name}: skipped: {why}")
        else:
            peers[name] = mod

    machine = {"cpu": cpu_model(), "logical_cpus": os.cpu_count(),
               "platform": platform.platform(),
               "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    load = ", ".join("%.2f" % v for v in machine["loadavg_at_start"] or [])
    print(f"machine: {machine['cpu']}, {machine['logical_cpus']} logical CPUs, "
          f"load average at start {load or '?'}")
    print(f"threads: {T} (torch.set_num_threads, numba.set_num_threads, ncnn num_threads, "
          "MNN numThread)")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    names = ["plan", "1shot"] + ([] if args.alone else ["torch"]) + list(peers)
    print(f"method: {args.repeat} rounds, order {', '.join(names)}; each turn "
          f"{BUSY_WAIT * 1e3:.0f} ms busy wait, 1 untimed call, best of {BEST_OF}; medians "
          "over rounds; ratio = other / ours, above 1 we are faster\n")

    results = []
    thread_check_done = False
    busy_threads = {}
    for lname, C, K, H in layers:
        group = lname.split(" ", 1)[0]
        # the same data for a layer whichever layers run
        rng = np.random.default_rng([0, [L[0] for L in LAYERS].index(lname)])
        x = rng.standard_normal((1, C, H, H)).astype(np.float32)
        w = (rng.standard_normal((K, C, 3, 3)) / math.sqrt(9 * C)).astype(np.float32)
        b = (rng.standard_normal(K) * 0.1).astype(np.float32)
        if args.alone:
            ref = plan_conv2d(x.shape, w.astype(np.float64), b.astype(np.float64), padding=1,
                              algorithm="im2col")(x.astype(np.float64))
        else:
            xt, wt, bt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
            ref = torch.nn.functional.conv2d(xt.double(), wt.double(), bt.double(),
                                             padding=1).numpy()
        ref_norm = float(np.linalg.norm(ref))

        def err(y):
            y = np.asarray(y, np.float64).reshape(ref.shape)
            return float(np.linalg.norm(y - ref) / ref_norm)

        t0 = time.perf_counter()
        plan = plan_conv2d(x.shape, w, b, padding=1, algorithm="auto")
        build = {"plan": time.perf_counter() - t0}
        info = plan.info
        auto = (info.as_dict() if hasattr(info, "as_dict")
                else {"name": str(getattr(info, "name", info))})
        auto.setdefault("name", str(getattr(info, "name", info)))
        runs = {
            "plan": lambda: plan(x),
            "1shot": lambda: tensorlayout.conv2d(x, w, b, padding=1),
        }
        outputs = {"plan": plan(x), "1shot": tensorlayout.conv2d(x, w, b, padding=1)}
        if not args.alone:
            runs["torch"] = lambda: torch.nn.functional.conv2d(xt, wt, bt, padding=1)
            outputs["torch"] = runs["torch"]().numpy()
        status, notes = {}, []
        for pname, mod in peers.items():
            try:
                t0 = time.perf_counter()
                p = _peers.PEERS[pname](mod, x, w, b, 1, T)
                build[pname] = time.perf_counter() - t0
                outputs[pname] = p.output(p())       # first call: allocation, algorithm choice
            except Exception as e:  # noqa: BLE001 - a peer failing must not stop the run
                status[pname] = "failed"
                notes.append(f"{pname}: failed on {lname}: {type(e).__name__}: {e}")
                continue
            if "options" not in peer_info[pname]:
                peer_info[pname]["options"] = p.options()
            e_p = err(outputs[pname])
            if e_p < CHECK_TOL:
                status[pname] = "ok"
            elif e_p < WRONG_TOL:
                status[pname] = "inaccurate"
                notes.append(f"{pname}: error {e_p:.1e} on {lname} is above {CHECK_TOL:g} "
                             "(timed, flagged)")
            else:
                status[pname] = "wrong"
                notes.append(f"{pname}: error {e_p:.1e} on {lname}: not this convolution, "
                             "left out")
            if status[pname] != "wrong":
                runs[pname] = p
        errors = {k: err(v) for k, v in outputs.items()}

        if not thread_check_done:       # once: do the libraries really run on T threads?
            for k, f in runs.items():
                busy_threads[k] = _peers.busy_threads(f)
                if k in peer_info:
                    peer_info[k]["busy_threads"] = busy_threads[k]
            print(f"threads busy during the calls on {lname} (asked for {T}): " + ", ".join(
                f"{k} {'?' if n is None else n}" for k, n in busy_threads.items()) + "\n")
            thread_check_done = True

        times = {k: [] for k in runs}
        for _ in range(args.repeat):
            for k, f in runs.items():
                times[k].append(_turn(f))
        med = {k: float(np.median(v)) for k, v in times.items()}
        tarr = {k: np.array(v) for k, v in times.items()}
        ratios = {}
        if "torch" in tarr:
            ratios["plan/torch"] = _stats(tarr["torch"] / tarr["plan"])
            ratios["1shot/torch"] = _stats(tarr["torch"] / tarr["1shot"])
        for pname in PEERS:
            if pname in tarr:
                ratios[f"plan/{pname}"] = _stats(tarr[pname] / tarr["plan"])
        best = {}                        # the faster peer of this layer (lower median)
        for key, cands in (("plan/best", [p for p in PEERS if p in med]),
                           ("plan/best-ok", [p for p in PEERS if p in med
                                             and status.get(p) == "ok"])):
            if cands:
                best[key] = min(cands, key=med.get)
                ratios[key] = dict(ratios[f"plan/{best[key]}"], peer=best[key])

        res = {"layer": lname, "group": group, "C": C, "K": K, "H": H, "W": H,
               "auto": auto, "build_ms": {k: v * 1e3 for k, v in build.items()},
               "times_ms": {k: [t * 1e3 for t in v] for k, v in times.items()},
               "median_ms": {k: v * 1e3 for k, v in med.items()},
               "ratios": ratios, "errors": errors, "peer_status": status}
        results.append(res)

        def ms(k):
            return f"{med[k] * 1e3:9.2f}" if k in med else f"{'-':>9s}"

        def rs(k):
            r = ratios.get(k)
            if not r:
                return f"{k} -"
            who = f" ({r['peer']})" if "peer" in r else ""
            return f"{k}{who} {r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]"

        if len(results) == 1:
            print(f"{'layer':15s} {'auto':>16s} " + " ".join(f"{n + ' ms':>9s}" for n in names)
                  + f" {'plan U ms':>9s}")
        print(f"{lname:15s} {auto['name']:>16s} " + " ".join(ms(n) for n in names)
              + f" {build['plan'] * 1e3:9.1f}")
        shown = [k for k in RATIOS if k != "plan/best-ok" or ratios.get(k) != ratios.get(
            "plan/best")]            # best-ok only where a flagged peer makes it differ
        if not args.alone:
            print("    ratios  " + "   ".join(rs(k) for k in shown))
        flag = {"ok": "", "inaccurate": " (!)", "wrong": " (WRONG)", "failed": " (failed)"}
        print("    errors  " + "   ".join(
            f"{k} {errors[k]:.1e}{flag[status.get(k, 'ok')]}" if k in errors
            else f"{k} failed" for k in names), flush=True)
        for n in notes:
            print(f"    note: {n}")

    # ---- summary
    summary = {}
    if args.alone:
        print("\n(--alone: tensorlayout only, no ratios; compare the plan times with a full run)")
        SUMMARY_ROWS = []
    else:
        SUMMARY_ROWS = SUMMARY
    groups = [("VGG", "vgg"), ("ResNet", "resnet"), ("all", None)]
    if SUMMARY_ROWS:
        print(f"\ngeometric means of the per-layer median ratios (n = layers with both sides)")
        print(f"{'':30s} " + " ".join(f"{g:>14s}" for g, _ in groups) + "   goal")
    for key, label, goal in SUMMARY_ROWS:
        cells, row = [], {}
        for gname, gkey in groups:
            vals = [r["ratios"][key]["median"] for r in results
                    if (gkey is None or r["group"] == gkey) and key in r["ratios"]]
            gm = _gmean(vals)
            row[gname] = {"geomean": gm, "n": len(vals),
                          "met": None if gm is None or goal is None else gm >= goal}
            cells.append(f"{gm:8.2f}x (n={len(vals)})" if gm is not None else f"{'-':>14s}")
        summary[key] = {"label": label, "goal": goal, "groups": row}
        gtxt = (f">= {goal:.1f}x: " + ", ".join(
            f"{g} {'met' if row[g]['met'] else 'not met'}" for g, _ in groups
            if row[g]["met"] is not None)) if goal is not None else "-"
        print(f"{label:30s} " + " ".join(f"{c:>14s}" for c in cells) + f"   {gtxt}")
    if not args.alone:
        cells, row = [], {}
        for gname, gkey in groups:
            vals = [(r["ratios"]["1shot/torch"]["median"], r["layer"]) for r in results
                    if (gkey is None or r["group"] == gkey) and "1shot/torch" in r["ratios"]]
            lo = min(vals) if vals else None
            row[gname] = {"min": lo[0] if lo else None, "layer": lo[1] if lo else None,
                          "n": len(vals), "met": None if lo is None else lo[0] >= ONESHOT_FLOOR}
            cells.append(f"{lo[0]:8.2f}x (n={len(vals)})" if lo else f"{'-':>14s}")
        summary["1shot/torch min"] = {"label": "lowest one-shot vs torch", "goal": ONESHOT_FLOOR,
                                      "groups": row}
        print(f"{'lowest one-shot vs torch':30s} " + " ".join(f"{c:>14s}" for c in cells)
              + f"   >= {ONESHOT_FLOOR:.1f}x: " + ", ".join(
                  f"{g} {'met' if row[g]['met'] else 'not met'}" for g, _ in groups
                  if row[g]["met"] is not None)
              + (f" (lowest: {row['all']['layer']})" if row["all"]["layer"] else ""))
        missing = [p for p in PEERS if p not in peers]
        if missing:
            print(f"(no {', '.join(missing)}: plan vs the faster peer uses "
                  f"{', '.join(peers) or 'nothing'})")
    flagged = sorted({(r["layer"], p, s) for r in results for p, s in r["peer_status"].items()
                      if s != "ok"})
    if flagged:
        print("peers flagged: " + "; ".join(f"{p} {s} on {l}" for l, p, s in flagged))

    if args.json:
        doc = {"benchmark": "bench_conv", "machine": machine, "threads": T,
               "alone": args.alone,
               "busy_threads": busy_threads,
               "versions": versions, "peers": peer_info,
               "method": {"rounds": args.repeat, "order": names,
                          "busy_wait_ms": BUSY_WAIT * 1e3, "untimed_calls": 1,
                          "best_of": BEST_OF, "ratio": "other_time / our_time per round",
                          "error": "relative L2 vs " + ("tensorlayout float64 im2col"
                                                        if args.alone else
                                                        "torch float64 conv2d"),
                          "check_tol": CHECK_TOL, "wrong_tol": WRONG_TOL,
                          "batch": 1, "dtype": "float32", "padding": 1, "kernel": 3},
               "layers": results, "summary": summary}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
