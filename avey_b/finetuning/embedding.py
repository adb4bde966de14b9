"""``avey-b finetune --task embedding``: an embedding model from your (anchor, positive[, negative]) pairs or
triplets, trained by sentence-transformers' own trainer, scored on held-out pairs before and after.

    avey-b finetune --task embedding --model runs/quickstart/model --train-file pairs.jsonl --output-dir runs/emb

Data: one row per pair, the columns ``--anchor-column`` (default ``anchor``: a query, a title, a question) and
``--positive-column`` (``positive``: the text that should embed near it), and ``--negative-column``
(``negative``: a text that should not) when the rows have it. CSV, TSV, JSONL, Parquet or ``hf:``
(:mod:`avey_b.finetuning.data`); a missing or empty text is an error naming the file and line.

Training: ``SentenceTransformerTrainer`` with MultipleNegativesRankingLoss (``--loss mnrl``: each anchor against
its positive and every other row's positive and negative in the batch, so a larger ``--batch-size`` gives more
negatives; batches never hold the same text twice), or CachedMultipleNegativesRankingLoss (``--loss cached-mnrl``,
GradCache: the same loss for a batch far larger than memory holds, computed ``--mini-batch-size`` rows at a time).
The model is the backbone, masked mean pooling and (for Avey-B, as its config says; always for other encoders) L2
normalization: the vectors ``avey-b serve`` and ``avey-b embed`` give. Inputs are never cut for Avey-B
(:func:`avey_b.finetuning.common.length_rule`).

Scoring: the held-out rows (``--validation-file``, or ``--validation-fraction`` of the rows) as a retrieval task —
each held-out anchor searches the held-out positives and negatives by cosine similarity, its own positive being the
relevant one (sentence-transformers' ``InformationRetrievalEvaluator``): recall@1, recall@10, NDCG@10 and MRR@10,
in percent, for the model before training (the baseline) and after.

Output: ``--output-dir`` is a complete sentence-transformers directory (weights, tokenizer, ``modules.json``,
pooling, normalization) that ``SentenceTransformer(dir)``, ``avey-b embed`` and ``avey-b serve`` load and agree on,
with ``results.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from avey_b.model.loading import SENTENCE_TRANSFORMERS_MAX_LENGTH
from avey_b.utils.files import DataFileError

from . import common, threads
from .data import Table, hold_out, read_table
from .options import OwnDataOptions

#: The retrieval scores recorded, sentence-transformers' key (cosine similarity) -> ours.
METRICS = {"cosine_recall@1": "recall@1", "cosine_recall@10": "recall@10", "cosine_ndcg@10": "ndcg@10",
           "cosine_mrr@10": "mrr@10"}
#: The score ``results.json`` leads with.
MAIN_METRIC = "ndcg@10"


def read_rows(options: OwnDataOptions) -> tuple[Table, Table, list[str]]:
    """(training rows, held-out rows, the roles present: ``anchor``, ``positive`` and maybe ``negative``), each
    text checked: a non-empty string."""
    columns = {"anchor": options.anchor_column, "positive": options.positive_column}
    optional = {"negative": options.negative_column}
    train = read_table(options.train_file, columns, task=options.task, optional=optional)
    if options.validation_file:
        held = read_table(options.validation_file, columns, task=options.task, optional=optional)
    else:
        train, held = hold_out(train, options.validation_fraction)
    if options.max_train_examples is not None:
        train = train.select(list(range(min(options.max_train_examples, len(train)))))
    roles = [role for role, name in {**columns, **optional}.items() if name in train.rows[0]]
    for table in (train, held):
        check_texts(table, {role: name for role, name in {**columns, **optional}.items() if role in roles})
    return train, held, roles


def check_texts(table: Table, columns: dict[str, str]) -> None:
    """Every named column of every row holds a non-empty string (else the error names the file and line)."""
    for i, row in enumerate(table.rows):
        for role, name in columns.items():
            value = row.get(name)
            if not isinstance(value, str) or not value.strip():
                raise DataFileError(f"{table.where(i)}: the {role} column {name!r} holds {value!r}, not a text")


def load_model(options: OwnDataOptions, device: str):
    """The ``SentenceTransformer`` to train: a sentence-transformers directory as it is (every directory this
    library writes is one); any other encoder as its backbone, masked mean pooling and L2 normalization (for
    Avey-B, when its config says ``normalize_embeddings``, as ``serve`` and ``embed`` do). The tokenizer is the
    model's (or ``--tokenizer``)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models
    from transformers import AutoConfig

    if saved_model_type(options.model) == "SentenceTransformer":
        model = SentenceTransformer(options.model, device=device)
    else:
        transformer = models.Transformer(options.model)
        config = AutoConfig.from_pretrained(options.model)
        modules = [transformer, models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")]
        if getattr(config, "normalize_embeddings", True):
            modules.append(models.Normalize())
        model = SentenceTransformer(modules=modules, device=device)
    if options.tokenizer:
        model[0].processor = common.tokenizer_for(options)
    return model


def saved_model_type(path: str) -> str | None:
    """The sentence-transformers class a local directory with ``modules.json`` is saved as (its
    ``config_sentence_transformers.json``'s ``model_type``; ``SentenceTransformer`` where it names none, as
    sentence-transformers reads it); None for anything else (a Hub id: never, offline)."""
    import json

    directory = Path(path)
    if not (directory / "modules.json").is_file():
        return None
    config = directory / "config_sentence_transformers.json"
    kind = json.loads(config.read_text()).get("model_type") if config.is_file() else None
    return kind or "SentenceTransformer"


def set_length(model, options: OwnDataOptions, table: Table, texts: dict[str, str]) -> int:
    """Set the model's ``max_seq_length`` by :func:`common.length_rule` and check every text of ``table`` against
    it (an over-long one is an error naming its file and line, for Avey-B); returns how many texts are cut."""
    limit, cut = common.length_rule(options, model[0].auto_model.config)
    model.max_seq_length = limit if limit is not None else SENTENCE_TRANSFORMERS_MAX_LENGTH
    tok = model.tokenizer
    cuts = 0
    for name in texts.values():
        lengths = [len(ids) for ids in tok(table.column(name), truncation=False, verbose=False)["input_ids"]]
        cuts += common.check_lengths(table, lengths, limit, cut)
    return cuts


def retrieval_task(held: Table, columns: dict[str, str]) -> tuple[dict, dict, dict]:
    """The held-out rows as a retrieval task, ``(queries, corpus, relevant)`` as sentence-transformers' retrieval
    evaluators take them: every distinct anchor searches every distinct held-out text of the positive and negative
    columns; relevant: the positives of its rows."""
    queries: dict[str, str] = {}
    corpus: dict[str, str] = {}
    relevant: dict[str, set[str]] = {}
    qid_of: dict[str, str] = {}
    cid_of: dict[str, str] = {}

    def document(text: str) -> str:
        if text not in cid_of:
            cid_of[text] = f"d{len(cid_of)}"
            corpus[cid_of[text]] = text
        return cid_of[text]

    for row in held.rows:
        anchor = row[columns["anchor"]]
        if anchor not in qid_of:
            qid_of[anchor] = f"q{len(qid_of)}"
            queries[qid_of[anchor]] = anchor
        relevant.setdefault(qid_of[anchor], set()).add(document(row[columns["positive"]]))
        if "negative" in columns and columns["negative"] in row:  # a validation file may have none
            document(row[columns["negative"]])
    return queries, corpus, relevant


#: The retrieval evaluators' settings every task that scores a retrieval shares.
EVALUATOR_SETTINGS = {"show_progress_bar": False, "write_csv": False, "accuracy_at_k": [1, 10],
                      "precision_recall_at_k": [1, 10]}


def evaluator(held: Table, columns: dict[str, str], batch_size: int, evaluator_class=None):
    """:func:`retrieval_task` scored by ``evaluator_class``: sentence-transformers' ``InformationRetrievalEvaluator``
    (None: cosine similarity) or its counterpart for another model class (the multi-vector one)."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    return (evaluator_class or InformationRetrievalEvaluator)(*retrieval_task(held, columns), batch_size=batch_size,
                                                              **EVALUATOR_SETTINGS)


def train_pairs(options: OwnDataOptions, load, evaluate_on, loss_of, classes: tuple, metrics: dict[str, str]
                ) -> tuple[Any, dict[str, Any]]:
    """What every task trained from (anchor, positive[, negative]) rows runs (``embedding``, ``sparse-embedding``,
    ``multi-vector``): the rows read and split, the model loaded (``load(options, device)``), inputs cut to what
    memory allows, the held-out retrieval scored before and after training (``evaluate_on(held, columns)``, its
    scores named by ``metrics``) by sentence-transformers' trainer and arguments ``classes`` with ``loss_of(model)``,
    batches without duplicate texts. Returns the trained model and the results record without the task's own
    fields."""
    from avey_b.utils.device import pick_device

    lr, lr_source = common.learning_rate(options)
    train_rows, held, roles = read_rows(options)
    columns = {role: getattr(options, f"{role}_column") for role in roles}
    threads.start(options)
    model = load(options, str(pick_device(options.device)))
    cut = sum(set_length(model, options, table, columns) for table in (train_rows, held))
    evaluate = evaluate_on(held, columns)
    trainer_class, arguments_class = classes

    def make_trainer():
        dataset = train_rows.to_dataset({role: train_rows.column(name) for role, name in columns.items()})
        args = common.training_arguments(options, lr, len(dataset), batch_sampler="no_duplicates",
                                         arguments_class=arguments_class)
        return trainer_class(model=model, args=args, train_dataset=dataset, loss=loss_of(model))

    scored = common.train_scored(options, model, evaluate, metrics, MAIN_METRIC, make_trainer)
    return model, common.base_record(options, lr, lr_source) | {
        "columns": columns, "n_train": len(train_rows), "n_validation": len(held), "n_queries": len(evaluate.queries),
        "n_documents": len(evaluate.corpus), "inputs_cut": cut,
    } | scored


def train(options: OwnDataOptions) -> dict[str, Any]:
    """Train and score an embedding model as the module docstring says; returns the results record (also
    ``results.json`` in ``options.output_dir``, with the model)."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer import losses

    def loss_of(model):
        if options.loss_name() == "cached-mnrl":
            return losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=options.mini_batch_size)
        return losses.MultipleNegativesRankingLoss(model)

    model, record = train_pairs(options, load_model, lambda held, columns: evaluator(held, columns, options.batch_size),
                                loss_of, (SentenceTransformerTrainer, SentenceTransformerTrainingArguments), METRICS)
    return common.finish_sentence_transformers(options, model, {"loss": options.loss_name(), **record})
