"""Pretraining runs as data: a dataclass tree, one YAML file per paper run, dotlist overrides.

``load_config("base", ["optim.lr=2.5e-4", "train.max_steps=100"])`` reads a shipped recipe (or any YAML path)
through the package's one config dialect (:mod:`avey_b.configs`) and builds a ``PretrainConfig``. A key that
does not exist is an error naming the key and the valid keys; ``model.overrides`` is the one free-form mapping
(architecture fields, checked by the model's own config class). Each field's docstring (the string literal
under it) is its documentation, printed by ``describe()`` as the ``--help`` of ``avey-b pretrain``.

This module imports no torch: :func:`build_parser` is the command line of ``avey-b pretrain`` (and of ``torchrun -m
avey_b.training.pretrain``), whose runner is :func:`avey_b.training.pretrain.run`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import configs
from ..configs import apply_overrides, to_dict  # noqa: F401  (part of this module's interface)


@dataclass
class ModelConfig:
    arch: str = "avey-b"
    """``avey-b`` (with ``preset``), or any other model name of ``avey_b.utils.model_spec``, built from config: a
    transformers ``model_type`` (``bert``, ``modernbert``, ``roberta``, ...) or a baseline (``bert-base``,
    ``neobert``, ...)."""
    preset: str | None = "small"
    """Avey-B preset from ``avey_b.model.presets`` (``tiny``, ``small``, ``base``, ``large``); ignored for other
    archs."""
    overrides: dict = field(default_factory=dict)
    """Architecture fields passed to the preset / HF config (e.g. ``{hidden_size: 256, num_hidden_layers: 4}``);
    the ``key=value`` part of a model spec, and checked the same way (an unknown key is an error)."""
    init_from: str | None = None
    """Start from these weights (a local dir or Hub id, ``from_pretrained``) instead of a fresh init."""
    sparse_prediction: bool = True
    """Vocabulary logits only at masked positions (Avey-B, ModernBERT); other HF archs fall back to dense."""


@dataclass
class TokenizerConfig:
    path: str | None = None
    """A tokenizer to use (local dir or Hub id). ``null``: train a byte-level BPE on the training corpus."""
    vocab_size: int = 8192
    """Vocabulary of the trained BPE (padded to a multiple of 64)."""
    train_documents: int = 20000
    """How many training documents the BPE is trained on (a prefix of the stream)."""


@dataclass
class DataConfig:
    train: Any = "python-docs"
    """Training corpus: ``python-docs`` (built in), a file/dir path (or a list), or ``hf:NAME``."""
    eval: Any = None
    """Held-out corpus in the same forms; ``null``: ``eval_fraction`` of the training corpus, by content hash."""
    eval_fraction: float = 0.05
    """Share of training documents held out when ``eval`` is null (they are removed from training)."""
    eval_documents: int = 0
    """If > 0 (and ``eval`` is null): hold out the first N documents of the stream instead of a hashed fraction
    (reads only N documents per evaluation: the choice for huge streamed corpora)."""
    shuffle: bool = False
    """Shuffle the training documents (seeded by train.seed, a new order every epoch). Local / built-in corpora
    are read into memory for this; HF streams use a shuffle buffer. Not with eval_documents."""
    text_field: str = "text"
    """Field/column holding the text in JSONL, Parquet and HF datasets."""
    txt_mode: str = "paragraph"
    """Documents in ``.txt`` files: ``paragraph`` (blank-line separated), ``line`` or ``file``."""
    hf_config: str | None = None
    """HF dataset configuration name (e.g. ``sample-10BT`` for FineWeb)."""
    hf_split: str = "train"
    """HF dataset split to stream for training."""
    hf_eval_split: str | None = None
    """HF split for evaluation (when ``eval`` is an HF name); defaults to ``hf_split``."""
    seq_len: int = 2048
    """Packed sequence length N (the paper: 2048)."""
    mask_rate: float = 0.2
    """Share of tokens masked (the paper: 0.2)."""
    mask_scheme: str = "mask"
    """``mask`` (paper: every masked token -> [MASK]) or ``80-10-10`` (BERT)."""
    add_special_tokens: bool = False
    """Wrap each document in the tokenizer's specials (e.g. [CLS] ... [SEP]) before joining with end-of-text."""
    shard_by: str = "sequence"
    """``sequence`` (batches independent of world size) or ``document`` (no redundant tokenization)."""
    num_workers: int = 1
    """DataLoader worker processes that tokenize (0: in the training process)."""
    chunk_docs: int = 64
    """Documents per tokenization chunk."""


