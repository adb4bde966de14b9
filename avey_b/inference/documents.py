"""A text that grows and changes, encoded in pieces: :class:`TextDocument` (made by :meth:`Encoder.document
<avey_b.inference.encoder.Encoder.document>`) keeps the text, its tokenization and a
:class:`~avey_b.model.streaming.DocumentState` of its token ids, so that appending text or editing a span
recomputes only the splits whose inputs changed (a split's outputs depend only on its own tokens and the splits
before it: the unidirectional ranker, §3.1, and the processor working on each split's row alone, §3.2).

Text is not token ids: an append can change how the old tail tokenizes (a subword merge across the boundary:
``"foo"`` then ``"bar"`` reads as ``"foobar"``). So each change re-tokenizes a window of text around it — from a
few tokens before it to a few tokens after it, never the whole text — and splices the window's tokens between the
unchanged ones. A window is accepted only when its first and last tokens (those far from the change) are the ones
the text had there, ids and character offsets; else it is widened, up to the whole text, which is the full
tokenization. The state then replaces the token ids from the first one that changed, so only the splits from there
on are recomputed (an append: the last split and the new ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from avey_b.inference.states import States
from avey_b.model.streaming import QueryLast

#: Tokens kept on each side of a change in the first window; each failed sync check widens it four times.
MARGIN = 32
#: Characters tokenized at once: a longer text (made or appended) is read in pieces of about this many, each an
#: append (cut at a space where one is near), so that no tokenization holds the whole text's encoding (a fast
#: tokenizer keeps about a hundred bytes a token while it works).
PIECE_CHARS = 1 << 16
#: Tokens at each end of a window that must equal the text's own tokens there (ids and character offsets).
SYNC = 4


def pieces(text: str, size: int = PIECE_CHARS):
    """``text`` in consecutive pieces of at most ``size`` characters, each but the last cut at the last space of its
    second half where there is one (a piece that ends inside a word is fine too: the windows re-tokenize it)."""
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text) and (space := text.rfind(" ", start + size // 2, end)) > start:
            end = space
        yield text[start:end]
        start = end


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (a binary search of slice comparisons: fast for
    texts of millions of characters)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def utf8(text: str) -> torch.Tensor:
    """``text``'s UTF-8 bytes as a uint8 tensor."""
    raw = text.encode("utf-8")
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.zeros(0, dtype=torch.uint8)


@dataclass
class Evidence:
    """A span of a document where a query looked: one of the splits the ranker chose for it (§3.1)."""

    start: int
    """Its first character in the document's text."""
    end: int
    """One past its last character."""
    score: float
    """The ranker's MaxSim score on the token embeddings (§3.1): the sum, over a query split's tokens, of each one's
    best cosine among the split's tokens."""


