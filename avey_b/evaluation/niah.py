"""``avey-b niah``: generate needle-in-a-haystack sets (:mod:`avey_b.data.niah`) and evaluate encoders on them,
as in the paper's appendix "Long-Range Benchmark Results".

Evaluation (``avey-b niah evaluate``): see :func:`evaluate_main`.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import re
import sys
import time
from typing import Any

import torch

from .. import baselines
from ..data import niah as niah_data
from ..data.niah import DEFAULT_TRAIN_LENGTH, TASKS, needle_prefix, parse_lengths
from ..device import is_oom, pick_device
from ..progress import Progress
from ..records import append_jsonl, length_table, read_jsonl, write_jsonl_atomic, write_text_atomic
from ..tokenization import load_tokenizer

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
    g.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    g.add_argument(
        "--lengths",
        nargs="+",
        default=[str(n) for n in niah_data.DEFAULT_TEST_LENGTHS],
        help="test lengths in tokens (1024 or 1k = 1024 tokens)",
    )
    g.add_argument("--train-lengths", nargs="+", default=[str(DEFAULT_TRAIN_LENGTH)])
    g.add_argument("--n-train", type=int, default=1000, help="training examples per train length")
    g.add_argument("--n-test", type=int, default=200, help="test examples per test length")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--length-unit",
        choices=("input", "context"),
        default="input",
        help="count the whole model input (question+passage+special tokens) or the passage only",
    )
    g.add_argument("--format", choices=("jsonl", "hf", "both"), default="both")

    e = sub.add_parser(
        "evaluate",
        help="fine-tune at a short length, report EM/F1 per length",
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
    args = build_parser().parse_args(argv)
    if args.command == "generate":
        if args.n_train < 0 or args.n_test < 0:
            raise SystemExit("avey-b niah generate: --n-train and --n-test must be >= 0")
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
            log=lambda s: print(s, file=sys.stderr),
        )
        return 0
    if args.command == "report":
        return report_main(args)
    return evaluate_main(args)


#: The fine-tuning settings ``niah evaluate`` takes (flags generated from RunConfig); the window (``max_length``,
#: ``doc_stride``) follows from each input's length.
NIAH_SETTINGS = ("epochs", "max_steps", "batch_size", "eval_batch_size", "max_train_examples", "max_eval_examples",
                 "warmup_ratio", "weight_decay", "grad_clip", "max_answer_length", "precision", "device",
                 "trust_remote_code")


def add_evaluate_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument(
        "--data", required=True, help="directory written by `niah generate` (holds niah-1/, niah-2/)"
    )
    e.add_argument(
        "--models",
        nargs="+",
        required=True,
        help="Hub ids / local directories of pretrained encoders, or benchmark names built from "
        "config with random weights (avey-b-small, bert-base, modernbert-base, neobert, ...; "
        "see avey_b.baselines) for smoke runs",
    )
    e.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer for models built from config (and for pretrained models without one)",
    )
    e.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    e.add_argument(
        "--train-length", default=str(DEFAULT_TRAIN_LENGTH), help="which train_<L>.jsonl to fine-tune on"
    )
    e.add_argument(
        "--lengths", nargs="+", default=None, help="test lengths (default: every test_<L>.jsonl found)"
    )
    e.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (default: 5e-05)")
    e.add_argument("--seed", type=int, default=0, help="fine-tuning seed (default: 0)")
    from .tasks.base import RunConfig

    RunConfig.add_arguments(e, include=NIAH_SETTINGS, defaults={"epochs": 1.0, "batch_size": 8, "eval_batch_size": 8})
    e.add_argument(
        "--no-retrieval", dest="retrieval", action="store_false",
        help="skip the Avey-B statistic of how often the ranker pairs the needle's split with the question's "
             "(recorded from the scoring forward passes)",
    )
    e.add_argument(
        "--out", required=True,
        help="results directory (results.jsonl, table_*.md, niah.png); a model x task x seed "
             "already there is skipped",
    )


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


def _load_model_and_tokenizer(name: str, args, cfg):
    """(model with a QA head, tokenizer, max input length or None, how it was built)."""
    from .tasks.base import check_model_source, load_model, load_task_tokenizer

    spec = baselines.parse_spec(name)
    if baselines.is_registered(spec.name):
        if args.tokenizer is None:
            raise SystemExit(f"avey-b niah evaluate: model {name!r} is built from config; pass --tokenizer")
        tok = load_task_tokenizer(args.tokenizer, cfg)
        config = baselines.build_config(spec)
        config.vocab_size = max(config.vocab_size, len(tok))  # ids of the given tokenizer must fit
        if tok.pad_token_id is not None and hasattr(config, "pad_token_id"):
            config.pad_token_id = tok.pad_token_id
        config.num_labels = 2
        model = baselines.build_model(config, head="qa")
        how = "from config, random weights"
    else:
        check_model_source(name)  # a missing model is named as the model, not as its tokenizer
        tok = load_task_tokenizer(args.tokenizer or name, cfg)
        model = load_model(name, "question-answering", cfg)
        config = model.config
        how = "pretrained"
    limit = baselines.max_length(config, respect_rope_window=True)
    return model, tok, limit, how


def evaluate_model(name: str, task: str, args, log=print) -> dict[str, Any]:
    """Fine-tune ``name`` on ``task``'s train split, then EM/F1 on every test length (or "—"/"OOM")."""
    import dataclasses

    import transformers

    from .finetune import train_model
    from .metrics import squad_scores
    from .tasks.base import RunConfig, pad_id_of
    from .tasks.qa import QuestionAnsweringTask

    task_dir = os.path.join(args.data, task)
    train_rows = _read_set(os.path.join(task_dir, f"train_{parse_lengths([args.train_length])[0]}.jsonl"))
    if args.max_train_examples:
        train_rows = train_rows[: args.max_train_examples]
    lengths = _testparse_lengths(task_dir, parse_lengths(args.lengths) if args.lengths else None)

    cfg = RunConfig.from_args(args, lr=args.lr, seed=args.seed)
    device = pick_device(cfg.device)
    transformers.set_seed(args.seed)
    model, tok, limit, how = _load_model_and_tokenizer(name, args, cfg)
    model.to(device)
    qa = QuestionAnsweringTask()

    train = _squad_examples(train_rows)
    train_len = max(len(tok(e["question"], e["context"])["input_ids"]) for e in train)
    # Train on whole examples (one window each) unless the model cannot take the train length.
    cfg = dataclasses.replace(
        cfg,
        max_length=min(train_len, limit) if limit else train_len,
        doc_stride=min(128, max(0, (min(train_len, limit or train_len)) // 4)),
    )
    t0 = time.perf_counter()
    feats = qa.train_features(train, tok, cfg)
    training = train_model(model, qa, feats, cfg, pad_id_of(tok), device)
    record: dict[str, Any] = {
        "model": name,
        "built": how,
        "task": task,
        "max_length": limit,
        "train": training
        | {"examples": len(train), "input_tokens": train_len, "seconds": time.perf_counter() - t0},
        "lr": args.lr,
        "seed": args.seed,
        "device": str(device),
        "results": {},
    }
    log(
        f"{name} {task}: trained {training['steps']} steps, loss {training['loss_first']:.3f} -> "
        f"{training['loss_last']:.3f}"
    )
    stop = None
    retrieval = getattr(args, "retrieval", True) and baselines.is_avey_b(model.config)
    progress = Progress(len(lengths), f"niah {name} {task}", unit="length", every=0.0)
    for length in lengths:
        rows = _read_set(os.path.join(task_dir, f"test_{length}.jsonl"))
        if args.max_eval_examples:
            rows = rows[: args.max_eval_examples]
        examples = _squad_examples(rows)
        need = max(len(tok(e["question"], e["context"])["input_ids"]) for e in examples)
        res: dict[str, Any] = {"input_tokens_max": need, "n": len(examples)}
        if limit is not None and need > limit:
            res["status"] = "max_length"
        elif stop is not None:
            res.update(status="oom", inferred=True)
        else:
            bs = max(1, args.eval_batch_size * train_len // need)
            ecfg = dataclasses.replace(
                cfg, max_length=need, eval_batch_size=bs, doc_stride=min(128, need // 4)
            )
            try:
                t1 = time.perf_counter()
                with torch.no_grad(), RankerChoices(model) if retrieval else contextlib.nullcontext() as rc:
                    predictions = qa.predict(model, tok, examples, ecfg)
                scores = squad_scores(predictions, {e["id"]: [a["text"] for a in e["answers"]] for e in examples})
                res.update(status="ok", exact=100 * scores["exact"], f1=100 * scores["f1"],
                           seconds=time.perf_counter() - t1, needles=needle_breakdown(rows, predictions))
                if retrieval:  # the ranker's choice in those same forward passes
                    res["retrieval"] = retrieval_stats(tok, examples, rc.rows, model.config.split_size,
                                                       model.config.num_retrieved_splits)
            except Exception as exc:  # OOM is data; other errors are bugs
                if not is_oom(exc):
                    raise
                res.update(status="oom", error=str(exc).splitlines()[0][:200])
                stop = length
        record["results"][str(length)] = res
        log(f"  {task} {length}: {_cell(res)}")
        progress.update()
    progress.close()
    return record


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
#: the exact match by number of needles (:func:`needle_breakdown`)
NEEDLES = ("one_needle", "two_needles", "other_value")
TITLES = {"exact": "NIAH exact match (%)", "f1": "NIAH F1 (%)",
          "needle_to_question": "A split holding question tokens among the k retrieved for the needle's split (%)",
          "question_to_needle": "The needle's split among the k retrieved for a split holding question tokens (%)",
          "one_needle": "NIAH exact match (%), one-needle examples",
          "two_needles": "NIAH exact match (%), two-needle examples (the first or second occurrence asked for)",
          "other_value": "Two-needle examples answered with the other needle's value (%)"}


def _value(res: dict[str, Any], metric: str) -> float | None:
    """A length's score in percent (a :data:`RETRIEVAL` statistic: how often), or None."""
    if res.get("status") != "ok":
        return None
    if metric in RETRIEVAL or metric in NEEDLES:
        r = res.get("retrieval" if metric in RETRIEVAL else "needles")
        return None if r is None or r[metric] is None else 100 * r[metric]
    return res[metric]


def _cell(res: dict[str, Any], metric: str = "exact") -> str:
    value = _value(res, metric)
    if value is not None:
        return f"{value:.1f}"
    return {"max_length": "—", "oom": "OOM", "ok": ""}.get(res.get("status"), str(res.get("status")))


def _by_model(records: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["task"], r["model"]), []).append(r)
    return groups


def summarize(runs: list[dict[str, Any]], metric: str = "exact") -> dict[int, dict[str, Any]]:
    """Per length, over the seeds in ``runs`` (records of one task and model): ``mean``, ``min``, ``max`` and
    ``n`` seeds of the metric, or ``status`` when no seed has a score there ("—" past the window, "OOM")."""
    out: dict[int, dict[str, Any]] = {}
    for n in sorted({int(k) for r in runs for k in r["results"]}):
        cells = [r["results"][str(n)] for r in runs if str(n) in r["results"]]
        values = [v for c in cells if (v := _value(c, metric)) is not None]
        if values:
            out[n] = {"mean": sum(values) / len(values), "min": min(values), "max": max(values), "n": len(values)}
        else:
            out[n] = {"status": _cell(cells[0], metric)}
    return out


def format_niah_table(records: list[dict[str, Any]], metric: str = "exact") -> str:
    """Markdown: one row per (task, model), one column per length; over several seeds the mean and its range
    ``[min–max]``; "—" past the max length, "OOM". ``metric``: exact, f1 or a :data:`RETRIEVAL` statistic (Avey-B
    rows only; empty when no row has it)."""
    rows = []
    seeds = set()
    for (task, model), runs in _by_model(records).items():
        summary = summarize(runs, metric)
        if (metric in RETRIEVAL or metric in NEEDLES) and not any("mean" in c for c in summary.values()):
            continue
        seeds.add(len(runs))
        rows.append(([task, model], {n: (f"{c['mean']:.1f} [{c['min']:.0f}–{c['max']:.0f}]" if c.get("n", 1) > 1
                                         else f"{c['mean']:.1f}") if "mean" in c else c["status"]
                                     for n, c in summary.items()}))
    if not rows:
        return ""
    title = TITLES[metric]
    if seeds != {1}:
        title += f"; mean over {'/'.join(map(str, sorted(seeds)))} fine-tuning seeds [min–max]"
    return title + "\n\n" + length_table(["task", "model"], rows)


def plot_niah(records: list[dict[str, Any]], path: str, metrics: tuple[str, ...] = ("exact",)) -> str:
    """Score vs input length (log scale), one panel per task, one line per model and metric (mean over seeds, the
    band from the worst to the best seed; metrics told apart by line style), the training length marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = ("-", "--", ":")
    groups = _by_model(records)
    tasks = sorted({t for t, _ in groups})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for (t, model), runs in groups.items():
            if t != task:
                continue
            color = None
            for metric, style in zip(metrics, styles, strict=False):
                summary = {n: c for n, c in summarize(runs, metric).items() if "mean" in c}
                if not summary:
                    continue
                xs = sorted(summary)
                label = f"{os.path.basename(os.path.normpath(model))} ({len(runs)} seed{'s' * (len(runs) > 1)})"
                if len(metrics) > 1:
                    label += f", {metric.replace('_', ' ')}"
                line, = ax.plot(xs, [summary[n]["mean"] for n in xs], marker="o", linestyle=style, color=color,
                                label=label)
                color = line.get_color()
                ax.fill_between(xs, [summary[n]["min"] for n in xs], [summary[n]["max"] for n in xs],
                                color=color, alpha=0.15)
        train = {r["train"]["input_tokens"] for r in records if r["task"] == task}
        for n in train:
            ax.axvline(n, color="grey", linestyle="--", linewidth=1)
        ax.text(min(train), 102, " train length", color="grey", fontsize=8, va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 108)
        ax.set_xlabel("input length (tokens, whole input in one window)")
        ax.set_ylabel("exact match (%)")
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


def retrieval_stats(tok, examples: list[dict[str, Any]], choices: list[torch.Tensor], S: int, k: int
                    ) -> dict[str, Any]:
    """How often the ranker paired the needle's split with the question's (see :func:`needle_retrieval`), from the
    choice recorded for each example's input ``tokenizer(question, context)`` (one window each)."""
    if len(choices) != len(examples):
        raise ValueError(f"{len(choices)} recorded choices for {len(examples)} examples: one window each expected")
    q2n = n2q = 0
    for e, idx in zip(examples, choices, strict=True):
        enc = tok(e["question"], e["context"])
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
    """``avey-b niah evaluate``: fine-tune each model at the train length (default 2,048) on each task's
    train split with an extractive-QA head (start/end logits), through the same QA harness as SQuAD
    (:mod:`avey_b.evaluation.tasks.qa`, :func:`avey_b.evaluation.finetune.train_model`), then score
    SQuAD exact match and F1 on every test length, the whole input in one window. A test length past the
    model's maximum (a learned position table, or a RoPE model's trained window) is recorded as "—"
    (``max_length``); an out-of-memory failure as "OOM" (longer lengths then not tried). Results go to
    ``OUT/results.jsonl`` (one line per model x task, appended, so a finished pair is skipped on rerun)
    and ``OUT/table_exact.md`` / ``OUT/table_f1.md``."""
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.jsonl")
    done = read_jsonl(path) if os.path.exists(path) else []
    have = {(r["model"], r["task"], r["seed"]) for r in done}
    for name in args.models:
        for task in args.tasks:
            if (name, task, args.seed) in have:
                print(f"{name} {task} seed {args.seed}: already in {path}, skipped", file=sys.stderr)
                continue
            rec = evaluate_model(name, task, args, log=lambda s: print(s, file=sys.stderr))
            append_jsonl(path, rec)
            append_jsonl(None, {"model": name, "task": task, "seed": args.seed,
                                "exact": {k: _cell(v) for k, v in rec["results"].items()}}, echo=True)
    write_report(read_jsonl(path), args.out)
    return 0


def report_main(args) -> int:
    """``avey-b niah report``: the records of several ``niah evaluate`` runs (each a ``results.jsonl`` or its
    directory; e.g. one fine-tuning seed per process) written to ``OUT/results.jsonl`` with the tables and plots of
    them all. The same model, task and seed in two inputs is an error, not a silent pick."""
    records, seen = [], {}
    for given in args.results:
        path = os.path.join(given, "results.jsonl") if os.path.isdir(given) else given
        if not os.path.isfile(path):
            raise SystemExit(f"avey-b niah report: no results at {path} (written by `avey-b niah evaluate --out`)")
        for rec in read_jsonl(path):
            key = (rec["model"], rec["task"], rec["seed"])
            if key in seen:
                raise SystemExit(f"avey-b niah report: {key[0]} {key[1]} seed {key[2]} is in both {seen[key]} and "
                                 f"{path}")
            seen[key] = path
            records.append(rec)
    os.makedirs(args.out, exist_ok=True)
    write_jsonl_atomic(os.path.join(args.out, "results.jsonl"), records)
    write_report(records, args.out)
    return 0


def write_report(records: list[dict[str, Any]], out: str) -> None:
    """``table_exact.md``, ``table_f1.md``, ``table_<breakdown by needles>.md``, ``table_<retrieval statistic>.md``
    (Avey-B), ``niah.png`` and ``niah_by_needles.png`` in ``out``."""
    for metric in ("exact", "f1", *NEEDLES, *RETRIEVAL):
        table = format_niah_table(records, metric)
        if table:
            write_text_atomic(os.path.join(out, f"table_{metric}.md"), table + "\n")
    print(format_niah_table(records), file=sys.stderr)
    try:
        plot_niah(records, os.path.join(out, "niah.png"))
        plot_niah(records, os.path.join(out, "niah_by_needles.png"), metrics=("one_needle", "two_needles"))
    except ImportError:  # matplotlib is the `bench` extra's
        print("matplotlib not installed: no plot (pip install matplotlib)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
