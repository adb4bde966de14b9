"""Jobs killed at random: pretraining, own-data fine-tuning and ``avey-b embed`` each started as a real
``python -m avey_b.cli`` process, killed with SIGKILL at a seeded random time, then resumed, and compared with an
uninterrupted run of the same job.

    python benchmarks/kills/kills.py --workdir /tmp/kills --points 20 --seed 0     # the full schedule
    python benchmarks/kills/kills.py --workdir /tmp/kills --points 2 --jobs pretrain

For each job, one uninterrupted run gives the reference and its duration ``T``; then, for each point, a fresh copy
of the job is killed at a seeded place: past a seeded milestone (pretraining's logged steps, fine-tuning's epoch
checkpoints, embed's shards; 0 = the process's start) plus a seeded delay within the mean time between milestones
(so start-up, training, checkpoint writes, the final save and the moment it ends are all hit, whatever the machine's
load). Then the kill's leftovers are checked (nothing partial looks complete: every checkpoint under a real name
verifies against its ``SHA256SUMS``; a fine-tuning ``results.json`` only beside a verified model; every Parquet
shard under its name reads whole), and the job is run again to the end with its resume flag (``--resume`` for
pretraining and fine-tuning; the same command for embed). The resumed output must equal the reference:

* pretraining promises a resume bit for bit (``avey_b.training.pretrain``): the final model's tensors and every
  step's loss (the last record of each step in ``metrics.jsonl``) equal, exactly;
* fine-tuning resumes from transformers' per-epoch checkpoint (RNG, optimizer, scheduler and data order restored):
  the model's tensors and the score equal, exactly;
* ``avey-b embed`` promises the uninterrupted run's shards (``avey_b.apps.embed``): the Parquet tables equal.

Each point appends one JSON line to ``results.jsonl`` beside this script (``--record``), with the job, the delay,
where the kill landed (what the directory held), the check and the outcome. The suite runs a bounded slice of this
schedule (``tests/test_kills.py``, slow lane).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOBS = ("pretrain", "finetune", "embed")


def cli(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "avey_b.cli", "--debug", *argv]


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}


# ------------------------------------------------------------------------------------------ inputs


def prepare_inputs(work: Path) -> dict:
    """The shared inputs under ``work``: a JSONL corpus and a BPE for pretraining, a CSV and a tiny Avey-B (with
    the toy tokenizer) for fine-tuning and embedding."""
    from avey_b import testing as toy
    from avey_b.data.tokenization import train_bpe_tokenizer

    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = "the cat a dog reads writes sees a book the letter red ball old map green leaf small box".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 40))) for _ in range(300)]
    (work / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tok = work / "bpe"
    if not tok.is_dir():
        train_bpe_tokenizer(texts, 320).save_pretrained(tok)
    with open(work / "reviews.csv", "w") as f:
        f.write("review,sentiment\n")
        for _ in range(48):
            label = rng.randint(0, 1)
            f.write(f"the {rng.choice(toy._NOUNS)} was very {rng.choice(toy._POS if label else toy._NEG)},"
                    f"{'pos' if label else 'neg'}\n")
    if not (work / "models" / "avey").is_dir():
        toy.encoders(work / "models")
    return {"docs": work / "docs.jsonl", "bpe": tok, "csv": work / "reviews.csv", "model": work / "models" / "avey"}


def command(job: str, inputs: dict, out: Path, resume: bool = False) -> list[str]:
    """The job's command line, writing ``out``; ``resume``: the command that continues a killed run."""
    if job == "pretrain":
        keys = {"run_dir": out, "data.train": inputs["docs"], "tokenizer.path": inputs["bpe"], "model.arch": "avey-b",
                "model.preset": "tiny", "model.overrides": "{hidden_size: 32, num_hidden_layers: 2, split_size: 8}",
                "data.seq_len": 32, "data.num_workers": 0, "data.eval_fraction": 0.1,
                "train.global_batch_tokens": 256, "train.micro_batch_size": 4, "train.max_steps": 12,
                "train.threads": 1, "train.precision": "fp32", "optim.lr": 3e-3, "eval.every": 0,
                "eval.max_sequences": 8, "eval.fill_examples": "[]", "checkpoint.every": 2, "checkpoint.keep_last": 2,
                "logging.every": 1, "logging.progress": False}
        return cli(["pretrain", *(["--resume"] if resume else []), *[f"{k}={v}" for k, v in keys.items()]])
    if job == "finetune":
        return cli(["finetune", "--task", "text-classification", "--model", str(inputs["model"]), "--train-file",
                    str(inputs["csv"]), "--text-column", "review", "--label-column", "sentiment", "--output-dir",
                    str(out), "--lr", "3e-3", "--batch-size", "16", "--epochs", "3", "--device", "cpu",
                    "--threads", "1", *(["--resume"] if resume else [])])
    if job == "embed":
        return cli(["embed", str(inputs["model"]), str(inputs["docs"]), str(out), "--precision", "fp32",
                    "--shard-size", "20", "--max-batch-tokens", "256", "--threads", "1"])
    raise ValueError(f"unknown job {job!r}: one of {JOBS}")


# ------------------------------------------------------------------------------------------ outputs


def output(job: str, out: Path) -> dict:
    """What an ended run produced, for comparison: tensors, losses, score or tables."""
    from safetensors.torch import load_file

    if job == "pretrain":
        losses = {}
        for line in (out / "metrics.jsonl").read_text().splitlines():
            record = json.loads(line)
            if "loss" in record:
                losses[record["step"]] = record["loss"]  # a step run again after a kill: its last record
        return {"weights": load_file(str(out / "model" / "model.safetensors")), "losses": losses}
    if job == "finetune":
        return {"weights": load_file(str(out / "model.safetensors")),
                "score": json.loads((out / "results.json").read_text())["score"]}
    import pyarrow.parquet as pq

    return {"table": pq.read_table(out)}


