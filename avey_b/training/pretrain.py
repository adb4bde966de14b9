"""Masked-LM pretraining (paper appendix "Pretraining Methodology") for Avey-B and, on the same data and budget,
Hugging Face encoders.

    avey-b pretrain --config quickstart
    avey-b pretrain --config base optim.lr=2.5e-4 train.max_steps=1000
    torchrun --nproc_per_node 8 -m avey_b.training.pretrain --config base
    avey-b pretrain --config ... --resume            # continue from the run dir's last checkpoint

Three steps, top to bottom. :func:`build_run` sets up (process group, seed, run dir, tokenizer, model, optimizer,
schedule, data) and returns a :class:`Run`. :func:`run_loop`, for each optimizer step: takes this rank's share of
the global batch (``global_batch_tokens / seq_len`` packed sequences, the same sequences whatever the world size),
masks each sequence with a generator keyed by its global index, accumulates gradients over micro-batches, clips,
steps; logs, evaluates and checkpoints at their intervals. :func:`finish` saves the last checkpoint, evaluates,
writes the model and fills the config's masked sentences. SIGTERM / Ctrl-C stop after the current step with a
checkpoint and a non-zero exit code (143 / 130); an error propagates (non-zero exit).

Loss: the sum of token cross-entropies over all masked tokens of the global batch divided by their count
(an all-reduced scalar), so the gradient is the same whatever the split into ranks and micro-batches.
Logits are computed only at masked positions when the model supports it (Avey-B and ModernBERT via
``sparse_prediction``); otherwise densely and then indexed.

Beside this loop: :mod:`.build` (data sources, tokenizer, model, optimizer), :mod:`.mlm_eval` (the loss sums,
held-out evaluation, fill-mask report), :mod:`.checkpoint` (``TrainState``, the record of where a run stands, and
the saving and resuming of it with the run's objects), :mod:`.config` (the run as data).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from avey_b.data.tokenization import eot_id
from avey_b.utils.counting import count_flops, count_parameters
from avey_b.utils.device import autocast as device_autocast
from avey_b.utils.device import runtime_line, set_cpu_threads, use_bf16
from avey_b.utils.locks import exclusive_directory
from avey_b.utils.progress import Progress
from avey_b.utils.records import write_yaml_atomic
from avey_b.utils.shared_cpu import thread_tuner

from ..data.mlm import IGNORE_INDEX
from ..data.packing import PackedSequences
from . import distributed as dist_utils
from . import rundir
from .build import build_model, build_optimizer, build_tokenizer, check_inputs, data_specs
from .checkpoint import (
    MANIFEST_FILE,
    CheckpointParts,
    TrainState,
    full_state_dict,
    latest_checkpoint,
    load_train_state,
    restore_training,
    save_pretrained_atomic,
    save_training,
)
from .config import PretrainConfig, build_parser, load_config, to_dict
from .mlm_eval import evaluate, fill_mask, masked_batch, mlm_sums
from .monitor import MetricsLogger, peak_flops
from .schedule import build_scheduler


class Interrupted(Exception):
    pass


# ------------------------------------------------------------------------------------------- training
def train(cfg: PretrainConfig, resume: str | None = None, overwrite: bool = False,
          trust_unverified: bool = False) -> dict:
    """Pretrain as ``cfg`` says. ``resume``: a checkpoint directory, or "auto" (the run dir's latest);
    ``overwrite``: move an existing run in ``cfg.run_dir`` aside first (see :mod:`.rundir`); ``trust_unverified``:
    start from a checkpoint or ``model.init_from`` directory that has no ``SHA256SUMS`` (see :mod:`.checkpoint`)."""
    info = dist_utils.init(cfg.train.device)
    try:
        results = _train(cfg, info, resume, overwrite, trust_unverified)
    except BaseException:
        dist_utils.cleanup(wait_for_all=False)  # the other ranks may never reach a barrier
        raise
    dist_utils.cleanup()
    return results


@dataclass
class BatchGeometry:
    """The global batch in sequences is fixed; ranks x micro-batches x accumulation fill it."""

    global_seqs: int
    micro_batch: int
    accumulation: int

    @classmethod
    def of(cls, cfg: PretrainConfig, world_size: int) -> BatchGeometry:
        global_seqs = cfg.train.global_batch_tokens // cfg.data.seq_len
        if global_seqs % world_size:
            raise ValueError(f"global batch of {global_seqs} sequences does not split over {world_size} ranks")
        per_rank = global_seqs // world_size
        mb = min(cfg.train.micro_batch_size, per_rank)
        if per_rank % mb:
            raise ValueError(f"{per_rank} sequences per rank per step is not a multiple of train.micro_batch_size={mb}")
        return cls(global_seqs, mb, per_rank // mb)


def flops_per_token(model, tokenizer, cfg: PretrainConfig, info, micro_batch: int, autocast) -> float | None:
    """FLOPs of one forward + backward per token (for MFU), counted on a synthetic batch that touches no RNG and
    no data. None under DDP/FSDP, whose backward collectives would need every rank here."""
    if info.enabled:
        return None
    N = cfg.data.seq_len
    with torch.random.fork_rng(devices=[]):
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(len(tokenizer) // 2, len(tokenizer), (micro_batch, N), generator=g)
        labels = torch.where(torch.rand(ids.shape, generator=g) < cfg.data.mask_rate, ids, IGNORE_INDEX)
        probe = {"input_ids": ids.to(info.device), "attention_mask": torch.ones_like(ids).to(info.device),
                 "labels": labels.to(info.device)}
        flops = count_flops(lambda: mlm_sums(model, probe, autocast)[0].backward()) / (micro_batch * N)
        model.zero_grad(set_to_none=True)
    return flops


class StopSignals:
    """SIGTERM / Ctrl-C ask the loop to finish its step, save and exit non-zero; a second signal stops at once."""

    def __enter__(self) -> StopSignals:
        self.received: list[int] = []
        self.old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        return self

    def _on_signal(self, signum, frame) -> None:
        if self.received:  # a second signal: stop now, without the checkpoint
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.received.append(signum)

    def __exit__(self, *exc) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)


def train_step(model, batches: list[dict], optimizer, scheduler, cfg: PretrainConfig, info, autocast):
    """One optimizer step over the micro-batches; returns (global per-token loss, gradient norm, learning rate)."""
    n_local = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches)
    n_global = dist_utils.all_reduce_sum(torch.tensor([float(n_local)], device=info.device), info).item()
    step_loss = torch.zeros((), dtype=torch.float64)
    for i, b in enumerate(batches):
        sync = nullcontext()
        if info.enabled and cfg.distributed.strategy == "ddp" and i < len(batches) - 1:
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
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                               cfg.optim.clip if cfg.optim.clip > 0 else float("inf"))
    lr = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    loss = dist_utils.all_reduce_sum(step_loss.to(info.device), info).item() / max(n_global, 1.0)
    return loss, float(grad_norm), lr


def _resume_dir(resume: str | None, run_dir: Path) -> Path | None:
    if resume is None:
        return None
    if resume == "auto":
        found = latest_checkpoint(run_dir)
        dist_utils.print0(f"resuming from {found}" if found else f"no checkpoint in {run_dir}; starting fresh")
        return found
    if not Path(resume).is_dir():
        raise FileNotFoundError(f"--resume: checkpoint directory not found: {resume}")
    return Path(resume)


@dataclass
class Run:
    """A pretraining run once it is set up (:func:`build_run`): what the loop and the finish read and advance."""

    cfg: PretrainConfig
    info: dist_utils.DistInfo
    run_dir: Path
    parts: CheckpointParts  # the unwrapped model, tokenizer, optimizer, schedule, training stream
    model: torch.nn.Module  # parts.raw_model as it trains: DDP / FSDP2 / compiled (see :mod:`.distributed`)
    state: TrainState
    geometry: BatchGeometry
    autocast: object  # a context-manager factory: bf16 autocast or nothing
    logger: MetricsLogger
    threads: int
    flops_per_token: float | None  # for MFU (None under DDP/FSDP)
    peak_flops: float | None

    @property
    def tokens_per_step(self) -> int:
        return self.geometry.global_seqs * self.cfg.data.seq_len

    def eval_stream(self) -> PackedSequences:
        """This rank's share of the held-out sequences, from their start."""
        cfg, info = self.cfg, self.info
        _, _, eval_spec, eval_split = data_specs(cfg)
        return PackedSequences(eval_spec, self.parts.tokenizer, cfg.data.seq_len, split=eval_split, loop=False,
                               shard_by="sequence", num_workers=0,
                               max_sequences=math.ceil(cfg.eval.max_sequences / info.world_size),
                               **_stream_options(cfg, info, self.parts.tokenizer))

    def evaluate(self) -> dict:
        """Held-out masked-LM loss and accuracy (:func:`.mlm_eval.evaluate`)."""
        return evaluate(self.model, self.eval_stream, self.parts.tokenizer, self.cfg, self.info, self.autocast)

    def log(self, record: dict) -> None:
        self.logger.log({"step": self.state.step, "tokens": self.state.step * self.tokens_per_step, **record})


def _stream_options(cfg: PretrainConfig, info, tokenizer) -> dict:
    """What the training and the held-out streams share: special ids, this rank's share, the held-out cut."""
    return dict(eot=eot_id(tokenizer), pad_id=tokenizer.pad_token_id, rank=info.rank, world_size=info.world_size,
                heldout_fraction=cfg.data.eval_fraction, heldout_docs=cfg.data.eval_documents,
                chunk_docs=cfg.data.chunk_docs, add_special_tokens=cfg.data.add_special_tokens)


def _train(cfg: PretrainConfig, info, resume: str | None, overwrite: bool = False,
           trust_unverified: bool = False) -> dict:
    """Set the run up, run the loop, finish (last checkpoint, final evaluation, the model, fill-mask examples); the
    first rank holds the run dir's lock throughout, so a second run on it is refused while this one runs."""
    with exclusive_directory(cfg.run_dir, "avey-b pretrain") if info.is_main else nullcontext():
        run = build_run(cfg, info, resume, overwrite, trust_unverified)
        results = run_loop(run)
        return finish(run, results)


def build_run(cfg: PretrainConfig, info, resume: str | None, overwrite: bool, trust_unverified: bool) -> Run:
    """First every check that writes nothing: where to start from, the run dir, the batch geometry, the data files,
    the model's config and the starting weights. Only then is the run dir made (or the old run moved aside), so a
    typo leaves it as it was. Then tokenizer, model, optimizer, schedule, data; and the run's start on the record."""
    t_start = time.time()
    hf_logging.disable_progress_bar()  # no per-save "Writing model shards" bars inside our own progress bar
    threads = set_cpu_threads(cfg.train.threads)
    run_dir = Path(cfg.run_dir)
    resume_dir = _resume_dir(resume, run_dir)
    saved = load_train_state(resume_dir, trust_unverified) if resume_dir else None
    changes = rundir.check_resume(saved.get("config"), to_dict(cfg)) if saved else {}
    if (resume_dir is not None and run_dir.exists() and any(run_dir.iterdir())
            and run_dir.resolve() not in resume_dir.resolve().parents):
        raise rundir.RunDirError(f"--resume {resume_dir}: run_dir {run_dir} holds another run "
                                 f"({rundir.describe_contents(run_dir)}); "
                                 "resume into that checkpoint's own run dir or an empty one")
    # --resume before a first checkpoint (a run killed early) starts afresh in its own run dir
    rundir.prepare(run_dir, resuming=resume is not None, overwrite=overwrite, act=False)
    geometry = BatchGeometry.of(cfg, info.world_size)
    check_inputs(cfg, resume_dir, trust_unverified)
    moved = None
    if info.is_main:
        moved = rundir.prepare(run_dir, resuming=resume is not None, overwrite=overwrite)
        run_dir.mkdir(parents=True, exist_ok=True)
    if info.enabled:
        torch.distributed.barrier()

    tokenizer = AutoTokenizer.from_pretrained(str(resume_dir)) if resume_dir else build_tokenizer(cfg, info, run_dir)
    torch.manual_seed(cfg.train.seed)
    raw_model = build_model(cfg, tokenizer, resume_dir).to(info.device)
    n_params = count_parameters(raw_model)  # before FSDP2 shards it in place
    bf16 = use_bf16(cfg.train.precision, info.device)
    autocast = device_autocast(info.device, bf16)
    model = dist_utils.parallelize(raw_model, info, cfg.distributed.strategy, cfg.train.compile)
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, schedule=cfg.optim.schedule, total=cfg.steps, warmup=cfg.optim.warmup,
                                min_ratio=cfg.optim.min_lr_ratio)
    train_spec, train_split, _, _ = data_specs(cfg)
    stream = PackedSequences(train_spec, tokenizer, cfg.data.seq_len, split=train_split, loop=True,
                             shard_by=cfg.data.shard_by, num_workers=cfg.data.num_workers,
                             **_stream_options(cfg, info, tokenizer))
    fpt = flops_per_token(raw_model, tokenizer, cfg, info, geometry.micro_batch, autocast)
    parts = CheckpointParts(raw_model, tokenizer, optimizer, scheduler, stream)
    state = restore_training(saved, parts, cfg, info, started=t_start)
    if info.is_main:  # the inputs are validated: now the run's config and history are written
        write_yaml_atomic(run_dir / "config.yaml", to_dict(cfg))
        _record_start(run_dir, cfg, state, resume_dir, saved is not None, changes, moved)
    logger = MetricsLogger(run_dir, info.is_main, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=to_dict(cfg), resume=saved is not None)
    dist_utils.print0(runtime_line(info.device, "bf16 autocast" if bf16 else "fp32", threads, flag="train.threads",
                                   auto=cfg.train.threads is None))
    dist_utils.print0(
        f"model {cfg.model.arch} ({n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}), "
        f"{info.world_size} rank(s); global batch "
        f"{geometry.global_seqs} x {cfg.data.seq_len} tokens = {geometry.micro_batch} seq x {geometry.accumulation} "
        f"accumulation x {info.world_size} rank(s); {cfg.steps} steps")
    return Run(cfg, info, run_dir, parts, model, state, geometry, autocast, logger, threads, fpt,
               peak_flops(info.device, cfg.train.peak_flops))


