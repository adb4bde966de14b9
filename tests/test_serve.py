"""``avey-b serve`` end to end: a real server process on a free local port, a real HTTP client, concurrent short
and 20K-token inputs equal to the model's own embeddings, bad requests answered with their codes while the server
keeps serving, graceful shutdown on SIGTERM; the ``openai`` SDK's own calls (its default base64 encoding, floats,
token ids, batches) giving the model's embeddings; one input field name across endpoints; and the batcher's
grouping."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.model import presets
from avey_b.testing import seeded

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(directory, *extra):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "avey_b.cli", "serve", str(directory), "--port", str(port),
                             "--precision", "fp32", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stdout.read()
    proc.kill()
    raise AssertionError("the server did not come up")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    # graceful: uvicorn finishes the requests, the app shuts down, then uvicorn exits with the signal it got
    assert "avey-b serve: shut down" in out and proc.returncode in (0, -signal.SIGTERM), out[-2000:]


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory):
    """A server process for a tiny embedding checkpoint: (model, tokenizer, url); shut down (SIGTERM) after the
    module's tests."""
    directory = tmp_path_factory.mktemp("embedding")
    tok = toy.tokenizer(str(directory))
    model = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok)))
    model.save_pretrained(directory)
    proc, url = start(directory, "--max-tokens", "25000", "--max-batch-tokens", "4096", "--served-model-name", "avey-b",
                      "--openai-token-ids", "model")  # the SDK test sends this model's ids
    yield model, tok, url
    stop(proc)


