"""Avey-B base against ModernBERT-base, alternated in one process: the ratio the README quotes.

    python benchmarks/efficiency_cpu/alternated.py --text runs/efficiency_cpu/english.txt --lengths 4096 8192

``avey-b bench run`` times one model's series after another (minutes apart on a machine that drifts); this times
the two models in turns — A, B, A, B, ... — at each length, on the same real-text ids (cl100k, renumbered into
each model's vocabulary), one forward per turn after a warm-up of each, with an fp32 GEMM timed in the same
process before and after (the machine's state during the rounds; the forwards' FLOP utilization is in the
``bench run`` records). Prints one JSON line per length (every turn's seconds, the per-round ratios and their
median) and appends it to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import gemm_rate, timed_call
from avey_b.utils.model_spec import build_config, random_model
from avey_b.utils.records import append_jsonl


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", nargs="+", required=True, help="text files (see benchmarks/english_text.py)")
    p.add_argument("--models", nargs=2, default=["avey-b-base", "modernbert-base"], metavar=("A", "B"))
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="benchmarks/efficiency_cpu/alternated.jsonl")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    text = text_ids(args.text)
    models = {}
    for spec in args.models:
        config = build_config(spec)
        models[spec] = (config, random_model(config, attn_implementation="sdpa"))  # ignored for Avey-B
    for n in args.lengths:
        inputs = {s: text.batch(c.vocab_size, 1, n)[:2] for s, (c, _) in models.items()}

        def forward(spec, inputs=inputs):
            ids, mask = inputs[spec]
            with torch.no_grad():
                return models[spec][1](input_ids=ids, attention_mask=mask)

        g0 = gemm_rate(torch.float32)
        for spec in args.models:  # warm-up
            forward(spec)
        times: dict[str, list[float]] = {s: [] for s in args.models}
        for _ in range(args.rounds):
            for spec in args.models:
                seconds, _, _ = timed_call(lambda spec=spec: forward(spec))
                times[spec].append(seconds)
        a, b = args.models
        ratios = [tb / ta for ta, tb in zip(times[a], times[b], strict=True)]
        rec = {"length": n, "models": args.models, "ids": text.source, "threads": args.threads,
               "seconds": times, "ratio_b_over_a": ratios, "ratio_median": statistics.median(ratios),
               "gemm_fp32_flop_s": (g0 + gemm_rate(torch.float32)) / 2, "torch": torch.__version__,
               "load_average": os.getloadavg(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
