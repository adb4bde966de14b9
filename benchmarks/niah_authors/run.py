"""NIAH as the paper's authors ran it, at CPU scale: their generator, fine-tuned and scored at each length.

    python benchmarks/niah_authors/run.py --data ../shared/data --work runs/niah_authors

Steps (a finished tokenizer or data set is reused; ``niah evaluate`` resumes an interrupted run):

1. a byte-level BPE of 4,096 tokens fitted on the bundled Python docs plus WikiText-2 (the text the NIAH CPU
   benchmark's models were pretrained on, ``benchmarks/learning/run.py``'s ``corpus_files``);
2. ``avey-b niah generate --protocol paper``: the authors' sets (``avey_b.data.niah_authors``) at ``--lengths``
   words, ``--n-train`` training and ``--n-test`` test examples a length (the authors: 10,000 and 1,000);
3. ``avey-b niah evaluate --protocol paper``: Avey-B (d=256, 4 layers, S=16, k=3, the quickstart's shape) and a
   ModernBERT of the same size (2 layers of width 256, its FFN width matched to Avey-B's parameter count: the NIAH
   CPU benchmark's pair), each fine-tuned once per length on that length's train set and scored on its test set:
   the token-classification form, bf16 weights, EncodEval's end token (the model's eos, else unknown), 32
   examples a step as micro-batches of 1, AdamW (0.9, 0.95), epsilon 1e-5, weight decay 0.1, 1 epoch.

By default the models are built from config with **random weights**. ``--pretrain`` first pretrains the pair as
the NIAH CPU benchmark does (``benchmarks/niah_cpu/run.py``'s step 1: the learning benchmark's masked-LM recipe,
4.9M tokens, ModernBERT at learning rate 5e-4 and given ModernBERT-base's 8,192-token window) and evaluates those,
with their own tokenizer; ``--models`` takes other pretrained directories. The command, the machine and the load
average before and after go to ``OUT/run.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "learning"))
import run as learning  # noqa: E402  (the learning benchmark's corpus and pretraining, reused as is)

AVEY_B = learning.AVEY_B
AVEY = learning.AVEY  # d=256, 4 layers, S=16, k=3


def tokenizer(shared: Path, work: Path) -> Path:
    """The 4,096-token byte-level BPE (fitted once, saved under WORK/tok)."""
    out = work / "tok"
    if not (out / "tokenizer.json").exists():
        from avey_b.data.tokenization import train_bpe_tokenizer

        texts = [json.loads(line)["text"] for f in learning.corpus_files(shared, work) for line in open(f)]
        train_bpe_tokenizer(texts, vocab_size=4096).save_pretrained(out)
    return out


def model_specs(tok_dir: Path) -> list[str]:
    """Avey-B (the quickstart's shape) and a ModernBERT of its size, as model specs built from config; both take the
    tokenizer's vocabulary and ModernBERT its special-token ids, as pretraining writes them."""
    from transformers import AutoTokenizer

    from avey_b.utils import model_spec

    tok = AutoTokenizer.from_pretrained(tok_dir)
    avey = "avey-b-small:" + ",".join(f"{k}={v}" for k, v in AVEY.items()) + f",vocab_size={len(tok)}"
    target = model_spec.masked_lm_parameters(model_spec.build_config(avey))
    shape = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": len(tok),
             "pad_token_id": tok.pad_token_id, "bos_token_id": tok.cls_token_id, "cls_token_id": tok.cls_token_id,
             "sep_token_id": tok.sep_token_id, "eos_token_id": tok.eos_token_id}
    modernbert = model_spec.matched_width("modernbert", target, **shape)
    return [avey, "modernbert:" + ",".join(f"{k}={v}" for k, v in modernbert.items())]


