"""The local job record and the tool edge, tried as an attacker and a clumsy user
would (issue 9's reproductions), with real CLI runs, real torchrun jobs and real
processes: concurrent deploys, damaged and tampered records, lost cancels, a killed
follower, secrets, file-system errors and bounds."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from commands._cli import run_cli
from commands.cancel_training_job import cancel_training_job
from commands.deploy_training_job import DeployResult, deploy_training_job
from commands.get_training_job import get_training_job
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.trainer_log import parse_events
from tests.run_copies import EndedJob, copy_of

ROOT = Path(__file__).resolve().parents[2]
ENDLESS = {"max_steps": 100_000, "checkpoint_freq": 0}
# Where a test is about the record, the tool edge or the disk, not about a group of ranks,
# its job runs one process: a rank is ~4 CPU-seconds of torch start-up (issue 36).
ONE_RANK = {"gpu_per_node": 1}
TOOLS = ("get_training_job", "get_training_job_logs", "cancel_training_job", "deploy_training_job")


def cli(tool: str, *argv: str) -> tuple[int, str, str]:
    """The tool's CLI in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = run_cli(getattr(importlib.import_module(f"commands.{tool}"), tool), list(argv))
        except SystemExit as exc:  # argparse's own errors
            status = exc.code if isinstance(exc.code, int) else 2
    return status, out.getvalue(), err.getvalue()


def cli_process(tool: str, *argv: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "commands" / f"{tool}.py"), *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, **popen,
    )  # fmt: skip


