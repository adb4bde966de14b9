"""The options of ``avey-b finetune``, ``evaluate``, ``report`` and ``niah``, each declared once: the settings of a
fine-tuning cell (:class:`RunConfig`), where its data comes from (:class:`DataFiles`), an evaluation suite
(:class:`SuiteConfig`) and each verb's own options, as documented dataclasses whose fields build the command line
(:func:`avey_b.configs.add_arguments`), the Python API (the functions take the dataclasses) and the records
(``results.json`` holds ``RunConfig.to_dict()``).

Standard library only, so that ``avey-b VERB --help`` imports no torch; the runners are
:func:`avey_b.evaluation.finetune.run`, :func:`avey_b.evaluation.sweep.run`, :func:`avey_b.evaluation.report.run`
and :func:`avey_b.evaluation.niah.cli.run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from avey_b import configs
from avey_b.data import niah as niah_data
from avey_b.utils.cluster import BACKENDS
from avey_b.utils.records import slug

from .niah.forms import FORM_DEFAULTS, FORMS

#: The paper's 12 downstream benchmarks, in the column order of its Table 3 (family by family); each is a
#: :class:`~avey_b.evaluation.tasks.base.Task` of :data:`avey_b.evaluation.tasks.TASKS`.
TASK_NAMES = ("mnli", "qqp", "sst2", "conll2003", "ontonotes", "uner", "record", "squad", "squad_v2", "mldr",
              "msmarco", "nq")
PROTOCOLS = ("standard", "paper")
WEIGHTS_DTYPES = ("float32", "bfloat16")
AGGREGATES = ("median", "best")

#: Learning rates x number of seeds (0 .. N-1) of a sweep (:mod:`avey_b.evaluation.protocol`).
GRIDS: dict[str, tuple[tuple[float, ...], int]] = {
    "paper": ((2e-5, 6e-5, 1e-4, 5e-4), 10),  # the paper's text (§5.1)
    "encodeval": ((2e-5, 6e-5, 1e-4, 5e-4, 1e-3, 2e-3), 20),  # the release's EncodEval configs
}


# ------------------------------------------------------------------------------------------ one fine-tuning cell
@dataclass
class RunConfig:
    """Settings of one fine-tuning cell (one model x one task x one lr x one seed)."""

    lr: float = 5e-5
    """Peak learning rate (AdamW); linear warm-up over ``warmup_ratio`` of the steps, then linear decay to 0."""
    seed: int = 0
    """Seeds the head initialisation, the data order and dropout."""
    protocol: str = "standard"
    """``standard`` (the benchmarks' own metrics, this dataclass's defaults) or ``paper``: the protocol the paper
    adopted (§5.1, EncodEval), its training settings (:mod:`avey_b.evaluation.protocol`) and scoring (metrics.py)."""
    epochs: float | None = None
    """Training epochs; None takes the task family's default (SC/TC 1, QA 4)."""
    max_steps: int | None = None
    """Optimizer steps; overrides epochs. None takes the family default for step-based tasks (IR 1000)."""
    batch_size: int = 32
    """Training examples per optimizer step (with accumulation: all its micro-batches together)."""
    grad_accumulation: int = 1
    """Micro-batches per optimizer step: each step's ``batch_size`` examples go through the model in this many
    forward/backward passes (at most one example each), their gradients summed with weights that make the step
    equal to one pass over the whole batch. Saves memory; EncodEval's QA runs 32 as 16 x 2 (ReCoRD 4 x 8)."""
    eval_batch_size: int = 64
    """Examples per forward pass when scoring."""
    max_length: int | None = 512
    """Tokens per input (documents for IR; question + context window for QA). None: no truncation beyond the
    model's own limit, computed as EncodEval's ``max_length: null`` does (0.99 x the position table: BERT 507,
    RoBERTa 509, ModernBERT 8,110, NeoBERT 4,055 tokens; no limit for Avey-B)."""
    query_max_length: int | None = 64
    """IR only: tokens per query. None: as ``max_length: None``."""
    doc_stride: int = 128
    """QA only: tokens shared by two consecutive windows of a long context."""
    max_answer_length: int = 30
    """QA only: longest answer span, in tokens."""
    warmup_ratio: float = 0.1
    """Share of the steps spent warming the learning rate up from 0."""
    weight_decay: float = 0.0
    """AdamW weight decay (decoupled), as transformers' Trainer applies it: not on biases and normalization weights."""
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
    precision: str = "auto"
    """``auto``: bf16 autocast on CUDA and on CPUs that multiply bf16 natively (AMX / AVX512-BF16), float32
    elsewhere — the policy of pretraining's ``precision: auto``; ``bf16`` or ``fp32`` force one."""
    normalize_embeddings: bool = True
    """IR only: L2-normalise the mean-pooled embeddings (retrieval by cosine)."""
    ir_scale: float = 20.0
    """IR only: InfoNCE logit scale on cosine similarities (sentence-transformers' default)."""
    max_train_examples: int | None = None
    """Use only the first N training examples."""
    max_eval_examples: int | None = None
    """Score only the first N examples (IR: queries)."""
    device: str | None = None
    """``cpu``, ``cuda``, ``cuda:1``...; None picks CUDA when available."""
    trust_remote_code: bool = False
    """Run a Hub model's own code (NeoBERT)."""
    corpus_chunk: int = 65536
    """IR only: corpus documents encoded and scored per chunk (bounds the memory of retrieval)."""

    def __post_init__(self) -> None:
        if self.precision not in configs.PRECISIONS:
            raise ValueError(f"precision must be one of {configs.PRECISIONS}, got {self.precision!r}")
        if self.weights_dtype not in WEIGHTS_DTYPES:
            raise ValueError(f"weights_dtype must be one of {WEIGHTS_DTYPES}, got {self.weights_dtype!r}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if self.corpus_chunk < 1:
            raise ValueError(f"corpus_chunk must be >= 1, got {self.corpus_chunk}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.epochs is not None and not self.epochs > 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        for name in ("batch_size", "grad_accumulation", "eval_batch_size", "max_length", "query_max_length",
                     "max_answer_length"):
            value = getattr(self, name)
            if value is None and name in ("max_length", "query_max_length"):
                continue
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1):
            raise ValueError(f"adam_beta1 and adam_beta2 must be in [0, 1), got {self.adam_beta1}, {self.adam_beta2}")
        if not self.adam_epsilon > 0:
            raise ValueError(f"adam_epsilon must be > 0, got {self.adam_epsilon}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
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
                                              "weights_dtype": WEIGHTS_DTYPES})

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