def _record_start(run_dir: Path, cfg: PretrainConfig, state: TrainState, resume_dir: Path | None, resumed: bool,
                  changes: dict, moved: Path | None) -> None:
    """The run's start in its history (:mod:`.rundir`): a fresh start or a resume (with the config changes), the
    old run moved aside, and what the run started from without a check (``--trust-unverified``)."""
    if moved is not None:
        rundir.record(run_dir, "overwrite", previous_run_moved_to=str(moved))
    start_dir = resume_dir or (Path(cfg.model.init_from) if cfg.model.init_from else None)
    unchecked = {}
    if start_dir is not None and start_dir.is_dir() and not (start_dir / MANIFEST_FILE).exists():
        unchecked = {"unchecked": str(start_dir)}
    if not resumed:
        rundir.record(run_dir, "start", run_id=state.run_id, step=0, **unchecked)
    else:
        rundir.record(run_dir, "resume", run_id=state.run_id, step=state.step, checkpoint=str(resume_dir),
                      changes=changes, **unchecked)


class LogWindow:
    """The steps since the last log line: their mean loss, tokens per second and MFU. On a CPU run with several
    threads, every step's time also goes to a :class:`~avey_b.utils.shared_cpu.ThreadTuner`: with
    ``train.threads: null`` (auto) a single process keeps the count that runs fastest on this machine; with a count
    (or several processes, whose counts are set alike), it says once when the steps run far slower than they did
    earlier (a shared machine), within about half a minute whatever the logging interval."""

    def __init__(self, run: Run, write):
        self.run, self.loss, self.count = run, 0.0, 0
        self.t0, self.step0 = time.time(), run.state.step
        info = run.info
        requested = run.cfg.train.threads if info.world_size == 1 else run.threads
        self.watch = thread_tuner(info.device, run.threads, requested, write, "training", (
            "it may change on resume: stop (Ctrl-C saves a checkpoint), then `avey-b pretrain --config ... --resume "
            "train.threads=1`"), unit="steps") if info.is_main else None

    def add(self, loss: float, seconds: float) -> None:
        """One step's loss and its time (fetching the batch and stepping: evaluations and checkpoints excluded)."""
        self.loss, self.count = self.loss + loss, self.count + 1
        if self.watch is not None:
            self.watch.add(self.run.tokens_per_step, seconds)
            self.run.threads = self.watch.threads

    def close(self, lr: float, grad_norm: float, write) -> None:
        """Log the window (metrics file and a line) and start the next one."""
        run, step = self.run, self.run.state.step
        tokens = (step - self.step0) * run.tokens_per_step
        tps = tokens / max(time.time() - self.t0, 1e-9)
        rec = {"loss": self.loss / self.count, "lr": lr, "grad_norm": grad_norm, "tokens_per_s": round(tps, 1)}
        if run.flops_per_token:
            rec["tflops"] = run.flops_per_token * tps / run.info.world_size / 1e12
            if run.peak_flops:
                rec["mfu"] = rec["tflops"] * 1e12 / run.peak_flops
        run.log(rec)
        write(f"step {step:>6} | loss {rec['loss']:.4f} | lr {lr:.2e} | grad {grad_norm:.3f} | "
              f"{tps:,.0f} tok/s" + (f" | MFU {rec['mfu']:.1%}" if "mfu" in rec else ""))
        self.loss, self.count = 0.0, 0
        self.t0, self.step0 = time.time(), step


