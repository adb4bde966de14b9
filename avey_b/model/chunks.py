"""Late chunks (Günther et al., 2024, "Late Chunking"): which tokens of a document each chunk holds, and which chunks
a run of its tokens falls in. One rule for every user: the heads pool the chunks
(:func:`avey_b.model.heads.chunk_embeddings`), a document encoded in pieces sums them split by split
(:mod:`avey_b.model.streaming`), and the inference layer maps them to characters (:mod:`avey_b.inference.chunks`).

The rule: of a document's ``N`` tokens, the first ``first`` and the last ``last`` belong to no chunk (a tokenizer's
``[CLS]`` and ``[SEP]``: ``(1, 1)``); chunk ``c`` holds the ``chunk_tokens`` tokens from ``first + c·step``, where
``step = chunk_tokens - overlap`` (consecutive chunks share ``overlap`` tokens), and the chunks follow one another until
one reaches the last chunked token (the last may be shorter). Token ranges are ``(start, end)``, end exclusive.
"""

from __future__ import annotations


def check_overlap(chunk_tokens: int, overlap: int) -> None:
    """The chunks' size and overlap, or a ``ValueError`` naming them: ``chunk_tokens`` at least 1, ``overlap`` at
    least 0 and less than ``chunk_tokens`` (so that each chunk starts after the one before)."""
    if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be an integer of at least 1, got {chunk_tokens!r}")
    if not 0 <= overlap < chunk_tokens:
        raise ValueError(f"chunk_overlap ({overlap}) must be at least 0 and less than chunk_tokens ({chunk_tokens})")


def chunk_spans(length: int, chunk_tokens: int, overlap: int = 0, special: tuple[int, int] = (0, 0)
                ) -> list[tuple[int, int]]:
    """The token ranges of the late chunks of a document of ``length`` tokens whose ``special = (first, last)``
    leading and trailing tokens belong to no chunk (the module docstring's rule); none when no token is chunked."""
    check_overlap(chunk_tokens, overlap)
    first, stop = special[0], length - special[1]
    spans = []
    for a in range(first, stop, chunk_tokens - overlap):
        spans.append((a, min(a + chunk_tokens, stop)))
        if a + chunk_tokens >= stop:
            break
    return spans


def chunks_of(start: int, end: int, chunk_tokens: int, overlap: int = 0, first: int = 0
              ) -> list[tuple[int, int, int]]:
    """The chunks the tokens ``start:end`` fall in, as ``(chunk, a, b)``: chunk ``c`` holds the tokens ``a:b`` of
    them. Counts the chunks of the unbounded sequence from ``first`` on (clip ``start`` and ``end`` to the chunked
    tokens; chunks past the last of :func:`chunk_spans` lie inside it: leave them out)."""
    step = chunk_tokens - overlap
    out = []
    if start < end:
        for c in range(max(0, -(-(start - first - chunk_tokens + 1) // step)), (end - 1 - first) // step + 1):
            a, b = max(start, first + c * step), min(end, first + c * step + chunk_tokens)
            if a < b:
                out.append((c, a, b))
    return out
