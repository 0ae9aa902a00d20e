"""The Kubernetes target's plan: exactly what submit applies (KubernetesPlan), the image
it runs (as given, or the newest in the ECR repository a deploy names or last used), and
who its pods are to AWS, in words."""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import yaml
from pydantic import Field

from skills.catalog.gpu_capacity import idle_gpu_warning
from skills.catalog.pricing import Billing
from skills.cloud.ecr_repository import latest_image
from skills.cloud.registry_credentials import ECR_HOST_PATTERN
from skills.operations import remembered
from skills.shared.errors import ErrorCode, ToolFailure
from skills.training_job_deployer.job_spec import JobSpec, hub_lines
from skills.training_job_deployer.memory_estimate import check_fits, check_host_fits
from skills.training_job_deployer.targets.base import Plan
from skills.training_job_deployer.targets.kubernetes.manifest import HF_SECRET, hub_home, shm_gib
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings
from skills.training_job_deployer.tracking_env import TRACKING_SECRET

ECR_IMAGE = re.compile(rf"^{ECR_HOST_PATTERN}/(?P<repository>[^:@]+)")


class KubernetesPlan(Plan):
    """Exactly what submit applies: the job (a PyTorchJob or a TrainJob: `engine`), the
    objects it needs (companions: a TrainJob's runtime), and the Secret it fills."""

    target: Literal["kubernetes"] = "kubernetes"
    engine: str = Field(default="pytorchjob", description="pytorchjob or trainjob.")
    namespace: str
    new_namespace: bool | None = Field(
        default=None, description="Submit creates the namespace (None: cluster not asked)."
    )
    image_uri: str
    image_source: str = Field(description="'image_uri', or the ECR repository it came from.")
    manifest: dict[str, Any] = Field(description="The job (PyTorchJob/TrainJob), as created.")
    companions: list[dict[str, Any]] = Field(
        default_factory=list, description="The suite's objects the job needs, as applied."
    )
    hf_token_secret: str | None = Field(
        default=None, description="Secret created/updated from HF_TOKEN (value never shown)."
    )
    tracking_secrets: list[str] = Field(
        default_factory=list,
        description=f"Variables put into Secret {TRACKING_SECRET} (values never shown).",
    )
    instance_type: str | None = None
    nodes: int = Field(default=1, description="Nodes the job asks for (num_nodes).")
    region: str | None = Field(default=None, description="AWS region, where known.")
    replace: bool = False
    confirm: bool = False
    skip_gate: bool = False
    log_path: str
    memory_estimate: dict[str, Any] | None = Field(
        default=None,
        description="Per-GPU memory estimate (GiB) on instance_type; None when unknown.",
    )
    service_account: str | None = Field(
        default=None, description="The pods' ServiceAccount (None: the namespace's default)."
    )
    identity: str = Field(default="", description="Who the pods are to AWS, in words.")
    hub: list[str] = Field(
        default_factory=list, description="Hub ids the job downloads or streams, and where."
    )
    warnings: list[str] = Field(default_factory=list)

    def billing(self) -> Billing:
        return Billing(self.instance_type, self.nodes, self.region)

    def to_display(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            ("image", f"{self.image_uri} ({self.image_source})"),
            ("namespace", self.namespace + _NEW_NAMESPACE.get(self.new_namespace, "")),
        ]
        if self.hf_token_secret:
            rows.append(("secret", f"{self.hf_token_secret} <- HF_TOKEN"))
        if self.tracking_secrets:
            rows.append(("secret", f"{TRACKING_SECRET} <- {', '.join(self.tracking_secrets)}"))
        rows += [("hub", line) for line in self.hub]
        if self.identity:
            rows.append(("identity", self.identity))
        if self.memory_estimate:
            m = self.memory_estimate
            rows.append(("memory/GPU", f"~{m['total_gib']} GiB of {m['usable_gib']} usable"))
        rows += [("warning", w) for w in self.warnings]
        rows.append(("manifest", "\n" + yaml.safe_dump(self.manifest, sort_keys=False)))
        rows += [("needs", "\n" + yaml.safe_dump(c, sort_keys=False)) for c in self.companions]
        return rows


_NEW_NAMESPACE = {
    True: " (created, labelled fsdp-eks: the cluster lacks it)",
    None: " (created if the cluster lacks it: not checked)",
}


