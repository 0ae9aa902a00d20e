"""What an agent pays for and gets from the server (issue 22): the size of tools/list,
each target's settings as one object, results that say things once and stay small,
a listing that needs no tool module, and calls that never block each other."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from commands import all_tools, tool_spec
from mcp_server import build_server, listing
from mcp_server.lean import bounded_tail, dedupe_lines, lean_data
from mcp_server.server import structured, summary_text
from skills.operations import operations
from skills.operations.operation_state import OperationRecord, OperationState
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import spec_of, tool
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.by_name import DeployResult
from skills.training_job_deployer.targets.local.target import LocalSettings, LocalTarget

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# Budgets (issue 22): what every agent session pays before any work.
LISTING_BUDGET = 25 * 1024
TOOL_BUDGET = 4 * 1024
OUTPUT_SCHEMAS_BUDGET = 2 * 1024
RESULT_BUDGET = 40 * 1024


def _wire(value: object) -> int:
    """Bytes as the server writes them (compact JSON, wire names)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _listed() -> list[dict]:
    async def scenario():
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    tools = anyio.run(scenario)
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def test_tools_list_fits_its_budget_in_total_and_per_tool():
    """What a client hands the model (each tool without its outputSchema, as the
    before-stop hook and DEVELOPERS.md measure it) within the listing budget in total and
    each tool within its own; the output schemas, which clients validate results with,
    within a small budget of their own, so every byte of the answer is bounded."""
    tools = _listed()
    sizes = {t["name"]: _wire({k: v for k, v in t.items() if k != "outputSchema"}) for t in tools}
    assert len(tools) == len(all_tools())
    read = [{k: v for k, v in t.items() if k != "outputSchema"} for t in tools]
    assert _wire({"tools": read}) <= LISTING_BUDGET, sizes
    assert max(sizes.values()) <= TOOL_BUDGET, sizes
    outputs = {t["name"]: _wire(t["outputSchema"]) for t in tools}
    assert sum(outputs.values()) <= OUTPUT_SCHEMAS_BUDGET and max(outputs.values()) <= 128, outputs


def test_each_targets_settings_are_one_object_that_validates_as_the_flat_fields(tmp_path):
    deploy = next(t for t in _listed() if t["name"] == "deploy_training_job")
    properties = deploy["inputSchema"]["properties"]
    assert "cluster_name" not in properties and "ssh_host" not in properties
    assert "cluster_name" in properties["kubernetes"]["properties"]
    base = {"job_name": "nest", "dry_run": True, "image_uri": "r.invalid/t:1"}

    async def scenario():
        async with Client(build_server()) as client:
            nested = await client.call_tool("deploy_training_job", {
                **{k: v for k, v in base.items() if k != "image_uri"},
                "kubernetes": {"kubeconfig": str(tmp_path / "kc"), "image_uri": "r.invalid/t:1"},
            })  # fmt: skip
            flat = await client.call_tool("deploy_training_job", {
                **base, "target": "kubernetes", "kubeconfig": str(tmp_path / "kc"),
            })  # fmt: skip
            stray = await client.call_tool(
                "deploy_training_job", {**base, "kubernetes": {"partition": "gpu"}}
            )
            not_object = await client.call_tool("get_training_job", {"job_name": "x", "slurm": 3})
            return nested, flat, stray, not_object

    nested, flat, stray, not_object = anyio.run(scenario)
    assert not nested.is_error, nested.content[0].text
    assert nested.structured_content == flat.structured_content
    assert nested.structured_content["target"] == "kubernetes"  # implied by the object
    for refused, field in ((stray, "kubernetes.partition"), (not_object, "slurm")):
        error = json.loads(refused.content[0].text)["error"]
        assert refused.is_error and error["code"] == "invalid_input" and field in error["message"]


