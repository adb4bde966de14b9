"""The ablation "ranker at every layer" (paper appendix "Ablation Study"; ``ranker_placement="every_layer"``): before
each layer the ranker chooses again on that layer's input, and the rows are rebuilt and compressed from the splits'
current states. Checked against a slow loop written here from the paper's description, under padding on any side,
and the default placement against the model as it was before the switch existed."""

import pytest
import torch
from test_ranker import oracle as ranker_oracle

from avey_b import AveyBConfig, AveyBForMaskedLM, AveyBModel
from avey_b.model import presets
from avey_b.testing import seeded

EVERY_LAYER = {"ranker_placement": "every_layer"}
VARIANTS = {
    "unidirectional": {},
    "bidirectional": {"ranker": "bidirectional"},
    "no_compressor": {"compressor": False},
    "no_compressor_bidirectional": {"compressor": False, "ranker": "bidirectional"},
    "no_residual": {"compressor_residual": False},
    "norm_softmax": {"dynamic_normalization": "softmax"},  # a normalization that counts real tokens only
}


def every_layer(**overrides) -> AveyBConfig:
    return presets.tiny(**EVERY_LAYER, **overrides)


# -- (b) the loop oracle -------------------------------------------------------------------------------------------
def loop_oracle(model: AveyBModel, ids: torch.Tensor):
    """The model's output restated as loops: for every layer, for every split, MaxSim against every candidate split
    on the layer's input, token by token, the top-k (ties: the nearer split, at equal distance the preceding one),
    weights = score / (largest selected score + eps) and ``[w_1 X_j1 | … | w_k X_jk | X_i]`` with missing slots as
    zeros on the left (the ranker's reference, ``test_ranker.oracle``: checked against loops there); the layer's
    own compressor ``P_ℓ X_cat (+ X_i)``; the layer; the split's own S outputs as its new state. Uses the model's
    embedding, compressors, layers and final norm (each tested elsewhere), not its ranker.
    Returns the final states (B, N, d) and the choice of every layer: {(layer, row, split): [chosen splits]}."""
    cfg = model.config
    S, k, eps = cfg.split_size, cfg.num_retrieved_splits, cfg.ranker_eps
    bidirectional = cfg.ranker == "bidirectional"
    B, N = ids.shape
    n = -(-N // S)
    x = model.embed_tokens(ids)
    d = x.shape[-1]
    states = torch.zeros(B, n, S, d, dtype=x.dtype)
    keep = torch.zeros(B, n, S, dtype=torch.bool)
    for t in range(N):
        states[:, t // S, t % S] = x[:, t]
        keep[:, t // S, t % S] = True
    chosen = {}
    for ell, layer in enumerate(model.layers):
        new = torch.zeros_like(states)
        # the ranker's reference (test_ranker.oracle), on this layer's input: X_cat and the top-k of every split
        x_cat_all, top_all = ranker_oracle(states, keep, k, bidirectional, cfg.ranker_weighting, eps)
        for b in range(B):
            for i in range(n):
                top = chosen[ell, b, i] = top_all[b, i]
                x_cat = x_cat_all[b, i]
                keep_cat = torch.zeros((k + 1) * S, dtype=torch.bool)
                first = k - len(top)
                for p, j in enumerate(top):
                    keep_cat[(first + p) * S:(first + p + 1) * S] = keep[b, j]
                keep_cat[k * S:] = keep[b, i]
                if model.compressors is not None:
                    P = model.compressors[ell].weight
                    row = P @ x_cat + (states[b, i] if cfg.compressor_residual else 0)
                    row_keep = keep[b, i]
                else:
                    row, row_keep = x_cat, keep_cat
                out = layer(row[None], row_keep[None])[0, -S:]
                new[b, i] = out * keep[b, i, :, None]  # padding stays a zero vector
        states = new
    return model.norm(states.reshape(B, n * S, d)[:, :N]), chosen


@pytest.mark.parametrize("name", ["unidirectional", "bidirectional", "no_compressor", "no_compressor_bidirectional"])
def test_model_equals_the_loop_oracle_and_the_choice_changes_with_depth(name):
    """The vectorized model equals the loop (float64, so no near-tie is decided by rounding), and the choice of the
    deeper layers differs from the first layer's: ranking once on the embeddings would give another output."""
    model = seeded(AveyBModel, every_layer(num_hidden_layers=3, layer_pattern="SDS", **VARIANTS[name])).double()
    ids = torch.randint(1, 99, (2, 23), generator=torch.Generator().manual_seed(7))  # 6 splits, the last 3 tokens
    with torch.no_grad():
        want, chosen = loop_oracle(model, ids)
        got = model(ids).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    differs = [(ell, b, i) for (ell, b, i), top in chosen.items() if ell > 0 and top != chosen[0, b, i]]
    assert differs, "the test input must make the deeper layers choose differently from the first"


def test_ranking_once_on_the_embeddings_is_not_what_every_layer_computes():
    """The oracle tells the placements apart: the default model with the same weights (one compressor: P_0) gives
    another output than the every-layer model."""
    model = seeded(AveyBModel, every_layer(num_hidden_layers=3, layer_pattern="SDS")).double()
    once = AveyBModel(presets.tiny(num_hidden_layers=3, layer_pattern="SDS")).double().eval()
    state = {("compressor.weight" if k == "compressors.0.weight" else k): v for k, v in model.state_dict().items()
             if not k.startswith("compressors.") or k == "compressors.0.weight"}
    once.load_state_dict(state, strict=True)
    ids = torch.randint(1, 99, (2, 23), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        every, single = model(ids).last_hidden_state, once(ids).last_hidden_state
    assert not torch.allclose(every, single, rtol=1e-3, atol=1e-3)
    # before the first layer both rank the embeddings: the first hidden states after layer 1 agree
    with torch.no_grad():
        h_every = model(ids, output_hidden_states=True).hidden_states
        h_once = once(ids, output_hidden_states=True).hidden_states
    torch.testing.assert_close(h_every[1], h_once[1], rtol=1e-9, atol=1e-9)


# -- (a) padding -------------------------------------------------------------------------------------------------
def _batch_with_padding_everywhere():
    """Three rows of 40 slots: left-padded (13 real), right-padded (22 real: the last splits hold no real token)
    and padding scattered in between (15 real)."""
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(1, 99, (m,), generator=g) for m in (13, 22, 15)]
    ids = torch.zeros(3, 40, dtype=torch.long)
    mask = torch.zeros(3, 40, dtype=torch.long)
    where = [torch.arange(27, 40), torch.arange(22),
             torch.tensor([0, 1, 2, 4, 5, 7, 8, 9, 12, 13, 15, 16, 18, 20, 21])]
    for row, (seq, pos) in enumerate(zip(seqs, where, strict=True)):
        ids[row, pos], mask[row, pos] = seq, 1
    return seqs, ids, mask, where


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_any_padding_side_gives_the_unpadded_outputs(name):
    """Left, right and in-between padding (and splits with no real token): each real token's output and hidden
    states are those of its sequence alone — padding is never a query or a candidate of any layer's MaxSim."""
    model = seeded(AveyBModel, every_layer(**VARIANTS[name]))
    seqs, ids, mask, where = _batch_with_padding_everywhere()
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)
        junk = model(ids.masked_fill(mask == 0, 57), attention_mask=mask).last_hidden_state  # pad id never matters
        for row, (seq, pos) in enumerate(zip(seqs, where, strict=True)):
            alone = model(seq[None], output_hidden_states=True)
            torch.testing.assert_close(out.last_hidden_state[row, pos], alone.last_hidden_state[0], rtol=1e-5,
                                       atol=1e-5)
            torch.testing.assert_close(junk[row, pos], alone.last_hidden_state[0], rtol=1e-5, atol=1e-5)
            assert len(out.hidden_states) == len(alone.hidden_states) == model.config.num_hidden_layers + 1
            for h_batch, h_alone in zip(out.hidden_states, alone.hidden_states, strict=True):
                torch.testing.assert_close(h_batch[row, pos], h_alone[0], rtol=1e-5, atol=1e-5)


def test_unidirectional_stays_split_causal_at_every_layer():
    """A unidirectional ranker retrieves only preceding splits at every layer: changing the last split leaves the
    earlier splits' outputs unchanged; a bidirectional ranker lets the change reach them."""
    ids = torch.randint(1, 99, (1, 16), generator=torch.Generator().manual_seed(4))
    changed = ids.clone()
    changed[0, 12:] = torch.tensor([5, 6, 7, 8])
    for ranker, same in (("unidirectional", True), ("bidirectional", False)):
        model = seeded(AveyBModel, every_layer(ranker=ranker, num_hidden_layers=3, layer_pattern="SDS"))
        with torch.no_grad():
            a, b = model(ids).last_hidden_state[0, :12], model(changed).last_hidden_state[0, :12]
        assert torch.allclose(a, b, rtol=0, atol=1e-6) is same, ranker


# -- (c) the default placement is the model as it was ----------------------------------------------------------------
# Outputs of the model before `ranker_placement` existed (commit 9e5f107), seeded tiny model, row 0 left-padded:
# the sum of squares of all outputs and a few values.
BEFORE = {
    "default": (1215.9972925993843, [2.575526475906372, -0.03318364918231964, 0.3734199106693268,
                                     -1.8752094507217407]),
    "no_compressor_bidirectional": (1183.9972778597862, [1.0654170513153076, 0.11088358610868454,
                                                         0.24471843242645264, -1.3432759046554565]),
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_default_placement_is_the_model_before_the_switch(name):
    overrides = {"default": {}, "no_compressor_bidirectional": {"ranker": "bidirectional", "compressor": False}}[name]
    implicit = seeded(AveyBModel, presets.tiny(**overrides))
    explicit = seeded(AveyBModel, presets.tiny(ranker_placement="embeddings", **overrides))
    assert implicit.config.ranker_placement == "embeddings"
    assert implicit.compressors is None and explicit.compressors is None
    assert list(explicit.state_dict()) == list(implicit.state_dict())
    ids = torch.randint(1, 99, (2, 22), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    mask[0, :7] = 0
    with torch.no_grad():
        a = implicit(ids, attention_mask=mask).last_hidden_state
        b = explicit(ids, attention_mask=mask).last_hidden_state
    assert torch.equal(a, b)
    total, values = BEFORE[name]
    assert a.double().square().sum().item() == pytest.approx(total, rel=1e-6)
    torch.testing.assert_close(a[0, 7, :4], torch.tensor(values), rtol=1e-5, atol=1e-6)


def test_every_layer_has_its_own_compressor_and_saves_and_loads(tmp_path):
    model = seeded(AveyBModel, every_layer(num_hidden_layers=3, layer_pattern="SDS"))
    keys = [k for k in model.state_dict() if "compress" in k]
    assert keys == [f"compressors.{i}.weight" for i in range(3)] and model.compressor is None
    assert len({model.compressors[i].weight.data_ptr() for i in range(3)}) == 3  # not one shared P
    assert seeded(AveyBModel, every_layer(compressor=False)).compressors is None
    model.save_pretrained(tmp_path)
    loaded = AveyBModel.from_pretrained(tmp_path).eval()
    assert loaded.config.ranker_placement == "every_layer"
    ids = torch.randint(1, 99, (2, 13), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded(ids).last_hidden_state, model(ids).last_hidden_state)


def test_training_reaches_every_compressor_and_checkpointing_gives_the_same_gradients():
    model = seeded(AveyBForMaskedLM, every_layer(num_hidden_layers=3, layer_pattern="SDS"))
    model.train()
    ids = torch.randint(1, 99, (2, 21), generator=torch.Generator().manual_seed(1))
    model(ids, labels=ids).loss.backward()
    ref = {k: p.grad.clone() for k, p in model.named_parameters()}
    assert all(ref[f"model.compressors.{i}.weight"].abs().sum() > 0 for i in range(3))
    model.zero_grad()
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()  # 5.23+ name
    model(ids, labels=ids).loss.backward()
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref[k], msg=k)


def test_hidden_states_are_on_the_gradient_path():
    model = seeded(AveyBModel, every_layer())
    out = model(torch.randint(1, 99, (2, 13), generator=torch.Generator().manual_seed(2)), output_hidden_states=True)
    for h in out.hidden_states:
        h.retain_grad()
    out.last_hidden_state.sum().backward()
    assert all(h.grad is not None and h.grad.abs().sum() > 0 for h in out.hidden_states)


# -- (d) config errors -----------------------------------------------------------------------------------------------
def test_config_errors_name_the_field_and_the_choices():
    message = r"ranker_placement='every-layer' is not one of \['embeddings', 'every_layer'\]"
    with pytest.raises(ValueError, match=message):
        presets.tiny(ranker_placement="every-layer")
    with pytest.raises(ValueError, match="ranker_placement='every_layer' needs a ranker, but ranker='off'"):
        presets.tiny(ranker_placement="every_layer", ranker="off")
    with pytest.raises(ValueError, match="ranker_algorithm='vocabulary' cannot hold there"):
        presets.tiny(ranker_placement="every_layer", ranker_algorithm="vocabulary")


@pytest.mark.slow
def test_every_layer_model_exports_for_every_length():
    """torch.export (what ONNX export builds on) captures the per-layer choice for every batch and length."""
    from avey_b.apps.export import Exportable, export_program

    model = seeded(AveyBModel, every_layer(vocab_size=2000))
    program = export_program(model).module()
    for batch, length in [(1, 1), (2, 7), (3, 13), (2, 300)]:
        ids = torch.randint(1, 41, (batch, length), generator=torch.Generator().manual_seed(length))
        mask = torch.ones_like(ids)
        if batch > 1:
            mask[-1, :length // 2] = 0  # left padding
        with torch.no_grad():
            got, want = program(ids, mask), Exportable(model, "last_hidden_state")(ids, mask)
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], rtol=1e-5, atol=1e-5)
