"""``avey-b serve`` as its users' clients see it: a real uvicorn server (in a thread of this process, one per
checkpoint per module) called by the ``openai`` SDK, ``huggingface_hub.InferenceClient`` and ``httpx`` with the
TEI, OpenAI and Cohere request shapes; an API key; a cross-encoder ranking as ``sentence_transformers.CrossEncoder``
ranks; the limits that refuse a request before tokenizing it, without holding the event loop; the access log and
the Prometheus metrics."""

import json
import logging
import queue
import socket
import threading
import time

import numpy as np
import pytest
import torch

from avey_b import AveyBForMultiVector, AveyBForSentenceEmbedding, AveyBForSequenceClassification
from avey_b import testing as toy
from avey_b.model import presets
from avey_b.testing import seeded

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

KEY = "sekrit-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def serve(directory, **options):
    """A server for ``directory`` in a daemon thread on a free port, as ``avey-b serve`` runs it
    (:func:`avey_b.apps.serve.guard.server`, fp32), with these :class:`ServeOptions`: (url, server)."""
    from avey_b.apps.serve import build_app, guard
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = ServeOptions(**{"log_level": "warning", **options, "port": port})
    server = guard.server(build_app(Encoder(str(directory), LoadOptions(precision="fp32")), options), options)
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.time() + 60
    while not server.started:
        assert time.time() < deadline, "the server did not come up"
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    """An embedding checkpoint that declares Matryoshka sizes and a prompt, served with an API key: (model, tok,
    url)."""
    directory = tmp_path_factory.mktemp("embedder")
    tok = toy.tokenizer(str(directory))
    model = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok), matryoshka_dimensions=[8, 16]))
    model.save_pretrained(directory)
    (directory / "config_sentence_transformers.json").write_text('{"prompts": {"query": "query: "}}')
    url, server = serve(directory, api_key=KEY, max_tokens=2000)
    yield model, tok, url
    server.should_exit = True


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    """A random-weight cross-encoder (a one-label sequence classifier) saved with its tokenizer: (directory, url)."""
    directory = tmp_path_factory.mktemp("reranker")
    tok = toy.tokenizer(str(directory))
    seeded(AveyBForSequenceClassification, presets.tiny(vocab_size=len(tok), num_labels=1)).save_pretrained(directory)
    url, server = serve(directory, max_tokens=2000)
    yield directory, url
    server.should_exit = True


@pytest.fixture(scope="module")
def multivector(tmp_path_factory):
    """A random-weight multi-vector model (16-wide token vectors) saved with its tokenizer: (directory, url)."""
    directory = tmp_path_factory.mktemp("multivector")
    tok = toy.tokenizer(str(directory))
    seeded(AveyBForMultiVector, presets.tiny(vocab_size=len(tok), multivector_dim=16)).save_pretrained(directory)
    url, server = serve(directory, max_tokens=2000)
    yield directory, url
    server.should_exit = True


def logged(caplog, prefix: str, seconds: float = 10) -> None:
    """Wait until the access log has a line starting with ``prefix``: a line is written once its answer is sent, so
    the client may hold the answer first."""
    deadline = time.time() + seconds
    while not any(r.getMessage().startswith(prefix) for r in caplog.records) and time.time() < deadline:
        time.sleep(0.02)


def own(model, tok, texts, normalize=True) -> torch.Tensor:
    """The checkpoint's own embeddings (the Python API, no server)."""
    with torch.no_grad():
        enc = tok(texts, return_tensors="pt", padding=True)
        pooled = model(**enc).pooler_output if normalize else \
            (lambda h, m: (h * m[..., None]).sum(1) / m.sum(1, keepdim=True))(
                model.model(**enc).last_hidden_state, enc["attention_mask"].float())
    return pooled


