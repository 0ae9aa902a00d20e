"""diagnose_training_job: why a PyTorchJob's pods fail, root cause first (the pod doctor)."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

import json
import os
import stat
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from commands._cli import main_for
from skills.job_doctor.diagnose import Diagnosis, diagnose, validate_snapshot
from skills.shared.errors import ErrorCode, ToolFailure, bad_fields
from skills.shared.files import write_new_or_owned
from skills.shared.paths import LocalPath
from skills.shared.progress import NullProgress, Progress
from skills.shared.reading import ReadRefused, parse_json
from skills.shared.results import ToolResult
from skills.shared.tooling import tool
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.targets.base import Capability
from skills.training_job_deployer.targets.registry import DoctorSettings, get_target

# A snapshot file larger than this is not one this tool wrote (logs are tailed).
MAX_SNAPSHOT_BYTES = 512 * 2**20

_PATH = Field(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]+$")


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
            rows.append(("left out", f"{self.findings_cut} more per-pod findings"))
        if self.logs_cut:
            rows.append(("logs cut", ", ".join(self.logs_cut)))
        if self.saved_snapshot:
            rows.append(("saved", self.saved_snapshot))
        return rows


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
    ] = None,  # fmt: skip
    save_snapshot: Annotated[
        str | None,
        _PATH,
        Field(description="Also write the live snapshot (secrets masked)."),
        LocalPath(writable=True),
    ] = None,  # fmt: skip
    per_pod: Annotated[bool, Field(description="Each pod's findings, not grouped.")] = False,
    progress: Progress | None = None,
) -> DiagnosisResult:
    """Diagnose a PyTorchJob's failing pods: findings with evidence and fix, root cause
    first. Live (job_name) or offline (snapshot); read-only.

    Each finding: code, pod, rank, evidence, root cause, fix, retryable. Live reads the
    job by job_name (+ namespace, cluster_name or kubeconfig/context).
    """
    progress = progress or NullProgress()
    if snapshot is not None and job_name is None:
        if save_snapshot is not None:
            raise bad_fields(
                [{"field": "save_snapshot", "problem": "saves a live snapshot: give job_name"}],
                "diagnose_training_job",
            )
        data = _read_snapshot(Path(snapshot).expanduser())
        return DiagnosisResult(
            source=f"snapshot {snapshot}", **_fields(diagnose(data, per_pod=per_pod))
        )
    if job_name is None or snapshot is not None:  # neither given, or both
        raise bad_fields(
            [{"field": "job_name", "problem": "give job_name (live) or snapshot (a file)"}],
            "diagnose_training_job",
        )

    from skills.job_doctor.snapshot import redacted

    runner = get_target(cluster)
    runner.require(Capability.SNAPSHOT, field="job_name")
    where = runner.place(job_name)
    progress.report(0, 2, f"reading {where}")
    data = runner.snapshot(job_name)
    progress.report(1, 2, "diagnosing")
    saved = None
    if save_snapshot is not None:
        data = redacted(data)
        saved = str(_write_snapshot(Path(save_snapshot), data))
    result = DiagnosisResult(
        source=f"cluster {where}", saved_snapshot=saved, **_fields(diagnose(data, per_pod))
    )
    progress.report(2, 2, result.summary)
    return result


def _fields(diagnosis: Diagnosis) -> dict[str, Any]:
    return {name: getattr(diagnosis, name) for name in Diagnosis.model_fields}


def _read_snapshot(path: Path) -> Any:
    """The file's JSON; a file that is not one is SNAPSHOT_INVALID, never a traceback (a
    FIFO or device is refused before it is read: it could block or never end)."""
    with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _invalid(path, "is not a regular file")
        if info.st_size > MAX_SNAPSHOT_BYTES:
            raise _invalid(path, f"is larger than {MAX_SNAPSHOT_BYTES // 2**20} MiB")
        raw = handle.read(MAX_SNAPSHOT_BYTES + 1)
    try:
        data = parse_json(raw.decode("utf-8"), what="snapshot file", source=path)
    except UnicodeDecodeError as exc:
        raise _invalid(path, f"is not JSON ({type(exc).__name__})") from None
    except ReadRefused as refused:  # malformed, or nested too deep for any walk over it
        raise _invalid(path, refused.problem) from None
    validate_snapshot(data, f"snapshot file {path}")
    return data


def _invalid(path: Path, problem: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.SNAPSHOT_INVALID,
        f"The snapshot file {path} {problem}.",
        "Give a file that --save_snapshot wrote (JSON: job, pods, events, logs).",
        {"path": str(path)},
    )


def _write_snapshot(path: Path, data: dict[str, Any]) -> Path:
    """Written whole or not at all (a temporary file renamed over the target), never
    through a link, and over an existing file only when it is a snapshot."""
    path = write_new_or_owned(path, json.dumps(data, indent=1) + "\n", owns=_is_snapshot)
    return path.resolve()


def _is_snapshot(head: bytes) -> bool:
    """A file --save_snapshot wrote (so saving again may replace it); a job record or any
    other file is not replaced."""
    try:
        data = parse_json(head.decode("utf-8"))
        validate_snapshot(data, "existing file")
    except (UnicodeDecodeError, ToolFailure):
        return False
    return True


main = main_for(diagnose_training_job)


if __name__ == "__main__":
    main()