def image_repository(settings: Any) -> tuple[str | None, str | None]:
    """(ECR repository, its region) for image auto-detection: `repository`, else
    ECR_REPOSITORY, else the one push_to_ecr/setup_codebuild last used (in its region)."""
    region = settings.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    repository = getattr(settings, "repository", None) or os.environ.get("ECR_REPOSITORY")
    if repository:
        return repository, region
    last = remembered.recall()
    return (last.repository, last.region) if last else (None, region)


def image_ecr_repository(settings: Any) -> tuple[str | None, str | None]:
    """(ECR repository, its region) of the image a job runs: the one image_uri names
    when it is an ECR image, else image_repository's."""
    ecr = ECR_IMAGE.match(getattr(settings, "image_uri", None) or "")
    if ecr:
        return ecr.group("repository"), ecr.group("region")
    return image_repository(settings)


def resolve_image(settings: KubernetesDeploySettings) -> tuple[str, str]:
    """(image_uri, where it came from): as given, or the newest in the ECR repository."""
    if settings.image_uri:
        return settings.image_uri, "image_uri"
    repository, region = image_repository(settings)
    if not repository:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "No image: image_uri is not set and no ECR repository is named.",
            "Pass image_uri, or repository (or set ECR_REPOSITORY) to use its newest image, "
            "or push one first (push_to_ecr): deploys default to its repository.",
        )
    if not region:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"No AWS region to find the newest image of {repository!r} in.",
            "Pass region (or set AWS_REGION), or pass image_uri.",
        )
    image = latest_image(repository, region)
    if image is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"The ECR repository {repository!r} has no image yet.",
            "Push one first (build_image, then push_to_ecr), or pass image_uri.",
            {"repository": repository},
        )
    return image, f"ecr:{repository}"


def fit_warnings(
    spec: JobSpec, settings: KubernetesDeploySettings
) -> tuple[list[str], dict[str, Any] | None]:
    """What the job's shape warns of (per-node checkpoints of a multi-node job, idle GPUs,
    no instance type), and its per-GPU memory estimate on the instance type (None when
    unknown). A plan that cannot fit is refused (GPU_MEMORY_EXCEEDED, HOST_...), dry run
    included."""
    warnings: list[str] = []
    if spec.num_nodes > 1 and not (spec.checkpoint_dir or "").startswith("s3://"):
        if not settings.checkpoint_volume.startswith("pvc:"):
            warnings.append(
                "checkpoints on a hostPath are per node: resuming a multi-node job needs "
                "checkpoint_volume=pvc:<claim> (FSx) or an s3:// checkpoint_dir"
            )
    idle = idle_gpu_warning(settings.instance_type, spec.gpu_per_node, spec.num_nodes)
    if idle:
        warnings.append(idle)
    memory = None
    if settings.instance_type is None:
        warnings.append("no instance_type: no node selector and no EFA devices requested")
    else:  # refuses a plan that cannot fit (GPU_MEMORY_EXCEEDED), dry run included
        memory = check_fits(spec, settings.instance_type)
        # ... or whose nodes cannot hold its /dev/shm and offloaded states (HOST_...).
        shm = shm_gib(spec, settings.shm_size_gib)
        host = check_host_fits(spec, settings.instance_type, shm)
        memory = {**memory, "host": host} if memory and host else memory
    return warnings, memory


def hub_account(
    spec: JobSpec, settings: KubernetesDeploySettings, endpoint: str | None, has_token: bool
) -> tuple[list[str], list[str]]:
    """(the hub ids the job downloads or streams and where, in words; the warnings)."""
    warnings: list[str] = []
    home = hub_home(spec, settings)
    hub = hub_lines(
        spec,
        f"{home} (HF_HOME, on the checkpoint volume)" if home else "the pod's ~/.cache",
        (f"HF_TOKEN from Secret {HF_SECRET}" if has_token else "no HF_TOKEN")
        + (f", hub {endpoint} (HF_ENDPOINT)" if endpoint else ""),
    )
    if hub and not has_token:
        warnings.append(
            "no HF_TOKEN in this environment: a gated or private hub repo will be "
            "refused in the job (export HF_TOKEN and plan again)"
        )
    return hub, warnings
