"""The Slurm batch script without a cluster: the 4 x 8-GPU EFA script as text and with
`bash -n`, the CPU script of the test node, and what the shell makes of the user's
values when the script really runs (bash, with `srun` and `scontrol` stand-ins that
record their argv). Settings are refused at the edge, before any scheduler is asked."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from commands.deploy_training_job import deploy_training_job
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.job_spec import JobSpec, trainer_argv
from skills.training_job_deployer.targets.slurm.scheduler import Scheduler, _exit_code, _fields
from skills.training_job_deployer.targets.slurm.script import PartitionInfo, batch_env, layout
from skills.training_job_deployer.targets.slurm.settings import SlurmDeploySettings
from skills.training_job_deployer.targets.slurm.target import SlurmTarget

GPU_PARTITION = PartitionInfo(
    name="gpu", nodes=16, cpus_per_node=96, gpus_per_node=8, efa=True, rdma=True
)
CPU_PARTITION = PartitionInfo(name="debug", nodes=1, cpus_per_node=2)
# A checkpoint path a shell would run if it were not quoted.
HOSTILE = "/mnt/shared/ck $(touch PWNED) `touch PWNED2`;touch PWNED3 'q\" $HOME"


def _plan(info: PartitionInfo, tmp_path: Path, **settings: str):
    spec = JobSpec(
        job_name="llama-ft",
        num_nodes=4 if info.gpus_per_node else 1,
        gpu_per_node=8 if info.gpus_per_node else 2,
        model_type="llama_v3_8b",
        checkpoint_dir=HOSTILE,
        max_steps=1000,
    )
    target = SlurmTarget(
        SlurmDeploySettings(target="slurm", runs_dir=str(tmp_path / "runs"), **settings)
    )
    return spec, target.plan_for(spec, info)


def _bash_n(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


def test_four_nodes_of_eight_gpus_with_efa_in_a_container(tmp_path):
    spec, plan = _plan(
        GPU_PARTITION,
        tmp_path,
        partition="gpu",
        account="ml-team",
        time_limit="24:00:00",
        container_image="nvcr.io#nvidia/pytorch:24.07-py3",
    )
    script = plan.script
    _bash_n(script)
    lines = script.splitlines()
    sbatch = [line for line in lines if line.startswith("#SBATCH ")]
    assert sbatch == [
        "#SBATCH --job-name=llama-ft",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=96",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=ml-team",
        "#SBATCH --time=24:00:00",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:TERM@120",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={tmp_path}/runs/llama-ft/logs/slurm-%j.log",
    ]
    # skills.kube.efa's variables (RDMA read included: p5-like nodes)
    efa = {"FI_PROVIDER", "FI_EFA_USE_HUGE_PAGE", "FI_EFA_USE_DEVICE_RDMA"}
    assert efa <= set(batch_env(True, True))
    for name, value in batch_env(True, True).items():
        assert f"export {name}={shlex.quote(value)}" in lines
    assert "export OMP_NUM_THREADS=12" in lines  # 96 CPUs over 8 processes
    assert "--nproc_per_node=8" in script and '--nnodes="${SLURM_JOB_NUM_NODES}"' in script
    assert 'scontrol show hostnames "${SLURM_JOB_NODELIST}"' in script
    assert '--rdzv_backend=c10d --rdzv_endpoint="${head_node}:${rdzv_port}"' in script
    # In the container: its python, the run dir and checkpoints mounted; no host path.
    assert "--container-image=nvcr.io#nvidia/pytorch:24.07-py3" in script
    assert f"{tmp_path}/runs/llama-ft" in next(ln for ln in lines if "--container-mounts" in ln)
    assert "  python -m torch.distributed.run \\" in lines
    assert "PYTHONPATH" not in script
    assert (plan.nodes, plan.nproc_per_node, plan.gpus_per_node, plan.efa) == (4, 8, 8, True)
    assert plan.sbatch == ["sbatch", "--parsable"]


def test_cpu_nodes_get_cpu_processes_no_gpus_and_no_efa(tmp_path):
    _, plan = _plan(PartitionInfo("debug", 1, 2, 0, efa=True), tmp_path, venv="/opt/venv x")
    script = plan.script
    _bash_n(script)
    assert "--gpus-per-node" not in script and "FI_PROVIDER" not in script
    assert "#SBATCH --partition" not in script  # the cluster's default partition
    assert "--nproc_per_node=2" in script and "export OMP_NUM_THREADS=1" in script
    assert "  '/opt/venv x/bin/python' -m torch.distributed.run \\" in script.splitlines()
    assert plan.gpus_per_node is None and not plan.efa


def test_the_shell_passes_every_value_through_and_runs_none(tmp_path, monkeypatch):
    """Run the script with bash: srun and scontrol are stand-ins that record their argv;
    the trainer must get exactly trainer_argv's list, and no PWNED file may appear."""
    monkeypatch.setenv("HF_TOKEN", "hf_" + "a1B2" * 9)
    spec, plan = _plan(CPU_PARTITION, tmp_path)
    assert "hf_" not in plan.script and "HF_TOKEN" not in plan.model_dump_json()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "srun-argv.json"
    for name, body in (
        ("srun", f"import json,sys; json.dump(sys.argv[1:], open({str(record)!r}, 'w'))"),
        ("scontrol", "print('node-a'); print('node-b')"),
    ):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_JOB_NUM_NODES": "1",
    }
    done = subprocess.run(
        ["bash", "-c", plan.script], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    argv = json.loads(record.read_text())
    trainer = argv[argv.index("trainer") + 1 :]
    assert spec.checkpoint_dir == HOSTILE
    assert trainer == [*trainer_argv(spec), "--output_dir", plan.run_dir]
    assert "--rdzv_endpoint=node-a:24242" in argv
    assert not list(work.iterdir()) and not list(tmp_path.glob("**/PWNED*"))


@pytest.mark.parametrize(
    "field, value",
    [
        ("time_limit", "24h"),
        ("time_limit", "1:00:00\n#SBATCH --uid=0"),
        ("partition", "gpu;touch x"),
        ("account", "$(id)"),
        ("ssh_host", "-oProxyCommand=touch x"),
        ("container_image", "img;touch x"),
        ("venv", "--help"),
        ("runs_dir", "runs dir"),
        ("runs_dir", "runs%j"),
    ],
)
def test_settings_that_cannot_be_put_in_a_script_are_refused_at_the_edge(field, value):
    with pytest.raises(ToolFailure) as failure:
        deploy_training_job(job_name="j", target="slurm", dry_run=True, **{field: value})
    assert failure.value.code == "invalid_input"
    assert failure.value.details["problems"][0]["field"] == field


def test_a_job_name_with_shell_metacharacters_is_refused():
    with pytest.raises(ToolFailure) as failure:
        deploy_training_job(job_name="a;touch x", target="slurm", dry_run=True)
    assert failure.value.code == "invalid_input"


def test_partition_facts_from_sinfo_rows():
    rows = [
        ("192", "gpu:h100:8(S:0-1)", "static,p5.48xlarge,efa,gpu", "12"),
        ("96+", "gpu:8", "dynamic,p5.48xlarge,EFA", "4"),
    ]
    info = PartitionInfo.from_sinfo("gpu", rows)
    assert info == PartitionInfo(
        "gpu",
        nodes=16,
        cpus_per_node=96,
        gpus_per_node=8,
        efa=True,
        rdma=True,
        instance_type="p5.48xlarge",
    )
    cpu = PartitionInfo.from_sinfo("debug", [("2", "(null)", "(null)", "1")])
    assert (cpu.gpus_per_node, cpu.efa, cpu.rdma, cpu.instance_type) == (0, False, False, None)
    # Node groups of two instance types: none is the partition's (nothing is priced).
    mixed = PartitionInfo.from_sinfo(
        "mix", [("96", "gpu:8", "p4d.24xlarge,efa", "1"), ("96", "gpu:8", "p5.48xlarge,efa", "1")]
    )
    assert mixed.instance_type is None
    # g5's EFA has no RDMA read: no FI_EFA_USE_DEVICE_RDMA (libfabric would abort)
    g5 = PartitionInfo.from_sinfo("g5", [("192", "gpu:8", "static,g5.48xlarge,efa,gpu", "2")])
    assert (g5.efa, g5.rdma, g5.instance_type) == (True, False, "g5.48xlarge")
    assert "FI_EFA_USE_DEVICE_RDMA" not in batch_env(g5.efa, g5.rdma)


def test_a_job_that_does_not_fit_the_partition_is_refused_before_submit():
    with pytest.raises(ToolFailure) as failure:
        layout(4, 16, GPU_PARTITION)
    assert failure.value.code == "not_enough_gpus" and "8 GPU" in failure.value.message
    with pytest.raises(ToolFailure) as failure:
        layout(32, 8, GPU_PARTITION)
    assert failure.value.code == "invalid_input" and "16 node" in failure.value.message
    with pytest.raises(ToolFailure) as failure:
        layout(1, 4, CPU_PARTITION)
    assert failure.value.code == "not_enough_gpus" and "no GPU" in failure.value.message


def test_ssh_hands_the_remote_shell_each_argument_quoted():
    argv = ["tail", "-c", "+1", "--", "runs/j/logs/a b;$(x)"]
    full = Scheduler("me@login-1").argv(argv)
    assert full[:5] == ["ssh", "-o", "BatchMode=yes", "--", "me@login-1"]
    assert shlex.split(full[5]) == argv
    assert Scheduler(None).argv(argv) == argv


def test_scontrol_fields_and_exit_codes():
    line = "JobId=7 JobName=j JobState=PENDING Reason=BeginTime Restarts=1 ExitCode=0:15"
    fields = _fields(line)
    assert [fields[k] for k in ("JobState", "Reason", "Restarts")] == ["PENDING", "BeginTime", "1"]
    assert [_exit_code(v) for v in ("0:0", "1:0", "0:15", None, "x")] == [0, 1, 143, None, None]


def test_through_ssh_the_jobs_paths_are_the_clusters():
    # An MCP server's workspace then judges runs_dir (the record, here) but not dataset or
    # checkpoint_dir (paths on the cluster): see skills/shared/paths.runs_here.
    assert SlurmDeploySettings(target="slurm").job_runs_here
    assert not SlurmDeploySettings(target="slurm", ssh_host="login1").job_runs_here


def test_a_partition_of_a_known_instance_type_is_priced_per_hour(tmp_path, monkeypatch):
    import dataclasses

    from skills.training_job_deployer.job_cost import dry_run_cost

    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    p5 = dataclasses.replace(GPU_PARTITION, instance_type="p5.48xlarge")
    spec, plan = _plan(p5, tmp_path)
    target = SlurmTarget(SlurmDeploySettings(target="slurm", runs_dir=str(tmp_path / "runs")))
    cost = dry_run_cost(spec, plan, target)  # no earlier attempt: per hour only
    assert cost is not None and cost["what"] == "4 x p5.48xlarge in eu-west-1"
    assert cost["usd_per_hour"] == pytest.approx(4 * 55.04 * 1.1)
    assert cost["total_usd"] is None and any("per hour only" in n for n in cost["notes"])
    # The CLI prints the script as sbatch gets it, then the cost as shell comments.
    from skills.training_job_deployer.targets.by_name import DeployResult

    shown = DeployResult(job_name=spec.job_name, target="slurm", status="planned",
                         dry_run=True, plan=plan, cost=cost).plain_text()  # fmt: skip
    assert shown is not None and shown.startswith(plan.script.rstrip("\n"))
    assert "\n# cost: 4 x p5.48xlarge in eu-west-1: $242.18/h on-demand" in shown
    _bash_n(shown)
    # Nodes of no known type (an on-premises partition): nothing to price, no failure.
    _, unknown = _plan(GPU_PARTITION, tmp_path)
    assert unknown.billing() is None and dry_run_cost(spec, unknown, target) is None


# What a dry run without a reachable Slurm cannot read from the partition (sinfo).
NOT_READ = {"default partition", "node count", "GPUs per node", "CPUs per node", "EFA",
            "instance type"}  # fmt: skip


def test_a_dry_run_with_no_route_to_slurm_renders_the_script_and_says_what_was_not_read(
    tmp_path,
):
    # ssh to a login node that does not resolve: ssh's own failure (exit 255).
    result = deploy_training_job(
        job_name="llama-ft", target="slurm", runs_dir=str(tmp_path / "runs"),
        ssh_host="login.no-such-host.invalid", num_nodes=4, gpu_per_node=8,
        account="ml-team", time_limit="24:00:00", max_steps=100, dry_run=True,
    )  # fmt: skip
    assert result.status == "planned" and result.dry_run
    plan = result.plan
    _bash_n(plan.script)
    sbatch = [line for line in plan.script.splitlines() if line.startswith("#SBATCH ")]
    assert sbatch[:4] == [
        "#SBATCH --job-name=llama-ft",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",  # the job's request, not the nodes' count
    ]
    assert "#SBATCH --account=ml-team" in sbatch and "#SBATCH --time=24:00:00" in sbatch
    # Facts not read are not invented: no CPU count, no EFA, no partition line.
    assert "--cpus-per-task" not in plan.script and "OMP_NUM_THREADS" not in plan.script
    assert "FI_PROVIDER" not in plan.script and "#SBATCH --partition" not in plan.script
    assert set(plan.not_read) == NOT_READ
    assert "login.no-such-host.invalid" in (plan.not_read_because or "")
    assert plan.instance_type is None and result.cost is None  # no type: nothing priced
    # The summary (the CLI's text and MCP's text content) says so, after the script.
    text = result.plain_text()
    assert text is not None and text.startswith(plan.script.rstrip("\n"))
    assert "# not read (Slurm unreachable): " in text and "not checked" in text
    _bash_n(text)
    rows = dict(result.summary_rows())
    assert "GPUs per node" in rows["not read"] and "not checked" in rows["not read"]


def test_a_dry_run_where_slurms_clients_are_not_installed_prints_the_script(tmp_path, monkeypatch):
    # The CLI as a person runs it, on a host with no sinfo on PATH (nor a slurm.conf).
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    args = {"target": "slurm", "job_name": "offline", "runs_dir": str(tmp_path / "runs"),
            "partition": "gpu", "dry_run": True}  # fmt: skip
    argv = [sys.executable, str(Path(__file__).parents[2] / "commands/deploy_training_job.py"),
            *(f"--{k}" if v is True else f"--{k}={v}" for k, v in args.items())]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("#!/bin/bash\n") and "#SBATCH --partition=gpu" in done.stdout
    assert "# not read (Slurm unreachable): " in done.stdout
    assert "sinfo is not on PATH" in done.stdout
    # The same call in this process (a second CLI start is ~1 CPU-s: issue 36) prints
    # the same text, and its plan says what was not read.
    result = deploy_training_job(**args)
    assert done.stdout.rstrip("\n") == (result.plain_text() or "").rstrip("\n")
    plan = result.plan
    # A named partition: which one is the default does not matter.
    assert set(plan.not_read) == NOT_READ - {"default partition"}


def test_a_submit_with_no_route_to_slurm_is_a_typed_failure_and_leaves_nothing(tmp_path):
    runs = tmp_path / "runs"
    with pytest.raises(ToolFailure) as failure:
        deploy_training_job(job_name="offline", target="slurm", runs_dir=str(runs),
                            ssh_host="login.no-such-host.invalid")  # fmt: skip
    assert failure.value.code == "endpoint_unreachable"
    assert "login.no-such-host.invalid" in failure.value.message and failure.value.hint
    assert not runs.exists()


@pytest.mark.parametrize("job_id", [1, 4242, 9999, 10000, 12768, 19999, 123456789])
def test_the_rendezvous_port_stays_below_the_ephemeral_ports(tmp_path, job_id):
    """Every node computes the port from the job id; it must not be one Linux hands out
    for outgoing connections and bind(0) (32768-60999 by default), which a busy node's
    other processes may hold when torchrun binds it (the old 20000 + id % 20000 reached
    39999: id 12768 gave 32768)."""
    _, plan = _plan(CPU_PARTITION, tmp_path)
    (line,) = [s for s in plan.script.splitlines() if s.startswith("rdzv_port=")]
    done = subprocess.run(
        ["bash", "-c", f'{line}; echo "$rdzv_port"'],
        env={**os.environ, "SLURM_JOB_ID": str(job_id)},
        capture_output=True,
        text=True,
        check=True,
    )
    port = int(done.stdout)
    assert 20000 <= port < 30000 and port == 20000 + job_id % 10000
