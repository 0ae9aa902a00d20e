"""The contract's extension points: JobSpec as the one place a job option is defined,
targets told apart by their settings, the CLI for every kind of field, one tool
registry, error codes with exit statuses, and lazy SDK imports."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import anyio
import pytest
import tomllib
from mcp import Client
from pydantic import BaseModel, Field

import commands
from commands import all_tools, tool_names
from commands._cli import build_parser, parse_flags, run_cli
from commands._old_names import RENAMED, old_name
from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from mcp_server import build_server
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.progress import Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import Flatten, spec_of, tool
from skills.training_job_deployer.job_spec import JobSpec, TrainerFlag, trainer_argv
from skills.training_job_deployer.targets.base import TargetSettings
from skills.training_job_deployer.targets.by_name import TARGETS
from skills.training_job_deployer.targets.local.target import LocalSettings, LocalTarget

ROOT = Path(__file__).resolve().parents[2]


# --- one place per job option ------------------------------------------------------


class JobSpecWithNewOption(JobSpec):
    """A copy of JobSpec plus one new option, defined once, as a developer would add it."""

    label_smoothing: Annotated[
        float | None, Field(ge=0, lt=1, description="Label smoothing for the loss."), TrainerFlag()
    ] = None


class Planned(ToolResult):
    argv: list[str]


@tool(read_only=True)
def plan_with_new_option(
    *,
    job: Annotated[JobSpecWithNewOption, Flatten()],
    target: Annotated[LocalSettings, Flatten("target", description="Where the job runs:")],
    progress: Progress | None = None,
) -> Planned:
    """Plans a job with the extended spec on its target."""
    return Planned(argv=LocalTarget(target).plan(job).argv)


def test_a_new_job_option_reaches_cli_mcp_schema_and_trainer_argv(tmp_path):
    spec = spec_of(plan_with_new_option)
    help_text = build_parser(spec).format_help()
    assert "--label-smoothing" in help_text and "Label smoothing for the loss." in help_text

    async def listed():
        async with Client(build_server(specs=[spec])) as client:
            return (await client.list_tools()).tools[0].input_schema["properties"]

    properties = anyio.run(listed)
    # The listing keeps a one-line doc (first clause, no full stop); --help the whole text.
    assert properties["label_smoothing"]["description"] == "Label smoothing for the loss"

    argv = plan_with_new_option(job_name="ls", label_smoothing=0.1, runs_dir=str(tmp_path)).argv
    assert argv[argv.index("--label_smoothing") + 1] == "0.1"
    with pytest.raises(ToolFailure) as caught:
        plan_with_new_option(job_name="ls", label_smoothing=2)
    assert caught.value.code == "invalid_input"


def test_deploy_takes_every_jobspec_field_and_only_the_settings_beyond_it():
    fields = set(spec_of(deploy_training_job).params.model_fields)
    assert set(JobSpec.model_fields) <= fields
    settings = {
        name
        for target in TARGETS.values()
        for name in getattr(target, "deploy_settings_model", target.settings_model).model_fields
    }
    assert {"target", "runs_dir", "cluster_name", "partition"} <= settings
    beyond = {"dry_run", "replace_corrupt_record", "auto_retry", "max_retries", "monitor",
              "include_plan", "wait_seconds"}  # fmt: skip
    assert fields - set(JobSpec.model_fields) == beyond | settings


def test_the_read_job_tools_take_only_the_settings_that_find_a_job():
    """Deploy-only settings (partition, instance_type, ...) stay out of get/logs/cancel:
    an agent pays for each byte of every tool's schema."""
    fields = set(spec_of(get_training_job).params.model_fields)
    access = {n for t in TARGETS.values() for n in t.settings_model.model_fields}
    # plot / compare: the job's own curves as a picture (issue 48), not deploy settings.
    assert fields == {"job_name", "wait_seconds", "plot", "compare"} | access
    assert not {"partition", "account", "instance_type", "image_uri"} & fields


def test_trainer_argv_is_the_same_function_for_a_jobspec_and_the_local_plan(tmp_path):
    spec = JobSpec(job_name="same", max_steps=3, grad_accum_steps=2, checkpoint_dir="s3://bkt/c")
    argv = LocalTarget(tmp_path).plan(spec).argv
    start = argv.index("trainer") + 1
    assert argv[start : start + len(trainer_argv(spec))] == trainer_argv(spec)


