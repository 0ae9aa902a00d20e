"""transfer_job_artifacts (issue 46): a checkpoint or an export fetched to a local folder
from S3 (moto), from a cluster's claim (kmock, the fetch pod run for real by the kubelet
stand-in: sh, tar, base64 and sha256sum of this host), or from a local job's folder; and
an export pushed to the Hugging Face Hub (the hub stand-in of tests/services/hf_hub.py,
reached through HF_ENDPOINT in the CLI's environment, the token from HF_TOKEN only).
Existing files are overwritten only with confirm; an MCP caller writes only under its
workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import boto3
import pytest
from mcp import Client

from commands.transfer_job_artifacts import transfer_job_artifacts
from mcp_server import build_server
from mcp_server.workspace import Workspace
from skills.artifacts import claim
from skills.kube.client import KubeJson
from skills.kube.fields import ClusterAccess
from skills.kube.objects import kind_path
from skills.shared.errors import ToolFailure
from tests.services.hf_hub import HubRepo, hub_server
from tests.services.training_operator import TrainingOperator

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXPORT = {
    "config.json": b'{"model_type": "llama"}',
    "tokenizer.json": b'{"version": "1.0"}',
    "model.safetensors": bytes(range(256)) * 64,  # binary: the hub takes it through LFS
    "nested/step-4/rank0.pt": b"\x00\x01checkpoint",
}
TOKEN = "hf_" + "StandInWriteToken" * 2


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def failure(call, **kwargs) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        call(**kwargs)
    assert caught.value.hint
    return caught.value


# --- fetch from S3 ----------------------------------------------------------------------------


@pytest.fixture
def bucket(moto_server) -> str:
    s3 = boto3.client("s3")
    name = f"exports-{time.time_ns()}"
    s3.create_bucket(Bucket=name)
    for path, data in EXPORT.items():
        s3.put_object(Bucket=name, Key=f"runs/llama/export/{path}", Body=data)
    s3.put_object(Bucket=name, Key="runs/llama/export-other/config.json", Body=b"{}")
    return name


def test_fetch_from_s3_copies_the_prefix_and_overwrites_only_with_confirm(bucket, tmp_path):
    dest = tmp_path / "export"
    source = f"s3://{bucket}/runs/llama/export"
    planned = transfer_job_artifacts(action="fetch", source=source, dest=str(dest), dry_run=True)
    assert (planned.status, planned.files) == ("planned", len(EXPORT))
    assert planned.bytes == sum(len(v) for v in EXPORT.values())
    assert not dest.exists()  # a dry run writes nothing

    done = transfer_job_artifacts(action="fetch", source=source, dest=str(dest))
    assert done.status == "done" and done.overwritten == []
    assert files_under(dest) == EXPORT  # export-other/ shares the prefix text, not the folder

    (dest / "config.json").write_bytes(b"edited")
    again = failure(transfer_job_artifacts, action="fetch", source=source, dest=str(dest))
    assert again.code == "confirmation_required"
    assert "config.json" in again.message and (dest / "config.json").read_bytes() == b"edited"
    plan = transfer_job_artifacts(action="fetch", source=source, dest=str(dest), dry_run=True)
    assert sorted(plan.overwritten) == sorted(EXPORT)

    confirmed = transfer_job_artifacts(action="fetch", source=source, dest=str(dest), confirm=True)
    assert sorted(confirmed.overwritten) == sorted(EXPORT)
    assert files_under(dest) == EXPORT


@pytest.mark.parametrize(
    ("key", "code"),
    [("runs/evil/../../outside.txt", "invalid_input"), ("runs/missing", "not_found")],
    ids=["dot-dot-key", "nothing-there"],
)
def test_fetch_from_s3_refuses_what_cannot_land_in_the_folder(bucket, tmp_path, key, code):
    boto3.client("s3").put_object(Bucket=bucket, Key="runs/evil/x/../../../outside.txt", Body=b"x")
    source = f"s3://{bucket}/{key}" if code == "not_found" else f"s3://{bucket}/runs/evil"
    refused = failure(transfer_job_artifacts, action="fetch", source=source,
                      dest=str(tmp_path / "d"))  # fmt: skip
    assert refused.code == code
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "d").exists()


def test_fetch_into_a_link_is_refused_before_anything_is_written(tmp_path):
    source = tmp_path / "runs" / "demo" / "export"
    source.mkdir(parents=True)
    (source / "config.json").write_text("{}")
    (source / "sub").mkdir()
    (source / "sub" / "a.bin").write_bytes(b"a")
    dest = tmp_path / "copy"
    dest.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (dest / "sub").symlink_to(tmp_path / "elsewhere")
    refused = failure(transfer_job_artifacts, action="fetch", source=str(source), dest=str(dest))
    assert refused.code == "path_not_allowed"
    assert list((tmp_path / "elsewhere").iterdir()) == [] and not (dest / "config.json").exists()


def test_fetch_a_local_jobs_folder(tmp_path):
    source = tmp_path / "runs" / "demo" / "checkpoints"
    for path, data in EXPORT.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(data)
    (source / "link").symlink_to("/etc/hostname")  # links are not followed out
    done = transfer_job_artifacts(action="fetch", source=str(source), dest=str(tmp_path / "c"))
    assert files_under(tmp_path / "c") == EXPORT and done.files == len(EXPORT)


def test_a_result_lists_the_first_overwritten_files_and_counts_them_all(tmp_path):
    from skills.artifacts.models import SHOWN

    source = tmp_path / "many"
    source.mkdir()
    for i in range(SHOWN + 10):
        (source / f"shard-{i:03}.bin").write_bytes(b"x")
    args = {"action": "fetch", "source": str(source), "dest": str(tmp_path / "copy")}
    transfer_job_artifacts(**args)
    again = transfer_job_artifacts(**args, confirm=True)
    assert len(again.overwritten) == SHOWN and again.overwritten_total == SHOWN + 10
    assert ("overwritten", ", ".join(again.overwritten[:10]) + f" and {SHOWN} more") in (
        again.summary_rows()
    )


# --- fetch from a cluster's claim ---------------------------------------------------------------


class FetchPodRunner:
    """Plays the kubelet for the fetch pod: binds it, runs its container for real
    (tests/services/kubelet.py), publishes its output as the pod's log and sets its phase."""

    def __init__(self, operator: TrainingOperator) -> None:
        self.operator = operator
        self.seen: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> FetchPodRunner:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        core = self.operator.core
        while not self._stop.is_set():
            listed = core.list_namespaced_pod(
                "default", label_selector=claim.FETCH_LABEL, _preload_content=False
            )
            pods = json.loads(listed.data)["items"]
            for pod in pods:
                if (pod.get("status") or {}).get("phase") in (
                    None,
                    "Pending",
                ) and pod not in self.seen:
                    self.seen.append(pod)
                    self._run(pod)
            time.sleep(0.05)

    def _run(self, pod: dict) -> None:
        kubelet = self.operator.kubelet
        running = kubelet.start(pod, kubelet.bind(pod))
        while running.exit_code() is None:
            time.sleep(0.05)
        kubelet.publish(running)
        code = running.exit_code()
        self.operator._pod_status(pod["metadata"]["name"], "Succeeded" if code == 0 else "Failed",
                                  code, 0)  # fmt: skip


