"""The page ``reference/routes.md``: every route of ``avey-b serve``, with its request and answer schemas, a ``curl``
example and its status codes, generated at every ``mkdocs build`` (docs/hooks.py calls :func:`add_page`).

The schemas come from a snapshot of the server's OpenAPI schema, ``docs/reference/routes.schema.json``, not from a
live app: building one needs torch, transformers and a model, too slow and too heavy for every build of the site.
The snapshot holds the schema of a server whose model is not a classifier, and what differs on a classifier (the body
of ``POST /``). After changing a route, write it again:

    PYTHONPATH=. python docs/routes_page.py

tests/test_docs_routes.py fails when the snapshot differs from the live schema, when a route of the app is missing
from the page, and when a ``curl`` example of the page does not get 200 and an answer that its schema validates.
What the schema cannot say (the client each route serves, what it does, the model it needs, its example) is the
table :data:`ROUTES` below.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

SNAPSHOT = Path(__file__).parent / "reference" / "routes.schema.json"
PAGE = "reference/routes.md"
URL = "http://127.0.0.1:8000"
#: the name the examples' server is started under (``--served-model-name``)
SERVED_NAME = "avey-b"

#: what a route needs of the model: the words on the page (the test builds the matching tiny model from them)
MODELS = {
    "any": "any model",
    "not-classifier": "any model but a sequence classifier",
    "masked-lm": "a masked LM (`AveyBForMaskedLM`: a pretrained Avey-B)",
    "classifier": "a sequence classifier (`AveyBForSequenceClassification`)",
    "cross-encoder": "a cross-encoder: a sequence classifier with one label (`num_labels=1`)",
    "multi-vector": "a multi-vector model (`AveyBForMultiVector`)",
}
#: the same in short: the first line of an example (``ON``), the table, the refusals
SHORT = {"any": "any model", "not-classifier": "any model but a sequence classifier", "masked-lm": "a masked LM",
         "classifier": "a sequence classifier", "cross-encoder": "a cross-encoder",
         "multi-vector": "a multi-vector model"}
#: the first line of an example: the model it runs on
ON = "# on {model}"


@dataclass(frozen=True)
class Route:
    group: str
    client: str
    does: str
    needs: str = "any"
    examples: tuple = ()  # (needs, JSON body or None, path or None: the route's own)
    notes: dict = field(default_factory=dict)  # status -> what this route answers it for


TEXTS = ["the film was good", "the cast was awful"]
SERVER, OPENAI, COHERE, TEI, HUB, OWN, SESSIONS, SCHEMA = (
    "The server", "OpenAI API", "Cohere, Jina and vLLM rerank", "Text Embeddings Inference (TEI)",
    "Hugging Face InferenceClient", "This server's own routes (no other API has them)",
    "Sessions: documents kept between requests (this server's own)", "The schema and its viewers")
#: the session the examples of the session routes make, change, read and delete, in the page's order
SESSION = "chat-1"
SESSION_NOTES = {404: "no such session (never made, deleted, expired, or dropped: the message says which)",
                 409: "a `version` other than the session's; an `Idempotency-Key` that made an earlier version; "
                      "another replica changed it meanwhile; a stored record that is damaged or of another model",
                 503: "the state store (`--state-store`) did not answer: nothing was changed"}
ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/health"): Route(
        SERVER, "health checks (load balancers, Kubernetes probes)",
        "The served model's name, what it serves (`serves`: `embed`, `fill`, `sparse`, `classify`, `rerank`, "
        "`multivector`), its limits, device, precision and threads. Open without the key.",
        examples=(("any", None, None),)),
    ("GET", "/metrics"): Route(
        SERVER, "Prometheus",
        "The server's metrics in Prometheus' text format: `avey_b_requests_total` (by method, route and status), "
        "`avey_b_request_duration_seconds`, `avey_b_inputs_total` and `avey_b_tokens_total` (by route: the tokens "
        "run through the model, those the prefix cache held left out), "
        "`avey_b_queue_inputs`; with the prefix cache on, `avey_b_prefix_cache_hits_total`, `_misses_total`, "
        "`_tokens_saved_total`, `_tokens_computed_total`, `_evictions_total`, `_bytes` and `_entries`.",
        examples=(("any", None, None),)),
    ("GET", "/v1/models"): Route(
        OPENAI, "the `openai` SDK: `client.models.list()`",
        "The served model, as a list of one OpenAI model object.", examples=(("any", None, None),)),
    ("GET", "/v1/models/{model}"): Route(
        OPENAI, "the `openai` SDK: `client.models.retrieve(NAME)`",
        "The served model's OpenAI model object.", examples=(("any", None, f"/v1/models/{SERVED_NAME}"),),
        notes={404: "a name other than the served one"}),
    ("POST", "/v1/embeddings"): Route(
        OPENAI, "the `openai` SDK: `client.embeddings.create(...)`",
        "One vector per input, or with late chunking (`chunk_tokens` or `chunk_spans`) one per chunk, each computed "
        "with the whole input in view and carrying its `chunk` and character `span`. With `session` (the SDK's "
        "`extra_body`), the one input is that session's whole text, or with `session_append` the text to add: only "
        "the change is computed (see the session routes). Token-id arrays in `input` are read as the server's "
        "`--openai-token-ids` says: refused by default (the OpenAI API means OpenAI's tokenizer's ids, and "
        "LangChain's `OpenAIEmbeddings` sends tiktoken's cl100k_base ids unless given "
        "`check_embedding_ctx_length=False`), decoded as cl100k_base ids with `cl100k`, this model's ids with "
        "`model`; `/health` shows which.",
        examples=(("any", {"input": TEXTS}, None),),
        notes={400: "token-id arrays on a server with `--openai-token-ids refuse` (the default), or ids that are not "
                    "cl100k_base's with `cl100k`; `encoding_format` not `float` or `base64`; a `dimensions` the "
                    "config does not declare; both "
                    "`chunk_tokens` and `chunk_spans`; `chunk_spans` not one list per input, or a span not "
                    "`0 <= start < end`; `session` with several inputs or with `chunk_spans`; `session_append` "
                    "without `session`"}),
    ("POST", "/v1/classify"): Route(
        OWN, "any HTTP client (this server's route, in the OpenAI API's conventions: `input`, `model`, `usage`)",
        "Each input's best label and the score of every label (the softmax; the sigmoid for one label).",
        needs="classifier", examples=(("classifier", {"input": TEXTS}, None),)),
    ("POST", "/v1/fill-mask"): Route(
        OWN, "any HTTP client (this server's route, in the OpenAI API's conventions)",
        "Per input, per mask token, the `top_k` likeliest tokens with their probabilities.",
        needs="masked-lm", examples=(("masked-lm", {"input": "the film was [MASK] .", "top_k": 3}, None),),
        notes={400: "an input without the tokenizer's mask token"}),
    ("POST", "/v1/rerank"): Route(
        COHERE, "the Cohere SDK (`co.rerank`), Jina's and vLLM's rerank clients",
        "The documents ranked by the cross-encoder's score of each (query, document) pair, best first. With a "
        "query-last scorer (`avey-b finetune --task long-rerank`) documents of any length are scored at the cost "
        "of the query, and each result has its `evidence`: the character spans of the document where the query "
        "looked, best first, with the ranker's scores. A document may be `{\"session\": ID}`: a session's current "
        "text (`/v1/sessions`), sent once and kept; a query-last scorer then ranks against its state's token ids, "
        "so a query costs the query's work only.",
        needs="cross-encoder",
        examples=(("cross-encoder", {"query": "was the film good", "documents": TEXTS, "top_n": 2}, None),),
        notes={400: "`documents` empty; a session made of token ids", 404: "a `session` that does not exist"}),
    ("POST", "/v2/rerank"): Route(
        COHERE, "the Cohere SDK's v2 client (`cohere.ClientV2().rerank`)",
        "The same route as `POST /v1/rerank`, on the path the v2 client posts to.", needs="cross-encoder",
        examples=(("cross-encoder", {"query": "was the film good", "documents": TEXTS}, None),),
        notes={400: "`documents` empty"}),
    ("POST", "/embed"): Route(
        TEI, "TEI's clients; `huggingface_hub.InferenceClient(URL).feature_extraction(...)`",
        "One vector per input (unit length unless `normalize` is false).", examples=(("any", {"inputs": TEXTS}, None),),
        notes={400: "a `dimensions` the config does not declare; a `prompt_name` the model lacks, or one given with "
                    "token ids"}),
    ("POST", "/embed_all"): Route(
        TEI, "TEI's clients",
        "Per input, a vector per token: the multi-vector head's unit token vectors on a multi-vector model (what "
        "`/maxsim` scores), else the backbone's last hidden state.", examples=(("any", {"inputs": TEXTS}, None),),
        notes={400: "a `prompt_name` the model lacks"}),
    ("POST", "/embed_sparse"): Route(
        TEI, "TEI's clients",
        "SPLADE's sparse vector of each input: its non-zero vocabulary weights as `{index, value}`, computed "
        "through the masked-LM head. Not on the ONNX runtime (`--onnx`).",
        needs="masked-lm", examples=(("masked-lm", {"inputs": TEXTS}, None),),
        notes={400: "a `prompt_name` the model lacks"}),
    ("POST", "/predict"): Route(
        TEI, "TEI's clients",
        "Every label with its score, best first, for a text or a pair of texts; a list of them for a list of "
        "inputs.", needs="classifier", examples=(("classifier", {"inputs": "the film was good"}, None),),
        notes={400: "an input of more than two texts"}),
    ("POST", "/rerank"): Route(
        TEI, "TEI's clients",
        "The texts ranked by the cross-encoder's score of each (query, text) pair, best first: the sigmoid of the "
        "logit, or the logit with `raw_scores`. With a query-last scorer (`avey-b finetune --task long-rerank`) "
        "texts of any length are scored at the cost of the query, each with its `evidence` (character spans where "
        "the query looked, best first).", needs="cross-encoder",
        examples=(("cross-encoder", {"query": "was the film good", "texts": TEXTS, "return_text": True}, None),),
        notes={400: "`texts` empty"}),
    ("POST", "/maxsim"): Route(
        OWN, "any HTTP client (this server's route, in the shape of TEI's `/rerank`)",
        "The texts ranked by late interaction (MaxSim): the sum over the query's token vectors of the best dot "
        "product with each text's.", needs="multi-vector",
        examples=(("multi-vector", {"query": "was the film good", "texts": TEXTS}, None),),
        notes={400: "`texts` empty"}),
    ("POST", "/tokenize"): Route(
        TEI, "TEI's clients",
        "Each input's tokens with their ids, texts and character offsets (special tokens have no offsets).",
        examples=(("any", {"inputs": "the film was good"}, None),),
        notes={400: "a `prompt_name` the model lacks"}),
    ("POST", "/decode"): Route(
        TEI, "TEI's clients", "The text of each list of token ids.",
        examples=(("any", {"ids": [[2, 10, 11, 3]]}, None),), notes={400: "a token id outside the vocabulary"}),
    ("GET", "/info"): Route(
        TEI, "TEI's clients; `huggingface_hub`",
        "TEI's description of the model (its id, type, precision, limits), then this server's: what it serves, "
        "the vector kinds it returns, its Matryoshka sizes and prompts, its runtime and threads.",
        examples=(("any", None, None),)),
    ("POST", "/"): Route(
        HUB, "`huggingface_hub.InferenceClient(base_url=URL)`",
        "What the client posts to a base URL: on a sequence classifier, text classification (every label's score, "
        "best first, per input); on any other model, `/embed`. The body follows the model (both are below).",
        examples=(("not-classifier", {"inputs": TEXTS}, None),
                  ("classifier", {"inputs": TEXTS, "parameters": {"top_k": 1}}, None))),
    ("POST", "/v1/sessions"): Route(
        SESSIONS, "any HTTP client",
        "Make a session: a document (a text, or token ids) with an id the client chooses or the server makes, and "
        "optional late chunks (`chunk_tokens`). The answer: the session (its `version`, 1) with its vector, as "
        "every session route answers (and its chunks' vectors with their character spans).",
        examples=(("any", {"id": SESSION, "text": "user: the film was good", "chunk_tokens": 4}, None),),
        notes={400: "an id of other characters than letters, digits and `._:-`", **SESSION_NOTES,
               409: "the id is taken"}),
    ("POST", "/v1/sessions/{session_id}/append"): Route(
        SESSIONS, "any HTTP client",
        "Add text (token ids, for a session of ids) at the end: only the new splits are computed (and the tail "
        "re-tokenized). With `version`, refused unless the session is at it; with an `Idempotency-Key` header, a "
        "retry is answered as the change was and not applied twice.",
        examples=(("any", {"text": "\nassistant: the cast was awful", "version": 1},
                   f"/v1/sessions/{SESSION}/append"),), notes=SESSION_NOTES),
    ("POST", "/v1/sessions/{session_id}/replace"): Route(
        SESSIONS, "any HTTP client",
        "Replace the characters `start:end` (tokens, for a session of ids) by a text: an insertion where `start` "
        "equals `end`, a deletion with an empty text. The splits from the change on are recomputed.",
        examples=(("any", {"start": 19, "end": 23, "text": "great"}, f"/v1/sessions/{SESSION}/replace"),),
        notes={400: "a span outside the document", **SESSION_NOTES}),
    ("PUT", "/v1/sessions/{session_id}/text"): Route(
        SESSIONS, "any HTTP client",
        "The session's whole new text: only what differs from the current one is computed (an extension is an "
        "append). What a client that resends the whole conversation at every turn sends.",
        examples=(("any", {"text": "user: the film was great\nassistant: the cast was awful\nuser: why?"},
                   f"/v1/sessions/{SESSION}/text"),), notes=SESSION_NOTES),
    ("GET", "/v1/sessions/{session_id}"): Route(
        SESSIONS, "any HTTP client",
        "The session with its vectors (`encoding_format=base64` for the float32 bytes), computed from its state.",
        examples=(("any", None, f"/v1/sessions/{SESSION}"),), notes=SESSION_NOTES),
    ("GET", "/v1/sessions"): Route(
        SESSIONS, "any HTTP client",
        "Every session held (in the state store, or in memory without one): id, version, tokens, bytes, times.",
        examples=(("any", None, None),), notes={503: SESSION_NOTES[503]}),
    ("DELETE", "/v1/sessions/{session_id}"): Route(
        SESSIONS, "any HTTP client", "Forget the session, in memory and in the state store.",
        examples=(("any", None, f"/v1/sessions/{SESSION}"),), notes=SESSION_NOTES),
    ("GET", "/openapi.json"): Route(
        SCHEMA, "OpenAPI tools (code generators, `schemathesis`)",
        "The OpenAPI schema this page is generated from: every route's request and answer bodies. Open without "
        "the key.", examples=(("any", None, None),)),
    ("GET", "/docs"): Route(
        SCHEMA, "a browser",
        "FastAPI's Swagger UI over the schema (an HTML page whose scripts load from a CDN). It needs the key when "
        "the server has one, so a browser opens it only on a server without a key.", examples=(("any", None, None),)),
    ("GET", "/redoc"): Route(
        SCHEMA, "a browser", "ReDoc's view of the schema (an HTML page whose scripts load from a CDN).",
        examples=(("any", None, None),)),
}
GROUPS = (SERVER, OPENAI, COHERE, TEI, HUB, OWN, SESSIONS, SCHEMA)
ROUTES = dict(sorted(ROUTES.items(), key=lambda item: GROUPS.index(item[1].group)))  # a section per group, in order
#: the routes that are not in the OpenAPI schema (FastAPI's own pages), and those open without the key among them
UNLISTED, OPEN_UNLISTED = ("/openapi.json", "/docs", "/redoc"), ("/openapi.json",)

# --------------------------------------------------------------------------------------------- the snapshot


def live_snapshot() -> dict:
    """The snapshot from live apps: tiny models built in a temporary folder (needs torch and the serving extra)."""
    import tempfile

    from avey_b import testing as toy
    from avey_b.apps.serve import build_app
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    schemas = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kind in (("embedding", "masked-lm"), ("classifier", "cross-encoder")):
            directory = toy.served_model(str(Path(tmp) / kind), kind)
            app = build_app(Encoder(directory, LoadOptions(precision="fp32")), ServeOptions())
            schemas[name] = without_version(app.openapi())
    return {"schema": schemas["embedding"], "classifier": difference(schemas["classifier"], schemas["embedding"])}


def without_version(schema: dict) -> dict:
    """``schema`` (a copy) without the package's version, which changes with every commit."""
    schema = json.loads(json.dumps(schema))
    schema["info"].pop("version", None)
    return schema


