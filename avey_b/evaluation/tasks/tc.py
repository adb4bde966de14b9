"""Token classification (TC): CoNLL-2003, OntoNotes 5, UNER (English) — 1 epoch (paper §5.1).

Data: ``hgissbkh/conll2003-en`` (columns ``words`` and ``ner``), ``hgissbkh/ontonotes5`` (``tokens``, ``tags``),
``hgissbkh/uner_en`` (``tokens``, ``ner_tags``) — the columns EncodEval renames to ``tokens``/``tags`` —, tags as
``ClassLabel`` ids or strings (ids without names: the paper protocol only, as EncodEval reads them), or local
CoNLL column files (:func:`avey_b.data.conll.read_conll`: the word in the first column, the entity tag in the last;
a file whose tags are not entity tags is refused at its first line). Tags are normalised to IOB2 (the original
CoNLL-2003 files are IOB1).

Word -> token alignment: :mod:`avey_b.finetuning.alignment` (the tokenizer's character offsets over the words
joined by single spaces), shared with the own-data tagger.

- standard protocol: the label sits on the first sub-token of each word, other sub-tokens get -100; the
  word's prediction is its first sub-token's; words cut off by ``max_length`` are predicted ``O`` (they
  count as misses, so truncation cannot inflate the score); entity-level F1 by seqeval.
- paper protocol (EncodEval): the input is the words joined by spaces followed by the end token
  (:func:`base.end_token`), no special tokens added; the labels are the data's own tags (no IOB2 rewriting), the
  label set the Hub dataset's class list; every sub-token carries its word's label; the word's prediction is the
  majority vote of its sub-tokens (ties: the smallest label id); score = per-sentence macro F1 over the word
  labels of the words that reached the model (those cut off by truncation are left out, as EncodEval does).
"""

from __future__ import annotations

from typing import Any

import torch

from avey_b.data.conll import read_conll
from avey_b.finetuning.alignment import align_labels, word_index_of_tokens, word_predictions

from ..metrics import entity_f1, iob1_to_iob2, per_sentence_macro_f1
from . import base

#: Hub columns holding a sentence's words, in order of preference (``words``: ``hgissbkh/conll2003-en``, which
#: EncodEval renames to ``tokens``).
WORD_COLUMNS = ("tokens", "words")
#: Hub columns holding its entity tags (``ner``: ``hgissbkh/conll2003-en``; ``ner_tags``: ``hgissbkh/uner_en``;
#: EncodEval renames both to ``tags``). Part-of-speech and chunk columns are never read.
TAG_COLUMNS = ("tags", "ner_tags", "ner", "labels")


def _integer_feature(feature) -> bool:
    """Whether a ``datasets`` feature holds integers (a ``ClassLabel`` or an integer ``Value``)."""
    dtype = getattr(feature, "dtype", None)
    return getattr(feature, "names", None) is not None or (isinstance(dtype, str) and "int" in dtype)


