"""Masked-LM pretraining (SPEC §5) for Avey-B and, on the same data and budget, Hugging Face encoders.

    avey-b pretrain --config quickstart
    avey-b pretrain --config base optim.lr=2.5e-4 train.max_steps=1000
    torchrun --nproc_per_node 8 -m avey_b.training.pretrain --config base
    avey-b pretrain --config ... --resume            # continue from the run dir's last checkpoint

The loop, top to bottom: set up (process group, seed, run dir, tokenizer, model, optimizer, schedule, data),
then for each optimizer step: take this rank's share of the global batch (``global_batch_tokens /
seq_len`` packed sequences, the same sequences whatever the world size), mask each sequence with a
generator keyed by its global index, accumulate gradients over micro-batches, clip, step; log, evaluate
and checkpoint at their intervals. SIGTERM / Ctrl-C stop after the current step with a checkpoint and a
non-zero exit code (143 / 130); an error propagates (non-zero exit).

Loss: the sum of token cross-entropies over all masked tokens of the global batch divided by their count
(an all-reduced scalar), so the gradient is the same whatever the split into ranks and micro-batches.
Logits are computed only at masked positions when the model supports it (Avey-B and ModernBERT via
``sparse_prediction``); otherwise densely and then indexed.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data.corpus import SourceSpec, iter_documents
from ..data.mlm import IGNORE_INDEX, mask_tokens, sequence_generator
from ..data.packing import PackedSequences
from ..device import autocast as device_autocast
from ..device import use_bf16
from ..tokenization import eot_id, load_tokenizer, pad_to_multiple, special_ids, train_bpe_tokenizer
from . import distributed as dist_utils
from .checkpoint import (
    latest_checkpoint,
    load_train_state,
    rng_state,
    save_checkpoint,
    save_pretrained_atomic,
    set_rng_state,
)
from .config import PretrainConfig, describe, dump_yaml, load_config, to_dict
from .metrics import MetricsLogger, count_flops, peak_flops
from .schedule import build_scheduler

EVAL_SEED_OFFSET = 7_777_777  # held-out masks differ from training masks but are the same at every evaluation


class Interrupted(Exception):
    pass


# ------------------------------------------------------------------------------------------------ setup
def source_spec(cfg: PretrainConfig, source, split_name: str | None = None, shuffle: bool = False) -> SourceSpec:
    d = cfg.data
    return SourceSpec(source=source, text_field=d.text_field, txt_mode=d.txt_mode, hf_config=d.hf_config,
                      hf_split=split_name or d.hf_split, shuffle_seed=cfg.train.seed if shuffle else None)


def data_specs(cfg: PretrainConfig) -> tuple[SourceSpec, str, SourceSpec, str]:
    """(train spec, train split, eval spec, eval split): a separate eval corpus, or a hash-split of the train one."""
    train = source_spec(cfg, cfg.data.train, shuffle=cfg.data.shuffle)
    if cfg.data.eval is None:
        if cfg.data.shuffle and cfg.data.eval_documents > 0:
            raise ValueError("data.shuffle reorders the stream, so the first data.eval_documents documents would "
                             "change every epoch; hold out with data.eval_fraction instead")
        if cfg.data.eval_documents <= 0 and not 0 < cfg.data.eval_fraction < 1:
            raise ValueError("data.eval is null, so set data.eval_fraction in (0, 1) or data.eval_documents > 0 "
                             "to hold out documents")
        return train, "train", source_spec(cfg, cfg.data.train), "heldout"
    ev = source_spec(cfg, cfg.data.eval, cfg.data.hf_eval_split)
    return train, "all", ev, "all"


def build_tokenizer(cfg: PretrainConfig, info, run_dir: Path):
    if cfg.tokenizer.path:
        return load_tokenizer(cfg.tokenizer.path)
    out = run_dir / "tokenizer"
    if info.is_main:
        spec, split, _, _ = data_specs(cfg)
        from ..data.corpus import is_heldout

        def texts():
            n = 0
            for index, text in iter_documents(spec):
                if split == "train" and cfg.data.eval_documents > 0 and index < cfg.data.eval_documents:
                    continue
                if split == "train" and cfg.data.eval_documents <= 0 and is_heldout(text, cfg.data.eval_fraction):
                    continue  # never fit the tokenizer on held-out text
                yield text
                n += 1
                if n >= cfg.tokenizer.train_documents:
                    return

        tok = train_bpe_tokenizer(texts(), cfg.tokenizer.vocab_size)
        tok.save_pretrained(out)
    if info.enabled:
        torch.distributed.barrier()
    return load_tokenizer(str(out))


def build_model(cfg: PretrainConfig, tokenizer, resume_dir: Path | None = None):
    """A fresh model from the config (vocab sized from the tokenizer), or weights from a checkpoint."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    import avey_b  # noqa: F401  (registers Avey-B with the Auto classes)

    m = cfg.model
    vocab = pad_to_multiple(len(tokenizer), 64)
    if resume_dir is not None or m.init_from:
        model = AutoModelForMaskedLM.from_pretrained(str(resume_dir or m.init_from), dtype=torch.float32)
        if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
            model.resize_token_embeddings(vocab)
    elif m.arch in ("avey-b", "avey_b"):
        from avey_b import AveyBForMaskedLM, presets

        if m.preset is None:
            raise ValueError("model.preset is required for model.arch=avey-b (tiny, small, base, large)")
        config = presets.get(m.preset, **{"vocab_size": vocab, "pad_token_id": tokenizer.pad_token_id, **m.overrides})
        model = AveyBForMaskedLM(config)
    else:
        kwargs = {"vocab_size": vocab, "pad_token_id": tokenizer.pad_token_id}
        base = AutoConfig.for_model(m.arch)
        if hasattr(base, "max_position_embeddings"):
            kwargs["max_position_embeddings"] = max(cfg.data.seq_len, 512)
        for name in ("bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
            if hasattr(base, name):
                tid = {"bos_token_id": tokenizer.cls_token_id, "cls_token_id": tokenizer.cls_token_id,
                       "eos_token_id": tokenizer.sep_token_id, "sep_token_id": tokenizer.sep_token_id}[name]
                if tid is not None:
                    kwargs[name] = tid
        config = AutoConfig.for_model(m.arch, **{**kwargs, **m.overrides})
        model = AutoModelForMaskedLM.from_config(config)
    if hasattr(model.config, "sparse_prediction"):
        model.config.sparse_prediction = bool(m.sparse_prediction)
    return model


def build_optimizer(model, cfg: PretrainConfig):
    """AdamW; decoupled weight decay only on parameters with >= 2 dimensions (matrices, embeddings)."""
    o = cfg.optim
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=o.lr, betas=tuple(o.betas), eps=o.eps)


