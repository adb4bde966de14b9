"""``avey-b serve`` end to end: a real server process on a free local port, a real HTTP client, concurrent short
and 20K-token inputs equal to the model's own embeddings, bad requests answered with their codes while the server
keeps serving, graceful shutdown on SIGTERM; and the batcher's grouping."""

import os
import queue
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import seeded

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding, presets
from avey_b import testing as toy

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


@pytest.mark.slow
def test_embeddings_over_http_equal_the_models_own_and_bad_requests_get_their_codes(tmp_path):
    tok = toy.tokenizer(str(tmp_path))
    model = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok)))
    model.save_pretrained(tmp_path)
    texts = ["a good film", "the plot was awful and the cast was weak", "bob " * 20_000]  # 20,002 tokens
    expected = []
    with torch.no_grad():
        for t in texts:
            expected.append(model(**tok([t], return_tensors="pt")).pooler_output[0])
    proc, url = start(tmp_path, "--max-tokens", "25000", "--max-batch-tokens", "4096")
    try:
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
        assert embed({"input": [3, 4]}).status_code == 422
        assert embed({"text": "no input field"}).status_code == 422
        broken = httpx.post(url + "/v1/embeddings", content=b"{not json", headers={"content-type": "application/json"})
        assert broken.status_code == 422
        assert embed({"input": "still serving"}).status_code == 200
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_masked_lm_checkpoint_also_serves_fill_mask(tmp_path):
    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path)
    proc, url = start(tmp_path)
    try:
        assert httpx.get(url + "/health").json()["serves"] == ["embed", "fill"]
        answer = httpx.post(url + "/v1/fill-mask", json={"inputs": ["a [MASK] film", "bob [MASK] alice"], "top_k": 3})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert len(results) == 2 and all(len(r) == 1 and len(r[0]) == 3 for r in results)
        assert httpx.post(url + "/v1/fill-mask", json={"inputs": "no mask here"}).status_code == 400
        assert httpx.post(url + "/v1/classify", json={"inputs": "x"}).status_code == 404  # not a classifier
    finally:
        stop(proc)


def test_the_batcher_groups_by_kind_sorts_by_length_and_bounds_padded_tokens():
    from avey_b.serve import Batcher, Job

    batcher = Batcher(lambda kind, ids: [len(i) for i in ids], max_batch_tokens=100, queue_size=8, wait_s=0.0)
    jobs = [Job("embed", [0] * n) for n in (30, 5, 60, 10, 200)] + [Job("fill", [0] * 7)]
    batches = batcher.batches(jobs)
    assert [[len(j.ids) for j in b] for b in batches] == [[5, 10, 30], [60], [200], [7]]
    assert all(len(b) * max(len(j.ids) for j in b) <= 100 or len(b) == 1 for b in batches)
    with pytest.raises(queue.Full):  # a full queue refuses at once (the server answers 503)
        batcher.submit([Job("embed", [1]) for _ in range(9)])
    batcher.submit([Job("embed", [1, 2, 3])])
    batcher.close()


def test_a_classifier_checkpoint_serves_named_labels(tmp_path):
    from fastapi.testclient import TestClient

    from avey_b import AveyBForSequenceClassification
    from avey_b.serve import Service, build_app

    tok = toy.tokenizer(str(tmp_path))
    names = {0: "negative", 1: "positive"}
    seeded(AveyBForSequenceClassification, presets.tiny(vocab_size=len(tok), num_labels=2, id2label=names,
                                                        label2id={v: k for k, v in names.items()})).save_pretrained(tmp_path)
    with TestClient(build_app(Service(str(tmp_path), precision="fp32"), max_tokens=1000)) as client:
        assert client.get("/health").json()["serves"] == ["embed", "classify"]
        results = client.post("/v1/classify", json={"inputs": ["a good film", "bad"]}).json()["results"]
        assert [set(r["scores"]) for r in results] == [{"negative", "positive"}] * 2
        assert all(abs(sum(r["scores"].values()) - 1) < 1e-5 and r["label"] == max(r["scores"], key=r["scores"].get)
                   for r in results)
        assert client.post("/v1/fill-mask", json={"inputs": "a [MASK]"}).status_code == 404  # not a masked-LM
