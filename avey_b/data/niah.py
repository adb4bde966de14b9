"""Needle-in-a-haystack (NIAH) extractive-QA sets, as in the paper's appendix "Long-Range Benchmark Results"
(``avey-b niah generate``; the evaluation protocol is :mod:`avey_b.evaluation.niah`). This is the library's
generator (``--generator library``, the standard protocol's default); the authors' own, rule for rule (fixed
haystack words, lengths in words, their needles and questions), is :mod:`avey_b.data.niah_authors`
(``--generator authors``), and their sets themselves, their script's random stream replayed, are
:mod:`avey_b.data.niah_replay` (``--generator authors-replay``, the default under ``--protocol paper``).

Each example is a passage of random distractor words with one or two *needles* ``"The value of KEY is
VALUE ."`` inserted at random word positions, and a question holding only the key; the answer is the
value span (SQuAD-style extractive QA).

* NIAH-1: alphanumeric values (8 characters, at least two letters and two digits, e.g. ``k7Qz2mPa``);
  NIAH-2: numeric values (7 digits, no leading zero).
* 40% of each split has one needle ("What is the value of KEY?"); 60% has two needles with the *same*
  key and different values, and the question asks for the n-th occurrence ("What is the value of KEY at
  its second occurrence?"), n ∈ {first, second} uniformly. The 40/60 proportion is exact per split
  (rounded), the order shuffled.
* Or, as the authors' generator does (the release's ``EncodEval/gen_niah.py``), the number of *distractor*
  needles of each example is drawn from a stated distribution (``--train-distractors`` /
  ``--test-distractors``, e.g. ``0:0.4,1:0.6``; ``authors`` takes that generator's defaults, train
  ``0:0.2,1:0.8`` and test ``0:0.4,1:0.6``): an example with k distractors has k + 1 needles of the same key
  and asks for its n-th occurrence, n uniform in 1..k+1 (no ordinal when k = 0). Each row then carries its
  split's ``distractors``. One difference is kept on purpose: the authors' generator names the asked needle by
  its place in a list whose order is unrelated to the passage's order (so beyond one needle no model can do
  better than guess), while here n counts occurrences in text order, as the paper's appendix describes.
* Chance level (the authors' "expected score", printed by their generator and here by ``niah generate`` and
  next to every ``niah evaluate`` score): a model that finds the needles and picks one at random scores
  ``sum_k p_k / (k + 1)`` — 70% for 40% one-needle and 60% two-needle examples (:func:`chance_level`).
* Keys are two distractor-vocabulary words joined by a hyphen (``river-stone``): distractors are joined
  by spaces, so a key never occurs in the passage except in its needles. Values contain digits, which
  distractors never do, so each value occurs exactly once (checked).
* Distractor words are the tokenizer's own vocabulary entries that decode to a lowercase alphabetic word
  of 2+ letters ("random distractor tokens"), drawn uniformly with replacement.
* Length is measured in MODEL tokens of the given tokenizer (any Hugging Face *fast* tokenizer): the whole
  model input ``tokenizer(question, context)`` (question + passage + special tokens) is never longer than
  the target and at most 1% shorter (typically 0-2 tokens), so the "8k" set fits an 8,192-token window.
  ``--length-unit context`` measures the passage alone instead.
  We count the whole input by default so that a model with an 8,192-token window can take the "8k" set,
  as in the paper's tables. ``--length-unit prompt`` counts the authors' token-classification input instead
  (:func:`prompt_encoding`: ``Question: {question}\\nContext: `` paired with the passage and the end token,
  no other special tokens), so that ``niah evaluate --form token-classification`` inputs fit the window.
* Spans are verified at generation time: ``context[answer_start:answer_start+len(text)] == text``, the
  value occurs once in the context, and the answer's token span in the model input
  (``answer_token_start``/``answer_token_end``, inclusive) covers exactly the answer characters (plus only
  whitespace that a tokenizer folds into a token). An example whose answer a tokenizer cannot align is
  regenerated with another value (a handful of tries, then a clear error).
* Deterministic: each (task, split, length) draws from ``random.Random(f"{seed}:{task}:{split}:{length}")``,
  so a set is reproducible alone and independent of which other lengths are generated.

Output under ``--out``: ``{task}/{split}_{length}.jsonl`` (one example per line: ``id, context,
question, answers {text: [..], answer_start: [..]}``, plus ``task, split, target_length, num_tokens,
context_tokens, num_needles, ordinal, key, needle_char_starts, answer_token_start, answer_token_end``, and
``distractors`` when drawn; test sets of ``--n-test`` examples, by default :func:`default_n_test`: 200 a length up
to 32K, 100 beyond), ``{task}/manifest.json`` (arguments, tokenizer, counts, needle counts, chance level, length
statistics) and, with ``--format hf`` or
``both``, a ``datasets.DatasetDict`` saved with ``save_to_disk`` in ``{task}/hf`` (splits named
``{split}_{length}``).
"""

