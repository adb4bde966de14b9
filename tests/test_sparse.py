"""Sparse (SPLADE) vectors from the masked-LM head: the chunked max equals SPLADE's formula over the whole logits,
padding never counts, and :class:`avey_b.Encoder` gives them for a masked-LM checkpoint only."""

import json
import logging
from pathlib import Path

import pytest
import torch

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.model import presets
from avey_b.model.sparse import sparse_rows, splade_max
from avey_b.testing import seeded

TEXTS = ["a good film", "the plot was awful and the cast was weak", "bob met alice in paris " * 30]


def formula(model, ids, mask):
    """SPLADE v2 as written: the whole (B, N, V) logits, log(1 + relu) per token, max over the real tokens."""
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    weights = torch.log1p(torch.relu(logits)) * mask[..., None]
    return weights.max(dim=1).values


@pytest.fixture(scope="module")
def mlm():
    return seeded(AveyBForMaskedLM, presets.tiny(vocab_size=99))


@pytest.mark.parametrize("chunk", [1, 4, None])
def test_the_chunked_max_is_splades_formula_and_padding_never_counts(mlm, ids, chunk):
    mask = torch.ones_like(ids)
    mask[1, -5:] = 0
    with torch.no_grad():
        hidden = mlm.model(ids, mask).last_hidden_state
        got = splade_max(hidden, mask, mlm.decoder, chunk)
        expected = formula(mlm, ids, mask)
        alone = formula(mlm, ids[1:2, :-5], mask[1:2, :-5])
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(got[1:2], alone, rtol=0, atol=1e-5)  # the padded row = the row alone
    assert (got >= 0).all() and (got == 0).any()


def test_the_chunked_max_has_the_formulas_gradient(mlm, ids):
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0
    grads = []
    for chunk in (2, ids.shape[1]):
        mlm.zero_grad()
        splade_max(mlm.model(ids, mask).last_hidden_state, mask, mlm.decoder, chunk).sum().backward()
        grads.append(mlm.decoder.weight.grad.clone())
    mlm.zero_grad()
    formula(mlm, ids, mask).sum().backward()
    torch.testing.assert_close(grads[0], mlm.decoder.weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[1], mlm.decoder.weight.grad, rtol=1e-4, atol=1e-5)
    mlm.zero_grad()