def own_embedding(model, ids: list[int]) -> torch.Tensor:
    """The checkpoint's own sentence embedding of one row of token ids (the Python API, no server)."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).pooler_output[0]


@pytest.mark.slow
def test_embeddings_over_http_equal_the_models_own_and_bad_requests_get_their_codes(embedding_server):
    model, tok, url = embedding_server
    texts = ["a good film", "the plot was awful and the cast was weak", "bob " * 20_000]  # 20,002 tokens
    expected = []
    with torch.no_grad():
        for t in texts:
            expected.append(model(**tok([t], return_tensors="pt")).pooler_output[0])
    health = httpx.get(url + "/health").json()
    assert health["serves"] == ["embed"] and health["max_tokens"] == 25_000

    def embed(payload):
        return httpx.post(url + "/v1/embeddings", json=payload, timeout=120)

    payloads = [{"input": texts[i % 3]} for i in range(12)] + [{"input": texts}]
    with ThreadPoolExecutor(8) as pool:  # concurrent: the batcher mixes them
        answers = list(pool.map(embed, payloads))
    for i, answer in enumerate(answers[:12]):
        assert answer.status_code == 200, answer.text
        got = torch.tensor(answer.json()["data"][0]["embedding"])
        torch.testing.assert_close(got, expected[i % 3], rtol=0, atol=1e-5)
    body = answers[12].json()
    assert [d["index"] for d in body["data"]] == [0, 1, 2] and body["object"] == "list"
    assert body["usage"]["prompt_tokens"] == sum(len(tok(t)["input_ids"]) for t in texts)
    for d, want in zip(body["data"], expected, strict=True):
        torch.testing.assert_close(torch.tensor(d["embedding"]), want, rtol=0, atol=1e-5)

    too_long = embed({"input": "bob " * 30_000})
    assert too_long.status_code == 413 and "not truncated" in too_long.json()["detail"]
    assert embed({"input": []}).status_code == 400
    assert embed({"input": ""}).status_code == 400
    assert embed({"input": ["a", 3]}).status_code == 422  # texts and token ids mixed
    assert embed({"input": [3.5, 4]}).status_code == 422  # token ids are integers
    assert embed({"text": "no input field"}).status_code == 422
    broken = httpx.post(url + "/v1/embeddings", content=b"{not json", headers={"content-type": "application/json"})
    assert broken.status_code == 422
    assert embed({"input": "still serving"}).status_code == 200


@pytest.mark.slow
def test_the_openai_sdk_gets_the_models_embeddings_by_default_as_floats_from_token_ids_and_in_batches(
        embedding_server):
    """The ``openai`` package's own calls: its default request asks for
    base64 (which it decodes as little-endian float32), and every form of ``input`` gives the checkpoint's own
    embeddings; ``usage`` counts the tokens encoded."""
    import openai

    model, tok, url = embedding_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    texts = ["a good film", "the plot was awful and the cast was weak", "bob met alice in paris"]
    ids = [tok(t)["input_ids"] for t in texts]
    expected = [own_embedding(model, row) for row in ids]

    def check(response, want):
        assert [d.index for d in response.data] == list(range(len(want)))
        for d, w in zip(response.data, want, strict=True):
            torch.testing.assert_close(torch.tensor(d.embedding), w, rtol=0, atol=1e-5)

    raw = client.embeddings.with_raw_response.create(model="avey-b", input=texts[0])  # the SDK's default call
    assert json.loads(raw.http_request.content)["encoding_format"] == "base64"
    default = raw.parse()
    check(default, expected[:1])
    assert default.usage.prompt_tokens == default.usage.total_tokens == len(ids[0])
    check(client.embeddings.create(model="avey-b", input=texts[0], encoding_format="float"), expected[:1])
    check(client.embeddings.create(model="avey-b", input=ids[1]), expected[1:2])  # token ids: one input
    batch = client.embeddings.create(model="avey-b", input=texts)
    check(batch, expected)
    assert batch.usage.prompt_tokens == sum(map(len, ids))
    check(client.embeddings.create(model="avey-b", input=ids, encoding_format="float"), expected)
    unspecial = ids[2][1:-1]  # token ids are embedded as given: no [CLS] / [SEP] added
    check(client.embeddings.create(model="avey-b", input=[unspecial]), [own_embedding(model, unspecial)])

    vocab = model.config.vocab_size
    with pytest.raises(openai.BadRequestError, match=f"token id {vocab + 7} is outside this model's vocabulary "
                                                     f"of {vocab} ids"):
        client.embeddings.create(model="avey-b", input=[[5, 6], [5, vocab + 7]])
    with pytest.raises(openai.BadRequestError, match="token id -1 is outside"):
        client.embeddings.create(model="avey-b", input=[5, -1])
    with pytest.raises(openai.BadRequestError, match="input 1 holds no token ids"):
        client.embeddings.create(model="avey-b", input=[[5], []])
    with pytest.raises(openai.BadRequestError, match=r"encoding_format must be one of \['base64', 'float'\]"):
        client.embeddings.create(model="avey-b", input="x", encoding_format="binary")
    with pytest.raises(openai.BadRequestError, match=f"embeddings have {model.config.hidden_size} dimensions"):
        client.embeddings.create(model="avey-b", input="x", dimensions=8)
    with pytest.raises(openai.UnprocessableEntityError, match="in `input` or in its alias `inputs`, not both"):
        client.embeddings.create(model="avey-b", input="x", extra_body={"inputs": "y"})


@pytest.mark.slow
def test_a_masked_lm_checkpoint_also_serves_fill_mask(tmp_path):
    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path)
    proc, url = start(tmp_path)
    try:
        assert httpx.get(url + "/health").json()["serves"] == ["embed", "fill", "sparse"]
        answer = httpx.post(url + "/v1/fill-mask", json={"inputs": ["a [MASK] film", "bob [MASK] alice"], "top_k": 3})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert len(results) == 2 and all(len(r) == 1 and len(r[0]) == 3 for r in results)
        assert httpx.post(url + "/v1/fill-mask", json={"inputs": "no mask here"}).status_code == 400
        refused = httpx.post(url + "/v1/classify", json={"inputs": "x"})  # not a classifier: says so
        assert refused.status_code == 400 and "needs a sequence-classification checkpoint" in refused.text
    finally:
        stop(proc)


def test_the_batcher_groups_by_kind_sorts_by_length_and_bounds_padded_tokens():
    from avey_b.apps.serve import Batcher, Job

    batcher = Batcher(lambda kind, jobs: [len(j.ids) for j in jobs], max_batch_tokens=100, queue_size=8, wait_s=0.0)
    jobs = [Job("embed", [0] * n) for n in (30, 5, 60, 10, 200)] + [Job("fill", [0] * 7)]
    batches = batcher.batches(jobs)
    assert [[len(j.ids) for j in b] for b in batches] == [[5, 10, 30], [60], [200], [7]]
    assert all(len(b) * max(len(j.ids) for j in b) <= 100 or len(b) == 1 for b in batches)
    batcher.submit([Job("embed", [1, 2, 3])])
    batcher.close()


def test_a_classifier_checkpoint_serves_named_labels(tmp_path):
    from fastapi.testclient import TestClient

    from avey_b import AveyBForSequenceClassification
    from avey_b.apps.serve import build_app
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    tok = toy.tokenizer(str(tmp_path))
    names = {0: "negative", 1: "positive"}
    seeded(AveyBForSequenceClassification,
           presets.tiny(vocab_size=len(tok), num_labels=2, id2label=names,
                        label2id={v: k for k, v in names.items()})).save_pretrained(tmp_path)
    with TestClient(build_app(Encoder(str(tmp_path), LoadOptions(precision="fp32")),
                              ServeOptions(max_tokens=1000))) as client:
        assert client.get("/health").json()["serves"] == ["embed", "classify"]
        results = client.post("/v1/classify", json={"inputs": ["a good film", "bad"]}).json()["results"]
        assert [set(r["scores"]) for r in results] == [{"negative", "positive"}] * 2
        assert all(abs(sum(r["scores"].values()) - 1) < 1e-5 and r["label"] == max(r["scores"], key=r["scores"].get)
                   for r in results)
        refused = client.post("/v1/fill-mask", json={"inputs": "a [MASK]"})  # not a masked-LM: says so
        assert refused.status_code == 400 and "needs a masked-LM checkpoint" in refused.text


def test_every_endpoint_takes_input_and_accepts_inputs_as_an_alias_but_not_both(tmp_path):
    from fastapi.testclient import TestClient

    from avey_b import AveyBForSequenceClassification
    from avey_b.apps.serve import build_app
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    tok = toy.tokenizer(str(tmp_path / "mlm"))
    toy.tokenizer(str(tmp_path / "classifier"))
    seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path / "mlm")
    seeded(AveyBForSequenceClassification, presets.tiny(vocab_size=len(tok), num_labels=2)).save_pretrained(
        tmp_path / "classifier")
    for name, endpoint, text in [("mlm", "/v1/fill-mask", "a [MASK] film"), ("mlm", "/v1/embeddings", "a film"),
                                 ("classifier", "/v1/classify", "a good film")]:
        with TestClient(build_app(Encoder(str(tmp_path / name), LoadOptions(precision="fp32")),
                                  ServeOptions(max_tokens=1000))) as client:
            answers = [client.post(endpoint, json={field: [text, text]}) for field in ("input", "inputs")]
            assert [a.status_code for a in answers] == [200, 200], (endpoint, [a.text for a in answers])
            assert answers[0].json() == answers[1].json()
            both = client.post(endpoint, json={"input": text, "inputs": text})
            assert both.status_code == 422 and "not both" in both.text, (endpoint, both.text)
            missing = client.post(endpoint, json={"text": text})
            assert missing.status_code == 422 and "input" in missing.text, (endpoint, missing.text)


@pytest.mark.slow
def test_serve_onnx_answers_with_the_exported_models_vectors(tmp_path):
    """``--onnx``: the fp32 export's embeddings over HTTP equal onnxruntime's own (and the eager model's); the int8
    file's equal its own for a request alone, and in a batch to the noise of dynamic quantization, whose activation
    scale spans the whole batch: the same direction (cosine >= 0.995), elements within a few hundredths, however the
    CPU's int8 kernels round."""
    import numpy as np
    import onnxruntime as ort

    from avey_b import cli

    directory = tmp_path / "served"
    tok = toy.tokenizer(str(tmp_path / "ckpt"))
    model = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok)))
    model.save_pretrained(tmp_path / "ckpt")
    assert cli.main(["export", str(tmp_path / "ckpt"), str(directory), "--head", "embedding", "--quantize",
                     "int8"]) == 0
    texts = ["a good film", "the plot was awful and the cast was weak", "bob met alice in paris " * 60]
    for file, atol, cosine in ((None, 1e-5, 1 - 1e-6), (directory / "onnx" / "model.int8.onnx", 5e-2, 0.995)):
        session = ort.InferenceSession(str(file or directory / "onnx" / "model.onnx"))
        own = [session.run(["sentence_embedding"], {k: v.numpy() for k, v in tok([t], return_tensors="pt").items()
                                                    if k in ("input_ids", "attention_mask")})[0][0] for t in texts]
        proc, url = start(directory, "--onnx", *([str(file)] if file else []), "--threads", "1")
        try:
            health = httpx.get(url + "/health").json()
            assert health["serves"] == ["embed"] and health["onnx"].endswith(file.name if file else "model.onnx")
            alone = [httpx.post(url + "/v1/embeddings", json={"input": t}, timeout=60) for t in texts]  # batch 1
            with ThreadPoolExecutor(4) as pool:  # concurrent: batched together, padded
                answers = list(pool.map(lambda t, url=url: httpx.post(url + "/v1/embeddings", json={"input": t},
                                                                      timeout=60),
                                        texts + [texts]))
        finally:
            stop(proc)
        for i, want in enumerate(own):  # one at a time: the file's own vectors (int8 differs from fp32 by ~5e-3)
            np.testing.assert_allclose(np.array(alone[i].json()["data"][0]["embedding"], dtype=np.float32), want,
                                       rtol=0, atol=1e-5)
            for got in (answers[i].json()["data"][0]["embedding"], answers[3].json()["data"][i]["embedding"]):
                got = np.array(got, dtype=np.float32)
                np.testing.assert_allclose(got, want, rtol=0, atol=atol)
                assert float(got @ want / np.linalg.norm(got) / np.linalg.norm(want)) >= cosine
        if file is None:  # fp32: also the eager model's
            with torch.no_grad():
                eager = model(**tok([texts[1]], return_tensors="pt")).pooler_output[0].numpy()
            np.testing.assert_allclose(own[1], eager, rtol=0, atol=1e-5)


