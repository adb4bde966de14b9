"""The ranking of a new block of a document state, before and after the candidates were factored through their ids
(commit 200e01d), alternated in one process on real text: the last 16,384 tokens of a 131,072-token document ranked
against every split before them, small preset, 1 thread.

    PYTHONPATH=. python benchmarks/streaming/ranking.py --before 56e41bf

``--before`` names a commit whose ``avey_b/model/ranker_fast.py`` holds the earlier ``select_for_queries`` (read with
``git show``); it is timed beside today's on the same queries, and the choices compared.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

from avey_b.benchmarking.inputs import text_ids
from avey_b.model import presets, ranker_fast
from avey_b.model.modeling import AveyBModel
from avey_b.model.similarity import unit_vectors
from avey_b.utils.records import Envelope, append_jsonl


def earlier(commit: str) -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{commit}:avey_b/model/ranker_fast.py"], capture_output=True, text=True,
                            check=True).stdout
    module = types.ModuleType("ranker_fast_before")
    exec(compile(source.replace("from .", "from avey_b.model."), f"{commit}:ranker_fast.py", "exec"), module.__dict__)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True)
    p.add_argument("--text", type=Path, default=Path("../shared/data/wikitext-2/valid.tokens.txt"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("ranking.jsonl"))
    args = p.parse_args()
    before = earlier(args.before)
    text = text_ids([args.text])
    vocab, ids = torch.unique(torch.as_tensor(text.ids[:131072]), return_inverse=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = AveyBModel(presets.small(vocab_size=vocab.numel())).eval()
    S = model.config.split_size
    splits = ids.view(-1, S)
    queries = torch.arange(splits.shape[0] - 16384 // S, splits.shape[0])
    envelope = Envelope.begin()
    times: dict[str, list[float]] = {"before": [], "after": []}
    with torch.no_grad():
        E = unit_vectors(model.embed_tokens.weight)
        q, candidates = E[splits[queries]], torch.arange(int(queries[0]))
        common = dict(k=model.config.num_retrieved_splits, execution=model.config.execution, n_bound=1 << 22)
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            a = before.select_for_queries(q, None, splits[queries], queries, candidates, lambda js: E[splits[js]],
                                          **common)
            times["before"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = ranker_fast.select_for_queries(q, None, splits[queries], queries, candidates, lambda js: splits[js],
                                               lambda u: E[u], **common)
            times["after"].append(time.perf_counter() - t0)
            if not torch.equal(a[0], b[0]):
                sys.exit("the two rankings chose differently")
    best = {k: round(min(v), 3) for k, v in times.items()}
    append_jsonl(args.out, {"section": "ranking", "before_commit": args.before, "seconds": times, "best": best,
                            "speedup": round(best["before"] / best["after"], 2), "same_choice": True,
                            "tokens": ids.numel(), "query_tokens": 16384, "text": text.source,
                            "command": " ".join(sys.argv), **envelope.end()}, echo=True)


if __name__ == "__main__":
    main()
