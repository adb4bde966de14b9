"""A prefix cache: the document states (:class:`avey_b.model.streaming.DocumentState`) of inputs encoded before,
found again by their token ids split by split, as a paged KV cache finds its blocks (``avey-b serve``'s, through
:class:`avey_b.inference.states.States`).

Each full split of an input gets a key chained over the ids of every split up to it (the hash of the previous key
and the split's ids), so equal keys mean equal prefixes (and the ids are compared again on a hit: a hash collision
is a miss, never a wrong answer). A lookup takes the longest cached prefix of whole splits: a copy of the state that
holds it, cut to that prefix, which the caller feeds the rest. An input equal to a cached one gets its vector back.

The cache is bounded in bytes (what :attr:`DocumentState.nbytes` counts, plus the kept vector) and evicts the least
recently used state; a state whose every prefix a newer one holds is dropped (superseded: the newer one answers for
it). Every operation holds one lock: threads share it (serve's batcher worker and its ``/metrics`` scrapes).
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from avey_b.model.streaming import DocumentState


@dataclass(eq=False)
class Entry:
    """One cached document: its state (trimmed to its size), its pooled vector (not normalized), the chain keys of
    its full splits that still point to it, and the bytes it holds."""

    state: DocumentState
    vector: np.ndarray
    whole: tuple
    keys: list = field(default_factory=list)
    nbytes: int = 0


@dataclass
class Found:
    """What a lookup found: ``vector`` (an input equal to a cached one), else ``state`` (a copy holding the first
    ``matched`` tokens, to be fed the rest) or nothing (``matched`` 0)."""

    matched: int = 0
    state: DocumentState | None = None
    vector: np.ndarray | None = None


class PrefixCache:
    """Document states of at most ``capacity`` bytes, for splits of ``split_size`` tokens, least recently used
    evicted first. Counters (:meth:`stats`): lookups that found a prefix (``hits``) or none (``misses``), tokens
    not computed thanks to a hit (``tokens_saved``), tokens computed for the inputs looked up (``tokens_computed``,
    told by :meth:`store`), ``evictions``, and the ``bytes`` and ``entries`` held."""

    def __init__(self, capacity: int, split_size: int):
        if capacity < 1:
            raise ValueError(f"a prefix cache needs a capacity of at least 1 byte, got {capacity}")
        self.capacity, self.S = capacity, split_size
        self.lock = threading.Lock()
        self.entries: collections.OrderedDict[int, Entry] = collections.OrderedDict()  # least recently used first
        self.index: dict[int, Entry] = {}  # chain key of a prefix of whole splits -> the newest entry holding it
        self.wholes: dict[tuple, Entry] = {}  # (last chain key, tail ids) -> the entry of exactly these ids
        self.bytes = 0
        self.counts = dict.fromkeys(("hits", "misses", "tokens_saved", "tokens_computed", "evictions"), 0)

    # ------------------------------------------------------------------ keys
    def chain(self, ids: torch.Tensor) -> list[int]:
        """The chain key of each full split of ``ids``: key ``j`` stands for the first ``j + 1`` splits."""
        keys, key = [], 0
        full = ids[:ids.numel() // self.S * self.S].view(-1, self.S).tolist()
        for split in full:
            key = hash((key, tuple(split)))
            keys.append(key)
        return keys

    def _whole(self, ids: torch.Tensor, keys: list[int]) -> tuple:
        return (keys[-1] if keys else 0, ids.numel(), tuple(ids[len(keys) * self.S:].tolist()))

    # ------------------------------------------------------------------ use
    def lookup(self, ids: torch.Tensor) -> Found:
        """The longest cached prefix of ``ids`` (1-D, int64) in whole splits, or the vector of an equal input
        (counted as a hit, with the tokens it saves); a miss finds nothing."""
        keys = self.chain(ids)
        with self.lock:
            entry = self.wholes.get(self._whole(ids, keys))
            if entry is not None and torch.equal(entry.state.ids.long(), ids):
                return self._hit(entry, Found(ids.numel(), vector=entry.vector))
            for j in range(len(keys) - 1, -1, -1):
                entry = self.index.get(keys[j])
                n = (j + 1) * self.S
                if entry is not None and torch.equal(entry.state.ids[:n].long(), ids[:n]):
                    state = entry.state.copy()
                    if state.length > n:
                        state.truncate(n)
                    return self._hit(entry, Found(n, state=state))
            self.counts["misses"] += 1
            return Found()

    def _hit(self, entry: Entry, found: Found) -> Found:
        self.entries.move_to_end(id(entry))
        self.counts["hits"] += 1
        self.counts["tokens_saved"] += found.matched
        return found

    def store(self, ids: torch.Tensor, state: DocumentState, vector: np.ndarray, computed: int) -> None:
        """Keep ``state`` (of ``ids``, a copy is kept) and its ``vector``; ``computed``: the tokens computed for
        it. A state larger than the whole capacity is not kept; older states are evicted until the rest fits."""
        keys = self.chain(ids)
        kept = state.copy()
        size = kept.nbytes + vector.nbytes
        with self.lock:
            self.counts["tokens_computed"] += computed
            if size > self.capacity or not keys:
                return
            entry = Entry(kept, vector, self._whole(ids, keys), keys, size)
            if (old := self.wholes.get(entry.whole)) is not None:
                self._drop(old)
            superseded = {id(e): e for k in keys if (e := self.index.get(k)) is not None}
            self.entries[id(entry)] = entry
            self.wholes[entry.whole] = entry
            for k in keys:
                self.index[k] = entry
            self.bytes += size
            for old in superseded.values():  # every prefix of theirs now points here: this state answers for them
                if not any(self.index.get(k) is old for k in old.keys):
                    self._drop(old)
            while self.bytes > self.capacity:
                self._drop(next(iter(self.entries.values())))
                self.counts["evictions"] += 1

    def _drop(self, entry: Entry) -> None:
        del self.entries[id(entry)]
        self.bytes -= entry.nbytes
        if self.wholes.get(entry.whole) is entry:
            del self.wholes[entry.whole]
        for k in entry.keys:
            if self.index.get(k) is entry:
                del self.index[k]

    def stats(self) -> dict[str, int]:
        """The counters, and the ``bytes`` and ``entries`` held now."""
        with self.lock:
            return {**self.counts, "bytes": self.bytes, "entries": len(self.entries)}
