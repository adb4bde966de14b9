"""The options of ``avey-b finetune``'s benchmark cells, declared once: the settings of a fine-tuning cell
(:class:`RunConfig`), where its data comes from (:class:`DataFiles`) and the cell's own options
(:class:`FinetuneOptions`), as documented dataclasses whose fields build the command line
(:func:`avey_b.configs.add_arguments`), the Python API (the functions take the dataclasses) and the records
(``results.json`` holds ``RunConfig.to_dict()``); and the 12 benchmarks, registered here in ``avey-b finetune``'s
task table (:mod:`avey_b.finetuning.registry`). The suites of ``evaluate`` and ``report`` build on these
(:mod:`avey_b.evaluation.suites`), and so does ``niah`` (:mod:`avey_b.evaluation.niah.options`).

Standard library only, so that ``avey-b VERB --help`` imports no torch; the runner is
:func:`avey_b.evaluation.finetune.run`.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields
from typing import Any

from avey_b import configs
from avey_b.finetuning import registry
from avey_b.finetuning.settings import TrainingSettings

#: The paper's benchmark cells as a family of ``avey-b finetune``'s one task table
#: (:mod:`avey_b.finetuning.registry`): options :class:`FinetuneOptions` + :class:`RunConfig` + :class:`DataFiles`,
#: run by :func:`avey_b.evaluation.finetune.run`.
BENCHMARKS = registry.Family("benchmark", "THE PAPER'S BENCHMARKS", parser="avey_b.evaluation.settings:finetune_parser",
                             runner="avey_b.evaluation.finetune:run")
#: The paper's 12 downstream benchmarks, in the column order of its Table 3 (family by family), registered in the
#: task table; each is a :class:`~avey_b.evaluation.tasks.base.Task` class (:data:`avey_b.evaluation.tasks.TASKS`).
TASK_NAMES: tuple[str, ...] = registry.register(BENCHMARKS, {
    "mnli": "avey_b.evaluation.tasks.sc:MNLI", "qqp": "avey_b.evaluation.tasks.sc:QQP",
    "sst2": "avey_b.evaluation.tasks.sc:SST2", "conll2003": "avey_b.evaluation.tasks.tc:CoNLL2003",
    "ontonotes": "avey_b.evaluation.tasks.tc:OntoNotes", "uner": "avey_b.evaluation.tasks.tc:UNER",
    "record": "avey_b.evaluation.tasks.qa:ReCoRD", "squad": "avey_b.evaluation.tasks.qa:SQuAD",
    "squad_v2": "avey_b.evaluation.tasks.qa:SQuADv2", "mldr": "avey_b.evaluation.tasks.ir:MLDR",
    "msmarco": "avey_b.evaluation.tasks.ir:MSMARCO", "nq": "avey_b.evaluation.tasks.ir:NQ",
})
PROTOCOLS = ("standard", "paper")
AVEY_B_PADDINGS = ("masked", "release")  # AveyBConfig.padding's options
AVEY_B_ACCUMULATIONS = ("mean", "sum")
WEIGHTS_DTYPES = ("float32", "bfloat16")
AGGREGATES = ("median", "best")

#: Learning rates x number of seeds (0 .. N-1) of a sweep (:mod:`avey_b.evaluation.protocol`).
GRIDS: dict[str, tuple[tuple[float, ...], int]] = {
    "paper": ((2e-5, 6e-5, 1e-4, 5e-4), 10),  # the paper's text (§5.1) and the release's driver (run.py)
    "encodeval": ((2e-5, 6e-5, 1e-4, 5e-4, 1e-3, 2e-3), 20),  # every config file the release ships (not all run)
}


# ------------------------------------------------------------------------------------------ one fine-tuning cell
@dataclass
class RunConfig(TrainingSettings):
    """Settings of one fine-tuning cell (one model x one task x one lr x one seed): the training settings every
    fine-tuning shares (:class:`~avey_b.finetuning.settings.TrainingSettings`: ``lr``, ``seed``, ``batch_size``,
    ``warmup_ratio``, ``max_train_examples``, ``precision``, ``device``, ``threads`` as declared there; ``epochs``,
    ``weight_decay`` and ``max_length`` declared again below, with the reason for their defaults) and the
    protocol's own."""

    protocol: str = "standard"
    """``standard`` (the benchmarks' own metrics, this dataclass's defaults) or ``paper``: the protocol the paper
    adopted (§5.1, EncodEval), its training settings (:mod:`avey_b.evaluation.protocol`) and scoring (metrics.py)."""
    epochs: float | None = None
    """Training epochs; None takes the task family's default, the paper's (§5.1: SC/TC 1, QA 4; IR counts steps),
    not the general 3: a benchmark cell trains as long as the paper's."""
    max_steps: int | None = None
    """Optimizer steps; overrides epochs. None takes the family default for step-based tasks (IR 1000)."""
    grad_accumulation: int = 1
    """Micro-batches per optimizer step: each step's ``batch_size`` examples go through the model in this many
    forward/backward passes (at most one example each), their gradients summed with weights that make the step
    equal to one pass over the whole batch. Saves memory; EncodEval's QA runs 32 as 16 x 2 (ReCoRD 4 x 8)."""
    eval_batch_size: int = 64
    """Examples per forward pass when scoring."""
    max_length: int | None = 512
    """Tokens per input (documents for IR; question + context window for QA). 512, not the general None: the
    standard protocol reads every model's inputs at BERT's window, so that scores compare. None: no truncation
    beyond the model's own limit, computed as EncodEval's ``max_length: null`` does (0.99 x the position table:
    BERT 507, RoBERTa 509, ModernBERT 8,110, NeoBERT 4,055 tokens; no limit for Avey-B), the paper protocol's."""
    query_max_length: int | None = 64
    """IR only: tokens per query. None: as ``max_length: None``."""
    doc_stride: int = 128
    """QA only: tokens shared by two consecutive windows of a long context."""
    max_answer_length: int = 30
    """QA only: longest answer span, in tokens."""
    weight_decay: float = 0.0
    """AdamW weight decay (decoupled), as transformers' Trainer applies it: not on biases and normalization weights.
    0, not BERT's 0.01: the standard protocol's cells are recorded without weight decay (transformers'
    ``TrainingArguments`` default); the paper protocol's table sets EncodEval's 0.1."""
    adam_beta1: float = 0.9
    """AdamW β1."""
    adam_beta2: float = 0.999
    """AdamW β2."""
    adam_epsilon: float = 1e-8
    """AdamW ε."""
    weights_dtype: str = "float32"
    """``float32`` or ``bfloat16``: the dtype the model's weights are loaded in (``from_pretrained(dtype=...)``)
    and trained in. ``bfloat16`` is EncodEval's ``dtype: bfloat16``: weights, gradients and AdamW's moments all in
    bf16."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this value (0: no clipping)."""
    normalize_embeddings: bool = True
    """IR only: L2-normalise the mean-pooled embeddings (retrieval by cosine)."""
    ir_scale: float = 20.0
    """IR only: InfoNCE logit scale on cosine similarities (sentence-transformers' default)."""
    max_eval_examples: int | None = None
    """Score only the first N examples (IR: queries)."""
    trust_remote_code: bool = False
    """Run a Hub model's own code (NeoBERT)."""
    corpus_chunk: int = 65536
    """IR only: corpus documents encoded and scored per chunk (bounds the memory of retrieval)."""
    avey_b_padding: str | None = None
    """Avey-B only (SC, TC, QA): ``masked`` or ``release``, the model's ``AveyBConfig.padding`` for the cell
    (``release``: padding processed as tokens, as the authors' release computes). None: the protocol's choice,
    ``release`` for the authors' checkpoints under ``paper`` (:func:`avey_b.evaluation.protocol.avey_b_settings`),
    else the checkpoint's own. Each ``results.json`` records what ran (``avey_b``)."""
    avey_b_accumulation: str | None = None
    """Avey-B only: how the micro-batch losses of an accumulated step combine, ``mean`` (weighted: the step equals
    one pass over the whole batch; every baseline) or ``sum`` (the micro-batch means added, as transformers 4.50's
    Trainer, which EncodEval ran, does for the release's heads). None: the protocol's choice, ``sum`` under
    ``paper``, else ``mean``."""

    def __post_init__(self) -> None:
        super().__post_init__()  # the shared fields' checks
        if self.weights_dtype not in WEIGHTS_DTYPES:
            raise ValueError(f"weights_dtype must be one of {WEIGHTS_DTYPES}, got {self.weights_dtype!r}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if self.avey_b_padding not in (None, *AVEY_B_PADDINGS):
            raise ValueError(f"avey_b_padding must be one of {AVEY_B_PADDINGS} or None, got {self.avey_b_padding!r}")
        if self.avey_b_accumulation not in (None, *AVEY_B_ACCUMULATIONS):
            raise ValueError(f"avey_b_accumulation must be one of {AVEY_B_ACCUMULATIONS} or None, got "
                             f"{self.avey_b_accumulation!r}")
        if self.corpus_chunk < 1:
            raise ValueError(f"corpus_chunk must be >= 1, got {self.corpus_chunk}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        for name in ("grad_accumulation", "eval_batch_size", "query_max_length", "max_answer_length"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1):
            raise ValueError(f"adam_beta1 and adam_beta2 must be in [0, 1), got {self.adam_beta1}, {self.adam_beta2}")
        if not self.adam_epsilon > 0:
            raise ValueError(f"adam_epsilon must be > 0, got {self.adam_epsilon}")
        if self.doc_stride < 0:
            raise ValueError(f"doc_stride must be >= 0, got {self.doc_stride}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def add_arguments(cls, parser, *, exclude=("lr", "seed"), include=None, defaults: bool | dict = True) -> list[str]:
        """One flag per field (``--max-length``, ...; :func:`avey_b.configs.add_arguments`), for ``finetune``,
        ``evaluate`` and ``niah evaluate``. ``lr`` and ``seed`` are left to each command (one value, or a list)."""
        return configs.add_arguments(parser, cls, exclude=exclude, include=include, defaults=defaults,
                                     choices={"precision": configs.PRECISIONS, "protocol": PROTOCOLS,
                                              "weights_dtype": WEIGHTS_DTYPES, "avey_b_padding": AVEY_B_PADDINGS,
                                              "avey_b_accumulation": AVEY_B_ACCUMULATIONS})

    @classmethod
    def from_args(cls, args, **given) -> RunConfig:
        """The settings of a namespace made with :meth:`add_arguments` (fields it lacks keep their defaults),
        then ``given``."""
        return cls(**given_settings(args) | given)


def given_settings(args) -> dict[str, Any]:
    """The :class:`RunConfig` fields that ``args`` (a namespace, or an options dataclass) holds."""
    names = {f.name for f in fields(RunConfig)}
    return {k: v for k, v in vars(args).items() if k in names}


@dataclass
class DataFiles:
    """Where a task's data comes from. Unset paths fall back to the Hugging Face Hub ids of the task."""

    train: str | None = None
    """Local training file (GLUE TSV / JSONL, CoNLL columns, SQuAD JSON, BEIR dir or pairs JSONL/TSV)."""
    eval: str | None = None
    """Local evaluation file (same formats; for IR a BEIR directory)."""
    train_split: str | None = None
    eval_split: str | None = None
    """Hub split names; None takes the task's defaults."""
    holdout: float | None = None
    """Without an evaluation source: score on this fraction of the training data, held out (fixed seed 0,
    the same for every cell) and never trained on."""


#: command-line flag (its dest) -> DataFiles field
DATA_FLAGS = {"train_file": "train", "eval_file": "eval", "train_split": "train_split", "eval_split": "eval_split",
              "holdout": "holdout"}


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``finetune`` and ``evaluate`` (everything but model/task/lr/seed): the data files, and one
    flag per :class:`RunConfig` field. A flag not given is absent from the namespace, so that it overrides only
    what it names: the protocol's table (``finetune``), the suite file (``evaluate``)."""
    g = p.add_argument_group("data (default: the task's Hugging Face datasets)")
    g.add_argument("--train-file", default=argparse.SUPPRESS,
                   help="local training data (GLUE TSV/JSONL, CoNLL, SQuAD JSON, pairs or BEIR dir)")
    g.add_argument("--eval-file", default=argparse.SUPPRESS,
                   help="local evaluation data (same formats; a BEIR directory for IR)")
    g.add_argument("--train-split", default=argparse.SUPPRESS, help="Hub / BEIR split to train on (default per task)")
    g.add_argument("--eval-split", default=argparse.SUPPRESS, help="Hub / BEIR split to score on (default per task)")
    g.add_argument("--holdout", type=float, default=argparse.SUPPRESS,
                   help="score on this fraction of the training data, held out")
    subset = ("max_train_examples", "max_eval_examples")
    RunConfig.add_arguments(g, include=subset, defaults=False)
    t = p.add_argument_group("training and scoring (RunConfig)")
    RunConfig.add_arguments(t, exclude=("lr", "seed", *subset), defaults=False)


def given_data(args) -> dict[str, Any]:
    """The :class:`DataFiles` fields that the command line's data flags set."""
    return {name: getattr(args, flag) for flag, name in DATA_FLAGS.items() if hasattr(args, flag)}


# ------------------------------------------------------------------------------------------ finetune
@dataclass
class FinetuneOptions:
    """``avey-b finetune``: one model, one task, one learning rate and seed (the cell's other settings are a
    :class:`RunConfig`, its data :class:`DataFiles`)."""

    model: str
    """Hub id or local directory of any encoder (Avey-B, BERT, ...)."""
    task: str
    """The benchmark to fine-tune on and score."""
    lr: float
    """Peak learning rate (required: a benchmark cell is one point of the paper's grid, 2e-5, 6e-5, 1e-4 or 5e-4
    (§5.1); avey-b evaluate sweeps the grid and reports the best)."""
    output_dir: str
    """results.json is written here."""
    seed: int = 0
    """Seeds the head initialisation, the data order and dropout."""
    save_model: str | None = None
    """Also save the fine-tuned model and its tokenizer to this directory."""
    finetuned: str | None = None
    """Retrieval under --protocol paper: score this model, trained on MS MARCO pairs before (--save-model of such
    a run), zero-shot instead of training one."""
    tokenizer: str | None = None
    """Tokenizer name/path when the model directory has none."""


def finetune_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b finetune", description="Fine-tune one encoder on one task with one "
                                "learning rate and one seed, then score it (one \"cell\").")
    configs.add_arguments(p, FinetuneOptions, exclude=("tokenizer",), choices={"task": TASK_NAMES})
    add_run_arguments(p)
    configs.add_arguments(p, FinetuneOptions, include=("tokenizer",))
    return p