def pretrained_pair(shared: Path, work: Path, threads: int) -> tuple[list[str], Path]:
    """The NIAH CPU benchmark's pretrained pair (its step 1, reused as is; a finished run is not redone): the model
    directories (Avey-B, ModernBERT) and the tokenizer they share."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("niah_cpu_run", HERE.parent / "niah_cpu" / "run.py")
    niah_cpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(niah_cpu)
    files = learning.corpus_files(shared, work)
    common = [f"data.train=[{','.join(files)}]", f"train.threads={threads}", "train.max_minutes=null",
              "logging.progress=false", "checkpoint.every=0"]
    runs, _, _ = learning.pretrain(files, work, common, work / "log.txt", archs=("modernbert",),
                                   lrs={"modernbert": [5e-4]})
    models = work / "models"
    models.mkdir(exist_ok=True)
    for name, run_dir in runs.items():
        if not (models / name / "config.json").exists():
            niah_cpu.copy_model(run_dir / "model", models / name,
                                niah_cpu.MODERNBERT_WINDOW if name == "modernbert" else None)
    return [str(models / "avey-b"), str(models / "modernbert")], models / "avey-b"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="the shared data (Python docs are bundled; WikiText-2)")
    p.add_argument("--work", default="runs/niah_authors")
    p.add_argument("--out", default=str(HERE / "eval"))
    p.add_argument("--models", nargs="+", default=None, help="default: the random-weight pair of the docstring")
    p.add_argument("--pretrain", action="store_true", help="pretrain the pair first and evaluate it (docstring)")
    p.add_argument("--tasks", nargs="+", default=["niah-2", "niah-1"])
    p.add_argument("--lengths", nargs="+", default=["1000"], help="words (the authors: 1000 ... 32000)")
    p.add_argument("--n-train", type=int, default=320, help="training examples a length (the authors: 10,000)")
    p.add_argument("--n-test", type=int, default=100, help="test examples a length (the authors: 1,000)")
    p.add_argument("--lr", nargs="+", default=["5e-4"], help="the paper protocol's grid: 2e-5 6e-5 1e-4 5e-4")
    p.add_argument("--batch-size", type=int, default=None, help="examples a step (default: the protocol's 32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--weights-dtype", choices=["bfloat16", "float32"], default=None,
                   help="the weights' dtype (default: the paper protocol's bfloat16; float32 where the CPU has no "
                        "native bf16, which otherwise runs emulated at a tenth of fp32's speed)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default=None,
                   help="autocast (default: the protocol's; fp32 with --weights-dtype float32 on such a CPU)")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from avey_b.utils.records import Envelope

    t0, env = time.time(), Envelope.begin()
    if args.pretrain:
        models, tok_dir = pretrained_pair(Path(args.data), work, args.threads)
    else:
        tok_dir = tokenizer(Path(args.data), work)
        models = args.models or model_specs(tok_dir)
    data = work / "data"
    gen = [AVEY_B, "niah", "generate", "--protocol", "paper", "--out", str(data), "--tasks", *args.tasks,
           "--lengths", *args.lengths, "--n-train", str(args.n_train), "--n-test", str(args.n_test), "--format",
           "jsonl", "--seed", str(args.seed)]
    if not all((data / t / "manifest.json").exists() for t in args.tasks):
        subprocess.run(gen, check=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    ev = [AVEY_B, "niah", "evaluate", "--protocol", "paper", "--data", str(data), "--models", *models,
          "--tokenizer", str(tok_dir), "--tasks", *args.tasks, "--lengths", *args.lengths, "--lr", *args.lr,
          "--seed", str(args.seed), "--device", "cpu", "--out", args.out]
    if args.batch_size:
        ev += ["--batch-size", str(args.batch_size)]
    if args.weights_dtype:
        ev += ["--weights-dtype", args.weights_dtype]
    if args.precision:
        ev += ["--precision", args.precision]
    print("$", " ".join(ev), flush=True)
    subprocess.run(ev, check=True, env=env)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {"generate": gen, "evaluate": ev, "minutes": round((time.time() - t0) / 60, 1),
              "cpu_seconds_children": round(used.ru_utime + used.ru_stime, 1), "threads": args.threads, **env.end()}
    Path(args.out, "run.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
