"""What every route shares: the served model's name and limits, and the steps from a request's inputs to the
model's answers — the checks that need no tokenizer (on the event loop: counts, characters), tokenization and the
token limit (on a worker thread, so that a large request never holds the event loop), and the batcher; and the
routes' two dependencies: the app's :class:`Service` (:data:`ServiceDep`) and the request's body, read and checked
(:func:`reading`)."""

from __future__ import annotations

import asyncio
import json
import queue
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from avey_b.apps.serve import work
from avey_b.apps.serve.batcher import Batcher, Job
from avey_b.apps.serve.documents import Documents
from avey_b.apps.serve.openai_ids import OpenAIIds
from avey_b.apps.serve.options import ServeOptions
from avey_b.apps.serve.sessions import Sessions
from avey_b.inference.encoder import Encoder
from avey_b.inference.runtimes import NEEDS
from avey_b.utils.batching import default_max_tokens


def served_name(model: str) -> str:
    """The name a model is served under by default: a local directory's own name, or the Hub id as given."""
    path = Path(model)
    return path.resolve().name if path.exists() else model


def sentence_transformers_prompts(directory: Path) -> dict[str, str]:
    """The named prompts of a sentence-transformers model directory (``config_sentence_transformers.json``'s
    ``prompts``: name -> the text put before an input), or none."""
    file = directory / "config_sentence_transformers.json"
    return dict(json.loads(file.read_text(encoding="utf-8")).get("prompts") or {}) if file.is_file() else {}


@dataclass
class Encoded:
    """A request's inputs as token ids, with (texts, when asked) each token's character span and whether it is a
    special token."""

    ids: list[list[int]]
    offsets: list[list[tuple[int, int]]] | None = None
    special: list[list[int]] | None = None

    @property
    def tokens(self) -> int:
        return sum(map(len, self.ids))


async def read(request, body_type: type[BaseModel]) -> BaseModel:
    """The request's JSON body as ``body_type``, parsed and validated on a worker thread (a large body never holds
    the event loop); invalid JSON, a missing or wrong field, or a field the route does not have: 422 naming it.
    (The body's size was capped while it was read: :class:`avey_b.apps.serve.observe.Gate`.)"""
    raw = await request.body()

    def parse():
        try:
            data = json.loads(raw)
        except ValueError as error:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body",),
                                           "msg": f"the body is not JSON: {error}"}]) from None
        try:
            return body_type.model_validate(data)
        except ValidationError as error:
            fields = sorted({f.validation_alias.choices[1] if f.validation_alias else name
                             for name, f in body_type.model_fields.items()} | set(body_type.model_fields))
            raise RequestValidationError([  # the client's input is not echoed back (it may be megabytes)
                {"type": e["type"], "loc": ("body", *e["loc"]),
                 "msg": f"unknown field: this route's fields are {fields}" if e["type"] == "extra_forbidden"
                 else e["msg"]} for e in error.errors()]) from None

    return await asyncio.to_thread(parse)


def note(request, inputs: int, tokens: int) -> None:
    """Record a request's inputs and tokens for its access-log line and the metrics (:meth:`Service.run` records
    the tokens of them the prefix cache held: the metrics count the others, those run through the model)."""
    request.state.inputs, request.state.tokens = inputs, tokens


