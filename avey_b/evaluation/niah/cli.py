"""``avey-b niah``: generate needle-in-a-haystack sets (:mod:`avey_b.data.niah`) and evaluate encoders on them,
as in the paper's appendix "Long-Range Benchmark Results".

Evaluation (``avey-b niah evaluate``): see :func:`evaluate_main`.
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import sys

from avey_b.data.tokenization import load_tokenizer
from avey_b.utils.records import append_jsonl, read_jsonl, write_jsonl_atomic

from ...data import niah as niah_data
from ...data.niah import DEFAULT_TRAIN_LENGTH, NIAH_TASKS, parse_lengths
from .forms import FORM_DEFAULTS, FORMS, HEADLINE, form_of
from .runs import evaluate_model, planned_run, refuse_changed, run_directory
from .tables import cell_text, chance_text, write_tables_and_plots


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b niah", description="Needle-in-a-haystack sets (paper appendix \"Long-Range Benchmark Results\").")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser(
        "generate",
        help="generate NIAH-1/NIAH-2 train/test sets",
        description=niah_data.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument(
        "--tokenizer", required=True, help="HF tokenizer name or local path (lengths in its tokens)"
    )
    g.add_argument("--out", required=True, help="output directory")
    g.add_argument("--tasks", nargs="+", choices=NIAH_TASKS, default=list(NIAH_TASKS))
    g.add_argument(
        "--lengths",
        nargs="+",
        default=[str(n) for n in niah_data.DEFAULT_TEST_LENGTHS],
        help="test lengths in tokens (1024 or 1k = 1024 tokens)",
    )
    g.add_argument("--train-lengths", nargs="+", default=[str(DEFAULT_TRAIN_LENGTH)])
    g.add_argument("--n-train", type=int, default=1000, help="training examples per train length")
    g.add_argument("--n-test", type=int, default=None,
                   help=f"test examples per test length (default: {niah_data.N_TEST_SHORT} up to "
                        f"{niah_data.LONG_FROM:,} tokens, {niah_data.N_TEST_LONG} beyond)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--length-unit",
        choices=("input", "context", "prompt"),
        default="input",
        help="count the whole model input (question+passage+special tokens), the passage only, or the authors' "
             "token-classification input (prompt)",
    )
    for split in ("train", "test"):
        g.add_argument(f"--{split}-distractors", metavar="DIST", default=None,
                       help=f"draw each {split} example's number of distractor needles from DIST (K:P pairs, e.g. "
                            f"{niah_data.format_distribution(niah_data.AUTHORS_DISTRACTORS[split])}; 'authors': that, "
                            "the authors' generator's default); default: exactly 40%% one needle, 60%% two")
    g.add_argument("--format", choices=("jsonl", "hf", "both"), default="both")

    e = sub.add_parser(
        "evaluate",
        help="fine-tune at a short length, report the score per length next to the chance level",
        description=inspect.cleandoc(evaluate_main.__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_evaluate_arguments(e)

    r = sub.add_parser(
        "report",
        help="merge results of `niah evaluate` runs (e.g. seeds run in parallel) into one set of tables and plots",
        description=inspect.cleandoc(report_main.__doc__ or ""),
    )
    r.add_argument("results", nargs="+", help="results.jsonl files or the directories holding them")
    r.add_argument("--out", required=True, help="directory for the merged results.jsonl, tables and plots")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.command == "generate":
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
    if args.command == "report":
        return report_main(args)
    return evaluate_main(resolve_form(args, argv[argv.index("evaluate") + 1:]))


#: The fine-tuning settings ``niah evaluate`` takes (flags generated from RunConfig); the window (``max_length``,
#: ``doc_stride``) follows from each input's length.
NIAH_SETTINGS = ("epochs", "max_steps", "batch_size", "eval_batch_size", "max_train_examples", "max_eval_examples",
                 "warmup_ratio", "weight_decay", "grad_clip", "max_answer_length", "precision", "device",
                 "trust_remote_code")


def add_evaluate_arguments(e: argparse.ArgumentParser, defaults: bool = True) -> None:
    """The flags of ``niah evaluate``. ``defaults=False``: a flag not given is absent from the namespace (how
    :func:`resolve_form` learns which settings the user chose)."""
    d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)
    e.add_argument(
        "--data", required=defaults, help="directory written by `niah generate` (holds niah-1/, niah-2/)"
    )
    e.add_argument(
        "--models",
        nargs="+",
        required=defaults,
        help="Hub ids / local directories of pretrained encoders, or benchmark names built from "
        "config with random weights (avey-b-small, bert-base, modernbert-base, neobert, ...; "
        "see avey_b.utils.model_spec) for smoke runs",
    )
    e.add_argument(
        "--tokenizer",
        default=d(None),
        help="tokenizer for models built from config (and for pretrained models without one)",
    )
    e.add_argument("--tasks", nargs="+", choices=NIAH_TASKS, default=d(list(NIAH_TASKS)))
    e.add_argument(
        "--form", choices=FORMS, default=d("qa"),
        help="qa: an extractive-QA head (start/end logits), SQuAD exact match and F1 (default); token-classification:"
             " the authors' form, a 2-label token classifier (answer tokens) fine-tuned with 32 examples per step as "
             "micro-batches of 1, 1 epoch, learning rates 1e-4 and 5e-4, AdamW beta (0.9, 0.95), epsilon 1e-5, "
             "weight decay 0.1, scored by the authors' token F1. Flags given explicitly override the form's values",
    )
    e.add_argument(
        "--train-length", default=d(str(DEFAULT_TRAIN_LENGTH)), help="which train_<L>.jsonl to fine-tune on"
    )
    e.add_argument(
        "--lengths", nargs="+", default=d(None), help="test lengths (default: every test_<L>.jsonl found)"
    )
    e.add_argument("--lr", type=float, nargs="+", default=d(5e-5),
                   help="peak learning rate(s), one fine-tuning each (default: 5e-05; token-classification: 1e-4 5e-4)")
    e.add_argument("--seed", type=int, default=d(0), help="fine-tuning seed (default: 0)")
    e.add_argument("--micro-batch", type=int, default=d(None),
                   help="token-classification: examples per forward pass; gradients accumulate to --batch-size "
                        "(default: 1)")
    from ..tasks.base import RunConfig

    RunConfig.add_arguments(e, include=NIAH_SETTINGS,
                            defaults={"epochs": 1.0, "batch_size": 8, "eval_batch_size": 8} if defaults else False)
    e.add_argument(
        "--no-retrieval", dest="retrieval", action="store_false", default=d(True),
        help="skip the Avey-B statistic of how often the ranker pairs the needle's split with the question's "
             "(recorded from the scoring forward passes)",
    )
    e.add_argument(
        "--out", required=defaults,
        help="results directory (results.jsonl, table_*.md, niah.png; runs/ holds each fine-tuning's finished "
             "lengths, so an interrupted evaluation resumes where it stopped); a finished model x task x form x lr "
             "x seed is skipped, and one with other settings is refused",
    )


def resolve_form(args: argparse.Namespace, argv: list[str]) -> argparse.Namespace:
    """``args`` with the form's values (:data:`FORM_DEFAULTS`) for every setting not given in ``argv`` (the flags
    after ``evaluate``), ``args.lr`` a list. Refuses a setting the form does not use."""
    bare = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    add_evaluate_arguments(bare, defaults=False)
    given = vars(bare.parse_known_args(argv)[0])
    out = argparse.Namespace(**vars(args))
    for key, value in FORM_DEFAULTS[args.form].items():
        if key not in given:
            setattr(out, key, value)
    if not isinstance(out.lr, list):
        out.lr = [out.lr]
    if args.form == "qa" and out.micro_batch is not None:
        raise SystemExit("avey-b niah evaluate: --micro-batch applies to --form token-classification (the qa form "
                         "takes --batch-size examples per forward pass)")
    if out.micro_batch is not None and (out.micro_batch < 1 or out.batch_size % out.micro_batch):
        raise SystemExit(f"avey-b niah evaluate: --batch-size {out.batch_size} must be a multiple of --micro-batch "
                         f"{out.micro_batch} (>= 1)")
    return out


def evaluate_main(args) -> int:
    """``avey-b niah evaluate``: fine-tune each model at the train length (default 2,048) on each task's train
    split, once per learning rate, then score every test length with the whole input in one window, the chance
    level next to each score. Two forms (``--form``):

    - ``qa`` (default): an extractive-QA head (start/end logits) through the same QA harness as SQuAD
      (:mod:`avey_b.evaluation.tasks.qa`, :func:`avey_b.evaluation.finetune.train_model`), SQuAD exact match and
      F1.
    - ``token-classification``: the authors' form (the release's EncodEval LC configs): the input
      ``Question: {question}\\nContext: `` + passage + end token, a 2-label token classifier (answer tokens 1),
      32 examples per optimizer step as micro-batches of 1 with gradient accumulation, 1 epoch, learning rates
      1e-4 and 5e-4, AdamW beta (0.9, 0.95), epsilon 1e-5, weight decay 0.1; scored as EncodEval scores it: per
      example the F1 between the positions predicted 1 and the answer's positions, averaged (``score``).

    Chance level: the authors' expected score of a model that finds the needles and picks one at random, from the
    distribution of the number of needles the test set was drawn from (:func:`avey_b.data.niah.chance_level`).
    A test length past the model's maximum (a learned position table, or a RoPE model's trained window) is
    recorded as "—" (``max_length``); an out-of-memory failure as "OOM" (longer lengths then not tried).

    Results: ``OUT/results.jsonl`` (one record per model x task x form x lr x seed, appended when all its lengths
    are done, with per-example scores), ``OUT/table_<metric>.md`` (median over seeds at the best learning rate,
    95% bootstrap intervals over the test examples) and plots. Interrupted, it resumes where it stopped:
    ``OUT/runs/`` keeps each fine-tuned model and each finished length (written atomically) until the record is
    written; a rerun skips what is finished and refuses settings that differ from those of the finished work."""
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


def report_main(args) -> int:
    """``avey-b niah report``: the records of several ``niah evaluate`` runs (each a ``results.jsonl`` or its
    directory; e.g. one fine-tuning seed per process) written to ``OUT/results.jsonl`` with the tables and plots of
    them all. The same model, task, form, learning rate and seed in two inputs is an error, not a silent pick."""
    records, seen = [], {}
    for given in args.results:
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
    os.makedirs(args.out, exist_ok=True)
    write_jsonl_atomic(os.path.join(args.out, "results.jsonl"), records)
    write_tables_and_plots(records, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
