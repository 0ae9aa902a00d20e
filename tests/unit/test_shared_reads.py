"""Identical reads on one server share one answer (issue 35 item 5): concurrent callers
wait for the one computation, a kept answer expires, a write through the server clears
it, failures are shared but never kept, and a cancelled computation lets the others ask
again."""

from __future__ import annotations

from typing import Annotated

import anyio
import pytest
from mcp import Client
from pydantic import AfterValidator

from mcp_server import build_server
from mcp_server.shared_reads import SharedReads
from skills.shared.progress import Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import spec_of, tool
from tests.benchmark_runs import run_quick
from tests.run_copies import EndedJob


def test_concurrent_callers_share_one_computation():
    reads = SharedReads()
    calls = 0

    async def compute():
        nonlocal calls
        calls += 1
        await anyio.sleep(0.2)
        return calls

    async def scenario():
        got = []
        async with anyio.create_task_group() as group:
            for _ in range(16):
                group.start_soon(lambda: _append(got, reads.get("k", compute)))
        return got

    assert anyio.run(scenario) == [1] * 16 and calls == 1 and reads.computed == 1


async def _append(got, awaitable):
    got.append(await awaitable)


def test_a_kept_answer_expires_and_a_clear_forgets_it():
    reads = SharedReads(ttl_s=0.3)
    values = iter(range(10))

    async def compute():
        return next(values)

    async def scenario():
        first = await reads.get("k", compute)
        again = await reads.get("k", compute)
        await anyio.sleep(0.35)
        expired = await reads.get("k", compute)
        reads.clear()
        cleared = await reads.get("k", compute)
        other = await reads.get("other", compute)
        return first, again, expired, cleared, other

    assert anyio.run(scenario) == (0, 0, 1, 2, 3)


def test_a_failure_reaches_the_waiters_and_is_not_kept():
    reads = SharedReads()
    attempts = 0

    async def compute():
        nonlocal attempts
        attempts += 1
        await anyio.sleep(0.1)
        if attempts == 1:
            raise ValueError("boom")
        return "ok"

    async def scenario():
        errors = []

        async def ask():
            try:
                await reads.get("k", compute)
            except ValueError as exc:
                errors.append(str(exc))

        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(ask)
        return errors, await reads.get("k", compute)

    errors, later = anyio.run(scenario)
    assert errors == ["boom"] * 3 and later == "ok" and attempts == 2


def test_a_cancelled_computation_lets_a_waiter_compute():
    reads = SharedReads()
    started = anyio.Event()

    async def slow():
        started.set()
        await anyio.sleep(10)

    async def fast():
        return "fresh"

    async def scenario():
        result = {}
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def first():
                with scope:
                    await reads.get("k", slow)

            async def second():
                await started.wait()
                result["second"] = await reads.get("k", fast)

            group.start_soon(first)
            group.start_soon(second)
            await started.wait()
            await anyio.sleep(0.05)
            scope.cancel()
        return result

    assert anyio.run(scenario) == {"second": "fresh"}


@pytest.mark.parametrize("size", [1, 2])
def test_old_keys_are_dropped_past_the_bound(size):
    reads = SharedReads(max_entries=size)

    async def compute():
        return 1

    async def scenario():
        for key in "abc":
            await reads.get(key, compute)

    anyio.run(scenario)
    assert len(reads._entries) == size


# Every validation of a `word` argument, in order (the test tool's own model counts them).
VALIDATED: list[str] = []


def _counted(word: str) -> str:
    if not word.isalpha():
        raise ValueError("letters only")
    VALIDATED.append(word)
    return word


class Echoed(ToolResult):
    word: str


@tool(read_only=True, idempotent=True)
def echo_word(
    *, word: Annotated[str, AfterValidator(_counted)], progress: Progress | None = None
) -> Echoed:
    """Returns its word."""
    return Echoed(word=word)


def test_a_repeated_read_is_answered_without_validating_it_again():
    """Issue 49 finding 6: a shared read served within its TTL skips the call's
    validation (most of its cost on a busy server); a new call validates, and a call
    refused is refused each time (a refusal is never kept)."""
    VALIDATED.clear()

    async def scenario():
        async with Client(build_server(specs=[spec_of(echo_word)])) as client:
            answers = [await client.call_tool("echo_word", {"word": word})
                       for word in ("alpha", "alpha", "alpha", "beta")]  # fmt: skip
            refused = [await client.call_tool("echo_word", {"word": "a1"}) for _ in range(2)]
            return answers, refused

    answers, refused = anyio.run(scenario)
    assert [a.structured_content["word"] for a in answers] == ["alpha"] * 3 + ["beta"]
    assert not any(a.is_error for a in answers)
    # The three calls for alpha were validated as often as the one for beta.
    assert VALIDATED.count("alpha") == VALIDATED.count("beta") > 0
    assert all(r.is_error and "letters only" in str(r.content[0]) for r in refused)


def test_the_many_agents_benchmark_runs_in_its_quick_mode(ended_job: EndedJob):
    """benchmarks/http_many_agents.py at its smallest sizes, so it cannot rot unseen; the
    job it lists is the ended job the session's other tests share."""
    out = run_quick("http_many_agents", "--from-run", str(ended_job.run))
    rows = [line.split("|") for line in out.splitlines() if line.strip()[:1].isdigit()]
    # A row per count: ours (fsdp-eks-mcp --http), the bare SDK server, their p50 ratio.
    assert [row[0].strip() for row in rows] == ["1", "2"]
    assert all(row[-1].strip().endswith("x") for row in rows)
    assert "load average (1, 5, 15 min) before:" in out
    assert "growth of p50 from 1 to 2 clients: ours" in out


def test_while_an_answer_is_recomputed_other_callers_get_the_last_one_without_waiting():
    """Issue 49 finding 6: one caller waits for the new answer, not every agent; an
    answer expired longer than the TTL ago is never served, and a clear forgets it."""
    reads = SharedReads(ttl_s=0.2)
    values = iter(range(10))

    async def slow():
        await anyio.sleep(0.3)
        return next(values)

    async def scenario():
        first = await reads.get("k", slow)  # 0
        await anyio.sleep(0.25)  # expired within the TTL
        got = {}
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _put(got, "computing", reads.get("k", slow)))
            await anyio.sleep(0.05)
            started = anyio.current_time()
            got["meanwhile"] = await reads.get("k", slow)
            got["waited"] = anyio.current_time() - started
        await anyio.sleep(0.45)  # expired longer ago than the TTL: everyone waits
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _put(got, "long_after", reads.get("k", slow)))
            await anyio.sleep(0.05)
            got["long_after_meanwhile"] = await reads.get("k", slow)
        return first, got

    first, got = anyio.run(scenario)
    assert first == 0 and got["computing"] == 1 and got["meanwhile"] == 0
    assert got["waited"] < 0.1
    assert got["long_after"] == got["long_after_meanwhile"] == 2


async def _put(got, name, awaitable):
    got[name] = await awaitable
