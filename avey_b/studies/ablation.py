"""``avey-b ablation``: reproduce the paper's ablation and design-choice studies (§5.2 and the appendices "Ablation
Study", "How to Normalize?", "What are the Best Sequence Length, Split Size, and Top-k Values?", "What is the Best
Masking Rate?"): pretrain each variant, evaluate, tabulate. It drives pretraining and evaluation, so it sits
above both.

    avey-b ablation --variants ablation_variants          # components, layer patterns, normalizations, ranker
    avey-b ablation --variants nsk_variants               # the N / S / k grid, every row of the paper's table
    avey-b ablation --variants masking_base_variants      # masking rates 10-50%, base
    avey-b ablation --variants masking_large_variants     # masking rates 10-50%, large
    avey-b ablation --variants ablation_variants --dry-run                  # resolve every variant, run nothing
    avey-b ablation --variants ablation_variants \\
        --only avey-b bidirectional-ranker -- --tasks sst2 conll2003       # extra flags go to the sweep

A variants file (``AblationConfig``) names the pretraining recipe every variant starts from
(``pretrain_config``), the evaluation suite (``suite``), the output root, and each variant as ``key: value``
overrides of that recipe: any key of the pretraining config, dotted (``data.seq_len``, ``data.mask_rate``,
``model.preset``), and architecture fields as ``model.overrides.<AveyBConfig field>``.

Every selected variant is resolved first, before anything runs: its pretraining config is built and validated
and its model config constructed (no weights), so a typo in any variant is an error naming it, not a failure
days into the run. Then for every variant this runs ``avey-b pretrain`` into ``<output_dir>/pretrain/<variant>``
(skipped when ``model/`` already exists; resumed from the latest checkpoint when one exists), then one ``avey-b
evaluate`` sweep of the suite over the finished variants' ``model/`` directories (the suite's own ``models`` are
replaced by them), and prints the table with one row per variant. A variant whose pretraining fails is reported
and left out; the others go on. Exit code 1 when anything failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

from avey_b import configs
from avey_b.configs import from_args
from avey_b.evaluation.suites import (
    EvaluateOptions,
    evaluate_parser,
    load_suite,
    suite_from_args,
)
from avey_b.evaluation.sweep import evaluate
from avey_b.studies.options import AblationOptions
from avey_b.training.build import model_config
from avey_b.training.config import load_config
from avey_b.training.pretrain import train


@dataclass
class AblationConfig:
    """An ablation experiment (``avey_b/configs/eval/ablation_variants.yaml``)."""

    description: str = ""
    """What the experiment is for and how to run it (free text)."""
    pretrain_config: str = "ablation-10b"
    """The pretraining recipe every variant of this file starts from: a path (relative to this file) or a shipped
    name (the large masking sweep uses ``ablation-10b-large``)."""
    suite: str = "ablation"
    """The evaluation suite: a path (relative to this file) or a shipped name."""
    output_dir: str = "runs/ablation"
    """Root of ``pretrain/<variant>`` and ``eval/``."""
    variants: dict = field(default_factory=dict)
    """Variant name -> ``key: value`` overrides of the pretraining config, dotted (``data.seq_len``, ``data.mask_rate``,
    ``model.preset``, ``model.overrides.<AveyBConfig field>``); ``{}``: the recipe as it is."""


def load_variants(path: str) -> AblationConfig:
    """An ``AblationConfig`` read strictly through the package's config dialect."""
    spec = configs.load(AblationConfig, path, kind="eval")
    if not spec.variants:
        raise ValueError(f"{path}: 'variants' must map variant names to override mappings")
    for name, overrides in spec.variants.items():
        if overrides is not None and not isinstance(overrides, dict):
            raise ValueError(f"{path}: variant {name!r}: overrides must be a mapping of key: value")
    return spec


def override_args(overrides: dict[str, Any] | None) -> list[str]:
    """``key=value`` strings for ``avey-b pretrain``; values JSON-encoded so YAML reads them back exactly
    (``off`` stays the string "off" instead of YAML 1.1's False)."""
    return [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()]


def _beside(variants_file, path: str, kind: str):
    """``path`` relative to the variants file when it exists there, else a path or shipped name of ``kind``."""
    near = variants_file.parent / path
    return near if not os.path.isabs(path) and near.exists() else configs.resolve(path, kind)


def variant_run_dir(root: str, name: str) -> str:
    """Where variant ``name`` is pretrained."""
    return os.path.join(root, "pretrain", name)


def variant_model_dir(root: str, name: str) -> str:
    """What the evaluation reads: the ``model/`` directory pretraining writes into its run directory."""
    return os.path.join(variant_run_dir(root, name), "model")


@dataclass
class VariantPlan:
    """One variant, resolved without running anything."""

    name: str
    overrides: list[str]
    """The ``key=value`` arguments of its ``avey-b pretrain`` (its overrides, then its ``run_dir``)."""
    config: Any
    """The validated ``PretrainConfig`` its pretraining runs with."""
    model_config: Any
    """Its model's config (``AveyBConfig`` for Avey-B), built from the recipe's model spec; ``None`` when the
    model starts from saved weights (``model.init_from``)."""
    model_dir: str
    """The directory the evaluation reads."""


def model_config_of(cfg) -> Any:
    """The config ``avey-b pretrain`` builds its model from (:func:`avey_b.training.build.model_config`: the model
    spec with ``model.overrides``, the vocabulary the tokenizer recipe gives), without a tokenizer or weights;
    ``None`` when the model starts from saved weights (``model.init_from``)."""
    return None if cfg.model.init_from else model_config(cfg)


