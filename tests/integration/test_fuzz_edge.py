"""Issue 20: a hypothesis fuzz of every tool's file-path and string parameters over MCP
(an in-process server confined to a workspace, as `python -m mcp_server` is).

Each case puts attacker-chosen strings into a tool's string parameters: links in the
workspace that lead out, devices, a 100k-deep JSON, a file outside holding a canary,
traversal. Properties: the answer is a result or a typed error (no traceback, no
"Error executing tool"), nothing outside the workspace is created, changed or removed
(the tree outside, the server's cwd included, is compared before and after), and the
canary is in no result. FUZZ_EDGE_EXAMPLES=N cases per tool (default 20); one summary
line per tool. The calls are made safe as in test_fuzz_tools (dry runs, no cluster)."""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from commands import tool_names, tool_spec
from mcp_server import build_server
from mcp_server.workspace import Workspace
from tests.integration.test_fuzz_tools import _fitting, _made_safe

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("FUZZ_EDGE_EXAMPLES", "20"))
CANARY = "CANARY-" + "7f3a9c" * 4
STATS: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)


def _planted(home: Path) -> list[str]:
    """The tree: home/outside (a canary file, a target for links), home/cwd (the server's
    directory, outside the workspace), home/ws (the workspace, with links out)."""
    outside, cwd, ws = home / "outside", home / "cwd", home / "ws"
    for d in (outside, cwd, ws / "job" / "logs", home / "empty-runs"):
        d.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text(f"HF_TOKEN={CANARY}\n")
    (outside / "Dockerfile").write_text(f"FROM scratch\nLABEL x={CANARY}\n")
    (ws / "Dockerfile").write_text(
        "FROM nvidia/cuda:12.4.1-devel-ubuntu22.04\n"
        "RUN pip install -r ../outside/secret.txt torch==2\n"
    )
    (ws / "Dockerfile.fixed").symlink_to(outside / "Dockerfile")
    (ws / "link-out").symlink_to(outside)
    (ws / "secret-link").symlink_to(outside / "secret.txt")
    (ws / "job" / "logs" / "attempt-1.log").symlink_to(outside / "secret.txt")
    (ws / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (ws / "kubeconfig").write_bytes(b"users: [1]\n")
    _plant_servers(home / "state", outside)
    return [
        *SERVER_HAZARDS,
        str(ws / "Dockerfile"), str(ws / "Dockerfile.fixed"), str(ws / "link-out"),
        str(ws / "link-out" / "x.yaml"), str(ws / "secret-link"), str(ws / "deep.json"),
        str(ws / "kubeconfig"), str(ws / "job"), str(ws), str(outside / "secret.txt"),
        str(outside), "/dev/zero", "/proc/self/environ", "../outside/secret.txt",
        "../ws/secret-link", "link-out/new.json", "job", "/", "", "..", "~",
        "s3://bucket/key", "org/model",
    ]  # fmt: skip


# Issue 30: the local model servers' state as a careless or hostile hand leaves it. Each
# name is also a value the fuzz puts into `name` (model-server tools) and a case below.
SERVER_HAZARDS = ("fifo-record", "zero-record", "deep-record", "linked-folder", "linked-log",
                  "copied-record")  # fmt: skip


def _plant_servers(state: Path, outside: Path) -> None:
    """state/model_servers/<hazard> for each SERVER_HAZARDS, and a stray file; planted
    again when a case removed one (delete_model_server may)."""
    root = state / "model_servers"
    root.mkdir(parents=True, exist_ok=True)
    (root / "stray.txt").write_text("not a server\n")
    for name in SERVER_HAZARDS:
        folder = root / name
        if folder.exists() or folder.is_symlink():
            continue
        if name == "linked-folder":
            folder.symlink_to(outside)
            continue
        folder.mkdir()
        record = folder / "server.json"
        if name == "fifo-record":
            os.mkfifo(record)
        elif name == "zero-record":
            record.symlink_to("/dev/zero")
        elif name == "deep-record":
            record.write_text("[" * 100_000 + "]" * 100_000)
        else:  # a record of server "a" (linked-log: its log a link out; copied: in b's folder)
            record.write_text(json.dumps({
                "name": "a" if name == "copied-record" else name, "model": "/m", "port": 9,
                "argv": [], "pid": os.getpid(), "pid_started": psutil.Process().create_time(),
                "started_at": 0,
            }))  # fmt: skip
            if name == "linked-log":
                (folder / "server.log").symlink_to(outside / "secret.txt")


def _tree(home: Path) -> dict[str, tuple[int, int]]:
    """Every path outside the workspace (and the operation store): its size and mtime."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(home):
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) not in (home / "ws", home / "state")]
        for name in filenames + dirnames:
            info = os.lstat(Path(dirpath, name))
            seen[str(Path(dirpath, name))] = (info.st_size, info.st_mtime_ns)
    return seen


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    home = tmp_path_factory.mktemp("edge")
    values = _planted(home)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(home / "cwd")
        patch.setenv("FSDP_EKS_STATE_DIR", str(home / "state"))
        patch.setenv("KUBECONFIG", str(home / "no-kubeconfig"))
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        patch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        patch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_PROFILE"):
            patch.delenv(name, raising=False)
        yield home, values


@pytest.fixture(scope="module")
def client(planted: tuple[Path, list[str]]) -> Iterator[tuple[Any, Any]]:
    home, _ = planted
    workspace = Workspace(root=home / "ws")
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(build_server(workspace=workspace))) as mcp,
    ):
        yield portal, mcp


@pytest.fixture(scope="module", autouse=True)
def summary(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    capture = request.config.pluginmanager.getplugin("capturemanager")
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for key, counts in sorted(STATS.items()):
            reporter.write_line(f"fuzz-edge {key}: {counts['cases']} cases, "
                                f"{counts['tracebacks']} tracebacks, {counts['errors']} "
                                "typed errors")  # fmt: skip


def _string_fields(name: str) -> list[str]:
    props = tool_spec(name).params.model_json_schema()["properties"]

    def stringy(schema: dict[str, Any]) -> bool:
        kinds = [schema.get("type")] + [b.get("type") for b in schema.get("anyOf", [])]
        return "string" in kinds and "enum" not in schema

    return [field for field, schema in props.items() if stringy(schema)]


def _fitting_call(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """A call that fits the schema (required fields set), so hostile strings reach past
    validation into the tool."""
    schema = tool_spec(name).params.model_json_schema()
    required = set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {n: _fitting(sub) for n, sub in schema["properties"].items() if n in required}
    )


@pytest.mark.parametrize("name", tool_names())
def test_string_and_path_parameters_over_mcp_stay_in_the_workspace(name, client, planted):
    portal, mcp = client
    home, values = planted
    fields = _string_fields(name)
    stats = STATS[name]
    if not fields:
        pytest.skip(f"{name} has no string parameter")
    value = st.sampled_from(values) | st.text(max_size=12)

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(_fitting_call(name), st.dictionaries(st.sampled_from(fields), value, min_size=1,
                                                max_size=3))  # fmt: skip
    def check(base: dict[str, Any], hostile: dict[str, Any]) -> None:
        args = {**base, **hostile}
        stats["cases"] += 1
        before = _tree(home)
        result = portal.call(mcp.call_tool, name, _made_safe(name, dict(args)))
        text = " ".join(getattr(c, "text", "") for c in result.content)
        text += str(result.structured_content or "")
        stats["tracebacks"] += "Traceback" in text or "Error executing tool" in text
        stats["errors"] += bool(result.is_error)
        assert "Traceback" not in text and "Error executing tool" not in text, text[:2000]
        assert CANARY not in text, (args, text[:2000])
        assert _tree(home) == before, args

    check()


MODEL_SERVER_CALLS = {
    "get_model_server": {},
    "delete_model_server": {"confirm": True},
    "deploy_model_server": {"model": "<ws>/model", "dry_run": True},
}


@pytest.mark.parametrize("hazard", SERVER_HAZARDS)
@pytest.mark.parametrize("tool", MODEL_SERVER_CALLS)
def test_model_server_tools_over_mcp_answer_hostile_state_in_time(tool, hazard, client, planted):
    """Each hazard in the local servers' state, through each model-server tool and
    list_model_servers: a result or a typed error in time (no traceback, no hang on a
    FIFO, no MemoryError on /dev/zero), nothing outside the state changed, nothing
    signalled (the records name this very test process)."""
    portal, mcp = client
    home, _ = planted
    _plant_servers(home / "state", home / "outside")
    model = home / "ws" / "model"  # passes the model check, so the state is read
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    args = {k: str(model) if v == "<ws>/model" else v for k, v in MODEL_SERVER_CALLS[tool].items()}
    before = _tree(home)
    results = [
        portal.call(mcp.call_tool, tool, {"name": hazard, **args}),
        portal.call(mcp.call_tool, "list_model_servers", {"target": "local"}),
    ]
    for result in results:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        assert "Traceback" not in text and "Error executing tool" not in text, text[:2000]
        assert CANARY not in text, text[:2000]
    listed = results[1].structured_content["servers"]
    assert "stray.txt" not in [s["name"] for s in listed]
    assert _tree(home) == before


# --- the installer under hostile existing files (issue 30 item 12) ---------------------------


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    config=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                     st.recursive(st.none() | st.integers() | st.text(max_size=8),
                              lambda inner: st.lists(inner, max_size=3)
                              | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                              max_leaves=12).map(lambda v: json.dumps(v).encode())),
    client=st.sampled_from(["claude", "opencode"]),
)  # fmt: skip
def test_the_installer_over_any_existing_config_applies_whole_or_not_at_all(
    tmp_path_factory, monkeypatch, config, client
):
    """Whatever bytes the client's config holds, install either succeeds (the entry is in a
    JSON object there, the skills beside) or refuses with a typed message and exit status,
    writing nothing: never a traceback, never half an install."""
    from mcp_server.install import main as install

    root = tmp_path_factory.mktemp("installer")
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    monkeypatch.setenv("HOME", str(home))
    name = ".mcp.json" if client == "claude" else "opencode.json"
    (project / name).write_bytes(config)
    status = install(["install", "--client", client, "--scope", "project", "--dir", str(project)])
    written = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    if status == 0:
        data = json.loads((project / name).read_text())
        assert isinstance(data, dict) and "fsdp-eks" in json.dumps(data)
        assert any(w.startswith(".claude/skills/") for w in written)
    else:
        assert status in (1, 2)
        assert written == [name] and (project / name).read_bytes() == config
