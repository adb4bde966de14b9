"""The options of ``avey-b evaluate`` and ``avey-b report``, declared once: an evaluation suite
(:class:`SuiteConfig`, the YAML files of ``avey_b/configs/eval/``), what the command line replaces of it
(:class:`EvaluateOptions`) and the report's options (:class:`ReportOptions`). Each cell's settings are a
:class:`~avey_b.evaluation.settings.RunConfig`.

Standard library only, so that ``--help`` imports no torch; the runners are :func:`avey_b.evaluation.sweep.run` and
:func:`avey_b.evaluation.report.run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from avey_b import configs
from avey_b.utils.cluster import BACKENDS
from avey_b.utils.records import slug

from .settings import AGGREGATES, GRIDS, PROTOCOLS, add_run_arguments, given_data, given_settings


# ------------------------------------------------------------------------------------------ evaluate
@dataclass
class SuiteConfig:
    """An evaluation suite (``avey_b/configs/eval/*.yaml``); command-line flags override its values
    (:func:`suite_from_args`)."""

    description: str = ""
    """What the suite is for and how to run it (free text)."""
    models: dict = field(default_factory=dict)
    """Report name -> local directory or Hub id, or -> {model: directory or Hub id, <RunConfig field>: value}
    for settings of that model only (``trust_remote_code: true`` for NeoBERT)."""
    tasks: list = field(default_factory=list)
    """Task names (``mnli``, ``sst2``, ``conll2003``, ``squad``, ``msmarco``, ...)."""
    lrs: list | None = None
    """Learning rates; null: the paper's 2e-5, 6e-5, 1e-4, 5e-4."""
    seeds: Any = None
    """A number of seeds (0 .. N-1) or a list of seeds; null: the grid's."""
    grid: str | None = None
    """Learning rates and seeds unless ``lrs``/``seeds`` are set: ``paper`` (the paper's text: 4 x 10, the default)
    or ``encodeval`` (the authors' EncodEval configs: 6 x 20)."""
    protocol: str | None = None
    """``standard`` (default: the benchmarks' own metrics, RunConfig's defaults) or ``paper`` (EncodEval's
    settings and scoring, :mod:`avey_b.evaluation.protocol`)."""
    aggregate: str = "median"
    """``median`` over seeds at the best learning rate (the paper) or ``best`` single run (ablations)."""
    output_dir: str | None = None
    """Root of the per-cell directories and the report."""
    defaults: dict = field(default_factory=dict)
    """``RunConfig`` fields for every task (batch_size, max_length, epochs, ...)."""
    task_overrides: dict = field(default_factory=dict)
    """Task -> ``RunConfig`` fields for that task only (``msmarco_pairs``: the paper protocol's IR training)."""
    data: dict = field(default_factory=dict)
    """Task -> local data (``train``, ``eval``, ``train_split``, ``eval_split``, ``holdout``); under the paper
    protocol the IR benchmarks take only ``eval``/``eval_split`` and ``msmarco_pairs`` only
    ``train``/``train_split``."""
    tokenizer: str | None = None
    """A tokenizer for every model (default: each model's own)."""
    settings: dict = field(default_factory=dict)
    """``RunConfig`` fields for every cell, over ``defaults``, ``task_overrides`` and the models' settings (where
    the command line's flags go)."""
    files: dict = field(default_factory=dict)
    """Local data of a suite's single task (``data``'s keys), over ``data``; under the paper protocol a retrieval
    benchmark's ``train``/``train_split`` go to its ``msmarco_pairs`` training (where ``--train-file``, ... go)."""


def load_suite(path: str | None) -> SuiteConfig:
    """A suite read strictly through the package's config dialect (a path or a shipped name; None: empty)."""
    return SuiteConfig() if path is None else configs.load(SuiteConfig, path, kind="eval")


def parse_models(items: list[str] | dict[str, Any]) -> dict[str, str]:
    """``name=path`` or a bare path/Hub id (named after its last component); a suite's mapping name -> path, or
    name -> {model: path, <RunConfig field>: value, ...} (see ``sweep.model_settings``)."""
    if isinstance(items, dict):
        return {slug(str(k)): str(v["model"] if isinstance(v, dict) else v) for k, v in items.items()}
    out: dict[str, str] = {}
    for item in items:
        name, _, path = item.partition("=") if "=" in item else (os.path.basename(item.rstrip("/")), "", item)
        name = slug(name)
        if name in out:
            raise ValueError(f"two models named {name!r}; name them explicitly with NAME=PATH")
        out[name] = path
    return out


@dataclass
class EvaluateOptions:
    """``avey-b evaluate``: which suite, what of it the command line replaces, and how the cells run. A flag not
    given leaves the suite's value (:func:`suite_from_args`)."""

    config: str | None = None
    """Suite YAML, or a shipped suite (``avey_b/configs/eval/``)."""
    models: list[str] | None = None
    """NAME=PATH_OR_HUB_ID (or a bare path/id) ..."""
    tasks: list[str] | None = None
    """Task names."""
    lrs: list[float] | None = None
    """Learning rates (default: 2e-5 6e-5 1e-4 5e-4)."""
    seeds: int | None = None
    """Number of seeds 0..N-1 (default 10)."""
    grid: str | None = None
    """Learning rates x seeds unless --lrs/--seeds: paper (the paper's text and the release's driver run.py, 2e-5
    6e-5 1e-4 5e-4 x 10 seeds; default) or encodeval (every config file the release ships, also 1e-3 2e-3, x 20
    seeds; its driver ran the paper's 4 x 10)."""
    aggregate: str | None = None
    """Median over seeds at the best lr (paper, default) or best single run (ablations)."""
    output_dir: str | None = None
    """Root of the per-cell directories and the report."""
    tokenizer: str | None = None
    """Tokenizer name/path for every model (default: each model's own)."""
    workers: int | None = None
    """Cells run at once, each in its own process (default: 1, or one per --devices entry); on Ray without GPUs:
    cells at once per node."""
    devices: str | None = None
    """Comma-separated CUDA device ids to spread the workers over."""
    isolate: bool = False
    """Run every cell in a subprocess even with 1 worker."""
    backend: str = "local"
    """local: on this machine; ray: each cell a Ray task, one GPU each where the cluster has GPUs, else 1/--workers
    of a node's CPUs; --output-dir on a filesystem every node sees (pip install 'avey-b[ray]')."""
    ray_address: str | None = None
    """Ray: the cluster to join (auto: the one this machine belongs to, or host:port); default: a local Ray
    started for the sweep."""
    dry_run: bool = False
    """List the cells and exit."""
    report_only: bool = False
    """Only aggregate the existing results."""


#: EvaluateOptions fields that replace the suite's value of the same name when given
_SUITE_FLAGS = ("models", "tasks", "lrs", "seeds", "grid", "aggregate", "output_dir", "tokenizer")


def evaluate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="avey-b evaluate", description="The paper's downstream protocol (paper §5.1): every model x task x "
        "learning rate x seed, then the report.",
        epilog="A flag given here overrides the suite's value. On Ray (--backend ray) each cell is a Ray task on the "
               "cluster at --ray-address; see the module docstring of avey_b.evaluation.sweep.")
    configs.add_arguments(p, EvaluateOptions, defaults=False,
                          choices={"grid": tuple(GRIDS), "aggregate": AGGREGATES, "backend": BACKENDS})
    p.add_argument("--run-cell", default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # internal: one cell's cell.json
    add_run_arguments(p)
    return p


def suite_from_args(args, suite: SuiteConfig | None = None) -> SuiteConfig:
    """The suite that ``args`` (of :func:`evaluate_parser`) asks for: ``suite`` (default: the ``--config`` file),
    with every flag given on the command line over it. ``--grid`` replaces the suite's ``lrs``/``seeds`` too (unless
    ``--lrs``/``--seeds``); RunConfig flags go to ``settings`` (over everything the suite sets), data flags to
    ``files``."""
    suite = load_suite(getattr(args, "config", None)) if suite is None else suite
    given = {k: getattr(args, k) for k in _SUITE_FLAGS if getattr(args, k, None) is not None}
    if "grid" in given:
        given = {"lrs": None, "seeds": None} | given
    if "models" in given:
        given["models"] = parse_models(given["models"])
    settings = {k: v for k, v in given_settings(args).items() if k not in ("lr", "seed")}
    return dataclasses.replace(suite, **given, settings=suite.settings | settings, files=suite.files | given_data(args))


# ------------------------------------------------------------------------------------------ report
@dataclass
class ReportOptions:
    """``avey-b report``: the Table-3 report of a sweep's output directory."""

    output_dir: str
    """The sweep's output directory."""
    aggregate: str = "median"
    """Median over seeds at the best lr (the paper) or the best single run (ablations)."""
    protocol: str | None = None
    """Needed when the directory holds both protocols."""


def report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b report", description="Aggregate results.json cells into the paper's "
                                "Table 3 layout (Markdown) and JSON.")
    p.add_argument("output_dir", help=configs.field_docs(ReportOptions)["output_dir"])
    configs.add_arguments(p, ReportOptions, exclude=("output_dir",),
                          choices={"aggregate": AGGREGATES, "protocol": PROTOCOLS})
    return p
