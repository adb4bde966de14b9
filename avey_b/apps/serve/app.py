"""The server's application (:func:`build_app`: the routers, the middleware, the error handlers and the batcher's
lifespan) and the command's runner (:func:`run`); the routes are in :mod:`avey_b.apps.serve.routes_openai`,
:mod:`avey_b.apps.serve.routes_tei` and :mod:`avey_b.apps.serve.routes_server`; their reference is the manual's
page docs/reference/routes.md, generated from the schema (docs/routes_page.py)."""

import argparse
import functools
import logging
import os
import sys
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from avey_b import configs
from avey_b.apps.serve import routes_openai, routes_server, routes_sessions, routes_tei
from avey_b.apps.serve.batcher import Batcher
from avey_b.apps.serve.observe import Gate, Metrics, Traffic, error_body, log
from avey_b.apps.serve.openapi import openapi_schema
from avey_b.apps.serve.options import ServeOptions
from avey_b.apps.serve.service import Service
from avey_b.apps.serve.work import answer_batch
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions

#: the environment variable read for the API key when --api-key is not given
API_KEY_VARIABLE = "AVEY_B_API_KEY"


async def http_error(request, error: StarletteHTTPException) -> JSONResponse:
    """An HTTP error answered with :func:`error_body` (and the error's headers); the router's bare "Not Found" and
    "Method Not Allowed" name the request's method and path, and what the server has instead."""
    message, headers = str(error.detail), getattr(error, "headers", None)
    where = f"{request.method} {request.url.path}"
    if error.status_code == 404 and message == "Not Found":
        message = f"no route {where}: this server's routes and their bodies are listed at GET /openapi.json"
    elif error.status_code == 405 and message == "Method Not Allowed":
        message = f"{where}: the route has no {request.method}; it takes {(headers or {}).get('Allow', 'another')}"
    return JSONResponse(error_body(error.status_code, message), status_code=error.status_code, headers=headers)


async def invalid_request(request, error: RequestValidationError) -> JSONResponse:
    """An invalid request answered 422 with :func:`error_body`, every problem in one message."""
    problems = [{k: p[k] for k in ("type", "loc", "msg") if k in p} for p in error.errors()]
    message = "; ".join(f"{'.'.join(map(str, p['loc'][1:])) or 'body'}: {p['msg']}" for p in problems)
    return JSONResponse(error_body(422, message, jsonable_encoder(problems)), status_code=422)


@asynccontextmanager
async def lifespan(app: FastAPI):
    """The service's batcher runs while the app does; at shutdown it stops after the requests in flight are answered
    (uvicorn's graceful shutdown answers them first)."""
    service: Service = app.state.service
    options = service.options
    service.batcher = Batcher(functools.partial(answer_batch, service.encoder),
                              max_batch_tokens=options.max_batch_tokens, queue_size=options.queue_size,
                              wait_s=options.batch_wait_ms / 1000, steps=service.documents.steps)
    yield
    service.batcher.close()
    print("avey-b serve: shut down", flush=True)


def _version() -> str:
    try:
        return version("avey-b")
    except PackageNotFoundError:
        return "unknown"


def api_key_of(options: ServeOptions) -> str | None:
    """The API key: ``options.api_key``, else the environment's ``AVEY_B_API_KEY``, else None (no key asked)."""
    return options.api_key or os.environ.get(API_KEY_VARIABLE) or None


def build_app(encoder: Encoder, options: ServeOptions) -> FastAPI:
    """The FastAPI application serving ``encoder`` (its batcher starts with the app and stops at shutdown, after
    the requests in flight are answered). The API key is ``options.api_key``, else the environment's
    ``AVEY_B_API_KEY``. The routes find the service in ``app.state`` (:data:`avey_b.apps.serve.service.ServiceDep`)."""
    service = Service(encoder, options)
    metrics = Metrics(lambda: service.batcher.depth if service.batcher else 0, service.documents.cache,
                      None if service.sessions.off else service.sessions)
    # swagger_ui_oauth2_redirect_url=None: no /docs/oauth2-redirect page (the key is a bearer token, not OAuth2)
    app = FastAPI(title="avey-b serve", version=_version(), lifespan=lifespan, swagger_ui_oauth2_redirect_url=None,
                  exception_handlers={StarletteHTTPException: http_error, RequestValidationError: invalid_request})
    app.state.service, app.state.metrics, app.state.max_tokens = service, metrics, service.max_tokens
    app.state.traffic = Traffic()
    app.add_middleware(Gate, api_key=api_key_of(options), max_body_bytes=options.max_body_bytes, metrics=metrics,
                       traffic=app.state.traffic, body_timeout_s=options.body_timeout_s)
    for router in (routes_server.router, routes_openai.router, routes_sessions.router, routes_tei.router):
        app.include_router(router)
    app.openapi = functools.partial(openapi_schema, app)
    return app


def run(args: argparse.Namespace) -> int:
    """``avey-b serve MODEL``: load the model once, then serve until SIGTERM / Ctrl-C."""
    try:
        from avey_b.apps.serve import guard
    except ImportError:
        raise SystemExit("avey-b serve needs the serving extra: pip install 'avey-b[serve]'") from None
    options = configs.from_args(ServeOptions, args)
    open_warning = guard.check_exposure(options, api_key_of(options))  # before the model loads: a refusal at once
    logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(options.log_level.upper())
    load = configs.from_args(LoadOptions, args)
    if options.ray:
        return run_fleet(args.model, options, load, open_warning)
    encoder = Encoder(args.model, load).load()
    encoder.tokenizer  # noqa: B018 -- its files are needed: an error now, not at the first request
    app = build_app(encoder, options)
    service = app.state.service
    runtime = encoder.runtime_name if encoder.onnx_file else encoder.architecture
    print(f"serving {args.model} as {service.name!r} ({runtime}: {', '.join(encoder.kinds)}) on "
          f"http://{options.host}:{options.port}; inputs up to "
          f"{app.state.max_tokens:,} tokens; {service.documents.describe()}; {service.sessions.describe()}; "
          f"{service.openai_ids.describe()}\n"
          f"{encoder.describe()}"
          + (f"\n{open_warning}" if open_warning else ""), flush=True)
    encoder.watch_shared_cpu(lambda message: print(message, file=sys.stderr, flush=True),
                             "restart the server with --threads 1 (or one per idle core)")
    guard.server(app, options).run()
    return 0


def run_fleet(model: str, options: ServeOptions, load: LoadOptions, open_warning: str | None) -> int:
    """``avey-b serve --ray``: the app on Ray Serve (:mod:`avey_b.apps.serve.fleet`)."""
    try:
        from avey_b.apps.serve import fleet
    except ImportError:
        raise SystemExit("avey-b serve --ray needs Ray Serve: pip install 'avey-b[fleet]'") from None
    if options.state_store is None:
        print("avey-b serve --ray: without --state-store each replica keeps its own sessions, and a session whose "
              "replica goes is lost: share them through a directory (one machine) or redis://... (a cluster)",
              file=sys.stderr, flush=True)
    scaling = (f"{options.replicas} to {options.max_replicas} replicas (autoscaled)" if options.max_replicas
               else f"{options.replicas} replicas")

    def describe():
        print(f"serving {model} on Ray Serve: {scaling} of {options.replica_cpus:g} CPU each at "
              f"http://{options.host}:{options.port}, a session's requests kept on one replica by their "
              f"X-Session-Id header; sessions in {options.state_store or 'each replica only'}"
              + (f"\n{open_warning}" if open_warning else ""), flush=True)

    return fleet.run(model, options, load, build_app, describe)
