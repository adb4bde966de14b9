"""The late-chunk rule (avey_b.model.chunks) against the rule written out token by token, the chunks a run of tokens
falls in, and the character ranges of avey_b.inference.chunks built on it."""

import pytest

from avey_b.inference.chunks import chunk_ranges
from avey_b.model.chunks import check_overlap, chunk_spans, chunks_of


def spans_by_tokens(length, size, overlap, special):
    """The rule as the module docstring states it, one chunk at a time: chunk c starts at first + c·(size - overlap),
    holds up to size chunked tokens; the chunks stop at the first that reaches the last chunked token."""
    first, stop = special[0], length - special[1]
    out, c = [], 0
    while first + c * (size - overlap) < stop:
        start = first + c * (size - overlap)
        tokens = [t for t in range(start, start + size) if t < stop]
        out.append((tokens[0], tokens[-1] + 1))
        if tokens[-1] == stop - 1:
            break
        c += 1
    return out


@pytest.mark.parametrize("length", [0, 1, 2, 5, 9, 10, 23])
@pytest.mark.parametrize("size,overlap", [(1, 0), (3, 0), (3, 2), (4, 1), (50, 10)])
@pytest.mark.parametrize("special", [(0, 0), (1, 1), (2, 0)])
def test_chunk_spans_follow_the_rule(length, size, overlap, special):
    assert chunk_spans(length, size, overlap, special) == spans_by_tokens(length, size, overlap, special)


@pytest.mark.parametrize("size,overlap", [(3, 0), (4, 1), (5, 4)])
def test_the_chunks_of_a_run_of_tokens_are_its_share_of_each_chunk(size, overlap):
    """chunks_of(start, end) names every chunk that holds a token of start:end, with exactly those tokens: what a
    document state sums split by split."""
    length, special = 30, (1, 2)
    spans = chunk_spans(length, size, overlap, special)
    for start in range(special[0], length - special[1]):
        for end in range(start, length - special[1] + 1):
            got = {c: (a, b) for c, a, b in chunks_of(start, end, size, overlap, special[0]) if c < len(spans)}
            want = {c: (max(a, start), min(b, end)) for c, (a, b) in enumerate(spans) if max(a, start) < min(b, end)}
            assert got == want


def test_a_bad_overlap_is_named():
    for size, overlap in ((4, 4), (4, -1)):
        with pytest.raises(ValueError, match=r"chunk_overlap \(-?\d\) must be at least 0 and less than chunk_tokens"):
            check_overlap(size, overlap)
    with pytest.raises(ValueError, match="chunk_tokens must be an integer of at least 1"):
        chunk_spans(10, 0)


def test_character_ranges_take_the_models_rule_over_the_text_tokens():
    """[CLS] a b c d e [SEP]: the text tokens' chunks by the model's rule, with (1, 1) special tokens, mapped to the
    characters of their first and last tokens."""
    offsets = [(0, 0), (0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (0, 0)]
    special = [1, 0, 0, 0, 0, 0, 1]
    got = chunk_ranges(offsets, special, chunk_tokens=3, overlap=1)
    assert [(a, b) for a, b, _, _ in got] == chunk_spans(7, 3, 1, (1, 1)) == [(1, 4), (3, 6)]
    assert [(c, d) for _, _, c, d in got] == [(0, 5), (4, 9)]
    with pytest.raises(ValueError, match="chunk_overlap"):
        chunk_ranges(offsets, special, chunk_tokens=3, overlap=3)
