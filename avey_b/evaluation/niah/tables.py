"""The tables and plots of NIAH results: per task, model and form, the median over seeds at the best learning
rate per length with 95% bootstrap intervals over the test examples, beside the chance level."""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

import numpy as np

from avey_b.utils.records import length_table, write_text_atomic

from .forms import HEADLINE, form_of
from .needles import NEEDLES
from .retrieval import RETRIEVAL

#: the title of each metric's table
TITLES = {"exact": "NIAH exact match (%)", "f1": "NIAH F1 (%)",
          "score": "NIAH token-classification score (%; the authors' token F1 over the input's answer tokens)",
          "needle_to_question": "A split holding question tokens among the k retrieved for the needle's split (%)",
          "question_to_needle": "The needle's split among the k retrieved for a split holding question tokens (%)",
          "one_needle": "NIAH headline score (%), one-needle examples",
          "two_needles": "NIAH headline score (%), examples with several needles (an occurrence asked for)",
          "other_value": "Examples with several needles answered with another needle's value (%)"}
#: resamples of the bootstrap intervals (percentile, 95%), drawn with a fixed seed so a report is reproducible
BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED = 2000, 0


def _value(res: dict[str, Any], metric: str) -> float | None:
    """A length's score in percent (a :data:`RETRIEVAL` statistic: how often), or None."""
    if res.get("status") != "ok":
        return None
    if metric in RETRIEVAL or metric in NEEDLES:
        r = res.get("retrieval" if metric in RETRIEVAL else "needles")
        return None if r is None or r[metric] is None else 100 * r[metric]
    return res.get(metric)


def cell_text(res: dict[str, Any], metric: str = "exact") -> str:
    value = _value(res, metric)
    if value is not None:
        return f"{value:.1f}"
    return {"max_length": "—", "oom": "OOM", "ok": ""}.get(res.get("status"), str(res.get("status")))


def chance_text(res: dict[str, Any]) -> str:
    return "?" if res.get("chance") is None else f"{res['chance']:.1f}"


def _by_model(records: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["task"], r["model"], form_of(r)), []).append(r)
    return groups