class TokenClassificationTask(base.Task):
    family = "TC"
    metric = "f1"
    default_epochs = 1.0
    hub_name = ""
    eval_split = "test"
    paper_num_labels = 0
    """EncodEval's ``num_labels`` for the task (its TC configs): the label ids of a Hub column without class names."""

    def load(self, which: str, files: base.DataFiles, protocol: str = "standard") -> list[dict[str, Any]]:
        path = files.train if which == "train" else files.eval
        if path is not None:
            sents = [{"tokens": s.tokens, "tags": s.tags} for s in read_conll(path, entity_tags=True)]
        else:
            split = self.hub_split(which, files)
            sents = self._hub_sentences(base.load_hub(self.hub_name, None, split), f"{self.hub_name}:{split}",
                                        protocol)
        return [{"tokens": s["tokens"], "tags": iob1_to_iob2(s["tags"]), "source_tags": list(s["tags"])}
                for s in sents if s["tokens"]]

    def _hub_sentences(self, ds, source: str, protocol: str) -> list[dict[str, list[str]]]:
        """The sentences of a Hub split, read from the columns the Hub's datasets hold (:data:`WORD_COLUMNS`,
        :data:`TAG_COLUMNS`: EncodEval renames CoNLL-2003's ``words``/``ner`` and UNER's ``ner_tags``). Integer tags
        take the names of their ``ClassLabel`` feature; without names, the paper protocol uses the ids as labels
        (as EncodEval does, with its ``num_labels``: :attr:`paper_num_labels`), the standard protocol stops (its
        entity F1 needs the tags' names)."""
        columns = ds.column_names
        word_col = next((c for c in WORD_COLUMNS if c in columns), None)
        tag_col = next((c for c in TAG_COLUMNS if c in columns), None)
        if word_col is None or tag_col is None:
            raise ValueError(f"{source}: expected a words column (one of {list(WORD_COLUMNS)}) and a tags column "
                             f"(one of {list(TAG_COLUMNS)}), got {columns}")
        feature = ds.features[tag_col]
        names = getattr(getattr(feature, "feature", None), "names", None)
        integer = _integer_feature(getattr(feature, "feature", None))
        if names is None and integer:
            if protocol != "paper":
                raise ValueError(
                    f"{source}: column {tag_col!r} holds integer tags without class names (not a ClassLabel "
                    "feature), and the standard protocol's entity F1 needs the tags' names (B-PER, I-PER, O, ...): "
                    "give the column ClassLabel names or string tags, or use --protocol paper, which scores the ids "
                    f"as EncodEval does ({self.paper_num_labels} labels for {self.name})")
            names = [str(i) for i in range(self.paper_num_labels)]
        if names:
            self._class_names = list(names)
        sents = []
        for i, row in enumerate(ds):
            tags = row[tag_col]
            if tags and isinstance(tags[0], int):
                if names is None:  # an untyped column of integers (e.g. built from Python lists)
                    raise ValueError(f"{source}: row {i}: integer tags without class names in column {tag_col!r}")
                bad = [t for t in tags if not 0 <= t < len(names)]
                if bad:
                    raise ValueError(f"{source}: row {i}: tag id {bad[0]} outside the {len(names)} labels of column "
                                     f"{tag_col!r}")
                tags = [names[t] for t in tags]
            if len(tags) != len(row[word_col]):
                raise ValueError(f"{source}: row {i} has {len(row[word_col])} words but {len(tags)} tags")
            sents.append({"tokens": list(row[word_col]), "tags": list(tags)})
        return sents

    @staticmethod
    def _tags(example: dict[str, Any], cfg) -> list[str]:
        """The word labels a protocol trains on and scores: IOB2 (standard), or the data's own tags (paper:
        EncodEval uses the dataset's class ids as they are)."""
        return example.get("source_tags", example["tags"]) if cfg.protocol == "paper" else example["tags"]

    def labels(self, train, evaluation, cfg=None) -> list[str]:
        """Label list: ``O`` first, then the other tags sorted (train and evaluation sets together, so an
        evaluation-only tag still has a class). Paper protocol on Hub data: the dataset's class list, in its order
        (EncodEval's ``num_labels``: 9, 37, 7)."""
        paper = cfg is not None and cfg.protocol == "paper"
        tags = {t for ex in list(train) + list(evaluation) for t in (self._tags(ex, cfg) if paper else ex["tags"])}
        names = getattr(self, "_class_names", None)
        if paper and names and tags <= set(names):
            return list(names)
        return ["O"] + sorted(tags - {"O"})

    def head(self, cfg) -> str:
        return "token-classification"

    def model_kwargs(self, train, evaluation, cfg) -> dict[str, Any]:
        # Also fixes the label list used by train_features / predict for this run (called first).
        names = self.labels(train, evaluation, cfg)
        self._label_list = names
        return {"num_labels": len(names), "id2label": dict(enumerate(names)),
                "label2id": {n: i for i, n in enumerate(names)}}

    def _encode(self, examples, tokenizer, cfg) -> tuple[list[dict[str, Any]], list[list[int | None]]]:
        texts = [" ".join(e["tokens"]) for e in examples]
        if cfg.protocol == "paper":  # EncodEval: the words joined by spaces + end token, no special tokens added
            end = self.end(tokenizer)
            enc = tokenizer([t + end for t in texts], add_special_tokens=False, return_offsets_mapping=True,
                            **base.truncation(cfg.max_length))
        else:
            enc = tokenizer(texts, return_offsets_mapping=True, **base.truncation(cfg.max_length))
        feats, word_ids = [], []
        keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
        for i, e in enumerate(examples):
            feats.append({k: enc[k][i] for k in keys})
            word_ids.append(word_index_of_tokens(e["tokens"], enc["offset_mapping"][i]))
        return feats, word_ids

    def train_features(self, examples, tokenizer, cfg) -> list[dict[str, Any]]:
        label2id = {n: i for i, n in enumerate(self._label_list)}
        feats, word_ids = self._encode(examples, tokenizer, cfg)
        for f, w, e in zip(feats, word_ids, examples, strict=False):
            f["labels"] = align_labels(w, [label2id[t] for t in self._tags(e, cfg)],
                                       every_subtoken=cfg.protocol == "paper")
        return feats

    def predict(self, model, tokenizer, examples, cfg) -> list[list[str | None]]:
        """Per word, the predicted tag; for a word cut off by ``max_length``, ``O`` (standard) or None (paper:
        EncodEval scores only the words that reach the model)."""
        device = next(model.parameters()).device
        feats, word_ids = self._encode(examples, tokenizer, cfg)
        names = self._label_list
        out: list[list[str]] = []
        for start in range(0, len(feats), cfg.eval_batch_size):
            chunk = feats[start:start + cfg.eval_batch_size]
            batch = {k: v.to(device) for k, v in base.pad_batch(chunk, base.pad_id_of(tokenizer)).items()}
            with torch.no_grad(), base.autocast_ctx(device, cfg.precision):
                preds = model(**base.model_inputs(batch)).logits.float().argmax(-1).tolist()
            for j, p in enumerate(preds):
                ex = examples[start + j]
                paper = cfg.protocol == "paper"
                ids = word_predictions(word_ids[start + j], p, len(ex["tokens"]), None if paper else 0, paper)
                out.append([None if i is None else names[i] for i in ids])
        return out

    def evaluate(self, model, tokenizer, examples, cfg) -> dict[str, float]:
        gold = [self._tags(e, cfg) for e in examples]
        pred = self.predict(model, tokenizer, examples, cfg)
        if cfg.protocol == "paper":  # the words that reached the model
            kept = [[(g, p) for g, p in zip(gs, ps, strict=True) if p is not None]
                    for gs, ps in zip(gold, pred, strict=True)]
            gold, pred = [[g for g, _ in k] for k in kept], [[p for _, p in k] for k in kept]
            return {"f1": 100 * per_sentence_macro_f1(gold, pred), "n_eval": len(examples)}
        scores = entity_f1(gold, pred)
        return {k: 100 * v for k, v in scores.items()} | {"n_eval": len(examples)}


class CoNLL2003(TokenClassificationTask):
    name, display, hub_name = "conll2003", "CoNLL", "hgissbkh/conll2003-en"
    paper_num_labels = 9


class OntoNotes(TokenClassificationTask):
    name, display, hub_name = "ontonotes", "Onto.", "hgissbkh/ontonotes5"
    paper_num_labels = 37


class UNER(TokenClassificationTask):
    name, display, hub_name = "uner", "UNER", "hgissbkh/uner_en"
    paper_num_labels = 7
