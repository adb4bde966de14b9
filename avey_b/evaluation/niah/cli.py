"""``avey-b niah``: generate needle-in-a-haystack sets (:mod:`avey_b.data.niah`) and evaluate encoders on them,
as in the paper's appendix "Long-Range Benchmark Results".

Evaluation (``avey-b niah evaluate``): see :func:`evaluate`; the options are declared in
:mod:`avey_b.evaluation.niah.options`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys

from avey_b.data.tokenization import load_tokenizer
from avey_b.utils.records import append_jsonl, read_jsonl, write_jsonl_atomic

from ...data import niah as niah_data
from ...data import niah_authors, niah_replay
from ...data.niah import parse_lengths
from .forms import HEADLINE, form_of
from .options import (
    NiahEvaluateOptions,
    NiahGenerateOptions,
    niah_evaluate_options,
    niah_generate_options,
    niah_parser,
)
from .runs import (
    evaluate_model,
    planned_run,
    record_train_length,
    refuse_changed,
    run_directory,
    training_plan,
)
from .tables import cell_text, chance_text, write_tables_and_plots


def run(args: argparse.Namespace) -> int:
    """``avey-b niah generate | evaluate | report`` (the arguments of
    :func:`avey_b.evaluation.niah.options.niah_parser`)."""
    if args.command == "generate":
        return generate(args)
    if args.command == "report":
        return report(args.results, args.out)
    return evaluate(niah_evaluate_options(args))


def generate(args: argparse.Namespace | NiahGenerateOptions) -> int:
    """``avey-b niah generate``: the sets of the library's generator (:func:`avey_b.data.niah.generate`) or of the
    authors' (:func:`avey_b.data.niah_authors.generate_authors`), as :class:`NiahGenerateOptions` ask."""
    opts = args if isinstance(args, NiahGenerateOptions) else niah_generate_options(args)
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    authors = opts.generator != "library"
    try:
        distractors = {split: niah_data.parse_distribution(text, split, max_needles=None if authors else
                                                          len(niah_data.ORDINALS))
                       for split in ("train", "test") if (text := getattr(opts, f"{split}_distractors")) is not None}
        test_lengths, train_lengths = parse_lengths(opts.lengths), parse_lengths(opts.train_lengths)
    except ValueError as exc:
        raise SystemExit(f"avey-b niah generate: {exc}") from None
    if opts.generator == "authors-replay":
        if train_lengths != test_lengths:
            raise SystemExit("avey-b niah generate: the authors' script draws a train and a test set at each length: "
                             "--train-lengths must equal --lengths under --generator authors-replay")
        niah_replay.replay(opts.out, lengths=test_lengths, n_train=opts.n_train, n_test=opts.n_test, seed=opts.seed,
                           tasks=opts.tasks, distributions=distractors, log=log)
        return 0
    if opts.generator == "authors":
        if opts.tokenizer is not None:
            log("avey-b niah generate: --tokenizer has no effect on the authors' generator (lengths in words)")
        niah_authors.generate_authors(opts.out, tasks=opts.tasks, test_lengths=test_lengths,
                                      train_lengths=train_lengths, n_train=opts.n_train, n_test=opts.n_test,
                                      seed=opts.seed, distributions=distractors, fmt=opts.format, log=log)
        return 0
    tok = load_tokenizer(opts.tokenizer, complete=False, require_fast=True)
    niah_data.generate(
        tok,
        opts.out,
        tasks=opts.tasks,
        test_lengths=test_lengths,
        train_lengths=train_lengths,
        n_train=opts.n_train,
        n_test=opts.n_test,
        seed=opts.seed,
        unit=opts.length_unit,
        fmt=opts.format,
        tokenizer_name=opts.tokenizer,
        distractors=distractors,
        log=log,
    )
    return 0


def evaluate(args: NiahEvaluateOptions) -> int:
    """``avey-b niah evaluate`` with ``args``: every model x task x learning rate x seed fine-tuned and scored at
    every test length, resumably (:data:`avey_b.evaluation.niah.options.NIAH_EVALUATE_DESCRIPTION`, its
    ``--help``)."""
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.jsonl")
    done = {(r["model"], r["task"], form_of(r), r["lr"], r["seed"], record_train_length(r)): r
            for r in (read_jsonl(path) if os.path.exists(path) else [])}
    for name in args.models:
        for task in args.tasks:
            plans = training_plan(args, task)
            for lr in args.lr:
                for seed in args.seeds or [args.seed]:
                    for plan in plans:
                        _fine_tune_cell(dataclasses.replace(args, seed=seed), name, task, lr, plan, done, path)
    write_tables_and_plots(read_jsonl(path), args.out)
    return 0


def _fine_tune_cell(args: NiahEvaluateOptions, name: str, task: str, lr: float, plan: tuple[int, list[int]],
                    done: dict, path: str) -> None:
    """One fine-tuning of ``evaluate`` (at ``args.seed``) and its record appended to ``path``; one already in
    ``done`` is skipped (its settings must match)."""
    train_length, lengths = plan
    key = (name, task, args.form, lr, args.seed, train_length)
    what = f"{name} {task} {args.form} lr {lr:g} seed {args.seed} train length {train_length}"
    if key in done:
        _, settings = planned_run(name, task, lr, args, train_length, lengths)
        refuse_changed(f"{path} ({what})", done[key].get("settings"), settings)
        print(f"{what}: already in {path}, skipped", file=sys.stderr)
        return
    rec = evaluate_model(name, task, args, lr, log=lambda s: print(s, file=sys.stderr), plan=plan)
    append_jsonl(path, rec)
    run_dir = run_directory(args.out, name, task, args.form, lr, args.seed,
                            train_length if args.each_length else None)
    shutil.rmtree(os.path.join(run_dir, "model"), ignore_errors=True)  # the record holds everything
    metric = HEADLINE[args.form]
    append_jsonl(None, {"model": name, "task": task, "form": args.form, "lr": lr, "seed": args.seed,
                        "train_length": train_length,
                        metric: {k: cell_text(v, metric) for k, v in rec["results"].items()},
                        "chance": {k: chance_text(v) for k, v in rec["results"].items()}}, echo=True)


def report(results: list[str], out: str) -> int:
    """``avey-b niah report``: the records of the ``niah evaluate`` runs ``results`` merged into ``out``
    (:data:`avey_b.evaluation.niah.options.NIAH_REPORT_DESCRIPTION`, its ``--help``)."""
    records, seen = [], {}
    for given in results:
        path = os.path.join(given, "results.jsonl") if os.path.isdir(given) else given
        if not os.path.isfile(path):
            raise SystemExit(f"avey-b niah report: no results at {path} (written by `avey-b niah evaluate --out`)")
        for rec in read_jsonl(path):
            key = (rec["model"], rec["task"], form_of(rec), rec["lr"], rec["seed"], record_train_length(rec))
            if key in seen:
                raise SystemExit(f"avey-b niah report: {key[0]} {key[1]} {key[2]} train length {key[5]} lr "
                                 f"{key[3]:g} seed {key[4]} is in both {seen[key]} and {path}")
            seen[key] = path
            records.append(rec)
    os.makedirs(out, exist_ok=True)
    write_jsonl_atomic(os.path.join(out, "results.jsonl"), records)
    write_tables_and_plots(records, out)
    return 0


if __name__ == "__main__":
    sys.exit(run(niah_parser().parse_args()))
