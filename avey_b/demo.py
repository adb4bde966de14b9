"""``avey-b demo``: build a small, randomly initialized Avey-B and encode text, with no download.

It trains a byte-level BPE tokenizer on the documentation that ships with Python (``pydoc_data``), builds the
``small`` preset with that vocabulary, encodes a padded batch (and checks it against each sentence encoded
alone), and times the forward pass at growing lengths to show the processor's linear cost. The weights are
random: for a trained model see ``avey-b pretrain``.
"""

from __future__ import annotations

import argparse
import sys
import time


def python_docs_text() -> list[str]:
    """Real English text present on every Python install: the pydoc topic help texts."""
    from pydoc_data.topics import topics

    return [t for t in topics.values() if t.strip()]


def train_demo_tokenizer(texts: list[str], vocab_size: int = 4096):
    """A byte-level BPE with BERT-style specials, trained in a second or two."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="avey-b demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384],
                   help="sequence lengths to time (tokens)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args(argv)

    import torch

    from avey_b import AveyBForSentenceEmbedding, presets
    from avey_b.analysis import parameter_counts

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = python_docs_text()
    t0 = time.perf_counter()
    tok = train_demo_tokenizer(texts)
    print(f"tokenizer: byte-level BPE, {len(tok)} tokens, trained on {len(texts)} pydoc topics "
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
