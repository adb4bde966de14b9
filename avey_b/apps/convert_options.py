"""The options of ``avey-b convert`` (:mod:`avey_b.apps.convert`), declared once: :class:`ConvertOptions`. Standard
library only, so that ``avey-b convert --help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from avey_b import configs


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
