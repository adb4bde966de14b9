"""The OpenAI-style routes (``/v1/...``): models, embeddings (with Matryoshka ``dimensions`` and late chunking),
classify, fill-mask, and the Cohere / Jina / vLLM rerank shape."""

from __future__ import annotations

import base64
import time
import uuid

from fastapi import HTTPException, Request

from avey_b.apps.embed.chunks import chunk_ranges
from avey_b.apps.serve.schemas import (
    ClassifyRequest,
    CohereRerankRequest,
    EmbeddingRequest,
    FillMaskRequest,
)
from avey_b.apps.serve.service import Service, note, read
from avey_b.apps.serve.work import finish_vector, scores

#: ``encoding_format``: float32 values as JSON numbers, or their little-endian bytes base64-encoded (the openai
#: SDK's default, which it decodes)
ENCODINGS = {"float": lambda v: v.tolist(),
             "base64": lambda v: base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")}


def add_openai_routes(app, service: Service) -> None:
    encoder, created = service.encoder, int(time.time())
    config = encoder.config

    def card() -> dict:
        return {"id": service.name, "object": "model", "created": created, "owned_by": "avey-b"}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [card()]}

    @app.get("/v1/models/{model:path}")
    def model(model: str):
        service.check_model(model)
        return card()

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body = await read(request, EmbeddingRequest)
        service.check_model(body.model)
        if body.encoding_format not in ENCODINGS:
            raise HTTPException(400, f"encoding_format must be one of {sorted(ENCODINGS)}, got "
                                     f"{body.encoding_format!r}")
        encode, dims = ENCODINGS[body.encoding_format], service.dimensions(body.dimensions)
        normalize = bool(getattr(config, "normalize_embeddings", True))
        late = body.chunk_tokens is not None or body.chunk_spans is not None
        if body.chunk_tokens is not None and body.chunk_spans is not None:
            raise HTTPException(400, "give chunk_tokens or chunk_spans, not both")
        encoded = await service.encode(body.input, offsets=late)
        note(request, len(encoded.ids), encoded.tokens)
        if not late:
            vectors = await service.run("embed", encoded.ids)
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

    @app.post("/v1/classify")
    async def classify(request: Request):
        body = await read(request, ClassifyRequest)
        service.check_model(body.model)
        service.needs("classify", "/v1/classify")
        encoded = await service.encode(body.input)
        note(request, len(encoded.ids), encoded.tokens)
        names, results = config.id2label, []
        for logits in await service.run("logits", encoded.ids):
            p = scores(logits, raw=False)
            results.append({"label": names[int(p.argmax())], "scores": {names[i]: float(v) for i, v in enumerate(p)}})
        return {"model": service.name, "results": results,
                "usage": {"prompt_tokens": encoded.tokens, "total_tokens": encoded.tokens}}

    @app.post("/v1/fill-mask")
    async def fill_mask(request: Request):
        body = await read(request, FillMaskRequest)
        service.check_model(body.model)
        service.needs("fill", "/v1/fill-mask")
        tokenizer = encoder.tokenizer
        rows = service.rows(body.input)
        if any((tokenizer.mask_token not in r) if isinstance(r, str) else (tokenizer.mask_token_id not in r)
               for r in rows):
            raise HTTPException(400, f"every input needs at least one {tokenizer.mask_token} (token id "
                                     f"{tokenizer.mask_token_id})")
        encoded = await service.encode(body.input)
        note(request, len(encoded.ids), encoded.tokens)
        results = await service.run("fill", encoded.ids)
        return {"model": service.name, "results": [[m[:body.top_k] for m in r] for r in results]}

    async def cohere_rerank(request: Request):
        body = await read(request, CohereRerankRequest)
        service.check_model(body.model)
        service.needs("rerank", request.url.path)
        documents = [d if isinstance(d, str) else d.text for d in body.documents]
        if not documents:
            raise HTTPException(400, "documents is empty")
        encoded = await service.encode_pairs([body.query] * len(documents), documents)
        note(request, len(documents), encoded.tokens)
        relevance = [float(scores(v, raw=False)[0]) for v in await service.run("logits", encoded.ids)]
        ranked = sorted(range(len(documents)), key=lambda i: -relevance[i])[:body.top_n]
        return {"id": uuid.uuid4().hex, "model": service.name,
                "results": [{"index": i, "relevance_score": relevance[i],
                             **({"document": {"text": documents[i]}} if body.return_documents else {})}
                            for i in ranked],
                "usage": {"total_tokens": encoded.tokens}}

    app.post("/v1/rerank")(cohere_rerank)
    app.post("/v2/rerank")(cohere_rerank)


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