def bootstrap_interval(per_seed: list[list[float]], level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of the median over seeds of the mean score, resampling the test examples
    (the same examples for every seed, so one resample draws the same indices for all): ``per_seed`` holds one
    list of per-example scores per seed. In the scores' unit."""
    scores = np.asarray(per_seed, dtype=float)  # (seeds, examples)
    idx = np.random.default_rng(seed).integers(0, scores.shape[1], size=(resamples, scores.shape[1]))
    stats = np.median(scores[:, idx].mean(-1), axis=0)  # (resamples,)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def summarize(runs: list[dict[str, Any]], metric: str = "exact") -> dict[int, dict[str, Any]]:
    """Per length, over the records in ``runs`` (one task, model and form; any learning rates and seeds), as the
    paper's protocol reports: the learning rate whose median over seeds of the form's headline score is best, and
    at that rate ``value`` (the median over seeds of ``metric``), ``n`` seeds, ``lr``, ``chance`` and, when the
    records hold per-example scores, ``lo``/``hi`` (:func:`bootstrap_interval`); or ``status`` when no record has
    a score there ("—" past the window, "OOM")."""
    out: dict[int, dict[str, Any]] = {}
    headline = HEADLINE[form_of(runs[0])]
    for n in sorted({int(k) for r in runs for k in r["results"]}):
        cells = [(r["lr"], r["results"][str(n)]) for r in runs if str(n) in r["results"]]
        by_lr: dict[float, list[dict[str, Any]]] = {}
        for lr, c in cells:
            if _value(c, headline) is not None:
                by_lr.setdefault(lr, []).append(c)
        if not by_lr:
            out[n] = {"status": cell_text(cells[0][1], metric)}
            continue
        lr = max(sorted(by_lr), key=lambda x: statistics.median(_value(c, headline) for c in by_lr[x]))
        chosen = by_lr[lr]
        values = [v for c in chosen if (v := _value(c, metric)) is not None]
        if not values:
            out[n] = {"status": ""}
            continue
        cell = {"value": statistics.median(values), "n": len(values), "lr": lr, "chance": chosen[0].get("chance"),
                "every_needle": chosen[0].get("every_needle")}
        per = [c.get("per_example", {}).get(metric) for c in chosen]
        if all(p is not None for p in per) and len({len(p) for p in per}) == 1:
            lo, hi = bootstrap_interval(per)
            cell |= {"lo": 100 * lo, "hi": 100 * hi}
        out[n] = cell
    return out


def format_niah_table(records: list[dict[str, Any]], metric: str = "exact") -> str:
    """Markdown: one row per (task, model, form) with the chance level, one column per length: the median over
    seeds at the best learning rate and its 95% bootstrap interval over the test examples ``(lo–hi)``; "—" past
    the max length, "OOM". ``metric``: exact, f1, score or a :data:`RETRIEVAL` / :data:`NEEDLES` statistic (empty
    when no row has it)."""
    rows, seeds, lrs = [], set(), set()
    for (task, model, form), runs in _by_model(records).items():
        summary = summarize(runs, metric)
        if not any("value" in c for c in summary.values()):
            continue
        seeds.update(c["n"] for c in summary.values() if "value" in c)
        lrs.update(r["lr"] for r in runs)
        levels = []
        for key in ("chance", "every_needle"):
            found = sorted({round(c[key], 1) for c in summary.values() if c.get(key) is not None})
            levels.append("–".join(f"{x:.1f}" for x in found[:: max(1, len(found) - 1)]) if found else "?")
        cells = {n: (f"{c['value']:.1f}" + (f" ({c['lo']:.1f}–{c['hi']:.1f})" if "lo" in c else ""))
                 if "value" in c else c["status"] for n, c in summary.items()}
        shown = 0 if metric in RETRIEVAL else 2 if metric == "score" else 1  # levels of the scores, not of the ranker
        rows.append(([task, model, form, *levels[:shown]], cells))
    if not rows:
        return ""
    header = ["task", "model", "form", *["chance", "every needle"][:shown]]
    title = (f"{TITLES[metric]}; median over {'/'.join(map(str, sorted(seeds)))} fine-tuning seed(s) at the best "
             f"learning rate of {', '.join(f'{x:g}' for x in sorted(lrs))} per length; (95% interval: percentile "
             f"bootstrap over the test examples, {BOOTSTRAP_RESAMPLES:,} resamples)")
    if shown:
        title += "; chance: the score of a model that finds the needles and picks one at random"
    if metric == "score":
        title += ("; every needle: the score of labelling every needle's value on these test examples, which the "
                  "token F1 credits in part")
    return title + "\n\n" + length_table(header, rows)


def plot_niah(records: list[dict[str, Any]], path: str, metrics: tuple[str, ...] | None = None) -> str:
    """Score vs input length (log scale), one panel per task, one line per model, form and metric (median over seeds
    at the best learning rate; the band its 95% bootstrap interval; metrics told apart by line style; ``None``: each
    form's headline score), the chance level dotted, the training length marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = ("-", "--", ":")
    groups = _by_model(records)
    tasks = sorted({t for t, _, _ in groups})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        chances = set()
        for (t, model, form), runs in groups.items():
            if t != task:
                continue
            color = None
            for metric, style in zip(metrics or (HEADLINE[form],), styles, strict=False):
                summary = {n: c for n, c in summarize(runs, metric).items() if "value" in c}
                if not summary:
                    continue
                xs = sorted(summary)
                chances.update(round(c["chance"], 1) for c in summary.values() if c.get("chance") is not None)
                seeds = max(c["n"] for c in summary.values())
                label = f"{os.path.basename(os.path.normpath(model))}, {form} ({seeds} seed{'s' * (seeds > 1)})"
                if metrics and len(metrics) > 1:
                    label += f", {metric.replace('_', ' ')}"
                line, = ax.plot(xs, [summary[n]["value"] for n in xs], marker="o", linestyle=style, color=color,
                                label=label)
                color = line.get_color()
                if all("lo" in summary[n] for n in xs):
                    ax.fill_between(xs, [summary[n]["lo"] for n in xs], [summary[n]["hi"] for n in xs],
                                    color=color, alpha=0.15)
        for c in sorted(chances):
            ax.axhline(c, color="black", linestyle=":", linewidth=1)
            ax.text(ax.get_xlim()[0], c, f" chance {c:.1f}", fontsize=8, va="bottom")
        train = {r["train"]["input_tokens"] for r in records if r["task"] == task}
        for n in train:
            ax.axvline(n, color="grey", linestyle="--", linewidth=1)
        ax.text(min(train), 102, " train length", color="grey", fontsize=8, va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 108)
        ax.set_xlabel("input length (tokens, whole input in one window)")
        ax.set_ylabel("score (%; band: 95% bootstrap interval)")
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_tables_and_plots(records: list[dict[str, Any]], out: str) -> None:
    """``table_exact.md``, ``table_f1.md`` (qa form), ``table_score.md`` (token-classification form),
    ``table_<breakdown by needles>.md``, ``table_<retrieval statistic>.md`` (Avey-B), ``niah.png`` and
    ``niah_by_needles.png`` in ``out``."""
    for metric in ("exact", "f1", "score", *NEEDLES, *RETRIEVAL):
        table = format_niah_table(records, metric)
        if table:
            write_text_atomic(os.path.join(out, f"table_{metric}.md"), table + "\n")
    for metric in sorted({HEADLINE[form_of(r)] for r in records}):
        print(format_niah_table(records, metric), file=sys.stderr)
    try:
        plot_niah(records, os.path.join(out, "niah.png"))
        plot_niah(records, os.path.join(out, "niah_by_needles.png"), metrics=("one_needle", "two_needles"))
    except ImportError:  # matplotlib is the `bench` extra's
        print("matplotlib not installed: no plot (pip install matplotlib)", file=sys.stderr)

