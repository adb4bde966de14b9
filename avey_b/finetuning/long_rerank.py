"""``avey-b finetune --task long-rerank``: a reranker for documents of any length that scores a query at the cost of
the query, from your (query, document, label) rows or (query, positive[, negative]) rows, trained by transformers'
``Trainer`` and scored on held-out queries before and after.

    avey-b finetune --task long-rerank --model runs/quickstart/model --train-file qd.jsonl --output-dir runs/long

The model: :class:`~avey_b.model.query_scoring.AveyBForQueryLastScoring` on the checkpoint's backbone (a fresh
one-label head). Each pair goes in as the tokenizer's pair encoding of ``(document, query)``, **document first**
(``[CLS] document [SEP] query [SEP]``), and only the query's splits are ranked against the document's token ids
and run through the processor (§3.1: a split's outputs depend on the embeddings of the splits it chooses, not on
their outputs), so a training pair of a million-token document costs about what a short one does, and so does
scoring one. Documents go in whole: no length limit, nothing cut. Avey-B only, with its ranker on the embeddings and
unidirectional (the defaults); another model is refused with the reason (use ``--task rerank`` for a
cross-encoder of any architecture).

Data, loss and scoring as ``--task rerank``'s (:mod:`avey_b.finetuning.rerank`): the same columns,
``--sampled-negatives`` documents of other queries as extra negatives, binary cross-entropy on each pair's logit
against its label in [0, 1] (``--loss bce``, the only one); every held-out query reranks its documents and as many
drawn ones (seed 0): NDCG@10, MRR@10 and MAP in percent, for the fresh head (the baseline) and after training.

Output: ``--output-dir`` holds the scorer and its tokenizer (which returns ``token_type_ids``, the query's mark):
``AveyBForQueryLastScoring.from_pretrained(dir)``, ``avey_b.Encoder(dir).score(query, document)`` (the relevance and
the evidence: the character spans of the document's splits the query chose).
"""

from __future__ import annotations

from typing import Any

from avey_b.utils.files import DataFileError

from . import common, rerank, threads
from .options import OwnDataOptions

#: The reranking scores recorded, in percent.
METRICS = ("ndcg@10", "mrr@10", "map")
MAIN_METRIC = "ndcg@10"
#: What the saved tokenizer returns: the query's mark with the ids.
INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]


def load_scorer(options: OwnDataOptions):
    """The scorer on the checkpoint's backbone, a fresh one-label head (its load report said in one line); refused
    for a model that is not an Avey-B or whose query outputs depend on the document's outputs."""
    from transformers import AutoConfig

    from avey_b.model.configuration import is_avey_b
    from avey_b.model.query_scoring import AveyBForQueryLastScoring
    from avey_b.model.streaming import refusal
    from avey_b.utils.files import model_source

    from .loading import load_with_new_head

    with model_source(options.model):
        config = AutoConfig.from_pretrained(options.model)
    if not is_avey_b(config):
        raise ValueError(f"--task long-rerank needs an Avey-B model (the query is scored from its own splits), and "
                         f"{options.model} is a {config.model_type!r}: use --task rerank for a cross-encoder")
    if why := refusal(config):
        raise ValueError(f"--task long-rerank cannot train {options.model}: {why}")
    return load_with_new_head(AveyBForQueryLastScoring, options.model, num_labels=1)


def encode_pairs(tokenizer, documents: list[str], queries: list[str]) -> dict[str, list]:
    """The pair encodings of ``(document, query)``, document first, with the query's ``token_type_ids``; a
    tokenizer whose pair encoding marks no second segment is refused."""
    enc = tokenizer(documents, queries, truncation=False, return_token_type_ids=True, verbose=False)
    if documents and not any(enc["token_type_ids"][0]):
        raise ValueError("this tokenizer's pair encoding marks no second segment (token_type_ids all 0), so the "
                         "query cannot be found: give --tokenizer one whose pair template sets type 1 on the "
                         "second text (BERT-style: [CLS] $A [SEP] $B:1 [SEP]:1)")
    return {name: enc[name] for name in INPUT_NAMES}


