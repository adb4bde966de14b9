"""Documents that outlive a request: a :class:`Session` is a named document (a :class:`~avey_b.inference.documents.
TextDocument`, or an :class:`~avey_b.inference.documents.IdsDocument` of token ids) with a version that each change
raises, and its **record** — the bytes a state store keeps (:mod:`avey_b.inference.stores`), from which any process
serving the same model resumes the document exactly.

A record is a safetensors file held in memory (:func:`pack`, :func:`unpack`): the document's state as
:meth:`DocumentState.export <avey_b.model.streaming.DocumentState.export>` gives it — the token ids (int32), per
kept split the sum of its outputs (float32, ``d`` values) and its chosen splits with their ranking keys (int64 and
float64, ``k`` each), per late chunk its sums where chunks are asked for — and for a text document each token's
character span (int32 pairs) and the text (UTF-8). Never the ``(N, d)`` token states: with the small preset about
25 bytes a token (:attr:`Session.nbytes`), where a decoder's KV cache holds tens of kilobytes. The header's metadata
names the format and its version, the model (:func:`model_fingerprint`: the config, the weights, the tokenizer and
the precision), the session's id, version, chunk options and times: a record of another format, another model or
another session is refused by name, never used.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field

import torch

from avey_b.inference.documents import IdsDocument, TextDocument

#: the ``format`` a record's metadata names, and the version of its layout
FORMAT, FORMAT_VERSION = "avey-b-session", "1"
#: the idempotency keys a session remembers (each with the version its change made)
KEPT_KEYS = 64


class RecordError(ValueError):
    """A record that is not one this process can resume: corrupt, of another format or version, of another model
    or of another session (the message says which)."""


def model_fingerprint(encoder) -> str:
    """A digest of what a document state depends on: ``encoder``'s config, its weights, its tokenizer's vocabulary
    and rules, and the precision it runs in (bf16 autocast or not). Two processes with equal fingerprints compute
    equal states."""
    h = hashlib.sha256()
    config = encoder.config.to_dict()
    for transient in ("_name_or_path", "transformers_version", "_commit_hash"):
        config.pop(transient, None)
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(encoder.model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    tokenizer = encoder.tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    h.update((backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)).encode())
    h.update(f"bf16={encoder.bf16}".encode())
    return h.hexdigest()[:32]


@dataclass
class Session:
    """A named document: ``id``, ``document`` (a :class:`TextDocument` or an :class:`IdsDocument`), ``version``
    (1 when made, raised by each change), the late chunks its vectors are pooled into (``chunk_tokens``,
    ``chunk_overlap``; None: the whole document only), ``created`` and ``updated`` (Unix seconds) and ``applied``
    (idempotency key -> the version its change made, the last :data:`KEPT_KEYS`)."""

    id: str
    document: TextDocument | IdsDocument
    version: int = 1
    chunk_tokens: int | None = None
    chunk_overlap: int = 0
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    applied: dict[str, int] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``text`` or ``ids``."""
        return "text" if isinstance(self.document, TextDocument) else "ids"

    @property
    def nbytes(self) -> int:
        """Bytes the session holds: its state (:attr:`DocumentState.nbytes
        <avey_b.model.streaming.DocumentState.nbytes>`) and, for a text, its character offsets and the text."""
        held = self.document.state.nbytes
        if self.kind == "text":
            held += len(self.document) * 8 + len(self.document.text.encode("utf-8"))
        return held

    def changed(self, key: str | None) -> None:
        """Count one change: the version raised, the time, and ``key`` (an idempotency key) remembered with the
        version it made."""
        self.version += 1
        self.updated = time.time()
        if key is not None:
            self.applied[key] = self.version
            while len(self.applied) > KEPT_KEYS:
                self.applied.pop(next(iter(self.applied)))

    def info(self) -> dict:
        """What a listing shows of the session."""
        out = {"id": self.id, "object": "session", "version": self.version, "kind": self.kind,
               "tokens": len(self.document), "bytes": self.nbytes, "created": int(self.created),
               "updated": int(self.updated), "chunk_tokens": self.chunk_tokens, "chunk_overlap": self.chunk_overlap}
        if self.kind == "text":
            out["characters"] = len(self.document.text)
        return out


