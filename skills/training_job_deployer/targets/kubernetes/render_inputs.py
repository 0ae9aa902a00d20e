"""What a Kubernetes job's manifest is rendered from, whichever engine renders it: one
frozen object passed from the plan through the engine to its manifest, so adding an
input is one field here (not a parameter in the interface, each engine and each
manifest)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings


@dataclass(frozen=True)
class RenderInputs:
    spec: JobSpec
    settings: KubernetesDeploySettings
    image: str
    hf_secret: str | None  # the Secret HF_TOKEN is read from (None: no token)
    # The deploying environment's hub mirror (job_spec.hub_endpoint): the only one
    # HF_TOKEN goes to.
    hf_endpoint: str | None = None
    tracking: Mapping[str, str] | None = None  # the user's own MLflow server's variables
    # variable -> the Secret whose key of that name holds its value (tracking credentials)
    secret_env: Mapping[str, str] | None = None
