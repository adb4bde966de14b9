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
from avey_b.data import niah_authors as authors
from avey_b.finetuning import registry
from avey_b.utils.cluster import BACKENDS
from avey_b.utils.records import slug

from .niah.forms import FORM_DEFAULTS, FORMS

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
    threads: int | None = None
    """CPU threads (PyTorch's); None: one per CPU this process may use (its affinity mask and cgroup CPU quota), or
    OMP_NUM_THREADS, or a sweep worker's share. On a CPU that other busy processes share, 1 is often several times
    faster. Like the device, it is not part of a cell's settings (it changes no score)."""
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
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
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
NIAH_SETTINGS = ("protocol", "epochs", "max_steps", "batch_size", "eval_batch_size", "max_train_examples",
                 "max_eval_examples", "warmup_ratio", "weight_decay", "grad_clip", "max_answer_length", "precision",
                 "weights_dtype", "device", "threads", "trust_remote_code")


#: RunConfig's defaults that ``niah evaluate`` changes (before the form's, :data:`FORM_DEFAULTS`)
NIAH_RUN_DEFAULTS = {"epochs": 1.0, "batch_size": 8, "eval_batch_size": 8}
GENERATORS = ("library", "authors")
LENGTH_UNITS = ("input", "context", "prompt")
FORMATS = ("jsonl", "hf", "both")
#: ``niah evaluate --train-length each``: fine-tune once per test length, on the train set of that length
EACH_LENGTH = "each"


@dataclass
class NiahGenerateOptions:
    """``avey-b niah generate``: which generator, tasks, lengths and sizes. Unset sizes and lengths take the
    generator's defaults (:func:`niah_generate_defaults`)."""

    out: str
    """Output directory (one folder per task: {split}_{length}.jsonl, manifest.json, hf/)."""
    tokenizer: str | None = None
    """HF tokenizer name or local path: the library generator counts lengths in its tokens and draws its haystack
    from its vocabulary (required there; the authors' generator counts words and needs none)."""
    protocol: str = "standard"
    """standard or paper: picks the generator when --generator is not given (paper: the authors')."""
    generator: str | None = None
    """library: this library's sets (key-value needles, a haystack of the tokenizer's words, lengths in tokens, the
    nth occurrence in text order asked for); authors: the sets the paper's NIAH tables were made with
    (avey_b.data.niah_authors: 131 fixed haystack words, [a-z0-9]{8-12} or 7-digit needles, lengths in words).
    Default: authors under --protocol paper, library otherwise."""
    tasks: list[str] = field(default_factory=lambda: list(niah_data.NIAH_TASKS))
    """NIAH tasks (niah-1: alphanumeric needles, niah-2: numbers)."""
    lengths: list[str] | None = None
    """Test lengths: tokens for the library generator (1024 or 1k = 1,024), words for the authors' (give integers:
    1000, not 1k). Default: library 1k ... 96k tokens; authors 1000 2000 3800 4000 8000 16000 32000 words."""
    train_lengths: list[str] | None = None
    """Training lengths. Default: library 2048 tokens; authors the test lengths (they fine-tune at each)."""
    n_train: int | None = None
    """Training examples per training length. Default: library 1,000; authors 10,000."""
    n_test: int | None = None
    """Test examples per test length. Default: library 200 up to 32,768 tokens and 100 beyond; authors 1,000."""
    seed: int = 0
    """Seed; each (task, split, length) set draws from its own generator seeded with it."""
    length_unit: str = "input"
    """Library generator: count the whole model input (question + passage + special tokens), the passage only
    (context) or the authors' token-classification input (prompt)."""
    train_distractors: str | None = None
    """The number of distractor needles of each training example drawn from this distribution (K:P pairs such as
    0:0.2,1:0.8; 'authors': that, the authors' generator's default). Default: the authors' under their generator;
    under the library's exactly 4 in 10 examples with one needle and 6 in 10 with two."""
    test_distractors: str | None = None
    """As --train-distractors for the test sets (the authors': 0:0.4,1:0.6)."""
    format: str = "both"
    """jsonl files, a datasets.DatasetDict saved to disk (hf), or both."""


def add_niah_generate_arguments(g: argparse.ArgumentParser) -> None:
    configs.add_arguments(g, NiahGenerateOptions, choices={"tasks": niah_data.NIAH_TASKS, "protocol": PROTOCOLS,
                                                           "generator": GENERATORS, "length_unit": LENGTH_UNITS,
                                                           "format": FORMATS})