def test_sparse_rows_are_the_nonzero_entries():
    weights = torch.tensor([[0.0, 2.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    (i0, v0), (i1, v1) = sparse_rows(weights)
    assert i0.tolist() == [1, 3] and v0.tolist() == [2.0, 0.5] and i1.numel() == 0 == v1.numel()


def test_the_encoder_gives_a_masked_lms_sparse_vectors_and_refuses_other_heads(tmp_path):
    tok = toy.tokenizer(str(tmp_path / "mlm"))
    directory = toy.avey_b(str(tmp_path / "mlm"), tok)
    encoder = Encoder(directory, LoadOptions(device="cpu", precision="fp32")).load()
    assert encoder.kinds == ["embed", "fill", "sparse"]
    batch, mask = encoder.pad(encoder.tokenize(TEXTS)["input_ids"])
    rows = encoder.sparse(batch, mask)
    with torch.no_grad():
        expected = formula(encoder.model, batch, mask)
    for (indices, values), row in zip(rows, expected, strict=True):
        assert indices.dtype == torch.int64 and values.dtype == torch.float32
        assert indices.tolist() == row.nonzero().squeeze(-1).tolist()
        torch.testing.assert_close(values, row[indices], rtol=0, atol=1e-6)

    AveyBForSentenceEmbedding.from_pretrained(directory).save_pretrained(tmp_path / "emb")
    dense = Encoder(tmp_path / "emb", LoadOptions(device="cpu"))
    assert "sparse" not in dense.kinds
    with pytest.raises(ValueError, match=r"AveyBForSentenceEmbedding, which has no masked-LM head.*"
                                         r"--task sparse-embedding"):
        dense.sparse(batch, mask)


def sparse_directory(tmp_path) -> str:
    """A tiny pretrained masked-LM saved as a SPLADE directory (``embedding_kind="sparse"``)."""
    tok = toy.tokenizer(str(tmp_path / "pretrained"))
    model = AveyBForMaskedLM.from_pretrained(toy.avey_b(str(tmp_path / "pretrained"), tok))
    model.config.embedding_kind = "sparse"
    model.save_pretrained(tmp_path / "sparse")
    return str(tmp_path / "sparse")


def test_a_sparse_directory_is_a_splade_sparse_encoder_with_the_encoders_vectors(tmp_path, caplog):
    st = pytest.importorskip("sentence_transformers")
    directory = sparse_directory(tmp_path)
    with caplog.at_level(logging.WARNING):
        model = st.SparseEncoder(directory, device="cpu")
    assert not [r for r in caplog.records if "Converting" in r.getMessage()]  # loaded as what it is
    got = model.encode(TEXTS, convert_to_tensor=True).to_dense()
    encoder = Encoder(directory, LoadOptions(device="cpu", precision="fp32")).load()
    assert got.shape == (len(TEXTS), encoder.config.vocab_size)  # vocabulary-sized: SPLADE, not a CSR autoencoder
    batch, mask = encoder.pad(encoder.tokenize(TEXTS)["input_ids"])
    assert mask.sum(1).max() > 100  # the long text is not cut
    for (indices, values), row in zip(encoder.sparse(batch, mask), got, strict=True):
        assert row.nonzero().squeeze(-1).tolist() == indices.tolist()
        torch.testing.assert_close(row[indices], values, rtol=0, atol=1e-5)
    # the same directory as a SentenceTransformer: sentence-transformers' conversion, the backbone's mean vector
    with caplog.at_level(logging.WARNING):
        dense = st.SentenceTransformer(directory, device="cpu").encode(TEXTS, normalize_embeddings=True)
    assert [r for r in caplog.records if "Converting SparseEncoder" in r.getMessage()]
    torch.testing.assert_close(torch.as_tensor(dense), encoder.embed(batch, mask), rtol=0, atol=1e-5)


def test_a_dense_directory_in_sparse_encoder_says_what_it_is_and_sparse_needs_a_masked_lm(tmp_path, caplog):
    st = pytest.importorskip("sentence_transformers")
    tok = toy.tokenizer(str(tmp_path / "pretrained"))
    directory = toy.avey_b(str(tmp_path / "pretrained"), tok)  # a pretrained masked-LM: dense by default
    assert json.loads(Path(directory, "config_sentence_transformers.json").read_text())["model_type"] == \
        "SentenceTransformer"
    with caplog.at_level(logging.WARNING):
        st.SparseEncoder(directory, device="cpu")
    assert [r for r in caplog.records if f"Converting SentenceTransformer model {directory}" in r.getMessage()]
    emb = AveyBForSentenceEmbedding.from_pretrained(directory)
    emb.config.embedding_kind = "sparse"
    with pytest.raises(ValueError, match="needs the masked-LM head.*AveyBForSentenceEmbedding has none"):
        emb.save_pretrained(tmp_path / "emb")


def test_no_chunk_computes_more_logits_than_the_rule_allows(mlm, ids):
    from avey_b.model.sparse import CHUNK_LOGITS, logit_chunk_tokens

    # never more logits, never 0 tokens
    assert logit_chunk_tokens(2, 99, 5 * 99) == 2 and logit_chunk_tokens(4, 50_000, 100) == 1
    assert logit_chunk_tokens(1, 50_368) * 50_368 <= CHUNK_LOGITS < (logit_chunk_tokens(1, 50_368) + 1) * 50_368
    shapes = []
    hook = mlm.decoder.register_forward_hook(lambda module, args, out: shapes.append(tuple(out.shape)))
    try:
        with torch.no_grad():
            hidden = mlm.model(ids[:2]).last_hidden_state
            got = splade_max(hidden, None, mlm.decoder, chunk=logit_chunk_tokens(2, 99, 5 * 99))
    finally:
        hook.remove()
    assert shapes == [(2, 2, 99)] * 6 + [(2, 1, 99)]  # 13 tokens, 2 at a time: never the (13, 99) logits
    with torch.no_grad():
        torch.testing.assert_close(got, formula(mlm, ids[:2], torch.ones_like(ids[:2])), rtol=0, atol=1e-6)


def test_sparse_vectors_are_float32_ones_at_the_bf16_precision_and_dense_ones_stay_bf16(tmp_path):
    """bf16 autocast moves SPLADE weights by percents (the backbone's rounding, not the head's), so the sparse
    output runs its forward in float32 whatever the precision: within 1e-3 of a float32 encoder's, the same
    indices; the dense output alone still runs in bf16 (and differs from float32 by more)."""
    tok = toy.tokenizer(str(tmp_path / "mlm"))
    directory = toy.avey_b(str(tmp_path / "mlm"), tok)
    fp32, bf16 = (Encoder(directory, LoadOptions(device="cpu", precision=p)).load() for p in ("fp32", "bf16"))
    assert bf16.bf16 and not fp32.bf16
    batch, mask = fp32.pad(fp32.tokenize(TEXTS)["input_ids"])
    for outputs in (("sparse",), ("dense", "sparse")):
        want, got = fp32.vectors(batch, mask, outputs)["sparse"], bf16.vectors(batch, mask, outputs)["sparse"]
        for (wi, wv), (gi, gv) in zip(want, got, strict=True):
            assert wi.tolist() == gi.tolist()
            torch.testing.assert_close(gv, wv, rtol=0, atol=1e-3)
    dense_gap = (bf16.vectors(batch, mask)["dense"][2] - fp32.vectors(batch, mask)["dense"][2]).abs().max()
    assert dense_gap > 1e-4  # bf16 is on where sparse vectors are not asked for
