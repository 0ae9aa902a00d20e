"""Inputs that more than one of manage_eks_cluster's actions takes (or inspect_eks_cluster
too), each declared once: the action specs (StorageSpec, CleanupSpec, ScaleSpec, NcclSpec,
ConfigSpec) use these aliases, and a field that two specs declare through one alias is
one tool parameter feeding both (skills.shared.tooling: flattened models)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from skills.shared.paths import LocalPath
from skills.shared.validators import grammar

NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
PATH = r"[^\x00\n]{1,4096}"


def within(lo: int, hi: int) -> AfterValidator:
    """lo..hi, checked by a validator: the schema says what a field is, and the rules
    cost no bytes in tools/list."""

    def check(value: int | None) -> int | None:
        if value is not None and not lo <= value <= hi:
            raise ValueError(f"not within {lo}..{hi}")
        return value

    return AfterValidator(check)


Nodegroup = Annotated[str | None, Field(description="For scale."), grammar(NAME, "a name")]
Bucket = Annotated[
    str | None, Field(description="storage/cleanup: S3 bucket (fsdp-eks-<cluster>-<account>).")
]
Nodes = Annotated[int, Field(description="GPU nodes."), within(1, 256)]
NODES = 2  # the default of every spec's `nodes`
InstanceType = Annotated[
    str | None,
    Field(description="e.g. p5.48xlarge."),
    grammar(r"[a-z0-9.-]{1,40}", "an instance type"),
]
# A local file the tool reads (LocalPath: the workspace checks).
NcclOutput = Annotated[
    str | None,
    Field(description="Saved all_reduce_perf output."),
    grammar(PATH, "a path"),
    LocalPath(writable=False),
]
