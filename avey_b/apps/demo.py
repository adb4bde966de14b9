"""``avey-b demo``: a small, randomly initialized Avey-B encodes text, with no download (what it shows: the
description of :func:`avey_b.apps.demo_options.demo_parser`; what it times:
:class:`avey_b.apps.demo_options.DemoOptions`)."""

from __future__ import annotations

import argparse
import time

import torch

from avey_b import configs
from avey_b.data.corpus import python_docs_corpus
from avey_b.data.tokenization import train_bpe_tokenizer
from avey_b.model import presets
from avey_b.model.heads import AveyBForSentenceEmbedding
from avey_b.utils.counting import parameter_counts
from avey_b.utils.device import runtime_line, set_cpu_threads
from avey_b.utils.shared_cpu import thread_tuner

from .demo_options import DemoOptions

#: The largest difference between a text's vector in a padded batch and alone that still counts as equal (fp32
#: rounding of sums taken in another order).
PADDING_TOLERANCE = 1e-5


def demo(options: DemoOptions) -> None:
    """The tour (module docstring), printed."""
    threads = set_cpu_threads(options.threads)
    print(runtime_line("cpu", "fp32", threads, auto=options.threads is None), flush=True)
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
    gap = (emb - alone).abs().max().item()
    verdict = "padding-invariant" if gap <= PADDING_TOLERANCE else f"NOT padding-invariant: over {PADDING_TOLERANCE:g}"
    print(f"encoded a padded batch {tuple(batch['input_ids'].shape)} -> embeddings {tuple(emb.shape)}; "
          f"max |batched - alone| = {gap:.2e} ({verdict})")

    long_ids = tok(" ".join(texts), return_tensors="pt")["input_ids"][0]
    if tuner := thread_tuner("cpu", threads, options.threads, print, "the model", "-", unit="forwards"):
        with torch.no_grad():  # auto: the count that runs a 1,024-token forward fastest here
            tuner.settle(lambda: model.model(long_ids[None, :1024]) and 1024)
    print(f"{'tokens':>8} {'s/forward':>10} {'tokens/s':>10}")
    for n in options.lengths:
        ids = long_ids[:n].repeat(n // max(1, len(long_ids)) + 1)[:n].unsqueeze(0)
        with torch.no_grad():
            model.model(ids[:, : min(n, 512)])  # warm-up
            t0 = time.perf_counter()
            model.model(ids)
            dt = time.perf_counter() - t0
        print(f"{n:>8} {dt:>10.3f} {n / dt:>10.0f}")


def run(args: argparse.Namespace) -> int:
    """The runner of ``avey-b demo`` (:mod:`avey_b.cli`)."""
    demo(configs.from_args(DemoOptions, args))
    return 0
