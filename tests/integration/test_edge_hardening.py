"""Issue 20 (harden slice): each test is the issue's reproduction, then the rule that holds.

Items: 2 (fixed Dockerfile through a link), 3 (a --read-only server writes), 6 (eksctl
config into the server's cwd), 9 (auto_fix confirm: tests/integration/
test_manage_eks_cluster.py), 10 (unbounded nccl_output), 11 (hostPath on system paths),
12 (replace of a running job: tests/integration/test_kubernetes_target.py), 14 (untyped
crashes), 15 (requirements outside the context), 16 (Dockerfile size and time), 17
(a symlinked attempt log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from pydantic import ValidationError

from mcp_server import build_server
from mcp_server.listing import writing_parameters
from mcp_server.workspace import Workspace
from skills.shared.errors import ToolFailure
from skills.shared.files import SymlinkDestination, write_new_or_owned
from tests.stdio_replies import read_replies

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def failure(call, *args, **kwargs) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        call(*args, **kwargs)
    assert caught.value.hint, caught.value
    return caught.value


# --- item 2: the fixed Dockerfile --------------------------------------------------------


def test_a_fixed_dockerfile_is_never_written_through_a_link(tmp_path):
    from skills.image_builder.dockerfile_fixer import FixResult, write_fixed

    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    dockerfile = ws / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    (ws / "Dockerfile.fixed").symlink_to(outside)
    fixed = FixResult(text="FROM scratch\nRUN attacker\n", diff="", changes=[])
    assert isinstance(failure(write_fixed, dockerfile, fixed), SymlinkDestination)
    assert outside.read_text() == "precious\n"
    (ws / "Dockerfile.fixed").unlink()
    assert write_fixed(dockerfile, fixed).read_text() == fixed.text  # a plain file: written


def test_the_one_writer_replaces_only_what_it_owns(tmp_path):
    """Item 3's damage outside read-only mode: a snapshot saved over another job's record."""
    record = tmp_path / "c1" / "job.json"
    record.parent.mkdir()
    record.write_text('{"job_name": "c1"}')
    refused = failure(write_new_or_owned, record, "{}", owns=lambda head: False)
    assert refused.code == "conflict" and record.read_text() == '{"job_name": "c1"}'
    write_new_or_owned(record, "{}", overwrite=True)  # asked: replaced
    assert record.read_text() == "{}"


# --- item 3: read-only means no writes -----------------------------------------------------

# Every read-only tool's parameters that write a file; a new one must be added here and
# is then proven refused below.
WRITING_PARAMETERS = {"diagnose_training_job": ["save_snapshot"]}


def test_every_read_only_tools_writing_parameters_are_known():
    from commands import all_tools

    found = {s.name: writing_parameters(s) for s in all_tools() if s.read_only}
    assert {k: v for k, v in found.items() if v} == WRITING_PARAMETERS


def _stdio_server(args: list[str], tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mcp_server", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**os.environ, "FSDP_EKS_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip


def _exchange(server: subprocess.Popen, requests: list[dict], replies: int) -> dict:
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
    server.stdin.flush()
    # Generous: a server with an empty schema cache imports every tool first, and CI runs
    # tests on every core.
    return {reply.get("id"): reply for reply in read_replies(server, replies, timeout=120)}


def test_a_read_only_server_process_refuses_and_hides_every_writing_parameter(tmp_path):
    """The reproduction: diagnose_training_job {save_snapshot: <ws>/c1/job.json} on a
    --read-only server overwrote another job's record."""
    ws = tmp_path / "ws"
    record = ws / "c1" / "job.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"job_name": "c1"}')
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}  # fmt: skip
    calls = [
        {"jsonrpc": "2.0", "id": f"{tool}.{param}", "method": "tools/call",
         "params": {"name": tool, "arguments": {
             "job_name": "c2", "target": "kubernetes", param: str(record)}}}
        for tool, params in WRITING_PARAMETERS.items() for param in params
    ]  # fmt: skip
    server = _stdio_server(["--workspace", str(ws), "--read-only"], tmp_path)
    try:
        replies = _exchange(server, [
            hello, {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "list", "method": "tools/list"}, *calls,
        ], 2 + len(calls))  # fmt: skip
    finally:
        server.kill()
        server.wait(10)
    tools = {t["name"]: t for t in replies["list"]["result"]["tools"]}
    for tool, params in WRITING_PARAMETERS.items():
        for param in params:
            assert param not in tools[tool]["inputSchema"].get("properties", {})
            result = replies[f"{tool}.{param}"]["result"]
            assert result["isError"], result
            assert "read-only" in result["content"][0]["text"]
    assert record.read_text() == '{"job_name": "c1"}'


