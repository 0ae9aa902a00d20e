"""Issue 45 items 1, 2 and 10: a job's `env` is an allow-list of documented knobs (NCCL,
libfabric, torch, the trainer's own), not a deny-list. No tool argument names where
HF_TOKEN goes (HF_ENDPOINT, proxies, CA bundles), loads code (PYTHONPATH, LD_PRELOAD,
...) or writes outside the workspace (HF_HOME, TMPDIR, NCCL_DEBUG_FILE, ...): on every
target, over the CLI, MCP and Python. A hub mirror comes from the user's own
environment."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from commands._cli import run_cli
from commands.deploy_training_job import deploy_training_job
from mcp_server import build_server
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.job_env import KNOBS_DOC

IMAGE = "r.invalid/fsdp:v1"
CANARY = "hf_" + "EnvKnobCanary" * 3
TARGETS = ("local", "slurm", "kubernetes")


def _settings(target: str, tmp_path: Path) -> dict[str, Any]:
    if target == "kubernetes":
        return {"target": target, "image_uri": IMAGE, "instance_type": "p5.48xlarge"}
    return {"target": target, "runs_dir": str(tmp_path / "runs")}


def plan_env(plan: Any) -> dict[str, str]:
    """The plain variables a plan gives the trainer, as each target renders them."""
    if plan.target == "local":
        return dict(plan.env)
    if plan.target == "kubernetes":
        (replica, *_) = plan.manifest["spec"]["pytorchReplicaSpecs"].values()
        return {
            e["name"]: e.get("value") for e in replica["template"]["spec"]["containers"][0]["env"]
        }
    exports = [
        shlex.split(line)[1] for line in plan.script.splitlines() if line.startswith("export ")
    ]
    return dict(e.split("=", 1) for e in exports)


def _mcp(arguments: dict[str, Any]) -> dict[str, Any]:
    """One deploy_training_job call over MCP (the in-process client): its JSON result."""

    async def scenario():
        async with Client(build_server()) as client:
            return await client.call_tool("deploy_training_job", arguments)

    result = anyio.run(scenario)
    return {"is_error": result.is_error, **json.loads(result.content[0].text)}


def _cli(*argv: str) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with contextlib.suppress(SystemExit):
            code = run_cli(deploy_training_job, [*argv, "--json"])
            return code, json.loads(out.getvalue())
    return 2, json.loads(out.getvalue())


def _refused_naming(error: dict[str, Any], name: str) -> None:
    """The project's error: invalid_input, the variable named in the message and the
    problems, the hint saying where the documented knobs are listed."""
    assert error["code"] == "invalid_input", error
    assert name in error["message"]
    assert {"field": f"env.{name}"}.items() <= error["details"]["problems"][0].items()
    assert KNOBS_DOC in error["hint"] and "NCCL_*" in error["hint"]


# --- 1. a tool argument never says where HF_TOKEN goes ------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [("HF_ENDPOINT", "https://collector.invalid"), ("HTTPS_PROXY", "http://collector.invalid:3128"),
     ("REQUESTS_CA_BUNDLE", "/tmp/collector-ca.pem"),
     ("MLFLOW_TRACKING_URI", "https://collector.invalid")],
)  # fmt: skip
def test_over_mcp_env_cannot_send_the_hub_token_elsewhere(name, value, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", CANARY)
    answer = _mcp({"job_name": "hub", "target": "kubernetes", "image_uri": IMAGE, "dry_run": True,
                   "model_name_or_path": "org/model", "env": {name: value}})  # fmt: skip
    assert answer["is_error"], "the plan put it beside the token's Secret"
    _refused_naming(answer["error"], name)
    assert CANARY not in json.dumps(answer) and value not in json.dumps(answer)


def test_the_users_own_hf_endpoint_goes_beside_the_secret_only_for_hub_jobs(monkeypatch):
    """The legitimate mirror: HF_ENDPOINT in the environment the tools run in, as
    HF_TOKEN itself is (a local or Slurm job inherits both)."""
    monkeypatch.setenv("HF_TOKEN", CANARY)
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example")
    hub = deploy_training_job(job_name="hub", target="kubernetes", image_uri=IMAGE,
                              model_name_or_path="org/model", dry_run=True)  # fmt: skip
    (replica,) = hub.plan.manifest["spec"]["pytorchReplicaSpecs"].values()
    env = {e["name"]: e for e in replica["template"]["spec"]["containers"][0]["env"]}
    assert env["HF_ENDPOINT"]["value"] == "https://mirror.example"
    assert "secretKeyRef" in env["HF_TOKEN"]["valueFrom"]
    assert any("https://mirror.example (HF_ENDPOINT)" in line for line in hub.plan.hub)
    plain = deploy_training_job(job_name="plain", target="kubernetes", image_uri=IMAGE,
                                dry_run=True)  # fmt: skip
    assert "HF_ENDPOINT" not in plan_env(plain.plan)
    assert CANARY not in json.dumps(hub.plan.model_dump(mode="json"))


def test_the_users_own_mlflow_server_reaches_the_container_with_the_image_to_tag_runs(
    monkeypatch,
):
    """Issue 48: MLFLOW_TRACKING_URI is the user's, as HF_ENDPOINT is; a job of an
    environment without one gets no tracking variables at all."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mlflow.example")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "team")
    tracked = deploy_training_job(job_name="tracked", target="kubernetes", image_uri=IMAGE,
                                  dry_run=True)  # fmt: skip
    env = plan_env(tracked.plan)
    assert env["MLFLOW_TRACKING_URI"] == "https://mlflow.example"
    assert env["MLFLOW_EXPERIMENT_NAME"] == "team" and env["FSDP_EKS_IMAGE"] == IMAGE
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    plain = deploy_training_job(job_name="plain", target="kubernetes", image_uri=IMAGE,
                                dry_run=True)  # fmt: skip
    assert not {"MLFLOW_TRACKING_URI", "FSDP_EKS_IMAGE"} & set(plan_env(plain.plan))


