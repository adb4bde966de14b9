"""The options of the paper's studies, ``avey-b analyze`` (:mod:`avey_b.studies.analysis`) and ``avey-b ablation``
(:mod:`avey_b.studies.ablation`), each declared once: a dataclass whose documented fields build the command line
(:func:`avey_b.configs.add_arguments`) and the Python API. Standard library only, so that ``avey-b analyze --help``
and ``avey-b ablation --help`` import no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from avey_b import configs


# ------------------------------------------------------------------------------------------ analyze
@dataclass
class AnalyzeOptions:
    """What ``avey-b analyze weights`` writes (:func:`avey_b.studies.analysis.analyze_weights`)."""

    output: str | None = None
    """directory for the table and heat maps (default: analysis/<MODEL, as one name>)"""
    max_layers: int | None = None
    """heat maps of at most this many static layers, spread uniformly over the depth (the paper shows 15 of the
    coupled model's 30); default: all"""
    heatmaps: bool = True
    """draw the heat maps (matplotlib, the analysis extra); --no-heatmaps: only the table"""
    paper_table: bool = False
    """the paper's table (appendix "Layer statistics for coupled vs. decoupled settings"): 15 static layers
    uniformly subsampled (every second of 30: static layers 2, 4, ..., 30, which hold the coupled layers 14, 22, 24
    and 26 the paper's figure names; all of them when there are 15 or fewer), numbered 1-15, and their average"""


def analyze_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b analyze", description="Analyses of a trained Avey-B (paper appendices).")
    sub = p.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    w = sub.add_parser("weights", help='static-layer statistics and heat maps of V (appendix "Coupled vs. '
                                       'Decoupled Layers: A Statistical Analysis")',
                       description="Per static layer of a saved Avey-B: mean, std, min, median, max, mean |w|, L1, "
                                   "L2, fraction positive, fraction negative of V (Markdown, JSON, CSV), and heat "
                                   "maps of V.")
    w.add_argument("model", help="a saved Avey-B directory (any head), or a Hub id")
    configs.add_arguments(w, AnalyzeOptions)
    return p


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
