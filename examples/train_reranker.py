"""Train a reranker (a cross-encoder: each query and document read together, whole) on your own (query, positive)
pairs, score it on held-out queries before and after, then rerank with sentence-transformers' CrossEncoder — the
same directory ``avey-b serve`` answers /rerank and /v1/rerank from.

    python examples/train_reranker.py --model runs/quickstart/model --pairs pairs.jsonl
    python examples/train_reranker.py --small

``--pairs``: JSONL rows {"query": ..., "positive": ...} (negatives are drawn from other queries' documents), or
{"query", "document", "label"} rows. The same as ``avey-b finetune --task rerank --model MODEL --train-file
pairs.jsonl --output-dir runs/rerank``.
"""

import argparse
import json
import random
import tempfile

from sentence_transformers import CrossEncoder

from avey_b.finetuning import OwnDataOptions, finetune

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="runs/quickstart/model", help="the encoder to start from")
parser.add_argument("--pairs", help="JSONL (query, positive) or (query, document, label) rows")
parser.add_argument("--output-dir", help="where the reranker goes (default: a temporary directory)")
parser.add_argument("--small", action="store_true", help="a tiny random model and made-up pairs")
args = parser.parse_args()

if args.small:
    from _small import tiny_model

    args.model = tiny_model()
    args.pairs = tempfile.mktemp(suffix=".jsonl")
    rng = random.Random(0)
    people, places = ["Alice Smith", "Bob", "Carol Jones", "Dave"], ["Paris", "New York", "Berlin"]
    with open(args.pairs, "w", encoding="utf-8") as f:
        for i in range(60):
            person, place = rng.choice(people), rng.choice(places)
            f.write(json.dumps({"query": f"where was {person} {i}?",
                                "positive": f"{person} {i} was in {place} with the cast."}) + "\n")

record = finetune(OwnDataOptions(model=args.model, task="rerank", train_file=args.pairs,
                                 output_dir=args.output_dir or tempfile.mkdtemp(prefix="avey-b-rerank-"),
                                 overwrite=True, epochs=1 if args.small else 3))
print("held out:", record["metrics"], "before training:", record["baseline"])

reranker = CrossEncoder(record["output_dir"])
documents = ["Bob was in Berlin with the cast.", "The music was awful.", "Carol Jones met Dave in Paris."]
for hit in reranker.rank("where was Bob?", documents):
    print(f"{hit['score']:.3f}  {documents[hit['corpus_id']]}")
