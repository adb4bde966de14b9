"""What the ecosystem passes reaches the model: PEFT (LoRA) with every task type it knows for encoders, adapter
save/load and merge; the keyword arguments transformers and PEFT add (``attn_implementation``, which means nothing
to a model without attention, included); hidden states on the gradient path; the
sentence-embedding head's contrastive loss."""

import pytest
import torch

from avey_b import (
    AveyBForQuestionAnswering,
    AveyBForSentenceEmbedding,
    AveyBForSequenceClassification,
    AveyBForTokenClassification,
    AveyBModel,
)
from avey_b.model import presets
from avey_b.model.heads import in_batch_contrastive_loss
from avey_b.testing import seeded

peft = pytest.importorskip("peft")

CASES = {
    "SEQ_CLS": (AveyBForSequenceClassification, {"labels": torch.tensor([0, 1])}, "logits"),
    "TOKEN_CLS": (AveyBForTokenClassification, {"labels": torch.randint(0, 3, (2, 13))}, "logits"),
    "QUESTION_ANS": (AveyBForQuestionAnswering, {"start_positions": torch.tensor([1, 2]),
                                                 "end_positions": torch.tensor([3, 4])}, "start_logits"),
    "FEATURE_EXTRACTION": (AveyBModel, {}, "last_hidden_state"),
}


def batch():
    ids = torch.randint(1, 99, (2, 13), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("task_type", list(CASES))
def test_lora_trains_saves_loads_and_merges_for_every_task_type(task_type, tmp_path):
    cls, labels, field = CASES[task_type]
    base = seeded(cls, presets.tiny(num_labels=3))
    lora = peft.LoraConfig(task_type=task_type, r=4, lora_alpha=8, target_modules=["enricher", "fuser"])
    model = peft.get_peft_model(base, lora)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "classifier" in n or "qa_outputs" in n for n in trainable)

    out = model(**batch(), **labels)  # PEFT passes output_attentions, return_dict ... along
    loss = out.loss if labels else getattr(out, field).float().pow(2).mean()
    loss.backward()
    with torch.no_grad():  # one step so the adapter is not the identity
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    model.eval()
    with torch.no_grad():
        expected = getattr(model(**batch()), field)

    model.save_pretrained(tmp_path / "adapter")
    fresh = seeded(cls, presets.tiny(num_labels=3))
    loaded = peft.PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(getattr(loaded(**batch()), field), expected)
        merged = loaded.merge_and_unload().eval()
        torch.testing.assert_close(getattr(merged(**batch()), field), expected, rtol=1e-4, atol=1e-5)


def test_every_forward_accepts_the_keywords_transformers_passes():
    model = seeded(AveyBForSequenceClassification, presets.tiny(num_labels=2)).eval()
    with torch.no_grad():
        a = model(**batch())
        b = model(**batch(), output_attentions=True, use_cache=False, num_items_in_batch=torch.tensor(2))
    torch.testing.assert_close(a.logits, b.logits)


@pytest.mark.parametrize("implementation", ["sdpa", "flash_attention_2", "flex_attention", "eager"])
def test_any_attn_implementation_loads_the_same_model_with_a_warning_that_it_is_ignored(implementation, tmp_path,
                                                                                         caplog):
    """Code that passes ``attn_implementation`` to every model (sentence-transformers' model_kwargs, evaluation
    harnesses) loads Avey-B too: it has no attention, so the value chooses nothing and says so, instead of
    transformers' "request the support for this architecture"."""
    import logging

    from transformers import AutoModel

    model = seeded(AveyBModel, presets.tiny())
    model.save_pretrained(tmp_path)
    logging.Logger.warning_once.cache_clear()  # transformers' once-per-process warnings: this test sees its own
    with caplog.at_level("WARNING"):
        loaded = AutoModel.from_pretrained(tmp_path, attn_implementation=implementation).eval()
        built = AveyBModel._from_config(presets.tiny(), attn_implementation=implementation)
    warned = [r.getMessage() for r in caplog.records if "is ignored: Avey-B has no attention" in r.getMessage()]
    assert bool(warned) == (implementation != "eager"), warned
    assert loaded.config._attn_implementation == built.config._attn_implementation == "eager"
    ids = batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**ids).last_hidden_state, model(**ids).last_hidden_state, rtol=0, atol=0)


@pytest.mark.parametrize("overrides", [{}, {"compressor": False}, {"ranker": "off"}])
def test_returned_hidden_states_are_on_the_gradient_path_and_change_nothing(overrides):
    model = seeded(AveyBModel, presets.tiny(**overrides))
    inputs = batch()
    plain = model(**inputs).last_hidden_state
    out = model(**inputs, output_hidden_states=True)
    torch.testing.assert_close(out.last_hidden_state, plain, rtol=0, atol=0)
    for h in out.hidden_states:
        h.retain_grad()
    out.last_hidden_state.sum().backward()
    on_path = out.hidden_states if overrides.get("compressor") is not False else out.hidden_states[:1]
    assert all(h.grad is not None for h in on_path)


def test_contrastive_loss_matches_its_definition():
    torch.manual_seed(0)
    e = torch.randn(4, 8)
    labels = torch.tensor([0, 0, 1, 2])  # items 0 and 1 are a pair; 2 and 3 have no positive
    loss = in_batch_contrastive_loss(e, labels, scale=20.0)
    n = torch.nn.functional.normalize(e, dim=-1)
    sims = 20.0 * n @ n.T
    expected = []
    for i, j in ((0, 1), (1, 0)):
        others = [k for k in range(4) if k != i]
        expected.append(-(sims[i, j] - torch.logsumexp(sims[i, others], 0)))
    torch.testing.assert_close(loss, torch.stack(expected).mean())
    lone = in_batch_contrastive_loss(e.requires_grad_(), torch.tensor([0, 1, 2, 3]))
    assert lone.item() == 0.0 and lone.requires_grad


def test_sentence_embedding_head_learns_pairs():
    model = seeded(AveyBForSentenceEmbedding, presets.tiny())
    inputs = batch() | {"input_ids": torch.randint(1, 99, (4, 13), generator=torch.Generator().manual_seed(1)),
                        "attention_mask": torch.ones(4, 13, dtype=torch.long)}
    labels = torch.tensor([0, 0, 1, 1])
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(20):
        loss = model(**inputs, labels=labels).loss
        first = first if first is not None else loss.item()
        optim.zero_grad()
        loss.backward()
        optim.step()
    assert loss.item() < first
    loss_tuple = model(**inputs, labels=labels, return_dict=False)[0]
    assert loss_tuple.ndim == 0  # the loss comes first, as in every transformers output
