"""Peak memory and time of one forward at 16K ... 1M tokens (small config, batch 1, CPU), fp32 and bf16 autocast.

    python benchmarks/ranker_memory/run.py --lengths 16384 65536 262144 1048576 --dtypes fp32 bf16 --threads 2

The ranker's similarity working set is one cache-sized tile (within ``ranker_memory_mb``), reused for every step
(the plan is recorded per length and precision). Everything else the forward holds is linear in ``N``, so peak
memory should be ``~constant + c·N``. Peak memory is the process RSS above the level just before the forward,
sampled every millisecond (:func:`avey_b.benchmarking.timing.timed_call`, which first returns freed heap to the
system). FLOPs: the processor's per-token FLOPs counted at 4K tokens (FlopCounterMode) times ``N``, plus the
ranker's MaxSim GEMMs (every split against itself and the earlier ones); utilization is against the same-dtype
2048³ GEMM rate measured in the same process right before and after each point.
"""

from __future__ import annotations

import argparse
import os

import torch

from avey_b import AveyBModel
from avey_b.benchmarking.timing import gemm_rate, timed_call
from avey_b.model import presets
from avey_b.model.ranker_fast import plan
from avey_b.utils.counting import count_flops
from avey_b.utils.records import Envelope, append_jsonl, cpu_model, load_average


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[16384, 65536, 262144, 1048576])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results.jsonl"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {cpu_model()}, torch {torch.__version__}, {args.threads} threads, load average {load_average()}",
          flush=True)
    print("# GEMM 2048^3:", {d: f"{gemm_rate(torch.float32 if d == 'fp32' else torch.bfloat16) / 1e9:.0f} GFLOP/s"
                             for d in args.dtypes}, flush=True)
    torch.manual_seed(0)
    config = presets.small(vocab_size=4096)
    model = AveyBModel(config).eval()
    S, d = config.split_size, config.hidden_size

    def ranker_flops(n_tokens: int) -> int:  # MaxSim GEMMs: every split against itself and every earlier split
        n = n_tokens // S
        return n * (n + 1) // 2 * S * S * 2 * d

    probe = torch.randint(10, 4096, (1, 4096), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        per_token = (count_flops(lambda: model(probe)) - ranker_flops(4096)) / 4096  # the linear part
    for n_tokens in args.lengths:
        ids = torch.randint(10, 4096, (1, n_tokens), generator=torch.Generator().manual_seed(n_tokens))
        flops = per_token * n_tokens + ranker_flops(n_tokens)
        for dtype in args.dtypes:
            torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
            blk, tile = plan(model.config.execution, 1, n_tokens // S, S, torch_dtype.itemsize)
            env, g0 = Envelope.begin(), gemm_rate(torch_dtype)
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                model(ids[:, :2048])  # warm-up
                seconds, peak, _ = timed_call(lambda ids=ids: model(ids))
            g1 = gemm_rate(torch_dtype)
            rec = {"tokens": n_tokens, "dtype": dtype, "seconds": round(seconds, 3),
                   "peak_mb": None if peak is None else round(peak / 2**20, 1), "query_splits_per_block": blk,
                   "candidate_splits_per_tile": tile, "flops": int(flops),
                   "utilization": round(flops / seconds / ((g0 + g1) / 2), 3),
                   "gemm_gflop_per_s": [round(g0 / 1e9, 1), round(g1 / 1e9, 1)], "threads": args.threads,
                   **env.end()}
            append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
