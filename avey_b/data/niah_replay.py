"""The authors' NIAH sets themselves (``avey-b niah generate --generator authors-replay``, the default under
``--protocol paper``): their ``gen_niah.py`` replayed draw for draw, so that its files come out byte for byte, and a
reader of the folders it writes.

Their script seeds Python's ``random`` and NumPy's legacy global generator once (``--random-seed``, default 11)
and draws every set from those two streams, in its order: needle type (``word`` = NIAH-1, then ``number`` =
NIAH-2), then each context length in the order given, the training set then the test set. Per example:

1. NumPy: the number of distractors (``np.random.choice`` over the split's distribution), the needles' depths
   (``np.random.rand``), then, after the 0.05 gap and the rescaling, their shuffle (``np.random.shuffle``);
2. Python: the needles (a word: ``randint(8, 12)`` characters by ``choices`` over ``[a-z0-9]``; a number:
   ``randint(1_000_000, 9_999_999)``), the asked ordinal (``randint``), the haystack words (``choice`` each), the id's
   six digits (``randint(0, 1_000_000)``).

A set therefore depends on every set drawn before it: replaying one (say ``number`` at 8,000 words) draws all the
earlier ones too (:func:`replay`: the stream always covers both needle types and every given length; ``tasks``
only chooses which folders are written). The rules of an example are those of :mod:`avey_b.data.niah_authors`
(lengths in words, the 131 haystack words); what differs there is only the order of the draws.

Output, their layout: ``{word|number}_{L}_controllable/{train,test}.jsonl`` (one ``json.dumps(row,
ensure_ascii=False)`` line per example: ``id, title, context, question, answers {text, answer_start}``) and
``dataset_infos.json`` beside them, as their script writes it under ``datasets`` 4 or later. Their ids can repeat
within a set (six random digits).

The evaluation reads that layout directly (:func:`read_authors_set`, through
:mod:`avey_b.evaluation.niah.sets`): each row gets the library's fields back from the passage (the needles are
the words outside the haystack list; the asked one is the answer, the others fill the remaining places of the
drawn order in text order: exact for the authors' one or two needles), a unique ``id`` (theirs kept as
``authors_id``) and the split's distribution from ``dataset_infos.json``.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
from typing import Any

import numpy as np

from .niah import AUTHORS_DISTRACTORS, NIAH_TASKS, chance_level, format_distribution
from .niah_authors import AUTHORS_SEED, HAYSTACK_WORDS, MIN_GAP, NEEDLE_KIND, authors_ordinal

#: The folder of one (needle kind, length) in their layout (``datasets.py``'s ``niah1()``/``niah2()`` read it).
FOLDER = "{kind}_{length}_controllable"
#: The needle kinds in the order their script draws them (its default ``--needle-types``).
STREAM_ORDER = ("word", "number")
_QUESTION = re.compile(r"^What is the (\w+) special (?:word|number) in this passage\?$")


class _Stream:
    """Their two global generators, as instances: Python's ``random.seed(seed)`` and NumPy's
    ``np.random.seed(seed)`` (the legacy ``RandomState``)."""

    def __init__(self, seed: int):
        self.py = random.Random(seed)
        self.np = np.random.RandomState(seed)

    def depths(self, distribution: dict[int, float]) -> tuple[int, np.ndarray]:
        """(distractors, shuffled depths) of one example: ``create_dataset``'s NumPy draws."""
        k = self.np.choice(list(distribution.keys()), p=list(distribution.values()))
        pos = np.sort(self.np.rand(k + 1))
        for j in range(1, len(pos)):
            pos[j] = max(pos[j], pos[j - 1] + MIN_GAP)
        if pos[-1] > 1.0:
            pos = pos / pos[-1]
        self.np.shuffle(pos)
        return int(k), pos

    def example(self, kind: str, length: int, depths: np.ndarray, distractors: int) -> dict[str, Any]:
        """One row exactly as ``_build_one_sample`` makes it (the same Python draws in the same order)."""
        py = self.py
        if kind == "number":
            needles = [str(py.randint(1_000_000, 9_999_999)) for _ in range(distractors + 1)]
        else:
            chars = string.ascii_lowercase + string.digits
            needles = ["".join(py.choices(chars, k=py.randint(8, 12))) for _ in range(distractors + 1)]
        ordinal = py.randint(1, distractors + 1)
        words = [py.choice(HAYSTACK_WORDS) for _ in range(length - len(needles))]
        places = [(max(0, min(int(depths[i] * len(words)), len(words))), x) for i, x in enumerate(needles)]
        for place, x in sorted(places, key=lambda p: p[0], reverse=True):
            words.insert(place, x)
        context, answer = " ".join(words), needles[ordinal - 1]
        return {"id": f"{kind}_{length}_{py.randint(0, 1_000_000):06d}", "title": f"haystack_{kind}_{length}",
                "context": context,
                "question": f"What is the {authors_ordinal(ordinal)} special {kind} in this passage?",
                "answers": {"text": [answer], "answer_start": [context.find(answer)]}}


