"""A text encoded in pieces (``Encoder.document``, avey_b.inference.documents.TextDocument) equals ``Encoder.encode``
of the whole text after appends of any size and edits, its late chunks equal a fresh forward's with the same
character spans, its tokens equal the tokenizer's of the whole text (subword merges across an append's boundary
included), an append to a long document recomputes only the new splits and tokenizes only a window, and the
runtimes and configs where it cannot work are refused in one message.

The tokenizers are BPE models trained here on made-up words (no network), with vocabularies of two thousand
tokens, and the texts are random letters: few repeated tokens, so that no two ranker candidates tie within float32
rounding (see tests/test_streaming.py; a text whose splits share their tokens, punctuation in every split at this
tiny split size, can tie)."""

from __future__ import annotations

import random
import string

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from avey_b import AveyBForSentenceEmbedding, Encoder, LoadOptions
from avey_b import testing as toy
from avey_b.inference.documents import MARGIN
from avey_b.model import presets
from avey_b.model.heads import chunk_embeddings
from avey_b.testing import seeded


def words(seed: int, n: int) -> list[str]:
    """``n`` made-up words of 2 to 9 random letters."""
    rng = random.Random(seed)
    return ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(n)]


def prose(seed: int, n: int) -> str:
    """``n`` made-up words, each followed by a space: few repeated tokens (no punctuation in every split)."""
    return "".join(w + " " for w in words(seed, n))


def bpe_tokenizer(directory: str, byte_level: bool, trim_offsets: bool = False) -> PreTrainedTokenizerFast:
    """A BPE tokenizer trained on made-up words, with [CLS]/[SEP] around every text: words split on whitespace and
    punctuation (``byte_level`` False) or GPT-2's byte-level rule (True, as ModernBERT's tokenizer); with
    ``trim_offsets``, RoBERTa's post-processor: a token's offsets leave out its leading space."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.BPE(unk_token=None if byte_level else "[UNK]"))
    tok.pre_tokenizer = (pre_tokenizers.ByteLevel(add_prefix_space=False) if byte_level
                         else pre_tokenizers.Whitespace())
    tok.decoder = decoders.ByteLevel() if byte_level else decoders.BPEDecoder()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_level else [])
    tok.train_from_iterator([prose(s, 500) for s in range(1000, 1020)], trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = (
        processors.RobertaProcessing(("[SEP]", sep), ("[CLS]", cls), trim_offsets=True, add_prefix_space=False)
        if trim_offsets else
        processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(directory)
    return fast


def checkpoint(directory, byte_level: bool = False, trim_offsets: bool = False, **overrides) -> str:
    tok = bpe_tokenizer(str(directory), byte_level, trim_offsets)
    seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok), **overrides)).eval().save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module", params=[False, True], ids=["whitespace-bpe", "byte-level-bpe"])
def encoder(request, tmp_path_factory):
    directory = checkpoint(tmp_path_factory.mktemp("document"), byte_level=request.param)
    return Encoder(directory, LoadOptions(device="cpu", precision="fp32")).load()


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= 1e-5


def check(encoder: Encoder, document) -> None:
    """The document's tokens are the whole text's and its vector is ``encode``'s."""
    assert document.tokens == encoder.tokenize([document.text])["input_ids"][0]
    assert close(document.vector(), encoder.encode(document.text))


@pytest.mark.parametrize("piece", ["char", "word", "sentences"])
def test_appends_of_any_size_equal_encoding_the_whole_text(encoder, piece):
    text = prose(100, 120)
    if piece == "char":
        pieces = list(text[:60])
    elif piece == "word":
        pieces = [w + " " for w in text[:400].split(" ")]
    else:
        pieces = [text[a:a + 150] for a in range(0, len(text), 150)]  # each piece completes many splits
    document = encoder.document()
    check(encoder, document)  # the empty text: only [CLS] and [SEP]
    for i, p in enumerate(pieces):
        document.append(p)
        if i % 7 == 0 or i == len(pieces) - 1:
            check(encoder, document)
    assert document.text == "".join(pieces)


