"""``avey-b ablation``: reproduce the paper's ablation table (§5.2 and its appendix "Ablation Study"): pretrain
each architecture variant, evaluate, tabulate. It drives pretraining and evaluation, so it sits above both.

    avey-b ablation --variants ablation_variants
    avey-b ablation --variants ablation_variants \\
        --only avey-b bidirectional-ranker -- --tasks sst2 conll2003       # extra flags go to the sweep

For every variant (a set of ``key=value`` overrides of the pretraining config) this runs
``avey-b pretrain`` into ``<output_dir>/pretrain/<variant>`` (skipped when ``model/`` already exists;
resumed from the latest checkpoint when one exists), then one ``avey-b evaluate`` sweep over all finished
variants under the ablation protocol (the shipped ``ablation`` suite: 5 seeds at 5e-4, best of five), and
prints the table with one row per variant. A variant whose pretraining fails is reported and left out;
the others go on. Exit code 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

from . import configs


@dataclass
class AblationConfig:
    """An ablation experiment (``avey_b/configs/eval/ablation_variants.yaml``)."""

    description: str = ""
    """What the experiment is for and how to run it (free text)."""
    pretrain_config: str = "ablation-10b"
    """The pretraining recipe every variant starts from: a path (relative to this file) or a shipped name."""
    suite: str = "ablation"
    """The evaluation suite: a path (relative to this file) or a shipped name."""
    output_dir: str = "runs/ablation"
    """Root of ``pretrain/<variant>`` and ``eval/``."""
    variants: dict = field(default_factory=dict)
    """Variant name -> ``key: value`` overrides of the pretraining config (``{}``: the recipe as it is)."""


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


def pretrain_variant(name: str, overrides: dict[str, Any] | None, pretrain_config: str, root: str,
                     pretrain_main=None) -> str:
    """Pretrain one variant unless done; returns its model directory. Raises on failure."""
    run_dir = os.path.join(root, "pretrain", name)
    model_dir = os.path.join(run_dir, "model")
    if os.path.isfile(os.path.join(model_dir, "config.json")):
        return model_dir
    if pretrain_main is None:
        from .training.pretrain import main as pretrain_main
    argv = ["--config", pretrain_config, *override_args(overrides), f"run_dir={json.dumps(run_dir)}"]
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    if os.path.isdir(ckpt_dir) and os.listdir(ckpt_dir):
        argv.append("--resume")  # last: its optional value would otherwise swallow the next override
    elif os.path.isdir(run_dir) and os.listdir(run_dir):
        argv.append("--overwrite")  # a start that failed before its first checkpoint: moved aside, not deleted
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
    p = argparse.ArgumentParser(prog="avey-b ablation", description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", required=True,
                   help="variants YAML, or the shipped one's name (ablation_variants)")
    p.add_argument("--only", nargs="+", help="run only these variants")
    p.add_argument("--output-dir", help="overrides the file's output_dir")
    p.add_argument("--skip-pretrain", action="store_true", help="evaluate only variants already pretrained")
    args = p.parse_args(argv)
    variants_file = configs.resolve(args.variants, "eval")
    spec = load_variants(str(variants_file))
    root = args.output_dir or spec.output_dir
    variants = spec.variants
    if args.only:
        unknown = sorted(set(args.only) - set(variants))
        if unknown:
            raise ValueError(f"unknown variants {unknown}; defined: {sorted(variants)}")
        variants = {k: v for k, v in variants.items() if k in args.only}
    pretrain_config = str(_beside(variants_file, spec.pretrain_config, "pretrain"))
    suite = str(_beside(variants_file, spec.suite, "eval"))

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
        from .evaluation.sweep import main as sweep_main

        rc = sweep_main(["--config", suite, "--models", *[f"{k}={v}" for k, v in models.items()],
                         "--output-dir", os.path.join(root, "eval"), "--aggregate", "best", *extra])
    for name, why in failed.items():
        print(f"variant {name}: FAILED ({why})", file=sys.stderr)
    return 1 if failed or rc else 0


if __name__ == "__main__":
    sys.exit(main())
