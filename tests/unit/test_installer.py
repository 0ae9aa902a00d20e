"""python -m mcp_server install/uninstall into a temp project for both clients and both
scopes (HOME pointed at a temp dir): what it writes, merging with what was there,
idempotence, dry runs, uninstall removing only its own, and refusals that lose nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mcp_server.__main__ import main as server_main
from mcp_server.client_configs import client_target
from mcp_server.install import MANIFEST_FILE, apply, main, plan
from mcp_server.skill_files import Skill, shipped_skills

CASES = [(c, s) for c in ("claude", "opencode") for s in ("project", "user")]
SKILL_NAMES = sorted(skill.name for skill in shipped_skills())


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    return project


def paths(client: str, scope: str, project: Path, home: Path) -> tuple[Path, str, Path]:
    """(config file, section, skills dir) as the clients' docs place them; the skills in
    the Claude folder for both (opencode reads it too)."""
    skills = (project if scope == "project" else home) / ".claude" / "skills"
    if client == "claude":
        if scope == "project":
            return project / ".mcp.json", "mcpServers", skills
        return home / ".claude.json", "mcpServers", skills
    base = project if scope == "project" else home / ".config" / "opencode"
    return base / "opencode.json", "mcp", skills


def skill_folders(skills_dir: Path) -> list[str]:
    return sorted(p.name for p in skills_dir.iterdir() if p.name != MANIFEST_FILE)


def run(command: str, client: str, scope: str, project: Path, *extra: str) -> int:
    return main([command, "--client", client, "--scope", scope, "--dir", str(project), *extra])


def snapshot(*roots: Path) -> dict[str, bytes]:
    return {
        str(p): p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("client, scope", CASES)
def test_install_writes_the_entry_and_the_skills(client, scope, project, home, capsys) -> None:
    assert run("install", client, scope, project) == 0
    config, section, skills_dir = paths(client, scope, project, home)
    entry = json.loads(config.read_text())[section]["fsdp-eks"]
    # A project's entry is committed: the launcher by name, found on PATH when the client
    # starts it; a user's is this machine's: this installation's launcher.
    argv = (
        ["fsdp-eks-mcp"]
        if scope == "project"
        else [str(Path(sys.executable).parent / "fsdp-eks-mcp")]
    )
    if client == "claude":
        assert entry == {"type": "stdio", "command": argv[0], "args": argv[1:]}
    else:
        assert entry == {"type": "local", "command": argv, "enabled": True}
        assert json.loads(config.read_text())["$schema"] == "https://opencode.ai/config.json"
    assert skill_folders(skills_dir) == SKILL_NAMES
    assert (skills_dir / MANIFEST_FILE).is_file()
    for folder in skills_dir.glob("*/"):  # both clients: the folder's name is the skill's
        meta = yaml.safe_load((folder / "SKILL.md").read_text().split("---\n")[1])
        assert meta["name"] == folder.name
    assert "create" in capsys.readouterr().out


@pytest.mark.parametrize("client, scope", CASES)
def test_second_install_changes_nothing(client, scope, project, home, capsys) -> None:
    run("install", client, scope, project)
    before = snapshot(project, home)
    mtimes = {p: os.stat(p).st_mtime_ns for p in before}
    capsys.readouterr()
    assert run("install", client, scope, project, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert {c["action"] for c in report["changes"]} == {"unchanged"}
    assert snapshot(project, home) == before
    assert {p: os.stat(p).st_mtime_ns for p in before} == mtimes


@pytest.mark.parametrize("client, scope", CASES)
def test_merge_keeps_other_entries_and_uninstall_removes_only_ours(
    client, scope, project, home
) -> None:
    config, section, skills_dir = paths(client, scope, project, home)
    config.parent.mkdir(parents=True, exist_ok=True)
    theirs = {"command": "other-server"}
    config.write_text(json.dumps({"theme": "dark", section: {"other": theirs}}))
    (skills_dir / "their-skill").mkdir(parents=True)
    (skills_dir / "their-skill" / "SKILL.md").write_text("---\nname: their-skill\n---\n")

    assert run("install", client, scope, project) == 0
    data = json.loads(config.read_text())
    assert data["theme"] == "dark" and data[section]["other"] == theirs
    assert set(data[section]) == {"other", "fsdp-eks"}
    assert "$schema" not in data  # only a file it creates gets opencode's schema link
    notes = skills_dir / SKILL_NAMES[0] / "notes.md"  # the user's file in our folder
    notes.write_text("mine")

    assert run("uninstall", client, scope, project) == 0
    assert json.loads(config.read_text()) == {"theme": "dark", section: {"other": theirs}}
    assert sorted(p.name for p in skills_dir.iterdir()) == sorted(["their-skill", SKILL_NAMES[0]])
    assert (skills_dir / "their-skill" / "SKILL.md").read_text() == "---\nname: their-skill\n---\n"
    assert [p.name for p in notes.parent.iterdir()] == ["notes.md"]
    assert run("uninstall", client, scope, project) == 0  # nothing left of ours: no-op


def test_install_updates_a_stale_entry(project, home, tmp_path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    old = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "mcp_server", "--workspace", str(other)],
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"fsdp-eks": old}}))
    assert run("install", "claude", "project", project, "--json") == 0
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["fsdp-eks"]
    assert entry == {"type": "stdio", "command": "fsdp-eks-mcp", "args": []}


@pytest.mark.parametrize("client, scope", CASES)
def test_dry_run_prints_and_writes_nothing(client, scope, project, home, capsys) -> None:
    assert run("install", client, scope, project, "--dry_run", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert snapshot(project, home) == {}
    assert report["dry_run"] is True and report["entry"]["fsdp-eks"]
    assert {c["action"] for c in report["changes"]} == {"create"}
    assert run("install", client, scope, project, "--dry-run") == 0
    assert "would create" in capsys.readouterr().out
    assert snapshot(project, home) == {}
    run("install", client, scope, project)
    before = snapshot(project, home)
    assert run("uninstall", client, scope, project, "--dry_run") == 0
    assert "would remove" in capsys.readouterr().out
    assert snapshot(project, home) == before


@pytest.mark.parametrize("client, scope", CASES)
@pytest.mark.parametrize(
    "text", ["{not json", "[1, 2]", '{"mcpServers": [], "mcp": []}'], ids=["bad", "list", "sec"]
)
def test_a_config_that_is_not_a_json_object_is_refused(
    client, scope, text, project, home, capsys
) -> None:
    config, _, skills_dir = paths(client, scope, project, home)
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)
    for command in ("install", "uninstall"):
        assert run(command, client, scope, project) == 2
        assert "invalid_input" in capsys.readouterr().err
    assert config.read_text() == text
    assert not skills_dir.exists()  # refused before anything was written


@pytest.mark.parametrize("client, scope", CASES)
def test_a_symlinked_config_is_refused_not_replaced(
    client, scope, project, home, tmp_path, capsys
) -> None:
    config, _, _ = paths(client, scope, project, home)
    real = tmp_path / "dotfiles.json"
    real.write_text("{}")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.symlink_to(real)
    assert run("install", client, scope, project, "--json") == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid_input"
    assert config.is_symlink() and real.read_text() == "{}"


def test_opencode_jsonc_is_left_to_the_user(project, home, capsys) -> None:
    (project / "opencode.jsonc").write_text("{ // mine\n}")
    assert run("install", "opencode", "project", project) == 2
    assert "JSONC" in capsys.readouterr().err
    assert not (project / "opencode.json").exists()


def test_a_missing_dir_is_refused(tmp_path, home) -> None:
    assert run("install", "claude", "project", tmp_path / "nope") == 2


def test_the_server_entry_point_dispatches_install(project, home) -> None:
    with pytest.raises(SystemExit) as exited:
        server_main(["install", "--client", "claude", "--dir", str(project), "--dry_run"])
    assert exited.value.code == 0
    assert snapshot(project) == {}


def test_python_dash_m_mcp_server_install(project, home) -> None:
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_CONFIG_HOME", None)
    argv = [sys.executable, "-m", "mcp_server", "install", "--client", "opencode"]
    done = subprocess.run(
        [*argv, "--dir", str(project), "--json"],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],  # this checkout's mcp_server
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["config"] == str(project / "opencode.json")
    assert json.loads((project / "opencode.json").read_text())["mcp"]["fsdp-eks"]["enabled"]


# --- plan, then apply; only what it wrote (issue 30 item 12) -------------------------


def _refused(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    assert "invalid_input" in err and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


@pytest.mark.parametrize(
    "content",
    [b'{"mcpServers": {"x": "\xff\xfe"}}', b"[" * 100_000 + b"]" * 100_000],
    ids=["not-utf8", "deep"],
)
@pytest.mark.parametrize("client", ["claude", "opencode"])
def test_an_unreadable_config_is_a_typed_refusal_and_nothing_is_written(
    client, content, project, home, capsys
) -> None:
    config, _, skills_dir = paths(client, "project", project, home)
    config.write_bytes(content)
    assert run("install", client, "project", project) == 2
    _refused(capsys, str(config))
    assert config.read_bytes() == content and not skills_dir.exists()


@pytest.mark.parametrize("client", ["claude", "opencode"])
def test_a_config_that_is_a_folder_or_a_fifo_is_refused_at_once(
    client, project, home, capsys
) -> None:
    config, _, skills_dir = paths(client, "project", project, home)
    config.mkdir()
    assert run("install", client, "project", project) == 2
    _refused(capsys, "folder")
    config.rmdir()
    os.mkfifo(config)  # a reader would wait forever for a writer
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "mcp_server", "install", "--client", client, "--dir", str(project)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 2 and "regular file" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not skills_dir.exists()


def test_a_skill_path_that_is_a_folder_refuses_before_the_config_is_written(
    project, home, capsys
) -> None:
    (project / ".mcp.json").write_text('{"mcpServers": {}}')
    blocked = project / ".claude" / "skills" / SKILL_NAMES[0] / "SKILL.md"
    blocked.mkdir(parents=True)
    assert run("install", "claude", "project", project) == 2
    _refused(capsys, str(blocked))
    assert (project / ".mcp.json").read_text() == '{"mcpServers": {}}'
    assert [p.name for p in (project / ".claude" / "skills").iterdir()] == [SKILL_NAMES[0]]


@pytest.mark.parametrize("client", ["claude", "opencode"])
def test_skills_as_a_file_is_refused_before_anything_is_written(
    client, project, home, capsys
) -> None:
    (project / ".claude").mkdir()
    (project / ".claude" / "skills").write_text("not a folder")
    assert run("install", client, "project", project) == 2
    _refused(capsys, "a file where a folder goes")
    assert not (project / ".mcp.json").exists() and not (project / "opencode.json").exists()
    assert (project / ".claude" / "skills").read_text() == "not a folder"


@pytest.mark.parametrize("linked", [".claude", ".claude/skills"])
def test_a_linked_claude_folder_is_not_followed_out_of_the_project(
    linked, project, home, tmp_path, capsys
) -> None:
    outside = tmp_path / "dotfiles"
    outside.mkdir()
    link = project / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    for command in ("install", "uninstall"):
        assert run(command, "claude", "project", project) == 2
        _refused(capsys, "symbolic link")
    assert not any(outside.iterdir()) and not (project / ".mcp.json").exists()


def test_a_users_skill_of_the_same_name_is_neither_overwritten_nor_deleted(
    project, home, capsys
) -> None:
    skills_dir = project / ".claude" / "skills"
    mine = skills_dir / SKILL_NAMES[0] / "SKILL.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("my own skill")
    assert run("install", "claude", "project", project) == 0
    assert "kept" in capsys.readouterr().out
    assert mine.read_text() == "my own skill"
    edited = skills_dir / SKILL_NAMES[1] / "SKILL.md"
    edited.write_text(edited.read_text() + "\nmy notes\n")  # the user edits an installed one
    assert run("install", "claude", "project", project) == 0  # not put back
    assert edited.read_text().endswith("my notes\n")
    assert run("uninstall", "claude", "project", project) == 0
    assert mine.read_text() == "my own skill" and edited.read_text().endswith("my notes\n")
    assert skill_folders(skills_dir) == sorted([SKILL_NAMES[0], SKILL_NAMES[1]])
    assert not (skills_dir / MANIFEST_FILE).exists()


def test_one_copy_of_the_skills_serves_both_clients(project, home) -> None:
    assert run("install", "claude", "project", project) == 0
    assert run("install", "opencode", "project", project) == 0
    skills_dir = project / ".claude" / "skills"
    assert skill_folders(skills_dir) == SKILL_NAMES
    assert not (project / ".opencode").exists()  # opencode reads .claude/skills
    manifest = json.loads((skills_dir / MANIFEST_FILE).read_text())
    assert {tuple(f["clients"]) for f in manifest["files"].values()} == {("claude", "opencode")}
    assert run("uninstall", "claude", "project", project) == 0  # opencode still uses them
    assert skill_folders(skills_dir) == SKILL_NAMES
    assert not (project / ".mcp.json").exists()  # it made the file: it takes it away
    assert run("uninstall", "opencode", "project", project) == 0
    assert not skills_dir.exists()  # the folders it made, empty again, are gone


def test_a_manifest_that_is_not_ours_stops_the_install(project, home, capsys) -> None:
    skills_dir = project / ".claude" / "skills"
    skills_dir.mkdir(parents=True)
    (skills_dir / MANIFEST_FILE).write_text("[1]")
    assert run("install", "claude", "project", project) == 2
    _refused(capsys, "manifest")
    assert not (project / ".mcp.json").exists()


def test_a_write_that_fails_undoes_the_ones_before_it(tmp_path) -> None:
    from mcp_server.install import Change, apply
    from skills.shared.errors import ToolFailure

    kept = tmp_path / "kept.json"
    kept.write_text("before")
    changes = [
        Change(tmp_path / "new" / "SKILL.md", "create", "new", "text"),
        Change(kept, "update", "kept", "after", b"before"),
        Change(Path("/proc/self/no-such-dir/x.json"), "create", "fails", "{}"),  # ENOENT/EACCES
    ]
    with pytest.raises(ToolFailure, match="restored"):
        apply(changes)
    assert kept.read_text() == "before" and not (tmp_path / "new" / "SKILL.md").exists()


# --- configs a team can commit (issue 46 item 2) -----------------------------------------


def tree(root: Path) -> list[str]:
    """Every file and folder under root, relative."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("client, scope", CASES)
