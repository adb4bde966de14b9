"""Every vector from one pass: what dense, sparse (SPLADE) and multi-vector outputs together cost next to dense
alone, from one backbone forward (``Encoder.vectors``'s computation), on this CPU.

    python benchmarks/every_vector/one_pass.py --data ../shared/data

For each preset (``small``: d=256, 8 layers; ``base``: the paper's 165M model) and length (2,048 and 32,768 tokens,
batch 1), in fp32 and under bf16 autocast: one Avey-B masked-LM with random weights (its masked-LM head gives the
sparse vectors) and a 128-wide token-vector projection (the multi-vector head), timed alternately, round by round
(``avey_b.benchmarking.timing.alternate``), in one process:

* ``dense``: the backbone forward and the masked mean (what ``Encoder.embed`` runs);
* ``dense+sparse``: the same forward, then the SPLADE max over tokens through the masked-LM head, chunk by chunk
  (``avey_b.model.sparse.splade_max``);
* ``all three``: the same, plus the unit token vectors (``avey_b.model.multivector.token_vectors``).

The input: real English text (``avey_b.benchmarking.english_text``'s files) tokenized by cl100k_base (a
general-purpose tokenizer not fitted to it) and renumbered into the model's 50,368 ids. The GEMM rate of each
precision is timed in the same process, so each figure also reads as FLOP utilization. Writes ``one_pass.md`` and
``one_pass.jsonl`` here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from avey_b.benchmarking.english_text import english_text
from avey_b.benchmarking.inputs import tokenize_text
from avey_b.benchmarking.timing import alternate, gemm_rate
from avey_b.model import presets
from avey_b.model.heads import AveyBForMaskedLM, sentence_embedding
from avey_b.model.multivector import token_vectors
from avey_b.model.sparse import splade_max
from avey_b.utils.device import autocast
from avey_b.utils.records import Envelope

HERE = Path(__file__).resolve().parent
MULTIVECTOR_DIM = 128


def calls(model: AveyBForMaskedLM, projection: torch.nn.Linear, ids: torch.Tensor, bf16: bool) -> dict:
    """The three ways, each one forward of the backbone and the heads it needs, under inference mode."""
    mask = torch.ones_like(ids)

    def run(sparse: bool, multi: bool):
        with torch.inference_mode(), autocast(torch.device("cpu"), bf16):
            hidden = model.model(ids, mask).last_hidden_state
            out = [sentence_embedding(hidden.float(), mask, True)]
            if sparse:
                out.append(splade_max(hidden, mask, model.decoder))
            if multi:
                out.append(token_vectors(hidden, projection, mask))
        return out

    return {"dense": lambda: run(False, False), "dense+sparse": lambda: run(True, False),
            "all three": lambda: run(True, True)}


def point(preset: str, length: int, text, rounds: int, precisions: list[str]) -> list[dict]:
    """The precisions at one (preset, length): the three ways' median seconds and their ratios to dense."""
    torch.manual_seed(0)
    model = AveyBForMaskedLM(presets.get(preset)).eval()
    projection = torch.nn.Linear(model.config.hidden_size, MULTIVECTOR_DIM, bias=False)
    ids, _, facts = text.batch(model.config.vocab_size, 1, length)
    rows = []
    for bf16 in (p == "bf16" for p in precisions):
        ways = calls(model, projection, ids, bf16)
        for fn in ways.values():
            fn()  # warm-up
        timed = alternate(ways, rounds)
        gemm = gemm_rate(torch.bfloat16 if bf16 else torch.float32)
        dense = timed["dense"].median_s
        for way, t in timed.items():
            rows.append({"preset": preset, "tokens": length, "precision": "bf16 autocast" if bf16 else "fp32",
                         "way": way, "median_s": t.median_s, "times_s": t.times_s, "ratio_to_dense": t.median_s / dense,
                         "gemm_gflops": gemm / 1e9, "distinct_ids": facts["distinct_ids"]})
        print(rows[-3:], flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data"))
    p.add_argument("--presets", nargs="+", default=["small", "base"])
    p.add_argument("--lengths", nargs="+", type=int, default=[2048, 32768])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    env = Envelope.begin()
    text = tokenize_text(english_text(args.data), label="english_text (cl100k_base)")
    rows = [r for preset in args.presets for length in args.lengths for r in point(preset, length, text, args.rounds,
                                                                                   args.precisions)]
    env.end()
    rows = [{**r, "envelope": env.end()} for r in rows]
    path = HERE / "one_pass.jsonl"  # points of earlier runs that this one did not time are kept
    key = lambda r: (r["preset"], r["tokens"], r["precision"], r["way"])  # noqa: E731
    done = {key(r) for r in rows}
    old = [json.loads(line) for line in path.open()] if path.exists() else []
    rows = sorted([r for r in old if key(r) not in done] + rows,
                  key=lambda r: (r["preset"] != "small", r["tokens"], r["precision"], r["way"] != "dense",
                                 r["way"] == "all three"))
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    lines = ["# Every vector from one pass: the cost of dense + sparse + multi-vector next to dense alone", "",
             "```", f"python benchmarks/every_vector/one_pass.py --threads {args.threads} --rounds {args.rounds}",
             "```", "", f"Each row's machine, commit and load are in one_pass.jsonl (its envelope); {args.threads} "
             f"threads; batch 1; the median of the alternated rounds; real text (cl100k_base ids renumbered into "
             "50,368). The last run's: " + env.line() + ".", "",
             "| preset | tokens | precision | GEMM GFLOP/s | dense s | dense+sparse s (×) | all three s (×) |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for i in range(0, len(rows), 3):
        d, s, a = rows[i:i + 3]
        lines.append(f"| {d['preset']} | {d['tokens']:,} | {d['precision']} | {d['gemm_gflops']:.0f} | "
                     f"{d['median_s']:.3f} | {s['median_s']:.3f} ({s['ratio_to_dense']:.2f}) | "
                     f"{a['median_s']:.3f} ({a['ratio_to_dense']:.2f}) |")
    (HERE / "one_pass.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
