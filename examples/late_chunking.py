"""Late chunking: one forward pass over a whole long document, then one vector per chunk, so that every chunk's
vector has seen the whole document (its pronouns, its topic), with no 512-token window.

    python examples/late_chunking.py --model runs/quickstart/model --file article.txt --chunk-tokens 128
    python examples/late_chunking.py --small

``avey-b embed MODEL INPUT OUT --chunking late --chunk-tokens N`` does the same over a corpus, into Parquet shards.
"""

import argparse

import torch

from avey_b import Encoder, LoadOptions
from avey_b.model.heads import chunk_embeddings

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="runs/quickstart/model", help="a saved Avey-B with its tokenizer")
parser.add_argument("--file", help="a text file (default: a made-up document)")
parser.add_argument("--chunk-tokens", type=int, default=64)
parser.add_argument("--small", action="store_true", help="a tiny random model built here instead")
args = parser.parse_args()

if args.small:
    from _small import tiny_model

    args.model = tiny_model()
text = open(args.file, encoding="utf-8").read() if args.file else " ".join(
    f"Paragraph {i}: the film was good and the cast met in Paris with Alice Smith." for i in range(40))

encoder = Encoder(args.model, LoadOptions(precision="fp32"))
ids = encoder.tokenize([text])["input_ids"][0]
spans = [(start, min(start + args.chunk_tokens, len(ids))) for start in range(0, len(ids), args.chunk_tokens)]
batch, mask = encoder.pad([ids])
hidden = encoder.hidden_states(batch, mask)  # one forward over all the tokens
vectors = chunk_embeddings(hidden, mask, [spans], encoder.config.normalize_embeddings)[0]

print(f"{len(ids):,} tokens -> {len(spans)} chunk vectors of {vectors.shape[1]} dimensions")
whole = encoder.embed(batch, mask)[0]
for (start, end), vector in list(zip(spans, vectors, strict=True))[:5]:
    print(f"  tokens {start:>5}-{end:<5} cosine with the whole document "
          f"{torch.cosine_similarity(vector, whole, 0):.3f}")
