"""Pretraining throughput (tokens/s) and MFU of one optimizer step, through the trainer's own code path
(``mlm_sums`` with the sparse masked-LM head, AdamW step), on synthetic token ids at the 20% mask rate.

    python benchmarks/pretrain_throughput.py --preset small --seq-len 2048 --batch 2 --dtype fp32 bf16
    python benchmarks/pretrain_throughput.py --preset base --device cuda --batch 16 --dtype bf16 --compile both

FLOPs per step are counted by PyTorch's FlopCounterMode on the step itself (matmuls, bmm, einsum; the
elementwise work is not counted, as usual for MFU). MFU = achieved FLOP/s / peak FLOP/s, where the peak is
the vendor's dense bf16 figure for known GPUs, or, on CPU, the *measured* throughput of a large square
matmul in the same dtype on the same threads (so CPU "MFU" means "share of this machine's GEMM speed").
One JSON line per configuration goes to stdout and is appended to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from contextlib import nullcontext

import torch

import avey_b  # noqa: F401
from avey_b import AveyBForMaskedLM
from avey_b.benchmarking.timing import gemm_rate, measure
from avey_b.model import presets
from avey_b.training.build import build_optimizer
from avey_b.training.config import load_config
from avey_b.training.mlm_eval import mlm_sums
from avey_b.training.monitor import peak_flops
from avey_b.utils.counting import count_flops
from avey_b.utils.records import Envelope, append_jsonl


def run(args, dtype_name: str, compiled: bool) -> dict:
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = presets.get(args.preset, sparse_prediction=True, **json.loads(args.overrides))
    model = AveyBForMaskedLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    train_cfg = load_config(None, ["train.max_steps=1"])
    opt = build_optimizer(model, train_cfg)
    fwd = torch.compile(model) if compiled else model
    bf16 = dtype_name == "bf16"
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, cfg.vocab_size, (args.batch, args.seq_len), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.2, ids, -100)
    batch = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
             "labels": labels.to(device)}

    def step():
        loss, n, _ = mlm_sums(fwd, batch, autocast)
        (loss / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    flops = count_flops(lambda: mlm_sums(model, batch, autocast)[0].backward())
    opt.zero_grad(set_to_none=True)
    timed = measure(step, device=device, warmup=args.warmup, repeats=args.repeats, min_repeats=args.repeats)
    med = timed.median_s
    tokens = args.batch * args.seq_len
    peak = peak_flops(device, None)
    peak_kind = "vendor bf16 dense"
    if peak is None:
        peak = gemm_rate(torch.bfloat16 if bf16 else torch.float32, device=device)
        peak_kind = f"measured {'bf16' if bf16 else 'fp32'} 2048^3 GEMM"
    return {
        "preset": args.preset, "overrides": json.loads(args.overrides), "params_M": round(n_params / 1e6, 2),
        "device": device.type, "threads": torch.get_num_threads(), "dtype": dtype_name, "compiled": compiled,
        "batch": args.batch,
        "seq_len": args.seq_len, "step_s_median": round(med, 4), "step_s_min": round(timed.min_s, 4),
        "step_s_max": round(timed.max_s, 4), "tokens_per_s": round(tokens / med, 1),
        "tflops_per_step": round(flops / 1e12, 4), "achieved_tflops": round(flops / med / 1e12, 4),
        "peak_tflops": round(peak / 1e12, 3), "peak_kind": peak_kind, "mfu": round(flops / med / peak, 4),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--overrides", default="{}", help='JSON, e.g. \'{"num_hidden_layers": 4}\'')
    p.add_argument("--device", default="cpu")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--dtype", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--compile", default="no", choices=["no", "yes", "both"])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="append JSON lines here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    modes = {"no": [False], "yes": [True], "both": [False, True]}[args.compile]
    for dtype in args.dtype:
        for compiled in modes:
            env = Envelope.begin()
            append_jsonl(args.out, {**run(args, dtype, compiled), **env.end()}, echo=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
