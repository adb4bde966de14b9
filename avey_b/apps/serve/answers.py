"""The response bodies of every route (pydantic), as the OpenAPI schema publishes them (each route's
``responses={200: ...}``; the routes return plain values, not validated again on the way out) and the error body
every 4xx and 5xx answer carries (:data:`ERRORS`). The schema's ``/openapi.json`` is what the suite fuzzes the server
from (tests/test_serve_fuzz.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


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
          404: "an unknown route or model", 405: "a method the route does not have",
          408: "the body did not arrive within --body-timeout-s", 413: "past a limit (named with its flag)",
          422: "invalid JSON, a missing, mistyped or unknown field", 503: "the queue is full, or the server drains"}


def ok(model) -> dict:
    """A route's ``responses`` argument: its 200 body is ``model``."""
    return {200: {"model": model}}


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class ModelCard(BaseModel):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: str
    data: list[ModelCard]


class Embedding(BaseModel):
    object: str
    index: int
    embedding: list[float] | str
    chunk: int | None = None
    span: list[int] | None = None


class EmbeddingList(BaseModel):
    object: str
    model: str
    data: list[Embedding]
    usage: Usage


class Classified(BaseModel):
    label: str
    scores: dict[str, float]


class ClassifyAnswer(BaseModel):
    model: str
    results: list[Classified]
    usage: Usage


class Filled(BaseModel):
    token: str
    score: float


class FillMaskAnswer(BaseModel):
    model: str
    results: list[list[list[Filled]]]


class CohereText(BaseModel):
    text: str


class CohereResult(BaseModel):
    index: int
    relevance_score: float
    document: CohereText | None = None


class CohereUsage(BaseModel):
    total_tokens: int


class CohereRerankAnswer(BaseModel):
    id: str
    model: str
    results: list[CohereResult]
    usage: CohereUsage


class Label(BaseModel):
    score: float
    label: str


class Ranked(BaseModel):
    """One text of ``/rerank``'s and ``/maxsim``'s answers, best first: its index in ``texts``, its score and
    (``return_text``) the text."""

    index: int
    score: float
    text: str | None = None


class SparseValue(BaseModel):
    """One non-zero weight of a sparse vector, as TEI's ``/embed_sparse`` answers it: the vocabulary id and its
    weight (per input, in ascending ``index`` order)."""

    index: int
    value: float


class Token(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class Health(BaseModel):
    status: str
    model: str
    architecture: str
    serves: list[str]
    max_tokens: int
    device: str
    bf16: bool
    threads: int | None
    onnx: str | None


class Info(BaseModel):
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
