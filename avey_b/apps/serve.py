"""``avey-b serve MODEL``: an HTTP server for a saved Avey-B — embeddings (OpenAI-compatible), and the fill-mask or
classification output of a masked-LM or classifier checkpoint.

    avey-b serve runs/quickstart/model --port 8000
    curl -s localhost:8000/v1/embeddings -H 'content-type: application/json' -d '{"input": ["a", "b"]}'

Built on FastAPI and uvicorn: the stack of the OpenAI-compatible servers users already run (typed request
validation with clear 4xx answers, graceful shutdown on SIGTERM, one process with an event loop that never waits on
the model). Endpoints:

* ``GET /health`` — the model, what it serves, the token limits.
* ``POST /v1/embeddings`` — the OpenAI embeddings API, so the ``openai`` SDK's default call works
  (``OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-").embeddings.create(model="avey-b", input=...)``):
  ``input`` is a string, a list of strings, a list of token ids (one input) or a list of such lists, token ids
  embedded as given (no special tokens added; each must be below the model's ``vocab_size``);
  ``encoding_format`` is ``"float"`` (the default here) or ``"base64"`` (the SDK's default: each vector as the
  little-endian float32 bytes, base64-encoded); ``usage`` counts the tokens encoded. Every checkpoint serves
  it: masked mean pooling of the backbone, L2-normalized when the config says so (the embedding head's
  computation; for an embedding checkpoint, exactly its ``pooler_output``).
* ``POST /v1/fill-mask`` (masked-LM checkpoints) — ``{"input": str | [str], "top_k": 5}``.
* ``POST /v1/classify`` (sequence-classification checkpoints) — ``{"input": str | [str]}`` -> label and scores.

``--onnx [FILE]`` answers the same API from an exported ONNX model run by onnxruntime on the CPU (``avey-b export
MODEL MODEL --head embedding`` writes ``MODEL/onnx/model.onnx``, the default FILE; ``--quantize int8`` adds
``model.int8.onnx``): same batching, limits and errors; the directory gives the config and the tokenizer. Either
runtime is loaded once, at start, by :class:`avey_b.apps.encoder.Encoder`, which also decides what is served.
The int8 model pays most on short inputs: on a shared 2-core AVX2 CPU (1 thread) it ran 1.9–3.1x faster than the eager
model up to 4K tokens, only 1.15–1.2x at 8K–30K, and served a mixed load of 1–20K-token requests at 1.35x the eager
server's tokens/s, at 2–3x its memory (benchmarks/serve/README.md).

Every endpoint takes its texts in ``input`` (the OpenAI name) and accepts ``inputs`` (the Hugging Face
inference name) for it; a request with both is refused. An error answer holds FastAPI's ``detail`` and the OpenAI
API's ``error`` object (``{"message", "type", ...}``), whose message the openai SDK puts in its exception.

Dynamic batching: requests go into a bounded queue (full: 503); one worker takes what is waiting (what queued
while the previous batch ran; ``--batch-wait-ms`` waits for more), sorts it by length and runs batches of at most
``--max-batch-tokens`` padded tokens. Inputs are never cut: one longer than ``--max-tokens`` is refused with 413. Precision follows the
library's policy: bf16 autocast where the device multiplies bf16 natively, float32 elsewhere.
"""

import argparse  # no `from __future__ import annotations`: FastAPI reads the request models from live annotations
import asyncio
import base64
import functools
import queue
import sys
import threading
import time
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from avey_b import configs
from avey_b.apps.encoder import Encoder
from avey_b.apps.options import LoadOptions, ServeOptions
from avey_b.utils.batching import default_max_tokens, token_budget_batches


@dataclass
class Job:
    kind: str  # "embed" | "fill" | "classify"
    ids: list[int]
    future: Future = field(default_factory=Future)


class Batcher:
    """One worker thread running the model on batches of waiting jobs, grouped by kind and sorted by length."""

    def __init__(self, run, *, max_batch_tokens: int, queue_size: int, wait_s: float):
        self.run, self.max_batch_tokens, self.wait_s = run, max_batch_tokens, wait_s
        self.jobs: queue.Queue[Job | None] = queue.Queue(maxsize=queue_size)
        self.thread = threading.Thread(target=self._loop, name="avey-b-batcher", daemon=True)
        self.thread.start()

    def submit(self, jobs: list[Job]) -> None:
        """Queue ``jobs``; raises ``queue.Full`` when the queue cannot take them all now."""
        if self.jobs.maxsize and self.jobs.qsize() + len(jobs) > self.jobs.maxsize:
            raise queue.Full
        for job in jobs:
            self.jobs.put_nowait(job)

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            first = self.jobs.get()
            if first is None:
                return
            waiting, deadline = [first], time.monotonic() + self.wait_s
            while True:  # take what arrives within the wait (a burst of requests becomes one set of batches)
                try:
                    job = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    self.jobs.put(None)
                    break
                waiting.append(job)
            for batch in self.batches(waiting):
                try:
                    results = self.run(batch[0].kind, [j.ids for j in batch])
                    for job, result in zip(batch, results, strict=True):
                        job.future.set_result(result)
                except Exception as error:  # noqa: BLE001 -- the requests get the error; the server keeps serving
                    for job in batch:
                        job.future.set_exception(error)

    def batches(self, jobs: list[Job]) -> list[list[Job]]:
        """Jobs of one kind, sorted by length, cut so that no batch pads past ``max_batch_tokens``."""
        return [batch for kind in dict.fromkeys(j.kind for j in jobs)
                for batch in token_budget_batches([j for j in jobs if j.kind == kind], self.max_batch_tokens,
                                                  lambda j: len(j.ids))]