@dataclass
class OptimConfig:
    lr: float = 5e-4
    """Peak learning rate (the paper: 5e-4 base, 2.5e-4 large, 1e-3 constant for ablations)."""
    betas: list = field(default_factory=lambda: [0.95, 0.95])
    """AdamW betas (the paper: 0.95, 0.95)."""
    eps: float = 1e-18
    """AdamW epsilon (the paper: 1e-18)."""
    weight_decay: float = 0.01
    """Decoupled weight decay, applied to parameters with >= 2 dimensions only."""
    clip: float = 1.0
    """Gradient clipping max norm (0: off)."""
    schedule: str = "cosine"
    """``cosine`` (warmup + cosine decay), ``linear`` (warmup + linear decay) or ``constant`` (warmup + flat)."""
    warmup: float = 0.1
    """Warmup length: a fraction of max_steps if < 1, else a number of steps."""
    min_lr_ratio: float = 0.0
    """Final LR as a fraction of the peak for ``cosine``/``linear``."""


@dataclass
class TrainConfig:
    global_batch_tokens: int = 524288
    """Tokens per optimizer step over all ranks (the paper: 2^19); must be a multiple of seq_len."""
    micro_batch_size: int = 8
    """Sequences per forward pass per rank; gradient accumulation makes up the global batch."""
    max_steps: int | None = None
    """Optimizer steps; null: derived from max_tokens."""
    max_tokens: int | None = None
    """Token budget (used when max_steps is null)."""
    max_minutes: float | None = None
    """Stop (with a checkpoint) after this wall time; the schedule still follows max_steps."""
    precision: str = "auto"
    """``auto`` (bf16 autocast on GPU and on CPUs with native bf16, i.e. AMX or AVX512-BF16; fp32 otherwise),
    ``bf16`` (autocast, also on CPU) or ``fp32``."""
    compile: bool = False
    """``torch.compile`` the model."""
    device: str = "auto"
    """``auto``, ``cpu`` or ``cuda``."""
    seed: int = 0
    """Seeds the initialization, the masks and dropout."""
    threads: int | None = None
    """CPU threads (``torch.set_num_threads``). null (or auto): ``OMP_NUM_THREADS`` if set, else one per CPU this
    process may use (its affinity mask and cgroup CPU quota), then fewer when fewer run faster (a CPU shared with
    other busy processes; :class:`avey_b.utils.shared_cpu.ThreadTuner`, docs/threads.md); a number: that count."""
    peak_flops: float | None = None
    """Peak FLOP/s of one device for MFU (null: known GPUs are looked up; CPU MFU is skipped)."""


@dataclass
class EvalConfig:
    every: int = 500
    """Evaluate every N steps (0: only at the end)."""
    max_sequences: int = 256
    """Held-out sequences per evaluation (over all ranks)."""
    at_start: bool = True
    """Also evaluate the untrained model, to report the gain."""
    fill_examples: list = field(default_factory=list)
    """Sentences with [MASK] whose top predictions are printed after training; an entry may be
    ``{text: "... [MASK] ...", answer: word}`` (one [MASK]), and then the run also says whether the word is among
    the top 5 and how many of the examples got it."""


@dataclass
class CheckpointConfig:
    every: int = 1000
    """Save every N steps (0: only at the end / on interruption)."""
    keep_last: int = 3
    """Keep the last K step checkpoints."""


@dataclass
class LoggingConfig:
    every: int = 10
    """Log metrics every N steps."""
    tensorboard: bool = False
    """Also write TensorBoard event files to the run dir."""
    wandb: bool = False
    """Also log to Weights & Biases (project ``wandb_project``)."""
    wandb_project: str = "avey-b"
    """W&B project name."""
    progress: bool = True
    """Show a tqdm progress bar."""


@dataclass
class DistConfig:
    strategy: str = "ddp"
    """``ddp`` or ``fsdp`` (FSDP2, ``fully_shard`` per layer) under torchrun."""


