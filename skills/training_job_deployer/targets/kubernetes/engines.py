"""The Kubernetes target's engines by name, and the one engine=auto picks from those the
cluster serves."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from skills.shared.errors import ErrorCode, ToolFailure
from skills.training_job_deployer.targets.kubernetes.engine import Engine
from skills.training_job_deployer.targets.kubernetes.pytorchjob import PyTorchJobEngine
from skills.training_job_deployer.targets.trainjob.engine import TrainJobEngine

# The engines, in the order a job named by the other tools is looked for.
ENGINES: dict[str, Engine] = {e.name: e for e in (PyTorchJobEngine(), TrainJobEngine())}
# engine=auto: the first of these the cluster serves (Trainer v2 is upstream's current one).
AUTO_ORDER = ("trainjob", "pytorchjob")


def auto_engine(served: Iterable[str]) -> Engine:
    """engine=auto's engine: Trainer v2 when the cluster serves it, else the Training
    Operator v1; neither is refused with the call that installs one."""
    names = set(served)
    for name in AUTO_ORDER:
        if name in names:
            return ENGINES[name]
    raise ToolFailure(
        ErrorCode.TRAINING_OPERATOR_MISSING,
        "The cluster serves no training job kind: neither Kubeflow Trainer v2 "
        "(TrainJob, trainer.kubeflow.org/v1alpha1, with JobSet) nor the Training "
        "Operator v1 (PyTorchJob, kubeflow.org/v1).",
        "Run manage_eks_cluster action=auto_fix (it installs Kubeflow Trainer v2 and "
        "JobSet), then deploy again.",
        {"engines": list(ENGINES)},
    )


def deploy_engine(choice: str, served: Callable[[], Iterable[str]]) -> tuple[Engine, list[str]]:
    """The engine a deploy uses: the one `choice` names, else (auto) auto_engine's of
    those the cluster serves (`served`, asked only then); and the warnings of what was
    assumed (a cluster out of reach, a dry run, plans a PyTorchJob and says so)."""
    if choice != "auto":
        return ENGINES[choice], []
    try:
        names = served()
    except ToolFailure:
        return ENGINES["pytorchjob"], [
            "cluster not asked: engine=auto planned a PyTorchJob (a cluster serving "
            "Kubeflow Trainer v2 gets a TrainJob; pass engine to choose)"
        ]
    return auto_engine(names), []
