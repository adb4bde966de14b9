"""Time ONNX files of one model alternated in one process (A, B, C, A, B, C, ...) on the same real-text input.

    python benchmarks/quantization/alternate_files.py --text runs/english.txt --vocab-size 50368 \\
        onnx_fp32=DIR/model.onnx int8_default=DIR/default.onnx int8_all=DIR/all.onnx

For the files ``drift.py`` writes (its work directory): batch 1, ``--length`` tokens of cl100k ids renumbered
into ``--vocab-size`` (:mod:`avey_b.benchmarking.inputs`), 2 threads, onnxruntime threads not spinning between
runs; one warm-up run each, then ``--rounds`` turns. Appends one JSON line (every turn's seconds, medians, the
load average before and after) to ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial
from pathlib import Path

from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import alternate
from avey_b.utils.records import Envelope, append_jsonl


def main() -> None:
    import onnxruntime as ort

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="NAME=FILE")
    p.add_argument("--text", nargs="+", required=True)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--note", default="", help="what the files are, for the record")
    p.add_argument("--out", default=str(Path(__file__).with_name("drift.jsonl")))
    args = p.parse_args()
    pairs = [f.split("=", 1) for f in args.files]
    if any(len(pair) != 2 for pair in pairs):
        raise SystemExit("each file is NAME=PATH")
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {name: ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]) for name, path in pairs}
    ids, mask, _ = text_ids(args.text).batch(args.vocab_size, 1, args.length)
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    for s in sessions.values():
        s.run(None, feed)
    env = Envelope.begin("onnxruntime")
    timed = alternate({name: partial(s.run, None, feed) for name, s in sessions.items()}, args.rounds)
    times = {name: t.times_s for name, t in timed.items()}
    median = {name: statistics.median(v) for name, v in times.items()}
    append_jsonl(args.out, {"alternated": dict(pairs), "note": args.note, "length": args.length,
                            "rounds": args.rounds, "threads": args.threads, "seconds": times, "median_s": median,
                            **env.end()}, echo=True)


if __name__ == "__main__":
    main()
