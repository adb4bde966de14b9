"""A document encoded in pieces (avey_b.model.streaming.DocumentState) equals a fresh forward of the whole document:
appends of any size, late chunks, edits in place and edits that change the length, truncation; the configurations
where the property does not hold are refused.

The ids are drawn from a vocabulary of thousands: a fresh forward and a state compute MaxSim in GEMMs of other
shapes, whose float32 results can differ in the last bit, so two candidates whose scores are within rounding of
each other may be chosen either way by either (as by the model's own dense and vocabulary paths); random ids from a
large vocabulary have no such near-ties."""

from __future__ import annotations

import random

import pytest
import torch

from avey_b.model import presets
from avey_b.model.heads import chunk_embeddings, sentence_embedding
from avey_b.model.modeling import AveyBModel
from avey_b.model.streaming import DocumentState

VOCAB = 2000


def model(**overrides) -> AveyBModel:
    torch.manual_seed(0)
    return AveyBModel(presets.tiny(vocab_size=VOCAB, **overrides)).eval()


def fresh(m: AveyBModel, ids: torch.Tensor, spans=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    with torch.no_grad():
        h = m(ids[None]).last_hidden_state
    chunks = None if spans is None else chunk_embeddings(h, None, [spans], True)[0]
    return sentence_embedding(h, None, True)[0], chunks


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= 1e-5


@pytest.mark.parametrize("length", [1, 3, 4, 20, 31, 97])
@pytest.mark.parametrize("piece", [1, 4, 5, 1000])
@pytest.mark.parametrize("sum_splits", [1, 3])
def test_pieces_of_any_size_equal_a_fresh_forward(length, piece, sum_splits):
    m = model()
    ids = torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(length))
    # blocks of two splits (pieces cross blocks too), sums per three splits (blocks cross groups)
    state = DocumentState(m, block_tokens=8, sum_splits=sum_splits)
    for a in range(0, length, piece):
        state.feed(ids[a:a + piece])
        assert close(state.pooled(), fresh(m, ids[:a + piece])[0])
    assert state.done == length // 4 and torch.equal(state.ids.long(), ids)


def test_an_append_computes_only_the_new_splits():
    m = model()
    ids = torch.randint(0, VOCAB, (200,), generator=torch.Generator().manual_seed(1))
    state = DocumentState(m).feed(ids[:100])
    computed = state.computed
    state.feed(ids[100:109])  # splits 25 and 26 complete; the partial 27th runs when a vector is asked for
    assert state.computed - computed == 2
    assert close(state.pooled(), fresh(m, ids[:109])[0])
    assert state.computed - computed == 3


@pytest.mark.parametrize("size,overlap", [(5, 0), (7, 3), (3, 1), (64, 0)])
def test_late_chunks_equal_a_fresh_forward(size, overlap):
    m = model()
    ids = torch.randint(0, VOCAB, (41,), generator=torch.Generator().manual_seed(size))
    state = DocumentState(m, chunk_tokens=size, chunk_overlap=overlap, special=(1, 1))
    for a in range(0, 41, 3):
        state.feed(ids[a:a + 3])
    pooled, chunks = fresh(m, ids, state.chunk_spans())
    assert close(state.pooled(), pooled) and close(state.chunk_vectors(), chunks)
    spans = state.chunk_spans()
    assert spans[0][0] == 1 and spans[-1][1] == 40  # [CLS] and [SEP] belong to no chunk


@pytest.mark.parametrize("block_tokens,sum_splits", [(16384, 1), (8, 1), (8, 5)])  # the affected splits in one
def test_edits_in_place_recompute_only_the_affected_splits(block_tokens, sum_splits):  # block, or two at a time
    m = model(num_retrieved_splits=3)
    rng = random.Random(0)
    ids = torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(2))
    state = DocumentState(m, chunk_tokens=6, special=(1, 1), block_tokens=block_tokens,
                          sum_splits=sum_splits).feed(ids)
    counts = []
    for _ in range(40):
        a = rng.randrange(0, 399)
        b = min(400, a + rng.randrange(1, 6))
        new = torch.randint(0, VOCAB, (b - a,), generator=torch.Generator().manual_seed(a))
        state.replace(a, b, new)
        ids[a:b] = new
        pooled, chunks = fresh(m, ids, state.chunk_spans())
        assert close(state.pooled(), pooled) and close(state.chunk_vectors(), chunks)
        counts.append(state.recomputed)
    assert sum(counts) / len(counts) < 0.5 * state.done  # far fewer than the 100 splits
    state.replace(10, 12, state.ids[10:12].clone())  # no change: nothing to do
    assert state.recomputed == 0


