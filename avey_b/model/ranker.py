"""The ranker (weighted-selective-split retrieval, paper §3.1 and §4.1) and the neural compressor (§4.3), as the
paper states them.

Notation: ``B`` batch, ``n`` splits, ``S`` split size, ``k`` retrieved splits, ``d`` width, ``J`` candidate splits.

The ranker runs once per forward pass, on the embedding output (§3.1), in the paper's steps:

1. **MaxSim** (:func:`avey_b.model.similarity.maxsim`, ColBERT's late interaction): the relevance of a candidate
   split ``j`` to a current split ``i`` is ``MaxSim(i, j) = Σ_{t∈i} max_{u∈j} cos(x_t, x_u)`` over real tokens
   (padding never matches and never votes).
2. **Top-k** (:func:`reference_choice`): the ``k`` allowed candidates with the highest MaxSim — unidirectionally
   the preceding splits, bidirectionally (§4.1) every other split, never a split with no real token. Repeated text
   makes exact ties common: the nearer split wins, at equal distance the preceding one. (The authors' release
   takes ``torch.topk``'s order, which is implementation-defined for ties — on CPU, the top 3 of 5 equal scores
   are 2, 4, 3 — so no rule reproduces it; under ``padding="release"`` ties arise where splits hold the pad token.)
3. **Weighted selective split** (:meth:`Ranker.weighted_selective_split`): the selected scores are divided by the
   largest of them (the release: the smallest), each selected split is weighted by its normalized score and
   concatenated before the current split, ``X_cat = [w_1 X_{j1} | … | w_k X_{jk} | X_i]``, empty slots as zeros on
   the left (so the current split always occupies the last ``S`` rows).
4. **Neural compression** (:class:`Compressor`, §4.3): ``X̂ = P·X_cat + X_i``.

:func:`~avey_b.model.similarity.maxsim` over all pairs and :func:`reference_choice` are the reference: they hold
``n²·S²`` similarities. The ranker makes the same choice in memory linear in ``N`` by calling the fast paths of
:mod:`avey_b.model.ranker_fast` (tiles, the vocabulary factoring, planners, tie keys) with its ``k``, its direction
and the model's execution settings, each path tested against the reference. Under ``torch.export`` / ONNX it runs
MaxSim over all pairs, one loop-free computation whose graph holds at every length (or, given token ids, the
vocabulary factoring).

Gradients flow through the weights (the cosine scores), not through the discrete choice. The choice is made
under ``no_grad`` (with a bf16 GEMM under bf16 autocast or ``ranker_selection_precision="bfloat16"``); the weights
come from MaxSim recomputed for the ``k`` selected pairs only (``O(N k S d)``) at the model's precision, so
training never stores the ``O(N²)`` similarity blocks for backward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import ranker_fast
from .configuration import AveyBConfig
from .execution import ExecutionSettings
from .similarity import maxsim, unit_vectors
from .splits import Splits


def reference_choice(unit: torch.Tensor, keep: torch.Tensor, k: int, bidirectional: bool
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ranker's choice as §3.1 states it, over all pairs at once: the top-``k`` candidates of every split by
    :func:`~avey_b.model.similarity.maxsim`; on equal scores the nearer split, at equal distance the preceding one.

    unit: (B, n, S, d) unit vectors (zero at padding); keep: (B, n, S). Returns ``(idx, filled)``, (B, n, k) each, in
    ``X_cat`` order: descending score, empty slots first. Holds ``n²·S²`` similarities: the reference that the
    ranker's fast paths (:mod:`avey_b.model.ranker_fast`) are tested against, not a path for long inputs."""
    B, n = unit.shape[:2]
    score = maxsim(unit, unit, keep, keep)  # (B, n, n)
    i = torch.arange(n, device=unit.device)[:, None]
    j = torch.arange(n, device=unit.device)[None, :]
    allowed = ((j != i) if bidirectional else (j < i)) & keep.any(-1)[:, None, :]
    # the tie rule: candidates ordered by nearness (j = i-1, i+1, i-2, i+2, ...), then a stable sort by score
    by_nearness = (2 * (i - j).abs() - (j < i).long()).argsort(-1).expand(B, n, n)
    score = score.masked_fill(~allowed, float("-inf")).gather(-1, by_nearness)
    score = F.pad(score, (0, k), value=float("-inf"))  # k impossible candidates more: top-k exists for any n
    val, rank = score.sort(dim=-1, descending=True, stable=True)
    idx = F.pad(by_nearness, (0, k)).gather(-1, rank[..., :k])
    return ranker_fast.layout(val[..., :k], idx)


