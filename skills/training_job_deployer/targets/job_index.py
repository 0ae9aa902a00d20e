"""The list of a runs directory's jobs (local and Slurm): newest submission first, a
page at a time, through the runs' SQLite index (`JobIndex`: what a status filter tests
is in its rows, so a page reads only its own records), or, without the index, by reading
every record for its place."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar, Protocol

from skills.operations.record_store import MAX_RECORD_BYTES
from skills.shared.errors import ToolFailure
from skills.shared.paging import Key, Page, is_after, start_after
from skills.shared.reading import ReadRefused, read_bytes
from skills.shared.record_index import RecordIndex, fingerprint
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.base import EVERY_JOB, JobPage

# Index rows a list reads in one query (a page of 20 and its filter's misses, most often).
ROWS_AT_ONCE = 64

logger = logging.getLogger(__name__)


class RecordedRow(Protocol):
    """A job's run as the index reads it (run_dir.RecordedRun)."""

    def read_row(self) -> dict[str, Any] | None: ...


# Whether a row's processes (a job its record has not ended) run now, by the job's name
# and row: no run object is made, nor a path parsed, per row a filter looks at.
RunsNow = Callable[[str, dict[str, Any]], bool]


def list_recorded_jobs(
    runs_dir: Path,
    record_name: str,
    target: str,
    describe: Callable[[str], JobState],
    page: JobPage = EVERY_JOB,
    runs: Callable[[str], RecordedRow] | None = None,
    runs_now: RunsNow | None = None,
) -> Page[JobState]:
    """The page of jobs with a record named `record_name` under runs_dir, newest
    submission first, as `describe` tells it (one that cannot be described is listed as
    unknown, with why), and how many match past it. Only the page's jobs are described,
    unless a status is asked for: then jobs that may have it (the runs' index says which,
    `JobIndex`) are described in order until the page is full, and the count is None
    unless every one was. Without the index (a server closed to writes) every record is
    read for its place."""
    if not runs_dir.is_dir():
        return Page([], 0, None)
    if runs is not None:
        found = JobIndex(runs_dir, record_name, runs, runs_now).page(
            page, lambda name: _described(runs_dir / name / record_name, target, describe)
        )
        if found is not None:
            return found
    keyed = sorted((_submission_key(p), p) for p in runs_dir.glob(f"*/{record_name}"))
    places = {key[-1]: key for key, _ in keyed}
    anchor = start_after(page.cursor, places.get, like=(0.0, ""))
    rest = [(key, path) for key, path in keyed if is_after(key, anchor)]
    return _paged(
        ((key, partial(_described, path, target, describe)) for key, path in rest), page, len(rest)
    )


def _paged(
    candidates: Iterator[tuple[Key, Callable[[], JobState]]], page: JobPage, count: int | None
) -> Page[JobState]:
    """The page of `candidates` (in list order: a key, how to describe the job), `count`
    of them in all (None: not known). Without a status the first `limit` are described;
    with one, candidates are described until one more than the page matches."""
    if page.status is None:
        shown = list(candidates if page.limit is None else islice(candidates, page.limit))
        more = None if count is None else count - len(shown)
        return Page([d() for _, d in shown], more, shown[-1][0] if shown else None)
    matched: list[tuple[JobState, Key]] = []
    for key, described in candidates:
        state = described()
        if state.status != page.status:
            continue
        if page.limit is not None and len(matched) == page.limit:  # one more: there are more
            more = 1 if next(candidates, None) is None else None
            return Page([m for m, _ in matched], more, matched[-1][1] if matched else None)
        matched.append((state, key))
    return Page([m for m, _ in matched], 0, matched[-1][1] if matched else None)