# --- item 6: create_config writes only where the caller names it ----------------------------


def test_create_config_over_mcp_without_output_writes_nothing_in_the_servers_cwd(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    args = {"action": "create_config", "cluster_name": "c9", "region": "us-east-1",
            "instance_type": "p5.48xlarge", "confirm": True}  # fmt: skip
    (ws / "link.yaml").symlink_to(tmp_path / "target.yaml")

    async def scenario():
        async with Client(build_server(workspace=Workspace.create(str(ws)))) as client:
            bare = await client.call_tool("manage_eks_cluster", args)
            linked = await client.call_tool(
                "manage_eks_cluster", {**args, "output": str(ws / "link.yaml")}
            )
            return bare, linked

    bare, linked = anyio.run(scenario)
    assert bare.is_error and "output" in bare.content[0].text
    assert linked.is_error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]  # no c9-eksctl.yaml, no target


# --- item 10: nccl_output is read bounded ------------------------------------------------------


@pytest.mark.parametrize("kind", ["dev_zero", "sparse", "fifo"])
def test_nccl_output_from_a_device_or_a_huge_file_is_refused_fast(kind, tmp_path):
    from skills.eks_cluster_manager.actions import judge_nccl_output

    path = Path("/dev/zero")
    if kind == "sparse":
        path = tmp_path / "sparse.out"
        with open(path, "wb") as handle:
            handle.truncate(10 * 2**30)
    elif kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    started = time.monotonic()
    refused = failure(judge_nccl_output, str(path), None)
    assert refused.code == "invalid_input" and time.monotonic() - started < 2


# --- item 11: no hostPath on the node's system directories -------------------------------


@pytest.mark.parametrize("volume", [
    "/", "/etc", "/etc/kubernetes", "/var", "/usr", "/usr/local", "/proc", "/sys", "/dev",
    "/boot", "/root", "/var/lib/kubelet", "/var/lib/kubelet/pods", "//etc", "/etc/../",
    "/mnt/../var/lib/kubelet", "/run/containerd",
])  # fmt: skip
def test_a_kubernetes_deploy_refuses_a_system_hostpath(volume):
    from skills.training_job_deployer.targets.kubernetes.settings import (
        KubernetesDeploySettings,
    )

    with pytest.raises(ValidationError, match="system directory"):
        KubernetesDeploySettings(checkpoint_volume=volume)


@pytest.mark.parametrize("volume", ["/mnt/k8s-disks/0/checkpoints", "/data/ckpt", "pvc:fsx"])
def test_data_directories_stay_allowed(volume):
    from skills.training_job_deployer.targets.kubernetes.settings import (
        KubernetesDeploySettings,
    )

    assert KubernetesDeploySettings(checkpoint_volume=volume).checkpoint_volume == volume


# --- item 12: annotations tell the truth ----------------------------------------------------


def test_tools_that_can_delete_are_annotated_destructive():
    async def scenario():
        async with Client(build_server()) as client:
            return {t.name: t.annotations for t in (await client.list_tools()).tools}

    annotations = anyio.run(scenario)
    for name in ("deploy_training_job", "delete_training_job", "cancel_training_job",
                 "manage_eks_cluster", "cancel_operation"):  # fmt: skip
        assert annotations[name].destructive_hint is True, name


# --- item 14: every crash is a typed error -----------------------------------------------------


# An odd torch pin -> (the torch version the analysis reads, the errors it reports on a
# CUDA 12.4 + cuDNN 9 base, and those on an unknown base with the PyTorch index's "cu1").
ODD_PINS: dict[str, tuple[str | None, set[str], set[str]]] = {
    # PEP 440: ==2 is 2.0, not in the table (and it expects cuDNN 8).
    "torch==2": ("2.0", {"no_such_wheel", "cudnn_mismatch"}, {"no_such_wheel"}),
    "torch==x": (None, set(), set()),  # unreadable: no version claimed, nothing refused
    "torch==2.5.1+cu1": ("2.5.1", set(), set()),  # cu1 names no CUDA: the base's decides
    "torch===": (None, set(), set()),
    "torch==2.*": (None, set(), set()),  # a wildcard is no one version
}


