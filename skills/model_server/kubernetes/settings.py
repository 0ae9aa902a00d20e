"""PLACEHOLDER (serve-local slice): the smallest KubernetesServerSettings that lets the
model-server tools take `target="kubernetes"`. The serve-kube slice owns this file and
replaces it with the real settings (instance type, model source, max_model_len, ...);
until then the Kubernetes target answers unsupported_for_target (registry.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from skills.model_server.base import ServerSettings


class KubernetesServerSettings(ServerSettings):
    """vLLM Deployment + Service"""

    target: Literal["kubernetes"] = "kubernetes"
    cluster_name: Annotated[
        str | None,
        Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$", description="EKS cluster name."),
    ] = None
    namespace: Annotated[
        str,
        Field(max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Namespace."),
    ] = "default"
    replicas: Annotated[int, Field(ge=0, le=64, description="Server replicas.")] = 1

    @property
    def job_runs_here(self) -> bool:
        return False  # the model path is read in the pods, not on this host
