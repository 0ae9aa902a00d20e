"""get_training_job_logs exact at any size (issue 49 item 4): the last N lines whole for
any N the 30 KB text holds, on logs from 1 KB to 1 GB (a sparse hole and real last
lines); past it, a marked excerpt whose counts are true and whose next call gives the
lines before, until the N asked are all read. Over MCP (the real client: the text is the
log) and the CLI (the log printed, the excerpt's call as a command line)."""

from __future__ import annotations

import contextlib
import io
import time

import anyio
import pytest
from mcp import Client
from mcp_types import TextContent

from commands._cli import run_cli
from commands.get_training_job_logs import LOG_TEXT_BYTES, get_training_job_logs
from mcp_server import build_server
from mcp_server.result_cap import MAX_RESULT_BYTES, result_bytes
from skills.training_job_deployer.targets.local.record import JobRecord
from skills.training_job_deployer.targets.local.target import LocalSettings, LocalTarget

KB, MB, GB = 1_000, 1_000_000, 1_000_000_000


def _job(runs, size: int, lines: list[bytes]) -> list[str]:
    """An ended local job `j` under `runs` whose log is `size` bytes: a hole (no disk)
    ended by a newline, then `lines`; its lines as a reader sees them."""
    run = runs / "j"
    (run / "logs").mkdir(parents=True)
    tail = b"".join(lines)
    with (run / "logs" / "attempt-1.log").open("wb") as handle:
        if size > 2 * len(tail):
            handle.truncate(size - len(tail) - 1)
            handle.seek(0, 2)
            handle.write(b"\n")
        handle.write(tail)
    now = time.time()
    record = JobRecord(job_name="j", attempt=1, argv=["python", "-m", "trainer"],
                       submitted_at=now - 60, ended_at=now - 30, exit_code=0)  # fmt: skip
    (run / "job.json").write_text(record.model_dump_json(indent=1))
    return [line.decode(errors="replace").rstrip("\r\n") for line in lines]


def _steps(count: int) -> list[bytes]:
    return [
        b'{"event": "step", "step": %d, "loss": %.4f}\n' % (i, 1 / (i + 1)) for i in range(count)
    ]


def _read_all(call, asked: int) -> tuple[list[str], list]:
    """The `asked` last lines through the excerpts' next calls: (lines, each result)."""
    results = [call({"tail_lines": asked})]
    while results[-1].next_step is not None:
        results.append(call(results[-1].next_step.arguments))
    lines: list[str] = []
    for result in reversed(results):
        lines += result.text.split("\n") if result.lines else []
    return lines, results


