"""Peak memory of Avey-B's forward pass, eager vs ``torch.compile``, at long inputs on CPU.

    PYTHONPATH=. python benchmarks/compiled_memory/run.py --out benchmarks/compiled_memory/results.jsonl

Each measurement runs in a fresh subprocess (``--child``): the model (``presets.small()``, random weights, eval,
float32, batch 1) takes real English text (WikiText-2 valid, cl100k_base ids renumbered into its vocabulary:
:mod:`avey_b.benchmarking.inputs`), runs the forward once to warm up (compiled: this call compiles), then once more
with the process's peak RSS reset (``/proc/self/clear_refs``), and reports:

* ``forward_mb``: the measured forward's peak RSS above the RSS before it (what the forward itself holds);
* ``process_mb``: the whole subprocess's peak RSS (``os.wait4``'s rusage: model, inputs, compilation included).

The parent checks that the compiled outputs equal the eager ones at every length and appends one JSON line per
measurement to ``--out``. The figures and the machine they ran on are in this folder's README.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from avey_b.benchmarking.timing import status_mb

TEXT = "/work/shared/data/wikitext-2/valid.tokens.txt"  # the project's shared data; any plain-text file works


def child(args) -> None:
    import torch

    from avey_b import AveyBModel
    from avey_b.benchmarking.inputs import text_ids
    from avey_b.model import presets

    tokens = args.tokens[0]
    torch.manual_seed(0)
    model = AveyBModel(presets.small()).eval()
    ids, _, facts = text_ids([args.text]).batch(model.config.vocab_size, 1, tokens)
    forward = torch.compile(model, dynamic=True) if args.mode == "compiled" else model
    with torch.no_grad():
        t0 = time.perf_counter()
        forward(ids)  # warm-up (compiled: compiles)
        warm_s = time.perf_counter() - t0
        before = status_mb("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
        t0 = time.perf_counter()
        out = forward(ids).last_hidden_state
        run_s = time.perf_counter() - t0
        peak = status_mb("VmHWM")
    torch.save(out, args.save)
    print(json.dumps({"mode": args.mode, "tokens": tokens, "forward_mb": round(peak - before, 1),
                      "rss_before_mb": round(before, 1), "warmup_s": round(warm_s, 1), "forward_s": round(run_s, 2),
                      "distinct_ids": facts["distinct_ids"],
                      "processor_chunk_tokens": model.config.execution.processor_chunk_tokens_for("cpu")}))


def parent(args) -> None:
    import torch

    from avey_b.utils.records import Envelope, append_jsonl

    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # compile in the measured process, not a pool
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tokens in args.tokens:
            outs = {}
            for mode in ("eager", "compiled"):
                save = Path(tmp) / f"{mode}-{tokens}.pt"
                cmd = [sys.executable, __file__, "--child", "--mode", mode, "--tokens", str(tokens),
                       "--text", args.text, "--save", str(save)]
                envelope = Envelope.begin()
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
                stdout = proc.stdout.read()
                _, status, usage = os.wait4(proc.pid, 0)
                if status != 0:
                    raise SystemExit(f"{mode} at {tokens} tokens failed "
                                     f"(exit code {os.waitstatus_to_exitcode(status)})")
                row = json.loads(stdout.strip().splitlines()[-1])
                row["process_mb"] = round(usage.ru_maxrss / 1024, 1)  # kilobytes on Linux
                row |= envelope.end()
                outs[mode] = torch.load(save)
                rows.append(row)
                print(json.dumps(row), flush=True)
            torch.testing.assert_close(outs["compiled"], outs["eager"], rtol=1e-4, atol=1e-4)
            eager, compiled = rows[-2], rows[-1]
            print(f"{tokens} tokens: outputs equal; compiled/eager forward peak "
                  f"{compiled['forward_mb'] / eager['forward_mb']:.2f}x", flush=True)
    for row in rows if args.out else []:
        append_jsonl(args.out, row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[16384, 65536])
    parser.add_argument("--text", default=TEXT, help="a plain-text file (the default: WikiText-2 valid)")
    parser.add_argument("--out", help="append the measurements here (JSON lines)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
