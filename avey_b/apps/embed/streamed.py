"""Documents encoded in pieces (:class:`avey_b.model.streaming.DocumentState`) by ``avey-b embed``: long documents in
bounded memory, and what ``--update`` saves per document (its text's hash and its state) to compute only what
changed.

A saved record (one row per document in ``_state/part-NNNNN.parquet``, beside shard ``part-NNNNN.parquet``): the
id, the SHA-256 of the text (and of its chunk spans, ``--chunk-spans-column``), the text's length in characters (a
new text whose first characters hash the same extends the old one), the SHA-256 of its kept columns, its tokens
(an unchanged document is not tokenized again), and the state's tensors
(:meth:`~avey_b.model.streaming.DocumentState.export`: token ids, per split its choice and ranking keys, the output
sums per :data:`SUM_TOKENS` tokens or so, per late chunk its sums; never token states), flattened into list columns.
A document with no state (a model or chunking that cannot be encoded in pieces, a skipped document) has empty lists
there. Its size, before Parquet's compression: 4 bytes a token for the ids, ``k × (4 + 8) / split_size`` for the
choice and keys, and ``d × 4 / SUM_TOKENS`` for the sums (about 7 bytes a token for a 256-wide model with 16-token
splits and k = 3; late chunks add ``d × 4`` bytes per chunk and split they meet).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from avey_b.apps.embed.inputs import Document
from avey_b.apps.embed.options import LONG_DOCUMENT_TOKENS
from avey_b.inference.encoder import Encoder
from avey_b.inference.states import States, unavailable
from avey_b.model.streaming import DocumentState

#: The directory of the saved records, beside the shards (a name starting with ``_``: not data for pyarrow).
STATE_DIR = "_state"
#: The exported state's tensors, and the Arrow type each is stored as (flattened; split and chunk numbers as int32:
#: a state holds at most 2^22 splits).
STATE_COLUMNS = {"ids": "int32", "sums": "float32", "choice": "int32", "keys": "float64", "sum_splits": "int32",
                 "segment_splits": "int32", "segment_chunks": "int32", "segment_sums": "float32"}
#: About how many tokens' output sums a saved state keeps as one (``DocumentState``'s ``sum_splits``: this many
#: tokens in splits, at least one): an append recomputes at most these tokens beyond what it adds (the group of the
#: old trailing tokens), an edit the other splits of each group it recomputes a split of; the sums take
#: ``d × 4 / SUM_TOKENS`` bytes a token on disk.
SUM_TOKENS = 1024
SPANS_WHY = ("character-span chunks (--chunk-spans-column) are cut from the text, not by token counts, so a "
             "document state cannot pool them")
#: Why sparse outputs take no pieces: SPLADE's max runs over the whole hidden state (one forward, up to --max-tokens),
#: chunked through the masked-LM head so its (N, V) logits never exist at once (avey_b.model.sparse).
WHOLE_WHY = ("--outputs sparse and multivector run each document in one forward (up to --max-tokens), every output "
             "from its one last hidden state (the SPLADE max taken chunk by chunk through the masked-LM head)")


def text_hash(text: str, spans=None) -> str:
    """SHA-256 of a document's text (and of its chunk spans, which change its vectors too)."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    if spans is not None:
        digest.update(b"\0" + json.dumps([list(s) for s in spans]).encode())
    return digest.hexdigest()


def kept_hash(doc: Document) -> str | None:
    """SHA-256 of a document's kept column values (None: none kept)."""
    if doc.kept is None:
        return None
    return hashlib.sha256(json.dumps(doc.kept, sort_keys=True, default=str).encode()).hexdigest()


def record_key(doc: Document) -> tuple[str, str, str | None]:
    """What makes a shard's saved row of ``doc`` still right: its id, text hash and kept values' hash."""
    return doc.id, text_hash(doc.text, doc.spans), kept_hash(doc)


