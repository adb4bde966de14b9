"""The Hugging Face contract (as transformers' ModelTesterMixin checks it for built-in encoders), the heads,
the dynamic layer's guarantees (paper App. A) and every variant of the paper's ablations changing the computation."""

import pytest
import torch
from test_padding import VARIANTS
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from avey_b import (
    AveyBConfig,
    AveyBForMaskedLM,
    AveyBForMultipleChoice,
    AveyBForQuestionAnswering,
    AveyBForSentenceEmbedding,
    AveyBForSequenceClassification,
    AveyBForTokenClassification,
    AveyBModel,
)
from avey_b.model import presets
from avey_b.model.heads import mean_pool
from avey_b.model.layers import activation, normalize_rows
from avey_b.model.ranker import Ranker
from avey_b.model.similarity import unit_vectors
from avey_b.testing import seeded

HEADS = [AveyBModel, AveyBForMaskedLM, AveyBForSequenceClassification, AveyBForTokenClassification,
         AveyBForQuestionAnswering, AveyBForSentenceEmbedding]


def first_output(out):
    for name in ("last_hidden_state", "logits", "start_logits"):
        if getattr(out, name, None) is not None:
            return getattr(out, name)
    raise AssertionError(out)


# -- the dynamic layer (paper App. A) -----------------------------------------------------------------------------

def test_dynamic_rows_are_nonnegative_substochastic_and_order_preserving():
    cfg = presets.tiny()
    torch.manual_seed(0)
    z = activation("relu2")(torch.randn(5, 8, 16))  # ReLU² enricher output (assumption A1): non-negative
    zn = torch.nn.functional.normalize(z, dim=-1)
    sim = zn @ zn.transpose(-1, -2)
    s = normalize_rows(sim, None, cfg)
    assert (s >= 0).all()
    assert (s.sum(-1) <= 1 + 1e-6).all() and (s.sum(-1) > 0.99).all()
    # order preservation: S_ij1 >= S_ij2  =>  S̃_ij1 >= S̃_ij2
    d_sim = sim.unsqueeze(-1) - sim.unsqueeze(-2)
    d_s = s.unsqueeze(-1) - s.unsqueeze(-2)
    assert (d_sim * d_s >= -1e-9).all()


def test_dynamic_normalization_is_monotone_in_relevance():
    """∂S̃_ij/∂S_ij >= 0 and ∂S̃_ik/∂S_ij <= 0 (k != j) for non-negative similarities (App. A, Prop. 1)."""
    cfg = presets.tiny()
    row = torch.rand(1, 1, 6, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda r: normalize_rows(r, None, cfg), row).reshape(6, 6)
    assert (jac.diagonal() >= 0).all()
    off = jac - torch.diag(jac.diagonal())
    assert (off <= 1e-12).all()


# -- variants -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(set(VARIANTS) - {"default"}))
def test_every_variant_trains_and_changes_the_computation(name):
    """Each ablation switch runs forward and backward and actually changes the outputs of the default model."""
    torch.manual_seed(0)
    # four layers, so that every named pattern differs from the default interleaving
    reference_overrides = {"enricher_activation": "gelu"} if name == "norm_l1" else {}
    reference = AveyBForMaskedLM(presets.tiny(num_hidden_layers=4, **reference_overrides)).eval()
    torch.manual_seed(0)
    model = AveyBForMaskedLM(presets.tiny(**{"num_hidden_layers": 4, **VARIANTS[name]}))
    shared = {k: v for k, v in reference.state_dict().items()
              if k in model.state_dict() and model.state_dict()[k].shape == v.shape}
    model.load_state_dict(shared, strict=False)
    with torch.no_grad():  # parameters the default lacks (e.g. mixing biases start at 0) get random values
        for k, p in model.named_parameters():
            if k not in shared:
                p.normal_(0, 0.5)
    ids = torch.randint(1, 99, (2, 13), generator=torch.Generator().manual_seed(0))
    out = model(ids, labels=ids)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert torch.isfinite(out.loss) and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum() for g in grads) > 0
    model.eval()
    with torch.no_grad():
        a, b = reference(ids).logits, model(ids).logits
    assert (a - b).abs().max() > 1e-4, f"variant {name} computes the same thing as the default"