class Service:
    """The model behind the routes (``encoder``), its served ``name``, its limits (``options``), its batcher and its
    state path for long and repeated inputs (``documents``: the prefix cache)."""

    def __init__(self, encoder: Encoder, options: ServeOptions):
        self.encoder, self.options = encoder, options
        self.name = options.served_model_name or served_name(encoder.name)
        self.max_tokens = options.max_tokens or default_max_tokens(encoder.config.hidden_size)
        self.prompts = sentence_transformers_prompts(encoder.path)
        self.matryoshka = list(getattr(encoder.config, "matryoshka_dimensions", None) or [])
        self.created = int(time.time())  # the OpenAI model card's `created`
        self.batcher: Batcher | None = None
        self.documents = Documents(encoder, options)
        self.sessions = Sessions(self)
        self.openai_ids = OpenAIIds(options.openai_token_ids)

    def limits(self) -> dict:
        """The server's limits, as ``/health`` and ``/info`` show them."""
        options = self.options
        return {"max_tokens": self.max_tokens, "max_input_chars": options.max_input_chars,
                "max_body_bytes": options.max_body_bytes, "max_request_inputs": options.max_request_inputs,
                "max_batch_tokens": options.max_batch_tokens, "queue_size": options.queue_size,
                "prefix_cache_bytes": self.documents.cache.capacity if self.documents.cache else 0,
                "prefix_cache_min_tokens": self.documents.cached_from if self.documents.cache else None,
                "block_tokens": self.documents.block, "sessions": not self.sessions.off,
                "session_bytes": self.options.session_bytes,
                "state_store": str(self.sessions.store) if self.sessions.store else None,
                "openai_token_ids": options.openai_token_ids}

    def threads(self) -> int | None:
        """The threads the model runs on: onnxruntime's, else torch's (with auto threads, the count it runs at now)."""
        return self.encoder.threads

    # ------------------------------------------------------------------ checks
    def needs(self, kind: str, route: str) -> None:
        """Refuse (400) a route this checkpoint cannot answer, saying what it needs."""
        if kind not in self.encoder.kinds:
            labels = f", {self.encoder.config.num_labels} labels" if "classify" in self.encoder.kinds else ""
            raise HTTPException(400, f"{route} needs {NEEDS[kind]}; this server's model {self.name!r} "
                                     f"({self.encoder.architecture}{labels}) serves: {', '.join(self.encoder.kinds)}")

    def check_model(self, model: str | None) -> None:
        """A request that names a model must name this one (OpenAI-compatible servers answer 404 otherwise)."""
        if model is not None and model != self.name:
            raise HTTPException(404, f"the model {model!r} does not exist: this server serves {self.name!r} "
                                     "(--served-model-name)")

    def dimensions(self, requested: int | None) -> int | None:
        """The embedding size to answer: None (the full vector) or one of the config's Matryoshka sizes; 400
        otherwise."""
        full = self.encoder.config.hidden_size
        if requested is None or requested == full:
            return None
        if requested in self.matryoshka:
            return requested
        declared = (f"its config's matryoshka_dimensions allow {self.matryoshka}" if self.matryoshka else
                    "its config declares no matryoshka_dimensions")
        raise HTTPException(400, f"this model's embeddings have {full} dimensions; dimensions={requested} "
                                 f"(shortened embeddings) is not supported: {declared}")

    def prefix(self, prompt_name: str | None) -> str:
        """The text of the named prompt (sentence-transformers' ``prompts``), or ''."""
        if prompt_name is None:
            return ""
        if prompt_name not in self.prompts:
            have = (f"its prompts are {sorted(self.prompts)}" if self.prompts else
                    "it has no prompts (config_sentence_transformers.json)")
            raise HTTPException(400, f"prompt_name {prompt_name!r} is not one of this model's prompts: {have}")
        return self.prompts[prompt_name]

    def rows(self, given, count_only: int | None = None) -> list:
        """``given`` (a text, texts, one list of token ids, or lists of them) as a list of inputs, after the checks
        that need no tokenizer: how many (413 past --max-request-inputs), none empty, characters (413 past
        --max-input-chars)."""
        if isinstance(given, str):
            given = [given]
        if not given:
            raise HTTPException(400, "input is empty: give a string, a non-empty list of strings or token ids")
        rows = [given] if isinstance(given[0], int) else given
        self.check_count(len(rows))
        if isinstance(rows[0], str):
            for i, text in enumerate(rows):
                if not text:
                    raise HTTPException(400, f"input {i} is an empty string")
                self.check_chars(i, text)
        return rows

    def check_count(self, n: int) -> None:
        cap = self.options.max_request_inputs
        if n > cap:
            raise HTTPException(413, f"this request has {n:,} inputs, more than this server's --max-request-inputs "
                                     f"{cap:,}: send them in several requests, or raise the limit")

    def check_chars(self, i: int, text: str) -> None:
        cap = self.options.max_input_chars
        if len(text) > cap:
            raise HTTPException(413, f"input {i} has {len(text):,} characters, more than this server's "
                                     f"--max-input-chars {cap:,}; it is not truncated: split it, or raise the limit")

    # ------------------------------------------------------------------ tokens
    async def encode(self, given, *, truncate: bool = False, direction: str = "right", prompt_name: str | None = None,
                     offsets: bool = False) -> Encoded:
        """``given`` checked and tokenized (on a worker thread), each input within --max-tokens (or cut to it when
        ``truncate``, on the ``direction`` side, special tokens kept)."""
        rows, prefix = self.rows(given), self.prefix(prompt_name)
        if prefix and not isinstance(rows[0], str):
            raise HTTPException(400, "prompt_name applies to texts, not token ids")
        return await asyncio.to_thread(self._encode, rows, prefix, truncate, direction, offsets)

    def _encode(self, rows: list, prefix: str, truncate: bool, direction: str, offsets: bool) -> Encoded:
        if isinstance(rows[0], str):
            try:
                enc = self.encoder.tokenize([prefix + t for t in rows], offsets=offsets or truncate)
            except ValueError as error:
                raise HTTPException(400, str(error)) from None
            return self._limit(enc, truncate, direction, offsets)
        try:
            self.encoder.check_ids(rows)
        except ValueError as error:
            raise HTTPException(400, str(error)) from None
        out = Encoded([list(r) for r in rows], [[(p, p + 1) for p in range(len(r))] for r in rows],
                      [[0] * len(r) for r in rows])  # token ids: spans count tokens, none is special
        for i, row in enumerate(out.ids):
            if len(row) > self.max_tokens:
                if not truncate:
                    self._too_long(i, len(row))
                keep = slice(0, self.max_tokens) if direction == "right" else slice(len(row) - self.max_tokens, None)
                out.ids[i], out.offsets[i], out.special[i] = row[keep], out.offsets[i][keep], out.special[i][keep]
        return out

    async def encode_pairs(self, firsts: list[str], seconds: list[str | None], *, truncate: bool = False,
                           direction: str = "right") -> Encoded:
        """Texts, or (first, second) pairs where ``seconds[i]`` is not None, tokenized as the tokenizer encodes a
        pair (its pair template: ``[CLS] a [SEP] b [SEP]`` for a BERT-style one) on a worker thread; ``truncate``
        cuts the second text of a pair (the document) to fit --max-tokens."""
        self.check_count(len(firsts))
        for i, (a, b) in enumerate(zip(firsts, seconds, strict=True)):
            if not a or b == "":
                raise HTTPException(400, f"input {i} holds an empty string")
            self.check_chars(i, a if b is None else a + b)
        return await asyncio.to_thread(self._encode_pairs, firsts, seconds, truncate, direction)

    def _encode_pairs(self, firsts, seconds, truncate, direction) -> Encoded:
        tokenizer = self.encoder.tokenizer
        singles = [i for i, b in enumerate(seconds) if b is None]
        pairs = [i for i, b in enumerate(seconds) if b is not None]
        ids: list = [None] * len(firsts)
        for where, enc in ((singles, tokenizer([firsts[i] for i in singles], truncation=False) if singles else None),
                           (pairs, tokenizer([firsts[i] for i in pairs], [seconds[i] for i in pairs],
                                             truncation=False) if pairs else None)):
            for k, i in enumerate(where):
                row = enc["input_ids"][k]
                if len(row) > self.max_tokens:
                    if not truncate:
                        self._too_long(i, len(row))
                    last = max(s for s in enc.sequence_ids(k) if s is not None)  # the document's tokens go first
                    row = _cut(row, [s == last for s in enc.sequence_ids(k)], len(row) - self.max_tokens, direction, i)
                ids[i] = row
        return Encoded(ids)

    def _limit(self, enc, truncate: bool, direction: str, offsets: bool) -> Encoded:
        out = Encoded(list(enc["input_ids"]), list(enc["offset_mapping"]) if offsets else None,
                      list(enc["special_tokens_mask"]) if offsets else None)
        for i, row in enumerate(out.ids):
            if len(row) <= self.max_tokens:
                continue
            if not truncate:
                self._too_long(i, len(row))
            special = enc["special_tokens_mask"][i]
            kept = _cut(list(range(len(row))), [not s for s in special], len(row) - self.max_tokens, direction, i)
            out.ids[i] = [row[p] for p in kept]
            if offsets:
                out.offsets[i] = [out.offsets[i][p] for p in kept]
                out.special[i] = [out.special[i][p] for p in kept]
        return out

    def _too_long(self, i: int, n: int):
        raise HTTPException(413, f"input {i} has {n:,} tokens, more than this server's --max-tokens "
                                 f"{self.max_tokens:,}; it is not truncated: split it, or raise the limit (TEI "
                                 "routes: truncate=true cuts it)")

    # ------------------------------------------------------------------ the model
    def submit(self, jobs: list[Job]) -> None:
        """Queue ``jobs`` on the batcher; 503 when the queue is full or the server drains."""
        try:
            self.batcher.submit(jobs)
        except queue.Full:
            raise HTTPException(503, f"the server's queue is full ({self.batcher.depth:,} inputs wait, "
                                     f"--queue-size {self.options.queue_size:,}): retry later") from None
        except RuntimeError as error:
            raise HTTPException(503, str(error)) from None

    async def compute(self, steps):
        """Run ``steps`` (a generator whose value is the answer: a session's change) as one job in steps on the
        batcher, other requests' batches between its steps (:meth:`submit`)."""
        job = Job("session", [], steps)
        self.submit([job])
        return await asyncio.wrap_future(job.future)

    @property
    def query_last(self) -> bool:
        """Whether the model scores a query after a document of any length (a query-last scorer): the rerank
        routes then answer through :meth:`score_after`, with evidence."""
        return self.encoder.architecture == work.QUERY_LAST

    async def score_after(self, query: str, documents: list) -> list:
        """``query`` scored after each of ``documents`` (texts, or kept documents: a session's) by the query-last
        scorer (:func:`work.scored_after`, one job in steps on the batcher), after the request checks (inputs, a
        text's characters); the :class:`~avey_b.inference.encoder.Relevance` of each."""
        self.check_count(len(documents))
        for i, text in enumerate(documents):
            if isinstance(text, str):
                if not text:
                    raise HTTPException(400, f"document {i} is an empty string")
                self.check_chars(i, text)
        return await self.compute(work.scored_after(self.encoder, query, documents))

    async def run(self, kind: str, ids: list[list[int]], extras: list | None = None, *, request=None) -> list:
        """Queue one job per row on the batcher and await the answers (503 when the queue is full). With
        ``request``, the tokens the prefix cache held for its inputs (not run through the model) are recorded on it
        for the metrics (``request.state.saved``)."""
        jobs = [Job(kind, row, extra) for row, extra in zip(ids, extras or [None] * len(ids), strict=True)]
        self.submit(jobs)
        results = list(await asyncio.gather(*(asyncio.wrap_future(j.future) for j in jobs)))
        if request is not None:
            request.state.saved = sum(j.saved for j in jobs)
        return results


