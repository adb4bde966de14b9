"""What every own-data task shares: the output directory's life, the input-length rule, the trainer's settings,
the tokenizer, and the results record.

The output directory (:func:`check_output_dir`, :func:`begin`, :func:`finish`) follows the run-directory rule of
pretraining (:mod:`avey_b.training.rundir`):

* a directory that holds anything is refused unless ``--overwrite`` (the old one is *moved* to
  ``<dir>.old-<time>``, nothing is deleted) or ``--resume``;
* ``--resume`` continues from the last trainer checkpoint (``<dir>/checkpoints/``), refusing options that differ
  from the ones recorded in ``<dir>/finetune.json`` (only ``device``, ``threads`` and the two flags may change); a
  finished directory is answered with its ``results.json`` and nothing is trained;
* the finished directory is written whole through a temporary directory and a rename
  (:func:`avey_b.utils.records.save_pretrained_atomic`): the model, its tokenizer, ``finetune.json``,
  ``results.json`` and ``SHA256SUMS`` appear together, so ``results.json`` means "finished".

A task module (``train(options) -> dict``) calls :func:`begin` once its inputs are read and checked, trains with
checkpoints under :func:`checkpoint_dir` (resuming from what :func:`begin` returned), and ends with :func:`finish`.
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Any

from avey_b.training import rundir
from avey_b.utils.files import DataFileError
from avey_b.utils.records import no_save_bars, save_pretrained_atomic, utc_timestamp, write_json_atomic

from . import threads
from .loading import fill_special_ids
from .options import OwnDataOptions

RESULTS = "results.json"
OPTIONS = "finetune.json"
CHECKPOINTS = "checkpoints"
#: Options a resumed run may change.
RESUMABLE_CHANGES = ("device", "threads", "overwrite", "resume")


def checkpoint_dir(options: OwnDataOptions) -> Path:
    return Path(options.output_dir) / CHECKPOINTS


def finished_record(options: OwnDataOptions) -> dict[str, Any] | None:
    """The results of a finished output directory, else None."""
    path = Path(options.output_dir) / RESULTS
    return json.loads(path.read_text()) if path.is_file() else None


def check_output_dir(options: OwnDataOptions) -> None:
    """Refuse, before anything is loaded, an output directory that holds something, unless ``--overwrite`` or
    ``--resume`` (:func:`avey_b.training.rundir.prepare` without acting)."""
    out = Path(options.output_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output-dir {out} is a file")
    try:
        rundir.prepare(out, resuming=options.resume, overwrite=options.overwrite, act=False)
    except rundir.RunDirError as e:
        finished = " (a finished fine-tuning run: results.json)" if (out / RESULTS).is_file() else ""
        raise rundir.RunDirError(str(e).replace("already holds a run", f"already holds a run{finished}", 1)) from None


def begin(options: OwnDataOptions) -> str | None:
    """Make the output directory the run's, once the inputs are checked: move an old run aside (``--overwrite``),
    record the options (``finetune.json``), and return the trainer checkpoint to resume from (``--resume``), if
    any."""
    out = Path(options.output_dir)
    moved = rundir.prepare(out, resuming=options.resume, overwrite=options.overwrite)
    if moved is not None:
        print(f"--overwrite: the old run in {out} was moved to {moved}", flush=True)
    saved = out / OPTIONS
    if options.resume and saved.is_file():
        rundir.check_resume(json.loads(saved.read_text()), options.to_dict(), mutable=RESUMABLE_CHANGES)
    else:
        write_json_atomic(saved, options.to_dict())
    return last_complete_checkpoint(checkpoint_dir(options)) if options.resume else None


def last_complete_checkpoint(folder: Path) -> str | None:
    """The newest trainer checkpoint under ``folder`` that was written to its end, or None. transformers writes a
    ``checkpoint-N`` in place, ``trainer_state.json`` last, and its ``get_last_checkpoint`` takes the highest ``N``
    whatever the directory holds: after a kill mid-save, that is a checkpoint without its state (or with it cut
    short), which ``--resume`` must not read as complete."""
    found = []
    for path in Path(folder).glob("checkpoint-*"):
        if not path.name.removeprefix("checkpoint-").isdigit():
            continue
        try:
            json.loads((path / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        found.append((int(path.name.removeprefix("checkpoint-")), path))
    return str(max(found)[1]) if found else None


def finish(options: OwnDataOptions, model, tokenizer, record: dict[str, Any]) -> dict[str, Any]:
    """Write the finished output directory atomically (model, tokenizer, options, results; the checkpoints go) and
    return ``record`` with the time it finished. ``model`` is anything with ``save_pretrained(dir, state_dict=...)``."""
    record = record | {"above_baseline": above_baseline(record), "finished": utc_timestamp()}
    texts = {OPTIONS: json.dumps(options.to_dict(), indent=2, sort_keys=True),
             RESULTS: json.dumps(record, indent=2, sort_keys=True)}
    save_pretrained_atomic(Path(options.output_dir), model, tokenizer, texts=texts)
    return record


# ------------------------------------------------------------------------------------------ inputs


def tokenizer_for(options: OwnDataOptions, *, fast: bool = False):
    """The tokenizer of a run: the model's (or ``--tokenizer``) by :func:`avey_b.data.tokenization.load_tokenizer`,
    as it is; one without a pad token pads with its end or unknown token (padding is masked out, so any id works).
    ``fast``: refuse a slow one (offsets needed)."""
    from avey_b.data.tokenization import load_tokenizer

    tok = load_tokenizer(options.tokenizer or options.model, complete=False, require_fast=fast)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or tok.unk_token
    if tok.pad_token is None:
        raise ValueError(f"the tokenizer of {options.tokenizer or options.model} has no pad, end or unknown token "
                         "to pad batches with")
    return tok


def length_rule(options: OwnDataOptions, model_config) -> tuple[int | None, bool]:
    """``(longest input, cut)``: ``--max-length`` cuts longer inputs; without it Avey-B cuts nothing and an input
    longer than memory allows (:func:`avey_b.utils.batching.default_max_tokens`, as ``avey-b embed`` computes it)
    is an error; a model with a position limit (BERT's 512) is cut at that limit."""
    from avey_b.utils.batching import default_max_tokens
    from avey_b.utils.model_spec import is_avey_b, max_length

    if options.max_length is not None:
        return options.max_length, True
    if is_avey_b(model_config):
        return default_max_tokens(model_config.hidden_size), False
    return max_length(model_config, respect_rope_window=True), True


def check_lengths(table, lengths: list[int], limit: int | None, cut: bool) -> int:
    """How many inputs ``limit`` cuts (``cut``), or the error that names the first input longer than ``limit``
    (not ``cut``): its file and line, and its length."""
    if limit is None:
        return 0
    if cut:
        return sum(n > limit for n in lengths)
    for i, n in enumerate(lengths):
        if n > limit:
            raise DataFileError(f"{table.where(i)}: input of {n:,} tokens, longer than the {limit:,} tokens this "
                                "machine's memory allows for this model (half the available memory at 24 bytes per "
                                "token and unit of width); give --max-length to cut long inputs, or shorten it")
    return 0


# ------------------------------------------------------------------------------------------ training


def training_arguments(options: OwnDataOptions, lr: float, n_train: int, arguments_class=None, **extra):
    """transformers ``TrainingArguments`` of a run: AdamW at ``lr`` with linear warm-up and decay, ``--epochs``,
    ``--batch-size``, the seed, bf16 per ``--precision``, a checkpoint per epoch under :func:`checkpoint_dir` (the
    last one kept, for ``--resume``), no scoring during training, no reporting to outside services.
    ``arguments_class``: a subclass to build instead (sentence-transformers' trainers take their own)."""
    from transformers import TrainingArguments

    from avey_b.utils.device import pick_device, use_bf16

    device = pick_device(options.device)
    steps = max(1, math.ceil(options.epochs * math.ceil(n_train / options.batch_size)))
    return (arguments_class or TrainingArguments)(
        output_dir=str(checkpoint_dir(options)), learning_rate=lr, num_train_epochs=options.epochs,
        per_device_train_batch_size=options.batch_size, per_device_eval_batch_size=options.batch_size,
        warmup_steps=options.warmup_ratio, weight_decay=options.weight_decay, lr_scheduler_type="linear",
        seed=options.seed, data_seed=options.seed, save_strategy="epoch", save_total_limit=1, eval_strategy="no",
        logging_strategy="steps", logging_steps=max(1, steps // 20), report_to="none",
        use_cpu=device.type == "cpu", bf16=use_bf16(options.precision, device), disable_tqdm=True, **extra)


def learning_rate(options: OwnDataOptions) -> tuple[float, str]:
    """The run's peak learning rate and its source (:meth:`OwnDataOptions.learning_rate`): ``--lr``, or the default
    for the width (``hidden_size``) of the model's config."""
    if options.lr is not None:
        return options.learning_rate()
    from transformers import AutoConfig

    width = getattr(AutoConfig.from_pretrained(options.model), "hidden_size", None)
    return options.learning_rate(width if isinstance(width, int) else None)


# ------------------------------------------------------------------------------------------ the record


def rounded(value: Any, digits: int = 2) -> Any:
    """``value`` with every float rounded to ``digits`` decimals (dicts and lists followed)."""
    if isinstance(value, float):
        return value if math.isnan(value) else round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    return value


def percent_scores(model, evaluate, names: dict[str, str]) -> dict[str, float]:
    """The scores of ``model`` by a sentence-transformers evaluator ``evaluate`` (fractions), in percent, rounded,
    under our names (``names``: the evaluator's key -> ours)."""
    raw = evaluate(model)
    return rounded({ours: 100 * raw[key] for key, ours in names.items()})


def base_record(options: OwnDataOptions, lr: float, lr_source: str) -> dict[str, Any]:
    """The fields every task's results record starts with."""
    import torch
    import transformers

    return {"task": options.task, "model": options.model, "train_file": options.train_file,
            "validation": options.validation_file or f"{options.validation_fraction:g} of the training rows",
            "lr": lr, "lr_source": lr_source, "epochs": options.epochs, "batch_size": options.batch_size,
            "seed": options.seed,
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__}}


def summary_line(record: dict[str, Any]) -> str:
    """One line for a person: each score beside its baseline (``accuracy A (majority class B); macro_f1 C
    (majority class D) on N held-out examples``)."""
    base = record.get("baseline", {})
    name = record.get("baseline_name", "baseline")
    parts = []
    for key, value in record.get("metrics", {}).items():
        if key in base:
            parts.append(f"{key} {value} ({name} {base[key]})")
    line = f"{record['task']}: " + "; ".join(parts) + f" on {record.get('n_validation', '?')} held-out examples"
    if (active := record.get("active_dims", {}).get("after")) is not None:
        of = f" of {record['dimensions']:,}" if record.get("dimensions") else ""
        line += f"; active dimensions: query {active['query']:g}, document {active['document']:g}{of}"
    return line


#: Above this fraction of its dimensions active, a sparse model's documents count as dense (a warning).
DENSE_FRACTION = 0.25


def stays_dense(record: dict[str, Any]) -> str | None:
    """The line that warns a sparse-embedding run's documents kept more than :data:`DENSE_FRACTION` of their
    dimensions active, naming the flags to raise; None when sparser (or the record has no active dimensions)."""
    active, dims = record.get("active_dims", {}).get("after"), record.get("dimensions")
    if active is None or not dims or active["document"] <= DENSE_FRACTION * dims:
        return None
    return (f"warning: documents keep {active['document']:g} of {dims:,} dimensions active "
            f"({active['document'] / dims:.0%}): the vectors stayed dense. Raise --document-regularizer-weight "
            f"(this run: {record.get('document_regularizer_weight', '?'):g}) and --query-regularizer-weight "
            f"(this run: {record.get('query_regularizer_weight', '?'):g}), or train longer.")


#: Metrics where lower is better (the rest: higher is better).
LOWER_IS_BETTER = ("mse",)


def above_baseline(record: dict[str, Any]) -> bool | None:
    """Whether a results record's headline score is better than its baseline's (None where either is missing)."""
    score, base = record.get("score"), record.get("baseline_score")
    if score is None or base is None:
        return None
    return bool(score < base if record.get("metric") in LOWER_IS_BETTER else score > base)


def below_baseline(record: dict[str, Any]) -> str | None:
    """The line that says a run's held-out score is not better than its baseline's, both numbers named, and what
    to try; None when it is better (or a score is missing)."""
    if above_baseline(record) is not False:
        return None
    lower = record.get("metric") in LOWER_IS_BETTER
    worse = "not below" if lower else "not above"
    line = (f"warning: the held-out {record['metric']} {record['score']} is {worse} the baseline's "
            f"{record['baseline_score']} ({record.get('baseline_name', 'baseline')})")
    if record["baseline_score"] == (0.0 if lower else 100.0):  # no score can beat it: the held-out rows are too easy
        return (f"{line}, the best there is: the {record.get('n_validation', 'few')} held-out examples cannot show "
                "whether this run learned the task. Hold out more, or harder, examples (--validation-file, "
                "--validation-fraction).")
    return (f"{line}: this run did not learn the task. Try a higher --lr (this run: {record['lr']:g}), more "
            f"--epochs (this run: {record['epochs']:g}) or more training data.")


def prepared(trainer, options: OwnDataOptions):
    """``trainer`` (transformers' or sentence-transformers') as every run trains: one progress bar with an ETA, the
    model's special token ids filled from its tokenizer, and the thread count fitted to the machine."""
    from .progress import show_progress

    show_progress(trainer, f"finetune {options.task}")
    fill_special_ids(trainer.model, trainer.processing_class)
    threads.watch(trainer, options)
    return trainer


def train_with_trainer(options: OwnDataOptions, model, tokenizer, lr: float, train_set, collator):
    """Train ``model`` on ``train_set`` with transformers' ``Trainer`` (:func:`training_arguments`), resuming from
    the output directory's last checkpoint when ``--resume`` finds one; ``(trainer, facts)``, ``facts`` being the
    results record's training fields (loss, seconds, steps, where it resumed from, the output directory)."""
    from transformers import Trainer

    resume_from = begin(options)
    with Timer() as clock, no_save_bars():
        trainer = prepared(Trainer(model=model, args=training_arguments(options, lr, len(train_set)),
                                   train_dataset=train_set, data_collator=collator, processing_class=tokenizer),
                           options)
        result = trainer.train(resume_from_checkpoint=resume_from)
    return trainer, {"train_loss": rounded(result.training_loss, 4), "train_seconds": round(clock.seconds, 1),
                     "steps": result.global_step, "resumed_from": resume_from, "output_dir": options.output_dir}


def train_scored(options: OwnDataOptions, model, evaluate, names: dict[str, str], main_metric: str,
                 make_trainer) -> dict[str, Any]:
    """The sentence-transformers tasks' training (embedding models, rerankers): ``model`` scored by ``evaluate``
    before training, then ``make_trainer()``'s trainer run (resuming from the output directory's last checkpoint when
    ``--resume`` finds one), then scored again. ``make_trainer`` (its loss, arguments and trainer) runs after
    :func:`begin` has made the output directory the run's and after the first scoring, so the trainer's seeding
    comes right before training. Returns the results record's scoring and training fields."""
    resume_from = begin(options)
    queries, documents = getattr(evaluate, "queries", None), getattr(evaluate, "corpus", None)
    held = (f" ({len(queries):,} queries against {len(documents):,} documents)"
            if queries is not None and documents is not None else "")

    def scored(when: str) -> dict[str, float]:
        print(f"finetune {options.task}: scoring the held-out rows {when}{held}", flush=True)  # minutes, at times
        return percent_scores(model, evaluate, names)

    before = scored("before training")
    if (card := getattr(model, "model_card_data", None)) is not None:
        # no widget examples (the Hub page's demo inputs): sentence-transformers' "Computing widget examples" bar
        # would cut into the progress line, and its flag (generate_widget_examples) stops the bar for some classes
        card.generate_widget_examples = False
        card.set_widget_examples = lambda dataset: None
    trainer = prepared(make_trainer(), options)
    with Timer() as timer, no_save_bars():
        trainer.train(resume_from_checkpoint=resume_from)
    after = scored("after training")
    return {"metric": main_metric, "score": after[main_metric], "baseline_score": before[main_metric],
            "metrics": after, "baseline": before, "baseline_name": "before training",
            "train_seconds": round(timer.seconds, 1), "output_dir": options.output_dir}


def finish_sentence_transformers(options: OwnDataOptions, model, record: dict[str, Any]) -> dict[str, Any]:
    """:func:`finish` for a sentence-transformers model (``SentenceTransformer``, ``CrossEncoder``), which saves its
    whole directory (modules, tokenizer) itself. A ``max_seq_length`` that was only this machine's memory cap
    (:func:`length_rule`) is lifted first, so the saved model has no limit but its own."""
    from avey_b.model.loading import SENTENCE_TRANSFORMERS_MAX_LENGTH

    if not length_rule(options, model[0].auto_model.config)[1]:
        model.max_seq_length = SENTENCE_TRANSFORMERS_MAX_LENGTH
    return finish(options, _SavesWhole(model), None, record)


class _SavesWhole:
    """A sentence-transformers model as :func:`finish` saves a model (``save_pretrained(dir, state_dict=...)``):
    the whole directory by the model's own ``save``."""

    def __init__(self, model):
        self.model = model

    def save_pretrained(self, directory, state_dict=None) -> None:
        if state_dict is not None:
            raise ValueError("a sentence-transformers model saves its own weights")
        self.model.save(str(directory))


class Timer:
    """``with Timer() as t: ...``, then ``t.seconds``."""

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