def test_serve_onnx_names_a_missing_model_file(tmp_path):
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no ONNX model at .*model.onnx .*avey-b export"):
        Encoder(str(tmp_path), LoadOptions(onnx=""))


@pytest.mark.slow
def test_sigterm_answers_the_requests_in_flight_and_new_ones_get_503_with_connection_close(tmp_path):
    """A 3 s batch wait holds a request in flight (the queue gauge says it waits); SIGTERM then: the server drains —
    every new request, on a new connection or on one kept alive, is answered 503 with Connection: close (never a
    reset connection) — answers the request in flight, and exits; then connections are refused."""
    import threading

    from prometheus_client.parser import text_string_to_metric_families

    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path)
    proc, url = start(tmp_path, "--batch-wait-ms", "3000", "--drain-s", "1")
    kept = httpx.Client(base_url=url)
    answers = {}
    thread = threading.Thread(target=lambda: answers.update(
        late=httpx.post(url + "/v1/embeddings", json={"input": "a good film"}, timeout=60)))
    thread.start()

    def waiting() -> float:
        families = text_string_to_metric_families(kept.get("/metrics").text)
        return next(f for f in families if f.name == "avey_b_queue_inputs").samples[0].value

    deadline = time.time() + 30
    while waiting() != 1:
        assert time.time() < deadline, "the request never reached the queue"
    proc.send_signal(signal.SIGTERM)
    during, refused = [], False
    while thread.is_alive() and not refused:
        try:  # any other transport error (a reset connection) fails the test
            during.append(httpx.get(url + "/health", timeout=5))
            during.append(kept.post("/embed", json={"inputs": "b"}, timeout=5))
        except httpx.ConnectError:  # the drain ended: the answer in flight was sent before the port closed
            refused = True
        time.sleep(0.2)
    thread.join()
    out, _ = proc.communicate(timeout=60)
    assert during, out[-2000:]
    for answer in during:
        assert answer.status_code == 503 and answer.headers["connection"] == "close", (answer, out[-2000:])
        assert "shutting down" in answer.json()["error"]["message"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=1)
    assert answers["late"].status_code == 200 and len(answers["late"].json()["data"]) == 1
    assert "avey-b serve: shut down" in out
    assert "avey_b.serve: draining after SIGTERM: new requests get 503; waiting for the 1 in flight" in out
    assert "avey_b.serve: drained after " in out  # the drain says when it starts and ends, not only the shutdown
    assert "avey_b.serve: POST /v1/embeddings 200 inputs=1 tokens=5 " in out  # the access log, on stderr