@pytest.fixture
def cluster(kube_api, tmp_path):
    kube_api.reset()
    operator = TrainingOperator(kube_api, root=tmp_path / "cluster")
    operator.add_nodes("p5.48xlarge", 1, efa=32)
    operator.add_claim("fsx-claim")
    yield operator
    operator.stop()


def test_fetch_from_a_claim_runs_a_pod_that_packs_the_path_and_is_deleted(cluster, tmp_path):
    export = cluster.root / "claims" / "fsx-claim" / "runs" / "llama" / "export"
    for path, data in EXPORT.items():
        (export / path).parent.mkdir(parents=True, exist_ok=True)
        (export / path).write_bytes(data)
    planned = transfer_job_artifacts(action="fetch", source="pvc:fsx-claim/runs/llama/export",
                                     dest=str(tmp_path / "x"), dry_run=True)  # fmt: skip
    volume = planned.plan["spec"]["volumes"][0]
    mounted = {"claimName": "fsx-claim", "readOnly": True}
    assert volume == {"name": "claim", "persistentVolumeClaim": mounted}

    with FetchPodRunner(cluster) as runner:
        done = transfer_job_artifacts(action="fetch", source="pvc:fsx-claim/runs/llama/export",
                                      dest=str(tmp_path / "x"))  # fmt: skip
    assert files_under(tmp_path / "x") == EXPORT and done.files == len(EXPORT)
    (pod,) = runner.seen
    # The path reaches the pod as an argument of a fixed script, never spliced into it.
    assert pod["spec"]["containers"][0]["command"][2] == claim.SCRIPT
    assert pod["spec"]["containers"][0]["command"][4] == "/claim/runs/llama/export"
    kube = KubeJson(ClusterAccess().api_client())
    assert kube.get_or_none(kind_path("Pod", "default", pod["metadata"]["name"])) is None


