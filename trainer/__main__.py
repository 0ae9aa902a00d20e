"""`python -m trainer` / `torchrun --nproc_per_node=N -m trainer`."""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.errors import record

from trainer.train import main


@record  # under torchrun, an uncaught exception is written to the elastic error file
def _entry() -> int:
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(_entry())
