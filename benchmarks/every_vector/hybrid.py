"""Hybrid retrieval: dense, sparse (SPLADE), multi-vector (late interaction) and their fusion, each fine-tuned
from the same pretrained small model with the same budget, beside BM25 and a BERT of the same size trained the
same way — on the project's retrieval set and on a long-document variant.

    python benchmarks/every_vector/hybrid.py --shared ../shared/data --work runs/every_vector_hybrid

Steps (each resumable: a finished pretraining run or fine-tuning cell is not redone):

1. Pretraining: the quickstart's recipe and token budget (``avey-b pretrain --config quickstart``) for Avey-B (the
   quickstart's shape) and for a 2-layer BERT of width 256 whose FFN width matches Avey-B's parameter count, at
   5e-4 (the rate ``benchmarks/learning`` kept for BERT), through ``benchmarks/learning``'s ``pretrain``. The
   text: the Python docs bundled with the library and the paragraphs of WikiText-2's *training* articles (the
   held-out articles are never seen, not even unlabelled).
2. Pairs: ``benchmarks/own_data/retrieval.py``'s (query ``"<title> : <heading>"`` → the section's first 64 words;
   12 of the 60 articles held out by the SHA-256 of their titles).
3. Fine-tuning, per model and kind, the same rows, epochs, batch and seed: ``avey-b finetune --task embedding``
   (dense), ``--task sparse-embedding`` (SPLADE over the masked-LM head) and ``--task multi-vector`` (128-wide token
   vectors, MaxSim).
4. Scoring, through sentence-transformers' own classes (``SentenceTransformer``, ``SparseEncoder``,
   ``MultiVectorEncoder``: the same code for both models), BM25 through ``bm25s``, and a hybrid: reciprocal rank
   fusion (k = 60) of the three learned rankings:

   * **short**: each held-out query retrieves its section among all held-out sections;
   * **long**: 24 documents of at least 32,768 tokens (the Avey-B tokenizer's count), 12 of them holding one
     held-out article each at a seeded position among whole training articles and tiny-shakespeare passages, 12
     of filler only; each held-out query retrieves the document that holds its article. BERT reads its first 512
     tokens (its position limit); Avey-B reads every token.

   recall@10, NDCG@10 and MRR@10 in percent; ``hybrid.md`` and ``hybrid.jsonl`` here.

The models are small (2.9M parameters) and briefly trained on one CPU: the table compares the kinds of vectors
under one budget, not what the kinds reach at scale.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "learning"))
sys.path.insert(0, str(HERE.parent / "own_data"))
import retrieval as pairs  # noqa: E402  (the project's retrieval set: WikiText-2 heading -> section)
import run as learning  # noqa: E402  (the learning benchmark's pretraining, reused as is)

AVEY_B = learning.AVEY_B
BERT_LR = 5e-4
KINDS = {"dense": "embedding", "sparse": "sparse-embedding", "multivector": "multi-vector"}  # kind -> finetune task
LONG_TOKENS = 32_768
LONG_DOCUMENTS = 24  # 12 hold one held-out article each, the rest are filler only
RRF_K = 60
K = 10


def held_titles(arts: list[dict]) -> set[str]:
    """The held-out articles, chosen as ``benchmarks/own_data/retrieval.py`` chooses them."""
    return set(sorted((a["title"] for a in arts), key=lambda t: hashlib.sha256(t.encode()).hexdigest())
               [:pairs.HELD_ARTICLES])


def corpus_files(shared: Path, work: Path) -> list[str]:
    """The pretraining text as JSONL documents: the bundled Python docs and the training articles' sections."""
    from avey_b.data.corpus import python_docs_corpus

    docs, wiki = work / "python_docs.jsonl", work / "wikitext2_train_articles.jsonl"
    if not docs.exists():
        with open(docs, "w") as f:
            f.writelines(json.dumps({"text": text}) + "\n" for text in python_docs_corpus())
    if not wiki.exists():
        arts = pairs.articles(shared / "wikitext-2" / "valid.tokens.txt")
        held = held_titles(arts)
        with open(wiki, "w") as f:
            for a in arts:
                if a["title"] not in held:
                    f.writelines(json.dumps({"text": " ".join(s["text"])}) + "\n" for s in a["sections"]
                                 if len(" ".join(s["text"])) >= 200)
    return [str(docs), str(wiki)]


