"""``--task text-classification``: a sequence classifier on your texts and labels — single-label (any number of
classes, named by your labels), multi-label, or regression — trained with transformers' ``Trainer`` on
``AutoModelForSequenceClassification`` (Avey-B's own head when the model is Avey-B) and scored on held-out rows
beside the baseline that ignores the text:

* single-label: accuracy and macro-F1 (the unweighted mean of the per-class F1, scikit-learn's ``f1_score``), beside
  always answering the most frequent training class;
* multi-label: micro-F1, macro-F1 and exact-match accuracy (sigmoid > 0.5), beside answering, for each label, what
  most training rows say (on when more than half have it);
* regression: MSE, Pearson and Spearman correlation (x 100), beside always answering the training mean (its
  correlations are undefined: None).

Class names are the labels as written (``"positive"``, ``"3"``), in sorted order (numerically when every label is a
whole number); they are saved as the model's ``id2label`` / ``label2id``, so ``pipeline("text-classification",
model=dir)`` and ``avey-b serve``'s ``/v1/classify`` answer with them. A validation label the training rows never
show is an error naming its file and line.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from avey_b.utils.files import DataFileError

from . import common, threads
from .data import Table, read_split
from .loading import load_with_new_head
from .options import OwnDataOptions

# ------------------------------------------------------------------------------------------ labels


def texts_of(table: Table, column: str) -> list[str]:
    """The column's texts; a missing or empty one is an error naming its file and line."""
    out = []
    for i, value in enumerate(table.column(column)):
        if not isinstance(value, str):
            if value is None or isinstance(value, (list, dict)):
                raise DataFileError(f"{table.where(i)}: column {column!r} holds {value!r}, not a text")
            value = str(value)
        if not value.strip():
            raise DataFileError(f"{table.where(i)}: empty text in column {column!r}")
        out.append(value)
    return out


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _is_whole(value: Any) -> bool:
    return _is_number(value) and float(value).is_integer()


def problem_type_of(values: list[Any], requested: str) -> str:
    """``requested``, or for ``auto``: lists -> multi-label; numbers not all whole -> regression; else single-label."""
    if requested != "auto":
        return requested
    if any(isinstance(v, (list, tuple)) for v in values):
        return "multi_label_classification"
    if values and all(_is_number(v) for v in values) and not all(_is_whole(v) for v in values):
        return "regression"
    return "single_label_classification"


def label_name(value: Any) -> str:
    """A label as a class name: strings as written (stripped), whole numbers without ``.0``."""
    if isinstance(value, str):
        return value.strip()
    if _is_whole(value):
        return str(int(float(value)))
    return str(value)


def class_names(names: list[str]) -> list[str]:
    """The sorted class names (numerically when every one is a whole number: ``2`` before ``10``)."""
    unique = sorted(set(names))
    if unique and all(_is_whole(n) for n in unique):
        return sorted(unique, key=lambda n: int(float(n)))
    return unique


def label_lists(table: Table, column: str, separator: str) -> list[list[str]]:
    """Multi-label: each row's labels (a list, or a string of labels joined by ``separator``; empty: none)."""
    out = []
    for i, value in enumerate(table.column(column)):
        if isinstance(value, (list, tuple)):
            names = [label_name(v) for v in value]
        elif isinstance(value, str):
            names = [n.strip() for n in value.split(separator) if n.strip()]
        elif value is None:
            names = []
        else:
            raise DataFileError(f"{table.where(i)}: label {value!r} in column {column!r} is not a list of labels")
        if any(not n for n in names):
            raise DataFileError(f"{table.where(i)}: an empty label in column {column!r}: {value!r}")
        out.append(names)
    return out