# ------------------------------------------------------------------------------------------ evaluate
@dataclass
class SuiteConfig:
    """An evaluation suite (``avey_b/configs/eval/*.yaml``); command-line flags override its values
    (:func:`suite_from_args`)."""

    description: str = ""
    """What the suite is for and how to run it (free text)."""
    models: dict = field(default_factory=dict)
    """Report name -> local directory or Hub id, or -> {model: directory or Hub id, <RunConfig field>: value}
    for settings of that model only (``trust_remote_code: true`` for NeoBERT)."""
    tasks: list = field(default_factory=list)
    """Task names (``mnli``, ``sst2``, ``conll2003``, ``squad``, ``msmarco``, ...)."""
    lrs: list | None = None
    """Learning rates; null: the paper's 2e-5, 6e-5, 1e-4, 5e-4."""
    seeds: Any = None
    """A number of seeds (0 .. N-1) or a list of seeds; null: the grid's."""
    grid: str | None = None
    """Learning rates and seeds unless ``lrs``/``seeds`` are set: ``paper`` (the paper's text: 4 x 10, the default)
    or ``encodeval`` (the authors' EncodEval configs: 6 x 20)."""
    protocol: str | None = None
    """``standard`` (default: the benchmarks' own metrics, RunConfig's defaults) or ``paper`` (EncodEval's
    settings and scoring, :mod:`avey_b.evaluation.protocol`)."""
    aggregate: str = "median"
    """``median`` over seeds at the best learning rate (the paper) or ``best`` single run (ablations)."""
    output_dir: str | None = None
    """Root of the per-cell directories and the report."""
    defaults: dict = field(default_factory=dict)
    """``RunConfig`` fields for every task (batch_size, max_length, epochs, ...)."""
    task_overrides: dict = field(default_factory=dict)
    """Task -> ``RunConfig`` fields for that task only (``msmarco_pairs``: the paper protocol's IR training)."""
    data: dict = field(default_factory=dict)
    """Task -> local data (``train``, ``eval``, ``train_split``, ``eval_split``, ``holdout``); under the paper
    protocol the IR benchmarks take only ``eval``/``eval_split`` and ``msmarco_pairs`` only ``train``/``train_split``."""
    tokenizer: str | None = None
    """A tokenizer for every model (default: each model's own)."""
    settings: dict = field(default_factory=dict)
    """``RunConfig`` fields for every cell, over ``defaults``, ``task_overrides`` and the models' settings (where
    the command line's flags go)."""
    files: dict = field(default_factory=dict)
    """Local data of a suite's single task (``data``'s keys), over ``data``; under the paper protocol a retrieval
    benchmark's ``train``/``train_split`` go to its ``msmarco_pairs`` training (where ``--train-file``, ... go)."""