def _infos(kind: str, length: int, sizes: dict[str, int], distributions: dict[str, dict[int, float]]) -> str:
    """``dataset_infos.json`` as their script writes it (``json.dump(..., indent=2, default=str)``)."""
    text, ints = "Value('string')", "Value('int32')"
    info = {"description": f"Controllable-difficulty needle-in-haystack QA \u2013 {kind} needle, {length} tokens",
            "features": {"id": text, "title": text, "context": text, "question": text,
                         "answers": {"text": f"List({text})", "answer_start": f"List({ints})"}},
            "splits": [{"name": s, "num_examples": n} for s, n in sizes.items()],
            "distractor_distributions": distributions,
            "expected_scores": {s: sum(p * (1 / (k + 1)) for k, p in d.items()) for s, d in distributions.items()}}
    return json.dumps(info, indent=2, default=str)


def replay(out_dir: str, *, lengths, n_train: int, n_test: int, seed: int = AUTHORS_SEED, tasks=NIAH_TASKS,
           distributions: dict[str, dict[int, float]] | None = None, log=print) -> dict[str, Any]:
    """Replay their script with ``--context-lengths lengths --num-train-samples n_train --num-test-samples n_test
    --random-seed seed`` (and the distributions, default theirs) and write the folders of ``tasks`` in their
    layout under ``out_dir``; returns a manifest (also written as ``out_dir/manifest.json``)."""
    distributions = {s: (distributions or {}).get(s) or AUTHORS_DISTRACTORS[s] for s in ("train", "test")}
    wanted = {NEEDLE_KIND[t] for t in tasks}
    stream, sets = _Stream(seed), {}
    for kind in STREAM_ORDER:
        for length in lengths:
            if length < 2:
                raise ValueError(f"length must be >= 2 words (a needle and a haystack word), got {length}")
            folder = os.path.join(out_dir, FOLDER.format(kind=kind, length=length))
            sizes = {"train": n_train, "test": n_test}
            for split, n in sizes.items():
                rows = []
                for _ in range(n):
                    k, depths = stream.depths(distributions[split])
                    rows.append(stream.example(kind, length, depths, k))
                if kind in wanted:
                    os.makedirs(folder, exist_ok=True)
                    with open(os.path.join(folder, f"{split}.jsonl"), "w", encoding="utf-8") as f:
                        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
                    sets[f"{kind}_{length}/{split}"] = len(rows)
                    log(f"authors' stream {kind} {length} words {split}: {len(rows)} examples written")
            if kind in wanted:
                with open(os.path.join(folder, "dataset_infos.json"), "w") as f:
                    f.write(_infos(kind, length, sizes, distributions))
    manifest = {"generator": "authors-replay", "seed": seed, "lengths": list(lengths), "length_unit": "words",
                "n_train": n_train, "n_test": n_test, "stream_order": list(STREAM_ORDER), "sets": sets,
                "distractors": {s: format_distribution(d) for s, d in distributions.items()},
                "chance_level": {s: chance_level(d) for s, d in distributions.items()}}
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def authors_set_path(data: str, task: str, split: str, length: int) -> str:
    """Where their layout keeps one split of ``task`` (``niah-1``/``niah-2``) at ``length`` words."""
    return os.path.join(data, FOLDER.format(kind=NEEDLE_KIND[task], length=length), f"{split}.jsonl")


