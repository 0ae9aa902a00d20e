"""The PyTorchJob engine: the Kubeflow Training Operator v1 (kubeflow.org/v1, release
1.9), what the Kubernetes target ran before Trainer v2. Its manifest is manifest.py's."""

from __future__ import annotations

from typing import Any, ClassVar

from skills.kube.gpu_nodes import pod_gpu_request
from skills.kube.pods import get, items
from skills.shared.errors import ErrorCode, ToolFailure
from skills.training_job_deployer.targets.kubernetes import manifest
from skills.training_job_deployer.targets.kubernetes.engine import Engine
from skills.training_job_deployer.targets.kubernetes.kube_monitor import PYTORCHJOB, JobKind
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs


class PyTorchJobEngine(Engine):
    name: ClassVar[str] = "pytorchjob"
    job_kind: ClassVar[JobKind] = PYTORCHJOB
    controller: ClassVar[str] = "the Training Operator"

    def render(self, inputs: RenderInputs) -> dict[str, Any]:
        return manifest.render(inputs)

    def rank0_pod(self, job: dict[str, Any]) -> str:
        """Master-0 beside Workers, else Worker-0 (the operator's pod names)."""
        replicas = job["spec"]["pytorchReplicaSpecs"]
        kind = "master" if "Master" in replicas else "worker"
        return f"{job['metadata']['name']}-{kind}-0"

    def stop_patch(self) -> dict[str, Any]:
        """runPolicy.suspend: the operator deletes the pods (SIGTERM: the trainer
        checkpoints); the job and its checkpoints stay."""
        return {"spec": {"runPolicy": {"suspend": True}}}

    def avoiding(self, job: dict[str, Any], nodes: tuple[str, ...]) -> dict[str, Any]:
        return manifest.avoiding(job, nodes)

    def commands(self, job: dict[str, Any]) -> list[list[str]]:
        replicas = get(job, "spec", "pytorchReplicaSpecs")
        return [
            [str(a) for a in items(get(c, "command")) + items(get(c, "args"))]
            for replica in (replicas.values() if isinstance(replicas, dict) else [])
            for c in items(get(replica, "template", "spec", "containers"))
        ]

    def pod_gpus(self, job: dict[str, Any]) -> list[int]:
        replicas = job["spec"]["pytorchReplicaSpecs"].values()
        return [
            pod_gpu_request(r["template"]["spec"])
            for r in replicas
            for _ in range(int(r["replicas"]))
        ]

    def missing(self) -> ToolFailure:
        return ToolFailure(
            ErrorCode.TRAINING_OPERATOR_MISSING,
            "The cluster has no PyTorchJob resource (kubeflow.org/v1): the Kubeflow "
            "Training Operator is not installed.",
            "Install it (manage_eks_cluster, or kubectl apply -k "
            '"github.com/kubeflow/training-operator.git/manifests/overlays/standalone'
            '?ref=v1.9.0"), then deploy again.',
        )