@pytest.mark.parametrize("pin", sorted(ODD_PINS))
def test_odd_torch_pins_are_read_as_pip_reads_them_or_not_claimed(pin):
    from skills.image_builder.dockerfile_analyzer import analyze

    torch, on_base, on_unknown = ODD_PINS[pin]
    text = f"FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04\nRUN pip install {pin}\n"
    on_cuda = analyze(text, instance_type="p5.48xlarge")
    assert (on_cuda.resolved.torch, on_cuda.resolved.cuda) == (torch, "12.4")
    assert {f.code for f in on_cuda.findings if f.severity == "error"} == on_base
    # The index's "cu1" names no CUDA either: nothing but the unknown base is said.
    on_index = analyze(f"FROM ubuntu:22.04\nRUN pip install {pin} --index-url "
                       "https://download.pytorch.org/whl/cu1\n")  # fmt: skip
    assert (on_index.resolved.torch, on_index.resolved.cuda) == (torch, None)
    assert {f.code for f in on_index.findings if f.severity == "error"} == on_unknown
    assert "unknown_base" in {f.code for f in on_index.findings}


def test_a_100k_deep_snapshot_is_a_typed_error(tmp_path):
    from commands.diagnose_training_job import diagnose_training_job

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    refused = failure(diagnose_training_job, snapshot=str(deep))
    assert refused.code == "snapshot_invalid" and "deeper" in refused.message


def test_a_deep_snapshot_over_mcp_is_a_typed_error_result(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)

    async def scenario():
        async with Client(build_server()) as client:
            return await client.call_tool("diagnose_training_job", {"snapshot": str(deep)})

    result = anyio.run(scenario)
    assert result.is_error and "snapshot_invalid" in result.content[0].text


@pytest.mark.parametrize("content", [
    b"users: [1]\n", b"clusters: [1]\ncontexts: []\n", b"\xff\xfe\x00kubeconfig",
    b"[" * 10_000, b"a: &a [*a]\n", b"- 1\n",
])  # fmt: skip
def test_a_malformed_kubeconfig_is_a_typed_error_to_read_and_to_write(content, tmp_path):
    from skills.kube.access import ClusterInfo, kube_api_client, write_kubeconfig

    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    assert failure(kube_api_client, path).code == "kubeconfig_invalid"
    info = ClusterInfo(name="c", region="us-east-1", arn="arn:c", endpoint="https://x",
                       ca_data="", version="1.30", status="ACTIVE", raw={})  # fmt: skip
    assert failure(write_kubeconfig, info, path).code == "kubeconfig_invalid"
    assert path.read_bytes() == content  # left as it was


# --- item 15: requirement files stay inside the build context ------------------------------


def test_requirements_outside_the_context_are_not_followed(tmp_path):
    from skills.image_builder.dockerfile_stages import parse
    from skills.image_builder.pip_installs import pip_installs

    (tmp_path / "outside.txt").write_text("torch==2.1.0+cu118\n")
    context = tmp_path / "a" / "b"
    context.mkdir(parents=True)
    (context / "inside.txt").write_text("numpy==1.26.0\n-r ../../outside.txt\n")
    (context / "linked.txt").symlink_to(tmp_path / "outside.txt")
    text = ("FROM ubuntu:22.04\nRUN pip install -r ../../outside.txt\n"
            "RUN pip install -r inside.txt\nRUN pip install -r linked.txt\n")  # fmt: skip
    stage = parse(text).final
    names = [r.name for p in pip_installs(stage, context) for r in p.requirements]
    assert names == ["numpy"]


# --- item 16: Dockerfile size is capped, analysis linear ------------------------------------


def test_a_huge_continued_instruction_is_refused_fast():
    from skills.image_builder.dockerfile_analyzer import analyze

    text = "FROM ubuntu:22.04\nRUN echo \\\n" + "  a \\\n" * 50_000 + "  b\n"
    started = time.monotonic()
    refused = failure(analyze, text)
    assert refused.code == "invalid_input" and time.monotonic() - started < 1


