"""The ranking of a query's splits against a long document's (:func:`avey_b.model.streaming.rank_splits`, what
every query-last score and every session append runs): each tile's distinct token ids found by a table over the id
range (``ranker_fast.distinct_ids``, this library's) against a sort (``torch.unique``, what it ran before), in one
process, alternated, on the same ids; the two choices compared (they must be the same bits), and the whole
query-last forward's time beside them.

Documents and queries are ``choice.py``'s (WikiText-2 validation articles, filled with other real text past ~300K
tokens; section headings as queries), tokenized by the model's own tokenizer. fp32, eager, the machine's threads.

    python benchmarks/evidence/rank_time.py --data ../shared/data --model runs/quickstart/model
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from choice import articles, build, filler, parser, timing_fields  # noqa: E402 -- the evidence's documents

from avey_b.benchmarking.timing import alternate, gemm_rate  # noqa: E402
from avey_b.utils.records import Envelope, append_jsonl  # noqa: E402


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--queries", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("rank_time.jsonl"))
    args = p.parse_args()

    from transformers import AutoTokenizer

    from avey_b.model import ranker_fast
    from avey_b.model.modeling import AveyBModel
    from avey_b.model.streaming import query_last, rank_splits

    table = ranker_fast.distinct_ids

    def by_sort(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.unique(ids, return_inverse=True)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AveyBModel.from_pretrained(args.model).eval()
    S = model.config.split_size
    arts, extra = articles(args.data / "wikitext-2" / "valid.tokens.txt"), filler(args.data)
    for size in (int(s) for s in args.sizes.split(",")):
        env = Envelope.begin()
        gemm_before = gemm_rate(torch.float32)
        doc, queries = build(tokenizer, arts, extra, size)[0]
        times: dict[str, list[float]] = {"table": [], "sort": [], "query_last": []}
        with torch.no_grad():
            for q in queries[:args.queries]:
                ids = torch.cat([doc, torch.tensor(tokenizer(" " + q["heading"], add_special_tokens=False
                                                             )["input_ids"])])
                splits = torch.arange(size // S, (ids.numel() + S - 1) // S)
                candidates = torch.arange(int(splits[-1]))

                def ranked(way, ids=ids, splits=splits, candidates=candidates):
                    ranker_fast.distinct_ids = way
                    try:
                        return rank_splits(model, ids, splits, candidates)
                    finally:
                        ranker_fast.distinct_ids = table

                a, b = ranked(table), ranked(by_sort)
                assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), q["heading"]  # the same choice
                calls = {"table": lambda r=ranked: r(table), "sort": lambda r=ranked: r(by_sort),
                         "query_last": lambda ids=ids, n=size: query_last(model, ids, n).hidden}
                for name, timing in alternate(calls, rounds=3).items():
                    times[name].append(statistics.median(timing.times_s))
        p50 = {name: statistics.median(t) for name, t in times.items()}
        record = {"bench": "evidence_rank_time", "document_tokens": size, "queries": len(times["table"]),
                  "rank_table_ms_p50": round(1e3 * p50["table"], 2), "rank_sort_ms_p50": round(1e3 * p50["sort"], 2),
                  "speedup_p50": round(p50["sort"] / p50["table"], 2),
                  "query_last_ms_p50": round(1e3 * p50["query_last"], 2), "same_choice": True}
        record |= timing_fields(args.model, gemm_before, gemm_rate(torch.float32))
        print(record, flush=True)
        append_jsonl(args.out, {**record, **env.end()}, echo=False)


if __name__ == "__main__":
    main()