class JobIndex:
    """`<runs_dir>/.<record>-index.sqlite3` (skills.shared.record_index): per job, its
    submission time (a list's order), the status its record settles, its end and last
    figures (steps, loss), and the processes that keep it running, so a list reads only
    the records of its page and a status filter only those that may match (issue 49).
    The record's writer notes it, holding the job's lock (RecordedRun: the local
    supervisor as the job goes); a list syncs first (a stat per record, a read of those
    changed behind the index), so records from before the index, and a lost or corrupt
    index, are read once again. A page walks the index in list order from its cursor
    (keyset) and stops when full: its memory does not grow with the jobs.

    A status is what the record settles: an ended job's kept outcome, or `running` for a
    job its record says has not ended (a list sees it running, or failed or cancelled
    once its processes are gone: the row's processes, looked at without its record);
    none (NULL: any) where the log or the scheduler must say (an ended job without its
    outcome yet, a Slurm job not ended)."""

    # What a job the index calls running may be listed as (its processes gone).
    UNSETTLED: ClassVar[dict[str, frozenset[str]]] = {
        "running": frozenset({"running", "failed", "cancelled"})
    }
    COLUMNS: ClassVar[dict[str, str]] = {
        "submitted_at": "REAL",
        "status": "TEXT",
        "ended_at": "REAL",
        "step": "INTEGER",
        "loss": "REAL",
        # The processes that keep a job its record has not ended running (local).
        "supervisor_pid": "INTEGER",
        "supervisor_started": "REAL",
        "trainer_pid": "INTEGER",
        "trainer_started": "REAL",
    }
    ORDER = "ORDER BY submitted_at DESC, name"

    def __init__(
        self,
        runs_dir: Path,
        record_name: str,
        runs: Callable[[str], RecordedRow] | None = None,
        runs_now: RunsNow | None = None,
    ) -> None:
        self.runs_dir = runs_dir
        self.record_name = record_name
        self.runs = runs  # a job's run directory by its name (a list reads records)
        self.runs_now = runs_now
        stem = record_name.rsplit(".", 1)[0]
        self.index = RecordIndex(
            runs_dir / f".{stem}-index.sqlite3",
            self.COLUMNS,
            [("status",), ("submitted_at DESC", "name")],
            version=2,  # 2: ends, figures and processes (version 1's rows are read again)
        )

    def note(self, job_name: str, record_path: Path, row: dict[str, Any]) -> None:
        """The job's record, just written (its lock held)."""
        self.index.note(job_name, record_path, row)

    def page(self, page: JobPage, described: Callable[[str], JobState]) -> Page[JobState] | None:
        """The page from the index (None without one: the caller reads the records).
        Only candidates are described: every job, or with a status those whose row may
        have it, less those the row shows running (for failed or cancelled)."""
        try:
            with self.index.open() as conn:
                if conn is None:
                    return None
                self.index.sync(
                    conn, self._records(), self._read_row, self._gone, missing_is_gone=True
                )
                anchor = start_after(
                    page.cursor, lambda name: self._key_of(conn, name), like=(0.0, "")
                )
                count = None
                if page.status is None:
                    where, args = self._after(anchor)
                    sql = f"SELECT COUNT(*) FROM records {where}"
                    (count,) = conn.execute(sql, args).fetchone()
                rows = self._rows(conn, anchor, page.status)
                return _paged(self._candidates(rows, page.status, described), page, count)
        except (sqlite3.Error, OSError) as exc:  # derived: the records answer instead
            logger.info("the jobs index of %s is not used: %s", self.runs_dir, exc)
            return None

    def _rows(
        self, conn: sqlite3.Connection, anchor: Key | None, status: str | None
    ) -> Iterator[tuple[Any, ...]]:
        """The rows after `anchor` that may have `status` (name, then COLUMNS), in list
        order, ROWS_AT_ONCE a query: no statement is open while the caller describes a
        job (which may write its record, and so the index)."""
        cols = ", ".join(self.COLUMNS)
        while True:
            where, args = self._after(anchor)
            if status is not None:
                where, args = self._may_have(status, where, args)
            sql = f"SELECT name, {cols} FROM records {where} {self.ORDER} LIMIT {ROWS_AT_ONCE}"
            batch = conn.execute(sql, args).fetchall()
            yield from batch
            if len(batch) < ROWS_AT_ONCE:
                return
            anchor = (-batch[-1][1], batch[-1][0])

    def _candidates(
        self, rows: Iterable[Any], status: str | None, described: Callable[[str], JobState]
    ) -> Iterator[tuple[Key, Callable[[], JobState]]]:
        """The rows (name, then COLUMNS) in list order as `_paged` takes them, less
        those that cannot have `status`: a job its row shows running, for failed or
        cancelled."""
        for name, *values in rows:
            row = dict(zip(self.COLUMNS, values, strict=True))
            if not self._still_running(status, row, name):
                yield (-row["submitted_at"], name), partial(described, name)

    def _records(self) -> Iterator[tuple[str, str]]:
        """Each run directory's record file (str paths: a join costs more than a stat)."""
        root = str(self.runs_dir)
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    yield entry.name, f"{root}/{entry.name}/{self.record_name}"

    def _gone(self, job_name: str) -> bool:
        return fingerprint(self.runs_dir / job_name / self.record_name) is None

    @staticmethod
    def _key_of(conn: sqlite3.Connection, job_name: str) -> Key | None:
        """A job's place (a cursor naming it): its row's."""
        found = conn.execute(
            "SELECT submitted_at FROM records WHERE name = ?", (job_name,)
        ).fetchone()
        return None if found is None else (-found[0], job_name)

    @staticmethod
    def _after(anchor: Key | None) -> tuple[str, list[Any]]:
        """The rows after a key (-submitted_at, name), in SQL: later in the list order."""
        if anchor is None:
            return "WHERE 1", []
        when, name = -float(anchor[0]), str(anchor[-1])
        return "WHERE (submitted_at < ? OR submitted_at = ? AND name > ?)", [when, when, name]

    def _may_have(self, status: str, where: str, args: list[Any]) -> tuple[str, list[Any]]:
        """`where` narrowed to the rows that may have `status`."""
        if status == "unknown":  # any record may be one that cannot be read
            return where, args
        wanted = sorted({status} | {had for had, may in self.UNSETTLED.items() if status in may})
        marks = ", ".join("?" * len(wanted))
        return f"{where} AND (status IS NULL OR status IN ({marks}))", [*args, *wanted]

    def _still_running(self, status: str | None, row: dict[str, Any], job_name: str) -> bool:
        """A row the index calls running whose processes run: not failed or cancelled,
        whatever its record says (it is not read)."""
        if status in (None, "running", "unknown") or row["status"] != "running":
            return False
        return self.runs_now is not None and self.runs_now(job_name, row)

    def _read_row(self, job_name: str) -> dict[str, Any]:
        """The row of a record the index does not have as it is, read now; one that
        cannot be read is placed as _submission_key places it, with no status."""
        found = None if self.runs is None else self.runs(job_name).read_row()
        path = self.runs_dir / job_name / self.record_name
        return found or {"submitted_at": -float(_submission_key(path)[0]), "status": None}


