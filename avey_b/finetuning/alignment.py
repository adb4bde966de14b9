"""Words and sub-word tokens, for every tagger (your own data's, :mod:`avey_b.finetuning.tagging`, and the paper's
token-classification benchmarks'): which word each token belongs to, the token labels a word's label becomes, and a
word's prediction from its tokens'.

Alignment goes through the tokenizer's character offsets over the words joined by single spaces, which works for
every fast tokenizer (WordPiece, byte-level BPE with or without prefix spaces), unlike ``is_split_into_words``,
which some BPE tokenizers reject. Standard library only.
"""

from __future__ import annotations


def word_index_of_tokens(words: list[str], offsets: list[tuple[int, int]]) -> list[int | None]:
    """For each token (offsets into ``" ".join(words)``), the index of the word it belongs to, or None
    for special tokens and tokens that cover only spaces."""
    owner: list[int | None] = []
    for w, word in enumerate(words):
        owner.extend([w] * len(word))
        owner.append(None)  # the joining space
    result: list[int | None] = []
    for start, end in offsets:
        word = None
        for pos in range(start, end):  # first non-space character of the token
            if pos < len(owner) and owner[pos] is not None:
                word = owner[pos]
                break
        result.append(word)
    return result


def align_labels(word_ids: list[int | None], word_labels: list[int], every_subtoken: bool) -> list[int]:
    """Token labels: the word's label on its first sub-token (and on the others when ``every_subtoken``),
    -100 elsewhere."""
    labels, previous = [], None
    for w in word_ids:
        if w is None:
            labels.append(-100)
        elif w != previous or every_subtoken:
            labels.append(word_labels[w])
        else:
            labels.append(-100)
        if w is not None:
            previous = w
    return labels


def word_predictions(word_ids: list[int | None], token_preds: list[int], n_words: int, outside: int | None,
                     vote: bool) -> list[int | None]:
    """Per-word predictions from token predictions: the first sub-token's (``vote=False``) or the
    majority over sub-tokens (``vote=True``, ties to the smallest id); words with no token (truncated)
    get ``outside``."""
    votes: list[list[int]] = [[] for _ in range(n_words)]
    for w, p in zip(word_ids, token_preds, strict=False):
        if w is not None:
            votes[w].append(p)
    out = []
    for v in votes:
        if not v:
            out.append(outside)
        elif vote:
            out.append(min(set(v), key=lambda c: (-v.count(c), c)))
        else:
            out.append(v[0])
    return out
