"""The request bodies of every route (pydantic): each names its fields, and a field it does not have is refused
(422 naming it), so that a typo or another API's option is never silently ignored. Each API's own optional fields
are accepted. The texts of a request are in ``input`` (the OpenAI name) or ``inputs`` (the Hugging Face / TEI
name), never both."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

#: texts, or token ids: one string, a list of strings, one list of ids (one input), or a list of such lists
Inputs = str | list[str] | list[StrictInt] | list[list[StrictInt]]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputBody(Body):
    input: Inputs = Field(validation_alias=AliasChoices("input", "inputs"))

    @model_validator(mode="before")
    @classmethod
    def one_input_field(cls, data):
        if isinstance(data, dict) and "input" in data and "inputs" in data:
            raise ValueError("give the inputs in `input` or in its alias `inputs`, not both")
        return data


class TruncationFields(Body):
    """TEI's truncation fields: ``truncate`` cuts an input longer than the server's --max-tokens to that many tokens
    (special tokens kept) on the ``truncation_direction`` side instead of refusing it with 413."""

    truncate: bool | None = None
    truncation_direction: Literal["left", "right"] = "right"

    @field_validator("truncation_direction", mode="before")
    @classmethod
    def lower(cls, value):
        return value.lower() if isinstance(value, str) else value  # TEI writes "Right", huggingface_hub "right"


class Truncation(TruncationFields, InputBody):
    pass


# ------------------------------------------------------------------------------------------------ OpenAI
class EmbeddingRequest(InputBody):
    model: str | None = None
    encoding_format: str = "float"
    dimensions: int | None = None
    user: str | None = None  # the OpenAI API's end-user tag: accepted, unused
    chunk_tokens: int | None = Field(None, ge=1)
    chunk_spans: list[list[tuple[int, int]]] | None = None


class ClassifyRequest(InputBody):
    model: str | None = None


class FillMaskRequest(InputBody):
    model: str | None = None
    top_k: int = Field(5, ge=1, le=50)


class CohereDocument(Body):
    text: str


class CohereRerankRequest(Body):
    """The Cohere / Jina / vLLM rerank body."""

    model: str | None = None
    query: str
    documents: list[str | CohereDocument]
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = True


# ------------------------------------------------------------------------------------------------ TEI
class EmbedRequest(Truncation):
    normalize: bool = True
    prompt_name: str | None = None
    dimensions: int | None = None


class EmbedAllRequest(Truncation):
    prompt_name: str | None = None


class EmbedSparseRequest(Truncation):
    """TEI's ``/embed_sparse``: the fields of ``/embed`` that apply to a sparse vector (no normalization, no
    Matryoshka size)."""

    prompt_name: str | None = None


class PredictRequest(Truncation):
    """TEI's ``/predict``: ``inputs`` is a text, a pair ``[a, b]``, or a list of texts and pairs (as TEI reads it,
    a list of exactly two strings is one pair)."""

    input: str | list[str | list[str]] = Field(validation_alias=AliasChoices("input", "inputs"))
    raw_scores: bool = False


class RerankRequest(TruncationFields):
    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False


class MaxSimRequest(TruncationFields):
    """``/maxsim``: TEI ``/rerank``'s request, scored by late interaction (MaxSim) instead of a cross-encoder."""

    query: str
    texts: list[str]
    return_text: bool = False


class TokenizeRequest(InputBody):
    input: str | list[str] = Field(validation_alias=AliasChoices("input", "inputs"))
    add_special_tokens: bool = True
    prompt_name: str | None = None


class DecodeRequest(Body):
    ids: list[StrictInt] | list[list[StrictInt]]
    skip_special_tokens: bool = True


# ------------------------------------------------------------------------------------------------ Hugging Face
class ClassificationParameters(Body):
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None
    top_k: int | None = Field(None, ge=1)


class TextClassificationRequest(InputBody):
    """The Hugging Face inference API's text classification (``InferenceClient.text_classification``)."""

    input: str | list[str] = Field(validation_alias=AliasChoices("input", "inputs"))
    parameters: ClassificationParameters | None = None
