"""JobSpec -> Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1, v2.3.0), and the
ClusterTrainingRuntime it runs on, validated as the API server would (the vendored CRDs'
schema and CEL rules: skills.kube.crd_validation) and as Trainer's webhook would (its
reserved env, runtimePatches' manager; JobSet's generated pod names) before anything
reaches a cluster.

What upstream does with the object (read at the tags, crds/SOURCES.yaml):
- the runtime is a JobSet template; its replicated job "node" (label
  trainer.kubeflow.org/trainjob-ancestor-step=trainer) runs `trainer.numNodes` pods of
  one Indexed Job, container "node" (pkg/runtime/core/trainingruntime.go);
- the TrainJob's image, command, args and env replace the "node" container's, and
  resourcesPerNode is merged into its resources (plugins/jobset/builder.go, Trainer);
- the Torch plugin sets PET_NNODES, PET_NPROC_PER_NODE (numProcPerNode, or "auto"),
  PET_NODE_RANK (the pod's completion index), PET_MASTER_ADDR
  (<name>-node-0-0.<name>, the JobSet's headless Service) and PET_MASTER_PORT (29500)
  and refuses a TrainJob that sets one of them (plugins/torch/torch.go): torchrun reads
  them, so the command passes no rendezvous flags;
- each runtimePatches entry (keyed by its manager, a domain-prefixed path) is a
  strategic merge patch of the runtime's JobSet spec; pod-level fields only, no env for
  the "node" container (plugins/jobset/jobset.go Validate); the suite's is the job's
  pod placement (node selector, ServiceAccount, its volumes, nodes to avoid);
- JobSet (v0.12.0 pkg/webhooks/jobset_webhook.go) refuses a name whose longest pod name
  (<name>-node-0-<last index>-xxxxx) is over 63 characters.

The runtime this suite installs (RUNTIME, labelled as the suite's) holds the pod
defaults the PyTorchJob manifest has: GPU tolerations, /dev/shm in memory, the trainer
container; a job asks for its own GPUs and EFA devices (resourcesPerNode) and brings its
own volumes (the patch). `runtime` names another (upstream's torch-distributed): the
patch then carries the defaults too."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skills.kube.crd_validation import validate_against_crd
from skills.kube.efa import GPU_TOLERATIONS, efa_limits, efa_requests
from skills.kube.gpu_nodes import GPU_RESOURCE
from skills.kube.objects import api_version
from skills.kube.pods import TRAINER_CONTAINER
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.ownership import managed_labels
from skills.training_job_deployer.job_spec import JobSpec, launcher, trainer_argv
from skills.training_job_deployer.targets.kubernetes.manifest import (
    CHECKPOINT_MOUNT,
    checkpoint_placement,
    elastic_range,
    env_values,
    job_labels,
    labels,
    node_affinity,
    node_selector,
    service_account,
    shm_size,
)
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings

HERE = Path(__file__).resolve().parent
CRDS = HERE / "crds"
TRAINJOB_CRD = CRDS / "trainer.kubeflow.org_trainjobs.v2.3.0.yaml.gz"
RUNTIME_CRD = CRDS / "trainer.kubeflow.org_clustertrainingruntimes.v2.3.0.yaml.gz"
GROUP = "trainer.kubeflow.org"
RUNTIME = "fsdp-eks-torch"  # the ClusterTrainingRuntime this suite installs and owns
UPSTREAM_RUNTIME = "torch-distributed"  # upstream's (manifests/base/runtimes)
NODE = TRAINER_CONTAINER  # the trainer's replicated job and container (constants.Node)
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
# The suite's runtimePatches entry: a domain-prefixed path, as the webhook requires.
PATCH_MANAGER = "fsdp-eks.io/placement"
# Trainer v2.3.0 constants.TorchRunReservedEnvNames: the Torch plugin sets them.
RESERVED_ENV = frozenset(
    {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
)
# The base image upstream's torch-distributed names (ours: the job's image replaces it).
BASE_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
MAX_DNS_LABEL = 63
POD_SUFFIX = len("-abcde")  # the Job controller's random suffix of a pod name


def runtime_name(settings: KubernetesDeploySettings) -> str:
    """The ClusterTrainingRuntime the job runs on: the one `runtime` names, else the
    suite's."""
    return settings.runtime or RUNTIME