def load_suite(path: str | None) -> SuiteConfig:
    """A suite read strictly through the package's config dialect (a path or a shipped name; None: empty)."""
    return SuiteConfig() if path is None else configs.load(SuiteConfig, path, kind="eval")


def parse_models(items: list[str] | dict[str, Any]) -> dict[str, str]:
    """``name=path`` or a bare path/Hub id (named after its last component); a suite's mapping name -> path, or
    name -> {model: path, <RunConfig field>: value, ...} (see ``sweep.model_settings``)."""
    if isinstance(items, dict):
        return {slug(str(k)): str(v["model"] if isinstance(v, dict) else v) for k, v in items.items()}
    out: dict[str, str] = {}
    for item in items:
        name, _, path = item.partition("=") if "=" in item else (os.path.basename(item.rstrip("/")), "", item)
        name = slug(name)
        if name in out:
            raise ValueError(f"two models named {name!r}; name them explicitly with NAME=PATH")
        out[name] = path
    return out


@dataclass
class EvaluateOptions:
    """``avey-b evaluate``: which suite, what of it the command line replaces, and how the cells run. A flag not
    given leaves the suite's value (:func:`suite_from_args`)."""

    config: str | None = None
    """Suite YAML, or a shipped suite (``avey_b/configs/eval/``)."""
    models: list[str] | None = None
    """NAME=PATH_OR_HUB_ID (or a bare path/id) ..."""
    tasks: list[str] | None = None
    """Task names."""
    lrs: list[float] | None = None
    """Learning rates (default: 2e-5 6e-5 1e-4 5e-4)."""
    seeds: int | None = None
    """Number of seeds 0..N-1 (default 10)."""
    grid: str | None = None
    """Learning rates x seeds unless --lrs/--seeds: paper (the paper's text, 2e-5 6e-5 1e-4 5e-4 x 10 seeds;
    default) or encodeval (the authors' configs, also 1e-3 2e-3, x 20 seeds)."""
    aggregate: str | None = None
    """Median over seeds at the best lr (paper, default) or best single run (ablations)."""
    output_dir: str | None = None
    """Root of the per-cell directories and the report."""
    tokenizer: str | None = None
    """Tokenizer name/path for every model (default: each model's own)."""
    workers: int | None = None
    """Cells run at once, each in its own process (default: 1, or one per --devices entry); on Ray without GPUs:
    cells at once per node."""
    devices: str | None = None
    """Comma-separated CUDA device ids to spread the workers over."""
    isolate: bool = False
    """Run every cell in a subprocess even with 1 worker."""
    backend: str = "local"
    """local: on this machine; ray: each cell a Ray task, one GPU each where the cluster has GPUs, else 1/--workers
    of a node's CPUs; --output-dir on a filesystem every node sees (pip install 'avey-b[ray]')."""
    ray_address: str | None = None
    """Ray: the cluster to join (auto: the one this machine belongs to, or host:port); default: a local Ray
    started for the sweep."""
    dry_run: bool = False
    """List the cells and exit."""
    report_only: bool = False
    """Only aggregate the existing results."""


#: EvaluateOptions fields that replace the suite's value of the same name when given
_SUITE_FLAGS = ("models", "tasks", "lrs", "seeds", "grid", "aggregate", "output_dir", "tokenizer")


