"""Training a query-last scorer on long documents: the time of one training step (forward through the query's
splits, backward, AdamW) on a (document, query, label) pair whose document has 2K, 128K or 1M tokens, the sizes
alternated in one process on the same weights and queries; document tokens per second of training beside it. The
claim (docs/long-documents.md): a step costs about the same whatever the document's length, since only the query's
splits and the splits they choose go through the layers.

Documents and queries are ``choice.py``'s (WikiText-2 validation articles, filled with other real text past ~300K
tokens; section headings as queries), tokenized by the model's own tokenizer; the scorer is made from ``--model``
(its backbone, a fresh one-logit head). fp32, eager, the machine's threads.

    python benchmarks/evidence/train_time.py --data ../shared/data --model runs/quickstart/model
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
    p = parser(__doc__, "2048,131072,1048576")
    p.add_argument("--queries", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("train_time.jsonl"))
    args = p.parse_args()

    from transformers import AutoTokenizer

    from avey_b import AveyBForQueryLastScoring

    env = Envelope.begin()
    gemm_before = gemm_rate(torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    torch.manual_seed(0)
    model = AveyBForQueryLastScoring.from_pretrained(args.model, num_labels=1).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    arts, extra = articles(args.data / "wikitext-2" / "valid.tokens.txt"), filler(args.data)
    sizes = [int(s) for s in args.sizes.split(",")]
    longest, queries = build(tokenizer, arts, extra, max(sizes))[0]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    heads = [torch.tensor(tokenizer(q["heading"], add_special_tokens=False)["input_ids"]) for q in queries]
    heads = heads[:args.queries]

    def pair(size: int, query: torch.Tensor) -> dict[str, torch.Tensor]:
        """The pair encoding ``[CLS] document [SEP] query [SEP]`` of the first ``size - 2`` document tokens."""
        doc = longest[:size - 2]
        ids = torch.cat([torch.tensor([cls]), doc, torch.tensor([sep]), query, torch.tensor([sep])])
        types = torch.zeros_like(ids)
        types[size:] = 1
        return {"input_ids": ids[None], "token_type_ids": types[None], "labels": torch.ones(1)}

    def step(batch: dict[str, torch.Tensor]) -> None:
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        optimizer.step()

    times: dict[int, list[float]] = {size: [] for size in sizes}
    for query in heads:
        batches = {size: pair(size, query) for size in sizes}
        calls = {size: lambda b=batches[size]: step(b) for size in sizes}
        for size, timing in alternate(calls, rounds=3).items():
            times[size].append(statistics.median(timing.times_s))
    gemm_after = gemm_rate(torch.float32)
    end = env.end()
    for size in sizes:
        p50 = statistics.median(times[size])
        record = {"bench": "evidence_train_time", "document_tokens": size, "queries": len(heads),
                  "step_ms_p50": round(1e3 * p50, 1), "step_ms_max": round(1e3 * max(times[size]), 1),
                  "document_tokens_per_s": round(size / p50),
                  "step_vs_shortest": round(p50 / statistics.median(times[sizes[0]]), 2)}
        record |= timing_fields(args.model, gemm_before, gemm_after)
        print(record, flush=True)
        append_jsonl(args.out, {**record, **end}, echo=False)


if __name__ == "__main__":
    main()
