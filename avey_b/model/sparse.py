"""Learned sparse vectors (SPLADE) from the masked-LM head, the token logits never held whole.

SPLADE's term weights, in the max-pooling form of SPLADE v2 (Formal et al., 2021, "SPLADE v2: Sparse Lexical and
Expansion Model for Information Retrieval", arXiv:2109.10086, the pooling that replaces v1's sum): for a text of
tokens ``t`` and each vocabulary entry ``j``,

    w_j = max_t log(1 + relu(logit_{t,j}))

over the text's real tokens (padding never counts), ``logit_{t,j}`` the masked-LM head's logit of entry ``j`` at
token ``t``. ``log(1 + relu(x))`` rises with ``x``, so the max is taken over the raw logits and the transform applied
once to the ``(B, V)`` maxima: the same weights, and (in training) the same gradient, through each entry's
arg-max token.

The chunk rule (:func:`logit_chunk_tokens`): the ``(B, N, V)`` logits are computed ``chunk`` token positions at a
time from the backbone's last hidden state, ``chunk = max(1, CHUNK_LOGITS // (B * V))`` (at most :data:`CHUNK_LOGITS`
logits exist at once: 64 MiB in float32, whatever ``N``), and folded into a running ``(B, V)`` maximum. A 1M-token
document with a 50K vocabulary never holds its 200 GB of logits: one chunk of them at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import ModelOutput

#: The most logits one chunk computes at once (the chunk rule in the module docstring).
CHUNK_LOGITS = 1 << 24


@dataclass
class SparseEmbeddingOutput(ModelOutput):
    """``sparse_embedding``: the ``(B, V)`` SPLADE term weights (non-negative, mostly zero, in float32)."""

    sparse_embedding: torch.FloatTensor | None = None


def splade_max(hidden: torch.Tensor, attention_mask: torch.Tensor | None, decoder: nn.Module,
               chunk: int | None = None) -> torch.Tensor:
    """The ``(B, V)`` float32 SPLADE weights of a padded batch (module docstring) from the backbone's ``(B, N, d)``
    last hidden state and the masked-LM ``decoder`` (``h -> logits``), ``chunk`` token positions at a time
    (default: the chunk rule, :func:`logit_chunk_tokens`). Positions where ``attention_mask`` is 0 are left out; a
    row with no real token weighs nothing."""
    rows, length = hidden.shape[:2]
    vocab = decoder.out_features
    chunk = chunk or logit_chunk_tokens(rows, vocab)
    real = None if attention_mask is None else attention_mask.to(hidden.device).bool()
    best = torch.full((rows, vocab), float("-inf"), device=hidden.device)
    for start in range(0, length, chunk):
        logits = decoder(hidden[:, start:start + chunk]).float()  # (B, c, V): the only logits alive
        if real is not None:
            logits = logits.masked_fill(~real[:, start:start + chunk, None], float("-inf"))
        best = torch.maximum(best, logits.max(dim=1).values)  # max saves indices, not the chunk, for backward
    return torch.log1p(torch.relu(best))


def logit_chunk_tokens(rows: int, vocab: int, budget: int = CHUNK_LOGITS) -> int:
    """The chunk rule (module docstring): the token positions one chunk of ``rows`` rows computes so that at most
    ``budget`` logits of a ``vocab``-entry head exist at once (at least one)."""
    return max(1, budget // max(1, rows * vocab))


def sparse_rows(weights: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(B, V)`` weights as one ``(indices, values)`` pair per row: the non-zero entries' vocabulary ids (int64,
    ascending) and weights (float32), on the CPU."""
    weights = weights.detach().float().cpu()
    out = []
    for row in weights:
        indices = row.nonzero().squeeze(-1)
        out.append((indices, row[indices]))
    return out