def figures_row(figures: dict[str, Any]) -> dict[str, Any]:
    """The index's columns of a job's figures (RunMetrics.state_fields): its last step
    and loss, where they are numbers."""
    step, loss = figures.get("steps"), figures.get("last_loss")
    number = (int, float)
    return {
        "step": step if isinstance(step, int) and not isinstance(step, bool) else None,
        "loss": float(loss) if isinstance(loss, number) and not isinstance(loss, bool) else None,
    }


def _submission_key(record: Path) -> Key:
    """A job's place in a list, newest submission first, then by name: the record's
    submitted_at, which an update of the record leaves alone (its mtime does not). A
    record that cannot be read sorts by its file's time. Read as RecordFile reads it:
    bounded, never through a link or from a FIFO."""
    try:
        data = read_bytes(record, what="record", max_bytes=MAX_RECORD_BYTES, follow_links=False)
        when = float(json.loads(data)["submitted_at"])
    except (ReadRefused, ValueError, KeyError, TypeError, RecursionError):
        try:
            when = record.lstat().st_mtime
        except OSError:
            when = 0.0
    return (-when, record.parent.name)


def _described(path: Path, target: str, describe: Callable[[str], JobState]) -> JobState:
    try:
        return describe(path.parent.name)
    except ToolFailure as failure:
        return JobState(
            job_name=path.parent.name,
            target=target,
            status="unknown",
            run_dir=str(path.parent),
            message=f"{failure.code}: {failure.message}",
            hint=failure.hint,
        )
