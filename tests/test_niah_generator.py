"""NIAH generator: exact answer spans (characters and tokens), needle counts and ordinal questions, the
40/60 mix, determinism by seed, lengths within ±1% in model tokens, and the files `niah generate` writes.
Tokenizers are trained inside the test (a GPT-2-style byte-level BPE and a BERT-style WordPiece)."""

import json
import random
import re

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from avey_b import cli
from avey_b.data import niah as niah_data
from avey_b.utils.records import read_jsonl

WORDS = (
    "river stone cloud apple green house table music water light paper garden window silver market forest "
    "yellow simple number letter value second first question answer"
).split()
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def niah(argv):
    """``avey-b niah ARGV``, its errors raised (``--debug``) so that the tests see their type."""
    return cli.main(["--debug", "niah", *argv])


def _corpus(seed=0, n=400):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        ws = [rng.choice(WORDS) for _ in range(12)]
        ws.append("".join(rng.choice(ALNUM) for _ in range(8)))
        ws.append(str(rng.randint(1000000, 9999999)))
        lines.append("What is the value of " + " ".join(ws) + " at its occurrence ?")
    return lines


def bpe_tokenizer():
    """GPT-2 / RoBERTa-style byte-level BPE (like ModernBERT's and Avey-B's tokenizers)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "<pad>", "</s>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


def wordpiece_tokenizer():
    """BERT-style WordPiece with [CLS] A [SEP] B [SEP] pairs."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=300, show_progress=False, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        cls_token="[CLS]",
        pad_token="[PAD]",
        mask_token="[MASK]",
    )


@pytest.fixture(scope="module", params=["bpe", "wordpiece"])
def tokenizer(request):
    return bpe_tokenizer() if request.param == "bpe" else wordpiece_tokenizer()


@pytest.fixture(scope="module")
def bpe():
    return bpe_tokenizer()


def _needle_values(example):
    """Values of every needle of the example's key, in text order (parsed from the context)."""
    pat = re.escape(niah_data.needle_prefix(example["key"])) + r"(\S+) \."
    return [(m.start(1), m.group(1)) for m in re.finditer(pat, example["context"])]


@pytest.mark.parametrize("task", niah_data.NIAH_TASKS)
def test_answer_spans_are_exact_in_characters_and_tokens(tokenizer, task):
    rows = niah_data.generate_split(tokenizer, task=task, split="test", length=400, n=10, seed=1)
    for ex in rows:
        text, start = ex["answers"]["text"][0], ex["answers"]["answer_start"][0]
        ctx = ex["context"]
        assert ctx[start : start + len(text)] == text
        assert ctx.count(text) == 1
        enc = tokenizer(ex["question"], ctx, return_offsets_mapping=True)
        # Independent recomputation of the token span from the tokenizer's char->token map.
        assert enc.char_to_token(start, sequence_index=1) == ex["answer_token_start"]
        assert enc.char_to_token(start + len(text) - 1, sequence_index=1) == ex["answer_token_end"]
        a = enc["offset_mapping"][ex["answer_token_start"]][0]
        b = enc["offset_mapping"][ex["answer_token_end"]][1]
        assert ctx[a:b].strip() == text
        assert (
            tokenizer.decode(enc["input_ids"][ex["answer_token_start"] : ex["answer_token_end"] + 1]).strip()
            == text
        )
        assert ex["num_tokens"] == len(enc["input_ids"])


def test_value_formats(bpe):
    one = niah_data.generate_split(bpe, task="niah-1", split="test", length=300, n=10, seed=0)
    two = niah_data.generate_split(bpe, task="niah-2", split="test", length=300, n=10, seed=0)
    for ex in one:
        v = ex["answers"]["text"][0]
        assert (
            len(v) == 8
            and v.isalnum()
            and sum(c.isdigit() for c in v) >= 2
            and sum(c.isalpha() for c in v) >= 2
        )
    for ex in two:
        v = ex["answers"]["text"][0]
        assert len(v) == 7 and v.isdigit() and v[0] != "0"


