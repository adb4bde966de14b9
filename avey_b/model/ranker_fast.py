"""The ranker's fast paths: the same choice as :func:`avey_b.model.ranker.reference_choice`, in ``O(N)`` memory.

The reference (:func:`avey_b.model.similarity.maxsim` over all pairs) holds ``n²·S²`` similarities. The paths here
compute the same MaxSim in pieces (its two steps, :func:`~avey_b.model.similarity.best_match` and
:func:`~avey_b.model.similarity.vote`, in tiles), and each is tested against the reference (``tests/test_ranker.py``):

* **dense** (:func:`select_dense`, tiled): the query tokens of a block against cache-sized tiles of candidate
  tokens — one GEMM per block and tile, the max taken while the tile is hot; ``O(N²·d)`` work, one tile of memory.
* **vocabulary** (:func:`select_vocabulary`): the ranker runs on the embedding output (§3.1), so with token-id
  input the cosine of two tokens depends only on their ids. With ``U`` distinct ids in a row,
  ``M[v, j] = max_{u∈j} cos(E_v, x_u)`` is one ``(U × d)·(d × N)`` product, and ``MaxSim(i, j) = Σ_{t∈i} M[id_t, j]``
  a sum of looked-up rows (an embedding-bag sum); ``O(U·N·d + N²/S)`` instead of ``O(N²·d)``, exact, the same
  choice. Candidates are taken in tiles of ``M`` columns with a running top-``k`` per query split, so neither ``M``
  nor the ``n × n`` scores are held whole. Unidirectionally an id is compared only with the splits before the last
  split it occurs in (ids are ordered by that split, so each candidate tile multiplies a suffix of them).
* **incremental** (:func:`select_for_queries`, through :meth:`avey_b.model.ranker.Ranker.choose`): the
  unidirectional choice of some splits of a row (new or edited ones) among some of its full splits, kept as token
  ids: MaxSim factored through the ids on both sides, the candidates' vectors made one tile at a time; what a
  document encoded in pieces runs (:mod:`avey_b.model.streaming`).
* **export** (:func:`select_for_export`): one loop-free computation whose graph holds at every length, for
  ``torch.export`` / ONNX: MaxSim over all pairs, or given token ids the vocabulary factoring over the batch's
  distinct ids.
* **planners**: :func:`plan` and :func:`plan_vocabulary` size the blocks and tiles from the execution settings
  (``tile_bytes``, ``ranker_memory_mb``), so the working set is bounded whatever ``N``.

Every function takes what it needs as arguments: the ranker's ``k`` and direction (``bidirectional``), and the
model's :class:`~avey_b.model.execution.ExecutionSettings` (``execution``) where the path or its sizes depend on them.

**Tie keys.** Repeated text makes exactly tied MaxSim scores common, and the paths sum in different orders. The
reference states the tie rule as a sort (score, then the nearer split; at equal distance the preceding one); every
path here, and the export path, ranks by a float64 key that encodes the same rule in one number
(:func:`ranking_keys`), so that a running top-``k`` over tiles gives the same choice. (A runtime with other kernels,
such as onnxruntime, may round two exactly tied scores apart; no rule can undo that.)

Notation: ``B`` batch, ``n`` splits, ``S`` split size, ``k`` retrieved splits, ``d`` width, ``J`` candidate splits,
``U`` distinct token ids of a row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .execution import ExecutionSettings
from .similarity import best_match, maxsim, vote

# Bytes per (query split, candidate split) pair the vocabulary path holds for one tile of M columns at its peak:
# the fp32 scores and the allowed mask, and while the ranking keys are built, the fp64 keys, their step and the
# nearness (fp64; bidirectionally also an int64 distance).
_PAIR_BYTES = 37


# -- the choice, ranked -------------------------------------------------------------------------------------------
def ranking_keys(score: torch.Tensor, i: torch.Tensor, j: torch.Tensor, n: int, bidirectional: bool
                  ) -> torch.Tensor:
    """Float64 keys that order candidates by MaxSim, then by nearness: on equal scores the nearer split ranks
    first, and at equal distance the preceding split (``j < i``).

    ``score`` (..., Q, J) float32, ``-inf`` where not allowed; ``i`` (Q, 1) and ``j`` (1, J) split ids; ``n`` bounds
    the distance. The key adds to the score a bonus in (0, 2^-26·(|s| + 2^-134)) that grows with nearness: less than
    a quarter of a float32 ulp of the score (the absolute term breaks ties at 0 too), so distinct float32 scores keep
    their order exactly and the keys of one query split are all distinct."""
    r = 1.0 / (2 * n + 2)
    # nearness in (0, 1): 1 - r·(2|i - j| - [j < i]); unidirectionally j < i, which makes it a sum of a column and a
    # row (one pass); entries that are not allowed get no bonus whatever their nearness.
    if bidirectional:
        near = 1.0 - r * (2 * (i - j).abs() - (j < i).long()).double()
    else:
        near = (1.0 + r - 2 * r * i.double()) + 2 * r * j.double()
    s = score.double()
    # float64 constants as tensors (an exporter may store a Python float as float32: 1e300 -> inf, 2^-134 -> 0)
    big, tiny = (torch.tensor(v, dtype=torch.float64, device=s.device) for v in (1e300, 2.0**-134))
    step = s.abs().clamp_(max=big).add_(tiny).mul_(near).mul_(2.0**-26)  # finite: -inf keys stay -inf
    return s.add_(step)


def allowed_candidates(i: torch.Tensor, j: torch.Tensor, bidirectional: bool) -> torch.Tensor:
    """Whether split ``j`` is a candidate of split ``i``: unidirectionally the preceding splits, bidirectionally
    (§4.1) every other split."""
    return (j != i) if bidirectional else (j < i)


def layout(val: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` keys (descending, impossible ``-inf`` ones last) and their split ids -> the ``X_cat`` layout:
    the ``m`` valid entries moved to the right end (slot ``p`` holds entry ``p - (k - m)``), empty slots 0/False."""
    k = val.shape[-1]
    m = torch.isfinite(val).sum(-1, keepdim=True)
    src = torch.arange(k, device=val.device) - (k - m)
    ok = src >= 0
    return idx.gather(-1, src.clamp_min(0)).masked_fill(~ok, 0), ok


