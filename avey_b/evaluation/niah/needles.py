"""The score by number of needles: one-needle examples, examples with several (an occurrence asked for), and how
often a wrong answer was another needle's value."""

from __future__ import annotations

from typing import Any

from ...data import niah as niah_data
from ...data.niah import needle_prefix
from ..metrics import squad_exact
from .answer_tokens import answer_labels

#: the score by number of needles (:func:`needle_breakdown`, :func:`answer_token_breakdown`)
NEEDLES = ("one_needle", "two_needles", "other_value")


def needle_breakdown(rows: list[dict[str, Any]], predictions: dict[str, str]) -> dict[str, Any]:
    """Exact match split by the number of needles, and what a wrong answer to a two-needle question was.

    A value is the passage's only span with digits, so a model can find *a* needle without reading the key; a
    two-needle question also needs the occurrence asked for. ``other_value``: the fraction of two-needle examples
    answered with the other needle's value (the right kind of span, the wrong occurrence)."""
    one = [r for r in rows if r["num_needles"] == 1]
    two = [r for r in rows if r["num_needles"] == 2]

    def exact(group):
        return None if not group else sum(squad_exact(predictions[r["id"]], r["answers"]["text"][0])
                                          for r in group) / len(group)

    def other(r):  # the value of the needle not asked for ("The value of KEY is VALUE ." or the bare needle)
        prefix = value_offset(r)
        asked = r["answers"]["answer_start"][0] - prefix
        start = next(s for s in r["needle_char_starts"] if s != asked) + prefix
        return r["context"][start:].split(" ", 1)[0]

    return {"one_needle": exact(one), "two_needles": exact(two),
            "other_value": (None if not two
                            else sum(squad_exact(predictions[r["id"]], other(r)) for r in two) / len(two)),
            "n_one": len(one), "n_two": len(two)}


def value_offset(row: dict[str, Any]) -> int:
    """Characters from a needle's start to its value's: the library's needles begin "The value of KEY is ", the
    authors' are the value alone (their rows have no ``key``)."""
    return len(needle_prefix(row["key"])) if row.get("key") else 0


def needle_token_sets(rows: list[dict[str, Any]], feats: list[dict[str, Any]], tok, end: str | None = None,
                      max_length: int | None = None) -> list[list[set[int]]]:
    """Per example, the token positions of every needle's value in the authors' input (ended by ``end``; its
    passage truncated at ``max_length`` when given, a needle cut away then an empty set), in the order of
    ``needle_char_starts`` (the library's sets: text order; the authors': the order drawn, which their ordinal
    counts)."""
    out = []
    for r, f in zip(rows, feats, strict=True):
        enc = niah_data.prompt_encoding(tok, r["question"], r["context"], end, return_offsets_mapping=True,
                                        truncation="only_second" if max_length else False, max_length=max_length)
        if len(enc["input_ids"]) != len(f["input_ids"]):
            raise ValueError(f"{r['id']}: truncated input; needle positions need the whole passage")
        prefix = value_offset(r)
        sets = []
        for s in r["needle_char_starts"]:
            a = s + prefix
            b = a + len(r["context"][a:].split(" ", 1)[0])
            sets.append({i for i, y in enumerate(answer_labels(enc["offset_mapping"], enc.sequence_ids(), a, b)) if y})
        out.append(sets)
    return out


def answer_token_breakdown(rows: list[dict[str, Any]], scores: list[float], predicted: list[set[int]],
                           needles: list[list[set[int]]]) -> dict[str, Any]:
    """The authors' form's :func:`needle_breakdown`: the mean token score of one-needle and of several-needle
    examples, and ``other_value``, the fraction of several-needle examples labelled exactly as a needle not asked
    for (``predicted``: the positions labelled 1 per example; ``needles``: :func:`needle_token_sets`)."""
    one = [s for s, r in zip(scores, rows, strict=True) if r["num_needles"] == 1]
    many = [i for i, r in enumerate(rows) if r["num_needles"] > 1]
    asked = [(rows[i]["ordinal"] or 1) - 1 for i in range(len(rows))]
    other = [any(predicted[i] == n for j, n in enumerate(needles[i]) if j != asked[i]) for i in many]
    return {"one_needle": sum(one) / len(one) if one else None,
            "two_needles": sum(scores[i] for i in many) / len(many) if many else None,
            "other_value": None if not other else sum(other) / len(other),
            "n_one": len(one), "n_two": len(many)}
