"""Issue 29 item 4: `--env KEY=VALUE` (MCP: a dict or a list of KEY=VALUE) passes non-secret
variables to the job on every target; secret-looking names and the launcher's own
variables are refused at the edge."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

import pytest

from commands._cli import run_cli
from commands.deploy_training_job import deploy_training_job
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.local.target import LocalTarget
from skills.training_job_deployer.targets.slurm.script import PartitionInfo
from skills.training_job_deployer.targets.slurm.settings import SlurmDeploySettings
from skills.training_job_deployer.targets.slurm.target import SlurmTarget

IMAGE = "r.invalid/fsdp:v1"


def kube_env(result) -> dict[str, str]:
    (replica,) = result.plan.manifest["spec"]["pytorchReplicaSpecs"].values()
    (container,) = replica["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def k8s_dry_run(**kwargs):
    # The engine named: a dry run then asks no cluster (a session's kmock may serve either).
    return deploy_training_job(job_name="envy", target="kubernetes", image_uri=IMAGE,
                               instance_type="p5.48xlarge", engine="pytorchjob",
                               dry_run=True, **kwargs)  # fmt: skip


def test_the_cli_flag_repeats_and_replaces_the_default_nccl_debug():
    out, err = io.StringIO(), io.StringIO()
    argv = ["--target", "kubernetes", "--job_name", "envy", "--image_uri", IMAGE,
            "--instance_type", "p5.48xlarge", "--engine", "pytorchjob", "--env",
            "NCCL_DEBUG=INFO", "--env", "NCCL_DEBUG_SUBSYS=INIT,NET", "--dry_run",
            "--json"]  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert run_cli(deploy_training_job, argv) == 0, err.getvalue()
    plan = json.loads(out.getvalue())["plan"]
    (replica,) = plan["manifest"]["spec"]["pytorchReplicaSpecs"].values()
    env = {e["name"]: e.get("value") for e in replica["template"]["spec"]["containers"][0]["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert env["FI_PROVIDER"] == "efa"  # the suite's own stay


@pytest.mark.parametrize("given", [{"NCCL_DEBUG": "INFO"}, ["NCCL_DEBUG=INFO"]])
def test_mcp_callers_pass_a_dict_or_a_list(given):
    assert kube_env(k8s_dry_run(env=given))["NCCL_DEBUG"] == "INFO"


def test_without_env_the_kubernetes_default_stays_warn():
    assert kube_env(k8s_dry_run())["NCCL_DEBUG"] == "WARN"


@pytest.mark.parametrize(
    "given",
    [{"HF_TOKEN": "x"}, {"WANDB_API_KEY": "x"}, {"MY_SECRET": "x"}, ["DB_PASSWORD=x"],
     {"RANK": "3"}, {"MASTER_ADDR": "h"}, {"PET_NNODES": "2"}, ["NOEQUALS"],
     {"BAD-NAME": "x"}, {"A": "line\nbreak"}],
)  # fmt: skip
def test_secret_names_launcher_variables_and_bad_pairs_are_refused(given):
    with pytest.raises(ToolFailure) as caught:
        k8s_dry_run(env=given)
    assert caught.value.code == "invalid_input"
    assert "env" in json.dumps(caught.value.details)


def test_a_secret_value_is_refused_without_being_echoed():
    token = "hf_" + "Canary" * 6
    with pytest.raises(ToolFailure) as caught:
        k8s_dry_run(env={"NCCL_DEBUG_SUBSYS": token})
    assert token not in json.dumps(caught.value.to_dict())


def test_the_local_plan_adds_them_to_the_processes_environment(tmp_path):
    plan = LocalTarget(tmp_path).plan(JobSpec(job_name="envy", env={"NCCL_DEBUG": "INFO"}))
    assert plan.env["NCCL_DEBUG"] == "INFO" and plan.env["PYTHONUNBUFFERED"] == "1"


def test_the_slurm_script_exports_them_quoted(tmp_path):
    spec = JobSpec(job_name="envy", gpu_per_node=8,
                   env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "$(id) 'q"})  # fmt: skip
    info = PartitionInfo(name="gpu", nodes=1, cpus_per_node=96, gpus_per_node=8, efa=True)
    target = SlurmTarget(SlurmDeploySettings(target="slurm", runs_dir=str(tmp_path / "runs")))
    script = target.plan_for(spec, info).script
    assert "export NCCL_DEBUG=INFO" in script and "export FI_PROVIDER=efa" in script
    # The script, up to srun, run by bash: the variable holds the value as given, nothing ran.
    head = script.split("srun ")[0]
    done = subprocess.run(["bash", "-c", head.replace("scontrol", ": ")
                           + '\nprintf %s "$NCCL_DEBUG_SUBSYS"'],
                          capture_output=True, text=True, env={"SLURM_JOB_ID": "1",
                          "SLURM_JOB_NODELIST": "n1", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.stdout.endswith("$(id) 'q"), done.stderr
