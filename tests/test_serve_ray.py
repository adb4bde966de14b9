"""``avey-b serve --ray`` on a local Ray cluster: two replicas of the same app behind Ray Serve's proxy, sharing
sessions through a real Redis server. A session's requests with its ``X-Session-Id`` stay on one replica; without
the header they land on either, and every answer equals a fresh encode; a replica killed mid-conversation leaves its
sessions to the other, with equal vectors and at most the request in flight retried."""

import time

import httpx
import numpy as np
import pytest

from avey_b import testing as toy
from avey_b.apps.serve.options import ServeOptions
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from tests.test_sessions import TEXT, free_port, fresh
from tests.test_sessions import redis_url as redis_url  # a fixture of this module too

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    toy.served_model(str(directory), "masked-lm")
    return directory


@pytest.fixture
def fleet(model, redis_url):
    from avey_b.apps.serve import build_app, fleet

    url, _ = redis_url
    port = free_port()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        options = ServeOptions(state_store=url, replicas=2, replica_cpus=1)
        serve.run(fleet.application(str(model), options, LoadOptions(precision="fp32"), build_app), name="avey-b",
                  route_prefix="/")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            yield client
    finally:
        serve.shutdown()
        ray.shutdown()


def post(client, path: str, body: dict, headers: dict, retries: int = 1):
    """A POST retried ``retries`` times on a 5xx or a dropped connection (a replica that died under it)."""
    for attempt in range(retries + 1):
        try:
            answer = client.post(path, json=body, headers=headers)
            if answer.status_code < 500:
                return answer
        except httpx.TransportError:
            if attempt == retries:
                raise
        time.sleep(1)
    return answer


def test_sessions_across_two_replicas_and_one_killed(fleet, model):
    from avey_b.apps.serve.fleet import REPLICA_HEADER

    encoder = Encoder(str(model), LoadOptions(precision="fp32")).load()
    sticky = {"X-Session-Id": "talk"}
    made = fleet.post("/v1/sessions", json={"id": "talk", "text": TEXT}, headers=sticky)
    assert made.status_code == 200, made.text
    text, replicas = TEXT, [made.headers[REPLICA_HEADER]]
    for turn in range(6):
        answer = post(fleet, "/v1/sessions/talk/append", {"text": f" turn {turn}"},
                      {**sticky, "Idempotency-Key": f"t{turn}"})
        text += f" turn {turn}"
        replicas.append(answer.headers[REPLICA_HEADER])
        np.testing.assert_allclose(answer.json()["embedding"], fresh(encoder, text), atol=1e-5)
    assert len(set(replicas)) == 1, replicas  # the header kept the session on its replica

    seen = set()  # without the header, either replica answers: each resumes the session from the store
    for turn in range(8):
        answer = post(fleet, "/v1/sessions/talk/append", {"text": f" moved {turn}"}, {"Idempotency-Key": f"m{turn}"})
        text += f" moved {turn}"
        seen.add(answer.headers[REPLICA_HEADER])
        np.testing.assert_allclose(answer.json()["embedding"], fresh(encoder, text), atol=1e-5)
    assert len(seen) == 2, seen

    ray.kill(ray.get_actor(replicas[0], namespace="serve"), no_restart=True)  # the session's own replica dies
    after = set()
    for turn in range(4):
        answer = post(fleet, "/v1/sessions/talk/append", {"text": f" after {turn}"},
                      {**sticky, "Idempotency-Key": f"a{turn}"}, retries=5)  # a retry is never applied twice
        assert answer.status_code == 200, answer.text
        text += f" after {turn}"
        after.add(answer.headers[REPLICA_HEADER])
        np.testing.assert_allclose(answer.json()["embedding"], fresh(encoder, text), atol=1e-5)
    assert replicas[0] not in after
    final = fleet.get("/v1/sessions/talk").json()
    assert final["version"] == 1 + 6 + 8 + 4 and final["characters"] == len(text)