class Pieces:
    """How a job encodes documents in pieces: ``states`` (an :class:`~avey_b.inference.states.States` that gives its
    vectors: pooled, or late chunks of ``--chunk-tokens`` with ``--chunk-overlap``, the tokenizer's leading and
    trailing special tokens in no chunk), or ``why_not``, the sentence that says why it cannot (the model's config,
    character-span chunks, outputs other than dense). ``long_tokens``: a plain run encodes a longer document in pieces
    (bounded memory: no (N, d) states)."""

    def __init__(self, encoder: Encoder, settings, long_tokens: int = LONG_DOCUMENT_TOKENS):
        self.encoder, self.long_tokens = encoder, long_tokens
        self.late = settings.chunking == "late"
        self.why_not = (unavailable(encoder) or (SPANS_WHY if settings.chunk_spans_column else None)
                        or (WHOLE_WHY if set(settings.outputs) - {"dense"} else None))
        self.states: States | None = None
        if self.why_not is None:
            chunked = ({"chunk_tokens": settings.chunk_tokens, "chunk_overlap": settings.chunk_overlap or 0,
                        "ends": True} if self.late else {})
            self.states = States(encoder, sum_splits=max(1, SUM_TOKENS // encoder.config.split_size), **chunked)

    def start_line(self, update: bool) -> str:
        """What the start line says of how documents are encoded: long ones (and with ``update``, changed ones)."""
        if self.why_not is not None:
            return (f"every document is encoded whole, at any length"
                    f"{' (--update: a changed document is encoded again in full)' if update else ''}: "
                    f"{self.why_not}")
        line = (f"documents over {self.long_tokens:,} tokens are encoded in pieces (bounded memory: "
                "avey_b.model.streaming.DocumentState)")
        if update:
            line += (f"; --update keeps each document's state in {STATE_DIR}/ and computes only the splits a "
                     "change reaches")
        return line

    def takes(self, n_tokens: int) -> bool:
        """Whether a document of ``n_tokens`` is encoded in pieces by a plain run (a long one, where it can be)."""
        return self.why_not is None and n_tokens > self.long_tokens

    def encode(self, ids: list[int], ranges, saved: dict | None = None
               ) -> tuple[np.ndarray, DocumentState, int] | None:
        """A document's vectors ((d,), or (C, d) for its late chunks ``ranges``), its state and the tokens run
        through the model: ``saved`` (a state's exported tensors) edited to ``ids``, or a new state fed them.
        None when the state's chunks are not ``ranges`` (a tokenizer with special tokens inside the text)."""
        states = self.states
        if saved is None:
            state = states.new(ids)
        else:  # an append replaces the old trailing [SEP] and a tail tokenized otherwise
            state = states.update(states.restore(saved), ids)
        if self.late and state.chunk_spans() != [tuple(r[:2]) for r in ranges]:
            return None
        vectors = states.chunks(state) if self.late else states.pooled(state)
        return vectors.numpy(), state, min(len(ids), state.computed * state.S)


# ------------------------------------------------------------------------------------------------ saved records
def record_fields(doc: Document, n_tokens: int) -> dict:
    """The saved row's fields that identify ``doc``'s text and kept values, and its ``n_tokens``."""
    return {"id": doc.id, "sha256": text_hash(doc.text, doc.spans), "n_chars": len(doc.text),
            "kept_sha256": kept_hash(doc), "n_tokens": n_tokens}


def record(doc: Document, n_tokens: int, state: DocumentState | None) -> dict:
    """The saved row of ``doc`` (see the module docstring), of ``n_tokens``."""
    row = record_fields(doc, n_tokens)
    data = {} if state is None else state.export()
    for name, typ in STATE_COLUMNS.items():
        row[name] = data[name].numpy().reshape(-1).astype(typ) if name in data else np.zeros(0, typ)
    return row


def read_keys(path: Path) -> list[tuple[str, str, str | None]]:
    """The (id, text hash, kept hash) of each saved row of a file, in order."""
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["id", "sha256", "kept_sha256"])
    return list(zip(t["id"].to_pylist(), t["sha256"].to_pylist(), t["kept_sha256"].to_pylist(), strict=True))


def row_state(table, row: int, shape: tuple[int, int, int], late: bool) -> dict[str, torch.Tensor] | None:
    """The exported state tensors of saved row ``row`` (None: the row holds no state) of a model of ``shape``
    (width ``d``, ``split_size``, ``k``); ``late``: with chunks. Records written before ``sum_splits`` was saved
    hold a sum per split."""
    d, S, k = shape
    names = [n for n in STATE_COLUMNS if (late or not n.startswith("segment_")) and n in table.column_names]
    data = {name: torch.from_numpy(table[name][row].values.to_numpy(zero_copy_only=False).copy()) for name in names}
    if not data["ids"].numel():
        return None
    n = data["ids"].numel() // S
    data["sums"], data["choice"], data["keys"] = (data["sums"].view(-1, d), data["choice"].long().view(n, k),
                                                  data["keys"].view(n, k))
    if late:
        data["segment_sums"] = data["segment_sums"].view(-1, d)
        data["segment_splits"], data["segment_chunks"] = data["segment_splits"].long(), data["segment_chunks"].long()
    return data
