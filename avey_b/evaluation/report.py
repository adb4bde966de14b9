"""Aggregate ``results.json`` cells into the paper's Table 3 layout (Markdown) and JSON.

    avey-b report runs/eval                     # median over seeds at the best lr
    avey-b report runs/ablation --aggregate best

``median`` (paper §5.1): per model and benchmark, the median over seeds at each learning rate; the
best learning rate is the one with the highest median; the reported score is that median and the spread
is the sample standard deviation (ddof=1) over the seeds at that learning rate. ``best`` (ablations):
the best single run over all seeds and learning rates. Family averages are the mean of the family's
benchmark scores; an average over an incomplete family is marked with ``*``. Failed cells (``error.json``
without ``results.json``) are listed under the tables.

Variants of one model: models named ``<model>@<variant>`` (e.g. ``avey-b@scratch`` and ``avey-b@pretrained``)
also get a table with one row per model and task and one column per variant — the score at that variant's best
learning rate with the spread over seeds (± standard deviation, [min, max]) — and the change from the first
variant to each other one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections import defaultdict
from typing import Any

from avey_b.configs import from_args
from avey_b.utils.records import write_text_atomic

from .suites import ReportOptions
from .tasks import FAMILIES, TASKS

PROTOCOL_LABEL = {
    "standard": "standard metrics (accuracy; seqeval entity F1; official SQuAD F1; NDCG@10 over the full corpus)",
    "paper": ("the PAPER's protocol (EncodEval, as the paper adopted it): its training settings and input formats; "
              "per-sentence macro F1 for NER, token-position-set F1 for QA (predictions at the padding of its scoring "
              "batches counted), NDCG@10 with ideal DCG over retrieved "
              "docs and a qrels-only corpus; not comparable with standard numbers"),
}


def collect(output_dir: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """All finished records and all failures under ``output_dir``."""
    results, failures = [], []
    for root, _, files in os.walk(output_dir):
        if "results.json" in files:
            with open(os.path.join(root, "results.json"), encoding="utf-8") as f:
                results.append(json.load(f))
        elif "error.json" in files:
            with open(os.path.join(root, "error.json"), encoding="utf-8") as f:
                err = json.load(f)
            failures.append({"dir": os.path.relpath(root, output_dir), "error": err.get("error", "?")})
    return results, failures


def aggregate(records: list[dict[str, Any]], how: str = "median") -> dict[str, dict[str, dict[str, Any]]]:
    """{model: {task: {score, std, best_lr, n_seeds, per_lr}}} (see module docstring)."""
    if how not in ("median", "best"):
        raise ValueError(f"aggregate must be 'median' or 'best', got {how!r}")
    grouped: dict[tuple[str, str], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        name = r.get("model_name") or os.path.basename(str(r["model"]).rstrip("/"))
        grouped[(name, r["task"])][float(r["lr"])].append(float(r["score"]))
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (model, task), per_lr in grouped.items():
        medians = {lr: statistics.median(s) for lr, s in per_lr.items()}
        if how == "median":
            best_lr = max(medians, key=lambda lr: (medians[lr], -lr))
            score = medians[best_lr]
        else:
            best_lr = max(per_lr, key=lambda lr: (max(per_lr[lr]), -lr))
            score = max(per_lr[best_lr])
        at_best = per_lr[best_lr]
        out[model][task] = {
            "score": score, "best_lr": best_lr, "n_seeds": len(at_best),
            "std": statistics.stdev(at_best) if len(at_best) > 1 else 0.0,
            "per_lr": {f"{lr:g}": {"median": medians[lr], "scores": sorted(per_lr[lr])} for lr in sorted(per_lr)},
        }
    return dict(out)


def family_averages(per_task: dict[str, dict[str, Any]], key: str = "score") -> dict[str, dict[str, Any]]:
    out = {}
    for fam in FAMILIES:
        members = [t for t, cls in TASKS.items() if cls.family == fam]
        have = [per_task[t][key] for t in members if t in per_task]
        if have:
            out[fam] = {"value": sum(have) / len(have), "complete": len(have) == len(members)}
    return out


def markdown(table: dict[str, dict[str, dict[str, Any]]], protocol: str, how: str,
             failures: list[dict[str, Any]], models: list[str] | None = None) -> str:
    models = models or sorted(table)
    families = [f for f in FAMILIES if any(TASKS[t].family == f for m in table.values() for t in m)]
    columns: list[tuple[str, str | None]] = []  # (header, task or None for the family average)
    for fam in families:
        columns += [(TASKS[t].display, t) for t, cls in TASKS.items() if cls.family == fam]
        columns.append((f"{fam} Avg.", fam))
    what = ("median over seeds at the best learning rate" if how == "median"
            else "best run over seeds (ablation protocol)")
    lines = [f"Protocol: {PROTOCOL_LABEL.get(protocol, protocol)}.", f"Scores: {what}.", ""]

    def table_rows(key: str, title: str) -> None:
        lines.extend([f"**{title}**", "", "| Model | " + " | ".join(h for h, _ in columns) + " |",
                      "|---|" + "---:|" * len(columns)])
        for m in models:
            per_task = table.get(m, {})
            avgs = family_averages(per_task, key)
            cells = []
            for _, ref in columns:
                if ref in FAMILIES:
                    a = avgs.get(ref)
                    cells.append("–" if a is None else f"**{a['value']:.2f}**" + ("" if a["complete"] else "*"))
                else:
                    cells.append(f"{per_task[ref][key]:.2f}" if ref in per_task else "–")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")

    table_rows("score", "Scores")
    if how == "median":
        table_rows("std", "Standard deviation over seeds (at the best learning rate)")
    lines += ["**Details**", "", "| Model | Task | best lr | seeds | per-lr medians |", "|---|---|---:|---:|---|"]
    for m in models:
        for t, v in table.get(m, {}).items():
            per = ", ".join(f"{lr}: {d['median']:.2f}" for lr, d in v["per_lr"].items())
            lines.append(f"| {m} | {t} | {v['best_lr']:g} | {v['n_seeds']} | {per} |")
    lines.append("")
    lines += variant_rows(table, models)
    if any(not a["complete"] for m in table.values() for a in family_averages(m).values()):
        lines += ["\\* average over the family's benchmarks present in the results only.", ""]
    if failures:
        lines += [f"**Failed cells ({len(failures)})**", ""]
        lines += [f"- `{f['dir']}`: {f['error']}" for f in failures] + [""]
    return "\n".join(lines)


def variant_rows(table: dict[str, dict[str, dict[str, Any]]], models: list[str]) -> list[str]:
    """The "by variant" table of models named ``<model>@<variant>`` (see the module docstring); [] when no model
    has two variants."""
    variants: dict[str, list[str]] = defaultdict(list)
    for m in models:
        if "@" in m:
            base, variant = m.split("@", 1)
            variants[base].append(variant)
    variants = {b: v for b, v in variants.items() if len(v) > 1}
    if not variants:
        return []
    names = list(dict.fromkeys(v for vs in variants.values() for v in vs))  # first-seen order
    lines = ["**By variant** (score at the variant's best learning rate, ± standard deviation over seeds, "
             "[min, max]; Δ from the first variant)", "",
             "| Model | Task | " + " | ".join(names) + " | " + " | ".join(f"Δ {n}" for n in names[1:]) + " |",
             "|---|---|" + "---:|" * (2 * len(names) - 1)]
    for base, present in variants.items():
        tasks = list(dict.fromkeys(t for v in present for t in table[f"{base}@{v}"]))
        for t in tasks:
            cells, scores = [], {}
            for n in names:
                r = table.get(f"{base}@{n}", {}).get(t)
                if r is None:
                    cells.append("–")
                    continue
                seeds = r["per_lr"][f"{r['best_lr']:g}"]["scores"]
                scores[n] = r["score"]
                cells.append(f"{r['score']:.2f} ± {r['std']:.2f} [{min(seeds):.2f}, {max(seeds):.2f}]")
            first = scores.get(names[0])
            deltas = ["–" if first is None or n not in scores else f"{scores[n] - first:+.2f}" for n in names[1:]]
            lines.append(f"| {base} | {TASKS[t].display if t in TASKS else t} | " + " | ".join(cells + deltas) + " |")
    return lines + [""]


def write_report(output_dir: str, aggregate: str = "median", protocol: str | None = None,
                 models: list[str] | None = None, tasks: list[str] | None = None) -> tuple[str, str]:
    """Write ``report.md`` and ``report.json`` into ``output_dir`` (records of one protocol; restricted to
    the given models/tasks when set). Returns their paths."""
    records, failures = collect(output_dir)
    protocols = sorted({r["protocol"] for r in records})
    if protocol is None:
        if len(protocols) > 1:
            raise ValueError(f"{output_dir} mixes protocols {protocols}; choose one with --protocol")
        protocol = protocols[0] if protocols else "standard"
    records = [r for r in records if r["protocol"] == protocol and (tasks is None or r["task"] in tasks)]
    table = aggregate_fn(records, aggregate)
    if models is not None:
        table = {m: table[m] for m in models if m in table}
    shown = [m for m in (models or sorted(table)) if m in table] or None
    md = markdown(table, protocol, aggregate, failures, models=shown)
    payload = {"protocol": protocol, "protocol_label": PROTOCOL_LABEL.get(protocol, protocol), "aggregate": aggregate,
               "models": {m: {"tasks": v, "family_average": family_averages(v)} for m, v in table.items()},
               "failed": failures}
    md_path, json_path = os.path.join(output_dir, "report.md"), os.path.join(output_dir, "report.json")
    write_text_atomic(md_path, md)
    write_text_atomic(json_path, json.dumps(payload, indent=2))
    return md_path, json_path


aggregate_fn = aggregate


def run(args: argparse.Namespace) -> int:
    """``avey-b report`` (the arguments of :func:`avey_b.evaluation.suites.report_parser`)."""
    options = from_args(ReportOptions, args)
    md_path, json_path = write_report(options.output_dir, options.aggregate, options.protocol)
    with open(md_path, encoding="utf-8") as f:
        print(f.read())
    print(f"written: {md_path}, {json_path}")
    return 0
