"""``avey-b niah``: generate needle-in-a-haystack sets (:mod:`avey_b.data.niah`) and evaluate encoders on them,
as in the paper's appendix "Long-Range Benchmark Results".

Evaluation (``avey-b niah evaluate``): see :func:`evaluate_main`.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
import time
from typing import Any

import torch

from .. import baselines
from ..data import niah as niah_data
from ..data.niah import DEFAULT_TRAIN_LENGTH, TASKS, parse_lengths
from ..device import is_oom, pick_device
from ..progress import Progress
from ..records import append_jsonl, length_table, read_jsonl, write_text_atomic
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
    return evaluate_main(args)


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
    e.add_argument("--lr", type=float, default=5e-5)
    e.add_argument("--epochs", type=float, default=1.0)
    e.add_argument("--max-steps", type=int, default=None, help="optimizer steps (overrides --epochs)")
    e.add_argument("--batch-size", type=int, default=8)
    e.add_argument(
        "--eval-batch-size",
        type=int,
        default=8,
        help="evaluation batch at the train length; shrunk in proportion for longer inputs",
    )
    e.add_argument("--max-train-examples", type=int, default=None)
    e.add_argument("--max-eval-examples", type=int, default=None)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--device", default=None)
    e.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                   help="auto (default): bf16 autocast on CUDA and on CPUs with native bf16, fp32 elsewhere")
    e.add_argument(
        "--trust-remote-code", action="store_true", help="for Hub models with custom code (NeoBERT)"
    )
    e.add_argument(
        "--out", required=True, help="results directory (results.jsonl, table_exact.md, table_f1.md)"
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
    from .tasks.base import RunConfig, pad_id_of
    from .tasks.qa import QuestionAnsweringTask

    task_dir = os.path.join(args.data, task)
    train_rows = _read_set(os.path.join(task_dir, f"train_{parse_lengths([args.train_length])[0]}.jsonl"))
    if args.max_train_examples:
        train_rows = train_rows[: args.max_train_examples]
    lengths = _testparse_lengths(task_dir, parse_lengths(args.lengths) if args.lengths else None)

    cfg = RunConfig(
        lr=args.lr,
        seed=args.seed,
        epochs=args.epochs,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        eval_batch_size=args.eval_batch_size,
        precision=args.precision,
        device=args.device,
        trust_remote_code=args.trust_remote_code,
        max_answer_length=30,
    )
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
                with torch.no_grad():
                    scores = qa.evaluate(model, tok, examples, ecfg)
                res.update(
                    status="ok", exact=scores["exact"], f1=scores["f1"], seconds=time.perf_counter() - t1
                )
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


def _cell(res: dict[str, Any], metric: str = "exact") -> str:
    status = res.get("status")
    if status == "ok":
        return f"{res[metric]:.1f}"
    return {"max_length": "—", "oom": "OOM"}.get(status, str(status))


def format_niah_table(records: list[dict[str, Any]], metric: str = "exact") -> str:
    """Markdown: one row per (task, model), one column per length; "—" past the max length, "OOM"."""
    rows = [([r["task"], r["model"]], {int(n): _cell(res, metric) for n, res in r["results"].items()})
            for r in records]
    title = f"NIAH {'exact match' if metric == 'exact' else 'F1'} (%)"
    return title + "\n\n" + length_table(["task", "model"], rows)


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
    have = {(r["model"], r["task"]) for r in done}
    for name in args.models:
        for task in args.tasks:
            if (name, task) in have:
                print(f"{name} {task}: already in {path}, skipped", file=sys.stderr)
                continue
            rec = evaluate_model(name, task, args, log=lambda s: print(s, file=sys.stderr))
            append_jsonl(path, rec)
            append_jsonl(None, {"model": name, "task": task,
                                "exact": {k: _cell(v) for k, v in rec["results"].items()}}, echo=True)
    records = read_jsonl(path)
    for metric in ("exact", "f1"):
        write_text_atomic(os.path.join(args.out, f"table_{metric}.md"), format_niah_table(records, metric) + "\n")
    print(format_niah_table(records), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