def pretrained(shared: Path, work: Path, threads: int) -> dict[str, Path]:
    """{model: its pretrained masked-LM directory}, pretraining what is not there yet."""
    files = corpus_files(shared, work)
    common = [f"data.train=[{','.join(files)}]", f"train.threads={threads}", "train.max_minutes=null",
              "logging.progress=false", "checkpoint.every=0"]
    runs, _, _ = learning.pretrain(files, work, common, work / "log-pretrain.txt", archs=("bert",),
                                   lrs={"bert": [BERT_LR]})
    return {name: d / "model" for name, d in runs.items()}


def long_set(shared: Path, work: Path, tokenizer) -> tuple[list[str], list[str], list[int]]:
    """The long-document variant: (documents, queries, the index of each query's document); see the docstring."""
    arts = pairs.articles(shared / "wikitext-2" / "valid.tokens.txt")
    held = held_titles(arts)
    text = lambda a: " ".join(" ".join(s["text"]) for s in a["sections"])  # noqa: E731
    lines = (shared / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8").split("\n\n")
    filler = [text(a) for a in arts if a["title"] not in held] + [" ".join(p.split()) for p in lines if p.strip()]
    rng = random.Random(0)
    targets = [a for a in arts if a["title"] in held]
    docs, queries, gold = [], [], []
    for i in range(LONG_DOCUMENTS):
        parts, n = [], 0
        while n < LONG_TOKENS:
            piece = rng.choice(filler)
            parts.append(piece)
            n += len(tokenizer(piece, add_special_tokens=False)["input_ids"])
        if i < len(targets):
            parts.insert(rng.randrange(len(parts) + 1), text(targets[i]))
            for s in targets[i]["sections"]:
                if len(" ".join(s["text"]).split()) >= pairs.MIN_WORDS:
                    queries.append(targets[i]["title"] if s["heading"] is None
                                   else f"{targets[i]['title']} : {s['heading']}")
                    gold.append(i)
        docs.append("\n\n".join(parts))
    return docs, queries, gold


def short_set(files: dict) -> tuple[list[str], list[str], list[int]]:
    """The project's retrieval set: each held-out query and its section, among all held-out sections."""
    rows = [json.loads(line) for line in open(files["embedding-held"])]
    docs = list(dict.fromkeys(r["positive"] for r in rows))
    index = {d: i for i, d in enumerate(docs)}
    return docs, [r["anchor"] for r in rows], [index[r["positive"]] for r in rows]


def finetune(models: dict[str, Path], files: dict, work: Path, args) -> dict[tuple[str, str], Path]:
    """{(model, kind): its fine-tuned directory}, training the cells not done yet (``--workers`` at once)."""
    cells = {}
    for name, model in models.items():
        for kind, task in KINDS.items():
            out = work / "cells" / f"{kind}-{name}-seed{args.seed}"
            cells[(name, kind)] = (out, [AVEY_B, "finetune", "--task", task, "--model", str(model),
                                         "--train-file", files["embedding-train"],
                                         "--validation-file", files["embedding-held"], "--output-dir", str(out),
                                         "--seed", str(args.seed), "--epochs", str(args.epochs),
                                         "--batch-size", "32", "--threads", str(args.threads), "--device", "cpu",
                                         "--overwrite"])

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(lambda cell: pairs.run_cell(work, *cell), cells.values()))
    return {key: out for key, (out, _) in cells.items()}


def scores(kind: str, model_dir: Path, docs: list[str], queries: list[str]):
    """(queries, documents) similarities of one fine-tuned model, through its sentence-transformers class."""
    import torch
    from sentence_transformers import MultiVectorEncoder, SentenceTransformer, SparseEncoder

    cls = {"dense": SentenceTransformer, "sparse": SparseEncoder, "multivector": MultiVectorEncoder}[kind]
    model = cls(str(model_dir), device="cpu")
    with torch.inference_mode():
        if kind == "dense":
            q, d = model.encode(queries, batch_size=8), model.encode(docs, batch_size=1)
        else:
            q, d = model.encode_query(queries, batch_size=8), model.encode_document(docs, batch_size=1)
        sim = model.similarity(q, d)
    return (sim.to_dense() if sim.is_sparse else sim).float()