def encode_labels(problem: str, train: Table, validation: Table, options: OwnDataOptions
                  ) -> tuple[list[Any], list[Any], list[str]]:
    """(training targets, validation targets, class names): class ids (single-label), multi-hot float rows
    (multi-label) or floats (regression, no class names)."""
    column = options.label_column
    if problem == "regression":
        def numbers(table):
            out = []
            for i, v in enumerate(table.column(column)):
                if not _is_number(v):
                    raise DataFileError(f"{table.where(i)}: label {v!r} in column {column!r} is not a number "
                                        "(regression)")
                out.append(float(v))
            return out
        return numbers(train), numbers(validation), []
    if problem == "multi_label_classification":
        train_lists = label_lists(train, column, options.label_separator)
        names = class_names([n for row in train_lists for n in row])
        if not names:
            raise DataFileError(f"{train.source}: no labels in column {column!r}")
        index = {n: i for i, n in enumerate(names)}
        val_lists = label_lists(validation, column, options.label_separator)
        for i, row in enumerate(val_lists):
            unknown = [n for n in row if n not in index]
            if unknown:
                raise DataFileError(f"{validation.where(i)}: label {unknown[0]!r} never occurs in the training rows "
                                    f"(their labels: {names})")

        def hot(rows):
            return [[1.0 if n in set(row) else 0.0 for n in names] for row in rows]
        return hot(train_lists), hot(val_lists), names

    def names_of(table):
        out = []
        for i, v in enumerate(table.column(column)):
            if v is None or isinstance(v, (list, dict)) or (isinstance(v, float) and not math.isfinite(v)):
                raise DataFileError(f"{table.where(i)}: label {v!r} in column {column!r} is not a class")
            name = label_name(v)
            if not name:
                raise DataFileError(f"{table.where(i)}: empty label in column {column!r}")
            out.append(name)
        return out
    train_names = names_of(train)
    names = class_names(train_names)
    if len(names) < 2:
        raise DataFileError(f"{train.source}: the training rows have a single class ({names}); a classifier needs two "
                            "or more")
    index = {n: i for i, n in enumerate(names)}
    val_ids = []
    for i, name in enumerate(names_of(validation)):
        if name not in index:
            raise DataFileError(f"{validation.where(i)}: label {name!r} never occurs in the training rows (their "
                                f"classes: {names})")
        val_ids.append(index[name])
    return [index[n] for n in train_names], val_ids, names


# ------------------------------------------------------------------------------------------ scores


def single_label_scores(pred: list[int], gold: list[int], train_ids: list[int]) -> tuple[dict, dict]:
    """(scores, majority-class baseline scores): accuracy and macro-F1 in percent."""
    from sklearn.metrics import accuracy_score, f1_score

    def scores(p):
        return {"accuracy": 100 * accuracy_score(gold, p),
                "macro_f1": 100 * f1_score(gold, p, average="macro", zero_division=0)}
    majority = Counter(train_ids).most_common(1)[0][0]
    return scores(pred), scores([majority] * len(gold))


def multi_label_scores(pred: list[list[int]], gold: list[list[float]], train: list[list[float]]) -> tuple[dict, dict]:
    """(scores, per-label-majority baseline scores): micro-F1, macro-F1 and exact match in percent."""
    import numpy as np
    from sklearn.metrics import accuracy_score, f1_score

    gold = np.asarray(gold, dtype=int)

    def scores(p):
        p = np.asarray(p, dtype=int)
        return {"micro_f1": 100 * f1_score(gold, p, average="micro", zero_division=0),
                "macro_f1": 100 * f1_score(gold, p, average="macro", zero_division=0),
                "exact_match": 100 * accuracy_score(gold, p)}
    majority = (np.asarray(train).mean(0) > 0.5).astype(int)
    return scores(pred), scores(np.tile(majority, (len(gold), 1)))


def regression_scores(pred: list[float], gold: list[float], train: list[float]) -> tuple[dict, dict]:
    """(scores, training-mean baseline scores): MSE, and Pearson and Spearman correlation x 100 (None where
    undefined: a constant prediction)."""
    import numpy as np
    from scipy.stats import pearsonr, spearmanr

    gold = np.asarray(gold, dtype=float)

    def scores(p):
        p = np.asarray(p, dtype=float)
        constant = bool(np.all(p == p[0])) or bool(np.all(gold == gold[0]))
        return {"mse": float(np.mean((p - gold) ** 2)),
                "pearson": None if constant else 100 * float(pearsonr(p, gold)[0]),
                "spearman": None if constant else 100 * float(spearmanr(p, gold)[0])}
    return scores(pred), scores([float(np.mean(train))] * len(gold))


