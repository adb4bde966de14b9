"""``avey-b serve MODEL``: an HTTP server for a saved Avey-B — embeddings, reranking, classification, fill-mask and
tokenization, in the request and response shapes of the OpenAI API, Hugging Face's Text Embeddings Inference
(TEI) and the Cohere / Jina rerank API, so that their clients work unchanged.

    avey-b serve runs/quickstart/model --port 8000
    curl -s localhost:8000/v1/embeddings -H 'content-type: application/json' -d '{"input": ["a", "b"]}'

What a checkpoint serves: every one embeds (masked mean pooling of the backbone, L2-normalized when the config says
normalize_embeddings; for an embedding checkpoint exactly its pooler_output); a masked-LM fills masks; a
sequence classifier classifies; a multi-vector model (AveyBForMultiVector) gives token vectors and MaxSim scores; a
sequence classifier with one label (num_labels=1) is a cross-encoder and
reranks, scoring each (query, document) pair whole, as the tokenizer encodes a pair, never cut (the directory also
loads as sentence_transformers.CrossEncoder(MODEL), whose predict gives the same scores: the sigmoid of the
logit; equal to float32's under --precision fp32, while the default, auto, runs bf16 autocast on CUDA and on CPUs
that multiply bf16 natively, which keeps about three significant digits, so scores and vectors then differ from a
float32 run in about the third decimal). A route the checkpoint cannot serve answers 400 saying what it needs.

OpenAI (texts in `input`, or `inputs`; token ids wherever texts go: one list of ids, or a list of lists, embedded
as given, no special tokens added):
  GET  /v1/models, /v1/models/NAME   the served model (--served-model-name; default the directory's name)
  POST /v1/embeddings   input, model, encoding_format (float | base64, the openai SDK's default), dimensions (one
       of the config's matryoshka_dimensions: the first n values, re-normalized; else 400), user; late chunking:
       chunk_tokens N (N text tokens a chunk) or chunk_spans ([[start, end), ...] characters per input; tokens for
       token ids) -> one vector per chunk, each item with its index, chunk and span; usage counts tokens
  POST /v1/classify     input, model -> results [{label, scores}] (softmax; sigmoid for one label)
  POST /v1/fill-mask    input, model, top_k (1-50) -> results: per input, per [MASK], [{token, score}]
  POST /v1/rerank, /v2/rerank   (Cohere, Jina, vLLM) query, documents (strings or {text}), top_n,
       return_documents (default true), model -> {id, model, results [{index, relevance_score, document}], usage}
  A request naming another model than the served one: 404 (as OpenAI-compatible servers answer).
TEI:
  POST /embed        inputs, normalize (default true), truncate, truncation_direction (left | right), dimensions,
                     prompt_name (a name in config_sentence_transformers.json's prompts) -> [[float]]
  POST /embed_all    inputs, truncate, truncation_direction, prompt_name -> per input, a vector per token: the
                     multi-vector head's unit token vectors on a multi-vector model, else the last hidden state
  POST /predict      inputs: a text, a pair [a, b], or a list of them; raw_scores, truncate, truncation_direction
                     -> [{score, label}] best first (a list of them per input for a list)
  POST /rerank       query, texts, raw_scores, return_text, truncate, truncation_direction -> [{index, score[, text]}]
                     best first (score: the sigmoid of the logit; raw_scores: the logit)
  POST /maxsim       (this server's, in /rerank's shape) query, texts, return_text, truncate, truncation_direction
                     -> [{index, score[, text]}] best first: late interaction (MaxSim) on a multi-vector model
  POST /tokenize     inputs, add_special_tokens, prompt_name -> per input [{id, text, special, start, stop}]
  POST /decode       ids (a list, or lists), skip_special_tokens -> [text]
  GET  /info         model, type, outputs (the vector kinds it returns: dense, sparse, multivector), limits,
                     threads, device;  POST /  what huggingface_hub.InferenceClient(base_url=URL) posts: text
                     classification ({inputs, parameters}) on a classifier, else /embed
Also: GET /health (the model, what it serves, its limits; no API key needed), GET /openapi.json (every route's
request and answer bodies; no API key needed) and GET /metrics (Prometheus:
avey_b_requests_total by method, route, status; avey_b_request_duration_seconds; avey_b_inputs_total and
avey_b_tokens_total by route; avey_b_queue_inputs; with the prefix cache, avey_b_prefix_cache_hits_total,
_misses_total, _tokens_saved_total, _tokens_computed_total, _evictions_total, _bytes and _entries).

Errors: a JSON body with FastAPI's `detail` and the OpenAI API's `error` object (its message is what the openai SDK
raises). 400: a bad value (empty input, token id outside the vocabulary, a dimensions the model lacks, a route the
checkpoint cannot serve). 401: no, a malformed or a wrong `Authorization: Bearer KEY` when the server has
--api-key (the message says which; no key is ever logged). 404: an
unknown route or model. 413: past a limit, named with its flag (--max-body-bytes, --max-request-inputs,
--max-input-chars, --max-tokens); inputs are never cut unless a TEI request asks truncate=true (to --max-tokens,
special tokens kept; for a pair, the document is cut). 422: invalid JSON, a missing or mistyped field, or a field
the route does not have (named, with the route's fields). 503: the queue is full (retry later); an idle server
takes any request.

Work: the body is capped before it is read, parsed and tokenized on worker threads (a large request never holds the
event loop); a request's inputs go into a bounded queue (--queue-size inputs) as a whole, and one worker runs what
waits (--batch-wait-ms waits for more) sorted by length in batches of at most --max-batch-tokens padded tokens.
Long and repeated inputs (embeddings on the eager runtime): an input of more than --block-tokens tokens runs as a
document state, a block at a time, and the batches that wait run between its blocks, so a short request waits for
about one block, never for a whole long input, and a long input's memory is bounded by the block. The prefix cache
(--prefix-cache-bytes, least recently used evicted, 0: off) keeps the states of the inputs of at least a quarter
of a block: an input that extends (or equals) one already embedded — a conversation re-embedded at every turn, a
log that grows — computes only its new part, matched split by split on its token ids. Neither changes an answer beyond
float32 rounding. A model whose later tokens reach earlier splits (ranker='bidirectional', or the ranker at every
layer) runs every input whole, and the start line says so. Measurements: benchmarks/streaming/chat/README.md.
Precision follows the library's policy: bf16 autocast where the device multiplies bf16 natively, float32 elsewhere.
`--onnx [FILE]` answers the same API from an exported ONNX model run by onnxruntime on the CPU (`avey-b export MODEL
MODEL --head embedding` writes MODEL/onnx/model.onnx, the default FILE; `--quantize int8` adds model.int8.onnx).
Which runtime answers faster depends on the machine and on the lengths of the requests (int8 gains most on short
inputs, least on long ones): measure yours with benchmarks/serve/ (int8.py: one runtime at a time, by length;
load.py: a server under concurrent clients; recorded results in its README.md).
Logs on stderr (--log-level): one access line per request (method, path, status, inputs, tokens, ms). SIGTERM:
the server drains — every new request gets 503 with `Connection: close` for at least --drain-s and until the
requests in flight are answered — then its port closes and it exits.
Doors (SECURITY.md): with no API key it serves loopback addresses only, unless --allow-no-key-on-network; a
request's headers, then its body, must each arrive within --body-timeout-s (else 408, the connection closed); idle
connections close after --keep-alive-s; past --max-connections a request gets 503.
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
