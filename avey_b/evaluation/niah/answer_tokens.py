"""The authors' form of NIAH (``--form token-classification``, the release's EncodEval LC configs): label the
answer's tokens with a 2-label token classifier, fine-tune with gradient accumulation, score by token F1."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ...data import niah as niah_data
from ..finetune import train_model
from ..metrics import token_set_f1
from ..tasks.base import Task, autocast_ctx, model_inputs, pad_batch
from .forms import OPTIMIZER


def answer_labels(offsets, sequence_ids, start: int, end: int) -> list[int]:
    """The authors' labels of one input: 1 on the passage tokens holding characters of ``[start, end)`` (the
    answer), 0 on every other token, question and end token included."""
    return [int(sid == 1 and b > a and a < end and b > start) for sid, (a, b) in zip(sequence_ids, offsets,
                                                                                      strict=True)]


def token_classification_features(tok, rows: list[dict[str, Any]], max_length: int | None = None,
                                  end: str | None = None) -> list[dict[str, Any]]:
    """The authors' inputs (:func:`avey_b.data.niah.prompt_encoding`, ended by ``end``) with their labels; the
    passage truncated to ``max_length`` tokens when given (the answer then possibly cut, as EncodEval does)."""
    feats = []
    for r in rows:
        enc = niah_data.prompt_encoding(tok, r["question"], r["context"], end, return_offsets_mapping=True,
                                        truncation="only_second" if max_length else False, max_length=max_length)
        start = r["answers"]["answer_start"][0]
        labels = answer_labels(enc["offset_mapping"], enc.sequence_ids(), start, start + len(r["answers"]["text"][0]))
        feats.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels})
    return feats


def authors_token_score(predicted, gold) -> float:
    """EncodEval's per-example QA score: the F1 between the positions predicted 1 and the positions labelled 1,
    over the whole input (question and end token included); an empty set counts as ``{0}`` (position 0)."""
    return token_set_f1(set(predicted) or {0}, set(gold) or {0})


class _AnswerTokens(Task):
    """The authors' NIAH fine-tuning as a task of :func:`avey_b.evaluation.finetune.train_model`: prebuilt
    features (:func:`token_classification_features`), the token classifier's own loss (the cross-entropy over the
    labelled tokens of a micro-batch, weighted by their share of the step's labelled tokens by ``train_model``)."""

    name, family = "niah-token-classification", "LC"


def train_token_classifier(model, features: list[dict[str, Any]], cfg, micro_batch: int, pad_id: int,
                           device: torch.device) -> dict[str, Any]:
    """Fine-tune as the authors' LC configs do, through the fine-tuning loop every task uses
    (:func:`avey_b.evaluation.finetune.train_model`): each optimizer step takes ``cfg.batch_size`` examples as
    micro-batches of ``micro_batch`` with gradient accumulation, the loss the cross-entropy averaged over every
    labelled token of the step (how the Trainer normalises accumulated steps since transformers 4.46); AdamW with
    the authors' beta and epsilon (:data:`OPTIMIZER`) and ``cfg.weight_decay`` (not on biases and norms, as the
    Trainer does); linear warm-up over ``cfg.warmup_ratio`` of the steps, then linear decay; clipping at
    ``cfg.grad_clip``; ``cfg.epochs`` (default 1) epochs in a seeded random order, or ``cfg.max_steps`` steps."""
    opt = OPTIMIZER["token-classification"]
    cfg = dataclasses.replace(cfg, adam_beta1=opt["betas"][0], adam_beta2=opt["betas"][1], adam_epsilon=opt["eps"],
                              grad_accumulation=math.ceil(cfg.batch_size / micro_batch))
    record = train_model(model, _AnswerTokens(), features, cfg, pad_id, device)
    return record | {"micro_batch": micro_batch, "accumulation": cfg.grad_accumulation}


@torch.no_grad()
def predict_answer_tokens(model, feats: list[dict[str, Any]], batch_size: int, pad_id: int, precision: str
                          ) -> list[set[int]]:
    """Per input, the positions the token classifier labels 1 (padding never counts)."""
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(feats), batch_size):
        chunk = [{k: f[k] for k in ("input_ids", "attention_mask")} for f in feats[i:i + batch_size]]
        b = {k: v.to(device) for k, v in pad_batch(chunk, pad_id).items()}
        with autocast_ctx(device, precision):
            logits = model(**model_inputs(b)).logits
        pred = (logits.float().argmax(-1) == 1) & b["attention_mask"].bool()
        out.extend({int(j) for j in row.nonzero().flatten()} for row in pred.cpu())
    return out

