"""Forward time, FLOP utilization and ranker share of Avey-B on this machine, against a GEMM measured in the same
process at the same time — the figures that cannot flatter us.

    python benchmarks/roofline/run.py --presets small --lengths 1024 4096 16384 65536 --dtypes fp32 bf16
    python benchmarks/roofline/run.py --presets small --lengths 16384 65536 --ab before-after   # A/B, alternated

Per point (preset, length, precision, mode): one forward of a batch-1 input of random token ids through a model
with random weights (seed 0), no gradients. Reported:

* ``seconds`` (the fastest of ``--repeats``), ``tokens_per_s``;
* ``flops``: the matrix products the forward actually runs (PyTorch's FlopCounterMode: ranker GEMMs, enricher,
  fuser, mixing, compressor; elementwise work is not counted), and ``utilization`` = achieved FLOP/s over the
  same-dtype 2048³ GEMM rate measured right before and right after the point (their mean; both recorded);
* ``ranker_seconds`` / ``ranker_share`` / ``ranker_utilization``: the selection alone (the ranker's choice on
  the same embeddings), timed the same way, with its own FLOPs;
* ``peak_mb``: process RSS above its level just before the forward (sampled every millisecond; indicative).

``--ab`` runs two setups of the same model on the same inputs, alternating them repeat by repeat, and prints the
ratio: ``before-after`` is the previous code path (similarity blocks as large as ``ranker_memory_mb`` allows,
processor rows in 64K-token chunks) against the current defaults; ``selection-precision`` is the default exact
(fp32) choice of splits against ``ranker_selection_precision="bfloat16"`` (under bf16 autocast both choose in
bf16, so run it with ``--dtypes fp32``). Records go to ``results.jsonl`` next to this
file with the command, machine, thread count and load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from functools import partial
from pathlib import Path

import torch

from avey_b import AveyBModel
from avey_b.benchmarking.timing import PeakRSSSampler, alternate, gemm_rate, measure
from avey_b.model import presets
from avey_b.model.execution import ExecutionSettings
from avey_b.utils.counting import count_flops
from avey_b.utils.device import autocast
from avey_b.utils.records import Envelope, append_jsonl, cpu_model, load_average

HERE = Path(__file__).resolve().parent
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

# setup name -> the model's execution settings in it (by name; the others at their defaults)
DEFAULT = ExecutionSettings()
EXECUTION = {
    # the previous code path: similarity tiles as large as the memory cap, processor rows in 64K-token chunks
    "before": {"tile_bytes": dict.fromkeys(DEFAULT.tile_bytes, 2**62), "processor_chunk_tokens": 65536},
    "after": {},
    "bf16-select": {"ranker_selection_precision": "bfloat16"},
}


def set_up(model, setup: str) -> None:
    """Set the model's execution settings to those of ``setup``."""
    for name, value in {**dataclasses.asdict(DEFAULT), **EXECUTION[setup]}.items():
        setattr(model.config, name, value)


AB = {"before-after": ("before", "after"),  # the tiled ranker and 4K-token processor chunks vs the code before
      "selection-precision": ("after", "bf16-select")}  # exact (default) vs bf16 choice of splits


def build(preset: str, mode: str) -> tuple[AveyBModel, object]:
    torch.manual_seed(0)
    model = AveyBModel(presets.get(preset)).eval()
    fwd = torch.compile(model, dynamic=True) if mode == "compiled" else model
    return model, fwd


