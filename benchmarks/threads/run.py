"""``--threads auto`` against a fixed count on a loaded CPU: the wall time of ``avey-b embed`` and ``avey-b
finetune`` (own data, a text classifier), each setting in its own process, the settings alternated round by round
(their order turned each round), with ``--busy`` busy-loop processes started first so that the machine is shared.

    python benchmarks/threads/run.py --model /work/qs/model --sst2 ../shared/data/sst2/train.tsv

The inputs are the first ``--embed-lines`` / ``--train-examples`` sentences of the SST-2 training file (embed in
batches of ``--max-batch-tokens``: many batches, as a larger corpus has at the default budget). Each run
appends one record to ``results.jsonl`` (wall seconds; the job's own seconds, the embed run's or the fine-tuning's
training time as the verb records it; the setting, the lines the thread tuner said, the envelope:
machine, commit, load average before and after); the table of the medians goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # this checkout's avey_b, installed or not

from avey_b.utils.records import Envelope, append_jsonl  # noqa: E402


def sentences(sst2: str, n: int) -> list[tuple[str, str]]:
    rows = [line.rstrip("\n").split("\t") for line in Path(sst2).read_text().splitlines()[1:]]
    return [(text.strip(), label) for text, label in rows[:n]]


def job_seconds(work: Path, verb: str, run: int) -> float:
    """The verb's own time, without starting Python and importing: the embed run's ``seconds`` in its manifest, the
    fine-tuning's ``train_seconds`` in its results."""
    if verb == "embed":
        return json.loads((work / f"embed-{run}" / "_manifest.json").read_text())["runs"][-1]["seconds"]
    return json.loads((work / f"finetune-{run}" / "results.json").read_text())["train_seconds"]


def commands(args, work: Path, run: int, threads: str) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "avey_b.cli"]
    return {
        "embed": [*cli, "embed", args.model, str(work / "docs.txt"), str(work / f"embed-{run}"), "--lines",
                  "--no-progress", "--max-batch-tokens", str(args.max_batch_tokens), "--threads", threads],
        "finetune": [*cli, "finetune", "--task", "text-classification", "--model", args.model, "--train-file",
                     str(work / "train.jsonl"), "--text-column", "text", "--label-column", "label", "--epochs", "1",
                     "--batch-size", "16", "--output-dir", str(work / f"finetune-{run}"), "--threads", threads],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a saved Avey-B with its tokenizer (the quickstart's)")
    p.add_argument("--sst2", required=True, help="SST-2's train.tsv (sentence, label)")
    p.add_argument("--embed-lines", type=int, default=1000)
    p.add_argument("--max-batch-tokens", type=int, default=1024, help="embed's batches: many, as in a large corpus")
    p.add_argument("--train-examples", type=int, default=160)
    p.add_argument("--settings", nargs="+", default=["auto", "2"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--busy", type=int, default=2, help="busy-loop processes kept running during the runs")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="threads-bench-"))
    (work / "docs.txt").write_text("".join(f"{t}\n" for t, _ in sentences(args.sst2, args.embed_lines)))
    (work / "train.jsonl").write_text("".join(json.dumps({"text": t, "label": int(y)}) + "\n"
                                              for t, y in sentences(args.sst2, args.train_examples)))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    times: dict[tuple[str, str], list[float]] = {}
    jobs: dict[tuple[str, str], list[float]] = {}
    try:
        time.sleep(5)  # let the load settle
        run = 0
        for r in range(args.rounds):
            order = args.settings if r % 2 == 0 else args.settings[::-1]
            for verb in ("embed", "finetune"):
                for threads in order:
                    run += 1
                    env = Envelope.begin()
                    t0 = time.perf_counter()
                    done = subprocess.run(commands(args, work, run, threads)[verb], capture_output=True, text=True,
                                          cwd=HERE.parents[1])
                    seconds = time.perf_counter() - t0
                    if done.returncode:
                        sys.exit(f"{verb} --threads {threads} failed:\n{done.stderr[-3000:]}")
                    said = [line for line in (done.stderr + done.stdout).splitlines()
                            if "thread(s)" in line or "CPU thread" in line or "CPU looks shared" in line]
                    job_s = job_seconds(work, verb, run)
                    append_jsonl(HERE / "results.jsonl", {
                        "verb": verb, "threads": threads, "round": r, "seconds": round(seconds, 2),
                        "job_seconds": job_s, "said": said,
                        "busy_loops": args.busy, "embed_lines": args.embed_lines,
                        "max_batch_tokens": args.max_batch_tokens,
                        "train_examples": args.train_examples, "command": " ".join(["python", *sys.argv]),
                        **env.end()})
                    times.setdefault((verb, threads), []).append(seconds)
                    jobs.setdefault((verb, threads), []).append(job_s)
                    print(f"{verb:<9} --threads {threads:<5} {seconds:7.1f} s (job {job_s:6.1f} s)  load "
                          f"{env.load_before[0]:.1f}  "
                          f"{said[1:] if len(said) > 1 else ''}", flush=True)
    finally:
        for proc in busy:
            proc.kill()
    print("\n| verb | " + " | ".join(f"--threads {s}" for s in args.settings) + " |")
    print("|---|" + "---|" * len(args.settings))
    for verb in ("embed", "finetune"):
        cells = [f"{statistics.median(times[(verb, s)]):.1f} s (job {statistics.median(jobs[(verb, s)]):.1f} s)"
                 for s in args.settings]
        print(f"| {verb} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
