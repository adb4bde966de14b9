"""Recipe search for the quickstart (`avey-b pretrain --config quickstart`): each variant is the recipe shipped
before the search (`BEFORE`) plus `key=value` overrides, run through the real CLI into its own run directory; its
held-out curve (masked-LM loss and accuracy on the 5% held-out Python docs, every `eval.every` steps) and its
fill-mask hit rate on every held-out sentence of `select_fill.py` are appended to `results.jsonl`.

    python benchmarks/quickstart_recipes/run.py --variants v0-long adam-1e-3 --threads 1   # in one shell
    python benchmarks/quickstart_recipes/run.py --variants quickstart --threads 2         # alone: the wall time
    python benchmarks/quickstart_recipes/plot.py

Variants run one after another (or in two shells, `--threads 1` each, on a 2-core machine); step counts, not
wall time, are what the curves compare. Wall time of the chosen recipe is measured separately, alone, with
`--threads 2` (see README.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from select_fill import score  # this folder's fill-mask rule (the script's directory is on sys.path)

from avey_b.utils.records import Envelope, append_jsonl

HERE = Path(__file__).resolve().parent

# The recipe the quickstart shipped before this search, as overrides of today's quickstart.yaml, so that every
# variant below reproduces whatever the shipped file now says.
BEFORE = ["model.overrides={hidden_size: 256, num_hidden_layers: 4, split_size: 64, num_retrieved_splits: 3}",
          "optim.betas=[0.95,0.95]", "optim.eps=1e-18", "train.global_batch_tokens=4096", "train.micro_batch_size=16",
          "eval.every=100"]
# name -> overrides on top of BEFORE
VARIANTS: dict[str, list[str]] = {
    # the shipped recipe before this search: 400 steps x 4096 tokens, lr 2e-3, AdamW (0.95, 0.95), eps 1e-18
    "v0-shipped": ["train.max_steps=400"],
    # the same, three times longer
    "v0-long": ["train.max_steps=1200"],
    # common small-model AdamW (betas 0.9/0.98, eps 1e-8) at lr 1e-3
    "adam-1e-3": ["train.max_steps=1200", "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "optim.lr=1e-3"],
    # the ~10-minute budget (4.9M tokens) in half-size batches (2x the updates), AdamW (0.9, 0.98), lr 2e-3
    "b2k-v4k": ["train.max_steps=2400", "train.global_batch_tokens=2048", "train.micro_batch_size=8",
                "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "optim.lr=2e-3"],
    # ... with a 2,048-token vocabulary
    "b2k-v2k": ["train.max_steps=2400", "train.global_batch_tokens=2048", "train.micro_batch_size=8",
                "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "optim.lr=2e-3", "tokenizer.vocab_size=2048"],
    # ... and twice the learning rate
    "b2k-v2k-lr4e-3": ["train.max_steps=2400", "train.global_batch_tokens=2048", "train.micro_batch_size=8",
                       "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "optim.lr=4e-3", "tokenizer.vocab_size=2048"],
    # split size 32 (the static mixing matrix V is 32x32: each position's weights see twice the data)
    "b2k-s32": ["train.max_steps=2400", "train.global_batch_tokens=2048", "train.micro_batch_size=8",
                "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "optim.lr=2e-3",
                "model.overrides={hidden_size: 256, num_hidden_layers: 4, split_size: 32, num_retrieved_splits: 3}"],
    # split size 32 and a 2,048-token vocabulary together
    "b2k-s32-v2k": ["train.max_steps=2400", "train.global_batch_tokens=2048", "train.micro_batch_size=8",
                    "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "optim.lr=2e-3", "tokenizer.vocab_size=2048",
                    "model.overrides={hidden_size: 256, num_hidden_layers: 4, "
                    "split_size: 32, num_retrieved_splits: 3}"],
    # the quickstart with split size 16
    "s16": ["model.overrides={hidden_size: 256, num_hidden_layers: 4, split_size: 16, num_retrieved_splits: 3}",
            "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "train.global_batch_tokens=2048",
            "train.micro_batch_size=8", "eval.every=200"],
    # the quickstart with twice the learning rate
    "s32-lr4e-3": ["model.overrides={hidden_size: 256, num_hidden_layers: 4, split_size: 32, num_retrieved_splits: 3}",
                   "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "train.global_batch_tokens=2048",
                   "train.micro_batch_size=8", "eval.every=200", "optim.lr=4e-3"],
    # the recipe shipped since (avey_b/configs/pretrain/quickstart.yaml): s16
    "quickstart": ["model.overrides={hidden_size: 256, num_hidden_layers: 4, split_size: 16, num_retrieved_splits: 3}",
                   "optim.betas=[0.9,0.98]", "optim.eps=1e-8", "train.global_batch_tokens=2048",
                   "train.micro_batch_size=8", "eval.every=200"],
}
QUICKSTART = VARIANTS["quickstart"][1:]  # the quickstart's overrides of BEFORE, split size aside
# the quickstart with another seed (initialization, masks, document order): the spread of one recipe
VARIANTS["quickstart-seed1"] = [*VARIANTS["quickstart"], "train.seed=1"]
# the quickstart with split size 8
VARIANTS["s8"] = ["model.overrides={hidden_size: 256, num_hidden_layers: 4, split_size: 8, num_retrieved_splits: 3}",
                  *QUICKSTART]
# the quickstart with 30% of the tokens masked (its held-out accuracy is then scored at 30% masking too)
VARIANTS["mask30"] = [*VARIANTS["quickstart"], "data.mask_rate=0.3"]
VARIANTS["mask40"] = [*VARIANTS["quickstart"], "data.mask_rate=0.4"]
# the quickstart's tokens in half-size batches again: 1,024 tokens, 4,800 steps
VARIANTS["b1k"] = [*VARIANTS["quickstart"], "train.global_batch_tokens=1024", "train.micro_batch_size=4",
                   "train.max_steps=4800", "eval.every=400"]
# and again: 512-token batches (two sequences), 9,600 steps
VARIANTS["b512"] = [*VARIANTS["quickstart"], "train.global_batch_tokens=512", "train.micro_batch_size=2",
                    "train.max_steps=9600", "eval.every=800"]
# 1,024-token batches at lr 1e-3
VARIANTS["b1k-lr1e-3"] = [*VARIANTS["b1k"], "optim.lr=1e-3"]
# 1,024-token batches with dropout 0.1 on the hidden states (the corpus is seen ~11 times)
VARIANTS["b1k-drop"] = [*VARIANTS["b1k"], "model.overrides={hidden_size: 256, num_hidden_layers: 4, split_size: 16, "
                        "num_retrieved_splits: 3, hidden_dropout: 0.1}"]
# ... and a quarter more steps (6,000: 6.1M tokens)
VARIANTS["b1k-drop-6k"] = [*VARIANTS["b1k-drop"], "train.max_steps=6000"]
# ... and three times the tokens (14,400 steps: 14.7M tokens; 25.6 min alone on 2 cores as quickstart-long)
VARIANTS["b1k-drop-3x"] = [*VARIANTS["b1k-drop"], "train.max_steps=14400", "eval.every=1200"]
# the recipe shipped as avey_b/configs/pretrain/quickstart-long.yaml: b1k-drop-3x (run it alone, --threads 2)
VARIANTS["quickstart-long"] = [*VARIANTS["b1k-drop-3x"], "checkpoint.every=1800"]
# 1,024-token batches with an 8,192-token vocabulary
VARIANTS["b1k-v8k"] = [*VARIANTS["b1k"], "tokenizer.vocab_size=8192"]
# 1,024-token batches on the docs plus the stdlib's comment blocks (+55% text; build the file first with
# python benchmarks/quickstart_recipes/comments_corpus.py --out runs/corpus_plus/docs.jsonl)
VARIANTS["b1k-comments"] = [*VARIANTS["b1k"], "data.train=runs/corpus_plus/docs.jsonl"]
# 1,024-token batches, dropout 0.1, deeper and narrower: 6 layers of width 192
VARIANTS["b1k-drop-l6"] = [*VARIANTS["b1k"], "model.overrides={hidden_size: 192, num_hidden_layers: 6, split_size: 16, "
                           "num_retrieved_splits: 3, hidden_dropout: 0.1}"]
# the quickstart retrieving one split instead of three (each split's processor sees 2S tokens, not 4S)
VARIANTS["k1"] = ["model.overrides={hidden_size: 256, num_hidden_layers: 4, split_size: 16, num_retrieved_splits: 1}",
                  *QUICKSTART]


def run_variant(name: str, overrides: list[str], args) -> dict:
    run_dir = Path(args.work) / name
    cmd = [str(Path(sys.executable).with_name("avey-b")), "pretrain", "--config", "quickstart", "--overwrite",
           f"run_dir={run_dir}", f"train.threads={args.threads}", "train.max_minutes=null",
           "logging.progress=false", *BEFORE, *overrides]
    print("$", " ".join(cmd), flush=True)
    env, t = Envelope.begin(), time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    seconds, _ = time.time() - t, env.end()  # the load average after the run, not after the scoring below
    if out.returncode:
        sys.stderr.write(out.stdout[-3000:] + out.stderr[-3000:])
        raise SystemExit(f"variant {name} failed (exit {out.returncode})")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [{k: m[k] for k in ("step", "tokens", "eval_loss", "eval_accuracy", "elapsed_s") if k in m}
             for m in metrics if "eval_loss" in m]
    train = [{k: m[k] for k in ("step", "loss", "tokens_per_s") if k in m} for m in metrics if "loss" in m]
    fill = out.stdout[out.stdout.find("fill-mask"):].strip() if "fill-mask" in out.stdout else ""
    rate = score(str(run_dir / "model"))
    rec = {"variant": name, "overrides": overrides, "threads": args.threads, "seconds": round(seconds, 1),
           "curve": curve, "train": train, "fill_mask": fill,
           "fill_rate": {k: rate[k] for k in ("sentences", "top1", "top5")}, **env.end()}
    print(f"{name}: final held-out loss {curve[-1]['eval_loss']:.3f}, accuracy {curve[-1]['eval_accuracy']:.3%} "
          f"after {curve[-1]['step']} steps, {seconds / 60:.1f} min; right word in the top 5 for {rate['top5']:.1%} of "
          f"{rate['sentences']} held-out sentences", flush=True)
    return rec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", default="runs/quickstart_recipes")
    p.add_argument("--out", default=str(HERE / "results.jsonl"))
    args = p.parse_args()
    for name in args.variants:
        rec = run_variant(name, VARIANTS[name], args)
        append_jsonl(args.out, rec)


if __name__ == "__main__":
    main()
