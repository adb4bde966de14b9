"""Side by side on real text: a small Avey-B and a BERT with (about) the same parameter count, built from
config, pretrained with the same trainer, tokenizer, data, masks, schedule and token budget on this CPU.
Records both held-out masked-LM loss / accuracy curves as a plot and a table.

    python benchmarks/pretrain_compare.py --data ../shared/data/wikitext-2/valid.tokens.txt \
        --out benchmarks/pretrain_results/compare_wikitext2

The corpus is *not* part of the repository (it is the WikiText-2 validation file from the shared data
folder); 10% of its paragraphs are held out by content hash. Writes ``<out>.md`` (table + command),
``<out>.png`` (curves) and ``<out>.jsonl`` (all evaluation points).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="training text (file or dir); 10%% held out")
    p.add_argument("--out", required=True, help="output prefix, e.g. benchmarks/pretrain_results/compare_wikitext2")
    p.add_argument("--run-root", default="runs/compare")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--lr", type=float, default=2e-3)
    args = p.parse_args(argv)

    import avey_b  # noqa: F401
    from avey_b import presets
    from avey_b.baselines import masked_lm_parameters, matched_width
    from avey_b.training.config import load_config
    from avey_b.training.pretrain import train

    root = Path(args.run_root)
    common = [f"data.train={args.data}", "data.eval_fraction=0.1", f"data.seq_len={args.seq_len}",
              "data.num_workers=0", "data.add_special_tokens=true", f"tokenizer.vocab_size={args.vocab}",
              f"train.global_batch_tokens={args.batch_tokens}", "train.micro_batch_size=16",
              f"train.max_steps={args.steps}", f"train.precision={args.precision}", "train.threads=2",
              f"optim.lr={args.lr}", "optim.warmup=0.05", f"eval.every={args.eval_every}", "eval.max_sequences=96",
              "checkpoint.every=0", "checkpoint.keep_last=1", "logging.every=10", "logging.progress=false"]
    avey = {"hidden_size": 256, "num_hidden_layers": 4, "split_size": 64, "num_retrieved_splits": 3}

    # 1) Avey-B; its run trains the BPE that the BERT run then reuses (same tokenizer, same data stream).
    t0 = time.time()
    r_avey = train(load_config(None, common + [f"run_dir={root / 'avey-b'}", "model.arch=avey-b", "model.preset=small",
                                               f"model.overrides={json.dumps(avey)}"]))
    t_avey = time.time() - t0
    if r_avey["exit_code"]:
        return r_avey["exit_code"]
    tok_dir = root / "avey-b" / "model"
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(tok_dir))
    shape = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
             "max_position_embeddings": max(512, args.seq_len)}
    n_avey = masked_lm_parameters(presets.small(vocab_size=vocab, **avey))
    bert = matched_width("bert", n_avey, vocab_size=vocab, **shape)
    bert = {k: bert[k] for k in (*shape, "intermediate_size")}

    t0 = time.time()
    r_bert = train(load_config(None, common + [f"run_dir={root / 'bert'}", f"tokenizer.path={tok_dir}", "model.arch=bert",
                                               f"model.overrides={json.dumps(bert)}"]))
    t_bert = time.time() - t0
    if r_bert["exit_code"]:
        return r_bert["exit_code"]

    rows = []
    for name, run in (("avey-b", "avey-b"), ("bert", "bert")):
        for line in open(root / run / "metrics.jsonl"):
            r = json.loads(line)
            if "eval_loss" in r:
                rows.append({"model": name, "step": r["step"], "tokens": r["tokens"], "eval_loss": r["eval_loss"],
                             "eval_accuracy": r["eval_accuracy"]})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in ("avey-b", "bert"):
        pts = [r for r in rows if r["model"] == name]
        axes[0].plot([r["tokens"] / 1e3 for r in pts], [r["eval_loss"] for r in pts], marker="o", label=name)
        axes[1].plot([r["tokens"] / 1e3 for r in pts], [r["eval_accuracy"] for r in pts], marker="o", label=name)
    for ax, title in zip(axes, ("held-out MLM loss", "held-out MLM accuracy"), strict=True):
        ax.set_xlabel("training tokens (K)")
        ax.set_title(title)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)

    from transformers import BertConfig, BertForMaskedLM

    with torch.device("meta"):
        n_bert = sum(p.numel() for p in BertForMaskedLM(BertConfig(vocab_size=vocab, **bert)).parameters())
    lines = [
        f"# Avey-B vs BERT, same data / tokenizer / budget ({Path(args.data).name}, 10% held out)", "",
        "Command:", "", "```", "python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])), "```", "",
        f"Budget: {args.steps} steps x {args.batch_tokens} tokens = {args.steps * args.batch_tokens:,} tokens, "
        f"seq_len {args.seq_len}, 20% masking, AdamW (0.95, 0.95, eps 1e-18, wd 0.01), peak LR {args.lr}, "
        f"5% warmup + cosine, {args.precision} on {torch.get_num_threads()} CPU threads (machine shared with other jobs, "
        "so wall times are indicative only).", "",
        "| model | parameters | config | wall time (s) | untrained loss | final loss | final accuracy |",
        "|---|---|---|---|---|---|---|",
        f"| Avey-B | {n_avey / 1e6:.2f}M | {avey} | {t_avey:.0f} | {r_avey['untrained']['eval_loss']:.3f} | "
        f"{r_avey['final']['eval_loss']:.3f} | {r_avey['final']['eval_accuracy']:.3f} |",
        f"| BERT | {n_bert / 1e6:.2f}M | {bert} | {t_bert:.0f} | {r_bert['untrained']['eval_loss']:.3f} | "
        f"{r_bert['final']['eval_loss']:.3f} | {r_bert['final']['eval_accuracy']:.3f} |", "",
        "Held-out curve (step: Avey-B loss / acc | BERT loss / acc):", "",
        "| step | tokens | Avey-B loss | Avey-B acc | BERT loss | BERT acc |", "|---|---|---|---|---|---|",
    ]
    by = {(r["model"], r["step"]): r for r in rows}
    for step in sorted({r["step"] for r in rows}):
        a, b = by.get(("avey-b", step)), by.get(("bert", step))
        if a and b:
            lines.append(f"| {step} | {a['tokens']:,} | {a['eval_loss']:.3f} | {a['eval_accuracy']:.3f} | "
                         f"{b['eval_loss']:.3f} | {b['eval_accuracy']:.3f} |")
    lines += ["", f"![curves]({out.with_suffix('.png').name})", ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
