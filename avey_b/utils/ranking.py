"""Ranking metrics of one query (trec_eval conventions): NDCG@k, reciprocal rank@k, average precision. The paper
protocol's evaluation (:mod:`avey_b.evaluation.metrics`) and the fine-tuning tasks that score rankings share them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def dcg(gains: Sequence[float]) -> float:
    return sum(g / math.log2(rank + 2) for rank, g in enumerate(gains))


def ndcg_at_k(
    ranking: Sequence[str], qrels: Mapping[str, float], k: int = 10, ideal: str = "all"
) -> float:
    """NDCG@k of one query with linear gains (trec_eval convention).

    ``ranking``: document ids, best first (only the first ``k`` are used). ``qrels``: doc id -> relevance
    (non-positive relevances count as non-relevant). ``ideal="all"`` (standard): the ideal DCG sorts every
    relevant document of the query; ``ideal="retrieved"`` (paper protocol): it sorts only the retrieved
    top-k. A query whose ideal DCG is 0 scores 0.
    """
    if ideal not in ("all", "retrieved"):
        raise ValueError(f"ndcg_at_k: ideal must be 'all' or 'retrieved', got {ideal!r}")
    top = list(ranking[:k])
    gains = [max(float(qrels.get(d, 0.0)), 0.0) for d in top]
    if ideal == "all":
        pool = [max(float(r), 0.0) for r in qrels.values()]
    else:
        pool = gains
    idcg = dcg(sorted(pool, reverse=True)[:k])
    return dcg(gains) / idcg if idcg > 0 else 0.0


def reciprocal_rank_at_k(ranking: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    """1 / the rank of the first relevant document (relevance > 0) among the first ``k`` of ``ranking``; 0 when
    none is."""
    for rank, d in enumerate(ranking[:k], start=1):
        if float(qrels.get(d, 0.0)) > 0:
            return 1.0 / rank
    return 0.0


def average_precision(ranking: Sequence[str], qrels: Mapping[str, float]) -> float:
    """The mean, over the query's relevant documents (relevance > 0), of the precision at each one's rank in
    ``ranking`` (one not ranked counts 0); 0 for a query without a relevant document."""
    relevant = sum(float(r) > 0 for r in qrels.values())
    found, total = 0, 0.0
    for rank, d in enumerate(ranking, start=1):
        if float(qrels.get(d, 0.0)) > 0:
            found += 1
            total += found / rank
    return total / relevant if relevant else 0.0