def same(job: str, a: dict, b: dict) -> str | None:
    """None when the two runs' outputs are equal as the job promises; else what differs."""
    import torch

    if job == "embed":
        return None if a["table"].equals(b["table"]) else "the Parquet tables differ"
    if a["weights"].keys() != b["weights"].keys():
        return "other tensors"
    differ = [k for k in a["weights"] if not torch.equal(a["weights"][k], b["weights"][k])]
    if differ:
        return f"{len(differ)} tensor(s) differ, e.g. {differ[0]}"
    if job == "pretrain" and a["losses"] != b["losses"]:
        return f"losses differ: {a['losses']} vs {b['losses']}"
    if job == "finetune" and a["score"] != b["score"]:
        return f"scores differ: {a['score']} vs {b['score']}"
    return None


def leftovers(job: str, out: Path) -> str:
    """Check what a kill left in ``out`` (nothing partial may look complete; raises AssertionError naming it) and
    say what it held."""
    from avey_b.training.checkpoint import list_checkpoints, verify

    if not out.exists():
        return "nothing"
    if job == "pretrain":
        done = list_checkpoints(out)
        for ckpt in done:
            assert verify(ckpt), f"{ckpt} has no SHA256SUMS"
        if (out / "model").is_dir():
            assert verify(out / "model")
        return f"{len(done)} checkpoint(s){', the model' if (out / 'model').is_dir() else ''}"
    if job == "finetune":
        if (out / "results.json").exists():
            assert verify(out), f"{out}: results.json beside an unverified directory"
            return "finished"
        return ", ".join(sorted(p.name for p in out.iterdir())) or "empty"
    import pyarrow.parquet as pq

    shards = sorted(out.glob("part-*.parquet"))  # written atomically: a shard under its name reads whole
    for shard in shards:
        pq.read_table(shard)
    return f"{len(shards)} shard(s)" + (", manifest" if (out / "manifest.json").exists() else "")


# ------------------------------------------------------------------------------------------ the schedule


def run_to_end(argv: list[str], timeout: float = 900) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=environment(), timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[3:6])} … exited {done.returncode}:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def milestones(job: str, out: Path) -> int:
    """How far a run in ``out`` has got: pretraining's logged steps, fine-tuning's epoch checkpoints, embed's
    shards."""
    if job == "pretrain":
        metrics = out / "metrics.jsonl"
        return metrics.read_text().count('"loss"') if metrics.exists() else 0
    if job == "finetune":
        steps = [int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("checkpoint-*")]
        return max(steps, default=0) // 3  # 48 rows in batches of 16: 3 steps an epoch; one checkpoint kept
    return len(list(out.glob("part-*.parquet"))) if out.is_dir() else 0


#: Milestones an uninterrupted run passes (12 steps; 3 epochs; 300 documents in shards of 20).
MILESTONES = {"pretrain": 12, "finetune": 3, "embed": 15}


def killed_when(job: str, argv: list[str], out: Path, milestone: int, extra: float, timeout: float = 900) -> bool:
    """Start ``argv``; once its run has passed ``milestone`` (0: at once), SIGKILL it ``extra`` seconds later. False
    when it ended first."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment())
    deadline = time.monotonic() + timeout
    try:
        while milestones(job, out) < milestone and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.wait(timeout=extra)
        return False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True


def point(job: str, inputs: dict, reference: dict, out: Path, milestone: int, extra: float) -> dict:
    """One point of the schedule: kill ``extra`` seconds past ``milestone``, check the leftovers, resume, compare."""
    shutil.rmtree(out, ignore_errors=True)
    killed = killed_when(job, command(job, inputs, out), out, milestone, extra)
    held = leftovers(job, out)
    seconds = run_to_end(command(job, inputs, out, resume=True))
    differs = same(job, reference, output(job, out))
    return {"job": job, "milestone": milestone, "extra_s": round(extra, 3), "killed": killed, "left": held,
            "resume_s": round(seconds, 1), "equal": differs is None, **({"differs": differs} if differs else {})}


def schedule(job: str, inputs: dict, work: Path, points: int, seed: int, record=None) -> list[dict]:
    """``points`` kills of ``job``, each at a seeded milestone (0 = from the process's start) plus a seeded delay
    within the mean time between milestones of the uninterrupted run (start-up, for milestone 0)."""
    reference_dir = work / f"{job}-reference"
    shutil.rmtree(reference_dir, ignore_errors=True)
    duration = run_to_end(command(job, inputs, reference_dir))
    reference = output(job, reference_dir)
    rng = random.Random(f"{job}-{seed}")
    gap = duration / (MILESTONES[job] + 1)
    results = []
    for i in range(points):
        milestone = rng.randint(0, MILESTONES[job])
        extra = rng.uniform(0, gap * (2 if milestone == 0 else 1))
        result = {"point": i, "reference_s": round(duration, 1),
                  **point(job, inputs, reference, work / f"{job}-killed", milestone, extra)}
        results.append(result)
        print(json.dumps(result), flush=True)
        if record is not None:
            record(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    parser.add_argument("--record", action="store_true", help="append each point to results.jsonl beside this")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from avey_b.utils.records import Envelope, append_jsonl

    inputs = prepare_inputs(args.workdir)
    path = Path(__file__).with_name("results.jsonl")
    envelope = Envelope.begin()
    record = (lambda r: append_jsonl(path, {**r, "seed": args.seed, "command": " ".join(sys.argv),
                                            **envelope.end()})) if args.record else None
    failed = 0
    for job in args.jobs:
        failed += sum(not r["equal"] for r in schedule(job, inputs, args.workdir, args.points, args.seed, record))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
