"""``--task token-classification``: a tagger on your tagged words — named entities, parts of speech, any tag set —
trained with transformers' ``Trainer`` on ``AutoModelForTokenClassification`` and scored on held-out sentences.

* Data: CoNLL column files (one ``word ... tag`` line per word, a blank line between sentences; the word in the
  first column and the tag in the last, or the columns ``--tokens-column`` / ``--tags-column`` number), or JSONL /
  Parquet / ``hf:`` rows with a word list (``--tokens-column``, default ``tokens``) and a tag list (``--tags-column``,
  default ``tags``) of the same length.
* The tag set is the training data's string tags as written (``O`` first, then sorted), saved as the model's
  ``id2label``, so ``pipeline("token-classification", model=dir, aggregation_strategy="first")`` answers with your
  tags, one per word (its first sub-token's, as trained) and words of one entity grouped. transformers gives a
  saved directory no way to set a pipeline's default ``aggregation_strategy`` (the pipeline reads it from the call
  only, and its default, ``none``, answers per sub-token), so the call is printed at the end of the run and kept
  in ``results.json`` (``pipeline``). A validation tag the
  training data never shows is added after them (so it can be scored, as a miss) and named in a note and in
  ``results.json`` (``validation_only_tags``).
* Words are joined by single spaces and tokenized; each word's tag sits on its first sub-token (the others are
  left out of the loss), and a word's prediction is its first sub-token's; a word cut off by ``--max-length`` is
  predicted ``O`` (a miss, so cutting cannot raise the score).
* Scores: when the tags are entity tags (``O`` and ``B-``/``I-``/``E-``/``S-`` prefixes: IOB1, IOB2, IOBES) the entity
  F1, precision and recall of seqeval (CoNLL's conlleval rules) and the word accuracy, beside tagging every word
  ``O``; for other tag sets the word accuracy and macro-F1 over tags, beside tagging every word with the most
  frequent training tag.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from avey_b.data.conll import ENTITY_TAG, read_conll
from avey_b.utils.files import DataFileError

from . import common, threads
from .alignment import align_labels, word_index_of_tokens, word_predictions
from .data import Table, is_conll, read_split, read_table
from .loading import load_with_new_head
from .options import OwnDataOptions

#: The pipeline's aggregation that answers as the tagger was trained: a word's tag is its first sub-token's.
AGGREGATION = "first"


def pipeline_call(output_dir) -> str:
    """The one line that loads the saved tagger into transformers' pipeline, answering per word."""
    return f'pipeline("token-classification", model="{output_dir}", aggregation_strategy="{AGGREGATION}")'


def read_tagged(source: str, options: OwnDataOptions) -> Table:
    """The sentences of ``source`` as a :class:`Table` of ``tokens`` and ``tags`` (lists of strings of one length)."""
    if is_conll(source):
        sentences = read_conll(source, _column_number(options.tokens_column, 0),
                               _column_number(options.tags_column, -1))
        return Table(source, [{"tokens": s.tokens, "tags": s.tags} for s in sentences],
                     [f"line {s.line}" for s in sentences])
    table = read_table(source, {"tokens": options.tokens_column, "tags": options.tags_column}, task=options.task)
    rows = []
    for i, row in enumerate(table.rows):
        words, tags = row[options.tokens_column], row[options.tags_column]
        for what, column, value in (("words", options.tokens_column, words), ("tags", options.tags_column, tags)):
            if not isinstance(value, (list, tuple)) or not value:
                raise DataFileError(f"{table.where(i)}: column {column!r} must hold a non-empty list of {what}, "
                                    f"got {value!r}")
        if len(words) != len(tags):
            raise DataFileError(f"{table.where(i)}: {len(words)} words but {len(tags)} tags")
        rows.append({"tokens": [str(w) for w in words], "tags": [str(t) for t in tags]})
    return Table(table.source, rows, table.places)