def merging_append(encoder: Encoder) -> tuple[str, str]:
    """A text and an appended piece whose first characters merge with the text's last token (its id changes)."""
    for w in words(7, 500):
        for cut in range(1, len(w)):
            head, tail = encoder.tokenize([w[:cut], w])["input_ids"]
            if head[-2] != tail[len(head) - 2]:
                return w[:cut], w[cut:]
    raise AssertionError("no word tokenizes differently once completed")


def test_an_append_that_merges_with_the_old_tail_retokenizes_it(encoder):
    head, rest = merging_append(encoder)
    text = prose(3, 60) + head
    document = encoder.document(text)
    before = document.tokens
    document.append(rest + " and more")
    check(encoder, document)
    assert document.tokens[len(before) - 2] != before[-2]  # the old last token is not the new one there
    assert document.retokenized < len(document.text) // 2  # a window, not the whole text


def test_an_append_to_a_long_document_recomputes_only_the_new_splits(encoder):
    document = encoder.document(prose(5, 800))
    n, S = len(document), encoder.config.split_size
    document.append(" tailword")
    grown = len(document) - n
    assert document.retokenized < 400 < len(document.text)  # a window around the end, never the whole text
    assert document.state.recomputed <= grown // S + 2  # the last split and the new ones (and the partial one)
    computed = document.state.computed
    check(encoder, document)
    assert document.state.computed - computed <= 1  # the partial last split, made for the vector


def test_replacing_a_span_in_the_middle_equals_encoding_the_new_text(encoder):
    text = prose(11, 200)
    document = encoder.document(text)
    middle = len(text) // 2
    for start, end, new in [(middle, middle + 5, "galtoru"), (middle, middle, "ka "), (10, 30, ""), (-8, 0, "end."),
                            (0, 3, "Exon")]:
        if start < 0:  # counted from the end
            start, end = len(document.text) + start, len(document.text) + end
        expected = document.text[:start] + new + document.text[end:]
        document.replace(start, end, new)
        assert document.text == expected
        check(encoder, document)
    with pytest.raises(ValueError, match="not within the document"):
        document.replace(5, len(document.text) + 1, "x")


@pytest.mark.parametrize("size,overlap", [(5, 0), (8, 3)])
def test_late_chunks_equal_a_fresh_forwards_with_the_same_character_spans(encoder, size, overlap):
    from avey_b.inference.chunks import chunk_ranges

    document = encoder.document(chunk_tokens=size, chunk_overlap=overlap)
    text = prose(21, 50)
    for a in range(0, len(text), 37):
        document.append(text[a:a + 37])
    vectors, spans = document.chunks()
    enc = encoder.tokenize([text], offsets=True)
    ranges = chunk_ranges(enc["offset_mapping"][0], enc["special_tokens_mask"][0], chunk_tokens=size, overlap=overlap)
    batch, mask = encoder.pad(enc["input_ids"])
    want = chunk_embeddings(encoder.hidden_states(batch, mask), mask, [[(a, b) for a, b, _, _ in ranges]], True)[0]
    assert spans == [(c, d) for _, _, c, d in ranges]
    assert close(vectors, want)
    with pytest.raises(ValueError, match="no chunks"):
        encoder.document("a").chunks()
    assert document.vector().shape == (encoder.config.hidden_size,)  # a chunked document still pools whole
    assert close(document.vector(), encoder.encode(text))


def test_an_onnx_model_and_a_model_without_the_property_are_refused(tmp_path):
    directory = checkpoint(tmp_path / "m")
    (tmp_path / "m.onnx").write_bytes(b"")
    onnx = Encoder(directory, LoadOptions(onnx=str(tmp_path / "m.onnx")))
    with pytest.raises(ValueError, match=r"needs the eager runtime .* load it without LoadOptions\(onnx=...\)"):
        onnx.document("text")
    bidirectional = Encoder(checkpoint(tmp_path / "b", ranker="bidirectional"), LoadOptions(precision="fp32"))
    with pytest.raises(ValueError, match="cannot encode a document in pieces: ranker='bidirectional'"):
        bidirectional.document("text")


