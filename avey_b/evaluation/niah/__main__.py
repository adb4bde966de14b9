"""``python -m avey_b.evaluation.niah``: the same program as ``avey-b niah``."""

import sys

from ..settings import niah_parser
from .cli import run

sys.exit(run(niah_parser().parse_args()))
