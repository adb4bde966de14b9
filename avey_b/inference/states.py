"""The one state path: documents encoded in pieces (:class:`avey_b.model.streaming.DocumentState`) by an
:class:`~avey_b.inference.encoder.Encoder`'s eager model. :meth:`Encoder.document
<avey_b.inference.encoder.Encoder.document>` (a text that grows and changes), ``avey-b embed`` (long documents in
bounded memory, and ``--update``) and ``avey-b serve`` (long inputs a block at a time, repeated ones through the
prefix cache) all run their states through a :class:`States`.

A :class:`States` says how its documents are encoded — the tokens a state ranks at a time, the late chunks and the
tokenizer's special tokens at the ends, the prefix cache (:class:`avey_b.inference.prefix.PrefixCache`) — and runs
every step without gradients in the encoder's precision (bf16 autocast where the encoder runs it); the vectors it
gives are normalized as the checkpoint says (:attr:`Encoder.normalize <avey_b.inference.encoder.Encoder.normalize>`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Sequence

import numpy as np
import torch

from avey_b.inference.prefix import PrefixCache
from avey_b.model.streaming import DocumentState, refusal
from avey_b.utils.device import autocast


def special_ends(tokenizer) -> tuple[list[int], list[int]]:
    """The special token ids ``tokenizer`` puts before and after every text (``[CLS]`` and ``[SEP]``: ``([cls],
    [sep])``), which belong to no late chunk and stay at the ends whatever the text."""
    probe = tokenizer("a", return_special_tokens_mask=True, verbose=False)
    mask, ids = probe["special_tokens_mask"], probe["input_ids"]
    lead = next(i for i, s in enumerate(mask + [0]) if not s)
    trail = next(i for i, s in enumerate(mask[::-1] + [0]) if not s)
    return ids[:lead], ids[len(ids) - trail:]


def unavailable(encoder) -> str | None:
    """Why ``encoder`` (an :class:`~avey_b.inference.encoder.Encoder`) cannot encode documents in pieces (the ONNX
    runtime, or a config whose later tokens reach earlier splits: :func:`avey_b.model.streaming.refusal`), or None
    when it can."""
    if encoder.onnx_file:
        return (f"it runs the ONNX model {encoder.onnx_file}, and a document encoded in pieces needs the eager "
                "runtime (the PyTorch model): load it without LoadOptions(onnx=...)")
    return refusal(encoder.config)


class States:
    """Document states of ``encoder``'s eager model (an :class:`~avey_b.inference.encoder.Encoder`, which imports
    this module: hence no annotation). ``block_tokens``: the new tokens a state ranks and processes at a time (its
    memory; None: :class:`~avey_b.model.streaming.DocumentState`'s default); ``chunk_tokens`` and
    ``chunk_overlap``: the late chunks its states pool (None: the whole document only); ``ends``: the ids are a
    text's as the encoder's tokenizer gives them, its leading and trailing special tokens (``[CLS] ... [SEP]``, kept
    as ``ends``: :func:`special_ends`) in no chunk and kept at the ends (False: no such ends are counted);
    ``cache``: where :meth:`pooled_steps` finds and keeps states (None: nowhere); ``sum_splits``: the splits whose
    output sums a state keeps as one (memory against what an edit recomputes: ``DocumentState``'s). An encoder
    that cannot encode in pieces is a ``ValueError`` saying why (:func:`unavailable`)."""

    def __init__(self, encoder, *, block_tokens: int | None = None, chunk_tokens: int | None = None,
                 chunk_overlap: int = 0, ends: bool = False, cache: PrefixCache | None = None, sum_splits: int = 1):
        if why := unavailable(encoder):
            raise ValueError(f"{encoder.name} cannot encode a document in pieces: {why}")
        self.encoder, self.cache = encoder, cache
        self.ends = special_ends(encoder.tokenizer) if ends else ([], [])
        self.options = {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap,
                        "special": (len(self.ends[0]), len(self.ends[1])), "sum_splits": sum_splits}
        if block_tokens is not None:
            self.options["block_tokens"] = block_tokens

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Where a state's steps run: without gradients, in the encoder's precision."""
        with torch.no_grad(), autocast(self.encoder.device, self.encoder.bf16):
            yield

    # ------------------------------------------------------------------ states
    def new(self, ids: Sequence[int] | torch.Tensor | None = None) -> DocumentState:
        """A new state, fed ``ids`` when given."""
        with self.running():
            state = DocumentState(self.encoder.model, **self.options)
            return state if ids is None else state.feed(ids)

    def restore(self, saved: dict[str, torch.Tensor]) -> DocumentState:
        """A state from its exported tensors (:meth:`~avey_b.model.streaming.DocumentState.export`), made with these
        options."""
        with self.running():
            return DocumentState.restore(self.encoder.model, saved, **self.options)

    def update(self, state: DocumentState, ids: Sequence[int] | torch.Tensor) -> DocumentState:
        """``state`` made the state of ``ids``: only the splits from the first id that changed are recomputed."""
        with self.running():
            return state.update(ids)

    def pooled(self, state: DocumentState) -> torch.Tensor:
        """(d,) float32 on the CPU: the document's vector, as a fresh forward pools it, normalized as the checkpoint
        says."""
        with self.running():
            return state.pooled(self.encoder.normalize).cpu()

    def chunks(self, state: DocumentState) -> torch.Tensor:
        """(C, d) float32 on the CPU: the document's late chunks' vectors, normalized as the checkpoint says."""
        with self.running():
            return state.chunk_vectors(self.encoder.normalize).cpu()

    # ------------------------------------------------------------------ a block at a time, through the cache
    def pooled_steps(self, ids: torch.Tensor, step: int | None = None, *,
                     on_hit: Callable[[int], None] | None = None) -> Generator[None, None, np.ndarray]:
        """The pooled vector of ``ids`` (1-D, int64), not normalized, computed ``step`` tokens at a time (None: all at
        once): a generator that yields between two steps (a caller runs other work there) and returns the vector. With
        a cache, it starts from the longest cached prefix (an input equal to a cached one: no step at all), calls
        ``on_hit`` with the tokens that prefix holds (computed by none of the steps), and keeps the state it ends
        with."""
        found = self.cache.lookup(ids) if self.cache else None
        matched = found.matched if found else 0
        if matched and on_hit is not None:
            on_hit(matched)
        if found is not None and found.vector is not None:
            return found.vector
        state = found.state if found and found.state is not None else self.new()
        step = step or ids.numel()
        for i, a in enumerate(range(state.length, ids.numel(), step)):
            if i:
                yield
            with self.running():
                state.feed(ids[a:a + step])
        with self.running():
            vector = state.pooled(normalize=False).numpy()
        if self.cache:
            self.cache.store(ids, state, vector, ids.numel() - matched)
        return vector
