"""What one writer per job costs a deploy: the record work submit does now (take the
job's file lock, read and validate the previous record, write the new one twice from
unique temp files: before and after the supervisor starts) against what it did before
(one json.dumps to a shared `job.tmp`, renamed over job.json, no lock), measured in
the same run on the same disk. Printed per deploy, with the ratio; the trainer's own
start (seconds) dwarfs both."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from skills.training_job_deployer.targets.local.record import (  # noqa: E402
    JobRecord,
    ProcessIdentity,
    RunDir,
)

QUICK = "--quick" in sys.argv  # one round of 20 (the test suite runs it)
ROUNDS = 1 if QUICK else 5
DEPLOYS = 20 if QUICK else 400
ARGV = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
        "--nproc_per_node=2", "-m", "trainer", "--max_steps", "200"]  # fmt: skip


def before(run_dir: Path, attempt: int) -> None:
    record = {"job_name": run_dir.name, "pid": 4242, "argv": ARGV, "log_path": "x",
              "started_at": time.time(), "exit_code": None, "cancelled": False}  # fmt: skip
    tmp = run_dir / "job.tmp"
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(run_dir / "job.json")


def now(run: RunDir, attempt: int) -> None:
    with run.record_file.lock():
        previous = run.record_file.read()
        assert previous is None or previous.ended  # as submit checks: not running
        record = JobRecord(
            job_name=run.job_name, attempt=attempt, argv=ARGV, submitted_at=time.time()
        )
        run.record_file.write(record)
        supervisor = ProcessIdentity(pid=4242, started=time.time())
        run.record_file.write(
            record.model_copy(update={"supervisor": supervisor, "ended_at": time.time()})
        )


def per_deploy_us(fn, target) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for attempt in range(1, DEPLOYS + 1):
        fn(target, attempt)
    return (time.perf_counter() - start) / DEPLOYS * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="record-bench-") as tmp:
        old_dir, new_dir = Path(tmp) / "old", Path(tmp) / "new"
        old_dir.mkdir()
        new_dir.mkdir()
        run = RunDir(new_dir)
        old, new = [], []
        for _ in range(ROUNDS):  # interleaved, so both see the same disk and cache state
            old.append(per_deploy_us(before, old_dir))
            new.append(per_deploy_us(now, run))
    old_us, new_us = statistics.median(old), statistics.median(new)
    print(f"record work per deploy: before {old_us:.0f} us, now {new_us:.0f} us "
          f"(lock + read + 2 atomic writes), ratio {new_us / old_us:.2f}x "
          f"(median of {ROUNDS} rounds x {DEPLOYS} deploys)")  # fmt: skip


if __name__ == "__main__":
    main()
