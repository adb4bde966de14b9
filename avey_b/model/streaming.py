"""A document encoded in pieces: appends and edits that recompute only what changed, in memory bounded at any length.

Avey-B's ranker, unidirectional as the paper chose it (§3.1, §5.2), chooses each split's top-``k`` among the splits
*before* it, on the token embeddings; the neural processor (§3.2) then works on each split's row (the split after its
weighted retrieved splits, compressed to ``S`` tokens, §4.3) alone. So a split's outputs depend only on its own
tokens and on the tokens of the splits before it. :class:`DocumentState` keeps, for a document fed in pieces of any
size, the token ids and per split what is needed to pool and to edit — its chosen splits, their ranking keys and
the sum of its outputs (per late chunk where chunks are asked for) — never the ``(N, d)`` states:

* **appending** computes the new splits only (and the last, partial split, which the next tokens complete): each new
  split is ranked against the earlier ones, whose embeddings are looked up again from their ids one tile at a time;
* **edits** (:meth:`DocumentState.replace`) of the same number of tokens recompute the edited splits and the later
  splits whose choice held an edited split or changes because of it; an edit that changes the length shifts every
  later split's tokens, so everything after it is recomputed;
* **memory**: the weights, the ids, per split its choice and keys (``2 × k × 8`` bytes), the output sums per
  ``sum_splits`` splits (``d × 4`` bytes each), and one block of splits being ranked and processed.

``sum_splits`` (default 1) trades memory for recomputation: the output sums are kept per group of that many splits,
so ``d × 4 / (split_size × sum_splits)`` bytes a token; an edit, a truncation or the append that moves the trailing
special tokens reopens the group it falls in, recomputing that group's kept splits (at most ``sum_splits``) from
their kept choice to recover their own sums, which are dropped again when the change is done.

The outputs equal a fresh forward of the whole document (the same choice, the same rows; sums in a different order:
about 1e-6 in float32, and within 1e-5 under bfloat16 autocast). With bfloat16 weights the processor's GEMMs of other
shapes round differently: the pooled vector is within about 1e-3 of a fresh bfloat16 forward (which is itself about
2e-3 from float32). Two candidate splits whose MaxSim scores lie within float32 rounding of each other may be chosen
either way, as the model's own dense and vocabulary paths may; text has no such near-ties except by chance.

With ``ranker="bidirectional"`` a split's outputs depend on later splits too, and with the ranker at every layer
(``ranker_placement="every_layer"``) a new split would be ranked against every layer's states of the earlier ones,
which are not kept: both are refused (:func:`refusal` says why).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import chunks, ranker_fast, splits
from .modeling import AveyBModel
from .ranker import Choice

#: The bound on split distances in the stored ranking keys (:func:`avey_b.model.ranker_fast.ranking_keys`): one
#: value for every key, so keys computed at different lengths compare; documents of up to 2^22 splits.
KEY_SPLITS = 1 << 22


def refusal(config) -> str | None:
    """Why a model with ``config`` cannot be encoded in pieces (a sentence), or None when it can."""
    if config.ranker == "bidirectional":
        return ("ranker='bidirectional' chooses each split's top-k among later splits too (§4.1), so appending text "
                "changes earlier outputs: encode the whole document instead")
    if config.ranker != "off" and config.ranker_placement == "every_layer":
        return ("ranker_placement='every_layer' ranks a new split against every layer's states of the earlier "
                "splits, which a document state does not keep: encode the whole document instead")
    return None


class DocumentState:
    """One document's encoding, fed in pieces: :meth:`feed` appends token ids, :meth:`replace` and :meth:`truncate`
    edit them, :meth:`pooled` and :meth:`chunk_vectors` give the document's vectors as a fresh forward of all its
    ids would (masked mean of the last hidden state, L2-normalized as :func:`avey_b.model.heads.sentence_embedding`).

    ``model``: an :class:`~avey_b.model.modeling.AveyBModel` or a head on one, in eval mode. Late chunks
    (``chunk_tokens`` with ``chunk_overlap``), where ``special = (first, last)`` counts the leading and trailing
    tokens that belong to no chunk (a tokenizer's ``[CLS]`` and ``[SEP]``: ``(1, 1)``): the rule of
    :mod:`avey_b.model.chunks`. ``block_tokens``: how many new tokens are ranked at a time (memory: their vectors
    and the similarity tiles); the processor runs them in chunks of rows as the forward does
    (:meth:`~avey_b.model.modeling.AveyBModel.process`).

    Each step is the forward's: the splits cut by :func:`avey_b.model.splits.cut_splits`, ranked by
    :meth:`avey_b.model.ranker.Ranker.choose`, run by :meth:`~avey_b.model.modeling.AveyBModel.process` and
    :meth:`~avey_b.model.modeling.AveyBModel.finish`; the state keeps the bookkeeping. ``sum_splits``: the splits
    whose output sums are kept as one (the module docstring).

    ``recomputed`` counts the splits the last :meth:`feed`, :meth:`replace` or :meth:`truncate` ran through the
    processor; ``computed`` all of them since the state was made."""

    def __init__(self, model: torch.nn.Module, *, chunk_tokens: int | None = None, chunk_overlap: int = 0,
                 special: tuple[int, int] = (0, 0), block_tokens: int = 16384, sum_splits: int = 1):
        backbone = model if isinstance(model, AveyBModel) else getattr(model, "model", None)
        if not isinstance(backbone, AveyBModel):
            raise TypeError(f"DocumentState needs an AveyBModel or a head on one, got {type(model).__name__}")
        if why := refusal(backbone.config):
            raise ValueError(f"this model cannot encode a document in pieces: {why}")
        if chunk_tokens is not None:
            chunks.check_overlap(chunk_tokens, chunk_overlap)
        if not (isinstance(sum_splits, int) and sum_splits >= 1):
            raise ValueError(f"sum_splits must be a positive integer, got {sum_splits!r}")
        self.sum_splits = sum_splits
        self.model = backbone
        config = backbone.config
        self.S = config.split_size
        self.k = retrieved(backbone)
        self.chunk = None if chunk_tokens is None else (chunk_tokens, chunk_tokens - chunk_overlap)
        self.special = tuple(special)
        self.block_splits = max(1, block_tokens // self.S)
        self.length = 0
        self.done = 0  # splits whose outputs are kept: the full ones
        self.recomputed = self.computed = 0
        self.d = d = config.hidden_size
        self._ids = torch.zeros(1024, dtype=torch.int32 if config.vocab_size < 2**31 else torch.long)
        # per group of `sum_splits` kept splits: the sum of their outputs; per kept split (rows past `done` unused):
        # its chosen splits best first, their keys; `_open`: the groups whose splits' own sums are known, (C, d) each
        self._sums = torch.zeros(64, d)
        self._open: dict[int, torch.Tensor] = {}
        self._choices = torch.zeros(64, self.k, dtype=torch.long)
        self._keys = torch.full((64, self.k), float("-inf"), dtype=torch.float64)
        self._segments: list[tuple[torch.Tensor, torch.Tensor]] = []  # per kept split: (chunk ids, their sums)
        self._partial = None  # the partial split's (sum, segments), made on demand

    # ------------------------------------------------------------------ the document
    @property
    def ids(self) -> torch.Tensor:
        """(N,) the document's token ids (a view)."""
        return self._ids[:self.length]

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def feed(self, ids: Sequence[int] | torch.Tensor) -> DocumentState:
        """Append token ids; computes the splits they complete. Returns the state."""
        new = self._check_ids(ids)
        self.recomputed = 0
        if self.special[1] and self.length:  # the old trailing tokens are now inside the text: their split again
            self._drop((self.length - self.special[1]) // self.S)
        self._write(self.length, new)
        self._complete()
        self._open.clear()  # the groups' own sums, recovered for this change, are not kept (the memory bound)
        return self

    def truncate(self, length: int) -> DocumentState:
        """Keep the first ``length`` token ids."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a document of {self.length} tokens to {length}")
        self.recomputed = 0
        self._drop(length // self.S)
        self._open.clear()
        self.length = length
        self._partial = None
        return self

    def replace(self, start: int, end: int, ids: Sequence[int] | torch.Tensor) -> DocumentState:
        """Replace the tokens ``start:end`` by ``ids``. The same number of tokens: the edited splits and the later
        splits whose choice held one of them or changes are recomputed; another number shifts every later token,
        and everything after ``start`` is recomputed."""
        if not 0 <= start <= end <= self.length:
            raise ValueError(f"the span {start}:{end} is not within the document's {self.length} tokens")
        new = self._check_ids(ids)
        if new.numel() != end - start:
            suffix = self.ids[end:].clone()
            self.truncate(start)
            recomputed = self.recomputed
            self.feed(torch.cat([new, suffix]))
            self.recomputed += recomputed
            return self
        self.recomputed = 0
        changed = (self.ids[start:end] != new).nonzero().squeeze(1) + start
        if changed.numel():
            edited = torch.unique(changed // self.S)
            edited = edited[edited < self.done]
            later, held = self._reached(edited)
            # the outputs of these splits read the old ids: their groups' own sums are recovered before the ids change
            for group in torch.unique(torch.cat([edited, later[held]]) // self.sum_splits).tolist():
                self._reopen(group)
            self._ids[start:end] = new
            self._partial = None
            self._edit(edited, later, held)
            self._open.clear()
        return self

    def update(self, ids: Sequence[int] | torch.Tensor) -> DocumentState:
        """Make the document's ids ``ids``, computing only what changed: the span between their common prefix and
        their common suffix with the current ids is replaced (:meth:`replace`). What a caller that holds a new
        version of the whole document (a re-tokenized text, a corpus row) calls. Returns the state."""
        new = self._check_ids(ids).long()
        old = self.ids.long()
        n = min(old.numel(), new.numel())
        differ = (old[:n] != new[:n]).nonzero()
        first = int(differ[0]) if differ.numel() else n
        tail = n - first  # the common suffix may not overlap the common prefix
        differ = (old.flip(0)[:tail] != new.flip(0)[:tail]).nonzero()
        same = int(differ[0]) if differ.numel() else tail
        return self.replace(first, old.numel() - same, new[first:new.numel() - same])

    # ------------------------------------------------------------------ keeping and moving a state
    def copy(self) -> DocumentState:
        """An independent copy (the model shared): what a cache hands out, so that feeding one copy leaves the
        other as it was."""
        other = copy.copy(self)
        kept = (self.ids, self._sums[:self._groups], self._choices[:self.done], self._keys[:self.done])
        other._ids, other._sums, other._choices, other._keys = (t.clone() for t in kept)
        other._open = {g: t.clone() for g, t in self._open.items()}
        other._segments = list(self._segments)  # its tuples are never changed in place, only replaced
        return other

    @property
    def nbytes(self) -> int:
        """Bytes this state holds beyond the model: the ids and, per kept split, its output sum, choice and keys
        (and chunk sums): what a cache bounded in bytes counts."""
        held = [self.ids, self._sums[:self._groups], self._choices[:self.done], self._keys[:self.done]]
        held += [*self._open.values(), *(t for segment in self._segments for t in segment)]
        return sum(t.numel() * t.element_size() for t in held)

    def export(self) -> dict[str, torch.Tensor]:
        """What the state keeps, as tensors (for a file such as safetensors): ``ids`` (N,), and per kept split
        ``choice`` (n, k) and ``keys`` (n, k) float64, ``sums`` (g, d) float32 per group of ``sum_splits`` (1,) kept
        splits (g = ceil(n / sum_splits)); with chunks, ``segment_chunks`` and ``segment_sums`` with
        ``segment_splits``, the split each row belongs to. Never token states. :meth:`restore` takes it back."""
        n = self.done
        data = {"ids": self.ids.clone(), "sums": self._sums[:self._groups].clone(),
                "choice": self._choices[:n].clone(), "keys": self._keys[:n].clone(),
                "sum_splits": torch.tensor([self.sum_splits])}
        if self.chunk is not None:
            data["segment_splits"] = torch.cat([torch.full((len(c),), s, dtype=torch.long)
                                                for s, (c, _) in enumerate(self._segments)] or [torch.zeros(0).long()])
            data["segment_chunks"] = torch.cat([c for c, _ in self._segments] or [torch.zeros(0).long()])
            data["segment_sums"] = torch.cat([v for _, v in self._segments] or [self._sums.new_zeros(0, self.d)])
        return data

    @classmethod
    def restore(cls, model: torch.nn.Module, data: dict[str, torch.Tensor], **options) -> DocumentState:
        """A state from :meth:`export`'s tensors and the same ``model`` and options (chunks, special tokens) it was
        made with (its ``sum_splits`` is the saved one's); feeding or editing it then computes only what changed, as
        for the original."""
        grouping = data.get("sum_splits")  # absent or empty: a state saved before sum_splits, one per split
        saved = int(grouping) if grouping is not None and grouping.numel() else 1
        state = cls(model, **{**options, "sum_splits": saved})
        ids, sums = data["ids"], data["sums"]
        n = ids.numel() // state.S
        if sums.shape[0] != -(-n // saved) or sums.shape[1] != state.d or tuple(data["choice"].shape) != (n, state.k):
            raise ValueError(f"the saved state does not fit this model: {ids.numel()} ids and {tuple(sums.shape)} "
                             f"sums (per {saved} splits) for splits of {state.S} tokens, width {state.d} and "
                             f"k={state.k}")
        if (state.chunk is None) != ("segment_sums" not in data):
            raise ValueError("the saved state was made with other chunk options than these")
        state._write(0, ids.to(state._ids.dtype))
        state._grow(n)
        state._sums[:sums.shape[0]], state._choices[:n], state._keys[:n] = sums, data["choice"], data["keys"]
        state.done = n
        if state.chunk is not None:
            owner = data["segment_splits"]
            state._segments = [(data["segment_chunks"][owner == s], data["segment_sums"][owner == s])
                               for s in range(n)]
        return state

    # ------------------------------------------------------------------ vectors
    def pooled(self, normalize: bool = True) -> torch.Tensor:
        """(d,) float32: the mean of the last hidden state over every token (L2-normalized with ``normalize``)."""
        if not self.length:
            raise ValueError("the document is empty: feed it token ids first")
        total = self._sums[:self._groups].sum(0) + self._partial_split()[0]
        pooled = (total / self.length).to(self.model.dtype).float()
        return F.normalize(pooled, dim=-1) if normalize else pooled

    def chunk_vectors(self, normalize: bool = True) -> torch.Tensor:
        """(C, d) float32: each late chunk's mean of the last hidden state (see the class docstring), as
        :func:`avey_b.model.heads.chunk_embeddings` pools them from a fresh forward."""
        if self.chunk is None:
            raise ValueError("this document state has no chunks: make it with chunk_tokens")
        spans = self.chunk_spans()
        total = torch.zeros(len(spans), self._sums.shape[1])
        for owned, sums in [*self._segments, self._partial_split()[1]]:
            keep = owned < len(spans)
            total.index_add_(0, owned[keep], sums[keep])
        count = torch.tensor([b - a for a, b in spans], dtype=torch.float32).clamp_min(1)
        pooled = (total / count[:, None]).to(self.model.dtype).float()
        return F.normalize(pooled, dim=-1) if normalize else pooled

    def query(self, ids: Sequence[int] | torch.Tensor) -> QueryLast:
        """The outputs of token ids ``ids`` placed after the document (:func:`query_last`): the query's splits
        alone are ranked and processed, so the cost is the query's, however long the document; the state is left
        as it was. Equal to the query's positions of a fresh forward of the document's ids followed by ``ids``."""
        new = self._check_ids(ids)
        if not new.numel():
            raise ValueError("the query is empty: give it at least one token id")
        if self.model.training:
            raise ValueError("a document state runs the model in eval mode: call model.eval() first")
        with torch.no_grad():
            return query_last(self.model, torch.cat([self.ids, new]), self.length)

    def chunk_spans(self) -> list[tuple[int, int]]:
        """The late chunks' token ranges ``(start, end)`` over the document's ids, end exclusive
        (:func:`avey_b.model.chunks.chunk_spans`)."""
        size, step = self.chunk
        return chunks.chunk_spans(self.length, size, size - step, self.special)

    # ------------------------------------------------------------------ bookkeeping
    def _check_ids(self, ids) -> torch.Tensor:
        new = torch.as_tensor(ids)
        if new.numel() == 0 and not isinstance(ids, torch.Tensor):
            new = new.long()  # an empty list (a deletion: replace(a, b, [])) has no integer dtype of its own
        if new.dim() != 1 or new.is_floating_point() or new.is_complex() or new.dtype == torch.bool:
            raise TypeError(f"token ids must be a 1-D sequence of integers, got {new.dtype} of shape "
                            f"{tuple(new.shape)}")
        vocab = self.model.config.vocab_size
        if new.numel() and (int(new.min()) < 0 or int(new.max()) >= vocab):
            raise ValueError(f"token ids out of range: found ids in [{int(new.min())}, {int(new.max())}] but the "
                             f"vocabulary has {vocab} entries")
        return new.to(self._ids.dtype)

    def _write(self, at: int, new: torch.Tensor) -> None:
        end = at + new.numel()
        self._ids = _capacity(self._ids, end, self.length)
        self._ids[at:end] = new
        self.length = end
        self._partial = None

    def _drop(self, first: int) -> None:
        """Forget the kept outputs of the splits from ``first`` on (the ids still those they were computed from)."""
        if first < self.done:
            group, inside = divmod(first, self.sum_splits)
            if inside:  # the group keeps its first splits: their own sums
                self._reopen(group, first)
                self._open[group][inside:] = 0
                self._sums[group] = self._open[group].sum(0)
            self._open = {g: t for g, t in self._open.items() if g < group or (g == group and inside)}
            self.done = first
            del self._segments[first:]
        self._partial = None

    @property
    def _groups(self) -> int:
        """The groups of ``sum_splits`` kept splits whose sums are kept (the last one maybe not full)."""
        return -(-self.done // self.sum_splits)

    def _reopen(self, group: int, end: int | None = None) -> None:
        """Know the own output sums of ``group``'s kept splits again (those before split ``end``: the others are
        being dropped): recompute them from their kept choice (the ids must still be those they were computed
        from)."""
        if self.sum_splits == 1 or group in self._open:
            return
        first = group * self.sum_splits
        kept = torch.arange(first, min(first + self.sum_splits, self.done, self.done if end is None else end))
        sums = torch.zeros(self.sum_splits, self.d)
        if kept.numel():
            sums[:kept.numel()] = self._process(kept, self._choices[kept], self._keys[kept]).sum(
                1, dtype=torch.float32).cpu()
        self._open[group] = sums

    def _put_sums(self, block: torch.Tensor, sums: torch.Tensor) -> None:
        """Keep the output sums ``sums`` (Q, d) of the splits ``block`` (ascending): new ones (from ``done`` on) are
        added to their group's sum; a kept one reopens its group (:meth:`_reopen`) and replaces its own sum."""
        if self.sum_splits == 1:
            self._sums[block] = sums
            return
        groups = block // self.sum_splits
        for group in torch.unique(groups).tolist():
            mine = groups == group
            splits, own = block[mine] - group * self.sum_splits, sums[mine]
            if int(block[mine][0]) < self.done:  # kept splits recomputed (an edit): their group's own sums
                self._reopen(group)
            if group in self._open:
                self._open[group][splits] = own
                self._sums[group] = self._open[group].sum(0)
            elif int(splits[0]) == 0:
                self._sums[group] = own.sum(0)
            else:
                self._sums[group] += own.sum(0)

    def _grow(self, n: int) -> None:
        """Room for ``n`` kept splits' choices and keys and their groups' sums (rows past ``done`` are written
        before they are read)."""
        self._sums = _capacity(self._sums, -(-n // self.sum_splits), self._groups)
        self._choices, self._keys = (_capacity(t, n, self.done) for t in (self._choices, self._keys))

    def _complete(self) -> None:
        """Compute and keep the splits the ids complete, a block at a time."""
        full = self.length // self.S
        self._grow(full)
        while self.done < full:
            block = torch.arange(self.done, min(full, self.done + self.block_splits))
            idx, keys = self._rank(block, torch.arange(int(block[-1])))
            self._keep(block, idx, keys)
            self.done = int(block[-1]) + 1

    def _partial_split(self) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The partial last split's output sum and chunk segments (zeros when there is none), cached."""
        if self._partial is None:
            d = self._sums.shape[1]
            nothing = (torch.zeros(0, dtype=torch.long), torch.zeros(0, d))
            if self.length % self.S == 0:
                self._partial = torch.zeros(d), nothing
            else:
                split = torch.tensor([self.done])
                idx, keys = self._rank(split, torch.arange(self.done))
                out = self._process(split, idx, keys)[0, :self.length % self.S]
                self._partial = out.sum(0, dtype=torch.float32).cpu(), self._chunk_segments(self.done, out)
        return self._partial

    def _keep(self, block: torch.Tensor, idx: torch.Tensor, keys: torch.Tensor) -> None:
        """Process the full splits ``block`` with their choice and keep what pooling and edits need."""
        self._choices[block], self._keys[block] = idx.cpu(), keys.cpu()
        out = self._process(block, idx, keys)
        self._put_sums(block, out.sum(1, dtype=torch.float32).cpu())
        if self.chunk is None:
            return
        for s, rows in zip(block.tolist(), out, strict=True):
            segment = self._chunk_segments(s, rows)
            if s < len(self._segments):
                self._segments[s] = segment
            else:
                self._segments.append(segment)

    def _chunk_segments(self, split: int, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For the outputs ``out`` (r, d) of the first ``r`` tokens of ``split``: the chunks they fall in
        (:func:`avey_b.model.chunks.chunks_of`) and the sums of their tokens in each."""
        d = out.shape[-1]
        if self.chunk is None:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, d)
        size, step = self.chunk
        start = split * self.S
        lo, hi = max(start, self.special[0]), min(start + out.shape[0], self.length - self.special[1])
        found = chunks.chunks_of(lo, hi, size, size - step, self.special[0])
        sums = [out[a - start:b - start].sum(0, dtype=torch.float32).cpu() for _, a, b in found]
        return (torch.tensor([c for c, _, _ in found], dtype=torch.long),
                torch.stack(sums) if sums else torch.zeros(0, d))

    # ------------------------------------------------------------------ the model's steps
    def _rank(self, queries: torch.Tensor, candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The choice (split ids, keys; (Q, k), best first) of the ``queries`` among ``candidates``:
        :func:`rank_splits` on the document's ids."""
        return rank_splits(self.model, self.ids, queries, candidates)

    @torch.no_grad()
    def _process(self, queries: torch.Tensor, idx: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """(Q, S, d) the last hidden state of the ``queries`` splits, given their choice: :func:`run_splits` on the
        document's ids, in eval mode."""
        if self.model.training:
            raise ValueError("a document state runs the model in eval mode: call model.eval() first")
        self.recomputed += queries.numel()
        self.computed += queries.numel()
        return run_splits(self.model, self.ids, queries, idx, keys)

    def _reached(self, edited: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The kept splits after the first of ``edited`` that are not edited, and which of them chose an edited one
        (a mask): what an in-place edit of ``edited`` recomputes in full."""
        if not edited.numel():
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.bool)
        later = torch.arange(int(edited[0]) + 1, self.done)
        later = later[~torch.isin(later, edited)]
        return later, (torch.isin(self._choices[later], edited) & torch.isfinite(self._keys[later])).any(1)

    def _edit(self, edited: torch.Tensor, later: torch.Tensor, held: torch.Tensor) -> None:
        """After an in-place edit of the kept splits ``edited`` (``later`` and ``held``: :meth:`_reached`): re-rank
        and recompute them, and every later kept split whose choice held one of them (re-ranked in full) or now
        takes one (its choice merged with the edited splits' new scores: the other candidates' scores did not
        change); ``block_tokens`` at a time."""
        if not edited.numel():
            return
        for block in torch.cat([edited, later[held]]).sort().values.split(self.block_splits):  # bounded memory
            idx, keys = self._rank(block, torch.arange(int(block[-1])))
            self._keep(block, idx, keys)
        rest = later[~held]
        for part in rest.split(self.block_splits) if rest.numel() and self.k else ():
            new_idx, new_keys = self._rank(part, edited)
            val, chosen = ranker_fast.merge_top_k(self._keys[part], self._choices[part], new_keys, new_idx, self.k)
            changed = (val != self._keys[part]).any(1)
            if changed.any():
                self._keep(part[changed], chosen[changed], val[changed])


def retrieved(model: AveyBModel) -> int:
    """``k``, the splits each split retrieves: 0 without a ranker."""
    return 0 if model.ranker is None else model.config.num_retrieved_splits


def rank_splits(model: AveyBModel, ids: torch.Tensor, queries: torch.Tensor, candidates: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ranker's choice (§3.1) of the splits ``queries`` (Q,) of one row of token ids ``ids`` (N,) among its full
    splits ``candidates`` (J,), each query among the candidates before it, the candidates kept as ids
    (:meth:`avey_b.model.ranker.Ranker.choose`). Returns the chosen split ids and their ranking keys, (Q, k) each,
    best first, on the CPU (``-inf`` keys in empty slots). No gradient: the choice is discrete."""
    S, Q, k = model.config.split_size, queries.numel(), retrieved(model)
    if k == 0 or candidates.numel() == 0:
        return torch.zeros(Q, k, dtype=torch.long), torch.full((Q, k), float("-inf"), dtype=torch.float64)
    device = model.embed_tokens.weight.device

    def candidate_ids(which: torch.Tensor) -> torch.Tensor:
        which = which.cpu()
        first, last = int(which[0]), int(which[-1])
        if last - first + 1 == which.numel():  # a run of full splits (the usual tile): a view of the row's ids
            return ids[first * S:(last + 1) * S].view(-1, S).long().to(device)
        return splits.split_ids(ids, which, S)[0].to(device)

    with torch.no_grad():
        choice = model.ranker.choose(splits.cut_splits(ids, queries, S, model.embed_tokens), queries, candidates,
                                     candidate_ids, model.embed_tokens, n_bound=KEY_SPLITS)
    return choice.ranked[0].cpu(), choice.keys[0].cpu()


def run_splits(model: AveyBModel, ids: torch.Tensor, queries: torch.Tensor, idx: torch.Tensor, keys: torch.Tensor
               ) -> torch.Tensor:
    """(Q, S, d) the last hidden state of the splits ``queries`` (Q,) of one row of token ids ``ids`` (N,), given
    their choice (split ids and keys, (Q, k) best first, as :func:`rank_splits` gives): a chunk of rows at a time,
    each chunk's splits and the splits they chose cut, their choice laid out
    (:meth:`avey_b.model.ranker.Choice.of_ranked`), then :meth:`~avey_b.model.modeling.AveyBModel.process` and
    :meth:`~avey_b.model.modeling.AveyBModel.finish`, as the forward runs them. Under autograd when it is on (the
    embeddings of the splits cut, the compressor and the layers; the choice is given), with the embedding dropout
    of the forward in training mode."""
    S, k = model.config.split_size, retrieved(model)
    rows = max(1, model.config.execution.processor_chunk_tokens_for(model.embed_tokens.weight.device.type)
               // model.config.context_size)
    out = []
    for q0 in range(0, queries.numel(), rows):
        q, chosen, key = queries[q0:q0 + rows], idx[q0:q0 + rows], keys[q0:q0 + rows]
        held = torch.isfinite(key)
        # the splits these rows need, and each one's place among them
        needed, local = torch.unique(torch.cat([q, chosen[held]]), return_inverse=True)
        sp = splits.cut_splits(ids, needed, S, model.embed_tokens)
        sp.x = model.embed_dropout(sp.x)
        own = local[:q.numel()]  # the rows' own splits, as ids into `needed`
        choice = None
        if model.ranker is not None:  # the choice in ids into `needed`; the other splits choose nothing
            device = sp.x.device
            ranked = torch.zeros(needed.numel(), k, dtype=torch.long)
            ranked_keys = torch.full((needed.numel(), k), float("-inf"), dtype=torch.float64)
            slot = torch.zeros_like(chosen)
            slot[held] = local[q.numel():]
            ranked[own], ranked_keys[own] = slot, key
            choice = Choice.of_ranked(sp, ranked[None].to(device), ranked_keys[None].to(device))
        out.append(model.finish(model.process(sp, choice, own.to(sp.x.device))))
    return torch.cat(out)


@dataclass
class QueryLast:
    """A query's outputs placed after a document (:func:`query_last`)."""

    hidden: torch.Tensor
    """(q, d) the last hidden state of the query's tokens."""
    splits: torch.Tensor
    """(Q,) the splits holding a query token (the first may begin with the document's last tokens)."""
    chosen: torch.Tensor
    """(Q, k) each one's chosen splits, best first (the document's, or an earlier split of the query)."""
    keys: torch.Tensor
    """(Q, k) float64 their ranking keys: the MaxSim score on the token embeddings (§3.1) plus a tie bonus below a
    quarter of its float32 ulp; ``-inf`` in an empty slot."""

    def evidence(self, start: int, S: int) -> list[tuple[int, float]]:
        """The document's splits the query chose (split id, best MaxSim score over the query's splits that chose
        it), best first: where the model looked. ``start``: the query's first position (splits from
        ``start // S`` hold query tokens and are not evidence)."""
        best: dict[int, float] = {}
        first = start // S
        for j, key in zip(self.chosen.flatten().tolist(), self.keys.flatten().tolist(), strict=True):
            if key != float("-inf") and j < first:
                best[j] = max(best.get(j, key), key)
        return sorted(best.items(), key=lambda item: (-item[1], -item[0]))


def query_last(model: AveyBModel, ids: torch.Tensor, start: int) -> QueryLast:
    """The outputs of the tokens ``ids[start:]`` (a query) of one row ``ids`` (N,) that holds a document before
    them, computed from the query's splits alone: with the ranker on the embeddings (§3.1, the default
    ``ranker_placement``) and unidirectional, a split's outputs depend only on its own tokens and on the embeddings
    of the splits it chooses, so the query's splits are ranked against the document's (as token ids) and only they
    go through the processor. Equal to the query's positions of a fresh forward of ``ids``; the cost is the
    ranking (the query's tokens against the document's ids, tile by tile) and ``ceil((N - start) / S) + 1`` rows,
    however long the document. Under autograd when it is on (training a head on the query's outputs)."""
    if why := refusal(model.config):
        raise ValueError(f"this model cannot score a query after a document from the query's splits: {why}")
    N, S = ids.numel(), model.config.split_size
    if not 0 <= start < N:
        raise ValueError(f"the query must hold a token: it starts at {start} of {N} tokens")
    queries = torch.arange(start // S, (N + S - 1) // S)
    idx, keys = rank_splits(model, ids, queries, torch.arange(int(queries[-1])))
    offset = int(queries[0]) * S
    hidden = run_splits(model, ids, queries, idx, keys).flatten(0, 1)[start - offset:N - offset]
    return QueryLast(hidden=hidden, splits=queries, chosen=idx, keys=keys)


def _capacity(t: torch.Tensor, n: int, used: int) -> torch.Tensor:
    """``t`` with room for ``n`` rows, its first ``used`` kept: grown by half when full, into an uninitialized buffer
    (the old and the new one are alive together for the copy: 2.5× the old at the peak, not the 4× of concatenating
    zeros onto a doubled buffer)."""
    if n <= t.shape[0]:
        return t
    grown = t.new_empty(max(n, t.shape[0] * 3 // 2), *t.shape[1:])
    grown[:used] = t[:used]
    return grown
