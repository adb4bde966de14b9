"""Grouping inputs into batches by a token budget, and the longest input memory allows: the one policy that
``avey-b serve`` (its dynamic batcher) and ``avey-b embed`` (its corpus job) share.

* :func:`token_budget_batches` — sort inputs by length and cut the sorted run so that no batch pads past a token
  budget (``len(longest) × batch size``); an input longer than the budget runs alone. Inputs are never cut.
* :func:`default_max_tokens` — half the available memory at ``BYTES_PER_TOKEN_PER_WIDTH · d`` bytes per token.
* :func:`pad_right` — a batch of token-id lists as right-padded ``input_ids`` and ``attention_mask`` tensors.

This module imports nothing else from the package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

T = TypeVar("T")

#: Peak memory of a forward per token and per unit of model width (measured: 4.5 GB for 1M tokens of the small
#: config, d = 256, bf16, vocabulary ranker — 17 bytes per token per unit of width; 24 leaves a margin).
BYTES_PER_TOKEN_PER_WIDTH = 24


def default_max_tokens(hidden_size: int) -> int:
    """The longest input the machine's memory allows: half the available memory at 24·d bytes per token."""
    try:
        import psutil

        available = psutil.virtual_memory().available
    except ImportError:  # psutil is optional: assume 8 GB
        available = 8 << 30
    return max(1024, int(available * 0.5 / (BYTES_PER_TOKEN_PER_WIDTH * hidden_size)))


def token_budget_batches(items: Sequence[T], max_batch_tokens: int, length: Callable[[T], int] = len
                         ) -> list[list[T]]:
    """``items`` sorted by ``length`` (stable: equal lengths keep their order) and cut into consecutive batches
    whose padded size, ``length(longest) × len(batch)``, stays within ``max_batch_tokens``; an item longer than
    the budget makes a batch of its own."""
    out: list[list[T]] = []
    current: list[T] = []
    for item in sorted(items, key=length):
        if current and length(item) * (len(current) + 1) > max_batch_tokens:
            out.append(current)
            current = []
        current.append(item)
    if current:
        out.append(current)
    return out


def pad_right(ids: Sequence[Sequence[int]], pad_id: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``, both ``(len(ids), longest)`` long tensors: each row's ids, then ``pad_id``
    (0 when the tokenizer has none: the mask hides those positions, so any id works)."""
    batch = torch.full((len(ids), max(map(len, ids))), 0 if pad_id is None else pad_id, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for i, row in enumerate(ids):
        batch[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
    return batch, mask