def test_needle_counts_and_ordinal_questions(tokenizer):
    rows = niah_data.generate_split(tokenizer, task="niah-2", split="test", length=500, n=20, seed=3)
    assert sum(r["num_needles"] == 1 for r in rows) == 8  # exactly 40% single-needle
    assert sum(r["num_needles"] == 2 for r in rows) == 12
    ordinals = set()
    for ex in rows:
        found = _needle_values(ex)
        assert len(found) == ex["num_needles"]
        assert ex["context"].count(ex["key"]) == ex["num_needles"]
        assert ex["key"] in ex["question"]
        if ex["num_needles"] == 1:
            assert ex["ordinal"] is None
            assert "first" not in ex["question"] and "second" not in ex["question"]  # keys avoid ordinals
            expected = found[0]
        else:
            assert found[0][1] != found[1][1]  # same key, different values
            word = {1: "first", 2: "second"}[ex["ordinal"]]
            assert f"at its {word} occurrence" in ex["question"]
            expected = found[ex["ordinal"] - 1]  # the n-th occurrence in text order
            ordinals.add(ex["ordinal"])
        assert (ex["answers"]["answer_start"][0], ex["answers"]["text"][0]) == expected
    assert ordinals == {1, 2}


def test_deterministic_by_seed(bpe):
    a = niah_data.generate_split(bpe, task="niah-1", split="train", length=300, n=5, seed=7)
    b = niah_data.generate_split(bpe, task="niah-1", split="train", length=300, n=5, seed=7)
    c = niah_data.generate_split(bpe, task="niah-1", split="train", length=300, n=5, seed=8)
    t = niah_data.generate_split(bpe, task="niah-1", split="test", length=300, n=5, seed=7)
    assert a == b
    assert [r["context"] for r in a] != [r["context"] for r in c]
    assert [r["context"] for r in a] != [r["context"] for r in t]  # train and test are different draws


@pytest.mark.parametrize("unit", ["input", "context"])
def test_lengths_within_one_percent_in_model_tokens(tokenizer, unit):
    for target in (150, 1000, 4000):
        rows = niah_data.generate_split(
            tokenizer, task="niah-1", split="test", length=target, n=3, seed=0, unit=unit
        )
        for ex in rows:
            if unit == "input":
                n = len(tokenizer(ex["question"], ex["context"])["input_ids"])
            else:
                n = len(tokenizer(ex["context"], add_special_tokens=False)["input_ids"])
            assert abs(n - target) <= 0.01 * target, (target, n)
            assert n <= target  # never longer: a set of length L fits a model whose window is L


def test_bad_requests_fail_early(bpe):
    with pytest.raises(ValueError, match="shorter than the question"):
        niah_data.generate_split(bpe, task="niah-1", split="test", length=10, n=1, seed=0)
    with pytest.raises(ValueError, match="unknown NIAH task"):
        niah_data.generate_split(bpe, task="niah-3", split="test", length=300, n=1, seed=0)


def test_generate_cli_writes_jsonl_hf_and_manifest(bpe, tmp_path):
    from datasets import load_from_disk

    bpe.save_pretrained(tmp_path / "tok")
    out = tmp_path / "niah"
    rc = niah(
        [
            "generate",
            "--tokenizer",
            str(tmp_path / "tok"),
            "--out",
            str(out),
            "--lengths",
            "256",
            "512",
            "--train-lengths",
            "300",
            "--n-train",
            "5",
            "--n-test",
            "4",
            "--seed",
            "2",
            "--tasks",
            "niah-2",
        ]
    )
    assert rc == 0
    rows = read_jsonl(str(out / "niah-2" / "test_512.jsonl"))
    assert len(rows) == 4 and all(507 <= r["num_tokens"] <= 512 for r in rows)
    ds = load_from_disk(str(out / "niah-2" / "hf"))
    assert set(ds) == {"train_300", "test_256", "test_512"}
    assert ds["test_512"][0]["answers"] == rows[0]["answers"]  # SQuAD-style field round trip
    manifest = json.loads((out / "niah-2" / "manifest.json").read_text())
    assert manifest["sets"]["train_300"]["n"] == 5 and manifest["seed"] == 2
    # Same seed, same file: regeneration is byte-identical.
    before = (out / "niah-2" / "test_256.jsonl").read_bytes()
    niah(
        [
            "generate",
            "--tokenizer",
            str(tmp_path / "tok"),
            "--out",
            str(out),
            "--lengths",
            "256",
            "--n-train",
            "0",
            "--n-test",
            "4",
            "--seed",
            "2",
            "--tasks",
            "niah-2",
            "--format",
            "jsonl",
        ]
    )
    assert (out / "niah-2" / "test_256.jsonl").read_bytes() == before


# ------------------------------------------------------------------------- the authors' distractor distribution


