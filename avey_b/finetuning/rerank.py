"""``avey-b finetune --task rerank``: a reranker (a cross-encoder) from your (query, document, label) rows or
(query, positive[, negative]) rows, trained by sentence-transformers' ``CrossEncoderTrainer``, scored on held-out
queries before and after.

    avey-b finetune --task rerank --model runs/quickstart/model --train-file qd.jsonl --output-dir runs/rerank

Data, either layout (CSV, TSV, JSONL, Parquet or ``hf:``; :mod:`avey_b.finetuning.data`):

* **labelled pairs**: ``--query-column`` (``query``), ``--document-column`` (``document``), ``--label-column``
  (``label``): 1 for a relevant document, 0 for an irrelevant one (a number in [0, 1]; graded labels with
  ``--loss lambda``);
* **positives**: ``--query-column``, ``--positive-column`` (``positive``) and, when the rows have it,
  ``--negative-column`` (``negative``: one text, or in JSONL/Parquet a list of texts). Each query also gets
  ``--sampled-negatives`` documents drawn (seeded) from the other rows' documents as negatives.

Training: ``CrossEncoderTrainer`` on the pairs encoded whole with the tokenizer's pair encoding (``[CLS] query
[SEP] document [SEP]`` for a BERT-style tokenizer), a one-label head (``num_labels=1``): BinaryCrossEntropyLoss on
each (query, document, label) (``--loss bce``), or LambdaLoss on each query's list of documents (``--loss lambda``,
listwise: NDCG's gains and discounts weigh the pairs). Long documents go in whole for Avey-B (no 512 cut:
:func:`avey_b.finetuning.common.length_rule`).

Scoring: every held-out query (``--validation-file``, or ``--validation-fraction`` of the *queries*, so no query is
both trained and scored) reranks its relevant and irrelevant documents, with the same sampled negatives for every
run (drawn with seed 0): NDCG@10, MRR@10 and MAP in percent (sentence-transformers' ``CrossEncoderRerankingEvaluator``),
for the model before training (its fresh head: the baseline) and after.

Output: ``--output-dir`` holds a ``num_labels=1`` ``AveyBForSequenceClassification`` (or the other encoder's
sequence classifier) with its tokenizer: ``CrossEncoder(dir)`` loads it as it is, transformers'
``AutoModelForSequenceClassification`` too, and ``avey-b serve`` answers its rerank routes with it.
"""

from __future__ import annotations

import random
from typing import Any

from avey_b.model.loading import SENTENCE_TRANSFORMERS_MAX_LENGTH
from avey_b.utils.files import DataFileError

from . import common, threads
from .data import Table, hold_out, read_table
from .loading import NewHeadReport
from .options import OwnDataOptions

#: The reranking scores recorded, sentence-transformers' key -> ours.
METRICS = {"ndcg@10": "ndcg@10", "mrr@10": "mrr@10", "map": "map"}
MAIN_METRIC = "ndcg@10"
#: Seed of the negatives drawn for the held-out queries: the same candidates for every run and every --seed.
EVAL_SEED = 0


