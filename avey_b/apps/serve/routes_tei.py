"""The routes of Hugging Face's Text Embeddings Inference (TEI), with its request and response shapes: ``/embed``,
``/embed_all``, ``/predict``, ``/rerank``, ``/tokenize``, ``/decode``, ``/info``, and ``POST /`` (what
``huggingface_hub.InferenceClient(base_url=URL)`` posts to: text classification for a classifier, else
``/embed``)."""

from __future__ import annotations

import asyncio

import numpy as np
from fastapi import HTTPException, Request

from avey_b.apps.serve.schemas import (
    DecodeRequest,
    EmbedAllRequest,
    EmbedRequest,
    PredictRequest,
    RerankRequest,
    TextClassificationRequest,
    TokenizeRequest,
)
from avey_b.apps.serve.service import Service, note, read
from avey_b.apps.serve.work import finish_vector, scores


def add_tei_routes(app, service: Service, info) -> None:
    encoder = service.encoder
    config = encoder.config

    def labelled(values: np.ndarray) -> list[dict]:
        """``[{"score", "label"}]``, best first."""
        return sorted(({"score": float(v), "label": config.id2label[i]} for i, v in enumerate(values)),
                      key=lambda d: -d["score"])

    @app.post("/embed")
    async def embed(request: Request):
        body = await read(request, EmbedRequest)
        dims = service.dimensions(body.dimensions)
        encoded = await service.encode(body.input, truncate=bool(body.truncate), direction=body.truncation_direction,
                                       prompt_name=body.prompt_name)
        note(request, len(encoded.ids), encoded.tokens)
        return [finish_vector(v, dims, body.normalize).tolist() for v in await service.run("embed", encoded.ids)]

    @app.post("/embed_all")
    async def embed_all(request: Request):
        body = await read(request, EmbedAllRequest)
        encoded = await service.encode(body.input, truncate=bool(body.truncate), direction=body.truncation_direction,
                                       prompt_name=body.prompt_name)
        note(request, len(encoded.ids), encoded.tokens)
        return [v.tolist() for v in await service.run("tokens", encoded.ids)]

    @app.post("/predict")
    async def predict(request: Request):
        body = await read(request, PredictRequest)
        service.needs("classify", "/predict")
        given = body.input
        single = isinstance(given, str) or (len(given) == 2 and all(isinstance(t, str) for t in given))
        sequences = [given] if single else given  # TEI's reading: a list of exactly two strings is one pair
        firsts, seconds = [], []
        for i, s in enumerate(sequences):
            if isinstance(s, str):
                firsts.append(s), seconds.append(None)
            elif len(s) == 2:
                firsts.append(s[0]), seconds.append(s[1])
            else:
                raise HTTPException(400, f"input {i} has {len(s)} texts: give a text or a pair [a, b]")
        encoded = await service.encode_pairs(firsts, seconds, truncate=bool(body.truncate),
                                             direction=body.truncation_direction)
        note(request, len(firsts), encoded.tokens)
        out = [labelled(scores(v, body.raw_scores)) for v in await service.run("logits", encoded.ids)]
        return out[0] if single else out

    @app.post("/rerank")
    async def rerank(request: Request):
        body = await read(request, RerankRequest)
        service.needs("rerank", "/rerank")
        if not body.texts:
            raise HTTPException(400, "texts is empty")
        encoded = await service.encode_pairs([body.query] * len(body.texts), body.texts, truncate=bool(body.truncate),
                                             direction=body.truncation_direction)
        note(request, len(body.texts), encoded.tokens)
        values = [float(scores(v, body.raw_scores)[0]) for v in await service.run("logits", encoded.ids)]
        return [{"index": i, "score": values[i], **({"text": body.texts[i]} if body.return_text else {})}
                for i in sorted(range(len(values)), key=lambda i: -values[i])]

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await read(request, TokenizeRequest)
        texts, prefix = service.rows(body.input), service.prefix(body.prompt_name)
        texts = [prefix + t for t in texts]
        tokenizer = encoder.tokenizer

        def run():
            enc = tokenizer(texts, add_special_tokens=body.add_special_tokens, return_offsets_mapping=True,
                            return_special_tokens_mask=True, truncation=False, verbose=False)
            return [[{"id": t, "text": tokenizer.convert_ids_to_tokens(t) if s else text[a:b], "special": bool(s),
                      "start": None if s else a, "stop": None if s else b}
                     for t, s, (a, b) in zip(ids, special, offsets, strict=True)]
                    for text, ids, special, offsets in zip(texts, enc["input_ids"], enc["special_tokens_mask"],
                                                            enc["offset_mapping"], strict=True)]

        out = await asyncio.to_thread(run)
        note(request, len(texts), sum(map(len, out)))
        return out

    @app.post("/decode")
    async def decode(request: Request):
        body = await read(request, DecodeRequest)
        rows = service.rows(body.ids)
        try:
            encoder.check_ids(rows)
        except ValueError as error:
            raise HTTPException(400, str(error)) from None
        note(request, len(rows), sum(map(len, rows)))
        return await asyncio.to_thread(encoder.tokenizer.batch_decode, rows,
                                       skip_special_tokens=body.skip_special_tokens)

    @app.get("/info")
    def tei_info():
        return info()

    @app.post("/")
    async def root(request: Request):
        """``InferenceClient(base_url=URL)``'s tasks: text classification on a classifier, else ``/embed``."""
        if "classify" not in encoder.kinds:
            return await embed(request)
        body = await read(request, TextClassificationRequest)
        parameters = body.parameters
        function = (parameters and parameters.function_to_apply) or "default"
        encoded = await service.encode(body.input)
        note(request, len(encoded.ids), encoded.tokens)
        out = []
        for logits in await service.run("logits", encoded.ids):
            if function == "default":
                values = scores(logits, raw=False)
            elif function == "sigmoid":
                values = 1 / (1 + np.exp(-logits.astype(np.float64)))
            elif function == "softmax":
                values = scores(logits, raw=False) if len(logits) > 1 else np.ones(1)
            else:
                values = logits
            out.append(labelled(values)[:parameters.top_k if parameters else None])
        return out