def _column_number(column: str, default: int) -> int:
    """A CoNLL column given by number (``--tokens-column 0``, ``--tags-column 3``; negative: from the end); a
    column name (the JSONL default, ``tokens``/``tags``) means ``default``."""
    return int(column) if column.lstrip("-").isdigit() else default


def check_sentences(table: Table) -> None:
    for i, row in enumerate(table.rows):
        for w, (word, tag) in enumerate(zip(row["tokens"], row["tags"], strict=True)):
            if not word.strip() or any(c.isspace() for c in word):
                raise DataFileError(f"{table.where(i)}: word {w + 1} is {word!r}: a word must be non-empty and hold "
                                    "no white space")
            if not tag.strip():
                raise DataFileError(f"{table.where(i)}: word {w + 1} ({word!r}) has an empty tag")


def tag_set(train: Table, validation: Table) -> tuple[list[str], list[str]]:
    """(the tag set, the validation tags the training sentences never show): ``O`` first, then the training tags
    sorted, then the validation-only ones (kept so the held-out sentences can be scored: a rare ``B-ORG`` of an
    IOB1 file is a miss, not an error)."""
    tags = {t for row in train.rows for t in row["tags"]}
    names = (["O"] if "O" in tags else []) + sorted(tags - {"O"})
    if len(names) < 2:
        raise DataFileError(f"{train.source}: the training sentences have a single tag ({names}); a tagger needs two "
                            "or more")
    unseen = sorted({t for row in validation.rows for t in row["tags"]} - tags)
    return names + unseen, unseen


def is_entity_tagging(names: list[str]) -> bool:
    return all(ENTITY_TAG.match(t) for t in names) and any(t != "O" for t in names)


def scores(gold: list[list[str]], pred: list[list[str]], entity: bool) -> dict[str, float]:
    """Entity F1 / precision / recall (seqeval) and word accuracy, or word accuracy and macro-F1, in percent."""
    from sklearn.metrics import f1_score

    flat_gold = [t for s in gold for t in s]
    flat_pred = [t for s in pred for t in s]
    accuracy = 100 * sum(g == p for g, p in zip(flat_gold, flat_pred, strict=True)) / len(flat_gold)
    if not entity:
        return {"accuracy": accuracy, "macro_f1": 100 * f1_score(flat_gold, flat_pred, average="macro",
                                                                  zero_division=0)}
    from seqeval.metrics import f1_score as entity_f1
    from seqeval.metrics import precision_score, recall_score

    return {"f1": 100 * entity_f1(gold, pred, zero_division=0),
            "precision": 100 * precision_score(gold, pred, zero_division=0),
            "recall": 100 * recall_score(gold, pred, zero_division=0), "accuracy": accuracy}


def encode(tokenizer, rows: Table, label2id: dict[str, int], limit: int | None, cut: bool
           ) -> tuple[Any, list[list[int | None]], int]:
    """(the dataset of ``rows``: token ids and token labels, each word's tag on its first sub-token; the word of
    each token per sentence; how many sentences ``limit`` cut). A sentence longer than ``limit`` when nothing may be
    cut is an error naming its file and line."""
    texts = [" ".join(r["tokens"]) for r in rows.rows]
    enc = tokenizer(texts, truncation=False, verbose=False)
    n_cut = common.check_lengths(rows, [len(ids) for ids in enc["input_ids"]], limit, cut)
    enc = tokenizer(texts, return_offsets_mapping=True,
                    **({"truncation": True, "max_length": limit} if n_cut else {"truncation": False}))
    word_ids = [word_index_of_tokens(r["tokens"], offsets)
                for r, offsets in zip(rows.rows, enc["offset_mapping"], strict=True)]
    labels = [align_labels(w, [label2id[t] for t in r["tags"]], every_subtoken=False)
              for w, r in zip(word_ids, rows.rows, strict=True)]
    columns = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
    return rows.to_dataset(columns | {"labels": labels}), word_ids, n_cut


