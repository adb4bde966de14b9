"""The options of the app verbs (``avey-b serve``, ``embed``, ``export``, ``analyze``, ``convert``, ``demo``,
``ablation``), each declared once: a dataclass whose documented fields build the command line
(:func:`avey_b.configs.add_arguments`), the Python API (the verb's function takes the dataclass) and what the verb
records. Standard library only, so that ``avey-b VERB --help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from avey_b import configs

# ------------------------------------------------------------------------------------------ serve


# ------------------------------------------------------------------------------------------ embed


# ------------------------------------------------------------------------------------------ export


# ------------------------------------------------------------------------------------------ analyze


# ------------------------------------------------------------------------------------------ convert
@dataclass
class ConvertOptions:
    """Where ``avey-b convert`` finds a release checkpoint given as a Hub repo id (a local directory is read as is)."""

    revision: str | None = None
    "the Hub revision (branch, tag or commit) of a repo id"
    local_files_only: bool = False
    "never download: a repo id must be in the local Hub cache"


def convert_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b convert", description="Convert an authors' release Avey-B checkpoint "
                                "(hub repo id or local directory) into this library's format.")
    p.add_argument("src", help="release checkpoint: e.g. avey-ai/avey-b1-base-exp or a local download of it")
    p.add_argument("dst", help="output directory (save_pretrained format)")
    configs.add_arguments(p, ConvertOptions)
    return p


# ------------------------------------------------------------------------------------------ demo
@dataclass
class DemoOptions:
    """What ``avey-b demo`` times."""

    lengths: list[int] = field(default_factory=lambda: [1024, 4096, 16384])
    "sequence lengths to time (tokens)"
    threads: int | None = None
    "torch CPU threads (default: torch's choice)"

    def __post_init__(self):
        if any(n < 1 for n in self.lengths):
            raise ValueError(f"--lengths must be positive, got {self.lengths}")


def demo_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="avey-b demo", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build a small, randomly initialized Avey-B and encode text, with no download: a byte-level BPE "
                    "tokenizer\ntrained on the documentation that ships with Python, the `small` preset, a padded "
                    "batch checked\nagainst each sentence encoded alone, and the forward pass timed at growing "
                    "lengths.\nThe weights are random: for a trained model see `avey-b pretrain`.")
    configs.add_arguments(p, DemoOptions)
    return p


# ------------------------------------------------------------------------------------------ ablation
