"""Tokenizers for Avey-B, in one place: load any tokenizer (the authors' release one included), or train a
byte-level BPE offline.

* ``load_tokenizer(name_or_path)`` — any tokenizer ``AutoTokenizer`` loads (a local directory or a Hub id such
  as the release's ``avey-ai/avey1-tokenizer-base``, a BPE derived from ``p50k_base``). By default it completes
  what masked-LM training and fine-tuning need: a mask token (``<|mask|>``, the release's choice) and pad /
  cls / sep tokens standing in from the end-of-text token. ``vocab_size`` appends unused tokens until the
  tokenizer has exactly the model's rows (the release's 50,368 = ``RELEASE_VOCAB_SIZE``).
* ``train_bpe_tokenizer(texts, vocab_size)`` — a byte-level BPE trained with Hugging Face ``tokenizers`` (as the
  paper's pretraining: BPE, BERT-style specials plus a mask token, vocabulary padded to a multiple of 64),
  returned as a ``transformers.PreTrainedTokenizerFast``: it saves next to the model, and
  ``AutoTokenizer.from_pretrained(checkpoint_dir)`` and the ``fill-mask`` pipeline work on the checkpoint.

Special tokens of a trained tokenizer, in id order: ``[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4
<|endoftext|>=5``. ``tokenizer(text)`` wraps text as ``[CLS] text [SEP]`` (BERT convention, what fine-tuning
expects); pretraining packs documents *without* those and joins them with ``<|endoftext|>``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from avey_b.utils.files import model_source

RELEASE_TOKENIZER = "avey-ai/avey1-tokenizer-base"
RELEASE_VOCAB_SIZE = 50368  # the release's embedding rows, a multiple of 64
RELEASE_MASK_TOKEN = "<|mask|>"  # the mask token the release adds to its tokenizer

PAD, UNK, CLS, SEP, MASK, EOT = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<|endoftext|>"
SPECIALS = [PAD, UNK, CLS, SEP, MASK, EOT]


def pad_to_multiple(n: int, multiple: int = 64) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (vocabulary sizes)."""
    return ((n + multiple - 1) // multiple) * multiple


def load_tokenizer(
    name_or_path: str | os.PathLike,
    *,
    complete: bool = True,
    vocab_size: int | None = None,
    require_fast: bool = False,
    trust_remote_code: bool = False,
    mask_token: str = RELEASE_MASK_TOKEN,
    **kwargs,
):
    """A tokenizer by local path or Hub id.

    - ``complete`` (default): add a mask token when there is none, and set missing pad / cls / sep tokens to
      the end-of-text token (``eos``, else ``unk``; a new ``[PAD]`` for pad when neither exists), so masking,
      padding and ``[CLS] … [SEP]`` templates work. Off for evaluating other encoders as they are.
    - ``vocab_size``: append unused ``<|reserved_i|>`` tokens until ``len(tokenizer) == vocab_size``, so every
      id has an embedding row and no ``resize_token_embeddings`` is needed; a larger tokenizer is an error.
    - ``require_fast``: refuse a slow (Python) tokenizer; token classification, QA and NIAH need offsets.
    """
    with model_source(name_or_path, "tokenizer", local_files_only=kwargs.get("local_files_only", False)):
        tok = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, **kwargs)
    if require_fast and not getattr(tok, "is_fast", False):
        raise ValueError(f"tokenizer of {str(name_or_path)!r} is not a fast (Rust) tokenizer; token classification, "
                         "question answering and NIAH need its offset mappings")
    if complete:
        if tok.mask_token is None:
            tok.add_special_tokens({"mask_token": mask_token})
        fallback = tok.eos_token or tok.unk_token
        for role in ("pad_token", "cls_token", "sep_token"):
            if getattr(tok, role) is None and (fallback is not None or role == "pad_token"):
                tok.add_special_tokens({role: fallback or PAD})
    if vocab_size is not None:
        if len(tok) > vocab_size:
            raise ValueError(f"{name_or_path} has {len(tok)} tokens, more than the model's vocab_size={vocab_size}")
        filler = [f"<|reserved_{i}|>" for i in range(vocab_size - len(tok))]
        if filler:
            tok.add_special_tokens({"additional_special_tokens": filler}, replace_extra_special_tokens=False)
        if len(tok) != vocab_size:
            raise ValueError(f"could not pad {name_or_path} to {vocab_size} tokens (got {len(tok)})")
    return tok


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2, multiple: int = 64):
    """Train a byte-level BPE on ``texts``; the returned tokenizer's length is a multiple of ``multiple``."""
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
