"""``avey-b niah``: needle-in-a-haystack (NIAH) extractive-QA sets and their evaluation (SPEC §7, paper
Appendix "Long-range").

Generation (``avey-b niah generate``)
-------------------------------------
Each example is a passage of random distractor words with one or two *needles* ``"The value of KEY is
VALUE ."`` inserted at random word positions, and a question holding only the key; the answer is the
value span (SQuAD-style extractive QA).

* NIAH-1: alphanumeric values (8 characters, at least two letters and two digits, e.g. ``k7Qz2mPa``);
  NIAH-2: numeric values (7 digits, no leading zero).
* 40% of each split has one needle ("What is the value of KEY?"); 60% has two needles with the *same*
  key and different values, and the question asks for the n-th occurrence ("What is the value of KEY at
  its second occurrence?"), n ∈ {first, second} uniformly. The 40/60 proportion is exact per split
  (rounded), the order shuffled.
* Keys are two distractor-vocabulary words joined by a hyphen (``river-stone``): distractors are joined
  by spaces, so a key never occurs in the passage except in its needles. Values contain digits, which
  distractors never do, so each value occurs exactly once (checked).
* Distractor words are the tokenizer's own vocabulary entries that decode to a lowercase alphabetic word
  of 2+ letters ("random distractor tokens"), drawn uniformly with replacement.
* Length is measured in MODEL tokens of the given tokenizer (any Hugging Face *fast* tokenizer): the whole
  model input ``tokenizer(question, context)`` (question + passage + special tokens) is never longer than
  the target and at most 1% shorter (typically 0-2 tokens), so the "8k" set fits an 8,192-token window. ``--length-unit context`` measures the passage alone instead.
  We count the whole input by default so that a model with an 8,192-token window can take the "8k" set,
  as in the paper's tables.
* Spans are verified at generation time: ``context[answer_start:answer_start+len(text)] == text``, the
  value occurs once in the context, and the answer's token span in the model input
  (``answer_token_start``/``answer_token_end``, inclusive) covers exactly the answer characters (plus only
  whitespace that a tokenizer folds into a token). An example whose answer a tokenizer cannot align is
  regenerated with another value (a handful of tries, then a clear error).
* Deterministic: each (task, split, length) draws from ``random.Random(f"{seed}:{task}:{split}:{length}")``,
  so a set is reproducible alone and independent of which other lengths are generated.

Output under ``--out``: ``{task}/{split}_{length}.jsonl`` (one example per line: ``id, context,
question, answers {text: [..], answer_start: [..]}``, plus ``task, split, target_length, num_tokens,
context_tokens, num_needles, ordinal, key, needle_char_starts, answer_token_start, answer_token_end``),
``{task}/manifest.json`` (arguments, tokenizer, counts, length statistics) and, with ``--format hf`` or
``both``, a ``datasets.DatasetDict`` saved with ``save_to_disk`` in ``{task}/hf`` (splits named
``{split}_{length}``).

Evaluation (``avey-b niah evaluate``): see :func:`evaluate_main`.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import re
import statistics
import string
import sys
import time
from dataclasses import dataclass
from typing import Any

TASKS = ("niah-1", "niah-2")
DEFAULT_TEST_LENGTHS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 98304]
DEFAULT_TRAIN_LENGTH = 2048
SINGLE_FRACTION = 0.4
ORDINALS = ("first", "second")
_WORD_RE = re.compile(r"^[a-z]{2,}$")


# ----------------------------------------------------------------------------------------- pieces


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
    raise ValueError(f"unknown NIAH task {task!r}: use one of {TASKS}")


def needle_prefix(key: str) -> str:
    return f"The value of {key} is "


def needle_text(key: str, value: str) -> str:
    # The space before "." keeps the value a whole pre-token for every common tokenizer (BPE, WordPiece,
    # SentencePiece), so its token span aligns with its characters.
    return f"{needle_prefix(key)}{value} ."


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
        return question_text(self.key, None if self.ordinal is None else ORDINALS[self.ordinal - 1])


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
    if num_needles not in (1, 2):
        raise ValueError(f"num_needles must be 1 or 2, got {num_needles}")
    measure = measure or _Measure(tokenizer)
    key_words = [w for w in words if w not in ORDINALS] or words  # keep "first"/"second" out of keys
    key = f"{rng.choice(key_words)}-{rng.choice(key_words)}"
    for _ in range(max_value_tries):
        values: list[str] = []
        while len(values) < num_needles:
            v = make_value(rng, task)
            if v not in values:
                values.append(v)
        ordinal = rng.randint(1, 2) if num_needles == 2 else None
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


def _fit_length(tokenizer, words, rng, draft: _Draft, *, target, unit, measure: _Measure, tolerance):
    """Choose the number of distractor words so the example hits ``target`` tokens, then verify spans."""
    question = draft.question
    empty_ctx, _ = _assemble([], draft)
    base = measure.pair(question, empty_ctx, unit)  # question + needles + special tokens
    if base > target * (1 + tolerance):
        raise ValueError(f"target length {target} is shorter than the question and needles ({base} tokens)")
    # Draw distractors until their summed token counts reach the budget (additive estimate), then correct
    # with exact counts of the assembled text: add / drop words at the end until within tolerance.
    chosen: list[str] = []
    budget = target - base
    total = 0
    while total < budget:
        w = rng.choice(words)
        chosen.append(w)
        total += measure.word(w)
    if chosen and total - budget > budget - (total - measure.word(chosen[-1])):
        total -= measure.word(chosen.pop())
    tol = max(0, int(tolerance * target))
    n = -1
    for attempt in range(50):
        context, starts = _assemble(chosen, draft)
        if unit == "input":  # one tokenization gives both the length and the offsets checked below
            enc = tokenizer(question, context, return_offsets_mapping=True)
            n = len(enc["input_ids"])
        else:
            n = measure.pair(question, context, unit)
        err = n - target
        # Never longer than the target (a set for an 8,192-token window must fit it); aim for at most 2
        # tokens short first, then accept anything within the tolerance after a few corrections.
        if -min(tol, 2) <= err <= 0 or (attempt >= 5 and -tol <= err <= 0):
            break
        if err > 0:
            drop = min(len(chosen), max(1, err // 2))
            del chosen[len(chosen) - drop :]
        else:
            chosen.extend(rng.choice(words) for _ in range(max(1, -err // 2)))
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
) -> list[dict[str, Any]]:
    """``n`` examples of one (task, split, length): exactly ``round(0.4 n)`` single-needle, rest two."""
    if task not in TASKS:
        raise ValueError(f"unknown NIAH task {task!r}: use one of {TASKS}")
    if n < 1:
        raise ValueError(f"number of examples must be >= 1, got {n}")
    words = words or distractor_words(tokenizer)
    measure = measure or _Measure(tokenizer)
    rng = random.Random(f"{seed}:{task}:{split}:{length}")
    n_single = round(SINGLE_FRACTION * n)
    kinds = [1] * n_single + [2] * (n - n_single)
    rng.shuffle(kinds)
    out = []
    for i, k in enumerate(kinds):
        ex = generate_example(
            tokenizer, words, rng, task=task, target=length, num_needles=k, unit=unit, measure=measure
        )
        out.append({"id": f"{task}-{split}-{length}-{i:05d}", "split": split, **ex})
    return out


def _write_jsonl_atomic(path: str, rows: list[dict[str, Any]]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: str) -> list[dict[str, Any]]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"NIAH file not found: {path} (run `avey-b niah generate` first)")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name_or_path)
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"tokenizer {name_or_path!r} is not a fast tokenizer: NIAH needs character offsets")
    return tok


def generate(
    tokenizer,
    out_dir: str,
    *,
    tasks=TASKS,
    test_lengths=DEFAULT_TEST_LENGTHS,
    train_lengths=(DEFAULT_TRAIN_LENGTH,),
    n_train: int = 1000,
    n_test: int = 200,
    seed: int = 0,
    unit: str = "input",
    fmt: str = "jsonl",
    tokenizer_name: str | None = None,
    log=print,
) -> dict[str, Any]:
    """Write every (task, split, length) set under ``out_dir``; returns the manifest of the last task."""
    words = distractor_words(tokenizer)
    measure = _Measure(tokenizer)
    manifest: dict[str, Any] = {}
    for task in tasks:
        task_dir = os.path.join(out_dir, task)
        os.makedirs(task_dir, exist_ok=True)
        sets = [("train", L, n_train) for L in train_lengths if n_train > 0]
        sets += [("test", L, n_test) for L in test_lengths if n_test > 0]
        stats = {}
        all_rows: dict[str, list[dict[str, Any]]] = {}
        for split, length, n in sets:
            rows = generate_split(
                tokenizer,
                task=task,
                split=split,
                length=length,
                n=n,
                seed=seed,
                unit=unit,
                words=words,
                measure=measure,
            )
            name = f"{split}_{length}"
            if fmt in ("jsonl", "both"):
                _write_jsonl_atomic(os.path.join(task_dir, name + ".jsonl"), rows)
            all_rows[name] = rows
            key = "num_tokens" if unit == "input" else "context_tokens"
            toks = [r[key] for r in rows]
            stats[name] = {
                "n": len(rows),
                "single": sum(r["num_needles"] == 1 for r in rows),
                "tokens_min": min(toks),
                "tokens_max": max(toks),
                "tokens_median": statistics.median(toks),
            }
            log(f"{task} {name}: {len(rows)} examples, {key} {min(toks)}..{max(toks)}")
        if fmt in ("hf", "both"):
            from datasets import Dataset, DatasetDict

            DatasetDict({k: Dataset.from_list(v) for k, v in all_rows.items()}).save_to_disk(
                os.path.join(task_dir, "hf")
            )
        manifest = {
            "task": task,
            "seed": seed,
            "length_unit": unit,
            "tokenizer": tokenizer_name,
            "single_fraction": SINGLE_FRACTION,
            "sets": stats,
            "format": fmt,
            "distractor_vocabulary": len(words),
        }
        with open(os.path.join(task_dir, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2)
    return manifest


# ----------------------------------------------------------------------------------------- CLI


def _lengths(values: list[str]) -> list[int]:
    out = []
    for v in values:
        v = v.lower().strip()
        mult = 1024 if v.endswith("k") else 1
        try:
            n = int(float(v[:-1]) * mult) if v.endswith("k") else int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad length {v!r}: use an integer or e.g. 4k") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"length must be positive, got {v!r}")
        out.append(n)
    return out


_GENERATE_HELP = __doc__.split("Evaluation (")[0].split("-----\n")[-1]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b niah", description="Needle-in-a-haystack sets (SPEC §7).")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser(
        "generate",
        help="generate NIAH-1/NIAH-2 train/test sets",
        description=_GENERATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument(
        "--tokenizer", required=True, help="HF tokenizer name or local path (lengths in its tokens)"
    )
    g.add_argument("--out", required=True, help="output directory")
    g.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    g.add_argument(
        "--lengths",
        nargs="+",
        default=[str(n) for n in DEFAULT_TEST_LENGTHS],
        help="test lengths in tokens (1024 or 1k = 1024 tokens)",
    )
    g.add_argument("--train-lengths", nargs="+", default=[str(DEFAULT_TRAIN_LENGTH)])
    g.add_argument("--n-train", type=int, default=1000, help="training examples per train length")
    g.add_argument("--n-test", type=int, default=200, help="test examples per test length")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--length-unit",
        choices=("input", "context"),
        default="input",
        help="count the whole model input (question+passage+special tokens) or the passage only",
    )
    g.add_argument("--format", choices=("jsonl", "hf", "both"), default="both")

    e = sub.add_parser(
        "evaluate",
        help="fine-tune at a short length, report EM/F1 per length",
        description=inspect.cleandoc(evaluate_main.__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_evaluate_arguments(e)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "generate":
        if args.n_train < 0 or args.n_test < 0:
            raise SystemExit("avey-b niah generate: --n-train and --n-test must be >= 0")
        tok = load_tokenizer(args.tokenizer)
        generate(
            tok,
            args.out,
            tasks=args.tasks,
            test_lengths=_lengths(args.lengths),
            train_lengths=_lengths(args.train_lengths),
            n_train=args.n_train,
            n_test=args.n_test,
            seed=args.seed,
            unit=args.length_unit,
            fmt=args.format,
            tokenizer_name=args.tokenizer,
            log=lambda s: print(s, file=sys.stderr),
        )
        return 0
    return evaluate_main(args)


def add_evaluate_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument(
        "--data", required=True, help="directory written by `niah generate` (holds niah-1/, niah-2/)"
    )
    e.add_argument(
        "--models",
        nargs="+",
        required=True,
        help="Hub ids / local directories of pretrained encoders, or benchmark names built from "
        "config with random weights (avey-b-small, bert-base, modernbert-base, neobert, ...; "
        "see avey_b.benchmarking.models) for smoke runs",
    )
    e.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer for models built from config (and for pretrained models without one)",
    )
    e.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    e.add_argument(
        "--train-length", default=str(DEFAULT_TRAIN_LENGTH), help="which train_<L>.jsonl to fine-tune on"
    )
    e.add_argument(
        "--lengths", nargs="+", default=None, help="test lengths (default: every test_<L>.jsonl found)"
    )
    e.add_argument("--lr", type=float, default=5e-5)
    e.add_argument("--epochs", type=float, default=1.0)
    e.add_argument("--max-steps", type=int, default=None, help="optimizer steps (overrides --epochs)")
    e.add_argument("--batch-size", type=int, default=8)
    e.add_argument(
        "--eval-batch-size",
        type=int,
        default=8,
        help="evaluation batch at the train length; shrunk in proportion for longer inputs",
    )
    e.add_argument("--max-train-examples", type=int, default=None)
    e.add_argument("--max-eval-examples", type=int, default=None)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--device", default=None)
    e.add_argument("--no-bf16", action="store_true", help="disable bf16 autocast on CUDA")
    e.add_argument(
        "--trust-remote-code", action="store_true", help="for Hub models with custom code (NeoBERT)"
    )
    e.add_argument(
        "--out", required=True, help="results directory (results.jsonl, table_exact.md, table_f1.md)"
    )


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def _squad_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NIAH rows -> the QA harness's example format (``answers`` as a list of {text, start})."""
    return [
        {
            "id": r["id"],
            "question": r["question"],
            "context": r["context"],
            "answers": [
                {"text": t, "start": s}
                for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"], strict=True)
            ],
        }
        for r in rows
    ]