def test_distractor_counts_follow_the_requested_distribution():
    """2,000 seeded draws: each count's share within 3.5 standard errors of its probability (a wrong weighting,
    e.g. uniform over the counts, is 10+ errors off); the same seed, the same draws."""
    dist = {0: 0.2, 1: 0.5, 3: 0.3}
    kinds = niah_data.needle_counts(random.Random(5), 2000, dist)
    assert set(kinds) == {1, 2, 4}  # k distractors -> k + 1 needles
    for k, p in dist.items():
        share = kinds.count(k + 1) / 2000
        assert abs(share - p) <= 3.5 * (p * (1 - p) / 2000) ** 0.5, (k, share, p)
    assert kinds == niah_data.needle_counts(random.Random(5), 2000, dist)
    # the exact form: 40% one needle, 60% two, exactly
    exact = niah_data.needle_counts(random.Random(5), 20)
    assert sorted(exact) == [1] * 8 + [2] * 12


def test_drawn_examples_ask_for_the_nth_of_several_needles(bpe):
    dist = {0: 0.3, 2: 0.7}
    rows = niah_data.generate_split(bpe, task="niah-2", split="test", length=400, n=12, seed=4, distractors=dist)
    expected = niah_data.needle_counts(random.Random("4:niah-2:test:400"), 12, dist)
    assert [r["num_needles"] for r in rows] == expected  # the draws, in order, from the split's own generator
    assert {r["distractors"] for r in rows} == {"0:0.3,2:0.7"}
    for ex in rows:
        found = _needle_values(ex)
        assert len(found) == ex["num_needles"] and len({v for _, v in found}) == ex["num_needles"]
        if ex["num_needles"] > 1:
            assert f"at its {niah_data.ORDINALS[ex['ordinal'] - 1]} occurrence" in ex["question"]
            assert 1 <= ex["ordinal"] <= 3
        assert (ex["answers"]["answer_start"][0], ex["answers"]["text"][0]) == found[(ex["ordinal"] or 1) - 1]
    assert {r["ordinal"] for r in rows if r["num_needles"] == 3} > {1}  # not always the first
    # the default form is unchanged by the option's existence: no distribution, no field
    assert "distractors" not in niah_data.generate_split(bpe, task="niah-2", split="test", length=300, n=2, seed=0)[0]


def test_chance_level_is_the_authors_expected_score_checked_by_brute_force():
    """sum_k p_k / (k + 1): enumerate, for every count, every asked needle and every guess."""
    for dist in ({0: 0.4, 1: 0.6}, {0: 0.2, 1: 0.8}, {0: 0.1, 2: 0.5, 5: 0.4}):
        brute = sum(p * sum(guess == asked for asked in range(k + 1) for guess in range(k + 1)) / (k + 1) ** 2
                    for k, p in dist.items())
        assert niah_data.chance_level(dist) == pytest.approx(brute)
    assert niah_data.chance_level({0: 0.4, 1: 0.6}) == pytest.approx(0.7)  # the paper's mix; the authors print 70.0%
    assert niah_data.chance_level(niah_data.parse_distribution("authors", "train")) == pytest.approx(0.6)


def test_bad_distributions_fail_early():
    for text, match in (("0:0.5,1:0.4", "sum to 0.9"), ("0-1", "K:P pairs"), ("0:0.5,0:0.5", "repeated"),
                        ("-1:1", "negative"), ("0:0,1:1", "not in"), ("20:1", "at most 14")):
        with pytest.raises(ValueError, match=match):
            niah_data.parse_distribution(text)
    assert niah_data.parse_distribution("authors", "test") == {0: 0.4, 1: 0.6}
    assert niah_data.parse_distribution(" 1:1 ") == {1: 1.0}


def test_default_test_set_sizes():
    assert [niah_data.default_n_test(n) for n in (1024, 32768, 65536, 98304)] == [200, 200, 100, 100]


def test_prompt_unit_counts_the_authors_input(bpe):
    rows = niah_data.generate_split(bpe, task="niah-1", split="test", length=500, n=3, seed=0, unit="prompt")
    for ex in rows:
        enc = niah_data.prompt_encoding(bpe, ex["question"], ex["context"])
        assert 495 <= len(enc["input_ids"]) <= 500
        assert bpe.decode(enc["input_ids"]).startswith(f"Question: {ex['question']}\nContext: ")
        assert enc["input_ids"][-1] == bpe.eos_token_id and bpe.bos_token_id not in enc["input_ids"]