def test_uninstall_leaves_an_empty_folder_as_empty_as_it_found_it(client, scope, project, home):
    assert run("install", client, scope, project) == 0
    assert tree(project if scope == "project" else home)
    assert run("uninstall", client, scope, project) == 0
    assert tree(project) == [] and tree(home) == []


def test_both_clients_installed_then_uninstalled_leave_nothing(project, home) -> None:
    for client in ("claude", "opencode"):
        assert run("install", client, "project", project) == 0
    for client in ("opencode", "claude"):
        assert tree(project) != []
        assert run("uninstall", client, "project", project) == 0
    assert tree(project) == []


@pytest.mark.parametrize("client", ["claude", "opencode"])
def test_a_project_entry_names_no_path_of_this_machine(client, project, home) -> None:
    assert run("install", client, "project", project) == 0
    config = project / (".mcp.json" if client == "claude" else "opencode.json")
    text = config.read_text()
    for machine_path in (str(project), sys.executable, str(home), str(Path(sys.executable).parent)):
        assert machine_path not in text
    manifest = (project / ".claude" / "skills" / MANIFEST_FILE).read_text()
    assert str(project) not in manifest  # the manifest's paths are the project's own


@pytest.mark.parametrize(
    "before, after",
    [
        (None, "runs/\n"),
        ("*.pyc\n", "*.pyc\nruns/\n"),
        ("*.pyc", "*.pyc\nruns/\n"),
        ("/runs\n", "/runs\n"),  # ignored already: left as it is
    ],
    ids=["no file", "a file", "no final newline", "ignored already"],
)
def test_runs_is_ignored_and_uninstall_takes_back_only_its_line(before, after, project, home):
    ignore = project / ".gitignore"
    if before is not None:
        ignore.write_text(before)
    assert run("install", "claude", "project", project) == 0
    assert ignore.read_text() == after
    assert run("uninstall", "claude", "project", project) == 0
    assert (ignore.read_text() if ignore.exists() else None) == (
        before if before is None or before.endswith("\n") or before == "/runs\n" else before + "\n"
    )


