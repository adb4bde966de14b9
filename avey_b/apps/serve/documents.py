"""Embeddings computed as document states (:class:`avey_b.model.streaming.DocumentState`) on the batcher's thread,
a block of tokens at a time, so that other requests run between a long input's blocks, and through the prefix
cache (:class:`avey_b.inference.prefix.PrefixCache`), so that an input extending one the server has seen computes
only its new part: both as :class:`avey_b.inference.states.States` runs them.

Which inputs take this path (:meth:`Documents.steps`): ``embed`` inputs of more than one block (``--block-tokens``),
and, with the cache on, every ``embed`` input of at least ``--prefix-cache-min-tokens`` (default: a quarter of a
block, at least one split): shorter inputs run in padded batches, which is faster for many short inputs, and
recomputing them costs little; they are never stored. Each runs as a generator the batcher advances one block at a
time (:class:`avey_b.apps.serve.batcher.Batcher`), running the batches that wait between two blocks. With
``--block-tokens 0`` an input the cache takes is computed whole: all its new tokens in one step, between no other
batches. Its vector equals the full forward's (the state's pooled vector: float32 rounding apart).

Where a state cannot answer — the ONNX runtime, or a model whose later tokens reach earlier splits
(:func:`avey_b.inference.states.unavailable`) — every input runs whole, as one forward, and the start line says why.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from avey_b.apps.serve.batcher import Job
from avey_b.apps.serve.options import ServeOptions
from avey_b.inference.encoder import Encoder
from avey_b.inference.prefix import PrefixCache
from avey_b.inference.states import States, unavailable


class Documents:
    """The state path of an ``encoder`` served with ``options``: ``states`` (an
    :class:`~avey_b.inference.states.States` with the prefix cache, or None when inputs run whole), ``cache`` (its
    :class:`~avey_b.inference.prefix.PrefixCache`, or None when off), ``block`` (tokens a step computes, a whole
    number of splits; 0 when long inputs run whole), ``cached_from`` (the fewest tokens of an input the cache looks
    up and stores: ``--prefix-cache-min-tokens``, raised to one split) and ``off`` (why inputs run whole, or None).

    A state ranks and processes the new tokens of a step a block at a time; with ``--block-tokens 0``, the default
    block at a time (the model's chunk of processor rows on the device), never one split at a time."""

    def __init__(self, encoder: Encoder, options: ServeOptions):
        self.encoder = encoder
        config = encoder.config
        self.S = config.split_size
        self.off = ("the ONNX runtime runs whole inputs" if encoder.onnx_file else
                    "embeddings are not served" if "embed" not in encoder.kinds else unavailable(encoder))
        given = options.block_tokens or config.execution.processor_chunk_tokens_for(encoder.device.type)
        rounded = max(self.S, given // self.S * self.S)  # the block, whole splits (also with --block-tokens 0)
        self.block = 0 if self.off or options.block_tokens == 0 else rounded
        self.cache = (PrefixCache(options.prefix_cache_bytes, self.S)
                      if not self.off and options.prefix_cache_bytes else None)
        self.states = None if self.off else States(encoder, block_tokens=rounded, cache=self.cache)
        least = options.prefix_cache_min_tokens
        self.cached_from = max(self.S, rounded // 4 if least is None else least)

    def describe(self) -> str:
        """The start line's words on the state path: the cache and the block, or why inputs run whole."""
        if self.off:
            return f"prefix cache off and long inputs run whole (serve falls back to full encodes): {self.off}"
        cache = (f"prefix cache up to {self.cache.capacity:,} bytes (--prefix-cache-bytes) for inputs of "
                 f"{self.cached_from:,} tokens or more (--prefix-cache-min-tokens)" if self.cache
                 else "prefix cache off (--prefix-cache-bytes 0)")
        if not self.block:
            return f"{cache}; long inputs run whole (--block-tokens 0)"
        return f"{cache}; inputs over {self.block:,} tokens run {self.block:,} at a time, other requests between"

    def steps(self, job: Job) -> Iterator | None:
        """The generator that computes ``job`` a block at a time (with ``--block-tokens 0``: in one step; its value:
        the pooled vector, not normalized: :meth:`States.pooled_steps
        <avey_b.inference.states.States.pooled_steps>`), or None when the job runs in a batch. On a cache hit it sets
        ``job.saved``, the tokens the cache held for it."""
        if job.kind == "session":  # a session's change: its own steps (avey_b.apps.serve.sessions)
            return job.extra
        n = len(job.ids)
        wanted = self.block and n > self.block or self.cache and n >= self.cached_from
        if job.kind != "embed" or self.off or not wanted:
            return None

        def held(tokens: int) -> None:
            job.saved = tokens

        return self.states.pooled_steps(torch.tensor(job.ids, dtype=torch.long), self.block or None, on_hit=held)

    def vector(self, ids: list[int]) -> np.ndarray:
        """One input's vector through this path, all its steps at once (what the batcher would compute)."""
        steps = self.steps(Job("embed", ids))
        if steps is None:
            raise ValueError(f"an input of {len(ids)} tokens does not take the state path")
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
