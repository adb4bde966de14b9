"""Log-log plots of throughput and latency vs sequence length from ``bench run`` results (matplotlib).

One line per series (model, attention, mode, dtype); OOM points are marked with an ``x`` at the last
measured value's height so a curve that stops is visibly an OOM, not a missing run. matplotlib is an
optional dependency (extra ``bench``) and is imported here only.
"""

from __future__ import annotations

import os
from typing import Any

from .results import latency_of, read_records, series_key, throughput_of

_STAT_TEXT = {
    "median": "median wall time of repeats",
    "min": "min wall time of repeats",
    "cpu": "process CPU time",
}


def plot_results(path: str, out_dir: str, *, title: str | None = None, stat: str = "median") -> list[str]:
    """Write ``throughput.png`` and ``latency.png`` under ``out_dir``; returns their paths."""

    return plot_records(read_records(path), out_dir, title=title, stat=stat)


def plot_records(
    records: list[dict[str, Any]], out_dir: str, *, title: str | None = None, stat: str = "median"
) -> list[str]:
    """Lines at the ``stat`` latency of each point (see :func:`avey_b.benchmarking.results.latency_of`); latency
    error bars span min..max of the repeats."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt


    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(series_key(r), []).append(r)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    value = {"throughput": lambda r: throughput_of(r, stat), "latency": lambda r: latency_of(r, stat)}
    unit = "CPU-s" if stat == "cpu" else "s"
    for name, ylabel in (
        ("throughput", f"throughput (tokens / {unit})"),
        ("latency", f"latency ({unit} / forward)"),
    ):
        get = value[name]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for key, pts in groups.items():
            pts = sorted(pts, key=lambda r: r["seq_len"])
            ok = [r for r in pts if r["status"] == "ok"]
            if not ok:
                continue
            xs = [r["seq_len"] for r in ok]
            ys = [get(r) for r in ok]
            (line,) = ax.plot(xs, ys, marker="o", ms=3, label=key)
            if name == "latency" and stat != "cpu":
                lo = [y - r["latency_min_s"] for y, r in zip(ys, ok, strict=True)]
                hi = [r["latency_max_s"] - y for y, r in zip(ys, ok, strict=True)]
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor=line.get_color(), alpha=0.5)
            oom = [r for r in pts if r["status"] == "oom" and not r.get("inferred")]
            if oom:  # an "x" at the height of the last measured point: the curve stopped on OOM
                ax.plot([r["seq_len"] for r in oom], [ys[-1]] * len(oom), "x", color=line.get_color(), ms=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N (tokens)")
        ax.set_ylabel(ylabel)
        b = {r["batch_size"] for r in records}
        ax.set_title(title or f"{name} vs length, batch {','.join(map(str, sorted(b)))} ({_STAT_TEXT[stat]})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(out_dir, f"{name}.png")
        fig.savefig(p, dpi=130)
        plt.close(fig)
        paths.append(p)
    return paths