def test_a_user_line_added_to_the_gitignore_it_made_keeps_the_file(project, home) -> None:
    assert run("install", "opencode", "project", project) == 0
    ignore = project / ".gitignore"
    ignore.write_text(ignore.read_text() + "dist/\n")
    assert run("uninstall", "opencode", "project", project) == 0
    assert ignore.read_text() == "dist/\n"


@pytest.mark.parametrize("client", ["claude", "opencode"])
@pytest.mark.parametrize("first, second", [("project", "user"), ("user", "project")])
def test_a_second_scope_for_one_client_is_refused_with_the_way_out(
    client, first, second, project, home, capsys
):
    assert run("install", client, first, project) == 0
    before = snapshot(project, home)
    capsys.readouterr()
    assert run("install", client, second, project, "--json") != 0
    failure = json.loads(capsys.readouterr().out)["error"]
    assert failure["code"] == "conflict"
    assert f"uninstall --client {client} --scope {first}" in failure["hint"]
    assert snapshot(project, home) == before
    other = "opencode" if client == "claude" else "claude"
    assert run("install", other, second, project) == 0  # another client may use the other


def test_a_missing_launcher_is_said_at_install(project, home, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(project))
    assert run("install", "claude", "project", project, "--json") == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert len(warnings) == 1 and "fsdp-eks-mcp is not on PATH" in warnings[0]
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert run("install", "claude", "project", project, "--json") == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []


# --- a run stopped at any write converges on the next (issue 45 finding 16) ------------


def _v2(skills: list[Skill]) -> list[Skill]:
    return [
        replace(skill, text=skill.text + "\nA newer version of this skill.\n") for skill in skills
    ]


@pytest.mark.parametrize("upgrade", [False, True], ids=["first install", "upgrade"])
@pytest.mark.parametrize("client, scope", CASES)
def test_an_install_killed_after_any_write_is_finished_by_the_next(
    client, scope, upgrade, project, home
) -> None:
    """A kill -9 between two writes leaves exactly the first k of them (each write is an
    atomic rename): for every k, the next install must take over every skill file and
    an uninstall then remove everything."""
    old, new = shipped_skills(), _v2(shipped_skills())
    target = client_target(client, scope, project, home=home)
    if upgrade:
        apply(plan(target, True, old))
    snap = snapshot(project, home)
    writes = [c for c in plan(target, True, new) if c.action not in ("unchanged", "kept")]
    assert len(writes) > len(new)
    for k in range(len(writes)):
        _restore(snap, project, home)
        apply(writes[:k])  # killed before write k
        apply(plan(target, True, new))  # the next run
        for skill in new:
            assert (target.skills_dir / skill.name / "SKILL.md").read_text() == skill.text, k
        assert {c.action for c in plan(target, True, new)} == {"unchanged"}, k
        apply(plan(target, False, new))
        assert tree(project) == [] and tree(home) == [], k


def _restore(snap: dict[str, bytes], *roots: Path) -> None:
    """The roots exactly as snapshot() saw them (files; folders as they hold files)."""
    for root in roots:
        for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    for name, data in snap.items():
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Path(name).write_bytes(data)
