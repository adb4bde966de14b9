"""The OpenAI-style routes (``/v1/...``): models, embeddings (with Matryoshka ``dimensions`` and late chunking),
classify, fill-mask, and the Cohere / Jina / vLLM rerank shape."""

import contextlib
import uuid  # no `from __future__ import annotations`: FastAPI reads the routes' live annotations
from typing import Annotated

from fastapi import APIRouter, HTTPException, Request

from avey_b.apps.serve import routes_sessions
from avey_b.apps.serve.answers import (
    ClassifyAnswer,
    CohereRerankAnswer,
    EmbeddingList,
    FillMaskAnswer,
    ModelCard,
    ModelList,
    ok,
)
from avey_b.apps.serve.schemas import (
    ClassifyRequest,
    CohereRerankRequest,
    EmbeddingRequest,
    FillMaskRequest,
)
from avey_b.apps.serve.service import Service, ServiceDep, note, reading
from avey_b.apps.serve.work import encoding, evidence_of, finish_vector, scores
from avey_b.inference.chunks import chunk_ranges

router = APIRouter()


def card(service: Service) -> dict:
    """The served model as the OpenAI API's model object."""
    return {"id": service.name, "object": "model", "created": service.created, "owned_by": "avey-b"}


@router.get("/v1/models", responses=ok(ModelList))
def models(service: ServiceDep):
    return {"object": "list", "data": [card(service)]}


@router.get("/v1/models/{model:path}", responses=ok(ModelCard))
def model(model: str, service: ServiceDep):
    service.check_model(model)
    return card(service)


