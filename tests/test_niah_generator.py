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
