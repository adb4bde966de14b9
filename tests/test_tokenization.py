"""The trained byte-level BPE: vocabulary padded to 64, BERT-style specials + end-of-text, round-trips through
save_pretrained / AutoTokenizer, and the mask token absorbs the space before it."""

from transformers import AutoTokenizer

from avey_b.data.tokenization import CLS, EOT, MASK, PAD, SEP, UNK, eot_id, special_ids, train_bpe_tokenizer

TEXTS = [f"The quick brown fox number {i} jumps over the lazy dog near river {i % 7}." for i in range(300)]


def test_vocab_is_a_multiple_of_64_with_specials_first():
    tok = train_bpe_tokenizer(TEXTS, 600)
    assert len(tok) % 64 == 0
    assert [tok.convert_tokens_to_ids(t) for t in (PAD, UNK, CLS, SEP, MASK, EOT)] == [0, 1, 2, 3, 4, 5]
    assert eot_id(tok) == 5
    assert set(special_ids(tok)) >= {0, 1, 2, 3, 4, 5}


def test_roundtrip_through_save_pretrained(tmp_path):
    tok = train_bpe_tokenizer(TEXTS, 512)
    tok.save_pretrained(tmp_path)
    back = AutoTokenizer.from_pretrained(tmp_path)
    text = "The lazy fox jumps over the river."
    assert back(text)["input_ids"] == tok(text)["input_ids"]
    assert back.decode(back(text, add_special_tokens=False)["input_ids"]) == text  # byte-level: lossless
    enc = back(text)["input_ids"]
    assert enc[0] == back.cls_token_id and enc[-1] == back.sep_token_id
    assert (back.mask_token, back.pad_token, back.eos_token) == (MASK, PAD, EOT)


def test_mask_token_absorbs_the_preceding_space():
    tok = train_bpe_tokenizer(TEXTS, 512)
    a = tok("over the [MASK] dog", add_special_tokens=False)["input_ids"]
    b = tok("over the", add_special_tokens=False)["input_ids"]
    assert a[: len(b)] == b and a[len(b)] == tok.mask_token_id  # no lone-space token before [MASK]
