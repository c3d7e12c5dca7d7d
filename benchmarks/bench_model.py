"""Whole networks: tensorlayout's CPU runtime against onnxruntime, same model, same threads.

Networks (torchvision's architectures written in plain PyTorch by ``tensorlayout.model.zoo``,
random weights, BatchNorm with random statistics, exported with torch.onnx.export): ResNet-18,
ResNet-50, VGG-11, MobileNetV2, MobileNetV3-Small, EfficientNet-B0, ShuffleNetV2 x1.0 and
SqueezeNet 1.1, batch 1, float32, at each ``--sizes`` side.  Both runtimes get ``--threads``
threads (onnxruntime: intra-op threads, one inter-op thread, all graph optimisations;
tensorlayout: numba's pool and BLAS).  Each runtime runs untimed first, three times and for
at least ``WARM_S`` seconds (the two in turns when they share the process): a core left
idle runs slower for the first tens of milliseconds it is busy again, and a network of a
few milliseconds would otherwise be timed in that ramp, in its own process above all.  In each
of ``--rounds`` rounds the two take turns (which goes first alternates) and each is timed as
the best of three calls on the same input.  The table shows the median time over rounds,
the spread (lowest - highest), and the ratio onnxruntime time / tensorlayout time per round
as its median [lowest - highest] (above 1: tensorlayout faster), and the geometric mean of
the median ratios per size.  Every output is checked: relative L2 error against
onnxruntime's (at most 1e-4) and the same top-1 class; a network that fails the check is
marked FAIL.

onnxruntime's worker threads spin after each of its calls (on by default, as onnxruntime
ships; for about 20 ms on the 2-core machine), keeping a core busy that the next runtime's
threads need.  ``--ort-spin off`` turns their spinning off altogether
(``session.intra_op.allow_spinning`` 0: slower for onnxruntime itself, its workers park
between the steps of a call); ``--ort-spin stop`` keeps it within a call and stops it when
the call returns (``session.force_spinning_stop`` 1, onnxruntime's own setting for a
process that runs other work between its calls).

``--alone`` times each runtime in a process of its own (no other library's thread pool
beside it).  Both processes load and warm the network, then take turns as above, round by
round (the parent asks one, then the other, for a best of three; which goes first
alternates).  Each turn starts after a pause of ``ALONE_PAUSE_S``, so that the other
process's threads have stopped spinning and parked, and calls its network untimed for
``ALONE_WARM_S`` before the timed calls (its cores have idled through the pause): neither
process runs while the other is timed, and a slow spell of the machine falls on both
runtimes' rounds alike instead of on one runtime's whole run.

``--beside torch`` also calls the same network in PyTorch (the module the ONNX file was
exported from, eager, ``torch.set_num_threads(--threads)``, under ``torch.inference_mode``)
in each round, interleaved with the two (the order of the three turns): a process that
holds PyTorch's thread pool too.  The table still compares tensorlayout with onnxruntime and
adds PyTorch's median time; compare its ratios with a run without it (with ``--ort-spin
stop``, so that onnxruntime's own spinning is not what is measured).

``--busy K`` keeps K other processes busy (each a loop of Python) while both runtimes are
timed: a machine whose cores something else also wants, where a thread of either runtime
may wait for its turn on a core.

    python benchmarks/bench_model.py [--threads 2] [--rounds 7] [--sizes 224,96]
                                     [--nets resnet18,vgg11] [--alone] [--ort-spin on|off|stop]
                                     [--busy 1] [--beside torch]
"""

from __future__ import annotations

import argparse
import json
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

NETS = ("resnet18", "resnet50", "vgg11", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
        "shufflenet_v2", "squeezenet1_1")


#: How onnxruntime's worker threads wait between its calls, a key of
#: ``_peers.ORT_SPIN_CONFIG`` (set by main)
ORT_SPIN = ["on"]