def read_queries(options: OwnDataOptions, source: str) -> tuple[Table, dict[str, dict[str, Any]]]:
    """The rows of ``source`` and, per query (in first-seen order), its ``positive`` documents, its ``negative``
    documents and graded ``labels`` (document -> label), checked: texts are non-empty strings, labels numbers."""
    labelled = {"query": options.query_column, "document": options.document_column, "label": options.label_column}
    paired = {"query": options.query_column, "positive": options.positive_column}
    first = read_table(source, {"query": options.query_column}, task=options.task,
                       optional={"document": options.document_column, "positive": options.positive_column}).rows[0]
    if options.document_column in first or options.positive_column not in first:
        table = read_table(source, labelled, task=options.task)
    else:
        table = read_table(source, paired, task=options.task, optional={"negative": options.negative_column})
    queries: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(table.rows):
        query = _text(table, i, "query", options.query_column)
        entry = queries.setdefault(query, {"positive": [], "negative": [], "labels": {}, "row": i})
        if options.document_column in row:
            document = _text(table, i, "document", options.document_column)
            label = row[options.label_column]
            if isinstance(label, str):
                try:
                    label = float(label)
                except ValueError:
                    label = None
            if isinstance(label, bool) or not isinstance(label, int | float) or label < 0:
                raise DataFileError(f"{table.where(i)}: label {row[options.label_column]!r} is not a relevance "
                                    "(a number >= 0: 1 relevant, 0 not)")
            if label > 1 and options.loss_name() == "bce":
                raise DataFileError(f"{table.where(i)}: label {label:g} is outside [0, 1], which --loss bce needs; "
                                    "give --loss lambda for graded labels")
            entry["labels"][document] = float(label)
            (entry["positive"] if label > 0 else entry["negative"]).append(document)
        else:
            entry["positive"].append(_text(table, i, "positive", options.positive_column))
            entry["labels"][entry["positive"][-1]] = 1.0
            negatives = row.get(options.negative_column)
            for negative in negatives if isinstance(negatives, list) else [] if negatives is None else [negatives]:
                if not isinstance(negative, str) or not negative.strip():
                    raise DataFileError(f"{table.where(i)}: the negative column {options.negative_column!r} holds "
                                        f"{negative!r}, not a text")
                entry["negative"].append(negative)
                entry["labels"].setdefault(negative, 0.0)
    return table, queries


def _text(table: Table, i: int, role: str, column: str) -> str:
    value = table.rows[i][column]
    if not isinstance(value, str) or not value.strip():
        raise DataFileError(f"{table.where(i)}: the {role} column {column!r} holds {value!r}, not a text")
    return value


def split_queries(options: OwnDataOptions) -> tuple[Table, dict, dict]:
    """(the training rows, training queries, held-out queries): ``--validation-file``, or ``--validation-fraction``
    of the distinct queries held out with a fixed seed (0)."""
    table, queries = read_queries(options, options.train_file)
    if options.validation_file:
        held = read_queries(options, options.validation_file)[1]
    else:
        names = Table(table.source, [{"query": q} for q in queries], [table.places[e["row"]] for e in queries.values()])
        kept, dropped = hold_out(names, options.validation_fraction)
        held = {r["query"]: queries[r["query"]] for r in dropped.rows}
        queries = {r["query"]: queries[r["query"]] for r in kept.rows}
    if options.max_train_examples is not None:
        queries = dict(list(queries.items())[:options.max_train_examples])
    return table, queries, held


def sample_negatives(queries: dict[str, dict], count: int, seed: int) -> dict[str, list[str]]:
    """Per query, up to ``count`` documents of the other queries (never one of its own), drawn with ``seed``: a
    draw of ``count`` plus as many as the query has documents, its own left out."""
    pool = list(dict.fromkeys(d for e in queries.values() for d in e["positive"] + e["negative"]))
    rng = random.Random(seed)
    drawn = {}
    for query, entry in queries.items():
        own = entry["labels"]
        draw = rng.sample(pool, min(len(pool), count + len(own)))
        drawn[query] = [d for d in draw if d not in own][:count]
    return drawn


def training_rows(queries: dict[str, dict], extra: dict[str, list[str]], listwise: bool) -> dict[str, list]:
    """The training dataset's columns: (query, document, label) rows, or (query, documents, labels) per query."""
    if listwise:
        columns: dict[str, list] = {"query": [], "docs": [], "labels": []}
        for query, entry in queries.items():
            docs = list(entry["labels"]) + extra[query]
            columns["query"].append(query)
            columns["docs"].append(docs)
            columns["labels"].append([entry["labels"].get(d, 0.0) for d in docs])
        return columns
    columns = {"query": [], "document": [], "label": []}
    for query, entry in queries.items():
        for document, label in [*entry["labels"].items(), *((d, 0.0) for d in extra[query])]:
            columns["query"].append(query)
            columns["document"].append(document)
            columns["label"].append(label)
    return columns