@pytest.mark.parametrize("target", ["local", "slurm"])
def test_a_local_or_slurm_plan_says_which_mirror_the_token_goes_to(target, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", CANARY)
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example")
    result = deploy_training_job(job_name="hub", model_name_or_path="org/model", dry_run=True,
                                 **_settings(target, tmp_path))  # fmt: skip
    assert any("https://mirror.example (HF_ENDPOINT)" in line for line in result.plan.hub)
    # Inherited from this environment when the job starts, never written into the plan.
    assert "HF_ENDPOINT" not in plan_env(result.plan)


# --- 2. nothing in a call loads code -------------------------------------------------------


def test_the_cli_refuses_a_pythonpath_that_would_run_planted_code(tmp_path):
    planted = tmp_path / "planted"
    (planted / "trainer").mkdir(parents=True)
    ran = tmp_path / "planted-code-ran"
    (planted / "trainer" / "__main__.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    code, out = _cli("--job_name", "planted", "--runs_dir", str(tmp_path / "runs"),
                     "--gpu_per_node", "1", "--max_steps", "1", "--wait_seconds", "0",
                     "--env", f"PYTHONPATH={planted}")  # fmt: skip
    assert code == 2, out
    _refused_naming(out["error"], "PYTHONPATH")
    assert not ran.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "pair",
    ["LD_PRELOAD=/tmp/x.so", "LD_LIBRARY_PATH=/tmp/lib", "BASH_ENV=/tmp/rc",
     "PYTHONSTARTUP=/tmp/s.py"],
)  # fmt: skip
def test_the_cli_refuses_the_listed_loaders(pair, tmp_path):
    code, out = _cli("--job_name", "j", "--runs_dir", str(tmp_path), "--dry_run", "--env", pair)
    assert code == 2
    _refused_naming(out["error"], pair.split("=")[0])


# --- 10. nothing in a call writes outside the workspace ------------------------------------


@pytest.mark.parametrize("name", ["HF_HOME", "HF_HUB_CACHE", "TMPDIR", "NCCL_DEBUG_FILE"])
def test_over_mcp_env_cannot_move_where_the_job_writes(name, tmp_path):
    outside = str(tmp_path.parent / "outside")
    answer = _mcp({"job_name": "w", "dry_run": True, "env": {name: outside}})
    assert answer["is_error"], answer
    _refused_naming(answer["error"], name)


# --- the class, beyond the listed names ----------------------------------------------------