def niah_generate_options(args) -> NiahGenerateOptions:
    """The options of ``niah generate`` from its flags, each unset default resolved for the generator
    (:func:`niah_generate_defaults`); a library generator without a tokenizer is refused."""
    options = niah_generate_defaults(configs.from_args(NiahGenerateOptions, args))
    if options.generator == "library" and options.tokenizer is None:
        raise SystemExit("avey-b niah generate: the library generator counts lengths in a tokenizer's tokens: pass "
                         "--tokenizer (or --generator authors, lengths in words)")
    if (options.n_train or 0) < 0 or (options.n_test is not None and options.n_test < 0):
        raise SystemExit("avey-b niah generate: --n-train and --n-test must be >= 0")
    return options


def niah_generate_defaults(options: NiahGenerateOptions) -> NiahGenerateOptions:
    """``options`` with the generator chosen (authors' under the paper protocol) and its defaults for what is
    unset: the authors' lengths, sizes and distributions, or the library's."""
    if options.protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {options.protocol!r}")
    generator = options.generator or ("authors" if options.protocol == "paper" else "library")
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {GENERATORS}, got {generator!r}")
    if generator == "authors":
        lengths = options.lengths or [str(n) for n in authors.AUTHORS_LENGTHS]
        return dataclasses.replace(
            options, generator=generator, lengths=lengths, train_lengths=options.train_lengths or lengths,
            n_train=authors.AUTHORS_N_TRAIN if options.n_train is None else options.n_train,
            n_test=authors.AUTHORS_N_TEST if options.n_test is None else options.n_test,
            train_distractors=options.train_distractors or "authors",
            test_distractors=options.test_distractors or "authors")
    return dataclasses.replace(
        options, generator=generator,
        lengths=options.lengths or [str(n) for n in niah_data.DEFAULT_TEST_LENGTHS],
        train_lengths=options.train_lengths or [str(niah_data.DEFAULT_TRAIN_LENGTH)],
        n_train=1000 if options.n_train is None else options.n_train)


@dataclass
class NiahEvaluateOptions:
    """``avey-b niah evaluate``: which models, tasks and lengths, the form, and the fine-tuning settings
    (``settings``, whose ``protocol`` picks the defaults). What the paper protocol (:data:`PAPER_NIAH`) and a form
    (:data:`FORM_DEFAULTS`) change takes their value unless given (:func:`niah_evaluate_options`)."""

    data: str
    """Directory written by `niah generate` (holds niah-1/, niah-2/)."""
    models: list[str]
    """Hub ids / local directories of pretrained encoders, or benchmark names built from config with random weights
    (avey-b-small, bert-base, modernbert-base, neobert, ...; see avey_b.utils.model_spec) for smoke runs."""
    out: str
    """Results directory (results.jsonl, table_*.md, niah.png; runs/ holds each fine-tuning's finished lengths, so
    an interrupted evaluation resumes where it stopped); a finished model x task x form x lr x seed x train length
    is skipped, and one with other settings is refused."""
    tokenizer: str | None = None
    """Tokenizer for models built from config (and for pretrained models without one)."""
    tasks: list[str] = field(default_factory=lambda: list(niah_data.NIAH_TASKS))
    """NIAH tasks."""
    form: str = "qa"
    """qa: an extractive-QA head (start/end logits), SQuAD exact match and F1 (default under the standard
    protocol); token-classification: the authors' form, a 2-label token classifier (answer tokens) fine-tuned with
    32 examples per step as micro-batches of 1, 1 epoch, learning rates 1e-4 and 5e-4 (the paper protocol: its
    grid), AdamW beta (0.9, 0.95), epsilon 1e-5, weight decay 0.1, scored by the authors' token F1 (default under
    the paper protocol). Flags given explicitly override the form's values."""
    train_length: str = str(niah_data.DEFAULT_TRAIN_LENGTH)
    """Which train_<L>.jsonl to fine-tune on, or 'each': one fine-tuning per test length L on train_<L>.jsonl,
    scored at L alone (the authors' protocol, the default under --protocol paper)."""
    lengths: list[str] | None = None
    """Test lengths (default: every test_<L>.jsonl found)."""
    lr: list[float] = field(default_factory=lambda: [5e-5])
    """Peak learning rate(s), one fine-tuning each (default: 5e-05; token-classification: 1e-4 5e-4; the paper
    protocol: its grid, 2e-5 6e-5 1e-4 5e-4)."""
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

    @property
    def each_length(self) -> bool:
        """Whether each test length is fine-tuned at its own length (``--train-length each``)."""
        return self.train_length == EACH_LENGTH


#: What ``niah evaluate --protocol paper`` changes, as the release's EncodEval runs NIAH (its LC configs and
#: ``run.py``): the token-classification form, one fine-tuning per test length on the train set of that length
#: (``niah1()``/``niah2()`` read ``niah/{word|number}_{L}_controllable/{train,test}.jsonl``), weights in bf16
#: (``dtype: bfloat16``) with bf16 autocast (``bf16: true``), the paper's learning-rate grid (``run.py``'s LRs),
#: and inputs ended by the model's eos token, else the unknown token (its ``end_token`` rule).
PAPER_NIAH: dict[str, Any] = {"form": "token-classification", "train_length": EACH_LENGTH,
                              "lr": list(GRIDS["paper"][0]), "weights_dtype": "bfloat16", "precision": "bf16"}


