"""``avey-b serve --ray``: the same server as a Ray Serve deployment — the same FastAPI app and routes in each of
``--replicas`` replicas (autoscaled up to ``--max-replicas``), behind Ray Serve's HTTP proxy on ``--host`` and
``--port``.

Sessions stay with a replica while it lives: requests that carry the session's id in the ``X-Session-Id`` header
(the ``openai`` SDK's ``extra_headers``) are routed by Ray Serve's consistent-hash request router
(``ray.serve.experimental.consistent_hash_router``), so a conversation's turns reach the replica that holds it warm;
when that replica is gone, or a request comes without the header, any replica resumes the session from the shared
``--state-store`` (Redis), exactly. Each answer names its replica in the ``X-Avey-B-Replica`` header.

The uvicorn settings of a single server (``--body-timeout-s``, ``--keep-alive-s``, ``--max-connections``,
``--drain-s``) are the proxy's business under Ray Serve; the rest of the options hold in every replica.
"""

from __future__ import annotations

import dataclasses
import signal
import threading

from ray import serve
from ray.serve.config import AutoscalingConfig, RequestRouterConfig

from avey_b.apps.serve.options import ServeOptions
from avey_b.inference.options import LoadOptions

#: the request router that keeps a session's requests on one replica (Ray Serve's, keyed on ``X-Session-Id``)
ROUTER = "ray.serve.experimental.consistent_hash_router.ConsistentHashRouter"
#: the answer header naming the replica that answered
REPLICA_HEADER = "x-avey-b-replica"


@serve.ingress()
class Replica:
    """One replica: the model loaded once, and the server's app (``build_app``: :func:`avey_b.apps.serve.build_app`,
    given by the caller, which this module does not import) built on it, its lifespan (the batcher) run by Ray
    Serve."""

    def __init__(self, model: str, options: ServeOptions, load: LoadOptions, build_app):
        from avey_b.inference.encoder import Encoder

        self.server = build_app(Encoder(model, load).load(), options)
        name = serve.get_replica_context().replica_id.to_full_id_str()

        @self.server.middleware("http")
        async def replica_header(request, call_next):
            answer = await call_next(request)
            answer.headers[REPLICA_HEADER] = name
            return answer

    def __serve_build_asgi_app__(self):
        return self.server


def application(model: str, options: ServeOptions, load: LoadOptions, build_app):
    """The Ray Serve application of ``model`` served with ``options`` (``replicas``, ``max_replicas``,
    ``replica_cpus``), each replica's app made by ``build_app`` (:func:`avey_b.apps.serve.build_app`): a deployment
    of :class:`Replica`, bound and ready for ``serve.run``."""
    scaling = {"num_replicas": options.replicas}
    if options.max_replicas is not None:
        scaling = {"autoscaling_config": AutoscalingConfig(min_replicas=options.replicas,
                                                           max_replicas=options.max_replicas,
                                                           initial_replicas=options.replicas)}
    deployment = serve.deployment(
        Replica, name="avey-b", ray_actor_options={"num_cpus": options.replica_cpus},
        request_router_config=RequestRouterConfig(request_router_class=ROUTER),
        max_ongoing_requests=max(1, options.max_connections), **scaling)
    return deployment.bind(model, options, load, build_app)


def run(model: str, options: ServeOptions, load: LoadOptions, build_app, describe) -> int:
    """Start (or join, with ``--ray-address``) a Ray cluster, run the application on ``--host``:``--port`` and
    serve until SIGTERM / Ctrl-C; ``describe()`` prints the start line."""
    import ray

    ray.init(address=options.ray_address, log_to_driver=False, include_dashboard=False)
    serve.start(http_options={"host": options.host, "port": options.port})
    replica_options = dataclasses.replace(options, ray=False)
    serve.run(application(model, replica_options, load, build_app), name="avey-b", route_prefix="/")
    describe()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    print("avey-b serve: shut down", flush=True)
    return 0
