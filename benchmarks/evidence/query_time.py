"""Time per query against a long document: the query's splits alone (``query_last``) against a fresh forward of
document + query.

Documents: the first document of each size that ``choice.py`` builds (WikiText-2 validation articles cut at article
boundaries, filled with other real text past the validation set's ~300K tokens), tokenized by the model's own
tokenizer; queries: their section headings (``--queries`` of them), tokenized the same way. For each size, per
query in turn (alternated, one process, the same weights and ids):

* ``query_last``: :func:`avey_b.model.streaming.query_last` on the document's ids with the query's after them (the
  document's ids known: a document seen before; the concatenation is inside the time);
* ``full``: the backbone's forward of document + query (``--full-max`` bounds the sizes where it runs; at 1M tokens
  one query only).

Also: the tokenizer's time for the document's text (what a document never seen before adds to ``query_last``:
its ids), the largest difference between the two paths' query outputs, and the float32 GEMM rate of this process
before and after (a 2048-cubed matmul). float32, eager, the machine's threads.

    python benchmarks/evidence/query_time.py --data ../shared/data --model /work/qs/run/model
"""

from __future__ import annotations

import statistics
import sys
import time
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
    p.add_argument("--full-max", type=int, default=1048576, help="the largest size a full forward is timed at")
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("query_time.jsonl"))
    args = p.parse_args()

    from transformers import AutoTokenizer

    from avey_b.model.modeling import AveyBModel
    from avey_b.model.streaming import query_last

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AveyBModel.from_pretrained(args.model).eval()
    arts, extra = articles(args.data / "wikitext-2" / "valid.tokens.txt"), filler(args.data)
    for size in (int(s) for s in args.sizes.split(",")):
        env = Envelope.begin()
        gemm_before = gemm_rate(torch.float32)
        doc, queries = build(tokenizer, arts, extra, size)[0]
        text = tokenizer.decode(doc)
        t0 = time.perf_counter()
        tokenizer(text, add_special_tokens=False)
        tokenize_s = time.perf_counter() - t0
        qids = [torch.tensor(tokenizer(" " + q["heading"], add_special_tokens=False)["input_ids"])
                for q in queries[:args.queries]]
        full_too = size <= args.full_max
        times: dict[str, list[float]] = {"query_last": [], "full": []}
        worst = 0.0
        with torch.no_grad():
            for i, q in enumerate(qids):
                ids = torch.cat([doc, q])
                calls = {"query_last": lambda ids=ids, n=size: query_last(model, ids, n).hidden}
                if full_too and (size < 1 << 20 or i == 0):
                    calls["full"] = lambda ids=ids, n=size: model(ids[None]).last_hidden_state[0, n:]
                    a, b = (fn() for fn in calls.values())  # warm-up, and the two compared
                    worst = max(worst, float((a - b).abs().max()))
                else:
                    calls["query_last"]()
                for name, timing in alternate(calls, rounds=3 if len(calls) > 1 else 5).items():
                    times[name].append(statistics.median(timing.times_s))
        record = {"bench": "evidence_query_time", "document_tokens": size, "queries": len(qids),
                  "query_tokens_mean": round(sum(q.numel() for q in qids) / len(qids), 1),
                  "query_last_ms_p50": round(1e3 * statistics.median(times["query_last"]), 2),
                  "query_last_ms_max": round(1e3 * max(times["query_last"]), 2),
                  "full_ms_p50": round(1e3 * statistics.median(times["full"]), 1) if times["full"] else None,
                  "full_queries": len(times["full"]),
                  "speedup_p50": (round(statistics.median(times["full"]) / statistics.median(times["query_last"]), 1)
                                  if times["full"] else None),
                  "max_abs_diff": worst if times["full"] else None,
                  "tokenize_document_ms": round(1e3 * tokenize_s, 1)}
        record |= timing_fields(args.model, gemm_before, gemm_rate(torch.float32))
        print(record, flush=True)
        append_jsonl(args.out, {**record, **env.end()}, echo=False)


if __name__ == "__main__":
    main()
