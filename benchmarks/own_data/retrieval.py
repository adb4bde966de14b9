"""Own data, retrieval: an embedding model and a reranker trained with ``avey-b finetune --task embedding`` /
``--task rerank`` on (query, document) pairs built from WikiText-2, Avey-B beside a BERT of the same size through
the same commands; held-out scores before and after training, over seeds.

    python benchmarks/own_data/retrieval.py --shared ../shared/data --work runs/own_data_retrieval

The pairs (``build_pairs``): WikiText-2's validation file holds 60 Wikipedia articles, each a title line
(``= Title =``) and sections (``= = Heading = =``, ``= = = Subheading = = =``). Every section with at least 30 words
is a document: its paragraphs joined, cut to the first 64 words (sections run to 1,775 words, and the 2-core machine
was shared by about 8 engineers' jobs (load average 12-15): whole sections made one cell take over 20 minutes; the
library itself cuts nothing for Avey-B); its query is ``"<article title> : <heading>"``
(the article's lead, before its first heading, is queried by the title alone). The articles, not the pairs, are
split: 12 of the 60 (drawn by the SHA-256 of their titles) are held out, so no held-out query or document comes
from an article trained on.

* embedding: ``(anchor, positive)`` = (query, section); scored by each held-out query retrieving its section among
  all held-out sections (recall@1, recall@10, NDCG@10, MRR@10).
* rerank: ``(query, positive, negatives)`` with up to 2 other sections of the same article as negatives (hard: same
  topic, other heading) plus ``--sampled-negatives 1`` drawn from another article, trained on the first 100 of the
  413 training queries (``--max-train-examples 100``: the CPU budget); scored by each held-out query
  reranking its section, up to 2 other sections of its article and 1 drawn one (NDCG@10, MRR@10, MAP).

Models: both freshly initialized (seed 0; no pretraining: what a short CPU budget allows, and the same start for
both), sharing one byte-level BPE (4,096 tokens) trained on the training articles: Avey-B of the quickstart's shape
(d=256, 4 layers, S=16, k=3) and a 2-layer BERT of width 256 whose FFN width matches Avey-B's parameter count
(``avey_b.utils.model_spec.matched_width``, as ``benchmarks/learning`` does). BERT has 512 positions, so its inputs
would be cut there (``inputs_cut`` in each results.json); at 64 words none is.

Each cell is ``avey-b finetune`` with the task's default learning rate (and, for the embedding, 2e-3: the default
is meant for pretrained models), ``--epochs``, ``--batch-size 32`` and
``--seed`` 0, 1, 2, ``--workers`` cells at once; a finished cell (its results.json) is not redone. Writes
``retrieval.md`` here (the table: median over seeds, min and max) and ``retrieval.jsonl`` (every cell's
results.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
AVEY_B = str(Path(sys.executable).with_name("avey-b"))
AVEY = {"hidden_size": 256, "num_hidden_layers": 4, "split_size": 16, "num_retrieved_splits": 3}
BERT = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 512}
HELD_ARTICLES = 12
MIN_WORDS = 30
MAX_WORDS = 64  # a document is its section's first 64 words: the CPU budget (the library cuts nothing)
SAME_ARTICLE_NEGATIVES = 2
SAMPLED_NEGATIVES = 1
RERANK_TRAIN_QUERIES = 100  # of the 413: the CPU budget (four pairs each)
#: Learning rates per task: None is the task's default (5e-5, meant for pretrained models); 2e-3 is one for models
#: trained from scratch (benchmarks/learning, the classifier part of this folder).
LRS = {"embedding": [None, "2e-3"], "rerank": [None]}
HEADING = re.compile(r"((?:= )+)(.*?)((?: =)+)")


def articles(path: Path) -> list[dict]:
    """``[{"title", "sections": [{"heading", "text"}]}]`` of a WikiText ``*.tokens.txt`` file."""
    out: list[dict] = []
    section = None
    for line in path.read_text(encoding="utf-8").split("\n"):
        s = line.strip()
        m = HEADING.fullmatch(s)
        if m and len(m.group(1)) == len(m.group(3)):
            if len(m.group(1)) == 2:  # "= Title =": a new article
                out.append({"title": m.group(2), "sections": []})
                section = None
            else:
                section = {"heading": m.group(2), "text": []}
                out[-1]["sections"].append(section)
        elif s and out:
            if section is None:
                section = {"heading": None, "text": []}
                out[-1]["sections"].append(section)
            section["text"].append(s)
    return out


def build_pairs(shared: Path, work: Path) -> dict[str, str]:
    """The four data files (embedding and rerank, train and held-out) and the tokenizer's training text."""
    arts = articles(shared / "wikitext-2" / "valid.tokens.txt")
    held_titles = set(sorted((a["title"] for a in arts), key=lambda t: hashlib.sha256(t.encode()).hexdigest())
                      [:HELD_ARTICLES])
    files = {}
    for split in ("train", "held"):
        emb, rr = [], []
        for a in arts:
            if (a["title"] in held_titles) != (split == "held"):
                continue
            docs = [(a["title"] if s["heading"] is None else f"{a['title']} : {s['heading']}",
                     " ".join(" ".join(s["text"]).split()[:MAX_WORDS]))
                    for s in a["sections"] if len(" ".join(s["text"]).split()) >= MIN_WORDS]
            for i, (query, doc) in enumerate(docs):
                emb.append({"anchor": query, "positive": doc})
                others = [d for j, (_, d) in enumerate(docs) if j != i]
                rr.append({"query": query, "positive": doc, "negatives": others[:SAME_ARTICLE_NEGATIVES]})
        for task, rows in (("embedding", emb), ("rerank", rr)):
            files[f"{task}-{split}"] = str(work / f"{task}-{split}.jsonl")
            with open(files[f"{task}-{split}"], "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
    files["text"] = [" ".join(s["text"]) for a in arts if a["title"] not in held_titles for s in a["sections"]]
    return files


def models(work: Path, texts: list[str]) -> tuple[dict[str, str], dict[str, int]]:
    """The two freshly initialized models with the shared tokenizer, saved under ``work``; their parameters."""
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    import avey_b  # noqa: F401
    from avey_b.data.tokenization import train_bpe_tokenizer
    from avey_b.model import presets
    from avey_b.utils.model_spec import masked_lm_parameters, matched_width, transformers_config

    tok_dir = work / "tokenizer"
    if not (tok_dir / "tokenizer.json").exists():
        train_bpe_tokenizer(texts, 4096).save_pretrained(tok_dir)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    avey_config = presets.small(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **AVEY)
    target = masked_lm_parameters(avey_config)
    configs = {"avey-b": avey_config,
               "bert": transformers_config("bert", **matched_width("bert", target, vocab_size=len(tok), **BERT),
                                           pad_token_id=tok.pad_token_id)}
    dirs, sizes = {}, {}
    for name, config in configs.items():
        d = work / "models" / name
        if not (d / "config.json").exists():
            torch.manual_seed(0)
            model = AutoModelForMaskedLM.from_config(config)
            model.save_pretrained(d)
            tok.save_pretrained(d)
        dirs[name] = str(d)
        sizes[name] = masked_lm_parameters(AutoConfig.from_pretrained(d))
    return dirs, sizes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", default="../shared/data")
    p.add_argument("--work", default="runs/own_data_retrieval")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1, help="threads per cell")
    p.add_argument("--workers", type=int, default=3, help="cells run at once")
    p.add_argument("--report-only", action="store_true", help="write the report from the finished cells")
    args = p.parse_args()
    shared, work = Path(args.shared), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    files = build_pairs(shared, work)
    dirs, sizes = models(work, files.pop("text"))
    from avey_b.utils.records import Envelope

    t0, env = time.time(), Envelope.begin()
    cells = []
    for seed in range(args.seeds):  # seed-major: every (task, model, lr) gets seed 0 first
        for task, lr, (name, model) in ((t, lr, m) for t in ("embedding", "rerank") for lr in LRS[t]
                                         for m in dirs.items()):
            extra = (["--negative-column", "negatives", "--sampled-negatives", str(SAMPLED_NEGATIVES),
                      "--max-train-examples", str(RERANK_TRAIN_QUERIES)] if task == "rerank" else [])
            if lr is not None:
                extra += ["--lr", lr]
            out = work / "cells" / f"{task}-{name}{'' if lr is None else f'-lr{lr}'}-seed{seed}"
            cmd = [AVEY_B, "finetune", "--task", task, "--model", model, "--train-file", files[f"{task}-train"],
                   "--validation-file", files[f"{task}-held"], "--output-dir", str(out), "--seed", str(seed),
                   "--epochs", str(args.epochs), "--batch-size", "32", "--threads", str(args.threads),
                   "--device", "cpu", "--overwrite", *extra]
            cells.append(({"cell": out.name, "task": task, "model": name, "seed": seed}, out, cmd))

    if not args.report_only:
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda cell: run_cell(work, cell[1], cell[2]), cells))
    rows = [{**json.loads((out / "results.json").read_text()), **key} for key, out, _ in cells
            if (out / "results.json").exists()]
    with open(HERE / "retrieval.jsonl", "w") as f:  # every cell's results.json, one per line
        f.writelines(json.dumps(r) + "\n" for r in rows)
    (HERE / "retrieval.md").write_text(report(rows, sizes, args, None if args.report_only else time.time() - t0, env))
    print((HERE / "retrieval.md").read_text())


