"""The server's application (:func:`build_app`) and the command's runner (:func:`run`); the routes are in
:mod:`avey_b.apps.serve.routes_openai` and :mod:`avey_b.apps.serve.routes_tei`, the package docstring is the
guide (``avey-b serve --help``)."""

import argparse  # no `from __future__ import annotations`: FastAPI reads the route signatures from live annotations
import functools
import logging
import os
import sys
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from avey_b import configs
from avey_b.apps.options import ServeOptions
from avey_b.apps.serve.batcher import Batcher
from avey_b.apps.serve.observe import Gate, Metrics, error_body, log
from avey_b.apps.serve.routes_openai import add_openai_routes
from avey_b.apps.serve.routes_tei import add_tei_routes
from avey_b.apps.serve.service import Service
from avey_b.apps.serve.work import answer_batch
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions

#: the environment variable read for the API key when --api-key is not given
API_KEY_VARIABLE = "AVEY_B_API_KEY"


def _add_error_handlers(app) -> None:
    """Answer HTTP errors and invalid requests (422, every problem in one message) with :func:`error_body`."""
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error):
        return JSONResponse(error_body(error.status_code, str(error.detail), error.detail),
                            status_code=error.status_code, headers=getattr(error, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request, error):
        problems = [{k: p[k] for k in ("type", "loc", "msg") if k in p} for p in error.errors()]
        message = "; ".join(f"{'.'.join(map(str, p['loc'][1:])) or 'body'}: {p['msg']}" for p in problems)
        return JSONResponse(error_body(422, message, jsonable_encoder(problems)), status_code=422)


def _version() -> str:
    try:
        return version("avey-b")
    except PackageNotFoundError:
        return "unknown"


def build_app(encoder: Encoder, options: ServeOptions):
    """The FastAPI application serving ``encoder`` (its batcher starts with the app and stops at shutdown, after
    the requests in flight are answered). The API key is ``options.api_key``, else the environment's
    ``AVEY_B_API_KEY``."""
    import torch
    from fastapi import FastAPI, Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    service = Service(encoder, options)

    @asynccontextmanager
    async def lifespan(app):
        service.batcher = Batcher(functools.partial(answer_batch, encoder),
                                  max_batch_tokens=options.max_batch_tokens, queue_size=options.queue_size,
                                  wait_s=options.batch_wait_ms / 1000)
        yield
        service.batcher.close()  # requests in flight were answered by uvicorn's graceful shutdown
        print("avey-b serve: shut down", flush=True)

    app = FastAPI(title="avey-b serve", version=_version(), lifespan=lifespan)
    metrics = Metrics(lambda: service.batcher.depth if service.batcher else 0)
    api_key = options.api_key or os.environ.get(API_KEY_VARIABLE) or None
    app.add_middleware(Gate, api_key=api_key, max_body_bytes=options.max_body_bytes, metrics=metrics)
    _add_error_handlers(app)
    config = encoder.config

    def limits() -> dict:
        return {"max_tokens": service.max_tokens, "max_input_chars": options.max_input_chars,
                "max_body_bytes": options.max_body_bytes, "max_request_inputs": options.max_request_inputs,
                "max_batch_tokens": options.max_batch_tokens, "queue_size": options.queue_size}

    def threads() -> int | None:
        return encoder.threads if encoder.onnx_file else torch.get_num_threads()

    @app.get("/health")
    def health():
        return {"status": "ok", "model": service.name, "architecture": encoder.architecture,
                "serves": encoder.kinds, **limits(), "device": str(encoder.device), "bf16": encoder.bf16,
                "threads": threads(), "onnx": encoder.onnx_file.name if encoder.onnx_file else None}

    def info() -> dict:
        """TEI's ``/info`` fields, then this server's."""
        if "rerank" in encoder.kinds:
            model_type = {"reranker": {"id2label": config.id2label, "label2id": config.label2id}}
        elif "classify" in encoder.kinds:
            model_type = {"classifier": {"id2label": config.id2label, "label2id": config.label2id}}
        else:
            model_type = {"embedding": {"pooling": "mean"}}
        return {"model_id": service.name, "model_sha": None,
                "model_dtype": "bfloat16" if encoder.bf16 else "float32", "model_type": model_type,
                "max_concurrent_requests": options.queue_size, "max_input_length": service.max_tokens,
                "max_batch_tokens": options.max_batch_tokens, "max_batch_requests": None,
                "max_client_batch_size": options.max_request_inputs, "tokenization_workers": None,
                "version": _version(), "architecture": encoder.architecture, "serves": encoder.kinds, **limits(),
                "hidden_size": config.hidden_size, "matryoshka_dimensions": service.matryoshka,
                "normalize_embeddings": bool(getattr(config, "normalize_embeddings", True)),
                "prompts": service.prompts, "device": str(encoder.device),
                "runtime": f"onnxruntime: {encoder.onnx_file.name}" if encoder.onnx_file else "eager",
                "threads": threads()}

    @app.get("/metrics")
    def prometheus():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    add_openai_routes(app, service)
    add_tei_routes(app, service, info)
    app.state.service = service
    app.state.max_tokens = service.max_tokens
    return app


def run(args: argparse.Namespace) -> int:
    """``avey-b serve MODEL``: load the model once, then serve until SIGTERM / Ctrl-C."""
    try:
        import uvicorn
    except ImportError:
        raise SystemExit("avey-b serve needs the serving extra: pip install 'avey-b[serve]'") from None
    options = configs.from_args(ServeOptions, args)
    logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(options.log_level.upper())
    encoder = Encoder(args.model, configs.from_args(LoadOptions, args)).load()
    encoder.tokenizer  # noqa: B018 -- its files are needed: an error now, not at the first request
    app = build_app(encoder, options)
    service = app.state.service
    print(f"serving {args.model} as {service.name!r} ({encoder.runtime_name if encoder.onnx_file else encoder.architecture}: "
          f"{', '.join(encoder.kinds)}) on http://{options.host}:{options.port}; inputs up to "
          f"{app.state.max_tokens:,} tokens\n{encoder.describe()}", flush=True)
    encoder.watch_shared_cpu(lambda message: print(message, file=sys.stderr, flush=True),
                             "restart the server with --threads 1 (or one per idle core)")
    uvicorn.run(app, host=options.host, port=options.port, log_level=options.log_level, access_log=False)
    return 0