def authors_lengths(data: str, task: str) -> list[int]:
    """The lengths of ``task`` with a test set in their layout under ``data``."""
    pattern = re.compile(rf"^{NEEDLE_KIND[task]}_(\d+)_controllable$")
    found = [int(m.group(1)) for d in (os.listdir(data) if os.path.isdir(data) else []) if (m := pattern.match(d))]
    return sorted(n for n in found if os.path.isfile(authors_set_path(data, task, "test", n)))


def read_authors_set(path: str) -> list[dict[str, Any]]:
    """The rows of one of their ``{split}.jsonl`` files with the library's fields (the module docstring); a row
    that breaks their rules is named by file and line."""
    folder, split = os.path.dirname(path), os.path.basename(path).removesuffix(".jsonl")
    m = re.match(r"^(word|number)_(\d+)_controllable$", os.path.basename(folder))
    if m is None or split not in ("train", "test"):
        raise ValueError(f"{path}: not a file of the authors' NIAH layout ({FOLDER}/{{train,test}}.jsonl)")
    task = {v: k for k, v in NEEDLE_KIND.items()}[m.group(1)]
    length, stated = int(m.group(2)), _stated_distribution(folder, split)
    haystack, out = set(HAYSTACK_WORDS), []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            row = json.loads(line)
            try:
                out.append(_library_row(row, haystack) | {
                    "id": f"{task}-{split}-{length}-{line_no - 1:05d}", "authors_id": row["id"], "task": task,
                    "split": split, "target_length": length, "distractors": stated})
            except (KeyError, ValueError, IndexError) as exc:
                raise ValueError(f"{path}, line {line_no}: {exc}") from None
    return out


def _stated_distribution(folder: str, split: str) -> str:
    """The split's distribution from ``dataset_infos.json`` (their defaults when it is absent)."""
    path = os.path.join(folder, "dataset_infos.json")
    if not os.path.isfile(path):
        return format_distribution(AUTHORS_DISTRACTORS[split])
    with open(path) as f:
        dist = json.load(f)["distractor_distributions"][split]
    return format_distribution({int(k): float(p) for k, p in dist.items()})


def _library_row(row: dict[str, Any], haystack: set[str]) -> dict[str, Any]:
    """``row``'s own fields and the needles recovered from its passage (drawn order: the asked one at its
    ordinal, the others in text order)."""
    context, answer = row["context"], row["answers"]["text"][0]
    m = _QUESTION.match(row["question"])
    if m is None:
        raise ValueError(f"question {row['question']!r} is not of their form")
    word = m.group(1)
    ordinal = int(word[:-2]) if word.endswith("th") and word[:-2].isdigit() else [
        authors_ordinal(i) for i in range(1, 16)].index(word) + 1
    found, pos = [], 0
    for w in context.split(" "):
        if w not in haystack:
            found.append((w, pos))
        pos += len(w) + 1
    if answer not in [w for w, _ in found] or ordinal > len(found):
        raise ValueError(f"the answer {answer!r} is not a needle of the passage, or the ordinal passes the needles")
    others = [x for x in found if x[0] != answer]
    order = others[:ordinal - 1] + [next(x for x in found if x[0] == answer)] + others[ordinal - 1:]
    return {"title": row["title"], "context": context, "question": row["question"], "answers": row["answers"],
            "num_needles": len(found), "ordinal": ordinal, "needles": [w for w, _ in order],
            "needle_char_starts": [s for _, s in order]}