def embedded(model, ids, dtype_name: str) -> torch.Tensor:
    """The ranker's input for ``ids``: embeddings as (1, n, S, d), in bf16 for bf16 points (as under autocast)."""
    S = model.config.split_size
    with torch.no_grad():
        emb = model.embed_tokens(ids)
    n = -(-ids.shape[1] // S)
    x4 = torch.nn.functional.pad(emb, (0, 0, 0, n * S - ids.shape[1])).view(1, n, S, -1)
    return x4.to(DTYPES[dtype_name])


def point(model, fwd, ids, dtype_name: str, repeats: int) -> dict:
    dtype = DTYPES[dtype_name]
    ctx = partial(autocast, torch.device("cpu"), dtype_name == "bf16")
    x4 = embedded(model, ids, dtype_name)
    with torch.no_grad():

        def forward():
            with ctx():
                fwd(input_ids=ids)

        def ranker():
            with ctx():
                model.ranker(x4, None)

        forward()  # warm-up (and compilation) before counting
        flops = count_flops(forward)
        rflops = count_flops(ranker)
        g0 = gemm_rate(dtype)
        seconds = measure(forward, warmup=1, repeats=repeats, min_repeats=repeats).min_s
        rseconds = measure(ranker, warmup=1, repeats=repeats, min_repeats=repeats).min_s
        g1 = gemm_rate(dtype)
        with PeakRSSSampler() as mem:
            forward()
    g = (g0 + g1) / 2
    return {"seconds": round(seconds, 4), "tokens_per_s": round(ids.shape[1] / seconds, 1), "flops": flops,
            "gflop_per_s": round(flops / seconds / 1e9, 1),
            "gemm_gflop_per_s": [round(g0 / 1e9, 1), round(g1 / 1e9, 1)],
            "utilization": round(flops / seconds / g, 3), "ranker_seconds": round(rseconds, 4),
            "ranker_share": round(rseconds / seconds, 3), "ranker_flops": rflops,
            "ranker_utilization": round(rflops / rseconds / g, 3),
            "peak_mb": None if mem.peak is None else round((mem.peak - mem.baseline) / 2**20)}


def ab_point(model, ids, dtype_name: str, repeats: int, setups: tuple[str, str]) -> dict:
    """Two setups of the same model on the same input, alternated repeat by repeat (the forward, then the ranker
    alone on the same embeddings); best time of each, utilization of each against the same-process GEMM."""
    ctx = partial(autocast, torch.device("cpu"), dtype_name == "bf16")
    x4 = embedded(model, ids, dtype_name)
    calls = {"forward": lambda: model(input_ids=ids), "ranker": lambda: model.ranker(x4, None)}
    outs, choices = {}, {}
    with torch.no_grad():
        for s in setups:  # warm-up each, and keep its output and choice for the equality check
            set_up(model, s)
            with ctx():
                outs[s] = model(input_ids=ids).last_hidden_state.float()
                choices[s] = model.ranker(x4, None).idx
        g0 = gemm_rate(DTYPES[dtype_name])
        def under_ctx(fn):  # autocast entered per call, as in point(): its weight-cast cache lives one call
            def call():
                with ctx():
                    fn()
            return call

        def use(c_s):
            set_up(model, c_s[1])

        timed = alternate({(c, s): under_ctx(fn) for c, fn in calls.items() for s in setups}, repeats, prepare=use)
        times = {k: t.times_s for k, t in timed.items()}
        g1 = gemm_rate(DTYPES[dtype_name])
        set_up(model, "after")
        with ctx():
            flops = {c: count_flops(fn) for c, fn in calls.items()}
    a, b = setups
    g = (g0 + g1) / 2
    best = {k: min(v) for k, v in times.items()}
    return {"setups": list(setups), "seconds": {s: [round(t, 4) for t in times["forward", s]] for s in setups},
            "ratio": round(best["forward", a] / best["forward", b], 3),
            "utilization": {s: round(flops["forward"] / best["forward", s] / g, 3) for s in setups},
            "ranker_seconds": {s: [round(t, 4) for t in times["ranker", s]] for s in setups},
            "ranker_ratio": round(best["ranker", a] / best["ranker", b], 3),
            "ranker_utilization": {s: round(flops["ranker"] / best["ranker", s] / g, 3) for s in setups},
            "gemm_gflop_per_s": [round(g0 / 1e9, 1), round(g1 / 1e9, 1)],
            "max_abs_diff": float((outs[a] - outs[b]).abs().max()), "same_choice": bool(torch.equal(*choices.values()))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", default=["small"])
    p.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096, 16384, 65536])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    p.add_argument("--modes", nargs="+", default=["eager"], choices=["eager", "compiled"])
    p.add_argument("--ab", choices=list(AB), help="alternate two setups instead of measuring points")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(HERE / "results.jsonl"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    head = {"command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]), "threads": args.threads}
    print(f"# {cpu_model()}, torch {torch.__version__}, {args.threads} threads, load average {load_average()}",
          flush=True)
    for preset in args.presets:
        for mode in (["eager"] if args.ab else args.modes):
            model, fwd = build(preset, mode)
            for N in args.lengths:
                ids = torch.randint(0, model.config.vocab_size, (1, N), generator=torch.Generator().manual_seed(N))
                for dt in args.dtypes:
                    env = Envelope.begin()
                    if args.ab:
                        rec = ab_point(model, ids, dt, args.repeats, AB[args.ab])
                        rec.update(kind="ab", ab=args.ab)
                    else:
                        rec = point(model, fwd, ids, dt, args.repeats)
                        rec.update(kind="point", mode=mode)
                    rec = {"preset": preset, "tokens": N, "precision": dt, **rec}
                    append_jsonl(args.out, {**head, **rec, **env.end()})
                    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
