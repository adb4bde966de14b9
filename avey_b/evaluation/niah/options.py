"""The options of ``avey-b niah generate``, ``evaluate`` and ``report``, declared once as documented dataclasses
(:class:`NiahGenerateOptions`, :class:`NiahEvaluateOptions`, :class:`NiahReportOptions`) with their parsers and
descriptions; ``niah evaluate``'s fine-tuning settings are a :class:`~avey_b.evaluation.settings.RunConfig`.

Standard library only, so that ``avey-b niah --help`` imports no torch; the runner is
:func:`avey_b.evaluation.niah.cli.run`.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from avey_b import configs
from avey_b.data import niah as niah_data
from avey_b.data import niah_authors as authors

from ..settings import PROTOCOLS, RunConfig, given_settings
from .forms import FORM_DEFAULTS, FORMS

#: The fine-tuning settings ``niah evaluate`` takes (flags generated from RunConfig); the window (``max_length``,
#: ``doc_stride``) follows from each input's length.
NIAH_SETTINGS = ("protocol", "epochs", "max_steps", "batch_size", "eval_batch_size", "max_train_examples",
                 "max_eval_examples", "warmup_ratio", "weight_decay", "grad_clip", "max_answer_length", "precision",
                 "weights_dtype", "device", "threads", "trust_remote_code")


#: RunConfig's defaults that ``niah evaluate`` changes (before the form's, :data:`FORM_DEFAULTS`)
NIAH_RUN_DEFAULTS = {"epochs": 1.0, "batch_size": 8, "eval_batch_size": 8}
GENERATORS = ("library", "authors", "authors-replay")
LENGTH_UNITS = ("input", "context", "prompt")
FORMATS = ("jsonl", "hf", "both")
#: ``niah evaluate --train-length each``: fine-tune once per test length, on the train set of that length
EACH_LENGTH = "each"


@dataclass
class NiahGenerateOptions:
    """``avey-b niah generate``: which generator, tasks, lengths and sizes. Unset sizes and lengths take the
    generator's defaults (:func:`niah_generate_defaults`)."""

    out: str
    """Output directory (one folder per task: {split}_{length}.jsonl, manifest.json, hf/; authors-replay: the
    authors' folders, {word|number}_{length}_controllable/{train,test}.jsonl)."""
    tokenizer: str | None = None
    """HF tokenizer name or local path: the library generator counts lengths in its tokens and draws its haystack
    from its vocabulary (required there; the authors' generator counts words and needs none)."""
    protocol: str = "standard"
    """standard or paper: picks the generator when --generator is not given (paper: authors-replay)."""
    generator: str | None = None
    """library: this library's sets (key-value needles, a haystack of the tokenizer's words, lengths in tokens, the
    nth occurrence in text order asked for); authors: the sets the paper's NIAH tables were made with
    (avey_b.data.niah_authors: 131 fixed haystack words, [a-z0-9]{8-12} or 7-digit needles, lengths in words),
    each set from its own seeded generator; authors-replay: the authors' sets themselves, their gen_niah.py's one
    random stream replayed (avey_b.data.niah_replay: byte for byte their files, in their folder layout).
    Default: authors-replay under --protocol paper, library otherwise."""
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
    seed: int | None = None
    """Seed; each (task, split, length) set draws from its own generator seeded with it (authors-replay: their
    script's --random-seed, one stream for every set). Default: 0; authors-replay 11 (their script's)."""
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
    generator = options.generator or ("authors-replay" if options.protocol == "paper" else "library")
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {GENERATORS}, got {generator!r}")
    seed = options.seed if options.seed is not None else (
        authors.AUTHORS_SEED if generator == "authors-replay" else 0)
    options = dataclasses.replace(options, seed=seed)
    if generator != "library":
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
    """Peak learning rate(s), one fine-tuning each (default: 5e-05; token-classification and the paper protocol:
    1e-4 5e-4, the release's NIAH configs)."""
    seed: int = 0
    """Fine-tuning seed (of one fine-tuning; --seeds runs several)."""
    seeds: list[int] | None = None
    """Fine-tuning seeds, one fine-tuning each (default: --seed alone; the paper protocol: 0 ... 9, the ten seeds
    of the release's driver, run.py)."""
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
#: (``dtype: bfloat16``) with bf16 autocast (``bf16: true``), the learning rates the release has NIAH configs for
#: (1e-4 and 5e-4: ``run.py`` lists 4 rates for every task, but 2e-5 and 6e-5 have no LC config), ``run.py``'s
#: ten seeds, and inputs ended by the model's eos token, else the unknown token (its ``end_token`` rule); inputs
#: are cut at EncodEval's limit (``round(0.99 x`` the stated length``)``, :func:`~avey_b.evaluation.tasks.base.
#: input_limit`), not skipped past it; scored one input at a time (``per_device_eval_batch_size: 1``), padded with
#: EncodEval's pad id, the authors' checkpoints under the release's padding (:func:`.runs.evaluate_model`).
PAPER_NIAH: dict[str, Any] = {"form": "token-classification", "train_length": EACH_LENGTH,
                              "lr": [1e-4, 5e-4], "seeds": list(range(10)), "weights_dtype": "bfloat16",
                              "precision": "bf16", "eval_batch_size": 1}


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
                                description="Needle-in-a-haystack sets (paper appendix \"Long-Range Benchmark "
                                "Results\").")
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
- ``authors`` (:mod:`avey_b.data.niah_authors`): the rules of the generator
  the paper's NIAH tables were made with (the release's ``gen_niah.py``): 131 fixed haystack words, needles of
  ``[a-z0-9]{8-12}`` (NIAH-1) or 7 digits (NIAH-2), "What is the {ordinal} special {word|number} in this
  passage?" with the ordinal counting the needles as drawn (not their order in the text), lengths in words
  (1000 ... 32000, longer ones by the same rules), 10,000 training and 1,000 test examples a length, distractor
  needles 0:0.2,1:0.8 (train) and 0:0.4,1:0.6 (test).

  Each set is drawn from its own generator seeded with (seed, task, split, length): reproducible alone.
- ``authors-replay`` (default under ``--protocol paper``; :mod:`avey_b.data.niah_replay`): the authors' sets
  themselves: their script's one random stream (``--seed``, default 11 as theirs) replayed in its order (NIAH-1
  then NIAH-2, the lengths in the order given, train then test), so that the files are theirs byte for byte, in
  their layout (``{word|number}_{L}_controllable/{train,test}.jsonl``, which ``niah evaluate`` reads). A set
  depends on the sets drawn before it: both tasks are always drawn, ``--tasks`` picks the folders written;
  ``--train-lengths`` must equal the lengths (their script draws both splits at each) and only jsonl is written."""

NIAH_EVALUATE_DESCRIPTION = """\
``avey-b niah evaluate``: fine-tune each model at the train length (default 2,048) on each task's train split,
once per learning rate, then score every test length with the whole input in one window, the chance level next to
each score. ``--protocol paper`` runs it as the paper's authors did (the release's EncodEval): the
token-classification form, one fine-tuning per test length on the train set of that same length
(``--train-length each``), weights in bf16, bf16 autocast, the learning rates 1e-4 5e-4 (the release's NIAH
configs) x seeds 0 ... 9, every input ended by the model's eos token, else its unknown token, and cut at
``round(0.99 x`` the model's stated length``)`` (EncodEval's rule) rather than skipped; generate its sets with
``niah generate --protocol paper`` (the authors' own, replayed).
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
