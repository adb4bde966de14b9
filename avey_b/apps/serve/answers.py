"""The response bodies of every route (pydantic), as the OpenAPI schema publishes them (each route's
``responses={200: ...}``; the routes return plain values, not validated again on the way out) and the error body
every 4xx and 5xx answer carries (:data:`ERRORS`). The schema's ``/openapi.json`` is what the suite fuzzes the server
from (tests/test_serve_fuzz.py). A field's docstring is its description in the schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Answer(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class ErrorObject(BaseModel):
    message: str
    type: str
    param: None = None
    code: None = None


class ErrorBody(BaseModel):
    """FastAPI's ``detail`` (the message, or the list of validation problems) beside the OpenAI API's ``error``."""

    detail: str | list[dict[str, Any]]
    error: ErrorObject


#: the error answers of every route (:func:`avey_b.apps.serve.openapi.openapi_schema` adds them to each)
ERRORS = {400: "a bad value, or a route this checkpoint cannot serve", 401: "no, a malformed or a wrong API key",
          404: "an unknown route, model or session", 405: "a method the route does not have",
          409: "a session's id is taken, or it is at another version than the one sent",
          408: "the body did not arrive within --body-timeout-s", 413: "past a limit (named with its flag)",
          422: "invalid JSON, a missing, mistyped or unknown field", 503: "the queue is full, or the server drains"}


def ok(model) -> dict:
    """A route's ``responses`` argument: its 200 body is ``model``."""
    return {200: {"model": model}}


class Usage(Answer):
    prompt_tokens: int
    """the tokens of the request's inputs, special tokens included"""
    total_tokens: int
    """the same count (no tokens are generated)"""


class ModelCard(Answer):
    id: str
    """the served model's name (--served-model-name)"""
    object: str
    """`model`"""
    created: int
    """when the server started (Unix seconds)"""
    owned_by: str
    """`avey-b`"""


class ModelList(Answer):
    object: str
    """`list`"""
    data: list[ModelCard]
    """the served model, alone"""


class Embedding(Answer):
    object: str
    """`embedding`"""
    index: int
    """the input's position in the request"""
    embedding: list[float] | str
    """the vector: numbers, or their float32 bytes in base64 (`encoding_format`)"""
    chunk: int | None = None
    """late chunking: the chunk's position in its input"""
    span: list[int] | None = None
    """late chunking: the chunk's `[start, end)` in the input's characters (tokens for token ids)"""


class EmbeddingList(Answer):
    object: str
    """`list`"""
    model: str
    """the served model's name"""
    data: list[Embedding]
    usage: Usage


class Classified(Answer):
    label: str
    """the best label"""
    scores: dict[str, float]
    """every label's probability (the softmax; the sigmoid for one label)"""


class ClassifyAnswer(BaseModel):
    model: str
    results: list[Classified]
    usage: Usage


class Filled(Answer):
    token: str
    """a token proposed for the mask"""
    score: float
    """its probability"""


class FillMaskAnswer(Answer):
    model: str
    """the served model's name"""
    results: list[list[list[Filled]]]
    """per input, per mask token, the `top_k` likeliest tokens, best first"""


class CohereText(BaseModel):
    text: str


class EvidenceSpan(Answer):
    """Where the query looked in a document: one of the splits the ranker chose for it (a query-last scorer)."""

    start: int
    """its first character in the document"""
    end: int
    """one past its last character"""
    score: float
    """the ranker's MaxSim score on the token embeddings"""


class CohereResult(Answer):
    index: int
    """the document's position in `documents`"""
    relevance_score: float
    """the sigmoid of the cross-encoder's logit for (query, document)"""
    document: CohereText | None = None
    """the document (`return_documents`)"""
    evidence: list[EvidenceSpan] | None = None
    """a query-last scorer's (`avey-b finetune --task long-rerank`): where the query looked in the document, best
    first"""


class CohereUsage(BaseModel):
    total_tokens: int