def top_k(score: torch.Tensor, q0: int, split_ok: torch.Tensor | None, *, k: int, bidirectional: bool
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """From MaxSim scores (B, nq, J) of query splits ``q0 …``: the ``k`` best allowed candidates under the tie
    rule, laid out as in ``X_cat``; ``split_ok`` (B, n): the splits with a real token (None: every split).
    Loop-free (also what the export path runs)."""
    (nq, J), device = score.shape[-2:], score.device
    i = torch.arange(nq, device=device)[:, None] + q0
    j = torch.arange(J, device=device)[None, :]
    allowed = allowed_candidates(i, j, bidirectional)  # (nq, J)
    if split_ok is not None:
        allowed = allowed & split_ok[:, None, :J]
    key = ranking_keys(score.masked_fill(~allowed, float("-inf")), i, j, J, bidirectional)
    # k impossible columns more: topk(k) is defined at every number of candidates (also in exported graphs)
    val, idx = F.pad(key, (0, k), value=float("-inf")).topk(k, dim=-1)
    return layout(val, idx)


def merge_top_k(keys: torch.Tensor, idx: torch.Tensor, new_keys: torch.Tensor, new_idx: torch.Tensor, k: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best of two lists of candidates per query split, ``(keys, idx)`` then ``(new_keys, new_idx)``
    (float64 ranking keys and split ids, (Q, ·) each): a running top-``k`` over tiles of candidates. Returns the
    keys, best first, and their split ids."""
    val, p = torch.cat([keys, new_keys], 1).topk(k, dim=-1)
    return val, torch.cat([idx, new_idx], 1).gather(1, p)


# -- plans ----------------------------------------------------------------------------------------------------------
def memory_elements(execution: ExecutionSettings) -> int:
    """``ranker_memory_mb`` in units of 8 bytes: a similarity takes 4 (fp32) or 2 (bf16), the rest is headroom for
    the masks."""
    return int(execution.ranker_memory_mb * 2**20) // 8


def plan(execution: ExecutionSettings, B: int, n: int, S: int, element_size: int = 4, device: str = "cpu"
         ) -> tuple[int, int]:
    """Dense path: (query splits per block, candidate splits per tile) for ``B`` rows of ``n`` splits.

    A block has ``ranker_block_size`` query tokens; its candidates are taken in tiles of ``tile_bytes``
    similarities (a cache-sized working set), and never more than the memory cap allows."""
    per_pair = B * S * S  # similarities of one query split against one candidate split
    memory = memory_elements(execution)
    blk = max(1, min(max(1, execution.ranker_block_size // S), n, memory // per_pair))
    tile_bytes = execution.tile_bytes_for(device, element_size)
    tile = max(1, min(n, tile_bytes // (element_size * per_pair * blk), memory // (per_pair * blk)))
    return blk, tile


def plan_vocabulary(execution: ExecutionSettings, U: int, n: int, S: int, element_size: int = 4,
                    device: str = "cpu") -> tuple[int, int, int]:
    """Vocabulary path: (ids per GEMM block, candidate splits per similarity tile, candidate splits per tile of
    ``M`` columns) for a row of ``n`` splits with ``U`` distinct ids.

    The similarity tiles are the dense path's (``ranker_block_size`` ids against ``tile_bytes``); a tile of ``M``
    columns (``(U + 1) × J`` float32) and the scores of every query split against it (``n × J`` pairs at
    :data:`_PAIR_BYTES`) stay within ``ranker_memory_mb``."""
    ids, tile = plan(execution, 1, max(1, -(-U // S)), S, element_size, device)
    ids = min(U, ids * S)
    budget = memory_elements(execution) * 8 - ids * tile * S * 8  # bytes beside the similarity tile
    cols = budget // ((U + 1) * 4 + n * _PAIR_BYTES)
    cols = max(tile, cols // tile * tile)
    return ids, tile, min(cols, max(n, 1))


def vocabulary_cost(last_split: torch.Tensor, n: int, S: int, d: int, *, bidirectional: bool,
                    execution: ExecutionSettings) -> tuple[float, float]:
    """(vocabulary, dense) multiply-adds of a row's choice, from the last split each distinct id occurs in."""
    U = last_split.numel()
    if bidirectional:
        return float(U * n * S * d + n * n * S), float(n * n * S * S * d)
    gemm = (last_split.sum().item() + U) * S * d if execution.order_by_last_split else U * n * S * d
    return float(gemm + n * n * S / 2), float(n * (n + 1) / 2 * S * S * d)


# -- the paths ------------------------------------------------------------------------------------------------------
@torch.compiler.disable
@torch.no_grad()
def select(xn: torch.Tensor, keep: torch.Tensor | None, ids: torch.Tensor | None, *, k: int, bidirectional: bool,
           execution: ExecutionSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` candidates of every split: ``(idx, ok)``, the choice's ``idx`` and ``filled`` (as
    :func:`avey_b.model.ranker.reference_choice` returns them).

    xn: (B, n, S, d) unit vectors (zero at padding); keep: (B, n, S) or None; ids: (B, n, S) or None (then the
    dense path). Work and memory:

    * ``execution.ranker_algorithm`` picks the dense or the vocabulary path (``"auto"``: the vocabulary path where
      it is exact — token ids given, equal ids with equal embeddings — and its estimated work is lower), per row;
    * a batch of mixed lengths is ranked row by row, each row over its own splits only (up to its last real
      split), so a short row costs what it would cost alone;
    * dense: the similarity working set of one step is one cache-sized tile (``tile_bytes``), reused, and
      never above ``ranker_memory_mb``; vocabulary: the same tiles for ``M``, and the scores of one tile of ``M``
      columns (all query splits × ``J`` candidates) within ``ranker_memory_mb``; beyond that both hold the
      candidates and a few values per token — linear in ``N``;
    * in ``torch.compile`` the choice runs eagerly, outside the graph, so compiled graphs do not depend on ``n``.
    """
    B, n, S, d = xn.shape
    xn = selection_precision(xn, execution)
    if keep is None:
        ends = [n] * B
    else:  # each row over its splits up to its last real one
        ends = (keep.any(-1) * torch.arange(1, n + 1, device=xn.device)).amax(1).tolist()
    idx = torch.zeros(B, n, k, dtype=torch.long, device=xn.device)
    ok = torch.zeros(B, n, k, dtype=torch.bool, device=xn.device)
    dense = []
    for b, m in enumerate(ends):
        got = None
        if m and ids is not None:
            got = select_vocabulary(xn[b, :m], None if keep is None else keep[b, :m], ids[b, :m], k=k,
                                    bidirectional=bidirectional, execution=execution)
        if got is not None:
            idx[b, :m], ok[b, :m] = got
        elif m:
            dense.append(b)
    if len(dense) == B and all(m == n for m in ends):  # one batched call for rows of full length
        return select_dense(xn, keep, k=k, bidirectional=bidirectional, execution=execution)
    for b in dense:
        m = ends[b]
        i, o = select_dense(xn[b:b + 1, :m], None if keep is None else keep[b:b + 1, :m], k=k,
                            bidirectional=bidirectional, execution=execution)
        idx[b, :m], ok[b, :m] = i[0], o[0]
    return idx, ok


def selection_precision(xn: torch.Tensor, execution: ExecutionSettings) -> torch.Tensor:
    """The unit vectors at the precision the choice is made in: float32 ones cast to the autocast dtype under
    autocast (once, not once per tile: the products are the same), or to bfloat16 with
    ``ranker_selection_precision="bfloat16"``; the choice only, the weights are recomputed at full precision
    (:meth:`avey_b.model.ranker.Ranker.weighted_selective_split`)."""
    if xn.dtype == torch.float32:
        if torch.is_autocast_enabled(xn.device.type):
            return xn.to(torch.get_autocast_dtype(xn.device.type))
        if execution.ranker_selection_precision == "bfloat16":
            return xn.to(torch.bfloat16)
    return xn


def select_dense(xn: torch.Tensor, keep: torch.Tensor | None, *, k: int, bidirectional: bool,
                 execution: ExecutionSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The dense path: ``(idx, ok)`` for xn (B, n, S, d), keep (B, n, S) or None; blocks of query splits against
    tiles of candidate splits, as :func:`plan` sizes them."""
    B, n, S, d = xn.shape
    blk, tile = plan(execution, B, n, S, xn.element_size(), xn.device.type)
    # Candidate tokens as rows, a block's query tokens as columns: both operands row-major, the fast GEMM layout
    # for bf16 on CPU (a transposed operand is about 2x slower there), with no copy of the candidates.
    cand = xn.reshape(B, n * S, d)
    c_keep = None if keep is None else keep.reshape(B, n * S)
    split_ok = None if keep is None else keep.any(-1)  # (B, n): a split with no real token is no candidate
    buffers: dict = {}  # one similarity tile per (shape, dtype), reused: stays in cache
    ids, oks = [], []
    for q0 in range(0, n, blk):
        q1 = min(n, q0 + blk)
        J = n if bidirectional else q1  # unidirectional: only splits before the block's last one
        q = xn[:, q0:q1].reshape(B, (q1 - q0) * S, d).transpose(1, 2).contiguous()  # (B, d, nq·S)
        q_keep = None if keep is None else keep[:, q0:q1]
        score = torch.empty(B, q1 - q0, J, dtype=torch.float32, device=xn.device)
        for j0 in range(0, J, tile):  # a candidate split never straddles two tiles: no running max needed
            j1 = min(J, j0 + tile)
            best = best_match(cand[:, j0 * S:j1 * S], q, None if c_keep is None else c_keep[:, j0 * S:j1 * S],
                              S, buffers)  # (B, jt, nq·S)
            score[:, :, j0:j1] = vote(best.view(B, j1 - j0, q1 - q0, S), q_keep)
        i, o = top_k(score, q0, split_ok, k=k, bidirectional=bidirectional)
        ids.append(i)
        oks.append(o)
    return torch.cat(ids, 1), torch.cat(oks, 1)


def select_vocabulary(xn: torch.Tensor, keep: torch.Tensor | None, ids: torch.Tensor, *, k: int,
                      bidirectional: bool, execution: ExecutionSettings) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The vocabulary path for one row: xn (n, S, d), keep (n, S) or None, ids (n, S). Returns ``(idx, ok)`` of
    shape (n, k), or None when the factoring is not exact (equal ids with different vectors: a hook or noise on
    the embeddings) or, under ``"auto"``, not cheaper."""
    n, S, d = xn.shape
    algorithm = execution.ranker_algorithm
    if algorithm == "auto" and n < execution.auto_min_splits:
        return None
    flat = xn.reshape(n * S, d)
    pos, inv, first, last = _distinct_ids(ids, keep)
    if algorithm == "auto":
        vocabulary, dense = vocabulary_cost(last, n, S, d, bidirectional=bidirectional, execution=execution)
        if not execution.auto_overhead * vocabulary < dense:
            return None
    q = flat[first]  # (U, d): the unit vector of each distinct id (where it first occurs)
    if not _factors_exactly(flat, q, pos, inv, keep is not None):
        if algorithm == "vocabulary":
            raise ValueError(
                "ranker_algorithm='vocabulary': tokens with the same id have different embeddings (a hook or "
                "noise on the embedding output), so MaxSim does not factor through the ids; use 'auto' or 'dense'"
            )
        return None
    U = first.numel()
    ordered = not bidirectional and execution.order_by_last_split
    if ordered:  # ids ordered by the last split they occur in
        last, perm = last.sort(stable=True)
        q = q[perm]
        inv = torch.empty_like(perm).scatter_(0, perm, torch.arange(U, device=xn.device))[inv]
    # each token's row of M (U for padding: a row that embedding_bag skips)
    rows = torch.full((n * S,), U, dtype=torch.long, device=xn.device).index_put_((pos,), inv).view(n, S)
    sizes = plan_vocabulary(execution, U, n, S, xn.element_size(), xn.device.type)
    return _vocabulary_top_k(flat, keep, rows, q.t().contiguous(), last if ordered else None, sizes, k=k,
                             bidirectional=bidirectional)


def _distinct_ids(ids: torch.Tensor, keep: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A row's distinct token ids, from ids (n, S) and keep (n, S) or None: ``(pos, inv, first, last)``, the
    positions of its real tokens, each one's distinct id (0 … U-1), and each distinct id's first position and last
    split."""
    n, S = ids.shape
    device = ids.device
    pos = torch.arange(n * S, device=device)
    if keep is not None:
        pos = pos[keep.reshape(-1)]
    vocab, inv = torch.unique(ids.reshape(-1)[pos], return_inverse=True)  # inv: each real token's distinct id
    U = vocab.numel()
    first = torch.full((U,), n * S, device=device).scatter_reduce_(0, inv, pos, "amin")
    last = torch.zeros(U, dtype=torch.long, device=device).scatter_reduce_(0, inv, pos // S, "amax")
    return pos, inv, first, last


def _factors_exactly(flat: torch.Tensor, q: torch.Tensor, pos: torch.Tensor, inv: torch.Tensor, padded: bool
                     ) -> bool:
    """Whether every real token's vector (flat (n·S, d), at ``pos``) is the vector ``q`` of its distinct id: MaxSim
    factors through the ids only then."""
    step = 4096  # tokens per comparison: a few MB at a time
    for c0 in range(0, pos.numel(), step):
        real = flat[pos[c0:c0 + step]] if padded else flat[c0:c0 + step]
        if not torch.equal(real, q[inv[c0:c0 + step]]):
            return False
    return True


def _vocabulary_top_k(flat: torch.Tensor, keep: torch.Tensor | None, rows: torch.Tensor, q: torch.Tensor,
                      last: torch.Tensor | None, sizes: tuple[int, int, int], *, k: int, bidirectional: bool
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The running top-``k`` of the vocabulary path over tiles of ``M`` columns: flat (n·S, d) the row's unit
    vectors, rows (n, S) each token's row of ``M`` (``U`` at padding), q (d, U) the distinct ids' vectors as
    columns, last (U,) the last split of each id when ids are ordered by it (else None), sizes from
    :func:`plan_vocabulary`."""
    n, S = rows.shape
    U, device = q.shape[1], flat.device
    c_keep = None if keep is None else keep.reshape(n * S)
    split_ok = None if keep is None else keep.any(-1)
    best_key = torch.full((n, k), float("-inf"), dtype=torch.float64, device=device)
    best_idx = torch.zeros(n, k, dtype=torch.long, device=device)
    buffers: dict = {}
    J = n if bidirectional else n - 1  # unidirectional: the last split is nobody's candidate
    for j0 in range(0, J, sizes[2]):
        j1 = min(J, j0 + sizes[2])
        # the ids still needed: unidirectionally, those occurring after split j0 (a suffix once ordered)
        a = 0 if last is None else int(torch.searchsorted(last, j0, right=True))
        M = _best_match_columns(flat, c_keep, q, last, a, (j0, j1), sizes, S, buffers)
        i0 = 0 if bidirectional else j0 + 1  # unidirectional: only later splits vote for these candidates
        score = F.embedding_bag(rows[i0:] - a, M, mode="sum", padding_idx=U - a)  # (n - i0, jt) MaxSim
        i = torch.arange(i0, n, device=device)[:, None]
        j = torch.arange(j0, j1, device=device)[None, :]
        allowed = allowed_candidates(i, j, bidirectional)
        if split_ok is not None:
            allowed = allowed & split_ok[None, j0:j1]
        key = ranking_keys(score.masked_fill_(~allowed, float("-inf")), i, j, n, bidirectional)
        val, top = key.topk(min(k, j1 - j0), dim=-1)  # the tile's best, then merged with the running best
        best_key[i0:], best_idx[i0:] = merge_top_k(best_key[i0:], best_idx[i0:], val,
                                                   j.expand(n - i0, -1).gather(1, top), k)
    return layout(best_key, best_idx)


def _best_match_columns(flat: torch.Tensor, c_keep: torch.Tensor | None, q: torch.Tensor, last: torch.Tensor | None,
                        a: int, span: tuple[int, int], sizes: tuple[int, int, int], S: int, buffers: dict
                        ) -> torch.Tensor:
    """``M[v, j] = max_{u∈j} cos(E_v, x_u)`` for the candidate splits ``span`` and the ids from ``a`` on, one tile of
    candidates and one block of ids at a time: (U + 1 - a, J) float32, its last row (padding) unset."""
    (j0, j1), (ub, tile, _), U = span, sizes, q.shape[1]
    M = torch.empty(U + 1 - a, j1 - j0, dtype=torch.float32, device=flat.device)
    for g0 in range(j0, j1, tile):
        g1 = min(j1, g0 + tile)
        ga = 0 if last is None else int(torch.searchsorted(last, g0, right=True))
        c = flat[g0 * S:g1 * S]
        ck = None if c_keep is None else c_keep[g0 * S:g1 * S]
        for u0 in range(ga, U, ub):
            u1 = min(U, u0 + ub)
            M[u0 - a:u1 - a, g0 - j0:g1 - j0] = best_match(c, q[:, u0:u1], ck, S, buffers).t()
    return M


@torch.no_grad()
def select_for_queries(q: torch.Tensor, q_keep: torch.Tensor | None, q_ids: torch.Tensor, q_splits: torch.Tensor,
                       cand_splits: torch.Tensor, candidates, vectors, *, k: int, execution: ExecutionSettings,
                       n_bound: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The unidirectional choice of some splits of a sequence (the queries) among some of its splits (the
    candidates), the candidates kept as token ids and their vectors made on demand, one tile at a time: what a
    document encoded in pieces needs (:mod:`avey_b.model.streaming`), where only the new or edited splits are ranked
    and the earlier ones are kept as token ids, not vectors.

    q: (Q, S, d) the queries' unit vectors at the selection precision (:func:`selection_precision`), zero at padding;
    q_keep: (Q, S) or None; q_ids: (Q, S) their token ids; q_splits: (Q,) their split ids, ascending; cand_splits:
    (J,) the candidates' split ids, ascending, each a full split; ``candidates(splits)`` -> (len, S) their token
    ids; ``vectors(ids)`` -> (len, d) the unit vectors of token ids at the same precision. A candidate is allowed for
    a query that follows it (§3.1).

    The ranker's input is the token embeddings, so the cosine of two tokens depends only on their ids: MaxSim is
    factored through the ids on both sides, as the vocabulary path does on one. For a tile of candidates, the
    cosines of their distinct ids with the queries' distinct ids are one small product, and
    ``M[v, j] = max_{u∈j} cos(E_v, x_u)`` is gathered from it (work ``U_tile·U·d`` plus ``N·U`` lookups instead of
    ``N·U·d``); a running top-``k`` keeps the best, ranked by :func:`ranking_keys` with ``n_bound`` (at least the
    number of splits) as their bound on distances.

    Returns ``(idx, keys)``, (Q, k) each, best first: the chosen split ids and their float64 keys (``-inf`` for
    an empty slot: fewer than ``k`` allowed candidates)."""
    Q, S, d = q.shape
    device = q.device
    real = torch.arange(Q * S, device=device) if q_keep is None else q_keep.reshape(-1).nonzero().squeeze(1)
    vocab, inv = torch.unique(q_ids.reshape(-1)[real], return_inverse=True)
    U = vocab.numel()
    first = torch.full((U,), Q * S, device=device).scatter_reduce_(0, inv, real, "amin")
    qv = q.reshape(Q * S, d)[first].t().contiguous()  # (d, U): each distinct id's vector
    rows = torch.full((Q * S,), U, dtype=torch.long, device=device).index_put_((real,), inv).view(Q, S)
    best_key = torch.full((Q, k), float("-inf"), dtype=torch.float64, device=device)
    best_idx = torch.zeros(Q, k, dtype=torch.long, device=device)
    # a tile of candidates (its gathered cosines, tile·S × ub, within ranker_memory_mb) against ids in blocks of ub
    ub = max(1, min(U, execution.ranker_block_size))
    tile = max(1, min(memory_elements(execution) // 2, 1 << 22) // (S * ub))
    i_all = q_splits.to(device)
    for t0 in range(0, cand_splits.numel(), tile):
        js = cand_splits[t0:t0 + tile].to(device)
        a = int(torch.searchsorted(i_all, js[0], right=True))  # queries after the tile's first candidate
        if a == Q:
            break
        c_vocab, c_inv = distinct_ids(candidates(js).reshape(-1))
        c = vectors(c_vocab)  # (U_tile, d)
        M = torch.zeros(U + 1, js.numel(), dtype=torch.float32, device=device)  # M[v, j]; the last row: padding
        for u0 in range(0, U, ub):
            u1 = min(U, u0 + ub)
            cos = (c @ qv[:, u0:u1])[c_inv]  # (tile·S, u1 - u0): each candidate token against these ids
            M[u0:u1] = cos.view(js.numel(), S, u1 - u0).amax(1).t()
        score = F.embedding_bag(rows[a:], M, mode="sum", padding_idx=U)  # (Q - a, jt): MaxSim
        i, j = i_all[a:, None], js[None, :]
        key = ranking_keys(score.masked_fill_(~allowed_candidates(i, j, False), float("-inf")), i, j, n_bound,
                           False)
        best_key[a:], best_idx[a:] = merge_top_k(best_key[a:], best_idx[a:], key, j.expand(Q - a, -1), k)
    return best_idx, best_key


def distinct_ids(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.unique(ids, return_inverse=True)`` of non-negative token ids (n,) without sorting them: a table over
    the ids' range marks those present (their ascending list is ``unique``'s, element for element) and maps each to
    its place. ``O(n + max id)`` where the sort is ``O(n log n)``; on real text the ranking of a query's splits
    against a long document gains 4-20% (benchmarks/evidence/rank_time.py), the gather of the cosines per token
    being the rest of its cost."""
    if ids.numel() == 0:
        return ids.new_zeros(0), ids.new_zeros(0)
    present = torch.zeros(int(ids.max()) + 1, dtype=torch.bool, device=ids.device)
    present[ids] = True
    vocab = present.nonzero().squeeze(1)
    place = torch.empty(present.numel(), dtype=torch.long, device=ids.device)
    place[vocab] = torch.arange(vocab.numel(), device=ids.device)
    return vocab, place[ids]


def select_for_export(xn: torch.Tensor, keep: torch.Tensor, ids: torch.Tensor | None, *, k: int,
                      bidirectional: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The choice as one loop-free computation over all ``n`` splits (what ``torch.export`` and ONNX capture for
    every ``n``), ranked with the tie keys of :func:`top_k`; the same choice as :func:`select`. keep: (B, n, S).

    Without ids: :func:`~avey_b.model.similarity.maxsim` over all pairs. With ids (B, n, S), the vocabulary
    factoring: the batch's ``U`` distinct ids (``torch.unique``, ONNX ``Unique``), each one's best cosine in every
    candidate split of each row, and MaxSim as a gather-and-sum of those maxima — ``U × N`` similarities and
    ``n × N`` maxima per row instead of ``N²`` similarities."""
    if ids is None:
        return top_k(maxsim(xn, xn, keep, keep), 0, keep.any(-1), k=k, bidirectional=bidirectional)
    B, n, S, d = xn.shape
    flat = xn.reshape(B, n * S, d)
    vocab, inv = torch.unique(torch.where(keep, ids, -1).reshape(-1), return_inverse=True)  # padding: id -1
    q = flat.new_zeros(vocab.shape[0], d).index_put_((inv,), flat.reshape(-1, d))  # equal ids, equal vectors
    best = best_match(flat, q.t(), keep.reshape(B, n * S), S)  # (B, n, U): M[v, j] of every row
    votes = best.gather(-1, inv.view(B, 1, n * S).expand(-1, n, -1))  # (B, n, n·S): M[id_t, j]
    return top_k(vote(votes.view(B, n, n, S), keep), 0, keep.any(-1), k=k, bidirectional=bidirectional)
