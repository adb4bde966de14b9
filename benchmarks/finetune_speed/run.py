"""Fine-tuning speed on CPU, fp32 against bf16 autocast, Avey-B against a BERT of the same size: training tokens/s
of ``avey-b finetune``'s loop (the real one: ``run_cell``), the four setups alternated in one process.

    python benchmarks/finetune_speed/run.py --sst2 ../shared/data/sst2/train.tsv --avey runs/quickstart/model

Avey-B is the model given (``--avey``; default: the quickstart's); the BERT has its tokenizer and the same
parameter count (width 256, 2 layers, FFN width matched), random weights. Each cell fine-tunes on the first
``--examples`` SST-2 training sentences (the file minus a fixed 5% holdout) for one epoch (batch 32) and scores
256 held-out ones; tokens/s counts real (non-padding) tokens per second of the training loop. The GEMM rates of
both dtypes are measured in the same process before and after. Results go to ``results.jsonl``; the table to
stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sst2", required=True)
    p.add_argument("--avey", default="runs/quickstart/model")
    p.add_argument("--work", default="runs/finetune_speed")
    p.add_argument("--examples", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, BertConfig

    import avey_b  # noqa: F401
    from avey_b.benchmarking.timing import gemm_rate
    from avey_b.evaluation.finetune import run_cell
    from avey_b.evaluation.tasks import DataFiles, RunConfig
    from avey_b.utils.model_spec import masked_lm_parameters, matched_width
    from avey_b.utils.records import Envelope, append_jsonl

    tok = AutoTokenizer.from_pretrained(args.avey)
    target = masked_lm_parameters(AutoConfig.from_pretrained(args.avey))
    bert_dir = Path(args.work) / "bert"
    if not (bert_dir / "config.json").exists():
        cfg = BertConfig(**matched_width("bert", target, vocab_size=len(tok), hidden_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, max_position_embeddings=512,
                                         pad_token_id=tok.pad_token_id))
        torch.manual_seed(0)
        AutoModelForMaskedLM.from_config(cfg).save_pretrained(bert_dir)
        tok.save_pretrained(bert_dir)
    models = {"avey-b": args.avey, "bert": str(bert_dir)}
    files = DataFiles(train=args.sst2, holdout=0.05)  # the learning benchmark's fixed 5% holdout
    env = Envelope.begin()
    rates = {d: [gemm_rate(t)] for d, t in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    runs: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, path in models.items():
            for precision in ("fp32", "bf16"):
                cfg = RunConfig(lr=5e-4, seed=0, batch_size=32, max_length=128, epochs=1, device="cpu",
                                precision=precision, max_train_examples=args.examples, max_eval_examples=256)
                rec = run_cell(path, "sst2", cfg, files)
                runs.setdefault((name, precision), []).append(rec["train"]["tokens_per_s"])
                print(name, precision, rec["train"]["autocast"], rec["train"]["tokens_per_s"], "tokens/s",
                      f"accuracy {rec['score']:.1f}", flush=True)
    for d, t in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        rates[d].append(gemm_rate(t))
    rec = {"command": " ".join(["python", *sys.argv]), "threads": args.threads,
           "examples": args.examples, "tokens_per_s": {f"{m}/{p}": v for (m, p), v in runs.items()},
           "gemm_gflop_per_s": {d: [round(r / 1e9, 1) for r in v] for d, v in rates.items()}, **env.end()}
    append_jsonl(HERE / "results.jsonl", rec)
    print("\n| model | fp32 tokens/s | bf16 tokens/s | bf16 / fp32 |\n|---|---|---|---|")
    for name in models:
        f32, b16 = max(runs[(name, "fp32")]), max(runs[(name, "bf16")])
        print(f"| {name} | {f32:,.0f} | {b16:,.0f} | {b16 / f32:.2f}× |")


if __name__ == "__main__":
    main()