def test_the_openai_sdk_lists_the_model_embeds_300_inputs_and_gets_matryoshka_dimensions(embedder):
    import openai

    model, tok, url = embedder
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    name = url and client.models.list().data[0].id
    assert [m.id for m in client.models.list().data] == [name] and name.startswith("embedder")  # the directory's name
    default = client.embeddings.create(model=name, input="a good film")  # the SDK's default call (base64)
    assert default.model == name
    torch.testing.assert_close(torch.tensor(default.data[0].embedding), own(model, tok, ["a good film"])[0],
                               rtol=0, atol=1e-5)
    texts = [f"bob met alice {'in paris ' * (i % 7)}" for i in range(300)]  # more than --queue-size (256)
    many = client.embeddings.create(model=name, input=texts, encoding_format="float")
    assert [d.index for d in many.data] == list(range(300))
    torch.testing.assert_close(torch.tensor([d.embedding for d in many.data[:9]]), own(model, tok, texts[:9]),
                               rtol=0, atol=1e-5)
    short = client.embeddings.create(model=name, input=["a good film", "bad"], dimensions=8)
    raw = own(model, tok, ["a good film", "bad"], normalize=False)[:, :8]
    torch.testing.assert_close(torch.tensor([d.embedding for d in short.data]),
                               torch.nn.functional.normalize(raw, dim=-1), rtol=0, atol=1e-5)
    with pytest.raises(openai.BadRequestError, match=r"dimensions=12 .* matryoshka_dimensions allow \[8, 16\]"):
        client.embeddings.create(model=name, input="x", dimensions=12)
    with pytest.raises(openai.NotFoundError, match="the model 'text-embedding-3-small' does not exist"):
        client.embeddings.create(model="text-embedding-3-small", input="x")
    with pytest.raises(openai.UnprocessableEntityError, match="truncate: unknown field"):
        client.embeddings.create(model=name, input="x", extra_body={"truncate": True})
    too_many = httpx.post(url + "/v1/embeddings", json={"input": ["a"] * 2049}, headers=AUTH)
    assert too_many.status_code == 413 and "--max-request-inputs 2,048" in too_many.json()["error"]["message"]


def test_an_api_key_guards_every_route_but_health(embedder):
    _, _, url = embedder
    assert httpx.get(url + "/health").status_code == 200
    for method, path, body in [("GET", "/v1/models", None), ("GET", "/metrics", None), ("GET", "/info", None),
                               ("POST", "/embed", {"inputs": "a"}), ("POST", "/v1/embeddings", {"input": "a"})]:
        for headers, why in (({}, "missing API key"), ({"Authorization": "Bearer wrong"}, "invalid API key"),
                             ({"Authorization": KEY}, "malformed Authorization header")):
            answer = httpx.request(method, url + path, json=body, headers=headers)
            message = answer.json()["error"]["message"]
            assert answer.status_code == 401 and message.startswith(why) and "Authorization: Bearer" in message
            assert answer.headers["www-authenticate"] == "Bearer"
        assert httpx.request(method, url + path, json=body, headers=AUTH).status_code == 200, path


def test_no_key_sent_wrong_or_right_is_ever_repeated_or_logged(embedder, caplog):
    _, _, url = embedder
    with caplog.at_level(logging.DEBUG):
        wrong = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer not-the-sekrit"})
        right = httpx.get(url + "/v1/models", headers=AUTH)
        logged(caplog, "GET /v1/models 200")
    assert (wrong.status_code, right.status_code) == (401, 200)
    assert "not-the-sekrit" not in wrong.text and KEY not in wrong.text
    lines = "\n".join(r.getMessage() for r in caplog.records)
    assert "GET /v1/models 401" in lines and "not-the-sekrit" not in lines and KEY not in lines


def test_health_answers_at_once_while_a_10_mb_request_is_refused(embedder):
    """The 10 MB input is refused (413) by its character count before it is tokenized, and parsing it holds no
    event loop: /health answers meanwhile (tokenizing it on the event loop, as the server once did, held /health
    for 10 s on an idle 2-core machine and 63 s on a loaded one)."""
    _, _, url = embedder
    answers, body = {}, json.dumps({"input": "bob " * 2_500_000}).encode()  # encoded here, not while timing

    def big():
        answers["big"] = httpx.post(url + "/v1/embeddings", content=body, timeout=120,
                                    headers={**AUTH, "content-type": "application/json"})

    thread = threading.Thread(target=big)
    thread.start()
    waits = []
    while thread.is_alive():
        started = time.perf_counter()
        assert httpx.get(url + "/health", timeout=30).status_code == 200
        waits.append(time.perf_counter() - started)
    thread.join()
    assert answers["big"].status_code == 413 and "--max-input-chars 2,000,000" in answers["big"].text
    assert max(waits) < 2.0, waits  # generous for a shared CPU: on the event loop, tokenizing it took 10-60 s