def run_loop(run: Run) -> dict:
    """Evaluate the untrained model if asked, then step, log, evaluate and checkpoint at their intervals until the
    last step, the time limit or a signal (then a checkpoint is due: ``exit_code`` 128 + the signal)."""
    cfg, info, state = run.cfg, run.info, run.state
    parts, geometry, total_steps = run.parts, run.geometry, cfg.steps
    results: dict = {"untrained": None, "final": None, "exit_code": 0}
    with StopSignals() as signals:  # from here on a signal ends in a checkpoint
        if cfg.eval.at_start and state.step == 0:
            results["untrained"] = run.evaluate()
            dist_utils.print0(f"untrained: held-out MLM loss {results['untrained']['eval_loss']:.4f}, "
                              f"accuracy {results['untrained']['eval_accuracy']:.4f}")
            run.log(results["untrained"])
        cap = cfg.train.max_minutes
        bar = Progress(total_steps, "pretrain", initial=state.step, enabled=info.is_main and cfg.logging.progress,
                       cap=None if cap is None else (60 * cap - state.session_seconds(), f"train.max_minutes={cap:g}"))
        write = bar.write if info.is_main else (lambda *a: None)
        window = LogWindow(run, write)
        it = iter(parts.stream)
        run.model.train()
        try:
            while state.step < total_steps:
                t_step = time.perf_counter()
                micro = [[next(it) for _ in range(geometry.micro_batch)] for _ in range(geometry.accumulation)]
                batches = [masked_batch(m, parts.tokenizer, cfg, info.device, cfg.train.seed) for m in micro]
                loss, grad_norm, lr = train_step(run.model, batches, parts.optimizer, parts.scheduler, cfg, info,
                                                 run.autocast)
                state.step += 1
                step = state.step
                window.add(loss, time.perf_counter() - t_step)
                bar.update(1, loss=round(loss, 3), lr=f"{lr:.2e}")

                if step % cfg.logging.every == 0 or step == total_steps:
                    window.close(lr, grad_norm, write)
                if cfg.eval.every and step % cfg.eval.every == 0 and step < total_steps:
                    ev = run.evaluate()
                    run.log(ev)
                    write(f"step {step:>6} | held-out loss {ev['eval_loss']:.4f} | accuracy {ev['eval_accuracy']:.4f}")
                if cfg.checkpoint.every and step % cfg.checkpoint.every == 0:
                    save_training(run.run_dir, state, parts, cfg, info)

                out_of_time = cap is not None and state.session_seconds() / 60 >= cap
                if dist_utils.any_rank(bool(signals.received) or out_of_time, info):
                    if signals.received:
                        results["exit_code"] = 128 + signals.received[0]
                        raise Interrupted
                    write(f"train.max_minutes={cfg.train.max_minutes} reached at step {step}; stopping")
                    break
        except Interrupted:
            write(f"interrupted by signal {signals.received[0]} at step {state.step}; saving a checkpoint")
        finally:
            bar.close()
    return results


