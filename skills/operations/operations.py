"""Operations: work that can outlive one tool call (a build, a push, an NCCL test, a
multi-attempt recovery) runs in a detached worker process that records itself, so
a restarted MCP server, another shell or an agent's next call finds it again.

    <state dir>/operations/<operation_id>/operation.json   the record (one writer at a time)
                                          operation.lock   taken for every change
                                          worker.log       the worker's own output
    <state dir>/operations/index.sqlite3   each record's status, for filters (derived:
                                           made again from the records when missing)

`call()` starts one and waits up to `wait_seconds` (streaming its progress); `get`,
`wait`, `cancel` and `list_records` read and steer it. The record is a pydantic
model, written atomically from a unique temp file under the lock; the worker is
named by pid, start time and its command line, checked before any signal. The record's
arguments, result and error are masked as logs are (skills.shared.secrets.mask_data);
the worker gets the call's own arguments on its stdin, never from the record. Each
operation belongs to the scope that started it (operation_state.OPERATION_SCOPE: an MCP
server's workspace, or none for the CLI); get, wait, cancel and list_records answer
only within the caller's scope, and another scope's operation is not found. The state
directory is
FSDP_EKS_STATE_DIR, else $XDG_STATE_HOME/fsdp-eks, else ~/.local/state/fsdp-eks.
"""

from __future__ import annotations

import importlib
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import signal
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from skills.operations import processes
from skills.operations.operation_state import (
    OPERATION_ID,
    OPERATION_SCOPE,
    TERMINAL,
    OperationProgress,
    OperationRecord,
    OperationState,
    state_model,
)
from skills.operations.operation_state import outcome as ended_with
from skills.operations.record_store import RecordCorrupt, RecordFile
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paging import Key, Page, is_after, start_after
from skills.shared.paths import working_dir
from skills.shared.progress import CancellableProgress, Cancelled, Progress
from skills.shared.record_index import RecordIndex
from skills.shared.secrets import mask_data, redact
from skills.shared.tooling import WAIT_PARAM, ToolSpec, spec_of
from skills.shared.waiting import poll_until
from skills.shared.write_gate import writes_closed

STATE_DIR_ENV = "FSDP_EKS_STATE_DIR"
RECORD = "operation.json"
INDEX = "index.sqlite3"  # beside the operation folders: derived from their records
POLL_S = 0.2
WRITE_EVERY_S = 0.5  # progress writes are throttled; the final state always lands
LOG_TAIL = 20
CANCEL_GRACE_S = 15.0
WORKER_MODULE = "skills.operations.operations"

R = TypeVar("R")
T = TypeVar("T")


def _worker(operation_id: str) -> processes.Expected:
    """The worker of this operation, as its command line names it (not as a record says)."""
    return processes.module_command(WORKER_MODULE, operation_id)


def state_dir() -> Path:
    if explicit := os.environ.get(STATE_DIR_ENV):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "fsdp-eks"


def operations_dir() -> Path:
    return state_dir() / "operations"


# --- the store --------------------------------------------------------------------


def _path(operation_id: str) -> Path:
    if not re.fullmatch(OPERATION_ID, operation_id):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "operation_id is not an operation id.",
            "Use an id that a tool returned, or list_operations to find one.",
        )
    return operations_dir() / operation_id


def _file(operation_id: str) -> RecordFile[OperationRecord]:
    return RecordFile(_path(operation_id) / RECORD, OperationRecord)


def _read(operation_id: str) -> OperationRecord:
    file = _file(operation_id)
    try:
        record = file.read()
    except RecordCorrupt as exc:
        raise ToolFailure(
            ErrorCode.OPERATION_FAILED,
            f"The record of operation {operation_id!r} cannot be read ({exc.reason}).",
            f"Remove {file.path.parent} and start the work again.",
            {"path": str(file.path)},
        ) from None
    if record is None:
        raise ToolFailure(
            ErrorCode.OPERATION_NOT_FOUND,
            f"No operation {operation_id!r} under {operations_dir()}.",
            "list_operations shows the operations recorded here (set FSDP_EKS_STATE_DIR if "
            "they were started with another state directory).",
        )
    return record


def _update(operation_id: str, **changes: Any) -> OperationRecord:
    """Read-modify-write under the lock. A terminal status is final."""

    def change(record: OperationRecord | None) -> OperationRecord:
        record = record or _read(operation_id)
        kept = changes
        if record.status in TERMINAL:
            kept = {k: v for k, v in changes.items() if k in ("pid", "pid_started")}
        return record.model_copy(update={**kept, "updated_at": time.time()})

    file = _file(operation_id)
    if writes_closed():  # computed, not written (write_gate): nothing to note either
        updated = file.update(change)
    else:
        with file.lock():  # held while noted: an older write cannot be noted over it
            updated = file.update(change)
            assert updated is not None
            _note(updated)
    assert updated is not None  # change() always returns a record
    return updated


