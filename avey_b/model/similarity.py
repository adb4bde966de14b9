"""Cosine similarity, the one measure of relevance in Avey-B: the ranker's MaxSim compares splits by the cosines of
their tokens (§3.1), and a dynamic layer mixes a split by its tokens' cosines (§4.2).

Both take cosines as products of unit vectors; :func:`unit_vectors` is the one place those are made, so that the
two agree on padding (a zero vector) and on 16-bit inputs.

MaxSim (ColBERT's late interaction, §3.1), ``MaxSim(i, j) = Σ_{t∈i} max_{u∈j} cos(x_t, x_u)``, is two steps, each
written once: :func:`best_match` takes the max over a candidate split, :func:`vote` the sum over the query split.
:func:`maxsim` is the two over all pairs at once; the ranker's fast paths (:mod:`avey_b.model.ranker_fast`) run the
same two steps in tiles.
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


def maxsim(q: torch.Tensor, c: torch.Tensor, q_keep: torch.Tensor | None = None,
           c_keep: torch.Tensor | None = None) -> torch.Tensor:
    """MaxSim of query splits against candidate splits (§3.1): ``MaxSim(i, j) = Σ_{t∈i} max_{u∈j} cos(x_t, x_u)``.

    q: (..., nq, S, d) and c: (..., J, S', d) unit vectors (zero at padding; the ranker's splits have S' = S, the
    multi-vector head's texts are one split each, of their padded lengths); q_keep: (..., nq, S) and c_keep:
    (..., J, S') real-token masks, or None when every token is real. A padded candidate token is never the max (a
    split of padding only scores ``-inf``) and a padded query token does not vote. Returns (..., nq, J), summed in
    float32 (float64 for float64 input). Holds every similarity of every pair at once."""
    nq, S = q.shape[-3:-1]
    best = best_match(c.flatten(-3, -2), q.flatten(-3, -2).transpose(-1, -2),
                      None if c_keep is None else c_keep.flatten(-2), c.shape[-2])  # (..., J, nq·S): max_{u∈j}
    return vote(best.unflatten(-1, (nq, S)), q_keep)


def best_match(c: torch.Tensor, q: torch.Tensor, c_keep: torch.Tensor | None, S: int,
               buffers: dict | None = None) -> torch.Tensor:
    """The first step of MaxSim: the best cosine of each query vector in each candidate split
    (``max_{u∈j} cos(q, x_u)``).

    c: (..., J·S, d) the candidates' unit vectors (zero at padding); q: (..., d, Q) the query unit vectors as
    columns; c_keep: (..., J·S) bool or None — a padded candidate token is never the best match (an all-padding
    split gives ``-inf``). Returns (..., J, Q). The max runs over the middle axis of the (..., J, S, Q) similarities
    (whole vectors at a time, in the input's precision: exact, so the choice is the same).

    With ``buffers`` (a dict; no autograd) the similarities go into a reused tile buffer per shape and dtype, which
    stays in cache, and are masked in place; without, the computation is out of place and differentiable.
    """
    J = c.shape[-2] // S
    if buffers is None:
        sim = c @ q
    else:
        shape = (*c.shape[:-1], q.shape[-1])
        if (shape, c.dtype) not in buffers:
            buffers[shape, c.dtype] = torch.empty(shape, dtype=c.dtype, device=c.device)
        sim = torch.matmul(c, q, out=buffers[shape, c.dtype])
    sim = sim.unflatten(-2, (J, S))  # (..., J, S, Q)
    if c_keep is not None:
        pad = ~c_keep.unflatten(-1, (J, S)).unsqueeze(-1)
        sim = sim.masked_fill_(pad, float("-inf")) if buffers is not None else sim.masked_fill(pad, float("-inf"))
    return sim.amax(-2)


def vote(best: torch.Tensor, q_keep: torch.Tensor | None) -> torch.Tensor:
    """The second step of MaxSim, the sum over the query split: best (..., J, nq, S), the :func:`best_match` of
    every query token, -> (..., nq, J), summed over each query split's real tokens (q_keep: (..., nq, S); padded
    query tokens do not vote), in float32 (float64 for float64 input)."""
    if q_keep is not None:
        best = best.masked_fill(~q_keep.unsqueeze(-3), 0.0)
    return best.sum(-1, dtype=torch.promote_types(best.dtype, torch.float32)).transpose(-1, -2)
