"""Tokenize documents, join them with an end-of-text token, pack them into full-length sequences, and shard
the sequences over data-parallel ranks — resumably.

How the stream is built (the same on every rank, so it does not depend on the world size):

1. ``iter_documents`` yields ``(index, text)``; documents are grouped into *chunks* of ``chunk_docs``
   consecutive source documents.
2. ``DocumentChunks`` (an ``IterableDataset``) tokenizes chunk ``c`` in DataLoader worker ``c % W``; the
   DataLoader returns worker outputs round-robin, so chunks arrive in source order whatever ``W`` is.
   Documents of the other split are dropped inside the worker: held out by content hash
   (``heldout_fraction``), or, for huge streams where a small hashed fraction would mean reading far
   into the stream at every evaluation, the first ``heldout_docs`` documents.
3. ``PackedSequences`` (main process) appends ``doc + [eot]`` to a token buffer and cuts it into sequences
   of exactly ``seq_len`` tokens; documents are split across sequence boundaries, nothing is dropped.
4. Sharding: the global sequence stream is cut into *rounds* of ``world_size`` sequences; rank ``r`` keeps
   sequence ``r`` of every round (``shard_by="sequence"``). Every global sequence is used by exactly one
   rank, and a global batch holds the same sequences whatever the world size, which is what makes a
   2-process run equal a 1-process run with the same global batch. The cost: every rank reads and
   tokenizes the whole stream (tokenization is far cheaper than the model step; workers parallelize it).
   ``shard_by="document"`` instead gives rank ``r`` the documents with ``index % world == r`` (no redundant
   tokenization, for very large runs); then the batches depend on the world size.

Position: ``state_dict()`` is ``{epoch, doc, buffer, seq}`` taken after the last *round* — the next source
document to read, the tokens already read but not yet emitted, and the global sequence counter. With
``shard_by="sequence"`` it is identical on every rank and valid for any world size. A restored stream
yields exactly the sequences the uninterrupted stream would have yielded next.

With ``loop=True`` (training) the source is re-read forever (``epoch`` counts passes; the buffer carries over,
so no tokens are lost at the seam). With ``loop=False`` (evaluation) the stream ends; the last partial
sequence is right-padded (``attention_mask`` 0) and the last round is completed with all-pad sequences so
that every rank runs the same number of batches.
"""

from __future__ import annotations

import copy
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .corpus import SourceSpec, in_split, iter_documents

SPLITS = ("train", "heldout", "all")
SHARD_BY = ("sequence", "document")


@dataclass
class Chunk:
    end: int  # index of the first source document after this chunk
    docs: list[list[int]]  # token ids of the kept documents, each already followed by the end-of-text id


class DocumentChunks(IterableDataset):
    """Tokenized documents, ``chunk_docs`` source documents at a time, from document ``start`` on.

    Runs inside DataLoader workers: chunk ``c`` is tokenized by worker ``c % num_workers`` only; the other
    workers skip its text (reading is cheap, tokenizing is not).
    """

    def __init__(self, spec: SourceSpec, tokenizer, eot: int, *, start: int = 0, chunk_docs: int = 64,
                 split: str = "all", heldout_fraction: float = 0.0, heldout_docs: int = 0, doc_rank: int = 0,
                 doc_world: int = 1, add_special_tokens: bool = False, epoch: int = 0):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if split != "all" and heldout_docs <= 0 and not 0.0 < heldout_fraction < 1.0:
            raise ValueError(f"split {split!r} needs 0 < heldout_fraction < 1 or heldout_docs > 0")
        self.heldout_docs, self.epoch = heldout_docs, epoch
        self.spec, self.tokenizer, self.eot = spec, tokenizer, eot
        self.start, self.chunk_docs, self.split = start, chunk_docs, split
        self.heldout_fraction, self.doc_rank, self.doc_world = heldout_fraction, doc_rank, doc_world
        self.add_special_tokens = add_special_tokens

    def _keep(self, index: int, text: str) -> bool:
        if self.doc_world > 1 and index % self.doc_world != self.doc_rank:
            return False
        return in_split(index, text, self.split, self.heldout_fraction, self.heldout_docs)

    def __iter__(self) -> Iterator[Chunk]:
        info = get_worker_info()
        worker, n_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        batch: list[str] = []
        first = self.start
        c = 0
        last = self.start - 1
        for index, text in iter_documents(self.spec, self.start, self.epoch):
            # chunks are counted in *source* documents so their boundaries do not depend on the filters
            while index >= first + self.chunk_docs:
                if c % n_workers == worker:
                    yield self._encode(first + self.chunk_docs, batch)
                batch, first, c = [], first + self.chunk_docs, c + 1
            last = index
            if c % n_workers == worker and self._keep(index, text):
                batch.append(text)
        if last >= first and c % n_workers == worker:
            yield self._encode(last + 1, batch)

    def _encode(self, end: int, texts: list[str]) -> Chunk:
        if not texts:
            return Chunk(end, [])
        ids = self.tokenizer(texts, add_special_tokens=self.add_special_tokens)["input_ids"]
        return Chunk(end, [list(x) + [self.eot] for x in ids])


def _identity(x):
    return x


