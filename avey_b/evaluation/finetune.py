"""Fine-tune one encoder on one task with one learning rate and one seed, then score it (one "cell").

    avey-b finetune --model PATH_OR_HUB_ID --task sst2 --lr 6e-5 --seed 0 --output-dir runs/x
    avey-b finetune --model bert-base-uncased --task conll2003 \\
        --train-file eng.train --eval-file eng.testa --lr 1e-4 --output-dir runs/y

Writes ``<output-dir>/results.json`` (atomically: a crash never leaves a half-written file, so the sweep can
trust its presence as "cell done").

Why a plain loop rather than ``transformers.Trainer``: the four families need different things from the
loop (IR is step-based with a two-tower InfoNCE loss, QA scoring needs the window bookkeeping, the paper
protocol swaps heads), and the loop itself is short — AdamW, linear warm-up/decay
(``get_linear_schedule_with_warmup``), gradient clipping, bf16 autocast (``--precision auto``: on CUDA and on
CPUs with native bf16). Keeping it in view makes
the protocol auditable (exactly which steps, which schedule, which seed drives what) and keeps Avey-B and
every baseline on the very same code path, with no Trainer defaults silently differing between versions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..analysis import count_parameters
from ..device import pick_device, use_bf16
from ..progress import Progress
from ..records import utc_timestamp, write_json_atomic
from ..training.checkpoint import save_pretrained_atomic
from .tasks import TASKS, get_task
from .tasks.base import (
    DataFiles,
    RunConfig,
    Task,
    autocast_ctx,
    check_model_source,
    load_model,
    load_task_tokenizer,
    pad_id_of,
)


def resolve_steps(task: Task, cfg: RunConfig, batches_per_epoch: int) -> int:
    """Optimizer steps: ``max_steps`` > ``epochs`` > the family's step budget > the family's epochs."""
    if cfg.max_steps is not None:
        return cfg.max_steps
    if cfg.epochs is not None:
        return max(1, math.ceil(cfg.epochs * batches_per_epoch))
    if task.default_steps is not None:
        return task.default_steps
    return max(1, math.ceil(task.default_epochs * batches_per_epoch))


def load_data(task: Task, files: DataFiles, cfg: RunConfig) -> tuple[Any, Any]:
    train = task.load("train", files)
    if files.holdout is not None:
        if files.eval is not None:
            raise ValueError("give either an evaluation file or --holdout, not both")
        train, evaluation = task.split_holdout(train, files.holdout)
    else:
        evaluation = task.load("eval", files)
    train = task.subsample(train, cfg.max_train_examples)
    evaluation = task.subsample(evaluation, cfg.max_eval_examples)
    if task.num_examples(train) == 0:
        raise ValueError(f"{task.name}: no training examples")
    if task.num_examples(evaluation) == 0:
        raise ValueError(f"{task.name}: no evaluation examples")
    return train, evaluation


def train_model(model, task: Task, features: list[dict[str, Any]], cfg: RunConfig, pad_id: int,
                device: torch.device) -> dict[str, Any]:
    from transformers import get_linear_schedule_with_warmup

    generator = torch.Generator().manual_seed(cfg.seed)
    loader = torch.utils.data.DataLoader(
        features, batch_size=cfg.batch_size, shuffle=True, generator=generator,
        collate_fn=lambda b: task.collate(b, pad_id),
    )
    steps = resolve_steps(task, cfg, len(loader))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * steps), steps)
    model.train()
    losses: list[float] = []
    step = 0
    tokens = torch.zeros((), dtype=torch.long, device=device)  # summed on the device: no extra sync per step
    t0 = time.perf_counter()
    progress = Progress(steps, f"finetune {task.name} (lr {cfg.lr:g}, seed {cfg.seed})")
    while step < steps:  # step budgets longer than one epoch cycle over the data (IR)
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            # real (non-padding) tokens through the encoder: both towers of an IR pair
            for k, v in batch.items():
                if k.endswith("attention_mask"):
                    tokens += v.sum()
            with autocast_ctx(device, cfg.precision):
                loss = task.loss(model, batch, cfg)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite training loss {loss.item()} at step {step} (lr {cfg.lr})")
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step += 1
            progress.update(loss=losses[-1])
            if step >= steps:
                break
    progress.close()
    seconds = time.perf_counter() - t0
    tokens = int(tokens)
    model.eval()
    tenth = max(1, len(losses) // 10)
    return {"steps": steps, "batches_per_epoch": len(loader), "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
            "autocast": "bf16" if use_bf16(cfg.precision, device) else "fp32", "loss_first": _mean(losses[:tenth]),
            "loss_last": _mean(losses[-tenth:]), "losses": [round(x, 5) for x in losses[:: max(1, steps // 100)]]}


def run_cell(model_name: str, task_name: str, cfg: RunConfig, files: DataFiles,
             tokenizer_name: str | None = None, save_model: str | None = None,
             finetuned: str | None = None) -> dict[str, Any]:
    """Fine-tune and score one cell; returns the results record (see module docstring). ``save_model``: also
    write the fine-tuned model and its tokenizer there (``from_pretrained`` loads them, head included).
    Retrieval under the paper protocol trains on MS MARCO pairs and scores zero-shot
    (:mod:`avey_b.evaluation.ir_paper`); ``finetuned`` then names a model trained so before, to score only."""
    import transformers

    from .ir_paper import is_zero_shot, run_zero_shot_cell

    if is_zero_shot(task_name, cfg):
        return run_zero_shot_cell(model_name, task_name, cfg, files, tokenizer_name, save_model, finetuned)
    if finetuned is not None:
        raise ValueError(f"--finetuned applies to retrieval under --protocol paper, not to {task_name} "
                         f"({cfg.protocol})")
    task = get_task(task_name)
    device = pick_device(cfg.device)
    check_model_source(model_name)  # a missing model is named as the model, not as its tokenizer
    tokenizer = load_task_tokenizer(tokenizer_name or model_name, cfg)
    train, evaluation = load_data(task, files, cfg)
    transformers.set_seed(cfg.seed)  # head initialisation and dropout
    model = load_model(model_name, task.head(cfg), cfg, **task.model_kwargs(train, evaluation, cfg)).to(device)

    t0 = time.perf_counter()
    features = task.train_features(train, tokenizer, cfg)
    training = train_model(model, task, features, cfg, pad_id_of(tokenizer), device)
    t1 = time.perf_counter()
    with torch.no_grad():
        metrics = task.evaluate(model, tokenizer, evaluation, cfg)
    t2 = time.perf_counter()
    if save_model:
        save_pretrained_atomic(Path(save_model), model, tokenizer)
    return {
        "model": model_name, "task": task.name, "family": task.family, "protocol": cfg.protocol,
        "lr": cfg.lr, "seed": cfg.seed, "metric": task.metric, "score": metrics[task.metric],
        "metrics": metrics, "train": training | {"examples": task.num_examples(train), "seconds": t1 - t0},
        "eval_seconds": t2 - t1, "n_parameters": count_parameters(model),
        "config": cfg.to_dict(), "data": vars(files), "device": str(device),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "finished": utc_timestamp(),
    }


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# ------------------------------------------------------------------------------------------ CLI


def add_run_arguments(p: argparse.ArgumentParser, with_defaults: bool = True) -> None:
    """Options shared by ``finetune`` and ``evaluate`` (everything but model/task/lr/seed): the data files, and one
    flag per :class:`RunConfig` field, generated from it. Without defaults (``evaluate``), only flags given
    explicitly appear in the namespace, so they override the suite file and everything else comes from the suite
    or from RunConfig."""
    g = p.add_argument_group("data (default: the task's Hugging Face datasets)")
    g.add_argument("--train-file", help="local training data (GLUE TSV/JSONL, CoNLL, SQuAD JSON, pairs or BEIR dir)")
    g.add_argument("--eval-file", help="local evaluation data (same formats; a BEIR directory for IR)")
    g.add_argument("--train-split", help="Hub / BEIR split to train on (default per task)")
    g.add_argument("--eval-split", help="Hub / BEIR split to score on (default per task)")
    g.add_argument("--holdout", type=float, help="score on this fraction of the training data, held out")
    subset = ("max_train_examples", "max_eval_examples")
    RunConfig.add_arguments(g, include=subset, defaults=with_defaults)
    t = p.add_argument_group("training and scoring (RunConfig)")
    RunConfig.add_arguments(t, exclude=("lr", "seed", *subset), defaults=with_defaults)
    t.add_argument("--tokenizer", help="tokenizer name/path when the model directory has none")


def config_from_args(args: argparse.Namespace, lr: float, seed: int) -> tuple[RunConfig, DataFiles]:
    cfg = RunConfig.from_args(args, lr=lr, seed=seed)
    files = DataFiles(train=args.train_file, eval=args.eval_file, train_split=args.train_split,
                      eval_split=args.eval_split, holdout=args.holdout)
    return cfg, files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="avey-b finetune", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Hub id or local directory of any encoder (Avey-B, BERT, ...)")
    p.add_argument("--task", required=True, choices=list(TASKS))
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", required=True, help="results.json is written here")
    p.add_argument("--save-model", metavar="DIR", help="also save the fine-tuned model + tokenizer to DIR")
    p.add_argument("--finetuned", metavar="DIR", help="retrieval under --protocol paper: score this model, trained "
                   "on MS MARCO pairs before (--save-model of such a run), zero-shot instead of training one")
    add_run_arguments(p)
    args = p.parse_args(argv)
    cfg, files = config_from_args(args, args.lr, args.seed)
    record = run_cell(args.model, args.task, cfg, files, args.tokenizer, save_model=args.save_model,
                      finetuned=args.finetuned)
    path = os.path.join(args.output_dir, "results.json")
    write_json_atomic(path, record)
    print(json.dumps({k: record[k] for k in ("model", "task", "protocol", "lr", "seed", "metric", "score")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
