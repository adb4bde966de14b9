"""``avey-b niah``: generate needle-in-a-haystack sets (:mod:`avey_b.data.niah`) and evaluate encoders on them,
as in the paper's appendix "Long-Range Benchmark Results".

Evaluation (``avey-b niah evaluate``): see :func:`evaluate_main`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .. import model_spec
from ..data import niah as niah_data
from ..data.niah import DEFAULT_TRAIN_LENGTH, NIAH_TASKS, needle_prefix, parse_lengths
from ..device import is_oom, pick_device
from ..files import content_hash, load_json
from ..progress import Progress
from ..records import (
    append_jsonl,
    length_table,
    read_jsonl,
    slug,
    write_json_atomic,
    write_jsonl_atomic,
    write_text_atomic,
)
from ..tokenization import load_tokenizer
from .tasks.base import Task

# ----------------------------------------------------------------------------------------- CLI


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
FORMS = ("qa", "token-classification")
#: What each form changes when not told otherwise. ``qa``: this library's extractive-QA head (start/end logits).
#: ``token-classification``: the authors' (the release's EncodEval LC configs): a 2-label token classifier, 32
#: examples per optimizer step as micro-batches of 1 with gradient accumulation, 1 epoch, learning rates
#: {1e-4, 5e-4}, AdamW with beta = (0.9, 0.95), epsilon 1e-5, weight decay 0.1.
FORM_DEFAULTS: dict[str, dict[str, Any]] = {
    "qa": {"lr": [5e-5], "batch_size": 8, "weight_decay": 0.0, "micro_batch": None},
    "token-classification": {"lr": [1e-4, 5e-4], "batch_size": 32, "weight_decay": 0.1, "micro_batch": 1},
}
#: AdamW's (beta, epsilon) per form: the token-classification form takes the authors' (every EncodEval config)
OPTIMIZER = {"qa": {"betas": (0.9, 0.999), "eps": 1e-8}, "token-classification": {"betas": (0.9, 0.95), "eps": 1e-5}}


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
        "see avey_b.model_spec) for smoke runs",
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
    from .tasks.base import RunConfig

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


def _read_set(path: str) -> list[dict[str, Any]]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"NIAH file not found: {path} (run `avey-b niah generate` first)")
    return read_jsonl(path)


def _squad_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NIAH rows -> the QA harness's example format (``answers`` as a list of {text, start})."""
    return [
        {
            "id": r["id"],
            "question": r["question"],
            "context": r["context"],
            "answers": [
                {"text": t, "start": s}
                for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"], strict=True)
            ],
        }
        for r in rows
    ]


def _testparse_lengths(task_dir: str, wanted: list[int] | None) -> list[int]:
    found = sorted(int(m.group(1)) for f in os.listdir(task_dir) if (m := re.match(r"test_(\d+)\.jsonl$", f)))
    if wanted is None:
        return found
    missing = [n for n in wanted if n not in found]
    if missing:
        raise FileNotFoundError(f"{task_dir}: no test set for lengths {missing} (found {found})")
    return wanted


HEAD_CLASS = {"qa": "AutoModelForQuestionAnswering", "token-classification": "AutoModelForTokenClassification"}


def _load_model_and_tokenizer(name: str, args, cfg, weights: str | None = None):
    """(model with the form's head, tokenizer, max input length or None, how it was built). ``weights``: a
    fine-tuned model saved by an earlier, interrupted run of this cell, loaded instead."""
    import transformers

    from .tasks.base import check_model_source, load_model, load_task_tokenizer

    head = HEAD_CLASS[args.form]
    spec = model_spec.parse_spec(name)
    if model_spec.is_registered(spec.name):
        if args.tokenizer is None:
            raise SystemExit(f"avey-b niah evaluate: model {name!r} is built from config; pass --tokenizer")
        tok = load_task_tokenizer(args.tokenizer, cfg)
        how = "from config, random weights"
        if weights:
            model = getattr(transformers, head).from_pretrained(weights)
        else:
            config = model_spec.build_config(spec)
            config.vocab_size = max(config.vocab_size, len(tok))  # ids of the given tokenizer must fit
            if tok.pad_token_id is not None and hasattr(config, "pad_token_id"):
                config.pad_token_id = tok.pad_token_id
            config.num_labels = 2
            model = getattr(transformers, head).from_config(config)
    else:
        check_model_source(name)  # a missing model is named as the model, not as its tokenizer
        tok = load_task_tokenizer(args.tokenizer or name, cfg)
        how = "pretrained"
        if weights:
            model = getattr(transformers, head).from_pretrained(weights, trust_remote_code=cfg.trust_remote_code)
        else:
            model = (load_model(name, "question-answering", cfg) if args.form == "qa"
                     else load_model(name, "token-classification", cfg, num_labels=2))
    limit = model_spec.max_length(model.config, respect_rope_window=True)
    return model, tok, limit, how