def test_a_claim_fetch_too_large_for_a_log_is_refused_with_the_way_around(cluster, tmp_path):
    big = cluster.root / "claims" / "fsx-claim" / "ckpt"
    big.mkdir(parents=True)
    (big / "shard.bin").write_bytes(os.urandom(claim.LIMIT_BYTES + 1024))  # incompressible
    with FetchPodRunner(cluster):
        refused = failure(transfer_job_artifacts, action="fetch", source="pvc:fsx-claim/ckpt",
                          dest=str(tmp_path / "y"))  # fmt: skip
    assert refused.code == "invalid_input" and "s3://" in refused.hint
    assert not (tmp_path / "y").exists()


def test_a_missing_claim_is_named(cluster, tmp_path):
    refused = failure(transfer_job_artifacts, action="fetch", source="pvc:nope/x",
                      dest=str(tmp_path / "z"))  # fmt: skip
    assert refused.code == "not_found" and "nope" in refused.message


def test_a_cut_or_altered_log_is_refused():
    from skills.artifacts.sources import parse

    source = parse("pvc:c/p")
    with pytest.raises(ToolFailure, match="not whole"):
        claim.unpack(f"{claim.BEGIN} 10\nAAAA\n", source)
    with pytest.raises(ToolFailure, match="sha256"):
        claim.unpack(f"{claim.BEGIN} 3\nAAAA\n{claim.END} {'0' * 64}\n", source)


# --- push to the Hub --------------------------------------------------------------------------


def cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The console script's module as a user runs it, with the environment given."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return subprocess.run(
        [sys.executable, str(ROOT / "commands" / "transfer_job_artifacts.py"), *args, "--json"],
        env={**clean, "HF_HOME": str(cwd / "hf-home"), **env}, cwd=cwd,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def export(tmp_path) -> Path:
    folder = tmp_path / "runs" / "llama" / "export"
    for path, data in EXPORT.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    return folder