@dataclass
class PretrainConfig:
    run_dir: str = "runs/pretrain"
    """Run directory: resolved config, metrics, checkpoints."""
    model: ModelConfig = field(default_factory=ModelConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    distributed: DistConfig = field(default_factory=DistConfig)

    def validate(self) -> None:
        d, o, t = self.data, self.optim, self.train
        for key, value in (("data.seq_len", d.seq_len), ("train.global_batch_tokens", t.global_batch_tokens),
                           ("train.micro_batch_size", t.micro_batch_size), ("train.max_steps", t.max_steps),
                           ("train.max_tokens", t.max_tokens), ("data.chunk_docs", d.chunk_docs),
                           ("eval.max_sequences", self.eval.max_sequences), ("train.threads", t.threads)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        for key, value in (("data.num_workers", d.num_workers), ("eval.every", self.eval.every),
                           ("checkpoint.every", self.checkpoint.every),
                           ("checkpoint.keep_last", self.checkpoint.keep_last)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} must be an integer >= 0, got {value!r}")
        if not 0 < d.mask_rate < 1:
            raise ValueError(f"data.mask_rate must be in (0, 1), got {d.mask_rate}")
        if not o.lr > 0:
            raise ValueError(f"optim.lr must be > 0, got {o.lr}")
        if self.logging.every < 1:
            raise ValueError(f"logging.every must be a positive integer, got {self.logging.every}")
        if t.global_batch_tokens % d.seq_len:
            raise ValueError(f"train.global_batch_tokens ({t.global_batch_tokens}) must be a multiple of "
                             f"data.seq_len ({d.seq_len})")
        if t.max_steps is None and t.max_tokens is None:
            raise ValueError("set train.max_steps or train.max_tokens")
        if o.schedule not in ("cosine", "linear", "constant"):
            raise ValueError(f"optim.schedule must be cosine, linear or constant, got {o.schedule!r}")
        if t.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"train.precision must be auto, bf16 or fp32, got {t.precision!r}")
        if self.distributed.strategy not in ("ddp", "fsdp"):
            raise ValueError(f"distributed.strategy must be ddp or fsdp, got {self.distributed.strategy!r}")
        if len(o.betas) != 2:
            raise ValueError(f"optim.betas needs two values, got {o.betas}")
        for i, e in enumerate(self.eval.fill_examples):
            text = e.get("text") if isinstance(e, dict) else e
            if isinstance(e, dict) and (set(e) != {"text", "answer"} or not isinstance(e["answer"], str)):
                raise ValueError(f"eval.fill_examples[{i}] must be a sentence or {{text: ..., answer: word}}, "
                                 f"got {e!r}")
            if not isinstance(text, str) or "[MASK]" not in text:
                raise ValueError(f"eval.fill_examples[{i}] has no [MASK]: {e!r}")
            if isinstance(e, dict) and text.count("[MASK]") != 1:
                raise ValueError(f"eval.fill_examples[{i}] has an answer, so it needs exactly one [MASK]: {text!r}")

    @property
    def steps(self) -> int:
        if self.train.max_steps is not None:
            return int(self.train.max_steps)
        return max(1, int(self.train.max_tokens) // self.train.global_batch_tokens)


def load_config(path: str | None = None, overrides: list[str] | None = None) -> PretrainConfig:
    """A validated ``PretrainConfig`` from a YAML path or a shipped recipe name, and ``key=value`` overrides."""
    cfg = configs.load(PretrainConfig, path, overrides, kind="pretrain")
    cfg.validate()
    return cfg


def describe() -> str:
    return configs.describe(PretrainConfig())


# ------------------------------------------------------------------------------------------ command line
#: The command-line flag that accepts a checkpoint or model directory without SHA256SUMS.
TRUST_FLAG = "--trust-unverified"


class _PretrainParser(argparse.ArgumentParser):
    """``--resume`` takes an optional value, so in ``--resume train.threads=1`` argparse gives the override to it:
    such a value (``key=value`` naming no file) goes back among the overrides, where it stood, and ``--resume``
    means the run dir's latest checkpoint."""

    def parse_known_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(argv, namespace)
        resume = getattr(parsed, "resume", None)
        if resume not in (None, "auto") and "=" in resume and not Path(resume).exists():
            before = argv[:argv.index(resume)]
            parsed.overrides.insert(sum(a in parsed.overrides for a in before), resume)
            parsed.resume = "auto"
        return parsed, extras

    def config_keys(self) -> list[tuple[str, object, str]]:
        """``(key, default, documentation)`` of every key of :class:`PretrainConfig`: the epilog lists them as text,
        the manual's page of the verb as a table."""
        return configs.keys(PretrainConfig())


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``avey-b pretrain``: a run config (``--config``), ``key=value`` overrides of it, and how
    to start (afresh, ``--resume``, ``--overwrite``); ``--help`` lists every key of :class:`PretrainConfig`."""
    parser = _PretrainParser(
        prog="avey-b pretrain",
        description="Masked-LM pretraining of Avey-B (or an HF encoder built from config) from a YAML config.",
        epilog=describe(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="YAML file, or a shipped recipe (quickstart, quickstart-long, base, large, "
                        "ablation-10b, debug); omitted: the defaults")
    parser.add_argument("--resume", nargs="?", const="auto", default=None, metavar="CKPT",
                        help="continue from CKPT, or (no value) from the run dir's latest checkpoint; overrides may "
                             "come before or after it (a key=value right after --resume is an override, not CKPT)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start afresh in a run_dir that holds a run, after moving that run aside (never deleted)")
    parser.add_argument(TRUST_FLAG, action="store_true",
                        help="start from a checkpoint (--resume) or model.init_from directory that has no SHA256SUMS, "
                             "whose files therefore cannot be checked (every directory avey-b writes has one)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. optim.lr=1e-3 data.train=my_dir/")
    return parser