@dataclass
class Choice:
    """The ranker's result: the top-``k`` splits chosen for every split of a batch, with what the weighted selective
    split (:meth:`Ranker.weighted_selective_split`) needs to build ``X_cat``. Tensors over splits are
    ``(B, n, ...)``, as in :class:`avey_b.model.splits.Splits`."""

    x: torch.Tensor
    """(B, n, S, d) the ranked states, zero at padding: what ``X_cat`` concatenates."""
    keep: torch.Tensor | None
    """(B, n, S) their real-token mask, or None when every token is real."""
    unit: torch.Tensor
    """(B, n, S, d) their unit vectors: what MaxSim compares."""
    idx: torch.Tensor
    """(B, n, k) the chosen splits (ids within the row) in ``X_cat`` order: descending score, empty slots first."""
    filled: torch.Tensor
    """(B, n, k) whether a slot holds a split."""
    ranked: torch.Tensor | None = None
    """(B, n, k) the chosen splits best first, where the choice carries its ranking ``keys``
    (:meth:`Ranker.choose`, :meth:`of_ranked`); None from :meth:`Ranker.forward`."""
    keys: torch.Tensor | None = None
    """(B, n, k) float64 the ranking keys of ``ranked`` (:func:`~avey_b.model.ranker_fast.ranking_keys`), ``-inf``
    in empty slots: what a choice among other candidates is merged with
    (:func:`~avey_b.model.ranker_fast.merge_top_k`)."""

    @classmethod
    def of_ranked(cls, sp: Splits, ranked: torch.Tensor, keys: torch.Tensor) -> Choice:
        """The choice over the splits of ``sp`` of the splits ``ranked`` (ids within the row) with their ranking
        ``keys``, (B, n, k) best first, ``-inf`` in empty slots: laid out as ``X_cat`` takes it
        (:func:`~avey_b.model.ranker_fast.layout`)."""
        idx, filled = ranker_fast.layout(keys, ranked)
        return cls(x=sp.x, keep=sp.keep, unit=unit_vectors(sp.x), idx=idx, filled=filled, ranked=ranked, keys=keys)

    @property
    def retrieved(self) -> torch.Tensor:
        """(B, n, k) the chosen split ids, ``-1`` in empty slots."""
        return self.idx.masked_fill(~self.filled, -1)