def _sessions(name, size, threads, which=("ours", "ort")):
    import onnxruntime as ort

    from tensorlayout.model import load, zoo

    data, net = zoo.export(name, size=size)
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    fns = {}
    if "torch" in which:
        import torch

        torch.set_num_threads(threads)
        xt = torch.from_numpy(x)

        def run_torch():
            with torch.inference_mode():
                return net(xt).numpy()
        fns["torch"] = run_torch
    if "ours" in which:
        model = load(data)
        fns["ours"] = lambda: model.run(x, threads=threads)
        fns["_model"] = model
    if "ort" in which:
        opts = _peers.ort_options(ort, threads, ORT_SPIN[0])
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x}
        fns["ort"] = lambda: sess.run(None, feed)[0]
    return fns


#: Seconds of untimed calls before timing (at least three calls): see the docstring.
WARM_S = 0.5


def _warm(*fns, seconds=None):
    """Call ``fns`` in turns, three times and until ``seconds`` (WARM_S) have passed; the
    last outputs."""
    t0, n, out = time.perf_counter(), 0, None
    seconds = WARM_S if seconds is None else seconds
    while n < 3 or time.perf_counter() - t0 < seconds:
        out = [fn() for fn in fns]
        n += 1
    return out


def _turns(items, k):
    """The order ``items`` take their turns in round ``k``: two alternate which goes first;
    three rotate, every other cycle reversed, so that each follows each other."""
    order = list(items[k % len(items):]) + list(items[:k % len(items)])
    return order[::-1] if len(items) > 2 and k // len(items) % 2 else order


def _best_of(fn, k=3):
    best = float("inf")
    for _ in range(k):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


#: Seconds each --alone turn waits before it starts (the other process's threads park),
#: and the seconds of untimed calls it then makes (at least three) before it is timed.
ALONE_PAUSE_S = 0.1
ALONE_WARM_S = 0.2


def _alone(name, size, threads, which):
    """The --alone child: one runtime in this process, warmed, then a best-of-three time
    (ms, a JSON line) for each line ``time`` on stdin, and the output for ``out``."""
    fn = _sessions(name, size, threads, (which,))[which]
    (y,) = _warm(fn)
    print(json.dumps("ready"), flush=True)
    while True:
        line = sys.stdin.readline()
        if line.strip() == "time":
            _warm(fn, seconds=ALONE_WARM_S)     # its cores have idled through the pause
            print(json.dumps(_best_of(fn) * 1e3), flush=True)
        else:
            print(json.dumps(np.asarray(y).ravel().tolist()), flush=True)
            return


class _Child:
    """A --alone child process, asked for its times over a pipe."""

    def __init__(self, name, size, threads, which):
        cmd = [sys.executable, __file__, "--child", f"{name},{size},{which}",
               "--threads", str(threads), "--ort-spin", ORT_SPIN[0]]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.ask(None)                      # loaded and warmed

    def ask(self, what):
        if what is not None:
            self.proc.stdin.write(what + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"--alone child {self.proc.args[3]} ended: see its error above")
        return json.loads(line)

    def close(self):
        out = self.ask("out")
        self.proc.wait()
        return out


def _alone_rounds(name, size, threads, rounds):
    """Both runtimes in processes of their own, timed in turns: (ours, ort) outputs and times."""
    kids = {w: _Child(name, size, threads, w) for w in ("ours", "ort")}
    try:
        times = {w: [] for w in kids}
        for k in range(rounds):
            for w in _turns(("ours", "ort"), k):
                time.sleep(ALONE_PAUSE_S)
                times[w].append(kids[w].ask("time"))
        outs = {w: kids[w].close() for w in kids}
    finally:
        for c in kids.values():
            if c.proc.poll() is None:
                c.proc.kill()
    return outs["ours"], outs["ort"], np.array(times["ours"]), np.array(times["ort"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sizes", default="224,96")
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--alone", action="store_true",
                    help="time each runtime in a process of its own")
    ap.add_argument("--ort-spin", choices=tuple(_peers.ORT_SPIN_CONFIG), default="on",
                    help="onnxruntime's threads spin after each call (on: its default), never "
                         "(off), or only within a call (stop)")
    ap.add_argument("--busy", type=int, default=0,
                    help="other processes kept busy (a loop each) while timing")
    ap.add_argument("--beside", choices=("none", "torch"), default="none",
                    help="a third runtime called in each round, in the same process: PyTorch "
                         "eager (torch) or none")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    ORT_SPIN[0] = args.ort_spin
    if args.beside != "none" and args.alone:
        print("--beside: not with --alone (it shares the process)")
        return 2
    if args.child:
        name, size, which = args.child.split(",")
        _alone(name, int(size), args.threads, which)
        return 0

    import onnxruntime as ort

    from tensorlayout.backends.cpu import available_cpus

    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.busy)]
    try:
        return _table(args, ort, available_cpus)
    finally:
        for p in busy:
            p.kill()
            p.wait()