def test_python_callers_may_pass_the_job_as_a_model(tmp_path):
    spec = JobSpec(job_name="as-model", max_steps=5)
    result = deploy_training_job(job=spec, runs_dir=str(tmp_path), dry_run=True)
    argv = result.plan.argv
    assert argv[argv.index("--max_steps") + 1] == "5" and result.job_name == "as-model"


# --- targets told apart by their settings -------------------------------------------


class FakeSettings(TargetSettings):
    """submits to nowhere (a test's second target)"""

    target: Literal["fake"] = "fake"
    queue: Annotated[str, Field(description="Fake target: a queue name.")] = "default"


class Echo(ToolResult):
    settings: dict


@tool(read_only=True)
def which_target(
    *,
    target: Annotated[
        Annotated[LocalSettings | FakeSettings, Field(discriminator="target")],
        Flatten("target", description="Where:"),
    ],
    progress: Progress | None = None,
) -> Echo:
    """Returns the settings it was given."""
    return Echo(settings=target.model_dump())


def test_each_target_gets_its_own_settings_model():
    assert which_target().settings == {"target": "local", "runs_dir": "runs"}
    assert which_target(target="fake", queue="q1").settings == {"target": "fake", "queue": "q1"}
    description = spec_of(which_target).params.model_fields["target"].description
    assert "'local' runs torchrun here" in description
    assert "'fake' submits to nowhere" in description


def test_a_setting_of_another_target_is_refused_by_name():
    with pytest.raises(ToolFailure) as caught:
        which_target(target="fake", runs_dir="/tmp/x")
    assert caught.value.code == "invalid_input"
    assert caught.value.details["problems"] == [
        {"field": "runs_dir", "problem": "does not apply to target='fake'"}
    ]


# --- the CLI for every kind of field ------------------------------------------------


class Resources(BaseModel):
    cpu: Annotated[int, Field(ge=1, description="CPUs.")] = 1
    memory: Annotated[str | None, Field(description="Memory, e.g. 8Gi.")] = None


class Shapes(ToolResult):
    mode: str | None
    tags: list[str]
    env: dict[str, str]
    resources: Resources
    retries: int


@tool(read_only=True)
def shapes(
    *,
    mode: Annotated[Literal["fast", "safe"] | None, Field(description="How.")] = None,
    tags: Annotated[list[str], Field(description="Tags.")] = [],  # noqa: B006
    env: Annotated[dict[str, str], Field(description="Environment overrides.")] = {},  # noqa: B006
    resources: Annotated[Resources, Field(description="Resources.")] = Resources(),  # noqa: B008
    retries: Annotated[int, Field(ge=0, description="Retries.")] = 0,
    progress: Progress | None = None,
) -> Shapes:
    """Returns what it was given."""
    return Shapes(mode=mode, tags=tags, env=env, resources=resources, retries=retries)


