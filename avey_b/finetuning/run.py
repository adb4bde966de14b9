"""``avey-b finetune``: your own data's tasks (:data:`~avey_b.finetuning.options.OWN_TASKS`) here, the paper's
benchmark cells in :func:`avey_b.evaluation.finetune.run` (unchanged)."""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from avey_b.configs import from_args
from avey_b.utils.files import check_model_source, model_source

from .common import check_output_dir, finished_record, summary_line
from .options import OWN_TASKS, OwnDataOptions


def task_trainer(task: str):
    """The ``train(options) -> dict`` function of an own-data task."""
    module, _, function = OWN_TASKS[task].partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise NotImplementedError(f"--task {task} is not part of this version of avey_b ({module} is missing)") from None


def finetune(options: OwnDataOptions) -> dict[str, Any]:
    """Train and score ``options.task`` on your data; returns the results record, also written to
    ``<output_dir>/results.json`` with the model. An output directory that holds a run is refused unless
    ``overwrite`` (moved aside) or ``resume``; resuming a finished run returns its record and trains nothing."""
    check_output_dir(options)
    from transformers import AutoConfig

    with model_source(options.model):  # a missing model is named as the model, before the data are read
        AutoConfig.from_pretrained(options.model)
    if options.tokenizer is not None:
        check_model_source(options.tokenizer, "tokenizer")
    if options.resume and (record := finished_record(options)) is not None:
        print(f"{options.output_dir} is finished (results.json); nothing to resume", flush=True)
        return record
    return task_trainer(options.task)(options)


def run(args: argparse.Namespace) -> int:
    """``avey-b finetune`` (the arguments of :func:`avey_b.finetuning.options.finetune_parser`)."""
    if args.task not in OWN_TASKS:
        from avey_b.evaluation.finetune import run as run_benchmark

        return run_benchmark(args)
    record = finetune(from_args(OwnDataOptions, args))
    print(summary_line(record), flush=True)
    print(json.dumps({k: record.get(k) for k in ("task", "model", "output_dir", "metric", "score", "baseline_score",
                                                  "lr", "seed")}))
    return 0
