"""The training settings every fine-tuning shares, declared once: :class:`TrainingSettings`, the fields (and their
checks) that your own data's options (:class:`avey_b.finetuning.options.OwnDataOptions`) and a benchmark cell's
settings (the paper protocol's ``RunConfig``) hold alike. Each record inherits them, flags, YAML/JSON keys and
checks included, and declares a field again only where its default must differ, its docstring saying why.
Standard library only (``--help`` imports no torch).
"""

from __future__ import annotations

from dataclasses import dataclass

from avey_b import configs


@dataclass
class TrainingSettings:
    """Peak learning rate, schedule, batch, input length, seed, precision and where it runs: what every fine-tuning
    takes. The defaults are BERT's fine-tuning recipe (Devlin et al. 2019, App. A.3) where it has one."""

    lr: float = 5e-5
    """Peak learning rate (AdamW), linear warm-up over ``warmup_ratio`` of the steps, then linear decay to 0. 5e-5:
    BERT's fine-tuning recommendation (Devlin et al. 2019, App. A.3), transformers' and sentence-transformers'
    trainer default."""
    seed: int = 0
    """Seeds the head initialisation, the data order and dropout."""
    epochs: float = 3.0
    """Passes over the training data (BERT's fine-tuning recommendation is 2 to 4)."""
    batch_size: int = 32
    """Training examples per optimizer step (with gradient accumulation: all its micro-batches together); your own
    data's tasks also score in batches of this size."""
    warmup_ratio: float = 0.1
    """Share of the steps spent warming the learning rate up from 0."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay, not on biases and normalization weights (as transformers' Trainer applies
    it); 0.01 is BERT's."""
    max_length: int | None = None
    """Tokens per input, longer ones cut. None: nothing is cut for Avey-B (no position limit): the longest input
    may be as long as memory allows (half the available memory at 24 bytes per token and unit of width, as
    avey-b embed computes it) and a longer one is an error naming its file and line; for a model with a
    position limit (BERT: 512), that limit, and results.json counts the inputs cut."""
    max_train_examples: int | None = None
    """Train on only the first N training examples (your own data: after the validation rows are held out;
    rerank: the first N training queries, with all their documents)."""
    precision: str = "auto"
    """auto: bf16 autocast on CUDA and on CPUs that multiply bf16 natively (AMX / AVX512-BF16), float32 elsewhere
    (the policy of pretraining's ``precision: auto``); bf16 or fp32 force one."""
    device: str | None = None
    """cpu, cuda or mps (a benchmark cell also cuda:1, ...); None: CUDA when available. Your own data's tasks
    train with transformers' Trainer, which takes the first visible GPU: choose another with
    CUDA_VISIBLE_DEVICES."""
    threads: int | None = None
    """CPU threads for PyTorch. auto (None in Python, the default): PyTorch's default capped at the CPUs this
    process may use (its affinity mask and cgroup CPU quota), unless OMP_NUM_THREADS is set (a sweep worker: its
    share); then fewer when fewer run the training steps faster on this machine (a CPU that other busy processes
    share), said in one line (docs/threads.md). N: that count, never changed. Like the device, not part of a run's
    settings: it changes no score."""

    def __post_init__(self) -> None:
        if self.precision not in configs.PRECISIONS:
            raise ValueError(f"precision must be one of {configs.PRECISIONS}, got {self.precision!r}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.epochs is not None and not self.epochs > 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        for name in ("batch_size", "max_length", "max_train_examples", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
