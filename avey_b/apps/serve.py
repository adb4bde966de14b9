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
``model.int8.onnx``): same batching, limits and errors; the directory gives the config and the tokenizer.

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
import queue
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from avey_b.utils.batching import (
    BYTES_PER_TOKEN_PER_WIDTH,
    default_max_tokens,
    pad_right,
    token_budget_batches,
)


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


class Service:
    """The model, its tokenizer and what it can answer."""

    def __init__(self, path: str, device: str = "auto", precision: str = "auto"):
        from transformers import AutoConfig, AutoTokenizer

        import avey_b
        from avey_b.utils.device import pick_device, use_bf16
        from avey_b.utils.files import model_source

        with model_source(path):
            config = AutoConfig.from_pretrained(path)
        if getattr(config, "model_type", None) != "avey-b":
            raise ValueError(f"{path} holds a {getattr(config, 'model_type', None)!r} model: avey-b serve serves Avey-B")
        architecture = (config.architectures or ["AveyBModel"])[0]
        cls = getattr(avey_b, architecture, None) or avey_b.AveyBModel
        self.device = pick_device(device)
        self.model = cls.from_pretrained(path).to(self.device).eval()
        self.backbone = getattr(self.model, "model", self.model)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.name, self.config, self.architecture = path, self.model.config, architecture
        self.bf16 = use_bf16(precision, self.device)
        self.kinds = ["embed"] + (["fill"] if architecture == "AveyBForMaskedLM" else []) + (
            ["classify"] if architecture == "AveyBForSequenceClassification" else [])

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, truncation=False)["input_ids"]

    def check_ids(self, ids: list[list[int]]) -> None:
        """Token ids given by the client must index the model's embedding table (``ValueError`` naming the first
        that does not)."""
        vocab = self.config.vocab_size
        for i, row in enumerate(ids):
            if not row:
                raise ValueError(f"input {i} holds no token ids")
            for token in row:
                if not 0 <= token < vocab:
                    raise ValueError(f"input {i}: token id {token} is outside this model's vocabulary of {vocab:,} "
                                     f"ids (0 to {vocab - 1:,})")

    @torch.no_grad()
    def run(self, kind: str, ids: list[list[int]]) -> list:
        batch, mask = pad_right(ids, self.tokenizer.pad_token_id)
        if kind == "embed":
            return list(self.embed(batch, mask).float().cpu().numpy())
        logits = self.logits(batch, mask)
        if kind == "classify":
            probs = logits.softmax(-1).cpu()
            names = self.config.id2label
            return [{"label": names[int(p.argmax())], "scores": {names[i]: float(v) for i, v in enumerate(p)}}
                    for p in probs]
        out = []  # fill: the top tokens at each [MASK] of each input
        for i, row in enumerate(ids):
            per_mask = []
            for position in (p for p, token in enumerate(row) if token == self.tokenizer.mask_token_id):
                scores, tokens = logits[i, position].softmax(-1).topk(min(50, logits.shape[-1]))  # top_k <= 50
                per_mask.append([{"token": self.tokenizer.decode([int(t)]).strip(), "score": float(v)}
                                 for v, t in zip(scores, tokens, strict=True)])
            out.append(per_mask)
        return out

    def embed(self, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, d) embeddings of a padded batch: masked mean pooling of the backbone, normalized per the config."""
        from avey_b.model.heads import sentence_embedding
        from avey_b.utils.device import autocast

        batch, mask = batch.to(self.device), mask.to(self.device)
        with autocast(self.device, self.bf16):
            hidden = self.backbone(input_ids=batch, attention_mask=mask).last_hidden_state
            return sentence_embedding(hidden, mask, self.config.normalize_embeddings)

    def logits(self, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The head's float32 logits of a padded batch (on the CPU)."""
        from avey_b.utils.device import autocast

        with autocast(self.device, self.bf16):
            return self.model(input_ids=batch.to(self.device), attention_mask=mask.to(self.device)).logits.float().cpu()


