"""The JobSet Kubeflow Trainer v2.3.0 builds for a TrainJob from its runtime, as a pure
function (tests/services/trainer_v2.py plays the controller around it). Files named
are kubeflow/trainer's at v2.3.0."""

from __future__ import annotations

import copy
from typing import Any

from tests.services.jobset import owner

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"  # pkg/constants LabelTrainJobAncestor
TRAINER, NODE = "trainer", "node"  # AncestorTrainer, and the trainer container's name
TRAINER_PORT = 29500  # ContainerTrainerPort
RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                "PET_MASTER_PORT")  # fmt: skip  # TorchRunReservedEnvNames
COMPLETION_INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# plugins/trainjobstatus/trainjobstatus.go
STATUS_MOUNT = "/var/run/secrets/kubeflow/trainer"
STATUS_VOLUME = "kubeflow-trainer-token"

# The strategic-merge keys (patchMergeKey) of the lists a runtime patch may touch: JobSet's
# replicatedJobs and core/v1's; lists without one (tolerations, nodeSelectorTerms,
# command, args) are replaced whole, as strategicpatch does.
MERGE_KEYS = {"replicatedJobs": "name", "containers": "name", "initContainers": "name",
              "volumes": "name", "env": "name", "volumeMounts": "mountPath",
              "ports": "containerPort", "imagePullSecrets": "name"}  # fmt: skip


def strategic_merge(base: Any, patch: Any) -> Any:
    """k8s.io/apimachinery strategicpatch.StrategicMergePatch for the fields above: maps
    merge (null deletes), lists with a merge key merge item by item, other lists and
    scalars are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in MERGE_KEYS and isinstance(value, list) and isinstance(base.get(key), list):
                merged[key] = _merge_list(base[key], value, MERGE_KEYS[key])
            else:
                merged[key] = strategic_merge(base.get(key), value)
        return merged
    return copy.deepcopy(patch)


def _merge_list(base: list[Any], patch: list[Any], key: str) -> list[Any]:
    merged = [copy.deepcopy(item) for item in base]
    for item in patch:
        at = next((i for i, old in enumerate(merged) if old.get(key) == item.get(key)), None)
        if at is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[at] = strategic_merge(merged[at], item)
    return merged


def upsert(items: list[dict[str, Any]], item: dict[str, Any], key: str) -> None:
    """pkg/apply/apply.go upsert: replace the item with the same key in place, else append."""
    for i, old in enumerate(items):
        if old.get(key) == item.get(key):
            items[i] = item
            return
    items.append(item)


def _trainer_container(rjob: dict[str, Any]) -> dict[str, Any] | None:
    containers = rjob["template"]["spec"]["template"]["spec"].get("containers") or []
    return next((c for c in containers if c.get("name") == NODE), None)


def _is_trainer(rjob: dict[str, Any]) -> bool:
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(ANCESTOR) == TRAINER


def _gpus(resources: dict[str, Any]) -> int:
    """runtime.go GetNumGPUPerNode: the first resource whose name contains "gpu", from
    requests, else limits."""
    for part in ("requests", "limits"):
        for name, value in (resources.get(part) or {}).items():
            if "gpu" in name.lower() and int(value):
                return int(value)
    return 0


def _cpus(resources: dict[str, Any]) -> int:
    """torch.go getNumCPUPerNode: requests.cpu, else limits.cpu, as whole cores."""
    for part in ("requests", "limits"):
        value = (resources.get(part) or {}).get("cpu")
        if value:
            text = str(value)
            return int(int(text[:-1]) / 1000) if text.endswith("m") else int(float(text))
    return 0


def render_jobset(
    trainjob: dict[str, Any],
    runtime: dict[str, Any],
    status_env: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The JobSet for `trainjob` on `runtime` (a TrainingRuntime or
    ClusterTrainingRuntime), following pkg/runtime/core/trainingruntime.go
    (newRuntimeInfo: labels/annotations and runtimePatches merged, numNodes from
    mlPolicy, resourcesPerNode merged into the trainer container), the torch plugin
    (plugins/torch/torch.go EnforceMLPolicy: numNodes, PET_* env, port 29500), the
    TrainJobStatus plugin when `status_env` is given (the feature gate on), the JobSet
    plugin (plugins/jobset/jobset.go SyncParallelCount and Build, builder.go Trainer:
    image, command, args, env; suspend; the owner reference)."""
    name, spec = trainjob["metadata"]["name"], trainjob["spec"]
    trainer = spec.get("trainer") or {}
    template = copy.deepcopy(runtime["spec"]["template"])
    meta = template.get("metadata") or {}
    labels, annotations = dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
    jobset_spec = template["spec"]
    order = [r["name"] for r in jobset_spec.get("replicatedJobs") or []]
    for patch in spec.get("runtimePatches") or []:
        patched = ((patch.get("trainingRuntimeSpec") or {}).get("template")) or {}
        labels.update((patched.get("metadata") or {}).get("labels") or {})
        annotations.update((patched.get("metadata") or {}).get("annotations") or {})
        if patched.get("spec"):
            jobset_spec = strategic_merge(jobset_spec, patched["spec"])
    rjobs = sorted(jobset_spec["replicatedJobs"], key=lambda r: order.index(r["name"])
                   if r["name"] in order else len(order))  # fmt: skip
    jobset_spec["replicatedJobs"] = rjobs
    policy = runtime["spec"].get("mlPolicy")
    counts: list[int] = []
    for rjob in rjobs:
        job_spec = rjob["template"].setdefault("spec", {})
        count = int(job_spec.get("parallelism", 1))
        if _is_trainer(rjob) and policy is not None:
            count = int(policy.get("numNodes", 1))
            container = _trainer_container(rjob)
            if container is not None and trainer.get("resourcesPerNode"):
                container["resources"] = strategic_merge(container.get("resources") or {},
                                                         trainer["resourcesPerNode"])  # fmt: skip
        counts.append(count)
    if policy is not None and policy.get("torch") is not None:
        _torch(name, trainer, rjobs, counts)
    if status_env is not None:
        _trainjob_status(trainjob, rjobs, status_env)
    for rjob, count in zip(rjobs, counts, strict=True):  # SyncParallelCount
        rjob["template"]["spec"]["parallelism"] = count
        rjob["template"]["spec"]["completions"] = count
        if _is_trainer(rjob):  # builder.go Trainer
            rjob["replicas"] = 1
            container = _trainer_container(rjob)
            if container is not None:
                for field in ("image", "command", "args"):
                    if trainer.get(field) is not None:
                        container[field] = trainer[field]
    if spec.get("suspend") is not None:
        jobset_spec["suspend"] = spec["suspend"]
    jobset_meta: dict[str, Any] = {"name": name, "namespace": trainjob["metadata"].get("namespace"),
                                   "ownerReferences": [owner(trainjob)]}  # fmt: skip
    if labels:
        jobset_meta["labels"] = labels
    if annotations:
        jobset_meta["annotations"] = annotations
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": jobset_meta, "spec": jobset_spec}  # fmt: skip


