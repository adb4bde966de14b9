"""Sequence classification (SC): MNLI (matched), QQP, SST-2 — accuracy, 1 epoch (paper §5.1).

Data: ``nyu-mll/glue`` (configs mnli / qqp / sst2) or local GLUE TSV files (header line; the column names
of the original GLUE release and of the Hub version are both recognised) or JSONL with the same fields.
MNLI string labels are mapped to the Hub's ids (entailment 0, neutral 1, contradiction 2).

standard protocol: the tokenizer's own template (``[CLS] a [SEP] b [SEP]`` for BERT, ``<s> a </s></s> b </s>`` for
RoBERTa). paper protocol (EncodEval): no special tokens are added; the input is the sentence, or
``[CLS]{a}[SEP]{b}`` as literal text for a pair (special tokens only for a tokenizer that has them under those
names), followed by the end token (:func:`base.end_token`). Like EncodEval, the paper protocol trains on 95% of
the training split (the rest is EncodEval's validation set) and scores on the official validation split.
"""

from __future__ import annotations

from typing import Any

import torch

from avey_b.utils.files import DataFileError

from ..metrics import accuracy
from . import base

# text column candidates (first match wins): original GLUE TSV names and Hub names
_TEXT_A = ("sentence", "premise", "sentence1", "question1", "text")
_TEXT_B = ("hypothesis", "sentence2", "question2", "text_pair")
_LABEL = ("label", "gold_label", "is_duplicate")
_MNLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}


class SequenceClassificationTask(base.Task):
    family = "SC"
    metric = "accuracy"
    default_epochs = 1.0
    hub_config = ""
    num_labels = 2
    label_names: tuple[str, ...] = ()
    """Class names by id (GLUE's), saved as the model's ``id2label`` so a pipeline says ``positive``, not
    ``LABEL_1``."""
    pair = False

    def load(self, which: str, files: base.DataFiles, protocol: str = "standard") -> list[dict[str, Any]]:
        path = files.train if which == "train" else files.eval
        if path is not None:
            rows, source = base.read_table(path), path
        else:
            split = self.hub_split(which, files)
            source = f"nyu-mll/glue/{self.hub_config}:{split}"
            hub = base.load_hub("nyu-mll/glue", self.hub_config, split)
            rows = [(f"{source} row {i}", r) for i, r in enumerate(hub)]
        groups = {"text": _TEXT_A, "label": _LABEL} | ({"second text": _TEXT_B} if self.pair else {})
        base.require_columns(rows[0][1] if rows else {}, groups, source, self.display)
        return [self._example(row, where) for where, row in rows]

    def _example(self, row: dict[str, Any], where: str) -> dict[str, Any]:
        a = _first(row, _TEXT_A, where, "text")
        b = _first(row, _TEXT_B, where, "second text") if self.pair else None
        raw = _first(row, _LABEL, where, "label")
        label = _MNLI_LABELS.get(raw, raw) if isinstance(raw, str) else raw
        try:
            label = int(label)
        except (TypeError, ValueError):
            raise DataFileError(f"{where}: label {raw!r} is not a class id of {self.name}") from None
        if not 0 <= label < self.num_labels:
            # GLUE test files carry -1 (hidden labels): they cannot be scored
            raise DataFileError(f"{where}: label {label} outside [0, {self.num_labels}) for {self.name}")
        return {"text": a, "text_pair": b, "label": label}

    def head(self, cfg: base.RunConfig) -> str:
        return "sequence-classification"

    def model_kwargs(self, train, evaluation, cfg) -> dict[str, Any]:
        names = self.label_names or tuple(f"LABEL_{i}" for i in range(self.num_labels))
        return {"num_labels": self.num_labels, "id2label": dict(enumerate(names)),
                "label2id": {n: i for i, n in enumerate(names)}}

    def _encode(self, examples, tokenizer, cfg) -> list[dict[str, Any]]:
        if cfg.protocol == "paper":  # EncodEval: one string, the pair joined by literal [CLS]/[SEP], + end token
            end = self.end(tokenizer)
            texts = [(f"[CLS]{e['text']}[SEP]{e['text_pair']}" if self.pair else e["text"]) + end for e in examples]
            enc = tokenizer(texts, add_special_tokens=False, **base.truncation(cfg.max_length))
        else:
            pairs = [e["text_pair"] for e in examples] if self.pair else None
            enc = tokenizer([e["text"] for e in examples], pairs, **base.truncation(cfg.max_length))
        keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
        return [{k: enc[k][i] for k in keys} for i in range(len(examples))]

    def train_features(self, examples, tokenizer, cfg) -> list[dict[str, Any]]:
        feats = self._encode(examples, tokenizer, cfg)
        for f, e in zip(feats, examples, strict=False):
            f["labels"] = e["label"]
        return feats

    def predict(self, model, tokenizer, examples, cfg) -> list[int]:
        device = next(model.parameters()).device
        feats = self._encode(examples, tokenizer, cfg)
        preds: list[int] = []
        for chunk in base.batches(feats, cfg.eval_batch_size):
            batch = {k: v.to(device) for k, v in base.pad_batch(list(chunk), base.pad_id_of(tokenizer)).items()}
            with torch.no_grad(), base.autocast_ctx(device, cfg.precision):
                logits = model(**base.model_inputs(batch)).logits
            preds.extend(logits.float().argmax(-1).tolist())
        return preds

    def evaluate(self, model, tokenizer, examples, cfg) -> dict[str, float]:
        preds = self.predict(model, tokenizer, examples, cfg)
        return {"accuracy": 100 * accuracy(preds, [e["label"] for e in examples]), "n_eval": len(examples)}


def _first(row: dict[str, Any], names: tuple[str, ...], where: str, what: str):
    for n in names:
        if n in row and row[n] is not None:
            return row[n]
    raise DataFileError(f"{where}: no {what} column; expected one of {names}, found {sorted(row)}")


class MNLI(SequenceClassificationTask):
    name, display, hub_config, num_labels, pair = "mnli", "MNLI", "mnli", 3, True
    label_names = tuple(_MNLI_LABELS)  # entailment, neutral, contradiction
    eval_split = "validation_matched"


class QQP(SequenceClassificationTask):
    name, display, hub_config, num_labels, pair = "qqp", "QQP", "qqp", 2, True
    label_names = ("not_duplicate", "duplicate")


class SST2(SequenceClassificationTask):
    name, display, hub_config, num_labels, pair = "sst2", "SST-2", "sst2", 2, False
    label_names = ("negative", "positive")