def _ignore_stop_signals(_worker_id: int) -> None:
    """Ctrl-C / SIGTERM reach the whole process group; the trainer handles them (finish the step, save), so
    the tokenizer workers must not die first. They exit with the main process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class PackedSequences:
    """Iterator of packed sequences for one rank: dicts with ``input_ids`` (long, ``seq_len``),
    ``attention_mask`` and ``index`` (the sequence's global index, used to key its mask)."""

    def __init__(self, spec: SourceSpec, tokenizer, seq_len: int, *, eot: int, pad_id: int, rank: int = 0,
                 world_size: int = 1, shard_by: str = "sequence", split: str = "all", heldout_fraction: float = 0.0,
                 heldout_docs: int = 0, loop: bool = True, num_workers: int = 0, chunk_docs: int = 64,
                 add_special_tokens: bool = False, max_sequences: int | None = None):
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} out of range for world_size {world_size}")
        if shard_by not in SHARD_BY:
            raise ValueError(f"shard_by must be one of {SHARD_BY}, got {shard_by!r}")
        self.spec, self.tokenizer, self.seq_len = spec, tokenizer, seq_len
        self.eot, self.pad_id, self.rank, self.world = eot, pad_id, rank, world_size
        self.shard_by, self.split, self.heldout_fraction = shard_by, split, heldout_fraction
        self.heldout_docs = heldout_docs
        self.loop, self.num_workers, self.chunk_docs = loop, num_workers, chunk_docs
        self.add_special_tokens, self.max_sequences = add_special_tokens, max_sequences
        # in document mode each rank packs its own stream, so one "round" is one sequence
        self.round = world_size if shard_by == "sequence" else 1
        self._state = {"epoch": 0, "doc": 0, "buffer": [], "seq": 0}

    # ---------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        s = copy.deepcopy(self._state)
        s["buffer"] = torch.tensor(s["buffer"], dtype=torch.int64)
        s.update(shard_by=self.shard_by, world_size=self.world, seq_len=self.seq_len)
        return s

    def load_state_dict(self, state: dict) -> None:
        if int(state["seq_len"]) != self.seq_len:
            raise ValueError(f"data position was saved with seq_len {state['seq_len']}, this run uses {self.seq_len}")
        if state["shard_by"] != self.shard_by:
            raise ValueError(f"data position was saved with shard_by={state['shard_by']!r}, "
                             f"this run uses {self.shard_by!r}")
        if self.shard_by == "document" and int(state["world_size"]) != self.world:
            raise ValueError(f"shard_by='document' cannot resume on a different world size "
                             f"({state['world_size']} -> {self.world}); use shard_by='sequence'")
        buf = state["buffer"]
        self._state = {"epoch": int(state["epoch"]), "doc": int(state["doc"]), "seq": int(state["seq"]),
                       "buffer": buf.tolist() if torch.is_tensor(buf) else list(buf)}

    # ------------------------------------------------------------------------------------------- iterate
    def _chunks(self, start: int, epoch: int) -> Iterator[Chunk]:
        ds = DocumentChunks(
            self.spec, self.tokenizer, self.eot, start=start, chunk_docs=self.chunk_docs, split=self.split,
            heldout_fraction=self.heldout_fraction, heldout_docs=self.heldout_docs,
            doc_rank=self.rank if self.shard_by == "document" else 0,
            doc_world=self.world if self.shard_by == "document" else 1,
            add_special_tokens=self.add_special_tokens, epoch=epoch,
        )
        if self.num_workers == 0:
            yield from ds
            return
        loader = DataLoader(ds, batch_size=None, num_workers=self.num_workers, collate_fn=_identity,
                            prefetch_factor=4, persistent_workers=False, in_order=True,
                            worker_init_fn=_ignore_stop_signals)
        yield from loader

    def _emit(self, seqs: list[list[int]]) -> list[dict]:
        """Turn one round (``self.round`` token lists, possibly short or empty) into this rank's sample."""
        mine = seqs[self.rank] if self.shard_by == "sequence" else seqs[0]
        ids = torch.full((self.seq_len,), self.pad_id, dtype=torch.long)
        ids[: len(mine)] = torch.tensor(mine, dtype=torch.long)
        att = torch.zeros(self.seq_len, dtype=torch.long)
        att[: len(mine)] = 1
        first = self._state["seq"]
        index = first + (self.rank if self.shard_by == "sequence" else 0)
        if self.shard_by == "document":
            index = first * self.world + self.rank  # globally unique mask key
        return [{"input_ids": ids, "attention_mask": att, "index": index}]

    def __iter__(self) -> Iterator[dict]:
        n_yielded = 0
        L, R = self.seq_len, self.round
        while True:
            st = self._state
            got_any_doc = False
            start_doc = st["doc"]
            buf = list(st["buffer"])
            for chunk in self._chunks(st["doc"], st["epoch"]):
                if chunk.docs:
                    got_any_doc = True
                for d in chunk.docs:
                    buf.extend(d)
                st["doc"] = chunk.end
                while len(buf) >= L * R:
                    round_ = [buf[i * L:(i + 1) * L] for i in range(R)]
                    buf = buf[L * R:]
                    st["buffer"] = buf
                    out = self._emit(round_)
                    st["seq"] += R
                    yield from out
                    n_yielded += 1
                    if self.max_sequences is not None and n_yielded >= self.max_sequences:
                        return
                st["buffer"] = buf
            if not self.loop:
                if buf:  # the tail: pad the last partial sequence and fill the round with empty sequences
                    round_ = [buf[i * L:(i + 1) * L] for i in range(R)]
                    st["buffer"] = []
                    out = self._emit(round_)
                    st["seq"] += R
                    yield from out
                return
            if not got_any_doc and start_doc == 0:
                raise ValueError(f"the corpus {self.spec.source!r} (split {self.split!r}) yields no documents")
            st["epoch"] += 1
            st["doc"] = 0
