"""``avey-b serve`` fuzzed from its own OpenAPI schema (issue 52): every route's request body and answers are in the
schema (no untyped body), and ``schemathesis`` (its CLI, the real stack: a uvicorn server as ``avey-b serve`` runs
it, on a free port) sends generated requests to every route — examples, coverage, fuzzing and stateful phases,
valid and invalid data — with the API key and without it. Goals: no 5xx, every answer conforms to the schema (status,
content type, headers, body), invalid data is refused, every 4xx body names the problem
(tests/fixtures/serve_fuzz_checks.py), and ``/health`` answers after the run. A bounded number of cases per route
here; the run of 10,000+ cases is benchmarks/serve/fuzz.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from avey_b import testing as toy
from tests.test_serve_api import serve

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("schemathesis")

KEY = "fuzz-key"
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
          "response_schema_conformance,negative_data_rejection,error_names_the_problem")
HOOKS = Path(__file__).parent / "fixtures" / "serve_fuzz_checks.py"


def served(tmp_path_factory, kind: str):
    """A server for a tiny cross-encoder (embeds, classifies, reranks) or masked LM (embeds, fills masks)."""
    directory = tmp_path_factory.mktemp(kind)
    toy.served_model(str(directory), kind)
    url, running = serve(directory, api_key=KEY, max_tokens=4096, max_request_inputs=64)
    yield url
    running.should_exit = True


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    yield from served(tmp_path_factory, "cross-encoder")


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory):
    yield from served(tmp_path_factory, "masked-lm")


@pytest.fixture(params=["cross_encoder", "masked_lm"])
def server(request):
    return request.getfixturevalue(request.param)


def schemathesis(url: str, *options: str, seconds: float) -> subprocess.CompletedProcess:
    """``st run`` against the server's /openapi.json with this module's checks, bounded by ``seconds``."""
    command = [sys.executable, "-m", "schemathesis.cli", "run", f"{url}/openapi.json", "--checks", CHECKS,
               "--mode", "all", "--seed", "52", "--no-shrink",
               "--max-time", str(int(seconds)), "--workers", "1", "--request-timeout", "30",
               "--suppress-health-check", "all", "--warnings", "off", *options]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), "NO_COLOR": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=seconds + 120)


def test_every_route_has_its_request_and_answer_bodies_in_the_schema(cross_encoder):
    schema = httpx.get(cross_encoder + "/openapi.json").json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            answers = operation["responses"]
            assert answers["200"]["content"], (method, path)
            assert "schema" in next(iter(answers["200"]["content"].values())), (method, path)
            if method == "post":
                assert operation["requestBody"]["content"]["application/json"]["schema"], path
            for status in ("404", "405", "422", "503"):
                assert answers[status]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"}, (method, path, status)
            assert ("401" in answers) == (path != "/health"), (method, path)


def test_an_unknown_route_and_a_wrong_method_are_named_in_the_answer(cross_encoder):
    """Found by the fuzz run (benchmarks/serve/fuzz.jsonl, seed 4): a model name with a newline is no route, and
    the router's bare "Not Found" (and "Method Not Allowed") named neither the route nor the way out."""
    auth = {"Authorization": f"Bearer {KEY}"}
    missing = httpx.post(cross_encoder + "/v1/nothing", json={}, headers=auth)
    wrong = httpx.put(cross_encoder + "/embed", json={"inputs": "a"}, headers=auth)
    assert missing.status_code == 404 and missing.json()["error"]["message"].startswith(
        "no route POST /v1/nothing: this server's routes and their bodies are listed at GET /openapi.json")
    assert wrong.status_code == 405 and wrong.json()["detail"] == "PUT /embed: the route has no PUT; it takes POST"
    odd = httpx.get(cross_encoder + "/v1/models/c%C2%B4%0Ab", headers=auth)  # the fuzz run's case: a newline
    message = odd.json()["error"]["message"]
    assert odd.status_code == 404 and message.startswith(("no route GET /v1/models/c", "the model 'c")), message


def test_without_the_key_generated_requests_get_401s_that_conform(cross_encoder):
    run = schemathesis(cross_encoder, "--phases", "examples,fuzzing", "--max-examples", "2", seconds=3)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    assert httpx.get(cross_encoder + "/health").status_code == 200


@pytest.mark.slow
def test_with_the_key_generated_requests_get_no_server_error_and_answers_that_conform(server):
    """All four phases, valid and invalid data, for 12 s per checkpoint (``AVEY_B_FUZZ_SECONDS`` sets more)."""
    run = schemathesis(server, "-H", f"Authorization: Bearer {KEY}", "--phases",
                       "examples,coverage,fuzzing,stateful", "--max-examples", "20",
                       seconds=float(os.environ.get("AVEY_B_FUZZ_SECONDS", 12)))
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    assert "Coverage" in run.stdout and "Stateful" in run.stdout, run.stdout[-3000:]
    assert httpx.get(server + "/health").status_code == 200