def _cli_json(argv, capsys):
    code = run_cli(shapes, [*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_cli_optional_literal_shows_and_checks_its_choices(capsys):
    assert "{fast,safe}" in build_parser(spec_of(shapes)).format_help()
    assert _cli_json(["--mode", "safe"], capsys)[1]["mode"] == "safe"
    code, out = _cli_json(["--mode", "sloppy"], capsys)
    assert code == 2 and out["error"]["code"] == "invalid_input"


def test_cli_list_is_a_repeated_flag(capsys):
    assert _cli_json(["--tags", "a", "--tags", "b"], capsys)[1]["tags"] == ["a", "b"]


def test_cli_dict_is_repeated_key_value(capsys):
    code, out = _cli_json(["--env", "NCCL_DEBUG=INFO", "--env", "A=b=c"], capsys)
    assert code == 0 and out["env"] == {"NCCL_DEBUG": "INFO", "A": "b=c"}
    with pytest.raises(SystemExit) as done:
        run_cli(shapes, ["--env", "NOEQUALS", "--json"])
    assert done.value.code == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid_input"


def test_cli_nested_model_takes_dotted_flags(capsys):
    code, out = _cli_json(["--resources.cpu", "4", "--resources.memory", "8Gi"], capsys)
    assert code == 0 and out["resources"] == {"cpu": 4, "memory": "8Gi"}
    code, out = _cli_json(["--resources.cpu", "0"], capsys)
    assert code == 2 and out["error"]["details"]["problems"][0]["field"] == "resources.cpu"


def test_cli_reads_json_from_its_own_argv_for_usage_errors(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["shapes"])  # no --json in the process's argv
    with pytest.raises(SystemExit) as done:
        run_cli(shapes, ["--no-such-flag", "--json"])
    assert done.value.code == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid_input"


def test_parse_flags_returns_raw_arguments_and_the_json_switch():
    raw, as_json = parse_flags(spec_of(shapes), ["--retries", "3", "--resources.cpu", "2"])
    assert raw == {"retries": "3", "resources": {"cpu": "2"}} and as_json is False


# --- one registry -------------------------------------------------------------------


def test_the_tools_are_the_public_modules_of_commands_with_a_function_and_main():
    names = tool_names()
    on_disk = {p.stem for p in (ROOT / "commands").glob("*.py") if not p.stem.startswith("_")}
    assert set(names) == on_disk  # today every public module is a tool
    assert "_cli" not in names and "deploy_training_job" in names and len(names) >= 16
    assert [spec.name for spec in all_tools()] == list(names)


def test_console_scripts_are_exactly_the_discovered_tools():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    # The seed document's spelling of one tool's command, kept as written there.
    seed = {"setup-codebuild.sh": "commands.setup_codebuild:main"}
    assert {name: scripts[name] for name in seed} == seed
    # Its old tool names: each answers with the exact call instead (commands/_old_names.py).
    old = {name: t for name, t in scripts.items() if t.startswith("commands._old_names:")}
    assert {old_name(name) for name in old} == set(RENAMED)
    tools = {
        name: target
        for name, target in scripts.items()
        if name not in {"fsdp-eks-mcp", *seed, *old}
    }
    assert tools == {n.replace("_", "-"): f"commands.{n}:main" for n in tool_names()}


def test_a_new_module_with_a_function_of_its_name_and_main_is_a_tool(tmp_path, monkeypatch):
    (tmp_path / "new_tool.py").write_text("def new_tool():\n    pass\n\n\ndef main():\n    pass\n")
    (tmp_path / "helper.py").write_text("def main():\n    pass\n")  # no function of its name
    (tmp_path / "_private.py").write_text("def _private():\n    pass\n\n\ndef main():\n    pass\n")
    monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
    commands.tool_names.cache_clear()
    try:
        names = commands.tool_names()
    finally:
        commands.tool_names.cache_clear()
    assert "new_tool" in names and "helper" not in names and "_private" not in names


def test_the_mcp_server_serves_exactly_the_discovered_tools():
    async def listed(read_only: bool) -> set[str]:
        async with Client(build_server(read_only=read_only)) as client:
            return {t.name for t in (await client.list_tools()).tools}

    assert anyio.run(listed, False) == set(tool_names())
    read_only = {spec.name for spec in all_tools() if spec.read_only}
    assert anyio.run(listed, True) == read_only


# --- error codes --------------------------------------------------------------------


def test_bad_input_codes_exit_2_and_failures_exit_1():
    assert ErrorCode.INVALID_INPUT.exit_status == 2
    for code in ("confirmation_required", "job_not_found", "unsupported_for_target"):
        assert ToolFailure(code, "m").exit_status == 2
    for code in ("job_running", "access_denied", "throttled", "endpoint_unreachable"):
        assert ToolFailure(code, "m").exit_status == 1


def _raised_codes(path: Path) -> list[tuple[int, str]]:
    """(line, the code argument's source) of every ToolFailure(...) built in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ToolFailure":
            first = (
                node.args[0]
                if node.args
                else next((k.value for k in node.keywords if k.arg == "code"), None)
            )
            found.append((node.lineno, ast.unparse(first) if first else ""))
    return found


def test_product_code_raises_only_enumerated_codes():
    files = [p for d in ("commands", "skills", "mcp_server") for p in (ROOT / d).rglob("*.py")]
    built = [(p, line, code) for p in files for line, code in _raised_codes(p)]
    assert built, "the scan found nothing: it is broken"
    forwarded = ("code", "error['code']")  # ToolFailure's own plumbing passes a code on
    loose = [
        (str(p), line, code)
        for p, line, code in built
        if not code.startswith("ErrorCode.") and code not in forwarded
    ]
    assert loose == []


def test_cli_exit_status_follows_the_code(tmp_path, capsys):
    from commands.cancel_training_job import cancel_training_job

    code = run_cli(cancel_training_job, ["--job_name", "nobody", "--runs_dir", str(tmp_path)])
    assert code == 2  # confirmation_required is the caller's to fix
    assert "error [confirmation_required]" in capsys.readouterr().err


# --- lazy imports -------------------------------------------------------------------


def test_serving_the_tools_imports_no_cloud_sdk():
    code = (
        "import sys, mcp_server, commands; mcp_server.build_server(); "
        "print(sorted(m for m in ('boto3', 'botocore', 'kubernetes', 'docker', 'torch') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]"


def test_over_mcp_only_the_fields_a_client_sent_count_as_given():
    async def scenario():
        async with Client(build_server(specs=[spec_of(which_target)])) as client:
            fake = await client.call_tool("which_target", {"target": "fake"})
            stray = await client.call_tool("which_target", {"target": "fake", "runs_dir": "x"})
            return fake, stray

    fake, stray = anyio.run(scenario)
    assert not fake.is_error, fake.content
    assert fake.structured_content["settings"] == {"target": "fake", "queue": "default"}
    assert stray.is_error
    assert json.loads(stray.content[0].text)["error"]["details"]["problems"] == [
        {"field": "runs_dir", "problem": "does not apply to target='fake'"}
    ]


# Codes whose fix is the caller's: a different call. The set is spelled out so a new
# code has to be placed on one side on purpose.
BAD_INPUT_CODES = {
    "invalid_input", "confirmation_required", "job_not_found", "operation_not_found",
    "unsupported_for_target", "not_enough_gpus", "not_found", "aws_profile_not_found",
    "kubeconfig_invalid", "not_a_directory", "is_a_directory", "name_too_long",
    "path_not_allowed", "snapshot_invalid", "slurm_rejected", "gpu_memory_exceeded",
    "host_memory_exceeded",
    "model_invalid", "port_in_use", "not_ours",
}  # fmt: skip


def test_exactly_the_bad_input_codes_exit_2():
    for code in ErrorCode:
        assert code.exit_status == (2 if code.value in BAD_INPUT_CODES else 1), code
        assert ToolFailure(code.value, "m").exit_status == code.exit_status
    assert ToolFailure("not_a_known_code", "m").exit_status == 1


@pytest.mark.parametrize(
    ("tool", "argv", "code"),
    [
        ("get_training_job_logs", ["--job_name", "j", "--tail_lines", "0"], "invalid_input"),
        ("cancel_training_job", ["--job_name", "j", "--confirm", "true"], "invalid_input"),
        ("cancel_training_job", ["--job_name", "j"], "confirmation_required"),
        ("cancel_training_job", ["--job_name", "j", "--confirm"], "job_not_found"),
        ("get_training_job", ["--job_name", "j"], "job_not_found"),
        ("get_operation", ["--operation_id", "x-20250101-120000-abcdef"], "operation_not_found"),
        ("deploy_training_job", ["--job_name", "j", "--num_nodes", "2", "--dry_run"],
         "unsupported_for_target"),
        ("deploy_training_job", ["--job_name", "j", "--gpu_per_node", "64", "--dry_run"],
         "not_enough_gpus"),
        ("deploy_training_job", ["--job_name", "j", "--runs_dir", "a-file", "--dry_run"],
         "not_a_directory"),
    ],
)  # fmt: skip
def test_the_cli_exits_2_for_each_bad_input(tool, argv, code, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # runs/ and a-file are relative to here
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # no GPU: one process per CPU...
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # ...and 64 are too many
    (tmp_path / "a-file").write_text("")
    module = __import__(f"commands.{tool}", fromlist=[tool])
    try:
        status = run_cli(getattr(module, tool), [*argv, "--json"])
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code
    assert (status, json.loads(capsys.readouterr().out)["error"]["code"]) == (2, code)