from __future__ import annotations

import collections
import os
import random
import re
import statistics
import string
from dataclasses import dataclass
from typing import Any

from avey_b.utils.records import write_json_atomic, write_jsonl_atomic

#: The two NIAH sets (paper, appendix "Long-Range Benchmark Results"): NIAH-1 alphanumeric, NIAH-2 numeric needles.
NIAH_TASKS = ("niah-1", "niah-2")
DEFAULT_TEST_LENGTHS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 98304]
DEFAULT_TRAIN_LENGTH = 2048
SINGLE_FRACTION = 0.4
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
            "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth")
#: the distractor distributions of the authors' generator (its defaults; the paper's appendix: "40% single-needle
#: ... and 60% two-needle examples" in the evaluation set)
AUTHORS_DISTRACTORS = {"train": {0: 0.2, 1: 0.8}, "test": {0: 0.4, 1: 0.6}}
#: test examples per length by default: at least 200 up to 32K tokens and 100 beyond, so that one example moves a
#: cell by at most 0.5 (1) point
N_TEST_SHORT, N_TEST_LONG, LONG_FROM = 200, 100, 32768
_WORD_RE = re.compile(r"^[a-z]{2,}$")


# ----------------------------------------------------------------------------------------- pieces


def default_n_test(length: int) -> int:
    """Test examples at ``length`` tokens when not told: 200 up to 32K, 100 beyond."""
    return N_TEST_SHORT if length <= LONG_FROM else N_TEST_LONG


def parse_distribution(text: str, split: str = "test", max_needles: int | None = len(ORDINALS)) -> dict[int, float]:
    """``"0:0.4,1:0.6"`` -> ``{0: 0.4, 1: 0.6}`` (number of distractor needles: probability); ``"authors"`` ->
    the authors' generator's distribution for ``split``. Keys must be distinct integers >= 0, probabilities in
    (0, 1] summing to 1; ``max_needles``: the most needles an example may hold (None: no limit)."""
    if text.strip() == "authors":
        return dict(AUTHORS_DISTRACTORS[split])
    out: dict[int, float] = {}
    for pair in text.split(","):
        k, sep, v = pair.partition(":")
        try:
            if not sep:
                raise ValueError
            k_int, p = int(k), float(v)
        except ValueError:
            raise ValueError(f"bad distractor distribution {text!r}: use K:P pairs such as 0:0.4,1:0.6 "
                             "(K distractor needles with probability P), or 'authors'") from None
        if k_int < 0 or k_int in out:
            raise ValueError(f"bad distractor distribution {text!r}: {k_int} is negative or repeated")
        if not 0 < p <= 1:
            raise ValueError(f"bad distractor distribution {text!r}: probability {v} not in (0, 1]")
        if max_needles is not None and k_int + 1 > max_needles:
            raise ValueError(f"bad distractor distribution {text!r}: at most {max_needles - 1} distractors")
        out[k_int] = p
    if abs(sum(out.values()) - 1) > 1e-6:
        raise ValueError(f"bad distractor distribution {text!r}: probabilities sum to {sum(out.values()):g}, not 1")
    return out


def format_distribution(dist: dict[int, float]) -> str:
    return ",".join(f"{k}:{p:g}" for k, p in sorted(dist.items()))


def chance_level(dist: dict[int, float]) -> float:
    """The authors' expected score of a model that finds every needle and picks one at random: an example with k
    distractors is right with probability 1 / (k + 1), so ``sum_k p_k / (k + 1)`` (a fraction)."""
    return sum(p / (k + 1) for k, p in dist.items())


