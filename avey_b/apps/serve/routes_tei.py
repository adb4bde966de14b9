"""The routes of Hugging Face's Text Embeddings Inference (TEI), with its request and response shapes: ``/embed``,
``/embed_all``, ``/embed_sparse``, ``/predict``, ``/rerank``, ``/tokenize``, ``/decode``, ``/info``, and ``POST /``
(what ``huggingface_hub.InferenceClient(base_url=URL)`` posts to: text classification for a classifier, else
``/embed``); and ``/maxsim``, late-interaction scoring in ``/rerank``'s shape, for a multi-vector model."""

import asyncio  # no `from __future__ import annotations`: FastAPI reads the routes' live annotations
from typing import Annotated

import numpy as np
import torch
from fastapi import APIRouter, Depends, HTTPException, Request

from avey_b.apps.serve.answers import Info, Label, Predictions, Ranked, SparseValue, Token, Vectors, ok
from avey_b.apps.serve.schemas import (
    DecodeRequest,
    EmbedAllRequest,
    EmbedRequest,
    EmbedSparseRequest,
    MaxSimRequest,
    PredictRequest,
    RerankRequest,
    TextClassificationRequest,
    TokenizeRequest,
)
from avey_b.apps.serve.service import ServiceDep, note, read, reading
from avey_b.apps.serve.work import evidence_of, finish_vector, scores
from avey_b.model.multivector import query_scores

router = APIRouter()


def labelled(values: np.ndarray, id2label: dict) -> list[dict]:
    """``[{"score", "label"}]``, best first."""
    return sorted(({"score": float(v), "label": id2label[i]} for i, v in enumerate(values)), key=lambda d: -d["score"])


@router.post("/embed", responses=ok(Vectors))
async def embed(request: Request, service: ServiceDep, body: Annotated[EmbedRequest, reading(EmbedRequest)]):
    dims = service.dimensions(body.dimensions)
    encoded = await service.encode(body.input, truncate=bool(body.truncate), direction=body.truncation_direction,
                                   prompt_name=body.prompt_name)
    note(request, len(encoded.ids), encoded.tokens)
    vectors = await service.run("embed", encoded.ids, request=request)
    return [finish_vector(v, dims, body.normalize).tolist() for v in vectors]


@router.post("/embed_all", responses=ok(list[list[list[float]]]))
async def embed_all(request: Request, service: ServiceDep,
                    body: Annotated[EmbedAllRequest, reading(EmbedAllRequest)]):
    """Per input, a vector per token: the multi-vector head's unit token vectors (``multivector_dim`` wide, what
    ``/maxsim`` scores) when the model has the head, else the backbone's last hidden state (``hidden_size`` wide)."""
    kind = "multivector" if "multivector" in service.encoder.kinds else "tokens"
    encoded = await service.encode(body.input, truncate=bool(body.truncate), direction=body.truncation_direction,
                                   prompt_name=body.prompt_name)
    note(request, len(encoded.ids), encoded.tokens)
    return [v.tolist() for v in await service.run(kind, encoded.ids)]


@router.post("/embed_sparse", responses=ok(list[list[SparseValue]]))
async def embed_sparse(request: Request, service: ServiceDep,
                       body: Annotated[EmbedSparseRequest, reading(EmbedSparseRequest, needs="sparse")]):
    """SPLADE's sparse vectors (a masked-LM checkpoint), TEI's shape: per input, ``[{"index", "value"}]`` of its
    non-zero weights. Every input runs whole, as one forward (up to --max-tokens), the max over its tokens taken
    chunk by chunk through the masked-LM head: a long input never holds its ``(N, V)`` logits; it does not take the
    block-at-a-time state path ``/embed`` takes."""
    encoded = await service.encode(body.input, truncate=bool(body.truncate), direction=body.truncation_direction,
                                   prompt_name=body.prompt_name)
    note(request, len(encoded.ids), encoded.tokens)
    return [[{"index": int(i), "value": float(v)} for i, v in zip(indices, values, strict=True)]
            for indices, values in await service.run("sparse", encoded.ids)]


@router.post("/predict", responses=ok(Predictions))
async def predict(request: Request, service: ServiceDep,
                  body: Annotated[PredictRequest, reading(PredictRequest, needs="classify")]):
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
    id2label = service.encoder.config.id2label
    out = [labelled(scores(v, body.raw_scores), id2label) for v in await service.run("logits", encoded.ids)]
    return out[0] if single else out


@router.post("/rerank", responses=ok(list[Ranked]))
async def rerank(request: Request, service: ServiceDep,
                 body: Annotated[RerankRequest, reading(RerankRequest, needs="rerank")]):
    if not body.texts:
        raise HTTPException(400, "texts is empty")
    if service.query_last:  # the query after each text, of any length: its splits alone, with the evidence
        found = await service.score_after(body.query, body.texts)
        note(request, len(body.texts), sum(r.tokens for r in found))
        values = [float(r.logits[0]) if body.raw_scores else r.score for r in found]
        return ranked(values, body.texts, body.return_text, [evidence_of(r) for r in found])
    encoded = await service.encode_pairs([body.query] * len(body.texts), body.texts, truncate=bool(body.truncate),
                                         direction=body.truncation_direction)
    note(request, len(body.texts), encoded.tokens)
    values = [float(scores(v, body.raw_scores)[0]) for v in await service.run("logits", encoded.ids)]
    return ranked(values, body.texts, body.return_text)


