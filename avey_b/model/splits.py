"""Cutting a batch into splits and putting the processor's output back: the bookkeeping around the paper's steps.

Avey-B works on splits of ``S`` tokens (§3): a ``(B, N, d)`` batch becomes ``(B, n, S, d)`` with ``n = ceil(N/S)``.
:func:`cut` does that and everything it entails; :meth:`Splits.restore` undoes it on the processor's output.

* **Split padding.** The last split is zero-padded to ``S`` tokens; the padding is dropped at the end.
* **User padding, on any side.** Each row's real tokens are moved to its front, in order, before the splits are
  cut (so splits start at the first real token, as with right padding) and put back in place at the end; a
  ``keep`` mask marks real tokens, and padding is zero vectors. Split padding and user padding are the same thing
  to the ranker, the compressor and the layers: positions where ``keep`` is False.
* **Empty splits.** A split with no real token need not be processed (eager only: how many there are depends on
  the values): :attr:`Splits.rows` lists the processor rows that hold one; the others come back as zeros.
* **The release's padding** (``AveyBConfig.padding="release"``, :func:`cut_as_release`): the authors' release
  ignores ``attention_mask``; the last split is padded with zero rows that the ranker, the compressor and every
  layer take as tokens, and batch padding (the pad token's embedding) is a token like any other.
* **Some splits of one row** (:func:`cut_splits`): what a document encoded in pieces
  (:mod:`avey_b.model.streaming`) runs, the splits it ranks or processes cut from the row's token ids as
  :func:`cut` cuts them (the last split's padding past the row's end a zero vector with ``keep`` False).
* **Compiling and exporting** (``general=True``): the graph must not branch on values, so every step is taken
  whether it is needed or not (the results are the same), and under ``torch.export`` the split count is computed
  as a value with its facts stated, so that the exported graph holds for every length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Splits:
    """A batch cut into splits. Tensors are ``(B, n, S, ...)``; ``None`` means "nothing to do" for that step."""

    x: torch.Tensor
    """(B, n, S, d) the token vectors, zero at padding."""
    keep: torch.Tensor | None
    """(B, n, S) real-token mask; None when there is no padding anywhere (every masking step is then skipped)."""
    ids: torch.Tensor | None
    """(B, n, S) the token ids of ``x`` when ``x`` is their embedding (the ranker's vocabulary path), else None."""
    order: torch.Tensor | None
    """(B, N) the input position of each token after real tokens were moved to the front; None when not moved."""
    rows: torch.Tensor | None
    """Indices (into the ``B·n`` flat splits) of the splits holding a real token; None when all do."""
    length: int
    """N, the input length."""

    @property
    def flat_x(self) -> torch.Tensor:
        """(B·n, S, d): one processor row per split."""
        return self.x.flatten(0, 1)

    @property
    def flat_keep(self) -> torch.Tensor | None:
        """(B·n, S) or None."""
        return None if self.keep is None else self.keep.flatten(0, 1)

    @property
    def num_rows(self) -> int:
        """How many processor rows are run: ``B·n`` less the empty splits."""
        return self.x.shape[0] * self.x.shape[1] if self.rows is None else self.rows.numel()

    @property
    def row_ids(self) -> torch.Tensor:
        """(R,) the splits (indices into the ``B·n`` flat splits) whose rows are run: :attr:`rows`, or every split."""
        return torch.arange(self.num_rows, device=self.x.device) if self.rows is None else self.rows

    def restore(self, rows_out: torch.Tensor) -> torch.Tensor:
        """Processor output rows ``(R, C, d)`` (one per split in :attr:`rows`, the split's own outputs last) ->
        ``(B, N, d)`` in the input's token order, zeros for empty splits and padding."""
        B, n, S = self.x.shape[:3]
        if self.rows is not None:
            rows_out = rows_out.new_zeros(B * n, *rows_out.shape[1:]).index_copy(0, self.rows, rows_out)
        seq = rows_out[:, -S:].reshape(B, n * S, rows_out.shape[-1])[:, : self.length]
        if self.order is None:
            return seq
        return seq.scatter(1, self.order[..., None].expand_as(seq), seq)

    def recut(self, seq: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`restore` for rows of ``S`` tokens: ``(B, N, d)`` -> ``(R, S, d)``."""
        B, n, S = self.x.shape[:3]
        if self.order is not None:
            seq = seq.gather(1, self.order[..., None].expand_as(seq))
        rows = F.pad(seq, (0, 0, 0, n * S - self.length)).reshape(B * n, S, seq.shape[-1])
        return rows if self.rows is None else rows.index_select(0, self.rows)


def split_count(N: int, S: int) -> int:
    """``n = ceil(N / S)``; under ``torch.export``, a free symbol with its facts stated (see the module docstring)."""
    if torch.compiler.is_exporting():
        # The exporter cannot prove facts about ceil(N/S) of a symbolic length (N <= n·S, n != 1, ...) and would
        # pin the graph to one split count. Computed as a value with its facts stated, the split count is free.
        n = torch.scalar_tensor(N).add(S - 1).div(S, rounding_mode="floor").long().item()
        torch._check(n >= 1)
        torch._check(n * S >= N)
        torch._check(n * S < N + S)
        return n
    return (N + S - 1) // S


def cut(x: torch.Tensor, attention_mask: torch.Tensor | None, ids: torch.Tensor | None, S: int,
        general: bool = False) -> Splits:
    """``x`` (B, N, d) with its ``attention_mask`` (B, N) (1 or True = real token; None = all real) and token ``ids``
    (B, N) or None, cut into splits of ``S`` tokens. ``general``: take every step regardless of the values (when
    compiling or exporting)."""
    B, N, d = x.shape
    n = split_count(N, S)
    pad = n * S - N
    mask = None if attention_mask is None else attention_mask.bool()

    # Real tokens to the front of their row, in order, when padding precedes a real token anywhere.
    order = None
    if mask is not None and (general or bool((mask[:, 1:] & ~mask[:, :-1]).any())):
        # where each token goes: real tokens to the front, then the padding, both in order (a stable sort by
        # "is padding", written with cumsum/scatter, which every exporter supports)
        real = mask.long()
        dest = torch.where(mask, real.cumsum(1) - 1, real.sum(1, keepdim=True) + (1 - real).cumsum(1) - 1)
        order = torch.zeros_like(dest).scatter(1, dest, torch.arange(N, device=x.device).expand(B, N))
        x = x.gather(1, order[..., None].expand(-1, -1, d))
        mask = mask.gather(1, order)
        ids = None if ids is None else ids.gather(1, order)

    # The real-token mask, padded to n·S (split padding is padding); None when nothing is padding.
    keep = mask if mask is not None and (general or not bool(mask.all())) else None
    if keep is None and (general or pad):  # general first: no guard on the value of pad
        keep = torch.ones(B, N, dtype=torch.bool, device=x.device)
    if keep is not None:
        keep = F.pad(keep, (0, pad), value=False)
        x = F.pad(x, (0, 0, 0, pad)) * keep.unsqueeze(-1).to(x.dtype)  # padded tokens are zero vectors
        keep = keep.view(B, n, S)
        ids = None if ids is None else F.pad(ids, (0, pad))

    # Splits with no real token skip the processor (eager only: their number depends on the values).
    rows = None
    if keep is not None and not general:
        nonempty = keep.any(-1).flatten()
        if not bool(nonempty.all()):
            rows = nonempty.nonzero().squeeze(1)
    return Splits(x=x.reshape(B, n, S, d), keep=keep, ids=None if ids is None else ids.reshape(B, n, S),
                  order=order, rows=rows, length=N)


def cut_as_release(x: torch.Tensor, ids: torch.Tensor | None, S: int, general: bool = False) -> Splits:
    """``x`` (B, N, d) cut into splits of ``S`` tokens as the authors' release cuts it (``AveyBConfig.padding=
    "release"``): no mask, the last split padded with zero rows, which the ranker (§3.1), the compressor (§4.3) and
    the static and dynamic mixing (§4.2) then take as tokens; whatever pads the batch's rows is embedded and
    processed as tokens too. The padding is dropped at the end (:meth:`Splits.restore`), as the release drops it.

    Token ``ids`` (B, N) are kept only without split padding: a zero row embeds no token id, so the ranker's
    vocabulary path does not apply to it. ``general``: take every step regardless of the values (when compiling or
    exporting)."""
    B, N, d = x.shape
    n = split_count(N, S)
    pad = n * S - N
    if general or pad:
        x, ids = F.pad(x, (0, 0, 0, pad)), None
    return Splits(x=x.reshape(B, n, S, d), keep=None, ids=None if ids is None else ids.reshape(B, n, S),
                  order=None, rows=None, length=N)


def split_ids(ids: torch.Tensor, which: torch.Tensor, S: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token ids (Q, S) int64 of the splits ``which`` (Q,) of one row of token ids ``ids`` (N,), as :func:`cut`
    lays them out, and their real-token mask (Q, S), None when every token is real. Past the row's end (the last
    split's padding) the id is 0 and the mask False."""
    N = ids.numel()
    pos = which.to(ids.device)[:, None] * S + torch.arange(S, device=ids.device)
    real = pos < N
    out = torch.where(real, ids[pos.clamp(max=max(N - 1, 0))].long(), 0)
    return out, None if bool(real.all()) else real


def cut_splits(ids: torch.Tensor, which: torch.Tensor, S: int, embed: nn.Embedding) -> Splits:
    """The splits ``which`` (Q,) of one row of token ids ``ids`` (N,), cut as :func:`cut` cuts the row (the ids by
    :func:`split_ids`), embedded by ``embed`` on its device: one row of ``Q`` splits, ``x`` (1, Q, S, d) zero at
    padding, ``ids`` (1, Q, S), ``keep`` (1, Q, S) or None when every token is real."""
    device = embed.weight.device
    tokens, keep = split_ids(ids, which, S)
    tokens, keep = tokens.to(device), None if keep is None else keep.to(device)
    x = embed(tokens)
    x = x if keep is None else x * keep.unsqueeze(-1).to(x.dtype)
    return Splits(x=x[None], keep=None if keep is None else keep[None], ids=tokens[None], order=None, rows=None,
                  length=which.numel() * S)
