"""Tokenizers for pretraining: load a given one, or train a byte-level BPE offline.

* ``load_tokenizer(name_or_path)`` — any tokenizer ``AutoTokenizer`` loads (a local directory, or a Hub id
  such as the release's ``avey-ai/avey1-tokenizer-base``). Missing special tokens the masked-LM pipeline needs
  (mask, pad, end-of-text) are added, so the model's vocabulary must be sized from ``len(tokenizer)``.
* ``train_bpe_tokenizer(texts, vocab_size)`` — a byte-level BPE trained with Hugging Face ``tokenizers`` on
  the training corpus (SPEC §5: BPE, BERT-style specials plus a mask token, vocabulary padded to a multiple
  of 64). It is returned as a ``transformers.PreTrainedTokenizerFast`` so it is saved next to the model and
  ``AutoTokenizer.from_pretrained(checkpoint_dir)`` and the ``fill-mask`` pipeline work on the checkpoint.

Special tokens of a trained tokenizer, in id order: ``[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4
<|endoftext|>=5``. ``tokenizer(text)`` wraps text as ``[CLS] text [SEP]`` (BERT convention, what the
fine-tuning code expects); pretraining packs documents *without* those and joins them with ``<|endoftext|>``.
"""

from __future__ import annotations

from collections.abc import Iterable

PAD, UNK, CLS, SEP, MASK, EOT = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<|endoftext|>"
SPECIALS = [PAD, UNK, CLS, SEP, MASK, EOT]


def pad_to_multiple(n: int, multiple: int = 64) -> int:
    return ((n + multiple - 1) // multiple) * multiple


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2, multiple: int = 64):
    """Train a byte-level BPE on ``texts``; the returned tokenizer's length is a multiple of ``multiple``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIALS):
        raise ValueError(f"vocab_size {vocab_size} is too small for a byte-level BPE (needs >= {256 + len(SPECIALS)})")
    target = pad_to_multiple(vocab_size, multiple)
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=target,
        min_frequency=min_frequency,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    n_texts = 0

    def counted():
        nonlocal n_texts
        for t in texts:
            n_texts += 1
            yield t

    tok.train_from_iterator(counted(), trainer=trainer)
    if n_texts == 0:
        raise ValueError("cannot train a tokenizer on an empty corpus")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}",
        pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, tok.token_to_id(CLS)), (SEP, tok.token_to_id(SEP))],
    )
    # A small corpus may run out of merges before `target`: fill the gap with unused special tokens so that
    # len(tokenizer) == the model's (padded) vocabulary and every logit index decodes.
    # The mask token swallows the space before it (as RoBERTa's does): "a [MASK] b" then predicts the word
    # *with* its leading space, which is how the word appears in running text.
    tok.add_special_tokens([AddedToken(MASK, lstrip=True, special=True)])
    n = tok.get_vocab_size()
    if n % multiple:
        tok.add_special_tokens([f"<|unused{i}|>" for i in range(pad_to_multiple(n, multiple) - n)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD, unk_token=UNK, cls_token=CLS, sep_token=SEP,
        mask_token=AddedToken(MASK, lstrip=True, special=True),
        eos_token=EOT, bos_token=CLS,
    )
    fast.model_max_length = 10**9  # Avey-B has no maximum length
    return fast


def load_tokenizer(name_or_path: str):
    """Load a tokenizer (local dir or Hub id) and make sure it has mask, pad and end-of-text tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name_or_path)
    added = {}
    if tok.mask_token is None:
        added["mask_token"] = "<|mask|>"  # the release's choice for its tokenizer (SPEC §5)
    if tok.pad_token is None:
        added["pad_token"] = tok.eos_token or "[PAD]"
    if added:
        tok.add_special_tokens(added)
    return tok


def eot_id(tokenizer) -> int:
    """The token that joins packed documents: the end-of-text (eos) token, else SEP."""
    tid = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if tid is None:
        raise ValueError("tokenizer has neither an eos (end-of-text) nor a sep token to join documents with")
    return int(tid)


def special_ids(tokenizer) -> list[int]:
    """Ids that masking must never select (all special tokens, including pad and end-of-text)."""
    ids = set(tokenizer.all_special_ids)
    ids.add(eot_id(tokenizer))
    if tokenizer.pad_token_id is not None:
        ids.add(tokenizer.pad_token_id)
    return sorted(ids)