# ----------------------------------------------------------------------------- the token-classification form


def answer_labels(offsets, sequence_ids, start: int, end: int) -> list[int]:
    """The authors' labels of one input: 1 on the passage tokens holding characters of ``[start, end)`` (the
    answer), 0 on every other token, question and end token included."""
    return [int(sid == 1 and b > a and a < end and b > start) for sid, (a, b) in zip(sequence_ids, offsets,
                                                                                      strict=True)]


def token_classification_features(tok, rows: list[dict[str, Any]], max_length: int | None = None
                                  ) -> list[dict[str, Any]]:
    """The authors' inputs (:func:`avey_b.data.niah.prompt_encoding`) with their labels; the passage truncated to
    ``max_length`` tokens when given (the answer then possibly cut, as EncodEval does)."""
    feats = []
    for r in rows:
        enc = niah_data.prompt_encoding(tok, r["question"], r["context"], return_offsets_mapping=True,
                                        truncation="only_second" if max_length else False, max_length=max_length)
        start = r["answers"]["answer_start"][0]
        labels = answer_labels(enc["offset_mapping"], enc.sequence_ids(), start, start + len(r["answers"]["text"][0]))
        feats.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels})
    return feats


def authors_token_score(predicted, gold) -> float:
    """EncodEval's per-example QA score: the F1 between the positions predicted 1 and the positions labelled 1,
    over the whole input (question and end token included); an empty set counts as ``{0}`` (position 0)."""
    from .metrics import token_set_f1

    return token_set_f1(set(predicted) or {0}, set(gold) or {0})


class _AnswerTokens(Task):
    """The authors' NIAH fine-tuning as a task of :func:`avey_b.evaluation.finetune.train_model`: prebuilt
    features (:func:`token_classification_features`), the token classifier's own loss (the cross-entropy over the
    labelled tokens of a micro-batch, weighted by their share of the step's labelled tokens by ``train_model``)."""

    name, family = "niah-token-classification", "LC"


def train_token_classifier(model, features: list[dict[str, Any]], cfg, micro_batch: int, pad_id: int,
                           device: torch.device) -> dict[str, Any]:
    """Fine-tune as the authors' LC configs do, through the fine-tuning loop every task uses
    (:func:`avey_b.evaluation.finetune.train_model`): each optimizer step takes ``cfg.batch_size`` examples as
    micro-batches of ``micro_batch`` with gradient accumulation, the loss the cross-entropy averaged over every
    labelled token of the step (how the Trainer normalises accumulated steps since transformers 4.46); AdamW with
    the authors' beta and epsilon (:data:`OPTIMIZER`) and ``cfg.weight_decay`` (not on biases and norms, as the
    Trainer does); linear warm-up over ``cfg.warmup_ratio`` of the steps, then linear decay; clipping at
    ``cfg.grad_clip``; ``cfg.epochs`` (default 1) epochs in a seeded random order, or ``cfg.max_steps`` steps."""
    from .finetune import train_model

    opt = OPTIMIZER["token-classification"]
    cfg = dataclasses.replace(cfg, adam_beta1=opt["betas"][0], adam_beta2=opt["betas"][1], adam_epsilon=opt["eps"],
                              grad_accumulation=math.ceil(cfg.batch_size / micro_batch))
    record = train_model(model, _AnswerTokens(), features, cfg, pad_id, device)
    return record | {"micro_batch": micro_batch, "accumulation": cfg.grad_accumulation}


