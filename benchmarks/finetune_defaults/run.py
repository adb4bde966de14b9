"""Fine-tuning defaults: the four own-data tasks of ``avey-b finetune`` on the quickstart model at several peak
learning rates (the old default 5e-5 among them, and ``default``: whatever the library picks now), each held-out
score beside its baseline, over seeds.

    python benchmarks/finetune_defaults/run.py --shared ../shared/data --model runs/quickstart/model \\
        --work runs/finetune_defaults --lrs 5e-5 2e-4 5e-4 1e-3 default --seeds 2

The data (real, from ``../shared/data``, never committed; written under ``--work``), what a new user would bring:

* text-classification: the first 2,000 sentences of SST-2 with string labels (``negative``/``positive``),
  ``--validation-fraction 0.15``: 1,700 training rows, 300 held out; accuracy beside the majority class;
* token-classification: the first 800 sentences of CoNLL-2003 ``eng.train`` as released (IOB1 columns), scored on
  the first 400 of ``eng.testa``; entity F1 beside tagging every word ``O``;
* embedding and rerank: WikiText-2 (heading, section) pairs, articles split (``benchmarks/own_data/retrieval.py``'s
  ``build_pairs``): embedding on 413 (query, section) pairs, NDCG@10 of each held-out query searching the 111
  held-out sections, beside the model before training; rerank on the first 100 training queries with 2 same-article
  negatives and 1 sampled, NDCG@10 of each held-out query reranking its candidates, beside the model before training.

Every run is ``avey_b.finetuning.finetune(OwnDataOptions(...))`` in this process (the function ``avey-b finetune``
calls; the equal command line is printed), the library's defaults but ``--lr`` and ``--seed``; a finished run (its
results.json) is not redone. Writes ``results.jsonl`` here (every finished run's results.json under ``--work``, with
``report_envelope``: the machine, commit and load average of this invocation, which may only have collected them)
and prints the README's table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

from avey_b.configs import threads_flag

HERE = Path(__file__).resolve().parent
TASKS = ("text-classification", "token-classification", "embedding", "rerank")


def own_data_module(name: str):
    """A script of ``benchmarks/own_data`` (its data builders), imported by path."""
    spec = importlib.util.spec_from_file_location(name, HERE.parent / "own_data" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_data(shared: Path, work: Path) -> dict[str, dict]:
    """Each task's options besides the model, the output, the learning rate and the seed."""
    work.mkdir(parents=True, exist_ok=True)
    classification, retrieval = own_data_module("run_classification"), own_data_module("retrieval")
    classification.write_sst2(shared / "sst2" / "train.tsv", work / "sst2.tsv", 2000)
    classification.write_conll_head(shared / "conll2003" / "eng.testa", work / "conll.dev", 400)
    files = retrieval.build_pairs(shared, work)
    return {
        "text-classification": {"train_file": str(work / "sst2.tsv"), "text_column": "sentence",
                                "label_column": "sentiment", "validation_fraction": 0.15},
        "token-classification": {"train_file": str(shared / "conll2003" / "eng.train"),
                                 "validation_file": str(work / "conll.dev"), "max_train_examples": 800},
        "embedding": {"train_file": files["embedding-train"], "validation_file": files["embedding-held"]},
        "rerank": {"train_file": files["rerank-train"], "validation_file": files["rerank-held"],
                   "negative_column": "negatives", "sampled_negatives": 1, "max_train_examples": 100},
    }


def command(fields: dict) -> str:
    return "avey-b finetune " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in fields.items()
                                         if v is not None and v is not False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", default="../shared/data")
    p.add_argument("--model", default="runs/quickstart/model")
    p.add_argument("--work", default="runs/finetune_defaults")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--lrs", nargs="+", default=["5e-5", "default"], help="peak learning rates; default: the library's")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--threads", type=threads_flag, default=2, help="auto or a count (the library's default: auto)")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()

    from avey_b.finetuning import OwnDataOptions, finetune
    from avey_b.utils.records import Envelope

    work = Path(args.work)
    data = write_data(Path(args.shared), work)
    env = Envelope.begin()
    cells = []
    for seed in args.seeds:
        for lr in args.lrs:
            for task in args.tasks:
                out = work / "runs" / f"{task}-lr{lr}-seed{seed}"
                fields = {"task": task, "model": args.model, **data[task], "output_dir": str(out),
                          "lr": None if lr == "default" else float(lr), "seed": seed, "threads": args.threads,
                          "device": "cpu", "overwrite": True}
                cells.append(({"lr_asked": lr, "seed": seed}, out, fields))
    for _, out, fields in cells:
        if args.report_only or (out / "results.json").exists():
            continue
        print("$", command(fields), flush=True)
        t0 = time.time()
        finetune(OwnDataOptions(**fields))
        print(f"({time.time() - t0:.0f} s)", flush=True)
    envelope = env.end()
    rows = [{**key, **json.loads((out / "results.json").read_text()), "report_envelope": envelope}
            for key, out, _ in cells if (out / "results.json").exists()]
    with open(HERE / "results.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(table(rows))


def table(rows: list[dict]) -> str:
    """The markdown table of the README: per task and learning rate, each seed's held-out score (its baseline in
    parentheses), and how many seeds ended above it."""
    from avey_b.finetuning.common import above_baseline

    out = ["| task (metric) | lr | seed 0 | seed 1 | above baseline |", "|---|---|---|---|---|"]
    for task in TASKS:
        by_lr: dict[str, list[dict]] = {}
        for r in rows:
            if r["task"] == task:
                by_lr.setdefault(r["lr_asked"], []).append(r)
        for lr, runs in sorted(by_lr.items(), key=lambda kv: kv[1][0]["lr"]):
            runs.sort(key=lambda r: r["seed"])
            cells = [f"{r['score']} ({r['baseline_score']})" for r in runs] + [""] * (2 - len(runs))
            shown = f"{runs[0]['lr']:g}" + (" (default)" if lr == "default" else "")
            above = sum(bool(above_baseline(r)) for r in runs)
            out.append(f"| {task} ({runs[0]['metric']}) | {shown} | {' | '.join(cells[:2])} | {above}/{len(runs)} |")
    return "\n".join(out)

if __name__ == "__main__":
    main()