def full_state_dict(model) -> dict:
    """The unsharded model state on CPU (FSDP2: a collective every rank must call)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # save_pretrained drops tied copies only when it builds the state dict itself; do the same here
    tied = getattr(model, "_tied_weights_keys", None) or {}
    if getattr(model.config, "tie_word_embeddings", True):
        for key in (tied.keys() if isinstance(tied, dict) else tied):
            sd.pop(key, None)
    return sd


def uses_sparse_logits(model) -> bool:
    return bool(getattr(dist_utils.unwrap(model).config, "sparse_prediction", False))


# ------------------------------------------------------------------------------------------- the loss
def mlm_sums(model, batch: dict, autocast) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum of token cross-entropies, number of masked tokens, number predicted correctly) for one batch."""
    labels = batch["labels"]
    sparse = uses_sparse_logits(model)
    with autocast:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    labels=labels if sparse else None)
    logits = out.logits
    target = labels[labels != IGNORE_INDEX]
    if logits.dim() == 3:  # dense: (B, N, V) -> the labelled rows
        logits = logits[labels != IGNORE_INDEX]
    logits = logits.float()
    loss_sum = F.cross_entropy(logits, target, reduction="sum")
    correct = (logits.argmax(-1) == target).sum()
    return loss_sum, torch.tensor(target.numel(), device=logits.device), correct


