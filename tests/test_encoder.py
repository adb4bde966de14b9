"""Encoder, the one way in for inference (avey_b.apps.encoder): a saved Avey-B loads once, in the eager or the ONNX
runtime, and answers what its head can: embeddings equal to the embedding head's own, hidden states, logits; a
directory that holds another model is refused in one message."""

import pytest
import torch
from conftest import seeded

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.apps.encoder import Encoder
from avey_b.apps.options import LoadOptions
from avey_b.model import presets

TEXTS = ["a good film", "the plot was awful and the cast was weak", "bob met alice in paris " * 20]


@pytest.fixture(scope="module")
def embedding_checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("embedding")
    tok = toy.tokenizer(str(directory))
    model = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok))).eval()
    model.save_pretrained(directory)
    return directory, model, tok


def test_eager_embeddings_equal_the_embedding_heads_own_pooled_output(embedding_checkpoint):
    directory, model, tok = embedding_checkpoint
    encoder = Encoder(str(directory), LoadOptions(device="cpu", precision="fp32"))
    assert (encoder.architecture, encoder.kinds, encoder.device.type, encoder.bf16) == (
        "AveyBForSentenceEmbedding", ["embed"], "cpu", False)
    assert encoder.runtime.model is None  # the weights load on first use
    batch, mask = encoder.pad(encoder.tokenize(TEXTS)["input_ids"])
    assert mask.sum(1).tolist() == [len(tok(t)["input_ids"]) for t in TEXTS]  # right-padded, never cut
    with torch.no_grad():
        own = model(input_ids=batch, attention_mask=mask)
    torch.testing.assert_close(encoder.embed(batch, mask), own.pooler_output, rtol=0, atol=1e-6)
    real = mask.bool()
    torch.testing.assert_close(encoder.hidden_states(batch, mask)[real], own.last_hidden_state[real], rtol=0,
                               atol=1e-6)
    loaded = encoder.model
    assert encoder.load().model is loaded  # loaded once


def test_a_masked_lm_also_fills_and_its_logits_are_the_models(tmp_path):
    tok = toy.tokenizer(str(tmp_path))
    model = seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok))).eval()
    model.save_pretrained(tmp_path)
    encoder = Encoder(str(tmp_path), LoadOptions(precision="fp32"))
    assert encoder.kinds == ["embed", "fill"]
    enc = encoder.tokenize(["a [MASK] film", "bob"], offsets=True)
    assert enc["offset_mapping"][1][1] == (0, 3) and enc["special_tokens_mask"][1] == [1, 0, 1]
    batch, mask = encoder.pad(enc["input_ids"])
    with torch.no_grad():
        want = model(input_ids=batch, attention_mask=mask).logits
    torch.testing.assert_close(encoder.logits(batch, mask), want)
    backbone = Encoder(str(tmp_path), LoadOptions(precision="fp32"), architecture="AveyBModel")
    assert backbone.kinds == ["embed"] and type(backbone.model).__name__ == "AveyBModel"
    with pytest.raises(ValueError, match="no Avey-B class 'mean_pool'"):
        Encoder(str(tmp_path), architecture="mean_pool")
    with pytest.raises(ValueError, match="outside this model's vocabulary"):
        encoder.check_ids([[1, 2], [len(tok)]])
    with pytest.raises(ValueError, match="input 0 holds no token ids"):
        encoder.check_ids([[]])


def test_a_directory_that_holds_another_model_is_refused_in_one_message(tmp_path):
    bert = toy.bert(str(tmp_path / "bert"), toy.tokenizer(str(tmp_path / "bert")))
    with pytest.raises(ValueError) as refused:
        Encoder(bert)
    assert str(refused.value) == (f"{bert} holds a 'bert' model (BertForMaskedLM), not an Avey-B: this loads Avey-B "
                                  "checkpoints only")
    with pytest.raises(FileNotFoundError, match="is not an existing local path"):
        Encoder(str(tmp_path / "nowhere" / "model"))


def test_an_onnx_model_runs_on_the_cpu_and_its_file_must_exist(embedding_checkpoint):
    directory, _, _ = embedding_checkpoint
    with pytest.raises(ValueError, match="ONNX model runs on the CPU"):
        Encoder(str(directory), LoadOptions(onnx="", precision="bf16"))
    with pytest.raises(FileNotFoundError, match=r"no ONNX model at .*onnx/model.onnx \(write one with `avey-b export"):
        Encoder(str(directory), LoadOptions(onnx=""))


def test_the_light_options_name_what_the_heavy_modules_define():
    from avey_b.apps import export, options

    assert tuple(export.EXPORT_HEADS) == options.EXPORT_HEADS


@pytest.mark.slow
def test_the_onnx_runtime_answers_as_the_eager_model(embedding_checkpoint, tmp_path):
    """An ``--head embedding`` export (sentence_embedding and last_hidden_state) and a bare ``last_hidden_state``
    export embed as the eager model does; a masked-LM export (logits only) fills and has no hidden states."""
    from avey_b.apps.export import export_embedding_directory, export_onnx

    directory, model, _ = embedding_checkpoint
    eager = Encoder(str(directory), LoadOptions(precision="fp32"))
    export_embedding_directory(Encoder(str(directory), LoadOptions(device="cpu", precision="fp32")),
                               tmp_path / "served")
    export_onnx(model.model, tmp_path / "base.onnx")
    batch, mask = eager.pad(eager.tokenize(TEXTS[:2])["input_ids"])  # no repeated text: no exact ranker ties
    want, real = eager.embed(batch, mask), mask.bool()
    for served, file in ((tmp_path / "served", ""), (directory, str(tmp_path / "base.onnx"))):
        onnx = Encoder(str(served), LoadOptions(onnx=file, threads=1))
        assert onnx.kinds == ["embed"] and onnx.onnx_file.is_file() and onnx.runtime_name.startswith("onnxruntime")
        torch.testing.assert_close(onnx.embed(batch, mask), want, rtol=0, atol=1e-5)
        torch.testing.assert_close(onnx.hidden_states(batch, mask)[real], eager.hidden_states(batch, mask)[real],
                                   rtol=0, atol=1e-4)
        with pytest.raises(ValueError, match="there is no eager module"):
            onnx.model  # noqa: B018

    mlm = seeded(AveyBForMaskedLM, presets.tiny(vocab_size=model.config.vocab_size)).eval()
    mlm.save_pretrained(tmp_path / "mlm")
    export_onnx(mlm, tmp_path / "mlm.onnx", "logits")
    onnx = Encoder(str(tmp_path / "mlm"), LoadOptions(onnx=str(tmp_path / "mlm.onnx")))
    assert onnx.kinds == ["fill"]
    with torch.no_grad():
        torch.testing.assert_close(onnx.logits(batch, mask), mlm(input_ids=batch, attention_mask=mask).logits,
                                   rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="has no last_hidden_state output"):
        onnx.hidden_states(batch, mask)
