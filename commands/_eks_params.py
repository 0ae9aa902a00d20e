"""The cluster tools' shared inputs (manage_eks_cluster, inspect_eks_cluster): one
spelling of each field, its description and its grammar."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from skills.shared.paths import LocalPath
from skills.shared.tooling import WaitSeconds
from skills.shared.validators import grammar

NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
DNS = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
PATH = r"[^\x00\n]{1,4096}"


def within(lo: int, hi: int) -> AfterValidator:
    def check(value: int | None) -> int | None:
        if value is not None and not lo <= value <= hi:
            raise ValueError(f"not within {lo}..{hi}")
        return value

    return AfterValidator(check)


def size(description: str) -> object:
    return Annotated[int | None, Field(description=description), within(0, 1000)]


# The schema says what a field is; the rules stay in validators (no bytes in tools/list).
# The one WaitSeconds, with this tool's own description (only nccl_test waits).
Wait = Annotated[WaitSeconds, Field(description="nccl_test: seconds to wait, then poll.")]


def text(description: str, pattern: str, what: str = "a name") -> object:
    return Annotated[str | None, Field(description=description), grammar(pattern, what)]


def path(description: str, writable: bool) -> object:
    return Annotated[
        str | None,
        Field(description=description),
        grammar(PATH, "a path"),
        LocalPath(writable=writable),
    ]


def kubeconfig(writes: bool) -> object:
    description = "To use; action=kubeconfig writes it." if writes else "To use."
    return path(description, writes)


ClusterName = text("EKS cluster.", NAME)
Region = text("AWS region.", r"[a-z]{2}(-[a-z]+)+-\d", "a region")
Context = text("Kubeconfig context.", r"[^\s]{1,253}", "a context")
Namespace = Annotated[
    str, Field(description="For PVC, etcd, NCCL job."), grammar(DNS, "a namespace")
]
CheckpointPvc = text("PVC that must be Bound.", DNS, "a PVC name")
RdzvBackend = Annotated[Literal["c10d", "etcd"], Field(description="etcd: check its Service.")]
InstanceType = text("e.g. p5.48xlarge.", r"[a-z0-9.-]{1,40}", "an instance type")
NcclOutput = path("all_reduce_perf output to analyze.", False)
