"""Sessions: documents a client names, kept between requests, so that adding a turn to a conversation or editing a
span sends and computes only the change (the routes: :mod:`avey_b.apps.serve.routes_sessions`; the
``session`` field of ``/v1/embeddings``).

:class:`Sessions` keeps the sessions used lately in the process's memory (``--session-bytes``, least recently used
dropped first, ``--session-ttl-s`` of idleness before one expires) in front of the state store (``--state-store``:
:mod:`avey_b.inference.stores`), to which every change is written through. With a store, each request reads the
session's version from it first, so a session another replica changed is read again, never answered stale; a
change is written compare-and-set against the version it started from, so two writers never interleave (the later
gets 409). Changes to one session are serialized in the process (one lock per session); their model work runs on
the batcher's thread as jobs in steps (a long append a piece at a time, other requests between), as long inputs do.

Every answer equals a fresh encode of the session's current text (its vectors are its document state's:
:class:`avey_b.inference.documents.TextDocument`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator

from fastapi import HTTPException

from avey_b.inference.documents import IdsDocument, TextDocument, pieces
from avey_b.inference.sessions import RecordError, Session, listed, model_fingerprint, pack, unpack
from avey_b.inference.states import States, unavailable
from avey_b.inference.stores import StoreUnavailable, open_store

#: ids a client may choose: letters, digits and ``._:-``, at most 128 characters
ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")
ID_LENGTH = 128


def check_id(session_id: str) -> str:
    if not 1 <= len(session_id) <= ID_LENGTH or not set(session_id) <= ID_CHARS:
        raise HTTPException(400, f"a session id is 1 to {ID_LENGTH} letters, digits or '._:-'; got "
                                 f"{session_id[:ID_LENGTH + 1]!r}")
    return session_id


def check_kind(session: Session, content) -> None:
    """Refuse (400) ``content`` (a text, or token ids) of the other kind than ``session``'s."""
    if session.kind == "text" and not isinstance(content, str):
        raise HTTPException(400, f"session {session.id!r} is made of text: change it with `text`")
    if session.kind == "ids" and isinstance(content, str):
        raise HTTPException(400, f"session {session.id!r} is made of token ids: change it with `input_ids`")


