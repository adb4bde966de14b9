"""Reproduce the paper's ablation table: pretrain each architecture variant, evaluate, tabulate.

    python -m avey_b.evaluation.ablation --variants configs/eval/ablation_variants.yaml
    python -m avey_b.evaluation.ablation --variants configs/eval/ablation_variants.yaml \\
        --only avey-b bidirectional-ranker -- --tasks sst2 conll2003       # extra flags go to the sweep

For every variant (a set of ``key=value`` overrides of the pretraining config, SPEC §4) this runs
``avey-b pretrain`` into ``<output_dir>/pretrain/<variant>`` (skipped when ``model/`` already exists;
resumed from the latest checkpoint when one exists), then one ``avey-b evaluate`` sweep over all finished
variants under the ablation protocol (``configs/eval/ablation.yaml``: 5 seeds at 5e-4, best of five), and
prints the table with one row per variant. A variant whose pretraining fails is reported and left out;
the others go on. Exit code 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any


def load_variants(path: str) -> dict[str, Any]:
    import yaml

    with open(path, encoding="utf-8") as f:
        spec = yaml.safe_load(f) or {}
    allowed = {"pretrain_config", "suite", "output_dir", "variants", "description"}
    bad = sorted(set(spec) - allowed)
    if bad:
        raise ValueError(f"{path}: unknown keys {bad}; allowed: {sorted(allowed)}")
    variants = spec.get("variants")
    if not isinstance(variants, dict) or not variants:
        raise ValueError(f"{path}: 'variants' must map variant names to override mappings")
    for name, overrides in variants.items():
        if overrides is not None and not isinstance(overrides, dict):
            raise ValueError(f"{path}: variant {name!r}: overrides must be a mapping of key: value")
    return spec


def override_args(overrides: dict[str, Any] | None) -> list[str]:
    """``key=value`` strings for ``avey-b pretrain``; values JSON-encoded so YAML reads them back exactly
    (``off`` stays the string "off" instead of YAML 1.1's False)."""
    return [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()]


def pretrain_variant(name: str, overrides: dict[str, Any] | None, pretrain_config: str, root: str,
                     pretrain_main=None) -> str:
    """Pretrain one variant unless done; returns its model directory. Raises on failure."""
    run_dir = os.path.join(root, "pretrain", name)
    model_dir = os.path.join(run_dir, "model")
    if os.path.isfile(os.path.join(model_dir, "config.json")):
        return model_dir
    if pretrain_main is None:
        from avey_b.training.pretrain import main as pretrain_main
    argv = ["--config", pretrain_config, *override_args(overrides), f"run_dir={json.dumps(run_dir)}"]
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    if os.path.isdir(ckpt_dir) and os.listdir(ckpt_dir):
        argv.append("--resume")  # last: its optional value would otherwise swallow the next override
    rc = pretrain_main(argv)
    if rc:
        raise RuntimeError(f"pretraining of variant {name!r} exited with code {rc}")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise RuntimeError(f"pretraining of variant {name!r} finished without writing {model_dir}")
    return model_dir


def main(argv: list[str] | None = None, pretrain_main=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="python -m avey_b.evaluation.ablation", description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", required=True, help="variants YAML (configs/eval/ablation_variants.yaml)")
    p.add_argument("--only", nargs="+", help="run only these variants")
    p.add_argument("--output-dir", help="overrides the file's output_dir")
    p.add_argument("--skip-pretrain", action="store_true", help="evaluate only variants already pretrained")
    args = p.parse_args(argv)
    spec = load_variants(args.variants)
    root = args.output_dir or spec.get("output_dir") or "runs/ablation"
    variants = spec["variants"]
    if args.only:
        unknown = sorted(set(args.only) - set(variants))
        if unknown:
            raise ValueError(f"unknown variants {unknown}; defined: {sorted(variants)}")
        variants = {k: v for k, v in variants.items() if k in args.only}
    base_dir = os.path.dirname(os.path.abspath(args.variants))
    resolve = lambda path: path if os.path.isabs(path) or os.path.exists(path) else os.path.join(base_dir, path)
    pretrain_config = resolve(spec.get("pretrain_config", "../pretrain/ablation-10b.yaml"))
    suite = resolve(spec.get("suite", "ablation.yaml"))

    models, failed = {}, {}
    for name, overrides in variants.items():
        model_dir = os.path.join(root, "pretrain", name, "model")
        if args.skip_pretrain:
            if os.path.isfile(os.path.join(model_dir, "config.json")):
                models[name] = model_dir
            else:
                failed[name] = "not pretrained (--skip-pretrain)"
            continue
        try:
            models[name] = pretrain_variant(name, overrides, pretrain_config, root, pretrain_main)
        except Exception as e:  # one variant's failure must not cost the others their run
            failed[name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    rc = 0
    if models:
        from .sweep import main as sweep_main

        rc = sweep_main(["--config", suite, "--models", *[f"{k}={v}" for k, v in models.items()],
                         "--output-dir", os.path.join(root, "eval"), "--aggregate", "best", *extra])
    for name, why in failed.items():
        print(f"variant {name}: FAILED ({why})", file=sys.stderr)
    return 1 if failed or rc else 0


if __name__ == "__main__":
    sys.exit(main())