def pack(session: Session, fingerprint: str) -> bytes:
    """The session's record (a safetensors file's bytes; see the module docstring)."""
    from safetensors.torch import save

    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "model": fingerprint, "id": session.id,
            "kind": session.kind, "version": str(session.version), "created": repr(session.created),
            "updated": repr(session.updated), "chunk_tokens": json.dumps(session.chunk_tokens),
            "chunk_overlap": str(session.chunk_overlap), "applied": json.dumps(session.applied),
            "tokens": str(len(session.document)), "bytes": str(session.nbytes)}
    if session.kind == "text":
        meta["characters"] = str(len(session.document.text))
    tensors = {name: t.contiguous() for name, t in session.document.export().items()}
    meta["sha256"] = digest(tensors)
    return save(tensors, metadata=meta)


def digest(tensors: dict[str, torch.Tensor]) -> str:
    """The SHA-256 of a record's tensors (names, dtypes, shapes and bytes): safetensors keeps no checksum, and a
    damaged byte of a state would otherwise be a wrong vector."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def listed(meta: dict[str, str]) -> dict:
    """What a listing shows of a stored session, from its record's metadata (:func:`header`): as
    :meth:`Session.info`."""
    out = {"id": meta["id"], "object": "session", "version": int(meta["version"]), "kind": meta["kind"],
           "tokens": int(meta["tokens"]), "bytes": int(meta["bytes"]), "created": int(float(meta["created"])),
           "updated": int(float(meta["updated"])), "chunk_tokens": json.loads(meta["chunk_tokens"]),
           "chunk_overlap": int(meta["chunk_overlap"])}
    if "characters" in meta:
        out["characters"] = int(meta["characters"])
    return out


def header(record: bytes) -> dict[str, str]:
    """A record's metadata, read from its header alone (checked: the format, its version); :class:`RecordError`
    when the bytes are not a session record."""
    try:
        size = int.from_bytes(record[:8], "little")
        meta = json.loads(record[8:8 + size]).get("__metadata__") or {}
    except (ValueError, UnicodeDecodeError) as error:
        raise RecordError(f"not a safetensors record ({error})") from None
    if meta.get("format") != FORMAT:
        raise RecordError(f"not an Avey-B session record (its format is {meta.get('format')!r}, not {FORMAT!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise RecordError(f"a session record of format version {meta.get('format_version')!r}; this library reads "
                          f"version {FORMAT_VERSION}")
    return meta


def unpack(record: bytes, fingerprint: str, states_for, session_id: str | None = None) -> Session:
    """The :class:`Session` of ``record``, checked to be of this model (``fingerprint``) and, with
    ``session_id``, of that session; ``states_for(kind, chunk_tokens, chunk_overlap)`` gives the
    :class:`~avey_b.inference.states.States` that runs it. A record that cannot be resumed is a
    :class:`RecordError` saying why."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    meta = header(record)
    if meta.get("model") != fingerprint:
        raise RecordError(f"made by another model or precision (fingerprint {meta.get('model')}, this server's "
                          f"{fingerprint}): its states would not be this model's")
    if session_id is not None and meta.get("id") != session_id:
        raise RecordError(f"the record of session {meta.get('id')!r}, not {session_id!r}")
    try:
        tensors = load(record)
        if digest(tensors) != meta.get("sha256"):
            raise RecordError("a damaged session record (its tensors' SHA-256 is not the one it was written with)")
        chunk_tokens, overlap = json.loads(meta["chunk_tokens"]), int(meta["chunk_overlap"])
        states = states_for(meta["kind"], chunk_tokens, overlap)
        kind = TextDocument if meta["kind"] == "text" else IdsDocument
        document = kind.restore(states, tensors)
        return Session(meta["id"], document, int(meta["version"]), chunk_tokens, overlap, float(meta["created"]),
                       float(meta["updated"]), json.loads(meta["applied"]))
    except (SafetensorError, KeyError, ValueError, TypeError, UnicodeDecodeError) as error:
        raise RecordError(f"a damaged session record ({type(error).__name__}: {error})") from None
