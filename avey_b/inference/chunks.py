"""Late chunks of a tokenized text: which tokens, and which characters, each chunk holds. The token rule is the
model's (:mod:`avey_b.model.chunks`); this module maps it to the tokenizer's character offsets, and cuts chunks
by character spans."""

from __future__ import annotations

from collections.abc import Sequence

from avey_b.model.chunks import chunk_spans


def chunk_ranges(offsets: Sequence[tuple[int, int]], special: Sequence[int], *, chunk_tokens: int | None = None,
                 char_spans: Sequence[tuple[int, int]] | None = None, overlap: int = 0
                 ) -> list[tuple[int, int, int, int]]:
    """The chunks of one tokenized document as ``(token start, token end, char start, char end)``, ends exclusive,
    token positions counted over the document's tokens (what :func:`avey_b.model.heads.chunk_embeddings` takes).

    ``offsets`` are the tokenizer's character offsets (Python string indices, i.e. Unicode code points) and
    ``special`` its special-tokens mask (1 for [CLS]..., which belong to no chunk). Either ``chunk_tokens``: the
    model's rule (:func:`avey_b.model.chunks.chunk_spans`) over the text tokens, ``chunk_tokens`` consecutive text
    tokens a chunk, each starting ``chunk_tokens - overlap`` text tokens after the previous one (a chunk's character
    span runs from its first token's start to its last token's end); or ``char_spans``: each span takes the text
    tokens whose first character lies in it, and keeps its own characters. A span with no token is a
    ``ValueError``."""
    text_tokens = [i for i, s in enumerate(special) if not s]
    if chunk_tokens is not None:
        out = []
        for start, end in chunk_spans(len(text_tokens), chunk_tokens, overlap):
            first, last = text_tokens[start], text_tokens[end - 1]
            out.append((first, last + 1, offsets[first][0], offsets[last][1]))
        return out
    out = []
    for a, b in char_spans or ():
        inside = [i for i in text_tokens if a <= offsets[i][0] < b]
        if not inside:
            raise ValueError(f"the chunk span [{a}, {b}) holds no token")
        out.append((inside[0], inside[-1] + 1, a, b))
    return out
