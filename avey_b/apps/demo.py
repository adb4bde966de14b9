"""``avey-b demo``: build a small, randomly initialized Avey-B and encode text, with no download.

It trains a byte-level BPE tokenizer on the documentation that ships with Python (the ``python-docs`` corpus), builds the
``small`` preset with that vocabulary, encodes a padded batch (and checks it against each sentence encoded
alone), and times the forward pass at growing lengths to show the processor's linear cost. The weights are
random: for a trained model see ``avey-b pretrain``.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="avey-b demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384],
                   help="sequence lengths to time (tokens)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args(argv)

    import torch

    from avey_b import AveyBForSentenceEmbedding
    from avey_b.data.corpus import python_docs_corpus
    from avey_b.data.tokenization import train_bpe_tokenizer
    from avey_b.model import presets
    from avey_b.utils.counting import parameter_counts

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = python_docs_corpus()
    t0 = time.perf_counter()
    tok = train_bpe_tokenizer(texts, vocab_size=4096)
    print(f"tokenizer: byte-level BPE, {len(tok)} tokens, trained on {len(texts)} Python documentation texts "
          f"in {time.perf_counter() - t0:.1f}s")

    torch.manual_seed(0)
    config = presets.small(vocab_size=len(tok), pad_token_id=tok.pad_token_id)
    model = AveyBForSentenceEmbedding(config).eval()
    counts = parameter_counts(model)
    print(f"model: Avey-B small (d={config.hidden_size}, L={config.num_hidden_layers}, S={config.split_size}, "
          f"k={config.num_retrieved_splits}), {counts['total'] / 1e6:.1f}M parameters "
          f"({counts['embedding'] / 1e6:.1f}M embedding)")

    sentences = ["Avey-B is an attention-free bidirectional encoder.",
                 "The ranker retrieves the most relevant earlier splits with MaxSim.",
                 texts[0][:600]]
    batch = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        emb = model(**batch).pooler_output
        alone = torch.cat([model(**tok([s], return_tensors="pt")).pooler_output for s in sentences])
    print(f"encoded a padded batch {tuple(batch['input_ids'].shape)} -> embeddings {tuple(emb.shape)}; "
          f"max |batched - alone| = {(emb - alone).abs().max():.2e} (padding-invariant)")

    long_ids = tok(" ".join(texts), return_tensors="pt")["input_ids"][0]
    print(f"{'tokens':>8} {'s/forward':>10} {'tokens/s':>10}")
    for n in args.lengths:
        ids = long_ids[:n].repeat(n // max(1, len(long_ids)) + 1)[:n].unsqueeze(0)
        with torch.no_grad():
            model.model(ids[:, : min(n, 512)])  # warm-up
            t0 = time.perf_counter()
            model.model(ids)
            dt = time.perf_counter() - t0
        print(f"{n:>8} {dt:>10.3f} {n / dt:>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
