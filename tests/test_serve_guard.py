"""``avey-b serve``'s doors (issue 52): no start on a network address without a key unless the risk is named, a key
compared in constant time and never logged, slow clients closed (a body or headers sent a byte at a time), new
requests answered 503 with ``Connection: close`` while SIGTERM drains the server (tests/test_serve.py, a server
process), and checkpoints that never
unpickle (a malicious pickle that would write a file is refused and the file never appears)."""

import logging
import pickle
import socket
import time

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding, AveyBForSequenceClassification
from avey_b import testing as toy
from avey_b.model import presets
from avey_b.testing import seeded
from tests.test_serve_api import serve

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

KEY = "the-key-0123456789"


@pytest.fixture(scope="module")
def guarded(model_dir):
    """A server (uvicorn, as ``avey-b serve`` runs it: :func:`guard.server`) with a key and a 1 s body timeout:
    (url, port, server)."""
    url, server = serve(model_dir, api_key=KEY, body_timeout_s=1.0, max_connections=64, keep_alive_s=1.0)
    yield url, server.config.port, server
    server.should_exit = True


def trickle(port: int, head: bytes, body: bytes, every: float = 0.2) -> tuple[bytes, float]:
    """Send ``head`` then ``body`` a byte every ``every`` seconds; what the server answered and after how long
    (it closed the connection or answered)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(head)
            for byte in body:
                s.sendall(bytes([byte]))
                time.sleep(every)
        except OSError:  # closed by the server mid-body
            pass
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except OSError:
            pass
    return answer, time.monotonic() - started


def test_a_network_address_without_a_key_is_refused_unless_the_risk_is_named(model_dir, monkeypatch):
    from avey_b.apps.serve.guard import check_exposure, is_loopback
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.cli import main
    from avey_b.inference.encoder import Encoder

    assert all(map(is_loopback, ["127.0.0.1", "::1", "localhost", "127.0.0.2", "[::1]"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "", "192.168.1.4", "example.org"]))
    with pytest.raises(SystemExit, match="no API key on --host '0.0.0.0'.*--allow-no-key-on-network"):
        check_exposure(ServeOptions(host="0.0.0.0"), None)
    assert check_exposure(ServeOptions(host="0.0.0.0"), KEY) is None
    assert check_exposure(ServeOptions(), None) is None
    said = check_exposure(ServeOptions(host="0.0.0.0", allow_no_key_on_network=True), None)  # on the start line
    assert said.startswith("warning: open to the network: no API key on --host '0.0.0.0'") and "anyone" in said
    monkeypatch.delenv("AVEY_B_API_KEY", raising=False)
    monkeypatch.setattr(Encoder, "load", lambda self: pytest.fail("the model loaded before the refusal"))
    with pytest.raises(SystemExit, match="refusing to serve with no API key on --host '0.0.0.0'"):
        main(["serve", str(model_dir), "--host", "0.0.0.0"])


def test_the_key_is_never_logged_nor_answered(guarded, caplog):
    url = guarded[0]
    with caplog.at_level(logging.DEBUG):
        wrong = httpx.post(url + "/embed", json={"inputs": "a"}, headers={"Authorization": "Bearer not-" + KEY})
        right = httpx.post(url + "/embed", json={"inputs": "a"}, headers={"Authorization": f"Bearer {KEY}"})
        metrics = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    assert wrong.status_code == 401 and "invalid API key" in wrong.json()["error"]["message"]
    assert right.status_code == 200 and metrics.status_code == 200
    for text in (wrong.text, right.text, metrics.text, caplog.text):
        assert KEY not in text


def test_a_body_sent_a_byte_at_a_time_is_answered_408_and_closed(guarded):
    url, port, _ = guarded
    body = b'{"inputs": "a good film, a very good film"}'
    head = (f"POST /embed HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    answer, seconds = trickle(port, head, body)
    assert answer.startswith(b"HTTP/1.1 408") and b"connection: close" in answer.lower(), answer
    assert b"--body-timeout-s" in answer and seconds < 5, (answer, seconds)
    headers, seconds = trickle(port, b"", head, every=0.1)  # the headers a byte at a time: closed, unanswered
    assert headers == b"" and seconds < 5
    assert httpx.get(url + "/health").status_code == 200


class WritesAFile:
    """A pickle that, when unpickled, writes the file it names."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_checkpoint_is_never_unpickled(tmp_path):
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions
    from avey_b.training.checkpoint import load_train_state

    marker = tmp_path / "pwned"
    directory = tmp_path / "model"
    toy.tokenizer(str(directory))
    seeded(AveyBForMaskedLM, presets.tiny()).save_pretrained(directory)
    (directory / "model.safetensors").unlink()
    with open(directory / "pytorch_model.bin", "wb") as f:
        pickle.dump({"model.x": WritesAFile(marker)}, f)
    with pytest.raises(Exception, match="(?i)weights.only|unpickl"):
        AveyBForMaskedLM.from_pretrained(directory)
    with pytest.raises(ValueError, match="weights_only=False"):
        AveyBForMaskedLM.from_pretrained(directory, weights_only=False)
    with pytest.raises(Exception, match="(?i)weights.only|unpickl"):
        Encoder(str(directory), LoadOptions(precision="fp32")).load()
    state = tmp_path / "state"
    state.mkdir()
    torch.save({"step": 1, "rng": WritesAFile(marker)}, state / "train_state.pt")
    with pytest.raises(Exception, match="(?i)weights.only|unpickl"):
        load_train_state(state, trust_unverified=True)
    assert not marker.exists()


@pytest.mark.parametrize("cls, auto, want", [
    (AveyBForMaskedLM, AutoModelForMaskedLM, "AveyBForMaskedLM"),
    (AveyBForSentenceEmbedding, AutoModel, "AveyBModel"),  # AutoModel gives the backbone of any head's directory
    (AveyBForSequenceClassification, AutoModelForSequenceClassification, "AveyBForSequenceClassification")])
def test_a_directory_the_library_saved_needs_no_trust_remote_code(tmp_path, cls, auto, want):
    """Where the package is imported, the Auto classes load what it saved without ``trust_remote_code``: this
    package's class for the Auto class, with the saved weights."""
    tok = toy.tokenizer(str(tmp_path))
    saved = seeded(cls, presets.tiny(vocab_size=len(tok)))
    saved.save_pretrained(tmp_path)
    loaded = auto.from_pretrained(tmp_path)
    assert type(loaded).__name__ == want and type(loaded).__module__ == "avey_b.model." + (
        "modeling" if want == "AveyBModel" else "heads"), type(loaded)
    loaded_backbone = loaded if want == "AveyBModel" else loaded.model
    assert torch.equal(loaded_backbone.embed_tokens.weight, saved.model.embed_tokens.weight)  # the saved weights
    assert AutoTokenizer.from_pretrained(tmp_path)("a")["input_ids"]
