"""The cost of the ranker at every layer (``ranker_placement="every_layer"``) against the default (once, on the
embeddings): one forward each, alternated in one process. The paper's appendix "Ablation Study" reports 5.9× slower.

    python -m avey_b.benchmarking.english_text --data ../shared/data --out runs/english.txt
    python benchmarks/ranker_every_layer/run.py --text runs/english.txt

For each shape (``--shapes``, ``d/L/S/k``; default the quickstart's 256/4/16/3 and the CPU preset's 256/8/64/3) the
two placements share their weights (every layer's compressor ``P_ℓ`` is the default model's ``P``) and get the
same real-text ids (cl100k, :mod:`avey_b.benchmarking.inputs`). At each length, after a warm-up of each, they run
in turns — default, every layer, default, every layer, ... — one timed forward per turn (``timed_call``), with an
fp32 GEMM timed in the same process before and after (the machine's state during the rounds) and the load average
read before and after. Each turn's process CPU time (all threads) is recorded beside its wall time: on a CPU
shared with other jobs, wall time mostly measures the neighbours, CPU time the work done. Prints one JSON line
per (shape, length) and appends it to ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial

import torch

from avey_b import AveyBModel
from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import alternate, gemm_rate
from avey_b.model import presets
from avey_b.utils.records import Envelope, append_jsonl

PLACEMENTS = ("embeddings", "every_layer")


def models(shape: str) -> dict[str, AveyBModel]:
    """The two placements of one ``d/L/S/k`` shape, with the same weights (P_ℓ = P for every layer)."""
    d, L, S, k = (int(v) for v in shape.split("/"))
    overrides = {"hidden_size": d, "num_hidden_layers": L, "split_size": S, "num_retrieved_splits": k}
    torch.manual_seed(0)
    default = AveyBModel(presets.small(**overrides)).eval()
    every = AveyBModel(presets.small(**overrides, ranker_placement="every_layer")).eval()
    state = {k: v for k, v in default.state_dict().items() if k != "compressor.weight"}
    state |= {f"compressors.{i}.weight": default.compressor.weight for i in range(L)}
    every.load_state_dict(state, strict=True)
    return {"embeddings": default, "every_layer": every}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", nargs="+", required=True, help="text files (see avey_b/benchmarking/english_text.py)")
    p.add_argument("--shapes", nargs="+", default=["256/4/16/3", "256/8/64/3"], help="d/L/S/k")
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="benchmarks/ranker_every_layer/results.jsonl")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    text = text_ids(args.text)
    for shape in args.shapes:
        pair = models(shape)
        vocab = pair["embeddings"].config.vocab_size
        for n in args.lengths:
            ids, mask, facts = text.batch(vocab, 1, n)

            def forward(placement, pair=pair, ids=ids, mask=mask):
                with torch.no_grad():
                    return pair[placement](input_ids=ids, attention_mask=mask).last_hidden_state

            env, g0 = Envelope.begin(), gemm_rate(torch.float32)
            for placement in PLACEMENTS:  # warm-up
                forward(placement)
            timed = alternate({pl: partial(forward, pl) for pl in PLACEMENTS}, args.rounds)
            times = {pl: t.times_s for pl, t in timed.items()}
            cpu = {pl: t.cpu_times_s for pl, t in timed.items()}
            ratios = [b / a for a, b in zip(times["embeddings"], times["every_layer"], strict=True)]
            cpu_ratios = [b / a for a, b in zip(cpu["embeddings"], cpu["every_layer"], strict=True)]
            rec = {"shape_d_L_S_k": shape, "length": n, "ids": text.source, **facts, "seconds": times,
                   "ratio_every_layer_over_embeddings": ratios, "ratio_median": statistics.median(ratios),
                   "cpu_seconds": cpu, "cpu_ratio_median": statistics.median(cpu_ratios),
                   "gemm_fp32_gflop_s": [round(g0 / 1e9, 1), round(gemm_rate(torch.float32) / 1e9, 1)],
                   "threads": args.threads, **env.end()}
            append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
