"""The model ``niah evaluate`` fine-tunes: a pretrained encoder or one built from config (random weights), with
the form's head, its tokenizer and its maximum input length."""

from __future__ import annotations

import torch
import transformers

from avey_b.utils import model_spec

from ..tasks.base import check_model_source, load_model, load_task_tokenizer

HEAD_CLASS = {"qa": "AutoModelForQuestionAnswering", "token-classification": "AutoModelForTokenClassification"}


def load_model_and_tokenizer(name: str, args, cfg, weights: str | None = None):
    """(model with the form's head, tokenizer, max input length or None, how it was built), its weights in
    ``cfg.weights_dtype`` (the paper protocol: bf16, EncodEval's ``dtype: bfloat16``). ``weights``: a fine-tuned
    model saved by an earlier, interrupted run of this cell, loaded instead."""
    head = HEAD_CLASS[args.form]
    dtype = getattr(torch, cfg.weights_dtype)
    spec = model_spec.parse_spec(name)
    if model_spec.is_registered(spec.name):
        if args.tokenizer is None:
            raise SystemExit(f"avey-b niah evaluate: model {name!r} is built from config; pass --tokenizer")
        tok = load_task_tokenizer(args.tokenizer, cfg)
        how = "from config, random weights"
        if weights:
            model = getattr(transformers, head).from_pretrained(weights, dtype=dtype)
        else:
            config = model_spec.build_config(spec)
            config.vocab_size = max(config.vocab_size, len(tok))  # ids of the given tokenizer must fit
            if tok.pad_token_id is not None and hasattr(config, "pad_token_id"):
                config.pad_token_id = tok.pad_token_id
            config.num_labels = 2
            model = getattr(transformers, head).from_config(config).to(dtype)
    else:
        check_model_source(name)  # a missing model is named as the model, not as its tokenizer
        tok = load_task_tokenizer(args.tokenizer or name, cfg)
        how = "pretrained"
        if weights:
            model = getattr(transformers, head).from_pretrained(weights, trust_remote_code=cfg.trust_remote_code,
                                                                dtype=dtype)
        else:
            model = (load_model(name, "question-answering", cfg) if args.form == "qa"
                     else load_model(name, "token-classification", cfg, num_labels=2))
    limit = model_spec.max_length(model.config, respect_rope_window=True)
    return model, tok, limit, how

