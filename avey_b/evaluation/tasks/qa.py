"""Extractive question answering (QA): SQuAD, SQuAD v2, ReCoRD — F1, 4 epochs (paper §5.1).

Data: ``rajpurkar/squad``, ``rajpurkar/squad_v2``, ``hgissbkh/record`` (SQuAD columns ``id``, ``question``,
``context``, ``answers{text, answer_start}``; the SuperGLUE ReCoRD columns ``passage``/``query``/``answers``
are also accepted, answer offsets then found by search) or a local SQuAD JSON file (``data`` ->
``paragraphs`` -> ``qas``, v2 ``is_impossible`` honoured).

standard protocol (default):
  question + context windows of ``max_length`` tokens overlapping by ``doc_stride`` tokens, so no part of a
  long context is lost; a window that does not contain the whole answer (and every window of an
  unanswerable question) is trained to point at position 0 (the "null" position). At scoring time the best
  span over all windows of a question is chosen from the start/end logits (``start <= end``, both in the
  context, at most ``max_answer_length`` tokens) and cut from the original context by character offsets;
  for SQuAD v2 the empty answer is predicted when the null score (start+end logits at position 0, the
  smallest over windows) beats the best span. Scored with the official SQuAD EM/F1.
paper protocol (EncodEval):
  a 2-label token classifier (answer token or not) on one input, ``Question: {q}\nContext: `` paired with the
  context followed by the end token (:func:`base.end_token`), no special tokens added, only the context truncated
  (at ``max_length``; none: the model's limit). SQuAD and SQuAD v2: question and context stripped of surrounding
  white space, the answer offsets left as the data gives them (EncodEval's ``strip_whitespace``); ReCoRD: as given.
  Labels: 1 on the tokens of the first gold answer, 0 on every other token (question tokens included); a question
  without an answer is kept and labels every token 0; a row needs no ``id``, and an answer not at its offset is
  counted, not refused (:func:`paper_answer_labels`). Score: per question, the F1 between the predicted and gold
  sets of answer-token positions (:func:`metrics.token_set_f1`), against the first gold answer only, the
  predictions read over the padded width of EncodEval's scoring batches (``eval_batch_size``: 16, ReCoRD 4);
  ``f1_real_tokens`` beside it reads each question's own tokens only. Like EncodEval, it trains on 95% of the
  training split (the rest is its validation set) and scores on the official validation split.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from avey_b.utils.files import DataFileError, load_json

from ..metrics import padded_answer_positions, squad_scores, token_set_f1
from . import base

logger = logging.getLogger(__name__)

#: How the paper protocol's QA ``f1`` was computed (written into each cell's metrics).
PAPER_QA_SCORING = ("EncodEval token-set F1: answer predictions at the padding positions of its scoring batches "
                    "({batch} questions, padded to the longest) counted")


def read_squad_json(path: str) -> list[dict[str, Any]]:
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise DataFileError(f"{path} does not look like a SQuAD JSON file: expected a top-level 'data' list, "
                            f"found {found}")
    out, where = [], "article 0"
    try:
        for a_i, article in enumerate(data["data"]):
            for p_i, para in enumerate(article["paragraphs"]):
                where = f"article {a_i}, paragraph {p_i}"
                for qa in para["qas"]:
                    answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                    out.append({
                        "id": str(qa["id"]), "question": qa["question"], "context": para["context"],
                        "answers": [{"text": a["text"], "start": int(a["answer_start"])} for a in answers],
                    })
    except (KeyError, TypeError) as e:
        raise DataFileError(f"{path}: {where}: missing SQuAD field {e}") from None
    return out


def _from_hub_row(row: dict[str, Any], index: int, source: str, protocol: str = "standard") -> dict[str, Any]:
    """One Hub row as an example. ``id`` names a question in the standard protocol's SQuAD scores; the paper
    protocol (EncodEval, which drops the column) needs none, and a row without it is numbered by its position."""
    if "context" in row:  # SQuAD schema
        ans = row["answers"]
        answers = [{"text": t, "start": int(s)} for t, s in zip(ans["text"], ans["answer_start"], strict=False)]
        if "id" in row:
            qid = str(row["id"])
        elif protocol == "paper":
            qid = f"{source}#{index}"
        else:
            raise ValueError(f"{source}: row {index} has no 'id' column (columns {sorted(row)}); the standard "
                             "protocol's SQuAD scores name each question by it (--protocol paper needs none)")
        return {"id": qid, "question": row["question"], "context": row["context"], "answers": answers}
    if "passage" in row:  # SuperGLUE ReCoRD schema: answers are entity strings
        ctx = row["passage"]
        answers = [{"text": t, "start": ctx.find(t)} for t in row["answers"] if ctx.find(t) >= 0]
        qid = row.get("idx", {})
        qid = f"{qid.get('passage')}-{qid.get('query')}" if isinstance(qid, dict) else str(qid)
        return {"id": qid, "question": row["query"], "context": ctx, "answers": answers}
    raise ValueError(f"{source}: row {index}: unrecognised QA row with columns {sorted(row)}")


def validate_answers(examples: list[dict[str, Any]], source: str, strict: bool = True) -> int:
    """Check that every answer's text sits at its character offset in its context. ``strict``: raise at the first
    mismatch (the standard protocol); otherwise return how many answers are misplaced (the paper protocol carries
    on, as EncodEval does, labelling whatever tokens the offset points at)."""
    misplaced = 0
    for ex in examples:
        for a in ex["answers"]:
            if ex["context"][a["start"]:a["start"] + len(a["text"])] != a["text"]:
                if strict:
                    raise ValueError(
                        f"{source}: question {ex['id']}: answer {a['text']!r} is not at character {a['start']} "
                        "of its context"
                    )
                misplaced += 1
    return misplaced


def windows(examples: list[dict[str, Any]], tokenizer, cfg: base.RunConfig, train: bool) -> list[dict[str, Any]]:
    """Tokenized (question, context window) features. Each carries ``example`` (index into ``examples``)
    and ``offsets`` (character span in the context per token, None outside the context); training features
    also ``start_positions``/``end_positions`` (0 when the window lacks the answer)."""
    if cfg.max_length is not None and cfg.doc_stride >= cfg.max_length:
        raise ValueError(f"doc_stride ({cfg.doc_stride}) must be smaller than max_length ({cfg.max_length})")
    window = ({"truncation": "only_second", "max_length": cfg.max_length, "stride": cfg.doc_stride}
              if cfg.max_length is not None else {"truncation": False})  # None: one window, the whole context
    enc = tokenizer(
        [e["question"].lstrip() for e in examples], [e["context"] for e in examples],
        return_overflowing_tokens=True, return_offsets_mapping=True, **window,
    )
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    feats = []
    for i in range(len(enc["input_ids"])):
        ex_idx = enc["overflow_to_sample_mapping"][i]
        seq = enc.sequence_ids(i)
        offsets = [tuple(o) if s == 1 else None for o, s in zip(enc["offset_mapping"][i], seq, strict=False)]
        f = {k: enc[k][i] for k in keys}
        f["example"], f["offsets"] = ex_idx, offsets
        if train:
            f["start_positions"], f["end_positions"] = _answer_positions(examples[ex_idx], offsets)
        feats.append(f)
    return feats


def _answer_positions(example: dict[str, Any], offsets: list) -> tuple[int, int]:
    if not example["answers"]:
        return 0, 0
    a = example["answers"][0]
    start_char, end_char = a["start"], a["start"] + len(a["text"])
    ctx = [i for i, o in enumerate(offsets) if o is not None]
    if not ctx or offsets[ctx[0]][0] > start_char or offsets[ctx[-1]][1] < end_char:
        return 0, 0  # the answer is not (entirely) in this window
    start = next(i for i in ctx if offsets[i][1] > start_char)
    end = next(i for i in reversed(ctx) if offsets[i][0] < end_char)
    return start, end


def best_answer(context: str, features: list[dict[str, Any]], start_logits: list, end_logits: list,
                max_answer_length: int, allow_null: bool, n_best: int = 20) -> str:
    """The answer text of one question from the logits of all its windows (see module docstring)."""
    best_score, best_text = -float("inf"), ""
    null_score = float("inf")
    for f, s_log, e_log in zip(features, start_logits, end_logits, strict=False):
        s_log, e_log = torch.as_tensor(s_log).float(), torch.as_tensor(e_log).float()
        null_score = min(null_score, float(s_log[0] + e_log[0]))
        offsets = f["offsets"]
        n = min(len(offsets), s_log.numel())
        starts = s_log[:n].topk(min(n_best, n)).indices.tolist()
        ends = e_log[:n].topk(min(n_best, n)).indices.tolist()
        for s in starts:
            for e in ends:
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(s_log[s] + e_log[e])
                if score > best_score:
                    best_score, best_text = score, context[offsets[s][0]:offsets[e][1]]
    if allow_null and null_score > best_score:
        return ""
    return best_text


def paper_answer_labels(offsets: list, sequence_ids: list, answer: dict[str, Any] | None) -> list[int]:
    """Paper protocol (EncodEval's labels, its loops step for step): 1 from the last context token starting at or
    before the answer's first character to the first context token from which every later one ends at or after
    the answer's end, 0 everywhere else (question tokens included). No answer, or an answer outside the
    (truncated) context, labels every token 0. ``offsets`` are character offsets into the context for tokens of the
    second sequence (``sequence_ids`` 1). As in EncodEval, an offset before the context's first token puts the start
    on the token before it (the prompt's last), and offsets are taken as given (not checked against the text)."""
    labels = [0] * len(offsets)
    context = [i for i, s in enumerate(sequence_ids) if s == 1]
    if answer is None or not context:
        return labels
    start_char, end_char = answer["start"], answer["start"] + len(answer["text"])
    first, last = context[0], context[-1]
    if offsets[first][0] > end_char or offsets[last][1] < start_char:
        return labels
    idx = first
    while idx <= last and offsets[idx][0] <= start_char:
        idx += 1
    start = idx - 1
    idx = last
    while idx >= first and offsets[idx][1] >= end_char:
        idx -= 1
    end = idx + 1
    if (start, end) == (0, 0):  # EncodEval's "no answer" marker
        return labels
    for i in range(max(start, 0), end + 1):
        labels[i] = 1
    return labels


def paper_example(example: dict[str, Any], strip: bool) -> tuple[str, str, dict[str, Any] | None]:
    """(question, context, first answer) as EncodEval reads a QA row: with ``strip`` (its SQuAD and SQuAD v2
    loaders), question and context stripped of surrounding white space and the answer's offset left as the data
    gives it (EncodEval does not move it, so an answer in a context that started with white space is labelled that
    many characters further on); without (its ReCoRD loader), both as they are. Only the first gold answer."""
    question, context = example["question"], example["context"]
    if strip:
        question, context = question.strip(), context.strip()
    answer = None
    if example["answers"]:
        a = example["answers"][0]
        answer = {"text": a["text"], "start": a["start"]}
    return question, context, answer


class QuestionAnsweringTask(base.Task):
    family = "QA"
    metric = "f1"
    default_epochs = 4.0
    hub_name = ""
    allow_null = False
    paper_strip = True
    """Paper protocol: strip question and context of surrounding white space (EncodEval's SQuAD loaders; not its
    ReCoRD one)."""

    def __init__(self) -> None:
        self.misplaced_answers: dict[str, int] = {}
        """Paper protocol: answers whose text is not at their offset, per ``which`` ("train", "eval")."""

    def load(self, which: str, files: base.DataFiles, protocol: str = "standard") -> list[dict[str, Any]]:
        """The examples of ``which``. Standard protocol: every answer checked against its context (a misplaced one
        is an error), questions without an answer dropped from training unless the task has them (SQuAD v2).
        Paper protocol (EncodEval): every row kept, in the split's order (its 95% training part is drawn from the
        whole split), answerless ones trained to label no token; misplaced answers counted
        (:attr:`misplaced_answers`), not refused."""
        path = files.train if which == "train" else files.eval
        if path is not None:
            examples, source = read_squad_json(path), path
        else:
            split = self.hub_split(which, files)
            source = f"{self.hub_name}:{split}"
            examples = [_from_hub_row(r, i, source, protocol)
                        for i, r in enumerate(base.load_hub(self.hub_name, None, split))]
        paper = protocol == "paper"
        misplaced = validate_answers(examples, source, strict=not paper)
        if misplaced:
            self.misplaced_answers[which] = misplaced
            logger.warning("%s: %d answer(s) not at their character offset; labelled where the offset points, as "
                           "EncodEval does", source, misplaced)
        if not self.allow_null and which == "train" and not paper:
            examples = [e for e in examples if e["answers"]]  # nothing to learn from
        return examples

    def head(self, cfg) -> str:
        return "token-classification" if cfg.protocol == "paper" else "question-answering"

    def model_kwargs(self, train, evaluation, cfg) -> dict[str, Any]:
        return {"num_labels": 2}

    # -- paper protocol: one truncated window, 2-label token classifier ---------------------------------
    def _paper_features(self, examples, tokenizer, cfg) -> list[dict[str, Any]]:
        """EncodEval's input: ``Question: {q}\\nContext: `` paired with the context followed by the end token, no
        special tokens added, only the context truncated; ``labels`` from the first gold answer (0/1 per token)."""
        end = self.end(tokenizer)
        rows = [paper_example(e, self.paper_strip) for e in examples]
        try:
            enc = tokenizer([f"Question: {q}\nContext: " for q, _, _ in rows], [c + end for _, c, _ in rows],
                            add_special_tokens=False, return_offsets_mapping=True,
                            **base.truncation(cfg.max_length, "only_second"))
        except Exception as e:  # the Rust tokenizer raises a bare Exception
            if "Truncation error" not in str(e):
                raise
            raise ValueError(f"{self.name}: max_length {cfg.max_length} leaves no room for the context after a "
                             f"question prompt (only the context is truncated); raise max_length") from e
        keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
        feats = []
        for i, (_, _, answer) in enumerate(rows):
            f = {k: enc[k][i] for k in keys}
            f["labels"] = paper_answer_labels(enc["offset_mapping"][i], enc.sequence_ids(i), answer)
            feats.append(f)
        return feats

    def train_features(self, examples, tokenizer, cfg) -> list[dict[str, Any]]:
        if cfg.protocol == "paper":
            return self._paper_features(examples, tokenizer, cfg)
        feats = windows(examples, tokenizer, cfg, train=True)
        return [{k: v for k, v in f.items() if k not in ("example", "offsets")} for f in feats]

    def _logits(self, model, feats: list[dict[str, Any]], tokenizer, cfg):
        device = next(model.parameters()).device
        keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in feats[0]]
        for start in range(0, len(feats), cfg.eval_batch_size):
            chunk = [{k: f[k] for k in keys} for f in feats[start:start + cfg.eval_batch_size]]
            batch = {k: v.to(device) for k, v in base.pad_batch(chunk, base.pad_id_of(tokenizer)).items()}
            with torch.no_grad(), base.autocast_ctx(device, cfg.precision):
                yield start, model(**batch)

    def evaluate(self, model, tokenizer, examples, cfg) -> dict[str, float]:
        if cfg.protocol == "paper":
            return self._paper_scores(model, tokenizer, examples, cfg)

        predictions = self.predict(model, tokenizer, examples, cfg)
        golds = {ex["id"]: [a["text"] for a in ex["answers"]] for ex in examples}
        scores = squad_scores(predictions, golds)
        return {k: (100 * v if k != "total" else v) for k, v in scores.items()} | {"n_eval": len(examples)}

    def _paper_scores(self, model, tokenizer, examples, cfg) -> dict[str, Any]:
        """EncodEval's QA score: per question, the F1 between the positions predicted 1 and those labelled 1
        (:func:`metrics.token_set_f1`), averaged. Its batches are ``eval_batch_size`` consecutive questions (16;
        ReCoRD 4) padded to the longest, and the predictions are read over the padded width: a 1 predicted at a
        padding position counts (:func:`metrics.padded_answer_positions`). ``f1`` is that score; ``f1_real_tokens``
        the same over each question's own tokens only (never lower)."""
        feats = self._paper_features(examples, tokenizer, cfg)
        inputs = [{k: v for k, v in f.items() if k != "labels"} for f in feats]
        padded, real = [], []
        for start, out in self._logits(model, inputs, tokenizer, cfg):
            preds = out.logits.float().argmax(-1).tolist()
            for j, p in enumerate(preds):
                f = feats[start + j]
                gold = [i for i, y in enumerate(f["labels"]) if y == 1]
                padded.append(token_set_f1(padded_answer_positions(p, None), gold))
                real.append(token_set_f1(padded_answer_positions(p, len(f["input_ids"])), gold))
        return {"f1": 100 * sum(padded) / len(padded), "f1_real_tokens": 100 * sum(real) / len(real),
                "scoring": PAPER_QA_SCORING.format(batch=cfg.eval_batch_size), "n_eval": len(examples),
                "misplaced_answers": dict(self.misplaced_answers)}

    def predict(self, model, tokenizer, examples, cfg) -> dict[str, str]:
        """The predicted answer text per example id (windows with ``cfg.doc_stride``, the best span over them)."""
        feats = windows(examples, tokenizer, cfg, train=False)
        per_example: dict[int, list] = {}
        for start, out in self._logits(model, feats, tokenizer, cfg):
            s_all, e_all = out.start_logits.float().cpu(), out.end_logits.float().cpu()
            for j in range(s_all.shape[0]):
                f = feats[start + j]
                n = len(f["input_ids"])
                per_example.setdefault(f["example"], []).append((f, s_all[j, :n], e_all[j, :n]))
        predictions = {}
        for i, ex in enumerate(examples):
            items = per_example.get(i, [])
            predictions[ex["id"]] = best_answer(
                ex["context"], [f for f, _, _ in items], [s for _, s, _ in items], [e for _, _, e in items],
                cfg.max_answer_length, self.allow_null,
            )
        return predictions


class SQuAD(QuestionAnsweringTask):
    name, display, hub_name = "squad", "SQuAD", "rajpurkar/squad"


class SQuADv2(QuestionAnsweringTask):
    name, display, hub_name, allow_null = "squad_v2", "SQuAD v2", "rajpurkar/squad_v2", True


class ReCoRD(QuestionAnsweringTask):
    name, display, hub_name = "record", "ReCoRD", "hgissbkh/record"
    paper_strip = False  # EncodEval's ReCoRD loader maps no stripping
