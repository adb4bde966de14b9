"""The ranker (weighted-selective-split retrieval, paper §3.1 and §4.1) and the neural compressor (§4.3).

Notation: ``B`` batch, ``n`` splits, ``S`` split size, ``k`` retrieved splits, ``d`` width, ``J`` candidates.

The ranker scores every split against its candidates with MaxSim,
``MaxSim(i, j) = Σ_{t∈i} max_{u∈j} cos(x_t, x_u)``, keeps the top-``k`` and returns, per split,
``X_cat = [w_1 X_{j1} | … | w_k X_{jk} | X_i]`` with missing slots as zeros on the left (so the current split
always occupies the last ``S`` rows). It is vectorized: one GEMM per block of query splits and tile of their
candidates, ``amax`` over candidate tokens, ``topk`` for the choice and ``gather`` for the copies. The Python
loops run over blocks of queries and cache-sized tiles of candidates (within ``ranker_memory_mb``): the max is
taken while a tile is hot, so neither the ``N²`` matrix nor a ``block × N`` one is ever written.

Gradients flow through the weights (the cosine scores), not through the discrete choice. The choice is made
under ``no_grad`` (optionally with a bf16 GEMM, ``ranker_selection_precision``); the weights come from MaxSim
recomputed for the ``k`` selected pairs only (``O(N k S d)`` work and memory) at the model's precision, so
training never stores the ``O(N²)`` similarity blocks for backward. See :class:`Ranker` for how the selection's
memory is capped and how it behaves under ``torch.compile`` and export.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .configuration import AveyBConfig


def _maxsim(q: torch.Tensor, c: torch.Tensor, q_keep: torch.Tensor | None, c_keep: torch.Tensor | None):
    """MaxSim of normalized query splits against candidate splits, pairwise by broadcasting.

    q: (..., S, d), c: (..., S, d) unit (or zero) vectors; keeps: (..., S) bool or None.  Returns (...).
    """
    sim = q @ c.transpose(-1, -2)  # (..., S, S)
    if c_keep is not None:  # a padded candidate token is never the best match
        sim = sim.masked_fill(~c_keep.unsqueeze(-2), float("-inf"))
    best = sim.amax(-1)  # (..., S): best candidate token per query token
    if q_keep is not None:  # padded query tokens do not vote
        best = best.masked_fill(~q_keep, 0.0)
    return best.sum(-1)


class Ranker(nn.Module):
    """Selects, weights and concatenates the top-``k`` candidate splits of every split. No parameters.

    Selection work and memory:

    * a batch of mixed lengths is ranked row by row, each row over its own splits only (up to its last real
      split), so a short row costs what it would cost alone, not what the batch's longest row costs;
    * the similarity working set of one step — ``B × (query tokens) × (candidate tokens)`` values — is one
      cache-sized tile (:attr:`TILE_BYTES` per device and precision), reused for every step, and never above
      ``ranker_memory_mb``; past that the query block shrinks too. Each tile gives its own MaxSim columns (no
      rescaling), so the ``block × N`` similarities of a block are never written out; the memory beyond the
      tile is the candidates and one score row per query split — linear in ``N``;
    * under ``torch.export`` / ONNX export the choice is one loop-free computation over all splits (the exported
      graph then runs at every length; its memory is ``N²`` similarities, so exported models are for the lengths
      a deployment serves), and in ``torch.compile`` the selection runs eagerly, outside the graph, so the
      compiled graphs do not depend on the number of splits.
    """

    def __init__(self, config: AveyBConfig):
        super().__init__()
        self.k = config.num_retrieved_splits
        self.bidirectional = config.ranker == "bidirectional"
        self.weighting = config.ranker_weighting
        self.eps = config.ranker_eps
        self.block_size = config.ranker_block_size
        # 8 bytes per similarity: room for an fp32 tile (4) or a bf16 tile with its fp32 copy for the max (6)
        self.memory_elements = config.ranker_memory_mb * 2**20 // 8
        self.low_precision = config.ranker_selection_precision == "bfloat16"
        self.tile_bytes = None  # the similarity tile's size; None: TILE_BYTES for the device (set to A/B-test)
        self.max_in_fp32 = None  # take bf16 tiles' max in fp32; None: on CPU (set to A/B-test)

    # Bytes of similarities per tile: small enough to stay in cache on CPU (the max is taken while the tile is
    # hot, instead of writing and re-reading a block x N matrix), large enough that each GEMM keeps the cores
    # busy; on GPU larger tiles amortize the launches. Measured in benchmarks/roofline/ (README there).
    TILE_BYTES = {("cpu", 4): 2**20, ("cpu", 2): 2 * 2**20, ("cuda", 4): 64 * 2**20, ("cuda", 2): 64 * 2**20}

    def plan(self, B: int, n: int, S: int, element_size: int = 4, device: str = "cpu") -> tuple[int, int]:
        """(query splits per block, candidate splits per tile) for ``B`` rows of ``n`` splits.

        A block has ``ranker_block_size`` query tokens; its candidates are taken in tiles of
        ``tile_bytes`` similarities (a cache-sized working set), and never more than the memory cap allows."""
        per_pair = B * S * S  # similarities of one query split against one candidate split
        blk = max(1, min(max(1, self.block_size // S), n, self.memory_elements // per_pair))
        tile_bytes = self.tile_bytes or self.TILE_BYTES.get((device, element_size), 64 * 2**20)
        tile = max(1, min(n, tile_bytes // (element_size * per_pair * blk), self.memory_elements // (per_pair * blk)))
        return blk, tile

    @torch.compiler.disable
    @torch.no_grad()
    def select(self, xn: torch.Tensor, keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` candidates of every split.

        xn: (B, n, S, d) unit vectors (zero at padding); keep: (B, n, S) or None.
        Returns ``idx`` (B, n, k) candidate split ids laid out as in ``X_cat`` (descending score, missing slots
        on the left) and ``ok`` (B, n, k), whether a slot holds a split.
        """
        B, n, S, d = xn.shape
        if xn.dtype == torch.float32:  # the choice only; the weights are recomputed at full precision in concat()
            if torch.is_autocast_enabled(xn.device.type):  # cast once, not once per tile (the products are the same)
                xn = xn.to(torch.get_autocast_dtype(xn.device.type))
            elif self.low_precision:
                xn = xn.to(torch.bfloat16)
        if keep is None or B == 1:
            return self._select(xn, keep)
        # rows of mixed lengths: each row over its splits up to its last real one
        split_ok = keep.any(-1)
        ends = (split_ok * torch.arange(1, n + 1, device=xn.device)).amax(1).tolist()
        if all(e == n for e in ends):
            return self._select(xn, keep)
        idx = torch.zeros(B, n, self.k, dtype=torch.long, device=xn.device)
        ok = torch.zeros(B, n, self.k, dtype=torch.bool, device=xn.device)
        for b, m in enumerate(ends):
            if m:
                i, o = self._select(xn[b:b + 1, :m], keep[b:b + 1, :m])
                idx[b, :m], ok[b, :m] = i[0], o[0]
        return idx, ok

    def _select(self, xn: torch.Tensor, keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        B, n, S, d = xn.shape
        blk, tile = self.plan(B, n, S, xn.element_size(), xn.device.type)
        # Candidates as a (d, n·S) matrix: every product multiplies two row-major operands, the fast GEMM layout
        # for bf16 on CPU (a transposed operand is about 2x slower there).
        cand = xn.reshape(B, n * S, d).transpose(1, 2).contiguous()
        split_ok = None if keep is None else keep.any(-1)  # (B, n): a split with no real token is no candidate
        buffers: dict[tuple, torch.Tensor] = {}  # one similarity tile per (shape, dtype), reused: stays in cache
        ids, oks = [], []
        for q0 in range(0, n, blk):
            q1 = min(n, q0 + blk)
            J = n if self.bidirectional else q1  # unidirectional: only splits before the block's last one
            q = xn[:, q0:q1].reshape(B, (q1 - q0) * S, d)
            score = torch.empty(B, q1 - q0, J, dtype=torch.float32, device=xn.device)
            for j0 in range(0, J, tile):
                j1 = min(J, j0 + tile)
                self._maxsim_tile(q, cand, keep, q0, q1, j0, j1, buffers, out=score[:, :, j0:j1])
            i, o = self._top_k(score, q0, q1, split_ok)
            ids.append(i)
            oks.append(o)
        return torch.cat(ids, 1), torch.cat(oks, 1)

    def _maxsim_tile(self, q, cand, keep, q0: int, q1: int, j0: int, j1: int, buffers: dict, out: torch.Tensor):
        """MaxSim of query splits ``q0:q1`` (as ``q``: (B, nq·S, d)) against candidate splits ``j0:j1``, written to
        ``out`` (B, nq, jt) in float32: one GEMM into a reused tile buffer, then the max over each candidate
        split's tokens while the tile is in cache (a candidate split never straddles two tiles, so no running max
        across tiles is needed)."""
        B, S = q.shape[0], (q.shape[1] // (q1 - q0))
        shape = (B, q.shape[1], (j1 - j0) * S)

        def tile(dtype: torch.dtype) -> torch.Tensor:
            if (shape, dtype) not in buffers:
                buffers[shape, dtype] = torch.empty(shape, dtype=dtype, device=q.device)
            return buffers[shape, dtype]

        sim = torch.matmul(q, cand[:, :, j0 * S: j1 * S], out=tile(q.dtype))  # cosines
        sim = sim.view(B, q1 - q0, S, j1 - j0, S)
        if sim.dtype != torch.float32 and (self.max_in_fp32 if self.max_in_fp32 is not None else sim.is_cpu):
            # PyTorch's CPU max over a short last dimension is several times slower in bf16 than a bf16 -> fp32
            # copy plus the fp32 max (benchmarks/roofline/); the copy is exact, so the choice is the same
            sim = tile(torch.float32).view_as(sim).copy_(sim)
        if keep is not None:  # a padded candidate token is never the best match
            sim.masked_fill_(~keep[:, None, None, j0:j1, :], float("-inf"))
        best = sim.amax(-1)  # (B, nq, S, jt) best candidate token per query token
        if keep is not None:  # padded query tokens do not vote
            best.masked_fill_(~keep[:, q0:q1, :, None], 0.0)
        torch.sum(best, 2, dtype=torch.float32, out=out)

    def _top_k(self, score: torch.Tensor, q0, q1, split_ok) -> tuple[torch.Tensor, torch.Tensor]:
        """From MaxSim scores (B, nq, J) of query splits q0:q1: the k best allowed candidates, laid out as in
        ``X_cat`` (missing slots on the left)."""
        k, J, device = self.k, score.shape[-1], score.device
        i = torch.arange(q1 - q0, device=device)[:, None] + q0
        j = torch.arange(J, device=device)[None, :]
        allowed = (j != i) if self.bidirectional else (j < i)  # (nq, J)
        if split_ok is not None:
            allowed = allowed & split_ok[:, None, :J]
        score = score.masked_fill(~allowed, float("-inf"))
        # k impossible columns more: topk(k) is defined at every number of candidates (also in exported graphs)
        score = F.pad(score, (0, k), value=float("-inf"))
        val, idx = score.topk(k, dim=-1)  # descending, impossible (-inf) ones last
        # Move the m valid entries to the right end: slot p holds entry p - (k - m).
        m = torch.isfinite(val).sum(-1, keepdim=True)
        src = torch.arange(k, device=device) - (k - m)
        ok = src >= 0
        return idx.gather(-1, src.clamp_min(0)).masked_fill(~ok, 0), ok

    def select_for_export(self, xn: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The same choice as :meth:`select`, as one loop-free computation over all ``n`` splits (what
        ``torch.export`` and ONNX can capture for every ``n``)."""
        B, n, S, d = xn.shape
        q = xn.reshape(B, n * S, d)
        sim = (q @ q.transpose(1, 2)).view(B, n, S, n, S)
        sim = sim.masked_fill(~keep[:, None, None, :, :], float("-inf"))
        best = sim.amax(-1).float().masked_fill(~keep[:, :, :, None], 0.0)
        return self._top_k(best.sum(2), 0, n, keep.any(-1))

    def choose(self, x: torch.Tensor, keep: torch.Tensor | None):
        """The choice for every split: ``(xn, idx, ok)`` with ``xn`` the unit vectors (B, n, S, d), ``idx`` (B, n, k)
        candidate split ids laid out as in ``X_cat`` and ``ok`` (B, n, k) whether a slot holds a split."""
        B, n, S, d = x.shape
        xn = F.normalize(x, dim=-1, eps=1e-12)
        if self.k == 0:
            empty = torch.zeros(B, n, 0, dtype=torch.long, device=x.device)
            return xn, empty, empty.bool()
        if torch.compiler.is_exporting():
            keep_all = torch.ones(B, n, S, dtype=torch.bool, device=x.device) if keep is None else keep
            idx, ok = self.select_for_export(xn, keep_all)
        else:
            idx, ok = self.select(xn, keep)
        return xn, idx, ok

    def concat(self, x: torch.Tensor, xn: torch.Tensor, keep: torch.Tensor | None, idx: torch.Tensor,
               ok: torch.Tensor, rows) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``X_cat`` (R, (k+1)S, d) and its keep mask for the processor rows ``rows`` (a slice or index tensor).

        All arguments are flat over splits: ``x``/``xn`` (B·n, S, d), ``keep`` (B·n, S) or None, ``idx`` (B·n, k)
        *global* split ids, ``ok`` (B·n, k). Rows are independent, so the model can build them in chunks."""
        xs = x[rows]
        ks = None if keep is None else keep[rows]
        if self.k == 0:
            return xs, ks
        sel, okr = idx[rows], ok[rows]  # (R, k)
        keep_sel = None if keep is None else keep[sel]  # (R, k, S)
        # MaxSim of the k selected pairs, recomputed at the model's precision and under autograd when it is on
        # (O(N·k·S·d): cheap next to the selection, and the only part that gradients flow through).
        score = _maxsim(xn[rows].unsqueeze(1), xn[sel], None if ks is None else ks.unsqueeze(1), keep_sel)
        # Normalize by the largest (paper) or smallest (release) selected score.
        if self.weighting == "max":
            den = score.masked_fill(~okr, float("-inf")).amax(-1, keepdim=True)
        else:
            den = score.masked_fill(~okr, float("inf")).amin(-1, keepdim=True)
        w = torch.where(okr, score / (den + self.eps), torch.zeros_like(score))  # (R, k); 0 for empty slots
        retrieved = x[sel] * w[..., None, None].to(x.dtype)  # (R, k, S, d)
        x_cat = torch.cat([retrieved.flatten(1, 2), xs], dim=1)  # (R, (k+1)S, d)
        if ks is None:
            ks = torch.ones(xs.shape[:2], dtype=torch.bool, device=x.device)
        slot = (okr[..., None] if keep_sel is None else keep_sel & okr[..., None]).expand(-1, -1, xs.shape[1])
        return x_cat, torch.cat([slot.flatten(1, 2), ks], dim=1)

    @staticmethod
    def flat(x: torch.Tensor, keep: torch.Tensor | None, idx: torch.Tensor, ok: torch.Tensor, xn: torch.Tensor):
        """The (B, n, ...) tensors of :meth:`choose` flattened over splits for :meth:`concat` (ids made global)."""
        B, n, S, d = x.shape
        gidx = (idx + n * torch.arange(B, device=x.device)[:, None, None]).reshape(B * n, -1)
        return (x.reshape(B * n, S, d), xn.reshape(B * n, S, d), None if keep is None else keep.reshape(B * n, S),
                gidx, ok.reshape(B * n, -1))

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, n, S, d) embeddings, zero at padding.

        Returns ``X_cat`` (B, n, (k+1)S, d) and its keep mask (B, n, (k+1)S), where empty slots count as padding.
        """
        B, n, S, d = x.shape
        if self.k == 0:
            return x, keep
        xn, idx, ok = self.choose(x, keep)
        x_f, xn_f, keep_f, gidx, ok_f = self.flat(x, keep, idx, ok, xn)
        x_cat, keep_cat = self.concat(x_f, xn_f, keep_f, gidx, ok_f, slice(None))
        return x_cat.view(B, n, -1, d), keep_cat.view(B, n, -1)


class Compressor(nn.Module):
    """Neural compressor ``X̂ = P · X_cat (+ X_i)``, ``P ∈ R^{S×(k+1)S}`` learned (§4.3, Eq. compression)."""

    def __init__(self, config: AveyBConfig):
        super().__init__()
        S = config.split_size
        self.weight = nn.Parameter(torch.empty(S, (config.num_retrieved_splits + 1) * S))
        self.residual = config.compressor_residual

    def forward(self, x_cat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """x_cat: (B, n, (k+1)S, d); x: (B, n, S, d) the current splits.  Returns (B, n, S, d)."""
        out = self.weight.to(x_cat.dtype) @ x_cat
        return out + x if self.residual else out
