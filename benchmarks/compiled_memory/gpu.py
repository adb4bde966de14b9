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
import statistics
from functools import partial

import torch

from avey_b import AveyBModel
from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import measure, timed_call
from avey_b.model import presets
from avey_b.utils.records import Envelope, append_jsonl


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
    facts = {"model": "avey-b-base",
             "batch_size": args.batch_size, "dtype": "bfloat16", "ids": "cl100k_base of " + args.text,
             "processor_chunk_tokens": model.config.execution.processor_chunk_tokens_for("cuda")}
    with torch.no_grad():
        for length in args.lengths:
            ids, _, ids_facts = text.batch(model.config.vocab_size, args.batch_size, length, device)
            outs = {}
            for mode, forward in (("eager", model), ("compiled", compiled)):
                call = partial(forward, ids)
                env = Envelope.begin()
                warm, _, _ = timed_call(call, device=device)  # warm-up (compiled: compiles at the first length)
                # the output, and the peak memory above the allocation before the forward
                _, peak, out = timed_call(lambda: call().last_hidden_state, device=device)  # noqa: B023 (called here)
                times = measure(call, device=device, warmup=0, repeats=args.repeats, min_repeats=args.repeats).times_s
                outs[mode] = out.float().flatten()
                row = {**facts, **ids_facts, "mode": mode, "tokens": length, "peak_gb": round(peak / 1e9, 2),
                       "median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
                       "warmup_s": round(warm, 1), **env.end()}
                append_jsonl(args.out, row, echo=True)
                del out
            cosine = torch.nn.functional.cosine_similarity(outs["eager"], outs["compiled"], dim=0).item()
            append_jsonl(args.out, {"tokens": length, "eager_vs_compiled_cosine": round(cosine, 6)})
            print(f"{length} tokens: eager vs compiled cosine {cosine:.6f}", flush=True)
            del outs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