def answer_batch(encoder: Encoder, kind: str, ids: list[list[int]]) -> list:
    """The answers to one batch of inputs of one ``kind``: an embedding (float32 numpy) per input; a label with its
    scores (classify); the top tokens at each [MASK] of each input (fill)."""
    batch, mask = encoder.pad(ids)
    if kind == "embed":
        return list(encoder.embed(batch, mask).cpu().numpy())
    logits = encoder.logits(batch, mask)
    if kind == "classify":
        probs = logits.softmax(-1)
        names = encoder.config.id2label
        return [{"label": names[int(p.argmax())], "scores": {names[i]: float(v) for i, v in enumerate(p)}}
                for p in probs]
    tokenizer, out = encoder.tokenizer, []  # fill: the top tokens at each [MASK] of each input
    for i, row in enumerate(ids):
        per_mask = []
        for position in (p for p, token in enumerate(row) if token == tokenizer.mask_token_id):
            scores, tokens = logits[i, position].softmax(-1).topk(min(50, logits.shape[-1]))  # top_k <= 50
            per_mask.append([{"token": tokenizer.decode([int(t)]).strip(), "score": float(v)}
                             for v, t in zip(scores, tokens, strict=True)])
        out.append(per_mask)
    return out


def _request_models():
    """The request bodies (pydantic, the server's extra): ``(EmbeddingRequest, TextsRequest)``; each takes its
    texts in ``input`` or its alias ``inputs``, never both."""
    from pydantic import AliasChoices, BaseModel, Field, StrictInt, model_validator

    def input_field():  # ``input`` (OpenAI), or ``inputs`` (Hugging Face inference) for the same field
        return Field(validation_alias=AliasChoices("input", "inputs"))

    class Request(BaseModel):
        input: str | list[str] = input_field()

        @model_validator(mode="before")
        @classmethod
        def one_input_field(cls, data):
            if isinstance(data, dict) and "input" in data and "inputs" in data:
                raise ValueError("give the inputs in `input` or in its alias `inputs`, not both")
            return data

    class EmbeddingRequest(Request):
        input: str | list[str] | list[StrictInt] | list[list[StrictInt]] = input_field()
        model: str | None = None
        encoding_format: str = "float"
        dimensions: int | None = None
        user: str | None = None  # the OpenAI API's end-user tag: accepted, unused

    class TextsRequest(Request):
        top_k: int = Field(5, ge=1, le=50)

    return EmbeddingRequest, TextsRequest


def _error_body(status: int, message: str, detail) -> dict:
    """FastAPI's ``detail`` beside the OpenAI API's ``error`` object, whose message the openai SDK shows."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"detail": detail, "error": {"message": message, "type": kind, "param": None, "code": None}}


def _add_error_handlers(app) -> None:
    """Answer HTTP errors and invalid requests (422, every problem in one message) with :func:`_error_body`."""
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error):
        return JSONResponse(_error_body(error.status_code, str(error.detail), error.detail),
                            status_code=error.status_code, headers=getattr(error, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request, error):
        problems = error.errors()
        message = "; ".join(f"{'.'.join(map(str, p['loc'][1:])) or 'body'}: {p['msg']}" for p in problems)
        return JSONResponse(_error_body(422, message, jsonable_encoder(problems)), status_code=422)


def _answerer(encoder: Encoder, state: dict, max_tokens: int):
    """The coroutine that checks a request's inputs, queues them on ``state["batcher"]`` and awaits the results."""
    from fastapi import HTTPException

    async def answer(kind: str, given: str | list[str] | list[int] | list[list[int]]) -> tuple[list, int]:
        """Run ``given`` (texts, or token ids: one list or a list of lists); (results, tokens encoded)."""
        if isinstance(given, str):
            given = [given]
        if not given:
            raise HTTPException(400, "input is empty: give a string, a non-empty list of strings or token ids")
        if isinstance(given[0], str):
            if empty := [i for i, t in enumerate(given) if not t]:
                raise HTTPException(400, f"input {empty[0]} is an empty string")
            ids = encoder.tokenize(given)["input_ids"]
        else:
            ids = [given] if isinstance(given[0], int) else given
            try:
                encoder.check_ids(ids)
            except ValueError as error:
                raise HTTPException(400, str(error)) from None
        for i, row in enumerate(ids):
            if len(row) > max_tokens:
                raise HTTPException(413, f"input {i} has {len(row):,} tokens, more than this server's --max-tokens "
                                         f"{max_tokens:,}; it is not truncated: split it or raise the limit")
        jobs = [Job(kind, row) for row in ids]
        try:
            state["batcher"].submit(jobs)
        except queue.Full:
            raise HTTPException(503, "the server's queue is full: retry later") from None
        results = await asyncio.gather(*(asyncio.wrap_future(j.future) for j in jobs))
        return list(results), sum(map(len, ids))

    return answer