def wait_for_step(log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        if any(e["event"] == "step" for e in parse_events(text)):
            return
        time.sleep(0.2)
    raise AssertionError(f"no step logged in {timeout} s:\n{text[-2000:]}")


def wait_for_trainer(run_dir: Path, timeout: float = 120.0) -> None:
    """Until the record names the job's torchrun and its log exists (the supervisor started
    torchrun, then opened the log): a test that counts trainers and logs need not wait
    for a step, and the cancel that follows stops torchrun before its ranks have imported
    torch (issue 36: CPU)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if record(run_dir).get("trainer") and (run_dir / "logs" / "attempt-1.log").exists():
                return
        time.sleep(0.1)
    raise AssertionError(f"no trainer recorded in {timeout} s in {run_dir}")


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "job.json").read_text())


def stop(runs: Path, job: str) -> None:
    with contextlib.suppress(ToolFailure):
        cancel_training_job(job_name=job, runs_dir=str(runs), confirm=True)


# 1. one writer per job --------------------------------------------------------------


def test_eight_concurrent_deploys_in_threads_start_one_trainer(tmp_path):
    outcomes: list[str] = []

    def deploy() -> None:
        try:
            state = deploy_training_job(
                job_name="dup", runs_dir=str(tmp_path), wait_seconds=0, **ENDLESS, **ONE_RANK
            )
            outcomes.append(state.status)
        except ToolFailure as failure:
            outcomes.append(failure.code)

    threads = [threading.Thread(target=deploy) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(outcomes) == ["job_running"] * 7 + ["running"], outcomes
        wait_for_trainer(tmp_path / "dup")
        assert [p.name for p in (tmp_path / "dup" / "logs").iterdir()] == ["attempt-1.log"]
        assert record(tmp_path / "dup")["attempt"] == 1  # the record parses
    finally:
        stop(tmp_path, "dup")


def test_eight_concurrent_cli_deploys_start_one_trainer(tmp_path):
    argv = ["--job_name", "dup", "--runs_dir", str(tmp_path), "--wait_seconds", "0", "--json",
            "--max_steps", "100000", "--checkpoint_freq", "0", "--gpu_per_node", "1"]  # fmt: skip
    procs = [cli_process("deploy_training_job", *argv) for _ in range(8)]
    try:
        results = [(p.wait(120), *p.communicate()) for p in procs]
        for _, out, err in results:
            assert "Traceback" not in out + err
        statuses = sorted(
            json.loads(out).get("status") or json.loads(out)["error"]["code"]
            for _, out, _ in results
        )
        assert statuses == ["job_running"] * 7 + ["running"], statuses
        assert sorted(code for code, _, _ in results) == [0] + [1] * 7
        # wait_seconds=0 returns before the detached supervisor has started torchrun
        wait_for_trainer(tmp_path / "dup")
        trainers = [
            p for p in psutil.process_iter(["cmdline"])
            if "torch.distributed.run" in " ".join(p.info["cmdline"] or ())
            and str(tmp_path) in " ".join(p.info["cmdline"] or ())
        ]  # fmt: skip
        assert len(trainers) == 1
        assert record(tmp_path / "dup")["trainer"]["pid"] == trainers[0].pid
    finally:
        stop(tmp_path, "dup")


# 2. a record that cannot be read ----------------------------------------------------

DAMAGED = {
    "truncated": '{"job_name": "bad", "attempt": 1, "argv": ["x"], "submitted',
    "not json": "{not json",
    "empty": "",
    "a list": "[1, 2]",
    "no processes or times": '{"job_name": "bad"}',
    "a path pointed elsewhere": None,  # filled in below: a good record plus log_path
    "a directory": "DIR",
}


def _damage(run_dir: Path, how: str) -> None:
    path = run_dir / "job.json"
    run_dir.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        path.rmdir()
    if DAMAGED[how] == "DIR":
        path.mkdir()
    elif DAMAGED[how] is None:
        good = {"job_name": "bad", "attempt": 1, "argv": ["x"], "submitted_at": 1.0}
        path.write_text(json.dumps({**good, "log_path": "/etc/passwd"}))
    else:
        path.write_text(DAMAGED[how])


@pytest.mark.parametrize("how", list(DAMAGED))
def test_a_damaged_record_is_a_typed_error_in_every_tool(tmp_path, how):
    _damage(tmp_path / "bad", how)
    for tool in TOOLS:
        extra = ["--confirm"] if tool == "cancel_training_job" else []
        status, out, err = cli(tool, "--job_name", "bad", "--runs_dir", str(tmp_path),
                               "--json", *extra)  # fmt: skip
        assert "Traceback" not in out + err
        error = json.loads(out)["error"]
        assert (status, error["code"]) == (1, "job_record_corrupt"), (tool, out)
        assert str(tmp_path / "bad" / "job.json") in error["message"]
        assert "--replace_corrupt_record" in error["hint"]
        assert "root:" not in out  # /etc/passwd was never read
    status, out, _ = cli("list_training_jobs", "--runs_dir", str(tmp_path), "--json")
    (listed,) = json.loads(out)["jobs"]
    assert (status, listed["status"]) == (0, "unknown")
    assert "job_record_corrupt" in listed["message"]


def test_deploy_starts_a_job_with_a_corrupt_record_over_when_told(ended_job: EndedJob):
    # The shared ended job was deployed over a record that is not JSON (tests/run_copies.py).
    assert ended_job.state.status == "succeeded", ended_job.state.log_tail
    assert [p.name.split("-")[0] for p in ended_job.run.glob("job.json.corrupt-*")] == [
        "job.json.corrupt"
    ]


# 3. cancel is never lost ------------------------------------------------------------


def test_cancel_from_another_shell_wins_over_a_following_cli_deploy(tmp_path):
    follower = cli_process("deploy_training_job", "--job_name", "c", "--runs_dir",
                           str(tmp_path), "--json", "--max_steps", "100000",
                           "--checkpoint_freq", "0", "--gpu_per_node", "1")  # fmt: skip
    try:
        # The race is the follower's against the canceller's, not the ranks' training:
        # torchrun recorded is enough (a step would add a rank's torch start, issue 36).
        wait_for_trainer(tmp_path / "c")
        # The other shell's cancel: this test's process is not the follower's (the CLI in
        # process, not a third Python start: issue 36).
        _, cancel_out, _ = cli("cancel_training_job", "--job_name", "c", "--runs_dir",
                               str(tmp_path), "--confirm", "--json")  # fmt: skip
        follow_out, follow_err = follower.communicate(timeout=90)
    finally:
        follower.kill()
    assert json.loads(cancel_out)["status"] == "cancelled"
    assert json.loads(follow_out)["status"] == "cancelled", follow_err
    assert record(tmp_path / "c")["cancel_requested_at"] is not None
    assert get_training_job(job_name="c", runs_dir=str(tmp_path)).status == "cancelled"


def test_cancel_right_after_submit_is_cancelled_not_failed(tmp_path):
    started = deploy_training_job(
        job_name="early", runs_dir=str(tmp_path), wait_seconds=0, **ONE_RANK
    )
    assert started.status == "running"
    state = cancel_training_job(job_name="early", runs_dir=str(tmp_path), confirm=True)
    assert state.status == "cancelled"
    assert get_training_job(job_name="early", runs_dir=str(tmp_path)).status == "cancelled"


# 4. a record is not trusted blindly; the end is recorded whoever follows -----------


def test_an_end_written_while_a_reader_looks_is_read_as_the_jobs_end(
    tmp_path, ended_job: EndedJob, monkeypatch
):
    """The supervisor writes the end and then exits. A reader whose read of the record
    came before that write, and whose look at the processes came after the exit, must
    read the record again: under load a job that succeeded was reported "failed: the
    supervisor stopped without recording". The timing is played here: the look at the
    processes is where the supervisor's last write and exit happen."""
    from skills.training_job_deployer.targets.local.record import JobRecord

    run = copy_of(ended_job.run, tmp_path, "race", checkpoints=False)
    ended = record(run)
    assert ended["ended_at"] is not None and ended["outcome"]["status"] == "succeeded"
    (run / "job.json").write_text(json.dumps({**ended, "ended_at": None, "exit_code": None}))

    def supervisor_finishes_now(self: JobRecord, run_dir: object) -> bool:
        (run / "job.json").write_text(json.dumps(ended))  # its last write, then its exit
        return False

    monkeypatch.setattr(JobRecord, "active", supervisor_finishes_now)
    state = get_training_job(job_name="race", runs_dir=str(tmp_path))
    assert state.status == "succeeded", state.message
    assert state.exit_code == 0


def test_a_tampered_record_cannot_signal_a_foreign_process(tmp_path, ended_job: EndedJob):
    # The ended job's record, copied: its supervisor and trainer started well before this
    # process (start times tell processes apart to about 10 ms).
    copy_of(ended_job.run, tmp_path, "t", checkpoints=False)
    foreign = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        tampered = record(tmp_path / "t")
        assert tampered["supervisor"] and tampered["trainer"]
        for who in ("supervisor", "trainer"):  # a recycled pid looks exactly like this
            tampered[who]["pid"] = foreign.pid
        tampered["ended_at"] = tampered["exit_code"] = tampered["cancel_requested_at"] = None
        (tmp_path / "t" / "job.json").write_text(json.dumps(tampered))
        state = get_training_job(job_name="t", runs_dir=str(tmp_path))
        assert state.status == "failed" and "supervisor stopped" in state.message
        cancel_training_job(job_name="t", runs_dir=str(tmp_path), confirm=True)
        assert foreign.poll() is None  # not signalled: its start time is not the record's
    finally:
        foreign.kill()
        foreign.wait()


def test_a_forged_record_naming_a_live_foreign_process_stops_nothing(tmp_path):
    # Issue 20 item 8: pid AND start time right (not a recycled pid): only the command
    # line (supervisor) or the run-dir marker in the environment (trainer) tells it apart.
    foreign = psutil.Popen(["setsid", "sleep", "120"])
    try:
        who = {"pid": foreign.pid, "started": foreign.create_time()}
        forged = {"job_name": "f", "attempt": 1, "argv": ["x"], "submitted_at": 1.0,
                  "supervisor": who, "trainer": who}  # fmt: skip
        (tmp_path / "f").mkdir()
        (tmp_path / "f" / "job.json").write_text(json.dumps(forged))
        state = get_training_job(job_name="f", runs_dir=str(tmp_path))
        assert state.status == "failed" and "supervisor stopped" in state.message
        status, out, err = cli("cancel_training_job", "--job_name", "f", "--runs_dir",
                               str(tmp_path), "--confirm", "--json")  # fmt: skip
        error = json.loads(out)["error"]
        assert (status, error["code"]) == (1, "job_record_corrupt"), out + err
        assert error["details"]["reason"] == "not_our_process"
        assert "nothing was signalled" in error["message"]
        time.sleep(0.3)
        assert foreign.poll() is None  # alive: not signalled
        assert record(tmp_path / "f") == forged  # nothing written
    finally:
        foreign.kill()
        foreign.wait()


def test_killing_the_following_cli_leaves_the_end_recorded(tmp_path):
    follower = cli_process("deploy_training_job", "--job_name", "k", "--runs_dir",
                           str(tmp_path), "--max_steps", "2", "--gpu_per_node", "1")  # fmt: skip
    # Killed once torchrun is recorded: before its rank has imported torch, so every step
    # of the job runs after the kill (a kill after the first step needed a 12-step job to
    # land mid-run under load).
    wait_for_trainer(tmp_path / "k")
    follower.send_signal(signal.SIGKILL)
    follower.wait()
    log = (tmp_path / "k" / "logs" / "attempt-1.log").read_text()
    assert "summary" not in [e["event"] for e in parse_events(log)]  # killed mid-run
    state = get_training_job(job_name="k", runs_dir=str(tmp_path), wait_seconds=180)
    assert (state.status, state.exit_code, state.steps) == ("succeeded", 0, 2)
    assert record(tmp_path / "k")["ended_at"] is not None


# 5. checkpoint directories --------------------------------------------------------


@dataclass(frozen=True)
class Adopted:
    """Job "b" run 3 steps on job "a"'s checkpoints, told to adopt them. "a" is a copy of
    the shared ended job (step-1 and step-2) whose step-2 lost its shards (its COMPLETE
    marker stays). `conflict` is what b's dry run without the flag answered."""

    args: dict[str, Any]
    checkpoints: Path
    conflict: tuple[int, str]
    state: DeployResult


@pytest.fixture(scope="module")
def adopted(tmp_path_factory, ended_job: EndedJob) -> Adopted:
    """One run for two tests: the adopt test and the damaged-checkpoint test (a job is
    three Python starts, two of them torch: about 10 CPU-seconds, issue 36)."""
    runs = tmp_path_factory.mktemp("adopt")
    checkpoints = copy_of(ended_job.run, runs, "a") / "checkpoints"  # owned by "a"
    assert sorted(p.name for p in checkpoints.glob("step-*")) == ["step-1", "step-2"]
    for shard in (checkpoints / "step-2").glob("*.distcp"):
        shard.unlink()
    status, out, _ = cli("deploy_training_job", "--job_name", "b", "--runs_dir", str(runs),
                         "--checkpoint_dir", str(checkpoints), "--keep_last", "1", "--dry_run",
                         "--json")  # fmt: skip
    args: dict[str, Any] = {
        "job_name": "b", "runs_dir": str(runs), "checkpoint_dir": str(checkpoints),
        "adopt_checkpoint_dir": True, "checkpoint_freq": 1, "keep_last": 0, **ONE_RANK,
    }  # fmt: skip
    state = deploy_training_job(**args, max_steps=3)
    return Adopted(args, checkpoints, (status, out), state)


def test_another_jobs_checkpoints_are_taken_only_when_told(adopted: Adopted):
    status, out = adopted.conflict
    error = json.loads(out)["error"]
    assert (status, error["code"]) == (1, "conflict") and "--adopt_checkpoint_dir" in error["hint"]
    # Told, it resumed from a's newest whole checkpoint (step-2 is damaged: see below).
    state = adopted.state
    assert (state.status, state.resumed_from) == ("succeeded", 1), state.log_tail


# 6. secrets --------------------------------------------------------------------------

# Each run's own (a random tail of the same shape): the /tmp scan below must find this
# run's secrets, not those of another copy of the suite running this test at the same
# time (its torchelastic error file, written before its supervisor masks it).
_TAIL = "".join(random.choices(string.ascii_uppercase + string.digits, k=9))
CANARY = {
    "HF_TOKEN": "hf_" + "Canary7" * 5 + _TAIL[:7],
    "AWS_ACCESS_KEY_ID": "AKIA" + "CANARY7" + _TAIL,
    "AWS_SECRET_ACCESS_KEY": "canarySecret/" + "7q" * 10 + _TAIL[:8],
}

# Loaded by every rank (PYTHONPATH reaches them): prints the secrets from the job's
# environment and makes the trainer fail with one in its exception, which torchrun
# writes to its error file.
LEAKY_SITECUSTOMIZE = """
import os, sys
if os.environ.get("RANK") is not None and os.environ.get("LEAK_CANARIES"):
    for name in ("HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        print(f"{name}={os.environ[name]}", flush=True)
        print(f"aws_secret_access_key = {os.environ['AWS_SECRET_ACCESS_KEY']}", file=sys.stderr)
    import trainer.train as t

    def leak(argv):
        raise RuntimeError("cannot reach the hub with " + os.environ["HF_TOKEN"])

    t.load_config = leak
"""


def _changed_files(root: Path, newer_than: float) -> Iterator[str]:
    """The files under `root` (links to files followed, links to directories not) changed
    since `newer_than`. A shared /tmp holds hundreds of thousands of files: a scandir
    entry per name (its type from the directory, one stat for a file) costs a quarter of
    the CPU of a Path and two stats each (issue 36). Directories that vanish while it is
    read (other tests' come and go) are skipped."""
    folders = [str(root)]
    while folders:
        try:
            entries = os.scandir(folders.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                    elif entry.is_file() and entry.stat().st_mtime >= newer_than:
                        yield entry.path


def _files_containing(root: Path, needles: list[str], newer_than: float) -> list[str]:
    found = []
    for path in _changed_files(root, newer_than):
        with contextlib.suppress(OSError):
            data = Path(path).read_bytes()
            found += [f"{path}: {n[:6]}..." for n in needles if n.encode() in data]
    return found


def test_canary_secrets_appear_nowhere(tmp_path, monkeypatch):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(LEAKY_SITECUSTOMIZE))
    for name, value in CANARY.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LEAK_CANARIES", "1")
    monkeypatch.setenv("PYTHONPATH", str(hook))
    begun = time.time() - 1
    runs = tmp_path / "runs"
    argv = ["--job_name", "leaky", "--runs_dir", str(runs), "--json", "--max_steps", "2",
            "--gpu_per_node", "1"]  # fmt: skip
    status, out, err = cli("deploy_training_job", *argv)
    assert status == 1 and json.loads(out)["status"] == "failed"
    assert "cannot reach the hub with ***" in json.loads(out)["message"]
    # A token pasted into a field is refused, not planned.
    pasted = cli("deploy_training_job", "--job_name", "p", "--runs_dir", str(runs), "--dry_run",
                 "--json", "--tokenizer", CANARY["HF_TOKEN"])  # fmt: skip
    # Read back without the secrets in the reader's environment.
    for name in CANARY:
        monkeypatch.delenv(name)
    logs = cli("get_training_job_logs", "--job_name", "leaky", "--runs_dir", str(runs), "--json",
               "--tail_lines", "10000")  # fmt: skip
    described = cli("get_training_job", "--job_name", "leaky", "--runs_dir", str(runs), "--json")
    assert "HF_TOKEN=***" in json.loads(logs[1])["text"]
    needles = list(CANARY.values())
    everything = out + err + "".join(pasted[1:]) + "".join(logs[1:]) + "".join(described[1:])
    assert [n for n in needles if n in everything] == []
    assert json.loads(pasted[1])["error"]["code"] == "invalid_input"
    assert _files_containing(runs, needles, begun) == []
    assert list((runs / "leaky" / "torchelastic").rglob("error.json"))  # it was written, masked
    assert _files_containing(Path("/tmp"), needles, begun) == []
    assert not (runs / "leaky" / "tmp").exists()


def test_a_secret_inside_an_argument_is_masked_in_the_plan_and_the_job_record(
    tmp_path, monkeypatch
):
    """Issue 20 item 20: a secret variable's value inside an argument (a dataset URL) was
    masked in logs but not in the plan's argv or job.json. The job still runs with it."""
    secret = "plantedhfvalue0123456789"  # no token shape: only HF_TOKEN's value names it
    monkeypatch.setenv("HF_TOKEN", secret)
    runs = tmp_path / "runs"
    dataset = f"s3://corpus-{secret}/train.jsonl"
    argv = ["--job_name", "masked", "--runs_dir", str(runs), "--dataset", dataset, "--dry_run"]
    planned, shown = cli("deploy_training_job", *argv, "--json"), cli("deploy_training_job", *argv)
    assert planned[0] == 0 and shown[0] == 0, (planned, shown)
    plan = json.loads(planned[1])["plan"]
    assert "s3://corpus-***/train.jsonl" in plan["argv"]
    assert secret not in "".join(planned[1:] + shown[1:]) and "corpus-***" in shown[1]
    started = deploy_training_job(job_name="masked", runs_dir=str(runs), dataset=dataset,
                                  wait_seconds=0, **ENDLESS, **ONE_RANK)  # fmt: skip
    try:
        assert secret not in started.model_dump_json()
        written = (runs / "masked" / "job.json").read_text()
        assert secret not in written and "s3://corpus-***/train.jsonl" in written
    finally:
        stop(runs, "masked")


# 7. file-system errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("runs_dir", "code"),
    [
        ("/etc/passwd", "not_a_directory"),
        ("/proc/1", None),  # permission_denied or not_found, depending on the kernel
        ("/tmp/" + "x" * 300, "name_too_long"),
        ("/tmp/" + "d/" * 2500, "invalid_input"),  # longer than any path may be
        ("", "invalid_input"),
        ("runs\x07bell", "invalid_input"),
    ],
)
def test_unusable_runs_dirs_are_typed_errors(runs_dir, code):
    for dry_run in (["--dry_run"], []):
        status, out, err = cli("deploy_training_job", "--job_name", "fs", "--runs_dir", runs_dir,
                               "--json", "--max_steps", "1", *dry_run)  # fmt: skip
        assert "Traceback" not in out + err
        if code is None and dry_run and status == 0:
            continue  # only trying to write there can tell
        error = json.loads(out)["error"]
        assert error["hint"] and status in (1, 2)
        if code is not None:
            assert error["code"] == code, error