def test_the_body_cap_refuses_before_reading_and_while_reading(tmp_path):
    from fastapi.testclient import TestClient

    from avey_b.apps.serve import build_app
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path)
    app = build_app(Encoder(str(tmp_path), LoadOptions(precision="fp32")), ServeOptions(max_body_bytes=1000))
    with TestClient(app) as client:
        declared = client.post("/embed", json={"inputs": "bob " * 300})
        assert declared.status_code == 413 and "--max-body-bytes 1,000" in declared.json()["error"]["message"]
        streamed = client.post("/embed", content=iter([b'{"inputs": "', b"bob " * 200, b"bob " * 200, b'"}']))
        assert streamed.status_code == 413 and "more than 1,000 bytes" in streamed.text
        assert client.post("/embed", json={"inputs": "bob"}).status_code == 200


def test_tei_routes_and_the_hugging_face_client(embedder):
    from huggingface_hub import InferenceClient

    model, tok, url = embedder
    text = "a good film"
    for base in (url, url + "/embed"):  # POST / and POST /embed: what InferenceClient(base_url=...) posts to
        vector = InferenceClient(base_url=base, api_key=KEY).feature_extraction(text)
        np.testing.assert_allclose(vector.reshape(-1), own(model, tok, [text])[0].numpy(), rtol=0, atol=1e-5)

    def post(path, body):
        return httpx.post(url + path, json=body, headers=AUTH)

    raw = post("/embed", {"inputs": [text], "normalize": False}).json()
    np.testing.assert_allclose(raw[0], own(model, tok, [text], normalize=False)[0].numpy(), rtol=0, atol=1e-5)
    prompted = post("/embed", {"inputs": "bob", "prompt_name": "query"}).json()[0]
    np.testing.assert_allclose(prompted, own(model, tok, ["query: bob"])[0].numpy(), rtol=0, atol=1e-5)
    assert "its prompts are ['query']" in post("/embed", {"inputs": "bob", "prompt_name": "doc"}).text
    assert len(post("/embed", {"inputs": "bob", "dimensions": 16}).json()[0]) == 16
    long = "alice " + "bob " * 2500 + "paris"  # 2,504 tokens > --max-tokens 2000
    assert post("/embed", {"inputs": long}).status_code == 413
    for direction, kept in (("Right", "alice " + "bob " * 1997), ("left", "bob " * 1997 + "paris")):
        cut = post("/embed", {"inputs": long, "truncate": True, "truncation_direction": direction})
        np.testing.assert_allclose(cut.json()[0], own(model, tok, [kept])[0].numpy(), rtol=0, atol=1e-5)
    tokens = post("/embed_all", {"inputs": ["a film", "bob"]}).json()
    assert [len(t) for t in tokens] == [4, 3] and len(tokens[0][0]) == model.config.hidden_size
    with torch.no_grad():
        hidden = model.model(**tok(["bob"], return_tensors="pt")).last_hidden_state[0]
    np.testing.assert_allclose(tokens[1], hidden.numpy(), rtol=0, atol=1e-5)
    pieces = post("/tokenize", {"inputs": "a film"}).json()[0]
    assert [(p["text"], p["special"], p["start"]) for p in pieces] == [("[CLS]", True, None), ("a", False, 0),
                                                                       ("film", False, 2), ("[SEP]", True, None)]
    ids = [p["id"] for p in pieces]
    assert post("/decode", {"ids": [ids, ids[1:2]]}).json() == ["a film", "a"]
    info = httpx.get(url + "/info", headers=AUTH).json()
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["max_input_length"] == 2000
    assert info["threads"] == torch.get_num_threads() and info["matryoshka_dimensions"] == [8, 16]
    assert "/tmp" not in str(info) and "/tmp" not in httpx.get(url + "/health").text  # never a server path
    classify = post("/v1/classify", {"input": "x"})
    assert classify.status_code == 400 and "needs a sequence-classification checkpoint" in classify.text


def test_late_chunking_over_http_gives_the_models_chunk_vectors(embedder):
    model, tok, url = embedder
    text = "bob met alice in paris and the film was good"
    enc = tok([text], return_tensors="pt", return_offsets_mapping=True)
    answer = httpx.post(url + "/v1/embeddings", json={"input": [text], "chunk_tokens": 4, "encoding_format": "float"},
                        headers=AUTH).json()
    with torch.no_grad():
        want = model.encode_chunks(enc.input_ids, enc.attention_mask, [[(1, 5), (5, 9), (9, 11)]])[0]
    assert [(d["index"], d["chunk"], d["span"]) for d in answer["data"]] == [(0, 0, [0, 16]), (0, 1, [17, 35]),
                                                                             (0, 2, [36, 44])]
    torch.testing.assert_close(torch.tensor([d["embedding"] for d in answer["data"]]), want, rtol=0, atol=1e-5)
    spans = httpx.post(url + "/v1/embeddings", json={"input": text, "chunk_spans": [[[0, 13], [14, 44]]],
                                                     "encoding_format": "float"}, headers=AUTH).json()["data"]
    assert [d["span"] for d in spans] == [[0, 13], [14, 44]]
    bad = httpx.post(url + "/v1/embeddings", json={"input": text, "chunk_spans": [[[3, 3]]]}, headers=AUTH)
    assert bad.status_code == 400


