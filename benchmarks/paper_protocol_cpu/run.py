"""The paper's evaluation protocol (``--protocol paper``, EncodEval's settings, paper §5.1) run end to end at CPU
scale: Avey-B beside a BERT and a ModernBERT of its size, on SST-2 and CoNLL-2003, 3 seeds x 2 learning rates.

    python benchmarks/paper_protocol_cpu/run.py --shared ../shared/data --threads 2

Steps (each resumable: a finished pretraining run or evaluation cell is not redone):

1. the tiny pretrained models of ``benchmarks/learning/`` (its ``pretrain`` step, imported: the quickstart's
   Avey-B, d=256 L=4 S=16 k=3, and a 2-layer BERT and ModernBERT of width 256 whose FFN width matches Avey-B's
   parameter count), under ``--work``; BERT and ModernBERT at 5e-4 only, the learning rate the learning
   benchmark kept for both (it tried 2e-3 and 5e-4); ``--pretrain-steps`` shortens the quickstart's 2,400 steps;
2. ``avey-b evaluate`` with ``protocol: paper`` on SST-2 (the shared train file minus the learning benchmark's
   fixed 5% holdout, scored on the holdout) and CoNLL-2003 (``eng.train``, scored on ``eng.testa``), training on
   the first ``--sst2-train`` / ``--conll-train`` sentences (default the learning benchmark's 10,000 / 7,000),
   learning rates ``LRS`` x 3 seeds, one process per model; the report of the whole suite (``report.md`` /
   ``report.json``: median over seeds at the best learning rate, SD table) is copied to ``results.md`` /
   ``results.json`` here, the suite to ``suite.yaml``.

The shared data are not part of the repository; nothing here downloads anything.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
AVEY_B = str(Path(sys.executable).with_name("avey-b"))  # the CLI installed beside this interpreter

_spec = importlib.util.spec_from_file_location("learning_run", HERE.parent / "learning" / "run.py")
learning = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(learning)

PRETRAIN_LR = 5e-4  # BERT / ModernBERT: the learning rate benchmarks/learning kept for both
LRS = [1e-4, 5e-4]  # two of the paper's grid {2e-5, 6e-5, 1e-4, 5e-4}: see README.md
SEEDS = 3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", default="../shared/data")
    p.add_argument("--work", default="runs/paper_protocol_cpu", help="where the pretrained models are (or go)")
    p.add_argument("--pretrain-steps", type=int, default=None,
                   help="pretraining steps of 2,048 tokens (default: the quickstart's 2,400, as benchmarks/learning)")
    p.add_argument("--sst2-train", type=int, default=learning.SST2_TRAIN, help="SST-2 training sentences")
    p.add_argument("--conll-train", type=int, default=learning.CONLL_TRAIN, help="CoNLL-2003 training sentences")
    p.add_argument("--threads", type=int, default=2,
                   help="threads of Avey-B's pretraining "
                        "(the Transformers' runs and the evaluation cells use one each)")
    p.add_argument("--pretrain-only", action="store_true", help="stop after step 1")
    args = p.parse_args()
    shared, work = Path(args.shared), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    from avey_b.utils.records import Envelope

    t_start, env = time.time(), Envelope.begin()

    # 1. the learning benchmark's pretraining (resumable: finished runs are reused); Avey-B first, its run trains
    # the shared tokenizer
    files = learning.corpus_files(shared, work)
    common = [f"data.train=[{','.join(files)}]", f"train.threads={args.threads}", "train.max_minutes=null",
              "logging.progress=false", "checkpoint.every=0",
              *([f"train.max_steps={args.pretrain_steps}"] if args.pretrain_steps else [])]
    runs, sizes, _ = learning.pretrain(files, work, common, log, archs=())
    print(f"Avey-B pretrained ({(time.time() - t_start) / 60:.1f} min)", flush=True)
    if args.pretrain_only:
        return

    # 2. the paper-protocol sweep (resumable), one `avey-b evaluate` per model, one cell at a time each, on one
    # thread: Avey-B's cells run while the two Transformers pretrain side by side (one thread each, each run its own
    # `avey-b pretrain` process), then the Transformers' cells beside whatever is left of Avey-B's; the three write
    # into one output directory, whose report the whole suite then writes (`--report-only`)
    loads: list[float] = []
    done = threading.Event()
    threading.Thread(target=sample_load, args=(loads, done), daemon=True).start()
    t_eval = time.time()
    procs = [evaluate(suite({"avey-b": runs["avey-b"]}, args, work, shared, "suite-avey-b.yaml"), log)]
    one = [c if not c.startswith("train.threads=") else "train.threads=1" for c in common]
    lrs = {"bert": [PRETRAIN_LR], "modernbert": [PRETRAIN_LR]}
    with ThreadPoolExecutor(2) as pool:
        for r, n, _ in pool.map(lambda a: learning.pretrain(files, work, one, log, archs=(a,), lrs=lrs),
                                ("bert", "modernbert")):
            runs |= r
            sizes |= n
    print(f"pretraining done ({(time.time() - t_start) / 60:.1f} min)", flush=True)
    for arch in ("bert", "modernbert"):
        procs.append(evaluate(suite({arch: runs[arch]}, args, work, shared, f"suite-{arch}.yaml"), log))
    for proc in procs:
        if proc.wait():
            raise SystemExit(f"avey-b evaluate failed (exit {proc.returncode}): see {log}")
    done.set()
    cmd = [AVEY_B, "evaluate", "--config", str(suite(runs, args, work, shared, "suite.yaml")), "--report-only"]
    print("$", " ".join(cmd), flush=True)
    with open(log, "a") as f:
        if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"the report failed: see {log}")
    t_eval = time.time() - t_eval
    report = (work / "eval" / "report.md").read_text()
    load = (f"{min(loads):.1f} / {sum(loads) / len(loads):.1f} / {max(loads):.1f} (min / mean / max of "
            f"{len(loads)} one-minute samples)" if loads else "not sampled")
    head = learning.report_head(
        "The paper's protocol at CPU scale (Avey-B, BERT, ModernBERT of one size)",
        "benchmarks/paper_protocol_cpu/run.py", sizes, env, facts=f"Avey-B pretrained on {args.threads} threads",
        took=f"The evaluation took {t_eval / 60:.0f} min; 1-minute load average during it {load}.")
    (HERE / "results.md").write_text("\n".join(head) + report)
    shutil.copy(work / "eval" / "report.json", HERE / "results.json")
    shutil.copy(work / "suite.yaml", HERE / "suite.yaml")
    print((HERE / "results.md").read_text())


def suite(runs: dict[str, Path], args, work: Path, shared: Path, name: str) -> Path:
    """The evaluation suite of the models ``runs`` (written to ``work/name``): the paper protocol on SST-2 and
    CoNLL-2003, with the learning benchmark's data and holdout and this run's training caps."""
    import yaml

    spec = {
        "description": "benchmarks/paper_protocol_cpu: the paper's protocol (EncodEval) at CPU scale, "
                       "Avey-B / BERT / ModernBERT of one size",
        "models": {m: str(d / "model") for m, d in runs.items()},
        "tasks": ["sst2", "conll2003"], "lrs": LRS, "seeds": SEEDS, "protocol": "paper", "aggregate": "median",
        "output_dir": str(work / "eval"),
        # everything else (AdamW (0.9, 0.95) eps 1e-5 wd 0.1, bf16 weights + autocast, batch 32, 1 epoch, no
        # truncation) is the protocol's table, avey_b/evaluation/protocol.py
        "defaults": {"device": "cpu"},
        "task_overrides": {"sst2": {"max_train_examples": args.sst2_train},
                           "conll2003": {"max_train_examples": args.conll_train}},
        "data": {"sst2": {"train": str(shared / "sst2" / "train.tsv"), "holdout": 0.05},
                 "conll2003": {"train": str(shared / "conll2003" / "eng.train"),
                               "eval": str(shared / "conll2003" / "eng.testa")}},
    }
    (work / name).write_text(yaml.safe_dump(spec, sort_keys=False))
    return work / name


def evaluate(path: Path, log: Path) -> subprocess.Popen:
    """``avey-b evaluate`` of the suite at ``path`` (started, not waited for), one cell at a time, on one thread."""
    cmd = [AVEY_B, "evaluate", "--config", str(path)]
    print("$", " ".join(cmd), flush=True)
    with open(log, "a") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})


def sample_load(loads: list[float], done: threading.Event) -> None:
    """The machine's 1-minute load average, appended to ``loads`` once a minute until ``done``."""
    from avey_b.utils.records import load_average

    while not done.is_set():
        loads.append(load_average()[0])
        done.wait(60)


if __name__ == "__main__":
    main()
