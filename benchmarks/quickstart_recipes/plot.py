"""Held-out curves of the quickstart recipe search (``results.jsonl``) -> ``curves.png``: masked-LM loss and
masked-token accuracy against training tokens, one line per variant (the latest record of each).

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
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, rec in latest.items():
        pts = rec["curve"]
        if len(pts) < 3:  # stopped by hand right after it started
            continue
        style = {"linewidth": 2.5, "color": "black"} if name == "quickstart" else {}
        if rec.get("stopped_by_hand"):
            style, name = {"linestyle": "--"}, f"{name} (stopped)"
        axes[0].plot([p["tokens"] / 1e6 for p in pts], [p["eval_loss"] for p in pts], label=name, **style)
        axes[1].plot([p["tokens"] / 1e6 for p in pts], [100 * p["eval_accuracy"] for p in pts], label=name, **style)
    axes[1].axhline(15, color="grey", linestyle=":", linewidth=1)
    for ax, title in zip(axes, ("held-out masked-LM loss", "held-out masked-token accuracy (%)"), strict=True):
        ax.set_xlabel("training tokens (M)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle("Quickstart recipe search (Avey-B d=256, L=4; Python docs, 5% held out)")
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=110)
    print(HERE / "curves.png")


if __name__ == "__main__":
    main()
