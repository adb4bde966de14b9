"""The vectorized ranker against a slow, obviously-correct loop written here from the paper's §3.1 (MaxSim ranker)."""

import math

import pytest
import torch

from avey_b import presets
from avey_b.ranker import Compressor, Ranker


def cosine(a, b):
    na, nb = a.norm(), b.norm()
    if na == 0 or nb == 0:
        return torch.tensor(0.0, dtype=a.dtype)
    return (a @ b) / (na * nb)


def oracle(x, keep, k, bidirectional, weighting, eps):
    """Loop over batch, splits, candidates and tokens; returns X_cat (B, n, (k+1)S, d) and the chosen ids."""
    B, n, S, d = x.shape
    out = torch.zeros(B, n, (k + 1) * S, d, dtype=x.dtype)
    chosen = {}
    for b in range(B):
        for i in range(n):
            scores = {}
            for j in range(n):
                if j == i or (not bidirectional and j > i):
                    continue
                if not keep[b, j].any():  # an all-padding split is no candidate
                    continue
                total = 0.0
                for t in range(S):
                    if not keep[b, i, t]:
                        continue
                    total += max(cosine(x[b, i, t], x[b, j, u]).item() for u in range(S) if keep[b, j, u])
                scores[j] = total
            top = sorted(scores, key=lambda j: -scores[j])[:k]
            chosen[b, i] = top
            if top:
                vals = [scores[j] for j in top]
                den = (max(vals) if weighting == "max" else min(vals)) + eps
                # descending score order, missing slots on the left, current split last
                slot0 = k - len(top)
                for p, j in enumerate(top):
                    out[b, i, (slot0 + p) * S:(slot0 + p + 1) * S] = x[b, j] * (scores[j] / den)
            out[b, i, k * S:] = x[b, i]
    return out, chosen


def make_inputs(B=2, n=5, S=3, d=6, seed=0, pad_last=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, n, S, d, generator=g, dtype=torch.float64)
    keep = torch.ones(B, n, S, dtype=torch.bool)
    keep.view(B, n * S)[1, n * S - pad_last:] = False  # right padding in the second row
    x = x * keep.unsqueeze(-1)
    return x, keep


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("weighting", ["max", "min"])
@pytest.mark.parametrize("block", [1, 2, 1000])  # query splits per block: many blocks, uneven blocks, one block
def test_ranker_matches_loop_oracle(bidirectional, weighting, block):
    S, k = 3, 2
    cfg = presets.tiny(split_size=S, num_retrieved_splits=k, ranker="bidirectional" if bidirectional else "unidirectional",
                       ranker_weighting=weighting, ranker_block_size=block * S)
    x, keep = make_inputs(S=S, pad_last=4)  # 4 > S: the last split of row 1 is all padding
    ranker = Ranker(cfg)
    expected, chosen = oracle(x, keep, k, bidirectional, weighting, cfg.ranker_eps)
    got, keep_cat = ranker(x, keep)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    # selection: the first split never retrieves (unidirectional); a short candidate list leaves zero slots on the left
    if not bidirectional:
        assert chosen[0, 0] == [] and got[0, 0, : k * S].abs().sum() == 0
        assert len(chosen[0, 1]) == 1 and got[0, 1, :S].abs().sum() == 0 and got[0, 1, S:2 * S].abs().sum() > 0
    # an all-padding split (row 1, last) is never retrieved
    assert all(4 not in top for (b, i), top in chosen.items() if b == 1)
    # the keep mask of X_cat marks empty slots and padded tokens as padding (for all-padding query splits every
    # score is 0 and the choice among ties is arbitrary; their weights are 0 and their outputs are dropped)
    for (b, i), top in chosen.items():
        if not keep[b, i].any():
            continue
        slot0 = k - len(top)
        assert not keep_cat[b, i, : slot0 * S].any()
        for p, j in enumerate(top):
            assert torch.equal(keep_cat[b, i, (slot0 + p) * S:(slot0 + p + 1) * S], keep[b, j])


def test_ranker_without_padding_mask_equals_all_true_mask():
    cfg = presets.tiny(split_size=3, num_retrieved_splits=2)
    x, _ = make_inputs(S=3, pad_last=0)
    ranker = Ranker(cfg)
    a, _ = ranker(x, None)
    b, _ = ranker(x, torch.ones(x.shape[:3], dtype=torch.bool))
    torch.testing.assert_close(a, b)


