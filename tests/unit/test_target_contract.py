"""The target contract: every registered target is a `Target` that implements every
abstract method, and every job tool answers each target's unsupported cases with a typed
unsupported_for_target failure (never a TypeError or AttributeError). No service runs:
each refusal comes before a target reaches its scheduler or cluster."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from commands.cancel_training_job import cancel_training_job
from commands.delete_training_job import delete_training_job
from commands.deploy_training_job import deploy_training_job
from commands.diagnose_training_job import diagnose_training_job
from commands.get_training_job import get_training_job
from commands.get_training_job_logs import get_training_job_logs
from commands.list_training_jobs import list_training_jobs
from skills.shared.errors import ToolFailure
from skills.shared.tooling import spec_of
from skills.training_job_deployer.targets.base import Capability, LogOptions, Target
from skills.training_job_deployer.targets.by_name import TARGETS

JOB_TOOLS = (
    get_training_job,
    get_training_job_logs,
    cancel_training_job,
    delete_training_job,
    diagnose_training_job,
    deploy_training_job,
    list_training_jobs,
)
# The cluster-only options of get_training_job_logs (Capability.LOG_OPTIONS).
LOG_OPTIONS = {"replica": "worker-0", "previous": True, "since_seconds": 60, "all_ranks": True}


def _settings(name: str, tmp_path: Any) -> dict[str, Any]:
    """The least input that selects the target (never reached: each case is refused)."""
    if name in ("local", "slurm"):
        return {"target": name, "runs_dir": str(tmp_path / "runs")}
    return {"target": name}


def _unsupported_cases(name: str) -> list[tuple[Any, dict[str, Any]]]:
    """(tool, arguments) that a target without the capability must refuse."""
    capabilities = TARGETS[name].capabilities
    cases: list[tuple[Any, dict[str, Any]]] = []
    if Capability.LOG_OPTIONS not in capabilities:
        cases += [(get_training_job_logs, {option: value}) for option, value in LOG_OPTIONS.items()]
    if Capability.DELETE not in capabilities:
        cases.append((delete_training_job, {"confirm": True}))
    if Capability.SNAPSHOT not in capabilities:
        cases.append((diagnose_training_job, {}))
    if Capability.AUTO_RETRY not in capabilities:
        cases.append((deploy_training_job, {"auto_retry": True, "dry_run": True}))
    return cases


CASES = [
    pytest.param(name, tool, args, id=f"{name}-{tool.__name__}-{'-'.join(args) or 'plain'}")
    for name in TARGETS
    for tool, args in _unsupported_cases(name)
]


@pytest.mark.parametrize("target", TARGETS.values(), ids=list(TARGETS))
def test_every_registered_target_implements_the_base(target):
    assert issubclass(target, Target)
    assert not inspect.isabstract(target), target.__abstractmethods__
    for method in Target.__abstractmethods__:
        assert getattr(target, method) is not getattr(Target, method), method
    assert {target.settings_model, target.deploy_settings_model, target.plan_model}
    assert target.capabilities <= frozenset(Capability)
    # A capability is a method defined by the target itself, not the base's refusal.
    own = {Capability.DELETE: "delete", Capability.SNAPSHOT: "snapshot"}
    for capability, method in own.items():
        defined = getattr(target, method) is not getattr(Target, method)
        assert defined == (capability in target.capabilities), (target.name, method)
    if Capability.AUTO_RETRY in target.capabilities:
        assert Capability.SNAPSHOT in target.capabilities  # the doctor reads the snapshot
        assert target.retry_facts is not Target.retry_facts


def test_the_logs_signature_is_the_bases_everywhere():
    wanted = inspect.signature(Target.logs)
    for target in TARGETS.values():
        assert inspect.signature(target.logs) == wanted, target.name
    assert set(LOG_OPTIONS) == {f for f in LogOptions.__dataclass_fields__}
    assert set(LOG_OPTIONS) <= set(spec_of(get_training_job_logs).params.model_fields)


def test_every_job_tool_is_covered():
    covered = {tool.__name__ for _, tool, _ in (c.values for c in CASES)}
    # get/cancel/list take no option a target may lack: every target must answer them;
    # every target has the job doctor (the run-directory ones read the log).
    answered = {"get_training_job", "cancel_training_job", "list_training_jobs"}
    answered |= {"diagnose_training_job", "deploy_training_job"}
    assert covered | answered == {t.__name__ for t in JOB_TOOLS}
    assert all(Capability.AUTO_RETRY in t.capabilities for t in TARGETS.values())


@pytest.mark.parametrize(("name", "tool", "args"), CASES)
def test_an_unsupported_case_is_a_typed_failure(name, tool, args, tmp_path):
    raw = {"job_name": "contract", **_settings(name, tmp_path), **args}
    with pytest.raises(ToolFailure) as caught:
        spec_of(tool).invoke(raw)
    assert caught.value.code == "unsupported_for_target", (caught.value.code, caught.value.message)
    assert caught.value.hint
    assert not (tmp_path / "runs").exists()  # refused before anything was made


@pytest.mark.parametrize("name", ["local"])
def test_the_tools_every_target_answers_run_without_a_type_error(name, tmp_path):
    """get/cancel/list on a target with no job: typed answers (job_not_found, [])."""
    settings = _settings(name, tmp_path)
    for tool in (get_training_job, cancel_training_job):
        with pytest.raises(ToolFailure) as caught:
            spec_of(tool).invoke({"job_name": "contract", **settings, "confirm": True}
                                 if tool is cancel_training_job
                                 else {"job_name": "contract", **settings})  # fmt: skip
        assert caught.value.code == "job_not_found"
    listed = spec_of(list_training_jobs).invoke(settings)
    assert listed.jobs == []
