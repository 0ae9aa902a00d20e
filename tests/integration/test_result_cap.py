"""The server's last-resort cap (issue 35 item 1): a real result past 40 KB comes back
cut to fit, still valid (structuredContent an object with its key field), marked with
what was cut, and naming the call that fetches the rest; that call does fetch it."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from mcp_server import build_server
from mcp_server.result_cap import MAX_RESULT_BYTES, result_bytes
from skills.shared.paging import after_name
from skills.shared.progress import Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import spec_of, tool
from tests.run_copies import EndedJob, copy_of

JOBS = 220


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory, ended_job: EndedJob):
    """The session's real ended local job, copied to JOBS jobs (each its own record and
    log; the checkpoints are not what a list reads)."""
    assert ended_job.state.status == "succeeded", ended_job.state.log_tail
    runs = tmp_path_factory.mktemp("cap") / "runs"
    for i in range(JOBS):
        copy_of(ended_job.run, runs, f"job-{i}", checkpoints=False)
    return runs


def _calls(*calls: tuple[str, dict]) -> list:
    async def scenario():
        async with Client(build_server()) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(scenario)


def test_a_list_past_40_kb_is_cut_marked_and_continued_by_its_rest_call(many_runs):
    args = {"target": "local", "local": {"runs_dir": str(many_runs)}, "limit": 200}
    (first,) = _calls(("list_training_jobs", args))
    assert not first.is_error and result_bytes(first) <= MAX_RESULT_BYTES
    data = first.structured_content
    kept = len(data["jobs"])
    assert 0 < kept < 200  # it was over: 200 jobs do not fit
    note = data["truncated"]
    assert note["cut"] == [{"path": "jobs", "kind": "list", "kept": kept, "of": 200}]
    rest = note["rest"]
    assert rest["tool"] == "list_training_jobs"
    last = data["jobs"][-1]["job_name"]
    assert rest["arguments"]["cursor"] == after_name(last) and rest["arguments"]["limit"] == kept
    assert rest["arguments"]["local"] == {"runs_dir": str(many_runs)}  # nested as it takes it
    assert f"jobs {kept} of 200 entries" in first.content[0].text

    (second,) = _calls((rest["tool"], rest["arguments"]))
    assert not second.is_error and "truncated" not in second.structured_content
    names = [j["job_name"] for j in data["jobs"]] + [
        j["job_name"] for j in second.structured_content["jobs"]
    ]
    assert len(set(names)) == len(names) == 2 * kept  # the rest continues, none repeated


class Tail(ToolResult):
    status: str
    text: str
    logs: dict[str, str]


@tool(read_only=True)
def long_tail(*, tail_lines: int = 100, pods: int = 0, progress: Progress | None = None) -> Tail:
    """The last `tail_lines` lines of a log (101 bytes each), and `pods` short logs."""
    lines = [f"line {i:05d} " + "x" * 89 for i in range(tail_lines)]
    logs = {f"pod-{i}": f"pod {i} " + "y" * 300 for i in range(pods)}
    return Tail(status="running", text="\n".join(lines), logs=logs)


def _sample(name: str, args: dict):
    async def scenario():
        async with Client(build_server(specs=[spec_of(long_tail)])) as client:
            return await client.call_tool(name, args)

    return anyio.run(scenario)


def test_a_long_string_keeps_its_end_and_names_a_shorter_tail():
    result = _sample("long_tail", {"tail_lines": 2_000})
    assert not result.is_error and result_bytes(result) <= MAX_RESULT_BYTES
    data = result.structured_content
    assert data["status"] == "running"  # the key field stays
    (cut,) = data["truncated"]["cut"]
    assert (cut["path"], cut["kind"], cut["of"]) == ("text", "text", 2_000 * 101 - 1)
    assert 30_000 < cut["kept"] < 40_000
    assert data["text"].endswith("line 01999 " + "x" * 89)  # the end is what is kept
    rest = data["truncated"]["rest"]
    lines = 2_000 * cut["kept"] // cut["of"]  # the lines that fit
    assert rest == {"tool": "long_tail", "arguments": {"tail_lines": lines},
                    "why": f"the last {lines} lines fit"}  # fmt: skip
    assert result_bytes(_sample(rest["tool"], rest["arguments"])) <= MAX_RESULT_BYTES


def test_a_dict_of_many_entries_keeps_its_first_and_says_how_many():
    result = _sample("long_tail", {"pods": 400})
    assert result_bytes(result) <= MAX_RESULT_BYTES
    data = result.structured_content
    (cut,) = data["truncated"]["cut"]
    assert (cut["path"], cut["kind"], cut["of"]) == ("logs", "dict", 400)
    assert list(data["logs"]) == [f"pod-{i}" for i in range(cut["kept"])]
    assert data["text"].endswith("x" * 89)  # the small fields stay whole


def test_a_result_within_the_cap_is_untouched(many_runs):
    args = {"target": "local", "local": {"runs_dir": str(many_runs)}, "limit": 3}
    (result,) = _calls(("list_training_jobs", args))
    assert "truncated" not in result.structured_content
    assert len(result.structured_content["jobs"]) == 3


@tool(read_only=True)
def jsonl_tail(*, tail_lines: int = 100, progress: Progress | None = None) -> Tail:
    """The last `tail_lines` of a trainer's JSON-lines log (quotes: JSON escapes each)."""
    lines = [
        f'{{"event": "step", "step": {i}, "loss": 2.5, "step_s": 0.41, "tokens_per_s": 9876.5}}'
        for i in range(tail_lines)
    ]
    return Tail(status="running", text="\n".join(lines), logs={})


def _jsonl(args: dict):
    async def scenario():
        async with Client(build_server(specs=[spec_of(jsonl_tail)])) as client:
            return await client.call_tool("jsonl_tail", args)

    return anyio.run(scenario)


@pytest.mark.parametrize("tail_lines", [300, 2_000, 20_000])
def test_a_json_lines_tail_is_cut_to_the_cap_as_sent(tail_lines):
    """Each quote of a JSON line costs a second byte as sent: the first cut's estimate
    is short, and the cap cuts again until the result as sent fits."""
    result = _jsonl({"tail_lines": tail_lines})
    assert result_bytes(result) <= MAX_RESULT_BYTES
    last = f'"step": {tail_lines - 1}, "loss": 2.5, "step_s": 0.41, "tokens_per_s": 9876.5}}'
    assert result.structured_content["text"].endswith(last)


@pytest.mark.parametrize("over", [-1, 0, 1], ids=["just-under", "at", "just-over"])
def test_a_result_at_the_cap_is_whole_and_one_byte_over_is_cut(over):
    """The cap's boundary: a result of exactly max_bytes as sent is untouched; one byte
    more is cut to fit (the cut marked)."""
    from mcp_server.result_cap import cap_result

    server = build_server(specs=[spec_of(long_tail)])
    spec = server.spec("long_tail")
    assert spec is not None
    whole = server.respond(spec, long_tail(tail_lines=300))
    size = result_bytes(whole)
    arguments = {"tail_lines": 300}
    capped = cap_result(whole, spec, arguments, server.spec, server.nest_step, size - over)
    if over <= 0:
        assert capped is whole
    else:
        assert result_bytes(capped) <= size - over and "truncated" in capped.structured_content
