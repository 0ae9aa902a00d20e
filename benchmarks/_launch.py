"""How a benchmark starts its torch processes (the trainer, the bare loop)."""

from __future__ import annotations

import sys


def launcher(nproc: int, quick: bool = False) -> list[str]:
    """The command before a script or `-m module` that runs it on `nproc` processes:
    torchrun; a quick run's single process, python alone (the trainer and the bare loop
    run a world of one with no launcher, the same FSDP code path, and torchrun's own
    torch start, most of such a launch, is saved)."""
    if quick and nproc == 1:
        return [sys.executable]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nproc}"]  # fmt: skip