def pod_defaults() -> dict[str, Any]:
    """The pod spec the suite's runtime gives every TrainJob on it: GPU tolerations and
    /dev/shm in memory (its size is each job's: pod_patch)."""
    return {
        "tolerations": list(GPU_TOLERATIONS),
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
        "containers": [{"name": NODE, "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}],
    }


def cluster_runtime() -> dict[str, Any]:
    """The ClusterTrainingRuntime RUNTIME, as submit applies it (created, or updated when
    it differs; upstream's torch-distributed with the suite's pod defaults). Pods restart
    never and a failed pod fails its Job: torchrun restarts the workers in the pod
    (--max_restarts), and a failure the pod cannot get past ends the TrainJob as Failed
    for auto-retry to diagnose, as a PyTorchJob's does."""
    pod = pod_defaults()
    pod["containers"][0] = {"image": BASE_IMAGE, **pod["containers"][0]}
    pod["restartPolicy"] = "Never"
    runtime = {
        "apiVersion": api_version("ClusterTrainingRuntime"),
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": RUNTIME,
            "labels": managed_labels(**{f"{GROUP}/framework": "torch"}),
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                                "spec": {"backoffLimit": 0, "template": {"spec": pod}},
                            },
                        }
                    ]
                }
            },
        },
    }
    validate_against_crd(runtime, RUNTIME_CRD, hint=_BUG)
    return runtime


def pod_patch(
    spec: JobSpec, settings: KubernetesDeploySettings, avoid: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The job's own pod fields, as the suite's runtimePatches entry patches the runtime's
    "node" pods (a strategic merge: volumes by name, mounts by path): where it runs
    (instance type, nodes to avoid), as whom (the S3 ServiceAccount), /dev/shm's size,
    the checkpoint volume. On another runtime than the suite's, its defaults too."""
    _, host_path, claim = checkpoint_placement(spec, settings)
    pod: dict[str, Any] = {} if runtime_name(settings) == RUNTIME else pod_defaults()
    volumes = [
        {
            "name": "shm",
            "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(spec, settings.shm_size_gib)},
        }
    ]
    mounts = [{"name": "shm", "mountPath": "/dev/shm"}]
    if host_path:
        volumes.append(
            {"name": "checkpoints", "hostPath": {"path": host_path, "type": "DirectoryOrCreate"}}
        )
    elif claim:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}})
    if host_path or claim:
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT})
    pod["volumes"] = volumes
    pod["containers"] = [{"name": NODE, "volumeMounts": mounts}]
    if selector := node_selector(settings.instance_type):
        pod["nodeSelector"] = selector
    if account := service_account(spec):
        pod["serviceAccountName"] = account
    if affinity := node_affinity(avoid):
        pod["affinity"] = affinity
    return pod


def runtime_patch(pod: dict[str, Any], pod_labels: dict[str, str]) -> dict[str, Any]:
    """The suite's runtimePatches entry: `pod` and the pods' labels on the "node" job."""
    template = {"metadata": {"labels": pod_labels}, "spec": pod}
    job = {"name": NODE, "template": {"spec": {"template": template}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


def command(spec: JobSpec, checkpoint_dir: str) -> list[str]:
    """torchrun, which reads its node count, rank and rendezvous host from the PET_*
    variables the Torch plugin sets, then the trainer with every target's flags."""
    return [
        *launcher(spec, None),
        f"--max_restarts={spec.max_restarts}",
        "-m",
        "trainer",
        *trainer_argv(spec.model_copy(update={"checkpoint_dir": checkpoint_dir})),
    ]


def env(
    values: dict[str, str], hf_secret: str | None, secret_env: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """spec.trainer.env: `values`, the node's name, the tracking credentials and HF_TOKEN
    from their Secrets (never their values)."""
    found: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    found.append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    for name, secret in (secret_env or {}).items():
        ref = {"name": secret, "key": name, "optional": True}
        found.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    if hf_secret:
        ref = {"name": hf_secret, "key": "token", "optional": True}
        found.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}})
    return found


def resources(
    spec: JobSpec, settings: KubernetesDeploySettings, values: dict[str, str]
) -> dict[str, Any]:
    """resourcesPerNode: every GPU the job asks of a node, and the instance's EFA
    interfaces (with the hugepages and memory they need where the env lets libfabric
    use hugepages: skills.kube.efa), as the PyTorchJob asks."""
    efa = efa_limits(settings.instance_type, values)
    limits = {GPU_RESOURCE: str(spec.gpu_per_node), **efa}
    return {
        "limits": limits,
        "requests": {**limits, **efa_requests(settings.instance_type, values)},
    }