@torch.no_grad()
def predict_answer_tokens(model, feats: list[dict[str, Any]], batch_size: int, pad_id: int, precision: str
                          ) -> list[set[int]]:
    """Per input, the positions the token classifier labels 1 (padding never counts)."""
    from .tasks.base import autocast_ctx, model_inputs, pad_batch

    device = next(model.parameters()).device
    out = []
    for i in range(0, len(feats), batch_size):
        chunk = [{k: f[k] for k in ("input_ids", "attention_mask")} for f in feats[i:i + batch_size]]
        b = {k: v.to(device) for k, v in pad_batch(chunk, pad_id).items()}
        with autocast_ctx(device, precision):
            logits = model(**model_inputs(b)).logits
        pred = (logits.float().argmax(-1) == 1) & b["attention_mask"].bool()
        out.extend({int(j) for j in row.nonzero().flatten()} for row in pred.cpu())
    return out


def needle_token_sets(rows: list[dict[str, Any]], feats: list[dict[str, Any]], tok) -> list[list[set[int]]]:
    """Per example, the token positions of every needle's value in the authors' input, in text order."""
    out = []
    for r, f in zip(rows, feats, strict=True):
        enc = niah_data.prompt_encoding(tok, r["question"], r["context"], return_offsets_mapping=True)
        if len(enc["input_ids"]) != len(f["input_ids"]):
            raise ValueError(f"{r['id']}: truncated input; needle positions need the whole passage")
        prefix = len(needle_prefix(r["key"]))
        sets = []
        for s in r["needle_char_starts"]:
            a = s + prefix
            b = a + len(r["context"][a:].split(" ", 1)[0])
            sets.append({i for i, y in enumerate(answer_labels(enc["offset_mapping"], enc.sequence_ids(), a, b)) if y})
        out.append(sets)
    return out


def score_token_classification(model, tok, rows: list[dict[str, Any]], cfg, batch_size: int) -> dict[str, Any]:
    """The authors' score of one test set (mean of :func:`authors_token_score`, in %), per example, and the
    breakdown by number of needles (``other_value``: a multi-needle example labelled exactly as another needle)."""
    from .tasks.base import pad_id_of

    feats = token_classification_features(tok, rows)
    predicted = predict_answer_tokens(model, feats, batch_size, pad_id_of(tok), cfg.precision)
    scores = [authors_token_score(p, {i for i, y in enumerate(f["labels"]) if y == 1})
              for p, f in zip(predicted, feats, strict=True)]
    needles = needle_token_sets(rows, feats, tok)
    one = [s for s, r in zip(scores, rows, strict=True) if r["num_needles"] == 1]
    many = [i for i, r in enumerate(rows) if r["num_needles"] > 1]
    asked = [(rows[i]["ordinal"] or 1) - 1 for i in range(len(rows))]
    other = [any(predicted[i] == n for j, n in enumerate(needles[i]) if j != asked[i]) for i in many]
    # what labelling every needle scores: the token F1 gives it partial credit (2/3 with two needles), above chance
    every = [authors_token_score(set().union(*n), {i for i, y in enumerate(f["labels"]) if y == 1})
             for n, f in zip(needles, feats, strict=True)]
    return {"score": 100 * sum(scores) / len(scores), "per_example": {"score": [round(x, 4) for x in scores]},
            "every_needle": 100 * sum(every) / len(every),
            "needles": {"one_needle": sum(one) / len(one) if one else None,
                        "two_needles": sum(scores[i] for i in many) / len(many) if many else None,
                        "other_value": sum(other) / len(other) if other else None,
                        "n_one": len(one), "n_two": len(many)}}


# ----------------------------------------------------------------------------------------- one fine-tuning


def run_settings(name: str, task: str, lr: float, args, cfg, lengths: list[int]) -> dict[str, Any]:
    """What defines one fine-tuning and its scores: a rerun must match it to reuse them (the device, the scoring
    batch and whether the ranker statistic is recorded do not change a score and are left out)."""
    task_dir = os.path.join(args.data, task)
    train_length = parse_lengths([args.train_length])[0]
    run = {k: v for k, v in cfg.to_dict().items() if k not in ("device", "eval_batch_size", "lr", "seed")}
    return {"model": name, "task": task, "form": args.form, "lr": lr, "seed": args.seed,
            "tokenizer": args.tokenizer, "run_config": run, "micro_batch": args.micro_batch,
            "optimizer": {k: list(v) if isinstance(v, tuple) else v for k, v in OPTIMIZER[args.form].items()},
            "train": {"length": train_length,
                      "sha256": content_hash(os.path.join(task_dir, f"train_{train_length}.jsonl"))},
            "test": {str(n): content_hash(os.path.join(task_dir, f"test_{n}.jsonl")) for n in lengths}}


