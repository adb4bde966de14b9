"""The request bodies of every route (pydantic): each names its fields, and a field it does not have is refused
(422 naming it), so that a typo or another API's option is never silently ignored. Each API's own optional fields
are accepted. The texts of a request are in ``input`` (the OpenAI name) or ``inputs`` (the Hugging Face / TEI
name), never both. Each field's docstring is its description in the OpenAPI schema (``GET /openapi.json``) and on
the routes' reference page (docs/reference/routes.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

#: texts, or token ids: one string, a list of strings, one list of ids (one input), or a list of such lists
Inputs = str | list[str] | list[StrictInt] | list[list[StrictInt]]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class InputBody(Body):
    input: Inputs = Field(validation_alias=AliasChoices("input", "inputs"))
    """a text, a list of texts, one list of token ids (one input, run as given: no special tokens added) or a list
    of such lists; also accepted as `inputs`"""

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
    """cut an input longer than the server's --max-tokens to that many tokens, special tokens kept (for a pair, the
    second text is cut); otherwise such an input is refused with 413"""
    truncation_direction: Literal["left", "right"] = "right"
    """the side `truncate` cuts from (any case: TEI writes `Right`)"""

    @field_validator("truncation_direction", mode="before")
    @classmethod
    def lower(cls, value):
        return value.lower() if isinstance(value, str) else value  # TEI writes "Right", huggingface_hub "right"


class Truncation(TruncationFields, InputBody):
    pass


# ------------------------------------------------------------------------------------------------ OpenAI
class EmbeddingRequest(InputBody):
    input: Inputs = Field(validation_alias=AliasChoices("input", "inputs"))
    """a text, a list of texts, or token ids (one list: one input; or a list of such lists), read as the server's
    --openai-token-ids says: refused with 400 by default (OpenAI's API means OpenAI's tokenizer's ids, which
    LangChain's OpenAIEmbeddings sends unless given check_embedding_ctx_length=False), decoded as tiktoken's
    cl100k_base ids and their text embedded (`cl100k`), or run as this model's ids, no special tokens added
    (`model`); also accepted as `inputs`"""
    model: str | None = None
    """the served model's name (--served-model-name); another name: 404"""
    encoding_format: str = "float"
    """`float` (JSON numbers) or `base64` (the little-endian float32 bytes, the openai SDK's default, which it
    decodes); another value: 400"""
    dimensions: int | None = None
    """a shorter vector: one of the config's matryoshka_dimensions (the first values, re-normalized); another size:
    400"""
    user: str | None = None
    """the OpenAI API's end-user tag: accepted, unused"""
    chunk_tokens: int | None = Field(None, ge=1)
    """late chunking: one vector per run of this many text tokens, each computed with the whole input in view"""
    chunk_spans: list[list[tuple[int, int]]] | None = None
    """late chunking: per input, the `[start, end)` character spans to embed (token positions for token-id
    inputs); not with `chunk_tokens`"""
    session: str | None = None
    """(Avey-B extension; the openai SDK's `extra_body`) the input is this session's document (made when new: see
    /v1/sessions): its whole current text, of which only the change is computed, or with `session_append` the text
    to add to it; one input"""
    session_append: StrictBool = False
    """(Avey-B extension) with `session`: the input is added at the end of the session's document"""


class ClassifyRequest(InputBody):
    model: str | None = None
    """the served model's name (--served-model-name); another name: 404"""


class FillMaskRequest(InputBody):
    model: str | None = None
    """the served model's name (--served-model-name); another name: 404"""
    top_k: int = Field(5, ge=1, le=50)
    """how many tokens to propose for each mask token"""


class CohereDocument(Body):
    text: str | None = None
    """the document's text"""
    session: str | None = None
    """instead of `text`: the id of a session (`/v1/sessions`) whose current text is the document, sent once and
    kept by the server; with a query-last scorer its state's token ids are ranked as they are (nothing sent or
    tokenized again: the query's cost only)"""

    @model_validator(mode="after")
    def text_or_session(self):
        if (self.text is None) == (self.session is None):
            raise ValueError("a document object has a `text` or a `session`, exactly one")
        return self


class CohereRerankRequest(Body):
    """The Cohere / Jina / vLLM rerank body."""

    model: str | None = None
    """the served model's name (--served-model-name); another name: 404"""
    query: str
    """the query every document is scored against"""
    documents: list[str | CohereDocument]
    """the documents to rank: texts, or objects with a `text` or a `session` (a session's current text)"""
    top_n: int | None = Field(None, ge=1)
    """answer only the best `top_n` documents (default: all)"""
    return_documents: bool = True
    """give each result its document's text"""


# ------------------------------------------------------------------------------------------------ sessions
class SessionContent(Body):
    """A session's new content: a text, or token ids (the ids of a session made of ids), exactly one."""

    text: str | None = None
    """the text (a session made of text)"""
    input_ids: list[StrictInt] | None = None
    """token ids, run as given (a session made of token ids)"""
    encoding_format: str = "float"
    """the vectors in the answer: `float` (JSON numbers) or `base64` (little-endian float32 bytes)"""

    @model_validator(mode="after")
    def one_content(self):
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("give the content in `text` or in `input_ids`, exactly one")
        return self


class SessionCreate(SessionContent):
    id: str | None = None
    """the session's id, 1 to 128 letters, digits or `._:-` (default: the server makes one); taken: 409"""
    text: str | None = None
    """the document's text (default, with no `input_ids`: an empty text, to be appended to)"""
    chunk_tokens: StrictInt | None = Field(None, ge=1)
    """late chunks: the session's answers also pool one vector per run of this many text tokens"""
    chunk_overlap: StrictInt = Field(0, ge=0)
    """tokens shared by consecutive late chunks (less than `chunk_tokens`)"""
    model: str | None = None
    """the served model's name (--served-model-name); another name: 404"""

    @model_validator(mode="after")
    def one_content(self):
        if self.text is not None and self.input_ids is not None:
            raise ValueError("give the content in `text` or in `input_ids`, not both")
        if self.text is None and self.input_ids is None:
            self.text = ""
        return self


class SessionChange(SessionContent):
    version: StrictInt | None = Field(None, ge=1)
    """the session's version the change is made against: another one is refused with 409 (optimistic
    concurrency); default: whatever its version"""


class SessionReplace(SessionChange):
    start: StrictInt = Field(ge=0)
    """the first character (token, for a session of ids) replaced"""
    end: StrictInt = Field(ge=0)
    """the end of the replaced span, exclusive (`start` for an insertion)"""


# ------------------------------------------------------------------------------------------------ TEI
class EmbedRequest(Truncation):
    normalize: bool = True
    """scale each vector to unit length"""
    prompt_name: str | None = None
    """a prompt of the model's config_sentence_transformers.json, put before each text"""
    dimensions: int | None = None
    """a shorter vector: one of the config's matryoshka_dimensions; another size: 400"""


class EmbedAllRequest(Truncation):
    prompt_name: str | None = None
    """a prompt of the model's config_sentence_transformers.json, put before each text"""


class EmbedSparseRequest(Truncation):
    """TEI's ``/embed_sparse``: the fields of ``/embed`` that apply to a sparse vector (no normalization, no
    Matryoshka size)."""

    prompt_name: str | None = None
    """a prompt of the model's config_sentence_transformers.json, put before each text"""


class PredictRequest(Truncation):
    """TEI's ``/predict``: ``inputs`` is a text, a pair ``[a, b]``, or a list of texts and pairs (as TEI reads it,
    a list of exactly two strings is one pair)."""

    input: str | list[str | list[str]] = Field(validation_alias=AliasChoices("input", "inputs"))
    """a text, a pair `[a, b]`, or a list of texts and pairs (a list of exactly two texts is one pair); also
    accepted as `inputs`"""
    raw_scores: bool = False
    """the logits instead of the softmax (the sigmoid for one label)"""


class RerankRequest(TruncationFields):
    query: str
    """the query every text is scored against, as the pair (query, text)"""
    texts: list[str]
    """the texts to rank"""
    raw_scores: bool = False
    """the logit instead of its sigmoid"""
    return_text: bool = False
    """give each result its text"""


class MaxSimRequest(TruncationFields):
    """``/maxsim``: TEI ``/rerank``'s request, scored by late interaction (MaxSim) instead of a cross-encoder."""

    query: str
    """the query every text is scored against"""
    texts: list[str]
    """the texts to rank"""
    return_text: bool = False
    """give each result its text"""


class TokenizeRequest(InputBody):
    input: str | list[str] = Field(validation_alias=AliasChoices("input", "inputs"))
    """a text or a list of texts; also accepted as `inputs`"""
    add_special_tokens: bool = True
    """add the tokenizer's special tokens (`[CLS]`, `[SEP]`, ...)"""
    prompt_name: str | None = None
    """a prompt of the model's config_sentence_transformers.json, put before each text"""


class DecodeRequest(Body):
    ids: list[StrictInt] | list[list[StrictInt]]
    """one list of token ids, or a list of such lists"""
    skip_special_tokens: bool = True
    """leave the special tokens out of the text"""


# ------------------------------------------------------------------------------------------------ Hugging Face
class ClassificationParameters(Body):
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None
    """what turns the logits into scores (default: the softmax, the sigmoid for one label)"""
    top_k: int | None = Field(None, ge=1)
    """answer only the best `top_k` labels (default: all)"""


class TextClassificationRequest(InputBody):
    """The Hugging Face inference API's text classification (``InferenceClient.text_classification``)."""

    input: str | list[str] = Field(validation_alias=AliasChoices("input", "inputs"))
    """a text or a list of texts; also accepted as `inputs`"""
    parameters: ClassificationParameters | None = None
    """how to score and how many labels to answer"""