def evaluate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="avey-b evaluate", description="The paper's downstream protocol (paper §5.1): every model x task x "
        "learning rate x seed, then the report.",
        epilog="A flag given here overrides the suite's value. On Ray (--backend ray) each cell is a Ray task on the "
               "cluster at --ray-address; see the module docstring of avey_b.evaluation.sweep.")
    configs.add_arguments(p, EvaluateOptions, defaults=False,
                          choices={"grid": tuple(GRIDS), "aggregate": AGGREGATES, "backend": BACKENDS})
    p.add_argument("--run-cell", default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # internal: one cell's cell.json
    add_run_arguments(p)
    return p


def suite_from_args(args, suite: SuiteConfig | None = None) -> SuiteConfig:
    """The suite that ``args`` (of :func:`evaluate_parser`) asks for: ``suite`` (default: the ``--config`` file),
    with every flag given on the command line over it. ``--grid`` replaces the suite's ``lrs``/``seeds`` too (unless
    ``--lrs``/``--seeds``); RunConfig flags go to ``settings`` (over everything the suite sets), data flags to
    ``files``."""
    suite = load_suite(getattr(args, "config", None)) if suite is None else suite
    given = {k: getattr(args, k) for k in _SUITE_FLAGS if getattr(args, k, None) is not None}
    if "grid" in given:
        given = {"lrs": None, "seeds": None} | given
    if "models" in given:
        given["models"] = parse_models(given["models"])
    settings = {k: v for k, v in given_settings(args).items() if k not in ("lr", "seed")}
    return dataclasses.replace(suite, **given, settings=suite.settings | settings, files=suite.files | given_data(args))


# ------------------------------------------------------------------------------------------ report
@dataclass
class ReportOptions:
    """``avey-b report``: the Table-3 report of a sweep's output directory."""

    output_dir: str
    """The sweep's output directory."""
    aggregate: str = "median"
    """Median over seeds at the best lr (the paper) or the best single run (ablations)."""
    protocol: str | None = None
    """Needed when the directory holds both protocols."""


def report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b report", description="Aggregate results.json cells into the paper's "
                                "Table 3 layout (Markdown) and JSON.")
    p.add_argument("output_dir", help=configs.field_docs(ReportOptions)["output_dir"])
    configs.add_arguments(p, ReportOptions, exclude=("output_dir",),
                          choices={"aggregate": AGGREGATES, "protocol": PROTOCOLS})
    return p


# ------------------------------------------------------------------------------------------ niah
#: The fine-tuning settings ``niah evaluate`` takes (flags generated from RunConfig); the window (``max_length``,
#: ``doc_stride``) follows from each input's length.
NIAH_SETTINGS = ("epochs", "max_steps", "batch_size", "eval_batch_size", "max_train_examples", "max_eval_examples",
                 "warmup_ratio", "weight_decay", "grad_clip", "max_answer_length", "precision", "device",
                 "trust_remote_code")


#: RunConfig's defaults that ``niah evaluate`` changes (before the form's, :data:`FORM_DEFAULTS`)
NIAH_RUN_DEFAULTS = {"epochs": 1.0, "batch_size": 8, "eval_batch_size": 8}