def test_both_rerank_shapes_rank_as_sentence_transformers_cross_encoder_does(reranker):
    from huggingface_hub import InferenceClient
    from sentence_transformers import CrossEncoder

    directory, url = reranker
    query = "who met alice in paris"
    documents = ["bob met alice in paris", "the film was awful", "a good film " * 40, "alice", "paris in the spring"]
    expected = CrossEncoder(str(directory), device="cpu").predict([(query, d) for d in documents])
    order = list(np.argsort(-expected))
    cohere = httpx.post(url + "/v1/rerank", json={"model": directory.name, "query": query, "documents": documents,
                                                  "top_n": 3}).json()
    assert cohere["model"] == directory.name and [r["index"] for r in cohere["results"]] == order[:3]
    np.testing.assert_allclose([r["relevance_score"] for r in cohere["results"]], expected[order[:3]], atol=1e-5)
    assert [r["document"]["text"] for r in cohere["results"]] == [documents[i] for i in order[:3]]
    tei = httpx.post(url + "/rerank", json={"query": query, "texts": documents, "return_text": True}).json()
    assert [r["index"] for r in tei] == order and [r["text"] for r in tei] == [documents[i] for i in order]
    np.testing.assert_allclose([r["score"] for r in tei], expected[order], atol=1e-5)
    raw = httpx.post(url + "/rerank", json={"query": query, "texts": documents, "raw_scores": True}).json()
    np.testing.assert_allclose([1 / (1 + np.exp(-r["score"])) for r in raw], expected[order], atol=1e-5)
    pair = httpx.post(url + "/predict", json={"inputs": [query, documents[0]]}).json()  # TEI: [a, b] is one pair
    np.testing.assert_allclose(pair[0]["score"], expected[0], atol=1e-5)
    labels = InferenceClient(base_url=url).text_classification("a good film")
    assert [x.label for x in labels] == ["LABEL_0"] and 0 < labels[0].score < 1
    assert httpx.post(url + "/v1/rerank", json={"query": query, "documents": documents,
                                                "max_chunks_per_doc": 2}).status_code == 422
    ids = httpx.post(url + "/tokenize", json={"inputs": "a good film"}).json()[0]
    by_text, by_ids = (httpx.post(url + "/v1/classify", json={"input": given}).json()["results"][0]["scores"]
                       for given in ("a good film", [p["id"] for p in ids]))  # token ids wherever texts go
    assert by_text == pytest.approx(by_ids, abs=1e-6) and labels[0].score == pytest.approx(by_text["LABEL_0"])


def test_a_multi_vector_model_serves_its_token_vectors_and_maxsim_as_multi_vector_encoder_scores(multivector):
    """The library's scores and vectors, which sentence-transformers' ``MultiVectorEncoder`` gives too
    (tests/test_multivector.py)."""
    from huggingface_hub import InferenceClient

    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    directory, url = multivector
    query = "who met alice in paris"
    documents = ["bob met alice in paris", "the film was awful", "a good film " * 40, "alice", "paris in the spring"]
    own = Encoder(directory, LoadOptions(device="cpu", precision="fp32")).load()
    expected = own.maxsim(query, documents).numpy()
    order = [int(i) for i in np.argsort(-expected)]
    ranked = httpx.post(url + "/maxsim", json={"query": query, "texts": documents, "return_text": True}).json()
    assert [r["index"] for r in ranked] == order and [r["text"] for r in ranked] == [documents[i] for i in order]
    np.testing.assert_allclose([r["score"] for r in ranked], expected[order], rtol=0, atol=1e-4)
    assert "text" not in httpx.post(url + "/maxsim", json={"query": query, "texts": documents[:1]}).json()[0]
    tokens = InferenceClient(base_url=url + "/embed_all").feature_extraction(documents[0])  # TEI's route, its client
    np.testing.assert_allclose(tokens[0], own.multivectors(documents[0])[0].numpy(), rtol=0, atol=1e-5)
    info = httpx.get(url + "/info").json()
    assert info["outputs"] == ["dense", "multivector"] and "multivector" in info["serves"]
    assert httpx.post(url + "/maxsim", json={"query": query, "texts": []}).status_code == 400
    vectors = httpx.post(url + "/v1/embeddings", json={"input": [query]}).json()["data"]  # OpenAI: still dense
    assert len(vectors[0]["embedding"]) == presets.tiny().hidden_size


