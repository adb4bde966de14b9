"""The ranker's side of NIAH (Avey-B only): which splits it retrieved for the needle's split and the
question's, recorded by a forward hook during the scoring passes."""

from __future__ import annotations

from typing import Any

import torch

#: the retrieval statistics of :func:`needle_retrieval`, reported like the scores
RETRIEVAL = ("needle_to_question", "question_to_needle")


class RankerChoices:
    """Records the ranker's choice of every forward pass inside ``with RankerChoices(model) as rc:``: ``rc.rows`` holds
    one ``(n, k)`` tensor per input row, in order (retrieved split ids, -1 where a slot is empty)."""

    def __init__(self, model):
        self.ranker = next(m for m in model.modules() if m.__class__.__name__ == "Ranker")
        self.rows: list[torch.Tensor] = []

    def _hook(self, module, inputs, out) -> None:
        # Ranker.forward returns a Choice: `retrieved` (B, n, k) the retrieved splits, -1 in empty slots. Rows of a
        # padded batch hold their real tokens first (the model moves them there), so split i of a row is split i of
        # its unpadded input.
        self.rows.extend(out.retrieved.cpu().unbind(0))

    def __enter__(self) -> RankerChoices:
        self.handle = self.ranker.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


def retrieval_stats(tok, examples: list[dict[str, Any]], choices: list[torch.Tensor], S: int, k: int,
                    encode=None) -> dict[str, Any]:
    """How often the ranker paired the needle's split with the question's (see :func:`needle_retrieval`), from the
    choice recorded for each example's input (one window each): ``encode(question, context)``, by default
    ``tokenizer(question, context)``."""
    encode = encode or tok
    if len(choices) != len(examples):
        raise ValueError(f"{len(choices)} recorded choices for {len(examples)} examples: one window each expected")
    q2n = n2q = 0
    for e, idx in zip(examples, choices, strict=True):
        enc = encode(e["question"], e["context"])
        q_splits = sorted({i // S for i, s in enumerate(enc.sequence_ids(0)) if s == 0})
        needle = enc.char_to_token(0, e["answers"][0]["start"], sequence_index=1) // S
        q2n += any(needle in idx[q].tolist() for q in q_splits)
        n2q += any(q in idx[needle].tolist() for q in q_splits)
    return {"question_to_needle": q2n / len(examples), "needle_to_question": n2q / len(examples),
            "n": len(examples), "split_size": S, "k": k}


@torch.no_grad()
def needle_retrieval(model, tok, examples: list[dict[str, Any]], device) -> dict[str, Any]:
    """How often Avey-B's ranker pairs the needle's split with the question's (the paper credits the ranker with
    the length generalization on NIAH). One input at a time, the whole input in one window:
    ``needle_to_question`` is the fraction of examples where a split holding question tokens is among the ``k``
    splits retrieved for the split holding the answer's first token — what brings the question to the tokens the
    QA head scores; ``question_to_needle`` the reverse. With the unidirectional ranker (the paper's choice:
    candidates precede the split) and the question first, only ``needle_to_question`` can happen.
    ``niah evaluate`` records the same statistic from its scoring forward passes (:class:`RankerChoices`)."""
    with RankerChoices(model) as rc:
        for e in examples:
            enc = tok(e["question"], e["context"], return_tensors="pt")
            model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device))
    return retrieval_stats(tok, examples, rc.rows, model.config.split_size, model.config.num_retrieved_splits)