def _torch(
    name: str,
    trainer: dict[str, Any],
    rjobs: list[dict[str, Any]],
    counts: list[int],
) -> None:
    """plugins/torch/torch.go EnforceMLPolicy (torchrun, not torchtune): the trainer pod
    set's count from trainer.numNodes; numProcPerNode from the TrainJob, else "auto",
    which without a GPU in resourcesPerNode is the CPU count (at least 1); trainer.env
    then PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the completion index),
    PET_MASTER_ADDR (`<name>-node-0-0.<name>`), PET_MASTER_PORT (29500) upserted into the
    trainer container, and its port 29500."""
    at = next((i for i, r in enumerate(rjobs) if _is_trainer(r)), None)
    if at is not None and trainer.get("numNodes") is not None:
        counts[at] = int(trainer["numNodes"])
    container = _trainer_container(rjobs[at]) if at is not None else None
    resources = (container or {}).get("resources") or {}
    if trainer.get("resourcesPerNode") is not None:
        resources = trainer["resourcesPerNode"]
    nproc: str = "auto"
    if trainer.get("numProcPerNode") is not None:
        nproc = str(trainer["numProcPerNode"])
    elif _gpus(resources) == 0:
        nproc = str(max(1, _cpus(resources)))
    if container is None or not trainer:
        return
    env = container.setdefault("env", [])
    for item in trainer.get("env") or []:
        upsert(env, item, "name")
    pet = [
        {"name": "PET_NNODES", "value": str(counts[at] if at is not None else 1)},
        {"name": "PET_NPROC_PER_NODE", "value": nproc},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ]
    for item in pet:
        upsert(env, item, "name")
    upsert(container.setdefault("ports", []), {"containerPort": TRAINER_PORT}, "containerPort")


def _trainjob_status(
    trainjob: dict[str, Any], rjobs: list[dict[str, Any]], env: list[dict[str, Any]]
) -> None:
    """plugins/trainjobstatus/trainjobstatus.go EnforceMLPolicy: the status server's env
    (KUBEFLOW_TRAINER_SERVER_URL, ..._CA_CERT, ..._TOKEN; here as the status server
    stand-in gives them), the read-only mount at /var/run/secrets/kubeflow/trainer and its
    projected volume (a token for the TrainJob's audience, `<name>-tls-config`'s ca.crt)
    in every container of the trainer pod set."""
    name, namespace = trainjob["metadata"]["name"], trainjob["metadata"].get("namespace")
    # pkg/statusserver/utils.go TokenAudience
    audience = f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
    for rjob in rjobs:
        if not _is_trainer(rjob):
            continue
        pod = rjob["template"]["spec"]["template"]["spec"]
        for container in pod.get("containers") or []:
            for item in env:
                upsert(container.setdefault("env", []), dict(item), "name")
            upsert(container.setdefault("volumeMounts", []),
                   {"name": STATUS_VOLUME, "mountPath": STATUS_MOUNT, "readOnly": True},
                   "mountPath")  # fmt: skip
        upsert(pod.setdefault("volumes", []), {"name": STATUS_VOLUME, "projected": {"sources": [
            {"serviceAccountToken": {"audience": audience, "expirationSeconds": 3600,
                                     "path": "token"}},
            {"configMap": {"name": f"{name}-tls-config",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}, "name")  # fmt: skip
