"""NIAH on this CPU with pretrained small models: fine-tuned at 2,048 tokens, scored up to 128K tokens.

    python benchmarks/niah_cpu/run.py --data ../shared/data --work runs/niah_cpu

Steps (each resumable: a finished pretraining run, data set or fine-tuning seed is not redone):

1. masked-LM pretraining of Avey-B and of a ModernBERT of the same size, exactly as the learning benchmark does
   (``benchmarks/learning/run.py``: one byte-level BPE of 4,096 tokens fitted on the bundled Python docs plus
   WikiText-2, the quickstart's recipe and 4.9M tokens; Avey-B d=256, 4 layers, S=16, k=3; ModernBERT 2 layers of
   width 256 with the FFN width matched, at the learning rate that benchmark kept for it, 5e-4). BERT is left out:
   at this budget it stays on the unigram plateau (that benchmark's record);
2. ``avey-b niah generate`` with that tokenizer: NIAH-1 and NIAH-2, a training set at 2,048 tokens and test sets
   at 1K ... 128K (lengths count the whole model input);
3. ``avey-b niah evaluate`` once per fine-tuning seed (``--jobs`` seeds side by side, each pinned to its share of
   the cores; ``avey-b niah report`` then merges them): both models, both tasks, the same training examples,
   steps, batch and learning rate; every test length scored with the whole input in one window (ModernBERT up to
   its 8,192-token window, "—" past it); for Avey-B also how often its ranker pairs the needle's split with the
   question's. ModernBERT's rotary positions have no table: its copy for NIAH gets ModernBERT-base's 8,192-token
   window (pretraining at 256 tokens wrote 512 into its config). The records, tables (mean over seeds [min–max])
   and the plot go to ``--out``.

The shared data are not part of the repository; nothing here downloads anything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "learning"))
import run as learning  # noqa: E402  (the learning benchmark's pretraining, reused as is)

AVEY_B = learning.AVEY_B
LENGTHS = ["1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k"]
#: ModernBERT uses rotary positions (no learned table): pretraining at 256 tokens writes a 512-token limit into its
#: config; the NIAH copy gets ModernBERT-base's 8,192-token window, the one the paper scores it up to.
MODERNBERT_WINDOW = 8192


def copy_model(src: Path, dst: Path, window: int | None) -> None:
    """``src`` copied to ``dst``; with ``window``, its ``max_position_embeddings`` set to it (and the checkpoint's
    SHA256SUMS rewritten to match the edited config)."""
    import hashlib
    import shutil

    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    if window is not None:
        config = json.loads((tmp / "config.json").read_text())
        config["max_position_embeddings"] = window
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        sums = [f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}"
                for f in sorted(tmp.iterdir()) if f.name != "SHA256SUMS"]
        (tmp / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    tmp.rename(dst)


def plot_losses(results: Path, path: Path, window: int = 10) -> None:
    """Fine-tuning loss per optimizer step (a moving average over ``window`` steps), one panel per task, one colour
    per model and form, one line per learning rate and seed. For the qa form, the dashed line is the loss of a model
    that finds the needles but guesses which occurrence a two-needle question asks for: 0 on the 40% one-needle
    examples, ln 2 for the start and for the end on the 60% two-needle ones, so 0.6 ln 2."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    tasks = sorted({r["task"] for r in records})
    series = sorted({(Path(r["model"]).name, r.get("form", "qa")) for r in records})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        labelled = set()
        for r in (r for r in records if r["task"] == task):
            losses = r["train"]["losses"]
            smooth = [sum(losses[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1))
                      for i in range(len(losses))]
            key = (Path(r["model"]).name, r.get("form", "qa"))
            ax.plot(range(1, len(smooth) + 1), smooth, color=f"C{series.index(key)}", linewidth=1,
                    label=None if key in labelled else f"{key[0]}, {key[1]}")
            labelled.add(key)
        if any(form == "qa" for _, form in series):
            ax.axhline(0.6 * math.log(2), color="grey", linestyle="--", linewidth=1)
            ax.text(1, 0.6 * math.log(2) - 0.05, "qa: finds a needle, guesses the occurrence (0.6 ln 2)",
                    color="grey", fontsize=8, va="top")
        ax.set_ylim(0, 3)
        ax.set_xlabel(f"fine-tuning step ({records[0]['train']['input_tokens']:,}-token inputs; the losses recorded "
                      "every max(1, steps // 100) steps)")
        ax.set_ylabel(f"loss ({window}-point mean)")
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sh(cmd: list[str], log: Path) -> None:
    print("$", " ".join(cmd), flush=True)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc:
        raise SystemExit(f"failed (exit {rc}): see {log}")


#: how each form's sets are generated: the token-classification form as the authors do (the number of distractor
#: needles drawn from their generator's distributions; lengths counting their input), the qa form as before
GENERATE = {"token-classification": ["--length-unit", "prompt", "--train-distractors", "authors",
                                     "--test-distractors", "authors"],
            "qa": ["--length-unit", "input"]}