def _in_a_small_filesystem(script: str, size: str) -> subprocess.CompletedProcess[str]:
    """Run `script` (bash) with a fresh tmpfs of `size` mounted at $SMALL: a full disk
    without touching this machine's. Needs user namespaces."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not allowed here: {probe.stderr.decode().strip()}")
    wrapper = f'set -e; SMALL=$(mktemp -d); mount -t tmpfs -o size={size} tmpfs "$SMALL"; {script}'
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "bash", "-c", wrapper],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip


def test_a_full_disk_at_deploy_is_a_typed_error_and_leaves_no_temp_file(tmp_path):
    python = sys.executable
    done = _in_a_small_filesystem(
        f"""
        mkdir "$SMALL/runs"; mkdir "$SMALL/runs/full"
        dd if=/dev/zero of="$SMALL/filler" bs=4k 2>/dev/null || true
        {python} commands/deploy_training_job.py --job_name full --runs_dir "$SMALL/runs" \
            --max_steps 2 --json > {tmp_path}/out.json 2> {tmp_path}/err.txt || echo "exit $?"
        find "$SMALL/runs" -name '*.tmp' -o -name '.*.tmp' > {tmp_path}/tmp-files.txt
        """,
        "1m",
    )
    assert "exit 1" in done.stdout, done.stdout + done.stderr
    error = json.loads((tmp_path / "out.json").read_text())["error"]
    assert error["code"] == "no_space_left" and error["hint"]
    assert "Traceback" not in (tmp_path / "err.txt").read_text()
    assert (tmp_path / "tmp-files.txt").read_text() == ""


def test_a_disk_that_fills_during_the_run_is_named_as_the_cause(tmp_path):
    python = sys.executable
    done = _in_a_small_filesystem(
        f"""
        {python} commands/deploy_training_job.py --job_name filling --runs_dir "$SMALL" \
            --max_steps 40 --checkpoint_freq 1 --keep_last 0 --gpu_per_node 1 --json \
            > {tmp_path}/out.json \
            2> {tmp_path}/err.txt || true
        {python} commands/get_training_job.py --job_name filling --runs_dir "$SMALL" --json \
            > {tmp_path}/get.json || true
        """,
        "6m",
    )
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["status"] == "failed", (out, done.stderr)
    assert "no space left" in out["message"].lower()
    assert "Traceback" not in (tmp_path / "err.txt").read_text()
    assert json.loads((tmp_path / "get.json").read_text())["message"] == out["message"]
    assert out["log_tail"]


FULL_DISK_END = """
import json, sys, time
from pathlib import Path
from skills.shared.errors import ErrorCode
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.local.record import JobFailure, JobRecord, RunDir
from skills.training_job_deployer.targets.local.supervisor import Supervisor
from skills.training_job_deployer.targets.local.target import LocalTarget