def test_the_listing_is_cached_by_the_sources_hash(tmp_path, monkeypatch):
    monkeypatch.setenv(listing.CACHE_DIR_ENV, str(tmp_path))
    fresh = listing.entries_of(all_tools())
    assert listing.cached_entries() == fresh  # computed, then written
    (written,) = tmp_path.iterdir()
    assert written.name == f"tools-{listing.sources_hash()}.json"
    edited = [{**fresh[0], "description": "from the cache"}, *fresh[1:]]
    written.write_text(listing.cache_document(edited))  # as the server writes it
    assert listing.cached_entries()[0]["description"] == "from the cache"
    written.write_text(json.dumps({"sha256": "0" * 64, "entries": edited}))  # hash fails
    assert listing.cached_entries() == fresh  # not served: computed and written again
    monkeypatch.setattr(listing, "sources_hash", lambda: "changed")
    assert listing.cached_entries() == fresh  # a changed source: computed again


def test_a_start_imports_no_tool_module_until_its_first_call(tmp_path):
    script = (
        "import sys, anyio\n"
        "from mcp import Client\n"
        "from mcp_server import build_server\n"
        "build_server()\n"  # the first start fills the cache
        "for m in [m for m in sys.modules if m.startswith(('commands', 'skills.'))]:\n"
        "    del sys.modules[m]\n"
        "server = build_server()\n"
        "tools = [m for m in sys.modules if m.startswith('commands.')]\n"
        "async def call():\n"
        "    async with Client(server) as c:\n"
        "        await c.call_tool('list_operations', {})\n"
        "anyio.run(call)\n"
        "print(tools, sorted(m for m in sys.modules if m.startswith('commands.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**_env(tmp_path)}, check=True,
    )  # fmt: skip
    at_start, after_call = done.stdout.strip().split("] [")
    assert at_start == "["
    assert "commands.list_operations" in after_call and "deploy_training_job" not in after_call


def _env(tmp_path: Path) -> dict[str, str]:
    import os

    return {
        **os.environ,
        listing.CACHE_DIR_ENV: str(tmp_path / "cache"),
        "FSDP_EKS_STATE_DIR": str(tmp_path / "state"),
    }


# --- lean results ----------------------------------------------------------------------


def test_a_tail_is_bounded_and_says_a_repeated_line_once():
    run = "RUN pip install " + "x" * 224
    assert dedupe_lines(["a", run, run, run, "b", "b"]) == ["a", f"{run} (x3)", "b (x2)"]
    tail = bounded_tail([f"line {i}" for i in range(10_000)])
    assert len(tail) <= 60 and tail[-1] == "line 9999"
    assert len(bounded_tail("y" * 100_000)) <= 6_000


def test_a_started_jobs_result_leaves_the_plan_to_the_dry_run():
    plan = LocalTarget(LocalSettings()).plan(JobSpec(job_name="p"))
    started = DeployResult(job_name="p", target="local", status="running", plan=plan)
    assert "plan" not in structured(started)
    planned = started.model_copy(update={"status": "planned", "dry_run": True})
    assert structured(planned)["plan"]["argv"] == plan.argv


def test_the_largest_realistic_results_are_small_and_said_once(tmp_path):
    """A failed job with a 100k-line log, a dry run's full plan (local, a 64-node PyTorchJob), and
    the data under 40 KB, and the text a
    summary, not the data's JSON again. (The logs tool's result is bounded by its own
    `lines` input; a build's log tail by lean_data, tested above.)"""
    log = "\n".join(f"[rank {i % 64}] step {i} loss 2.3 NCCL WARN retrying" for i in range(100_000))
    failed = JobState(
        job_name="j", target="kubernetes", status="failed", steps=10, log_tail=log,
        message="NCCL timeout",
        next_step=NextStep(tool="diagnose_training_job", arguments={"job_name": "j"}),
    )  # fmt: skip
    data = lean_data(failed.model_dump(mode="json"))
    assert _wire(data) < RESULT_BUDGET
    text = summary_text(failed)
    assert len(text.encode()) < RESULT_BUDGET and json.dumps(data) not in text
    assert "failed" in text and "diagnose_training_job" in text

    async def plans():
        async with Client(build_server()) as client:
            return [
                await client.call_tool(
                    "deploy_training_job",
                    {
                        "job_name": "big",
                        "dry_run": True,
                        **settings,
                    },
                )  # fmt: skip
                for settings in (
                    {"local": {"runs_dir": str(tmp_path)}, "gpu_per_node": 2},
                    {
                        "num_nodes": 64,
                        "gpu_per_node": 8,
                        "kubernetes": {"kubeconfig": str(tmp_path / "kc"), "image_uri": "r/t:1"},
                    },
                    # (a Slurm plan asks sinfo: test_slurm_target has the cluster)
                )
            ]

    for result in anyio.run(plans):
        assert not result.is_error, result.content[0].text
        assert _wire(result.structured_content) < RESULT_BUDGET
        assert result.content[0].text != json.dumps(result.structured_content, indent=2)