def difference(schema: dict, base: dict) -> dict:
    """The paths and component schemas of ``schema`` that ``base`` lacks or has otherwise."""
    return {"paths": {p: v for p, v in schema["paths"].items() if base["paths"].get(p) != v},
            "components": {"schemas": {n: v for n, v in schema["components"]["schemas"].items()
                                       if base["components"]["schemas"].get(n) != v}}}


def schema_of(snapshot: dict, classifier: bool) -> dict:
    """The full schema of a server whose model is (or is not) a sequence classifier."""
    schema = json.loads(json.dumps(snapshot["schema"]))
    if classifier:
        schema["paths"].update(snapshot["classifier"]["paths"])
        schema["components"]["schemas"].update(snapshot["classifier"]["components"]["schemas"])
    return schema


def load_snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------- schemas as text
NAMES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "null"}


def type_of(schema: dict) -> str:
    """A JSON schema as a short type: ``list[str] or null``, ``EmbedRequest``, ``"left" or "right"``."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[1]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(type_of(s) for s in schema[key])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " or ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        if "prefixItems" in schema:
            return "[" + ", ".join(type_of(s) for s in schema["prefixItems"]) + "]"
        return f"list[{type_of(schema.get('items', {}))}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"dict[str, {type_of(extra)}]" if isinstance(extra, dict) and extra else "object"
    return NAMES.get(kind, "any")


def refs(schema, found: list) -> list:
    """The component names ``schema`` refers to, depth first, each once (``found`` grows)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1]
            if name not in found:
                found.append(name)
            return found
        for value in schema.values():
            refs(value, found)
    elif isinstance(schema, list):
        for value in schema:
            refs(value, found)
    return found


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def fields_table(name: str, schema: dict) -> list[str]:
    """A model's fields as a Markdown table: name, type, required or default, description."""
    required, properties = set(schema.get("required", [])), schema.get("properties", {})
    described = any("description" in spec for spec in properties.values())
    rows = [f"`{name}`", "", "| field | type | required / default |" + (" description |" if described else ""),
            "|---|---|---|" + ("---|" if described else "")]
    for field_name, spec in properties.items():
        need = "required" if field_name in required else f"`{json.dumps(spec.get('default'))}`"
        text = f" {one_line(spec.get('description', ''))} |" if described else ""
        rows.append(f"| `{field_name}` | `{type_of(spec)}` | {need} |{text}")
    return rows + [""]