@router.post("/v1/embeddings", responses=ok(EmbeddingList))
async def embeddings(request: Request, service: ServiceDep,
                     body: Annotated[EmbeddingRequest, reading(EmbeddingRequest)]):
    encode, dims = encoding(body.encoding_format), service.dimensions(body.dimensions)
    normalize = service.encoder.normalize
    body.input = service.openai_ids.input(body.input)  # token-id arrays: --openai-token-ids
    if body.session is not None:
        session, (vector, chunks, _) = await routes_sessions.embedded_session(request, service, body)
        if chunks is None:
            data = [{"object": "embedding", "index": 0, "embedding": encode(finish_vector(vector, dims, normalize))}]
        else:
            data = [{"object": "embedding", "index": 0, "chunk": c, "span": list(span),
                     "embedding": encode(finish_vector(v, dims, normalize))}
                    for c, (v, span) in enumerate(zip(*chunks, strict=True))]
        tokens = len(session.document)
        return {"object": "list", "model": service.name, "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    if body.session_append:
        raise HTTPException(400, "session_append needs `session`: the session to add the input to")
    late = body.chunk_tokens is not None or body.chunk_spans is not None
    if body.chunk_tokens is not None and body.chunk_spans is not None:
        raise HTTPException(400, "give chunk_tokens or chunk_spans, not both")
    encoded = await service.encode(body.input, offsets=late)
    note(request, len(encoded.ids), encoded.tokens)
    if not late:
        vectors = await service.run("embed", encoded.ids, request=request)
        data = [{"object": "embedding", "index": i, "embedding": encode(finish_vector(v, dims, normalize))}
                for i, v in enumerate(vectors)]
    else:
        ranges = late_chunks(encoded, body.chunk_tokens, body.chunk_spans)
        per_input = await service.run("chunks", encoded.ids, [[r[:2] for r in rs] for rs in ranges])
        data = [{"object": "embedding", "index": i, "chunk": c, "span": [r[2], r[3]],
                 "embedding": encode(finish_vector(v, dims, normalize))}
                for i, (vectors, rs) in enumerate(zip(per_input, ranges, strict=True))
                for c, (v, r) in enumerate(zip(vectors, rs, strict=True))]
    return {"object": "list", "model": service.name, "data": data,
            "usage": {"prompt_tokens": encoded.tokens, "total_tokens": encoded.tokens}}


@router.post("/v1/classify", responses=ok(ClassifyAnswer))
async def classify(request: Request, service: ServiceDep,
                   body: Annotated[ClassifyRequest, reading(ClassifyRequest, needs="classify")]):
    encoded = await service.encode(body.input)
    note(request, len(encoded.ids), encoded.tokens)
    names, results = service.encoder.config.id2label, []
    for logits in await service.run("logits", encoded.ids):
        p = scores(logits, raw=False)
        results.append({"label": names[int(p.argmax())], "scores": {names[i]: float(v) for i, v in enumerate(p)}})
    return {"model": service.name, "results": results,
            "usage": {"prompt_tokens": encoded.tokens, "total_tokens": encoded.tokens}}


@router.post("/v1/fill-mask", responses=ok(FillMaskAnswer))
async def fill_mask(request: Request, service: ServiceDep,
                    body: Annotated[FillMaskRequest, reading(FillMaskRequest, needs="fill")]):
    tokenizer = service.encoder.tokenizer
    rows = service.rows(body.input)
    if any((tokenizer.mask_token not in r) if isinstance(r, str) else (tokenizer.mask_token_id not in r)
           for r in rows):
        raise HTTPException(400, f"every input needs at least one {tokenizer.mask_token} (token id "
                                 f"{tokenizer.mask_token_id})")
    encoded = await service.encode(body.input)
    note(request, len(encoded.ids), encoded.tokens)
    results = await service.run("fill", encoded.ids)
    return {"model": service.name, "results": [[m[:body.top_k] for m in r] for r in results]}


async def cohere_rerank(request: Request, service: ServiceDep,
                        body: Annotated[CohereRerankRequest, reading(CohereRerankRequest, needs="rerank")]):
    if not body.documents:
        raise HTTPException(400, "documents is empty")
    named = [d.session for d in body.documents if not isinstance(d, str) and d.session is not None]
    async with service.sessions.texts(named) if named else contextlib.nullcontext({}) as sessions:
        given = [d if isinstance(d, str) else d.text if d.text is not None else sessions[d.session].document
                 for d in body.documents]  # texts, and the sessions' documents (their states)
        documents = [d if isinstance(d, str) else d.text for d in given]
        evidence = None
        if service.query_last:  # the query after each document, of any length: its splits alone, with the evidence
            found = await service.score_after(body.query, given)
            tokens, relevance, evidence = (sum(r.tokens for r in found), [r.score for r in found],
                                           [evidence_of(r) for r in found])
        else:
            encoded = await service.encode_pairs([body.query] * len(documents), documents)
            tokens = encoded.tokens
            relevance = [float(scores(v, raw=False)[0]) for v in await service.run("logits", encoded.ids)]
    note(request, len(documents), tokens)
    ranked = sorted(range(len(documents)), key=lambda i: -relevance[i])[:body.top_n]
    return {"id": uuid.uuid4().hex, "model": service.name,
            "results": [{"index": i, "relevance_score": relevance[i],
                         **({"document": {"text": documents[i]}} if body.return_documents else {}),
                         **({"evidence": evidence[i]} if evidence is not None else {})}
                        for i in ranked],
            "usage": {"total_tokens": tokens}}


# one route on the two paths the rerank clients post to
router.post("/v1/rerank", responses=ok(CohereRerankAnswer))(cohere_rerank)
router.post("/v2/rerank", responses=ok(CohereRerankAnswer))(cohere_rerank)


def late_chunks(encoded, chunk_tokens: int | None, chunk_spans: list | None) -> list[list[tuple[int, int, int, int]]]:
    """Each input's chunks as ``(token start, token end, char start, char end)`` (:func:`chunk_ranges`: consecutive
    text tokens, or the tokens that start inside each character span; token-id inputs count spans in tokens)."""
    if chunk_spans is not None and len(chunk_spans) != len(encoded.ids):
        raise HTTPException(400, f"chunk_spans has {len(chunk_spans)} lists of spans for {len(encoded.ids)} inputs: "
                                 "give one list per input")
    out = []
    for i in range(len(encoded.ids)):
        spans = None if chunk_spans is None else chunk_spans[i]
        if spans is not None and not all(0 <= a < b for a, b in spans):
            raise HTTPException(400, f"input {i}: chunk_spans must be [start, end) pairs with 0 <= start < end")
        try:
            out.append(chunk_ranges(encoded.offsets[i], encoded.special[i], chunk_tokens=chunk_tokens,
                                    char_spans=spans))
        except ValueError as error:
            raise HTTPException(400, f"input {i}: {error}") from None
    return out
