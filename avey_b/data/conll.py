"""CoNLL column files, read once for every tagger: the benchmarks' (CoNLL-2003, OntoNotes, UNER local files,
:mod:`avey_b.evaluation.tasks.tc`) and your own data's (``avey-b finetune --task token-classification``,
:mod:`avey_b.finetuning.tagging`).

One ``word ... tag`` line per word, a blank line between sentences, ``-DOCSTART-`` lines skipped; the word and the
tag are the columns named by number (default: the first and the last), tags kept as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from avey_b.utils.files import DataFileError, iter_lines

#: An entity tag of IOB1, IOB2 or IOBES (``O``, ``B-PER``, ``I-LOC``, ``E-ORG``, ``S-MISC``, BILOU's ``L-``/``U-``).
ENTITY_TAG = re.compile(r"^(O|[BIESLU]-\S+)$")


@dataclass
class Sentence:
    """One sentence of a CoNLL file."""

    tokens: list[str]
    """Its words."""
    tags: list[str]
    """One tag per word, as written."""
    line: int
    """The line of its first word (1-based), for error messages."""


def read_conll(path: str, word_at: int = 0, tag_at: int = -1, entity_tags: bool = False) -> list[Sentence]:
    """The sentences of the CoNLL column file ``path``: the word in column ``word_at`` and the tag in column
    ``tag_at`` (0-based; negative counts from the end). ``entity_tags``: every tag must be an entity tag
    (:data:`ENTITY_TAG`), so that a file of another format (a TSV of sentences and labels, say) stops at its first
    line with what was found there instead of training on one long "sentence"."""
    need = max(2, *(at + 1 if at >= 0 else -at for at in (word_at, tag_at)))
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    first = 0
    for lineno, line in iter_lines(path):
        parts = line.split()
        if not parts or parts[0] == "-DOCSTART-":
            if words:
                sentences.append(Sentence(words, tags, first))
                words, tags = [], []
            continue
        if len(parts) < need:
            raise DataFileError(f"{path}, line {lineno}: expected 'word ... tag' (at least {need} whitespace-separated "
                                f"columns), got {line.strip()[:100]!r}")
        if entity_tags and not ENTITY_TAG.match(parts[tag_at]):
            raise DataFileError(
                f"{path}, line {lineno} does not look like CoNLL NER data: its last column {parts[tag_at]!r} is not "
                f"an entity tag (O, B-PER, I-LOC, ...); the line has {len(parts)} whitespace-separated fields: "
                f"{line.strip()[:100]!r}")
        if not words:
            first = lineno
        words.append(parts[word_at])
        tags.append(parts[tag_at])
    if words:
        sentences.append(Sentence(words, tags, first))
    if not sentences:
        raise DataFileError(f"{path}: no sentences (CoNLL columns: one 'word ... tag' line per word, a blank line "
                            "between sentences)")
    return sentences
