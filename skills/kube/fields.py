"""The settings every tool that reaches a cluster takes, as field types: one definition
for the job and model-server targets (the same checks, the same one-line docs)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, model_validator

from skills.shared.paths import LocalPath

DNS_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"

ClusterName = Annotated[
    str | None,
    Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$", description="EKS cluster name."),
]
Region = Annotated[str | None, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$", description="AWS region.")]


def _no_control_characters(value: str | None) -> str | None:
    # A validator, not a schema pattern: the same check without bytes in every tools/list.
    if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("a path has no control characters")
    return value


Kubeconfig = Annotated[
    str | None,
    Field(min_length=1, max_length=4096, description="kubeconfig path (default KUBECONFIG)."),
    AfterValidator(_no_control_characters),
    LocalPath(writable=False),
]
KubeContext = Annotated[
    str | None,
    Field(min_length=1, max_length=253, pattern=r"^[^\x00-\x1f]+$",
          description="kubeconfig context."),
]  # fmt: skip
Namespace = Annotated[
    str, Field(max_length=63, pattern=DNS_NAME, description="Kubernetes namespace.")
]


class ClusterAccess(BaseModel):
    """How a target reaches its cluster (mixed into a target's settings): an EKS
    cluster_name, or a kubeconfig and context, and the namespace. What runs there reads
    its paths in the pods, not on this host."""

    cluster_name: ClusterName = None
    region: Region = None
    kubeconfig: Kubeconfig = None
    context: KubeContext = None
    namespace: Namespace = "default"

    @property
    def job_runs_here(self) -> bool:
        return False

    @model_validator(mode="after")
    def _one_way_in(self) -> ClusterAccess:
        if self.cluster_name and (self.kubeconfig or self.context):
            raise ValueError("give cluster_name, or kubeconfig/context, not both")
        return self