@pytest.mark.parametrize("size", [1 * KB, 1 * MB, 1 * GB])
def test_the_tool_gives_exactly_the_last_n_lines_of_a_1_kb_to_1_gb_log(tmp_path, size):
    lines = _job(tmp_path, size, _steps(min(12_000, size // 40)))

    def call(arguments):
        return get_training_job_logs(**{"job_name": "j", "runs_dir": str(tmp_path), **arguments})

    whole = call({"tail_lines": 10_000})
    fit = whole.lines if whole.excerpt else len(lines)  # as many as 30 KB holds
    for asked in sorted({n for n in (1, 2, 7, 100, fit - 1, fit) if 0 < n <= fit}):
        got = call({"tail_lines": asked})
        assert got.text.split("\n") == lines[-asked:] and got.lines == asked
        assert got.excerpt is None and got.next_step is None
    for asked in (fit + 1, 10_000):
        read, results = _read_all(call, asked)
        assert read == lines[-asked:]  # every line asked, once, in order
        first = results[0]
        if asked > len(lines):  # the log holds fewer: all of them, no excerpt
            assert first.lines == len(lines) and first.excerpt is None
            continue
        assert (first.lines, first.tail_lines) == (fit, asked) and first.excerpt
        assert f"the last {fit} of the {asked} lines asked" in first.plain_text().splitlines()[0]
        assert sum(r.lines for r in results) == asked
        assert all(len(r.text.encode()) <= LOG_TEXT_BYTES for r in results)


EDGES = {
    "an empty log": ([], 5, []),
    "no trailing newline": ([b"a\n", b"b"], 1, ["b"]),
    "CRLF lines": ([b"a\r\n", b"b\r\n"], 2, ["a", "b"]),
    "invalid UTF-8": ([b"ok\n", b"\xff\xfebad\n"], 1, ["\ufffd\ufffdbad"]),
    "more lines asked than the log holds": ([b"1\n", b"2\n"], 10_000, ["1", "2"]),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_an_edge_case_log_gives_its_exact_lines(tmp_path, name):
    raw, asked, expected = EDGES[name]
    _job(tmp_path, 0, raw)
    got = get_training_job_logs(job_name="j", runs_dir=str(tmp_path), tail_lines=asked)
    assert (got.text.split("\n") if got.lines else []) == expected
    assert got.lines == len(expected) and got.excerpt is None and got.next_step is None


def test_a_line_longer_than_the_budget_is_its_end_marked_and_the_rest_reachable(tmp_path):
    long_line = b"y" * 100_000
    _job(tmp_path, 0, [b"start\n", long_line + b"\n", b"last\n"])
    got = get_training_job_logs(job_name="j", runs_dir=str(tmp_path), tail_lines=2)
    assert got.text == "last" and got.excerpt and got.next_step  # the long one next
    parts, step = [], got.next_step
    while step is not None:
        part = get_training_job_logs(**step.arguments)
        assert len(part.text.encode()) <= LOG_TEXT_BYTES
        parts.insert(0, part.text)
        step = part.next_step
        if part.excerpt is None or "longer than" not in part.excerpt:
            break
    assert "".join(parts) == long_line.decode()


def _over_mcp(calls):
    async def scenario():
        async with Client(build_server()) as client:
            return [await client.call_tool("get_training_job_logs", args) for args in calls]

    return anyio.run(scenario)


def test_over_mcp_10000_lines_of_a_1_gb_log_come_whole_through_the_next_calls(tmp_path):
    """The issue's case: tail_lines=10000 delivered 120 lines, its note pointing to a
    structured result that left the text out (and said lines 10,000)."""
    lines = _job(tmp_path, GB, _steps(12_000))
    args = {"job_name": "j", "target": "local", "local": {"runs_dir": str(tmp_path)}}
    read: list[str] = []
    step = {**args, "tail_lines": 10_000}
    calls = 0
    while step is not None:
        (result,) = _over_mcp([step])
        calls += 1
        assert not result.is_error and result_bytes(result) <= MAX_RESULT_BYTES
        data = result.structured_content
        (content,) = result.content
        assert isinstance(content, TextContent)
        text = content.text
        assert "text" not in data  # the log only as the text
        body = text.split("\n")
        if data.get("excerpt"):
            assert body[0].startswith("(an excerpt: the last ")
            body = body[1:]
        if data.get("next_step"):
            assert body[-1].startswith("next: get_training_job_logs")
            body = body[:-1]
        assert len(body) == data["lines"]  # the count is the text's, not the ask's
        read = body + read
        step = (data.get("next_step") or {}).get("arguments")
    assert read == lines[-10_000:] and calls > 10


def test_the_cli_prints_the_exact_lines_and_an_excerpts_next_command(tmp_path):
    lines = _job(tmp_path, MB, _steps(5_000))
    job = ["--job_name", "j", "--runs_dir", str(tmp_path)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run_cli(get_training_job_logs, [*job, "--tail_lines", "5"]) == 0
    assert out.getvalue().splitlines() == lines[-5:]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_cli(get_training_job_logs, [*job, "--tail_lines", "4000"])
    first, *shown = out.getvalue().splitlines()
    assert first.startswith(f"(an excerpt: the last {len(shown)} of the 4000 lines asked")
    assert "get-training-job-logs" in first and "--before" in first
    assert shown == lines[-len(shown) :]


def test_the_log_tail_benchmark_reads_the_same_bytes_at_1_and_16_mib(capsys):
    """benchmarks/fleet_history_and_logs.py's log tail rows in their quick sizes (the
    whole benchmark's quick mode runs in test_long_logs)."""
    from benchmarks.fleet_history_and_logs import log_tails
    from skills.shared.log_tail import BLOCK_BYTES

    rows = log_tails([1, 16])
    assert "growth exponent k" in capsys.readouterr().out
    for asked in (100, 10_000):
        read = {mib: n for mib, a, _, n in rows if a == asked}
        assert read[1] == read[16] <= 2 * LOG_TEXT_BYTES + BLOCK_BYTES  # flat in the size


def test_through_ssh_a_slurm_log_tail_reads_its_end_in_blocks_on_the_login_node(
    tmp_path, monkeypatch
):
    """The Slurm target's reads through ssh_host (an `ssh` on PATH running the remote
    command in a local shell stands in for a login node): the same exact lines, and
    only the blocks at the end cross the connection."""
    import os

    from skills.shared.log_tail import BLOCK_BYTES, last_lines
    from skills.training_job_deployer.targets.slurm.settings import SlurmSettings
    from skills.training_job_deployer.targets.slurm.target import SlurmTarget

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text('#!/bin/sh\n# ssh -o BatchMode=yes -- HOST COMMAND\nexec sh -c "$5"\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    log = tmp_path / "slurm-7.out"
    steps = _steps(3_000)
    with log.open("wb") as handle:  # 256 MB: a hole, then the real lines
        handle.truncate(256 * MB)
        handle.seek(0, 2)
        handle.write(b"\n" + b"".join(steps))
    target = SlurmTarget(SlurmSettings(target="slurm", ssh_host="login1", runs_dir=str(tmp_path)))
    read: list[int] = []

    def read_at(at: int, n: int) -> bytes:
        data = target._read_from(str(log), at, n)
        read.append(len(data))
        return data

    size = target._log_size(str(log))
    expected = [s.decode().rstrip("\n") for s in steps]
    for asked in (1, 50, 400):
        read.clear()
        found = last_lines(read_at, size, asked, LOG_TEXT_BYTES)
        assert found.lines == expected[-asked:] and sum(read) <= BLOCK_BYTES
    read.clear()
    found = last_lines(read_at, size, 10_000, LOG_TEXT_BYTES)
    assert found.lines == expected[-len(found.lines) :] and found.start is not None
    assert sum(read) <= 2 * LOG_TEXT_BYTES + BLOCK_BYTES


MIB = 2**20


@pytest.mark.parametrize(
    "size",
    [8 * MIB - 4 * KB, 8 * MIB + 4 * KB, 12 * MIB],
    ids=["just-under-8-MiB", "just-over-8-MiB", "12-MiB"],
)
def test_the_targets_log_tail_is_the_logs_end_past_the_8_mib_read_chunk(tmp_path, size):
    """What the doctor and the cost check read (target.logs, tail_lines=3) is the log's
    last lines whatever its size, not the end of the first chunk a read returns."""
    line = b'{"event": "step", "step": %09d, "loss": 1.5}\n'
    count = size // len(line % 0)
    lines = _job(tmp_path, 0, [line % i for i in range(count)])
    assert abs((tmp_path / "j" / "logs" / "attempt-1.log").stat().st_size - size) < len(line)
    target = LocalTarget(LocalSettings(runs_dir=str(tmp_path)))
    assert target.logs("j", tail_lines=3).split("\n") == lines[-3:]
