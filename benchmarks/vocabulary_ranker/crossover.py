"""Where the vocabulary path stops paying: random token ids (as many distinct ids as the vocabulary allows), dense vs
vocabulary ranker alternated in one process, against the ranker's own work estimate — the numbers behind
``auto_overhead`` and ``auto_min_splits`` of ``avey_b.model.execution.ExecutionSettings``.

    python benchmarks/vocabulary_ranker/crossover.py

Small config (d=256, S=64, k=3), random weights (seed 0), batch 1, CPU, fp32 and bf16 autocast, fastest of 3.
Records go to ``crossover.jsonl`` beside this script; ``what_auto_takes`` is the path ``ranker_algorithm="auto"``
takes for that input.
"""

from __future__ import annotations

from pathlib import Path

import torch
from run import Inputs  # the sibling script's input builder (the script's directory is on sys.path)

from avey_b import AveyBModel
from avey_b.benchmarking.timing import alternate
from avey_b.model import presets
from avey_b.model.ranker_fast import vocabulary_cost
from avey_b.utils.device import autocast
from avey_b.utils.records import Envelope, append_jsonl

POINTS = [(512, 50368), (1024, 50368), (4096, 50368), (16384, 50368), (16384, 8000), (65536, 50368)]


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = AveyBModel(presets.small()).eval()
    ranker = model.ranker
    S, d = model.config.split_size, model.config.hidden_size
    out = Path(__file__).with_name("crossover.jsonl")
    for N, V in POINTS:
        ids = torch.randint(0, V, (1, N), generator=torch.Generator().manual_seed(N))
        inputs = Inputs(model, ids)
        last = torch.zeros(V, dtype=torch.long).scatter_reduce_(0, ids[0], torch.arange(N) // S, "amax")
        vocabulary, dense = vocabulary_cost(last[ids[0].unique()], inputs.n, S, d, bidirectional=ranker.bidirectional,
                                           execution=ranker.execution)
        estimate = vocabulary / dense
        execution = model.config.execution
        auto = ("vocabulary" if inputs.n >= execution.auto_min_splits
                and execution.auto_overhead * estimate < 1 else "dense")
        for dtype in ("fp32", "bf16"):
            # autocast entered per call: its weight-cast cache lives one call
            def rank(inputs=inputs, bf16=dtype == "bf16"):
                with autocast(torch.device("cpu"), bf16):
                    ranker(inputs.x, inputs.keep, inputs.ids4)

            env = Envelope.begin()
            with torch.no_grad():
                timed = alternate({"dense": rank, "vocabulary": rank}, 3,
                                  prepare=lambda algorithm: setattr(model.config, "ranker_algorithm", algorithm))
            best = {algorithm: t.min_s for algorithm, t in timed.items()}
            rec = {"tokens": N, "vocabulary_size": V, "distinct_ids": inputs.U, "dtype": dtype,
                   "dense_s": round(best["dense"], 5), "vocabulary_s": round(best["vocabulary"], 5),
                   "measured_ratio": round(best["vocabulary"] / best["dense"], 3),
                   "estimated_ratio": round(estimate, 3), "what_auto_takes": auto, "ids": "random (uniform)",
                   "threads": 2, **env.end()}
            append_jsonl(out, rec, echo=True)


if __name__ == "__main__":
    main()
