"""build_image against real services: podman's Docker API builds, the distribution
registry (htpasswd auth) stands in for Docker Hub through `base_mirror`, holding
stand-in base images under their real names (FROM scratch + a file, pushed)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from commands._cli import run_cli
from commands.build_image import build_image
from mcp_server import build_server
from skills.cloud.registry_images import check_image
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from tests.services.header_log import header_logging_registry

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GOOD_BASE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
MISSING_BASE = "pytorch/pytorch:2.5.1-cuda12.8-cudnn9-runtime"  # never published


@pytest.fixture(scope="module")
def hub(docker_api, registry, tmp_path_factory) -> Iterator[str]:
    """The registry holding GOOD_BASE; the docker config (as `docker login` writes it)
    holds its credentials. Yields the mirror setting, `localhost:PORT`."""
    config_dir = tmp_path_factory.mktemp("docker-config")
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    (config_dir / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_CONFIG", str(config_dir))
        client = docker_api.client()
        base = tmp_path_factory.mktemp("base")
        (base / "os-release").write_text("stand-in for the pytorch/pytorch image\n")
        (base / "Dockerfile").write_text("FROM scratch\nCOPY os-release /etc/os-release\n")
        name = f"{registry.host}/{GOOD_BASE}"
        list(client.api.build(path=str(base), tag=name, decode=True, rm=True))
        repo, tag = name.rsplit(":", 1)
        pushed = list(client.api.push(repo, tag=tag, stream=True, decode=True))
        assert not [e for e in pushed if "error" in e or "errorDetail" in e], pushed
        client.api.remove_image(name)  # builds must pull it through the mirror
        yield registry.host


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _project(tmp_path: Path, base: str = GOOD_BASE, extra: str = "") -> Path:
    (tmp_path / "train.py").write_text("print('training')\n")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        f"FROM {base}\nWORKDIR /app\nCOPY train.py /app/train.py\n{extra}"
        'LABEL org.example.role="trainer"\nCMD ["python", "/app/train.py"]\n'
    )
    return dockerfile


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.mark.parametrize("strategy", ["explicit", "latest", "semantic", "git-sha", "auto"])
def test_a_clean_build_returns_id_size_and_the_tag_of_each_strategy(hub, docker_api, tmp_path,
                                                                    strategy):  # fmt: skip
    dockerfile = _project(tmp_path)
    repository = f"trainer-{strategy}"
    if strategy in ("git-sha", "auto"):
        _git(tmp_path, "init", "-q")
        _git(tmp_path, "add", ".")
        _git(tmp_path, "commit", "-q", "-m", "c")
    args = {"tag": "v7"} if strategy == "explicit" else {"tag_strategy": strategy}
    progress = CollectingProgress()
    result = build_image(dockerfile=str(dockerfile), repository=repository, base_mirror=hub,
                         progress=progress, **args)  # fmt: skip
    expected = {"explicit": "v7", "latest": "latest", "semantic": "v0.1.0"}.get(strategy)
    expected = expected or _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert result.status == "built", result.attempts
    assert result.tags == [f"{repository}:{expected}"]
    assert result.image_id.startswith("sha256:") and result.size_bytes > 0
    assert [a.ok for a in result.attempts] == [True]
    assert result.attempts[0].base_images == [f"{hub}/{GOOD_BASE}"]
    assert (result.resolved.torch, result.resolved.cuda) == ("2.5.1", "12.4")
    # podman counts the labels build_image sets (fsdp-eks.torch/cuda/efa) as steps of its own.
    assert result.labels == {"fsdp-eks.torch": "2.5.1", "fsdp-eks.cuda": "12.4",
                             "fsdp-eks.efa": "false"}  # fmt: skip
    total = 5 + len(result.labels)
    steps = [e for e in progress.events if e.total == total]
    assert [e.completed for e in steps] == list(range(1, total + 1)), progress.events
    image = docker_api.client().images.get(f"{repository}:{expected}")
    assert image.labels["org.example.role"] == "trainer" and image.id == result.image_id
    assert image.labels["fsdp-eks.cuda"] == "12.4" and image.labels["fsdp-eks.torch"] == "2.5.1"
    assert image.labels["fsdp-eks.efa"] == "false"  # read back from the built image
    assert dockerfile.read_text().startswith(f"FROM {GOOD_BASE}\n")  # the file is not edited
    if strategy == "semantic":  # the next build is the next patch
        again = build_image(dockerfile=str(dockerfile), repository=repository, base_mirror=hub,
                            tag_strategy="semantic")  # fmt: skip
        assert again.tags == [f"{repository}:v0.1.1"]


def test_a_git_sha_tag_names_the_build_arguments_not_only_the_tree(hub, tmp_path):
    """Issue 29: one dirty tree built with two build arguments is two images, two tags."""

    # The argument picks a file to COPY, so the two images differ (podman's layer cache
    # does not key a LABEL on the arguments it reads).
    for flavor in ("a", "b"):
        (tmp_path / f"{flavor}.txt").write_text(f"flavor {flavor}\n")
    dockerfile = _project(tmp_path, extra="ARG FLAVOR=a\nCOPY ${FLAVOR}.txt /app/flavor\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "c")
    (tmp_path / "train.py").write_text("print('training, uncommitted')\n")
    sha = _git(tmp_path, "rev-parse", "--short", "HEAD")
    built = [build_image(dockerfile=str(dockerfile), repository="trainer-args", base_mirror=hub,
                         tag_strategy="git-sha", build_args={"FLAVOR": f})  # fmt: skip
             for f in ("a", "b")]  # fmt: skip
    assert [b.status for b in built] == ["built", "built"]
    (tag_a,), (tag_b,) = built[0].tags, built[1].tags
    assert tag_a != tag_b and built[0].image_id != built[1].image_id
    assert all(t.startswith(f"trainer-args:{sha}-dirty-") for t in (tag_a, tag_b))


def test_a_rebuild_may_reuse_a_previous_images_layers(hub, tmp_path):
    # CI pulls the repository's newest image and passes it here (buildspec: cache-flag).
    dockerfile = _project(tmp_path)
    first = build_image(dockerfile=str(dockerfile), tag="cache-1", base_mirror=hub)
    (tmp_path / "train.py").write_text("print('training, changed')\n")
    again = build_image(dockerfile=str(dockerfile), tag="cache-2", base_mirror=hub,
                        cache_from=["fsdp-eks-trainer:cache-1"])  # fmt: skip
    assert (first.status, again.status) == ("built", "built")
    assert again.image_id != first.image_id  # the changed file is in the new image


def test_a_missing_base_tag_is_fixed_and_the_second_attempt_builds(hub, tmp_path):
    dockerfile = _project(tmp_path, base=MISSING_BASE)
    original = dockerfile.read_text()
    result = build_image(dockerfile=str(dockerfile), tag="fixed", base_mirror=hub)
    first, second = result.attempts
    assert (result.status, first.ok, second.ok) == ("built", False, True)
    assert first.error_class == "base_image_not_found"
    # The registry's own answer to the manifest request.
    assert any("404" in line and "MANIFEST_UNKNOWN" in line for line in first.evidence)
    assert f"{hub}/v2/pytorch/pytorch/manifests/2.5.1-cuda12.8-cudnn9-runtime" in first.message
    assert first.fix_applied and f"-FROM {MISSING_BASE}" in first.diff
    assert f"+FROM {GOOD_BASE}" in first.diff
    fixed = Path(first.fixed_dockerfile)
    assert fixed == tmp_path / "Dockerfile.fixed" and f"FROM {GOOD_BASE}\n" in fixed.read_text()
    assert dockerfile.read_text() == original  # write=false: the user's file stays
    assert second.base_images == [f"{hub}/{GOOD_BASE}"]
    assert result.tags == ["fsdp-eks-trainer:fixed"] and result.image_id


def test_write_true_applies_the_fix_in_place(hub, tmp_path):
    dockerfile = _project(tmp_path, base=MISSING_BASE)
    result = build_image(dockerfile=str(dockerfile), tag="inplace", base_mirror=hub, write=True)
    assert result.status == "built" and len(result.attempts) == 2
    assert dockerfile.read_text().startswith(f"FROM {GOOD_BASE}\n")
    assert not (tmp_path / "Dockerfile.fixed").exists()


def test_a_failure_with_no_known_fix_stops_after_one_attempt_with_a_hint(hub, tmp_path):
    dockerfile = _project(tmp_path, extra="COPY missing.txt /app/missing.txt\n")
    result = build_image(dockerfile=str(dockerfile), tag="nofix", base_mirror=hub, max_attempts=5)
    (attempt,) = result.attempts
    assert (result.status, attempt.ok, attempt.error_class) == (
        "failed", False, "copy_source_missing")  # fmt: skip
    assert result.hint and "context" in result.hint
    assert any("missing.txt" in line for line in attempt.evidence)
    assert any("missing.txt" in line for line in attempt.log_tail)
    assert not (tmp_path / "Dockerfile.fixed").exists()


def test_auto_fix_off_stops_after_the_first_failure(hub, tmp_path):
    dockerfile = _project(tmp_path, base=MISSING_BASE)
    result = build_image(dockerfile=str(dockerfile), tag="off", base_mirror=hub, auto_fix=False)
    assert result.status == "failed" and len(result.attempts) == 1
    assert "auto_fix" in result.hint


def test_analyze_only_builds_nothing_and_needs_no_daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    dockerfile = _project(tmp_path, base=MISSING_BASE)
    result = build_image(dockerfile=str(dockerfile), analyze_only=True)
    assert result.status == "analyzed" and result.attempts == []
    assert "no_such_image" in [f["code"] for f in result.findings]
    assert result.resolved.torch == "2.5.1"


# --- credentials: only to the hosts they are meant for (issue 20 items 5 and 18) ------

REGISTRY_PASSWORD = "registry-password-for-the-mirror-only"


@pytest.fixture
def registry_variables(monkeypatch):
    monkeypatch.setenv("REGISTRY_USERNAME", "me")
    monkeypatch.setenv("REGISTRY_PASSWORD", REGISTRY_PASSWORD)
    monkeypatch.setenv("REGISTRY_HOST", "mirror.example.com")
    return base64.b64encode(f"me:{REGISTRY_PASSWORD}".encode()).decode()


@pytest.mark.parametrize("named_as", ["from_host", "base_mirror"])
def test_registry_variables_go_to_no_registry_a_dockerfile_or_mirror_names(
    hub, tmp_path, registry_variables, named_as
):
    """Issue 20 item 5: REGISTRY_USERNAME/PASSWORD went to whatever registry a FROM line or
    base_mirror named. A host REGISTRY_HOST does not name is asked anonymously."""
    with header_logging_registry() as fake:
        if named_as == "from_host":
            dockerfile, mirror = _project(tmp_path, base=f"{fake.host}/team/base:1"), None
        else:
            dockerfile, mirror = _project(tmp_path), fake.host
        result = build_image(dockerfile=str(dockerfile), tag="anon", base_mirror=mirror,
                             auto_fix=False)  # fmt: skip
        assert fake.requests, "the fake registry was not asked at all"
        assert fake.authorizations() == []
    said = [line for line in result.attempts[0].base_checks
            if fake.host in line and "credentials: anonymous" in line]  # fmt: skip
    assert said, result.attempts[0]


@pytest.mark.parametrize("header", ["WWW-Authenticate", "Www-Authenticate", "www-authenticate"])
def test_a_basic_challenge_is_answered_whatever_the_case_of_its_header(
    registry_variables, monkeypatch, header
):
    """Issue 20 item 18: a registry answering `WWW-Authenticate` never got credentials."""
    with header_logging_registry(challenge_header=header) as fake:
        monkeypatch.setenv("REGISTRY_HOST", fake.host)
        check = check_image(f"{fake.host}/team/base:1")
    assert fake.authorizations() == [f"Basic {registry_variables}"]
    assert check.credentials == "environment" and "credentials: environment" in check.message


# --- bad input: typed errors, exit 2, no traceback ------------------------------------

BAD_CLI = [
    (["--dockerfile", "absent/Dockerfile"], "not_found"),
    (["--tag", "-bad tag"], "invalid_input"),
    (["--repository", "Upper/Case"], "invalid_input"),
    (["--max_attempts", "11"], "invalid_input"),
    (["--instance_type", "p99.large"], "invalid_input"),
    (["--context", "Dockerfile"], "not_a_directory"),
    (["--tag_strategy", "git-sha"], "invalid_input"),  # not a git repository
    (["--dockerfile", "train.py"], "invalid_input"),  # no FROM
    (["--dockerfile", "/dev/null"], "invalid_input"),  # not a regular file
]


@pytest.mark.parametrize(("argv", "code"), BAD_CLI, ids=[c[1] + str(i) for i, c in
                                                          enumerate(BAD_CLI)])  # fmt: skip
def test_bad_input_over_the_cli_is_a_typed_error_exit_2(argv, code, tmp_path, monkeypatch,
                                                         capsys):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    _project(tmp_path)
    try:
        status = run_cli(build_image, [*argv, "--json"])
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert (status, json.loads(out)["error"]["code"]) == (2, code)


def test_bad_input_over_in_process_mcp_is_a_typed_error(tmp_path, state_dir):
    _project(tmp_path)

    async def scenario():
        async with Client(build_server()) as client:
            dockerfile = str(tmp_path / "Dockerfile")
            bad_tag = await client.call_tool(
                "build_image", {"dockerfile": dockerfile, "tag": "no spaces"}
            )
            absent = await client.call_tool(
                "build_image", {"dockerfile": str(tmp_path / "absent"), "wait_seconds": 30}
            )
            return bad_tag, absent

    bad_tag, absent = anyio.run(scenario)
    assert bad_tag.is_error
    assert json.loads(bad_tag.content[0].text)["error"]["code"] == "invalid_input"
    # Paths are checked where the work runs (after the server's confinement): the
    # operation ends failed with the typed error.
    state = absent.structured_content
    assert state["status"] == "failed" and state["error"]["code"] == "not_found"
    with pytest.raises(ToolFailure) as caught:
        build_image(dockerfile=str(tmp_path / "absent"))
    assert caught.value.code == "not_found" and caught.value.exit_status == 2


# --- a build outlives its MCP server -------------------------------------------------------


def test_a_build_outlives_a_killed_mcp_server_and_get_operation_reports_it(hub, tmp_path,
                                                                            state_dir):  # fmt: skip
    """Slow for a real reason: a 256 MB context (the size of a small model's weights
    copied into the image) is sent to the daemon and copied into a layer."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    dockerfile = _project(workspace, extra="COPY weights.bin /app/weights.bin\n")
    with open(workspace / "weights.bin", "wb") as out:
        for _ in range(256):
            out.write(os.urandom(1 << 20))
    env = {**os.environ, "FSDP_EKS_STATE_DIR": str(state_dir)}

    pid_file = tmp_path / "server.pid"

    def server() -> StdioServerParameters:
        # The shell writes its pid and becomes the server (exec): the test kills that pid.
        command = (f'echo $$ > {pid_file}; exec "{sys.executable}" -m mcp_server --workspace '
                   f'"{workspace}" --allow-path "{workspace}"')  # fmt: skip
        return StdioServerParameters(command="sh", args=["-c", command], cwd=str(ROOT), env=env)

    async def start():
        async with Client(server()) as client:
            called = await client.call_tool(
                "build_image",
                {
                    "dockerfile": str(dockerfile),
                    "tag": "slow",
                    "base_mirror": hub,
                    "wait_seconds": 1,
                },  # fmt: skip
            )
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the server dies mid-build
            return called

    started = anyio.run(start)
    assert not started.is_error, started.content
    state = started.structured_content
    assert state["status"] == "running", state
    operation_id = state["operation_id"]
    from mcp_server.workspace import Workspace
    from skills.operations import operations
    from skills.operations.operation_state import OPERATION_SCOPE

    # Operations belong to the workspace that started them: read it as that server would.
    scope = OPERATION_SCOPE.set(str(Workspace.create(str(workspace)).root))
    try:
        assert operations.get(operation_id).status == "running"  # the build goes on
    finally:
        OPERATION_SCOPE.reset(scope)

    async def follow():
        # One MCP call waits at most 45 s (issue 32): poll, as a client does, up to 240 s.
        async with Client(server()) as client:
            for _ in range(6):
                followed = await client.call_tool(
                    "get_operation", {"operation_id": operation_id, "wait_seconds": 45}
                )
                if followed.is_error or followed.structured_content["status"] != "running":
                    break
            return followed

    followed = anyio.run(follow)
    assert not followed.is_error, followed.content
    done = followed.structured_content
    assert done["status"] == "succeeded", done
    assert done["result"]["status"] == "built" and done["result"]["image_id"]
    assert done["result"]["tags"] == ["fsdp-eks-trainer:slow"]