# --- concurrency -----------------------------------------------------------------------

RELEASE = threading.Event()


class Held(ToolResult):
    held: bool = True


@tool(read_only=True)
def long_build(*, progress: Progress | None = None) -> Held:
    """Stands for a long build: holds its worker thread until released."""
    if not RELEASE.wait(timeout=60):
        raise RuntimeError("never released")
    return Held()


def test_twenty_reads_over_http_all_answer_while_a_long_call_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    specs = [spec_of(long_build), tool_spec("list_operations"), tool_spec("list_training_jobs")]
    app = build_server(specs=specs).streamable_http_app(host="127.0.0.1")
    # Port 0: the kernel's free port, bound at once (no other test can take it first).
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    RELEASE.clear()

    async def scenario():
        while not server.started:
            await anyio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(streamable_http_client(url)) as client:
            results: dict[str, object] = {}

            async def read(i: int) -> None:
                name = "list_operations" if i % 2 else "list_training_jobs"
                args = {} if i % 2 else {"runs_dir": str(tmp_path / "runs")}
                results[f"read {i}"] = await client.call_tool(name, args)

            async with anyio.create_task_group() as group:
                group.start_soon(_hold, client, results)
                await anyio.sleep(0.2)  # the long call holds its thread
                started = time.monotonic()
                with anyio.fail_after(30):
                    async with anyio.create_task_group() as reads:
                        for i in range(20):
                            reads.start_soon(read, i)
                results["reads_s"] = time.monotonic() - started
                results["long still running"] = "long" not in results
                RELEASE.set()
            return results

    try:
        results = anyio.run(scenario)
    finally:
        RELEASE.set()
        server.should_exit = True
        thread.join(timeout=10)
    reads = [v for k, v in results.items() if k.startswith("read ")]
    assert len(reads) == 20 and not any(r.is_error for r in reads)
    assert results["long still running"] and not results["long"].is_error


async def _hold(client: Client, results: dict[str, object]) -> None:
    results["long"] = await client.call_tool("long_build", {})


def test_a_json_looking_string_is_a_string_and_never_an_untyped_error(tmp_path):
    """The fuzz's old intermittent failure (2 of 32 runs): the SDK pre-parses a string
    argument that is valid JSON ('[]', '{"a": 1}') into a list or dict for any field not
    typed exactly `str` (a Claude Desktop workaround), then validated the call a second
    time against the function's signature and answered with untyped text ('Error
    executing tool ...'). Hypothesis only now and then draws a text that is a JSON array
    or object. Calls now validate once, through the tool's own model, as sent."""

    async def scenario():
        async with Client(build_server()) as client:
            return [
                await client.call_tool(
                    "deploy_training_job",
                    {
                        "job_name": "js",
                        "dry_run": True,
                        "dataset": text,
                        "gpu_per_node": 2,
                        "local": {"runs_dir": str(tmp_path)},
                    },
                )  # fmt: skip
                for text in ("[]", '{"a": 1}', "[1, 2]", "null")
            ]

    for result in anyio.run(scenario):
        text = result.content[0].text
        assert "Error executing tool" not in text
        if result.is_error:  # a typed refusal of the string itself, never of a list
            assert json.loads(text)["error"]["code"]
        else:
            assert result.structured_content["plan"]["argv"]


# --- every tool's largest realistic result -----------------------------------------------