def add_niah_evaluate_arguments(e: argparse.ArgumentParser) -> None:
    """The flags of ``niah evaluate``: a flag not given is absent from the namespace, so that
    :func:`niah_evaluate_options` can tell the protocol's and form's values from the user's."""
    configs.add_arguments(e, NiahEvaluateOptions, exclude=("settings",), defaults=False,
                          choices={"tasks": niah_data.NIAH_TASKS, "form": FORMS})
    RunConfig.add_arguments(e, include=NIAH_SETTINGS, defaults=False)


def niah_evaluate_options(args) -> NiahEvaluateOptions:
    """The options of ``niah evaluate`` from the flags given in ``args``: niah's and RunConfig's defaults, then the
    paper protocol's (:data:`PAPER_NIAH`, with ``--protocol paper``), then the form's (:data:`FORM_DEFAULTS`), then
    the flags given. Refuses a setting the form does not use."""
    paper = PAPER_NIAH if getattr(args, "protocol", "standard") == "paper" else {}
    form = getattr(args, "form", paper.get("form", "qa"))
    run_fields = {f.name for f in fields(RunConfig)}
    own = {f.name for f in fields(NiahEvaluateOptions)} - {"settings"}
    layers = FORM_DEFAULTS[form] | paper  # the protocol's grid over the form's rates
    settings = RunConfig(**(NIAH_RUN_DEFAULTS | {k: v for k, v in layers.items() if k in run_fields and k != "lr"}
                            | {k: v for k, v in given_settings(args).items() if k in NIAH_SETTINGS}))
    given = ({k: v for k, v in layers.items() if k in own} | {"form": form}
             | {k: getattr(args, k) for k in own if hasattr(args, k)})
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
    g = sub.add_parser("generate", help="generate NIAH-1/NIAH-2 train/test sets (the library's or the authors')",
                       description=NIAH_GENERATE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_niah_generate_arguments(g)

    e = sub.add_parser("evaluate", help="fine-tune, report the score per length next to the chance level",
                       description=NIAH_EVALUATE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_niah_evaluate_arguments(e)

    r = sub.add_parser("report", help="merge results of `niah evaluate` runs (e.g. seeds run in parallel) into one "
                       "set of tables and plots", description=NIAH_REPORT_DESCRIPTION)
    r.add_argument("results", nargs="+", help=configs.field_docs(NiahReportOptions)["results"])
    configs.add_arguments(r, NiahReportOptions, exclude=("results",))
    return p


@dataclass
class NiahReportOptions:
    """``avey-b niah report``: the records to merge and where."""

    results: list[str]
    """results.jsonl files or the directories holding them (written by `niah evaluate --out`)."""
    out: str
    """Directory for the merged results.jsonl, tables and plots."""


NIAH_GENERATE_DESCRIPTION = """\
``avey-b niah generate``: NIAH-1 / NIAH-2 train and test sets, by one of two generators (``--generator``):

- ``library`` (default under the standard protocol; :mod:`avey_b.data.niah`): "The value of KEY is VALUE ."
  needles in a haystack of the tokenizer's own words, lengths in that tokenizer's tokens, the n-th occurrence in
  text order asked for; needs ``--tokenizer``.
- ``authors`` (default under ``--protocol paper``; :mod:`avey_b.data.niah_authors`): the rules of the generator
  the paper's NIAH tables were made with (the release's ``gen_niah.py``): 131 fixed haystack words, needles of
  ``[a-z0-9]{8-12}`` (NIAH-1) or 7 digits (NIAH-2), "What is the {ordinal} special {word|number} in this
  passage?" with the ordinal counting the needles as drawn (not their order in the text), lengths in words
  (1000 ... 32000, longer ones by the same rules), 10,000 training and 1,000 test examples a length, distractor
  needles 0:0.2,1:0.8 (train) and 0:0.4,1:0.6 (test).

Each set is drawn from its own generator seeded with (seed, task, split, length): reproducible alone."""

NIAH_EVALUATE_DESCRIPTION = """\
``avey-b niah evaluate``: fine-tune each model at the train length (default 2,048) on each task's train split,
once per learning rate, then score every test length with the whole input in one window, the chance level next to
each score. ``--protocol paper`` runs it as the paper's authors did (the release's EncodEval): the
token-classification form, one fine-tuning per test length on the train set of that same length
(``--train-length each``), weights in bf16, bf16 autocast, the learning rates 2e-5 6e-5 1e-4 5e-4, and every input
ended by the model's eos token, else its unknown token; generate its sets with ``niah generate --protocol paper``.
Two forms (``--form``):

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