@dataclass
class NiahEvaluateOptions:
    """``avey-b niah evaluate``: which models, tasks and lengths, the form, and the fine-tuning settings
    (``settings``). What a form changes (:data:`FORM_DEFAULTS`) takes the form's value unless given
    (:func:`niah_evaluate_options`)."""

    data: str
    """Directory written by `niah generate` (holds niah-1/, niah-2/)."""
    models: list[str]
    """Hub ids / local directories of pretrained encoders, or benchmark names built from config with random weights
    (avey-b-small, bert-base, modernbert-base, neobert, ...; see avey_b.utils.model_spec) for smoke runs."""
    out: str
    """Results directory (results.jsonl, table_*.md, niah.png; runs/ holds each fine-tuning's finished lengths, so
    an interrupted evaluation resumes where it stopped); a finished model x task x form x lr x seed is skipped, and
    one with other settings is refused."""
    tokenizer: str | None = None
    """Tokenizer for models built from config (and for pretrained models without one)."""
    tasks: list[str] = field(default_factory=lambda: list(niah_data.NIAH_TASKS))
    """NIAH tasks."""
    form: str = "qa"
    """qa: an extractive-QA head (start/end logits), SQuAD exact match and F1 (default); token-classification: the
    authors' form, a 2-label token classifier (answer tokens) fine-tuned with 32 examples per step as micro-batches
    of 1, 1 epoch, learning rates 1e-4 and 5e-4, AdamW beta (0.9, 0.95), epsilon 1e-5, weight decay 0.1, scored by
    the authors' token F1. Flags given explicitly override the form's values."""
    train_length: str = str(niah_data.DEFAULT_TRAIN_LENGTH)
    """Which train_<L>.jsonl to fine-tune on."""
    lengths: list[str] | None = None
    """Test lengths (default: every test_<L>.jsonl found)."""
    lr: list[float] = field(default_factory=lambda: [5e-5])
    """Peak learning rate(s), one fine-tuning each (default: 5e-05; token-classification: 1e-4 5e-4)."""
    seed: int = 0
    """Fine-tuning seed."""
    micro_batch: int | None = None
    """Token-classification: examples per forward pass; gradients accumulate to --batch-size (default: 1)."""
    retrieval: bool = True
    """Record the Avey-B statistic of how often the ranker pairs the needle's split with the question's (from the
    scoring forward passes)."""
    settings: RunConfig = field(default_factory=lambda: RunConfig(**NIAH_RUN_DEFAULTS))
    """The fine-tuning's settings (the flags of :data:`NIAH_SETTINGS`); its ``lr`` and ``seed`` are set per
    fine-tuning from ``lr`` and ``seed``."""


def add_niah_evaluate_arguments(e: argparse.ArgumentParser) -> None:
    """The flags of ``niah evaluate``: a flag not given is absent from the namespace, so that
    :func:`niah_evaluate_options` can tell the form's values from the user's."""
    configs.add_arguments(e, NiahEvaluateOptions, exclude=("settings",), defaults=False,
                          choices={"tasks": niah_data.NIAH_TASKS, "form": FORMS})
    RunConfig.add_arguments(e, include=NIAH_SETTINGS, defaults=False)


def niah_evaluate_options(args) -> NiahEvaluateOptions:
    """The options of ``niah evaluate`` from the flags given in ``args``: the form's values (:data:`FORM_DEFAULTS`)
    for what it changes and was not given, niah's and RunConfig's defaults for the rest. Refuses a setting the
    form does not use."""
    form = getattr(args, "form", "qa")
    run_fields = {f.name for f in fields(RunConfig)}
    form_defaults = FORM_DEFAULTS[form]
    settings = RunConfig(**(NIAH_RUN_DEFAULTS | {k: v for k, v in form_defaults.items() if k in run_fields and k != "lr"}
                            | {k: v for k, v in given_settings(args).items() if k in NIAH_SETTINGS}))
    own = {f.name for f in fields(NiahEvaluateOptions)} - {"settings"}
    given = {k: v for k, v in form_defaults.items() if k in own} | {k: getattr(args, k) for k in own if hasattr(args, k)}
    options = NiahEvaluateOptions(**given, settings=settings)
    if form == "qa" and options.micro_batch is not None:
        raise SystemExit("avey-b niah evaluate: --micro-batch applies to --form token-classification (the qa form "
                         "takes --batch-size examples per forward pass)")
    if options.micro_batch is not None and (options.micro_batch < 1 or settings.batch_size % options.micro_batch):
        raise SystemExit(f"avey-b niah evaluate: --batch-size {settings.batch_size} must be a multiple of "
                         f"--micro-batch {options.micro_batch} (>= 1)")
    return options