def set_chance_level(rows: list[dict[str, Any]]) -> float:
    """The chance level of a generated set: from the distribution its rows were drawn from (the authors' way), or,
    for the exact 40/60 form, from its proportions (``num_needles``), which are then the stated ones."""
    stated = {r.get("distractors") for r in rows}
    if len(stated) > 1:
        raise ValueError(f"one set drawn from several distractor distributions: {sorted(map(str, stated))}")
    if None not in stated:
        return chance_level(parse_distribution(stated.pop()))
    return sum(1 / r["num_needles"] for r in rows) / len(rows)


def prompt_encoding(tokenizer, question: str, context: str, end: str | None = None, **kwargs):
    """The authors' token-classification input: ``Question: {question}\\nContext: `` paired with the passage and
    an end token, no other special tokens (the release's EncodEval QA task). ``end``: that token (the paper
    protocol passes EncodEval's, :func:`avey_b.evaluation.tasks.base.end_token`: the model's eos, else unk);
    None: the tokenizer's eos, else its sep."""
    end = end or tokenizer.eos_token or tokenizer.sep_token
    if end is None:
        raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has neither an eos nor a sep token "
                         "to end the authors' input with")
    return tokenizer(f"Question: {question}\nContext: ", context + end, add_special_tokens=False, **kwargs)


def distractor_words(tokenizer, *, min_words: int = 20) -> list[str]:
    """Vocabulary entries of ``tokenizer`` that decode to a lowercase alphabetic word (>= 2 letters)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    words = set()
    for tok_id in range(len(tokenizer)):
        if tok_id in special:
            continue
        w = tokenizer.decode([tok_id]).strip()
        if _WORD_RE.match(w):
            words.add(w)
    if len(words) < min_words:
        raise ValueError(
            f"tokenizer has only {len(words)} vocabulary entries that decode to lowercase words; "
            f"NIAH distractors need at least {min_words}"
        )
    return sorted(words)  # sorted: the draw must not depend on set iteration order


def make_value(rng: random.Random, task: str) -> str:
    if task == "niah-1":
        while True:
            v = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(8))
            if sum(c.isdigit() for c in v) >= 2 and sum(c.isalpha() for c in v) >= 2:
                return v
    if task == "niah-2":
        return str(rng.randint(1_000_000, 9_999_999))
    raise ValueError(f"unknown NIAH task {task!r}: use one of {NIAH_TASKS}")


def needle_prefix(key: str) -> str:
    return f"The value of {key} is "


def needle_text(key: str, value: str) -> str:
    # The space before "." keeps the value a whole pre-token for every common tokenizer (BPE, WordPiece,
    # SentencePiece), so its token span aligns with its characters.
    return f"{needle_prefix(key)}{value} ."


def ordinal_word(n: int) -> str:
    return ORDINALS[n - 1]


def question_text(key: str, ordinal: str | None) -> str:
    if ordinal is None:
        return f"What is the value of {key}?"
    return f"What is the value of {key} at its {ordinal} occurrence?"


@dataclass
class _Draft:
    key: str
    values: list[str]
    ordinal: int | None  # 1-based occurrence asked for (two-needle examples); None for one needle
    fractions: list[float]  # needle depths in [0, 1), sorted

    @property
    def answer(self) -> str:
        return self.values[(self.ordinal or 1) - 1]

    @property
    def question(self) -> str:
        return question_text(self.key, None if self.ordinal is None else ordinal_word(self.ordinal))


class _Measure:
    """Token counting with a per-word cache: for whitespace-pre-tokenizing tokenizers the passage's tokens
    are the sum of its words' tokens, which lets us choose the word count before the one exact check."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.cache: dict[str, int] = {}

    def word(self, w: str) -> int:
        n = self.cache.get(w)
        if n is None:
            n = len(self.tok(" " + w, add_special_tokens=False)["input_ids"])
            self.cache[w] = n
        return n

    def pair(self, question: str, context: str, unit: str) -> int:
        if unit == "context":
            return len(self.tok(context, add_special_tokens=False)["input_ids"])
        if unit == "prompt":
            return len(prompt_encoding(self.tok, question, context)["input_ids"])
        return len(self.tok(question, context)["input_ids"])