def masked_batch(samples: list[dict], tokenizer, cfg: PretrainConfig, device, seed: int) -> dict:
    """Stack packed sequences and mask each with the generator keyed by its global index."""
    ids, att, labels = [], [], []
    specials = special_ids(tokenizer)
    for s in samples:
        inp, lab = mask_tokens(s["input_ids"], cfg.data.mask_rate, tokenizer.mask_token_id, specials,
                               sequence_generator(seed, s["index"]), scheme=cfg.data.mask_scheme,
                               vocab_size=len(tokenizer), attention_mask=s["attention_mask"])
        ids.append(inp)
        att.append(s["attention_mask"])
        labels.append(lab)
    return {"input_ids": torch.stack(ids).to(device), "attention_mask": torch.stack(att).to(device),
            "labels": torch.stack(labels).to(device)}


@torch.no_grad()
def evaluate(model, make_stream, tokenizer, cfg, info, autocast) -> dict:
    """Held-out masked-LM loss (per masked token) and accuracy, summed over all ranks."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=info.device)
    batch: list[dict] = []
    mb = cfg.train.micro_batch_size

    def run(samples):
        b = masked_batch(samples, tokenizer, cfg, info.device, cfg.train.seed + EVAL_SEED_OFFSET)
        if (b["labels"] != IGNORE_INDEX).any():
            loss, n, correct = mlm_sums(model, b, autocast)
            totals.add_(torch.stack([loss.double(), n.double(), correct.double()]))
        elif info.enabled and cfg.distributed.strategy == "fsdp":  # keep FSDP collectives in step
            model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])

    for sample in make_stream():
        batch.append(sample)
        if len(batch) == mb:
            run(batch)
            batch = []
    if batch:
        run(batch)
    dist_utils.all_reduce_sum(totals, info)
    model.train(was_training)
    loss, n, correct = totals.tolist()
    if n == 0:
        raise ValueError("the held-out split has no masked tokens: make data.eval_fraction / eval.max_sequences larger")
    return {"eval_loss": loss / n, "eval_accuracy": correct / n, "eval_tokens": int(n)}


@torch.no_grad()
def fill_mask(model, tokenizer, sentences: list[str], device, top_k: int = 5) -> list[tuple[str, list[str]]]:
    """Top predictions for every [MASK] of each sentence (the mask token may be written as ``[MASK]``)."""
    model = dist_utils.unwrap(model)
    was_training = model.training
    model.eval()
    results = []
    for text in sentences:
        text = text.replace("[MASK]", tokenizer.mask_token)
        enc = tokenizer(text, return_tensors="pt").to(device)
        logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[0]
        pos = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
        preds = []
        for p in pos.tolist():
            top = logits[p, : len(tokenizer)].float().topk(top_k).indices.tolist()
            preds.append("|".join(tokenizer.decode([t]).strip() or repr(tokenizer.decode([t])) for t in top))
        results.append((text, preds))
    model.train(was_training)
    return results


# ------------------------------------------------------------------------------------------- training
def train(cfg: PretrainConfig, resume: str | None = None) -> dict:
    info = dist_utils.init(cfg.train.device)
    try:
        return _train(cfg, info, resume)
    finally:
        dist_utils.cleanup()


def _train(cfg: PretrainConfig, info, resume: str | None) -> dict:
    t_start = time.time()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no per-save "Writing model shards" bars inside our own progress bar
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    run_dir = Path(cfg.run_dir)
    say = dist_utils.print0

    # --- where to start from
    resume_dir = None
    if resume is not None:
        if resume == "auto":
            resume_dir = latest_checkpoint(run_dir)
            say(f"resuming from {resume_dir}" if resume_dir else f"no checkpoint in {run_dir}; starting fresh")
        else:
            resume_dir = Path(resume)
            if not resume_dir.is_dir():
                raise FileNotFoundError(f"--resume: checkpoint directory not found: {resume}")
    state = load_train_state(resume_dir) if resume_dir else None
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        dump_yaml(cfg, run_dir / "config.yaml")
    if info.enabled:
        torch.distributed.barrier()

    # --- batch geometry: the global batch in sequences is fixed; ranks x micro-batches x accumulation fill it
    N = cfg.data.seq_len
    global_seqs = cfg.train.global_batch_tokens // N
    if global_seqs % info.world_size:
        raise ValueError(f"global batch of {global_seqs} sequences does not split over {info.world_size} ranks")
    per_rank = global_seqs // info.world_size
    mb = min(cfg.train.micro_batch_size, per_rank)
    if per_rank % mb:
        raise ValueError(f"{per_rank} sequences per rank per step is not a multiple of train.micro_batch_size={mb}")
    accum = per_rank // mb
    total_steps = cfg.steps

    # --- tokenizer, model, optimizer, schedule
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resume_dir)) if resume_dir else build_tokenizer(cfg, info, run_dir)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, tokenizer, resume_dir).to(info.device)
    n_params = sum(p.numel() for p in model.parameters())
    bf16 = use_bf16(cfg.train.precision, info.device)
    autocast = device_autocast(info.device, bf16)
    raw_model = model
    fsdp = info.enabled and cfg.distributed.strategy == "fsdp"
    model = dist_utils.parallelize(model, info, cfg.distributed.strategy, cfg.train.compile)
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, schedule=cfg.optim.schedule, total=total_steps, warmup=cfg.optim.warmup,
                                min_ratio=cfg.optim.min_lr_ratio)

    # --- data
    train_spec, train_split, eval_spec, eval_split = data_specs(cfg)
    common = dict(eot=eot_id(tokenizer), pad_id=tokenizer.pad_token_id, rank=info.rank, world_size=info.world_size,
                  heldout_fraction=cfg.data.eval_fraction, heldout_docs=cfg.data.eval_documents, chunk_docs=cfg.data.chunk_docs,
                  add_special_tokens=cfg.data.add_special_tokens)
    stream = PackedSequences(train_spec, tokenizer, N, split=train_split, loop=True, shard_by=cfg.data.shard_by,
                             num_workers=cfg.data.num_workers, **common)

    def eval_stream():
        per = math.ceil(cfg.eval.max_sequences / info.world_size)
        return PackedSequences(eval_spec, tokenizer, N, split=eval_split, loop=False, shard_by="sequence",
                               num_workers=0, max_sequences=per, **common)

    # --- FLOPs of one micro-step (for MFU), measured on a synthetic batch that touches no RNG and no data
    flops_per_token = None
    with torch.random.fork_rng(devices=[]):
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(len(tokenizer) // 2, len(tokenizer), (mb, N), generator=g)
        probe = {"input_ids": ids.to(info.device), "attention_mask": torch.ones_like(ids).to(info.device),
                 "labels": torch.where(torch.rand(ids.shape, generator=g) < cfg.data.mask_rate, ids, IGNORE_INDEX).to(info.device)}
        if not info.enabled:  # collectives inside DDP/FSDP backward would need every rank here; skip the probe
            flops_per_token = count_flops(lambda: mlm_sums(raw_model, probe, autocast)[0].backward()) / (mb * N)
            raw_model.zero_grad(set_to_none=True)
    peak = peak_flops(info.device, cfg.train.peak_flops)

    step = 0
    if state is not None:
        if fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            set_optimizer_state_dict(raw_model, optimizer, state["optimizer"],
                                     options=StateDictOptions(full_state_dict=True))
        else:
            optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        data_state = state["data"]
        if "per_rank" in data_state:
            if len(data_state["per_rank"]) != info.world_size:
                raise ValueError(f"checkpoint was written by {len(data_state['per_rank'])} ranks with "
                                 f"data.shard_by=document; resume it on the same number of ranks")
            data_state = data_state["per_rank"][info.rank]
        stream.load_state_dict(data_state)
        step = int(state["step"])
        rngs = state["rng"]
        if len(rngs) == info.world_size:
            set_rng_state(rngs[info.rank])
        else:
            say(f"note: checkpoint has RNG states for {len(rngs)} ranks, this run has {info.world_size}; reseeding")
            torch.manual_seed(cfg.train.seed + 1000 * info.rank + step)
    else:
        torch.manual_seed(cfg.train.seed + 1000 * info.rank)  # dropout differs per rank

    logger = MetricsLogger(run_dir, info.is_main, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=to_dict(cfg), resume=state is not None)
    say(f"model {cfg.model.arch} ({n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}), {info.world_size} rank(s) "
        f"on {info.device}, {'bf16 autocast' if bf16 else 'fp32'}; global batch {global_seqs} x {N} tokens "
        f"= {mb} seq x {accum} accumulation x {info.world_size} rank(s); {total_steps} steps")

    # --- stop cleanly on SIGTERM / Ctrl-C: finish the step, save, exit non-zero
    stop_signal: list[int] = []

    def on_signal(signum, frame):
        if stop_signal:  # a second signal: stop now, without the checkpoint
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        stop_signal.append(signum)

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def save(step_: int) -> Path:
        rngs, data_state = [rng_state()], stream.state_dict()
        if info.enabled:
            rngs = [None] * info.world_size
            torch.distributed.all_gather_object(rngs, rng_state())
            if cfg.data.shard_by == "document":  # each rank packs its own documents: keep every position
                states = [None] * info.world_size
                torch.distributed.all_gather_object(states, data_state)
                data_state = {"per_rank": states}
        sd, optim_sd = None, None
        if fsdp:
            # FSDP2: every rank takes part in gathering the full (unsharded) model and optimizer state
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
            sd = full_state_dict(raw_model)
            optim_sd = get_optimizer_state_dict(raw_model, optimizer, options=opts)
        path = None
        if info.is_main:
            train_state = {"step": step_, "optimizer": optim_sd if fsdp else optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                           "data": data_state, "rng": rngs, "world_size": info.world_size,
                           "config": to_dict(cfg)}
            path = save_checkpoint(run_dir, step_, raw_model, tokenizer, train_state, cfg.checkpoint.keep_last,
                                   state_dict=sd)
        if info.enabled:
            torch.distributed.barrier()
        return path

    results: dict = {"untrained": None, "final": None}
    if cfg.eval.at_start and step == 0:
        results["untrained"] = evaluate(model, eval_stream, tokenizer, cfg, info, autocast)
        say(f"untrained: held-out MLM loss {results['untrained']['eval_loss']:.4f}, "
            f"accuracy {results['untrained']['eval_accuracy']:.4f}")
        logger.log({"step": 0, "tokens": 0, **results["untrained"]})

    bar = None
    if info.is_main and cfg.logging.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_steps, initial=step, desc="pretrain", unit="step", dynamic_ncols=True)
    write = (bar.write if bar is not None else say) if info.is_main else (lambda *a: None)

    it = iter(stream)
    model.train()
    last_log_t, last_log_step = time.time(), step
    window_loss = torch.zeros(2, dtype=torch.float64)
    exit_code = 0
    last_saved = step if state is not None else -1
    try:
        while step < total_steps:
            micro = [[next(it) for _ in range(mb)] for _ in range(accum)]
            batches = [masked_batch(m, tokenizer, cfg, info.device, cfg.train.seed) for m in micro]
            n_local = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches)
            n_global = dist_utils.all_reduce_sum(torch.tensor([float(n_local)], device=info.device), info).item()
            step_loss = torch.zeros((), dtype=torch.float64)
            for i, b in enumerate(batches):
                sync = nullcontext()
                if info.enabled and cfg.distributed.strategy == "ddp" and i < accum - 1:
                    sync = model.no_sync()  # reduce gradients once, after the last micro-batch
                with sync:
                    if (b["labels"] != IGNORE_INDEX).any():
                        loss_sum, _, _ = mlm_sums(model, b, autocast)
                    else:  # nothing masked here: a zero loss that still runs the graph (DDP needs every param)
                        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
                        loss_sum = out.logits.float().sum() * 0.0
                    # DDP averages gradients over ranks; scale so the result is the global per-token mean
                    (loss_sum * (info.world_size / max(n_global, 1.0))).backward()
                step_loss += loss_sum.detach().double().cpu()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.clip if cfg.optim.clip > 0 else float("inf"))
            lr = scheduler.get_last_lr()[0]
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            loss_global = dist_utils.all_reduce_sum(step_loss.to(info.device), info).item() / max(n_global, 1.0)
            window_loss += torch.tensor([loss_global, 1.0], dtype=torch.float64)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss_global:.3f}", lr=f"{lr:.2e}")

            if step % cfg.logging.every == 0 or step == total_steps:
                dt = time.time() - last_log_t
                tps = (step - last_log_step) * global_seqs * N / max(dt, 1e-9)
                rec = {"step": step, "tokens": step * global_seqs * N, "loss": window_loss[0].item() / window_loss[1].item(),
                       "lr": lr, "grad_norm": float(grad_norm), "tokens_per_s": round(tps, 1)}
                if flops_per_token:
                    rec["tflops"] = flops_per_token * tps / info.world_size / 1e12
                    if peak:
                        rec["mfu"] = rec["tflops"] * 1e12 / peak
                logger.log(rec)
                write(f"step {step:>6} | loss {rec['loss']:.4f} | lr {lr:.2e} | grad {rec['grad_norm']:.3f} | "
                      f"{tps:,.0f} tok/s" + (f" | MFU {rec['mfu']:.1%}" if "mfu" in rec else ""))
                last_log_t, last_log_step = time.time(), step
                window_loss.zero_()

            if cfg.eval.every and step % cfg.eval.every == 0 and step < total_steps:
                ev = evaluate(model, eval_stream, tokenizer, cfg, info, autocast)
                logger.log({"step": step, "tokens": step * global_seqs * N, **ev})
                write(f"step {step:>6} | held-out loss {ev['eval_loss']:.4f} | accuracy {ev['eval_accuracy']:.4f}")
            if cfg.checkpoint.every and step % cfg.checkpoint.every == 0:
                save(step)
                last_saved = step

            out_of_time = cfg.train.max_minutes is not None and (time.time() - t_start) / 60 >= cfg.train.max_minutes
            if dist_utils.any_rank(bool(stop_signal) or out_of_time, info):
                if stop_signal:
                    exit_code = 128 + stop_signal[0]
                    raise Interrupted
                write(f"train.max_minutes={cfg.train.max_minutes} reached at step {step}; stopping")
                break
    except Interrupted:
        write(f"interrupted by signal {stop_signal[0]} at step {step}; saving a checkpoint")
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
        if bar is not None:
            bar.close()

    if last_saved != step:
        path = save(step)
    else:
        path = latest_checkpoint(run_dir)
    results.update(step=step, exit_code=exit_code, checkpoint=str(path) if path else None)
    if exit_code:
        logger.close()
        return results

    results["final"] = evaluate(model, eval_stream, tokenizer, cfg, info, autocast)
    logger.log({"step": step, "tokens": step * global_seqs * N, **results["final"]})
    final_sd = full_state_dict(raw_model) if fsdp else None  # collective: every rank gathers
    if info.is_main:
        save_pretrained_atomic(run_dir / "model", raw_model, tokenizer, state_dict=final_sd)
        _report(results, cfg, run_dir, time.time() - t_start)
    if cfg.eval.fill_examples and (info.is_main or fsdp):  # under FSDP every rank runs the forwards
        filled = fill_mask(model, tokenizer, cfg.eval.fill_examples, info.device)
        results["fill"] = filled
        if info.is_main:
            print("\nfill-mask (top 5 per [MASK]):")
            for text, preds in filled:
                print(f"  {text}\n    -> {'  ;  '.join(preds)}")
    logger.close()
    return results


def _report(results: dict, cfg, run_dir: Path, seconds: float) -> None:
    u, f = results["untrained"], results["final"]
    print(f"\nheld-out masked-LM ({f['eval_tokens']} masked tokens):")
    print(f"  {'':<12}{'loss':>10}{'accuracy':>10}")
    if u:
        print(f"  {'untrained':<12}{u['eval_loss']:>10.4f}{u['eval_accuracy']:>10.4f}")
    print(f"  {'step ' + str(results['step']):<12}{f['eval_loss']:>10.4f}{f['eval_accuracy']:>10.4f}")
    print(f"\nfinished in {seconds / 60:.1f} min; model + tokenizer: {run_dir / 'model'} "
          f"(AutoModelForMaskedLM.from_pretrained after `import avey_b`); resumable checkpoint: {results['checkpoint']}")


# --------------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="avey-b pretrain",
        description="Masked-LM pretraining of Avey-B (or an HF encoder built from config) from a YAML config.",
        epilog=describe(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="YAML file, or a shipped recipe (quickstart, base, large, ablation-10b, debug); omitted: the defaults")
    parser.add_argument("--resume", nargs="?", const="auto", default=None, metavar="CKPT",
                        help="continue from CKPT, or (no value) from the run dir's latest checkpoint")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. optim.lr=1e-3 data.train=my_dir/")
    args = parser.parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    results = train(cfg, resume=args.resume)
    return int(results.get("exit_code", 0))


if __name__ == "__main__":
    sys.exit(main())