def _test_lengths(task_dir: str, wanted: list[int] | None) -> list[int]:
    found = sorted(int(m.group(1)) for f in os.listdir(task_dir) if (m := re.match(r"test_(\d+)\.jsonl$", f)))
    if wanted is None:
        return found
    missing = [n for n in wanted if n not in found]
    if missing:
        raise FileNotFoundError(f"{task_dir}: no test set for lengths {missing} (found {found})")
    return wanted


def _load_model_and_tokenizer(name: str, args, cfg):
    """(model with a QA head, tokenizer, max input length or None, how it was built)."""
    from ..benchmarking import models as bench_models
    from .tasks.base import load_model
    from .tasks.base import load_tokenizer as harness_tokenizer

    spec = bench_models.parse_spec(name)
    registered = spec.name in bench_models.NAMED_CONFIGS or (
        spec.name.startswith("avey-b-") and spec.name[len("avey-b-") :] in bench_models.AVEY_B_PRESETS
    )
    if registered:
        if args.tokenizer is None:
            raise SystemExit(f"avey-b niah evaluate: model {name!r} is built from config; pass --tokenizer")
        tok = harness_tokenizer(args.tokenizer, cfg)
        config = bench_models.build_config(spec)
        config.vocab_size = max(config.vocab_size, len(tok))  # ids of the given tokenizer must fit
        if tok.pad_token_id is not None and hasattr(config, "pad_token_id"):
            config.pad_token_id = tok.pad_token_id
        config.num_labels = 2
        model = bench_models.build_model(config, head="qa")
        how = "from config, random weights"
    else:
        tok = harness_tokenizer(args.tokenizer or name, cfg)
        model = load_model(name, "question-answering", cfg)
        config = model.config
        how = "pretrained"
    limit = bench_models.max_length(config, respect_rope_window=True)
    return model, tok, limit, how