@pytest.mark.parametrize("sum_splits", [1, 4])
def test_edits_that_change_the_length_and_truncation(sum_splits):
    m = model()
    rng = random.Random(1)
    ids = torch.randint(0, VOCAB, (120,), generator=torch.Generator().manual_seed(3))
    state = DocumentState(m, chunk_tokens=8, chunk_overlap=2, sum_splits=sum_splits).feed(ids)
    for t in range(20):
        a = rng.randrange(0, len(ids))
        b = min(len(ids), a + rng.randrange(0, 6))
        new = torch.randint(0, VOCAB, (rng.randrange(0, 6),), generator=torch.Generator().manual_seed(t))
        state.replace(a, b, new)
        ids = torch.cat([ids[:a], new, ids[b:]])
        pooled, chunks = fresh(m, ids, state.chunk_spans())
        assert close(state.pooled(), pooled) and close(state.chunk_vectors(), chunks)
    state.truncate(37)
    assert close(state.pooled(), fresh(m, ids[:37])[0])


@pytest.mark.parametrize("overrides", [{"ranker": "off"}, {"compressor": False}, {"num_retrieved_splits": 0},
                                       {"final_norm": False}])
def test_the_ablations_where_the_property_holds(overrides):
    m = model(**overrides)
    ids = torch.randint(0, VOCAB, (50,), generator=torch.Generator().manual_seed(4))
    state = DocumentState(m)
    for a in range(0, 50, 7):
        state.feed(ids[a:a + 7])
    assert close(state.pooled(), fresh(m, ids)[0])


@pytest.mark.parametrize("overrides,words", [({"ranker": "bidirectional"}, "later splits too"),
                                             ({"ranker_placement": "every_layer"}, "every layer")])
def test_where_the_property_does_not_hold_it_is_refused(overrides, words):
    with pytest.raises(ValueError, match=words):
        DocumentState(model(**overrides))


def test_bad_input_is_named():
    m = model()
    with pytest.raises(ValueError, match="out of range"):
        DocumentState(m).feed([VOCAB])
    with pytest.raises(TypeError, match="1-D"):
        DocumentState(m).feed(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="empty"):
        DocumentState(m).pooled()
    with pytest.raises(ValueError, match="not within"):
        DocumentState(m).feed([1, 2]).replace(1, 5, [3])
    with pytest.raises(ValueError, match="chunk_tokens"):
        DocumentState(m).feed([1]).chunk_vectors()
    with pytest.raises(ValueError, match="eval mode"):
        DocumentState(m.train()).feed(list(range(9)))


def test_a_head_is_taken_through_its_backbone():
    from avey_b.model.heads import AveyBForMaskedLM

    torch.manual_seed(0)
    head = AveyBForMaskedLM(presets.tiny(vocab_size=VOCAB)).eval()
    ids = torch.randint(0, VOCAB, (30,), generator=torch.Generator().manual_seed(5))
    assert close(DocumentState(head).feed(ids).pooled(), fresh(head.model, ids)[0])


def test_a_copy_is_independent_and_an_export_restores():
    m = model()
    ids = torch.randint(0, VOCAB, (90,), generator=torch.Generator().manual_seed(6))
    state = DocumentState(m, chunk_tokens=7, special=(1, 1)).feed(ids[:50])
    twin = state.copy().feed(ids[50:])
    assert close(state.pooled(), fresh(m, ids[:50])[0]) and close(twin.pooled(), fresh(m, ids)[0])
    assert 0 < state.nbytes < twin.nbytes
    back = DocumentState.restore(m, state.export(), chunk_tokens=7, special=(1, 1))
    computed = back.computed
    back.feed(ids[50:])
    assert back.computed - computed == 90 // 4 - 50 // 4  # the new full splits: the old [SEP] sat in the partial one
    pooled, chunks = fresh(m, ids, back.chunk_spans())
    assert close(back.pooled(), pooled) and close(back.chunk_vectors(), chunks)
    with pytest.raises(ValueError, match="chunk options"):
        DocumentState.restore(m, state.export())


