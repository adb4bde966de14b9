"""``avey-b niah``: generate needle-in-a-haystack sets (:mod:`avey_b.data.niah`) and evaluate encoders on them,
as in the paper's appendix "Long-Range Benchmark Results".

Evaluation (``avey-b niah evaluate``): see :func:`evaluate`; the options are declared in
:mod:`avey_b.evaluation.settings`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from avey_b.data.tokenization import load_tokenizer
from avey_b.utils.records import append_jsonl, read_jsonl, write_jsonl_atomic

from ...data import niah as niah_data
from ...data.niah import parse_lengths
from ..settings import NiahEvaluateOptions, niah_evaluate_options, niah_parser
from .forms import HEADLINE, form_of
from .runs import evaluate_model, planned_run, refuse_changed, run_directory
from .tables import cell_text, chance_text, write_tables_and_plots


def run(args: argparse.Namespace) -> int:
    """``avey-b niah generate | evaluate | report`` (the arguments of
    :func:`avey_b.evaluation.settings.niah_parser`)."""
    if args.command == "generate":
        return generate(args)
    if args.command == "report":
        return report(args.results, args.out)
    return evaluate(niah_evaluate_options(args))


def generate(args: argparse.Namespace) -> int:
    """``avey-b niah generate``: the sets of :func:`avey_b.data.niah.generate`."""
    if args.n_train < 0 or (args.n_test is not None and args.n_test < 0):
        raise SystemExit("avey-b niah generate: --n-train and --n-test must be >= 0")
    try:
        distractors = {split: niah_data.parse_distribution(text, split) for split in ("train", "test")
                       if (text := getattr(args, f"{split}_distractors")) is not None}
    except ValueError as exc:
        raise SystemExit(f"avey-b niah generate: {exc}") from None
    tok = load_tokenizer(args.tokenizer, complete=False, require_fast=True)
    niah_data.generate(
        tok,
        args.out,
        tasks=args.tasks,
        test_lengths=parse_lengths(args.lengths),
        train_lengths=parse_lengths(args.train_lengths),
        n_train=args.n_train,
        n_test=args.n_test,
        seed=args.seed,
        unit=args.length_unit,
        fmt=args.format,
        tokenizer_name=args.tokenizer,
        distractors=distractors,
        log=lambda s: print(s, file=sys.stderr),
    )
    return 0


def evaluate(args: NiahEvaluateOptions) -> int:
    """``avey-b niah evaluate`` with ``args``: every model x task x learning rate fine-tuned and scored at every
    test length, resumably (:data:`avey_b.evaluation.settings.NIAH_EVALUATE_DESCRIPTION`, its ``--help``)."""
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.jsonl")
    done = {(r["model"], r["task"], form_of(r), r["lr"], r["seed"]): r
            for r in (read_jsonl(path) if os.path.exists(path) else [])}
    for name in args.models:
        for task in args.tasks:
            for lr in args.lr:
                key = (name, task, args.form, lr, args.seed)
                if key in done:
                    _, _, settings = planned_run(name, task, lr, args)
                    refuse_changed(f"{path} ({name} {task} {args.form} lr {lr:g} seed {args.seed})",
                                    done[key].get("settings"), settings)
                    print(f"{name} {task} {args.form} lr {lr:g} seed {args.seed}: already in {path}, skipped",
                          file=sys.stderr)
                    continue
                rec = evaluate_model(name, task, args, lr, log=lambda s: print(s, file=sys.stderr))
                append_jsonl(path, rec)
                shutil.rmtree(os.path.join(run_directory(args.out, name, task, args.form, lr, args.seed), "model"),
                              ignore_errors=True)  # the record holds everything; the fine-tuned weights go
                metric = HEADLINE[args.form]
                append_jsonl(None, {"model": name, "task": task, "form": args.form, "lr": lr, "seed": args.seed,
                                    metric: {k: cell_text(v, metric) for k, v in rec["results"].items()},
                                    "chance": {k: chance_text(v) for k, v in rec["results"].items()}}, echo=True)
    write_tables_and_plots(read_jsonl(path), args.out)
    return 0


def report(results: list[str], out: str) -> int:
    """``avey-b niah report``: the records of the ``niah evaluate`` runs ``results`` merged into ``out``
    (:data:`avey_b.evaluation.settings.NIAH_REPORT_DESCRIPTION`, its ``--help``)."""
    records, seen = [], {}
    for given in results:
        path = os.path.join(given, "results.jsonl") if os.path.isdir(given) else given
        if not os.path.isfile(path):
            raise SystemExit(f"avey-b niah report: no results at {path} (written by `avey-b niah evaluate --out`)")
        for rec in read_jsonl(path):
            key = (rec["model"], rec["task"], form_of(rec), rec["lr"], rec["seed"])
            if key in seen:
                raise SystemExit(f"avey-b niah report: {key[0]} {key[1]} {key[2]} lr {key[3]:g} seed {key[4]} is in "
                                 f"both {seen[key]} and {path}")
            seen[key] = path
            records.append(rec)
    os.makedirs(out, exist_ok=True)
    write_jsonl_atomic(os.path.join(out, "results.jsonl"), records)
    write_tables_and_plots(records, out)
    return 0


if __name__ == "__main__":
    sys.exit(run(niah_parser().parse_args()))