def _assemble(words: list[str], draft: _Draft) -> tuple[str, list[int]]:
    """Passage text with the needles inserted at their depths; returns (context, needle char starts)."""
    n = len(words)
    slots = sorted(min(int(f * (n + 1)), n) for f in draft.fractions)
    pieces: list[str] = []
    starts: list[int] = []
    pos = 0
    prev = 0
    for slot, value in zip(slots, draft.values, strict=True):
        chunk = " ".join(words[prev:slot])
        if chunk:
            pieces.append(chunk)
            pos += len(chunk) + 1
        starts.append(pos)
        needle = needle_text(draft.key, value)
        pieces.append(needle)
        pos += len(needle) + 1
        prev = slot
    tail = " ".join(words[prev:])
    if tail:
        pieces.append(tail)
    return " ".join(pieces), starts


def token_span(offsets, sequence_ids, context: str, start: int, end: int) -> tuple[int, int] | None:
    """Inclusive token indices of the input whose context-token offsets cover exactly ``[start, end)``
    (extra characters inside the boundary tokens may only be whitespace); None when not aligned."""
    first = last = None
    for i, (sid, (a, b)) in enumerate(zip(sequence_ids, offsets, strict=True)):
        if sid != 1 or b <= a:
            continue
        if a < end and b > start:  # overlaps the answer
            if first is None:
                first = i
            last = i
    if first is None:
        return None
    a0, b1 = offsets[first][0], offsets[last][1]
    if context[a0:start].strip() or context[end:b1].strip():
        return None
    return first, last


# ----------------------------------------------------------------------------------------- generation


def generate_example(
    tokenizer,
    words: list[str],
    rng: random.Random,
    *,
    task: str,
    target: int,
    num_needles: int,
    unit: str = "input",
    measure: _Measure | None = None,
    tolerance: float = 0.01,
    max_value_tries: int = 10,
) -> dict[str, Any]:
    """One verified NIAH example of ``target`` tokens (see the module docstring)."""
    if not 1 <= num_needles <= len(ORDINALS):
        raise ValueError(f"num_needles must be in 1..{len(ORDINALS)}, got {num_needles}")
    measure = measure or _Measure(tokenizer)
    # keep the ordinals a question can use ("first", "second", ...) out of keys
    asked = ORDINALS[: max(2, num_needles)]
    key_words = [w for w in words if w not in asked] or words
    key = f"{rng.choice(key_words)}-{rng.choice(key_words)}"
    for _ in range(max_value_tries):
        values: list[str] = []
        while len(values) < num_needles:
            v = make_value(rng, task)
            if v not in values:
                values.append(v)
        ordinal = rng.randint(1, num_needles) if num_needles > 1 else None
        fractions = sorted(rng.random() for _ in range(num_needles))
        draft = _Draft(key, values, ordinal, fractions)
        ex = _fit_length(
            tokenizer, words, rng, draft, target=target, unit=unit, measure=measure, tolerance=tolerance
        )
        if ex is not None:
            ex.update(task=task, target_length=target, num_needles=num_needles, ordinal=ordinal, key=key)
            return ex
    raise ValueError(
        f"could not align the answer span with tokens after {max_value_tries} values: tokenizer "
        f"{getattr(tokenizer, 'name_or_path', tokenizer)!r} merges the needle value with its neighbours"
    )


def _draw_distractors(words, rng, measure: _Measure, budget: int) -> list[str]:
    """Distractor words drawn until their summed token counts reach ``budget`` (an additive estimate), the last one
    dropped where that lands nearer the budget."""
    chosen: list[str] = []
    total = 0
    while total < budget:
        w = rng.choice(words)
        chosen.append(w)
        total += measure.word(w)
    if chosen and total - budget > budget - (total - measure.word(chosen[-1])):
        total -= measure.word(chosen.pop())
    return chosen


