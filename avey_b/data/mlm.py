"""Masked-LM corruption (paper appendix "Pretraining Methodology").

``mask_tokens`` is a pure function: it takes token ids and a ``torch.Generator`` and returns
``(inputs, labels)``. The default follows the paper: 20% of the maskable tokens are selected, every
selected token is replaced by the mask id, and the labels are -100 everywhere else. The BERT 80/10/10
scheme (80% mask id, 10% a random token, 10% unchanged) is an option. Special tokens (``special_ids``,
which should include the pad, CLS/SEP and end-of-text ids) and positions where ``attention_mask == 0``
are never selected.

Selection is an independent Bernoulli draw per token (as in transformers'
``DataCollatorForLanguageModeling``), so the masked count per sequence varies around ``rate * n``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

IGNORE_INDEX = -100
SCHEMES = ("mask", "80-10-10")


def mask_tokens(
    ids: torch.Tensor,
    rate: float,
    mask_id: int,
    special_ids: Iterable[int],
    generator: torch.Generator | None = None,
    *,
    scheme: str = "mask",
    vocab_size: int | None = None,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt ``ids`` (any shape, integer) for masked-LM training.

    Args:
        ids: token ids; not modified.
        rate: probability that a maskable token is selected (the paper: 0.2).
        mask_id: the ``[MASK]`` token id.
        special_ids: ids that are never selected (pad, CLS, SEP, end-of-text, ...).
        generator: the random source; pass a seeded generator for reproducible masks.
        scheme: ``"mask"`` (paper: every selected token becomes ``mask_id``) or ``"80-10-10"`` (BERT).
        vocab_size: needed by ``"80-10-10"`` to draw random replacement tokens (drawn from non-special ids).
        attention_mask: optional, same shape; positions with 0 are never selected.

    Returns:
        ``(inputs, labels)``: ``inputs`` is the corrupted copy; ``labels`` holds the original id at selected
        positions and -100 elsewhere.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"mask rate must be in [0, 1], got {rate}")
    if scheme not in SCHEMES:
        raise ValueError(f"unknown masking scheme {scheme!r}; choose one of {SCHEMES}")
    if ids.is_floating_point():
        raise TypeError(f"ids must be an integer tensor, got {ids.dtype}")
    special = torch.tensor(sorted(set(int(s) for s in special_ids) | {int(mask_id)}), dtype=ids.dtype)
    maskable = _maskable(ids, special, attention_mask)
    # Draw on CPU with the caller's generator so the mask does not depend on the device.
    draw = torch.rand(ids.shape, generator=generator).to(ids.device)
    selected = (draw < rate) & maskable
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))
    inputs = ids.clone()
    if scheme == "mask":
        inputs[selected] = mask_id
        return inputs, labels
    if vocab_size is None:
        raise ValueError("scheme '80-10-10' needs vocab_size to draw random replacement tokens")
    _replace_80_10_10(inputs, selected, mask_id, special, vocab_size, generator)
    return inputs, labels


def _maskable(ids: torch.Tensor, special: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The positions that may be selected: not a special id, and real tokens where ``attention_mask`` is given."""
    maskable = ~torch.isin(ids, special.to(ids.device))
    if attention_mask is not None:
        if attention_mask.shape != ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != ids shape {tuple(ids.shape)}")
        maskable &= attention_mask.bool()
    return maskable


def _replace_80_10_10(inputs: torch.Tensor, selected: torch.Tensor, mask_id: int, special: torch.Tensor,
                      vocab_size: int, generator: torch.Generator | None) -> None:
    """BERT's scheme, in place: of the selected positions 80% become ``mask_id``, 10% a random non-special token,
    10% stay unchanged."""
    how = torch.rand(inputs.shape, generator=generator).to(inputs.device)
    to_mask = selected & (how < 0.8)
    to_random = selected & (how >= 0.8) & (how < 0.9)
    inputs[to_mask] = mask_id
    if to_random.any():
        # Random replacements come from the non-special part of the vocabulary.
        allowed = torch.ones(vocab_size, dtype=torch.bool)
        allowed[special[(special >= 0) & (special < vocab_size)].long()] = False
        pool = allowed.nonzero().squeeze(1)
        pick = torch.randint(len(pool), (int(to_random.sum()),), generator=generator)
        inputs[to_random] = pool[pick].to(inputs.device, inputs.dtype)


def sequence_generator(seed: int, sequence_index: int) -> torch.Generator:
    """A generator for the mask of one packed sequence, keyed by the run seed and the sequence's global index.

    Keying by the global index (not by rank or step) makes the masks independent of the world size, the
    micro-batch size and restarts: the same sequence always gets the same mask.
    """
    g = torch.Generator()
    g.manual_seed((int(seed) * 1_000_003 + int(sequence_index)) % (2**63 - 1))
    return g