# --- the index: what a filter tests, for every record without reading one ---------------


def _index() -> RecordIndex:
    return RecordIndex(operations_dir() / INDEX, {"status": "TEXT"}, [("status",)])


def _note(record: OperationRecord) -> None:
    _index().note(record.operation_id, _file(record.operation_id).path, {"status": record.status})


def _indexed_status(name: str) -> dict[str, Any]:
    """What the index keeps of a record, read from it (None: it cannot be read)."""
    try:
        record = _file(name).read()
    except RecordCorrupt:
        record = None
    return {"status": None if record is None else record.status}


def _removed(name: str) -> bool:
    """An indexed operation whose folder is gone (pruned)."""
    return not os.path.isdir(os.path.join(operations_dir(), name))


def _may_have(tool: str | None, status: str) -> list[str] | None:
    """The operations (of `tool`) whose record may have `status`, newest first: the
    index's (synced from the listing, a stat per record, a read of the changed only),
    with the running ones (a running operation whose worker died is failed or cancelled
    when looked at). Only those are held, not every folder's name. None without an index
    (a read-only server, an index that cannot be opened): the caller lists the folders."""
    try:
        with _index().open() as conn:
            if conn is None:
                return None
            root = str(operations_dir())  # str paths: pathlib costs more than the stat
            records = ((n, os.path.join(root, n, RECORD)) for n in _folders())
            _index().sync(conn, records, _indexed_status, _removed)
            wanted = {status, "running"} if status in ("failed", "cancelled") else {status}
            marks = ", ".join("?" * len(wanted))
            rows = conn.execute(
                f"SELECT name FROM records WHERE status IN ({marks})", sorted(wanted)
            )
            found = [n for (n,) in rows if _of_tool(n, tool)]
    except sqlite3.Error as exc:  # derived: the records answer instead
        logging.getLogger(__name__).info("operations index not used: %s", exc)
        return None
    return sorted(found, key=_stamp, reverse=True)