def run_cell(work: Path, out: Path, cmd: list[str]) -> None:
    """Run one cell's command unless its ``results.json`` exists (a finished cell is not redone), its output in
    ``work/log-<cell>.txt``; a failure stops the benchmark, naming the log."""
    if (out / "results.json").exists():
        return
    print("$", " ".join(cmd), flush=True)
    with open(work / f"log-{out.name}.txt", "w") as log:
        if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"failed: see {work / f'log-{out.name}.txt'}")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def report(rows: list[dict], sizes: dict[str, int], args, seconds: float | None, env) -> str:
    """The Markdown report; ``env``: the run's :class:`~avey_b.utils.records.Envelope`, ended here."""
    env.end()
    first = rows[0]
    lines = [
        "# Own data, retrieval: an embedding model and a reranker from WikiText-2 (heading, section) pairs", "",
        "```", f"python benchmarks/own_data/retrieval.py {' '.join(sys.argv[1:])}", "```", "",
        f"Machine: {env.line()}; {args.workers} cells at once on {args.threads} thread(s) each (other engineers' "
        "jobs shared the 2 cores)"
        + ("." if seconds is None else f"; the {len(rows)} cells took {seconds / 60:.0f} min."),
        "", "Parameters (masked-LM model, tied embeddings counted once): "
        + ", ".join(f"{k} {v / 1e6:.2f}M" for k, v in sizes.items()) + f"; versions {first['versions']}.", "",
        "Scores in percent on the held-out articles, before training (the freshly initialized model with its "
        "pooling or fresh head) and after; median over seeds [min, max]; "
        f"seeds {sorted({r['seed'] for r in rows})}.", "",
    ]
    for task in ("embedding", "rerank"):
        cells = [r for r in rows if r["task"] == task]
        if not cells:
            continue
        metrics = list(cells[0]["metrics"])
        c0 = cells[0]
        size = (f"{c0['n_train']} training pairs, {c0['n_queries']} held-out queries over {c0['n_documents']} "
                "documents" if task == "embedding" else
                f"{c0['n_train_queries']} training queries ({c0['n_train_pairs']} pairs with the sampled negatives),"
                f" {c0['n_validation']} held-out queries")
        lines += [f"## {task} ({size}; loss {c0['loss']}, {c0['epochs']:g} epoch(s), batch {c0['batch_size']})", "",
                  "| model | lr | seeds | " + " | ".join(f"{m} before | {m} after" for m in metrics)
                  + " | inputs cut | train s (wall) |",
                  "|---|---:|---:|" + "---:|---:|" * len(metrics) + "---:|---:|"]
        for name, lr in dict.fromkeys((r["model"], r["lr"]) for r in cells):
            mine = [r for r in cells if (r["model"], r["lr"]) == (name, lr)]
            lines.append(f"| {name} | {lr:g} | {len(mine)} | " + " | ".join(
                f"{spread([r['baseline'][m] for r in mine])} | {spread([r['metrics'][m] for r in mine])}"
                for m in metrics) + f" | {mine[0]['inputs_cut']} | {spread([r['train_seconds'] for r in mine])} |")
        lines.append("")
    return "\n".join(lines)



if __name__ == "__main__":
    main()
