"""The detached process that runs one attempt of a local job: it starts torchrun,
writes its output to the attempt's log with secrets already masked, stops torchrun's
restarts on a configuration error, and records the exit code and end time, whether
or not whoever started the job still follows it.

    python -m skills.training_job_deployer.targets.local.supervisor <run_dir>   (the plan on stdin)
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

from skills.operations import processes
from skills.operations.record_store import RecordCorrupt
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import open_for_append
from skills.shared.secrets import redact, secret_values
from skills.training_job_deployer.targets.local.record import (
    RUN_DIR_ENV,
    JobFailure,
    JobProgress,
    JobRecord,
    ProcessIdentity,
    RunDir,
)
from skills.training_job_deployer.targets.local.target import LocalPlan, LocalTarget
from skills.training_job_deployer.trainer_log import RunMetrics, parse_line

TAIL_LINES = 40
# How often at most the trainer's figures go into the record (a list reads them there):
# a write per interval with news, not one per step.
PROGRESS_EVERY_S = 5.0


class Supervisor:
    def __init__(self, run: RunDir, plan: LocalPlan) -> None:
        self.run = run
        self.plan = plan
        self.file = run.record_file
        # Captured once, from the environment the job was submitted with.
        self.secrets = secret_values()
        self.trainer: subprocess.Popen[bytes] | None = None
        self.trainer_reaped = False
        self.stop_requested = False
        self.failure: JobFailure | None = None
        self.unlogged: deque[str] = deque(maxlen=TAIL_LINES)
        self.metrics = RunMetrics()
        self.progress_news = threading.Event()  # figures the record does not have yet
        self.pumped = threading.Event()  # the log is done: no more progress writes

    # the process ------------------------------------------------------------

    def main(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        for sig in (signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # only cancel (SIGTERM) stops a job
        outcome = self._start()
        if outcome == "not ours":
            return 0
        code = None
        if outcome == "started":
            assert self.trainer is not None
            assert self.trainer.stdout is not None  # started with stdout=PIPE
            self.record_progress()  # a running job has figures in its record from the start
            keeper = threading.Thread(target=self._keep_progress, daemon=True)
            keeper.start()
            self._pump(self.trainer.stdout)
            self.pumped.set()
            self.progress_news.set()
            keeper.join()
            code = self.trainer.wait()
            self.trainer_reaped = True
        self._tidy()
        self._finish(code)
        return 0

    def _start(self) -> str:
        """Start torchrun under the job's lock, unless the job was cancelled first: cancel
        then sees either no trainer and a request it honours, or the trainer's identity."""
        with self.file.lock():
            record = self.file.read()
            if record is None or record.attempt != self.plan.attempt or record.ended:
                return "not ours"
            if record.cancel_requested_at is not None or self.stop_requested:
                return "cancelled"
            self.run.scratch.mkdir(parents=True, exist_ok=True)
            try:
                self.trainer = subprocess.Popen(
                    self.plan.argv,
                    cwd=self.plan.cwd,
                    env={**os.environ, **self.plan.env, RUN_DIR_ENV: str(self.run.path)},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its group (torchrun's ranks have their own)
                )
            except OSError as exc:
                self.failure = JobFailure(
                    code=ErrorCode.LAUNCH_FAILED, message=f"torchrun could not start: {exc}"
                )
                return "failed to start"
            self.file.write(
                record.model_copy(update={"trainer": ProcessIdentity.of(self.trainer.pid)})
            )
            return "started"

    def _on_term(self, _signum: int, _frame: Any) -> None:
        """Cancel: SIGTERM the ranks (they checkpoint and exit), SIGKILL after the grace."""
        self.stop_requested = True
        if self._signal_trainer(signal.SIGTERM):
            record = self._read_quietly()
            grace = record.cancel_grace_s if record else 30.0
            timer = threading.Timer(grace, self._signal_trainer, (signal.SIGKILL,))
            timer.daemon = True
            timer.start()

    def _signal_trainer(self, sig: signal.Signals) -> bool:
        if self.trainer is None:
            return False
        if sig == signal.SIGKILL:
            # torchrun starts each rank in a session of its own: its group's SIGKILL
            # misses them, and a rank it left behind (a stopped or hung one) would live
            # on. Each process of the job carries the run directory in its environment.
            root = None if self.trainer_reaped else self.trainer.pid
            processes.signal_marked(sig, self.run.trainer_process, root)
        # Our own unreaped child: its pid cannot have been recycled.
        if self.trainer_reaped:
            return False
        try:
            os.killpg(self.trainer.pid, sig)
        except ProcessLookupError:
            return False
        return True

    # the log -----------------------------------------------------------------

    def _pump(self, stream: IO[bytes]) -> None:
        """Copy torchrun's output to the log line by line, masked. On a full disk the
        lines go on being read (torchrun must not block) and the last ones are kept for
        the record."""
        log = self._open_log()
        for raw in iter(stream.readline, b""):
            line = redact(raw.decode("utf-8", errors="replace"), self.secrets)
            self._watch(line)
            if log is not None:
                log = self._write(log, line)
            if log is None:
                self.unlogged.append(line.rstrip("\n")[:300])
        if log is not None:
            log.close()

    def _open_log(self) -> IO[bytes] | None:
        path = self.run.log(self.plan.attempt)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return open_for_append(path)  # never through a link or into a FIFO
        except OSError as exc:
            self._log_failed(path, exc)
            return None
        except ToolFailure as refused:
            self._log_failed(path, OSError(errno.ELOOP, refused.message))
            return None

    def _write(self, log: IO[bytes], line: str) -> IO[bytes] | None:
        try:
            log.write(line.encode())
            return log
        except OSError as exc:
            self._log_failed(self.run.log(self.plan.attempt), exc)
            log.close()
            return None

    def _log_failed(self, path: Path, exc: OSError) -> None:
        cause = "no space left on the device" if exc.errno == errno.ENOSPC else exc.strerror
        code = ErrorCode.NO_SPACE_LEFT if exc.errno == errno.ENOSPC else ErrorCode.SERVICE_ERROR
        if self.failure is None:
            self.failure = JobFailure(
                code=code,
                message=f"failed: {cause} writing the job's log {path}; free space and re-run "
                "the job to resume from its last checkpoint",
            )

    def _watch(self, line: str) -> None:
        """The trainer's figures are kept (for the record). A configuration error cannot
        succeed on retry: stop torchrun's restarts. A full disk is named as the cause,
        whatever the trainer was writing."""
        event = parse_line(line)
        if event is not None:
            try:
                self.metrics.add(event)
                self.progress_news.set()
            except (KeyError, TypeError, ValueError):  # a malformed event: not a figure
                pass
        if event is None or event["event"] != "error":
            return
        if "[Errno 28]" in str(event.get("message")) and self.failure is None:
            self.failure = JobFailure(
                code=ErrorCode.NO_SPACE_LEFT,
                message=f"failed: no space left on the device: {event.get('message')}; free "
                "space and re-run the job to resume from its last complete checkpoint",
            )
        if event.get("retryable") is not False:
            return
        if self.failure is None:
            self.failure = JobFailure(
                code=ErrorCode.INVALID_INPUT,
                message=f"failed: {event.get('error_type')}: {event.get('message')} (not "
                "restarted: retrying the same job cannot succeed)",
            )
        self._signal_trainer(signal.SIGTERM)

    # progress ----------------------------------------------------------------

    def _keep_progress(self) -> None:
        """While the log is pumped: the figures into the record, at most once per
        PROGRESS_EVERY_S and only with news (a quiet job costs no write)."""
        while True:
            self.progress_news.wait()
            if self.pumped.is_set():
                return
            self.progress_news.clear()
            self.record_progress()
            if self.pumped.wait(PROGRESS_EVERY_S):
                return

    def record_progress(self) -> None:
        """The trainer's figures so far into this attempt's record (not once it ended); a
        record that cannot be written now (a full disk, a lock held) waits for the next."""
        progress = JobProgress(at=time.time(), figures=self.metrics.state_fields())

        def add(record: JobRecord | None) -> JobRecord | None:
            if record is None or record.attempt != self.plan.attempt or record.ended:
                return None
            return record.model_copy(update={"progress": progress})

        try:
            self.file.update(add)
        except (OSError, ToolFailure, RecordCorrupt):
            return

    # the end -----------------------------------------------------------------

    def _tidy(self) -> None:
        """Mask torchelastic's error files (they quote exceptions) and drop the scratch."""
        for path in self.run.torchelastic.rglob("*") if self.run.torchelastic.is_dir() else ():
            try:
                if path.is_file() and not path.is_symlink():
                    text = path.read_text(errors="replace")
                    masked = redact(text, self.secrets)
                    if masked != text:
                        path.write_text(masked)
            except OSError:
                continue
        shutil.rmtree(self.run.scratch, ignore_errors=True)

    def _finish(self, exit_code: int | None) -> None:
        tail = (
            list(self.unlogged)
            if self.failure and self.failure.code == ErrorCode.NO_SPACE_LEFT
            else []
        )

        def end(record: JobRecord | None) -> JobRecord | None:
            if record is None or record.attempt != self.plan.attempt or record.ended:
                return None
            ended = record.finished(exit_code, self.failure)
            return ended.model_copy(update={"unlogged_tail": tail}) if tail else ended

        # On a full disk the ended record may only go where the running one was: keep
        # fewer of the lines the log could not take until it fits (how it ended first).
        while True:
            try:
                self.file.update(end)
                break
            except OSError as exc:
                if exc.errno != errno.ENOSPC or not tail:
                    raise
                tail = tail[len(tail) // 2 + 1 :]
        self._observe()

    def _observe(self) -> None:
        """Look at the ended job once, as get_training_job does: its outcome goes into the
        record (LocalTarget._state keeps it), so a list reads the record, not the log."""
        try:
            LocalTarget(self.run.path.parent).describe(self.run.job_name)
        except Exception:  # noqa: BLE001 - the job has ended and is recorded; a later look keeps it
            return

    def _read_quietly(self) -> JobRecord | None:
        try:
            return self.file.read()
        except Exception:  # noqa: BLE001 - a handler must not fail; the default grace serves
            return None


def main(argv: list[str]) -> int:
    plan = LocalPlan.model_validate_json(sys.stdin.buffer.read())
    return Supervisor(RunDir(Path(argv[0])), plan).main()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