def _masked(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return mask_data(dict(arguments))


# --- starting, following, stopping -------------------------------------------------


def start(spec: ToolSpec, raw: Mapping[str, Any]) -> OperationRecord:
    """Validate the call, record it and start its detached worker."""
    return _launch(spec, spec.parse(raw))  # bad input fails here, before anything is recorded


def _launch(spec: ToolSpec, args: BaseModel) -> OperationRecord:
    arguments = args.model_dump(mode="json", exclude_unset=True)
    arguments.pop(WAIT_PARAM, None)
    prune()
    now = time.time()
    stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%d-%H%M%S")
    operation_id = f"{spec.name}-{stamp}-{secrets.token_hex(3)}"
    folder = _path(operation_id)
    folder.mkdir(parents=True)
    record = OperationRecord(
        operation_id=operation_id,
        tool=spec.name,
        entry=spec.entry,
        arguments=_masked(arguments),
        cwd=str(working_dir()),  # the caller's project: the worker runs there
        workspace=OPERATION_SCOPE.get(),
        created_at=now,
        updated_at=now,
    )
    with _file(operation_id).lock():
        _file(operation_id).write(record)
        _note(record)
    pid = processes.spawn_module(
        WORKER_MODULE,
        operation_id,
        log=folder / "worker.log",
        stdin=json.dumps(arguments).encode(),  # unmasked: only the worker reads them
    )
    return _update(operation_id, pid=pid, pid_started=processes.start_time(pid))


def _read_in_scope(operation_id: str) -> OperationRecord:
    """The record, if the caller's scope started it; another scope's is not found (its
    existence is not told either)."""
    record = _read(operation_id)
    if record.workspace != OPERATION_SCOPE.get():
        raise ToolFailure(
            ErrorCode.OPERATION_NOT_FOUND,
            f"No operation {operation_id!r} started from this workspace.",
            "list_operations shows the operations this workspace started.",
        )
    return record


def get(operation_id: str) -> OperationRecord:
    record = _read_in_scope(operation_id)
    if record.status == "running" and record.pid is not None:
        if not processes.is_alive(record.pid, record.pid_started):
            time.sleep(POLL_S)  # it may have written its end just now
            record = _read(operation_id)
            if record.status == "running":
                record = _update(
                    operation_id,
                    status="cancelled" if record.cancel_requested else "failed",
                    ended_at=time.time(),
                    # killed by the cancel before its handler was set: the error the
                    # worker would have written
                    error=Cancelled(f"Operation {operation_id}").to_dict()["error"]
                    if record.cancel_requested
                    else _worker_died(operation_id),
                )
    return record


def _worker_died(operation_id: str) -> dict[str, Any]:
    log = _path(operation_id) / "worker.log"
    return ToolFailure(
        ErrorCode.OPERATION_FAILED,
        "The operation's worker process ended without recording a result.",
        f"See {log}; start the work again.",
        {"worker_log": str(log)},
    ).to_dict()["error"]


def wait(
    operation_id: str, wait_seconds: float | None, progress: Progress | None = None
) -> OperationRecord:
    """Follow the operation until it ends or `wait_seconds` pass, reporting its progress.
    Raises Cancelled if the caller's progress is cancelled (the operation goes on)."""
    last: OperationProgress | None = None

    def look() -> OperationRecord:
        nonlocal last
        record = get(operation_id)
        if progress is not None and record.progress != last:
            last = record.progress
            progress.report(last.completed, last.total, last.message)
        elif progress is not None and progress.cancelled:
            raise Cancelled()
        return record

    return poll_until(look, lambda record: record.status in TERMINAL, wait_seconds, POLL_S)


def cancel(operation_id: str, grace_s: float = CANCEL_GRACE_S) -> OperationRecord:
    """Ask the worker to stop (SIGTERM to its group), SIGKILL after `grace_s`; returns
    once the record is final and the worker is gone."""
    record = get(operation_id)
    if record.status in TERMINAL:
        return record
    worker = _worker(operation_id)
    _refuse_foreign(record, worker)
    record = _update(operation_id, cancel_requested=True)

    def stopped(record: OperationRecord) -> bool:
        return record.status != "running" and not processes.is_alive(record.pid, record.pid_started)

    processes.stop_group(
        record.pid,
        record.pid_started,
        worker,
        grace_s,
        stopped=lambda: stopped(get(operation_id)),
        interval_s=POLL_S,
    )
    record = get(operation_id)
    if stopped(record):
        return record
    # SIGKILL is not refused; allow the kernel a moment
    poll_until(
        lambda: processes.is_alive(record.pid, record.pid_started),
        lambda alive: not alive,
        5,
        POLL_S / 4,
    )
    return _update(operation_id, status="cancelled", ended_at=time.time())


def _refuse_foreign(record: OperationRecord, worker: processes.Expected) -> None:
    """A record naming a live process that is not this operation's worker was edited (or
    its pid recycled): nothing is signalled, and the caller is told."""
    if processes.identify(record.pid, record.pid_started, worker) is processes.Identity.FOREIGN:
        raise ToolFailure(
            ErrorCode.OPERATION_FAILED,
            f"The record of operation {record.operation_id!r} names process {record.pid}, "
            "which is not this operation's worker; nothing was signalled.",
            f"The record was edited or is stale: remove {_path(record.operation_id)} if "
            "the work is not running.",
            {"pid": record.pid, "reason": "not_our_process"},
        )


# The history is pruned when an operation starts: ended operations older than this, or
# past this many newest, are removed (a running one never is).
KEEP_DAYS = 30
KEEP_COUNT = 500


def _stamp(name: str) -> str:
    """The creation time an operation id carries (YYYYMMDD-HHMMSS), sortable as text."""
    return name[-22:-7]


def _of_tool(name: str, tool: str | None) -> bool:
    """An operation id, of `tool` (None: of any)."""
    return re.fullmatch(OPERATION_ID, name) is not None and (
        tool is None or name[: -len("-YYYYMMDD-HHMMSS-abcdef")] == tool
    )


def _folders(tool: str | None = None) -> Iterator[str]:
    """Operation folders (of `tool`) in the listing's order, one at a time: no reads."""
    root = operations_dir()
    if not root.is_dir():
        return
    with os.scandir(root) as entries:
        yield from (entry.name for entry in entries if _of_tool(entry.name, tool))


def _folders_newest_first(tool: str | None = None) -> list[str]:
    """Operation folders by the time in their names, newest first: a listing, no reads."""
    return sorted(_folders(tool), key=_stamp, reverse=True)


def _listed(tool: str | None, status: str | None) -> list[str]:
    """The operations a list walks, newest first: every folder (of `tool`), or with a
    status those that may have it."""
    found = None if status is None else _may_have(tool, status)
    return _folders_newest_first(tool) if found is None else found


def list_records(
    tool: str | None = None, status: str | None = None, limit: int | None = None
) -> list[OperationRecord]:
    """Newest first, reading records only until `limit` are found; records that cannot
    be read are left out. Ids of one second are ordered by their records' times."""
    found: list[OperationRecord] = []
    names = _listed(tool, status)
    # One pass: the names are sorted by second, so each second is a run of them.
    for _, one_second in itertools.groupby(names, key=_stamp):
        if limit is not None and len(found) >= limit:
            break
        same_second = list(one_second)
        group = []
        for name in same_second:
            try:
                record = get(name)
            except ToolFailure:
                continue
            if (tool is None or record.tool == tool) and (
                status is None or record.status == status
            ):
                group.append(record)
        found.extend(sorted(group, key=lambda r: r.created_at, reverse=True))
    return found if limit is None else found[:limit]


def page_records(
    tool: str | None, status: str | None, limit: int, cursor: str | None
) -> Page[OperationRecord]:
    """`limit` records after the cursor (list_records' order; skills.shared.paging), how
    many are past them (None while more may exist) and the last one's key. A page reads
    only its own seconds' records: a second wholly before the cursor is passed by name.
    Without a status what is past the page is counted by name (every folder, one that
    cannot be read too); with one, records are read until one more matches."""
    names = _listed(tool, status)  # with a status, only those that may match are read
    anchor = start_after(
        cursor,
        lambda name: (
            _key(name, _readable(name))
            if _of_tool(name, tool) and (operations_dir() / name).is_dir()
            else None
        ),
        like=(0, 0.0, ""),
    )
    found: list[tuple[Key, OperationRecord]] = []
    for entries, end in _seconds_after(names, anchor):
        for i, (key, record) in enumerate(entries):
            if record is None or (tool is not None and record.tool != tool):
                continue
            if status is not None and record.status != status:
                continue
            if len(found) == limit:  # one more matches (a status was asked for)
                last = i + 1 == len(entries) and end == len(names)
                return Page([r for _, r in found], 1 if last else None, found[-1][0])
            found.append((key, record))
            if len(found) == limit and status is None:
                more = len(entries) - i - 1 + len(names) - end
                return Page([r for _, r in found], more, key)
    return Page([r for _, r in found], 0, found[-1][0] if found else None)


def _readable(name: str) -> OperationRecord | None:
    try:
        return get(name)
    except ToolFailure:
        return None


def _key(name: str, record: OperationRecord | None) -> Key:
    """An operation's place in a list: newest second first (its id's time), in a second
    the newest record first (one that cannot be read last), then by id."""
    created = -record.created_at if record is not None else 0.0
    return (-int(_stamp(name).replace("-", "")), created, name)


def _seconds_after(
    names: list[str], anchor: Key | None
) -> Iterator[tuple[list[tuple[Key, OperationRecord | None]], int]]:
    """Per second of `names` (newest first) not wholly before `anchor`: its entries after
    the anchor in key order, and where the second ends in `names`. A second before the
    anchor's is passed by name, unread."""
    start = 0
    while start < len(names):
        end = start
        while end < len(names) and _stamp(names[end]) == _stamp(names[start]):
            end += 1
        second = -int(_stamp(names[start]).replace("-", ""))
        alone = anchor is not None and names[start:end] == [anchor[-1]]  # all it holds: passed
        if (anchor is None or (second,) >= anchor[:1]) and not alone:
            entries = sorted(
                ((_key(n, r := _readable(n)), r) for n in names[start:end]),
                key=lambda entry: entry[0],
            )
            yield [(k, r) for k, r in entries if is_after(k, anchor)], end
        start = end


def prune(now: float | None = None) -> int:
    """Remove ended operations past KEEP_COUNT newest or older than KEEP_DAYS; only
    folders of this store's own form, never a running operation's. Returns how many."""
    now = time.time() if now is None else now
    oldest = datetime.fromtimestamp(now - KEEP_DAYS * 86400, timezone.utc)
    cutoff = oldest.strftime("%Y%m%d-%H%M%S")
    removed = 0
    for rank, name in enumerate(_folders_newest_first()):
        if rank < KEEP_COUNT and _stamp(name) >= cutoff:
            continue
        folder = _path(name)
        try:
            record = _file(name).read()
        except RecordCorrupt:
            record = None
        if record is not None and record.status not in TERMINAL:
            continue
        if folder.is_symlink() or not folder.is_dir():
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed


def call(
    spec: ToolSpec, raw: Mapping[str, Any], progress: Progress | None = None
) -> OperationState:
    """Start the tool as an operation and wait `raw[wait_seconds]` for it. If the caller
    cancels while waiting (an MCP client's cancel), the operation is cancelled too."""
    args = spec.parse(raw)
    record = _launch(spec, args)
    try:
        record = wait(record.operation_id, getattr(args, WAIT_PARAM), progress)
    except (Cancelled, KeyboardInterrupt):
        cancel(record.operation_id)
        raise
    return state_model(spec.result).model_validate(OperationState.of(record).model_dump())


def run_as_operation(
    spec: ToolSpec,
    raw: Mapping[str, Any],
    progress: Progress | None,
    *,
    result: type[R],
    ended: Callable[[R, OperationState], T],
    running: Callable[[OperationState], T],
    failed: str,
) -> T:
    """This call run as an operation (`call`), its state mapped back onto the caller's
    result: `ended` when it ended with its typed `result` within wait_seconds, `running`
    while it goes on; any other end raises its failure (`failed` when it recorded none)."""
    state = call(spec, raw, progress)
    if isinstance(state.result, result):  # the operation's model typed it so
        return ended(state.result, state)
    if state.status == "running":
        return running(state)
    raise state.as_failure(failed)


# --- the worker ----------------------------------------------------------------------


class RecordProgress(CancellableProgress):
    """Writes progress into the record (throttled) and keeps the last messages."""

    def __init__(self, operation_id: str) -> None:
        super().__init__()
        self.operation_id = operation_id
        self.latest = OperationProgress()
        self.tail: list[str] = []
        self._written = 0.0

    def emit(self, completed: float, total: float | None, message: str) -> None:
        self.latest = OperationProgress(completed=completed, total=total, message=redact(message))
        if message and (not self.tail or self.tail[-1] != self.latest.message):
            self.tail = [*self.tail, self.latest.message][-LOG_TAIL:]
        if time.monotonic() - self._written >= WRITE_EVERY_S:
            self.flush()

    def flush(self) -> None:
        self._written = time.monotonic()
        _update(self.operation_id, progress=self.latest, log_tail=self.tail)


def typed_state(record: OperationRecord) -> OperationState:
    """The operation's state with its result typed as its tool's own result, so the
    result's leaner MCP form and failure apply; as recorded if that model will not
    load or take it (a record of an older version)."""
    state = OperationState.of(record)
    try:
        model = state_model(resolve(record.entry).result)
        return model.model_validate(state.model_dump())
    except Exception:  # an import or validation error: the record as it is
        return state


def resolve(entry: str) -> ToolSpec:
    module, _, name = entry.partition(":")
    return spec_of(getattr(importlib.import_module(module), name))


def run_worker(operation_id: str, arguments: Mapping[str, Any] | None = None) -> int:
    """The detached process: run the call (`arguments`, else the record's, which are
    masked) to its end and record how it ended."""
    record = _read(operation_id)
    os.chdir(record.cwd)
    progress = RecordProgress(operation_id)
    _update(operation_id, pid=os.getpid(), pid_started=processes.start_time(os.getpid()))

    def on_term(signum: int, _frame: Any) -> None:
        progress.cancel()
        raise Cancelled(f"Operation {operation_id}")

    signal.signal(signal.SIGTERM, on_term)
    outcome: dict[str, Any]
    try:
        if record.cancel_requested:
            raise Cancelled(f"Operation {operation_id}")
        given = record.arguments if arguments is None else arguments
        result = resolve(record.entry).invoke(given, progress)
        outcome = ended_with(result)
    except Cancelled as failure:
        outcome = {"status": "cancelled", "error": failure.to_dict()["error"]}
    except ToolFailure as failure:
        outcome = {"status": "failed", "error": failure.to_dict()["error"]}
    except Exception as exc:  # a bug: the record says where to look, the log has the trace
        traceback.print_exc()
        outcome = {
            "status": "failed",
            "error": ToolFailure(
                ErrorCode.INTERNAL_ERROR,
                f"{record.tool} failed unexpectedly ({type(exc).__name__}).",
                f"See {_path(operation_id) / 'worker.log'}; report it if it persists.",
            ).to_dict()["error"],
        }
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the end is being written: let it land
    _update(
        operation_id,
        progress=progress.latest,
        log_tail=progress.tail,
        ended_at=time.time(),
        **mask_data(outcome),
    )
    return 0 if outcome["status"] == "succeeded" else 1


if __name__ == "__main__":
    raise SystemExit(run_worker(sys.argv[1], json.loads(sys.stdin.buffer.read() or b"null")))
