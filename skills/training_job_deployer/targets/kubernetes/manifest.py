"""JobSpec -> Kubeflow PyTorchJob (kubeflow.org/v1), rendered with jinja2 from
templates/pytorchjob.yaml.j2 and validated against the Training Operator's CRD schema
(crds/kubeflow.org_pytorchjobs.v1.9.yaml, release-1.9) before anything reaches a cluster.

Every placement decision is a small function here, unit-tested on its own: the replica
layout (Master + Workers, Master only, or Workers only when elastic or etcd), the
torchrun argv (c10d or etcd rendezvous), GPU and EFA resources from the instance table,
the /dev/shm size, NCCL/EFA environment, and where checkpoints live."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from skills.kube.crd_validation import crd_validator, validate_against_crd
from skills.kube.efa import GPU_TOLERATIONS, efa_env_for, efa_limits, efa_requests
from skills.kube.gpu_nodes import GPU_RESOURCE, INSTANCE_TYPE_LABELS
from skills.kube.identity import S3_SERVICE_ACCOUNT, s3_buckets
from skills.kube.objects import api_version
from skills.operations.processes import SAFE_PATH_ENV
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.ownership import managed_labels
from skills.shared.templates import yaml_templates
from skills.training_job_deployer.job_spec import JobSpec, hub_ids, launcher, trainer_argv
from skills.training_job_deployer.memory_estimate import staging_shm_gib
from skills.training_job_deployer.targets.kubernetes.kube_monitor import LABEL_JOB
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings

# Resolved at import: a later chdir (an MCP server's, a test's) must not move them.
HERE = Path(__file__).resolve().parent
CRD_FILE = "kubeflow.org_pytorchjobs.v1.9.yaml"
TEMPLATE = "pytorchjob.yaml.j2"
MASTER_PORT = 23456  # the Training Operator's default pytorchjob-port
C10D_PORT = 29400  # torchrun's c10d rendezvous port on worker-0 (elastic)
CHECKPOINT_MOUNT = "/checkpoints"
SHM_GIB_PER_PROCESS = 8  # dataloader workers and NCCL's host buffers, per GPU process
TTL_SECONDS = 7 * 24 * 3600  # a finished job (and its pods' logs) stays a week
HF_SECRET = "fsdp-eks-hf-token"
# Where a job's hub downloads land when it mounts the checkpoint volume: on the volume,
# shared by the job's restarts and later jobs (by every node, on an FSx claim).
HUB_CACHE = f"{CHECKPOINT_MOUNT}/hf-home"
# Pod names are <job>-worker-<index>; Services take them as DNS-1035 labels (<= 63).
MAX_JOB_NAME = 63 - len("-worker-1023")


def replica_layout(num_nodes: int, elastic: bool) -> dict[str, int]:
    """Master + Workers for a fixed-size job (Master is rank 0 and the rendezvous host),
    Master alone on one node, Workers only for an elastic or etcd job (the Training
    Operator requires it for elasticPolicy)."""
    if elastic:
        return {"Worker": num_nodes}
    if num_nodes == 1:
        return {"Master": 1}
    return {"Master": 1, "Worker": num_nodes - 1}


def shm_gib(spec: JobSpec, gib: int | None = None) -> int:
    """/dev/shm as a memory emptyDir: `gib`, else SHM_GIB_PER_PROCESS GiB per process
    (Docker's 64 MiB default breaks NCCL and dataloader workers) and what an async save
    stages there (memory_estimate.staging_shm_gib: 90 GiB for Llama-3-8B under HSDP)."""
    return gib or SHM_GIB_PER_PROCESS * spec.gpu_per_node + staging_shm_gib(spec)


def shm_size(spec: JobSpec, gib: int | None = None) -> str:
    return f"{shm_gib(spec, gib)}Gi"


def container_env(settings: KubernetesDeploySettings) -> dict[str, str]:
    """The trainer container's environment: unbuffered output, safe-path mode (`-m trainer`
    is the image's installed trainer, not a `trainer/` in the working directory), NCCL
    over EFA where the instance has it, and NCCL_SOCKET_IFNAME when set."""
    env = {"PYTHONUNBUFFERED": "1", **SAFE_PATH_ENV, **efa_env_for(settings.instance_type)}
    if env.get("FI_PROVIDER"):
        env["NCCL_DEBUG"] = "WARN"
    if settings.nccl_socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = settings.nccl_socket_ifname
    return env


def hub_home(spec: JobSpec, settings: KubernetesDeploySettings) -> str | None:
    """HF_HOME for a job that names hub ids: on the checkpoint volume when one is
    mounted (not for an s3:// checkpoint_dir); None: the container's own ~/.cache."""
    _, host_path, claim = checkpoint_placement(spec, settings)
    return HUB_CACHE if hub_ids(spec) and (host_path or claim) else None


def job_buckets(spec: JobSpec) -> list[str]:
    """The S3 buckets the job's pods read or write (model, data, tokenizer, checkpoints)."""
    return s3_buckets((spec.model_name_or_path, spec.dataset, spec.tokenizer, spec.checkpoint_dir))


def service_account(spec: JobSpec) -> str | None:
    """The ServiceAccount a pod that names an s3:// path runs as: the one whose EKS Pod
    Identity role reaches the suite's bucket (manage_eks_cluster action=storage makes
    both). None: the namespace's default (no AWS identity beyond the node's)."""
    return S3_SERVICE_ACCOUNT if job_buckets(spec) else None


def node_selector(instance_type: str | None) -> dict[str, str]:
    """Pods land on nodes of the instance type, named as the node labels name it
    (HyperPod labels ml.* names)."""
    return {INSTANCE_TYPE_LABELS[0]: instance_type} if instance_type else {}


def node_affinity(avoid: tuple[str, ...]) -> dict[str, Any] | None:
    """Pods kept off `avoid` (quarantined nodes), by node name: matchFields on
    metadata.name needs no label to be right (a node's hostname label may differ)."""
    if not avoid:
        return None
    term = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": list(avoid)}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def avoiding(manifest: dict[str, Any], nodes: tuple[str, ...]) -> dict[str, Any]:
    """The manifest with every replica's pods kept off `nodes` (validated again)."""
    out = copy.deepcopy(manifest)
    affinity = node_affinity(nodes)
    for replica in out["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        if affinity is None:
            pod.pop("affinity", None)
        else:
            pod["affinity"] = affinity
    validate(out)
    return out


def elastic_range(spec: JobSpec, settings: KubernetesDeploySettings) -> tuple[int, int] | None:
    """(min, max) nodes when the job is elastic or uses etcd; None for a fixed job."""
    if settings.min_nodes is None and settings.max_nodes is None and not settings.etcd_endpoint:
        return None
    low = settings.min_nodes or spec.num_nodes
    high = settings.max_nodes or spec.num_nodes
    if not low <= spec.num_nodes <= high:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"num_nodes={spec.num_nodes} is outside min_nodes..max_nodes = {low}..{high}.",
            "Start with num_nodes between min_nodes and max_nodes.",
            {"num_nodes": spec.num_nodes, "min_nodes": low, "max_nodes": high},
        )
    return low, high


def rendezvous(
    job_name: str, spec: JobSpec, settings: KubernetesDeploySettings
) -> tuple[list[str], dict[str, Any] | None]:
    """torchrun's rendezvous flags and the elasticPolicy (None for a fixed job)."""
    span = elastic_range(spec, settings)
    if span is None:
        if spec.num_nodes == 1:
            return ["--standalone", "--nnodes=1"], None
        endpoint = f"{job_name}-master-0:{MASTER_PORT}"
        flags = ["--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}"]
        return [f"--nnodes={spec.num_nodes}", *flags], None
    low, high = span
    if settings.etcd_endpoint:
        host, port = settings.etcd_endpoint.rsplit(":", 1)
        backend = "etcd-v2"
    else:
        host, port, backend = f"{job_name}-worker-0", str(C10D_PORT), "c10d"
    policy = {
        "rdzvBackend": backend,
        "rdzvHost": host,
        "rdzvPort": int(port),
        "rdzvId": job_name,
        "minReplicas": low,
        "maxReplicas": high,
        "maxRestarts": spec.max_restarts,
        # No nProcPerNode here: spec.nprocPerNode carries it, and the v1.9 webhook
        # (pkg/webhooks/pytorch/pytorchjob_webhook.go, validateSpec) rejects both at once
        # and calls this one deprecated.
    }
    flags = [f"--nnodes={low}:{high}", f"--rdzv_backend={backend}"]
    return [*flags, f"--rdzv_endpoint={host}:{port}"], policy


def checkpoint_placement(
    spec: JobSpec, settings: KubernetesDeploySettings
) -> tuple[str, str | None, str | None]:
    """(checkpoint_dir in the container, hostPath, PVC claim). s3:// needs no volume; a
    relative or default dir goes under the mounted volume, /checkpoints/<job_name>."""
    given = spec.checkpoint_dir
    if given and given.startswith("s3://"):
        return given, None, None
    if given and given.startswith("/"):
        path = given
    else:
        path = f"{CHECKPOINT_MOUNT}/{given or spec.job_name}".rstrip("/")
    volume = settings.checkpoint_volume
    if volume.startswith("pvc:"):
        return path, None, volume.removeprefix("pvc:")
    return path, volume, None


def container_command(
    spec: JobSpec, settings: KubernetesDeploySettings, checkpoint_dir: str
) -> list[str]:
    """The container's argv (never a shell string): torchrun, then the trainer with the
    same flags every target passes (trainer_argv)."""
    flags, _ = rendezvous(spec.job_name, spec, settings)
    return [
        *launcher(spec, None),  # the image's torchrun, or the job's torchrun_path
        *flags,
        f"--nproc_per_node={spec.gpu_per_node}",
        f"--max_restarts={spec.max_restarts}",
        f"--rdzv_id={spec.job_name}",
        "-m",
        "trainer",
        *trainer_argv(spec.model_copy(update={"checkpoint_dir": checkpoint_dir})),
    ]


# The label Kueue admits a job by (its LocalQueue), on PyTorchJobs and TrainJobs alike.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def labels(spec: JobSpec) -> dict[str, str]:
    return managed_labels(**{LABEL_JOB: spec.job_name})


def job_labels(spec: JobSpec, settings: KubernetesDeploySettings) -> dict[str, str]:
    """The job object's labels: the pods' (ownership, the job's name), and the Kueue
    queue it is submitted to when the deploy names one."""
    return {**labels(spec), **({QUEUE_LABEL: settings.queue} if settings.queue else {})}


def check_job_name(job_name: str) -> None:
    if len(job_name) > MAX_JOB_NAME:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"job_name {job_name!r} is {len(job_name)} characters; a PyTorchJob's pod and "
            f"service names need it to be at most {MAX_JOB_NAME}.",
            f"Use a job_name of at most {MAX_JOB_NAME} characters.",
            {"job_name": job_name},
        )


def env_values(inputs: RenderInputs) -> dict[str, str]:
    """The trainer container's plain variables (either engine): the suite's defaults, the
    hub's, the user's own MLflow server (tracking_env.py), the job's own last
    (NCCL_DEBUG=INFO replaces the default WARN)."""
    spec, settings = inputs.spec, inputs.settings
    return {
        **container_env(settings),
        **hub_env(spec, settings, inputs.hf_endpoint),
        **(inputs.tracking or {}),
        **spec.env,
    }


def render(inputs: RenderInputs) -> dict[str, Any]:
    """The PyTorchJob for this job, as the object the API receives; validated against
    the CRD schema (ToolFailure manifest_invalid otherwise)."""
    spec, settings = inputs.spec, inputs.settings
    check_job_name(spec.job_name)
    checkpoint_dir, host_path, claim = checkpoint_placement(spec, settings)
    _, elastic = rendezvous(spec.job_name, spec, settings)
    # The job's own variables last: NCCL_DEBUG=INFO replaces the default WARN.
    env = env_values(inputs)
    # Quantities as strings, as the API returns them (the Pod schema's int-or-string);
    # hugepages only where that env lets libfabric use them (skills.kube.efa).
    limits = {GPU_RESOURCE: str(spec.gpu_per_node), **efa_limits(settings.instance_type, env)}
    text = (
        yaml_templates(HERE / "templates")
        .get_template(TEMPLATE)
        .render(
            name=spec.job_name,
            namespace=settings.namespace,
            labels=labels(spec),
            job_labels=job_labels(spec, settings),
            nproc_per_node=spec.gpu_per_node,
            elastic=elastic,
            backoff_limit=max(spec.max_restarts, 0),
            ttl_seconds=TTL_SECONDS,
            replicas=replica_layout(spec.num_nodes, elastic is not None),
            node_selector=node_selector(settings.instance_type),
            shm_size=shm_size(spec, settings.shm_size_gib),
            checkpoint_host_path=host_path,
            checkpoint_claim=claim,
            checkpoint_mount=CHECKPOINT_MOUNT if host_path or claim else None,
            image=inputs.image,
            command=container_command(spec, settings, checkpoint_dir),
            master_port=MASTER_PORT,
            env=env,
            hf_secret=inputs.hf_secret,
            secret_env=dict(inputs.secret_env or {}),
            requests={**limits, **efa_requests(settings.instance_type, env)},
            limits=limits,
            tolerations=list(GPU_TOLERATIONS),
            service_account=service_account(spec),
        )
    )
    manifest = _joined(yaml.safe_load(text))
    validate(manifest)
    return manifest


def hub_env(
    spec: JobSpec, settings: KubernetesDeploySettings, endpoint: str | None
) -> dict[str, str]:
    home = hub_home(spec, settings)
    mirror = endpoint if endpoint and hub_ids(spec) else None
    return {**({"HF_HOME": home} if home else {}), **({"HF_ENDPOINT": mirror} if mirror else {})}


def _joined(value: Any) -> Any:
    """`value` with each JSON surrogate pair ("\\ud800\\udc00", how tojson writes a
    character beyond U+FFFF) joined back into its character: YAML reads the two
    escapes as two lone surrogates, which no JSON encoder accepts."""
    if isinstance(value, str):
        if any("\ud800" <= c <= "\udfff" for c in value):
            # Lone surrogates never get here: JobSpec's strings refuse them.
            return value.encode("utf-16", "surrogatepass").decode("utf-16")
        return value
    if isinstance(value, dict):
        return {_joined(k): _joined(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_joined(v) for v in value]
    return value


def crd_schema() -> Mapping[str, Any]:
    """spec.versions[v1].schema.openAPIV3Schema of the CRD shipped in this package."""
    return crd_validator(HERE / "crds" / CRD_FILE).schema(
        api_version("PyTorchJob").rpartition("/")[2]
    )


def validate(manifest: dict[str, Any]) -> None:
    """The manifest as the API server would check it on create: the CRD's schema (unknown
    fields refused) and its CEL rules (skills.kube.crd_validation, the one home of that)."""
    validate_against_crd(
        manifest,
        HERE / "crds" / CRD_FILE,
        hint="This is a bug in the manifest template; report it with the details.",
    )
