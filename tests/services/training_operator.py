"""Plays the Kubeflow Training Operator (and the nodes' kubelets) on kmock, through the
Kubernetes API like a controller: kmock runs no controllers, so a test creates the pods
of a submitted PyTorchJob, moves them and the job through their phases and conditions,
and serves the pods' logs.

    operator = TrainingOperator(kube_api)            # the `kube_api` fixture's service
    operator.add_nodes("p5.48xlarge", 2, driver="580.65.06")
    ... deploy_training_job(...) creates the PyTorchJob ...
    operator.run("llama", outcome="Succeeded")       # pods, statuses, rank-0 log
    operator.run("llama", outcome="Failed", exit_codes={"master-0": 1},
                 rank_logs={"master-0": ERROR_LOG}, restarts={"worker-1": 2})

Logs default to RUN_LOG: JSON lines the real trainer printed (trainer/, `torchrun
--nproc_per_node=2 -m trainer --model_type debug --max_steps 6 --checkpoint_freq 3`,
recorded once; ERROR_LOG from a run with a missing dataset). Replicas are named as the
operator names them: "master-0", "worker-0", ... (pod `<job>-<replica>`)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Literal

from tests.services.kube import PYTORCHJOB, KubeService

DATA = Path(__file__).with_name("data")
RUN_LOG = (DATA / "trainer_run.jsonl").read_text()
ERROR_LOG = (DATA / "trainer_error.jsonl").read_text()
OTHER_RANK_LOG = "[rank1]: torch.distributed: worker started\n"

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
Outcome = Literal["Running", "Succeeded", "Failed"]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class TrainingOperator:
    def __init__(self, kube: KubeService, namespace: str = "default") -> None:
        from kubernetes import client, config

        self.kube = kube
        self.namespace = namespace
        configuration = client.Configuration()
        config.load_kube_config(str(kube.kubeconfig), client_configuration=configuration)
        api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # the cluster ---------------------------------------------------------------------

    def uninstall(self) -> None:
        """No Training Operator: the cluster serves no PyTorchJob kind."""
        self.kube.emulator.resources.pop(PYTORCHJOB, None)

    def add_nodes(
        self,
        instance_type: str,
        count: int = 1,
        *,
        gpus: int = 8,
        efa: int = 0,
        driver: str | None = "580.65.06",
        compute: tuple[int, int] | None = None,
    ) -> list[str]:
        """Ready GPU nodes as gpu-feature-discovery labels them."""
        names = []
        for i in range(count):
            name = f"{instance_type.replace('.', '-')}-{len(self.nodes())}-{i}"
            labels = {"node.kubernetes.io/instance-type": instance_type}
            if driver:
                labels["nvidia.com/cuda.driver-version.full"] = driver
            if compute:
                labels["nvidia.com/gpu.compute.major"] = str(compute[0])
                labels["nvidia.com/gpu.compute.minor"] = str(compute[1])
            allocatable = {"nvidia.com/gpu": str(gpus), "cpu": "192", "memory": "2000Gi"}
            if efa:
                allocatable["vpc.amazonaws.com/efa"] = str(efa)
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "status": {
                    "allocatable": allocatable,
                    "capacity": allocatable,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
            self.core.create_node(node, _preload_content=False)
            names.append(name)
        return names

    def nodes(self) -> list[dict[str, Any]]:
        return json.loads(self.core.list_node(_preload_content=False).data)["items"]

    # a job -------------------------------------------------------------------------------

    def job(self, name: str) -> dict[str, Any]:
        response = self.custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", self.namespace, "pytorchjobs", name, _preload_content=False
        )
        return json.loads(response.data)

    def replicas(self, name: str) -> list[tuple[str, int, dict[str, Any]]]:
        """(replica type, index, pod template) of every pod the job asks for."""
        specs = self.job(name)["spec"]["pytorchReplicaSpecs"]
        return [
            (kind, index, spec["template"])
            for kind in ("Master", "Worker")
            if (spec := specs.get(kind))
            for index in range(int(spec.get("replicas", 1)))
        ]

    def create_pods(self, name: str) -> list[str]:
        """The job's pods as the operator creates them: Pending, labelled, one per replica."""
        pods = []
        for kind, index, template in self.replicas(name):
            pod_name = f"{name}-{kind.lower()}-{index}"
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                JOB_NAME_LABEL: name,
                REPLICA_TYPE_LABEL: kind.lower(),
                REPLICA_INDEX_LABEL: str(index),
            }
            if kind == "Master" or (index == 0 and kind == "Worker"):
                labels["training.kubeflow.org/job-role"] = "master"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": self.namespace, "labels": labels},
                "spec": template["spec"],
                "status": {"phase": "Pending"},
            }
            self.core.create_namespaced_pod(self.namespace, pod, _preload_content=False)
            pods.append(pod_name)
        self._conditions(name, [("Created", "PyTorchJobCreated")], {})
        return pods

    def run(
        self,
        name: str,
        *,
        outcome: Outcome = "Succeeded",
        rank_logs: dict[str, str] | None = None,
        exit_codes: dict[str, int] | None = None,
        restarts: dict[str, int] | None = None,
        previous_logs: dict[str, str] | None = None,
        message: str | None = None,
    ) -> list[str]:
        """Create the job's pods (if not yet), serve their logs and move pods and job to
        `outcome`. rank_logs/exit_codes/restarts/previous_logs are keyed by replica
        ("master-0", "worker-1"); rank 0 logs RUN_LOG (ERROR_LOG when Failed) unless
        given, the others a plain line. A Failed job's failing replicas are those with a
        non-zero exit code (default: rank 0 with 1)."""
        existing = {p["metadata"]["name"] for p in self._pods(name)}
        pod_names = [f"{name}-{k.lower()}-{i}" for k, i, _ in self.replicas(name)]
        if not set(pod_names) <= existing:
            self.create_pods(name)
        rank0 = pod_names[0].removeprefix(f"{name}-")
        logs = {rank0: ERROR_LOG if outcome == "Failed" else RUN_LOG, **(rank_logs or {})}
        codes = dict(exit_codes or {})
        if outcome == "Failed" and not any(codes.values()):
            codes[rank0] = 1
        for pod in pod_names:
            replica = pod.removeprefix(f"{name}-")
            self.kube.set_pod_log(self.namespace, pod, logs.get(replica, OTHER_RANK_LOG))
            if previous_logs and replica in previous_logs:
                self.kube.set_pod_log(self.namespace, pod, previous_logs[replica], previous=True)
            code = codes.get(replica, 0)
            self._pod_status(pod, outcome, code, (restarts or {}).get(replica, 0))
        steps = [("Created", "PyTorchJobCreated"), ("Running", "PyTorchJobRunning")]
        if outcome == "Succeeded":
            steps.append(("Succeeded", "PyTorchJobSucceeded"))
        elif outcome == "Failed":
            steps.append(("Failed", "PyTorchJobFailed"))
        counts: dict[str, dict[str, int]] = {}
        for kind, _, _ in self.replicas(name):
            key = {"Succeeded": "succeeded", "Failed": "failed"}.get(outcome, "active")
            counts.setdefault(kind, {}).setdefault(key, 0)
            counts[kind][key] += 1
        self._conditions(name, steps, counts, message)
        return pod_names

    def add_event(
        self, involved: str, reason: str, message: str, kind: str = "Pod", type_: str = "Warning"
    ) -> None:
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved}.{reason.lower()}", "namespace": self.namespace},
            "involvedObject": {"kind": kind, "name": involved, "namespace": self.namespace},
            "reason": reason,
            "message": message,
            "type": type_,
            "lastTimestamp": _now(),
            "count": 1,
        }
        self.core.create_namespaced_event(self.namespace, event, _preload_content=False)

    # internals ---------------------------------------------------------------------------

    def _pods(self, name: str) -> list[dict[str, Any]]:
        listed = json.loads(
            self.core.list_namespaced_pod(self.namespace, _preload_content=False).data
        )
        return [
            p
            for p in listed["items"]
            if p["metadata"].get("labels", {}).get(JOB_NAME_LABEL) == name
        ]

    def _pod_status(self, pod: str, outcome: Outcome, code: int, restarts: int) -> None:
        if outcome == "Running":
            phase, state = "Running", {"running": {"startedAt": _now()}}
        else:
            phase = "Succeeded" if code == 0 else "Failed"
            reason = "Completed" if code == 0 else "Error"
            state = {"terminated": {"exitCode": code, "reason": reason, "finishedAt": _now()}}
        status = {
            "phase": phase,
            "containerStatuses": [
                {"name": "pytorch", "ready": phase == "Running", "restartCount": restarts,
                 "state": state, "image": "trainer", "imageID": "", "started": True}
            ],
        }  # fmt: skip
        self.core.patch_namespaced_pod_status(
            pod, self.namespace, {"status": status}, _preload_content=False
        )

    def _conditions(
        self,
        name: str,
        steps: list[tuple[str, str]],
        counts: dict[str, dict[str, int]],
        message: str | None = None,
    ) -> None:
        conditions = [
            {"type": kind, "status": "True", "reason": reason,
             "message": message if message and i == len(steps) - 1
             else f"PyTorchJob {name} is {kind.lower()}.",
             "lastTransitionTime": _now(), "lastUpdateTime": _now()}
            for i, (kind, reason) in enumerate(steps)
        ]  # fmt: skip
        for earlier in conditions[:-1]:
            if earlier["type"] == "Running" and conditions[-1]["type"] != "Running":
                earlier["status"] = "False"
        status = {"conditions": conditions, "replicaStatuses": counts, "startTime": _now()}
        if steps[-1][0] in ("Succeeded", "Failed"):
            status["completionTime"] = _now()
        self.custom.patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", self.namespace, "pytorchjobs", name, {"status": status},
            _preload_content=False,
        )  # fmt: skip
