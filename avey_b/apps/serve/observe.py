"""What wraps every request: the drain at shutdown, the API key, the cap on body bytes and on the time to send the
body, one access-log line, and the Prometheus metrics (``prometheus-client``, a registry of the app's own, served at
``GET /metrics``)."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

#: the access log (one line per request at info) and the server's messages
log = logging.getLogger("avey_b.serve")

#: routes reachable without the API key: the health check, and the API's schema (what a client needs to know to call
#: it, nothing of the model's answers)
OPEN_PATHS = ("/health", "/openapi.json")


class Metrics:
    """The server's Prometheus metrics: requests by method, route and status; latency by route; inputs and tokens
    run through the model (a request's tokens less those the prefix cache held) by route; inputs waiting for the
    model (read from ``depth()`` at each scrape); and the prefix cache's counters when it is on (``cache``:
    :class:`avey_b.inference.prefix.PrefixCache`, read at each scrape)."""

    def __init__(self, depth, cache=None, sessions=None):
        self.registry = CollectorRegistry()
        self.requests = Counter("avey_b_requests", "HTTP requests answered", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("avey_b_request_duration_seconds", "time from a request's start to its answer",
                                 ["route"], registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.inputs = Counter("avey_b_inputs", "inputs received (texts, token-id lists, documents)", ["route"],
                              registry=self.registry)
        self.tokens = Counter("avey_b_tokens", "tokens run through the model: the requests' tokens less those the "
                              "prefix cache held (counted in avey_b_prefix_cache_tokens_saved_total)", ["route"],
                              registry=self.registry)
        self.queue = Gauge("avey_b_queue_inputs", "inputs waiting for the model", registry=self.registry)
        self.queue.set_function(depth)
        if cache is not None:
            self.registry.register(CacheCollector(cache))
        if sessions is not None:
            self.registry.register(SessionsCollector(sessions))


class SessionsCollector:
    """The sessions' counters (``avey_b_session_*``: :meth:`avey_b.apps.serve.sessions.Sessions.stats`), read at
    each scrape."""

    COUNTERS = {"changes": "sessions made or changed", "splits_computed": "splits the sessions' changes computed",
                "store_reads": "session records read from the state store (a session not warm, or changed on "
                               "another replica)", "store_writes": "session records written to the state store",
                "conflicts": "changes refused with 409 (another version, or another writer first)"}

    def __init__(self, sessions):
        self.sessions = sessions

    def collect(self):
        stats = self.sessions.stats()
        for name, text in self.COUNTERS.items():
            yield CounterMetricFamily(f"avey_b_session_{name}", text, value=stats[name])
        yield GaugeMetricFamily("avey_b_session_warm", "sessions held in memory", value=stats["warm"])
        yield GaugeMetricFamily("avey_b_session_warm_bytes", "bytes of the sessions held in memory",
                                value=stats["bytes"])


class CacheCollector:
    """The prefix cache's counters as Prometheus metrics (``avey_b_prefix_cache_*``), read at each scrape."""

    COUNTERS = {"hits": "lookups that found a cached prefix of whole splits (or the whole input)",
                "misses": "lookups that found none", "tokens_saved": "tokens not computed thanks to a hit",
                "tokens_computed": "tokens computed for the inputs looked up", "evictions": "states evicted (LRU)"}

    def __init__(self, cache):
        self.cache = cache

    def collect(self):
        stats = self.cache.stats()
        for name, text in self.COUNTERS.items():
            yield CounterMetricFamily(f"avey_b_prefix_cache_{name}", text, value=stats[name])
        yield GaugeMetricFamily("avey_b_prefix_cache_bytes", "bytes of document states held", value=stats["bytes"])
        yield GaugeMetricFamily("avey_b_prefix_cache_entries", "document states held", value=stats["entries"])


def error_body(status: int, message: str, detail=None) -> dict:
    """FastAPI's ``detail`` beside the OpenAI API's ``error`` object, whose message the openai SDK shows."""
    kind = {401: "authentication_error", 404: "not_found_error"}.get(status, "invalid_request_error" if status < 500
                                                                    else "server_error")
    return {"detail": message if detail is None else detail,
            "error": {"message": message, "type": kind, "param": None, "code": None}}


class BodyTooLarge(Exception):
    pass


class BodyTooSlow(Exception):
    pass


class Traffic:
    """The requests in flight (passed to the routes), and whether the server drains (after SIGTERM: every new
    request is answered 503; :class:`avey_b.apps.serve.guard.DrainingServer`)."""

    def __init__(self):
        self.in_flight, self.draining = 0, False