class OnnxService(Service):
    """The same answers from an exported ONNX model (``avey-b export``, fp32 or ``--quantize int8``) run by
    onnxruntime on the CPU; the directory gives the config and the tokenizer. What it serves follows the graph's
    outputs: embeddings from ``sentence_embedding`` (an ``--head embedding`` export) or from ``last_hidden_state``
    (pooled as for the eager model); fill-mask or classification from ``logits`` of a masked-LM or classifier."""

    def __init__(self, path: str, onnx_file: str | None = None, threads: int | None = None):
        from pathlib import Path

        import onnxruntime as ort
        from transformers import AutoConfig, AutoTokenizer

        from avey_b.utils.files import model_source

        with model_source(path):
            config = AutoConfig.from_pretrained(path)
        if getattr(config, "model_type", None) != "avey-b":
            raise ValueError(f"{path} holds a {getattr(config, 'model_type', None)!r} model: avey-b serve serves Avey-B")
        file = Path(onnx_file) if onnx_file else Path(path) / "onnx" / "model.onnx"
        if not file.is_file():
            raise FileNotFoundError(f"no ONNX model at {file}" + ("" if onnx_file else
                                    f" (write one with `avey-b export {path} {path} --head embedding`, or name the "
                                    "file: --onnx FILE)"))
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]
        if [i.name for i in self.session.get_inputs()] != ["input_ids", "attention_mask"]:
            raise ValueError(f"{file}: inputs {[i.name for i in self.session.get_inputs()]}, not input_ids and "
                             "attention_mask: not an `avey-b export` model")
        self.architecture = (config.architectures or ["AveyBModel"])[0]
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.name, self.config, self.onnx_file = path, config, file
        self.device, self.bf16 = torch.device("cpu"), False
        embed = "sentence_embedding" in self.outputs or "last_hidden_state" in self.outputs
        logits = "logits" in self.outputs
        self.kinds = (["embed"] if embed else []) + (
            ["fill"] if logits and self.architecture == "AveyBForMaskedLM" else []) + (
            ["classify"] if logits and self.architecture == "AveyBForSequenceClassification" else [])
        if not self.kinds:
            raise ValueError(f"{file}: outputs {self.outputs} answer nothing for a {self.architecture}: export "
                             "it with --head embedding (embeddings), masked-lm or sequence-classification")

    def _run(self, name: str, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.session.run([name], {"input_ids": batch.numpy(), "attention_mask": mask.numpy()})[0]
        return torch.from_numpy(out)

    def embed(self, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from avey_b.model.heads import sentence_embedding

        if "sentence_embedding" in self.outputs:
            return self._run("sentence_embedding", batch, mask)
        return sentence_embedding(self._run("last_hidden_state", batch, mask), mask,
                                  self.config.normalize_embeddings)

    def logits(self, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self._run("logits", batch, mask).float()


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


def _answerer(service: Service, state: dict, max_tokens: int):
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
            ids = service.encode(given)
        else:
            ids = [given] if isinstance(given[0], int) else given
            try:
                service.check_ids(ids)
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


def _add_routes(app, service: Service, answer, *, max_tokens: int, max_batch_tokens: int) -> None:
    """``GET /health``, ``POST /v1/embeddings``, and ``/v1/fill-mask`` or ``/v1/classify`` where the checkpoint
    serves them, each answered through ``answer`` (:func:`_answerer`)."""
    from fastapi import HTTPException

    EmbeddingRequest, TextsRequest = _request_models()

    @app.get("/health")
    def health():
        return {"status": "ok", "model": service.name, "architecture": service.architecture,
                "serves": service.kinds, "max_tokens": max_tokens, "max_batch_tokens": max_batch_tokens,
                "device": str(service.device), "bf16": service.bf16,
                "onnx": str(service.onnx_file) if isinstance(service, OnnxService) else None}

    encodings = {"float": lambda v: v.tolist(),  # float32 values, as JSON numbers
                 "base64": lambda v: base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")}

    @app.post("/v1/embeddings")
    async def embeddings(request: EmbeddingRequest):
        if request.encoding_format not in encodings:
            raise HTTPException(400, f"encoding_format must be one of {sorted(encodings)}, got "
                                     f"{request.encoding_format!r}")
        if request.dimensions not in (None, service.config.hidden_size):
            raise HTTPException(400, f"this model's embeddings have {service.config.hidden_size} dimensions; "
                                     f"dimensions={request.dimensions} (shortened embeddings) is not supported")
        vectors, tokens = await answer("embed", request.input)
        encode = encodings[request.encoding_format]
        return {"object": "list", "model": request.model or service.name,
                "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    if "fill" in service.kinds:
        @app.post("/v1/fill-mask")
        async def fill_mask(request: TextsRequest):
            texts = [request.input] if isinstance(request.input, str) else request.input
            if any(service.tokenizer.mask_token not in t for t in texts):
                raise HTTPException(400, f"every input needs at least one {service.tokenizer.mask_token}")
            results, _ = await answer("fill", request.input)
            return {"results": [[m[:request.top_k] for m in r] for r in results]}

    if "classify" in service.kinds:
        @app.post("/v1/classify")
        async def classify(request: TextsRequest):
            results, _ = await answer("classify", request.input)
            return {"results": results}


def build_app(service: Service, *, max_tokens: int, max_batch_tokens: int = 32_768, queue_size: int = 256,
              batch_wait_ms: float = 0.0):
    """The FastAPI application for ``service`` (its batcher starts with the app and stops at shutdown)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    state = {}

    @asynccontextmanager
    async def lifespan(app):
        state["batcher"] = Batcher(service.run, max_batch_tokens=max_batch_tokens,
                                   queue_size=queue_size, wait_s=batch_wait_ms / 1000)
        yield
        state["batcher"].close()  # requests in flight were answered by uvicorn's graceful shutdown
        print("avey-b serve: shut down", flush=True)

    app = FastAPI(title="avey-b serve", lifespan=lifespan)
    _add_error_handlers(app)
    _add_routes(app, service, _answerer(service, state, max_tokens), max_tokens=max_tokens,
                max_batch_tokens=max_batch_tokens)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="avey-b serve", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("model", help="a saved Avey-B (local directory or Hub id) with its tokenizer")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="longest input accepted (longer: 413, never cut); default: what the memory allows, half the "
                        f"available memory at {BYTES_PER_TOKEN_PER_WIDTH}·d bytes per token (about 1M tokens for "
                        "d = 256 with 12 GB free)")
    p.add_argument("--max-batch-tokens", type=int, default=32_768,
                   help="padded tokens per batch (a single longer input runs alone)")
    p.add_argument("--queue-size", type=int, default=256, help="inputs waiting at most; past it: 503")
    p.add_argument("--batch-wait-ms", type=float, default=0.0,
                   help="how long the batcher waits for more inputs after the first (default 0: it takes what queued "
                        "while the previous batch ran; measured in benchmarks/serve/, a 5 ms wait only slowed one "
                        "client)")
    p.add_argument("--onnx", nargs="?", const="", default=None, metavar="FILE",
                   help="run an exported ONNX model with onnxruntime (CPU) instead of the eager model: FILE (e.g. "
                        "MODEL/onnx/model.int8.onnx from `avey-b export --quantize int8`), or MODEL/onnx/model.onnx "
                        "when FILE is left out; MODEL gives the config and tokenizer")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime's threads with --onnx (default: its own)")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    args = p.parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        raise SystemExit("avey-b serve needs the serving extra: pip install 'avey-b[serve]'") from None
    if args.onnx is not None:
        if args.device not in ("auto", "cpu") or args.precision == "bf16":
            p.error("--onnx runs the exported model on the CPU in its own precision: drop --device / --precision bf16")
        service = OnnxService(args.model, args.onnx or None, args.threads)
    elif args.threads is not None:
        p.error("--threads sets onnxruntime's threads: use it with --onnx")
    else:
        service = Service(args.model, args.device, args.precision)
    max_tokens = args.max_tokens or default_max_tokens(service.config.hidden_size)
    app = build_app(service, max_tokens=max_tokens, max_batch_tokens=args.max_batch_tokens,
                    queue_size=args.queue_size, batch_wait_ms=args.batch_wait_ms)
    runner = f"onnxruntime: {service.onnx_file}" if args.onnx is not None else service.architecture
    print(f"serving {args.model} ({runner}: {', '.join(service.kinds)}) on http://{args.host}:{args.port}"
          f"; inputs up to {max_tokens:,} tokens", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
