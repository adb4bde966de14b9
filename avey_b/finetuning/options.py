"""The options of ``avey-b finetune`` on your own data, declared once: :class:`OwnDataOptions`, whose documented
fields build the command line (:func:`avey_b.configs.add_arguments`), the Python API
(:func:`avey_b.finetuning.finetune`) and the run's record (``finetune.json`` in the output directory).

``avey-b finetune`` is one verb over one task table (:mod:`avey_b.finetuning.registry`), told apart by ``--task``:

* your own data — ``text-classification``, ``token-classification``, ``embedding``, ``sparse-embedding``,
  ``multi-vector``, ``rerank``, ``long-rerank``
  (:data:`OWN_DATA`: each task a ``train(options) -> dict``), registered here;
* the paper's 12 benchmarks — ``sst2``, ``conll2003``, ``msmarco``, ... (one fine-tuning cell of the paper's
  protocol, with its own options), registered by the protocol's settings module.

:class:`FinetuneParser` reads ``--task`` first and parses the rest with that task's family's options; ``avey-b
finetune --help`` shows every family. Standard library only, so that ``--help`` imports no torch.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass
from typing import Any

from avey_b import configs

from . import registry
from .settings import TrainingSettings

#: Your own data's tasks: :class:`OwnDataOptions`, each task module's ``train(options: OwnDataOptions) -> dict``
#: (the results record). Adding a task is adding a module here.
OWN_DATA = registry.Family("own data", "YOUR OWN DATA", parser="avey_b.finetuning.options:own_data_parser",
                           runner="avey_b.finetuning.run:run_own_data")
OWN_TASKS: tuple[str, ...] = registry.register(OWN_DATA, {
    "text-classification": "avey_b.finetuning.classification:train",
    "token-classification": "avey_b.finetuning.tagging:train",
    "embedding": "avey_b.finetuning.embedding:train",
    "sparse-embedding": "avey_b.finetuning.sparse_embedding:train",
    "rerank": "avey_b.finetuning.rerank:train",
    "long-rerank": "avey_b.finetuning.long_rerank:train",
    "multi-vector": "avey_b.finetuning.multivector:train",
})

#: The default peak learning rate by the model's width (its config's ``hidden_size``): ``(width, lr)`` points; between
#: them the rate falls as a power of the width (geometric interpolation), outside them it is the nearest point's.
#: The narrow point is the rate that beat the baseline on all four own-data tasks with the quickstart model (d=256;
#: benchmarks/finetune_defaults/); the wide one is BERT-base's width and the top of BERT's fine-tuning recommendation
#: (Devlin et al. 2019, App. A.3: 5e-5, 3e-5 or 2e-5), transformers' and sentence-transformers' trainer default.
DEFAULT_LR_BY_WIDTH: tuple[tuple[int, float], tuple[int, float]] = ((256, 5e-4), (768, 5e-5))
#: sparse-embedding's rule, the same shape: SPLADE's FLOPS-regularized loss learned on the quickstart model at 2e-3
#: and not at the general rule's 5e-4 (benchmarks/finetune_defaults/sparse.md); from BERT-base's width, BERT's
#: recommendation as for every task (not measured here for SPLADE).
SPARSE_LR_BY_WIDTH: tuple[tuple[int, float], tuple[int, float]] = ((256, 2e-3), (768, 5e-5))
#: The default for a model whose config names no ``hidden_size``: BERT's recommendation, as for a wide model.
FALLBACK_LR = 5e-5
#: The default epochs by task (``--epochs`` left out): 3 (BERT's recommendation is 2 to 4), and 10 for
#: sparse-embedding, whose vectors sparsify and learn only with the steps (benchmarks/finetune_defaults/sparse.md).
TASK_EPOCHS = {"sparse-embedding": 10.0}
DEFAULT_EPOCHS = 3.0
#: The rule as results.json's ``lr_source`` states it.
LR_RULE = ("the default rule by width: {lr0:g} up to width {w0}, {lr1:g} from width {w1} (BERT-base's; Devlin et "
           "al. 2019, App. A.3), a power of the width between; see benchmarks/finetune_defaults")


def lr_points(task: str | None) -> tuple[tuple[int, float], tuple[int, float]]:
    """The two ``(width, lr)`` points of ``task``'s default rate: :data:`SPARSE_LR_BY_WIDTH` for sparse-embedding,
    :data:`DEFAULT_LR_BY_WIDTH` for the others."""
    return SPARSE_LR_BY_WIDTH if task == "sparse-embedding" else DEFAULT_LR_BY_WIDTH


def default_lr(width: int | None, task: str | None = None) -> float:
    """The default peak learning rate of a model ``width`` wide (:data:`DEFAULT_LR_BY_WIDTH`; for ``task``
    sparse-embedding :data:`SPARSE_LR_BY_WIDTH`), to 2 significant digits; :data:`FALLBACK_LR` without a width."""
    if width is None:
        return FALLBACK_LR
    (w0, lr0), (w1, lr1) = lr_points(task)
    if width <= w0:
        return lr0
    if width >= w1:
        return lr1
    return float(f"{lr0 * (lr1 / lr0) ** (math.log(width / w0) / math.log(w1 / w0)):.2g}")


#: The losses of the retrieval tasks, the default first (``--loss``; sentence-transformers' names in the modules).
LOSSES: dict[str, tuple[str, ...]] = {"embedding": ("mnrl", "cached-mnrl"), "rerank": ("bce", "lambda"),
                                      "long-rerank": ("bce",),
                                      "multi-vector": ("mnrl", "cached-mnrl")}

#: ``problem_type`` values of a text classifier (transformers' names, saved in the model's config).
PROBLEM_TYPES = ("auto", "single_label_classification", "multi_label_classification", "regression")

EXAMPLES = """\
examples (one per task; every option below has a default but the model, the task, the data and the output):

  # a classifier with your labels (string labels become the class names a pipeline answers with)
  avey-b finetune --task text-classification --model runs/quickstart/model \\
      --train-file reviews.csv --text-column review --label-column sentiment --output-dir runs/sentiment

  # a tagger with your tags, from CoNLL columns (word first, tag last) or JSONL {"tokens": [...], "tags": [...]}
  avey-b finetune --task token-classification --model runs/quickstart/model \\
      --train-file ner.train --validation-file ner.dev --output-dir runs/ner

  # an embedding model from (anchor, positive[, negative]) pairs
  avey-b finetune --task embedding --model runs/quickstart/model --train-file pairs.jsonl --output-dir runs/emb
  # a learned sparse (SPLADE) model from the same rows
  avey-b finetune --task sparse-embedding --model runs/quickstart/model --train-file pairs.jsonl --output-dir runs/sp

  # a late-interaction (ColBERT) model from the same pairs: 128-wide unit vectors per token, scored by MaxSim
  avey-b finetune --task multi-vector --model runs/quickstart/model --train-file pairs.jsonl --output-dir runs/mv

  # a reranker from (query, document, label) rows or (query, positive[, negatives])
  avey-b finetune --task rerank --model runs/quickstart/model --train-file qd.jsonl --output-dir runs/rerank
  # the same rows, documents of any length: the query scored after the document, at the cost of the query
  avey-b finetune --task long-rerank --model runs/quickstart/model --train-file qd.jsonl --output-dir runs/long

  # one cell of the paper's benchmark protocol (the benchmark's own data and metric)
  avey-b finetune --task sst2 --model runs/quickstart/model --lr 6e-5 --output-dir runs/sst2-cell

