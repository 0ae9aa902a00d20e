"""The cluster tools' shared inputs (manage_eks_cluster, inspect_eks_cluster): one
spelling of each field, its description and its grammar. Each is a module-level
`Annotated` alias, so a type checker reads it as a type (a call in an annotation is not).
How they reach the cluster (cluster_name, region, kubeconfig, context, namespace) is not
here: every cluster tool takes skills.kube.fields.ClusterAccess."""

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


# The schema says what a field is; the rules stay in validators (no bytes in tools/list).
# The one WaitSeconds, with this tool's own description (only nccl_test waits).
Wait = Annotated[WaitSeconds, Field(description="nccl_test: seconds to wait, then poll.")]

CheckpointPvc = Annotated[
    str | None, Field(description="PVC that must be Bound."), grammar(DNS, "a PVC name")
]
RdzvBackend = Annotated[Literal["c10d", "etcd"], Field(description="etcd: check its Service.")]
InstanceType = Annotated[
    str | None,
    Field(description="e.g. p5.48xlarge."),
    grammar(r"[a-z0-9.-]{1,40}", "an instance type"),
]
Nodegroup = Annotated[str | None, Field(description="For scale."), grammar(NAME, "a name")]
Image = Annotated[
    str | None,
    Field(description="nccl_test image (with torch)."),
    grammar(r"[^\s]{1,255}", "an image"),
]
CapacityReservationId = Annotated[
    str | None, Field(description="cr-..."), grammar(r"cr-[0-9a-f]{8,17}", "cr-<hex>")
]

# Node group sizes (scale).
MinSize = Annotated[int | None, Field(description="Node group min."), within(0, 1000)]
MaxSize = Annotated[int | None, Field(description="Max."), within(0, 1000)]
DesiredSize = Annotated[int | None, Field(description="Desired."), within(0, 1000)]

# Local files: LocalPath says whether the tool reads or writes it (the workspace checks).
NcclOutput = Annotated[
    str | None,
    Field(description="Saved all_reduce_perf output."),
    grammar(PATH, "a path"),
    LocalPath(writable=False),
]
EksctlOutput = Annotated[
    str | None,
    Field(description="eksctl config file to write."),
    grammar(PATH, "a path"),
    LocalPath(writable=True),
]