def models_below(schema: dict, components: dict, shown: set) -> list[str]:
    """The tables of the models ``schema`` refers to, those not yet ``shown`` on this route."""
    lines = []
    for name in refs(schema, []):
        if name in shown or name == "ErrorBody":
            continue
        shown.add(name)
        lines += fields_table(name, components[name])
        lines += models_below(components[name], components, shown)
    return lines


def body_section(title: str, schema: dict, components: dict) -> list[str]:
    """A request or answer body: its type, then the tables of its models."""
    return [f"**{title}**: `{type_of(schema)}`", "", *models_below(schema, components, set())]


# --------------------------------------------------------------------------------------------- the page
def curl(method: str, path: str, body, keyed: bool, needs: str) -> list[str]:
    """A ``curl`` example as the lines of a bash block."""
    parts = [f"curl -s {URL}{path}" if method in ("GET", "POST") and (body is not None) == (method == "POST")
             else f"curl -s -X {method} {URL}{path}"]
    if keyed:
        parts.append('-H "Authorization: Bearer $KEY"')
    if body is not None:
        parts += ['-H "Content-Type: application/json"', f"-d '{json.dumps(body)}'"]
    return ["```bash", ON.format(model=SHORT[needs]), " \\\n  ".join(parts), "```", ""]


def statuses(operation: dict | None, route: Route) -> list[str]:
    """The route's status codes: those of its schema (:data:`avey_b.apps.serve.answers.ERRORS`), with what this
    route answers them for."""
    responses = operation["responses"] if operation else {"200": {"description": "the page"}}
    lines = ["**Status codes**:", ""]
    for status, response in sorted(responses.items()):
        meaning = "the answer above" if status == "200" and operation else response["description"]
        note = route.notes.get(int(status))
        if status == "400" and route.needs not in ("any", "not-classifier"):
            note = "; ".join(filter(None, [note, f"a model that is not {SHORT[route.needs]}"]))
        lines.append(f"- `{status}`: {meaning}" + (f"; here: {note}" if note else ""))
    return lines + [""]