Data files: CSV, TSV (header line), JSONL, Parquet, or hf:NAME[:CONFIG][@SPLIT] (a Hugging Face dataset by name or
local path; split default train). The output directory holds the model and its tokenizer (load it with
transformers' pipeline / Auto classes, or serve it) and results.json: the held-out scores beside their baseline.
A finished output directory is refused unless --overwrite (the old one is moved aside) or --resume."""


@dataclass(kw_only=True)
class OwnDataOptions(TrainingSettings):
    """``avey-b finetune`` on your own data: the model, the task, the data and where the trained model goes, and
    the training settings every fine-tuning shares (:class:`~avey_b.finetuning.settings.TrainingSettings`, their
    defaults but ``lr``'s); the Python form is :func:`avey_b.finetuning.finetune`."""

    model: str
    """Hub id or local directory of the encoder to start from (Avey-B, BERT, ModernBERT, ...)."""
    task: str
    """text-classification | token-classification | embedding | sparse-embedding | multi-vector | rerank |
    long-rerank."""
    train_file: str
    """Training data: a CSV, TSV, JSONL or Parquet file (token-classification also: CoNLL columns), or
    hf:NAME (also hf:NAME:CONFIG, hf:NAME@SPLIT, hf:NAME:CONFIG@SPLIT), a Hugging Face dataset by name or local
    directory (split default train)."""
    output_dir: str
    """Where the trained model, its tokenizer and results.json go (a new or empty directory; see --overwrite,
    --resume)."""
    validation_file: str | None = None
    """Held-out data to score on (same formats). None: hold out --validation-fraction of the training data."""
    validation_fraction: float = 0.1
    """Without --validation-file: this fraction of the training rows is held out (never trained on) and scored;
    drawn with a fixed seed (0), the same rows for every --seed."""
    text_column: str = "text"
    """text-classification: the column of the text."""
    text_pair_column: str | None = None
    """text-classification: the column of a second text (sentence pairs: NLI, paraphrase), encoded as a pair."""
    label_column: str = "label"
    """text-classification: the column of the label: a class name (string) or id, a list of them (multi-label),
    or a number (regression). rerank and long-rerank, (query, document, label) rows: the relevance, 1 relevant,
    0 not (graded numbers >= 0 with --loss lambda)."""
    problem_type: str = "auto"
    """text-classification: single_label_classification, multi_label_classification (a list of labels per row;
    in CSV/TSV the labels joined by --label-separator) or regression (a number per row); auto: a list is
    multi-label, numbers that are not all whole are regression, anything else single-label."""
    label_separator: str = ","
    """text-classification, multi-label in CSV/TSV: the character between a row's labels."""
    tokens_column: str = "tokens"
    """token-classification, JSONL/Parquet/hf: the column of the word list; CoNLL files: a column number
    (0 = the first; default: the first column)."""
    tags_column: str = "tags"
    """token-classification, JSONL/Parquet/hf: the column of the tag list (one string tag per word); CoNLL files:
    a column number (default: the last column)."""
    anchor_column: str = "anchor"
    """embedding, sparse-embedding, multi-vector: the column of the anchor (a query, a title, a question)."""
    positive_column: str = "positive"
    """embedding, sparse-embedding, multi-vector: the column of the text that should embed near the anchor; rerank
    and long-rerank, (query, positive[, negative]) rows: the relevant document."""
    negative_column: str = "negative"
    """embedding, sparse-embedding, multi-vector, rerank and long-rerank: the column of a text that should not match
    (a hard negative), used when the rows have it; for rerank and long-rerank also a list of texts (JSONL,
    Parquet)."""
    query_column: str = "query"
    """rerank and long-rerank: the column of the query."""
    document_column: str = "document"
    """rerank and long-rerank: the column of the document of (query, document, label) rows; rows without it are
    read as (query, positive[, negative])."""
    loss: str | None = None
    """embedding and multi-vector: mnrl (MultipleNegativesRankingLoss, the default: in-batch negatives; MaxSim
    scores for multi-vector) or cached-mnrl (its GradCache form, for a batch larger than memory holds); rerank: bce
    (BinaryCrossEntropyLoss on each pair, the default) or lambda (LambdaLoss on each query's list of documents,
    listwise); long-rerank: bce (binary cross-entropy on each pair's logit), the only one."""
    mini_batch_size: int = 32
    """embedding, multi-vector with --loss cached-mnrl: rows per forward pass (memory), whatever --batch-size (the
    negatives)."""
    query_regularizer_weight: float = 5e-3
    """sparse-embedding: the FLOPS regularizer's weight on the queries' (anchors') vectors in SpladeLoss: larger,
    sparser queries. 100 times sentence-transformers' documented 5e-5, which is for hundreds of thousands of
    steps: over a few hundred rows it left the vectors dense (benchmarks/finetune_defaults/sparse.md)."""
    document_regularizer_weight: float = 3e-3
    """sparse-embedding: the FLOPS regularizer's weight on the documents' (positives', negatives') vectors (100
    times sentence-transformers' 3e-5, as for the queries)."""
    multivector_dim: int = 128
    """multi-vector: the size of each token vector, the new projection's output (a multi-vector directory keeps
    its own)."""
    sampled_negatives: int = 3
    """rerank and long-rerank: documents of other queries drawn (with --seed) as extra negatives for each training
    query; the held-out queries get as many, drawn with seed 0, so every run reranks the same candidates."""
    lr: float | None = None
    """Peak learning rate (AdamW, linear warm-up then linear decay). None: the default for the model's width
    (its config's hidden_size): 5e-4 up to width 256 (sparse-embedding: 2e-3), falling as a power of the width to
    5e-5 (BERT's fine-tuning recommendation, Devlin et al. 2019 App. A.3) from width 768 (BERT-base) up;
    results.json records which and why. When the held-out score ends no better than its baseline the run says so,
    with what to try."""
    epochs: float | None = None
    """Passes over the training data. None: the task's default, 3 (BERT's recommendation is 2 to 4), and 10 for
    sparse-embedding (its vectors sparsify and learn only with the steps: benchmarks/finetune_defaults)."""
    overwrite: bool = False
    """Start afresh in an output directory that holds a run: the old one is moved aside to
    <output-dir>.old-<time> (nothing is deleted)."""
    resume: bool = False
    """Continue an interrupted run in the output directory from its last checkpoint (the options must be the
    same); a finished one is answered with its results."""
    tokenizer: str | None = None
    """Tokenizer name or path when the model directory has none; it is saved with the trained model."""

    def __post_init__(self) -> None:
        if self.task not in OWN_TASKS:
            others = [name for name in registry.TASKS if name not in OWN_TASKS]
            elsewhere = f" (or, with its own options, one of {', '.join(others)})" if others else ""
            raise ValueError(f"task must be one of {sorted(OWN_TASKS)}{elsewhere}, got {self.task!r}")
        if not 0 < self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in (0, 1), got {self.validation_fraction}")
        if self.problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {self.problem_type!r}")
        if self.device is not None and self.device.split(":")[0] not in ("cpu", "cuda", "mps", "auto"):
            raise ValueError(f"device must be cpu, cuda or mps, got {self.device!r}")
        if self.device is not None and self.device.startswith("cuda:") and self.device != "cuda:0":
            raise ValueError(f"device {self.device!r}: the trainer runs on the first visible GPU; choose it with "
                             f"CUDA_VISIBLE_DEVICES={self.device.split(':')[1]} and --device cuda")
        if self.overwrite and self.resume:
            raise ValueError("give --overwrite (start afresh) or --resume (continue), not both")
        if self.epochs is None:
            self.epochs = TASK_EPOCHS.get(self.task, DEFAULT_EPOCHS)
        super().__post_init__()  # the shared fields' checks
        if len(self.label_separator) != 1:
            raise ValueError(f"label_separator must be one character, got {self.label_separator!r}")
        if self.loss is not None and self.loss not in LOSSES.get(self.task, ()):
            known = f"one of {LOSSES[self.task]}" if self.task in LOSSES else "not taken: leave it out"
            raise ValueError(f"loss for {self.task} is {known}, got {self.loss!r}")
        if self.multivector_dim < 1:
            raise ValueError(f"multivector_dim must be >= 1, got {self.multivector_dim}")
        if self.mini_batch_size < 1:
            raise ValueError(f"mini_batch_size must be >= 1, got {self.mini_batch_size}")
        if min(self.query_regularizer_weight, self.document_regularizer_weight) < 0:
            raise ValueError("the regularizer weights must be >= 0, got query "
                             f"{self.query_regularizer_weight} and document {self.document_regularizer_weight}")
        if self.sampled_negatives < 0:
            raise ValueError(f"sampled_negatives must be >= 0, got {self.sampled_negatives}")

    def loss_name(self) -> str | None:
        """The loss of an embedding, multi-vector or rerank run: ``loss``, or the task's default (the first of
        :data:`LOSSES`)."""
        return self.loss or (LOSSES[self.task][0] if self.task in LOSSES else None)

    def learning_rate(self, width: int | None = None) -> tuple[float, str]:
        """The peak learning rate and where it comes from: ``--lr``, or the default for a model ``width`` wide
        (:func:`default_lr`; ``width`` None: a config without ``hidden_size``)."""
        if self.lr is not None:
            return self.lr, "--lr"
        (w0, lr0), (w1, lr1) = lr_points(self.task)
        sparse = " (sparse-embedding's rule)" if self.task == "sparse-embedding" else ""
        rule = LR_RULE.format(w0=w0, lr0=lr0, w1=w1, lr1=lr1) + sparse
        if width is None:
            return FALLBACK_LR, f"default for a model whose config names no hidden_size, as for width {w1}: {rule}"
        return default_lr(width, self.task), f"default for width {width} (hidden_size): {rule}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Groups of --help, in order: title -> fields (fields not named fall in the last group).
_GROUPS = {
    "what to train": ("model", "task", "tokenizer"),
    "data": ("train_file", "validation_file", "validation_fraction", "max_train_examples", "text_column",
             "text_pair_column", "label_column", "problem_type", "label_separator", "tokens_column", "tags_column",
             "anchor_column", "positive_column", "negative_column", "query_column", "document_column",
             "sampled_negatives"),
    "output": ("output_dir", "overwrite", "resume"),
}


def own_data_parser() -> argparse.ArgumentParser:
    """The parser of ``avey-b finetune --task <own-data task>`` (one flag per :class:`OwnDataOptions` field)."""
    p = argparse.ArgumentParser(prog="avey-b finetune --task {" + ",".join(OWN_TASKS) + "}", add_help=True,
                                description="Fine-tune an encoder on your own data and score it on held-out rows.")
    placed: set[str] = set()
    for title, names in _GROUPS.items():
        configs.add_arguments(p.add_argument_group(title), OwnDataOptions, include=names,
                              choices={"task": tuple(OWN_TASKS), "problem_type": PROBLEM_TYPES})
        placed |= set(names)
    configs.add_arguments(p.add_argument_group("training"), OwnDataOptions, exclude=placed,
                          choices={"precision": configs.PRECISIONS})
    return p


class FinetuneParser(argparse.ArgumentParser):
    """``avey-b finetune``: reads ``--task``, then parses the arguments with the options of that task's family
    (:class:`avey_b.finetuning.registry.Family`: :func:`own_data_parser`, or the family's that registered it)."""

    def __init__(self) -> None:
        super().__init__(prog="avey-b finetune", formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="Fine-tune an encoder on your own data (a classifier, a tagger, an embedding "
                         "model, a reranker), or run one cell of the paper's benchmark protocol.\n\n" + EXAMPLES)
        self.add_argument("--task", required=True, choices=list(registry.TASKS),
                          help="what to train: one of your own data's tasks, or a benchmark (then that family's "
                          "options below apply)")

    @staticmethod
    def family_parser(family: registry.Family) -> argparse.ArgumentParser:
        """The parser of ``family``'s options, named after its tasks."""
        parser = registry.load(family.parser)()
        parser.prog = "avey-b finetune --task {" + ",".join(registry.names(family)) + "}"
        return parser

    def parts(self) -> list[tuple[str, argparse.ArgumentParser]]:
        """(heading, parser) of every family's options, as ``--help`` prints them after ``--task``."""
        return [(f"{family.title} (--task {' | '.join(registry.names(family))})", self.family_parser(family))
                for family in registry.families()]

    def format_help(self) -> str:
        rule = "-" * 100
        return super().format_help() + "".join(f"\n{rule}\n{title}\n{rule}\n" + part.format_help()
                                               for title, part in self.parts())

    def parse_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        peek.add_argument("--task")
        task = peek.parse_known_args(argv)[0].task
        if task in registry.TASKS:
            return self.family_parser(registry.TASKS[task].family).parse_args(argv, namespace)
        return super().parse_args(argv, namespace)  # --help, or the error that names the tasks


def finetune_parser() -> argparse.ArgumentParser:
    """The parser of ``avey-b finetune`` (every registered family, chosen by ``--task``)."""
    return FinetuneParser()
