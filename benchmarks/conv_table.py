"""The docs' speed table from ``bench_conv.py --json`` files, one per thread count.

Usage: ``python benchmarks/conv_table.py results/conv_xeon_t1.json results/conv_xeon_t2.json ...``

Prints a Markdown table (one row per layer and thread count: the medians in ms, the
ratios plan/torch, plan/faster peer, one-shot/torch) and, per file, the geometric means
of the per-layer median ratios, plus the scaling of the plan from the fewest to the most
threads given.  Nothing is measured here: every figure comes from the files.
"""

from __future__ import annotations

import json
import math
import sys


def _short(auto: dict) -> str:
    return f"F({auto['tile']},3)" if auto["algorithm"] == "winograd" else auto["algorithm"]


def main(paths) -> int:
    runs = [json.load(open(p)) for p in paths]
    runs.sort(key=lambda r: r["threads"])
    print("| layer | auto | threads | plan ms | one-shot ms | torch ms | ncnn ms | MNN ms "
          "| plan/torch | plan/faster peer | one-shot/torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    names = [lay["layer"] for lay in runs[0]["layers"]]
    by = [{lay["layer"]: lay for lay in r["layers"]} for r in runs]
    for name in names:
        for r, layers in zip(runs, by):
            lay = layers.get(name)
            if lay is None:
                continue
            med = lay["median_ms"]
            rat = lay["ratios"]
            cell = lambda k: f"{med[k]:.2f}" if k in med else "-"  # noqa: E731
            best = rat.get("plan/best")
            best_s = f"{best['median']:.2f} ({best['peer']})" if best else "-"
            print(f"| {name} | {_short(lay['auto'])} | {r['threads']} | {cell('plan')} "
                  f"| {cell('1shot')} | {cell('torch')} | {cell('ncnn')} | {cell('MNN')} "
                  f"| {rat['plan/torch']['median']:.2f} | {best_s} "
                  f"| {rat['1shot/torch']['median']:.2f} |")
    print()
    for r in runs:
        s = r["summary"]
        g = lambda k: s[k]["groups"]["all"]["geomean"] if k in s else float("nan")  # noqa: E731
        print(f"{r['threads']} thread(s): plan vs torch {g('plan/torch'):.2f}x, plan vs the "
              f"faster peer {g('plan/best'):.2f}x, one-shot vs torch {g('1shot/torch'):.2f}x")
    if len(runs) > 1:
        lo, hi = by[0], by[-1]
        sc = [lo[n]["median_ms"]["plan"] / hi[n]["median_ms"]["plan"] for n in names
              if n in lo and n in hi]
        geo = math.exp(sum(math.log(v) for v in sc) / len(sc))
        print(f"plan scaling {runs[0]['threads']} -> {runs[-1]['threads']} threads: "
              f"{min(sc):.1f}x to {max(sc):.1f}x per layer, geometric mean {geo:.1f}x")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    sys.exit(main(sys.argv[1:]))
