"""Held-out curves of the quickstart recipe search (``results.jsonl``) -> ``curves.png``: masked-LM loss and
masked-token accuracy against training tokens, one line per variant (the latest record of each), and each
finished variant's fill-mask hit rate (right word in the top 5, every held-out sentence of ``select_fill.py``).

    python benchmarks/quickstart_recipes/plot.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    latest: dict[str, dict] = {}
    for line in open(HERE / "results.jsonl"):
        if line.strip():
            rec = json.loads(line)
            latest[rec["variant"]] = rec
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1, 1, 0.8]})
    for name, rec in latest.items():
        pts = rec["curve"]
        if len(pts) < 3:  # stopped by hand right after it started
            continue
        style = {"linewidth": 2.5, "color": "black"} if name == "quickstart" else {}
        if rec.get("stopped_by_hand"):
            style, name = {"linestyle": "--"}, f"{name} (stopped)"
        if "data.train" in " ".join(rec["overrides"]):  # another held-out set: accuracy not comparable
            style = {**style, "linestyle": ":"}
        axes[0].plot([p["tokens"] / 1e6 for p in pts], [p["eval_loss"] for p in pts], label=name, **style)
        axes[1].plot([p["tokens"] / 1e6 for p in pts], [100 * p["eval_accuracy"] for p in pts], label=name, **style)
    axes[1].axhline(15, color="grey", linestyle=":", linewidth=1)
    for ax, title in zip(axes, ("held-out masked-LM loss", "held-out masked-token accuracy (%)"), strict=False):
        ax.set_xlabel("training tokens (M)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, ncol=2)
    rated = [(n, r["fill_rate"]) for n, r in latest.items() if "fill_rate" in r]
    rated.sort(key=lambda x: x[1]["top5"])
    axes[2].barh([n for n, _ in rated], [100 * f["top5"] for _, f in rated],
                 color=["black" if n == "quickstart" else "tab:blue" for n, _ in rated])
    axes[2].axvline(50, color="grey", linestyle=":", linewidth=1)
    axes[2].set_xlim(0, 100)
    axes[2].tick_params(axis="y", labelsize=7)
    n = rated[0][1]["sentences"] if rated else 0
    axes[2].set_title(f"fill-mask: right word in the top 5 (%, {n} held-out sentences)", fontsize=10)
    axes[2].grid(alpha=0.3, axis="x")
    fig.suptitle("Quickstart recipe search (Avey-B, 4 layers unless named; Python docs, 5% held out)")
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=110)
    print(HERE / "curves.png")


if __name__ == "__main__":
    main()