def test_sums_kept_per_group_of_splits():
    """sum_splits: the sums take a fraction of the memory and of an export, an export restores with its own
    grouping, and an edit or the append that moves [SEP] recomputes at most one group's kept splits beyond what a
    state with per-split sums recomputes."""
    m = model(num_retrieved_splits=3)
    ids = torch.randint(0, VOCAB, (403,), generator=torch.Generator().manual_seed(11))
    per_split = DocumentState(m, special=(1, 1)).feed(ids[:300])
    grouped = DocumentState(m, special=(1, 1), sum_splits=8).feed(ids[:300])
    d = m.config.hidden_size
    assert grouped.export()["sums"].shape == (-(-75 // 8), d) and per_split.export()["sums"].shape == (75, d)
    assert grouped.nbytes < per_split.nbytes
    back = DocumentState.restore(m, grouped.export(), special=(1, 1))  # the export's grouping, not the default
    assert back.sum_splits == 8
    for state in (per_split, back):
        state.feed(ids[300:])
    assert close(back.pooled(), fresh(m, ids)[0]) and close(per_split.pooled(), fresh(m, ids)[0])
    assert per_split.recomputed < back.recomputed <= per_split.recomputed + 8
    edited = ids.clone()
    edited[150:153] = torch.tensor([1, 2, 3])
    per_split.update(edited)
    back.update(edited)
    assert close(back.pooled(), fresh(m, edited)[0]) and close(per_split.pooled(), back.pooled())
    assert back.recomputed >= per_split.recomputed
    old = {k: v for k, v in per_split.export().items() if k != "sum_splits"}  # a state saved before sum_splits
    assert close(DocumentState.restore(m, old, special=(1, 1)).pooled(), fresh(m, edited)[0])
    with pytest.raises(ValueError, match="sum_splits must be a positive integer"):
        DocumentState(m, sum_splits=0)


def test_blocks_of_ids_and_tiles_of_candidates():
    """Small ranker blocks and tiles: the queries' distinct ids in several blocks, the candidates in many tiles."""
    m = model(ranker_block_size=3, tile_bytes={("cpu", 4): 64})
    ids = torch.randint(0, VOCAB, (150,), generator=torch.Generator().manual_seed(7))
    state = DocumentState(m, block_tokens=40)
    for a in range(0, 150, 33):
        state.feed(ids[a:a + 33])
    assert close(state.pooled(), fresh(m, ids)[0])


def test_bfloat16_within_its_rounding():
    m = model(num_hidden_layers=3).to(torch.bfloat16)
    ids = torch.randint(0, VOCAB, (90,), generator=torch.Generator().manual_seed(8))
    state = DocumentState(m)
    for a in range(0, 90, 13):
        state.feed(ids[a:a + 13])
    assert float((state.pooled() - fresh(m, ids)[0].float()).abs().max()) <= 5e-3


def test_update_to_a_new_version_replaces_only_what_changed():
    m = model()
    ids = torch.randint(0, VOCAB, (120,), generator=torch.Generator().manual_seed(9))
    state = DocumentState(m).feed(ids)
    grown = torch.cat([ids, torch.randint(0, VOCAB, (9,), generator=torch.Generator().manual_seed(10))])
    computed = state.computed
    assert close(state.update(grown).pooled(), fresh(m, grown)[0])
    assert state.computed - computed == 129 // 4 - 120 // 4 + 1  # the new full splits, then the partial one
    edited = grown.clone()
    edited[50] = (edited[50] + 1) % VOCAB
    assert close(state.update(edited).pooled(), fresh(m, edited)[0]) and state.recomputed < state.done
    assert state.update(edited).recomputed == 0  # the same ids: nothing to do