def route_section(method: str, path: str, route: Route, schemas: dict) -> list[str]:
    """One route's section: what it does, its body, its answer, its examples and its status codes."""
    plain, classifier = schemas[False], schemas[True]
    operation = plain["paths"].get(path, {}).get(method.lower())
    keyed = path not in OPEN_UNLISTED if operation is None else "401" in operation["responses"]
    lines = [f"### {method} {path}", "", f"{route.does}", "",
             f"**For**: {route.client}. **Needs**: {MODELS[route.needs]}. **Key**: "
             + ("`Authorization: Bearer $KEY` when the server has one." if keyed else "none (open)."), ""]
    if operation is not None:
        variants = [(plain, operation)]
        other = classifier["paths"][path][method.lower()]
        if other != operation:
            variants = [(plain, operation), (classifier, other)]
        for schema, op in variants:
            where = "" if len(variants) == 1 else (" on a sequence classifier" if schema is classifier else
                                                   " on any other model")
            components = schema["components"]["schemas"]
            if "requestBody" in op:
                body = op["requestBody"]["content"]["application/json"]["schema"]
                lines += body_section(f"Request body{where}", body, components)
            answer = op["responses"]["200"]["content"]
            if "application/json" in answer:
                lines += body_section(f"Answer{where}", answer["application/json"]["schema"], components)
            else:
                lines += [f"**Answer**: `{next(iter(answer))}`", ""]
    for needs, body, example_path in route.examples:
        lines += curl(method, example_path or path, body, keyed, needs)
    return lines + statuses(operation, route)


