"""Whatever folder they start in, the suite's processes import the suite's own packages,
never a project's `trainer/`, `skills/`, `commands/` or `mcp_server/` (issue 46 item 0):
every launcher asks for Python's safe-path mode (-P, PYTHONSAFEPATH=1), and a child
spawned from a folder holding such packages really imports ours."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from skills.kube.access import exec_user
from skills.operations import processes
from skills.shared.paths import WORKSPACE_ENV, project_root
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.kubernetes.manifest import container_env
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings
from skills.training_job_deployer.targets.local.target import LocalTarget
from skills.training_job_deployer.targets.slurm.script import PartitionInfo
from skills.training_job_deployer.targets.slurm.settings import SlurmDeploySettings
from skills.training_job_deployer.targets.slurm.target import SlurmTarget

SAFE = "-P"  # Python 3.11+ (pyproject's floor is 3.10: there only the variable is set)


def _poison(folder: Path, *packages: str) -> Path:
    for package in packages:
        (folder / package).mkdir()
        marker = folder / f"IMPORTED-{package}"
        (folder / package / "__init__.py").write_text(
            f"open({str(marker)!r}, 'w').close()\nraise ImportError('the project {package}')\n"
        )
    return folder


def test_a_module_spawned_from_a_project_with_our_package_names_imports_ours(tmp_path, monkeypatch):
    """The local job's supervisor and the operation workers are spawn_module's: started
    in a project holding `skills/`, the child must still import the suite's."""
    (tmp_path / "project").mkdir()
    project = _poison(tmp_path / "project", "skills")
    monkeypatch.chdir(project)
    log = tmp_path / "child.log"
    pid = processes.spawn_module("skills.shared.paths", log=log)
    deadline = time.monotonic() + 60
    while processes.is_alive(pid, processes.start_time(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (project / "IMPORTED-skills").exists(), log.read_text()
    assert "ImportError" not in log.read_text()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="-P is Python 3.11's")
def test_every_launcher_asks_for_safe_path_mode(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = LocalTarget(tmp_path / "runs").plan(JobSpec(job_name="j"))
    assert local.argv[1:4] == [SAFE, "-m", "torch.distributed.run"]
    assert local.env["PYTHONSAFEPATH"] == "1"
    slurm = SlurmTarget(SlurmDeploySettings(target="slurm", runs_dir=str(tmp_path / "s")))
    script = slurm.plan_for(
        JobSpec(job_name="j", gpu_per_node=1), PartitionInfo(name="p", nodes=1, cpus_per_node=2)
    ).script
    assert "\nexport PYTHONSAFEPATH=1\n" in script
    k8s = container_env(KubernetesDeploySettings(target="kubernetes"))
    assert k8s["PYTHONSAFEPATH"] == "1"
    plugin = exec_user("c", "us-west-2", None)["exec"]
    assert plugin["args"][:3] == [SAFE, "-m", "skills.kube.access"]
    assert {"name": "PYTHONSAFEPATH", "value": "1"} in plugin["env"]
    assert processes.python_argv("m", "a") == [sys.executable, SAFE, "-m", "m", "a"]


@pytest.mark.parametrize(
    "layout, start, environ, expected",
    [
        ({"repo/.git/": None, "repo/src/pkg/": None}, "repo/src/pkg", {}, "repo"),
        ({"repo/.git": "gitdir: elsewhere", "repo/src/": None}, "repo/src", {}, "repo"),
        ({"plain/src/": None}, "plain/src", {}, "plain/src"),
        ({"repo/.git/": None, "repo/src/": None}, "repo/src", {WORKSPACE_ENV: ".."}, "repo"),
        ({"repo/.git/": None, "other/": None}, "repo", {WORKSPACE_ENV: "{tmp}/other"}, "other"),
    ],
    ids=[
        "a subfolder of a git repository: its root",
        "a git worktree (a .git file): its root",
        "no repository: the folder itself",
        "the variable, relative to the folder",
        "the variable wins over the git root",
    ],
)
def test_the_project_root_is_one_rule(tmp_path, layout, start, environ, expected):
    for name, text in layout.items():
        path = tmp_path / name
        if text is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    environ = {k: v.format(tmp=tmp_path) for k, v in environ.items()}
    assert project_root(tmp_path / start, environ) == (tmp_path / expected).resolve()