def test_gradient_flows_through_weights_not_choice():
    """With autograd on, the weights are recomputed for the selected pairs; values match the no-grad path and
    the retrieved splits receive gradient through both their content and their weight."""
    cfg = presets.tiny(split_size=3, num_retrieved_splits=2)
    x, keep = make_inputs(S=3, pad_last=2)
    ranker = Ranker(cfg)
    with torch.no_grad():
        ref, _ = ranker(x, keep)
    xg = x.clone().requires_grad_(True)
    out, _ = ranker(xg, keep)
    torch.testing.assert_close(out.detach(), ref, rtol=1e-12, atol=1e-12)
    # d(weight)/d(current split) is non-zero: the current split (slot k) gets gradient from the retrieved slots
    out[:, 2, : 2 * 3].sum().backward()
    assert xg.grad[:, 2].abs().sum() > 0  # only through the cosine scores of split 2 against its candidates
    assert xg.grad[:, 0].abs().sum() > 0 or xg.grad[:, 1].abs().sum() > 0


def test_weights_are_at_most_one_for_paper_and_at_least_one_for_release():
    x, keep = make_inputs(S=3, n=6, pad_last=0)
    x = x.abs()  # non-negative embeddings: positive MaxSim scores
    for weighting in ("max", "min"):
        cfg = presets.tiny(split_size=3, num_retrieved_splits=2, ranker_weighting=weighting)
        ranker = Ranker(cfg)
        idx, ok = ranker.select(torch.nn.functional.normalize(x, dim=-1), None)
        out, _ = ranker(x, None)
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
    xn = torch.nn.functional.normalize(x, dim=-1)
    assert torch.equal(exact.select(xn, None)[0], fast.select(xn, None)[0])
    torch.testing.assert_close(fast(x, None)[0], exact(x, None)[0], rtol=0, atol=0)


def test_the_similarity_tile_is_cache_sized_and_within_the_memory_cap_at_every_length():
    from avey_b.ranker import Ranker

    ranker = Ranker(presets.small())  # S = 64, 1024-token query blocks, ranker_memory_mb = 256
    for N in (1024, 16_384, 65_536, 262_144, 1_048_576):
        for size in (4, 2):  # fp32, bf16
            blk, tile = ranker.plan(1, N // 64, 64, size)
            assert blk == min(16, N // 64)  # the query block does not shrink with N
            assert tile * 64 * blk * 64 * size <= Ranker.TILE_BYTES["cpu", size]  # one cache-sized tile per step
    assert ranker.plan(1, 256, 64, 4) == (16, 4) and ranker.plan(1, 256, 64, 2) == (16, 16)
    assert ranker.plan(1, 256, 64, 4, "cuda")[1] == 256  # GPU: whole candidate rows at 16K tokens
    ranker.memory_elements = 2 * 64 * 64  # a tiny cap wins over the tile size, then over the block
    assert ranker.plan(1, 256, 64, 4) == (2, 1)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_tiling_does_not_change_the_choice(bidirectional):
    from avey_b.ranker import Ranker

    config = presets.tiny(ranker="bidirectional" if bidirectional else "unidirectional")
    x = torch.nn.functional.normalize(torch.randn(2, 9, 4, 32, generator=torch.Generator().manual_seed(0)), dim=-1)
    keep = torch.ones(2, 9, 4, dtype=torch.bool)
    keep[1, 6:] = False
    keep[0, 2, 1:] = False
    wide, tiled = Ranker(config), Ranker(config)
    tiled.memory_elements = 2 * 4 * 4  # one query split x one candidate split per step
    assert tiled.plan(2, 9, 4) == (1, 1)
    for a, b in zip(wide.select(x, keep), tiled.select(x, keep), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_bf16_choice_equals_the_loop_free_formula_in_bf16(bidirectional):
    """The tiled bf16 path (GEMM in bf16, max and sum in fp32 on CPU) chooses what the one-matrix formula of the
    export path chooses on the same bf16 unit vectors."""
    from avey_b.ranker import Ranker

    direction = "bidirectional" if bidirectional else "unidirectional"
    config = presets.tiny(split_size=8, num_retrieved_splits=3, ranker=direction)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 40, 8, 32, generator=g)
    x[..., :4] += 2 * torch.randn(1, 40, 1, 4, generator=g)  # split-level topics: no near-ties
    xn = torch.nn.functional.normalize(x, dim=-1).bfloat16()
    ranker = Ranker(config)
    ranker.tile_bytes = 8 * 8 * 8 * 2 * 3  # several tiles per query block
    keep = torch.ones(1, 40, 8, dtype=torch.bool)
    for a, b in zip(ranker.select(xn, None), ranker.select_for_export(xn, keep), strict=True):
        assert torch.equal(a, b)
