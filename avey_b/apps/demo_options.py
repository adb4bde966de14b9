"""The options of ``avey-b demo`` (:mod:`avey_b.apps.demo`), declared once: :class:`DemoOptions`. Standard library
only, so that ``avey-b demo --help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from avey_b import configs


@dataclass
class DemoOptions:
    """What ``avey-b demo`` times."""

    lengths: list[int] = field(default_factory=lambda: [1024, 4096, 16384])
    "sequence lengths to time (tokens)"
    threads: int | None = None
    """CPU threads (PyTorch's). auto: one per CPU this process may use, or OMP_NUM_THREADS, then the count that runs
    a forward fastest on this machine (on a CPU that other busy processes share, fewer; docs/threads.md); N: that
    count"""

    def __post_init__(self):
        if any(n < 1 for n in self.lengths):
            raise ValueError(f"--lengths must be positive, got {self.lengths}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {self.threads}")


def demo_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="avey-b demo", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build a small, randomly initialized Avey-B and encode text, with no download: a byte-level BPE "
                    "tokenizer\ntrained on the documentation that ships with Python, the `small` preset, a padded "
                    "batch checked\nagainst each sentence encoded alone, and the forward pass timed at growing "
                    "lengths.\nThe weights are random: for a trained model see `avey-b pretrain`.")
    configs.add_arguments(p, DemoOptions)
    return p