def rounded(scores: dict[str, float | None]) -> dict[str, float | None]:
    """Percentages to 2 decimals; the MSE, in the label's own unit, to 4 significant digits."""
    return {k: (float(f"{v:.4g}") if k == "mse" else common.rounded(v)) if v is not None else None
            for k, v in scores.items()}


HEADLINE = {"single_label_classification": ("accuracy", "majority class"),
            "multi_label_classification": ("micro_f1", "per-label majority"),
            "regression": ("mse", "training mean")}


# ------------------------------------------------------------------------------------------ train


def tokenize(tokenizer, table: Table, texts: list[str], pairs: list[str] | None, limit: int | None, cut: bool
             ) -> tuple[dict[str, list], int]:
    """The encodings of ``texts`` (and ``pairs``), and how many were cut at ``limit`` (``cut``); an input longer
    than ``limit`` when nothing may be cut is an error naming its file and line."""
    enc = tokenizer(texts, pairs, truncation=False, verbose=False)
    n_cut = common.check_lengths(table, [len(ids) for ids in enc["input_ids"]], limit, cut)
    if n_cut:
        enc = tokenizer(texts, pairs, truncation=True, max_length=limit)
    return dict(enc), n_cut


def train(options: OwnDataOptions) -> dict[str, Any]:
    """Fine-tune a text classifier on ``options`` (see the module docstring); returns the results record."""
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

    threads.start(options)
    lr, lr_source = common.learning_rate(options)
    columns = {"text": options.text_column, "text_pair": options.text_pair_column, "label": options.label_column}
    train_rows, val_rows = read_split(options, columns)
    problem = problem_type_of(train_rows.column(options.label_column), options.problem_type)
    train_y, val_y, names = encode_labels(problem, train_rows, val_rows, options)
    tokenizer = common.tokenizer_for(options)

    transformers.set_seed(options.seed)  # the head's initialisation
    kwargs = ({"num_labels": 1} if problem == "regression" else
              {"num_labels": len(names), "id2label": dict(enumerate(names)),
               "label2id": {n: i for i, n in enumerate(names)}})
    model = load_with_new_head(AutoModelForSequenceClassification, options.model, problem_type=problem, **kwargs)
    limit, cut = common.length_rule(options, model.config)

    def dataset(rows: Table, targets: list[Any]):
        texts = texts_of(rows, options.text_column)
        pairs = texts_of(rows, options.text_pair_column) if options.text_pair_column else None
        enc, n_cut = tokenize(tokenizer, rows, texts, pairs, limit, cut)
        return rows.to_dataset(enc | {"labels": targets}), n_cut

    train_set, train_cut = dataset(train_rows, train_y)
    val_set, val_cut = dataset(val_rows, val_y)
    trainer, trained = common.train_with_trainer(options, model, tokenizer, lr, train_set,
                                                 DataCollatorWithPadding(tokenizer))
    with torch.no_grad():
        logits = np.asarray(trainer.predict(val_set.remove_columns("labels")).predictions)
    if problem == "single_label_classification":
        scores, baseline = single_label_scores(logits.argmax(-1).tolist(), val_y, train_y)
    elif problem == "multi_label_classification":
        scores, baseline = multi_label_scores((logits > 0).astype(int).tolist(), val_y, train_y)
    else:
        scores, baseline = regression_scores(logits.reshape(-1).tolist(), val_y, train_y)
    metric, baseline_name = HEADLINE[problem]
    scores, baseline = rounded(scores), rounded(baseline)
    record = common.base_record(options, lr, lr_source) | {
        "problem_type": problem, "labels": names, "metric": metric, "score": scores[metric],
        "baseline_score": baseline[metric], "metrics": scores, "baseline": baseline,
        "baseline_name": baseline_name, "n_train": len(train_set), "n_validation": len(val_set),
        "max_length": limit, "inputs_cut": {"train": train_cut, "validation": val_cut} if cut else None} | trained
    if train_cut or val_cut:
        print(f"note: {train_cut + val_cut} input(s) longer than {limit} tokens were cut (--max-length)", flush=True)
    return common.finish(options, trainer.model, tokenizer, record)
