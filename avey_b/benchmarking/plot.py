"""Log-log plots of throughput and latency vs sequence length from ``bench run`` results (matplotlib).

One line per series (model, attention, mode, dtype); OOM points are marked with an ``x`` at the last
measured value's height so a curve that stops is visibly an OOM, not a missing run. matplotlib is an
optional dependency (extra ``bench``) and is imported here only.
"""

from __future__ import annotations

import os
from typing import Any


def plot_results(path: str, out_dir: str, *, title: str | None = None) -> list[str]:
    """Write ``throughput.png`` and ``latency.png`` under ``out_dir``; returns their paths."""
    from .efficiency import read_records

    return plot_records(read_records(path), out_dir, title=title)


def plot_records(records: list[dict[str, Any]], out_dir: str, *, title: str | None = None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    from .efficiency import series_key

    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(series_key(r), []).append(r)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for field, ylabel, name in (
        ("throughput_tok_s", "throughput (tokens/s)", "throughput"),
        ("latency_median_s", "latency (s / forward)", "latency"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for key, pts in groups.items():
            pts = sorted(pts, key=lambda r: r["seq_len"])
            ok = [r for r in pts if r["status"] == "ok"]
            if not ok:
                continue
            xs = [r["seq_len"] for r in ok]
            (line,) = ax.plot(xs, [r[field] for r in ok], marker="o", ms=3, label=key)
            if field.startswith("latency"):
                lo = [r[field] - r["latency_min_s"] for r in ok]
                hi = [r["latency_max_s"] - r[field] for r in ok]
                ax.errorbar(
                    xs, [r[field] for r in ok], yerr=[lo, hi], fmt="none", ecolor=line.get_color(), alpha=0.5
                )
            oom = [r for r in pts if r["status"] == "oom" and not r.get("inferred")]
            if oom:
                ax.plot(
                    [r["seq_len"] for r in oom], [ok[-1][field]] * len(oom), "x", color=line.get_color(), ms=8
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N (tokens)")
        ax.set_ylabel(ylabel)
        b = {r["batch_size"] for r in records}
        ax.set_title(title or f"{ylabel.split(' (')[0]} vs length, batch {','.join(map(str, sorted(b)))}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(out_dir, f"{name}.png")
        fig.savefig(p, dpi=130)
        plt.close(fig)
        paths.append(p)
    return paths
