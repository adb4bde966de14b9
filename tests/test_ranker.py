"""The ranker's reference (:func:`maxsim`, :func:`reference_choice` and the weighted selective split, paper §3.1)
against slow loops written here from the paper, then every path that computes the choice (dense tiles, the
vocabulary factoring, the loop-free formulas of both that exported graphs run, and the incremental path of a
document fed in pieces, unidirectional) against the reference, on random inputs and on heavily repeated token ids,
where exact ties are common."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from avey_b import AveyBModel
from avey_b.model import presets, ranker_fast, splits
from avey_b.model.ranker import Choice, Compressor, Ranker, reference_choice
from avey_b.model.ranker_fast import _PAIR_BYTES, plan, plan_vocabulary
from avey_b.model.similarity import maxsim, unit_vectors

PATHS = ["dense", "vocabulary", "export", "export-vocabulary", "incremental"]


def with_execution(config, **settings):
    """A copy of ``config`` whose execution settings have ``settings`` (a ranker built from it runs with them)."""
    config = copy.deepcopy(config)
    for name, value in settings.items():
        setattr(config, name, value)
    return config


def select(ranker, xn, keep, ids=None):
    """The choice of the ranker's fast paths (:func:`avey_b.model.ranker_fast.select`), with its settings."""
    return ranker_fast.select(xn, keep, ids, k=ranker.k, bidirectional=ranker.bidirectional,
                              execution=ranker.execution)


def select_for_export(ranker, xn, keep, ids=None):
    """The choice of the loop-free formulas that exported graphs run, with the ranker's settings."""
    return ranker_fast.select_for_export(xn, keep, ids, k=ranker.k, bidirectional=ranker.bidirectional)


def memory_mb(elements: int) -> float:
    """``ranker_memory_mb`` for a cap of ``elements`` 8-byte units (the ranker's unit of account)."""
    return elements * 8 / 2**20


def cosine(a, b):
    na, nb = a.norm(), b.norm()
    if na == 0 or nb == 0:
        return torch.tensor(0.0, dtype=a.dtype)
    return (a @ b) / (na * nb)


def loop_maxsim(x, keep, b, i, j):
    """MaxSim(i, j) of row b as §3.1 writes it, token by token: Σ over the real tokens t of split i of the best
    cosine with a real token u of split j."""
    S = x.shape[2]
    return sum(max(cosine(x[b, i, t], x[b, j, u]).item() for u in range(S) if keep[b, j, u])
               for t in range(S) if keep[b, i, t])


def loop_choice(x, keep, k, bidirectional):
    """The top-k of every split, by loops: {(b, i): [chosen splits, best first]} and the scores. Tie rule: on equal
    scores the nearer split wins; at equal distance, the preceding one. A split of padding only is no candidate."""
    B, n = x.shape[:2]
    chosen, scores = {}, {}
    for b in range(B):
        for i in range(n):
            allowed = [j for j in range(n) if j != i and (bidirectional or j < i) and keep[b, j].any()]
            for j in allowed:
                scores[b, i, j] = loop_maxsim(x, keep, b, i, j)
            chosen[b, i] = sorted(allowed, key=lambda j: (-scores[b, i, j], abs(i - j), j > i))[:k]
    return chosen, scores


def oracle(x, keep, k, bidirectional, weighting, eps):
    """The model's reference: X_cat (B, n, (k+1)S, d) of :func:`reference_choice` through the weighted selective
    split, and the chosen ids {(b, i): [splits, best first]} (each checked against the loops above)."""
    cfg = presets.tiny(split_size=x.shape[2], num_retrieved_splits=k, ranker_weighting=weighting, ranker_eps=eps,
                       ranker="bidirectional" if bidirectional else "unidirectional")
    idx, ok = reference_choice(unit_vectors(x), keep, k, bidirectional)
    x_cat, _ = retrieve(Ranker(cfg), x, keep, idx, ok)
    return x_cat, {(b, i): idx[b, i][ok[b, i]].tolist() for b in range(x.shape[0]) for i in range(x.shape[1])}


