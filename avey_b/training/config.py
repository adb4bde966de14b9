"""Pretraining runs as data: a dataclass tree, one YAML file per paper run, dotlist overrides.

``load_config("configs/pretrain/base.yaml", ["optim.lr=2.5e-4", "train.max_steps=100"])`` reads the YAML,
applies the overrides (values parsed as YAML: ``1e-3``, ``true``, ``[a, b]``, ``null``), and builds a
``PretrainConfig``. A key that does not exist is an error naming the key and the valid keys; ``model.overrides``
is the one free-form mapping (architecture fields, checked by the model's own config class).
A YAML file may say ``base: other.yaml`` (relative to itself) to start from another file.

Each field's docstring (the string literal under it) is the documentation; ``describe()`` prints them all as
the ``--help`` of ``avey-b pretrain``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import yaml


@dataclass
class ModelConfig:
    arch: str = "avey-b"
    """``avey-b``, or an HF masked-LM ``model_type`` built from config (``bert``, ``modernbert``, ``roberta``, ...)."""
    preset: str | None = "small"
    """Avey-B preset from ``avey_b.presets`` (``tiny``, ``small``, ``base``, ``large``); ignored for HF archs."""
    overrides: dict = field(default_factory=dict)
    """Architecture fields passed to the preset / HF config (e.g. ``{hidden_size: 256, num_hidden_layers: 4}``)."""
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
    """``torch.set_num_threads`` (null: leave PyTorch's default)."""
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
    """Sentences with [MASK] whose top predictions are printed after training."""


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
        if d.seq_len < 1:
            raise ValueError(f"data.seq_len must be >= 1, got {d.seq_len}")
        if t.global_batch_tokens % d.seq_len:
            raise ValueError(f"train.global_batch_tokens ({t.global_batch_tokens}) must be a multiple of data.seq_len ({d.seq_len})")
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

    @property
    def steps(self) -> int:
        if self.train.max_steps is not None:
            return int(self.train.max_steps)
        return max(1, int(self.train.max_tokens) // self.train.global_batch_tokens)


# -------------------------------------------------------------------------------------------- loading
def _build(cls, data: dict, prefix: str = ""):
    if not isinstance(data, dict):
        raise TypeError(f"config section {prefix.rstrip('.') or '<root>'!r} must be a mapping, got {type(data).__name__}")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise KeyError(f"unknown config key {prefix + key!r}; valid keys in {prefix.rstrip('.') or 'the root'}: {sorted(names)}")
        typ = hints[key]
        if dataclasses.is_dataclass(typ):
            kwargs[key] = _build(typ, value or {}, prefix + key + ".")
        else:
            kwargs[key] = _coerce(value, typ, prefix + key)
    return cls(**kwargs)


def _coerce(value, typ, key):
    # YAML parses `1e-3` as a string (YAML 1.1); accept numbers written that way for float/int fields.
    if value is None:
        return None
    base = [t for t in getattr(typ, "__args__", (typ,)) if t is not type(None)]
    if float in base and isinstance(value, (int, str)) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError as e:
            raise ValueError(f"config key {key!r} expects a number, got {value!r}") from e
    if int in base and isinstance(value, float) and value.is_integer():
        return int(value)
    if int in base and isinstance(value, str):
        try:
            return int(float(value))
        except ValueError as e:
            raise ValueError(f"config key {key!r} expects an integer, got {value!r}") from e
    if dict in base and not isinstance(value, dict):
        raise TypeError(f"config key {key!r} expects a mapping, got {value!r}")
    return value


def _read_yaml(path: Path) -> dict:
    if not path.exists():
        raise FileNotFoundError(f"config file not found: {str(path)!r}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise TypeError(f"{path}: the top level must be a mapping")
    base = data.pop("base", None)
    if base is not None:
        parent = _read_yaml((path.parent / base).resolve())
        data = _merge(parent, data)
    return data


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "overrides" else v
    return out


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a nested dict."""
    data = dict(data)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not of the form key=value (e.g. optim.lr=1e-3)")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw != "" else None
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node[p] = dict(node.get(p) or {})
            node = node[p]
        node[parts[-1]] = value
    return data




CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "pretrain"


def resolve_config_path(path: str) -> Path:
    """A YAML path, or the bare name of a shipped config (``quickstart`` -> ``configs/pretrain/quickstart.yaml``)."""
    p = Path(path)
    if not p.exists() and p.suffix == "" and (CONFIG_DIR / f"{path}.yaml").exists():
        return CONFIG_DIR / f"{path}.yaml"
    return p


def load_config(path: str | None = None, overrides: list[str] | None = None) -> PretrainConfig:
    data = _read_yaml(resolve_config_path(path)) if path else {}
    data = apply_overrides(data, overrides or [])
    cfg = _build(PretrainConfig, data)
    cfg.validate()
    return cfg


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def dump_yaml(cfg, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


# ------------------------------------------------------------------------------------------ help text
def _field_docs(cls) -> dict[str, str]:
    """The string literal under each field (litgpt style)."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source shipped (e.g. bytecode-only install): help without the docs
        return {}
    body = ast.parse(src).body[0].body
    docs = {}
    for a, b in zip(body, body[1:], strict=False):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(getattr(b, "value", None), ast.Constant):
            docs[a.target.id] = " ".join(str(b.value.value).split())
    return docs


def describe() -> str:
    lines = ["config keys (override with key=value):"]
    root = PretrainConfig()
    docs = _field_docs(PretrainConfig)
    for f in dataclasses.fields(PretrainConfig):
        value = getattr(root, f.name)
        if dataclasses.is_dataclass(value):
            sub = _field_docs(type(value))
            for g in dataclasses.fields(value):
                lines.append(f"  {f.name}.{g.name} = {getattr(value, g.name)!r}\n      {sub.get(g.name, '')}")
        else:
            lines.append(f"  {f.name} = {value!r}\n      {docs.get(f.name, '')}")
    return "\n".join(lines)