def render(inputs: RenderInputs) -> dict[str, Any]:
    """The TrainJob for this job, as the object the API receives; validated as the API
    server and Trainer's and JobSet's webhooks would (ToolFailure manifest_invalid)."""
    spec, settings = inputs.spec, inputs.settings
    if elastic_range(spec, settings) is not None:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "A TrainJob runs a fixed number of nodes: Kubeflow Trainer v2.3.0 has no "
            "elastic PyTorch (min_nodes, max_nodes, etcd_endpoint).",
            "Deploy with engine=pytorchjob for an elastic job, or leave those out.",
            {"engine": "trainjob"},
        )
    checkpoint_dir, _, _ = checkpoint_placement(spec, settings)
    values = env_values(inputs)
    job = {
        "apiVersion": api_version("TrainJob"),
        "kind": "TrainJob",
        "metadata": {
            "name": spec.job_name,
            "namespace": settings.namespace,
            "labels": job_labels(spec, settings),
        },
        "spec": {
            "runtimeRef": {
                "apiGroup": GROUP,
                "kind": "ClusterTrainingRuntime",
                "name": runtime_name(settings),
            },
            "trainer": {
                "image": inputs.image,
                "command": command(spec, checkpoint_dir),
                "numNodes": spec.num_nodes,
                "numProcPerNode": spec.gpu_per_node,
                "resourcesPerNode": resources(spec, settings, values),
                "env": env(values, inputs.hf_secret, inputs.secret_env),
            },
            "runtimePatches": [runtime_patch(pod_patch(spec, settings), labels(spec))],
        },
    }
    validate(job)
    return job


_BUG = "This is a bug in the TrainJob renderer; report it with the details."


def validate(job: dict[str, Any]) -> None:
    """The TrainJob as the API server checks it (the CRD's schema and CEL rules: a name
    over 63 characters is refused with the rule's own message), then as the webhooks
    would: no reserved PET_* env (Trainer's Torch plugin), a domain-prefixed patch
    manager (Trainer's JobSet plugin), pod names within 63 characters (JobSet)."""
    validate_against_crd(job, TRAINJOB_CRD, hint=_BUG)
    trainer = job["spec"].get("trainer") or {}
    reserved = sorted(RESERVED_ENV & {e.get("name") for e in trainer.get("env") or []})
    if reserved:
        raise ToolFailure(
            ErrorCode.MANIFEST_INVALID,
            f"spec.trainer.env: must not have reserved envs, invalid envs configured: {reserved}",
            "Kubeflow Trainer sets the PET_* variables for torchrun; leave them out of env.",
            {"reserved": reserved},
        )
    name = job["metadata"]["name"]
    last = max(int(trainer.get("numNodes") or 1) - 1, 0)
    longest = f"{name}-{NODE}-0-{last}"
    if len(longest) + POD_SUFFIX > MAX_DNS_LABEL:
        most = MAX_DNS_LABEL - POD_SUFFIX - len(longest) + len(name)
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "JobSet name is too long, pod names generated for this JobSet will exceed 63 "
            f"characters: job_name {name!r} is {len(name)} characters, at most {most} for "
            f"{last + 1} node(s).",
            f"Use a job_name of at most {most} characters.",
            {"job_name": name, "max_length": most},
        )


def avoiding(job: dict[str, Any], nodes: tuple[str, ...]) -> dict[str, Any]:
    """The TrainJob with its pods kept off `nodes`: the suite's runtimePatches entry gets
    (or loses) a nodeAffinity (a new TrainJob: patches of a running one are refused)."""
    out = copy.deepcopy(job)
    for patch in out["spec"].get("runtimePatches") or []:
        if patch.get("manager") != PATCH_MANAGER:
            continue
        for replicated in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            pod = replicated["template"]["spec"]["template"]["spec"]
            affinity = node_affinity(nodes)
            if affinity is None:
                pod.pop("affinity", None)
            else:
                pod["affinity"] = affinity
    validate(out)
    return out


def pod_name_prefix(job: dict[str, Any], rank: int = 0) -> str:
    """The deterministic start of node `rank`'s pod name (the Job controller appends a
    random suffix): <name>-node-0-<rank>."""
    return f"{job['metadata']['name']}-{NODE}-0-{rank}"
