"""Padding correctness and split causality (paper §3.1, §4.1), for every variant of the paper's ablations."""

import pytest
import torch

from avey_b import AveyBModel
from avey_b.model import presets
from avey_b.model.configuration import LAYER_PATTERNS
from avey_b.model.presets import AVEY_B1_ARCHITECTURE
from avey_b.testing import seeded

VARIANTS = {
    "default": {},
    "bidirectional": {"ranker": "bidirectional"},
    "ranker_off": {"ranker": "off"},
    "no_compressor": {"compressor": False},
    "no_compressor_bidirectional": {"compressor": False, "ranker": "bidirectional"},
    "no_residual": {"compressor_residual": False},
    "coupled": {"parameterization": "coupled"},
    "unsigned": {"static_weights": "unsigned"},
    "mixing_bias": {"mixing_bias": True},
    "k0": {"num_retrieved_splits": 0},
    "release": dict(AVEY_B1_ARCHITECTURE),
    **{f"norm_{n}": {"dynamic_normalization": n} for n in ("rms", "softmax", "scaled_softmax", "none")},
    # with ReLU² features every cosine is >= 0 and L1 equals divide-by-sum; a signed enricher tells them apart
    "norm_l1": {"dynamic_normalization": "l1", "enricher_activation": "gelu"},
    **{f"pattern_{p}": {"layer_pattern": p} for p in LAYER_PATTERNS if p != "interleaved_sd"},
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_right_padding_does_not_change_real_tokens(name):
    """A sequence alone and the same sequence right-padded in a batch give the same outputs (float32, 1e-5)."""
    model = seeded(AveyBModel, presets.tiny(**VARIANTS[name]))
    g = torch.Generator().manual_seed(1)
    short = torch.randint(1, 99, (1, 13), generator=g)  # 13 = 3 splits + 1 token
    long = torch.randint(1, 99, (1, 22), generator=g)
    batch = torch.zeros(2, 22, dtype=torch.long)
    batch[0, :13], batch[1] = short[0], long[0]
    mask = torch.zeros(2, 22, dtype=torch.long)
    mask[0, :13], mask[1] = 1, 1
    with torch.no_grad():
        alone = model(short).last_hidden_state
        alone_long = model(long).last_hidden_state
        padded = model(batch, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(padded[0, :13], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(padded[1], alone_long[0], rtol=1e-5, atol=1e-5)
    # the pad token id itself never matters
    batch2 = batch.clone()
    batch2[0, 13:] = 57
    with torch.no_grad():
        padded2 = model(batch2, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(padded2[0, :13], alone[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [1, 3, 4, 5, 13, 16])
def test_any_length_works_and_split_padding_is_invisible(length):
    """Lengths shorter than S, equal to S and not divisible by S are all fine; appending padding to a full split
    boundary (explicit mask) gives the same result as the implicit split padding."""
    model = seeded(AveyBModel, presets.tiny())
    ids = torch.randint(1, 99, (2, length), generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        out = model(ids).last_hidden_state
        padded = torch.nn.functional.pad(ids, (0, 8))
        mask = torch.zeros_like(padded)
        mask[:, :length] = 1
        out_padded = model(padded, attention_mask=mask).last_hidden_state
    assert out.shape == (2, length, 32) and torch.isfinite(out).all()
    torch.testing.assert_close(out_padded[:, :length], out, rtol=1e-5, atol=1e-5)


def test_unidirectional_ranker_is_split_causal():
    """Changing later splits never changes an earlier split's outputs under the unidirectional ranker."""
    model = seeded(AveyBModel, presets.tiny())  # S = 4
    ids = torch.randint(1, 99, (1, 16), generator=torch.Generator().manual_seed(2))
    changed = ids.clone()
    changed[0, 8:] = torch.randint(1, 99, (8,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a, b = model(ids).last_hidden_state, model(changed).last_hidden_state
    torch.testing.assert_close(a[:, :8], b[:, :8], rtol=0, atol=0)
    assert (a[:, 8:] - b[:, 8:]).abs().max() > 1e-3


def test_bidirectional_ranker_sees_later_splits():
    model = seeded(AveyBModel, presets.tiny(ranker="bidirectional"))
    ids = torch.randint(1, 99, (1, 16), generator=torch.Generator().manual_seed(2))
    changed = ids.clone()
    changed[0, 8:] = torch.randint(1, 99, (8,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a, b = model(ids).last_hidden_state, model(changed).last_hidden_state
    assert (a[:, :4] - b[:, :4]).abs().max() > 1e-4


def test_tokens_inside_a_split_see_each_other_both_ways():
    model = seeded(AveyBModel, presets.tiny())
    ids = torch.randint(1, 99, (1, 8), generator=torch.Generator().manual_seed(4))
    changed = ids.clone()
    changed[0, 3] = (ids[0, 3] % 98) + 1  # last token of split 0
    with torch.no_grad():
        a, b = model(ids).last_hidden_state, model(changed).last_hidden_state
    assert (a[0, 0] - b[0, 0]).abs().max() > 1e-4  # the first token sees a later token of its split


@pytest.mark.parametrize("layer_type", ["static", "dynamic", "coupled"])
@pytest.mark.parametrize("norm", ["sum", "l1", "rms", "softmax", "scaled_softmax", "none"])
def test_processor_layer_ignores_whatever_sits_in_padded_rows(layer_type, norm):
    """Padded rows contribute zero rows to every static and dynamic mixing: the real rows' outputs do not depend
    on the values at padded positions (which, after the compressor, are generally non-zero)."""
    from avey_b.model.layers import AveyBLayer

    pattern = {"static": "all_static", "dynamic": "all_dynamic", "coupled": "interleaved_sd"}[layer_type]
    cfg = presets.tiny(layer_pattern=pattern, dynamic_normalization=norm,
                       parameterization="coupled" if layer_type == "coupled" else "decoupled")
    torch.manual_seed(0)
    layer = AveyBLayer(cfg, 0)
    torch.nn.init.normal_(layer.mixer.weight) if hasattr(layer.mixer, "weight") else None
    keep = torch.tensor([[True, True, True, False], [True, False, False, False], [False] * 4])
    x = torch.randn(3, 4, 32)
    garbage = torch.where(keep.unsqueeze(-1), x, torch.randn(3, 4, 32) * 10)
    with torch.no_grad():
        a, b = layer(x, keep), layer(garbage, keep)
    torch.testing.assert_close(a[keep], b[keep], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(a).all() and torch.isfinite(b).all()  # an all-padding row stays finite


def _batch_with_padding_everywhere():
    """Three rows of 22 slots: left-padded (13 real), full (22), and padding scattered in between (15 real)."""
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(1, 99, (n,), generator=g) for n in (13, 22, 15)]
    ids = torch.zeros(3, 22, dtype=torch.long)
    mask = torch.zeros(3, 22, dtype=torch.long)
    ids[0, 9:], mask[0, 9:] = seqs[0], 1  # left padding
    ids[1], mask[1] = seqs[1], 1
    where = torch.tensor([0, 1, 2, 4, 5, 7, 8, 9, 12, 13, 15, 16, 18, 20, 21])  # 15 real tokens, 7 gaps
    ids[2, where], mask[2, where] = seqs[2], 1
    return seqs, ids, mask, [torch.arange(9, 22), torch.arange(22), where]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_any_padding_side_gives_the_unpadded_outputs(name):
    """Left padding, right padding or padding in between: the real tokens' outputs are those of the sequence
    alone (the row is re-aligned internally so its splits start at its first real token)."""
    model = seeded(AveyBModel, presets.tiny(**VARIANTS[name]))
    seqs, ids, mask, where = _batch_with_padding_everywhere()
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)
        for row, (seq, pos) in enumerate(zip(seqs, where, strict=True)):
            alone = model(seq[None], output_hidden_states=True)
            torch.testing.assert_close(out.last_hidden_state[row, pos], alone.last_hidden_state[0],
                                       rtol=1e-5, atol=1e-5)
            for h_batch, h_alone in zip(out.hidden_states, alone.hidden_states, strict=True):
                torch.testing.assert_close(h_batch[row, pos], h_alone[0], rtol=1e-5, atol=1e-5)


def test_tokenizer_padding_side_does_not_change_results():
    from avey_b import testing

    tok = testing.tokenizer(str(__import__("tempfile").mkdtemp()))
    model = seeded(AveyBModel, presets.tiny(vocab_size=len(tok)))
    texts = ["a good film", "the story was very lovely and the music was superb today"]
    outs = {}
    for side in ("right", "left"):
        tok.padding_side = side
        enc = tok(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            h = model(**enc).last_hidden_state
        outs[side] = [h[i][enc["attention_mask"][i].bool()] for i in range(len(texts))]
    for right, left in zip(outs["right"], outs["left"], strict=True):
        torch.testing.assert_close(left, right, rtol=1e-5, atol=1e-6)


def test_splits_without_real_tokens_skip_the_processor_and_come_back_as_zeros(monkeypatch):
    """A batch of mixed lengths: the processor sees only rows with a real token, and the ranker ranks each row
    over its own splits; real-token outputs are unchanged."""
    from avey_b.model import ranker_fast
    from avey_b.model.layers import AveyBLayer

    model = seeded(AveyBModel, presets.tiny())
    seqs, ids, mask, where = _batch_with_padding_everywhere()
    pad = torch.zeros(3, 18, dtype=torch.long)
    ids, mask = torch.cat([ids, pad], 1), torch.cat([mask, pad], 1)
    rows_seen, ranked = [], []
    real_forward, real_dense, real_vocab = AveyBLayer.forward, ranker_fast.select_dense, ranker_fast.select_vocabulary
    monkeypatch.setattr(AveyBLayer, "forward",
                        lambda self, h, keep=None: rows_seen.append(h.shape[0]) or real_forward(self, h, keep))
    monkeypatch.setattr(ranker_fast, "select_dense",
                        lambda xn, *a, **kw: ranked.append(xn.shape[:2]) or real_dense(xn, *a, **kw))

    def vocab(xn, *args, **kwargs):  # one row, (n, S, d); None when the dense path ranks it instead
        got = real_vocab(xn, *args, **kwargs)
        if got is not None:
            ranked.append((1, xn.shape[0]))
        return got

    monkeypatch.setattr(ranker_fast, "select_vocabulary", vocab)
    with torch.no_grad():
        out = model(ids, attention_mask=mask).last_hidden_state
    # 40 slots = 10 splits per row; real tokens need 4 + 6 + 4 splits after re-alignment
    assert set(rows_seen) == {14} and sorted(tuple(s) for s in ranked) == [(1, 4), (1, 4), (1, 6)]
    assert torch.count_nonzero(out[1, 24:]) == 0  # row 1's splits 6..9 hold no real token: zeros
    with torch.no_grad():
        for row, (seq, pos) in enumerate(zip(seqs, where, strict=True)):
            torch.testing.assert_close(out[row, pos], model(seq[None]).last_hidden_state[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["default", "no_compressor", "ranker_off", "k0", "bidirectional"])
def test_processing_rows_in_chunks_changes_nothing(name):
    """Long inputs run the processor in chunks of rows (bounded activation memory): same outputs as one pass,
    with and without padding."""
    whole = seeded(AveyBModel, presets.tiny(**VARIANTS[name]))
    chunked = seeded(AveyBModel, presets.tiny(**VARIANTS[name], processor_chunk_tokens=8))  # 2 rows of 4 tokens a chunk
    seqs, ids, mask, where = _batch_with_padding_everywhere()
    with torch.no_grad():
        for kwargs in ({"attention_mask": mask}, {}):
            a = whole(ids, **kwargs).last_hidden_state
            b = chunked(ids, **kwargs).last_hidden_state
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