def settings_differ(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two settings."""
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out += settings_differ(x, y, f"{prefix}{k}.")
        elif x != y:
            out.append(f"{prefix}{k}")
    return out


def _refuse_changed(where: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    if old is None:
        raise SystemExit(f"avey-b niah evaluate: {where} holds results without their settings (an older version): "
                         "use another --out rather than mix them")
    changed = settings_differ(old, new)
    if changed:
        raise SystemExit(f"avey-b niah evaluate: {where} was run with other settings ({', '.join(changed)}); use "
                         "another --out, or the same settings to resume, rather than mix them")


def run_directory(out: str, name: str, task: str, form: str, lr: float, seed: int) -> str:
    return os.path.join(out, "runs", slug(name), task, form, f"lr{lr:g}-seed{seed}")


def evaluate_model(name: str, task: str, args, lr: float | None = None, log=print) -> dict[str, Any]:
    """Fine-tune ``name`` on ``task``'s train split in ``args.form``, then score every test length (or "—"/"OOM").

    Resumable: the run directory (:func:`run_directory`) holds ``settings.json``, the fine-tuned model and
    ``train.json`` once training finished, and one ``length_<L>.json`` per scored length, each written atomically;
    a rerun reuses them (a run with other settings is refused). The model is deleted once every length is done."""

    import transformers

    from ..records import save_pretrained_atomic
    from .finetune import train_model
    from .tasks.base import RunConfig, pad_id_of
    from .tasks.qa import QuestionAnsweringTask

    lr = args.lr[0] if lr is None else lr
    task_dir = os.path.join(args.data, task)
    train_rows = _read_set(os.path.join(task_dir, f"train_{parse_lengths([args.train_length])[0]}.jsonl"))
    if args.max_train_examples:
        train_rows = train_rows[: args.max_train_examples]
    lengths = _testparse_lengths(task_dir, parse_lengths(args.lengths) if args.lengths else None)

    cfg = RunConfig.from_args(args, lr=lr, seed=args.seed)
    settings = run_settings(name, task, lr, args, cfg, lengths)
    run_dir = run_directory(args.out, name, task, args.form, lr, args.seed)
    settings_path = os.path.join(run_dir, "settings.json")
    if os.path.exists(settings_path):
        _refuse_changed(run_dir, load_json(settings_path), settings)
    else:
        write_json_atomic(settings_path, settings)
    weights, train_path = os.path.join(run_dir, "model"), os.path.join(run_dir, "train.json")
    trained = os.path.exists(train_path)

    device = pick_device(cfg.device)
    transformers.set_seed(args.seed)
    model, tok, limit, how = _load_model_and_tokenizer(name, args, cfg, weights=weights if trained else None)
    model.to(device)
    qa = QuestionAnsweringTask()
    train = _squad_examples(train_rows)
    if args.form == "qa":
        train_len = max(len(tok(e["question"], e["context"])["input_ids"]) for e in train)
        # Train on whole examples (one window each) unless the model cannot take the train length.
        cfg = dataclasses.replace(
            cfg,
            max_length=min(train_len, limit) if limit else train_len,
            doc_stride=min(128, max(0, (min(train_len, limit or train_len)) // 4)),
        )
    else:
        train_len = max(len(niah_data.prompt_encoding(tok, e["question"], e["context"])["input_ids"]) for e in train)
    if trained:
        training = load_json(train_path)
        log(f"{name} {task} lr {lr:g} seed {args.seed}: fine-tuned earlier ({run_dir}), resuming the scoring")
    else:
        t0 = time.perf_counter()
        if args.form == "qa":
            training = train_model(model, qa, qa.train_features(train, tok, cfg), cfg, pad_id_of(tok), device)
        else:
            feats = token_classification_features(tok, train_rows, max_length=limit)
            training = train_token_classifier(model, feats, cfg, args.micro_batch, pad_id_of(tok), device)
        training |= {"examples": len(train), "input_tokens": train_len, "seconds": time.perf_counter() - t0}
        save_pretrained_atomic(Path(weights), model, None)  # first the model, then the mark that training is done
        write_json_atomic(train_path, training)
        log(f"{name} {task} lr {lr:g}: trained {training['steps']} steps, loss {training['loss_first']:.3f} -> "
            f"{training['loss_last']:.3f}")
    record: dict[str, Any] = {
        "model": name,
        "built": how,
        "task": task,
        "form": args.form,
        "max_length": limit,
        "train": training,
        "lr": lr,
        "seed": args.seed,
        "device": str(device),
        "settings": settings,
        "results": {},
    }
    stop = None
    retrieval = getattr(args, "retrieval", True) and model_spec.is_avey_b(model.config)
    progress = Progress(len(lengths), f"niah {name} {task}", unit="length", every=0.0)
    for length in lengths:
        path = os.path.join(run_dir, f"length_{length}.json")
        if os.path.exists(path):
            res = load_json(path)
        else:
            res = score_length(model, tok, task_dir, length, args, cfg, limit, train_len, stop, retrieval)
            write_json_atomic(path, res)
        if res["status"] == "oom" and stop is None:
            stop = length
        record["results"][str(length)] = res
        log(f"  {task} {length}: {_cell(res, HEADLINE[args.form])} (chance {_chance_text(res)})")
        progress.update()
    progress.close()
    return record


def score_length(model, tok, task_dir: str, length: int, args, cfg, limit, train_len: int, stop,
                 retrieval: bool) -> dict[str, Any]:
    """One test length's result: the form's scores with the chance level, "max_length" past the model's window,
    or "oom" (``stop``: an earlier length ran out of memory, so this one is not tried)."""
    import dataclasses

    from .metrics import squad_exact, squad_f1, squad_scores
    from .tasks.qa import QuestionAnsweringTask

    rows = _read_set(os.path.join(task_dir, f"test_{length}.jsonl"))
    if args.max_eval_examples:
        rows = rows[: args.max_eval_examples]
    examples = _squad_examples(rows)
    if args.form == "qa":
        need = max(len(tok(e["question"], e["context"])["input_ids"]) for e in examples)
    else:
        need = max(len(niah_data.prompt_encoding(tok, e["question"], e["context"])["input_ids"]) for e in examples)
    # the chance level as the authors compute it (from the stated distribution), and that of these very examples
    res: dict[str, Any] = {"input_tokens_max": need, "n": len(examples),
                           "chance": 100 * niah_data.set_chance_level(rows),
                           "chance_realized": 100 * sum(1 / r["num_needles"] for r in rows) / len(rows)}
    if limit is not None and need > limit:
        return res | {"status": "max_length"}
    if stop is not None:
        return res | {"status": "oom", "inferred": True}
    bs = max(1, args.eval_batch_size * train_len // need)
    try:
        t1 = time.perf_counter()
        with RankerChoices(model) if retrieval else contextlib.nullcontext() as rc:
            if args.form == "qa":
                ecfg = dataclasses.replace(cfg, max_length=need, eval_batch_size=bs, doc_stride=min(128, need // 4))
                with torch.no_grad():
                    predictions = QuestionAnsweringTask().predict(model, tok, examples, ecfg)
                scores = squad_scores(predictions, {e["id"]: [a["text"] for a in e["answers"]] for e in examples})
                res.update(status="ok", exact=100 * scores["exact"], f1=100 * scores["f1"],
                           per_example={m: [round(fn(predictions[e["id"]], e["answers"][0]["text"]), 4)
                                            for e in examples] for m, fn in (("exact", squad_exact), ("f1", squad_f1))},
                           needles=needle_breakdown(rows, predictions))
            else:
                res.update(status="ok", **score_token_classification(model, tok, rows, cfg, bs))
        res["seconds"] = time.perf_counter() - t1
        if retrieval:  # the ranker's choice in those same forward passes
            encode = None if args.form == "qa" else (lambda q, c: niah_data.prompt_encoding(tok, q, c))
            res["retrieval"] = retrieval_stats(tok, examples, rc.rows, model.config.split_size,
                                               model.config.num_retrieved_splits, encode=encode)
    except Exception as exc:  # OOM is data; other errors are bugs
        if not is_oom(exc):
            raise
        res.update(status="oom", error=str(exc).splitlines()[0][:200])
    return res


def needle_breakdown(rows: list[dict[str, Any]], predictions: dict[str, str]) -> dict[str, Any]:
    """Exact match split by the number of needles, and what a wrong answer to a two-needle question was.

    A value is the passage's only span with digits, so a model can find *a* needle without reading the key; a
    two-needle question also needs the occurrence asked for. ``other_value``: the fraction of two-needle examples
    answered with the other needle's value (the right kind of span, the wrong occurrence)."""
    from .metrics import squad_exact

    one = [r for r in rows if r["num_needles"] == 1]
    two = [r for r in rows if r["num_needles"] == 2]

    def exact(group):
        return None if not group else sum(squad_exact(predictions[r["id"]], r["answers"]["text"][0])
                                          for r in group) / len(group)

    def other(r):  # the value of the needle not asked for ("The value of KEY is VALUE .")
        prefix = len(needle_prefix(r["key"]))
        asked = r["answers"]["answer_start"][0] - prefix
        start = next(s for s in r["needle_char_starts"] if s != asked) + prefix
        return r["context"][start:].split(" ", 1)[0]

    return {"one_needle": exact(one), "two_needles": exact(two),
            "other_value": None if not two else sum(squad_exact(predictions[r["id"]], other(r)) for r in two) / len(two),
            "n_one": len(one), "n_two": len(two)}


#: the retrieval statistics of :func:`needle_retrieval`, reported like the scores
RETRIEVAL = ("needle_to_question", "question_to_needle")
#: the score by number of needles (:func:`needle_breakdown`, :func:`score_token_classification`)
NEEDLES = ("one_needle", "two_needles", "other_value")
#: each form's headline score
HEADLINE = {"qa": "exact", "token-classification": "score"}
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


def _cell(res: dict[str, Any], metric: str = "exact") -> str:
    value = _value(res, metric)
    if value is not None:
        return f"{value:.1f}"
    return {"max_length": "—", "oom": "OOM", "ok": ""}.get(res.get("status"), str(res.get("status")))


def _chance_text(res: dict[str, Any]) -> str:
    return "?" if res.get("chance") is None else f"{res['chance']:.1f}"


def _form(rec: dict[str, Any]) -> str:
    return rec.get("form", "qa")  # records written before the forms existed are the qa form's


def _by_model(records: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["task"], r["model"], _form(r)), []).append(r)
    return groups