def plan_variant(name: str, overrides: dict[str, Any] | None, pretrain_config: str, root: str) -> VariantPlan:
    """Resolve variant ``name``: the pretraining config it runs with (every key checked, values validated), its
    model config, and the model directory its evaluation reads. A bad variant is an error naming it."""
    run_dir = variant_run_dir(root, name)
    argv = [*override_args(overrides), f"run_dir={json.dumps(run_dir)}"]
    try:
        cfg = load_config(pretrain_config, argv)
        model_config = model_config_of(cfg)
    except (ValueError, TypeError, KeyError, OSError) as e:  # UnknownConfigKey is a KeyError: its message, unquoted
        why = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise ValueError(f"variant {name!r} (pretrain_config {pretrain_config}): {why}") from e
    return VariantPlan(name, argv, cfg, model_config, variant_model_dir(root, name))


def plan(variants_file: str, only: list[str] | None = None, output_dir: str | None = None
         ) -> tuple[AblationConfig, str, str, dict[str, VariantPlan]]:
    """Resolve a variants file: (its config, pretrain config path, suite path, name -> plan of each selected
    variant). Every variant is resolved, and every problem reported at once."""
    path = configs.resolve(variants_file, "eval")
    spec = load_variants(str(path))
    variants = spec.variants
    if only:
        unknown = sorted(set(only) - set(variants))
        if unknown:
            raise ValueError(f"unknown variants {unknown}; defined: {sorted(variants)}")
        variants = {k: v for k, v in variants.items() if k in only}
    pretrain_config = str(_beside(path, spec.pretrain_config, "pretrain"))
    suite = str(_beside(path, spec.suite, "eval"))
    load_suite(suite)  # the suite must read strictly too
    root = output_dir or spec.output_dir
    plans, errors = {}, []
    for name, overrides in variants.items():
        try:
            plans[name] = plan_variant(name, overrides, pretrain_config, root)
        except ValueError as e:
            errors.append(str(e))
    if errors:
        raise ValueError(f"{path}: {len(errors)} of {len(variants)} variants do not resolve:\n  " + "\n  ".join(errors))
    return spec, pretrain_config, suite, plans


def pretrain(cfg, resume: str | None, overwrite: bool) -> int:
    """``avey-b pretrain`` of a resolved config (:func:`avey_b.training.pretrain.train`); returns its exit code."""
    return int(train(cfg, resume=resume, overwrite=overwrite).get("exit_code", 0))


def pretrain_variant(variant: VariantPlan, pretrain_fn=pretrain) -> str:
    """Pretrain one variant unless done (resumed from its latest checkpoint when it has one); returns its model
    directory. Raises on failure. ``pretrain_fn(cfg, resume, overwrite)``: :func:`pretrain`."""
    name, model_dir = variant.name, variant.model_dir
    run_dir = os.path.dirname(model_dir)
    if os.path.isfile(os.path.join(model_dir, "config.json")):
        return model_dir
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    resume = "auto" if os.path.isdir(ckpt_dir) and os.listdir(ckpt_dir) else None
    # a start that failed before its first checkpoint: moved aside, not deleted
    overwrite = resume is None and os.path.isdir(run_dir) and bool(os.listdir(run_dir))
    rc = pretrain_fn(variant.config, resume, overwrite)
    if rc:
        raise RuntimeError(f"pretraining of variant {name!r} exited with code {rc}")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise RuntimeError(f"pretraining of variant {name!r} finished without writing {model_dir}")
    return model_dir


def describe_plan(plans: dict[str, VariantPlan]) -> str:
    """One line per variant: what it changes, the shape that matters to the studies, where its model goes."""
    lines = []
    for p in plans.values():
        c, m = p.config, p.model_config
        shape = f"N={c.data.seq_len} mask={c.data.mask_rate:g}"
        if m is not None and hasattr(m, "split_size"):
            shape += f" S={m.split_size} k={m.num_retrieved_splits} d={m.hidden_size} L={m.num_hidden_layers}"
        changes = " ".join(p.overrides[:-1]) or "(the recipe as it is)"
        lines.append(f"{p.name}: {changes}\n    {shape} -> {p.model_dir}")
    return "\n".join(lines)


def ablation(options: AblationOptions, pretrain_fn=pretrain) -> int:
    """Resolve every selected variant, pretrain each (``pretrain_fn``, :func:`pretrain`), then evaluate the
    finished ones in one sweep of the suite (with ``options.evaluate``'s flags over it); 1 when anything failed."""
    spec, pretrain_config, suite_path, plans = plan(options.variants, options.only, options.output_dir)
    root = options.output_dir or spec.output_dir
    if options.dry_run:
        print(f"pretrain_config: {pretrain_config}\nsuite: {suite_path}\n{describe_plan(plans)}")
        return 0

    models, failed = {}, {}
    for name, variant in plans.items():
        if options.skip_pretrain:
            if os.path.isfile(os.path.join(variant.model_dir, "config.json")):
                models[name] = variant.model_dir
            else:
                failed[name] = "not pretrained (--skip-pretrain)"
            continue
        try:
            models[name] = pretrain_variant(variant, pretrain_fn)
        except Exception as e:  # one variant's failure must not cost the others their run
            failed[name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    rc = 0
    if models:
        args = evaluate_parser().parse_args(options.evaluate or [])
        suite = dataclasses.replace(load_suite(suite_path), models=models, output_dir=os.path.join(root, "eval"),
                                    aggregate="best")
        rc = evaluate(suite_from_args(args, suite), from_args(EvaluateOptions, args))
    for name, why in failed.items():
        print(f"variant {name}: FAILED ({why})", file=sys.stderr)
    return 1 if failed or rc else 0


def run(args: argparse.Namespace) -> int:
    """``avey-b ablation`` (the arguments of :func:`avey_b.studies.options.ablation_parser`)."""
    return ablation(from_args(AblationOptions, args))
