"""diagnose_training_job: why a PyTorchJob's pods fail, root cause first (the pod doctor)."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.job_doctor.diagnose import MAX_PER_POD_FINDINGS
from skills.job_orchestration.diagnose_job import DiagnosisResult, diagnose_job
from skills.shared.paging import Cursor
from skills.shared.paths import LocalPath
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.targets.by_name import DoctorSettings

_PATH = Field(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]+$")


@tool(read_only=True, idempotent=True)
def diagnose_training_job(
    *,
    job_name: JobName | None = None,
    cluster: DoctorSettings,
    snapshot: Annotated[
        str | None,
        _PATH,
        Field(description="Diagnose this saved snapshot offline."),
        LocalPath(writable=False),
    ] = None,
    save_snapshot: Annotated[
        str | None,
        _PATH,
        Field(description="Also write the live snapshot (secrets masked)."),
        LocalPath(writable=True),
    ] = None,
    per_pod: Annotated[bool, Field(description="Each pod's findings, not grouped.")] = False,
    limit: Annotated[
        int, Field(ge=1, le=MAX_PER_POD_FINDINGS, description="per_pod: at most this many.")
    ] = MAX_PER_POD_FINDINGS,
    cursor: Cursor = None,
    progress: Progress | None = None,
) -> DiagnosisResult:
    """Diagnose a PyTorchJob's failing pods: findings with evidence and fix, root cause
    first. Live (job_name) or offline (snapshot); read-only.

    Each finding: code, pod, rank, evidence, root cause, fix, retryable. Live reads the
    job by job_name (+ namespace, cluster_name or kubeconfig/context).
    """
    return diagnose_job(
        job_name, cluster, snapshot, save_snapshot, per_pod, progress, limit, cursor
    )


main = main_for(diagnose_training_job)


if __name__ == "__main__":
    main()