async def get_service(request: Request) -> Service:
    """The app's :class:`Service` (``app.state.service``, set by :func:`avey_b.apps.serve.app.build_app`). Async: a
    plain function would be run on the thread pool."""
    return request.app.state.service


#: a route's parameter that receives the app's :class:`Service`
ServiceDep = Annotated[Service, Depends(get_service)]


def reading(body_type: type[BaseModel], needs: str | None = None):
    """A route's dependency that gives the request's body as ``body_type`` (:func:`read`: 422 when invalid), then
    refuses a body that names another model than the served one (404) and, with ``needs`` (a kind of answer, a key
    of :data:`NEEDS`), a checkpoint that cannot answer the route (400 naming the route)."""

    async def body(request: Request, service: ServiceDep) -> BaseModel:
        body = await read(request, body_type)
        if "model" in body_type.model_fields:
            service.check_model(body.model)
        if needs is not None:
            service.needs(needs, request.scope["route"].path)
        return body

    body.body_type = body_type  # the request body in the OpenAPI schema (avey_b.apps.serve.openapi)
    return Depends(body)


def _cut(row: list, cuttable: list[bool], excess: int, direction: str, i: int) -> list:
    """``row`` without ``excess`` of its cuttable positions, taken from the end (``right``) or the start."""
    positions = [p for p, c in enumerate(cuttable) if c]
    if excess > len(positions):
        raise HTTPException(413, f"input {i} cannot be cut to --max-tokens: its special tokens alone pass it")
    drop = set(positions[len(positions) - excess:] if direction == "right" else positions[:excess])
    return [x for p, x in enumerate(row) if p not in drop]
