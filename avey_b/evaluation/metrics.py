"""Metrics of the downstream protocol (paper §5.1), in two flavours.

``standard`` (the default everywhere) is what the benchmark owners define:

- SC: accuracy.
- TC: entity-level micro F1 over IOB2 chunks, computed by ``seqeval`` (CoNLL ``conlleval`` semantics).
- QA: the official SQuAD v1.1/v2.0 exact match and F1 (answer normalisation: lower case, strip punctuation,
  drop the articles a/an/the, collapse white space; max over the gold answers; for v2 an empty prediction
  scores 1 on a question without answer and 0 otherwise).
- IR: NDCG@10 with linear gains (trec_eval / BEIR), the ideal DCG computed from *all* relevant documents
  of the query in the qrels.

``paper`` reproduces how the authors' evaluation code (EncodEval, as used in the Avey-B release) scores,
so numbers can be set next to the paper's tables:

- TC: per sentence, the macro F1 over the *word labels* (``O`` included), averaged over sentences
  (:func:`per_sentence_macro_f1`).
- QA: a 2-label token classifier; per question, the F1 between the set of token positions predicted
  inside the answer (anywhere in the input, and at the padding positions of its scoring batch:
  :func:`padded_answer_positions`) and the gold set of the first gold answer (:func:`token_set_f1`).
- IR: the ideal DCG is computed from the relevances of the *retrieved* top-10 only
  (:func:`ndcg_at_k` with ``ideal="retrieved"``); a query with a relevant document anywhere in its top 10
  can therefore reach 1.0 even when other relevant documents were missed.

All functions return fractions in [0, 1]; callers multiply by 100 for reporting.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping, Sequence

from avey_b.utils.ranking import average_precision, dcg, ndcg_at_k, reciprocal_rank_at_k  # noqa: F401  (re-exported)

# --------------------------------------------------------------------------------------------- SC


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    if len(predictions) != len(labels):
        raise ValueError(f"accuracy: {len(predictions)} predictions for {len(labels)} labels")
    if not labels:
        raise ValueError("accuracy: no examples to score")
    return sum(int(p == t) for p, t in zip(predictions, labels, strict=False)) / len(labels)


# --------------------------------------------------------------------------------------------- TC


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """Rewrite IOB1 tags (original CoNLL-2003 files: ``I-X`` opens a chunk unless it continues one of the
    same type, ``B-X`` only separates two adjacent chunks of the same type) as IOB2 (every chunk opens
    with ``B-X``). IOB2 input comes back unchanged, so this is safe to apply to any file."""
    out = []
    prev = "O"
    for tag in tags:
        if tag.startswith("I-"):
            kind = tag[2:]
            if prev == "O" or prev[2:] != kind:
                tag = "B-" + kind
        out.append(tag)
        prev = tag
    return out


def entity_f1(true_tags: list[list[str]], pred_tags: list[list[str]]) -> dict[str, float]:
    """Entity-level micro precision / recall / F1 (seqeval, default conlleval mode) over IOB2 tags."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    _check_parallel(true_tags, pred_tags, "entity_f1")
    return {
        "f1": float(f1_score(true_tags, pred_tags, zero_division=0)),
        "precision": float(precision_score(true_tags, pred_tags, zero_division=0)),
        "recall": float(recall_score(true_tags, pred_tags, zero_division=0)),
    }


def per_sentence_macro_f1(true_tags: list[list[str]], pred_tags: list[list[str]]) -> float:
    """Paper protocol for TC: for each sentence the macro F1 over the word labels present in its gold or
    predicted tags (``O`` included, each label weighted equally), then the mean over sentences."""
    _check_parallel(true_tags, pred_tags, "per_sentence_macro_f1")
    scores = []
    for gold, pred in zip(true_tags, pred_tags, strict=False):
        if not gold:
            continue
        per_label = []
        for label in sorted(set(gold) | set(pred)):
            tp = sum(1 for g, p in zip(gold, pred, strict=False) if g == label and p == label)
            n_pred = sum(1 for p in pred if p == label)
            n_gold = sum(1 for g in gold if g == label)
            per_label.append(2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0)
        scores.append(sum(per_label) / len(per_label))
    if not scores:
        raise ValueError("per_sentence_macro_f1: no non-empty sentence to score")
    return sum(scores) / len(scores)