class Sessions:
    """The sessions of a :class:`~avey_b.apps.serve.service.Service` (whose batcher runs their model work):
    ``warm`` (id -> :class:`~avey_b.inference.sessions.Session`, least recently used first, ``bytes`` in all),
    ``store`` (None: memory only) and ``off`` (why this model cannot keep sessions, or None)."""

    def __init__(self, service):
        self.service, encoder, options = service, service.encoder, service.options
        self.off = ("the ONNX runtime computes whole inputs only" if encoder.onnx_file else unavailable(encoder))
        self.capacity, self.ttl_s = options.session_bytes, options.session_ttl_s
        self.store = open_store(options.state_store, self.ttl_s)
        self.warm: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self.used: dict[str, float] = {}
        self.held: dict[str, int] = {}
        self.bytes = 0
        self.locks: dict[str, asyncio.Lock] = {}
        self._states: dict[tuple, States] = {}
        self._fingerprint: str | None = None
        self.counts = dict.fromkeys(("changes", "splits_computed", "store_reads", "store_writes", "conflicts"), 0)

    def stats(self) -> dict[str, int]:
        """The counters (:class:`avey_b.apps.serve.observe.SessionsCollector`), and the sessions and bytes warm."""
        return {**self.counts, "warm": len(self.warm), "bytes": self.bytes}

    def describe(self) -> str:
        """The start line's words on sessions."""
        if self.off:
            return f"sessions off: {self.off}"
        where = f"written through to {self.store}" if self.store else "in this process only (--state-store)"
        return f"sessions up to {self.capacity:,} bytes warm (--session-bytes), {where}"

    @property
    def fingerprint(self) -> str:
        """The model's :func:`~avey_b.inference.sessions.model_fingerprint` (computed once, when first needed)."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.service.encoder)
        return self._fingerprint

    def states_for(self, kind: str, chunk_tokens: int | None, chunk_overlap: int) -> States:
        """The :class:`States` that runs sessions of ``kind`` (``text``: the tokenizer's special tokens at the ends;
        ``ids``: the ids as given) with these late chunks."""
        key = (kind, chunk_tokens, chunk_overlap)
        if key not in self._states:
            self._states[key] = States(self.service.encoder, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap,
                                       ends=kind == "text", block_tokens=self.service.documents.block or None)
        return self._states[key]

    # ------------------------------------------------------------------ holding
    @contextlib.asynccontextmanager
    async def locked(self, session_id: str):
        """Hold ``session_id``'s lock: one request at a time works on a session in this process."""
        lock = self.locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            yield
        if not lock.locked() and not getattr(lock, "_waiters", None):
            self.locks.pop(session_id, None)

    def _keep(self, session: Session) -> None:
        """``session`` warm (most recently used), and the least recently used others dropped past the bytes."""
        self._drop(session.id)
        self.warm[session.id], self.used[session.id] = session, time.monotonic()
        self.held[session.id] = session.nbytes
        self.bytes += self.held[session.id]
        while self.bytes > self.capacity and len(self.warm) > 1:
            self._drop(next(iter(self.warm)))

    def _drop(self, session_id: str) -> None:
        if self.warm.pop(session_id, None) is not None:
            self.bytes -= self.held.pop(session_id)
            self.used.pop(session_id, None)

    def _expire(self) -> None:
        """Drop the warm sessions idle past the TTL (the store expires its own)."""
        now = time.monotonic()
        for session_id in [s for s, t in self.used.items() if now - t > self.ttl_s]:
            self._drop(session_id)

    async def _stored(self, call: Callable, *args):
        """A store call on a worker thread; 503 naming the store when it does not answer."""
        try:
            return await asyncio.to_thread(call, *args)
        except StoreUnavailable as error:
            raise HTTPException(503, f"{error}; the session is unchanged: retry later") from None

    def _missing(self, session_id: str) -> HTTPException:
        kept = (f"expired after --session-ttl-s {self.ttl_s:g} idle seconds or deleted" if self.store else
                f"expired (--session-ttl-s {self.ttl_s:g}), deleted, or dropped past --session-bytes "
                f"{self.capacity:,} or by a restart (no --state-store)")
        return HTTPException(404, f"no session {session_id!r}: it was never made, or it {kept}")

    async def load(self, session_id: str) -> Session:
        """The session (warm, or read from the store when the store holds a newer version); 404 when there is
        none. The caller holds its lock."""
        self._expire()
        warm = self.warm.get(session_id)
        if self.store is None:
            if warm is None:
                raise self._missing(session_id)
            self._keep(warm)
            return warm
        version = await self._stored(self.store.version, session_id)
        if version is None:
            self._drop(session_id)
            raise self._missing(session_id)
        if warm is not None and warm.version == version:
            self._keep(warm)
            return warm
        record = await self._stored(self.store.read, session_id)
        self.counts["store_reads"] += 1
        if record is None:
            raise self._missing(session_id)
        try:
            session = await asyncio.to_thread(unpack, record, self.fingerprint, self.states_for, session_id)
        except RecordError as error:
            raise HTTPException(409, f"the stored record of session {session_id!r} is refused: {error}; DELETE the "
                                     "session and make it again") from None
        self._keep(session)
        return session

    async def _save(self, session: Session, expected: int) -> None:
        """Write ``session`` through to the store, compare-and-set against ``expected`` (0: new); 409 when
        another writer got there first."""
        if self.store is None:
            self._keep(session)
            return
        record = await asyncio.to_thread(pack, session, self.fingerprint)
        written = await self._stored(self.store.write, session.id, record, session.version, expected)
        self.counts["store_writes"] += written
        if not written:
            self.counts["conflicts"] += 1
            self._drop(session.id)
            raise HTTPException(409, f"session {session.id!r} was changed meanwhile by another request (it is no "
                                     f"longer at version {expected}): read it and send the change again")
        self._keep(session)

    # ------------------------------------------------------------------ work on the batcher's thread
    async def _compute(self, session: Session, steps: Iterator | None) -> tuple:
        """Run ``steps`` (a generator changing the session's document, or None) then the session's vectors, as one
        job in steps on the batcher; returns ``(vector, chunks or None, splits computed)``. A change that fails
        midway drops the warm session (the store, if any, still holds its last version)."""
        document = session.document

        def job():
            before = document.state.computed
            if steps is not None:
                yield from steps
            vector = document.vector().numpy()
            chunks = None
            if session.chunk_tokens is not None:
                vectors, spans = document.chunks()
                chunks = (vectors.numpy(), spans)
            return vector, chunks, document.state.computed - before

        try:
            answer = await self.service.compute(job())
            self.counts["splits_computed"] += answer[2]
            return answer
        except HTTPException:
            raise
        except Exception as error:
            self._drop(session.id)
            raise HTTPException(500, f"session {session.id!r}: the change failed ({type(error).__name__}: {error}) "
                                     "and the session was dropped from memory" +
                                     (": the store keeps its last version" if self.store else "")) from None

    @staticmethod
    def appending(document, content) -> Iterator:
        """Steps adding ``content`` at the end of ``document`` (a text a piece at a time, or token ids)."""
        if isinstance(document, TextDocument):
            for part in pieces(content, document.piece_chars):
                document.append(part)
                yield
        else:
            document.append(content)
            yield

    @staticmethod
    def replacing(document, start: int, end: int, content) -> Iterator:
        """A step replacing ``document``'s characters (tokens) ``start:end`` by ``content``."""
        document.replace(start, end, content)
        yield

    @classmethod
    def setting(cls, document, content) -> Iterator:
        """Steps making ``document``'s whole content ``content``: only the change is computed (an extension of
        the text is appended a piece at a time)."""
        if isinstance(document, TextDocument):
            if content.startswith(document.text):
                yield from cls.appending(document, content[len(document.text):])
                return
            document.set_text(content)
        else:
            document.set_ids(content)
        yield

    @contextlib.asynccontextmanager
    async def texts(self, session_ids: list[str]):
        """The text sessions ``session_ids`` (id -> :class:`~avey_b.inference.sessions.Session`), each held (its
        lock, taken in one order, so two requests never wait on each other) while the caller reads them: what
        ``/v1/rerank`` scores (a query-last scorer ranks against their states' token ids, nothing re-tokenized).
        404 for one that does not exist, 400 for a session of token ids (a rerank scores texts)."""
        self._refuse_off()
        async with contextlib.AsyncExitStack() as stack:
            held = {}
            for session_id in sorted(set(session_ids)):
                await stack.enter_async_context(self.locked(check_id(session_id)))
                session = await self.load(session_id)
                if session.kind != "text":
                    raise HTTPException(400, f"session {session_id!r} is made of token ids: a rerank scores "
                                             "texts (make the session with `text`)")
                held[session_id] = session
            yield held

    # ------------------------------------------------------------------ operations
    def _refuse_off(self) -> None:
        if self.off:
            raise HTTPException(400, f"this server keeps no sessions: {self.off}")

    async def create(self, session_id: str | None, content, chunk_tokens: int | None, chunk_overlap: int,
                     key: str | None) -> tuple[Session, tuple]:
        """A new session of ``content`` (a text or token ids); 409 when ``session_id`` is taken (unless ``key``
        made it: then the session as it is)."""
        self._refuse_off()
        session_id = check_id(session_id) if session_id is not None else f"sess_{uuid.uuid4().hex}"
        kind = "text" if isinstance(content, str) else "ids"
        try:
            states = self.states_for(kind, chunk_tokens, chunk_overlap)
        except ValueError as error:
            raise HTTPException(400, str(error)) from None
        async with self.locked(session_id):
            existing = await self._exists(session_id)
            if existing is not None:
                if key is not None and existing.applied.get(key) == 1 and existing.version == 1:
                    return existing, await self._compute(existing, None)
                raise HTTPException(409, f"session {session_id!r} exists (version {existing.version}): change it, or "
                                         "DELETE it first")
            return await self._make(session_id, content, chunk_tokens, chunk_overlap, key, states)

    async def _make(self, session_id: str, content, chunk_tokens: int | None, chunk_overlap: int, key: str | None,
                    states: States | None = None) -> tuple[Session, tuple]:
        """Make the session (the caller holds its lock and found none)."""
        kind = "text" if isinstance(content, str) else "ids"
        if states is None:
            try:
                states = self.states_for(kind, chunk_tokens, chunk_overlap)
            except ValueError as error:
                raise HTTPException(400, str(error)) from None
        document = TextDocument(states, "") if kind == "text" else IdsDocument(states)
        session = Session(session_id, document, 1, chunk_tokens, chunk_overlap)
        if key is not None:
            session.applied[key] = 1
        answer = await self._compute(session, self.appending(document, content) if len(content) else None)
        await self._save(session, 0)
        self.counts["changes"] += 1
        return session, answer

    async def embed(self, session_id: str, content, chunk_tokens: int | None, append: bool) -> tuple[Session, tuple]:
        """``/v1/embeddings`` with a session: a new session of ``content``, or the session's content made
        ``content`` (added to it, with ``append``)."""
        self._refuse_off()
        async with self.locked(check_id(session_id)):
            if await self._exists(session_id) is None:
                return await self._make(session_id, content, chunk_tokens, 0, None)

        def steps(session: Session) -> Iterator:
            check_kind(session, content)
            return (self.appending if append else self.setting)(session.document, content)

        return await self.change(session_id, steps, None, None)

    async def _exists(self, session_id: str) -> Session | None:
        try:
            return await self.load(session_id)
        except HTTPException as error:
            if error.status_code == 404:
                return None
            raise

    async def read(self, session_id: str) -> tuple[Session, tuple]:
        """The session and its vectors."""
        self._refuse_off()
        async with self.locked(check_id(session_id)):
            session = await self.load(session_id)
            return session, await self._compute(session, None)

    async def change(self, session_id: str, steps_of: Callable[[Session], Iterator], expected: int | None,
                     key: str | None) -> tuple[Session, tuple]:
        """Apply one change (``steps_of(session)``: the generator that makes it) to the session at version
        ``expected`` (None: whatever its version); 409 when the session is at another version, or when ``key``
        (an idempotency key) made an earlier version. A retried change whose ``key`` made the current version is
        answered as it was, not applied twice."""
        self._refuse_off()
        async with self.locked(check_id(session_id)):
            session = await self.load(session_id)
            if key is not None and key in session.applied:
                made = session.applied[key]
                if made == session.version:
                    return session, await self._compute(session, None)
                raise HTTPException(409, f"this change (Idempotency-Key {key!r}) was applied as version {made}; "
                                         f"session {session_id!r} is now at version {session.version}")
            if expected is not None and expected != session.version:
                self.counts["conflicts"] += 1
                raise HTTPException(409, f"session {session_id!r} is at version {session.version}, not {expected}: "
                                         "read it and send the change again")
            old = session.version
            try:
                steps = steps_of(session)
            except ValueError as error:
                raise HTTPException(400, str(error)) from None
            answer = await self._compute(session, steps)
            session.changed(key)
            await self._save(session, old)
            self.counts["changes"] += 1
            return session, answer

    async def delete(self, session_id: str) -> bool:
        """Forget the session (in memory and in the store); 404 when there is none."""
        async with self.locked(check_id(session_id)):
            found = session_id in self.warm
            self._drop(session_id)
            if self.store is not None:
                found = await self._stored(self.store.delete, session_id)
            if not found:
                raise self._missing(session_id)
            return True

    async def listing(self) -> list[dict]:
        """What each session shows: the store's records (their metadata) or, without a store, the warm sessions."""
        self._expire()
        if self.store is None:
            return [session.info() for session in self.warm.values()]
        return sorted((listed(meta) for meta in await self._stored(self.store.metas)), key=lambda i: i["id"])