def _add_routes(app, encoder: Encoder, answer, options: ServeOptions, max_tokens: int) -> None:
    """``GET /health``, ``POST /v1/embeddings``, and ``/v1/fill-mask`` or ``/v1/classify`` where the checkpoint
    serves them, each answered through ``answer`` (:func:`_answerer`)."""
    from fastapi import HTTPException

    EmbeddingRequest, TextsRequest = _request_models()

    @app.get("/health")
    def health():
        return {"status": "ok", "model": encoder.name, "architecture": encoder.architecture,
                "serves": encoder.kinds, "max_tokens": max_tokens, "max_batch_tokens": options.max_batch_tokens,
                "device": str(encoder.device), "bf16": encoder.bf16, "threads": encoder.threads,
                "onnx": str(encoder.onnx_file) if encoder.onnx_file else None}

    encodings = {"float": lambda v: v.tolist(),  # float32 values, as JSON numbers
                 "base64": lambda v: base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")}

    @app.post("/v1/embeddings")
    async def embeddings(request: EmbeddingRequest):
        if request.encoding_format not in encodings:
            raise HTTPException(400, f"encoding_format must be one of {sorted(encodings)}, got "
                                     f"{request.encoding_format!r}")
        if request.dimensions not in (None, encoder.config.hidden_size):
            raise HTTPException(400, f"this model's embeddings have {encoder.config.hidden_size} dimensions; "
                                     f"dimensions={request.dimensions} (shortened embeddings) is not supported")
        vectors, tokens = await answer("embed", request.input)
        encode = encodings[request.encoding_format]
        return {"object": "list", "model": request.model or encoder.name,
                "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    if "fill" in encoder.kinds:
        @app.post("/v1/fill-mask")
        async def fill_mask(request: TextsRequest):
            texts = [request.input] if isinstance(request.input, str) else request.input
            if any(encoder.tokenizer.mask_token not in t for t in texts):
                raise HTTPException(400, f"every input needs at least one {encoder.tokenizer.mask_token}")
            results, _ = await answer("fill", request.input)
            return {"results": [[m[:request.top_k] for m in r] for r in results]}

    if "classify" in encoder.kinds:
        @app.post("/v1/classify")
        async def classify(request: TextsRequest):
            results, _ = await answer("classify", request.input)
            return {"results": results}


def build_app(encoder: Encoder, options: ServeOptions):
    """The FastAPI application serving ``encoder`` (its batcher starts with the app and stops at shutdown)."""
    from fastapi import FastAPI

    max_tokens = options.max_tokens or default_max_tokens(encoder.config.hidden_size)
    state = {}

    @asynccontextmanager
    async def lifespan(app):
        state["batcher"] = Batcher(functools.partial(answer_batch, encoder),
                                   max_batch_tokens=options.max_batch_tokens, queue_size=options.queue_size,
                                   wait_s=options.batch_wait_ms / 1000)
        yield
        state["batcher"].close()  # requests in flight were answered by uvicorn's graceful shutdown
        print("avey-b serve: shut down", flush=True)

    app = FastAPI(title="avey-b serve", lifespan=lifespan)
    _add_error_handlers(app)
    _add_routes(app, encoder, _answerer(encoder, state, max_tokens), options, max_tokens)
    app.state.max_tokens = max_tokens
    return app


def run(args: argparse.Namespace) -> int:
    """``avey-b serve MODEL``: load the model once, then serve until SIGTERM / Ctrl-C."""
    try:
        import uvicorn
    except ImportError:
        raise SystemExit("avey-b serve needs the serving extra: pip install 'avey-b[serve]'") from None
    options = configs.from_args(ServeOptions, args)
    encoder = Encoder(args.model, configs.from_args(LoadOptions, args)).load()
    encoder.tokenizer  # noqa: B018 -- its files are needed: an error now, not at the first request
    app = build_app(encoder, options)
    print(f"serving {args.model} ({encoder.runtime_name if encoder.onnx_file else encoder.architecture}: "
          f"{', '.join(encoder.kinds)}) on http://{options.host}:{options.port}; inputs up to "
          f"{app.state.max_tokens:,} tokens\n{encoder.describe()}", flush=True)
    encoder.watch_shared_cpu(lambda message: print(message, file=sys.stderr, flush=True),
                             "restart the server with --threads 1 (or one per idle core)")
    uvicorn.run(app, host=options.host, port=options.port, log_level="warning")
    return 0
