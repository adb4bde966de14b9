"""One way in for inference: :class:`Encoder` loads a saved Avey-B (any head, or the bare backbone) and its
tokenizer once, and answers what the checkpoint can do — embeddings, token-level hidden states, logits — from the
eager PyTorch model or from an exported ONNX model run by onnxruntime (:mod:`avey_b.inference.runtimes`).
``avey-b serve``, ``embed``, ``export`` and ``analyze`` load through it.

    from avey_b import Encoder, LoadOptions

    encoder = Encoder("runs/quickstart/model", LoadOptions(precision="fp32")).load()
    vectors = encoder.encode(["a good film", "bad"])           # (2, d) float32 on the CPU, in input order

or, one padded batch at a time (what ``encode`` does per token-budget batch):

    batch, mask = encoder.pad(encoder.tokenize(["a good film", "bad"])["input_ids"])
    vectors = encoder.embed(batch, mask)                       # (2, d): the embedding head's vectors

Embeddings, whatever the head: the masked mean of the backbone's last hidden state, L2-normalized when the config
says ``normalize_embeddings`` (:func:`avey_b.model.heads.sentence_embedding`; for an embedding checkpoint exactly
its ``pooler_output``). An ONNX model embeds from its ``sentence_embedding`` output (``avey-b export --head
embedding``), else pools its ``last_hidden_state`` the same way.

The weights load on :meth:`Encoder.load` (or the first call that needs them), not in the constructor, which reads
only the config and checks it: a job can check its settings before paying for the weights, and a worker process
(embed's Ray actors) can build the encoder and load the weights once there.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoTokenizer

from avey_b.inference.documents import Evidence, TextDocument
from avey_b.inference.options import MAX_BATCH_TOKENS, OUTPUTS, LoadOptions
from avey_b.inference.runtimes import HEADS, EagerRuntime, OnnxRuntime
from avey_b.inference.states import States
from avey_b.model import auto, multivector
from avey_b.model.configuration import is_avey_b
from avey_b.model.heads import chunk_embeddings, sentence_embedding
from avey_b.model.multivector import query_scores
from avey_b.model.sparse import sparse_rows, splade_max
from avey_b.model.streaming import QueryLast, query_last
from avey_b.utils.batching import pad_right, token_budget_batches
from avey_b.utils.device import autocast, pick_device, runtime_line, set_cpu_threads, usable_cpus, use_bf16
from avey_b.utils.files import model_source
from avey_b.utils.shared_cpu import ThreadTuner, thread_tuner

if TYPE_CHECKING:
    import onnxruntime

@dataclass
class Relevance:
    """What :meth:`Encoder.score` answers."""

    score: float | list[float]
    """The relevance: the sigmoid of the one logit (in (0, 1)); with more labels, their softmax."""
    logits: torch.Tensor
    """(num_labels,) float32 the scorer's logits."""
    evidence: list[Evidence]
    """The document's splits the query chose, best first: where the model looked."""
    tokens: int
    """The tokens of the document and the query (those the processor ran: the query's splits)."""


