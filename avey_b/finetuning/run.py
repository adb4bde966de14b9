"""``avey-b finetune``: one runner for every task of the table (:mod:`avey_b.finetuning.registry`), dispatching to
the task's family's; your own data's tasks (:data:`~avey_b.finetuning.options.OWN_DATA`) run here."""

from __future__ import annotations

import argparse
import json
from typing import Any

from avey_b.configs import from_args
from avey_b.utils.files import check_model_source, model_source
from avey_b.utils.locks import exclusive_directory

from . import registry
from .common import below_baseline, check_output_dir, finished_record, stays_dense, summary_line
from .options import OwnDataOptions


def finetune(options: OwnDataOptions) -> dict[str, Any]:
    """Train and score ``options.task`` on your data; returns the results record, also written to
    ``<output_dir>/results.json`` with the model. An output directory that holds a run is refused unless
    ``overwrite`` (moved aside) or ``resume``; resuming a finished run returns its record and trains nothing. A
    second run on the same output directory is refused while the first runs
    (:func:`~avey_b.utils.locks.exclusive_directory`)."""
    with exclusive_directory(options.output_dir, "avey-b finetune"):  # one run at a time in a directory
        return _finetune(options)


def _finetune(options: OwnDataOptions) -> dict[str, Any]:
    check_output_dir(options)
    from transformers import AutoConfig

    with model_source(options.model):  # a missing model is named as the model, before the data are read
        AutoConfig.from_pretrained(options.model)
    if options.tokenizer is not None:
        check_model_source(options.tokenizer, "tokenizer")
    if options.resume and (record := finished_record(options)) is not None:
        print(f"{options.output_dir} is finished (results.json); nothing to resume", flush=True)
        return record
    return registry.entry(options.task).load()(options)


def run(args: argparse.Namespace) -> int:
    """``avey-b finetune`` (the arguments of :func:`avey_b.finetuning.options.finetune_parser`): the runner of the
    task's family."""
    return registry.load(registry.entry(args.task).family.runner)(args)


def run_own_data(args: argparse.Namespace) -> int:
    """``avey-b finetune --task <own-data task>``: :func:`finetune`, a summary line, a warning when the score is not
    above its baseline (:func:`~avey_b.finetuning.common.below_baseline`), and the record's key fields."""
    record = finetune(from_args(OwnDataOptions, args))
    print(summary_line(record), flush=True)
    for warning in (below_baseline(record), stays_dense(record)):
        if warning is not None:
            print(warning, flush=True)
    print(json.dumps({k: record.get(k) for k in ("task", "model", "output_dir", "metric", "score", "baseline_score",
                                                  "lr", "seed")}))
    return 0