def test_layer_patterns_expand_as_named():
    assert presets.tiny(num_hidden_layers=4).mixer_types == ["static", "dynamic", "static", "dynamic"]
    assert presets.tiny(num_hidden_layers=4, layer_pattern="two_stage_ds").mixer_types == \
        ["dynamic", "dynamic", "static", "static"]
    config = presets.tiny(num_hidden_layers=3, layer_pattern="dynamic_tail")
    assert config.mixer_types == ["static", "static", "dynamic"]
    assert presets.tiny(num_hidden_layers=3, layer_pattern="SSD").mixer_types == ["static", "static", "dynamic"]
    assert presets.tiny(parameterization="coupled").mixer_types == ["coupled", "coupled"]


def test_parameter_counts_match_the_paper():
    from avey_b.utils.counting import parameter_counts

    for name, expected in (("base", 164e6), ("large", 391e6)):
        with torch.device("meta"):  # count without allocating
            model = AveyBForMaskedLM(presets.get(name))
        counts = parameter_counts(model)
        assert abs(counts["total"] - expected) / expected < 0.01, (name, counts["total"])
        assert counts["total"] == sum(p.numel() for p in model.parameters())
        assert counts["head"] == 0  # the MLM decoder is tied to the embedding
        assert counts["static_matrices"] == (15 if name == "base" else 23) * 256 * 256


# -- Hugging Face contract ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", HEADS + [AveyBForMultipleChoice])
def test_save_load_round_trip_gives_identical_outputs(cls, tmp_path, ids):
    model = seeded(cls, presets.tiny(num_labels=3))
    inputs = ids.unsqueeze(1).expand(-1, 2, -1) if cls is AveyBForMultipleChoice else ids
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = cls.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(first_output(loaded(inputs)), first_output(model(inputs)), rtol=0, atol=0)


@pytest.mark.parametrize("auto, cls", [
    (AutoModel, AveyBModel),
    (AutoModelForMaskedLM, AveyBForMaskedLM),
    (AutoModelForSequenceClassification, AveyBForSequenceClassification),
    (AutoModelForTokenClassification, AveyBForTokenClassification),
    (AutoModelForQuestionAnswering, AveyBForQuestionAnswering),
    (AutoModelForMultipleChoice, AveyBForMultipleChoice),
])
def test_auto_classes_load_from_a_masked_lm_checkpoint(auto, cls, tmp_path, ids):
    """Heads hold the backbone under `model`, so a masked-LM checkpoint loads into any head, backbone kept."""
    mlm = seeded(AveyBForMaskedLM, presets.tiny())
    mlm.save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, AveyBConfig) and config.mixer_types == mlm.config.mixer_types
    model = auto.from_pretrained(tmp_path).eval()
    assert type(model) is cls
    backbone = model if cls is AveyBModel else model.model
    for k, v in mlm.model.state_dict().items():
        torch.testing.assert_close(backbone.state_dict()[k], v, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(backbone(ids).last_hidden_state, mlm.model(ids).last_hidden_state)


def test_num_labels_change_with_ignore_mismatched_sizes(tmp_path):
    model = seeded(AveyBForSequenceClassification, presets.tiny(num_labels=2))
    model.save_pretrained(tmp_path)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):  # a plain load refuses the shape change
        AveyBForSequenceClassification.from_pretrained(tmp_path, num_labels=5)
    loaded = AveyBForSequenceClassification.from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True)
    assert loaded.classifier.weight.shape == (5, 32)
    torch.testing.assert_close(loaded.model.embed_tokens.weight, model.model.embed_tokens.weight)