def predicted_tags(logits, dataset, rows: Table, word_ids: list[list[int | None]], names: list[str]
                   ) -> list[list[str]]:
    """Each sentence's predicted tags: a word's is its first sub-token's; a word cut off is ``O`` (a miss)."""
    import numpy as np

    outside = names.index("O") if "O" in names else 0
    pred = []
    for i, row in enumerate(rows.rows):
        token_preds = np.asarray(logits[i][:len(dataset[i]["input_ids"])]).argmax(-1).tolist()
        words = word_predictions(word_ids[i], token_preds, len(row["tokens"]), outside, vote=False)
        pred.append([names[p] for p in words])
    return pred


def baseline(names: list[str], train: Table) -> tuple[str, str]:
    """(the tag the baseline gives every word, its name): ``O`` for entity tags, else the most frequent tag."""
    if is_entity_tagging(names):
        return "O", "all O"
    tag = Counter(t for r in train.rows for t in r["tags"]).most_common(1)[0][0]
    return tag, f"all {tag!r} (the most frequent tag)"


def train(options: OwnDataOptions) -> dict[str, Any]:
    """Fine-tune a tagger on ``options`` (see the module docstring); returns the results record."""
    import torch
    import transformers
    from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification

    threads.start(options)
    lr, lr_source = common.learning_rate(options)
    train_rows, val_rows = read_split(options, {}, read=lambda source: read_tagged(source, options))
    check_sentences(train_rows)
    check_sentences(val_rows)
    names, unseen = tag_set(train_rows, val_rows)
    if unseen:
        print(f"note: validation tag(s) {unseen} never occur in the training sentences; the tagger cannot learn "
              "them", flush=True)
    label2id = {n: i for i, n in enumerate(names)}
    tokenizer = common.tokenizer_for(options, fast=True)

    transformers.set_seed(options.seed)  # the head's initialisation
    model = load_with_new_head(AutoModelForTokenClassification, options.model, num_labels=len(names),
                               id2label=dict(enumerate(names)), label2id=label2id)
    limit, cut = common.length_rule(options, model.config)
    train_set, _, train_cut = encode(tokenizer, train_rows, label2id, limit, cut)
    val_set, val_words, val_cut = encode(tokenizer, val_rows, label2id, limit, cut)
    trainer, trained = common.train_with_trainer(options, model, tokenizer, lr, train_set,
                                                 DataCollatorForTokenClassification(tokenizer))
    with torch.no_grad():
        logits = trainer.predict(val_set).predictions
    gold = [row["tags"] for row in val_rows.rows]
    pred = predicted_tags(logits, val_set, val_rows, val_words, names)
    entity = is_entity_tagging(names)
    baseline_tag, baseline_name = baseline(names, train_rows)
    got = scores(gold, pred, entity)
    base = scores(gold, [[baseline_tag] * len(s) for s in gold], entity)
    metric = "f1" if entity else "accuracy"
    record = common.base_record(options, lr, lr_source) | {
        "tags": names, "validation_only_tags": unseen, "entity_tags": entity, "metric": metric,
        "score": common.rounded(got[metric]), "baseline_score": common.rounded(base[metric]),
        "metrics": common.rounded(got), "baseline": common.rounded(base),
        "baseline_name": baseline_name, "n_train": len(train_set), "n_validation": len(val_set),
        "max_length": limit, "inputs_cut": {"train": train_cut, "validation": val_cut} if cut else None,
        "pipeline": pipeline_call(options.output_dir)} | trained
    if train_cut or val_cut:
        print(f"note: {train_cut + val_cut} sentence(s) longer than {limit} tokens were cut (--max-length); their "
              "cut words count as predicted O", flush=True)
    record = common.finish(options, trainer.model, tokenizer, record)
    print(f"tags per word: {record['pipeline']} (without aggregation_strategy a pipeline answers per sub-token)",
          flush=True)
    return record
