"""Avey-B base (eager and compiled) against ModernBERT-base at its fastest, on one GPU, alternated in one process.

    PYTHONPATH=. python benchmarks/efficiency_gpu/versus.py --text runs/efficiency_gpu/english.txt \\
        --out benchmarks/efficiency_gpu/versus/results.jsonl
    PYTHONPATH=. python benchmarks/efficiency_gpu/versus.py --text ... --out /tmp/v.jsonl --dry-run   # CPU, tiny

The paper's efficiency setting (§5.4): batch 8, bf16 weights, real English text (cl100k ids renumbered into each
model's vocabulary, :mod:`avey_b.benchmarking.inputs`), 2K, 8K and 96K tokens by default (the compilations at
each length take most of a 5-minute call). At each length, in one process and on the
same ids, it times in turns (A, B, C, D, A, B, ...):

* ``avey-b-base eager``;
* ``avey-b-base compiled``: ``torch.compile(model, dynamic=True)``, built once (the graph after the split count's
  ``.item()`` break is still specialised per length, so each length's first call compiles);
* ``modernbert-base flex_attention``: FlexAttention's kernel compiled for this length alone, with static shapes
  (:func:`avey_b.benchmarking.attention.static_shapes`; a dynamic-shape recompile was measured 1.7× slower at 8K);
* ``modernbert-base sdpa`` (and ``flash_attention_2`` where flash-attn is installed; recorded unavailable otherwise).

Per model and length: the first call's seconds (compilation included), its peak memory (``torch.cuda``'s peak
allocation during that call above what was allocated before it: the activations, not the weights), the seconds of
every round, and out-of-memory as data (that model's longer lengths are then not run). Each length's line holds the
ratios of each ModernBERT variant over each Avey-B variant (per round and median), the fastest ModernBERT variant,
and the agreement of outputs (flex vs sdpa, compiled vs eager: max absolute difference and cosine of the flattened
last hidden states, in bf16). A line is appended to ``--out`` as soon as its length is done, so a run cut short
keeps what it measured; ``--budget-s`` stops before a length that would not finish in time (recorded as such).

``--dry-run``: the same code path on the CPU with tiny models (avey-b-tiny, modernbert-tiny), short lengths, batch 1,
float32 and the ``eager`` compile backend for Avey-B — a check of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from avey_b.benchmarking.attention import static_shapes, unavailable_reason
from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import alternate, timed_call
from avey_b.utils.device import is_oom
from avey_b.utils.model_spec import build_config, random_model
from avey_b.utils.records import Envelope, append_jsonl

ATTENTIONS = ("flex_attention", "sdpa", "flash_attention_2")


def build(avey: str, baseline: str, device: torch.device, dtype: torch.dtype, backend: str):
    """``{name: (config, callable model)}`` and ``{name: reason}`` for those that cannot run here."""
    torch.manual_seed(0)
    avey_config = build_config(avey)
    eager = random_model(avey_config).to(device, dtype)
    models = {f"{avey} eager": (avey_config, eager),
              f"{avey} compiled": (avey_config, torch.compile(eager, dynamic=True, backend=backend))}
    skipped = {}
    weights = None
    for attn in ATTENTIONS:
        name = f"{baseline} {attn}"
        reason = unavailable_reason(attn, device)
        if reason:
            skipped[name] = reason
            continue
        config = build_config(baseline)
        torch.manual_seed(0)
        model = random_model(config, attn_implementation=attn)
        if weights is None:
            weights = model.state_dict()
        else:
            model.load_state_dict(weights)
        models[name] = (config, model.to(device, dtype))
    return models, skipped


def agreement(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Max absolute difference and cosine of two outputs, flattened, in float32."""
    a, b = a.float().flatten(), b.float().flatten()
    return {"max_abs_diff": float((a - b).abs().max()),
            "cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0))}


def next_length_seconds(previous: dict, n: int, rounds: int, avey: str) -> float:
    """A generous estimate of the seconds length ``n`` will take, from the last length's record: each model's
    ``rounds + 1`` calls scaled by the length ratio (squared for the Transformers, whose global attention is
    quadratic; linear for Avey-B), plus the per-length compilation seen there (first call minus a call)."""
    scale = n / previous["length"]
    total = 0.0
    for name, median in previous["median_s"].items():
        total += (rounds + 1) * median * (scale if name.startswith(avey) else scale**2)
        if "flex_attention" in name or "compiled" in name:  # compiled anew for every length (Avey-B: its
            total += max(0.0, previous["first_call_s"][name] - median)  # graph after the split count's break)
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", nargs="+", required=True, help="text files (see avey_b/benchmarking/english_text.py)")
    p.add_argument("--out", required=True, help="JSONL file the lines are appended to")
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192, 98304],
                   help="increasing; 32768 fits a second call (--lengths 32768) if the first leaves no time")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=270.0,
                   help="stop before a length whose estimated time would pass this many seconds from the start")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny models and lengths (a check of the script)")
    args = p.parse_args()
    start = time.perf_counter()
    if args.dry_run:
        device, dtype, backend = torch.device("cpu"), torch.float32, "eager"
        avey, baseline = "avey-b-tiny", "modernbert-tiny"
        lengths, batch = [128, 256], 1
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: this is the GPU benchmark (--dry-run checks it on the CPU)")
        device, dtype, backend = torch.device("cuda"), torch.bfloat16, "inductor"
        avey, baseline = "avey-b-base", "modernbert-base"
        lengths, batch = args.lengths, args.batch_size
    text = text_ids(args.text)
    models, skipped = build(avey, baseline, device, dtype, backend)
    facts = {"device": device.type, "dtype": str(dtype).removeprefix("torch."), "batch_size": batch, "ids": text.source,
             "dry_run": args.dry_run, "unavailable": skipped}
    print(facts, flush=True)
    stopped: dict[str, str] = {}  # model -> why its longer lengths are not run
    previous: dict | None = None  # the last length's record
    for n in lengths:
        elapsed = time.perf_counter() - start
        estimate = next_length_seconds(previous, n, args.rounds, avey) if previous else 0.0
        env = Envelope.begin()
        if elapsed + estimate > args.budget_s:
            append_jsonl(args.out, {**facts, "length": n, "status": "not run",
                                    "reason": f"budget: {elapsed:.0f} s spent, about {estimate:.0f} s more needed, "
                                              f"--budget-s {args.budget_s:.0f}", **env.end()}, echo=True)
            continue
        first_call, peak, outputs, status, calls = {}, {}, {}, {}, {}
        with static_shapes(reset=False):  # flex_attention gets a kernel for this length; Avey-B keeps its graph
            for name, (config, model) in models.items():
                if name in stopped:
                    status[name] = stopped[name]
                    continue
                ids, mask, _ = text.batch(config.vocab_size, batch, n, device)

                def forward(model=model, ids=ids, mask=mask):
                    with torch.no_grad():
                        return model(input_ids=ids, attention_mask=mask).last_hidden_state

                try:
                    seconds, mem, out = timed_call(forward, device=device)
                except Exception as e:  # out of memory is data; anything else is a bug
                    if not is_oom(e):
                        raise
                    stopped[name] = status[name] = f"oom at {n}"
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                first_call[name], peak[name], status[name] = seconds, mem, "ok"
                outputs[name], calls[name] = out.detach(), forward
            ran = list(calls)
            timed = alternate(calls, args.rounds, device=device)
        seconds = {name: timed[name].times_s for name in ran}
        median = {name: statistics.median(s) for name, s in seconds.items()}
        aveys = [m for m in ran if m.startswith(avey)]
        bases = [m for m in ran if m.startswith(baseline)]
        ratios = {f"{b} / {a}": statistics.median(tb / ta for ta, tb in zip(seconds[a], seconds[b], strict=True))
                  for a in aveys for b in bases}
        agree = {}
        for x, y in ((f"{avey} compiled", f"{avey} eager"), (f"{baseline} flex_attention", f"{baseline} sdpa")):
            if x in outputs and y in outputs:
                agree[f"{x} vs {y}"] = agreement(outputs[x], outputs[y])
        rec = {**facts, "length": n, "status": status, "rounds": args.rounds, "seconds": seconds,
               "median_s": median, "first_call_s": first_call, "peak_mem_bytes": peak,
               "fastest_baseline": min(bases, key=median.get) if bases else None, "ratio_median": ratios,
               "agreement": agree, **env.end()}
        append_jsonl(args.out, rec, echo=True)
        del outputs
        previous = rec


if __name__ == "__main__":
    main()
