"""Forward throughput, ranker share and peak memory of the Avey-B backbone vs sequence length (issue: core model).

Each (length, dtype) point runs in a fresh subprocess so that its peak resident memory (``ru_maxrss``) is its own.
Timings: warm-up forward, then ``--repeats`` forwards; the median is reported (min/max kept in the JSONL).
The ranker's share is the median time of ``model.ranker`` alone on the same embeddings over the median forward.

    python benchmarks/forward_scaling.py --lengths 256 1024 4096 16384 65536 --dtypes float32 bfloat16 \
        --threads 2 --out benchmarks/results/forward_scaling_cpu.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def measure(length: int, dtype: str, preset: str, repeats: int, threads: int, batch: int, overrides: dict) -> dict:
    import resource

    import torch

    from avey_b import AveyBModel, presets

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = presets.get(preset, **overrides)
    model = AveyBModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (batch, length))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB, after building the model

    def forward():
        with torch.no_grad(), autocast:
            return model(ids).last_hidden_state

    def ranker():
        x = model.embed_tokens(ids)
        S = config.split_size
        n = -(-length // S)
        keep = None
        if n * S != length:
            keep = torch.nn.functional.pad(torch.ones(batch, length, dtype=torch.bool), (0, n * S - length)).view(batch, n, S)
            x = torch.nn.functional.pad(x, (0, 0, 0, n * S - length))
        x = x.view(batch, n, S, -1)
        with torch.no_grad(), autocast:
            return model.ranker(x, keep)

    def timed(fn):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    forward()  # warm-up
    fwd = [timed(forward) for _ in range(repeats)]
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rank = [timed(ranker) for _ in range(repeats)] if model.ranker is not None else [0.0]
    med = statistics.median(fwd)
    return {
        "preset": preset, "overrides": overrides, "length": length, "batch": batch, "dtype": dtype,
        "threads": threads, "forward_s_median": med, "forward_s_min": min(fwd), "forward_s_max": max(fwd),
        "tokens_per_s": batch * length / med, "ranker_s_median": statistics.median(rank),
        "ranker_share": statistics.median(rank) / med, "peak_rss_mib": peak_rss,
        "peak_rss_over_model_mib": peak_rss - base_rss, "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--override", action="append", default=[], help="config key=value (JSON value), repeatable")
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 16384, 65536])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="append one JSON line per point to this file")
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    overrides = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.override)}
    if args._child:  # one point, in this process
        length, dtype = args._child.split(":")
        print(json.dumps(measure(int(length), dtype, args.preset, args.repeats, args.threads, args.batch, overrides)))
        return 0
    header = f"{'dtype':>9} {'length':>7} {'s/fwd':>8} {'tok/s':>9} {'ranker':>7} {'peak MiB':>9}"
    print(header)
    for dtype in args.dtypes:
        for length in args.lengths:
            cmd = [sys.executable, __file__, "--_child", f"{length}:{dtype}", "--preset", args.preset,
                   "--batch", str(args.batch), "--repeats", str(args.repeats), "--threads", str(args.threads)]
            cmd += [a for o in args.override for a in ("--override", o)]
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode != 0:
                row = {"length": length, "dtype": dtype, "error": out.stderr.strip().splitlines()[-1]}
                print(f"{dtype:>9} {length:>7} failed: {row['error']}")
            else:
                row = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"{dtype:>9} {length:>7} {row['forward_s_median']:8.3f} {row['tokens_per_s']:9.0f} "
                      f"{row['ranker_share']:7.1%} {row['peak_rss_over_model_mib']:9.0f}", flush=True)
            if args.out:
                os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