runs = Path(sys.argv[1])
run = RunDir(runs / "full")
run.path.mkdir()
running = JobRecord(job_name="full", attempt=1, argv=["torchrun"], submitted_at=time.time())
run.record_file.write(running)
supervisor = Supervisor(run, LocalTarget(runs).plan(JobSpec(job_name="full")))
supervisor.failure = JobFailure(code=ErrorCode.NO_SPACE_LEFT, message="failed: no space left")
supervisor.unlogged.extend(f"line {i} " + "x" * 290 for i in range(40))
with open(runs / "filler", "wb", buffering=0) as filler:  # the disk fills while the job runs
    try:
        while True:
            filler.write(b"0" * 65536)
    except OSError:
        pass
supervisor._finish(1)
record = run.record_file.read()
ended = {"ended": record.ended, "code": record.failure.code, "tail": record.unlogged_tail}
print(json.dumps(ended))
"""


def test_on_a_full_disk_the_end_is_recorded_with_as_much_of_the_unlogged_tail_as_fits(tmp_path):
    """The ended record may only take the blocks the running one had: the supervisor
    keeps fewer of the lines the log could not take until it fits, and a record that
    does not fit is never half written over the old one."""
    script = tmp_path / "end.py"
    script.write_text(FULL_DISK_END)
    done = _in_a_small_filesystem(f'{sys.executable} {script} "$SMALL"', "1m")
    assert done.returncode == 0, done.stdout + done.stderr
    ended = json.loads(done.stdout.strip().splitlines()[-1])
    assert ended["ended"] and ended["code"] == "no_space_left"
    assert 0 < len(ended["tail"]) < 40 and ended["tail"][-1].startswith("line 39 ")


RECORD_ON_A_FULL_DISK = """
import json, sys
from pathlib import Path
from pydantic import BaseModel
from skills.operations.record_store import RecordFile