def test_analysis_stays_fast_at_the_caps():
    from skills.image_builder import dockerfile_reader
    from skills.image_builder.dockerfile_analyzer import analyze

    lines = dockerfile_reader.MAX_CONTINUATION_LINES
    text = "FROM ubuntu:22.04\nRUN pip install \\\n" + "  numpy \\\n" * (lines - 1) + "  x\n"
    started = time.monotonic()
    analyze(text)
    assert time.monotonic() - started < 2
    too_big = "FROM ubuntu:22.04\n" + "RUN true\n" * (dockerfile_reader.MAX_DOCKERFILE_CHARS // 9)
    assert failure(analyze, too_big).code == "invalid_input"


# --- item 17: a symlinked attempt log is not followed -------------------------------------


def test_job_logs_never_follow_a_link(tmp_path):
    from skills.shared.reading import ReadRefused, read_chunk

    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0\n")
    log = tmp_path / "attempt-1.log"
    log.symlink_to(secret)
    with pytest.raises(ReadRefused) as refused:
        read_chunk(log, 0, what="job log")
    assert refused.value.code == "path_not_allowed" and "root:x" not in str(refused.value)
    assert read_chunk(tmp_path / "missing.log", 0) == b""


# --- issue 30 item 11: strict booleans for every confirm ------------------------------------

# Every parameter that opens a write, per tool (skills.shared.confirm.Confirm).
CONFIRMS = {
    "manage_eks_cluster": ("confirm", "auto_fix"),
    "delete_model_server": ("confirm",),
    "delete_training_job": ("confirm",),
    "cancel_training_job": ("confirm",),
    "cancel_operation": ("confirm",),
    "push_to_ecr": ("confirm",),
    "deploy_training_job": ("confirm", "replace"),
    "deploy_model_server": ("confirm",),  # expose=internet
    "transfer_job_artifacts": ("confirm",),  # overwriting local files
}
NOT_TRUE = ["true", "yes", "on", "1", 1, "True"]


def test_every_write_opening_parameter_is_a_strict_confirm():
    """The table above is the whole list: every bool parameter named confirm or replace
    in any tool is in it (with manage_eks_cluster's auto_fix, an action that applies), and
    each one is the shared strict type."""
    from pydantic import BaseModel

    from commands import tool_names, tool_spec

    found: dict[str, set[str]] = {}
    for name in tool_names():
        spec = tool_spec(name)
        models: list[type[BaseModel]] = [spec.params]
        models += [m for g in spec.groups for m in g.members.values()]
        for model in models:
            for field, info in model.model_fields.items():
                opens = field in ("confirm", "replace") or (name, field) == (
                    "manage_eks_cluster", "auto_fix")  # fmt: skip
                if opens and info.annotation is bool:
                    found.setdefault(name, set()).add(field)
                    assert any(getattr(m, "strict", None) for m in info.metadata), (name, field)
    assert found == {name: set(fields) for name, fields in CONFIRMS.items()}


def test_a_confirm_over_mcp_is_true_only_when_it_is_true(kube_api):
    """The reproduction: manage_eks_cluster took confirm "true", "yes", 1, "on" over MCP
    and applied an auto_fix. Every confirm of every tool refuses them as invalid_input,
    naming the field; the cluster is unchanged."""
    from tests.services import eks_cluster as seed

    kube_api.reset()
    seed.seed_healthy(kube_api)
    del kube_api.emulator.objects[seed.NVIDIA_DS]
    kubeconfig = str(kube_api.kubeconfig)

    async def scenario():
        answers = {}
        async with Client(build_server()) as client:
            for tool, fields in CONFIRMS.items():
                for field in fields:
                    for value in NOT_TRUE:
                        args = {"action": "auto_fix", "kubeconfig": kubeconfig, field: value}
                        if tool != "manage_eks_cluster":
                            args = {field: value, "kubeconfig": "/nonexistent/kubeconfig"}
                        result = await client.call_tool(tool, args)
                        answers[tool, field, repr(value)] = result
        return answers

    answers = anyio.run(scenario)
    for (tool, field, value), result in answers.items():
        assert result.is_error, (tool, field, value)
        error = json.loads(result.content[0].text)["error"]
        assert error["code"] == "invalid_input", (tool, field, value, error)
        named = [p["field"] for p in error["details"]["problems"]]
        assert any(n.split(".")[-1] == field for n in named), (tool, field, value, named)
    with pytest.raises(KeyError):  # auto_fix applied nothing
        kube_api.emulator.objects[seed.NVIDIA_DS]