def finish(run: Run, results: dict) -> dict:
    """The last checkpoint; unless interrupted, the final evaluation, the model in ``run_dir/model`` and the
    fill-mask examples. Returns ``results`` completed (``step``, ``checkpoint``, ``final``, ``fill``)."""
    cfg, info, state, parts = run.cfg, run.info, run.state, run.parts
    fsdp = dist_utils.uses_fsdp(info, cfg.distributed.strategy)
    path = save_training(run.run_dir, state, parts, cfg, info) if state.last_saved != state.step \
        else latest_checkpoint(run.run_dir)
    results.update(step=state.step, checkpoint=str(path) if path else None)
    if results["exit_code"]:
        run.logger.close()
        return results
    results["final"] = run.evaluate()
    run.log(results["final"])
    final_sd = full_state_dict(parts.raw_model) if fsdp else None  # collective: every rank gathers
    if info.is_main:
        save_pretrained_atomic(run.run_dir / "model", parts.raw_model, parts.tokenizer, state_dict=final_sd)
        _report(results, run.run_dir, took(state))
    if cfg.eval.fill_examples and (info.is_main or fsdp):  # under FSDP every rank runs the forwards
        results["fill"] = _fill_examples(run)
    run.logger.close()
    return results


def _fill_examples(run: Run) -> list[dict]:
    """The config's fill-mask sentences, completed by the trained model (top 5 per ``[MASK]``), printed on rank 0."""
    examples = [(e["text"], e["answer"]) if isinstance(e, dict) else (e, None) for e in run.cfg.eval.fill_examples]
    filled = fill_mask(run.model, run.parts.tokenizer, [t for t, _ in examples], run.info.device)
    fill = [{"text": t, "top5": preds, "answer": a, "hit": None if a is None else a.strip() in preds[0].split("|")}
            for (t, a), (_, preds) in zip(examples, filled, strict=True)]
    if run.info.is_main:
        print("\nfill-mask (top 5 per [MASK]):")
        for r in fill:
            mark = "" if r["answer"] is None else f"   [{r['answer']}: {'in the top 5' if r['hit'] else 'missed'}]"
            print(f"  {r['text']}\n    -> {'  ;  '.join(r['top5'])}{mark}")
        scored = [r for r in fill if r["answer"] is not None]
        if scored:
            print(f"  the right word is in the top 5 for {sum(r['hit'] for r in scored)} of {len(scored)} sentences")
    return fill


