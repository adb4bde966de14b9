"""Peak memory and time of one forward at 16K ... 1M tokens (small config, batch 1, CPU), fp32 and bf16 autocast.

    python benchmarks/ranker_memory/run.py --lengths 16384 65536 262144 1048576 --dtypes fp32 bf16 --threads 2

The ranker's similarity working set is capped (``ranker_memory_mb``, 256 MB by default): the query block shrinks
and the candidates are tiled as ``N`` grows (the plan is printed per length). Everything else the forward holds
is linear in ``N``, so peak memory should be ``~cap + c·N``. Peak memory is the process RSS above the level just
before the forward, sampled every millisecond; the 2048³ GEMM rate of each precision is measured in the same
process for context.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from avey_b import AveyBModel, presets
from avey_b.benchmarking.timing import PeakRSSSampler, gemm_rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[16384, 65536, 262144, 1048576])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results.jsonl"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {platform.node()} {platform.machine()}, torch {torch.__version__}, {args.threads} threads, "
          f"load average {os.getloadavg()}", flush=True)
    print("# GEMM 2048^3:", {d: f"{gemm_rate(torch.float32 if d == 'fp32' else torch.bfloat16) / 1e9:.0f} GFLOP/s"
                             for d in args.dtypes}, flush=True)
    torch.manual_seed(0)
    config = presets.small(vocab_size=4096)
    model = AveyBModel(config).eval()
    S = config.split_size
    for n_tokens in args.lengths:
        ids = torch.randint(10, 4096, (1, n_tokens), generator=torch.Generator().manual_seed(n_tokens))
        blk, tile = model.ranker.plan(1, n_tokens // S, S)
        for dtype in args.dtypes:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                model(ids[:, :2048])  # warm-up
                with PeakRSSSampler() as mem:
                    t = time.perf_counter()
                    model(ids)
                    seconds = time.perf_counter() - t
            rec = {"tokens": n_tokens, "dtype": dtype, "seconds": round(seconds, 3),
                   "peak_mb": round((mem.peak - mem.baseline) / 2**20, 1), "query_splits_per_block": blk,
                   "candidate_splits_per_tile": tile, "threads": args.threads, "load": os.getloadavg(),
                   "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            print(json.dumps(rec), flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
