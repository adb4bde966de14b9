"""Cosine similarity, the one measure of relevance in Avey-B: the ranker's MaxSim compares splits by the cosines of
their tokens (§3.1), and a dynamic layer mixes a split by its tokens' cosines (§4.2).

Both take cosines as products of unit vectors; :func:`unit_vectors` is the one place those are made, so that the
two agree on padding (a zero vector) and on 16-bit inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def unit_vectors(x: torch.Tensor) -> torch.Tensor:
    """``x / ‖x‖`` over the last axis; a zero vector (a padded token) stays a zero vector, never NaN, in every
    precision. float16 works in float32: its smallest normal number is 6e-5 (an epsilon of 1e-12 rounds to 0, and
    a zero row would give 0/0) and its largest is 65504 (the norm of a large vector overflows)."""
    if x.dtype == torch.float16:
        return F.normalize(x.float(), dim=-1, eps=1e-12).to(x.dtype)
    return F.normalize(x, dim=-1, eps=1e-12)