LONG_LINE = "[rank 63] step 91234 | loss 2.3141 | NCCL WARN NET/OFI retrying send to peer 17 " * 2


def _job_state(status: str = "failed", **fields: object) -> JobState:
    """A 64-node job with everything a state can carry: a 100k-line log tail, every pod,
    conditions and warnings."""
    fields = {"job_name": "llama-70b-pretrain", **fields}
    return JobState(
        target="kubernetes", status=status,  # type: ignore[arg-type]
        steps=91234, max_steps=100000, first_loss=11.2, last_loss=2.31, tokens_per_s=1.2e6,
        world_size=512, log_path="pod/llama-70b-pretrain-master-0 -n ml",
        log_tail="\n".join(f"{LONG_LINE} {i}" for i in range(100_000)),
        error={"event": "error", "error_type": "DistBackendError", "message": LONG_LINE},
        message="NCCL timeout on rank 63", pods={f"llama-70b-pretrain-worker-{i}": "Failed"
                                                  for i in range(64)},
        conditions=["Created", "Running", "Restarting", "Failed"],
        warnings=[f"node ip-10-0-{i}-1 has no EFA device" for i in range(16)],
        next_step=NextStep(tool="diagnose_training_job", arguments={
            "job_name": "llama-70b-pretrain", "target": "kubernetes", "namespace": "ml"}),
        **fields,
    )  # fmt: skip


def _attempt(number: int) -> dict[str, object]:
    dockerfile = "\n".join(f"RUN pip install package-{i}==1.{i}.0 && echo {LONG_LINE}"
                           for i in range(20))  # fmt: skip
    return {
        "number": number, "ok": False, "base_images": ["pytorch/pytorch:2.13.0-cuda13.0"],
        "base_checks": ["pytorch/pytorch:2.13.0-cuda13.0: found (credentials: anonymous)"],
        "error_class": "pip_resolution", "message": LONG_LINE,
        "evidence": [LONG_LINE] * 10, "fix_applied": ["pin torch==2.13.0", "add index URL"],
        "diff": "\n".join(f"-{LONG_LINE}\n+{LONG_LINE}" for _ in range(4)),
        "fixed_dockerfile": dockerfile,
        "log_tail": [f"{LONG_LINE} {i}" for i in range(2_000)],
        "duration_s": 312.5,
    }  # fmt: skip


def _build_operation() -> OperationState:
    from skills.image_builder.models import BuildResult
    from skills.operations.operation_state import state_model

    result = BuildResult(
        status="failed", dockerfile="/work/repo/Dockerfile", error_class="pip_resolution",
        hint=LONG_LINE, attempts=[_attempt(n) for n in range(1, 11)],  # max_attempts: 10
        findings=[{"code": f"F{i}", "severity": "warning", "line": i, "explanation": LONG_LINE,
                   "fix": LONG_LINE} for i in range(20)],
    )  # fmt: skip
    return state_model(BuildResult).model_validate({
        "operation_id": "build_image-20261124-070000-abcdef", "tool": "build_image",
        "status": "failed", "completed": 10, "total": 10, "message": LONG_LINE,
        "log_tail": [f"{LONG_LINE} {i}" for i in range(20)],
        "result": result.model_dump(mode="json"), "error": result.failure().to_dict()["error"],
        "created_at": "2026-11-24T07:00:00+00:00", "elapsed_s": 3125.0,
    })  # fmt: skip


