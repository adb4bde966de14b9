"""Encoder, the one way in for inference (avey_b.Encoder): a saved Avey-B loads once, in the eager or the ONNX
runtime, and answers what its head can: embeddings equal to the embedding head's own, hidden states, logits; texts
to vectors in one call (``encode``); a directory that holds another model is refused in one message."""

import pytest
import torch

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding, Encoder, LoadOptions
from avey_b import testing as toy
from avey_b.model import presets
from avey_b.testing import seeded

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


def alone(encoder, text: str, normalize: bool | None = None) -> torch.Tensor:
    """``text``'s vector the three-call way: tokenize, pad (a batch of one), embed."""
    batch, mask = encoder.pad(encoder.tokenize([text])["input_ids"])
    return encoder.embed(batch, mask, normalize)[0]


@pytest.fixture(scope="module")
def encoder(embedding_checkpoint):
    return Encoder(str(embedding_checkpoint[0]), LoadOptions(device="cpu", precision="fp32")).load()


def test_encode_gives_tokenize_pad_embed_in_one_call(encoder):
    vectors = encoder.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), encoder.config.hidden_size) and vectors.dtype == torch.float32
    assert vectors.device.type == "cpu"
    batch, mask = encoder.pad(encoder.tokenize(TEXTS)["input_ids"])
    torch.testing.assert_close(vectors, encoder.embed(batch, mask), rtol=0, atol=1e-5)
    for text, row in zip(TEXTS, vectors, strict=True):
        torch.testing.assert_close(row, alone(encoder, text), rtol=0, atol=1e-5)
    raw = encoder.encode(TEXTS, normalize=False)
    torch.testing.assert_close(raw[1], alone(encoder, TEXTS[1], normalize=False), rtol=0, atol=1e-5)
    assert not torch.allclose(raw.norm(dim=1), torch.ones(len(TEXTS)))
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(len(TEXTS)))  # this config normalizes


def test_encode_keeps_the_input_order_across_token_budget_batches(encoder, monkeypatch):
    texts = [f"word {i} " * n for i, n in enumerate([9, 1, 30, 4, 1, 17, 2, 9])]  # mixed lengths, unsorted
    lengths = [len(ids) for ids in encoder.tokenize(texts)["input_ids"]]
    calls = []
    embed = encoder.embed
    monkeypatch.setattr(encoder, "embed", lambda b, m, n=None: calls.append(b.shape) or embed(b, m, n))
    vectors = encoder.encode(texts, batch_tokens=max(lengths))
    assert len(calls) >= 3 and all(rows * length <= max(lengths) for rows, length in calls)
    for text, row in zip(texts, vectors, strict=True):
        torch.testing.assert_close(row, alone(encoder, text), rtol=0, atol=1e-5)


def test_encode_pads_without_changing_a_vector_whatever_the_budget(encoder):
    texts = TEXTS + ["bad", "a long and winding review of a film " * 5]
    each_alone, one_batch = encoder.encode(texts, batch_tokens=1), encoder.encode(texts, batch_tokens=10**6)
    torch.testing.assert_close(each_alone, one_batch, rtol=0, atol=1e-5)
    torch.testing.assert_close(encoder.encode(texts, batch_tokens=64), one_batch, rtol=0, atol=1e-5)


def test_encode_takes_a_single_string_and_an_empty_list(encoder):
    one = encoder.encode("a good film")
    assert one.shape == (encoder.config.hidden_size,)  # a string gives a vector, as SentenceTransformer.encode
    torch.testing.assert_close(one, encoder.encode(["a good film"])[0])
    none = encoder.encode([])
    assert none.shape == (0, encoder.config.hidden_size) and none.dtype == torch.float32


def test_session_options_are_onnxruntimes_and_apply_to_the_onnx_runtime_only(embedding_checkpoint):
    with pytest.raises(ValueError, match="they apply with LoadOptions"):
        Encoder(str(embedding_checkpoint[0]), session_options=object())


def test_a_masked_lm_also_fills_and_its_logits_are_the_models(tmp_path):
    tok = toy.tokenizer(str(tmp_path))
    model = seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok))).eval()
    model.save_pretrained(tmp_path)
    encoder = Encoder(str(tmp_path), LoadOptions(precision="fp32"))
    assert encoder.kinds == ["embed", "fill", "sparse"]
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
    from avey_b.apps import export
    from avey_b.apps import export_options as options

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
        torch.testing.assert_close(onnx.encode(TEXTS[:2], batch_tokens=1), want, rtol=0, atol=1e-5)
        assert onnx.encode(TEXTS[0]).shape == (model.config.hidden_size,)

    import onnxruntime as ort

    session_options = ort.SessionOptions()
    session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    quiet = Encoder(str(tmp_path / "served"), LoadOptions(onnx="", threads=1), session_options=session_options).load()
    started = quiet.runtime.session.get_session_options()
    assert started.intra_op_num_threads == 1  # the encoder's threads, whatever the options said
    assert started.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    torch.testing.assert_close(quiet.encode(TEXTS[:2]), want, rtol=0, atol=1e-5)

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