def test_a_window_inside_one_long_word_is_widened_until_its_tokens_agree(tmp_path):
    """WordPiece (the toy tokenizer) cuts a word it does not know into letters, ``##`` marking those inside the
    word: a first window that starts inside a long word reads its first letter as a word's first (no ``##``), its
    sync check fails, and it is widened until it starts where the text's tokens do."""
    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok))).eval().save_pretrained(tmp_path)
    encoder = Encoder(str(tmp_path), LoadOptions(device="cpu", precision="fp32")).load()
    document = encoder.document("bob met alice in paris " + "".join(words(31, 30)))  # a word of some 160 letters
    document.append("qz")
    check(encoder, document)
    assert 4 * MARGIN < document.retokenized  # the first window (32 tokens of a letter each) was widened
    document.replace(len(document.text) - 40, len(document.text) - 38, "e")
    check(encoder, document)


def test_random_edits_keep_the_tokens_of_the_whole_text(encoder):
    rng = random.Random(5)
    document = encoder.document(prose(41, 300))
    letters = string.ascii_lowercase + "  ,.\n"
    for _ in range(25):
        n = len(document.text)
        start = rng.randint(0, n)
        end = min(n, start + rng.choice([0, 0, 1, 3, 12]))
        new = "".join(rng.choice(letters) for _ in range(rng.choice([0, 1, 2, 7])))
        document.replace(start, end, new)
        assert document.tokens == encoder.tokenize([document.text])["input_ids"][0]
    assert close(document.vector(), encoder.encode(document.text))


def test_a_tokenizer_whose_offsets_leave_out_the_spaces_still_tokenizes_a_window(tmp_path):
    """RoBERTa's trimmed offsets: a token's span starts after its leading space, so a window starts where the token
    before it ends (the space then belongs to the window's first token, as in the whole text)."""
    encoder = Encoder(checkpoint(tmp_path, byte_level=True, trim_offsets=True), LoadOptions(precision="fp32")).load()
    document = encoder.document(prose(51, 300))
    assert document.tokenizer("ab cd", return_offsets_mapping=True)["offset_mapping"][2] == (3, 5)  # trimmed
    document.append("xy zw")
    check(encoder, document)
    assert document.retokenized < 200  # the first window (32 tokens of about three characters and the new text)
    middle = len(document.text) // 2
    document.replace(middle, middle + 3, " qq ")
    check(encoder, document)
    assert document.retokenized < 200  # the first window, not widened: 32 tokens on either side


def test_a_long_text_is_tokenized_in_pieces_with_the_tokens_and_vector_of_the_whole(encoder, monkeypatch):
    """A text longer than PIECE_CHARS (made, or appended) is read a piece at a time, so that no tokenization holds
    the whole text's encoding; its tokens are the whole text's and its vector the whole forward's."""
    from avey_b.inference import documents

    text = prose(33, 400)
    assert len(text) > 10 * 97
    seen = []
    tokenize = documents.TextDocument._tokenize
    monkeypatch.setattr(documents.TextDocument, "_tokenize",
                        lambda self, t, a, b, special=True: (seen.append(b - a), tokenize(self, t, a, b, special))[1])
    made, grown = documents.TextDocument(encoder.document().states, text, piece_chars=97), encoder.document(text[:50])
    grown.piece_chars = 97  # pieces that end inside words too
    for document in (made, grown.append(text[50:])):
        assert document.text == text
        assert document.tokens == encoder.tokenize([text])["input_ids"][0]
        assert close(document.vector(), encoder.encode(text))
    assert max(seen) < 4 * 97  # never the whole text at once: a piece and its windows
