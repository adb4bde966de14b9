"""``avey-b serve MODEL``: an HTTP server for a saved Avey-B — embeddings, reranking, classification, fill-mask and
tokenization, in the request and response shapes of the OpenAI API, Hugging Face's Text Embeddings Inference
(TEI) and the Cohere / Jina rerank API, so that their clients work unchanged.

    avey-b serve runs/quickstart/model --port 8000
    curl -s localhost:8000/v1/embeddings -H 'content-type: application/json' -d '{"input": ["a", "b"]}'

Every route, with its request and answer fields, a curl example and its status codes, is in the manual's page
docs/reference/routes.md ("HTTP routes"); a running server publishes the same schema at GET /openapi.json. Every
route is served whatever the model: one the model cannot answer (fill-mask needs a masked LM, rerank a
cross-encoder, a classifier with num_labels=1) answers 400 saying what it needs.

Keys (SECURITY.md): with --api-key or AVEY_B_API_KEY every route but /health and /openapi.json needs the header
`Authorization: Bearer KEY`; with no key the server listens on loopback addresses only, unless
--allow-no-key-on-network. A limit (--max-tokens, --max-body-bytes, ...) answers 413 naming its flag; an input is
never cut unless a TEI request asks truncate=true. SIGTERM drains the server (new requests get 503 while those in
flight are answered), then it exits. Batching, long and repeated inputs (--block-tokens, --prefix-cache-bytes),
precision and --onnx: docs/serving.md; measurements: benchmarks/serve/README.md.
"""

# The modules: batcher (the queue and the worker), work (what a batch computes), schemas (the request bodies),
# service (names, limits, tokenization off the event loop; the routes' dependencies), routes_openai, routes_tei and
# routes_server (/health, /metrics: module-level routers), observe (drain, API key, body cap and timeout, access
# log, metrics), guard (the network check, uvicorn's timeouts and limits, the drain at SIGTERM) and app (build_app,
# run). This package imports them when one of their names is first asked for, so that ``avey-b serve
# --help`` (which shows this docstring) imports no torch.

import importlib

_EXPORTS = {"build_app": "app", "run": "app", "Batcher": "batcher", "Job": "batcher", "answer_batch": "work",
            "Service": "service"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