def incremental(ranker, x, keep, ids):
    """(idx, ok) of :meth:`Ranker.choose` (the incremental path) on embeddings x (B, n, S, d) of token ids, real
    tokens first in each row: per row, every split with a real token among the full splits, the candidates kept as
    token ids (a document fed in pieces: the last split may be partial)."""
    if ranker.bidirectional:
        pytest.skip("the incremental path is unidirectional")
    B, n, S, d = x.shape
    keep = torch.ones(B, n, S, dtype=torch.bool) if keep is None else keep
    table = torch.nn.Embedding(int(ids.max()) + 1, d, dtype=x.dtype)
    with torch.no_grad():
        table.weight[ids[keep]] = x[keep]  # the embeddings x holds, by id
    idx = torch.zeros(B, n, ranker.k, dtype=torch.long)
    ok = torch.zeros(B, n, ranker.k, dtype=torch.bool)
    for b in range(B):
        row = ids[b][keep[b]]  # the row's token ids, as a document state keeps them
        queries = torch.arange(-(-row.numel() // S))
        full = torch.arange(row.numel() // S)
        choice = ranker.choose(splits.cut_splits(row, queries, S, table), queries, full,
                               lambda js, row=row: splits.split_ids(row, js, S)[0], table, n_bound=n)
        idx[b, :queries.numel()], ok[b, :queries.numel()] = choice.idx[0], choice.filled[0]
    return idx, ok


def choose(ranker, x, keep, ids, path):
    """(idx, ok) of one path on embeddings x (B, n, S, d)."""
    if path == "incremental":
        return incremental(ranker, x, keep, ids)
    xn = F.normalize(x, dim=-1, eps=1e-12)
    keep_all = torch.ones(x.shape[:3], dtype=torch.bool) if keep is None else keep
    if path == "export":
        return select_for_export(ranker, xn, keep_all)
    if path == "export-vocabulary":
        return select_for_export(ranker, xn, keep_all, ids)
    if path == "vocabulary":
        ranker.config.ranker_algorithm = "vocabulary"
        return select(ranker, xn, keep, ids)
    return select(ranker, xn, keep)


def retrieve(ranker, x, keep, idx, ok):
    """X_cat (B, n, (k+1)S, d) and its keep mask for a choice, built as the model builds it."""
    B, n, S, d = x.shape
    xn = F.normalize(x, dim=-1, eps=1e-12)
    choice = Choice(x=x, keep=keep, unit=xn, idx=idx, filled=ok)
    x_cat, keep_cat = ranker.weighted_selective_split(choice, slice(None))
    return x_cat.view(B, n, -1, d), keep_cat.view(B, n, -1)


def make_inputs(B=2, n=5, S=3, d=6, seed=0, pad_last=2, V=None):
    """Embeddings of token ids (V distinct ids; None: every token its own id), right padding in the second row."""
    g = torch.Generator().manual_seed(seed)
    V = V or B * n * S
    table = torch.randn(V, d, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (B, n, S), generator=g) if V < B * n * S else torch.randperm(V, generator=g).view(B, n, S)
    keep = torch.ones(B, n, S, dtype=torch.bool)
    keep.view(B, n * S)[1, n * S - pad_last:] = False
    return table[ids] * keep.unsqueeze(-1), keep, ids


# -- the reference against the paper, written as loops ----------------------------------------------------------
def test_maxsim_is_the_sum_of_each_tokens_best_cosine():
    x, keep, _ = make_inputs(S=3, pad_last=4, V=7)
    xn = unit_vectors(x)
    got = maxsim(xn, xn, keep, keep)  # (B, n, n)
    for b in range(2):
        for i in range(5):
            for j in range(5):
                if keep[b, j].any() or not keep[b, i].any():
                    assert got[b, i, j].item() == pytest.approx(loop_maxsim(x, keep, b, i, j), abs=1e-12)
                else:  # a split of padding only is never the best match of a real token
                    assert got[b, i, j] == float("-inf")


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_reference_choice_is_the_top_k_under_the_tie_rule(bidirectional, k):
    x, keep, _ = make_inputs(S=3, pad_last=4, V=7)  # 7 ids: exact ties (test_the_oracle_inputs_have_exact_ties)
    want, _ = loop_choice(x, keep, k, bidirectional)
    idx, ok = reference_choice(unit_vectors(x), keep, k, bidirectional)
    for (b, i), top in want.items():
        assert idx[b, i][ok[b, i]].tolist() == top  # best first
        assert ok[b, i].tolist() == [False] * (k - len(top)) + [True] * len(top)  # empty slots on the left


@pytest.mark.parametrize("weighting", ["max", "min"])
def test_weighted_selective_split_weights_each_split_by_its_normalized_score(weighting):
    """X_cat = [w_1 X_j1 | ... | w_k X_jk | X_i], w = MaxSim / (the largest (paper; release: smallest) selected
    MaxSim + eps), missing slots as zeros on the left."""
    k, eps = 2, 1e-6
    x, keep, _ = make_inputs(S=3, pad_last=4, V=7)
    chosen, scores = loop_choice(x, keep, k, bidirectional=False)
    got, _ = oracle(x, keep, k, False, weighting, eps)
    for (b, i), top in chosen.items():
        want = torch.zeros(k + 1, 3, x.shape[-1], dtype=x.dtype)
        if top:
            vals = [scores[b, i, j] for j in top]
            den = (max(vals) if weighting == "max" else min(vals)) + eps
            for p, j in enumerate(top):
                want[k - len(top) + p] = x[b, j] * (scores[b, i, j] / den)
        want[k] = x[b, i]
        torch.testing.assert_close(got[b, i], want.flatten(0, 1), rtol=1e-9, atol=1e-9)


# -- every path against the reference ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("weighting", ["max", "min"])
@pytest.mark.parametrize("block", [1, 2, 1000])  # query splits per block: many blocks, uneven blocks, one block
def test_every_path_matches_the_reference(path, bidirectional, weighting, block):
    S, k = 3, 2
    cfg = presets.tiny(split_size=S, num_retrieved_splits=k,
                       ranker="bidirectional" if bidirectional else "unidirectional",
                       ranker_weighting=weighting, ranker_block_size=block * S)
    x, keep, ids = make_inputs(S=S, pad_last=4, V=7)  # 4 > S: the last split of row 1 is all padding; 7 ids: ties
    ranker = Ranker(cfg)
    expected, chosen = oracle(x, keep, k, bidirectional, weighting, cfg.ranker_eps)
    idx, ok = choose(ranker, x, keep, ids, path)
    got, keep_cat = retrieve(ranker, x, keep, idx, ok)
    real = keep.any(-1)  # all-padding query splits: every score is 0; their outputs are dropped by the model
    want_idx, want_ok = reference_choice(unit_vectors(x), keep, k, bidirectional)
    assert torch.equal(idx[real], want_idx[real]) and torch.equal(ok[real], want_ok[real])
    torch.testing.assert_close(got[real], expected[real], rtol=1e-9, atol=1e-9)
    # selection: the first split never retrieves (unidirectional); a short candidate list leaves zero slots on the left
    if not bidirectional:
        assert chosen[0, 0] == [] and got[0, 0, : k * S].abs().sum() == 0
        assert len(chosen[0, 1]) == 1 and got[0, 1, :S].abs().sum() == 0 and got[0, 1, S:2 * S].abs().sum() > 0
    # an all-padding split (row 1, last) is never retrieved
    assert all(4 not in top for (b, i), top in chosen.items() if b == 1)
    # the keep mask of X_cat marks empty slots and padded tokens as padding
    for (b, i), top in chosen.items():
        if not keep[b, i].any():
            continue
        slot0 = k - len(top)
        assert not keep_cat[b, i, : slot0 * S].any()
        for p, j in enumerate(top):
            assert torch.equal(keep_cat[b, i, (slot0 + p) * S:(slot0 + p + 1) * S], keep[b, j])


def test_the_oracle_inputs_have_exact_ties():
    """The tests above exercise the tie rule: their inputs hold exactly tied MaxSim scores."""
    x, keep, _ = make_inputs(S=3, pad_last=4, V=7)
    xn = F.normalize(x, dim=-1)
    scores = torch.einsum("isd,jtd->ijst", xn[0], xn[0]).amax(-1).sum(-1)
    tril = scores[torch.tril_indices(5, 5, -1).unbind()]
    assert tril.unique().numel() < tril.numel()


@pytest.mark.parametrize("path", PATHS)
def test_ranker_without_padding_mask_equals_all_true_mask(path):
    ranker = Ranker(presets.tiny(split_size=3, num_retrieved_splits=2))
    x, _, ids = make_inputs(S=3, pad_last=0, V=9)
    a = choose(ranker, x, None, ids, path)
    b = choose(ranker, x, torch.ones(x.shape[:3], dtype=torch.bool), ids, path)
    for u, v in zip(a, b, strict=True):
        assert torch.equal(u, v)


def test_gradient_flows_through_weights_not_choice():
    """With autograd on, the weights are recomputed for the selected pairs; values match the no-grad path and
    the retrieved splits receive gradient through both their content and their weight."""
    ranker = Ranker(presets.tiny(split_size=3, num_retrieved_splits=2))
    x, keep, _ = make_inputs(S=3, pad_last=2)
    with torch.no_grad():
        choice = ranker(x, keep)
        idx, ok = choice.idx, choice.filled
        ref, _ = retrieve(ranker, x, keep, idx, ok)
    xg = x.clone().requires_grad_(True)
    choice = ranker(xg, keep)
    idx_g, ok_g = choice.idx, choice.filled
    assert torch.equal(idx_g, idx) and torch.equal(ok_g, ok)
    out, _ = retrieve(ranker, xg, keep, idx_g, ok_g)
    torch.testing.assert_close(out.detach(), ref, rtol=1e-12, atol=1e-12)
    # d(weight)/d(current split) is non-zero: the current split (slot k) gets gradient from the retrieved slots
    out[:, 2, : 2 * 3].sum().backward()
    assert xg.grad[:, 2].abs().sum() > 0  # only through the cosine scores of split 2 against its candidates
    assert xg.grad[:, 0].abs().sum() > 0 or xg.grad[:, 1].abs().sum() > 0


def test_weights_are_at_most_one_for_paper_and_at_least_one_for_release():
    x, _, _ = make_inputs(S=3, n=6, pad_last=0)
    x = x.abs()  # non-negative embeddings: positive MaxSim scores
    for weighting in ("max", "min"):
        ranker = Ranker(presets.tiny(split_size=3, num_retrieved_splits=2, ranker_weighting=weighting))
        choice = ranker(x, None)
        idx, ok = choice.idx, choice.filled
        out, _ = retrieve(ranker, x, None, idx, ok)
        i = 4  # two candidates or more
        w = out[0, i, :6].reshape(2, 3, -1).norm(dim=(1, 2)) / x[0, idx[0, i]].norm(dim=(1, 2))
        if weighting == "max":
            assert (w <= 1 + 1e-5).all() and math.isclose(w.max().item(), 1.0, rel_tol=1e-5)
        else:
            assert (w >= 1 - 1e-5).all() and math.isclose(w.min().item(), 1.0, rel_tol=1e-5)


def test_compressor_is_linear_map_plus_residual():
    cfg = presets.tiny(split_size=3, num_retrieved_splits=2)
    comp = Compressor(cfg)
    torch.nn.init.normal_(comp.weight)
    x_cat = torch.randn(2, 4, 9, 5)
    x = x_cat[:, :, -3:]
    expected = torch.einsum("sc,bncd->bnsd", comp.weight, x_cat) + x
    torch.testing.assert_close(comp(x_cat, x), expected)
    comp.residual = False
    torch.testing.assert_close(comp(x_cat, x), expected - x)


def test_bf16_selection_keeps_exact_weights():
    """With the selection GEMM in bf16, well-separated choices are the same and the weights stay exact (fp32)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 16, 64, generator=g)
    x[:, :, :, :8] += 3 * torch.randn(2, 8, 1, 8, generator=g)  # split-level topics: well-separated MaxSim
    exact = Ranker(presets.tiny(split_size=16, num_retrieved_splits=3))
    fast = Ranker(presets.tiny(split_size=16, num_retrieved_splits=3, ranker_selection_precision="bfloat16"))
    choice, choice_f = exact(x, None), fast(x, None)
    idx, ok, idx_f, ok_f = choice.idx, choice.filled, choice_f.idx, choice_f.filled
    assert torch.equal(idx, idx_f)
    torch.testing.assert_close(retrieve(fast, x, None, idx_f, ok_f)[0], retrieve(exact, x, None, idx, ok)[0],
                               rtol=0, atol=0)


def test_the_similarity_tile_is_cache_sized_and_within_the_memory_cap_at_every_length():
    ranker = Ranker(presets.small())  # S = 64, 512-token query blocks, ranker_memory_mb = 256
    for N in (1024, 16_384, 65_536, 262_144, 1_048_576):
        for size in (4, 2):  # fp32, bf16
            blk, tile = plan(ranker.execution, 1, N // 64, 64, size)
            assert blk == min(8, N // 64)  # the query block does not shrink with N
            assert tile * 64 * blk * 64 * size <= ranker.execution.tile_bytes["cpu", size]  # one cache-sized tile
    assert plan(ranker.execution, 1, 256, 64, 4) == (8, 16) and plan(ranker.execution, 1, 256, 64, 2) == (8, 32)
    assert plan(ranker.execution, 1, 256, 64, 4, "cuda")[1] == 256  # GPU: whole candidate rows at 16K tokens
    ranker = Ranker(presets.small(ranker_memory_mb=memory_mb(2 * 64 * 64)))  # a tiny cap wins over the tile size,
    assert plan(ranker.execution, 1, 256, 64, 4) == (2, 1)  # then over the block


@pytest.mark.parametrize("size", [4, 2])
def test_the_vocabulary_working_set_at_1m_tokens_stays_within_the_cap(size):
    """At 1M tokens (S = 64: 16,384 splits) with 32K distinct ids (cl100k on English text) — and with as many
    distinct ids as the vocabulary holds — one step's similarity tile is cache-sized, and the tile of M columns
    with every query split's scores against it stays within ranker_memory_mb."""
    ranker = Ranker(presets.small())
    cap = presets.small().ranker_memory_mb * 2**20
    n, S = 2**20 // 64, 64
    for U in (32_000, 50_368):
        ids, tile, cols = plan_vocabulary(ranker.execution, U, n, S, size)
        assert ids * tile * S * size <= ranker.execution.tile_bytes["cpu", size]  # one cache-sized tile a step
        similarity = ids * tile * S * size + (ids * tile * S * 4 if size == 2 else 0)  # + the fp32 copy for the max
        scores = (U + 1) * cols * 4 + n * cols * _PAIR_BYTES
        assert similarity + scores <= cap
        assert cols >= 64  # wide enough for the embedding-bag sums to stream whole rows of M
    # small inputs: one tile of M columns covers every candidate
    assert plan_vocabulary(ranker.execution, 2_800, 256, 64)[2] == 256


@pytest.mark.parametrize("bidirectional", [False, True])
def test_tiling_does_not_change_the_choice(bidirectional):
    config = presets.tiny(ranker="bidirectional" if bidirectional else "unidirectional")
    x = torch.nn.functional.normalize(torch.randn(2, 9, 4, 32, generator=torch.Generator().manual_seed(0)), dim=-1)
    keep = torch.ones(2, 9, 4, dtype=torch.bool)
    keep[1, 6:] = False
    keep[0, 2, 1:] = False
    wide, tiled = Ranker(config), Ranker(with_execution(config, ranker_memory_mb=memory_mb(2 * 4 * 4)))
    # tiled: one query split x one candidate split per step
    assert plan(tiled.execution, 2, 9, 4) == (1, 1)
    for a, b in zip(select(wide, x, keep), select(tiled, x, keep), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_bf16_choice_equals_the_loop_free_formula_in_bf16(bidirectional):
    """The tiled bf16 path (GEMM in bf16, max and sum in fp32 on CPU) chooses what the one-matrix formula of the
    export path chooses on the same bf16 unit vectors."""
    direction = "bidirectional" if bidirectional else "unidirectional"
    config = presets.tiny(split_size=8, num_retrieved_splits=3, ranker=direction)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 40, 8, 32, generator=g)
    x[..., :4] += 2 * torch.randn(1, 40, 1, 4, generator=g)  # split-level topics: no near-ties
    xn = torch.nn.functional.normalize(x, dim=-1).bfloat16()
    tiles = {**config.tile_bytes, ("cpu", 2): 8 * 8 * 8 * 2 * 3}  # several tiles per query block
    ranker = Ranker(with_execution(config, tile_bytes=tiles))
    keep = torch.ones(1, 40, 8, dtype=torch.bool)
    for a, b in zip(select(ranker, xn, None), select_for_export(ranker, xn, keep), strict=True):
        assert torch.equal(a, b)


# -- the vocabulary path against the dense path on heavily repeated ids ----------------------------------------------
def repeated_batch(seed, B, N, S, V=50, d=16, side="right"):
    """Embeddings (B, n, S, d) of ids drawn from a V-id vocabulary (rows of mixed lengths, padded on ``side`` and
    then moved to the front as the model does), the keep mask and the ids."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(V, d, generator=g)
    ids = torch.randint(0, V, (B, N), generator=g)
    ids[:, N // 3: N // 3 + 2 * S] = ids[:, :2 * S]  # a repeated passage: exactly tied candidates
    lengths = [N] + [int(torch.randint(1, N + 1, (1,), generator=g)) for _ in range(B - 1)]
    keep = torch.zeros(B, N, dtype=torch.bool)
    for b, m in enumerate(lengths):  # only relative position matters to the ranker: real tokens first
        keep[b, :m] = True
    n = -(-N // S)
    keep = F.pad(keep, (0, n * S - N)).view(B, n, S)
    ids = F.pad(ids, (0, n * S - N)).view(B, n, S) * keep
    return table[ids] * keep.unsqueeze(-1), keep, ids


def float64_scores(x, keep):
    """MaxSim of every split against every split, in float64: (B, n, n)."""
    B, n, S, d = x.shape
    xn = F.normalize(x.double(), dim=-1, eps=1e-12)
    sim = torch.einsum("bisd,bjtd->bijst", xn, xn).masked_fill(~keep[:, None, :, None, :], float("-inf"))
    return sim.amax(-1).masked_fill(~keep[:, :, None, :], 0).sum(-1)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_vocabulary_path_chooses_what_the_dense_path_chooses(bidirectional, k):
    S = 5
    config = presets.tiny(split_size=S, num_retrieved_splits=k,
                          ranker="bidirectional" if bidirectional else "unidirectional")
    for seed in range(3):
        x, keep, ids = repeated_batch(seed, B=3, N=173, S=S)  # S does not divide N
        xn = F.normalize(x, dim=-1, eps=1e-12)
        dense, vocab = Ranker(config), Ranker(with_execution(config, ranker_algorithm="vocabulary"))
        idx_d, ok_d = select(dense, xn, keep)
        idx_v, ok_v = select(vocab, xn, keep, ids)
        assert torch.equal(ok_d, ok_v)
        ref = float64_scores(x, keep)
        real = keep.any(-1)
        for b in range(x.shape[0]):
            for i in range(x.shape[1]):
                if not real[b, i]:
                    continue
                s_d, s_v = ref[b, i, idx_d[b, i]][ok_d[b, i]], ref[b, i, idx_v[b, i]][ok_v[b, i]]
                torch.testing.assert_close(s_v, s_d, rtol=0, atol=1e-5)  # the same scores, chosen in the same order
        # with the tie rule: the same splits everywhere (repeated text gives exactly tied scores), also in the
        # loop-free formulas that exported graphs run
        assert torch.equal(idx_d[real], idx_v[real])
        for idx_e, ok_e in (select_for_export(vocab, xn, keep, ids), select_for_export(dense, xn, keep)):
            assert torch.equal(idx_e[real], idx_d[real]) and torch.equal(ok_e[real], ok_d[real])


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("path", PATHS)
def test_every_path_chooses_what_the_reference_chooses_on_repeated_text(path, bidirectional):
    """Real-text-like input (a 50-id vocabulary, a repeated passage: exact ties), rows of mixed lengths, small tiles
    and blocks (many of each): every path makes the reference's choice."""
    S, k = 4, 3
    config = with_execution(presets.tiny(split_size=S, num_retrieved_splits=k,
                                         ranker="bidirectional" if bidirectional else "unidirectional"),
                            ranker_block_size=8, ranker_memory_mb=memory_mb(256))
    for seed in range(2):
        x, keep, ids = repeated_batch(seed, B=3, N=157, S=S)
        x = x.double()
        want_idx, want_ok = reference_choice(unit_vectors(x), keep, k, bidirectional)
        idx, ok = choose(Ranker(config), x, keep, ids, path)
        real = keep.any(-1)
        assert torch.equal(ok[real], want_ok[real]) and torch.equal(idx[real], want_idx[real])


def test_repeated_text_has_exact_ties_that_the_tie_rule_breaks():
    """The inputs above do hold exact ties at the top-k boundary: without a shared rule the paths could differ."""
    x, keep, _ = repeated_batch(0, B=1, N=173, S=5)
    ref = float64_scores(x, keep)[0]
    n = ref.shape[0]
    tied = 0
    for i in range(2, n):
        top = ref[i, :i].sort(descending=True).values
        tied += int((top[:-1] == top[1:]).any())
    assert tied > 0


def test_vocabulary_tiles_and_id_order_do_not_change_the_choice():
    """Tiles and id order change which GEMM computes a similarity, and BLAS kernels of different shapes may round
    a dot product differently (seen on a Xeon, not on an EPYC): two splits with the same tokens, exactly tied in
    exact arithmetic, can then differ by an ulp and swap ranks. What holds everywhere: the same splits are
    filled, and at every rank the chosen split's exact (float64) score equals the reference choice's — the
    choices differ at most in the order of exactly tied splits."""
    config = presets.tiny(split_size=4, num_retrieved_splits=3)
    x, keep, ids = repeated_batch(5, B=2, N=301, S=4)
    xn = F.normalize(x, dim=-1, eps=1e-12)
    ref = float64_scores(x, keep)
    config = with_execution(config, ranker_algorithm="vocabulary")
    # tiled: M in tiles of two candidate splits, ids in blocks of eight
    tiled_config = with_execution(config, ranker_memory_mb=memory_mb(64), ranker_block_size=8)
    assert plan_vocabulary(tiled_config.execution, 50, 76, 4) == (8, 2, 2)
    want_idx, want_ok = select(Ranker(config), xn, keep, ids)
    rows = torch.arange(ref.shape[1])[:, None]
    for order in (True, False):
        wide, tiled = (Ranker(with_execution(c, order_by_last_split=order)) for c in (config, tiled_config))
        for idx, ok in (select(tiled, xn, keep, ids), select(wide, xn, keep, ids)):
            assert torch.equal(ok, want_ok)
            for b in range(ref.shape[0]):
                got, want = ref[b][rows, idx[b]], ref[b][rows, want_idx[b]]
                assert torch.equal(got[ok[b]], want[ok[b]])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_whole_model_is_the_same_under_dense_and_vocabulary(bidirectional):
    """Model outputs under ranker_algorithm dense / vocabulary / auto on repeated ids, padding on both sides."""
    overrides = {"ranker": "bidirectional" if bidirectional else "unidirectional", "split_size": 5, "vocab_size": 50}
    torch.manual_seed(0)
    models = {a: AveyBModel(presets.tiny(**overrides, ranker_algorithm=a)).eval()
              for a in ("dense", "vocabulary", "auto")}
    for m in models.values():
        m.load_state_dict(models["dense"].state_dict())
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (3, 203), generator=g)
    ids[:, 100:140] = ids[:, 0:40]
    mask = torch.ones_like(ids)
    mask[1, 150:] = 0  # right padding
    mask[2, :37] = 0  # left padding
    with torch.no_grad():
        out = {a: m(ids, attention_mask=mask).last_hidden_state for a, m in models.items()}
    real = mask.bool()
    torch.testing.assert_close(out["vocabulary"][real], out["dense"][real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["auto"][real], out["dense"][real], rtol=1e-5, atol=1e-5)


def _spy(monkeypatch):
    """Record which path ranked each row: 'vocabulary' when the vocabulary path returned a choice, else 'dense'."""
    calls = []
    real_vocab, real_dense = ranker_fast.select_vocabulary, ranker_fast.select_dense

    def vocab(*args, **kwargs):
        got = real_vocab(*args, **kwargs)
        if got is not None:
            calls.append("vocabulary")
        return got

    monkeypatch.setattr(ranker_fast, "select_vocabulary", vocab)
    monkeypatch.setattr(ranker_fast, "select_dense", lambda *a, **kw: calls.append("dense") or real_dense(*a, **kw))
    return calls


def test_auto_takes_the_vocabulary_path_where_it_is_exact_and_cheaper(monkeypatch):
    calls = _spy(monkeypatch)
    config = presets.tiny(vocab_size=1000)
    torch.manual_seed(0)
    model = AveyBModel(config).eval()
    repeated = torch.randint(0, 20, (1, 400))
    distinct = torch.randperm(1000)[:400][None]
    with torch.no_grad():
        model(repeated)
        assert calls == ["vocabulary"]
        calls.clear()
        model(distinct)  # U = N: the factoring saves nothing
        assert calls == ["dense"]
        calls.clear()
        model(inputs_embeds=model.embed_tokens(repeated))  # no ids: the embeddings could be anything
        assert calls == ["dense"]
        calls.clear()
    dropout = AveyBModel(presets.tiny(vocab_size=1000, embedding_dropout=0.1))
    dropout.load_state_dict(model.state_dict())
    dropout.train()(repeated)  # dropout active: equal ids no longer have equal vectors
    assert calls == ["dense"]
    calls.clear()
    with torch.no_grad():
        dropout.eval()(repeated)
    assert calls == ["vocabulary"]


def test_auto_falls_back_and_vocabulary_refuses_when_equal_ids_have_different_vectors(monkeypatch):
    """A hook that adds noise to the embeddings (as NEFTune does) breaks the factoring: auto ranks densely, an
    explicit 'vocabulary' says why it cannot."""
    calls = _spy(monkeypatch)
    ids = torch.randint(0, 20, (1, 400), generator=torch.Generator().manual_seed(0))
    for algorithm in ("auto", "vocabulary"):
        torch.manual_seed(0)
        model = AveyBModel(presets.tiny(vocab_size=1000, ranker_algorithm=algorithm)).eval()
        model.embed_tokens.register_forward_hook(lambda module, args, out: out + 0.01 * torch.randn_like(out))
        with torch.no_grad():
            if algorithm == "auto":
                model(ids)
                assert calls == ["dense"]
            else:
                with pytest.raises(ValueError, match="same id have different embeddings"):
                    model(ids)


def test_vocabulary_without_token_ids_is_a_clear_error():
    model = AveyBModel(presets.tiny(ranker_algorithm="vocabulary")).eval()
    with pytest.raises(ValueError, match="needs token ids"):
        model(inputs_embeds=torch.randn(1, 20, 32))
    with pytest.raises(ValueError, match="ranker_algorithm="):
        presets.tiny(ranker_algorithm="vocab")


@pytest.mark.parametrize("n", [0, 1, 64, 5000])
def test_distinct_ids_are_uniques_without_the_sort(n):
    """The incremental choice's distinct ids of a tile (a table over the id range, no sort): ``torch.unique``'s
    values and inverse, element for element, so the cosines gathered and the choice are the same bits."""
    from avey_b.model.ranker_fast import distinct_ids

    ids = torch.randint(0, 3 * n + 1, (n,), generator=torch.Generator().manual_seed(n))
    vocab, inverse = distinct_ids(ids)
    want_vocab, want_inverse = torch.unique(ids, return_inverse=True)
    assert torch.equal(vocab, want_vocab) and torch.equal(inverse, want_inverse)