def niah_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b niah",
                                description="Needle-in-a-haystack sets (paper appendix \"Long-Range Benchmark Results\").")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate NIAH-1/NIAH-2 train/test sets", description=niah_data.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--tokenizer", required=True, help="HF tokenizer name or local path (lengths in its tokens)")
    g.add_argument("--out", required=True, help="output directory")
    g.add_argument("--tasks", nargs="+", choices=niah_data.NIAH_TASKS, default=list(niah_data.NIAH_TASKS))
    g.add_argument("--lengths", nargs="+", default=[str(n) for n in niah_data.DEFAULT_TEST_LENGTHS],
                   help="test lengths in tokens (1024 or 1k = 1024 tokens)")
    g.add_argument("--train-lengths", nargs="+", default=[str(niah_data.DEFAULT_TRAIN_LENGTH)])
    g.add_argument("--n-train", type=int, default=1000, help="training examples per train length")
    g.add_argument("--n-test", type=int, default=None,
                   help=f"test examples per test length (default: {niah_data.N_TEST_SHORT} up to "
                        f"{niah_data.LONG_FROM:,} tokens, {niah_data.N_TEST_LONG} beyond)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--length-unit", choices=("input", "context", "prompt"), default="input",
                   help="count the whole model input (question+passage+special tokens), the passage only, or the "
                        "authors' token-classification input (prompt)")
    for split in ("train", "test"):
        g.add_argument(f"--{split}-distractors", metavar="DIST", default=None,
                       help=f"draw each {split} example's number of distractor needles from DIST (K:P pairs, e.g. "
                            f"{niah_data.format_distribution(niah_data.AUTHORS_DISTRACTORS[split])}; 'authors': that, "
                            "the authors' generator's default); default: exactly 40%% one needle, 60%% two")
    g.add_argument("--format", choices=("jsonl", "hf", "both"), default="both")

    e = sub.add_parser("evaluate", help="fine-tune at a short length, report the score per length next to the "
                       "chance level", description=NIAH_EVALUATE_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_niah_evaluate_arguments(e)

    r = sub.add_parser("report", help="merge results of `niah evaluate` runs (e.g. seeds run in parallel) into one "
                       "set of tables and plots", description=NIAH_REPORT_DESCRIPTION)
    r.add_argument("results", nargs="+", help="results.jsonl files or the directories holding them")
    r.add_argument("--out", required=True, help="directory for the merged results.jsonl, tables and plots")
    return p


NIAH_EVALUATE_DESCRIPTION = """\
``avey-b niah evaluate``: fine-tune each model at the train length (default 2,048) on each task's train split,
once per learning rate, then score every test length with the whole input in one window, the chance level next to
each score. Two forms (``--form``):

- ``qa`` (default): an extractive-QA head (start/end logits) through the same QA harness as SQuAD
  (:mod:`avey_b.evaluation.tasks.qa`, :func:`avey_b.evaluation.finetune.train_model`), SQuAD exact match and F1.
- ``token-classification``: the authors' form (the release's EncodEval LC configs): the input
  ``Question: {question}\\nContext: `` + passage + end token, a 2-label token classifier (answer tokens 1), 32
  examples per optimizer step as micro-batches of 1 with gradient accumulation, 1 epoch, learning rates 1e-4 and
  5e-4, AdamW beta (0.9, 0.95), epsilon 1e-5, weight decay 0.1; scored as EncodEval scores it: per example the F1
  between the positions predicted 1 and the answer's positions, averaged (``score``).

Chance level: the authors' expected score of a model that finds the needles and picks one at random, from the
distribution of the number of needles the test set was drawn from (:func:`avey_b.data.niah.chance_level`). A test
length past the model's maximum (a learned position table, or a RoPE model's trained window) is recorded as "—"
(``max_length``); an out-of-memory failure as "OOM" (longer lengths then not tried).

Results: ``OUT/results.jsonl`` (one record per model x task x form x lr x seed, appended when all its lengths are
done, with per-example scores), ``OUT/table_<metric>.md`` (median over seeds at the best learning rate, 95%
bootstrap intervals over the test examples) and plots. Interrupted, it resumes where it stopped: ``OUT/runs/``
keeps each fine-tuned model and each finished length (written atomically) until the record is written; a rerun
skips what is finished and refuses settings that differ from those of the finished work."""

NIAH_REPORT_DESCRIPTION = """\
``avey-b niah report``: the records of several ``niah evaluate`` runs (each a ``results.jsonl`` or its directory;
e.g. one fine-tuning seed per process) written to ``OUT/results.jsonl`` with the tables and plots of them all. The
same model, task, form, learning rate and seed in two inputs is an error, not a silent pick."""