INTRO = """# HTTP routes

Every route of `avey-b serve`, generated from the server's OpenAPI schema (the one `GET /openapi.json` answers):
what each route is for, its request and answer bodies, a `curl` example and its status codes. How to run and tune
the server is in [Serving](../serving.md); its options are in `avey-b serve --help`.

## Start a server

Every route is served whatever the model; a route the model cannot answer is refused with 400, saying what it
needs. The examples below run against a server started like this, with an API key:

```bash
export KEY=change-me
AVEY_B_API_KEY=$KEY avey-b serve runs/quickstart/model --served-model-name avey-b --port 8000
```

With a key, every route needs the header `Authorization: Bearer $KEY` except `GET /health` and
`GET /openapi.json`. Without a key (the default), drop the header: the server then listens on loopback addresses
only, unless it is started with `--allow-no-key-on-network`.

## Inputs and errors

Texts go in `input` (the OpenAI name) or `inputs` (the TEI name), never both. Wherever texts go, token ids may go
too: one list of ids is one input, a list of lists is several; they run as given, with no special tokens added.
A field a route does not have is refused (422, naming it), so a typo is never ignored silently.

Every error answers a JSON body with FastAPI's `detail` beside the OpenAI API's `error` object, whose `message`
is what the `openai` SDK raises:

```json
{"detail": "input 0 is an empty string",
 "error": {"message": "input 0 is an empty string", "type": "invalid_request_error", "param": null, "code": null}}
```

Each limit's 413 names the flag that sets it: `--max-body-bytes`, `--max-request-inputs`, `--max-input-chars`,
`--max-tokens`. An input past `--max-tokens` is never cut unless a TEI route's `truncate` asks for it. A 503 means
the queue is full (retry later), the server is past `--max-connections`, or it is shutting down (its answer then
carries `Connection: close`). A 404 names the unknown route, or the unknown model a body's `model` names.

## Which model serves which route

"""