def bm25_scores(docs: list[str], queries: list[str]):
    """BM25 (bm25s, its defaults, English stop words, no stemming) similarities."""
    import bm25s
    import torch

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
    return torch.tensor([list(retriever.get_scores(t)) for t in tokens])


def rrf(*sims):
    """Reciprocal rank fusion of similarity matrices: sum over rankings of 1 / (k + rank), rank from 1."""
    fused = 0
    for sim in sims:
        ranks = sim.argsort(dim=1, descending=True).argsort(dim=1) + 1
        fused = fused + 1.0 / (RRF_K + ranks.float())
    return fused


def metrics(sim, gold: list[int]) -> dict[str, float]:
    """recall@10, NDCG@10 and MRR@10 in percent, one relevant document per query."""
    import math

    order = sim.argsort(dim=1, descending=True)[:, :K].tolist()
    hits = [row.index(g) if g in row else None for row, g in zip(order, gold, strict=True)]
    n = len(gold)
    return {"recall@10": 100 * sum(h is not None for h in hits) / n,
            "ndcg@10": 100 * sum(1 / math.log2(h + 2) for h in hits if h is not None) / n,
            "mrr@10": 100 * sum(1 / (h + 1) for h in hits if h is not None) / n}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", default="../shared/data")
    p.add_argument("--work", default="runs/every_vector_hybrid")
    p.add_argument("--threads", type=int, default=1, help="threads per job")
    p.add_argument("--workers", type=int, default=2, help="fine-tuning cells run at once")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pretrain-only", action="store_true", help="stop after step 1")
    args = p.parse_args()
    shared, work = Path(args.shared), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    models = pretrained(shared, work, args.threads)
    print(json.dumps({k: str(v) for k, v in models.items()}))
    if args.pretrain_only:
        return
    from transformers import AutoTokenizer

    from avey_b.utils.records import Envelope

    env, t0 = Envelope.begin(), time.time()
    files = pairs.build_pairs(shared, work)
    cells = finetune(models, files, work, args)
    tok = AutoTokenizer.from_pretrained(models["avey-b"])
    sets = {"short": short_set(files), "long": long_set(shared, work, tok)}
    rows = []
    for set_name, (docs, queries, gold) in sets.items():
        sims = {"bm25": bm25_scores(docs, queries)}
        for name in models:
            for kind in KINDS:
                t = time.time()
                sims[f"{name} {kind}"] = scores(kind, cells[(name, kind)], docs, queries)
                print(f"{set_name} {name} {kind}: {time.time() - t:.0f} s", flush=True)
            sims[f"{name} hybrid"] = rrf(*(sims[f"{name} {kind}"] for kind in KINDS))
        for method, sim in sims.items():
            rows.append({"set": set_name, "method": method, "queries": len(queries), "documents": len(docs),
                         **metrics(sim, gold)})
    with open(HERE / "hybrid.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    env.end()
    (HERE / "hybrid.md").write_text(report(rows, args, time.time() - t0, env))
    print((HERE / "hybrid.md").read_text())


def report(rows: list[dict], args, seconds: float, env) -> str:
    """The table of every (set, method) and the run's facts."""
    lines = ["# Hybrid retrieval: dense, sparse, multi-vector, fused, BM25", "",
             f"```\npython benchmarks/every_vector/hybrid.py --work {args.work} --threads {args.threads} "
             f"--workers {args.workers} --epochs {args.epochs:g} --seed {args.seed}\n```", "",
             f"{env.line()}; {seconds / 60:.0f} min.", "",
             "Scores in percent; one seed; see hybrid.py's docstring for the sets and the models.", ""]
    for set_name in dict.fromkeys(r["set"] for r in rows):
        sub = [r for r in rows if r["set"] == set_name]
        lines += [f"## {set_name} ({sub[0]['queries']} queries, {sub[0]['documents']} documents)", "",
                  "| method | recall@10 | NDCG@10 | MRR@10 |", "|---|---:|---:|---:|"]
        lines += [f"| {r['method']} | {r['recall@10']:.1f} | {r['ndcg@10']:.1f} | {r['mrr@10']:.1f} |" for r in sub]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
