"""Sparse-embedding defaults: which FLOPS-regularizer weights and learning rate make ``avey-b finetune --task
sparse-embedding`` give sparse vectors that learn, on the quickstart model and the project's retrieval pairs, beside
BM25 and the dense model trained on the same rows.

    python benchmarks/finetune_defaults/sparse.py --shared ../shared/data --model runs/quickstart/model \
        --work runs/sparse_defaults --weights 5e-5,3e-5 5e-4,3e-4 5e-3,3e-3 5e-2,3e-2 --lrs default --seeds 0
    python benchmarks/finetune_defaults/sparse.py ... --report-only

- **Data**: ``benchmarks/own_data/retrieval.py``'s WikiText-2 (heading → section) pairs, split by article: 413
  training pairs, 110 held-out queries searching 111 held-out sections (``--validation-file``), written under
  ``--work``.
- **Cells**: one ``avey-b finetune --task sparse-embedding`` per (query weight, document weight, ``--lr``,
  ``--epochs``, seed), the library's other defaults (3 epochs, batch 32), ``--threads`` each, ``--workers`` at
  once; ``default`` is the library's rate for the model's width. A cell whose ``results.json`` exists is not
  redone. The held-out scores before and after, and the mean active dimensions of the queries' and the documents'
  vectors, come from each run's own ``results.json`` (sentence-transformers' ``SparseInformationRetrievalEvaluator``).
- **Beside them**: ``--task embedding`` (the dense model) with the same rows, rate and seeds, and BM25 (``bm25s``,
  its defaults, English stop words) on the same held-out queries and sections, scored by the same NDCG@10.

Writes ``sparse.md`` (the table: median over seeds, min and max) and ``sparse.jsonl`` (one line per cell and one
for BM25) here.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "own_data"))
import retrieval as pairs  # noqa: E402  (the project's retrieval set: WikiText-2 heading -> section)

AVEY_B = str(Path(sys.executable).with_name("avey-b"))


def cell_command(kind: str, model: str, files: dict, out: Path, weights: tuple[str, str] | None, lr: str,
                 seed: int, threads: int, epochs: str) -> list[str]:
    task = "sparse-embedding" if kind == "sparse" else "embedding"
    cmd = [AVEY_B, "finetune", "--task", task, "--model", model, "--train-file", files["embedding-train"],
           "--validation-file", files["embedding-held"], "--output-dir", str(out), "--seed", str(seed),
           "--threads", str(threads), "--device", "cpu", "--overwrite", "--epochs", epochs]
    if weights is not None:
        cmd += ["--query-regularizer-weight", weights[0], "--document-regularizer-weight", weights[1]]
    return cmd + ([] if lr == "default" else ["--lr", lr])


def bm25(files: dict) -> dict:
    """BM25's NDCG@10 (and recall@10, MRR@10) on the held-out queries and sections."""
    import bm25s

    rows = [json.loads(line) for line in open(files["embedding-held"])]
    docs = list(dict.fromkeys(r["positive"] for r in rows))
    gold = [docs.index(r["positive"]) for r in rows]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
    ranks = []
    for r, g in zip(rows, gold, strict=True):
        scores = retriever.get_scores(bm25s.tokenize([r["anchor"]], stopwords="en", return_ids=False,
                                                     show_progress=False)[0])
        order = sorted(range(len(docs)), key=lambda i: -scores[i])[:10]
        ranks.append(order.index(g) if g in order else None)
    n = len(rows)
    return {"cell": "bm25", "queries": n, "documents": len(docs),
            "ndcg@10": 100 * sum(1 / math.log2(h + 2) for h in ranks if h is not None) / n,
            "recall@10": 100 * sum(h is not None for h in ranks) / n,
            "mrr@10": 100 * sum(1 / (h + 1) for h in ranks if h is not None) / n}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def report(rows: list[dict], bm: dict, args, env) -> str:
    lines = ["# Sparse-embedding defaults: FLOPS weights and rate on the quickstart model", "",
             "```", "python benchmarks/finetune_defaults/sparse.py " + " ".join(sys.argv[1:]), "```", "",
             f"Machine: {env['machine']['cpu']}, commit {env['commit']}; {args.workers} cells at once on "
             f"{args.threads} thread(s) each; load average before {env['load_before']}, after {env['load_after']}.",
             "", f"BM25 on the same held-out set ({bm['queries']} queries, {bm['documents']} sections): NDCG@10 "
             f"**{bm['ndcg@10']:.1f}**, recall@10 {bm['recall@10']:.1f}, MRR@10 {bm['mrr@10']:.1f}.", "",
             "Median over seeds [min, max]; active dimensions are the mean non-zero weights per vector of the "
             "4,096-id vocabulary (sparse cells), before and after.", "",
             "| kind | query, document weight | lr | epochs | seeds | ndcg@10 before | ndcg@10 after | "
             "recall@10 after | active dims, queries | active dims, documents | train s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["kind"], r["weights"], r["lr"], r["epochs"]), []).append(r)
    for (kind, weights, _, epochs), rs in groups.items():
        res = [r["results"] for r in rs]
        dims = [r.get("active_dims") for r in res]
        q = spread([d["after"]["query"] for d in dims]) if dims[0] else "—"
        d = spread([d["after"]["document"] for d in dims]) if dims[0] else "—"
        before_d = f"{statistics.median([x['before']['document'] for x in dims]):.0f} → " if dims[0] else ""
        before_q = f"{statistics.median([x['before']['query'] for x in dims]):.0f} → " if dims[0] else ""
        lines.append(f"| {kind} | {weights or '—'} | {res[0]['lr']:g} | {epochs} | {len(rs)} | "
                     f"{spread([x['baseline']['ndcg@10'] for x in res])} | "
                     f"{spread([x['metrics']['ndcg@10'] for x in res])} | "
                     f"{spread([x['metrics']['recall@10'] for x in res])} | {before_q}{q} | {before_d}{d} | "
                     f"{spread([x['train_seconds'] for x in res])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", default="../shared/data")
    p.add_argument("--model", default="runs/quickstart/model")
    p.add_argument("--work", default="runs/sparse_defaults")
    p.add_argument("--weights", nargs="+", default=["5e-5,3e-5"], help="query,document FLOPS weights per cell")
    p.add_argument("--lrs", nargs="+", default=["default"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--epochs", nargs="+", default=["3"], help="epochs per cell (3: the library's default)")
    p.add_argument("--dense", action="store_true", help="also the dense model (--task embedding) per rate and seed")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--report-only", action="store_true", help="tabulate the finished cells under --work")
    args = p.parse_args()
    from avey_b.utils.records import Envelope

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    files = pairs.build_pairs(Path(args.shared), work)
    env = Envelope.begin()
    cells = []
    for epochs in args.epochs:
        tag = "" if epochs == "3" else f"-ep{epochs}"  # the library's default: 3 epochs
        for lr in args.lrs:
            for seed in args.seeds:
                for w in args.weights:
                    q, d = w.split(",")
                    cells.append(("sparse", f"{q}, {d}", lr, seed, work / f"sparse-q{q}-d{d}-lr{lr}{tag}-seed{seed}",
                                  (q, d), epochs))
                if args.dense:
                    cells.append(("dense", None, lr, seed, work / f"dense-lr{lr}{tag}-seed{seed}", None, epochs))
    t0 = time.time()
    if not args.report_only:
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda c: pairs.run_cell(work, c[4], cell_command(
                c[0], args.model, files, c[4], c[5], c[2], c[3], args.threads, c[6])), cells))
    rows = [{"kind": c[0], "weights": c[1], "lr": c[2], "seed": c[3], "epochs": c[6],
             "results": json.loads((c[4] / "results.json").read_text())}
            for c in cells if (c[4] / "results.json").exists()]
    bm = bm25(files)
    env = env.end()
    (HERE / "sparse.md").write_text(report(rows, bm, args, env))
    with open(HERE / "sparse.jsonl", "a") as f:
        for r in [*rows, bm]:
            f.write(json.dumps({**r, "command": " ".join(sys.argv), "seconds": round(time.time() - t0), **env}) + "\n")
    print((HERE / "sparse.md").read_text())


if __name__ == "__main__":
    main()