def bootstrap_interval(per_seed: list[list[float]], level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of the median over seeds of the mean score, resampling the test examples
    (the same examples for every seed, so one resample draws the same indices for all): ``per_seed`` holds one
    list of per-example scores per seed. In the scores' unit."""
    import numpy as np

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
    import statistics

    out: dict[int, dict[str, Any]] = {}
    headline = HEADLINE[_form(runs[0])]
    for n in sorted({int(k) for r in runs for k in r["results"]}):
        cells = [(r["lr"], r["results"][str(n)]) for r in runs if str(n) in r["results"]]
        by_lr: dict[float, list[dict[str, Any]]] = {}
        for lr, c in cells:
            if _value(c, headline) is not None:
                by_lr.setdefault(lr, []).append(c)
        if not by_lr:
            out[n] = {"status": _cell(cells[0][1], metric)}
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


class RankerChoices:
    """Records the ranker's choice of every forward pass inside ``with RankerChoices(model) as rc:``: ``rc.rows`` holds
    one ``(n, k)`` tensor per input row, in order (retrieved split ids, -1 where a slot is empty)."""

    def __init__(self, model):
        self.ranker = next(m for m in model.modules() if m.__class__.__name__ == "Ranker")
        self.rows: list[torch.Tensor] = []

    def _hook(self, module, inputs, out) -> None:
        # Ranker.forward returns (unit vectors, idx, ok): idx (B, n, k) the retrieved splits, ok whether a slot holds
        # one. Rows of a padded batch hold their real tokens first (the model moves them there), so split i of a row
        # is split i of its unpadded input.
        self.rows.extend(out[1].masked_fill(~out[2], -1).cpu().unbind(0))

    def __enter__(self) -> RankerChoices:
        self.handle = self.ranker.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


def retrieval_stats(tok, examples: list[dict[str, Any]], choices: list[torch.Tensor], S: int, k: int,
                    encode=None) -> dict[str, Any]:
    """How often the ranker paired the needle's split with the question's (see :func:`needle_retrieval`), from the
    choice recorded for each example's input (one window each): ``encode(question, context)``, by default
    ``tokenizer(question, context)``."""
    encode = encode or tok
    if len(choices) != len(examples):
        raise ValueError(f"{len(choices)} recorded choices for {len(examples)} examples: one window each expected")
    q2n = n2q = 0
    for e, idx in zip(examples, choices, strict=True):
        enc = encode(e["question"], e["context"])
        q_splits = sorted({i // S for i, s in enumerate(enc.sequence_ids(0)) if s == 0})
        needle = enc.char_to_token(0, e["answers"][0]["start"], sequence_index=1) // S
        q2n += any(needle in idx[q].tolist() for q in q_splits)
        n2q += any(q in idx[needle].tolist() for q in q_splits)
    return {"question_to_needle": q2n / len(examples), "needle_to_question": n2q / len(examples),
            "n": len(examples), "split_size": S, "k": k}


@torch.no_grad()
def needle_retrieval(model, tok, examples: list[dict[str, Any]], device) -> dict[str, Any]:
    """How often Avey-B's ranker pairs the needle's split with the question's (the paper credits the ranker with
    the length generalization on NIAH). One input at a time, the whole input in one window:
    ``needle_to_question`` is the fraction of examples where a split holding question tokens is among the ``k``
    splits retrieved for the split holding the answer's first token — what brings the question to the tokens the
    QA head scores; ``question_to_needle`` the reverse. With the unidirectional ranker (the paper's choice:
    candidates precede the split) and the question first, only ``needle_to_question`` can happen.
    ``niah evaluate`` records the same statistic from its scoring forward passes (:class:`RankerChoices`)."""
    with RankerChoices(model) as rc:
        for e in examples:
            enc = tok(e["question"], e["context"], return_tensors="pt")
            model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device))
    return retrieval_stats(tok, examples, rc.rows, model.config.split_size, model.config.num_retrieved_splits)


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
    from .tasks.base import RunConfig

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.jsonl")
    done = {(r["model"], r["task"], _form(r), r["lr"], r["seed"]): r
            for r in (read_jsonl(path) if os.path.exists(path) else [])}
    for name in args.models:
        for task in args.tasks:
            for lr in args.lr:
                key = (name, task, args.form, lr, args.seed)
                if key in done:
                    task_dir = os.path.join(args.data, task)
                    lengths = _testparse_lengths(task_dir, parse_lengths(args.lengths) if args.lengths else None)
                    settings = run_settings(name, task, lr, args, RunConfig.from_args(args, lr=lr, seed=args.seed),
                                            lengths)
                    _refuse_changed(f"{path} ({name} {task} {args.form} lr {lr:g} seed {args.seed})",
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
                                    metric: {k: _cell(v, metric) for k, v in rec["results"].items()},
                                    "chance": {k: _chance_text(v) for k, v in rec["results"].items()}}, echo=True)
    write_report(read_jsonl(path), args.out)
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
            key = (rec["model"], rec["task"], _form(rec), rec["lr"], rec["seed"])
            if key in seen:
                raise SystemExit(f"avey-b niah report: {key[0]} {key[1]} {key[2]} lr {key[3]:g} seed {key[4]} is in "
                                 f"both {seen[key]} and {path}")
            seen[key] = path
            records.append(rec)
    os.makedirs(args.out, exist_ok=True)
    write_jsonl_atomic(os.path.join(args.out, "results.jsonl"), records)
    write_report(records, args.out)
    return 0


def write_report(records: list[dict[str, Any]], out: str) -> None:
    """``table_exact.md``, ``table_f1.md`` (qa form), ``table_score.md`` (token-classification form),
    ``table_<breakdown by needles>.md``, ``table_<retrieval statistic>.md`` (Avey-B), ``niah.png`` and
    ``niah_by_needles.png`` in ``out``."""
    for metric in ("exact", "f1", "score", *NEEDLES, *RETRIEVAL):
        table = format_niah_table(records, metric)
        if table:
            write_text_atomic(os.path.join(out, f"table_{metric}.md"), table + "\n")
    for metric in sorted({HEADLINE[_form(r)] for r in records}):
        print(format_niah_table(records, metric), file=sys.stderr)
    try:
        plot_niah(records, os.path.join(out, "niah.png"))
        plot_niah(records, os.path.join(out, "niah_by_needles.png"), metrics=("one_needle", "two_needles"))
    except ImportError:  # matplotlib is the `bench` extra's
        print("matplotlib not installed: no plot (pip install matplotlib)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