def test_push_to_hub_creates_a_private_repo_with_the_token_from_the_environment(export, tmp_path):
    with hub_server({}, token=TOKEN) as hub:
        done = cli("--action", "push_to_hub", "--source", str(export), "--repo_id", "my-org/llama",
                   env={**hub.env, "HF_TOKEN": TOKEN}, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["status"] == "done" and result["private"] is True
        assert result["dest"] == f"{hub.url}/my-org/llama"
        repo = hub.repos["my-org/llama"]
        assert repo.private and repo.files == EXPORT
        assert hub.lfs  # the binary file went through LFS, as on the real Hub
        assert TOKEN not in done.stdout + done.stderr

        # Pushed again, the same repo gets a new commit; a public one is not written to.
        hub.repos["my-org/public"] = HubRepo("model", {"README.md": b"hi"})
        env = {**hub.env, "HF_TOKEN": TOKEN}
        refused = cli("--action", "push_to_hub", "--source", str(export), "--repo_id",
                      "my-org/public", env=env, cwd=tmp_path)  # fmt: skip
        assert refused.returncode != 0 and "public" in refused.stdout + refused.stderr
        assert hub.repos["my-org/public"].files == {"README.md": b"hi"}


def test_push_to_hub_without_hf_token_is_refused_and_says_where_it_goes(export, tmp_path):
    with hub_server({}, token=TOKEN) as hub:
        done = cli("--action", "push_to_hub", "--source", str(export), "--repo_id", "my-org/x",
                   env=hub.env, cwd=tmp_path)  # fmt: skip
        assert done.returncode != 0
        assert (
            "HF_TOKEN" in done.stdout + done.stderr
            and "no_credentials" in done.stdout + done.stderr
        )
        assert not hub.repos and not [r for r in hub.requests if r[0] == "POST"]


def test_a_wrong_token_is_access_denied_and_not_shown(export, tmp_path):
    wrong = "hf_" + "WrongToken" * 3
    with hub_server({}, token=TOKEN) as hub:
        done = cli("--action", "push_to_hub", "--source", str(export), "--repo_id", "my-org/x",
                   env={**hub.env, "HF_TOKEN": wrong}, cwd=tmp_path)  # fmt: skip
    assert done.returncode != 0 and "access_denied" in done.stdout + done.stderr
    assert wrong not in done.stdout + done.stderr


def test_push_to_hub_takes_a_local_folder_only(tmp_path):
    refused = failure(transfer_job_artifacts, action="push_to_hub", source="s3://bucket-b/export",
                      repo_id="my-org/x")  # fmt: skip
    assert refused.code == "invalid_input" and refused.next_step.arguments["action"] == "fetch"
    assert failure(transfer_job_artifacts, action="push_to_hub", source=str(tmp_path),
                   repo_id="not a repo").code == "invalid_input"  # fmt: skip


# --- over MCP: the workspace ------------------------------------------------------------------


def test_an_mcp_caller_writes_only_under_its_workspace(tmp_path):
    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / "runs" / "demo" / "export").mkdir(parents=True)
    (project / "runs" / "demo" / "export" / "config.json").write_text("{}")
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")

    fetch = {"action": "fetch", "source": "runs/demo/export"}

    async def scenario():
        async with Client(build_server(workspace=Workspace.create(str(project)))) as client:
            call = client.call_tool
            return (
                await call("transfer_job_artifacts", {**fetch, "dest": "fetched"}),
                await call("transfer_job_artifacts", {**fetch, "dest": str(outside / "x")}),
                await call("transfer_job_artifacts", {"action": "push_to_hub",
                                                      "source": str(outside), "repo_id": "a/b"}),
                await call("transfer_job_artifacts", {"action": "fetch", "dry_run": True,
                                                      "source": "pvc:fsx-claim/runs/demo",
                                                      "dest": "fetched-claim"}),
            )  # fmt: skip

    inside, out, read_out, pvc = anyio.run(scenario)
    assert not inside.is_error, inside.content[0].text
    assert (project / "fetched" / "config.json").read_text() == "{}"
    for refused in (out, read_out):
        assert refused.is_error
        assert json.loads(refused.content[0].text)["error"]["code"] == "path_not_allowed"
    assert not (outside / "x").exists()
    assert not pvc.is_error, pvc.content[0].text  # a claim's path is not this host's
    # Over MCP the transfer runs as an operation: its result is the operation's.
    assert pvc.structured_content["result"]["dest"] == str(project / "fetched-claim")