class Encoder:
    """A saved Avey-B and its tokenizer, loaded once, for inference.

    ``path``: a local directory or a Hub id (the authors' release checkpoints too). ``options``: device, precision,
    threads, runtime (:class:`avey_b.LoadOptions`). ``architecture``: the class to load instead of the
    checkpoint's own (``config.architectures[0]``): ``"AveyBModel"`` for the backbone of any head's checkpoint,
    ``"AveyBForSentenceEmbedding"`` for a masked-LM's backbone with the embedding head, ... ``session_options``
    (ONNX only): the ``onnxruntime.SessionOptions`` its session starts with (spinning, inter-op threads, graph
    optimizations, ...), their intra-op threads set to the encoder's ``threads``.

    What it answers (``kinds``): ``embed`` (every checkpoint; with ONNX, a graph with ``sentence_embedding`` or
    ``last_hidden_state``), ``fill`` (a masked-LM's logits), ``sparse`` (a masked-LM's SPLADE vectors, eager
    runtime: :meth:`sparse`), ``classify`` (a sequence classifier's logits) and ``multivector`` (the multi-vector
    head's token vectors, :meth:`multivectors`, scored by :meth:`maxsim`).
    """

    text_cache_bytes: int = 128 * 2**20
    """:meth:`score` keeps the token ids and character spans of the texts it scored lately, up to this many bytes
    (16 a token, and the text's characters), least recently used dropped first: a text scored again (the next
    query against the same long document) is not tokenized again. 0: none kept."""

    def __init__(self, path: str | Path, options: LoadOptions | None = None, *, architecture: str | None = None,
                 session_options: onnxruntime.SessionOptions | None = None):
        options = options or LoadOptions()
        self.path, self.name, self.options = Path(path), str(path), options
        with model_source(self.name):
            config = AutoConfig.from_pretrained(self.name)
        if not is_avey_b(config):
            raise ValueError(f"{self.name} holds a {getattr(config, 'model_type', None)!r} model "
                             f"({', '.join(config.architectures or [type(config).__name__])}), not an Avey-B: this "
                             "loads Avey-B checkpoints only")
        self.config = config
        self.architecture = architecture or (config.architectures or ["AveyBModel"])[0]
        cls = getattr(auto, self.architecture, None)
        if not (isinstance(cls, type) and issubclass(cls, auto.AveyBPreTrainedModel)):
            if architecture:
                raise ValueError(f"no Avey-B class {architecture!r}: use AveyBModel or one of its heads "
                                 f"({', '.join(n for n in auto.__all__ if n.startswith('AveyBFor'))})")
            self.architecture, cls = "AveyBModel", auto.AveyBModel  # a saved class this package does not have
        if options.onnx is not None:
            if options.device not in ("auto", "cpu") or options.precision == "bf16":
                raise ValueError("an ONNX model runs on the CPU in its own precision (onnxruntime): drop the device "
                                 "and bf16 precision")
            self.device, self.bf16 = torch.device("cpu"), False
            self.threads = options.threads or usable_cpus()
            self.runtime = OnnxRuntime(self.name, options.onnx, self.threads, session_options)
        else:
            if session_options is not None:
                raise ValueError("session_options are onnxruntime's: they apply with LoadOptions(onnx=...)")
            self.device = pick_device(options.device)
            self.bf16 = use_bf16(options.precision, self.device)
            self.threads = set_cpu_threads(options.threads)  # PyTorch's CPU threads (for its CPU work on a GPU too)
            self.runtime = EagerRuntime(self.name, cls, self.device, self.bf16)
        self.auto_threads = options.threads is None and options.onnx is None  # onnxruntime's count is its session's
        self._watch: ThreadTuner | None = None
        self._texts: collections.OrderedDict[str, tuple[torch.Tensor, torch.Tensor]] = collections.OrderedDict()
        self._texts_bytes = 0

    def __repr__(self) -> str:
        return f"Encoder({self.name!r}, {self.architecture}, {self.runtime_name}, kinds={self.kinds})"

    # ------------------------------------------------------------------ loading
    def load(self) -> Encoder:
        """Load the weights (the eager model) or start the ONNX session, once; returns the encoder."""
        self.runtime.load()
        return self

    @property
    def model(self) -> torch.nn.Module:
        """The eager module (loaded on first use), for export and analysis."""
        if not isinstance(self.runtime, EagerRuntime):
            raise ValueError(f"{self.name} runs as the ONNX model {self.onnx_file}: there is no eager module")
        self.runtime.load()
        return self.runtime.model

    @property
    def runtime_name(self) -> str:
        return f"onnxruntime: {self.onnx_file}" if self.onnx_file else "eager"

    @property
    def onnx_file(self) -> Path | None:
        return self.runtime.file if isinstance(self.runtime, OnnxRuntime) else None

    def describe(self) -> str:
        """The start line of a verb that runs this encoder (:func:`avey_b.utils.device.runtime_line`): runtime,
        device, precision and CPU threads."""
        if self.onnx_file:
            precision = "int8" if ".int8." in self.onnx_file.name else "the ONNX model's precision"
            return runtime_line("cpu", precision, self.threads, runtime=f"onnxruntime ({self.onnx_file.name})")
        return runtime_line(self.device, "bf16 autocast" if self.bf16 else "fp32", self.threads, auto=self.auto_threads)

    def watch_shared_cpu(self, report: Callable[[str], None], advice: str) -> None:
        """From now on, time every forward for a :class:`avey_b.utils.shared_cpu.ThreadTuner`: with auto threads,
        the count that runs fastest on this machine is kept (said through ``report`` when it changes); with a count
        given, it says once when the forwards run far slower than the same work ran earlier (a CPU shared with other
        processes), with ``advice``: how the verb changes its threads. Only on the CPU with several threads (one has
        nothing to change)."""
        self._watch = thread_tuner(self.device, self.threads, None if self.auto_threads else self.threads, report,
                                   "the model", advice)

    def _run(self, output: str, batch: torch.Tensor, mask: torch.Tensor, fp32: bool = False) -> torch.Tensor:
        """The runtime's ``output`` for a padded batch (``fp32``: float32 whatever the precision), timed for the
        shared-CPU watch when one is on."""
        if self._watch is None:
            return self.runtime.run(output, batch, mask, fp32)
        t0 = time.perf_counter()
        result = self.runtime.run(output, batch, mask, fp32)
        rows, length = batch.shape
        self._watch.add(float(mask.sum()), time.perf_counter() - t0, (rows.bit_length(), length.bit_length()))
        self.threads = self._watch.threads
        return result

    @property
    def normalize(self) -> bool:
        """Whether this checkpoint's embeddings are L2-normalized: the config's ``normalize_embeddings``, what
        :meth:`embed`, :meth:`encode`, :meth:`vectors` and :meth:`document` give unless told otherwise."""
        return bool(self.config.normalize_embeddings)

    @functools.cached_property
    def kinds(self) -> list[str]:
        """What this checkpoint answers in this runtime: ``embed``, ``fill``, ``sparse`` (a masked-LM, eager),
        ``classify`` (in that order), ``rerank`` for a sequence classifier with one label (``num_labels=1``), which
        scores (query, document) pairs as a cross-encoder, and ``multivector`` for the multi-vector head (an
        ``embeddings`` output)."""
        outputs = self.runtime.outputs
        kinds = ["embed"] if {"sentence_embedding", "last_hidden_state"} & set(outputs) else []
        output, answers = HEADS.get(self.architecture, (None, ()))
        if output in outputs:
            kinds += [kind for kind in answers
                      if not (kind == "sparse" and not isinstance(self.runtime, EagerRuntime))  # Encoder.sparse
                      and not (kind == "rerank" and self.config.num_labels != 1)]  # a cross-encoder: one score
        if not kinds:
            raise ValueError(f"{self.onnx_file}: outputs {outputs} answer nothing for a {self.architecture}: export "
                             "it with --head embedding (embeddings), masked-lm or sequence-classification")
        return kinds

    @property
    def vector_outputs(self) -> list[str]:
        """The :data:`OUTPUTS` this checkpoint gives in this runtime (``dense`` wherever it embeds)."""
        return [o for o in OUTPUTS if ("embed" if o == "dense" else o) in self.kinds]

    @functools.cached_property
    def tokenizer(self):
        """The checkpoint's tokenizer (loaded on first use: export and analysis need none)."""
        with model_source(self.name, "tokenizer"):
            return AutoTokenizer.from_pretrained(self.name)

    # ------------------------------------------------------------------ inputs
    def tokenize(self, texts: list[str], offsets: bool = False):
        """The tokenizer's encoding of ``texts``, never truncated; ``offsets``: with each token's character span
        (``offset_mapping``, a fast tokenizer's) and the ``special_tokens_mask``."""
        if offsets and not self.tokenizer.is_fast:
            raise ValueError("character offsets need a fast tokenizer; this model's tokenizer is not a fast one")
        return self.tokenizer(texts, truncation=False, verbose=False, return_offsets_mapping=offsets,
                              return_special_tokens_mask=offsets)

    def check_ids(self, ids: list[list[int]]) -> None:
        """Token ids given by a client must index the model's embedding table (``ValueError`` naming the first
        that does not)."""
        vocab = self.config.vocab_size
        for i, row in enumerate(ids):
            if not row:
                raise ValueError(f"input {i} holds no token ids")
            if min(row) < 0 or max(row) >= vocab:  # builtins: fast on long rows
                token = next(t for t in row if not 0 <= t < vocab)
                raise ValueError(f"input {i}: token id {token} is outside this model's vocabulary of {vocab:,} "
                                 f"ids (0 to {vocab - 1:,})")

    def pad(self, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """A right-padded batch of token-id rows and its attention mask (CPU)."""
        return pad_right(ids, self.tokenizer.pad_token_id)

    # ------------------------------------------------------------------ outputs
    def hidden_states(self, batch: torch.Tensor, mask: torch.Tensor, fp32: bool = False) -> torch.Tensor:
        """(B, N, d) last hidden state of the backbone for a padded batch, on ``device`` (bf16 under bf16
        autocast unless ``fp32``): what late chunking pools per chunk."""
        if "last_hidden_state" not in self.runtime.outputs:
            raise ValueError(f"{self.onnx_file} has no last_hidden_state output: export it with --head base or "
                             "embedding")
        return self._run("last_hidden_state", batch.to(self.device), mask.to(self.device), fp32)

    def embed(self, batch: torch.Tensor, mask: torch.Tensor, normalize: bool | None = None) -> torch.Tensor:
        """(B, d) float32 embeddings of a padded batch, on ``device`` (see the module docstring). ``normalize``:
        L2-normalize or not, whatever the config says (None: as the config says)."""
        mask = mask.to(self.device)
        configured = self.normalize
        normalize = configured if normalize is None else normalize
        outputs = self.runtime.outputs
        if "sentence_embedding" in outputs and (normalize == configured or "last_hidden_state" not in outputs):
            if normalize != configured:
                raise ValueError(f"{self.onnx_file} gives only sentence_embedding, "
                                 f"{'' if configured else 'not '}normalized: export it with --head embedding")
            return self._run("sentence_embedding", batch, mask).float()
        hidden = self.hidden_states(batch, mask)
        return sentence_embedding(hidden.float(), mask, normalize)

    def encode(self, inputs: str | Sequence[str] | Sequence[Sequence[int]], *, outputs: str | Sequence[str] = "dense",
               chunks: Sequence[Sequence[tuple[int, int]]] | None = None, batch_tokens: int = MAX_BATCH_TOKENS,
               normalize: bool | None = None):
        """What the encoder gives for ``inputs`` in one call, in input order, on the CPU: texts (tokenized whole,
        never cut) or token-id rows (special tokens included, checked against the vocabulary: :meth:`check_ids`).

        ``outputs``: one of :data:`OUTPUTS <avey_b.inference.options.OUTPUTS>`, or several from one forward per
        batch (then a dict by name). ``dense``: an ``(n, d)`` float32 tensor, row ``i`` the vector of input ``i``, as
        ``SentenceTransformer.encode`` gives them (:meth:`embed`'s, ``normalize`` as there); with ``chunks`` (per
        input its late chunks as token ranges over its tokens, :func:`avey_b.inference.chunks.chunk_ranges`) a list
        of ``(C_i, d)`` tensors, each chunk pooled from the one forward over its whole input. ``sparse``: a list of
        ``(indices, values)`` (:meth:`sparse`). ``multivector``: a list of ``(n_i, D)`` token vectors
        (:meth:`token_vectors`). A single string in: each output's value for it alone (a ``(d,)`` vector, ...).

        The inputs are sorted by length and run in batches of at most ``batch_tokens`` padded tokens
        (:func:`avey_b.utils.batching.token_budget_batches`; a longer input runs alone). The batching changes no
        vector beyond float rounding: a padded row equals the row run alone."""
        single = isinstance(inputs, str)
        items = [inputs] if single else list(inputs)
        names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
        if chunks is not None and len(chunks) != len(items):
            raise ValueError(f"chunks has {len(chunks)} entries for {len(items)} inputs: one list of token ranges "
                             "per input")
        if all(isinstance(x, str) for x in items):
            ids = self.tokenize(items)["input_ids"] if items else []
        elif not any(isinstance(x, str) for x in items):
            ids = [list(x) for x in items]
            self.check_ids(ids)
        else:
            raise ValueError("inputs are texts or token-id rows, not both")
        found: dict[str, list] = {o: [None] * len(ids) for o in names}
        for rows in token_budget_batches(range(len(ids)), batch_tokens, lambda i: len(ids[i])):
            batch, mask = self.pad([ids[i] for i in rows])
            got = self.vectors(batch, mask, names, chunks=None if chunks is None else [chunks[i] for i in rows],
                               normalize=normalize)
            for o, values in got.items():
                for i, value in zip(rows, values, strict=True):
                    found[o][i] = value
        if "dense" in found and chunks is None:
            d = self.config.hidden_size
            found["dense"] = torch.stack(found["dense"]) if ids else torch.empty(0, d)
        if single:
            found = {o: values[0] for o, values in found.items()}
        return found[outputs] if isinstance(outputs, str) else found

    def document(self, text: str = "", *, chunk_tokens: int | None = None, chunk_overlap: int = 0) -> TextDocument:
        """A document that grows and changes (:class:`avey_b.inference.documents.TextDocument`): ``append(text)``
        and ``replace(start, end, text)`` recompute only the splits whose inputs changed, ``vector()`` is
        :meth:`encode`'s vector of the whole text and ``chunks()`` its late chunks of ``chunk_tokens`` tokens
        (``chunk_overlap`` shared by consecutive chunks). It runs the eager model (an ONNX model is refused) of a
        config where a split's outputs depend only on the splits before it (the unidirectional ranker at the first
        layer: :func:`avey_b.model.streaming.refusal` says why another is refused; encode the whole text with
        :meth:`encode` instead)."""
        return TextDocument(States(self, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap, ends=True), text)

    def score(self, query: str, document: str | TextDocument, *, evidence: int = 3) -> Relevance:
        """The relevance of ``document`` (a text of any length, or a :meth:`document` kept between queries) to
        ``query``, by a query-last scorer (:class:`~avey_b.model.query_scoring.AveyBForQueryLastScoring`, made by
        ``avey-b finetune --task long-rerank``): the query is placed after the document and only its splits are
        ranked against the document's token ids and processed, so a kept document costs the query's work however
        long it is, and a text its tokenization and the query's work (never the text's own states); a text scored
        again is not tokenized again (:attr:`text_cache_bytes`). Returns the
        :class:`Relevance`: the score, and the ``evidence`` best of the document's splits the query chose (where
        the model looked), as character spans."""
        if self.architecture != "AveyBForQueryLastScoring":
            raise ValueError(f"{self.name} is a {self.architecture}: scoring a query after a document needs a "
                             "query-last scorer (AveyBForQueryLastScoring, made by avey-b finetune --task "
                             "long-rerank)")
        S = self.config.split_size
        if isinstance(document, TextDocument):
            if document.states.encoder is not self:
                raise ValueError("this document was made by another encoder: make it with this one's document()")
            out, characters, n = document.query(query), document.characters, len(document)
        else:
            out, characters, n = self._query_after(query, document)
        with torch.no_grad(), autocast(self.device, self.bf16):
            logits = self.model.logits_of(out).float().cpu()
        spans = [Evidence(*characters(j * S, (j + 1) * S), score=key) for j, key in out.evidence(n, S)[:evidence]]
        value = float(torch.sigmoid(logits[0])) if logits.numel() == 1 else logits.softmax(-1).tolist()
        return Relevance(score=value, logits=logits, evidence=spans, tokens=n + len(out.hidden))

    def _query_after(self, query: str, text: str) -> tuple[QueryLast, Callable[[int, int], tuple[int, int]], int]:
        """``query`` after the text ``text`` from the query's splits (:func:`~avey_b.model.streaming.query_last`):
        the pair encoding ``(text, query)``, made of the text's tokens (:meth:`_text_tokens`: kept for a text
        scored again), the query's and the pair's special tokens (:meth:`_pair_specials`), never the text's own
        states. Returns the query's outputs, the character span of a token range of the text, and where the query
        starts."""
        lead, mid, trail = self._pair_specials
        text_ids, offsets = self._text_tokens(text)
        query_ids = self.tokenizer(query, add_special_tokens=False, verbose=False)["input_ids"]
        first, last = len(lead), len(lead) + len(text_ids)  # the text's tokens: first:last
        ids = torch.cat([torch.tensor(lead, dtype=torch.long), text_ids,
                         torch.tensor(mid + query_ids + trail, dtype=torch.long)])
        start = last + len(mid)  # the query's tokens and the special ones after it
        with torch.no_grad(), autocast(self.device, self.bf16):
            out = query_last(self.model.model, ids, start)

        def characters(a: int, b: int) -> tuple[int, int]:
            a, b = max(a, first) - first, min(b, last) - first
            return (int(offsets[a, 0]), int(offsets[b - 1, 1])) if a < b else (0, 0)

        return out, characters, start

    @functools.cached_property
    def _pair_specials(self) -> tuple[list[int], list[int], list[int]]:
        """The special token ids the tokenizer's pair encoding puts before the first text, between the two, and
        after the second (``[CLS]``, ``[SEP]``, ``[SEP]``): the pair's template, read from a probe pair (each text
        of a pair is tokenized on its own, so a pair's ids are its two texts' ids inside these)."""
        probe = self.tokenizer("a", "b", verbose=False)
        owner, ids = probe.sequence_ids(0), probe["input_ids"]
        if 1 not in owner or 0 not in owner:
            raise ValueError("this tokenizer's pair encoding has no second text: the query cannot be found")
        a1, b0 = len(owner) - owner[::-1].index(0), owner.index(1)
        return ids[:owner.index(0)], ids[a1:b0], ids[len(owner) - owner[::-1].index(1):]

    def _text_tokens(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``text``'s token ids (N,) and character spans (N, 2) int32, no special tokens; those of the texts
        scored lately are kept (:attr:`text_cache_bytes`, least recently used dropped first)."""
        if (kept := self._texts.get(text)) is not None:
            self._texts.move_to_end(text)
            return kept
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        kept = (torch.tensor(enc["input_ids"], dtype=torch.long),
                torch.tensor(enc["offset_mapping"], dtype=torch.int32).view(-1, 2))
        size = 16 * len(kept[0]) + len(text)
        if size <= self.text_cache_bytes:
            self._texts[text] = kept
            self._texts_bytes += size
            while self._texts_bytes > self.text_cache_bytes:
                old, (old_ids, _) = self._texts.popitem(last=False)
                self._texts_bytes -= 16 * len(old_ids) + len(old)
        return kept

    def logits(self, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The head's float32 logits of a padded batch, on the CPU."""
        if "logits" not in self.runtime.outputs:
            raise ValueError(f"{self.onnx_file} has no logits output: export it with --head masked-lm or "
                             "sequence-classification")
        return self._run("logits", batch.to(self.device), mask.to(self.device)).float().cpu()

    def sparse(self, batch: torch.Tensor, mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """SPLADE's sparse vectors of a padded batch, one ``(indices, values)`` pair per row on the CPU: the
        vocabulary ids with a non-zero weight (int64, ascending) and their weights (float32). One backbone forward
        over the whole rows, then the max over real tokens taken chunk by chunk through the masked-LM head
        (:func:`avey_b.model.sparse.splade_max`: the ``(N, V)`` logits never exist at once). A checkpoint without
        a masked-LM head (``sparse`` not in :attr:`kinds`) is a ``ValueError`` naming what is missing."""
        return self.vectors(batch, mask, ("sparse",))["sparse"]

    @torch.no_grad()
    def vectors(self, batch: torch.Tensor, mask: torch.Tensor, outputs: Sequence[str] = ("dense",), *,
                chunks: Sequence[Sequence[tuple[int, int]]] | None = None, normalize: bool | None = None
                ) -> dict[str, list]:
        """Any subset of :data:`OUTPUTS <avey_b.inference.options.OUTPUTS>` for a padded batch from one forward; per
        output a list with one entry per row, on the CPU: ``dense`` the ``(d,)`` float32 vector (:meth:`embed`'s,
        ``normalize`` as there), or with ``chunks`` (per row its late chunks as token ranges over its real tokens)
        the ``(C, d)`` chunk vectors (:func:`avey_b.model.heads.chunk_embeddings`); ``sparse`` the ``(indices,
        values)`` of :meth:`sparse`; ``multivector`` the ``(n_i, D)`` float32 token vectors of the row's real tokens
        (:meth:`token_vectors`'). One output alone comes from the runtime's own output for it (an ONNX graph's
        ``sentence_embedding``, the multi-vector head's ``embeddings``); several, from the one last hidden state, each
        head run on it (the eager runtime). An output the checkpoint lacks is refused as its own method refuses it."""
        if unknown := [o for o in outputs if o not in OUTPUTS]:
            raise ValueError(f"unknown outputs {unknown}: the outputs are {', '.join(OUTPUTS)}")
        if chunks is not None and "dense" not in outputs:
            raise ValueError("chunks pool dense vectors: ask for the dense output with them")
        for output in outputs:
            self.require(output)
        normalize = self.normalize if normalize is None else normalize
        if tuple(outputs) == ("dense",) and chunks is None:
            return {"dense": list(self.embed(batch, mask, normalize).cpu())}
        if tuple(outputs) == ("multivector",):
            tokens = self.token_vectors(batch, mask).cpu()
            return {"multivector": [tokens[i, row.bool()] for i, row in enumerate(mask.cpu())]}
        if self.onnx_file and "multivector" in outputs:
            raise ValueError(f"token vectors with other outputs from one forward need the eager runtime; this encoder "
                             f"runs the ONNX model {self.onnx_file}: ask for them apart")
        # SPLADE weights in float32 whatever the precision: under bf16 autocast the backbone's rounding moves them by
        # up to 0.4 (4%, the largest weight 2.4) where a float32 forward keeps them within 1e-3 of the model's own
        fp32 = "sparse" in outputs
        hidden = self.hidden_states(batch, mask, fp32)
        mask = mask.to(hidden.device)
        out: dict[str, list] = {}
        if "dense" in outputs:
            out["dense"] = ([c.cpu() for c in chunk_embeddings(hidden, mask, chunks, normalize)] if chunks is not None
                            else list(sentence_embedding(hidden.float(), mask, normalize).cpu()))
        with autocast(self.device, self.bf16 and not fp32):
            if "sparse" in outputs:
                out["sparse"] = sparse_rows(splade_max(hidden, mask, self.model.decoder))
            if "multivector" in outputs:
                tokens = multivector.token_vectors(hidden, self.model.projection, mask).float().cpu()
                out["multivector"] = [tokens[i, row.bool()] for i, row in enumerate(mask.cpu())]
        return out

    def require(self, output: str) -> None:
        """A ``ValueError`` unless this checkpoint gives ``output`` (one of :data:`OUTPUTS
        <avey_b.inference.options.OUTPUTS>`; ``dense`` wherever it embeds): what is missing and how to get it."""
        if output not in OUTPUTS:
            raise ValueError(f"unknown output {output!r}: the outputs are {', '.join(OUTPUTS)}")
        if output in self.vector_outputs:
            return
        if output == "sparse" and self.onnx_file:
            raise ValueError(f"sparse vectors run in the eager runtime only: load {self.name} without --onnx "
                             f"({self.onnx_file})")
        if output == "sparse":
            raise ValueError(f"{self.name} is a {self.architecture}, which has no masked-LM head: sparse (SPLADE) "
                             "vectors need one. Use a pretrained Avey-B checkpoint (an AveyBForMaskedLM: what `avey-b "
                             "pretrain` saves, or the authors' release checkpoints) or train one with `avey-b "
                             "finetune --task sparse-embedding`")
        if output == "multivector":
            raise ValueError(f"{self.name} is a {self.architecture}, without a multi-vector head (token vectors for "
                             "late interaction): train one with `avey-b finetune --task multi-vector`")
        raise ValueError(f"{self.onnx_file or self.name} gives no dense vectors (it answers {', '.join(self.kinds)}): "
                         "export it with --head embedding or base")

    # ------------------------------------------------------------------ multi-vector (late interaction)
    def token_vectors(self, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, N, D) float32 token vectors of a padded batch, on ``device``: the multi-vector head's unit vectors
        (:mod:`avey_b.model.multivector`), zero at padding. A checkpoint without the head is refused, with how to
        train one."""
        self.require("multivector")
        return self._run("embeddings", batch.to(self.device), mask.to(self.device)).float()

    def multivectors(self, texts: str | Sequence[str], *, batch_tokens: int = MAX_BATCH_TOKENS) -> list[torch.Tensor]:
        """The token vectors of each text, as sentence-transformers' ``MultiVectorEncoder.encode`` gives them: one
        ``(n_i, D)`` float32 CPU tensor per text (a single string: a list of one), a row per real token, the
        tokenizer's special tokens included; queries and documents alike: :meth:`encode`'s ``multivector``."""
        return self.encode([texts] if isinstance(texts, str) else texts, outputs="multivector",
                           batch_tokens=batch_tokens)

    def maxsim(self, query: str, documents: Sequence[str], *, batch_tokens: int = MAX_BATCH_TOKENS) -> torch.Tensor:
        """(len(documents),) float32 MaxSim scores of ``query`` against each document, in the documents' order:
        ``Σ_t max_u x_t · y_u`` over the query's and the document's token vectors (:meth:`multivectors`), by the
        library's one MaxSim (:func:`avey_b.model.similarity.maxsim`)."""
        vectors = self.multivectors([query, *documents], batch_tokens=batch_tokens)
        return query_scores(vectors[0], vectors[1:])
