"""Avey-B inside the ecosystem: torch.compile, transformers.Trainer, the fill-mask pipeline, sentence-transformers."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from avey_b import AveyBForMaskedLM, AveyBModel
from avey_b.model import presets
from avey_b.model.layers import AveyBLayer
from avey_b.testing import seeded

WORDS = "the a cat dog sat ran on under mat log red blue big small and".split()


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer built in the test: 5 specials + 15 words (no download)."""
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


@pytest.mark.slow
def test_layers_compile_without_graph_breaks_and_the_model_breaks_only_at_the_selection_and_the_chunk_loop():
    model = seeded(AveyBForMaskedLM, presets.tiny())
    ids = torch.randint(1, 99, (2, 13), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, 9:] = 0
    for kind in ("static", "dynamic"):
        layer = AveyBLayer(presets.tiny(layer_pattern="all_" + kind), 0)
        explanation = torch._dynamo.explain(layer)(torch.randn(6, 4, 32), mask.new_ones(6, 4).bool())
        assert explanation.graph_break_count == 0, explanation.break_reasons
    # the ranker's choice and the loop over chunks of processor rows (trip counts that depend on the length) run
    # eagerly by design, so that the compiled graphs do not depend on the number of splits or chunks (each chunk is
    # one compiled graph): they are the only places the graph breaks
    explanation = torch._dynamo.explain(model)(ids, attention_mask=mask)
    reasons = [str(reason.reason) for reason in explanation.break_reasons]
    assert any("function select " in r for r in reasons), reasons
    for reason in reasons:
        assert "compiler.disable" in reason and ("function select " in reason or "_process_in_chunks" in reason), reason
    # explain gives no reason for the chunk loop's break (the forward's resumed frame calls it directly): the count
    # pins every break, the selection's and the chunk loop's
    assert explanation.graph_break_count == 5, reasons


@pytest.mark.slow
def test_compiled_model_matches_eager():
    torch._dynamo.reset()
    model = seeded(AveyBForMaskedLM, presets.tiny())
    ids = torch.randint(1, 99, (2, 13), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, 9:] = 0
    compiled = torch.compile(model)  # inductor
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits,
                                   rtol=1e-4, atol=1e-5)


def test_fill_mask_pipeline_uses_the_model_predictions():
    from transformers import pipeline

    tok = tiny_tokenizer()
    model = seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok), pad_token_id=tok.pad_token_id))
    fill = pipeline("fill-mask", model=model, tokenizer=tok, top_k=3)
    predictions = fill("the cat [MASK] on the mat")
    assert len(predictions) == 3 and all(p["token_str"] in tok.get_vocab() for p in predictions)
    enc = tok("the cat [MASK] on the mat", return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0, enc.input_ids[0].tolist().index(tok.mask_token_id)]
    assert predictions[0]["token"] == int(logits.argmax())
    torch.testing.assert_close(torch.tensor(predictions[0]["score"]), logits.softmax(-1).max(), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_trainer_fits_a_tiny_corpus(tmp_path):
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    tok = tiny_tokenizer()
    g = torch.Generator().manual_seed(0)
    sentences = [" ".join(WORDS[i] for i in torch.randint(0, len(WORDS), (9,), generator=g).tolist())
                 for _ in range(16)]
    data = [tok(s) for s in sentences]
    model = seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok), pad_token_id=tok.pad_token_id))
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=30, per_device_train_batch_size=8, learning_rate=3e-3,
                             logging_steps=5, report_to=[], save_strategy="no", use_cpu=True, seed=0,
                             disable_tqdm=True)
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.3)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) >= 4 and losses[-1] < losses[0]


def test_sentence_transformers_wraps_the_backbone(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    tok = tiny_tokenizer()
    model = seeded(AveyBModel, presets.tiny(vocab_size=len(tok), pad_token_id=tok.pad_token_id))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    # the saved directory says: Transformer, mean pooling, L2 normalization (what `avey-b serve` and `embed` give)
    encoder = st.SentenceTransformer(str(tmp_path), device="cpu")
    emb = encoder.encode(["the cat sat", "a big red dog ran under the log"], convert_to_tensor=True)
    with torch.no_grad():
        enc = tok(["the cat sat"], return_tensors="pt")
        expected = torch.nn.functional.normalize(model(**enc).last_hidden_state.mean(1)[0], dim=-1)
    torch.testing.assert_close(emb[0], expected, rtol=1e-4, atol=1e-5)