def test_generate_cli_draws_distractors_and_records_the_chance_level(bpe, tmp_path, capsys):
    bpe.save_pretrained(tmp_path / "tok")
    out = tmp_path / "niah"
    niah(["generate", "--tokenizer", str(tmp_path / "tok"), "--out", str(out), "--tasks", "niah-1",
               "--lengths", "200", "--train-lengths", "200", "--n-train", "6", "--n-test", "5",
               "--train-distractors", "authors", "--test-distractors", "0:0.5,2:0.5", "--format", "jsonl"])
    manifest = json.loads((out / "niah-1" / "manifest.json").read_text())
    assert manifest["distractors"] == {"train": "0:0.2,1:0.8", "test": "0:0.5,2:0.5"}
    test = manifest["sets"]["test_200"]
    assert test["chance_level"] == pytest.approx(0.5 + 0.5 / 3) and test["distractors"] == "0:0.5,2:0.5"
    assert sum(test["needles"].values()) == 5 and set(test["needles"]) <= {"1", "3"}
    assert manifest["sets"]["train_200"]["chance_level"] == pytest.approx(0.6)
    assert "chance level 66.7%" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="sum to"):
        niah(["generate", "--tokenizer", str(tmp_path / "tok"), "--out", str(out), "--test-distractors",
                   "0:0.5"])