def ranked(values: list[float], texts: list[str], return_text: bool, evidence: list | None = None) -> list[dict]:
    """``/rerank``'s and ``/maxsim``'s answer: ``[{index, score[, text][, evidence]}]``, best first."""
    return [{"index": i, "score": values[i], **({"text": texts[i]} if return_text else {}),
             **({"evidence": evidence[i]} if evidence is not None else {})}
            for i in sorted(range(len(values)), key=lambda i: -values[i])]


@router.post("/maxsim", responses=ok(list[Ranked]))
async def maxsim(request: Request, service: ServiceDep,
                 body: Annotated[MaxSimRequest, reading(MaxSimRequest, needs="multivector")]):
    """The query's MaxSim against each text (late interaction: the sum over the query's token vectors of the best
    dot product with the text's, :func:`avey_b.model.similarity.maxsim`), as ``/rerank`` answers a cross-encoder's:
    ``[{index, score[, text]}]``, best first. The texts are encoded as the query is (no markers, every token)."""
    if not body.texts:
        raise HTTPException(400, "texts is empty")
    encoded = await service.encode([body.query, *body.texts], truncate=bool(body.truncate),
                                   direction=body.truncation_direction)
    note(request, len(body.texts), encoded.tokens)
    vectors = [torch.from_numpy(v) for v in await service.run("multivector", encoded.ids)]
    values = (await asyncio.to_thread(query_scores, vectors[0], vectors[1:])).tolist()
    return ranked(values, body.texts, body.return_text)


@router.post("/tokenize", responses=ok(list[list[Token]]))
async def tokenize(request: Request, service: ServiceDep, body: Annotated[TokenizeRequest, reading(TokenizeRequest)]):
    texts, prefix = service.rows(body.input), service.prefix(body.prompt_name)
    texts = [prefix + t for t in texts]
    out = await asyncio.to_thread(token_table, service.encoder.tokenizer, texts, body.add_special_tokens)
    note(request, len(texts), sum(map(len, out)))
    return out


def token_table(tokenizer, texts: list[str], add_special_tokens: bool) -> list[list[dict]]:
    """Each text's tokens as TEI's ``/tokenize`` lists them: ``{id, text, special, start, stop}`` (a special
    token's text is the token, its start and stop None)."""
    enc = tokenizer(texts, add_special_tokens=add_special_tokens, return_offsets_mapping=True,
                    return_special_tokens_mask=True, truncation=False, verbose=False)
    return [[{"id": t, "text": tokenizer.convert_ids_to_tokens(t) if s else text[a:b], "special": bool(s),
              "start": None if s else a, "stop": None if s else b}
             for t, s, (a, b) in zip(ids, special, offsets, strict=True)]
            for text, ids, special, offsets in zip(texts, enc["input_ids"], enc["special_tokens_mask"],
                                                    enc["offset_mapping"], strict=True)]


@router.post("/decode", responses=ok(list[str]))
async def decode(request: Request, service: ServiceDep, body: Annotated[DecodeRequest, reading(DecodeRequest)]):
    rows = service.rows(body.ids)
    try:
        service.encoder.check_ids(rows)
    except ValueError as error:
        raise HTTPException(400, str(error)) from None
    note(request, len(rows), sum(map(len, rows)))
    return await asyncio.to_thread(service.encoder.tokenizer.batch_decode, rows,
                                   skip_special_tokens=body.skip_special_tokens)


@router.get("/info", responses=ok(Info))
def tei_info(request: Request, service: ServiceDep):
    encoder, config, options = service.encoder, service.encoder.config, service.options
    if "rerank" in encoder.kinds:  # TEI's fields, then this server's
        model_type = {"reranker": {"id2label": config.id2label, "label2id": config.label2id}}
    elif "classify" in encoder.kinds:
        model_type = {"classifier": {"id2label": config.id2label, "label2id": config.label2id}}
    else:  # TEI names a SPLADE model's pooling "splade"
        sparse = getattr(config, "embedding_kind", "dense") == "sparse"
        model_type = {"embedding": {"pooling": "splade" if sparse else "mean"}}
    return {"model_id": service.name, "model_sha": None,
            "model_dtype": "bfloat16" if encoder.bf16 else "float32", "model_type": model_type,
            "max_concurrent_requests": options.queue_size, "max_input_length": service.max_tokens,
            "max_batch_tokens": options.max_batch_tokens, "max_batch_requests": None,
            "max_client_batch_size": options.max_request_inputs, "tokenization_workers": None,
            "version": request.app.version, "architecture": encoder.architecture, "serves": encoder.kinds,
            "outputs": encoder.vector_outputs,
            **service.limits(), "hidden_size": config.hidden_size, "matryoshka_dimensions": service.matryoshka,
            "normalize_embeddings": encoder.normalize,
            "prompts": service.prompts, "device": str(encoder.device),
            "runtime": f"onnxruntime: {encoder.onnx_file.name}" if encoder.onnx_file else "eager",
            "threads": service.threads()}


async def inference_client_body(request: Request, service: ServiceDep) -> TextClassificationRequest | EmbedRequest:
    """``POST /``'s body: text classification's on a classifier, else ``/embed``'s."""
    return await read(request, inference_client_body.body_type(service))


inference_client_body.body_type = lambda service: (TextClassificationRequest if "classify" in service.encoder.kinds
                                                   else EmbedRequest)


@router.post("/", responses=ok(Vectors | list[list[Label]]))
async def root(request: Request, service: ServiceDep,
               body: Annotated[TextClassificationRequest | EmbedRequest, Depends(inference_client_body)]):
    """``InferenceClient(base_url=URL)``'s tasks: text classification on a classifier, else ``/embed``."""
    if isinstance(body, EmbedRequest):
        return await embed(request, service, body)
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
        out.append(labelled(values, service.encoder.config.id2label)[:parameters.top_k if parameters else None])
    return out
