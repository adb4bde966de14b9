"""The session routes (``/v1/sessions``, Avey-B's own): a document the client names, made once, then appended to,
edited or read, each change computing only what changed (:mod:`avey_b.apps.serve.sessions`). Every answer holds
the document's vector (and late chunks, with their spans) as a fresh encode of its whole current text gives it.

A change may carry the ``version`` the client holds (another one: 409) and an ``Idempotency-Key`` header (a retry of
a change that was applied is answered as it was, never applied twice)."""

from typing import Annotated  # no `from __future__ import annotations`: FastAPI reads the routes' live annotations

from fastapi import APIRouter, Header, HTTPException, Query, Request

from avey_b.apps.serve.answers import SessionAnswer, SessionDeleted, SessionList, ok
from avey_b.apps.serve.schemas import SessionChange, SessionContent, SessionCreate, SessionReplace
from avey_b.apps.serve.service import Service, ServiceDep, note, reading
from avey_b.apps.serve.sessions import check_kind
from avey_b.apps.serve.work import encoding, finish_vector
from avey_b.inference.sessions import Session

router = APIRouter(tags=["Avey-B sessions"])

#: an ``Idempotency-Key`` header: a retried change is applied once
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=256,
                                              description="a key of the client's choosing for this change: a retry "
                                                          "with the same key is answered as the change was, not "
                                                          "applied twice")]


def answer(service: Service, session: Session, computed: tuple, encoding_format: str) -> dict:
    """A session's answer: its listing, its vectors and the splits this request computed."""
    encode, normalize = encoding(encoding_format), service.encoder.normalize
    vector, chunks, splits = computed
    out = {**session.info(), "embedding": encode(finish_vector(vector, None, normalize)), "computed_splits": splits}
    if chunks is not None:
        vectors, spans = chunks
        out["chunks"] = [{"embedding": encode(finish_vector(v, None, normalize)), "span": list(span)}
                         for v, span in zip(vectors, spans, strict=True)]
    return out


def content_of(service: Service, body: SessionContent, session: Session | None = None):
    """The body's content checked: its characters (--max-input-chars) or its token ids (the vocabulary), and of
    the session's kind."""
    if body.text is not None:
        service.check_chars(0, body.text)
        content = body.text
    else:
        try:
            service.encoder.check_ids([body.input_ids])
        except ValueError as error:
            raise HTTPException(400, str(error)) from None
        content = body.input_ids
    if session is not None:
        check_kind(session, content)
    return content


@router.post("/v1/sessions", responses=ok(SessionAnswer))
async def create(request: Request, service: ServiceDep, key: IdempotencyKey = None,
                 body: Annotated[SessionCreate, reading(SessionCreate)] = None):
    content = content_of(service, body)
    session, computed = await service.sessions.create(body.id, content, body.chunk_tokens, body.chunk_overlap, key)
    note(request, 1, len(session.document))
    return answer(service, session, computed, body.encoding_format)


@router.get("/v1/sessions", responses=ok(SessionList))
async def listing(service: ServiceDep):
    return {"object": "list", "data": await service.sessions.listing()}


@router.get("/v1/sessions/{session_id}", responses=ok(SessionAnswer))
async def read(session_id: str, service: ServiceDep,
               encoding_format: Annotated[str, Query(description="`float` or `base64`")] = "float"):
    encoding(encoding_format)
    session, computed = await service.sessions.read(session_id)
    return answer(service, session, computed, encoding_format)


@router.post("/v1/sessions/{session_id}/append", responses=ok(SessionAnswer))
async def append(session_id: str, request: Request, service: ServiceDep, key: IdempotencyKey = None,
                 body: Annotated[SessionChange, reading(SessionChange)] = None):
    encoding(body.encoding_format)

    def steps(session: Session):
        return service.sessions.appending(session.document, content_of(service, body, session))

    session, computed = await service.sessions.change(session_id, steps, body.version, key)
    note(request, 1, len(body.text) if body.text is not None else len(body.input_ids))
    return answer(service, session, computed, body.encoding_format)


@router.post("/v1/sessions/{session_id}/replace", responses=ok(SessionAnswer))
async def replace(session_id: str, request: Request, service: ServiceDep, key: IdempotencyKey = None,
                  body: Annotated[SessionReplace, reading(SessionReplace)] = None):
    encoding(body.encoding_format)

    def steps(session: Session):
        content = content_of(service, body, session)
        size = len(session.document.text) if session.kind == "text" else len(session.document)
        if not body.start <= body.end <= size:
            unit = "characters" if session.kind == "text" else "tokens"
            raise HTTPException(400, f"the span {body.start}:{body.end} is not within session {session_id!r}'s "
                                     f"{size:,} {unit}")
        return service.sessions.replacing(session.document, body.start, body.end, content)

    session, computed = await service.sessions.change(session_id, steps, body.version, key)
    note(request, 1, len(session.document))
    return answer(service, session, computed, body.encoding_format)


@router.put("/v1/sessions/{session_id}/text", responses=ok(SessionAnswer))
async def set_text(session_id: str, request: Request, service: ServiceDep, key: IdempotencyKey = None,
                   body: Annotated[SessionChange, reading(SessionChange)] = None):
    """The session's whole new text (or token ids), of which only the change from the current one is computed:
    what a client that resends the whole conversation each turn sends."""
    encoding(body.encoding_format)

    def steps(session: Session):
        return service.sessions.setting(session.document, content_of(service, body, session))

    session, computed = await service.sessions.change(session_id, steps, body.version, key)
    note(request, 1, len(session.document))
    return answer(service, session, computed, body.encoding_format)


@router.delete("/v1/sessions/{session_id}", responses=ok(SessionDeleted))
async def delete(session_id: str, service: ServiceDep):
    await service.sessions.delete(session_id)
    return {"id": session_id, "object": "session.deleted", "deleted": True}


async def embedded_session(request: Request, service: Service, body) -> tuple[Session, tuple]:
    """``/v1/embeddings`` with ``session``: its one input is the session's whole current text (or, with
    ``session_append``, the text to add; token ids for a session of ids); the session is made when new (with
    ``chunk_tokens``, its late chunks). Returns the session and its vectors."""
    if body.chunk_spans is not None:
        raise HTTPException(400, "chunk_spans is not taken with `session`: make the session with chunk_tokens")
    given = body.input
    if isinstance(given, list) and given and not isinstance(given[0], int):
        if len(given) != 1:
            raise HTTPException(400, f"`session` takes one input (the session's document), got {len(given)}")
        given = given[0]
    if not given:
        raise HTTPException(400, "input is empty: give the session's text")
    content = content_of(service, SessionContent(text=given) if isinstance(given, str) else
                         SessionContent(input_ids=given))
    session, computed = await service.sessions.embed(body.session, content, body.chunk_tokens, body.session_append)
    note(request, 1, len(session.document))
    return session, computed