def test_tied_embeddings_and_resize(tmp_path, ids):
    model = seeded(AveyBForMaskedLM, presets.tiny())
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    model.resize_token_embeddings(120)
    assert model.config.vocab_size == 120 and model.get_input_embeddings().weight.shape == (120, 32)
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model(ids).logits.shape == (3, 13, 120)
    model.save_pretrained(tmp_path)
    reloaded = AveyBForMaskedLM.from_pretrained(tmp_path)
    assert reloaded.get_output_embeddings().weight.data_ptr() == reloaded.get_input_embeddings().weight.data_ptr()


def test_inputs_embeds_equal_input_ids(ids):
    model = seeded(AveyBModel, presets.tiny())
    with torch.no_grad():
        a = model(input_ids=ids).last_hidden_state
        b = model(inputs_embeds=model.get_input_embeddings()(ids)).last_hidden_state
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_return_dict_false_gives_tuples(ids):
    model = seeded(AveyBForMaskedLM, presets.tiny())
    out = model(ids, labels=ids, return_dict=False)
    assert isinstance(out, tuple) and out[0].dim() == 0 and out[1].shape == (3, 13, 99)
    base = seeded(AveyBModel, presets.tiny())
    assert isinstance(base(ids, return_dict=False), tuple)


def test_hidden_states_are_per_layer_in_batch_length_width_layout(ids):
    model = seeded(AveyBModel, presets.tiny(num_hidden_layers=3, layer_pattern="SDS"))
    out = model(ids, output_hidden_states=True)
    assert len(out.hidden_states) == 4
    assert all(h.shape == (3, 13, 32) for h in out.hidden_states)
    torch.testing.assert_close(out.hidden_states[0], model.embed_tokens(ids))
    torch.testing.assert_close(model.norm(out.hidden_states[-1]), out.last_hidden_state)
    nc = seeded(AveyBModel, presets.tiny(compressor=False))  # (k+1)S rows are reassembled too
    assert all(h.shape == (3, 13, 32) for h in nc(ids, output_hidden_states=True).hidden_states)


def test_gradient_checkpointing_gives_the_same_gradients(ids):
    model = seeded(AveyBForMaskedLM, presets.tiny())
    model.train()
    model(ids, labels=ids).loss.backward()
    ref = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()  # 5.23+ name
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    model(ids, labels=ids).loss.backward()
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref[k], msg=k)


