"""An exported (ONNX) small model in onnxruntime on real text: the ranker's vocabulary formula against the dense one.

    python benchmarks/vocabulary_ranker/export.py --data ../shared/data --lengths 4096 16384 65536

Inside an exported graph the ranker's choice is one loop-free computation. With ``ranker_algorithm`` "auto" (the
default) or "vocabulary" the graph factors MaxSim through the batch's distinct token ids (``U × N`` similarities);
with "dense" it scores every token against every token (``N²``). The same weights (seed 0) are exported both ways
(``avey-b export``'s code path, with dynamic batch and length) and run on the same cl100k ids as run.py; time and peak
memory (process RSS above its level before the call) of one session run, and the largest difference from the eager
model. A dense point whose ``N²`` similarities would not fit in memory (past ``--dense-max``) is not run.
Records go to ``export.jsonl`` beside this script.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from run import real_text_ids, timed  # the sibling script's helpers (the script's directory is on sys.path)

from avey_b import AveyBModel
from avey_b.apps.export import export_onnx
from avey_b.model import presets
from avey_b.utils.records import Envelope, append_jsonl


def main() -> None:
    import onnxruntime as ort

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data"))
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536])
    p.add_argument("--dense-max", type=int, default=16384, help="longest input for the dense graph (N² memory)")
    args = p.parse_args()
    torch.set_num_threads(2)
    config = presets.small()
    all_ids, note = real_text_ids(args.data, config.vocab_size)
    out = Path(__file__).with_name("export.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        sessions, models = {}, {}
        for algorithm in ("vocabulary", "dense"):
            torch.manual_seed(0)
            models[algorithm] = AveyBModel(presets.small(ranker_algorithm=algorithm)).eval()
            path = export_onnx(models[algorithm], Path(tmp) / f"{algorithm}.onnx")
            options = ort.SessionOptions()
            options.intra_op_num_threads = 2
            sessions[algorithm] = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for N in args.lengths:
            ids = all_ids[:, :N]
            feed = {"input_ids": ids.numpy(), "attention_mask": np.ones_like(ids.numpy())}
            with torch.no_grad():
                want = models["vocabulary"](ids).last_hidden_state.numpy()
            for algorithm, session in sessions.items():
                if algorithm == "dense" and N > args.dense_max:
                    continue
                env = Envelope.begin("onnxruntime")
                seconds, peak_mb, got = timed(lambda s=session, f=feed: s.run(None, f)[0])
                rec = {"tokens": N, "distinct_ids": int(ids.unique().numel()), "graph": algorithm,
                       "seconds": round(seconds, 3), "peak_mb": round(peak_mb, 1),
                       "max_abs_difference_from_eager": float(np.abs(got - want).max()), "ids": note,
                       "runtime": f"onnxruntime {ort.__version__}, 2 threads", **env.end()}
                append_jsonl(out, rec, echo=True)


if __name__ == "__main__":
    main()
