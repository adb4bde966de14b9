"""Fine-tune one encoder on one task with one learning rate and one seed, then score it (one "cell").

    avey-b finetune --model PATH_OR_HUB_ID --task sst2 --lr 6e-5 --seed 0 --output-dir runs/x
    avey-b finetune --model bert-base-uncased --task conll2003 \\
        --train-file eng.train --eval-file eng.testa --lr 1e-4 --output-dir runs/y

Writes ``<output-dir>/results.json`` (atomically: a crash never leaves a half-written file, so the sweep can
trust its presence as "cell done").

Why a plain loop rather than ``transformers.Trainer``: the four families need different things from the
loop (IR is step-based with a two-tower InfoNCE loss, QA scoring needs the window bookkeeping, the paper
protocol swaps heads), and the loop itself is short — AdamW (the cell's β, ε and weight decay), linear
warm-up/decay (``get_linear_schedule_with_warmup``, counted in optimizer steps), gradient accumulation, gradient
clipping, bf16 autocast (``--precision auto``: on CUDA and on CPUs with native bf16), weights in float32 or bf16.
Keeping it in view makes the protocol auditable (exactly which steps, which schedule, which seed drives what) and
keeps Avey-B and every baseline on the very same code path, with no Trainer defaults silently differing between
versions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import get_linear_schedule_with_warmup

from avey_b.configs import from_args
from avey_b.utils.counting import count_parameters
from avey_b.utils.device import pick_device, start_runtime, use_bf16
from avey_b.utils.progress import Progress
from avey_b.utils.records import save_pretrained_atomic, utc_timestamp, write_json_atomic
from avey_b.utils.shared_cpu import thread_tuner

from .ir_paper import is_zero_shot, run_zero_shot_cell
from .protocol import avey_b_settings, decayed_parameter_names, run_config
from .settings import DataFiles, FinetuneOptions, RunConfig, given_data, given_settings
from .tasks import get_task
from .tasks.base import (
    Task,
    autocast_ctx,
    check_model_source,
    end_token,
    input_limit,
    input_limit_rule,
    load_model,
    load_task_tokenizer,
    pad_id_of,
    resolve_steps,
    use_encodeval_pad,
)


def load_data(task: Task, files: DataFiles, cfg: RunConfig) -> tuple[Any, Any]:
    train = task.load("train", files, protocol=cfg.protocol)
    if files.holdout is not None:
        if files.eval is not None:
            raise ValueError("give either an evaluation file or --holdout, not both")
        train, evaluation = task.split_holdout(train, files.holdout)
    else:
        evaluation = task.load("eval", files, protocol=cfg.protocol)
        if cfg.protocol == "paper":
            train = paper_train_part(task, train)
    train = task.subsample(train, cfg.max_train_examples)
    evaluation = task.subsample(evaluation, cfg.max_eval_examples)
    if task.num_examples(train) == 0:
        raise ValueError(f"{task.name}: no training examples")
    if task.num_examples(evaluation) == 0:
        raise ValueError(f"{task.name}: no evaluation examples")
    return train, evaluation


def paper_train_part(task: Task, train: Any) -> Any:
    """EncodEval scores SC and QA on the official validation split and trains on 95% of the training split, the
    other 5% held out as its validation set: ``datasets``' ``train_test_split(train_size=0.95, seed=42)``, whose
    permutation this reuses (TC and IR keep their whole training split)."""
    if task.family not in ("SC", "QA"):
        return train
    import datasets

    n = task.num_examples(train)
    if n < 2:
        return train
    index = datasets.Dataset.from_dict({"i": list(range(n))}).train_test_split(train_size=0.95, seed=42)
    return [train[i] for i in index["train"]["i"]]


def micro_batches(batch: list[Any], accumulation: int) -> list[list[Any]]:
    """The examples of one optimizer step cut into ``accumulation`` consecutive micro-batches of nearly equal size
    (fewer when the batch has fewer examples)."""
    n = min(accumulation, len(batch))
    size, extra = divmod(len(batch), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        out.append(batch[start:end])
        start = end
    return out


def loss_items(batch: dict[str, torch.Tensor]) -> int:
    """What a task's loss averages over in this batch: the labelled tokens (``labels`` != -100) of a token-level
    loss, else the examples. A micro-batch's loss is weighted by its share of the step's items, so that an
    accumulated step equals one pass over the whole batch."""
    labels = batch.get("labels")
    if labels is not None and labels.dim() > 1:
        return int((labels != -100).sum())
    return next(iter(batch.values())).shape[0]


def finetune_optimizer(model, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW with the cell's β, ε and decoupled weight decay, the decay on the parameters transformers' Trainer
    decays (EncodEval trains with the Trainer): not on biases and norm weights; under the paper protocol by the rule
    of transformers 4.50, the release's pin (:func:`~avey_b.evaluation.protocol.decayed_parameter_names`: RMSNorm
    weights decayed)."""
    decayed = set(decayed_parameter_names(model, cfg.protocol))
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in params if n in decayed], "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in params if n not in decayed], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_epsilon)