def candidates(held: dict[str, dict], count: int) -> list[tuple[str, list[str], dict[str, float]]]:
    """Each held-out query with a relevant document: (query, its documents and ``count`` drawn ones, their labels)."""
    drawn = rerank.sample_negatives(held, count, rerank.EVAL_SEED)
    out = [(q, list(e["labels"]) + drawn[q], e["labels"]) for q, e in held.items() if e["positive"]]
    if not out:
        raise DataFileError("no held-out query has a relevant document (label > 0) to score")
    return out


def ranking_scores(model, tokenizer, tasks, batch_size: int) -> dict[str, float]:
    """NDCG@10, MRR@10 and MAP in percent of ``model`` reranking each query's documents (:func:`candidates`)."""
    import torch
    from transformers import DataCollatorWithPadding

    from avey_b.utils.ranking import average_precision, ndcg_at_k, reciprocal_rank_at_k

    collate = DataCollatorWithPadding(tokenizer)
    model.eval()
    device = next(model.parameters()).device
    totals = dict.fromkeys(METRICS, 0.0)
    for query, documents, labels in tasks:
        enc = encode_pairs(tokenizer, documents, [query] * len(documents))
        scores = []
        for b in range(0, len(documents), batch_size):
            batch = collate([{k: v[i] for k, v in enc.items()} for i in range(b, min(b + batch_size, len(documents)))])
            with torch.no_grad():
                scores += model(**{k: v.to(device) for k, v in batch.items()}).logits[:, 0].float().tolist()
        ranking = [documents[i] for i in sorted(range(len(documents)), key=lambda i: -scores[i])]
        totals["ndcg@10"] += ndcg_at_k(ranking, labels, 10)
        totals["mrr@10"] += reciprocal_rank_at_k(ranking, labels, 10)
        totals["map"] += average_precision(ranking, labels)
    return common.rounded({name: 100 * value / len(tasks) for name, value in totals.items()})


def train(options: OwnDataOptions) -> dict[str, Any]:
    """Train and score a query-last reranker as the module docstring says; returns the results record (also
    ``results.json`` in ``options.output_dir``, with the model)."""
    import transformers
    from transformers import DataCollatorWithPadding

    lr, lr_source = common.learning_rate(options)
    table, queries, held = rerank.split_queries(options)
    threads.start(options)
    tokenizer = common.tokenizer_for(options)
    # the query's mark returned by default, by the saved tokenizer too (init_kwargs is what it saves)
    tokenizer.model_input_names = tokenizer.init_kwargs["model_input_names"] = list(INPUT_NAMES)
    transformers.set_seed(options.seed)  # the fresh head's initialisation, and so the score before training
    model = load_scorer(options)
    tasks = candidates(held, options.sampled_negatives)
    extra = rerank.sample_negatives(queries, options.sampled_negatives, options.seed)
    columns = rerank.training_rows(queries, extra, listwise=False)
    enc = encode_pairs(tokenizer, columns["document"], columns["query"])
    train_set = table.to_dataset(enc | {"labels": [float(label) for label in columns["label"]]})

    before = ranking_scores(model, tokenizer, tasks, options.batch_size)
    trainer, trained = common.train_with_trainer(options, model, tokenizer, lr, train_set,
                                                 DataCollatorWithPadding(tokenizer))
    after = ranking_scores(trainer.model, tokenizer, tasks, options.batch_size)
    record = common.base_record(options, lr, lr_source) | {
        "loss": "bce", "metric": MAIN_METRIC, "score": after[MAIN_METRIC], "baseline_score": before[MAIN_METRIC],
        "metrics": after, "baseline": before, "baseline_name": "before training", "n_train_queries": len(queries),
        "n_train_pairs": len(train_set), "n_validation": len(tasks), "sampled_negatives": options.sampled_negatives,
        "longest_pair_tokens": max(map(len, enc["input_ids"])),
    } | trained
    return common.finish(options, trainer.model, tokenizer, record)