def _correct_length(tokenizer, words, rng, draft: _Draft, chosen: list[str], *, target, unit, measure: _Measure,
                    tol: int):
    """Exact counts of the assembled text, corrected by adding or dropping words at the end (``chosen``, in place)
    until within the tolerance: never longer than the target (a set for an 8,192-token window must fit it), at most
    2 tokens short first, anything within ``tol`` after a few corrections. Returns the context, the needles' start
    offsets, the input's encoding (``unit="input"``; else None) and its length."""
    question, enc, n = draft.question, None, -1
    for attempt in range(50):
        context, starts = _assemble(chosen, draft)
        if unit == "input":  # one tokenization gives both the length and the offsets checked after
            enc = tokenizer(question, context, return_offsets_mapping=True)
            n = len(enc["input_ids"])
        else:
            n = measure.pair(question, context, unit)
        err = n - target
        if -min(tol, 2) <= err <= 0 or (attempt >= 5 and -tol <= err <= 0):
            break
        if err > 0:
            drop = min(len(chosen), max(1, err // 2))
            del chosen[len(chosen) - drop :]
        else:
            chosen.extend(rng.choice(words) for _ in range(max(1, -err // 2)))
    return context, starts, enc, n


def _fit_length(tokenizer, words, rng, draft: _Draft, *, target, unit, measure: _Measure, tolerance):
    """Choose the number of distractor words so the example hits ``target`` tokens, then verify spans."""
    question = draft.question
    empty_ctx, _ = _assemble([], draft)
    base = measure.pair(question, empty_ctx, unit)  # question + needles + special tokens
    if base > target * (1 + tolerance):
        raise ValueError(f"target length {target} is shorter than the question and needles ({base} tokens)")
    chosen = _draw_distractors(words, rng, measure, target - base)
    tol = max(0, int(tolerance * target))
    context, starts, enc, n = _correct_length(tokenizer, words, rng, draft, chosen, target=target, unit=unit,
                                              measure=measure, tol=tol)
    if not -tol <= n - target <= 0:
        raise ValueError(f"could not reach {target} +- {tol} tokens (last: {n})")

    answer = draft.answer
    ans_start = starts[(draft.ordinal or 1) - 1] + len(needle_prefix(draft.key))
    if context[ans_start : ans_start + len(answer)] != answer:
        raise AssertionError("internal error: answer offset does not match the assembled context")
    if any(context.count(v) != 1 for v in draft.values) or context.count(draft.key) != len(draft.values):
        return None  # a value or key collides with the text: redraw
    if unit != "input":
        enc = tokenizer(question, context, return_offsets_mapping=True)
    seq_ids = enc.sequence_ids()
    span = token_span(enc["offset_mapping"], seq_ids, context, ans_start, ans_start + len(answer))
    if span is None:
        return None
    ctx_tokens = sum(1 for s in seq_ids if s == 1)
    return {
        "context": context,
        "question": question,
        "answers": {"text": [answer], "answer_start": [ans_start]},
        "num_tokens": len(enc["input_ids"]),
        "context_tokens": ctx_tokens,
        "needle_char_starts": starts,
        "answer_token_start": span[0],
        "answer_token_end": span[1],
    }


def needle_counts(rng: random.Random, n: int, distractors: dict[int, float] | None = None) -> list[int]:
    """The number of needles of each of ``n`` examples: exactly ``round(0.4 n)`` ones and the rest twos, shuffled;
    or, with ``distractors`` ({k: p}), 1 + k with k drawn independently with probability p (the authors' form)."""
    if distractors is None:
        n_single = round(SINGLE_FRACTION * n)
        kinds = [1] * n_single + [2] * (n - n_single)
        rng.shuffle(kinds)
        return kinds
    counts = sorted(distractors)
    return [k + 1 for k in rng.choices(counts, weights=[distractors[k] for k in counts], k=n)]


def generate_split(
    tokenizer,
    *,
    task: str,
    split: str,
    length: int,
    n: int,
    seed: int,
    unit: str = "input",
    words: list[str] | None = None,
    measure: _Measure | None = None,
    distractors: dict[int, float] | None = None,
) -> list[dict[str, Any]]:
    """``n`` examples of one (task, split, length): exactly ``round(0.4 n)`` single-needle, rest two; or, with
    ``distractors`` ({k: p}), each example's number of distractor needles k drawn from it (k + 1 needles)."""
    if task not in NIAH_TASKS:
        raise ValueError(f"unknown NIAH task {task!r}: use one of {NIAH_TASKS}")
    if n < 1:
        raise ValueError(f"number of examples must be >= 1, got {n}")
    words = words or distractor_words(tokenizer)
    measure = measure or _Measure(tokenizer)
    rng = random.Random(f"{seed}:{task}:{split}:{length}")
    kinds = needle_counts(rng, n, distractors)
    extra = {} if distractors is None else {"distractors": format_distribution(distractors)}
    out = []
    for i, k in enumerate(kinds):
        ex = generate_example(
            tokenizer, words, rng, task=task, target=length, num_needles=k, unit=unit, measure=measure
        )
        out.append({"id": f"{task}-{split}-{length}-{i:05d}", "split": split, **ex, **extra})
    return out


def generate(
    tokenizer,
    out_dir: str,
    *,
    tasks=NIAH_TASKS,
    test_lengths=DEFAULT_TEST_LENGTHS,
    train_lengths=(DEFAULT_TRAIN_LENGTH,),
    n_train: int = 1000,
    n_test: int | None = None,
    seed: int = 0,
    unit: str = "input",
    fmt: str = "jsonl",
    tokenizer_name: str | None = None,
    distractors: dict[str, dict[int, float] | None] | None = None,
    log=print,
) -> dict[str, Any]:
    """Write every (task, split, length) set under ``out_dir``; returns the manifest of the last task.
    ``n_test`` None: :func:`default_n_test` per length. ``distractors``: split -> distribution of the number of
    distractor needles (None or a missing split: the exact 40/60 form)."""
    distractors = distractors or {}
    words = distractor_words(tokenizer)
    measure = _Measure(tokenizer)
    manifest: dict[str, Any] = {}
    for task in tasks:
        task_dir = os.path.join(out_dir, task)
        os.makedirs(task_dir, exist_ok=True)
        sets = [("train", L, n_train) for L in train_lengths if n_train > 0]
        sets += [("test", L, default_n_test(L) if n_test is None else n_test) for L in test_lengths
                 if n_test is None or n_test > 0]
        stats = {}
        all_rows: dict[str, list[dict[str, Any]]] = {}
        for split, length, n in sets:
            rows = generate_split(tokenizer, task=task, split=split, length=length, n=n, seed=seed, unit=unit,
                                  words=words, measure=measure, distractors=distractors.get(split))
            name = f"{split}_{length}"
            if fmt in ("jsonl", "both"):
                write_jsonl_atomic(os.path.join(task_dir, name + ".jsonl"), rows)
            all_rows[name] = rows
            key = "num_tokens" if unit == "input" else "context_tokens"
            stats[name] = set_statistics(rows, key)
            log(f"{task} {name}: {len(rows)} examples, {key} {stats[name]['tokens_min']}..{stats[name]['tokens_max']}"
                f", needles {stats[name]['needles']}, chance level {100 * stats[name]['chance_level']:.1f}%")
        if fmt in ("hf", "both"):
            from datasets import Dataset, DatasetDict

            DatasetDict({k: Dataset.from_list(v) for k, v in all_rows.items()}).save_to_disk(
                os.path.join(task_dir, "hf")
            )
        manifest = {"task": task, "seed": seed, "length_unit": unit, "tokenizer": tokenizer_name,
                    "single_fraction": SINGLE_FRACTION,
                    "distractors": {k: format_distribution(v) for k, v in distractors.items() if v},
                    "sets": stats, "format": fmt, "distractor_vocabulary": len(words)}
        write_json_atomic(os.path.join(task_dir, "manifest.json"), manifest)
    return manifest


def set_statistics(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The manifest's entry for one set: its size, single-needle count, lengths (``key``: ``num_tokens`` or
    ``context_tokens``), needle counts, distractor form and chance level."""
    toks = [r[key] for r in rows]
    return {
        "n": len(rows),
        "single": sum(r["num_needles"] == 1 for r in rows),
        "tokens_min": min(toks),
        "tokens_max": max(toks),
        "tokens_median": statistics.median(toks),
        "needles": {str(k): v for k, v in sorted(collections.Counter(r["num_needles"] for r in rows).items())},
        "distractors": rows[0].get("distractors"),
        "chance_level": set_chance_level(rows),
    }


def parse_lengths(values: list[str]) -> list[int]:
    """Token counts from ``["1024", "4k", "96k"]`` (``k`` = 1,024)."""
    out = []
    for v in values:
        v = v.lower().strip()
        mult = 1024 if v.endswith("k") else 1
        try:
            n = int(float(v[:-1]) * mult) if v.endswith("k") else int(v)
        except ValueError:
            raise ValueError(f"bad length {v!r}: use an integer or e.g. 4k") from None
        if n < 1:
            raise ValueError(f"length must be positive, got {v!r}")
        out.append(n)
    return out
