"""The bookkeeping of cutting a batch into splits and putting it back (avey_b.model.splits): padding on any side, split
padding, empty splits, and the general path taken when compiling or exporting give the same result."""

import pytest
import torch

from avey_b.model import splits


def _batch(mask_rows, d=3, seed=0):
    mask = torch.tensor(mask_rows, dtype=torch.long)
    B, N = mask.shape
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, d, generator=g), mask, torch.randint(5, 50, (B, N), generator=g)


MASKS = {
    "none": None,
    "right": [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0]],
    "left": [[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1]],
    "middle": [[1, 0, 1, 0, 1, 0, 1], [0, 1, 1, 0, 0, 1, 0]],
    "one token": [[0, 0, 0, 0, 0, 0, 1], [1, 1, 1, 1, 1, 1, 1]],
}


@pytest.mark.parametrize("name", list(MASKS))
@pytest.mark.parametrize("general", [False, True])
def test_cut_then_restore_gives_back_every_real_token_in_place(name, general):
    x, mask, ids = _batch(MASKS[name] or [[1] * 7] * 2)
    mask = None if MASKS[name] is None else mask
    S = 3
    sp = splits.cut(x, mask, ids, S, general)
    B, n = 2, 3
    assert sp.x.shape == (B, n, S, 3) and sp.length == 7
    real = torch.ones(2, 7, dtype=torch.bool) if mask is None else mask.bool()
    # the splits hold each row's real tokens first, in order, then zeros; keep marks exactly them
    for b in range(B):
        kept = sp.x[b].reshape(n * S, 3)[: int(real[b].sum())]
        assert torch.equal(kept, x[b][real[b]])
        assert sp.flat_x.shape == (B * n, S, 3)
        if sp.keep is not None:
            assert sp.keep[b].reshape(-1).tolist() == [True] * int(real[b].sum()) + [False] * (9 - int(real[b].sum()))
            assert torch.equal(sp.ids[b].reshape(-1)[: int(real[b].sum())], ids[b][real[b]])
    if sp.keep is not None:  # padding is zero vectors
        assert (sp.x.reshape(B, -1, 3)[~sp.keep.reshape(B, -1)] == 0).all()
    # processor rows of (k+1)S tokens, the split's own last: restore keeps the last S and puts tokens back in place
    rows = sp.flat_x if sp.rows is None else sp.flat_x[sp.rows]
    wide = torch.cat([torch.full_like(rows, 7.0), rows], dim=1)
    out = sp.restore(wide)
    assert out.shape == x.shape
    assert torch.equal(out[real], x[real]) and (out[~real] == 0).all()
    # recut is restore's inverse for rows of S tokens
    assert torch.equal(sp.recut(out), rows)


def test_no_padding_takes_no_step_in_eager_and_every_step_when_general():
    x, _, ids = _batch([[1] * 6] * 2)
    sp = splits.cut(x, None, ids, 3)
    assert sp.keep is None and sp.order is None and sp.rows is None  # nothing to mask, move or drop
    sp = splits.cut(x, torch.ones(2, 6, dtype=torch.long), ids, 3)
    assert sp.keep is None and sp.order is None
    general = splits.cut(x, torch.ones(2, 6, dtype=torch.long), ids, 3, general=True)
    assert general.keep is not None and bool(general.keep.all()) and general.order is not None
    assert torch.equal(general.x, sp.x) and general.rows is None


def test_empty_splits_are_dropped_and_come_back_as_zeros():
    x, mask, ids = _batch([[1, 1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0, 0]])
    sp = splits.cut(x, mask, ids, 3)
    # row 0: 3 splits with real tokens; row 1: only its first split
    assert sp.rows.tolist() == [0, 1, 2, 3] and sp.num_rows == 4
    assert splits.cut(x, mask, ids, 3, general=True).num_rows == 6  # general: every split is run
    out = sp.restore(sp.flat_x[sp.rows])
    assert torch.equal(out[0], x[0]) and torch.equal(out[1, :2], x[1, :2]) and (out[1, 2:] == 0).all()


@pytest.mark.parametrize("N,S,n", [(1, 4, 1), (4, 4, 1), (5, 4, 2), (64, 16, 4), (65, 16, 5)])
def test_split_count(N, S, n):
    assert splits.split_count(N, S) == n


@pytest.mark.parametrize("N", [1, 4, 7, 12])
def test_some_splits_of_one_row_are_cut_as_the_whole_row_is(N):
    """cut_splits (what a document fed in pieces runs) gives the splits it is asked for as cut gives them from the
    whole row: the same ids, embeddings zero at the split padding, the same keep mask (None when all real)."""
    S = 4
    embed = torch.nn.Embedding(50, 3)
    ids = torch.randint(5, 50, (N,), generator=torch.Generator().manual_seed(N))
    with torch.no_grad():
        whole = splits.cut(embed(ids)[None], None, ids[None], S)
        n = whole.x.shape[1]
        for which in (torch.arange(n), torch.arange(n)[n // 2:], torch.tensor([n - 1, 0])[:n]):
            some = splits.cut_splits(ids, which, S, embed)
            assert torch.equal(some.x[0], whole.x[0, which]) and torch.equal(some.ids[0], whole.ids[0, which])
            want_keep = None if whole.keep is None else whole.keep[0, which]
            if want_keep is not None and bool(want_keep.all()):
                want_keep = None  # every token of these splits is real
            assert (some.keep is None) == (want_keep is None)
            assert want_keep is None or torch.equal(some.keep[0], want_keep)