def took(state: TrainState) -> str:
    """How long the run took: this session's minutes, and for a resumed run the whole run's over its sessions
    (``0.9 min (11.6 min over 2 sessions)``)."""
    session = f"{state.session_seconds() / 60:.1f} min"
    if state.session == 1:
        return session
    total = state.run_seconds()
    if total is None:
        return (f"{session} (session {state.session} of the run; the checkpoint it resumed from does not record "
                "the earlier sessions' time)")
    return f"{session} ({total / 60:.1f} min over {state.session} sessions)"


def _report(results: dict, run_dir: Path, duration: str) -> None:
    u, f = results["untrained"], results["final"]
    print(f"\nheld-out masked-LM ({f['eval_tokens']} masked tokens):")
    print(f"  {'':<12}{'loss':>10}{'accuracy':>10}")
    if u:
        print(f"  {'untrained':<12}{u['eval_loss']:>10.4f}{u['eval_accuracy']:>10.4f}")
    print(f"  {'step ' + str(results['step']):<12}{f['eval_loss']:>10.4f}{f['eval_accuracy']:>10.4f}")
    print(f"\nfinished in {duration}; model + tokenizer: {run_dir / 'model'} "
          f"(AutoModelForMaskedLM.from_pretrained after `import avey_b`); "
          f"resumable checkpoint: {results['checkpoint']}")


# --------------------------------------------------------------------------------------------------- CLI
def run(args: argparse.Namespace) -> int:
    """``avey-b pretrain`` (the arguments of :func:`avey_b.training.config.build_parser`): the run config from
    ``--config`` and the overrides, then :func:`train`; ``--print-config`` prints it instead."""
    cfg = load_config(args.config, args.overrides)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    if args.resume and args.overwrite:
        raise ValueError("--resume continues the run in run_dir; --overwrite moves it aside: choose one")
    results = train(cfg, resume=args.resume, overwrite=args.overwrite, trust_unverified=args.trust_unverified)
    return int(results.get("exit_code", 0))


if __name__ == "__main__":  # torchrun ... -m avey_b.training.pretrain ARGS: the same program as `avey-b pretrain`
    sys.exit(run(build_parser().parse_args()))
