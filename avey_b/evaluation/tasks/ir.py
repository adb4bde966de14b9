"""Information retrieval (IR): MS MARCO, NQ, MLDR — NDCG@10 after 1,000 training steps (paper §5.1).

A bi-encoder: query and document embeddings are the masked mean of the encoder's last hidden states
(L2-normalised), relevance is their cosine. Training is contrastive with in-batch negatives (InfoNCE on
``scale * cosine``, the other positives of the batch as negatives: the semantics of sentence-transformers'
``MultipleNegativesRankingLoss``, scale 20), run for a fixed number of optimizer steps.

Data
  training pairs: ``hgissbkh/msmarco-pairs`` (MS MARCO and NQ) / the train split of ``hgissbkh/mldr-en``,
    or a local JSONL/TSV/CSV of (query, positive) pairs (columns ``query``/``anchor``/``question`` and
    ``positive``/``document``/``passage``), or a BEIR directory with ``qrels/train.tsv``.
  evaluation: a BEIR directory (``corpus.jsonl`` with ``_id``/``title``/``text``, ``queries.jsonl`` with
    ``_id``/``text``, ``qrels/<split>.tsv`` with ``query-id corpus-id score`` and a header) or the Hub
    (``BeIR/msmarco`` + ``BeIR/msmarco-qrels``, ``BeIR/nq`` + ``BeIR/nq-qrels``: configs ``corpus``/``queries``
    as in BEIR's Hub layout; ``hgissbkh/mldr-en``: its own layout, see :meth:`MLDR._hub`).

Scoring
  standard: every document of the split's corpus is ranked; NDCG@10 with the ideal DCG over all relevant
    documents of the query.
  paper (EncodEval, the harness the paper adopts in §5.1): the model fine-tuned once on MS MARCO pairs is scored
    zero-shot (:mod:`avey_b.evaluation.ir_paper`), on the data as EncodEval's loaders map it (``load(...,
    protocol="paper")``): the test split (for MS MARCO in BEIR's layout, the TREC Deep Learning 2019 queries
    with graded judgments); queries read ``Query: {text}`` and documents ``Document: {text}``
    (NQ: ``Document: {title}. {text}``); relevance is binary (qrels score >= 1); the corpus is only the
    documents named in the qrels of the validation and test splits (NQ: its test split, which EncodEval halves
    at random into validation and test; we score all its queries, the expectation of that random half); the
    ideal DCG is computed over the retrieved top 10 only. The small corpus and the lenient ideal make the task
    easier than the standard one; numbers are not comparable to the standard ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from avey_b.model.heads import mean_pool
from avey_b.utils.files import DataFileError, iter_jsonl, read_rows

from ..metrics import mean_ndcg_at_k
from . import base

_Q_COLS = ("query", "anchor", "question", "sentence1")
_D_COLS = ("positive", "pos", "document", "passage", "sentence2", "text")


@dataclass
class RetrievalSet:
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, float]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.qrels)


def _doc_text(row: dict[str, Any], template: str | None = None) -> str:
    """A corpus row as one text: ``title text``, each stripped (standard), or ``template`` filled with its title and
    text as they are (the paper protocol's ``Document: ...`` formats; EncodEval does not strip them)."""
    if template is not None:  # EncodEval's loaders format the fields as they are, unstripped
        return template.format(title=row.get("title") or "", text=row.get("text") or "")
    title, text = (row.get("title") or "").strip(), (row.get("text") or "").strip()
    return f"{title} {text}" if title else text


#: EncodEval's query format (``datasets.py``: every retrieval set, training pairs included)
PAPER_QUERY = "Query: {text}"
#: EncodEval's document format for MS MARCO, MLDR and the training pairs (NQ adds its title)
PAPER_DOCUMENT = "Document: {text}"


def read_beir(directory: str, split: str, template: str | None = None) -> RetrievalSet:
    """A BEIR directory's corpus, queries and the qrels of ``split``; ``template``: the document format
    (:func:`_doc_text`)."""
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not os.path.isfile(os.path.join(directory, name)):
            raise FileNotFoundError(f"{directory}: not a BEIR directory (missing {name})")
    qrels = read_qrels(directory, split)
    path = os.path.join(directory, "corpus.jsonl")
    corpus = {str(_field(r, "_id", path, n)): _doc_text(r, template) for n, r in iter_jsonl(path)}
    path = os.path.join(directory, "queries.jsonl")
    queries = {str(_field(r, "_id", path, n)): _field(r, "text", path, n) for n, r in iter_jsonl(path)}
    return _checked(RetrievalSet(corpus, queries, qrels), directory)


def read_qrels(directory: str, split: str) -> dict[str, dict[str, float]]:
    """``qrels/<split>.tsv`` of a BEIR directory: query id -> document id -> relevance."""
    qrels_path = os.path.join(directory, "qrels", f"{split}.tsv")
    if not os.path.isfile(qrels_path):
        raise FileNotFoundError(f"{directory}: no qrels for split {split!r} ({qrels_path})")
    qrels: dict[str, dict[str, float]] = {}
    for n, row in read_rows(qrels_path, "\t"):
        q, d, score = (_field(row, k, qrels_path, n) for k in ("query-id", "corpus-id", "score"))
        try:
            qrels.setdefault(str(q), {})[str(d)] = float(score)
        except ValueError:
            raise DataFileError(f"{qrels_path}, line {n}: score {score!r} is not a number") from None
    return qrels


def paper_set(corpus: dict[str, str], queries: dict[str, str], qrels: dict[str, dict[str, dict[str, float]]],
              split: str, source: str) -> RetrievalSet:
    """EncodEval's retrieval set (``datasets.py``): the queries of ``split`` as ``Query: {text}``, binary
    relevance (score >= 1), and a corpus of the documents named by the qrels of every split in ``qrels`` (judged
    non-relevant ones included); ``corpus`` holds the formatted documents."""
    pool = {d for per_split in qrels.values() for rel in per_split.values() for d in rel}
    missing = sorted(pool - corpus.keys())
    if missing:
        raise ValueError(f"{source}: qrels name documents missing from the corpus, e.g. {missing[:3]}")
    binary = {q: {d: float(score >= 1) for d, score in rel.items()} for q, rel in qrels[split].items()}
    return _checked(RetrievalSet({d: corpus[d] for d in sorted(pool)},
                                 {q: PAPER_QUERY.format(text=queries[q]) for q in binary if q in queries}, binary),
                    source)


def _field(row: dict[str, Any], key: str, path: str, lineno: int):
    if key not in row:
        raise DataFileError(f"{path}, line {lineno}: no {key!r} field (found {sorted(row)}); not a BEIR file?")
    return row[key]


def _checked(rs: RetrievalSet, source: str) -> RetrievalSet:
    missing_q = [q for q in rs.qrels if q not in rs.queries]
    if missing_q:
        raise ValueError(f"{source}: qrels name queries missing from the queries, e.g. {missing_q[:3]}")
    missing_d = [d for rel in rs.qrels.values() for d in rel if d not in rs.corpus]
    if missing_d:
        raise ValueError(f"{source}: qrels name documents missing from the corpus, e.g. {missing_d[:3]}")
    if not rs.qrels:
        raise ValueError(f"{source}: no qrels")
    return rs


def pairs_from_rows(rows: list[dict[str, Any]], source: str) -> list[tuple[str, str]]:
    if not rows:
        raise ValueError(f"{source}: no training pairs")
    q_col = next((c for c in _Q_COLS if c in rows[0]), None)
    d_col = next((c for c in _D_COLS if c in rows[0] and c != q_col), None)
    if q_col is None or d_col is None:
        raise ValueError(f"{source}: need a query column {_Q_COLS} and a positive column {_D_COLS}, "
                         f"got {sorted(rows[0])}")
    return [(str(r[q_col]), str(r[d_col])) for r in rows]


def multiple_negatives_ranking_loss(q: torch.Tensor, d: torch.Tensor, scale: float) -> torch.Tensor:
    """In-batch-negative InfoNCE from queries to documents: query i's positive is document i, every other document
    of the batch is a negative, queries never compete with each other; similarities are cosines times ``scale``
    (sentence-transformers' MultipleNegativesRankingLoss). The embedding head's
    :func:`avey_b.model.heads.in_batch_contrastive_loss` differs: it takes labels, any number of positives, and every
    other input of the batch as a candidate."""
    sims = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(d, dim=-1).T
    return torch.nn.functional.cross_entropy(scale * sims, torch.arange(q.shape[0], device=q.device))


def merge_topk(best: tuple[torch.Tensor, torch.Tensor] | None, scores: torch.Tensor, offset: int,
               k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold a (queries, chunk) score block into the running top-k (values, corpus indices)."""
    val, idx = scores.topk(min(k, scores.shape[1]), dim=-1)
    idx = idx + offset
    if best is not None:
        val, order = torch.cat([best[0], val], 1).topk(min(k, best[0].shape[1] + val.shape[1]), dim=-1)
        idx = torch.cat([best[1], idx], 1).gather(1, order)
    return val, idx


def rank(query_emb: torch.Tensor, doc_chunks, doc_ids: list[str], k: int) -> list[list[str]]:
    """Top-k document ids per query by dot product (cosine for normalised embeddings). ``doc_chunks``
    yields consecutive blocks of document embeddings, so the corpus never has to sit in memory at once
    (the MS MARCO corpus has 8.8M passages)."""
    best, offset = None, 0
    for chunk in doc_chunks:
        chunk = chunk.to(query_emb.device, query_emb.dtype)
        best = merge_topk(best, query_emb @ chunk.T, offset, k)
        offset += chunk.shape[0]
    if offset != len(doc_ids):
        raise ValueError(f"rank: {offset} document embeddings for {len(doc_ids)} ids")
    return [[doc_ids[j] for j in row] for row in best[1].tolist()]


class RetrievalTask(base.Task):
    family = "IR"
    metric = "ndcg@10"
    default_epochs = None
    default_steps = 1000
    hub_corpus = ""
    hub_qrels = ""  # "" = qrels inside hub_corpus (config "qrels")
    hub_pairs = "hgissbkh/msmarco-pairs"
    eval_split = "test"

    # -- data --------------------------------------------------------------------------------------------
    paper_document = PAPER_DOCUMENT  # the document format of EncodEval's loader for this benchmark
    paper_pool_splits: tuple[str, ...] = ("validation", "test")  # qrels whose documents form the paper's corpus

    def load(self, which: str, files: base.DataFiles, protocol: str = "standard"):
        """Training pairs (``which="train"``) or the evaluation :class:`RetrievalSet`; ``protocol="paper"``
        maps the evaluation data as EncodEval's loaders do (module docstring)."""
        if which == "train":
            path = files.train
            if path is None:
                rows = list(base.load_hub(self.hub_pairs, None, self.hub_split("train", files)))
                return pairs_from_rows(rows, self.hub_pairs)
            if os.path.isdir(path):
                rs = read_beir(path, self.hub_split("train", files))
                return [(rs.queries[q], rs.corpus[d]) for q, rel in rs.qrels.items() for d, r in rel.items() if r > 0]
            return pairs_from_rows([row for _, row in base.read_table(path)], path)
        if protocol == "paper":
            return self._load_paper(files)
        split = self.hub_split("eval", files)
        if files.eval is not None:
            return read_beir(files.eval, split)
        corpus, queries, qrels = self._hub(self.hub_corpus, [split], None)
        return _checked(RetrievalSet(corpus, queries, qrels[split]), self.hub_corpus)

    def _hub(self, name: str, splits: list[str], template: str | None):
        """(corpus, queries, {split: qrels}) of a Hub dataset in BEIR's layout (configs ``corpus`` and
        ``queries``; qrels in ``hub_qrels`` or in the config ``qrels``)."""
        corpus = {str(r["_id"]): _doc_text(r, template) for r in base.load_hub(name, "corpus", "corpus")}
        queries = {str(r["_id"]): r["text"] for r in base.load_hub(name, "queries", "queries")}
        qrels: dict[str, dict[str, dict[str, float]]] = {}
        for split in splits:
            rows = base.load_hub(self.hub_qrels, None, split) if self.hub_qrels else base.load_hub(name, "qrels", split)
            for r in rows:
                qrels.setdefault(split, {}).setdefault(str(r["query-id"]), {})[str(r["corpus-id"])] = float(r["score"])
        return corpus, queries, qrels

    def _load_paper(self, files: base.DataFiles) -> RetrievalSet:
        """The evaluation split (``test`` unless named) as EncodEval maps it (module docstring)."""
        split = files.eval_split or "test"
        pool = list(dict.fromkeys([*self.paper_pool_splits, split]))
        if files.eval is None:
            corpus, queries, qrels = self._hub(self.hub_corpus, pool, self.paper_document)
            return paper_set(corpus, queries, qrels, split, self.hub_corpus)
        rs = read_beir(files.eval, split, self.paper_document)
        qrels = {s: read_qrels(files.eval, s) for s in pool
                 if s != split and os.path.isfile(os.path.join(files.eval, "qrels", f"{s}.tsv"))}
        return paper_set(rs.corpus, rs.queries, qrels | {split: rs.qrels}, split, files.eval)

    def num_examples(self, examples) -> int:
        return len(examples)

    def subsample(self, examples, limit):
        if limit is None or not isinstance(examples, RetrievalSet):
            return examples if limit is None else examples[:limit]
        keep = sorted(examples.qrels)[:limit]
        return RetrievalSet(examples.corpus, examples.queries, {q: examples.qrels[q] for q in keep})

    def split_holdout(self, examples, fraction):
        raise ValueError("IR tasks need an evaluation BEIR directory; --holdout is not supported")

    # -- model / training --------------------------------------------------------------------------------
    def head(self, cfg) -> str:
        return "embedding"

    def train_features(self, examples, tokenizer, cfg) -> list[dict[str, Any]]:
        q = tokenizer([p[0] for p in examples], truncation=True, max_length=cfg.query_max_length)
        d = tokenizer([p[1] for p in examples], truncation=True, max_length=cfg.max_length)
        return [{"q_input_ids": q["input_ids"][i], "q_attention_mask": q["attention_mask"][i],
                 "d_input_ids": d["input_ids"][i], "d_attention_mask": d["attention_mask"][i]}
                for i in range(len(examples))]

    def loss(self, model, batch, cfg) -> torch.Tensor:
        q = model(input_ids=batch["q_input_ids"], attention_mask=batch["q_attention_mask"]).last_hidden_state
        d = model(input_ids=batch["d_input_ids"], attention_mask=batch["d_attention_mask"]).last_hidden_state
        q = mean_pool(q.float(), batch["q_attention_mask"])
        d = mean_pool(d.float(), batch["d_attention_mask"])
        return multiple_negatives_ranking_loss(q, d, cfg.ir_scale)

    # -- scoring -----------------------------------------------------------------------------------------
    def evaluate(self, model, tokenizer, examples: RetrievalSet, cfg) -> dict[str, float]:
        """:meth:`score` with the library's embedding of ``model``: the embedding head's masked mean pooling of
        the last hidden state (:func:`avey_b.base.encode_texts`)."""
        device = next(model.parameters()).device

        def embed(texts: list[str], query: bool) -> torch.Tensor:
            n = cfg.query_max_length if query else cfg.max_length
            return base.encode_texts(model, tokenizer, texts, n, cfg.eval_batch_size, device,
                                     cfg.normalize_embeddings, cfg.precision).to(device)

        return self.score(examples, embed, cfg)

    def score(self, examples: RetrievalSet, embed, cfg) -> dict[str, float]:
        """NDCG@10 of every query of ``examples`` against its whole corpus, ranked by the dot product of
        ``embed(texts, query: bool)`` embeddings (cosine when they are normalised); the corpus is embedded
        ``cfg.corpus_chunk`` documents at a time. ``paper`` protocol: ideal DCG over the retrieved top 10."""
        doc_ids = list(examples.corpus)
        qids = sorted(examples.qrels)
        q_emb = embed([examples.queries[q] for q in qids], True)
        chunk = cfg.corpus_chunk
        doc_chunks = (embed([examples.corpus[d] for d in doc_ids[i:i + chunk]], False)
                      for i in range(0, len(doc_ids), chunk))
        rankings = dict(zip(qids, rank(q_emb, doc_chunks, doc_ids, 10), strict=True))
        ideal = "retrieved" if cfg.protocol == "paper" else "all"
        return {"ndcg@10": 100 * mean_ndcg_at_k(rankings, examples.qrels, 10, ideal),
                "n_eval": len(qids), "corpus_size": len(doc_ids)}


class MSMARCOPairs(RetrievalTask):
    """The training set of the paper's IR protocol (EncodEval's ``msmarco_pairs``): MS MARCO (query, positive
    passage) pairs, read as ``Query: ...`` / ``Document: ...``. Not a benchmark (no score, not in the registry):
    :mod:`avey_b.evaluation.ir_paper` fine-tunes on it once per (model, lr, seed) for MLDR, MS MARCO and NQ."""

    name, display = "msmarco_pairs", "MS MARCO pairs"
    hub_pairs = "hgissbkh/msmarco-pairs"

    def load(self, which: str, files: base.DataFiles, protocol: str = "paper"):
        if which != "train":
            raise ValueError("msmarco_pairs is a training set; the models trained on it are scored on mldr, "
                             "msmarco and nq")
        return [(PAPER_QUERY.format(text=q), PAPER_DOCUMENT.format(text=d)) for q, d in super().load("train", files)]


class MSMARCO(RetrievalTask):
    name, display = "msmarco", "MS MARCO"
    hub_corpus, hub_qrels, eval_split = "BeIR/msmarco", "BeIR/msmarco-qrels", "validation"


class NQ(RetrievalTask):
    name, display = "nq", "NQ"
    hub_corpus, hub_qrels, eval_split = "BeIR/nq", "BeIR/nq-qrels", "test"
    paper_document = "Document: {title}. {text}"
    paper_pool_splits = ("test",)  # BEIR's NQ has only a test split (EncodEval halves it into validation and test)


class MLDR(RetrievalTask):
    name, display = "mldr", "MLDR"
    hub_corpus, hub_qrels, eval_split = "hgissbkh/mldr-en", "", "test"
    hub_pairs = "hgissbkh/mldr-en"
    paper_pool_splits = ("dev", "test")

    def _hub(self, name: str, splits: list[str], template: str | None):
        """``hgissbkh/mldr-en`` is not in BEIR's layout (EncodEval's ``mldr_en``): the ``default`` config's rows
        carry ``query_id``, ``query`` and ``positive_passages`` (each with a ``docid``), the ``corpus`` config's
        rows ``docid`` and ``text``."""
        corpus = {str(r["docid"]): _doc_text(r, template) for r in base.load_hub(name, "corpus", "corpus")}
        queries: dict[str, str] = {}
        qrels: dict[str, dict[str, dict[str, float]]] = {}
        for split in splits:
            for r in base.load_hub(name, "default", split):
                queries[str(r["query_id"])] = r["query"]
                rel = qrels.setdefault(split, {}).setdefault(str(r["query_id"]), {})
                rel.update({str(p["docid"]): 1.0 for p in r["positive_passages"]})
        return corpus, queries, qrels