class TextDocument:
    """One text encoded in pieces by an encoder's model and tokenizer (a fast one), made by :meth:`Encoder.document
    <avey_b.inference.encoder.Encoder.document>`: ``states`` (:class:`avey_b.inference.states.States`, made with
    ``ends=True``: this tokenizer's special tokens at the ends) runs its state. :meth:`append` and :meth:`replace`
    change the text; :meth:`vector` is ``encoder.encode(document.text)`` and :meth:`chunks` the late chunks
    ``avey-b embed --chunking late --chunk-tokens T`` gives, computed from the splits kept so far, normalized as the
    checkpoint says. ``piece_chars``: a longer text (made or appended) is tokenized in pieces of about this many
    characters (:data:`PIECE_CHARS`), each an append. ``tokens``: the token ids of the whole text as the tokenizer
    gives them (special tokens included); ``len(document)`` their number; ``state``: the model-level
    :class:`~avey_b.model.streaming.DocumentState` (its ``recomputed`` counts the splits the last change ran);
    ``retokenized``: the characters the last change tokenized."""

    def __init__(self, states: States, text: str = "", *, piece_chars: int = PIECE_CHARS):
        self.states, self.piece_chars = states, piece_chars
        self.tokenizer = tokenizer = states.encoder.tokenizer
        if not tokenizer.is_fast:
            raise ValueError("a text document needs a fast tokenizer (character offsets); this model's is not one")
        self._lead, self._trail = states.ends
        self.text = ""
        self.retokenized = 0
        first = next(pieces(text, piece_chars), "")
        ids, self._offsets = self._tokenize(first, 0, len(first))
        self.text = first
        self.state = states.new(ids)
        self.append(text[len(first):])

    def __len__(self) -> int:
        return self.state.length

    def __repr__(self) -> str:
        return f"TextDocument({len(self.text):,} characters, {len(self):,} tokens)"

    @property
    def tokens(self) -> list[int]:
        """The token ids of the whole text, special tokens included (``encoder.tokenize([text])``'s)."""
        return self.state.ids.tolist()

    # ------------------------------------------------------------------ changes
    def append(self, text: str) -> TextDocument:
        """Add ``text`` at the end (a long one in pieces of about ``piece_chars`` characters). Returns the
        document."""
        for piece in pieces(text, self.piece_chars):
            self.replace(len(self.text), len(self.text), piece)
        return self

    def set_text(self, text: str) -> TextDocument:
        """Make the document's text ``text``, recomputing only what changed: the characters between the common
        prefix and the common suffix of the old and new texts are replaced (an extension of the old text is an
        :meth:`append`). What a caller that holds each new version of the whole text calls. Returns the
        document."""
        old = self.text
        first = common_prefix(old, text)
        if first == len(old):
            return self.append(text[first:])
        same = common_prefix(old[first:][::-1], text[first:][::-1])  # the suffix, not overlapping the prefix
        return self.replace(first, len(old) - same, text[first:len(text) - same])

    def replace(self, start: int, end: int, text: str) -> TextDocument:
        """Replace the characters ``start:end`` (Python string indices, end exclusive) by ``text``: an insertion
        where ``start == end``, a deletion where ``text`` is empty. Returns the document."""
        if not 0 <= start <= end <= len(self.text):
            raise ValueError(f"the span {start}:{end} is not within the document's {len(self.text)} characters")
        if start == end and not text:
            return self
        new_text = self.text[:start] + text + self.text[end:]
        ids, offsets = self._retokenize(new_text, start, end, len(text) - (end - start))
        self.states.update(self.state, ids)
        self.text, self._offsets = new_text, offsets
        return self

    # ------------------------------------------------------------------ vectors
    def vector(self) -> torch.Tensor:
        """(d,) float32: the document's embedding, as ``encoder.encode(text)`` gives it (the masked mean of the
        last hidden state, L2-normalized when the config says ``normalize_embeddings``)."""
        return self.states.pooled(self.state)

    def chunks(self) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """The late chunks: ``(C, d)`` float32 vectors and each chunk's character span ``(start, end)``, end
        exclusive — ``chunk_tokens`` consecutive text tokens a chunk, ``chunk_tokens - chunk_overlap`` apart, as
        :func:`avey_b.inference.chunks.chunk_ranges` cuts them and ``avey-b embed --chunking late`` pools them."""
        if self.state.chunk is None:
            raise ValueError("this document has no chunks: make it with encoder.document(chunk_tokens=...)")
        vectors = self.states.chunks(self.state)
        return vectors, [self.characters(a, b) for a, b in self.state.chunk_spans()]

    def characters(self, start: int, end: int) -> tuple[int, int]:
        """The character span ``(start, end)`` of the text tokens among the tokens ``start:end`` (end exclusive;
        the special tokens at the ends have no characters)."""
        start, end = max(start, len(self._lead)), min(end, len(self) - len(self._trail))
        if start >= end:
            return (0, 0) if start <= len(self._lead) else (len(self.text), len(self.text))
        return int(self._offsets[start, 0]), int(self._offsets[end - 1, 1])

    def query(self, text: str) -> QueryLast:
        """The outputs of ``text`` placed after this document, its closing special tokens after it (the pair
        encoding's ``document [SEP] query [SEP]``), from the query's splits alone
        (:meth:`DocumentState.query <avey_b.model.streaming.DocumentState.query>`): the cost is the query's; the
        document is left as it was."""
        ids = self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] + list(self._trail)
        with self.states.running():
            return self.state.query(ids)

    # ------------------------------------------------------------------ keeping and moving a document
    def export(self) -> dict[str, torch.Tensor]:
        """What the document keeps, as tensors (a safetensors record: :mod:`avey_b.inference.sessions`): its
        state's (:meth:`DocumentState.export <avey_b.model.streaming.DocumentState.export>`, each name prefixed
        ``state.``), each token's character span (``offsets``, (N, 2) int32) and the text's UTF-8 bytes (``text``,
        uint8). :meth:`restore` takes it back."""
        data = {f"state.{name}": t for name, t in self.state.export().items()}
        data["offsets"] = self._offsets.to(torch.int32)
        data["text"] = utf8(self.text)
        return data

    @classmethod
    def restore(cls, states: States, data: dict[str, torch.Tensor], *, piece_chars: int = PIECE_CHARS
                ) -> TextDocument:
        """A document from :meth:`export`'s tensors, run by ``states`` (made with the options the document was
        made with); appending or editing it then computes only what changed, as for the original."""
        document = cls.__new__(cls)
        document.states, document.piece_chars = states, piece_chars
        document.tokenizer = states.encoder.tokenizer
        document._lead, document._trail = states.ends
        document.retokenized = 0
        document.text = bytes(data["text"].numpy()).decode("utf-8")
        document.state = states.restore({name[6:]: t for name, t in data.items() if name.startswith("state.")})
        document._offsets = data["offsets"].long()
        if document._offsets.shape != (len(document), 2):
            raise ValueError(f"the saved document has {len(document)} token ids but {tuple(document._offsets.shape)} "
                             "character offsets")
        return document

    # ------------------------------------------------------------------ tokenization
    def _tokenize(self, text: str, start: int, end: int, special: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """The ids (n,) and character offsets (n, 2) of ``text[start:end]`` (offsets in ``text``), with the special
        tokens (offsets (0, 0)) or without; counts the characters in ``retokenized``."""
        enc = self.tokenizer(text[start:end], add_special_tokens=special, return_offsets_mapping=True, verbose=False)
        ids = torch.tensor(enc["input_ids"], dtype=torch.long)
        offsets = torch.tensor(enc["offset_mapping"], dtype=torch.long).reshape(-1, 2) + start
        if special:
            offsets[:len(self._lead)] = offsets[len(offsets) - len(self._trail):] = 0
        self.retokenized = end - start
        return ids, offsets

    def _retokenize(self, text: str, start: int, end: int, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ids and offsets of the whole new ``text``, where the old text's ``start:end`` became
        ``text[start:end + shift]``: the old tokens far from the change kept (those after it moved by ``shift``
        characters), a window around it tokenized again; widened until its ends agree with the old tokens, at
        worst the whole text."""
        lead, trail = len(self._lead), len(self._trail)
        ids, offsets = self.state.ids.long()[lead:len(self) - trail], self._offsets[lead:len(self) - trail]
        n = len(ids)
        before = int(torch.searchsorted(offsets[:, 1].contiguous(), start))  # tokens ending before the change
        after = int(torch.searchsorted(offsets[:, 0].contiguous(), end, right=True))  # tokens starting at or before
        margin = MARGIN
        while True:
            j, k = max(0, before - margin), min(n, after + margin)
            if j == 0 and k == n:
                return self._tokenize(text, 0, len(text))
            # from the end of the token before the window to the end of its last: the characters between two tokens
            # (a space) go with the next one, whether or not its offsets count them (trimmed offsets do not)
            a = int(offsets[j - 1, 1]) if j else 0
            b = int(offsets[k - 1, 1]) + shift if k < n else len(text)
            w_ids, w_offsets = self._tokenize(text, a, b, special=False)
            if self._synced(w_ids, w_offsets, ids[j:j + SYNC], offsets[j:j + SYNC], j > 0, front=True) and \
                    self._synced(w_ids, w_offsets, ids[k - SYNC:k], offsets[k - SYNC:k] + shift, k < n, front=False):
                break
            margin *= 4
        ids = torch.cat([torch.tensor(self._lead, dtype=torch.long), ids[:j], w_ids, ids[k:],
                         torch.tensor(self._trail, dtype=torch.long)])
        offsets = torch.cat([self._offsets[:lead + j], w_offsets, offsets[k:] + shift,
                             self._offsets[len(self) - trail:]])
        return ids, offsets

    @staticmethod
    def _synced(w_ids, w_offsets, ids, offsets, check: bool, front: bool) -> bool:
        """Whether a window's first (``front``) or last tokens are ``ids`` at ``offsets``: the text's own tokens
        there (always, where that end of the window is the text's own end: ``check`` False)."""
        if not check:
            return True
        m = len(ids)
        if len(w_ids) < m:
            return False
        got = slice(0, m) if front else slice(len(w_ids) - m, len(w_ids))
        return torch.equal(w_ids[got], ids) and torch.equal(w_offsets[got], offsets)


class IdsDocument:
    """A document of token ids with no text (a client that tokenizes itself), encoded in pieces by ``states`` (an
    :class:`~avey_b.inference.states.States` made with ``ends=False``: the ids are run as given, no special token
    added): the token-level twin of :class:`TextDocument`, whose spans count tokens."""

    text = None

    def __init__(self, states: States, ids=()):
        self.states = states
        self.state = states.new(torch.as_tensor(list(ids), dtype=torch.long) if len(ids) else None)

    def __len__(self) -> int:
        return self.state.length

    def __repr__(self) -> str:
        return f"IdsDocument({len(self):,} tokens)"

    @property
    def tokens(self) -> list[int]:
        return self.state.ids.tolist()

    def append(self, ids) -> IdsDocument:
        """Add token ids at the end. Returns the document."""
        return self.replace(len(self), len(self), ids)

    def replace(self, start: int, end: int, ids) -> IdsDocument:
        """Replace the tokens ``start:end`` by ``ids``. Returns the document."""
        if not 0 <= start <= end <= len(self):
            raise ValueError(f"the span {start}:{end} is not within the document's {len(self)} tokens")
        new = torch.as_tensor(list(ids), dtype=torch.long)
        self.states.update(self.state, torch.cat([self.state.ids[:start].long(), new, self.state.ids[end:].long()]))
        return self

    def set_ids(self, ids) -> IdsDocument:
        """Make the document's ids ``ids``, computing only what changed. Returns the document."""
        self.states.update(self.state, torch.as_tensor(list(ids), dtype=torch.long))
        return self

    def vector(self) -> torch.Tensor:
        return self.states.pooled(self.state)

    def chunks(self) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """The late chunks' vectors and token spans."""
        if self.state.chunk is None:
            raise ValueError("this document has no chunks: make it with chunk_tokens")
        return self.states.chunks(self.state), self.state.chunk_spans()

    def export(self) -> dict[str, torch.Tensor]:
        return {f"state.{name}": t for name, t in self.state.export().items()}

    @classmethod
    def restore(cls, states: States, data: dict[str, torch.Tensor]) -> IdsDocument:
        document = cls.__new__(cls)
        document.states = states
        document.state = states.restore({name[6:]: t for name, t in data.items() if name.startswith("state.")})
        return document
