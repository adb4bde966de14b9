"""``python -m avey_b.evaluation.niah``: the same program as ``avey-b niah``."""

import sys

from avey_b import cli

sys.exit(cli.main(["niah", *sys.argv[1:]]))