def test_maxsim_on_a_model_without_the_head_says_what_is_missing_and_how_to_train_it(embedder):
    _, _, url = embedder
    answer = httpx.post(url + "/maxsim", json={"query": "a", "texts": ["b"]}, headers=AUTH)
    assert answer.status_code == 400
    assert "multi-vector head" in answer.text and "avey-b finetune --task multi-vector" in answer.text
    assert httpx.get(url + "/info", headers=AUTH).json()["outputs"] == ["dense"]


def test_the_config_declares_matryoshka_sizes_within_the_width():
    assert presets.tiny(matryoshka_dimensions=[8, 16]).matryoshka_dimensions == [8, 16]
    for bad in ([0], [33], [8.0]):
        with pytest.raises(ValueError, match="matryoshka_dimensions must list integers from 1 to hidden_size"):
            presets.tiny(matryoshka_dimensions=bad)


def test_metrics_and_the_access_log_count_every_request(embedder, caplog):
    from prometheus_client.parser import text_string_to_metric_families

    _, tok, url = embedder
    with caplog.at_level(logging.INFO, logger="avey_b.serve"):
        assert httpx.post(url + "/v1/embeddings", json={"input": ["a film", "bob"]}, headers=AUTH).status_code == 200
        assert httpx.post(url + "/embed", json={"inputs": ""}, headers=AUTH).status_code == 400
        assert httpx.get(url + "/nowhere", headers=AUTH).status_code == 404
        logged(caplog, "GET /nowhere")
    lines = [r.getMessage() for r in caplog.records if r.name == "avey_b.serve"]
    tokens = sum(len(tok(t)["input_ids"]) for t in ("a film", "bob"))
    assert any(line.startswith(f"POST /v1/embeddings 200 inputs=2 tokens={tokens} ") and line.endswith(" ms")
               for line in lines), lines
    assert any(line.startswith("POST /embed 400 inputs=- tokens=-") for line in lines), lines
    assert any(line.startswith("GET /nowhere 404") for line in lines), lines
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(url + "/metrics", headers=AUTH).text)}
    requests = {(s.labels["method"], s.labels["route"], s.labels["status"]): s.value
                for s in families["avey_b_requests"].samples if s.name == "avey_b_requests_total"}
    assert requests[("POST", "/v1/embeddings", "200")] >= 1 and requests[("POST", "/embed", "400")] >= 1
    assert requests[("GET", "unmatched", "404")] >= 1
    assert any(s.name.endswith("_count") and s.labels["route"] == "/v1/embeddings" and s.value >= 1
               for s in families["avey_b_request_duration_seconds"].samples)
    assert [s.value for s in families["avey_b_queue_inputs"].samples] == [0]
    assert any(s.labels["route"] == "/v1/embeddings" and s.value >= tokens for s in families["avey_b_tokens"].samples
               if s.name == "avey_b_tokens_total")


def test_the_queue_bounds_work_in_flight_and_takes_any_request_when_empty():
    from avey_b.apps.serve import Batcher, Job

    gate = threading.Event()

    def run(kind, jobs):
        gate.wait(10)
        return [len(j.ids) for j in jobs]

    batcher = Batcher(run, max_batch_tokens=100, queue_size=4, wait_s=0.0)
    first = [Job("embed", [1, 2]) for _ in range(10)]  # more than queue_size: an empty queue takes it
    batcher.submit(first)
    time.sleep(0.2)  # the worker took them (and waits on the gate)
    waiting = [Job("embed", [1]) for _ in range(3)]
    batcher.submit(waiting)
    with pytest.raises(queue.Full):  # 3 wait: 3 + 2 > 4
        batcher.submit([Job("embed", [1]) for _ in range(2)])
    batcher.submit([Job("embed", [1])])
    gate.set()
    assert [j.future.result(10) for j in first + waiting] == [2] * 10 + [1] * 3
    batcher.close()
