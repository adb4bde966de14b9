"""Markdown tables of ``results.jsonl`` (run.py: ranker alone, whole forward, id order, the release side by side),
and of ``crossover.jsonl`` and ``export.jsonl`` beside it when present.

    python benchmarks/vocabulary_ranker/table.py [results.jsonl]

The newest record of each (part, tokens, dtype) is shown.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def fmt_s(v) -> str:
    return "—" if v is None else (f"{v:.4f}" if v < 0.1 else f"{v:.3f}" if v < 10 else f"{v:.1f}")


def pct(v) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


def load(r: dict) -> float:
    """The 1-minute load average after the point: the envelope's ``load_after`` (``load`` in the earlier records)."""
    return r["load_after" if "load_after" in r else "load"][0]


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("results.jsonl")
    latest: dict[tuple, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            latest[r["part"], r["tokens"], r["dtype"]] = r
    rows = sorted(latest.values(), key=lambda r: (r["part"], r["dtype"] != "fp32", r["tokens"]))

    print("### Ranker alone (the choice), dense vs vocabulary\n")
    print("| tokens | distinct ids | precision | dense (s) | vocabulary (s) | speed-up | same splits | "
          "utilization dense / vocabulary | vocabulary vs dense-equivalent FLOPs | GEMM GFLOP/s | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["part"] == "ranker":
            same = "—" if r.get("same_choice_fraction") is None else f"{100 * r['same_choice_fraction']:.1f}%"
            speed = "—" if r.get("speedup") is None else f"**{r['speedup']:.1f}×**"
            print(f"| {r['tokens']:,} | {r['distinct_ids']:,} | {r['dtype']} | {fmt_s(r.get('dense_s'))} | "
                  f"{fmt_s(r['vocabulary_s'])} | {speed} | {same} | {pct(r.get('dense_utilization'))} / "
                  f"{pct(r['vocabulary_utilization'])} | {pct(r['vocabulary_dense_equivalent_utilization'])} | "
                  f"{r['gemm_gflop_per_s'][0]:.0f}–{r['gemm_gflop_per_s'][1]:.0f} | {load(r):.1f} |")

    print("\n### Whole forward, dense vs vocabulary (peak memory: RSS above the level before the call)\n")
    print("| tokens | precision | dense (s) | vocabulary (s) | speed-up | dense peak MB | vocabulary peak MB | "
          "utilization dense / vocabulary | max abs difference | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["part"] == "forward":
            speed = "—" if r.get("speedup") is None else f"**{r['speedup']:.1f}×**"
            dense_mb = "—" if r.get("dense_peak_mb") is None else f"{r['dense_peak_mb']:,.0f}"
            diff = "—" if r.get("max_abs_difference") is None else f"{r['max_abs_difference']:.1e}"
            print(f"| {r['tokens']:,} | {r['dtype']} | {fmt_s(r.get('dense_s'))} | {fmt_s(r['vocabulary_s'])} | "
                  f"{speed} | {dense_mb} | {r['vocabulary_peak_mb']:,.0f} | {pct(r.get('dense_utilization'))} / "
                  f"{pct(r['vocabulary_utilization'])} | {diff} | {load(r):.1f} |")

    order = [r for r in rows if r["part"] == "order"]
    if order:
        print("\n### Vocabulary ranker, ids ordered by their last split vs unordered (unidirectional)\n")
        print("| tokens | precision | unordered (s) | ordered (s) | speed-up | "
              "GEMM FLOPs unordered → ordered | same splits |")
        print("|---|---|---|---|---|---|---|")
        for r in order:
            print(f"| {r['tokens']:,} | {r['dtype']} | {fmt_s(r['unordered_s'])} | {fmt_s(r['ordered_s'])} | "
                  f"**{r['speedup']:.2f}×** | {r['unordered_flops'] / 1e9:,.0f} → {r['ordered_flops'] / 1e9:,.0f} G | "
                  f"{'yes' if r['same_choice'] else 'no'} |")

    release = [r for r in rows if r["part"] == "release"]
    if release:
        print("\n### The authors' release, same weights, fp32, eager\n")
        print("| tokens | release (s) | this library (s) | speed-up | max abs difference | load |")
        print("|---|---|---|---|---|---|")
        for r in release:
            print(f"| {r['tokens']:,} | {fmt_s(r['release_s'])} | {fmt_s(r['ours_s'])} | **{r['speedup']:.1f}×** | "
                  f"{r['max_abs_difference']:.1e} | {load(r):.1f} |")


    here = path.parent
    if (here / "crossover.jsonl").exists():
        print("\n### Random ids (U close to N): where the vocabulary path stops paying\n")
        print("| tokens | vocabulary | distinct ids | precision | dense (s) | vocabulary (s) | measured ratio | "
              "estimated ratio | auto takes |")
        print("|---|---|---|---|---|---|---|---|---|")
        for line in (here / "crossover.jsonl").read_text().splitlines():
            r = json.loads(line)
            print(f"| {r['tokens']:,} | {r['vocabulary_size']:,} | {r['distinct_ids']:,} | {r['dtype']} | "
                  f"{fmt_s(r['dense_s'])} | {fmt_s(r['vocabulary_s'])} | {r['measured_ratio']:.2f} | "
                  f"{r['estimated_ratio']:.2f} | {r['what_auto_takes']} |")
    if (here / "export.jsonl").exists():
        print("\n### Exported (ONNX) small model in onnxruntime\n")
        print("| tokens | distinct ids | ranker formula in the graph | seconds | peak MB | "
              "max abs difference from eager |")
        print("|---|---|---|---|---|---|")
        for line in (here / "export.jsonl").read_text().splitlines():
            r = json.loads(line)
            print(f"| {r['tokens']:,} | {r['distinct_ids']:,} | {r['graph']} | {fmt_s(r['seconds'])} | "
                  f"{r['peak_mb']:,.0f} | {r['max_abs_difference_from_eager']:.1e} |")


if __name__ == "__main__":
    main()