class Gate:
    """ASGI middleware, outermost but for the server-error handler: refuses every request while the server drains
    (503, ``Connection: close``), a request without the API key (401, saying whether the key is missing, malformed
    or wrong; the key is compared in constant time and never repeated), with a body over ``max_body_bytes`` (413: by
    its Content-Length before reading it, else while reading it) or whose body has not all arrived
    ``body_timeout_s`` after its headers (408); the last two close the connection. Then it writes the access-log
    line and the metrics of every answer."""

    def __init__(self, app, *, api_key: str | None, max_body_bytes: int, metrics: Metrics, traffic: Traffic,
                 body_timeout_s: float):
        self.app, self.api_key, self.max_body_bytes, self.metrics = app, api_key, max_body_bytes, metrics
        self.traffic, self.body_timeout_s = traffic, body_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]
        headers = dict(scope["headers"])
        state = scope.setdefault("state", {})

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        async def refuse(code: int, message: str, extra: dict | None = None):
            body = json.dumps(error_body(code, message)).encode()
            await send_status({"type": "http.response.start", "status": code, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                *((k.encode(), v.encode()) for k, v in (extra or {}).items())]})
            await send({"type": "http.response.body", "body": body})

        try:
            length = headers.get(b"content-length")
            refusal = self.refusal(headers) if self.api_key and scope["path"] not in OPEN_PATHS else None
            if self.traffic.draining:
                await refuse(503, "the server is shutting down: retry on another instance or once it is back",
                             {"connection": "close", "retry-after": "1"})
            elif refusal:
                await refuse(401, refusal, {"www-authenticate": "Bearer"})
            elif length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                await refuse(413, self.too_large(f"{int(length):,} bytes"), {"connection": "close"})
            else:
                await self.admit(scope, self.bounded(receive, started), send_status, refuse)
        finally:
            self.record(scope, state, status[0], time.perf_counter() - started)

    def bounded(self, receive, started: float):
        """``receive`` that raises :class:`BodyTooLarge` past ``max_body_bytes`` and :class:`BodyTooSlow` when the
        body is not complete ``body_timeout_s`` after ``started``."""
        read, complete = 0, False

        async def counted():
            nonlocal read, complete
            if complete:  # after the body, only the disconnect is left to wait for: no bound
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), started + self.body_timeout_s - time.perf_counter())
            except TimeoutError:
                raise BodyTooSlow from None
            read += len(message.get("body", b""))
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            if read > self.max_body_bytes:
                raise BodyTooLarge
            return message

        return counted

    async def admit(self, scope, receive, send, refuse) -> None:
        """Pass the request to the app (counted in flight), answering 413 / 408 when its body breaks a bound."""
        self.traffic.in_flight += 1
        try:
            await self.app(scope, receive, send)
        except BodyTooLarge:
            await refuse(413, self.too_large(f"more than {self.max_body_bytes:,} bytes"), {"connection": "close"})
        except BodyTooSlow:
            await refuse(408, f"the request body did not arrive within this server's --body-timeout-s "
                              f"{self.body_timeout_s:g} seconds: send it at once", {"connection": "close"})
        finally:
            self.traffic.in_flight -= 1

    def too_large(self, size: str) -> str:
        return (f"the request body has {size}, more than this server's --max-body-bytes {self.max_body_bytes:,}: "
                "send fewer or shorter inputs per request, or raise the limit")

    def refusal(self, headers: dict) -> str | None:
        """Why a request's ``Authorization`` header does not pass (None: it does): no key sent, a header of another
        form, or a key that is not the server's. The key itself is never repeated, here or in the log."""
        header = headers.get(b"authorization")
        if header is None:
            return "missing API key: this server needs one; send the header `Authorization: Bearer KEY`"
        scheme, _, key = header.decode("latin-1").strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return "malformed Authorization header: send `Authorization: Bearer KEY` (Bearer, a space, the key)"
        if not hmac.compare_digest(key.strip().encode(), self.api_key.encode()):
            return "invalid API key: the key sent in `Authorization: Bearer ...` is not this server's --api-key"
        return None

    def record(self, scope, state: dict, status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", None) or "unmatched"  # a path template: bounded label values
        inputs, tokens = state.get("inputs"), state.get("tokens")
        self.metrics.requests.labels(scope["method"], route, str(status)).inc()
        self.metrics.latency.labels(route).observe(seconds)
        if inputs is not None:
            self.metrics.inputs.labels(route).inc(inputs)
            self.metrics.tokens.labels(route).inc(tokens - state.get("saved", 0))
        log.info("%s %s %d inputs=%s tokens=%s %.1f ms", scope["method"], scope["path"], status,
                 "-" if inputs is None else inputs, "-" if tokens is None else tokens, seconds * 1000)
