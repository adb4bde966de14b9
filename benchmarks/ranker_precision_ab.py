"""A/B of the ranker's split-selection precision in one process (issue: core model, benchmarks/results/README.md).

Builds one ``presets.small()`` backbone and alternates exact (float32) and bf16 selection forward by forward,
so both modes see the same machine load; prints the median seconds per fp32 forward of each.

    python benchmarks/ranker_precision_ab.py --lengths 4096 16384 --repeats 4
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from avey_b import AveyBModel, presets


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = AveyBModel(presets.get("small")).eval()
    for n in args.lengths:
        ids = torch.randint(0, model.config.vocab_size, (1, n))
        times: dict[str, list[float]] = {"exact": [], "bfloat16": []}
        for rep in range(args.repeats):
            for mode, runs in times.items():
                model.ranker.low_precision = mode == "bfloat16"  # what ranker_selection_precision sets
                with torch.no_grad():
                    if rep == 0:
                        model(ids)  # warm-up
                    t0 = time.perf_counter()
                    model(ids)
                    runs.append(time.perf_counter() - t0)
        med = {mode: statistics.median(runs) for mode, runs in times.items()}
        print(f"N={n}: exact {med['exact']:.3f} s, bf16 selection {med['bfloat16']:.3f} s "
              f"({med['exact'] / med['bfloat16']:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
