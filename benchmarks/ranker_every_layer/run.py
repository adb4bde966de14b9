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
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

from avey_b import AveyBModel
from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import gemm_rate, timed_call
from avey_b.model import presets
from avey_b.utils.device import cpu_model
from avey_b.utils.records import append_jsonl, utc_timestamp

PLACEMENTS = ("embeddings", "every_layer")


def commit() -> str:
    here = Path(__file__).resolve().parent
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True,
                           text=True).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"


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
    machine = {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(), "threads": args.threads,
               "torch": torch.__version__, "commit": commit()}
    print(json.dumps(machine), flush=True)
    for shape in args.shapes:
        pair = models(shape)
        vocab = pair["embeddings"].config.vocab_size
        for n in args.lengths:
            ids, mask, facts = text.batch(vocab, 1, n)

            def forward(placement, pair=pair, ids=ids, mask=mask):
                with torch.no_grad():
                    return pair[placement](input_ids=ids, attention_mask=mask).last_hidden_state

            load0, g0 = os.getloadavg(), gemm_rate(torch.float32)
            for placement in PLACEMENTS:  # warm-up
                forward(placement)
            times: dict[str, list[float]] = {pl: [] for pl in PLACEMENTS}
            cpu: dict[str, list[float]] = {pl: [] for pl in PLACEMENTS}
            for _ in range(args.rounds):
                for placement in PLACEMENTS:
                    c0 = time.process_time()
                    seconds, _, _ = timed_call(lambda placement=placement: forward(placement))
                    cpu[placement].append(time.process_time() - c0)
                    times[placement].append(seconds)
            ratios = [b / a for a, b in zip(times["embeddings"], times["every_layer"], strict=True)]
            cpu_ratios = [b / a for a, b in zip(cpu["embeddings"], cpu["every_layer"], strict=True)]
            rec = {"shape_d_L_S_k": shape, "length": n, "ids": text.source, **facts, "seconds": times,
                   "ratio_every_layer_over_embeddings": ratios, "ratio_median": statistics.median(ratios),
                   "cpu_seconds": cpu, "cpu_ratio_median": statistics.median(cpu_ratios),
                   "gemm_fp32_gflop_s": [round(g0 / 1e9, 1), round(gemm_rate(torch.float32) / 1e9, 1)],
                   "load_avg": [list(load0), list(os.getloadavg())], **machine,
                   "time": utc_timestamp()}
            append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
