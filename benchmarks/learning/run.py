"""Learning benchmark: does Avey-B learn tasks, and does masked-LM pretraining help it, next to a BERT and a
ModernBERT of the same parameter count — one shared tokenizer, the same data, the same budgets, this CPU.

    python benchmarks/learning/run.py --shared ../shared/data --work runs/learning --threads 2

Steps (each resumable: a finished pretraining run or evaluation cell is not redone):

1. one byte-level BPE on the pretraining text: the Python docs bundled with the library plus the shared
   WikiText-2 text (``wikitext-2/valid.tokens.txt``), 5% of documents held out by content hash;
2. masked-LM pretraining of each model on that text with the quickstart's recipe and token budget
   (``avey-b pretrain --config quickstart`` with ``model.arch`` / ``model.overrides`` / ``data.train`` changed;
   BERT and ModernBERT widths chosen to match Avey-B's parameter count). The quickstart's lr (2e-3) was searched
   for Avey-B; BERT and ModernBERT are pretrained at it and at 5e-4, and the run with the lower final held-out
   loss is kept (a 2-layer post-LN BERT stays on the unigram plateau at 2e-3). The held-out curves of the three
   kept runs go to ``pretraining.png`` / ``pretraining.jsonl``;
3. "scratch" models: the same configurations, freshly initialized (seed 0);
4. ``avey-b evaluate`` on SST-2 (the shared train file minus a fixed 5% holdout, scored on the holdout;
   accuracy) and CoNLL-2003 (``eng.train``, scored on the whole ``eng.testa``; seqeval entity F1), one epoch
   over the first 10,000 SST-2 / 7,000 CoNLL training sentences (the caps keep the 72 cells near 45 minutes on
   2 cores), 2 learning rates x 3 seeds per model; the evaluation report (``report.md``) has the by-variant table
   (scratch vs pretrained, median at the best learning rate, spread over seeds), copied to ``results.md``.

The shared data are not part of the repository; nothing here downloads anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AVEY_B = str(Path(sys.executable).with_name("avey-b"))  # the CLI installed beside this interpreter
AVEY = {"hidden_size": 256, "num_hidden_layers": 4, "split_size": 16, "num_retrieved_splits": 3}  # the quickstart's
LRS = [5e-4, 2e-3]
SEEDS = 3
PRETRAIN_LRS = [2e-3, 5e-4]  # BERT / ModernBERT: the quickstart's lr, then a common one for small Transformers
SST2_TRAIN = 10_000  # of the 63,982 SST-2 sentences left after the holdout
CONLL_TRAIN = 7_000  # of the 14,041 sentences of eng.train (the two caps keep the 72 cells near 45 min here)


def sh(cmd: list[str], log: Path) -> None:
    print("$", " ".join(cmd), flush=True)
    with open(log, "a") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc:
        raise SystemExit(f"failed (exit {rc}): see {log}")


def corpus_files(shared: Path, work: Path) -> list[str]:
    """The pretraining text as two JSONL files (documents): the bundled Python docs and WikiText-2 paragraphs."""
    from avey_b.data.corpus import python_docs_corpus

    docs, wiki = work / "python_docs.jsonl", work / "wikitext2.jsonl"
    if not docs.exists():
        with open(docs, "w") as f:
            for text in python_docs_corpus():
                f.write(json.dumps({"text": text}) + "\n")
    if not wiki.exists():
        paras, block = [], []
        for line in open(shared / "wikitext-2" / "valid.tokens.txt", encoding="utf-8"):
            if line.strip().startswith("= ") and block:  # a new (sub)section starts a new document
                paras.append(" ".join(block))
                block = []
            if line.strip():
                block.append(line.strip())
        if block:
            paras.append(" ".join(block))
        with open(wiki, "w") as f:
            for text in paras:
                if len(text) >= 200:
                    f.write(json.dumps({"text": text}) + "\n")
    return [str(docs), str(wiki)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", default="../shared/data")
    p.add_argument("--work", default="runs/learning")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workers", type=int, default=None,
                   help="evaluation cells run at once, each on threads/workers threads (default: one per thread)")
    p.add_argument("--pretrain-overrides", nargs="*", default=[], help="extra key=value for every pretraining run")
    p.add_argument("--smoke", action="store_true",
                   help="a few-minute check of the whole pipeline (40 pretraining steps, 256 training and 128 "
                        "evaluation examples per task); writes nothing into benchmarks/")
    args = p.parse_args()
    if args.smoke:
        args.pretrain_overrides = ["train.max_steps=40", "eval.every=20", *args.pretrain_overrides]
    shared, work = Path(args.shared), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    files = corpus_files(shared, work)
    common = [f"data.train=[{','.join(files)}]", f"train.threads={args.threads}", "train.max_minutes=null",
              "logging.progress=false", "checkpoint.every=0", *args.pretrain_overrides]
    from avey_b.utils.records import Envelope

    t_start, env = time.time(), Envelope.begin()

    # 1-2. the three models' masked-LM pretraining (resumable)
    runs, sizes, chosen = pretrain(files, work, common, log)
    t_pre = time.time() - t_start

    curves = [{"model": name, **{k: r[k] for k in ("step", "tokens", "eval_loss", "eval_accuracy")}}
              for name, d in runs.items() for r in evals(d)]
    out = work if args.smoke else HERE
    with open(out / "pretraining.jsonl", "w") as f:
        for r in curves:
            f.write(json.dumps(r) + "\n")
    plot(curves, out / "pretraining.png")

    # 3. scratch = the same configuration, freshly initialized
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    models = {}
    for name, d in runs.items():
        scratch = work / "scratch" / name
        if not (scratch / "config.json").exists():
            torch.manual_seed(0)
            model = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(d / "model"))
            model.save_pretrained(scratch)
            AutoTokenizer.from_pretrained(d / "model").save_pretrained(scratch)
        models[f"{name}@scratch"] = str(scratch)
        models[f"{name}@pretrained"] = str(d / "model")

    # 4. the evaluation sweep (resumable), then its report
    suite = {
        "description": "benchmarks/learning: scratch vs pretrained, Avey-B / BERT / ModernBERT of one size",
        "models": models, "tasks": ["sst2", "conll2003"], "lrs": LRS, "seeds": SEEDS, "protocol": "standard",
        "aggregate": "median", "output_dir": str(work / "eval"),
        "defaults": {"batch_size": 32, "max_length": 128, "epochs": 1, "device": "cpu",
                     **({"max_train_examples": 256, "max_eval_examples": 128} if args.smoke else {})},
        "task_overrides": {} if args.smoke else {"sst2": {"max_train_examples": SST2_TRAIN},
                                                 "conll2003": {"max_train_examples": CONLL_TRAIN}},
        "data": {"sst2": {"train": str(shared / "sst2" / "train.tsv"), "holdout": 0.05},
                 "conll2003": {"train": str(shared / "conll2003" / "eng.train"),
                               "eval": str(shared / "conll2003" / "eng.testa")}},
    }
    import yaml

    (work / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    workers = args.workers or args.threads
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, args.threads // workers))}
    cmd = [AVEY_B, "evaluate", "--config", str(work / "suite.yaml"), "--workers", str(workers)]
    print("$", " ".join(cmd), flush=True)
    with open(log, "a") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    report = (work / "eval" / "report.md").read_text()
    head = report_head(
        "Learning benchmark: scratch vs pretrained (Avey-B, BERT, ModernBERT of one size)",
        "benchmarks/learning/run.py",
        sizes, env, facts=f"{args.threads} threads",
        took=f"Pretraining took {t_pre / 60:.0f} min, the whole benchmark {(time.time() - t_start) / 60:.0f} min.",
    ) + [
        "Pretraining learning rates: Avey-B 2e-3 (the quickstart's); BERT and ModernBERT each at "
        + " and ".join(f"{lr:g}" for lr in PRETRAIN_LRS) + ", the lower final held-out loss kept (final losses: "
        + "; ".join(f"{a}: " + ", ".join(f"{k} {v}" for k, v in c.items()) for a, c in chosen.items())
        + f"; kept: {', '.join(runs[a].name for a in chosen)}).", "",
        "Pretraining curves: `pretraining.png` (held-out masked-LM loss and accuracy of the kept runs).", "",
    ]
    (out / "results.md").write_text("\n".join(head) + report)
    if not args.smoke:
        shutil.copy(work / "suite.yaml", HERE / "suite.yaml")
    print((out / "results.md").read_text())


def report_head(title: str, script: str, sizes: dict[str, int], env, *, facts: str, took: str) -> list[str]:
    """The opening lines of a ``results.md`` (this benchmark's and ``paper_protocol_cpu``'s): the title, the command
    that wrote it, the run's :class:`~avey_b.utils.records.Envelope` ``env`` (ended here: machine, commit, load
    average at the start and the end, time) with ``facts`` such as the threads, how long it took, and the
    parameters of each model."""
    env.end()
    return [
        f"# {title}", "", "```", f"python {script} {' '.join(sys.argv[1:])}", "```", "",
        f"Machine: {env.line()}; {facts}. {took}",
        "", "Parameters (masked-LM model, tied embeddings counted once): "
        + ", ".join(f"{k} {v / 1e6:.2f}M" for k, v in sizes.items()) + ".", "",
    ]


def pretrain(files: list[str], work: Path, common: list[str], log: Path,
             archs: tuple[str, ...] = ("bert", "modernbert"), lrs: dict[str, list[float]] | None = None):
    """Masked-LM pretraining of Avey-B (the quickstart's shape and recipe) and of each Transformer in ``archs``
    (two layers of width 256, the FFN width matched to Avey-B's parameter count) on ``files``, each at the
    learning rates ``lrs[arch]`` (default ``PRETRAIN_LRS``), the lower final held-out loss kept. A finished run
    is not redone. Returns ({name: run dir}, {name: parameters}, {arch: {run: final held-out loss}})."""
    runs = {}
    # Avey-B first: its run trains the shared tokenizer, which the others reuse
    avey_dir = work / "pretrain" / "avey-b"
    if not (avey_dir / "model" / "config.json").exists():
        sh([AVEY_B, "pretrain", "--config", "quickstart", "--overwrite", f"run_dir={avey_dir}",
            f"model.overrides={json.dumps(AVEY)}", *common], log)
    runs["avey-b"] = avey_dir
    from transformers import AutoConfig, AutoTokenizer

    import avey_b  # noqa: F401  (registers Avey-B with the Auto classes)
    from avey_b.utils.model_spec import masked_lm_parameters, matched_width

    tok_dir = avey_dir / "model"
    vocab = len(AutoTokenizer.from_pretrained(tok_dir))
    target = masked_lm_parameters(AutoConfig.from_pretrained(tok_dir))
    sizes = {"avey-b": target}
    chosen = {}  # arch -> {run: final held-out loss} of the learning rates tried
    for arch in archs:
        # two layers of width 256, the FFN width chosen to match Avey-B's parameter count
        shape = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                 **({"max_position_embeddings": 512} if arch == "bert" else {})}
        over = matched_width(arch, target, vocab_size=vocab, pad_token_id=0, **shape)
        over = {k: over[k] for k in (*shape, "intermediate_size")}
        # the quickstart's lr (searched for Avey-B) and a common Transformer lr; the lower final held-out loss wins
        tried = {}
        for lr in (lrs or {}).get(arch, PRETRAIN_LRS):
            d = work / "pretrain" / (arch if lr == PRETRAIN_LRS[0] else f"{arch}-lr{lr:g}")
            if not (d / "model" / "config.json").exists():
                sh([AVEY_B, "pretrain", "--config", "quickstart", "--overwrite", f"run_dir={d}",
                    f"tokenizer.path={tok_dir}", f"model.arch={arch}", f"model.overrides={json.dumps(over)}",
                    f"optim.lr={lr}", *common], log)
            tried[d] = evals(d)[-1]["eval_loss"]
        runs[arch] = min(tried, key=tried.get)
        chosen[arch] = {str(d.name): round(v, 4) for d, v in tried.items()}
        sizes[arch] = masked_lm_parameters(AutoConfig.from_pretrained(runs[arch] / "model"))
    return runs, sizes, chosen


def evals(run_dir: Path) -> list[dict]:
    """The held-out evaluations of a pretraining run, in order."""
    with open(run_dir / "metrics.jsonl") as f:
        return [r for r in map(json.loads, f) if "eval_loss" in r]


def plot(curves: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in dict.fromkeys(r["model"] for r in curves):
        pts = [r for r in curves if r["model"] == name]
        axes[0].plot([r["tokens"] / 1e6 for r in pts], [r["eval_loss"] for r in pts], label=name)
        axes[1].plot([r["tokens"] / 1e6 for r in pts], [100 * r["eval_accuracy"] for r in pts], label=name)
    for ax, title in zip(axes, ("held-out masked-LM loss", "held-out masked-token accuracy (%)"), strict=True):
        ax.set_xlabel("training tokens (M)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
