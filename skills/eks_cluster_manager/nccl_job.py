"""The NCCL test as a job on the cluster, run as an operation (it outlives an agent's
tool call): a PyTorchJob of N pods, one per GPU node, each asking for all the node's
GPUs and EFA devices, running allreduce_bench.py under torchrun from a ConfigMap. The
worker waits for the job to end, reads rank 0's log, parses it (nccl.parse) and
deletes what it created.

`run_nccl_test` is registered like a tool (for the operation worker to import) but is
not a tool of its own: manage_eks_cluster(action="nccl_test") starts it."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from skills.catalog.instances import instance_spec
from skills.eks_cluster_manager.models import NcclReport
from skills.eks_cluster_manager.nccl import parse
from skills.kube.access import cluster_api_client
from skills.kube.client import KubeJson
from skills.kube.efa import GPU_TOLERATIONS, efa_env_for, efa_limits, efa_requests
from skills.kube.objects import kind_path
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.ownership import managed_labels
from skills.shared.progress import NullProgress, Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import WaitSeconds, tool
from skills.shared.waiting import poll_until

BENCH = Path(__file__).with_name("allreduce_bench.py")
POLL_S = 1.0
LABEL = "fsdp-eks/nccl-test"


class NcclJobResult(ToolResult):
    job_name: str
    namespace: str
    nccl: NcclReport
    log_tail: list[str] = Field(default_factory=list)


def manifests(
    job_name: str, namespace: str, nodes: int, instance_type: str, image: str
) -> list[dict[str, Any]]:
    spec = instance_spec(instance_type)
    # The same EFA environment and resources as the training job (skills.kube.efa).
    env_vars = {"NCCL_DEBUG": "INFO", **efa_env_for(instance_type)}
    limits = {"nvidia.com/gpu": str(spec.gpus), **efa_limits(instance_type, env_vars)}
    env = [{"name": name, "value": value} for name, value in env_vars.items()]
    # The suite's label too, so action=cleanup finds what a worker killed mid-run left.
    labels = managed_labels(**{LABEL: job_name})
    container = {
        "name": "pytorch",
        "image": image,
        "command": ["torchrun", "/bench/allreduce_bench.py"],
        "env": env,
        "resources": {
            "limits": limits,
            "requests": {**limits, **efa_requests(instance_type, env_vars)},
        },
        "volumeMounts": [
            {"name": "bench", "mountPath": "/bench"},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    pod = {
        "metadata": {"labels": labels},
        "spec": {
            "containers": [container],
            "volumes": [
                {"name": "bench", "configMap": {"name": job_name}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
            "nodeSelector": {"node.kubernetes.io/instance-type": instance_type},
            "tolerations": list(GPU_TOLERATIONS),
        },
    }
    replicas = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": pod}}
    if nodes > 1:
        replicas["Worker"] = {"replicas": nodes - 1, "restartPolicy": "Never", "template": pod}
    meta = {"name": job_name, "namespace": namespace, "labels": labels}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"allreduce_bench.py": BENCH.read_text()},
        },
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": meta,
            "spec": {
                "nprocPerNode": str(spec.gpus),
                "runPolicy": {"backoffLimit": 0},
                "pytorchReplicaSpecs": replicas,
            },
        },
    ]


def _ended(job: dict[str, Any]) -> str | None:
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("status") == "True" and condition.get("type") in ("Succeeded", "Failed"):
            return condition["type"]
    return None


@tool(read_only=False, operation=True)
def run_nccl_test(
    *,
    nodes: Annotated[int, Field(ge=1, le=256)],
    instance_type: str,
    image: str,
    namespace: str = "default",
    cluster_name: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    timeout_s: Annotated[float, Field(gt=0, le=7200)] = 1800,
    wait_seconds: WaitSeconds = None,
    progress: Progress | None = None,
) -> NcclJobResult:
    """Run the NCCL all-reduce test job on the cluster and parse rank 0's output."""
    from kubernetes.client.exceptions import ApiException

    progress = progress or NullProgress()
    spec = instance_spec(instance_type)
    kube = KubeJson(cluster_api_client(cluster_name, region, profile, kubeconfig, context))
    job_name = f"nccl-test-{secrets.token_hex(3)}"
    # The nodeSelector as the nodes spell it (a HyperPod node says ml.p5.48xlarge).
    objects = manifests(job_name, namespace, nodes, instance_type.strip(), image)
    job_path = kind_path("PyTorchJob", namespace, job_name)
    config_path = kind_path("ConfigMap", namespace, job_name)
    progress.report(0, None, f"creating {job_name} ({nodes} x {spec.name})")
    # Only what this run created is deleted at the end: on a clash of the random name
    # (409), the object is someone else's and stays.
    created: list[str] = []
    try:
        kube.request("POST", kind_path("ConfigMap", namespace), body=objects[0])
        created.append(config_path)
        kube.request("POST", kind_path("PyTorchJob", namespace), body=objects[1])
        created.append(job_path)

        def look() -> str | None:
            state = _ended(kube.get(job_path))
            if state is None:
                progress.report(0, None, f"{job_name}: waiting for the job to end")
            return state

        state = poll_until(look, lambda state: state is not None, timeout_s, POLL_S)
        if state is None:
            raise ToolFailure(
                ErrorCode.OPERATION_FAILED,
                f"The NCCL test job {job_name} did not end within {timeout_s:g} s.",
                f"`kubectl -n {namespace} describe pytorchjob {job_name}`: pods "
                "Pending for GPUs/EFA, or image pulls; the job was deleted.",
                {"job_name": job_name},
            )
        try:
            master = kind_path("Pod", namespace, f"{job_name}-master-0")
            log = kube.request("GET", f"{master}/log")[1].decode()
        except ApiException as exc:
            raise ToolFailure(
                ErrorCode.OPERATION_FAILED,
                f"The NCCL test job {job_name} ended ({state}) but its log cannot be read "
                f"(HTTP {exc.status}).",
                f"`kubectl -n {namespace} get pods -l {LABEL}={job_name}`.",
                {"job_name": job_name},
            ) from None
        report = parse(log, spec)
        if state == "Failed" and report.verdict == "pass":
            report.verdict, report.reason = "fail", f"job Failed; {report.reason}"
        progress.report(1, 1, f"{job_name}: {report.verdict}")
        tail = log.splitlines()[-20:]
        return NcclJobResult(job_name=job_name, namespace=namespace, nccl=report, log_tail=tail)
    finally:
        for path in reversed(created):
            try:
                kube.request("DELETE", path)
            except (ApiException, ToolFailure):
                pass