def table() -> list[str]:
    """Every route, linked to its section (the anchor the toc extension gives its heading), with what it needs."""
    from markdown.extensions.toc import slugify

    rows = ["| route | for | needs |", "|---|---|---|"]
    for (method, path), route in ROUTES.items():
        anchor = slugify(f"{method} {path}", "-")
        rows.append(f"| [`{method} {path}`](#{anchor}) | {route.group} | {SHORT[route.needs]} |")
    return rows + [""]


def page(snapshot: dict | None = None) -> str:
    """The page's Markdown, from ``snapshot`` (default: the committed one)."""
    snapshot = snapshot or load_snapshot()
    schemas = {False: schema_of(snapshot, False), True: schema_of(snapshot, True)}
    lines = [INTRO.rstrip("\n"), "", *table()]
    group = None
    for (method, path), route in ROUTES.items():
        if route.group != group:
            group = route.group
            lines += [f"## {group}", ""]
        lines += route_section(method, path, route, schemas)
    return "\n".join(lines).rstrip("\n") + "\n"


def add_page(files, config):
    """docs/hooks.py's ``on_files``: the page, generated, added to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=page()))
    return files


if __name__ == "__main__":
    SNAPSHOT.parent.mkdir(exist_ok=True)
    SNAPSHOT.write_text(json.dumps(live_snapshot(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