class CohereRerankAnswer(BaseModel):
    id: str
    model: str
    results: list[CohereResult]
    usage: CohereUsage


class Label(Answer):
    score: float
    """the label's score"""
    label: str
    """the label's name (the config's id2label)"""


class Ranked(Answer):
    """One text of ``/rerank``'s and ``/maxsim``'s answers, best first: its index in ``texts``, its score and
    (``return_text``) the text."""

    index: int
    """the text's position in `texts`"""
    score: float
    """its score"""
    text: str | None = None
    """the text (`return_text`)"""
    evidence: list[EvidenceSpan] | None = None
    """a query-last scorer's (`avey-b finetune --task long-rerank`): where the query looked in the text, best
    first"""


class SparseValue(Answer):
    """One non-zero weight of a sparse vector, as TEI's ``/embed_sparse`` answers it: the vocabulary id and its
    weight (per input, in ascending ``index`` order)."""

    index: int
    """the vocabulary id"""
    value: float
    """its weight"""


class Token(Answer):
    id: int
    """the token's id"""
    text: str
    """its text in the input (a special token: the token itself)"""
    special: bool
    """whether the tokenizer added it"""
    start: int | None
    """its first character in the input (null for a special token)"""
    stop: int | None
    """one past its last character (null for a special token)"""


class Health(Answer):
    status: str
    """`ok`"""
    model: str
    """the served model's name"""
    architecture: str
    """the checkpoint's class (AveyBForMaskedLM, ...)"""
    serves: list[str]
    """what it answers: `embed`, `fill`, `sparse`, `classify`, `rerank`, `multivector`"""
    max_tokens: int
    """the longest input in tokens (--max-tokens); the other limits follow it in the answer"""
    device: str
    """where the model runs"""
    bf16: bool
    """whether it runs under bf16 autocast"""
    threads: int | None
    """the threads it runs on"""
    onnx: str | None
    """the ONNX file it runs (--onnx), else null"""


class Info(Answer):
    model_id: str
    model_dtype: str
    model_type: dict[str, Any]
    max_input_length: int
    max_batch_tokens: int
    max_client_batch_size: int
    version: str
    serves: list[str]
    outputs: list[str]
    hidden_size: int


#: ``/embed``'s answer: one vector per input
Vectors = list[list[float]]
#: ``/predict``'s answer: labels best first, for one input or per input
Predictions = list[Label] | list[list[Label]]


class SessionInfo(Answer):
    id: str
    """the session's id"""
    object: str
    """`session`"""
    version: int
    """1 when made, raised by each change"""
    kind: str
    """`text` or `ids` (made of token ids)"""
    tokens: int
    """the document's tokens (special tokens included)"""
    characters: int | None = None
    """the document's characters (a session of text)"""
    bytes: int
    """what its state holds: the token ids and a few numbers per split, never the token states"""
    created: int
    """when it was made (Unix seconds)"""
    updated: int
    """when it last changed (Unix seconds)"""
    chunk_tokens: int | None
    """its late chunks' tokens (none: the whole document only)"""
    chunk_overlap: int
    """tokens shared by consecutive late chunks"""


class SessionChunk(Answer):
    embedding: list[float] | str
    """the chunk's vector, computed with the whole document in view"""
    span: list[int]
    """the chunk's `[start, end)` characters (tokens, for a session of ids)"""


class SessionAnswer(SessionInfo):
    embedding: list[float] | str
    """the document's vector, as a fresh encode of its whole text gives it"""
    chunks: list[SessionChunk] | None = None
    """the late chunks' vectors (with `chunk_tokens`)"""
    computed_splits: int
    """the splits this request ran through the model (0 for a read)"""


class SessionList(Answer):
    object: str
    """`list`"""
    data: list[SessionInfo]
    """every session held"""


class SessionDeleted(Answer):
    id: str
    """the session's id"""
    object: str
    """`session.deleted`"""
    deleted: bool
    """true"""
