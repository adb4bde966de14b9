"""Embed a folder of documents into Parquet shards (late chunking: one vector per chunk, each of which has seen the
whole document), then search them: the shards hold the ids, your columns, the chunk text and spans, and the vectors,
ready for a vector database or, as here, numpy.

    python examples/embed_and_search.py --model runs/quickstart/model --docs my_docs.jsonl --query "..."
    python examples/embed_and_search.py --small

``--docs``: a JSONL file with "id" and "text" fields (and any others: "title" is kept here), or a folder of .txt
files. The same as ``avey-b embed MODEL DOCS OUT --chunking late --chunk-tokens 64 --with-text``.
"""

import argparse
import json
import tempfile

import numpy as np
import pyarrow.parquet as pq

from avey_b import Encoder, LoadOptions
from avey_b.apps.embed import EmbedOptions, embed_corpus

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="runs/quickstart/model", help="a saved Avey-B with its tokenizer")
parser.add_argument("--docs", help="a JSONL file (id, text, title) or a folder of .txt files")
parser.add_argument("--query", default="who met in Paris?")
parser.add_argument("--small", action="store_true", help="a tiny random model and made-up documents")
args = parser.parse_args()

keep = ()
if args.small:
    from _small import tiny_model

    args.model = tiny_model()
    args.docs = tempfile.mktemp(suffix=".jsonl")
    with open(args.docs, "w", encoding="utf-8") as f:
        for i, (title, body) in enumerate([("Paris", "Alice Smith met Bob in Paris. The music was lovely."),
                                           ("Berlin", "Carol Jones said the plot was awful. Dave was in Berlin."),
                                           ("New York", "The cast met in New York and the ending was great.")]):
            f.write(json.dumps({"id": f"doc-{i}", "title": title, "text": " ".join([body] * 20)}) + "\n")
if args.docs.endswith(".jsonl"):
    with open(args.docs, encoding="utf-8") as f:
        keep = ("title",) if "title" in json.loads(f.readline()) else ()

out = tempfile.mkdtemp(prefix="avey-b-vectors-")
embed_corpus(args.model, args.docs, out, EmbedOptions(chunking="late", chunk_tokens=64, with_text=True,
                                                      keep_columns=keep))
table = pq.read_table(out).to_pandas()  # one row per chunk: id, kept columns, text, char span, vector
print(f"{len(table)} chunk vectors from {table['id'].nunique()} documents; columns {list(table.columns)}")

encoder = Encoder(args.model, LoadOptions())  # the query, embedded the same way (unit vectors: dot = cosine)
query = encoder.encode(args.query).numpy()
scores = np.stack(table["vector"].to_numpy()) @ query
for i in np.argsort(-scores)[:3]:
    row = table.iloc[i]
    print(f"{scores[i]:.3f}  {row['id']}  {row.get('title', '')!s:10}  {row['text'][:70]!r}")
