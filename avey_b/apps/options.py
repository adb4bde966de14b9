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