def _largest_results(kube_api, tmp_path) -> dict[str, list[object]]:
    """Each tool's largest realistic results: built by the code that makes them, or
    returned by the tool itself where that is cheap (a 64-node cluster in the emulator,
    every saved pod-doctor snapshot, a 64-node dry run, a 100-job listing)."""
    from commands.get_training_job_logs import get_training_job_logs
    from commands.list_model_servers import ServerList
    from commands.list_operations import OperationList
    from commands.list_training_jobs import JobList
    from skills.codebuild_pipeline.models import BuildPhase, CodeBuildBuild
    from skills.ecr_publisher.models import PushResult
    from skills.model_server.base import ServerState
    from skills.training_job_deployer.models import RetryAttempt
    from tests.services.eks_cluster import seed_healthy

    kube_api.reset()
    seed_healthy(kube_api, gpu_nodes=64)
    cluster = {"kubeconfig": str(kube_api.kubeconfig)}
    snapshots = sorted((ROOT / "tests/fixtures/pod_doctor").glob("*.json"))
    called = _calls_over_mcp(
        [("inspect_eks_cluster", {**cluster, "action": a}) for a in ("describe", "validate")]
        + [("manage_eks_cluster", {**cluster, "action": "validate"}),
           ("manage_eks_cluster", {"action": "create_config", "cluster_name": "big",
                                   "region": "us-west-2", "instance_type": "p5.48xlarge",
                                   "nodes": 256})]
        + [("diagnose_training_job", {"snapshot": str(path)}) for path in snapshots]
        + [("deploy_training_job", {"job_name": "big", "dry_run": True, "num_nodes": 64,
                                    "gpu_per_node": 8, "include_plan": True, "kubernetes": {
                                        "kubeconfig": str(tmp_path / "kc"),
                                        "image_uri": "r/t:1"}})]
        + [("deploy_model_server", {"name": "big", "model": "s3://demo-bucket/runs/big/export",
                                    "dry_run": True, "target": "kubernetes", "kubernetes": {
                                        "kubeconfig": str(tmp_path / "kc"), "replicas": 64,
                                        "instance_type": "p5.48xlarge"}})]
    )  # fmt: skip
    state = _job_state()
    retried = state.model_dump(exclude={"next_step"}) | {
        "plan": LocalTarget(LocalSettings()).plan(JobSpec(job_name="p")),
        "attempts": [RetryAttempt(number=n, status="failed", code="cuda_oom", evidence=[LONG_LINE]
                     * 5, spec_diff=[LONG_LINE] * 3, remedy=LONG_LINE) for n in range(21)],
    }  # fmt: skip
    build = _build_operation()
    recorded = operations.typed_state(OperationRecord(  # as get_operation reads it back
        **build.model_dump(include={"operation_id", "tool", "status", "log_tail", "error"}),
        result=build.model_dump(mode="json")["result"], entry="commands.build_image:build_image",
        arguments={}, cwd="/", created_at=0, updated_at=0, ended_at=3125,
    ))  # fmt: skip
    assert type(recorded.result).__name__ == "BuildResult"
    push = PushResult(
        image_uri="1.dkr.ecr.us-east-1.amazonaws.com/t:v1", image_uri_digest="x@sha256:1",
        digest="sha256:1", repository="t", region="us-east-1", tag="v1", pushed_to="x/t:v1",
        repository_action="updated", repository_changes=["keep_last=5"] * 5, scan_on_push=True,
        immutable_tags=False, next_step=NextStep(tool="deploy_training_job", arguments={
            "job_name": "t-train", "target": "kubernetes", "image_uri": "x", "dry_run": True}),
    )  # fmt: skip
    codebuild = CodeBuildBuild(
        build_id="p:1", project_name="p", status="FAILED", complete=True,
        phases=[BuildPhase(name=f"PHASE_{i}", status="FAILED", duration_s=i) for i in range(12)],
        log_tail=[f"{LONG_LINE} {i}" for i in range(500)],  # log_lines: at most 500
    )  # fmt: skip
    listed_jobs = JobList(jobs=[_job_state(job_name=f"job-{i}") for i in range(100)])
    listed_ops = OperationList(operations=[build] * 50)  # limit: at most 50
    logs = get_training_job_logs(job_name="j", runs_dir=str(_long_log_job(tmp_path)),
                                 tail_lines=10_000)  # fmt: skip
    server = ServerState(
        name="big", target="kubernetes", status="starting", model="s3://demo-bucket/m",
        endpoint="https://k/api/v1/namespaces/default/services/big:8000/proxy", replicas=64,
        ready_replicas=3, curl="kubectl get --raw " + LONG_LINE, smoke=LONG_LINE[:200],
        message=LONG_LINE, next_step=NextStep(tool="get_model_server", arguments={"name": "big"}),
    )  # fmt: skip
    servers = ServerList(servers=[server] * 100)
    from skills.artifacts import claim
    from skills.artifacts.models import SHOWN, TransferResult
    from skills.artifacts.sources import parse

    fetched = TransferResult(  # a 100,000-file fetch over a folder that held them all
        action="fetch", status="done", source="pvc:fsx/" + LONG_LINE[:200], dest=LONG_LINE,
        files=100_000, bytes=10**12, overwritten=[LONG_LINE] * SHOWN, overwritten_total=100_000,
        plan=claim.pod(parse("pvc:fsx/" + "a" * 200), "default"), message=LONG_LINE,
    )  # fmt: skip
    return {
        "transfer_job_artifacts": [fetched],
        "deploy_model_server": called["deploy_model_server"], "get_model_server": [server],
        "delete_model_server": [server], "list_model_servers": [servers],
        "build_image": [build], "get_operation": [recorded], "cancel_operation": [recorded],
        "list_operations": [listed_ops], "push_to_ecr": [push],
        "get_training_job": [state], "cancel_training_job": [state],
        "delete_training_job": [state], "list_training_jobs": [listed_jobs],
        "get_training_job_logs": [logs],
        "deploy_training_job": [DeployResult(**retried), *called["deploy_training_job"]],
        "get_codebuild_build": [codebuild], "start_codebuild": [codebuild],
        **{name: called[name] for name in ("inspect_eks_cluster", "manage_eks_cluster",
                                           "diagnose_training_job")},
    }  # fmt: skip


