"""``python -m avey_b.evaluation.niah``: the same program as ``avey-b niah``."""

import sys

from .cli import run
from .options import niah_parser

sys.exit(run(niah_parser().parse_args()))
