"""The doctor at fleet size (issue 35 item 1): 1,024 pods where one OOM on worker-41
brings every other rank down in a collective timeout. The answer stays under the 40 KB
an agent can hold, names the root cause first and counts the rest; per_pod lists
each pod's finding, bounded and counted."""

from __future__ import annotations

import json

import pytest

from commands.diagnose_training_job import diagnose_training_job
from mcp_server.result_cap import MAX_RESULT_BYTES, result_bytes
from skills.job_doctor.diagnose import MAX_PER_POD_FINDINGS
from tests.fixtures.pod_doctor import snapshots as fx

PODS = 1024
OOM = 41


def _snapshot(pods: int = PODS) -> dict:
    name = "big"
    pod_list = [fx.pod(name, "master", 0, phase="Failed",
                       state=fx.terminated(1, "Error", "2026-11-20T12:15:07Z"))]  # fmt: skip
    logs = {f"{name}-master-0": fx.watchdog(0)}
    for i in range(pods - 1):
        oom = i == OOM
        finished = "2026-11-20T12:05:01Z" if oom else "2026-11-20T12:15:08Z"
        pod_list.append(fx.pod(name, "worker", i, phase="Failed",
                               state=fx.terminated(1, "Error", finished)))  # fmt: skip
        logs[f"{name}-worker-{i}"] = fx.oom_log(8 * (i + 1)) if oom else fx.watchdog(8 * (i + 1))
    events = [fx.event(f"{name}-worker-{i}", "BackOff", "Back-off restarting failed container")
              for i in range(pods - 1)]  # fmt: skip
    return fx.snapshot(fx.job(name, pods - 1), pod_list, events, logs)


PAGED = 160  # pods of the paging test's job (each page diagnoses the whole job again)


@pytest.fixture(scope="module")
def paged_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("doctor") / "paged.json"
    path.write_text(json.dumps(_snapshot(PAGED)))
    return path


@pytest.fixture(scope="module")
def snapshot_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("doctor") / "big.json"
    path.write_text(json.dumps(_snapshot()))
    return path


def test_a_thousand_pods_give_one_root_and_counted_symptoms_under_40_kb(snapshot_file):
    result = diagnose_training_job(snapshot=str(snapshot_file))
    size = len(result.model_dump_json())
    assert size < 40_000, size
    assert result.root.code == "cuda_oom" and result.root.pod == f"big-worker-{OOM}"
    timeouts = [f for f in result.findings if f.code == "collective_timeout"]
    assert len(timeouts) == 1 and timeouts[0].alike == PODS - 2
    assert f"then collective_timeout on {PODS - 1} pods after the cuda_oom on big-worker-{OOM}" \
        in result.summary  # fmt: skip


def _mcp_pages(path: str, limit: int | None = None) -> list:
    """per_pod over MCP, page after page by next_cursor."""
    import anyio
    from mcp import Client

    from mcp_server import build_server

    async def pages():
        out = []
        args: dict = {"snapshot": path, "per_pod": True}
        if limit is not None:
            args["limit"] = limit
        async with Client(build_server()) as client:
            while True:
                result = await client.call_tool("diagnose_training_job", args)
                out.append(result)
                cursor = result.structured_content.get("next_cursor")
                if not cursor:
                    return out
                args = {**args, "cursor": cursor}

    return anyio.run(pages)


@pytest.mark.parametrize("limit", [None, 7])
def test_per_pod_pages_every_finding_once_each_page_whole_and_under_40_kb(paged_file, limit):
    """Each pod's finding comes once across the pages (a timeout on every rank but the
    OOM's), the root first; a page holds at most `limit` (at most 100) findings and is
    never cut by the server's last-resort cap."""
    pages = _mcp_pages(str(paged_file), limit)
    seen = []
    for result in pages:
        data = result.structured_content
        assert not result.is_error and result_bytes(result) <= MAX_RESULT_BYTES
        assert "truncated" not in data
        assert 0 < len(data["findings"]) <= (limit or MAX_PER_POD_FINDINGS)
        assert all(f.get("alike", 0) == 0 for f in data["findings"])
        seen += [(f["pod"], f["code"]) for f in data["findings"]]
        assert data["findings_cut"] == PAGED - len(seen)
    assert len(seen) == len(set(seen)) == PAGED
    assert {pod for pod, _ in seen} == {f"big-worker-{i}" for i in range(PAGED - 1)} | {
        "big-master-0"
    }
    assert seen[0] == (f"big-worker-{OOM}", "cuda_oom")
    if limit:
        assert all(len(r.structured_content["findings"]) == limit for r in pages[:-1])


def test_a_cursor_of_another_list_is_invalid_input(paged_file):
    from skills.shared.errors import ToolFailure
    from skills.shared.paging import cursor_after

    with pytest.raises(ToolFailure) as info:
        diagnose_training_job(snapshot=str(paged_file), per_pod=True,
                              cursor=cursor_after((1.0, "job-a")))  # fmt: skip
    assert info.value.code == "invalid_input"
