"""diagnose_training_job's flow: a live job read through its target (optionally saved,
masked, to a file) or a saved snapshot read offline, then the pod doctor's diagnosis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from skills.job_doctor.diagnose import MAX_PER_POD_FINDINGS, Diagnosis, diagnose
from skills.job_doctor.snapshot import redacted
from skills.job_doctor.snapshot_file import read_snapshot, write_snapshot
from skills.shared.errors import bad_fields
from skills.shared.progress import NullProgress, Progress
from skills.shared.results import ToolResult
from skills.training_job_deployer.targets.base import Capability
from skills.training_job_deployer.targets.by_name import DoctorSettings, get_target


class DiagnosisResult(Diagnosis, ToolResult):
    source: str = Field(description="Where the snapshot came from.")
    saved_snapshot: str | None = None

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("job", self.job_name or "-"), ("source", self.source)]
        if self.job_status:
            rows.append(("job status", self.job_status))
        rows.append(("pods", self.pods))
        rows.append(("diagnosis", self.summary))
        root = self.root
        if root:
            rows += [("root cause", root.root_cause), ("fix", root.remediation)]
            rows.append(("retryable", "yes" if root.retryable else "no (permanent)"))
            rows.append(("evidence", "\n" + "\n".join(root.evidence)))
            if root.consequences:
                rows.append(("then", "\n" + "\n".join(root.consequences)))
        if len(self.findings) > 1:
            others = [
                f"{f.code} [{f.role}] {f.pod} (rank {f.rank})"
                + (f" and {f.alike} more pods" if f.alike else "")
                for f in self.findings[1:]
            ]
            rows.append(("also seen", "\n" + "\n".join(others)))
        if self.findings_cut:
            rows.append((f"{self.findings_cut} more", f"cursor={self.next_cursor}"))
        if self.logs_cut:
            rows.append(("logs cut", ", ".join(self.logs_cut)))
        if self.saved_snapshot:
            rows.append(("saved", self.saved_snapshot))
        return rows


def diagnose_job(
    job_name: str | None,
    cluster: DoctorSettings,
    snapshot: str | None,
    save_snapshot: str | None,
    per_pod: bool,
    progress: Progress | None,
    limit: int = MAX_PER_POD_FINDINGS,
    cursor: str | None = None,
) -> DiagnosisResult:
    """Live (job_name) or offline (snapshot, read as a stream), never both; per_pod
    findings a page at a time (`limit`, `cursor`)."""
    progress = progress or NullProgress()
    if snapshot is not None and job_name is None:
        if save_snapshot is not None:
            raise bad_fields(
                [{"field": "save_snapshot", "problem": "saves a live snapshot: give job_name"}],
                "diagnose_training_job",
            )
        parts, logs = read_snapshot(Path(snapshot).expanduser())
        found = diagnose(parts, per_pod, limit, cursor, logs=logs)
        return DiagnosisResult(source=f"snapshot {snapshot}", **_fields(found))
    if job_name is None or snapshot is not None:  # neither given, or both
        raise bad_fields(
            [{"field": "job_name", "problem": "give job_name (live) or snapshot (a file)"}],
            "diagnose_training_job",
        )

    runner = get_target(cluster)
    runner.require(Capability.SNAPSHOT, field="job_name")
    where = runner.place(job_name)
    progress.report(0, 2, f"reading {where}")
    data = runner.snapshot(job_name)
    progress.report(1, 2, "diagnosing")
    saved = None
    if save_snapshot is not None:
        data = redacted(data)
        saved = str(write_snapshot(Path(save_snapshot), data))
    result = DiagnosisResult(
        source=f"cluster {where}",
        saved_snapshot=saved,
        **_fields(diagnose(data, per_pod, limit, cursor)),
    )
    progress.report(2, 2, result.summary)
    return result


def _fields(diagnosis: Diagnosis) -> dict[str, Any]:
    return {name: getattr(diagnosis, name) for name in Diagnosis.model_fields}
