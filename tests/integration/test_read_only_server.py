"""Issue 45, finding 12: a `--read-only` server rewrote job.json and operation.json. Its
reads completed records as they went (an ended job's outcome, an operation whose worker
died): the mechanism is a write gate (skills/shared/write_gate.py) that a read-only
server's calls run under and that the record writer consults. A read's answer is the
same; nothing under the workspace or the state directory changes, lock files included."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skills.operations.operation_state import OperationRecord
from skills.operations.record_store import RecordFile
from skills.shared.errors import ToolFailure
from skills.shared.write_gate import closed_to_writes
from skills.training_job_deployer.targets.local.record import JobRecord
from tests.stdio_replies import read_replies

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
OPERATION = "build_image-20260101-000000-abcdef"


def _tree(*roots: Path) -> dict[str, tuple[str, int]]:
    """Every file under the roots: its content's digest and mtime (a rewrite of the same
    bytes shows too)."""
    return {
        str(path): (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for root in roots
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _records(ws: Path, state: Path) -> None:
    """An ended local job whose outcome was never kept, and a running operation whose
    worker is gone: the two records a read completed."""
    now = time.time()
    run = ws / "runs" / "ended"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "attempt-1.log").write_text(
        '{"event": "start"}\n{"event": "summary", "steps": 3}\n'
    )
    ended = JobRecord(job_name="ended", attempt=1, argv=["python", "-m", "trainer"],
                      submitted_at=now - 60, ended_at=now - 30, exit_code=0)  # fmt: skip
    (run / "job.json").write_text(ended.model_dump_json(indent=1))
    folder = state / "operations" / OPERATION
    folder.mkdir(parents=True)
    running = OperationRecord(
        operation_id=OPERATION, tool="build_image", entry="commands.build_image:build_image",
        arguments={}, cwd=str(ws), workspace=str(ws), created_at=now - 60,
        updated_at=now - 60, pid=_dead_pid(), pid_started=now - 60,
    )  # fmt: skip
    (folder / "operation.json").write_text(running.model_dump_json(indent=1))


def _call(name: str, arguments: dict, id_: str) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}  # fmt: skip


READS = [
    _call("get_training_job", {"job_name": "ended", "target": "local"}, "job"),
    _call("list_training_jobs", {"target": "local"}, "jobs"),
    _call("get_training_job_logs", {"job_name": "ended", "target": "local"}, "logs"),
    _call("get_operation", {"operation_id": OPERATION}, "operation"),
    _call("list_operations", {}, "operations"),
]


def test_a_read_only_server_answers_every_read_and_writes_nothing(tmp_path):
    ws, state = tmp_path / "ws", tmp_path / "state"
    _records(ws, state)
    before = _tree(ws, state)
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--workspace", str(ws), "--read-only"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**os.environ, "FSDP_EKS_STATE_DIR": str(state)},
    )  # fmt: skip
    assert server.stdin is not None
    try:
        frames = [hello, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *READS]
        server.stdin.write(b"".join(_line(frame) for frame in frames))
        server.stdin.flush()
        replies = {r.get("id"): r for r in read_replies(server, 1 + len(READS), timeout=120)}
    finally:
        server.kill()
        server.wait(10)
    results = {call["id"]: replies[call["id"]]["result"] for call in READS}
    assert not any(result.get("isError") for result in results.values()), results
    # The answers are what a server that may write gives: computed, only not kept.
    assert results["job"]["structuredContent"]["status"] == "succeeded"
    assert results["operation"]["structuredContent"]["status"] == "failed"
    assert _tree(ws, state) == before


def _line(frame: dict) -> bytes:
    return json.dumps(frame).encode() + b"\n"


def test_closed_to_writes_a_record_update_is_answered_not_kept_and_a_write_refused(tmp_path):
    file = RecordFile(tmp_path / "job.json", JobRecord)
    record = JobRecord(job_name="j", attempt=1, argv=[], submitted_at=1.0)
    file.write(record)
    before = _tree(tmp_path)
    with closed_to_writes():
        changed = file.update(lambda r: None if r is None else r.finished(3))
        assert changed is not None and changed.exit_code == 3  # the change, as computed
        assert file.update(lambda r: None) == record  # nothing to change: as it is
        with pytest.raises(ToolFailure) as refused:
            file.write(changed)
        assert refused.value.code == "permission_denied" and "read-only" in str(refused.value)
        with pytest.raises(ToolFailure), file.lock():  # taking the lock makes a file
            pass
    assert _tree(tmp_path) == before
    with closed_to_writes(False):  # a server that may write keeps it
        file.update(lambda r: None if r is None else r.finished(3))
    kept = file.read()
    assert kept is not None and kept.exit_code == 3