def _check_parallel(a: list[list], b: list[list], name: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{name}: {len(a)} gold sentences but {len(b)} predicted")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if len(x) != len(y):
            raise ValueError(f"{name}: sentence {i} has {len(x)} gold tags but {len(y)} predicted")


# --------------------------------------------------------------------------------------------- QA


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation: lower case, remove punctuation, remove a/an/the, fix spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_PUNCT = set(string.punctuation)


def squad_exact(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str) -> float:
    """Bag-of-tokens F1 after normalisation; two empty strings (a correct "no answer") score 1."""
    pred_toks = normalize_answer(prediction).split()
    gold_toks = normalize_answer(gold).split()
    if not pred_toks or not gold_toks:
        return float(pred_toks == gold_toks)
    common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Official SQuAD v1.1 / v2.0 exact match and F1 over all questions in ``golds``.

    ``golds[qid]`` lists the gold answer texts; an empty list marks a question without answer (v2), for
    which only the empty prediction is right. A question without prediction counts as "no answer".
    Also returns the scores restricted to answerable (``HasAns_*``) and unanswerable (``NoAns_*``)
    questions when both kinds are present, as the v2 script does.
    """
    if not golds:
        raise ValueError("squad_scores: no gold questions")
    unknown = set(predictions) - set(golds)
    if unknown:
        raise ValueError(f"squad_scores: predictions for unknown question ids, e.g. {sorted(unknown)[:3]}")
    exact, f1, has_ans = {}, {}, {}
    for qid, answers in golds.items():
        pred = predictions.get(qid, "")
        answers = [a for a in answers if normalize_answer(a)] or [""]  # v2: only empty-after-norm golds
        has_ans[qid] = answers != [""]
        exact[qid] = max(squad_exact(pred, a) for a in answers)
        f1[qid] = max(squad_f1(pred, a) for a in answers)
    out = {"exact": _mean(exact.values()), "f1": _mean(f1.values()), "total": float(len(golds))}
    has = [q for q in golds if has_ans[q]]
    no = [q for q in golds if not has_ans[q]]
    if has and no:
        out.update(HasAns_exact=_mean(exact[q] for q in has), HasAns_f1=_mean(f1[q] for q in has))
        out.update(NoAns_exact=_mean(exact[q] for q in no), NoAns_f1=_mean(f1[q] for q in no))
    return out


def token_set_f1(predicted: Iterable[int], gold: Iterable[int]) -> float:
    """Paper protocol for QA: F1 between the set of predicted answer-token positions and the gold set, as
    EncodEval computes it: an empty set stands for {0} (position 0, the first question token, is never part of an
    answer), so both empty (a correct "no answer") scores 1 and exactly one empty scores 0."""
    p, g = set(predicted) or {0}, set(gold) or {0}
    return 2 * len(p & g) / (len(p) + len(g))


def padded_answer_positions(predicted_labels: Sequence[int], length: int | None) -> list[int]:
    """The positions labelled 1 in one row of a batch's token predictions. EncodEval reads the whole row: its
    batches are padded to the longest input, so a 1 predicted at a padding position counts as an answer token
    (``length=None``); ``length`` restricts the reading to the input's own first ``length`` tokens."""
    row = predicted_labels if length is None else predicted_labels[:length]
    return [i for i, y in enumerate(row) if y == 1]


# --------------------------------------------------------------------------------------------- IR


def mean_ndcg_at_k(
    rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, float]], k: int = 10,
    ideal: str = "all",
) -> float:
    """Mean NDCG@k over the queries of ``qrels`` that have at least one relevant document (BEIR keeps
    only those); a query without ranking scores 0."""
    queries = [q for q, rel in qrels.items() if any(float(r) > 0 for r in rel.values())]
    if not queries:
        raise ValueError("mean_ndcg_at_k: no query has a relevant document")
    return _mean(ndcg_at_k(rankings.get(q, []), qrels[q], k, ideal) for q in queries)


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0