def test_bf16_autocast_is_finite_with_all_padding_rows_and_zero_vectors():
    model = seeded(AveyBForMaskedLM, presets.tiny())
    ids = torch.randint(1, 99, (3, 13), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    mask[2] = 0  # a row that is padding only
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
        with torch.no_grad():
            zeros = model.model(inputs_embeds=torch.zeros(2, 9, 32)).last_hidden_state  # all-zero vectors
    assert torch.isfinite(out.logits).all() and torch.isfinite(zeros).all()
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    for name in ("softmax", "rms", "l1"):
        m = seeded(AveyBModel, presets.tiny(dynamic_normalization=name))
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
            assert torch.isfinite(m(ids, attention_mask=mask).last_hidden_state).all(), name


def test_unit_vectors_keep_zero_vectors_zero_and_large_vectors_finite_in_every_precision():
    x = torch.zeros(3, 8)
    x[1] = 1000.0  # norm 2,828 in float32; its square (8e6) is past float16's 65,504
    x[2, 0] = 1e-9  # below float16's smallest normal number
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        u = unit_vectors(x.to(dtype)).float()
        assert torch.isfinite(u).all(), dtype
        assert torch.equal(u[0], torch.zeros(8)), dtype
        torch.testing.assert_close(u[1], torch.full((8,), 8 ** -0.5), atol=1e-2, rtol=0)


def test_mean_pooling_of_a_long_input_is_exact_in_half_precision():
    """100K tokens: a float16 sum (or token count) overflows at 65,504; bfloat16 cannot count them exactly."""
    hidden = torch.full((2, 100_000, 4), 3.0)
    mask = torch.ones(2, 100_000, dtype=torch.long)
    mask[1, 70_000:] = 0
    for dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(mean_pool(hidden.to(dtype), mask).float(), torch.full((2, 4), 3.0))
        torch.testing.assert_close(mean_pool(hidden.to(dtype), None).float(), torch.full((2, 4), 3.0))


class _PinnedChoice:
    """Records the ranker's choice of a float32 run and replays it in a reduced-precision run, so that the two
    forwards can be compared where a near-tie (random weights, random ids) would flip a discrete choice."""

    def __init__(self, monkeypatch):
        self.original, self.choices, self.replay = Ranker.forward, [], None
        monkeypatch.setattr(Ranker, "forward", self)

    def __get__(self, ranker, owner):
        return lambda *a, **kw: self(ranker, *a, **kw)

    def __call__(self, ranker, x, *args, **kwargs):
        choice = self.original(ranker, x, *args, **kwargs)
        if self.replay is None:
            self.choices.append((choice.idx, choice.filled))
            return choice
        choice.idx, choice.filled = self.choices[self.replay]
        return choice


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_half_precision_weights_give_finite_outputs_close_to_float32(name, dtype, monkeypatch):
    """``model.half()`` / ``model.to(torch.bfloat16)`` (weights and activations in 16 bits, no autocast): finite
    everywhere, padding positions included, and at real tokens within 2% (float16) / 6% (bfloat16) of the
    largest float32 output, for the same ranker choice. Rows: left padding, right padding, five tokens."""
    ids = torch.randint(1, 99, (3, 22), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :6] = 0
    mask[1, 13:] = 0
    mask[2, 5:] = 0
    pinned = _PinnedChoice(monkeypatch)
    model = seeded(AveyBModel, presets.tiny(**VARIANTS[name]))
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).last_hidden_state
        pinned.replay = 0
        out = model.to(dtype)(ids, attention_mask=mask).last_hidden_state
    assert out.dtype == dtype and torch.isfinite(out).all()
    real = mask.bool()
    err = (out.float() - ref)[real].abs().max() / ref[real].abs().max()
    assert err < (0.02 if dtype == torch.float16 else 0.06), err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cls", HEADS[1:])
def test_every_head_is_finite_with_half_precision_weights(cls, dtype):
    ids = torch.randint(1, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    model = seeded(cls, presets.tiny()).to(dtype)
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
    assert torch.isfinite(first_output(out).float()).all()


# -- heads -------------------------------------------------------------------------------------------------------

def test_sparse_prediction_gives_the_dense_loss(ids):
    dense = seeded(AveyBForMaskedLM, presets.tiny())
    sparse = seeded(AveyBForMaskedLM, presets.tiny(sparse_prediction=True))
    labels = torch.full_like(ids, -100)
    labels[:, ::4] = ids[:, ::4]
    d, s = dense(ids, labels=labels), sparse(ids, labels=labels)
    assert s.logits.shape == (int((labels != -100).sum()), 99)
    torch.testing.assert_close(s.loss, d.loss)
    torch.testing.assert_close(s.logits, d.logits[labels != -100])
    assert sparse(ids).logits.shape == (3, 13, 99)  # without labels the logits stay dense


def _padded_pair():
    g = torch.Generator().manual_seed(5)
    short = torch.randint(1, 99, (1, 6), generator=g)
    batch = torch.cat([torch.nn.functional.pad(short, (0, 5)), torch.randint(1, 99, (1, 11), generator=g)])
    mask = torch.ones_like(batch)
    mask[0, 6:] = 0
    return short, batch, mask


@pytest.mark.parametrize("problem", ["single_label_classification", "multi_label_classification", "regression"])
def test_sequence_classification_losses_and_padding(problem):
    num_labels = 1 if problem == "regression" else 3
    model = seeded(AveyBForSequenceClassification, presets.tiny(num_labels=num_labels))
    short, batch, mask = _padded_pair()
    labels = {"single_label_classification": torch.tensor([0, 2]),
              "multi_label_classification": torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),
              "regression": torch.tensor([0.5, -1.0])}[problem]
    out = model(batch, attention_mask=mask, labels=labels)
    assert model.config.problem_type == problem
    logits = out.logits.float()
    expected = {
        "single_label_classification": lambda: torch.nn.functional.cross_entropy(logits, labels),
        "multi_label_classification": lambda: torch.nn.functional.binary_cross_entropy_with_logits(logits, labels),
        "regression": lambda: torch.nn.functional.mse_loss(logits.squeeze(-1), labels),
    }[problem]()
    torch.testing.assert_close(out.loss, expected)
    with torch.no_grad():  # masked mean pooling: padding does not change the prediction
        torch.testing.assert_close(model(batch, attention_mask=mask).logits[0], model(short).logits[0],
                                   rtol=1e-5, atol=1e-5)


