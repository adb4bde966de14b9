"""Split-level unpadding on a batch of mixed lengths: the padded batch's work (every split of every row, what this
library did before) against the unpadded forward (only splits holding a real token; each row ranked over its own
splits), alternated in one process on the same weights and inputs.

    python benchmarks/unpadding/run.py --presets small base --dtypes fp32 bf16 --threads 2 --repeats 3

"before" is the padded batch run without its attention mask: every split of every row goes through the ranker
and all L layers — the work the previous code did for this batch (it also applied the masks, so it was slightly
slower still). "after" is the same batch with its mask. Peak memory is the process RSS above the level just
before the call (sampled every millisecond). Each side's FLOPs are counted (FlopCounterMode) and its utilization
is against the same-dtype 2048³ GEMM rate measured in the same process before the runs and after each dtype.
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from avey_b import AveyBModel
from avey_b.benchmarking.timing import gemm_rate, timed_call
from avey_b.model import presets
from avey_b.utils.counting import count_flops
from avey_b.utils.records import Envelope, append_jsonl, cpu_model, load_average

LENGTHS = [128, 384, 640, 896, 1152, 2048, 6144, 16384]  # long-tailed: median 1,024, max 16,384


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", default=["small"])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results.jsonl"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {cpu_model()}, torch {torch.__version__}, {args.threads} threads, load average {load_average()}")
    print(f"# lengths {LENGTHS}: {sum(LENGTHS):,} real tokens in a {len(LENGTHS)} x {max(LENGTHS):,} batch "
          f"({len(LENGTHS) * max(LENGTHS) / sum(LENGTHS):.2f}x padding)")
    rates = {d: gemm_rate(torch.float32 if d == "fp32" else torch.bfloat16) for d in args.dtypes}
    print("# GEMM 2048^3 before:", {d: f"{r / 1e9:.0f} GFLOP/s" for d, r in rates.items()})
    for preset in args.presets:
        torch.manual_seed(0)
        model = AveyBModel(presets.get(preset, vocab_size=4096)).eval()
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(10, 4096, (len(LENGTHS), max(LENGTHS)), generator=g)
        mask = torch.zeros_like(ids)
        for row, n in enumerate(LENGTHS):
            mask[row, :n] = 1
        for dtype in args.dtypes:
            ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16" else torch.no_grad
            sides = {"before": lambda m=model, i=ids: m(i),
                     "after": lambda m=model, i=ids, a=mask: m(i, attention_mask=a)}
            res, env = {s: [] for s in sides}, Envelope.begin()
            with torch.no_grad():
                with ctx():
                    model(ids[:, :512], attention_mask=mask[:, :512])  # warm-up
                    for _ in range(args.repeats):
                        for side, fn in sides.items():  # alternated
                            res[side].append(timed_call(fn)[:2])  # (seconds, peak bytes above the start)
                    flops = {side: count_flops(fn) for side, fn in sides.items()}
            rate = gemm_rate(torch.float32 if dtype == "fp32" else torch.bfloat16)
            rec = {"preset": preset, "dtype": dtype, "threads": args.threads, "lengths": LENGTHS,
                   "gemm_gflop_per_s": [round(rates[dtype] / 1e9, 1), round(rate / 1e9, 1)], **env.end()}
            for side, runs in res.items():
                rec[f"{side}_s"] = statistics.median(t for t, _ in runs)
                rec[f"{side}_peak_mb"] = max((m or 0) for _, m in runs) / 2**20
                rec[f"{side}_flops"] = flops[side]  # the work each side runs: the padded batch does more
                rec[f"{side}_utilization"] = round(flops[side] / rec[f"{side}_s"] / ((rates[dtype] + rate) / 2), 3)
            rec["speedup"] = rec["before_s"] / rec["after_s"]
            append_jsonl(args.out, rec, echo=True)
    rates_after = {d: gemm_rate(torch.float32 if d == "fp32" else torch.bfloat16) for d in args.dtypes}
    print("# GEMM 2048^3 after:", {d: f"{r / 1e9:.0f} GFLOP/s" for d, r in rates_after.items()})


if __name__ == "__main__":
    main()
