"""Property-based fuzzing of every tool's input, through the CLI and through MCP.

Arguments are drawn from each tool's own input schema (values that fit it; over MCP
flat, or nested per target as tools/list shows them) mixed with hostile ones (wrong
types, huge and negative numbers, empty and 5000-character strings, control characters,
NUL, path traversal, undecodable argv bytes, unknown keys, "true"/"1" for booleans).
Whatever comes in, the answer is a result or a typed error with a hint: never a
traceback, never an exit status outside 0-2.

Nothing real is started: deploy_training_job is always a dry run, everything runs in
a temporary directory with its own operation store, and a cancel that might be
confirmed looks in an empty runs_dir. FUZZ_EXAMPLES=N tries N cases per tool and
interface (default 100); a summary line per tool reports the cases and tracebacks.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from commands import tool_names, tool_spec
from commands._cli import run_cli
from mcp_server import build_server
from mcp_server.workspace import Workspace
from skills.shared.tooling import ToolSpec
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # nothing written into the checkout; failures print their example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

HOSTILE: list[Any] = [
    None, "", " ", "\x00", "a\x00b", "\n", "line\nbreak", "\x1b[31mred", "\x7f",
    "x" * 5000, "../../../../etc/passwd", "/etc/passwd", "/", "~", ".", "..",
    "-", "--help", "--json", "-1", "true", "True", "1", "false", "0", "yes", "null",
    "s3://", "s3://bucket/../x", "hf://x", "C:\\x", "é漢字🙂", "\udcff",  # argv's bad bytes
    1e29, -1, 0, -(10**30), 10**30, 1.5, -0.0, float("inf"), float("nan"),
    True, False, [], {}, ["a", 1], {"a": "b"}, {"nested": {"deep": [None]}},
]  # fmt: skip
# Places a path input may name: outside any workspace, through special files, too long,
# looking like rich markup (the CLI prints paths in its tables).
PATHS = [
    "/", "/etc", "/tmp", "/dev/null", "/proc/self/fd/0", "..", "../outside",
    "runs/../../x", "./runs", "~/x", "a" * 300, "a/" * 2100, "s3://bucket/key",
    "s3://b/../x", "file:///etc", "org/model-name", "empty-runs", "[/x]", "[bold]y",
]  # fmt: skip
# The Kubernetes target's settings: a call with any of them goes to a cluster.
CLUSTER_FIELDS = set(KubernetesDeploySettings.model_fields) - {"target"}
# manage_eks_cluster actions that ask AWS before anything else (which no_aws makes
# unreachable), so even a confirmed call writes nothing: storage, cleanup.
AWS_ONLY = ("storage", "cleanup")
# Confirmed or not, a cancel looks here, where nothing runs.
EMPTY_RUNS = "empty-runs"

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

STATS: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)


# --- arguments from the schema ---------------------------------------------------------


def _fitting(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the schema accepts, roughly (patterns, bounds, enums)."""
    if "anyOf" in schema:
        return st.one_of([_fitting(branch) for branch in schema["anyOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        pattern = schema.get("pattern", ".*")
        paths = st.sampled_from([p for p in PATHS if re.search(pattern, p)] or [""])
        shortest, longest = schema.get("minLength", 0), schema.get("maxLength", 200)
        text = st.from_regex(pattern, fullmatch=True) | paths
        return text.filter(lambda v: shortest <= len(v) <= longest)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        return st.floats(
            schema.get("minimum", schema.get("exclusiveMinimum")),
            schema.get("maximum", schema.get("exclusiveMaximum")),
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
        )
    if kind == "boolean":
        return st.booleans()
    return st.none()


HOSTILE_VALUES = st.sampled_from(HOSTILE) | st.text(max_size=50) | st.integers()
UNKNOWN = "<unknown>"
HOSTILE_OBJECTS = HOSTILE_VALUES | st.dictionaries(st.text(max_size=12), HOSTILE_VALUES, max_size=2)


@functools.cache
def _fitting_call(tool: str) -> tuple[st.SearchStrategy[dict[str, Any]], list[str]]:
    """The tool's fitting calls and its field names, built once per tool: building the
    strategies inside every draw (regexes compiled, emptiness worked out) took nine
    tenths of the fuzz's time; the values drawn are the same."""
    schema = tool_spec(tool).params.model_json_schema()
    fields = schema["properties"]
    required = set(schema.get("required", ()))
    fitting = st.fixed_dictionaries(
        {n: _fitting(sub) for n, sub in fields.items() if n in required},
        optional={n: _fitting(sub) for n, sub in fields.items() if n not in required},
    )
    return fitting, [*fields, UNKNOWN]


@st.composite
def arguments(draw: st.DrawFn, spec: ToolSpec) -> dict[str, Any]:
    """A call that fits the schema, then up to two hostile values put into it (into
    a field or under a name the tool does not have). One bad value per call reaches
    further into a tool than many: the rest of the call is fine."""
    fitting, names = _fitting_call(spec.name)
    args = draw(fitting)
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(names))
        if name == UNKNOWN:
            name = draw(st.text(min_size=1, max_size=12))
        args[name] = draw(HOSTILE_VALUES)
    return _made_safe(spec.name, args)


def _made_safe(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """No case starts training or stops anything real."""
    if tool in ("deploy_training_job", "deploy_model_server"):
        args["dry_run"] = True
    if tool == "cancel_training_job" and args.get("confirm") not in (None, False):
        args["runs_dir"] = EMPTY_RUNS
    on_cluster = args.get("target") == "kubernetes" or bool(CLUSTER_FIELDS & set(args))
    if tool in ("cancel_training_job", "delete_training_job") and on_cluster:
        # A confirmed delete or cancel on a cluster reaches no cluster: no kubeconfig.
        args.pop("cluster_name", None), args.pop("context", None)
        args["kubeconfig"] = "/nonexistent/kubeconfig"
    if tool == "deploy_training_job" and on_cluster and args.get("image_uri") is None:
        args["image_uri"] = "fuzz.invalid/trainer:1"  # no ECR lookup for the newest image
    if tool == "build_image":
        args["analyze_only"] = True  # no daemon is asked to build anything
    if tool == "setup_codebuild":
        args["dry_run"] = True  # plans only; and no AWS is reachable (no_aws below)
    if tool == "push_to_ecr":  # nothing to push, and nowhere it could land
        args["image"], args["registry_host"] = "fuzz-absent-image:none", "localhost:9"
    if tool == "diagnose_training_job":  # no cluster is reached, whatever KUBECONFIG says
        args["kubeconfig"] = "absent-kubeconfig"
    if tool == "inspect_eks_cluster" and args.get("kubeconfig") is None:
        args["kubeconfig"] = "absent-kubeconfig"  # reads from nowhere real
    if tool == "manage_eks_cluster":  # from nowhere real (no_aws); no eksctl, no writes
        if args.get("action") not in ("describe", "validate", "create_config", *AWS_ONLY):
            args["action"] = "validate"
        args["auto_fix"] = False
        if args.get("action") not in AWS_ONLY:  # storage/cleanup reach no AWS: confirm as drawn
            args["confirm"] = False
        if args.get("kubeconfig") is None:  # never the KUBECONFIG of whoever runs this
            args["kubeconfig"] = "absent-kubeconfig"
        if "output" in args:  # create_config writes it: only here, in the sandbox
            args["output"] = "fuzz-eksctl.yaml"
    return args


def nested(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """The call as tools/list shows it: each target's settings in one object named after
    the target (the chosen one's, else the first that has the setting)."""
    out = dict(args)
    for group in spec.groups:
        if group.discriminator is None:
            continue
        chosen = out.get(group.discriminator)
        for name in sorted((group.fields - {group.discriminator}) & set(out)):
            owners = [k for k, m in group.members.items() if name in m.model_fields]
            owner = chosen if chosen in owners else owners[0]
            out.setdefault(owner, {})[name] = out.pop(name)
    return out


@st.composite
def mcp_arguments(draw: st.DrawFn, spec: ToolSpec) -> dict[str, Any]:
    """A call flat (still accepted), nested as listed, or nested with one target's object
    replaced by a hostile value."""
    args = draw(arguments(spec))
    keys = [k for g in spec.groups if g.discriminator for k in g.members]
    shape = draw(st.sampled_from(["flat", "nested", "hostile object"] if keys else ["flat"]))
    if shape == "flat":
        return args
    args = nested(spec, args)
    if shape == "hostile object":
        args[draw(st.sampled_from(keys))] = draw(HOSTILE_OBJECTS)
    return args


# --- the two ways in ---------------------------------------------------------------------


def argv_of(args: dict[str, Any], as_json: bool = True) -> list[str]:
    """The command line a person would type for these arguments."""
    argv: list[str] = []
    for name, value in args.items():
        if name == "dry_run":
            continue  # last, below: nothing later on the line may undo it
        flag = f"--{name}"
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append(f"--no-{name}")
        elif value is None:
            continue
        elif isinstance(value, list):
            argv += [part for item in value for part in (flag, str(item))]
        elif isinstance(value, dict):
            argv += [part for k, v in value.items() for part in (flag, f"{k}={v}")]
        else:
            argv += [flag, str(value)]
    if args.get("dry_run"):
        argv.append("--dry_run")
    return [*argv, "--json"] if as_json else argv


def run_cli_captured(spec: ToolSpec, argv: list[str]) -> tuple[int, str, str]:
    """The tool's CLI in this process. Output goes through strict UTF-8, as to a
    terminal: text a real stdout cannot encode is a crash here too."""
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            tool = getattr(importlib.import_module(f"commands.{spec.name}"), spec.name)
            status: Any = run_cli(tool, argv)
        except SystemExit as exc:  # argparse's own exits (--help, usage errors)
            status = exc.code
    return status, *(_text(stream) for stream in (out, err))


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]


def assert_typed_error(printed: dict[str, Any]) -> str:
    """The error object every failure prints, {"error": {code, message, hint, ...}};
    returns its code."""
    assert list(printed) == ["error"], printed
    error = printed["error"]
    assert {"code", "message", "hint"} <= error.keys(), error
    assert error["code"] and error["message"] and error["hint"], error
    # One line of printable text, whatever the input held (a terminal obeys escapes).
    assert not CONTROL.search(error["message"] + error["hint"]), error
    return error["code"]


def _is_error(printed: Any) -> bool:
    return isinstance(printed, dict) and list(printed) == ["error"]


# --- the sandbox ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory of its own to run in, with its own operation store, and no secrets
    from the environment (a fuzzed value must not happen to be one)."""
    home = tmp_path_factory.mktemp("fuzz")
    (home / EMPTY_RUNS).mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(home)
        patch.setenv("FSDP_EKS_STATE_DIR", str(home / "state"))
        patch.setenv("KUBECONFIG", str(home / "no-kubeconfig"))  # no real cluster is reached
        for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
            patch.delenv(name, raising=False)
        yield home


@pytest.fixture(autouse=True)
def no_aws(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CodeBuild tools reach no AWS: no credentials anywhere (every call fails fast
    as no_credentials), and an endpoint that refuses connections in case one appears."""
    if "codebuild" in request.node.name or "manage_eks" in request.node.name:
        for name in (
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
        ):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")


@pytest.fixture(scope="module", autouse=True)
def summary(request: pytest.FixtureRequest) -> Iterator[None]:
    """One line per tool and interface: the numbers a report needs."""
    yield
    lines = [
        f"fuzz {key}: {counts['cases']} cases, {counts['tracebacks']} tracebacks; "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k[:4] in ("exit", "code"))
        for key, counts in sorted(STATS.items())
    ]
    # Shown past pytest's capture, as `-s` would (the capsys.disabled() mechanism).
    capture = request.config.pluginmanager.getplugin("capturemanager")
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line)


# --- the properties ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", tool_names())
def test_the_cli_answers_every_input_with_a_result_or_a_typed_error(name, sandbox):
    spec = tool_spec(name)
    stats = STATS[f"cli {name}"]

    @FUZZ_SETTINGS
    @given(arguments(spec), st.booleans())
    def check(args: dict[str, Any], as_json: bool) -> None:
        stats["cases"] += 1
        try:
            status, out, err = run_cli_captured(spec, argv_of(args, as_json))
        except Exception:
            stats["tracebacks"] += 1
            raise
        stats["tracebacks"] += "Traceback" in out + err
        stats[f"exit {status}"] += 1
        assert "Traceback" not in out + err
        assert status in (0, 1, 2), (status, out, err)
        if out.startswith("usage:"):  # a hostile value was --help
            return
        if not as_json:  # the person's view: a failure is its code, message and hint
            failed = err.startswith("error [")
            assert not failed or ("\nhint: " in err and status in (1, 2)), err
            return
        printed = json.loads(out)
        if _is_error(printed):
            stats[f"code {assert_typed_error(printed)}"] += 1
            assert status in (1, 2)
        else:  # a result; exit 1 when it reports a failed job
            stats["code ok"] += 1
            assert status in (0, 1)

    check()


@pytest.fixture(scope="module")
def mcp_client(sandbox: Path) -> Iterator[tuple[Any, Any]]:
    """One in-process server for the module, confined to a workspace as `python -m
    mcp_server` is, with a client session held open across the cases."""
    workspace = Workspace(root=sandbox)
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(build_server(workspace=workspace))) as client,
    ):
        yield portal, client


@pytest.mark.parametrize("name", tool_names())
def test_mcp_answers_every_input_with_a_result_or_a_typed_error(name, mcp_client):
    portal, client = mcp_client
    spec = tool_spec(name)
    stats = STATS[f"mcp {name}"]

    @FUZZ_SETTINGS
    @given(mcp_arguments(spec))
    def check(args: dict[str, Any]) -> None:
        stats["cases"] += 1
        try:
            result = portal.call(client.call_tool, name, args)
        except Exception:
            stats["tracebacks"] += 1
            raise
        text = "".join(getattr(part, "text", "") for part in result.content)
        stats["tracebacks"] += "Traceback" in text
        assert "Traceback" not in text
        if result.is_error:
            stats[f"code {assert_typed_error(json.loads(text))}"] += 1
        else:
            stats["code ok"] += 1
            assert result.structured_content is not None, text

    check()