def test_python_dash_m_runs_the_niah_command(monkeypatch, capsys):
    """``python -m avey_b.evaluation.niah`` (the benchmark scripts' spelling) is the same program as ``avey-b niah``."""
    import runpy
    import sys

    monkeypatch.setattr(sys, "argv", ["avey_b.evaluation.niah", "generate", "--help"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("avey_b.evaluation.niah", run_name="__main__", alter_sys=True)
    assert e.value.code == 0 and "usage: avey-b niah generate" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------- the authors' generator
from avey_b.data import niah_authors as authors  # noqa: E402
from avey_b.evaluation.niah.options import niah_generate_options  # noqa: E402

#: the question as the authors' generator writes it
AUTHORS_QUESTION = re.compile(r"^What is the (\w+) special (word|number) in this passage\?$")


def _split(task="niah-1", split="test", length=120, n=200, seed=0):
    return authors.authors_split(task=task, split=split, length=length, n=n, seed=seed)


def test_authors_haystack_is_their_131_word_list():
    """The list is a fact of their script: 131 distinct lowercase words, in their order."""
    assert len(authors.HAYSTACK_WORDS) == len(set(authors.HAYSTACK_WORDS)) == 131
    assert authors.HAYSTACK_WORDS[:4] == ("the", "and", "or", "but")
    assert authors.HAYSTACK_WORDS[-3:] == ("toward", "forward", "backward")
    assert all(re.fullmatch(r"[a-z]+", w) for w in authors.HAYSTACK_WORDS)


@pytest.mark.parametrize(("task", "kind", "needle_re"), [("niah-1", "word", r"[a-z0-9]{8,12}"),
                                                          ("niah-2", "number", r"[1-9][0-9]{6}")])
def test_authors_examples_follow_every_rule(task, kind, needle_re):
    """Lengths in words (exactly), haystack words from their list, needles of their alphabet and length, the
    answer at its offset, and the question naming the asked needle by its place in the drawn order."""
    haystack = set(authors.HAYSTACK_WORDS)
    rows = _split(task=task, length=97, n=150)
    lengths = set()
    for r in rows:
        words = r["context"].split(" ")
        assert len(words) == len(r["context"].split()) == 97 == r["target_length"]
        needles = [w for w in words if w not in haystack]
        assert sorted(needles) == sorted(r["needles"]) and len(needles) == r["num_needles"] in (1, 2)
        assert all(re.fullmatch(needle_re, x) for x in needles)
        lengths.update(len(x) for x in needles)
        answer, start = r["answers"]["text"][0], r["answers"]["answer_start"][0]
        assert r["context"][start:start + len(answer)] == answer == r["needles"][r["ordinal"] - 1]
        m = AUTHORS_QUESTION.match(r["question"])
        assert m and m.group(2) == kind and m.group(1) == niah_data.ORDINALS[r["ordinal"] - 1]
        assert r["title"] == f"haystack_{kind}_97"
        for x, s in zip(r["needles"], r["needle_char_starts"], strict=True):
            assert r["context"][s:s + len(x)] == x
    if task == "niah-1":
        assert lengths == set(range(8, 13))  # every length of 8..12 drawn
    else:
        assert lengths == {7}


def test_authors_ordinal_counts_the_drawn_order_not_the_text_order():
    """Their ordinal names a needle by its place in the order drawn, and the needles' places are shuffled: among
    two-needle examples asking for the "first", the answer comes first in the text about half the time (so
    beyond one needle a model can only guess, the authors' expected score)."""
    rows = [r for r in _split(length=60, n=600) if r["num_needles"] == 2]
    first = [r for r in rows if r["ordinal"] == 1]
    in_text_first = [r["answers"]["answer_start"][0] == min(r["needle_char_starts"]) for r in first]
    assert len(first) > 100 and 0.35 < sum(in_text_first) / len(first) < 0.65
    assert {r["ordinal"] for r in rows} == {1, 2}
    assert authors.authors_question("number", 16) == "What is the 16th special number in this passage?"


def test_authors_needles_keep_their_minimum_gap():
    """Depths sorted, each at least 0.05 past the one before (rescaled when the last passes 1), so two needles of
    a passage are at least about 4.7% of the haystack apart."""
    for r in _split(length=400, n=200):
        if r["num_needles"] == 2:
            words = r["context"].split(" ")
            at = sorted(i for i, w in enumerate(words) if w in r["needles"])
            assert at[1] - at[0] >= int(0.05 / 1.05 * 398) - 1
    depths = authors.needle_depths(random.Random(0), 5)
    ordered = sorted(depths)
    assert max(ordered) <= 1.0 and all(b - a >= 0.05 / 1.25 - 1e-12
                                       for a, b in zip(ordered[:-1], ordered[1:], strict=True))


@pytest.mark.parametrize(("split", "two"), [("train", 0.8), ("test", 0.6)])
def test_authors_distractor_proportions(split, two):
    """Distractors 0:0.2 / 1:0.8 in training and 0:0.4 / 1:0.6 in test, over a seeded sample of 2,000."""
    rows = _split(split=split, length=12, n=2000, seed=3)
    share = sum(r["num_needles"] == 2 for r in rows) / len(rows)
    assert abs(share - two) < 0.04  # 4+ standard deviations
    assert {r["num_needles"] for r in rows} == {1, 2}
    assert {r["distractors"] for r in rows} == {niah_data.format_distribution(niah_data.AUTHORS_DISTRACTORS[split])}


def test_authors_sets_are_deterministic_by_seed_and_independent_of_other_sets():
    assert _split(n=20, seed=5) == _split(n=20, seed=5)
    assert _split(n=20, seed=5) != _split(n=20, seed=6)
    assert _split(split="train", n=20) != _split(split="test", n=20)


def test_authors_lengths_past_32000_words_follow_the_same_rules():
    (r,) = authors.authors_split(task="niah-2", split="test", length=40_000, n=1, seed=0)
    assert len(r["context"].split(" ")) == 40_000
    assert r["context"][r["answers"]["answer_start"][0]:].startswith(r["answers"]["text"][0])


def test_generate_defaults_follow_the_protocol_and_the_generator():
    """Under the paper protocol the authors' generator with their sizes, lengths and distributions (train sets at
    every test length); the library's stays the standard default and needs a tokenizer."""
    opts = niah_generate_options(cli.parse("niah", ["generate", "--out", "o", "--protocol", "paper"]))
    assert opts.generator == "authors-replay"
    assert opts.lengths == opts.train_lengths == ["1000", "2000", "3800", "4000", "8000", "16000", "32000"]
    assert (opts.n_train, opts.n_test) == (10_000, 1_000)
    assert (opts.train_distractors, opts.test_distractors) == ("authors", "authors")
    lib = niah_generate_options(cli.parse("niah", ["generate", "--out", "o", "--tokenizer", "t"]))
    assert (lib.generator, lib.train_lengths, lib.n_train) == ("library", ["2048"], 1000)
    with pytest.raises(SystemExit, match="pass --tokenizer"):
        niah_generate_options(cli.parse("niah", ["generate", "--out", "o"]))
    mixed = niah_generate_options(cli.parse("niah", ["generate", "--out", "o", "--protocol", "paper",
                                                     "--generator", "library", "--tokenizer", "t"]))
    assert mixed.generator == "library"


def test_generate_cli_writes_the_authors_sets(tmp_path):
    assert niah(["generate", "--generator", "authors", "--out", str(tmp_path), "--tasks", "niah-2", "--lengths",
                 "30", "45", "--n-train", "6", "--n-test", "4", "--format", "jsonl"]) == 0
    for split, n in (("train", 6), ("test", 4)):
        for length in (30, 45):
            rows = read_jsonl(str(tmp_path / "niah-2" / f"{split}_{length}.jsonl"))
            assert len(rows) == n and all(len(r["context"].split()) == length for r in rows)
            assert len({r["id"] for r in rows}) == n
    manifest = json.loads((tmp_path / "niah-2" / "manifest.json").read_text())
    assert manifest["generator"] == "authors" and manifest["length_unit"] == "words"
    assert manifest["sets"]["test_30"]["chance_level"] == pytest.approx(0.7)
