"""Peak GPU memory and time of Avey-B base's forward, eager vs ``torch.compile``, in the paper's efficiency setting:
batch 8, bf16 weights, real English text (cl100k_base ids renumbered into the vocabulary,
:mod:`avey_b.benchmarking.inputs`), one process, the two modes alternated at each length.

    PYTHONPATH=. python benchmarks/compiled_memory/gpu.py --text wiki.valid.txt --out results-gpu.jsonl

Peak memory is ``torch.cuda.max_memory_allocated`` over one forward, reset just before it, above what was allocated
before it (the weights and the inputs). The compiled model is compiled once (``dynamic=True``): its chunk graph
serves every length. Outputs of the two modes are compared at every length (bf16: cosine of the flattened outputs).
Each row is appended to ``--out`` as soon as it is measured, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from avey_b import AveyBModel
from avey_b.benchmarking.inputs import text_ids
from avey_b.model import presets


def measure(forward, ids, repeats: int) -> tuple[torch.Tensor, float, list[float]]:
    """The output, the peak memory above the allocation before the forward (GB), the times of ``repeats`` calls."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = forward(ids).last_hidden_state
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - before) / 1e9
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        forward(ids)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return out, peak, times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", required=True, help="a plain-text file (WikiText-2 valid in the recorded run)")
    p.add_argument("--lengths", type=int, nargs="+", default=[8192, 32768, 98304])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda")
    model = AveyBModel(presets.base()).to(device, torch.bfloat16).eval()
    compiled = torch.compile(model, dynamic=True)
    text = text_ids([args.text])
    facts = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "model": "avey-b-base",
             "batch_size": args.batch_size, "dtype": "bfloat16", "ids": "cl100k_base of " + args.text,
             "chunk_tokens": model.config.execution.chunk_tokens_for("cuda")}
    with torch.no_grad():
        for length in args.lengths:
            ids, _, ids_facts = text.batch(model.config.vocab_size, args.batch_size, length, device)
            outs = {}
            for mode, forward in (("eager", model), ("compiled", compiled)):
                t0 = time.perf_counter()
                forward(ids)  # warm-up (compiled: compiles at the first length)
                torch.cuda.synchronize()
                warm = time.perf_counter() - t0
                out, peak, times = measure(forward, ids, args.repeats)
                outs[mode] = out.float().flatten()
                row = {**facts, **ids_facts, "mode": mode, "tokens": length, "peak_gb": round(peak, 2),
                       "median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
                       "warmup_s": round(warm, 1)}
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
                del out
            cosine = torch.nn.functional.cosine_similarity(outs["eager"], outs["compiled"], dim=0).item()
            with open(args.out, "a") as f:
                f.write(json.dumps({"tokens": length, "eager_vs_compiled_cosine": round(cosine, 6)}) + "\n")
            print(f"{length} tokens: eager vs compiled cosine {cosine:.6f}", flush=True)
            del outs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