class Ranker(nn.Module):
    """The ranker: :meth:`forward` chooses the top-``k`` candidate splits of every split (a :class:`Choice`),
    :meth:`choose` those of some splits among some others (a document fed in pieces), and
    :meth:`weighted_selective_split` builds ``X_cat`` for any set of chosen splits (the model builds them chunk by
    chunk). No parameters. The choice is computed by the fast paths of :mod:`avey_b.model.ranker_fast`, called with
    the ranker's ``k`` and direction and the model's execution settings."""

    def __init__(self, config: AveyBConfig):
        super().__init__()
        self.config = config
        self.k = config.num_retrieved_splits
        self.bidirectional = config.ranker == "bidirectional"
        self.weighting = config.ranker_weighting
        self.eps = config.ranker_eps

    @property
    def execution(self) -> ExecutionSettings:
        """How the choice is computed (algorithm, blocks, tiles, memory cap): the config's, read at every call, so
        that setting ``config.execution`` takes effect at once."""
        return self.config.execution

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None, ids: torch.Tensor | None = None) -> Choice:
        """The choice for every split.

        x: (B, n, S, d) embeddings (zero at padding); keep: (B, n, S) real-token mask or None; ids: (B, n, S) the
        token ids of ``x`` when ``x`` is their embedding (enables the vocabulary path), else None.
        """
        B, n, S, d = x.shape
        xn = unit_vectors(x)
        algorithm = self.execution.ranker_algorithm
        if self.k == 0:
            empty = torch.zeros(B, n, 0, dtype=torch.long, device=x.device)
            return Choice(x=x, keep=keep, unit=xn, idx=empty, filled=empty.bool())
        if algorithm == "vocabulary" and ids is None:
            raise ValueError(
                "ranker_algorithm='vocabulary' needs token ids whose embeddings are the ranker's input: pass input_ids "
                "(not inputs_embeds) and keep embedding dropout inactive (eval mode or embedding_dropout=0), or use "
                "ranker_algorithm='auto'"
            )
        vocabulary_ids = None if algorithm == "dense" else ids
        if torch.compiler.is_exporting():
            keep_all = torch.ones(B, n, S, dtype=torch.bool, device=x.device) if keep is None else keep
            idx, ok = ranker_fast.select_for_export(xn, keep_all, vocabulary_ids, k=self.k,
                                                    bidirectional=self.bidirectional)
        else:
            idx, ok = ranker_fast.select(xn, keep, vocabulary_ids, k=self.k, bidirectional=self.bidirectional,
                                         execution=self.execution)
        return Choice(x=x, keep=keep, unit=xn, idx=idx, filled=ok)

    def choose(self, queries: Splits, query_splits: torch.Tensor, candidate_splits: torch.Tensor,
               candidate_ids: Callable[[torch.Tensor], torch.Tensor], embed: nn.Embedding, *, n_bound: int
               ) -> Choice:
        """The choice of some splits of one row among some of its splits, candidates kept as token ids: the
        incremental path (:func:`~avey_b.model.ranker_fast.select_for_queries`), what a document encoded in pieces
        runs (:mod:`avey_b.model.streaming`). Unidirectional only (§3.1: a candidate precedes its query).

        ``queries``: their splits (:func:`avey_b.model.splits.cut_splits`: one row, with token ids); ``query_splits``
        (Q,) their split ids, ascending; ``candidate_splits`` (J,) the candidates' split ids, ascending, each a full
        split; ``candidate_ids(splits)`` -> (len, S) their token ids; ``embed`` the token embedding (the ranker's
        input, §3.1); ``n_bound`` bounds the split distances in the keys (at least the number of splits). Returns
        the :class:`Choice` over ``queries`` with ``ranked`` (split ids of the row) and ``keys``."""
        if self.bidirectional:
            raise ValueError("the incremental choice is unidirectional: ranker='bidirectional' ranks later splits too")
        Q, device = query_splits.numel(), queries.x.device
        xn = unit_vectors(queries.x)
        if self.k == 0 or candidate_splits.numel() == 0:
            ranked = torch.zeros(1, Q, self.k, dtype=torch.long, device=device)
            keys = torch.full((1, Q, self.k), float("-inf"), dtype=torch.float64, device=device)
        else:
            execution = self.execution

            def vectors(ids: torch.Tensor) -> torch.Tensor:
                return ranker_fast.selection_precision(unit_vectors(embed(ids)), execution)

            ranked, keys = ranker_fast.select_for_queries(
                ranker_fast.selection_precision(xn[0], execution), None if queries.keep is None else queries.keep[0],
                queries.ids[0], query_splits.to(device), candidate_splits, candidate_ids, vectors, k=self.k,
                execution=execution, n_bound=n_bound)
            ranked, keys = ranked[None], keys[None]
        idx, filled = ranker_fast.layout(keys, ranked)
        return Choice(x=queries.x, keep=queries.keep, unit=xn, idx=idx, filled=filled, ranked=ranked, keys=keys)

    def weighted_selective_split(self, choice: Choice, sel) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weighted selective split (§3.1) of the splits ``sel`` (a slice or an index tensor into the ``B·n``
        splits): ``X_cat = [w_1 X_{j1} | … | w_k X_{jk} | X_i]`` (R, (k+1)S, d) and its keep mask (None when every
        token is real). Rows are independent, so they can be built in chunks.

        ``w_p = MaxSim(i, j_p) / (max_q MaxSim(i, j_q) + eps)`` over the selected splits (``ranker_weighting="min"``,
        the release: the smallest selected score), 0 for an empty slot. The scores are recomputed here for the
        ``k`` selected pairs, at the model's precision and under autograd when it is on (``O(N·k·S·d)``: cheap next
        to the choice, and the only part gradients flow through)."""
        B, n = choice.x.shape[:2]
        x, unit = choice.x.flatten(0, 1), choice.unit.flatten(0, 1)  # (B·n, S, d)
        keep = None if choice.keep is None else choice.keep.flatten(0, 1)
        xs = x[sel]
        ks = None if keep is None else keep[sel]
        if self.k == 0:  # each split alone
            return xs, ks
        # the chosen splits as ids into the B·n splits: a row's ids plus the offset of its row
        first = torch.arange(B * n, device=x.device)[sel] // n * n  # (R,)
        sel_idx = choice.idx.flatten(0, 1)[sel] + first[:, None]  # (R, k)
        filled = choice.filled.flatten(0, 1)[sel]
        keep_sel = None if keep is None else keep[sel_idx]  # (R, k, S)
        score = maxsim(unit[sel].unsqueeze(1), unit[sel_idx], None if ks is None else ks.unsqueeze(1),
                       keep_sel)[:, 0]  # (R, k)
        if self.weighting == "max":
            den = score.masked_fill(~filled, float("-inf")).amax(-1, keepdim=True)
        else:
            den = score.masked_fill(~filled, float("inf")).amin(-1, keepdim=True)
        w = torch.where(filled, score / (den + self.eps), torch.zeros_like(score))  # (R, k)
        retrieved = x[sel_idx] * w[..., None, None].to(x.dtype)  # (R, k, S, d)
        x_cat = torch.cat([retrieved.flatten(1, 2), xs], dim=1)  # (R, (k+1)S, d)
        if ks is None:
            ks = torch.ones(xs.shape[:2], dtype=torch.bool, device=x.device)
        S = xs.shape[1]
        slot = (filled[..., None] if keep_sel is None else keep_sel & filled[..., None]).expand(-1, -1, S)
        return x_cat, torch.cat([slot.flatten(1, 2), ks], dim=1)


class Compressor(nn.Module):
    """Neural compressor ``X̂ = P · X_cat (+ X_i)``, ``P ∈ R^{S×(k+1)S}`` learned (§4.3, Eq. compression)."""

    def __init__(self, config: AveyBConfig):
        super().__init__()
        S = config.split_size
        self.weight = nn.Parameter(torch.empty(S, (config.num_retrieved_splits + 1) * S))
        self.residual = config.compressor_residual

    def forward(self, x_cat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """x_cat: (..., (k+1)S, d), the model's processor rows; x: (..., S, d) their current splits.
        Returns (..., S, d)."""
        out = self.weight.to(x_cat.dtype) @ x_cat
        return out + x if self.residual else out
