"""``python -m avey_b.train`` = ``avey-b pretrain`` (masked-LM pretraining; see ``avey_b.training.pretrain``)."""

import sys

from .training.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