def test_release_classification_heads_have_the_release_shapes():
    seq = AveyBForSequenceClassification(presets.tiny(classifier_head="avey-b1", num_labels=4))
    shapes = [tuple(m.weight.shape) for m in seq.dense if isinstance(m, torch.nn.Linear)]
    assert shapes == [(64, 32), (64, 64), (32, 64)]
    tok = AveyBForTokenClassification(presets.tiny(classifier_head="avey-b1", num_labels=4))
    assert isinstance(tok.dense[1], torch.nn.Tanh) and tok.dense[0].weight.shape == (32, 32)


def test_token_classification_ignores_padding_and_minus_100():
    model = seeded(AveyBForTokenClassification, presets.tiny(num_labels=5))
    _, batch, mask = _padded_pair()
    labels = torch.randint(0, 5, batch.shape, generator=torch.Generator().manual_seed(0))
    labels[1, 0] = -100
    out = model(batch, attention_mask=mask, labels=labels)
    keep = (mask == 1) & (labels != -100)
    expected = torch.nn.functional.cross_entropy(out.logits[keep].float(), labels[keep])
    torch.testing.assert_close(out.loss, expected)


def test_question_answering_spans_never_point_into_padding():
    model = seeded(AveyBForQuestionAnswering, presets.tiny())
    _, batch, mask = _padded_pair()
    out = model(batch, attention_mask=mask, start_positions=torch.tensor([1, 3]), end_positions=torch.tensor([2, 40]))
    assert out.start_logits.shape == (2, 11)
    assert out.start_logits[0, 6:].max() < -1e30 and out.end_logits.argmax(-1)[0] < 6
    expected_start = torch.nn.functional.cross_entropy(out.start_logits, torch.tensor([1, 3]))
    expected_end = torch.nn.functional.cross_entropy(out.end_logits[:1], torch.tensor([2]))  # 40 is out of range
    torch.testing.assert_close(out.loss, (expected_start + expected_end) / 2)


def test_multiple_choice_scores_each_choice_alone(ids):
    model = seeded(AveyBForMultipleChoice, presets.tiny())
    choices = torch.stack([ids, ids.flip(0)], dim=1)  # (3, 2, 13)
    out = model(choices, labels=torch.tensor([0, 1, 0]))
    assert out.logits.shape == (3, 2) and torch.isfinite(out.loss)
    with torch.no_grad():
        single = model(ids.unsqueeze(1)).logits[:, 0]
    torch.testing.assert_close(out.logits[:, 0].detach(), single)


def test_sentence_embeddings_are_normalized_mean_pools():
    model = seeded(AveyBForSentenceEmbedding, presets.tiny())
    short, batch, mask = _padded_pair()
    with torch.no_grad():
        emb = model(batch, attention_mask=mask).pooler_output
        alone = model(short).pooler_output
        hidden = model.model(short).last_hidden_state
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(2))
    torch.testing.assert_close(emb[0], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone[0], torch.nn.functional.normalize(hidden.mean(1), dim=-1)[0])


def test_rmsnorm_matches_torch():
    from avey_b.model.layers import RMSNorm

    norm = RMSNorm(32, eps=1e-6)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(4, 7, 32)
    torch.testing.assert_close(norm(x), torch.nn.functional.rms_norm(x, (32,), norm.weight, 1e-6))
