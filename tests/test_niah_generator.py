"""NIAH generator: exact answer spans (characters and tokens), needle counts and ordinal questions, the
40/60 mix, determinism by seed, lengths within ±1% in model tokens, and the files `niah generate` writes.
Tokenizers are trained inside the test (a GPT-2-style byte-level BPE and a BERT-style WordPiece)."""

import json
import random
import re

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from avey_b.data import niah as niah_data
from avey_b.evaluation import niah

WORDS = (
    "river stone cloud apple green house table music water light paper garden window silver market forest "
    "yellow simple number letter value second first question answer"
).split()
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


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


@pytest.mark.parametrize("task", niah_data.TASKS)
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
    rc = niah.main(
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
    rows = niah.read_jsonl(str(out / "niah-2" / "test_512.jsonl"))
    assert len(rows) == 4 and all(507 <= r["num_tokens"] <= 512 for r in rows)
    ds = load_from_disk(str(out / "niah-2" / "hf"))
    assert set(ds) == {"train_300", "test_256", "test_512"}
    assert ds["test_512"][0]["answers"] == rows[0]["answers"]  # SQuAD-style field round trip
    manifest = json.loads((out / "niah-2" / "manifest.json").read_text())
    assert manifest["sets"]["train_300"]["n"] == 5 and manifest["seed"] == 2
    # Same seed, same file: regeneration is byte-identical.
    before = (out / "niah-2" / "test_256.jsonl").read_bytes()
    niah.main(
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