def evaluator(held: dict[str, dict], count: int, batch_size: int):
    """Every held-out query with at least one relevant document reranks its documents and ``count`` drawn ones."""
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    drawn = sample_negatives(held, count, EVAL_SEED)
    samples = [{"query": q, "positive": e["positive"], "negative": e["negative"] + drawn[q]}
               for q, e in held.items() if e["positive"]]
    if not samples:
        raise DataFileError("no held-out query has a relevant document (label > 0) to score")
    return CrossEncoderRerankingEvaluator(samples, at_k=10, batch_size=batch_size, write_csv=False)


def load_model(options: OwnDataOptions, device: str):
    """The ``CrossEncoder`` to train: the model with a one-label sequence-classification head (kept when it has
    one, fresh otherwise), its tokenizer (or ``--tokenizer``)."""
    import logging

    from sentence_transformers import CrossEncoder

    # a pretrained directory is a SentenceTransformer one (avey_b.model.loading): building a cross-encoder from it is
    # the point here, so sentence-transformers' "Converting ..." warning is held back
    log = logging.getLogger("sentence_transformers")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with NewHeadReport() as report:  # a fresh head's load report, said in one line
            model = CrossEncoder(options.model, num_labels=1, device=device)
            report.settle(model[0].auto_model)
    finally:
        log.setLevel(level)
    if options.tokenizer:
        model[0].processor = common.tokenizer_for(options)
    return model


def set_length(model, options: OwnDataOptions, table: Table, queries: dict[str, dict]) -> int:
    """Set the model's longest input by :func:`common.length_rule` and check every (query, document) pair against
    it: for Avey-B an over-long pair is an error naming the file and line of its query's first row."""
    limit, cut = common.length_rule(options, model[0].auto_model.config)
    model.max_seq_length = limit if limit is not None else SENTENCE_TRANSFORMERS_MAX_LENGTH
    pairs = [(q, d, e["row"]) for q, e in queries.items() for d in e["labels"]]
    lengths = [len(ids) for ids in model.tokenizer([q for q, _, _ in pairs], [d for _, d, _ in pairs],
                                                   truncation=False, verbose=False)["input_ids"]]
    where = Table(table.source, [{} for _ in pairs], [table.places[row] for _, _, row in pairs])
    return common.check_lengths(where, lengths, limit, cut)



def train(options: OwnDataOptions) -> dict[str, Any]:
    """Train and score a reranker as the module docstring says; returns the results record (also
    ``results.json`` in ``options.output_dir``, with the model)."""
    import transformers
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments, losses

    from avey_b.utils.device import pick_device

    lr, lr_source = common.learning_rate(options)
    table, queries, held = split_queries(options)
    threads.start(options)
    transformers.set_seed(options.seed)  # the fresh head's initialisation, and so the score before training
    model = load_model(options, str(pick_device(options.device)))
    cut = set_length(model, options, table, queries) + set_length(model, options, table, held)
    evaluate = evaluator(held, options.sampled_negatives, options.batch_size)
    extra = sample_negatives(queries, options.sampled_negatives, options.seed)
    listwise = options.loss_name() == "lambda"
    columns = training_rows(queries, extra, listwise)
    n_pairs = sum(map(len, columns["docs"])) if listwise else len(columns["query"])
    dataset = table.to_dataset(columns)

    def make_trainer():
        loss = losses.LambdaLoss(model) if listwise else losses.BinaryCrossEntropyLoss(model)
        args = common.training_arguments(options, lr, len(dataset), arguments_class=CrossEncoderTrainingArguments)
        return CrossEncoderTrainer(model=model, args=args, train_dataset=dataset, loss=loss)

    scored = common.train_scored(options, model, evaluate, METRICS, MAIN_METRIC, make_trainer)

    record = common.base_record(options, lr, lr_source) | {
        "loss": options.loss_name(), "n_train_queries": len(queries), "n_train_pairs": n_pairs,
        "n_validation": len(evaluate.samples), "sampled_negatives": options.sampled_negatives, "inputs_cut": cut,
    } | scored
    return common.finish_sentence_transformers(options, model, record)

