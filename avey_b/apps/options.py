"""The options of the app verbs (``avey-b serve``, ``embed``, ``export``, ``analyze``, ``convert``, ``demo``,
``ablation``), each declared once: a dataclass whose documented fields build the command line
(:func:`avey_b.configs.add_arguments`), the Python API (the verb's function takes the dataclass) and what the verb
records. Standard library only, so that ``avey-b VERB --help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from avey_b import configs

# ------------------------------------------------------------------------------------------ serve


# ------------------------------------------------------------------------------------------ embed


# ------------------------------------------------------------------------------------------ export


# ------------------------------------------------------------------------------------------ analyze


# ------------------------------------------------------------------------------------------ convert


# ------------------------------------------------------------------------------------------ demo


# ------------------------------------------------------------------------------------------ ablation
@dataclass
class AblationOptions:
    """``avey-b ablation``: which variants file, which of its variants, and what to run of them."""

    variants: str
    """Variants YAML, or a shipped one's name: ablation_variants, nsk_variants, masking_base_variants,
    masking_large_variants."""
    only: list[str] | None = None
    """Run only these variants."""
    output_dir: str | None = None
    """Overrides the file's output_dir."""
    skip_pretrain: bool = False
    """Evaluate only variants already pretrained."""
    dry_run: bool = False
    """Resolve every variant (configs, no weights), print them, exit."""
    evaluate: list[str] | None = None
    """Flags of `avey-b evaluate` for the sweep, after `--` (e.g. `-- --tasks sst2 conll2003`)."""


def ablation_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b ablation", description="Reproduce the paper's ablation and "
                                "design-choice studies: pretrain each variant, evaluate, tabulate.")
    configs.add_arguments(p, AblationOptions, exclude=("evaluate",))
    p.add_argument("evaluate", nargs="*", metavar="-- EVALUATE_FLAGS",
                   help=configs.field_docs(AblationOptions)["evaluate"])
    return p
