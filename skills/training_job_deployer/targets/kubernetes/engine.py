"""What differs between the Kubernetes target's job kinds (engines): the Training
Operator v1's PyTorchJob (kubernetes/pytorchjob.py) and Kubeflow Trainer v2's TrainJob
(targets/trainjob/). The target (kubernetes/target.py) plans, submits, follows, lists,
stops and diagnoses through this interface and never branches on the kind; the reads
they share (pods, events, logs) are kube_monitor's, bound to the engine's JobKind."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from skills.shared.errors import ToolFailure
from skills.training_job_deployer.targets.kubernetes.kube_monitor import JobKind
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.trainer_log import RunMetrics


class Engine(ABC):
    """One kind of training job on a cluster."""

    # The `engine` deploy setting's value, as skills.kube.engines names what is served.
    name: ClassVar[str]
    job_kind: ClassVar[JobKind]  # the kind, its pods' job label, its trainer container
    controller: ClassVar[str]  # what makes the job's pods, in words

    @property
    def kind(self) -> str:
        return self.job_kind.kind

    @abstractmethod
    def render(self, inputs: RenderInputs) -> dict[str, Any]:
        """The job object the API receives, validated (ToolFailure manifest_invalid)."""

    def companions(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """Objects of the suite's the job needs and submit creates or updates first (a
        TrainJob's ClusterTrainingRuntime); none by default."""
        return []

    @abstractmethod
    def rank0_pod(self, job: dict[str, Any]) -> str:
        """How the plan names rank 0's pod (its log path), before it exists."""

    @abstractmethod
    def stop_patch(self) -> dict[str, Any]:
        """The merge patch that stops a job and keeps it (its pods go; suspend)."""

    @abstractmethod
    def avoiding(self, job: dict[str, Any], nodes: tuple[str, ...]) -> dict[str, Any]:
        """The job with every pod kept off `nodes` (validated again)."""

    @abstractmethod
    def commands(self, job: dict[str, Any]) -> list[list[str]]:
        """The trainer containers' argv (command then args), one per pod template, of a
        manifest or of the job as the cluster holds it."""

    @abstractmethod
    def pod_gpus(self, job: dict[str, Any]) -> list[int]:
        """The GPUs each pod of the job asks for, one entry per pod."""

    def progress(self, job: dict[str, Any]) -> RunMetrics | None:
        """What the job object itself says of the run's progress (None: it says nothing,
        the log is read instead)."""
        return None

    def eta_s(self, job: dict[str, Any]) -> int | None:
        """Seconds left, as the job object estimates them (None: it does not)."""
        return None

    @abstractmethod
    def missing(self) -> ToolFailure:
        """The refusal when the cluster does not serve this engine's kinds."""


def flag_values(commands: list[list[str]], flags: set[str]) -> list[str]:
    """The values of these flags (`--flag value`) in the argvs."""
    return [v for argv in commands for f, v in zip(argv, argv[1:], strict=False) if f in flags]


def commanded_max_steps(engine: Engine, job: dict[str, Any]) -> int | None:
    """The --max_steps the job's trainer was given (None: the trainer's default), read
    back from the job as the cluster holds it."""
    for value in flag_values(engine.commands(job), {"--max_steps"}):
        return int(value) if value.isdigit() else None
    return None