_SPIN_NOTE = {"on": "", "off": ", onnxruntime threads not spinning",
              "stop": ", onnxruntime threads stop spinning when a call returns"}


def _table(args, ort, available_cpus) -> int:
    print(f"machine: {platform.processor() or platform.machine()}, {available_cpus()} CPUs usable, "
          f"threads: {args.threads}, onnxruntime {ort.__version__}, numpy {np.__version__}, "
          f"{args.rounds} rounds, {'each runtime alone in its process, in turns' if args.alone else 'interleaved in one process'}"
          f"{_SPIN_NOTE[args.ort_spin]}"
          f"{f', {args.busy} other busy processes' if args.busy else ''}"
          f"{', PyTorch eager called in each round too' if args.beside == 'torch' else ''}")
    head = (f"{'network':19s} {'size':>4s} {'ort ms':>8s} {'spread':>13s} {'ours ms':>8s} {'spread':>13s} "
            f"{'ratio':>6s} {'[low - high]':>13s} {'rel L2':>8s} {'top-1':>6s}"
            f"{'  torch ms' if args.beside == 'torch' else ''}")
    print(head)
    print("-" * len(head))
    ok = True
    for size in (int(s) for s in args.sizes.split(",")):
        ratios = []
        for name in args.nets.split(","):
            t_third = []                # PyTorch's times, --beside torch
            if args.alone:
                y, r, t_ours, t_ort = _alone_rounds(name, size, args.threads, args.rounds)
                ratio = t_ort / t_ours
            else:
                fns = _sessions(name, size, args.threads, ("ours", "ort", args.beside))
                ours, theirs = fns["ours"], fns["ort"]
                third = fns.get("torch")
                turn = [ours, theirs] + ([third] if third else [])
                y, r = _warm(*turn)[:2]
                t_ours, t_ort = [], []
                for k in range(args.rounds):
                    for fn in _turns(turn, k):
                        got = _best_of(fn)
                        (t_ours if fn is ours else t_ort if fn is theirs else t_third).append(got)
                t_ours, t_ort = np.array(t_ours) * 1e3, np.array(t_ort) * 1e3
                ratio = t_ort / t_ours
            y, r = np.asarray(y, np.float64).ravel(), np.asarray(r, np.float64).ravel()
            err = float(np.linalg.norm(y - r) / np.linalg.norm(r))
            same = int(np.argmax(y)) == int(np.argmax(r))
            good = err <= 1e-4 and same
            ok &= good
            ratios.append(float(np.median(ratio)))
            print(f"{name:19s} {size:4d} {np.median(t_ort):8.2f} {t_ort.min():6.2f}-{t_ort.max():<6.2f} "
                  f"{np.median(t_ours):8.2f} {t_ours.min():6.2f}-{t_ours.max():<6.2f} "
                  f"{np.median(ratio):6.2f} {ratio.min():6.2f}-{ratio.max():<6.2f} {err:8.1e} "
                  f"{'same' if same else 'DIFF':>6s}{'' if good else '  FAIL'}"
                  f"{f'  {np.median(t_third) * 1e3:8.2f}' if t_third else ''}",
                  flush=True)
        geo = float(np.exp(np.mean(np.log(ratios))))
        print(f"{'geometric mean':19s} {size:4d} {'':60s} {geo:6.2f}  (lowest {min(ratios):.2f})",
              flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