def _long_log_job(tmp_path: Path) -> Path:
    """An ended local job `j` whose log holds 10,000 long lines (its runs_dir)."""
    from skills.training_job_deployer.targets.local.record import JobRecord

    run = tmp_path / "long-log-runs" / "j"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "attempt-1.log").write_text(
        "".join(f"{LONG_LINE} {i}\n" for i in range(10_000))
    )
    record = JobRecord(job_name="j", attempt=1, argv=["t"], submitted_at=1.0, ended_at=2.0,
                       exit_code=0)  # fmt: skip
    (run / "job.json").write_text(record.model_dump_json())
    return run.parent


def _calls_over_mcp(calls: list[tuple[str, dict]]) -> dict[str, list[object]]:
    async def scenario():
        async with Client(build_server()) as client:
            return [(name, await client.call_tool(name, args)) for name, args in calls]

    out: dict[str, list[object]] = {}
    for name, result in anyio.run(scenario):
        assert not result.is_error or name == "diagnose_training_job", result.content[0].text
        out.setdefault(name, []).append(result)
    return out


def test_every_tools_largest_realistic_result_is_under_40_kb(kube_api, moto_server, tmp_path):
    from mcp_types import CallToolResult

    server = build_server()
    results = _largest_results(kube_api, tmp_path)
    (setup,) = _calls_over_mcp([("setup_codebuild", {
        "project_name": "big", "region": "us-east-1", "ecr_repository": "big/trainer",
        "source_url": "https://github.com/acme/trainer", "dry_run": True, "webhook": True})]
    )["setup_codebuild"]  # fmt: skip
    results["setup_codebuild"] = [setup]
    assert set(results) == {spec.name for spec in all_tools()}, "every tool, none left out"
    sizes = {}
    for name, found in results.items():
        for result in found:
            sent = result if isinstance(result, CallToolResult) else server.respond(
                tool_spec(name), result)  # fmt: skip
            text = "".join(c.text for c in sent.content)
            size = len(text.encode()) + _wire(sent.structured_content or {})
            sizes[name] = max(sizes.get(name, 0), size)
            # said once: the text is a summary (or the failure), never the data again
            data = sent.structured_content
            assert not data or json.dumps(data, indent=2) not in text, name
    assert all(size < RESULT_BUDGET for size in sizes.values()), sizes
    assert sizes["get_training_job_logs"] > 30_000  # the log itself, bounded, is the text
