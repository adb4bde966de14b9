"""Tokenizers for Avey-B: the authors' released tokenizer (``avey-ai/avey1-tokenizer-base``, a BPE derived from
``p50k_base`` with BERT-style special tokens) made ready for the model (SPEC §5, §8)."""

from __future__ import annotations

from transformers import AutoTokenizer, PreTrainedTokenizerBase

RELEASE_TOKENIZER = "avey-ai/avey1-tokenizer-base"
RELEASE_MASK_TOKEN = "<|mask|>"  # the mask token the release adds to its tokenizer


def load_tokenizer(
    name_or_path: str = RELEASE_TOKENIZER,
    vocab_size: int | None = 50368,
    mask_token: str = RELEASE_MASK_TOKEN,
    **kwargs,
) -> PreTrainedTokenizerBase:
    """The released tokenizer (hub id or local copy) with mask/pad/cls/sep ids set.

    - adds ``<|mask|>`` as the mask token when the tokenizer has none (as the release does);
    - sets missing pad / cls / sep tokens from the end-of-text token (``eos``, else ``unk``), so padding and
      ``[CLS] … [SEP]`` templates work;
    - with ``vocab_size`` (default 50,368, the model's embedding rows, a multiple of 64), appends unused
      ``<|reserved_i|>`` tokens until ``len(tokenizer) == vocab_size``, so every id the tokenizer can produce
      has an embedding row and no ``resize_token_embeddings`` is needed. A tokenizer that is already larger is
      an error.
    """
    tok = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    if tok.mask_token is None:
        tok.add_special_tokens({"mask_token": mask_token})
    fallback = tok.eos_token or tok.unk_token
    for role in ("pad_token", "cls_token", "sep_token"):
        if getattr(tok, role) is None:
            if fallback is None:
                raise ValueError(f"{name_or_path}: no {role} and no eos/unk token to stand in for it")
            tok.add_special_tokens({role: fallback})
    if vocab_size is not None:
        if len(tok) > vocab_size:
            raise ValueError(f"{name_or_path} has {len(tok)} tokens, more than the model's vocab_size={vocab_size}")
        filler = [f"<|reserved_{i}|>" for i in range(vocab_size - len(tok))]
        if filler:
            tok.add_special_tokens({"additional_special_tokens": filler}, replace_extra_special_tokens=False)
        if len(tok) != vocab_size:
            raise ValueError(f"could not pad {name_or_path} to {vocab_size} tokens (got {len(tok)})")
    return tok
