"""Scoring one test length of a fine-tuned model: the form's scores beside the chance level, "max_length" past
the model's window, "oom" when it runs out of memory; the ranker's choice recorded in the same passes."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import torch

from avey_b.utils.device import is_oom

from ...data import niah as niah_data
from ..metrics import squad_exact, squad_f1, squad_scores
from ..tasks.base import pad_id_of
from ..tasks.qa import QuestionAnsweringTask
from .answer_tokens import authors_token_score, predict_answer_tokens, token_classification_features
from .forms import longest_input
from .needles import answer_token_breakdown, needle_breakdown, needle_token_sets
from .retrieval import RankerChoices, retrieval_stats
from .sets import read_set, set_path, squad_examples


def score_length(model, tok, task_dir: str, length: int, args, cfg, limit, train_len: int, stop,
                 retrieval: bool, end: str | None = None, cut: bool = False) -> dict[str, Any]:
    """One test length's result: the form's scores with the chance level, "max_length" past the model's window
    (``cut``: the inputs truncated at ``limit`` instead, EncodEval's rule), or "oom" (``stop``: an earlier length
    ran out of memory, so this one is not tried). ``end``: the authors' inputs' end token (None:
    :func:`avey_b.data.niah.prompt_encoding`'s own)."""
    rows = read_set(set_path(task_dir, "test", length))
    if args.settings.max_eval_examples:
        rows = rows[: args.settings.max_eval_examples]
    examples = squad_examples(rows)
    need = longest_input(tok, examples, args.form, end)
    # the chance level as the authors compute it (from the stated distribution), and that of these very examples
    res: dict[str, Any] = {"input_tokens_max": need, "n": len(examples),
                           "chance": 100 * niah_data.set_chance_level(rows),
                           "chance_realized": 100 * sum(1 / r["num_needles"] for r in rows) / len(rows)}
    if limit is not None and need > limit and not cut:
        return res | {"status": "max_length"}
    res["truncated"] = limit is not None and need > limit
    if stop is not None:
        return res | {"status": "oom", "inferred": True}
    # the paper protocol scores EncodEval's batch as it is (1: under the release's padding a batch's padding is
    # tokens); otherwise as many inputs of this length as the training batch's tokens allow
    bs = args.settings.eval_batch_size if cut else max(1, args.settings.eval_batch_size * train_len // need)
    try:
        t1 = time.perf_counter()
        with RankerChoices(model) if retrieval else contextlib.nullcontext() as rc:
            if args.form == "qa":
                ecfg = dataclasses.replace(cfg, max_length=need, eval_batch_size=bs, doc_stride=min(128, need // 4))
                with torch.no_grad():
                    predictions = QuestionAnsweringTask().predict(model, tok, examples, ecfg)
                scores = squad_scores(predictions, {e["id"]: [a["text"] for a in e["answers"]] for e in examples})
                res.update(status="ok", exact=100 * scores["exact"], f1=100 * scores["f1"],
                           per_example={m: [round(fn(predictions[e["id"]], e["answers"][0]["text"]), 4)
                                            for e in examples] for m, fn in (("exact", squad_exact), ("f1", squad_f1))},
                           needles=needle_breakdown(rows, predictions))
            else:
                res.update(status="ok", **score_token_classification(model, tok, rows, cfg, bs, end,
                                                                     limit if cut else None))
        res["seconds"] = time.perf_counter() - t1
        if retrieval:  # the ranker's choice in those same forward passes
            encode = None if args.form == "qa" else (lambda q, c: niah_data.prompt_encoding(tok, q, c, end))
            res["retrieval"] = retrieval_stats(tok, examples, rc.rows, model.config.split_size,
                                               model.config.num_retrieved_splits, encode=encode)
    except Exception as exc:  # OOM is data; other errors are bugs
        if not is_oom(exc):
            raise
        res.update(status="oom", error=str(exc).splitlines()[0][:200])
    return res


def score_token_classification(model, tok, rows: list[dict[str, Any]], cfg, batch_size: int, end: str | None = None,
                               max_length: int | None = None) -> dict[str, Any]:
    """The authors' score of one test set (mean of :func:`authors_token_score`, in %), per example, and the
    breakdown by number of needles (``other_value``: a multi-needle example labelled exactly as another needle);
    ``max_length``: the passages truncated there (EncodEval's cut)."""
    feats = token_classification_features(tok, rows, max_length=max_length, end=end)
    predicted = predict_answer_tokens(model, feats, batch_size, pad_id_of(tok), cfg.precision)
    scores = [authors_token_score(p, {i for i, y in enumerate(f["labels"]) if y == 1})
              for p, f in zip(predicted, feats, strict=True)]
    needles = needle_token_sets(rows, feats, tok, end, max_length)
    # what labelling every needle scores: the token F1 gives it partial credit (2/3 with two needles), above chance
    every = [authors_token_score(set().union(*n), {i for i, y in enumerate(f["labels"]) if y == 1})
             for n, f in zip(needles, feats, strict=True)]
    return {"score": 100 * sum(scores) / len(scores), "per_example": {"score": [round(x, 4) for x in scores]},
            "every_needle": 100 * sum(every) / len(every),
            "needles": answer_token_breakdown(rows, scores, predicted, needles)}