def _step(model, task: Task, micro: list[dict[str, torch.Tensor]], cfg: RunConfig, device: torch.device,
          tokens: torch.Tensor, step: int, summed: bool = False) -> float:
    """The forward and backward passes of one optimizer step over its micro-batches (losses weighted by their
    items; ``summed``: each micro-batch's mean loss at weight 1, see :func:`avey_b.evaluation.protocol.
    avey_b_settings`), adding their real tokens to ``tokens``; the step's loss (weighted by items either way)."""
    items = [loss_items(b) for b in micro]
    total = sum(items)
    step_loss = 0.0
    for batch, n in zip(micro, items, strict=True):
        # real (non-padding) tokens through the encoder: both towers of an IR pair
        for k, v in batch.items():
            if k.endswith("attention_mask"):
                tokens += v.sum()
        with autocast_ctx(device, cfg.precision):
            loss = task.loss(model, batch, cfg)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite training loss {loss.item()} at step {step} (lr {cfg.lr})")
        share = n / total if total else 1 / len(micro)
        (loss if summed else loss * share).backward()
        step_loss += loss.item() * share
    return step_loss


def train_model(model, task: Task, features: list[dict[str, Any]], cfg: RunConfig, pad_id: int,
                device: torch.device) -> dict[str, Any]:
    if cfg.grad_accumulation > 1 and task.family == "IR":
        raise ValueError("grad_accumulation > 1 would change the in-batch negatives of the IR loss; use 1")
    generator = torch.Generator().manual_seed(cfg.seed)
    loader = torch.utils.data.DataLoader(  # one optimizer step's examples, collated per micro-batch below
        features, batch_size=cfg.batch_size, shuffle=True, generator=generator, collate_fn=list,
    )
    steps = resolve_steps(task, cfg, len(loader))
    optimizer = finetune_optimizer(model, cfg)
    avey_b = avey_b_settings(model.config, cfg)  # Avey-B under the paper protocol sums its micro-batch means
    summed = avey_b is not None and avey_b["accumulation"] == "sum"
    # transformers' Trainer (EncodEval) rounds the warm-up up; the standard protocol keeps its round-down
    warmup = math.ceil(cfg.warmup_ratio * steps) if cfg.protocol == "paper" else int(cfg.warmup_ratio * steps)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, steps)
    model.train()
    losses: list[float] = []
    step = 0
    tokens = torch.zeros((), dtype=torch.long, device=device)  # summed on the device: no extra sync per step
    t0 = time.perf_counter()
    progress = Progress(steps, f"finetune {task.name} (lr {cfg.lr:g}, seed {cfg.seed})")
    tuner = thread_tuner(device, torch.get_num_threads(), cfg.threads, progress.write, "training",
                         "run it again with --threads 1 (or one per idle core)", unit="steps")
    while step < steps:  # step budgets longer than one epoch cycle over the data (IR)
        for examples in loader:
            t_step = time.perf_counter()
            micro = [{k: v.to(device) for k, v in task.collate(part, pad_id).items()}
                     for part in micro_batches(examples, cfg.grad_accumulation)]
            losses.append(_step(model, task, micro, cfg, device, tokens, step, summed))
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            progress.update(loss=losses[-1])
            if tuner is not None:  # the step's padded tokens, its rows and length in powers of two
                ids = [v for b in micro for k, v in b.items() if k.endswith("input_ids")]
                tuner.add(sum(v.numel() for v in ids), time.perf_counter() - t_step,
                          tuple(n.bit_length() for n in ids[0].shape) if ids else None)
            if step >= steps:
                break
    progress.close()
    seconds = time.perf_counter() - t0
    tokens = int(tokens)
    model.eval()
    tenth = max(1, len(losses) // 10)
    return {"steps": steps, "batches_per_epoch": len(loader), "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
            "autocast": "bf16" if use_bf16(cfg.precision, device) else "fp32",
            "micro_batch_losses": "sum" if summed else "mean",
            "weights": str(next(model.parameters()).dtype).removeprefix("torch."), "loss_first": _mean(losses[:tenth]),
            "loss_last": _mean(losses[-tenth:]), "losses": [round(x, 5) for x in losses[:: max(1, steps // 100)]]}


def run_cell(model_name: str, task_name: str, cfg: RunConfig, files: DataFiles,
             tokenizer_name: str | None = None, save_model: str | None = None,
             finetuned: str | None = None) -> dict[str, Any]:
    """Fine-tune and score one cell; returns the results record (see module docstring). ``save_model``: also
    write the fine-tuned model and its tokenizer there (``from_pretrained`` loads them, head included).
    Retrieval under the paper protocol trains on MS MARCO pairs and scores zero-shot
    (:mod:`avey_b.evaluation.ir_paper`); ``finetuned`` then names a model trained so before, to score only."""
    start_runtime(cfg.device, cfg.precision, cfg.threads, what=f"finetune {task_name} of {model_name}")
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
    given = cfg
    limit_rule = "max_length given"
    if cfg.max_length is None or cfg.query_max_length is None:  # the model's own limit (see RunConfig.max_length)
        limit = input_limit(model.config, tokenizer, cfg.protocol)
        limit_rule = input_limit_rule(model.config, cfg.protocol)
        cfg = dataclasses.replace(cfg, max_length=limit if cfg.max_length is None else cfg.max_length,
                                  query_max_length=limit if cfg.query_max_length is None else cfg.query_max_length)
    if cfg.protocol == "paper":  # EncodEval's end and pad tokens, from the model's config
        task.end_token = end_token(tokenizer, model.config)
        use_encodeval_pad(tokenizer, model.config)
    avey_b = avey_b_settings(model.config, cfg)  # None for other models: masked padding, micro-batch means
    if avey_b is not None:
        model.config.padding = avey_b["padding"]  # read at every forward pass

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
        "config": given.to_dict(),
        "input_limit": {"max_length": cfg.max_length, "query_max_length": cfg.query_max_length, "rule": limit_rule},
        "avey_b": avey_b, "pad_id": pad_id_of(tokenizer),
        "data": vars(files), "device": str(device),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "finished": utc_timestamp(),
    }


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# ------------------------------------------------------------------------------------------ CLI


def cell_settings(options: FinetuneOptions, args) -> tuple[RunConfig, DataFiles]:
    """The cell's settings and data: the ``RunConfig`` flags given in ``args`` over the protocol's table for the
    task (:func:`avey_b.evaluation.protocol.run_config`), and its data files."""
    cfg = run_config(options.task, given_settings(args) | {"lr": options.lr, "seed": options.seed})
    return cfg, DataFiles(**given_data(args))


def finetune(options: FinetuneOptions, cfg: RunConfig, files: DataFiles) -> dict[str, Any]:
    """Fine-tune and score one cell (:func:`run_cell`) and write its record to ``options.output_dir/results.json``."""
    record = run_cell(options.model, options.task, cfg, files, options.tokenizer, save_model=options.save_model,
                      finetuned=options.finetuned)
    write_json_atomic(os.path.join(options.output_dir, "results.json"), record)
    return record


def run(args: argparse.Namespace) -> int:
    """``avey-b finetune`` (the arguments of :func:`avey_b.evaluation.settings.finetune_parser`)."""
    options = from_args(FinetuneOptions, args)
    record = finetune(options, *cell_settings(options, args))
    line = {k: record[k] for k in ("model", "task", "protocol", "lr", "seed", "metric", "score")}
    line["score"] = round(line["score"], 2)  # results.json keeps the full value
    print(json.dumps(line))
    return 0