def check_data(data: Path, lengths: list[str], n_train: int, n_test: int | None) -> None:
    """Refuse NIAH sets generated with other sizes or lengths than asked (they are reused when they match)."""
    from avey_b.data.niah import default_n_test, parse_lengths

    want = {"train_2048": n_train} | {f"test_{n}": n_test or default_n_test(n) for n in parse_lengths(lengths)}
    for task in ("niah-1", "niah-2"):
        have = {k: v["n"] for k, v in json.loads((data / task / "manifest.json").read_text())["sets"].items()}
        if have != want:
            raise SystemExit(f"{data / task} holds the sets {have}, not {want}: give another --work or remove it")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="the shared data (WikiText-2 for pretraining)")
    p.add_argument("--work", default="runs/niah_cpu")
    p.add_argument("--out", default=None, help="the merged report (default: eval/ beside this script; with --smoke, "
                                               "WORK/smoke-eval)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=1, help="seeds fine-tuned side by side (threads split between them)")
    p.add_argument("--form", choices=("token-classification", "qa"), default="token-classification",
                   help="token-classification: the authors' form (avey-b niah evaluate --form); qa: the extractive-QA "
                        "head of the earlier record")
    p.add_argument("--lengths", nargs="+", default=LENGTHS)
    p.add_argument("--n-train", type=int, default=960, help="training examples per task (one epoch)")
    p.add_argument("--n-test", type=int, default=None,
                   help="test examples per task and length (default: niah generate's, 200 up to 32K, 100 beyond)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: one epoch)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="examples per optimizer step (default: the form's, 32 as micro-batches of 1 for "
                        "token-classification, 8 for qa)")
    p.add_argument("--lr", type=float, nargs="+", default=None,
                   help="learning rates (default: the form's, 1e-4 and 5e-4 for token-classification, 1e-3 for qa as "
                        "in the earlier record)")
    p.add_argument("--smoke", action="store_true",
                   help="a few-minute check of the whole pipeline: 40 pretraining steps, one length (1K), 32 training "
                        "and 4 test examples, seed 0, 2 steps; writes into WORK only")
    args = p.parse_args()
    if args.smoke:
        args.work = str(Path(args.work) / "smoke") if args.work == p.get_default("work") else args.work
        args.lengths, args.n_train, args.n_test, args.seeds, args.steps = ["1k"], 32, 4, [0], args.steps or 2
    work = Path(args.work)
    out = Path(args.out or (work / "smoke-eval" if args.smoke else HERE / "eval"))
    if args.lr is None and args.form == "qa":
        args.lr = [1e-3]
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    from avey_b.utils.records import Envelope

    t0, env = time.time(), Envelope.begin()

    # 1. pretraining (the learning benchmark's function and recipe)
    files = learning.corpus_files(Path(args.data), work)
    common = [f"data.train=[{','.join(files)}]", f"train.threads={args.threads}", "train.max_minutes=null",
              "logging.progress=false", "checkpoint.every=0"]
    if args.smoke:
        common += ["train.max_steps=40", "eval.every=20"]
    runs, sizes, _ = learning.pretrain(files, work, common, log, archs=("modernbert",), lrs={"modernbert": [5e-4]})
    models = work / "models"  # named copies, so that records and plots say which model is which
    models.mkdir(exist_ok=True)
    for name, run_dir in runs.items():
        if not (models / name / "config.json").exists():
            window = {"modernbert": MODERNBERT_WINDOW}.get(name)
            copy_model(run_dir / "model", models / name, window)
    print(f"pretrained: {', '.join(f'{k} {v / 1e6:.2f}M' for k, v in sizes.items())} "
          f"({(time.time() - t0) / 60:.0f} min)", flush=True)

    # 2. the NIAH sets, in the shared tokenizer's tokens (one directory per form: the forms generate differently)
    data = work / f"data-{args.form}"
    if not (data / "niah-2" / "manifest.json").exists():
        n_test = [] if args.n_test is None else ["--n-test", str(args.n_test)]
        sh([AVEY_B, "niah", "generate", "--tokenizer", str(models / "avey-b"), "--out", str(data),
            "--train-lengths", "2048", "--lengths", *args.lengths, "--n-train", str(args.n_train), *n_test,
            *GENERATE[args.form], "--format", "jsonl"], log)
    check_data(data, args.lengths, args.n_train, args.n_test)

    # 3. fine-tune at 2,048 tokens and score every length: one process per seed (its own records directory, which
    #    an interrupted run resumes from), --jobs of them side by side, each pinned to its share of the cores; then
    #    one report over all seeds.
    per_job = max(1, args.threads // args.jobs)
    cores = sorted(os.sched_getaffinity(0))
    pending, running = list(args.seeds), []
    evals = {seed: work / f"eval-{args.form}-s{seed}" for seed in args.seeds}
    while pending or running:
        while pending and len(running) < args.jobs:
            seed = pending.pop(0)
            slot = len(running)
            cmd = [AVEY_B, "niah", "evaluate", "--form", args.form, "--data", str(data), "--models",
                   str(models / "avey-b"), str(models / "modernbert"), "--train-length", "2048", "--lengths",
                   *args.lengths, "--seed", str(seed), "--max-train-examples", str(args.n_train), "--device", "cpu",
                   "--out", str(evals[seed])]
            for flag, value in (("--max-steps", args.steps), ("--batch-size", args.batch_size)):
                if value is not None:
                    cmd += [flag, str(value)]
            if args.lr:
                cmd += ["--lr", *map(str, args.lr)]
            if args.jobs > 1:
                cmd = ["taskset", "-c", ",".join(map(str, cores[slot * per_job:(slot + 1) * per_job])), *cmd]
            print("$", " ".join(cmd), flush=True)
            f = open(work / f"log-{args.form}-s{seed}.txt", "a")
            env = {**os.environ, "OMP_NUM_THREADS": str(per_job)}
            running.append((seed, subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env), f))
        seed, proc, f = running.pop(0)
        rc = proc.wait()
        f.close()
        if rc:
            raise SystemExit(f"seed {seed} failed (exit {rc}): see {work / f'log-{args.form}-s{seed}.txt'}")
    sh([AVEY_B, "niah", "report", *map(str, evals.values()), "--out", str(out)], log)
    plot_losses(out / "results.jsonl", out / "train_loss.png")
    print(f"done in {(time.time() - t0) / 60:.0f} min; the run's envelope: {json.dumps(env.end())}", flush=True)


if __name__ == "__main__":
    main()