@pytest.mark.parametrize(
    "pair",
    [  # code: the interpreter's, the loader's, other runtimes'
     "PYTHONHOME=/tmp/py", "PYTHONUSERBASE=/tmp/u", "PYTHONWARNINGS=ignore::x.Y",
     "LD_AUDIT=/tmp/a.so", "GCONV_PATH=/tmp/g", "NODE_OPTIONS=--require=x", "PATH=/tmp/bin",
     "ENV=/tmp/rc", "OMP_TOOL_LIBRARIES=/tmp/t.so", "NCCL_NET_PLUGIN=evil",
     "NCCL_TUNER_PLUGIN=evil", "FI_PROVIDER_PATH=/tmp/prov", "TRAINER_TRUST_REMOTE_CODE=true",
     # where credentials go
     "NO_PROXY=*", "ALL_PROXY=socks5://c.invalid", "http_proxy=http://c.invalid",
     "CURL_CA_BUNDLE=/tmp/ca.pem", "SSL_CERT_FILE=/tmp/ca.pem", "SSL_CERT_DIR=/tmp/ca",
     "AWS_ENDPOINT_URL=http://c.invalid", "AWS_CA_BUNDLE=/tmp/ca.pem",
     "HUGGINGFACE_CO_URL_TEMPLATE=http://c.invalid",
     # where the job writes
     "XDG_CACHE_HOME=/tmp/c", "TRITON_CACHE_DIR=/tmp/t", "TORCHINDUCTOR_CACHE_DIR=/tmp/i",
     "TORCH_HOME=/tmp/h", "TORCH_LOGS_OUT=/tmp/l", "NCCL_TOPO_DUMP_FILE=x.xml",
     "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=fr", "OFI_NCCL_TOPO_FILE_TEMPLATE=topo-XXXXXX",
     "TRAINER_OUTPUT_DIR=out", "FSDP_EKS_CACHE_DIR=c",
     "HF_DATASETS_CACHE=/tmp/d",
     # a documented family, but the value is a path
     "NCCL_RAS_ADDR=/tmp/sock", "TRAINER_TRAIN_ON=/etc",
     # a trainer flag with a JobSpec field is set there (validated, confined)
     "TRAINER_CHECKPOINT_DIR=ckpt", "TRAINER_DATASET=data.txt", "TRAINER_MAX_STEPS=5"],
)  # fmt: skip
def test_what_no_tool_argument_may_set_is_refused_on_every_path(pair, tmp_path):
    name = pair.split("=")[0]
    with pytest.raises(ToolFailure) as caught:
        deploy_training_job(job_name="j", runs_dir=str(tmp_path), dry_run=True, env=[pair])
    _refused_naming(caught.value.to_dict()["error"], name)


@pytest.mark.parametrize("target", TARGETS)
def test_documented_knobs_reach_the_trainer_on_every_target(target, tmp_path):
    knobs = {
        "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "^lo,docker", "NCCL_IB_HCA": "=mlx5_0:1",
        "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "OFI_NCCL_PROTOCOL": "RDMA",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "TORCH_LOGS": "+dynamo", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "OMP_NUM_THREADS": "4", "CUDA_LAUNCH_BLOCKING": "1", "HF_HUB_DISABLE_XET": "1",
        "TRAINER_WARMUP_STEPS": "3",
    }  # fmt: skip
    result = deploy_training_job(job_name="knobs", env=knobs, dry_run=True,
                                 **_settings(target, tmp_path))  # fmt: skip
    env = plan_env(result.plan)
    assert {k: env.get(k) for k in knobs} == knobs


def test_every_refused_variable_is_named_at_once_without_its_value(tmp_path):
    with pytest.raises(ToolFailure) as caught:
        deploy_training_job(job_name="j", runs_dir=str(tmp_path), dry_run=True,
                            env={"HF_ENDPOINT": "https://c.invalid/x", "NCCL_DEBUG": "INFO",
                                 "PYTHONPATH": "/opt/somewhere-secretive"})  # fmt: skip
    error = caught.value.to_dict()["error"]
    assert [p["field"] for p in error["details"]["problems"]] == [
        "env.HF_ENDPOINT",
        "env.PYTHONPATH",
    ]
    assert "c.invalid" not in json.dumps(error) and "somewhere-secretive" not in json.dumps(error)


def test_the_suite_own_variables_still_stand_in_the_local_plan(tmp_path):
    """The local target's PYTHONPATH (this project first) and TMPDIR (the run dir) are
    the suite's, which no call can replace now."""
    result = deploy_training_job(job_name="own", runs_dir=str(tmp_path), dry_run=True)
    assert result.plan.env["PYTHONPATH"].split(":")[0] == str(Path(__file__).resolve().parents[2])
    assert result.plan.env["TMPDIR"].startswith(str(tmp_path))
