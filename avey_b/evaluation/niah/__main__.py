"""``python -m avey_b.evaluation.niah``: the same program as ``avey-b niah``."""

import sys

from .cli import main

sys.exit(main())
