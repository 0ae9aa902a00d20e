"""Fleet scale, measured at three sizes spanning 16x (issue 35 items 2 and 4):

- list_operations (a page of 20) over 500 / 2,000 / 8,000 recorded operations: the
  records read and the time, against reading every record (what it did before) in the
  same run;
- get_training_job on a finished local job whose log is 16 MiB / 64 MiB / 256 MiB (a
  real job's log lengthened with step lines): time, bytes read and peak traced memory;
- get_training_job_logs on logs of 64 MiB / 256 MiB / 1 GiB (sparse: a hole, then real
  lines): bytes read and time per call, and their growth exponent (issue 49 item 4).

`--quick` runs the smallest size once (the test suite runs it so the benchmark cannot rot).
`--from-run DIR` lengthens a copy of DIR, a finished local job's run directory, instead of
training a job first: the test suite passes the ended job its other tests share (a job
is two torch starts; only its log matters here)."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._from_run import FROM_RUN  # noqa: E402
from benchmarks._growth import growth_exponent  # noqa: E402
from skills.operations import operations  # noqa: E402
from skills.operations.operation_state import OperationRecord  # noqa: E402
from skills.operations.record_store import RecordFile  # noqa: E402

QUICK = "--quick" in sys.argv
RECORDS = [500] if QUICK else [500, 2000, 8000]
LOG_MIB = [16] if QUICK else [16, 64, 256]
# The job whose log is lengthened (--quick: 1 process; its log is all it is there for).
STEPS, PROCESSES = (1, 1) if QUICK else (3, 2)


def seed_operations(count: int, start: int = 0, now: float | None = None) -> None:
    """Operation records `start`..`count` (newest first, a minute apart from `now`), as
    build_image leaves them (fleet_scale.py seeds its sizes with it too)."""
    now = time.time() if now is None else now
    for i in range(start, count):
        created = now - i * 60
        stamp = datetime.fromtimestamp(created, timezone.utc).strftime("%Y%m%d-%H%M%S")
        op_id = f"build_image-{stamp}-{i:06x}"
        folder = operations.operations_dir() / op_id
        folder.mkdir(parents=True)
        RecordFile(folder / operations.RECORD, OperationRecord).write(OperationRecord(
            operation_id=op_id, tool="build_image", entry="m:f", arguments={}, cwd="/",
            status="succeeded", created_at=created, updated_at=created, ended_at=created,
        ))  # fmt: skip


def _timed(call):
    reads: list[str] = []
    real = operations._read
    operations._read = lambda op_id: (reads.append(op_id), real(op_id))[1]
    try:
        start = time.perf_counter()
        call()
        return time.perf_counter() - start, len(reads)
    finally:
        operations._read = real


def history() -> None:
    print("list_operations, a page of 20: records read and seconds (all read = before)")
    for count in RECORDS:
        with tempfile.TemporaryDirectory() as state:
            os.environ[operations.STATE_DIR_ENV] = state
            seed_operations(count)
            page_s, page_reads = _timed(lambda: operations.list_records(limit=20))
            all_s, all_reads = _timed(lambda: operations.list_records()[:20])
            print(f"  {count:>6} records: page {page_reads:>4} reads {page_s * 1000:7.1f} ms"
                  f" | all {all_reads:>5} reads {all_s * 1000:8.1f} ms"
                  f" | ratio {all_s / page_s:6.1f}x")  # fmt: skip


def long_logs() -> None:
    from commands.deploy_training_job import deploy_training_job
    from commands.get_training_job import get_training_job
    from skills.training_job_deployer.trainer_log import parse_events

    print("get_training_job on a finished local job: seconds and peak traced memory")
    with tempfile.TemporaryDirectory() as runs:
        os.environ[operations.STATE_DIR_ENV] = str(Path(runs) / "state")
        job = Path(FROM_RUN).name if FROM_RUN else "long"
        if FROM_RUN:
            shutil.copytree(FROM_RUN, Path(runs) / job,
                            ignore=shutil.ignore_patterns("checkpoints"))  # fmt: skip
        else:
            deploy_training_job(job_name=job, runs_dir=runs, max_steps=STEPS,
                                gpu_per_node=PROCESSES)  # fmt: skip
        log = Path(runs) / job / "logs" / "attempt-1.log"
        events = parse_events(log.read_text())
        step = next(e for e in events if e["event"] == "step")
        summary = next(e for e in events if e["event"] == "summary")
        original = log.read_bytes()
        for mib in LOG_MIB:
            line = json.dumps(step).encode() + b"\n"
            count = mib * 2**20 // len(line)
            log.write_bytes(original + line * count + json.dumps(
                {**summary, "steps": count}).encode() + b"\n")  # fmt: skip
            tracemalloc.start()
            start = time.perf_counter()
            state = get_training_job(job_name=job, runs_dir=runs)
            seconds = time.perf_counter() - start
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert state.status == "succeeded" and state.steps == count, state
            print(f"  {mib:>4} MiB log: {seconds * 1000:7.1f} ms, peak {peak / 2**20:5.1f} MiB,"
                  f" status {state.status} at step {state.steps}")  # fmt: skip


# get_training_job_logs (issue 49 item 4): sparse logs, so 1 GiB costs no disk.
LOG_TAIL_MIB = [1, 16] if QUICK else [64, 256, 1024]
TAIL_ASKED = (100, 10_000)


def log_tails(sizes: list[int] = LOG_TAIL_MIB) -> list[tuple[int, int, float, int]]:
    """get_training_job_logs on an ended local job whose log is each size (a hole, then
    20,000 real lines): bytes read and time per call; the growth exponent of both
    against the size. Returns (MiB, tail_lines, bytes read, seconds) rows."""
    from commands.get_training_job_logs import get_training_job_logs
    from skills.training_job_deployer.targets.local.record import JobRecord
    from skills.training_job_deployer.targets.run_dir import RunDirTarget

    print("get_training_job_logs on an ended local job: bytes read and seconds per call")
    rows: list[tuple[int, int, float, int]] = []
    cpus: dict[tuple[int, int], float] = {}  # this process's CPU a call, by (MiB, tail_lines)
    real = RunDirTarget._read_from
    read: list[int] = []

    def counted(self, log, offset, max_bytes=2**20):  # every byte the tool reads
        data = real(self, log, offset, max_bytes)
        read.append(len(data))
        return data

    lines = b"".join(b'{"event": "step", "step": %d, "loss": 0.5}\n' % i for i in range(20_000))
    RunDirTarget._read_from = counted
    try:
        for mib in sizes:
            with tempfile.TemporaryDirectory() as runs:
                run = Path(runs) / "tail"
                (run / "logs").mkdir(parents=True)
                with (run / "logs" / "attempt-1.log").open("wb") as handle:
                    handle.truncate(mib * 2**20 - len(lines) - 1)
                    handle.seek(0, 2)
                    handle.write(b"\n" + lines)
                (run / "job.json").write_text(JobRecord(
                    job_name="tail", attempt=1, argv=["t"], submitted_at=1.0, ended_at=2.0,
                    exit_code=0).model_dump_json())  # fmt: skip
                for asked in TAIL_ASKED:
                    seconds, cpu, got = math.inf, math.inf, None
                    for _ in range(3):  # the best of 3: a loaded machine's noise is not growth
                        read.clear()
                        start, cpu_start = time.perf_counter(), time.process_time()
                        got = get_training_job_logs(job_name="tail", runs_dir=runs,
                                                    tail_lines=asked)  # fmt: skip
                        cpu = min(cpu, time.process_time() - cpu_start)
                        seconds = min(seconds, time.perf_counter() - start)
                    assert got is not None
                    expected = lines.decode().splitlines()[-got.lines :]
                    assert got.text.splitlines() == expected and got.lines >= min(asked, 500)
                    rows.append((mib, asked, seconds, sum(read)))
                    cpus[mib, asked] = cpu
                    print(
                        f"  {mib:>5} MiB log, tail_lines {asked:>6}: {got.lines:>5} lines, "
                        f"{sum(read) / 1024:6.1f} KiB read, {seconds * 1000:6.1f} ms "
                        f"(CPU {cpu * 1000:.1f} ms)"
                    )
    finally:
        RunDirTarget._read_from = real
    for asked in TAIL_ASKED:
        mine = [r for r in rows if r[1] == asked]
        size = [r[0] for r in mine]
        k_time = growth_exponent(size, [r[2] for r in mine])
        k_read = growth_exponent(size, [r[3] for r in mine])
        k_cpu = growth_exponent(size, [cpus[r[0], asked] for r in mine])
        print(f"  tail_lines {asked}: growth exponent k, time {k_time:.2f}, CPU {k_cpu:.2f}, "
              f"bytes read {k_read:.2f} (size x{sizes[-1] // sizes[0]})")  # fmt: skip
    return rows


if __name__ == "__main__":
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    history()
    long_logs()
    log_tails()
