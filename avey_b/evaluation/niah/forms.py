"""The two forms of ``niah evaluate`` (``--form``) and what each changes: the head, the optimizer, the defaults
and the headline score."""

from __future__ import annotations

from typing import Any

from ...data.niah import prompt_encoding

FORMS = ("qa", "token-classification")


#: What each form changes when not told otherwise. ``qa``: this library's extractive-QA head (start/end logits).
#: ``token-classification``: the authors' (the release's EncodEval LC configs): a 2-label token classifier, 32
#: examples per optimizer step as micro-batches of 1 with gradient accumulation, 1 epoch, learning rates
#: {1e-4, 5e-4}, AdamW with beta = (0.9, 0.95), epsilon 1e-5, weight decay 0.1.
FORM_DEFAULTS: dict[str, dict[str, Any]] = {
    "qa": {"lr": [5e-5], "batch_size": 8, "weight_decay": 0.0, "micro_batch": None},
    "token-classification": {"lr": [1e-4, 5e-4], "batch_size": 32, "weight_decay": 0.1, "micro_batch": 1},
}


#: AdamW's (beta, epsilon) per form: the token-classification form takes the authors' (every EncodEval config)
OPTIMIZER = {"qa": {"betas": (0.9, 0.999), "eps": 1e-8}, "token-classification": {"betas": (0.9, 0.95), "eps": 1e-5}}

#: each form's headline score
HEADLINE = {"qa": "exact", "token-classification": "score"}


def form_of(rec: dict[str, Any]) -> str:
    return rec.get("form", "qa")  # records written before the forms existed are the qa form's


def longest_input(tok, examples: list[dict[str, Any]], form: str, end: str | None = None) -> int:
    """The longest model input among ``examples`` (QA-harness format) in tokens: question and passage as a pair
    (``qa``), or the authors' prompt (``token-classification``, :func:`avey_b.data.niah.prompt_encoding`)."""
    if form == "qa":
        return max(len(tok(e["question"], e["context"])["input_ids"]) for e in examples)
    return max(len(prompt_encoding(tok, e["question"], e["context"], end)["input_ids"]) for e in examples)
