"""Time per query through ``Encoder.score(query, text)`` against a long text: the text's tokens kept from the
query before (``Encoder.text_cache_bytes``) against tokenizing the text's pair each time (``text_cache_bytes=0``).

A query-last scorer is made from ``--model`` (its backbone; the head untrained: timing does not depend on its
weights). Documents and queries are those of ``choice.py`` (WikiText-2 validation articles, filled with other real
text past ~300K tokens; section headings as queries), tokenized by the model's own tokenizer. Per size: the first
query on the text (``cold``: it tokenizes the text), then per query in turn the two encoders alternated (one
process, the same weights, texts and queries). fp32, eager, the machine's threads.

    python benchmarks/evidence/score_time.py --data ../shared/data --model runs/quickstart/model
"""

from __future__ import annotations

import statistics
import sys
import tempfile
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
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("score_time.jsonl"))
    args = p.parse_args()

    from transformers import AutoTokenizer

    from avey_b import AveyBForQueryLastScoring, Encoder, LoadOptions

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    scorer_dir = Path(tempfile.mkdtemp()) / "scorer"
    torch.manual_seed(0)
    AveyBForQueryLastScoring.from_pretrained(args.model, num_labels=1).save_pretrained(scorer_dir)
    tokenizer.model_input_names = [*tokenizer.model_input_names, "token_type_ids"]
    tokenizer.save_pretrained(scorer_dir)
    kept = Encoder(str(scorer_dir), LoadOptions(precision="fp32")).load()
    each_time = Encoder(str(scorer_dir), LoadOptions(precision="fp32")).load()
    each_time.text_cache_bytes = 0
    arts, extra = articles(args.data / "wikitext-2" / "valid.tokens.txt"), filler(args.data)
    for size in (int(s) for s in args.sizes.split(",")):
        env = Envelope.begin()
        gemm_before = gemm_rate(torch.float32)
        doc, queries = build(tokenizer, arts, extra, size)[0]
        text, heads = tokenizer.decode(doc), [q["heading"] for q in queries[:args.queries]]
        t0 = time.perf_counter()
        first = kept.score(heads[0], text)
        cold_s = time.perf_counter() - t0
        times: dict[str, list[float]] = {"kept": [], "each_time": []}
        for head in heads:
            calls = {"kept": lambda h=head, t=text: kept.score(h, t),
                     "each_time": lambda h=head, t=text: each_time.score(h, t)}
            a, b = (fn() for fn in calls.values())
            assert (a.score, a.evidence) == (b.score, b.evidence), head  # the same answer either way
            for name, timing in alternate(calls, rounds=2).items():
                times[name].append(statistics.median(timing.times_s))
        record = {"bench": "evidence_score_time", "document_tokens": first.tokens, "queries": len(heads),
                  "cold_first_query_ms": round(1e3 * cold_s, 1),
                  "kept_ms_p50": round(1e3 * statistics.median(times["kept"]), 2),
                  "kept_ms_max": round(1e3 * max(times["kept"]), 2),
                  "each_time_ms_p50": round(1e3 * statistics.median(times["each_time"]), 1),
                  "speedup_p50": round(statistics.median(times["each_time"]) / statistics.median(times["kept"]), 1)}
        record |= timing_fields(args.model, gemm_before, gemm_rate(torch.float32))
        print(record, flush=True)
        append_jsonl(args.out, {**record, **env.end()}, echo=False)


if __name__ == "__main__":
    main()
