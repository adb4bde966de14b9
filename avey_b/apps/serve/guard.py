"""What keeps the server's doors shut, around uvicorn: no start on a network address without an API key (unless
``--allow-no-key-on-network``), a bound on the time from a request's first byte to its complete headers
(:class:`TimedH11`: uvicorn bounds only idle keep-alive connections; the body's time is bounded by
:class:`avey_b.apps.serve.observe.Gate`), a limit on connections, and the draining at shutdown
(:class:`DrainingServer`: after SIGTERM new requests get 503 with ``Connection: close`` while the requests in flight
are answered; only then does the port close)."""

from __future__ import annotations

import ipaddress
import signal
import time

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from avey_b.apps.serve.observe import Traffic, log
from avey_b.apps.serve.options import ServeOptions

#: host names that reach this machine only
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is reachable from this machine only."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another name, or "" (every address): reachable from the network


def check_exposure(options: ServeOptions, api_key: str | None) -> str | None:
    """Refuse (SystemExit) to serve with no API key on an address others can reach, unless the options allow it;
    where they do, the warning the start line carries (None: a key, or an address of this machine only)."""
    if api_key or is_loopback(options.host):
        return None
    if options.allow_no_key_on_network:
        return (f"warning: open to the network: no API key on --host {options.host!r} (--allow-no-key-on-network): "
                "anyone who can reach it can use the model")
    raise SystemExit(f"avey-b serve: refusing to serve with no API key on --host {options.host!r}, an address other "
                     "machines can reach: anyone there could use the model. Give a key (AVEY_B_API_KEY=... or "
                     "--api-key), serve on 127.0.0.1, or accept the risk with --allow-no-key-on-network")


class TimedH11(H11Protocol):
    """uvicorn's h11 protocol, with a connection closed when a request's headers are not complete within
    ``header_timeout`` seconds of the connection's opening or of the request's first byte (uvicorn waits forever for
    them: a client that sends its headers a byte a second would hold the connection)."""

    header_timeout = 30.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def data_received(self, data: bytes) -> None:
        waiting = getattr(self, "_header_timer", None)
        if waiting is None and self.conn.their_state is h11.IDLE:  # a new request's first bytes
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def connection_lost(self, exc) -> None:
        if getattr(self, "_header_timer", None) is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first SIGTERM / SIGINT starts a drain (``traffic.draining``: the app answers new
    requests 503 with ``Connection: close``) that lasts at least ``drain_s`` seconds and until no request is in
    flight; then uvicorn's own shutdown runs (the port closes, idle connections close, the app's lifespan ends). A
    second signal during the drain ends it at once."""

    def __init__(self, config: uvicorn.Config, traffic: Traffic, drain_s: float):
        super().__init__(config)
        self.traffic, self.drain_s, self.drain_started = traffic, drain_s, None

    def handle_exit(self, sig: int, frame) -> None:
        if self.drain_started is None and sig in (signal.SIGTERM, signal.SIGINT):
            self._captured_signals.append(sig)  # re-raised at exit, as uvicorn does
            self.drain_started, self.traffic.draining = time.monotonic(), True
            log.warning("draining after %s: new requests get 503; waiting for the %d in flight, at least %g s "
                        "(--drain-s); a second signal stops at once", signal.Signals(sig).name,
                        self.traffic.in_flight, self.drain_s)
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if (self.drain_started is not None and not self.should_exit and self.traffic.in_flight == 0
                and time.monotonic() - self.drain_started >= self.drain_s):
            self.should_exit = True
            log.warning("drained after %.1f s: shutting down", time.monotonic() - self.drain_started)
        return await super().on_tick(counter)


def server(app, options: ServeOptions) -> DrainingServer:
    """The uvicorn server for ``app`` (built by :func:`avey_b.apps.serve.app.build_app`) with the options' timeouts,
    connection limit and drain."""
    protocol = type("TimedH11", (TimedH11,), {"header_timeout": options.body_timeout_s})
    config = uvicorn.Config(app, host=options.host, port=options.port, log_level=options.log_level, access_log=False,
                            http=protocol, timeout_keep_alive=options.keep_alive_s,
                            limit_concurrency=options.max_connections, server_header=False)
    return DrainingServer(config, app.state.traffic, options.drain_s)