def evaluate_model(name: str, task: str, args, log=print) -> dict[str, Any]:
    """Fine-tune ``name`` on ``task``'s train split, then EM/F1 on every test length (or "—"/"OOM")."""
    import dataclasses

    import transformers

    from ..benchmarking.timing import is_oom
    from .finetune import pick_device, train_model
    from .tasks.base import RunConfig, pad_id_of
    from .tasks.qa import QuestionAnsweringTask

    task_dir = os.path.join(args.data, task)
    train_rows = read_jsonl(os.path.join(task_dir, f"train_{_lengths([args.train_length])[0]}.jsonl"))
    if args.max_train_examples:
        train_rows = train_rows[: args.max_train_examples]
    lengths = _test_lengths(task_dir, _lengths(args.lengths) if args.lengths else None)

    cfg = RunConfig(
        lr=args.lr,
        seed=args.seed,
        epochs=args.epochs,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        eval_batch_size=args.eval_batch_size,
        bf16=not args.no_bf16,
        device=args.device,
        trust_remote_code=args.trust_remote_code,
        max_answer_length=30,
    )
    device = pick_device(cfg)
    transformers.set_seed(args.seed)
    model, tok, limit, how = _load_model_and_tokenizer(name, args, cfg)
    model.to(device)
    qa = QuestionAnsweringTask()

    train = _squad_examples(train_rows)
    train_len = max(len(tok(e["question"], e["context"])["input_ids"]) for e in train)
    # Train on whole examples (one window each) unless the model cannot take the train length.
    cfg = dataclasses.replace(
        cfg,
        max_length=min(train_len, limit) if limit else train_len,
        doc_stride=min(128, max(0, (min(train_len, limit or train_len)) // 4)),
    )
    t0 = time.perf_counter()
    feats = qa.train_features(train, tok, cfg)
    training = train_model(model, qa, feats, cfg, pad_id_of(tok), device)
    record: dict[str, Any] = {
        "model": name,
        "built": how,
        "task": task,
        "max_length": limit,
        "train": training
        | {"examples": len(train), "input_tokens": train_len, "seconds": time.perf_counter() - t0},
        "lr": args.lr,
        "seed": args.seed,
        "device": str(device),
        "results": {},
    }
    log(
        f"{name} {task}: trained {training['steps']} steps, loss {training['loss_first']:.3f} -> "
        f"{training['loss_last']:.3f}"
    )
    stop = None
    for length in lengths:
        rows = read_jsonl(os.path.join(task_dir, f"test_{length}.jsonl"))
        if args.max_eval_examples:
            rows = rows[: args.max_eval_examples]
        examples = _squad_examples(rows)
        need = max(len(tok(e["question"], e["context"])["input_ids"]) for e in examples)
        res: dict[str, Any] = {"input_tokens_max": need, "n": len(examples)}
        if limit is not None and need > limit:
            res["status"] = "max_length"
        elif stop is not None:
            res.update(status="oom", inferred=True)
        else:
            bs = max(1, args.eval_batch_size * train_len // need)
            ecfg = dataclasses.replace(
                cfg, max_length=need, eval_batch_size=bs, doc_stride=min(128, need // 4)
            )
            try:
                t1 = time.perf_counter()
                with torch_no_grad():
                    scores = qa.evaluate(model, tok, examples, ecfg)
                res.update(
                    status="ok", exact=scores["exact"], f1=scores["f1"], seconds=time.perf_counter() - t1
                )
            except Exception as exc:  # OOM is data; other errors are bugs
                if not is_oom(exc):
                    raise
                res.update(status="oom", error=str(exc).splitlines()[0][:200])
                stop = length
        record["results"][str(length)] = res
        log(f"  {task} {length}: {_cell(res)}")
    return record


def torch_no_grad():
    import torch

    return torch.no_grad()


def _cell(res: dict[str, Any], metric: str = "exact") -> str:
    status = res.get("status")
    if status == "ok":
        return f"{res[metric]:.1f}"
    return {"max_length": "—", "oom": "OOM"}.get(status, str(status))


def format_niah_table(records: list[dict[str, Any]], metric: str = "exact") -> str:
    """Markdown: one row per (task, model), one column per length; "—" past the max length, "OOM"."""
    lengths = sorted({int(n) for r in records for n in r["results"]})
    head = "| task | model | " + " | ".join(_len_label(n) for n in lengths) + " |"
    lines = [
        f"NIAH {'exact match' if metric == 'exact' else 'F1'} (%)",
        "",
        head,
        "|---|---|" + "---|" * len(lengths),
    ]
    for r in records:
        cells = [_cell(r["results"][str(n)], metric) if str(n) in r["results"] else "" for n in lengths]
        lines.append(f"| {r['task']} | {r['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _len_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def evaluate_main(args) -> int:
    """``avey-b niah evaluate``: fine-tune each model at the train length (default 2,048) on each task's
    train split with an extractive-QA head (start/end logits), through the same QA harness as SQuAD
    (:mod:`avey_b.evaluation.tasks.qa`, :func:`avey_b.evaluation.finetune.train_model`), then score
    SQuAD exact match and F1 on every test length, the whole input in one window. A test length past the
    model's maximum (a learned position table, or a RoPE model's trained window) is recorded as "—"
    (``max_length``); an out-of-memory failure as "OOM" (longer lengths then not tried). Results go to
    ``OUT/results.jsonl`` (one line per model x task, appended, so a finished pair is skipped on rerun)
    and ``OUT/table_exact.md`` / ``OUT/table_f1.md``."""
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.jsonl")
    done = read_jsonl(path) if os.path.exists(path) else []
    have = {(r["model"], r["task"]) for r in done}
    for name in args.models:
        for task in args.tasks:
            if (name, task) in have:
                print(f"{name} {task}: already in {path}, skipped", file=sys.stderr)
                continue
            rec = evaluate_model(name, task, args, log=lambda s: print(s, file=sys.stderr))
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())
            print(
                json.dumps(
                    {"model": name, "task": task, "exact": {k: _cell(v) for k, v in rec["results"].items()}}
                )
            )
    records = read_jsonl(path)
    for metric in ("exact", "f1"):
        with open(os.path.join(args.out, f"table_{metric}.md"), "w") as f:
            f.write(format_niah_table(records, metric) + "\n")
    print(format_niah_table(records), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
