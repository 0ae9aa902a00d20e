"""Fleet scale, second pass (issue 49 items 1-2): the work behind a list of records,
at sizes spanning 16x, with the growth exponent k (the slope of log time against log
size; 1 is linear, 2 quadratic) and peak traced memory:

- list_operations with a status filter that matches nothing, over 500 / 2,000 / 8,000
  ended operations: the index (SQLite beside the records) answers, no record is read.
  The first list after the records were written without it migrates them (read once);
  `then` is every later list.
- list_training_jobs (local) over 64 / 256 / 1,024 running jobs, each with a 5 MiB log:
  a page of 20, and status filters that match none: `failed` (each running job's
  processes, as its index row names them, are looked at: a job whose processes are gone
  is failed) and `succeeded`. The records carry the figures their supervisors keep, so
  no log is read (`log reads`), and the runs' index (SQLite beside the run directories)
  says which records may match, so neither filter reads a record (`reads`).

Times are wall and this process's CPU (user + system, best of 3: the load of a shared
machine distorts wall time most), each with its k; the load average is printed with
each section.
- list_training_jobs (Slurm) over 64 / 256 / 1,024 ended jobs: records written as the
  target writes them (its run directory's record, the scheduler's end and the kept
  outcome; no job submitted: 1,024 sbatch runs are not what is measured), a page of 20
  and `failed` matching none, read from the index.

`--quick` runs the two smallest sizes of each (the test suite runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._growth import growth_exponent, measured  # noqa: E402
from benchmarks.fleet_history_and_logs import seed_operations  # noqa: E402
from skills.operations import operations  # noqa: E402
from skills.operations.record_store import RecordFile  # noqa: E402
from skills.training_job_deployer.targets import run_dir  # noqa: E402
from skills.training_job_deployer.targets.base import JobPage  # noqa: E402
from skills.training_job_deployer.targets.local.record import (  # noqa: E402
    SUPERVISOR_MODULE,
    JobProgress,
    JobRecord,
    ProcessIdentity,
    RunDir,
)
from skills.training_job_deployer.targets.local.target import LocalTarget  # noqa: E402
from skills.training_job_deployer.targets.run_dir import JobOutcome  # noqa: E402
from skills.training_job_deployer.targets.slurm.record import (  # noqa: E402
    SlurmEnd,
    SlurmRecord,
    SlurmRunDir,
)
from skills.training_job_deployer.targets.slurm.settings import SlurmSettings  # noqa: E402
from skills.training_job_deployer.targets.slurm.target import SlurmTarget  # noqa: E402

QUICK = "--quick" in sys.argv
OPERATIONS = [100, 200] if QUICK else [500, 2_000, 8_000]
RUNNING = [16, 64] if QUICK else [64, 256, 1_024]
LOG_MIB = 1 if QUICK else 5
# Jobs whose supervisor one stand-in process is (its command line names each run dir as
# the supervisor's does): a real process per job would be 1,024 processes.
JOBS_PER_HOLDER = 16
CALLS = 4  # measured() makes each call 4 times: reads are counted per call


def _row(*cells: Any) -> None:
    print(" | ".join(f"{c:>10}" for c in cells))


# --- operations -------------------------------------------------------------------------


def operation_lists(root: Path) -> None:
    os.environ[operations.STATE_DIR_ENV] = str(root / "state")
    print("\nlist_operations, status=failed (none failed): the index answers")
    _row("records", "migrate ms", "then ms", "then CPU ms", "reads", "peak MiB")
    now, seeded, times, cpus = time.time(), 0, [], []
    for count in OPERATIONS:
        seed_operations(count, start=seeded, now=now)  # written without the index
        seeded = count
        start = time.perf_counter()
        operations.page_records(None, "failed", 20, None)
        migrate = time.perf_counter() - start
        reads: list[str] = []
        real = operations.RecordFile.read

        def counted(self: Any, real: Any = real, reads: list[str] = reads) -> Any:
            reads.append(str(self.path))
            return real(self)

        operations.RecordFile.read = counted
        try:
            page, elapsed, cpu, peak = measured(
                lambda: operations.page_records(None, "failed", 20, None)
            )
        finally:
            operations.RecordFile.read = real
        assert page.items == [] and page.more == 0
        times.append(elapsed)
        cpus.append(cpu)
        _row(count, f"{migrate * 1000:.0f}", f"{elapsed * 1000:.1f}", f"{cpu * 1000:.1f}",
             len(reads), f"{peak:.2f}")  # fmt: skip
    print(f"operations, status matching none: k {growth_exponent(OPERATIONS, times):.2f} "
          f"(CPU k {growth_exponent(OPERATIONS, cpus):.2f}) "
          f"over {OPERATIONS[0]}..{OPERATIONS[-1]}")  # fmt: skip


# --- running local jobs -----------------------------------------------------------------


def _holder(runs: Path, names: list[str]) -> subprocess.Popen[bytes]:
    """A process whose command line names each job's run dir as its supervisor's does."""
    words = [w for n in names for w in ("-m", SUPERVISOR_MODULE, str(runs / n))]
    # One process (no shell whose sleep a kill would orphan); its argv stays as given.
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)", *words],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _seed_running(runs: Path, start: int, count: int, log: Path,
                  holders: list[subprocess.Popen[bytes]]) -> None:  # fmt: skip
    now = time.time()
    for first in range(start, count, JOBS_PER_HOLDER):
        names = [f"job-{i:05d}" for i in range(first, min(count, first + JOBS_PER_HOLDER))]
        holder = _holder(runs, names)
        holders.append(holder)
        identity = None
        while identity is None:
            identity = ProcessIdentity.of(holder.pid)
        for name in names:
            run = RunDir(runs / name)
            run.log(1).parent.mkdir(parents=True)
            os.link(log, run.log(1))  # one log on the disk, a name per job
            figures = {"steps": 900, "max_steps": 1000, "first_loss": 9.0, "last_loss": 2.5,
                       "tokens_per_s": 1000.0, "world_size": 8}  # fmt: skip
            run.record_file.write(JobRecord(
                job_name=name, attempt=1, argv=["torchrun"], submitted_at=now - int(name[4:]),
                supervisor=identity, progress=JobProgress(at=now, figures=figures),
            ))  # fmt: skip


def _count_reads() -> tuple[list[str], Any]:
    """Every record read (RecordFile.read) from now on, and how to stop counting."""
    reads: list[str] = []
    real = RecordFile.read

    def counted(self: Any) -> Any:
        reads.append(str(self.path))
        return real(self)

    RecordFile.read = counted

    def stop() -> None:
        RecordFile.read = real

    return reads, stop


def local_lists(root: Path) -> None:
    runs = root / "runs"
    runs.mkdir()
    log = root / "attempt.log"
    line = b'{"event": "step", "step": 900, "loss": 2.5, "tokens_per_s": 1000.0}\n'
    log.write_bytes(line * (LOG_MIB * 2**20 // len(line)))
    target = LocalTarget(runs)
    log_reads: list[str] = []
    real = run_dir.read_chunk

    def counted(path: Any, *args: Any, **kwargs: Any) -> bytes:
        log_reads.append(str(path))
        return real(path, *args, **kwargs)

    run_dir.read_chunk = counted
    holders: list[subprocess.Popen[bytes]] = []
    print(f"\nlist_training_jobs (local), running jobs with {LOG_MIB} MiB logs (ms: wall / CPU)")
    _row("running", "page ms", "page MiB", "failed ms", "failed MiB", "succ. ms",
         "succ. MiB", "fail reads", "succ reads", "log reads")  # fmt: skip
    walls: dict[str, list[float]] = {"page": [], "failed": [], "succeeded": []}
    cpus: dict[str, list[float]] = {"page": [], "failed": [], "succeeded": []}
    seeded = 0
    try:
        for count in RUNNING:
            _seed_running(runs, seeded, count, log, holders)
            seeded = count
            target.list_jobs(JobPage(limit=1, status="succeeded"))  # the index made
            log_reads.clear()
            cells, reads_of = [], {}
            for what, status in (("page", None), ("failed", "failed"), ("succeeded", "succeeded")):
                reads, stop = _count_reads()
                try:
                    page, wall, cpu, mib = measured(
                        lambda status=status: target.list_jobs(JobPage(limit=20, status=status))
                    )
                finally:
                    stop()
                if status is None:
                    statuses = {j.status for j in page.items}
                    assert len(page.items) == min(20, count) and statuses == {"running"}, statuses
                else:
                    assert page.items == [], status
                reads_of[what] = len(reads) // CALLS
                walls[what].append(wall)
                cpus[what].append(cpu)
                cells += [f"{wall * 1000:.0f}/{cpu * 1000:.0f}", f"{mib:.2f}"]
            _row(count, *cells, reads_of["failed"], reads_of["succeeded"], len(log_reads))
    finally:
        run_dir.read_chunk = real
        for holder in holders:
            holder.kill()
            holder.wait()
    span = f"over {RUNNING[0]}..{RUNNING[-1]}"

    def k(what: str) -> str:
        return (f"k {growth_exponent(RUNNING, walls[what]):.2f} "
                f"(CPU k {growth_exponent(RUNNING, cpus[what]):.2f}) {span}")  # fmt: skip

    print(f"running local jobs, a page of 20: {k('page')}")
    print(f"running local jobs, failed matching none (no record read): {k('failed')}")
    print(f"running local jobs, succeeded matching none (no record read): {k('succeeded')}")


# --- Slurm job records ------------------------------------------------------------------


def _seed_slurm(runs: Path, start: int, count: int) -> None:
    """Ended Slurm jobs as the target leaves them: the scheduler's end, then the outcome
    the first look kept (each write through the run directory's record, noted)."""
    now = time.time()
    for i in range(start, count):
        name = f"sjob-{i:05d}"
        run = SlurmRunDir(runs / name, f"/cluster/runs/{name}")
        run.path.mkdir(parents=True)
        record = SlurmRecord(job_name=name, slurm_job_id=1000 + i, submitted_at=now - i)
        run.record_file.write(record)
        ended = record.model_copy(update={"end": SlurmEnd(state="COMPLETED", exit_code=0)})
        run.record_file.write(ended)
        outcome = JobOutcome(status="succeeded", figures={"steps": 1000, "last_loss": 2.5})
        run.record_file.write(ended.model_copy(update={"outcome": outcome}))


def slurm_lists(root: Path) -> None:
    runs = root / "slurm-runs"
    runs.mkdir()
    target = SlurmTarget(SlurmSettings(target="slurm", runs_dir=str(runs)))
    print("\nlist_training_jobs (Slurm), ended jobs (records as the target writes them)")
    _row("jobs", "page ms", "page CPU", "page MiB", "page reads", "none ms", "none CPU",
         "none MiB", "none reads")  # fmt: skip
    pages, nones, page_cpus, none_cpus, seeded = [], [], [], [], 0
    for count in RUNNING:
        _seed_slurm(runs, seeded, count)
        seeded = count
        reads, stop = _count_reads()
        try:
            page, page_s, page_cpu, page_mib = measured(lambda: target.list_jobs(JobPage(limit=20)))
            page_reads = len(reads)
            reads.clear()
            none, none_s, none_cpu, none_mib = measured(
                lambda: target.list_jobs(JobPage(limit=20, status="failed"))
            )
        finally:
            stop()
        assert len(page.items) == min(20, count) and none.items == []
        page_reads, none_reads = page_reads // CALLS, len(reads) // CALLS
        pages.append(page_s)
        nones.append(none_s)
        page_cpus.append(page_cpu)
        none_cpus.append(none_cpu)
        _row(count, f"{page_s * 1000:.1f}", f"{page_cpu * 1000:.1f}", f"{page_mib:.2f}",
             page_reads, f"{none_s * 1000:.1f}", f"{none_cpu * 1000:.1f}", f"{none_mib:.2f}",
             none_reads)  # fmt: skip
    span = f"over {RUNNING[0]}..{RUNNING[-1]}"
    print(f"Slurm jobs, a page of 20: k {growth_exponent(RUNNING, pages):.2f} "
          f"(CPU k {growth_exponent(RUNNING, page_cpus):.2f}) {span}")  # fmt: skip
    print(f"Slurm jobs, failed matching none: k {growth_exponent(RUNNING, nones):.2f} "
          f"(CPU k {growth_exponent(RUNNING, none_cpus):.2f}) {span}")  # fmt: skip


def _load() -> None:
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for section in (operation_lists, local_lists, slurm_lists):
            _load()
            section(Path(tmp))
        _load()


if __name__ == "__main__":
    main()