class Note(BaseModel):
    text: str

small = Path(sys.argv[1])
file = RecordFile(small / "note.json", Note)
file.write(Note(text="running"))
with file.lock():
    pass  # the lock file exists before the disk fills, as a job's does
with open(small / "filler", "wb", buffering=0) as filler:
    try:
        while True:
            filler.write(b"0" * 65536)
    except OSError:
        pass
file.write(Note(text="ended"))  # fits where the old record was
try:
    file.write(Note(text="x" * 20000))
    refused = None
except OSError as exc:
    refused = exc.errno
print(json.dumps({"refused": refused, "now": file.read().text}))
"""


def test_a_record_rewritten_on_a_full_disk_is_whole_or_untouched(tmp_path):
    script = tmp_path / "record.py"
    script.write_text(RECORD_ON_A_FULL_DISK)
    done = _in_a_small_filesystem(f'{sys.executable} {script} "$SMALL"', "1m")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"refused": 28, "now": "ended"}


# 9. bounds and permanent errors ---------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["--gpu_per_node", "100000"],
        ["--seed", "1e29"],
        ["--max_restarts", "1000000"],
        ["--max_steps", "99999999999"],
    ],
)
def test_out_of_range_numbers_are_bad_input(tmp_path, flags):
    status, out, err = cli("deploy_training_job", "--job_name", "b", "--runs_dir", str(tmp_path),
                           "--dry_run", "--json", *flags)  # fmt: skip
    assert (status, json.loads(out)["error"]["code"]) == (2, "invalid_input")
    assert flags[0].lstrip("-") in json.loads(out)["error"]["message"]


def test_a_config_error_is_not_restarted_and_is_the_jobs_message(tmp_path):
    # A dataset the trainer finds malformed (a missing one the plan refuses already).
    broken = tmp_path / "malformed.jsonl"
    broken.write_text("not json\n")
    state = deploy_training_job(
        job_name="cfg", runs_dir=str(tmp_path / "runs"), dataset=str(broken),
        max_restarts=5, **ONE_RANK,
    )  # fmt: skip
    assert state.status == "failed"
    assert "not restarted" in state.message and "malformed.jsonl" in state.message
    events = parse_events((tmp_path / "runs" / "cfg" / "logs" / "attempt-1.log").read_text())
    # One attempt of one rank, not six: exactly one error line.
    errors = [e for e in events if e["event"] == "error"]
    assert len(errors) == 1 and errors[0]["retryable"] is False, errors


def test_no_run_leaves_files_in_tmp(ended_job: EndedJob):
    # The shared job ran to its end with TMPDIR=inherited_tmp (tests/run_copies.py).
    assert list(ended_job.inherited_tmp.iterdir()) == []
    assert not (ended_job.run / "tmp").exists()


@pytest.fixture(autouse=True)
def _no_stray_trainers(tmp_path):
    yield
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(tmp_path) in " ".join(proc.info["cmdline"] or ()):
                os.killpg(proc.pid, signal.SIGKILL) if proc.pid == os.getpgid(proc.pid) else None


# Over MCP: the same record and the same cancel, through one server -----------------


def _mcp(calls):  # type: ignore[no-untyped-def]
    """Run `calls(client)` against one in-process server confined to nothing."""
    import anyio
    from mcp import Client

    from mcp_server.server import build_server

    async def scenario():  # type: ignore[no-untyped-def]
        async with Client(build_server()) as client:
            return await calls(client)

    return anyio.run(scenario)


def test_a_damaged_record_over_mcp_is_a_typed_error_with_a_hint(tmp_path):
    _damage(tmp_path / "bad", "not json")

    async def calls(client):  # type: ignore[no-untyped-def]
        return [
            await client.call_tool(tool, {"job_name": "bad", "runs_dir": str(tmp_path)})
            for tool in ("get_training_job", "get_training_job_logs")
        ]

    for result in _mcp(calls):
        assert result.is_error
        error = json.loads(result.content[0].text)["error"]
        assert error["code"] == "job_record_corrupt" and error["hint"]


def test_one_mcp_server_agrees_with_itself_about_a_cancel(tmp_path):
    args = {"job_name": "m", "runs_dir": str(tmp_path)}

    async def calls(client):  # type: ignore[no-untyped-def]
        started = await client.call_tool(
            "deploy_training_job", {**args, **ENDLESS, **ONE_RANK, "wait_seconds": 0}
        )
        wait_for_step(tmp_path / "m" / "logs" / "attempt-1.log")
        cancelled = await client.call_tool("cancel_training_job", {**args, "confirm": True})
        again = await client.call_tool("get_training_job", args)
        return started, cancelled, again

    started, cancelled, again = _mcp(calls)
    assert started.structured_content["status"] == "running"
    assert cancelled.structured_content["status"] == "cancelled"
    assert again.structured_content["status"] == "cancelled"


# 8. a damaged checkpoint ----------------------------------------------------------------


def test_a_damaged_newest_checkpoint_is_passed_over_and_all_damaged_is_one_line(
    adopted: Adopted,
):
    # The checkpoints: the shared ended job's step-1 and step-2, step-2's shards removed
    # (the `adopted` fixture), so its 3-step run resumed from step-1, not step-2.
    state = adopted.state
    assert (state.status, state.resumed_from, state.steps) == ("succeeded", 1, 3), state.log_tail
    for shard in adopted.checkpoints.glob("step-*/*.distcp"):
        shard.unlink()
    state = deploy_training_job(**adopted.args, max_steps=4)
    assert state.status == "failed" and "\n" not in state.message
    assert "every complete checkpoint is damaged" in state.message and len(state.message) < 600
