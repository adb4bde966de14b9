"""``avey-b serve``'s ``/embed_sparse`` as TEI's clients call it (httpx: ``huggingface_hub.InferenceClient`` has no
sparse call): per input, ``[{"index", "value"}]`` equal to ``Encoder.sparse``, long inputs whole; ``/info`` lists
``sparse``; a model without a masked-LM head answers 400 saying what is missing and how to train one."""

import pytest
import torch

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from tests.test_serve_api import serve

httpx = pytest.importorskip("httpx")


@pytest.fixture(scope="module")
def directories(tmp_path_factory):
    root = tmp_path_factory.mktemp("sparse")
    mlm = toy.avey_b(str(root / "mlm"), toy.tokenizer(str(root / "mlm")))
    AveyBForSentenceEmbedding.from_pretrained(mlm).save_pretrained(root / "emb")
    splade = AveyBForMaskedLM.from_pretrained(mlm)
    splade.config.embedding_kind = "sparse"  # a SPLADE directory: TEI's /info says its pooling is splade
    splade.save_pretrained(root / "splade")
    return str(root / "splade"), root / "emb"


def test_embed_sparse_answers_teis_shape_with_the_encoders_vectors_long_inputs_whole(directories):
    mlm, _ = directories
    url, server = serve(mlm, max_tokens=10_000, block_tokens=64)
    try:
        texts = ["a good film", "bob met alice in paris " * 300]  # 1,500 words: many blocks, one forward
        answer = httpx.post(url + "/embed_sparse", json={"inputs": texts}, timeout=60)
        assert answer.status_code == 200, answer.text
        got = answer.json()
        encoder = Encoder(mlm, LoadOptions(device="cpu", precision="fp32")).load()
        ids = encoder.tokenize(texts)["input_ids"]
        assert len(ids[1]) > 1000
        for row, text_ids in zip(got, ids, strict=True):
            (indices, values), = encoder.sparse(*encoder.pad([text_ids]))
            assert [e["index"] for e in row] == indices.tolist()
            torch.testing.assert_close(torch.tensor([e["value"] for e in row]), values, rtol=0, atol=1e-5)
        single = httpx.post(url + "/embed_sparse", json={"inputs": "a good film"}, timeout=60).json()
        assert len(single) == 1 and [e["index"] for e in single[0]] == [e["index"] for e in got[0]]
        info = httpx.get(url + "/info").json()
        assert "sparse" in info["serves"] and info["model_type"] == {"embedding": {"pooling": "splade"}}
        refused = httpx.post(url + "/embed_sparse", json={"inputs": "a", "normalize": True})
        assert refused.status_code == 422 and "normalize" in refused.text  # not one of its fields
    finally:
        server.should_exit = True


def test_embed_sparse_on_a_model_without_a_masked_lm_head_is_a_400_naming_it(directories):
    _, emb = directories
    url, server = serve(emb)
    try:
        answer = httpx.post(url + "/embed_sparse", json={"inputs": ["a good film"]})
        assert answer.status_code == 400
        assert "masked-LM head" in answer.text and "--task sparse-embedding" in answer.text
        assert "AveyBForSentenceEmbedding" in answer.text
        assert "sparse" not in httpx.get(url + "/info").json()["serves"]
    finally:
        server.should_exit = True
