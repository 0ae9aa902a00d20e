"""The TrainJob engine: Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1, v2.3.0) on
JobSet (v0.12.0). Its pods are the JobSet's (labelled with the JobSet's name, which is
the TrainJob's; node rank = completion index: skills.kube.pods), stopping is
spec.suspend (upstream's docs/user-guides/trainjob-lifecycle.md: "pause a running
TrainJob without deleting it"), nodes are avoided through the suite's runtimePatches
entry (docs/operator-guides/runtime-patches.md), and a running trainer's progress is
on the object: status.trainerStatus (the TrainJobStatus feature, since v2.2), which
get_training_job and list_training_jobs read before any log."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from skills.kube.gpu_nodes import GPU_RESOURCE
from skills.kube.pods import JOBSET_NAME_LABEL, TRAINER_CONTAINER, as_int, get, items, text
from skills.shared.errors import ErrorCode, ToolFailure
from skills.training_job_deployer.targets.kubernetes.engine import Engine, commanded_max_steps
from skills.training_job_deployer.targets.kubernetes.kube_monitor import JobKind
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.targets.trainjob import manifest
from skills.training_job_deployer.trainer_log import RunMetrics

TRAINJOB = JobKind("TrainJob", JOBSET_NAME_LABEL, TRAINER_CONTAINER)
# The metric names the trainer posts to the Trainer status server (trainer/, issue 47
# item 5), each value a string as the API holds them.
STEP, LOSS, TOKENS_PER_S, MFU = "step", "loss", "tokens_per_s", "mfu"


class TrainJobEngine(Engine):
    name: ClassVar[str] = "trainjob"
    job_kind: ClassVar[JobKind] = TRAINJOB
    controller: ClassVar[str] = "Kubeflow Trainer (its JobSet)"

    def render(self, inputs: RenderInputs) -> dict[str, Any]:
        return manifest.render(inputs)

    def companions(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The suite's ClusterTrainingRuntime, when the job runs on it."""
        ref = job["spec"]["runtimeRef"]
        return [manifest.cluster_runtime()] if ref["name"] == manifest.RUNTIME else []

    def rank0_pod(self, job: dict[str, Any]) -> str:
        return manifest.pod_name_prefix(job) + "-*"

    def stop_patch(self) -> dict[str, Any]:
        """spec.suspend: Trainer suspends the JobSet, whose Jobs delete their pods
        (SIGTERM: the trainer checkpoints); the TrainJob and its checkpoints stay."""
        return {"spec": {"suspend": True}}

    def avoiding(self, job: dict[str, Any], nodes: tuple[str, ...]) -> dict[str, Any]:
        return manifest.avoiding(job, nodes)

    def commands(self, job: dict[str, Any]) -> list[list[str]]:
        trainer = get(job, "spec", "trainer")
        return [[str(a) for a in items(get(trainer, "command")) + items(get(trainer, "args"))]]

    def pod_gpus(self, job: dict[str, Any]) -> list[int]:
        trainer = job["spec"]["trainer"]
        limits = (trainer.get("resourcesPerNode") or {}).get("limits") or {}
        gpus = as_int(limits.get(GPU_RESOURCE)) or 0
        return [gpus] * int(trainer.get("numNodes") or 1)

    def progress(self, job: dict[str, Any]) -> RunMetrics | None:
        """status.trainerStatus as the run's metrics (None when the trainer has posted
        none): steps, loss and tokens/s from its metrics (step, loss, tokens_per_s),
        max_steps from the job's command, else from the step and progressPercentage."""
        status = get(job, "status", "trainerStatus")
        if not isinstance(status, dict) or not text(status.get("lastUpdatedTime")):
            return None
        posted = {text(get(m, "name")): text(get(m, "value")) for m in items(status.get("metrics"))}
        metrics = RunMetrics()
        step = _number(posted.get(STEP))
        metrics.steps = int(step) if step is not None else 0
        metrics.last_loss = _number(posted.get(LOSS))
        metrics.tokens_per_s = _number(posted.get(TOKENS_PER_S))
        metrics.max_steps = commanded_max_steps(self, job)
        percent = as_int(status.get("progressPercentage"))
        if metrics.max_steps is None and percent and metrics.steps:
            metrics.max_steps = round(metrics.steps * 100 / percent)
        return metrics

    def eta_s(self, job: dict[str, Any]) -> int | None:
        return as_int(get(job, "status", "trainerStatus", "estimatedRemainingSeconds"))

    def missing(self) -> ToolFailure:
        return ToolFailure(
            ErrorCode.TRAINING_OPERATOR_MISSING,
            "The cluster has no TrainJob resource (trainer.kubeflow.org/v1alpha1, with "
            "JobSet's jobset.x-k8s.io/v1alpha2): Kubeflow Trainer v2 is not installed.",
            "Run manage_eks_cluster action=auto_fix (it installs Kubeflow Trainer v2 and "
            "JobSet), or deploy with engine=pytorchjob on a Training Operator v1 cluster.",
            {"engine": "trainjob"},
        )


def _number(value: str | None) -> float | None:
    """A posted metric's value as a number (None: absent, or not a finite number)."""
    try:
        number = float(value) if value else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None
