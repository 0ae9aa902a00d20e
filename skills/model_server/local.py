"""The local target: `transformers serve` on this host, serving an exported model
directory (trainer.export: config.json, safetensors, tokenizer) behind an
OpenAI-compatible API on 127.0.0.1.

Each server lives in `<state dir>/model_servers/<name>/`: `server.json` (its record:
model, port, argv, and the process's identity: pid + start time), `server.log` (the
server's output) and `hf-cache/` (an empty hub cache, which `/v1/models` scans). The
server runs detached in its own session, so the tool call, the CLI or the MCP server
may end while it serves. It is signalled only when its pid, start time, command line
and the FSDP_EKS_MODEL_SERVER=<its server directory> marker in its environment all say
it is the server of the directory asked about (skills.operations.processes): an edited
record, or one copied into another folder or another state directory, cannot stop
anything else. The folder is never a link and its files are written through the no-link
writers (skills.shared.files), so nothing lands outside it.
"""

from __future__ import annotations

import errno
import json
import shlex
import shutil
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field

from skills.model_server.base import (
    ServerPlan,
    ServerSettings,
    ServerState,
    ServerTarget,
    smoke_chat,
    smoke_completion,
)
from skills.operations import processes
from skills.operations.operations import state_dir
from skills.operations.record_store import RecordCorrupt, RecordFile
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import open_for_append, own_directory
from skills.shared.next_step import NextStep
from skills.shared.paging import Page, keyset
from skills.shared.progress import Cancelled, Progress, raise_if_cancelled
from skills.shared.reading import ReadRefused, read_chunk
from skills.shared.secrets import redact
from skills.shared.waiting import poll_until

SERVE_MODULE = "transformers.cli.transformers"  # what the `transformers` script runs
MARKER_ENV = "FSDP_EKS_MODEL_SERVER"  # its server directory, in its process's environment
HOST = "127.0.0.1"  # no authentication in front of it: this host only
RECORD = "server.json"
LOG = "server.log"
STARTUP_TIMEOUT_S = 300.0  # loading a model on CPU can take a while; a hung start cannot
POLL_S = 0.25
STOP_GRACE_S = 10.0
LOG_TAIL_LINES = 20
LOG_TAIL_BYTES = 64 * 1024


class LocalServerAccess(ServerSettings):
    """transformers serve on this host"""

    target: Literal["local"] = "local"


class LocalServerSettings(LocalServerAccess):
    """transformers serve on this host"""

    port: Annotated[
        int | None, Field(ge=1, le=65535, description="Port (local: a free one on 127.0.0.1).")
    ] = None
    device: Annotated[
        str, Field(pattern=r"^(auto|cpu|mps|cuda(:\d{1,2})?)$", description="auto, cpu, cuda:N.")
    ] = "auto"


class ServerRecord(BaseModel):
    """Facts about one local server (never a path a tool would follow)."""

    name: str
    model: str
    port: int
    argv: list[str]
    pid: int | None = None
    pid_started: float | None = None
    started_at: float
    ready_at: float | None = None


def servers_dir() -> Path:
    return state_dir() / "model_servers"


def _marker(folder: Path) -> str:
    """What the server of `folder` carries in MARKER_ENV: the folder's real path, so two
    state directories with a server of the same name tell their processes apart."""
    return str(folder.resolve())


def _expected(folder: Path) -> processes.Expected:
    """The server process of the server directory `folder`: `-m
    transformers.cli.transformers serve` on its command line and the folder's marker in
    its environment (never what a record says its name is)."""
    return processes.Expected(
        command=("-m", SERVE_MODULE, "serve"), environment={MARKER_ENV: _marker(folder)}
    )


def check_model_dir(model: str) -> Path:
    """The exported model directory, or a typed error naming what is missing."""
    if "://" in model:
        raise ToolFailure(
            ErrorCode.UNSUPPORTED_FOR_TARGET,
            f"The local target serves a directory on this host, not {model!r}.",
            "Download the export first (`aws s3 cp --recursive`), or use target 'kubernetes'.",
            {"model": model},
        )
    path = Path(model).expanduser().resolve()
    if not path.exists():
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"Model directory {path} does not exist.",
            "Export a checkpoint first: python -m trainer.export --checkpoint "
            "runs/<job>/checkpoints --out runs/<job>/export",
            {"model": str(path)},
        )
    if not path.is_dir():
        raise ToolFailure(
            ErrorCode.NOT_A_DIRECTORY,
            f"Model {path} is not a directory.",
            "Pass the export directory (holding config.json and *.safetensors).",
            {"model": str(path)},
        )
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json")
    if not any(path.glob("*.safetensors")):
        missing.append("*.safetensors weights")
    if missing:
        raise ToolFailure(
            ErrorCode.MODEL_INVALID,
            f"{path} is not a model directory: no {' and no '.join(missing)}.",
            "Serve the output of `python -m trainer.export` (config.json, safetensors, "
            "tokenizer), not a training checkpoint.",
            {"model": str(path), "missing": missing},
        )
    return path


def check_port_free(port: int) -> None:
    """Bind it for a moment: a port someone listens on is a typed error, not a server
    that dies on start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
            raise ToolFailure(
                ErrorCode.PORT_IN_USE,
                f"Port {port} on {HOST} is already in use.",
                "Pick another port, or leave port out to use a free one.",
                {"port": port},
            ) from None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def endpoint_of(port: int) -> str:
    return f"http://{HOST}:{port}"


def curl_line(endpoint: str, model: str) -> str:
    body = smoke_chat(model)
    return shlex.join(
        [
            "curl",
            "-s",
            f"{endpoint}/v1/chat/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps(body),
        ]
    )


def http_json(url: str, body: dict[str, Any] | None = None, timeout_s: float = 5.0) -> Any:
    """GET (or POST `body`) and the decoded JSON answer; URLError/HTTPError/OSError raise."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (http only)
        return json.loads(response.read() or b"null")


def is_healthy(endpoint: str) -> bool:
    try:
        return http_json(f"{endpoint}/health", timeout_s=2.0) is not None
    except (OSError, ValueError):
        return False


def smoke_test(endpoint: str, model: str, timeout_s: float = 120.0) -> str:
    """GET /v1/models, then one short chat completion (a completion when the model has
    no chat template); what the model said, in a short excerpt."""
    try:
        http_json(f"{endpoint}/v1/models", timeout_s=timeout_s)
        try:
            answer = http_json(f"{endpoint}/v1/chat/completions", smoke_chat(model), timeout_s)
            text = answer["choices"][0]["message"]["content"]
        except urllib.error.HTTPError:  # e.g. a tokenizer without a chat template
            answer = http_json(f"{endpoint}/v1/completions", smoke_completion(model), timeout_s)
            text = answer["choices"][0]["text"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ToolFailure(
            ErrorCode.SERVICE_ERROR,
            f"The server at {endpoint} is up but its smoke request failed: {exc}",
            "Read its log (server.log under the server's state directory); the model "
            "may not load in transformers.",
            {"endpoint": endpoint},
        ) from None
    return repr(str(text)[:80])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The server log's last lines, secrets masked; none when it cannot be read (the
    bounded reader: no device, FIFO or link in place of the log)."""
    try:
        text = read_chunk(path, -LOG_TAIL_BYTES, what="server log").decode(errors="replace")
    except (OSError, ReadRefused):
        return []
    return [redact(line) for line in text.splitlines()[-lines:]]


class LocalServerTarget(ServerTarget[LocalServerSettings, LocalServerAccess]):
    name: ClassVar[str] = "local"
    settings_model: ClassVar[type[ServerSettings]] = LocalServerSettings

    # --- where a server lives ---------------------------------------------------------

    def _dir(self, name: str) -> Path:
        """The server's folder; a link or a file in its place is refused (what is written
        there, the log above all, would land behind the link)."""
        folder = servers_dir() / name
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise ToolFailure(
                ErrorCode.PATH_NOT_ALLOWED,
                f"{folder} is a link or not a directory, not the folder of a model server.",
                "Remove it yourself (the tool neither follows nor deletes it), then deploy again.",
                {"name": name, "path": str(folder)},
            )
        return folder

    def _file(self, name: str) -> RecordFile[ServerRecord]:
        return RecordFile(self._dir(name) / RECORD, ServerRecord)

    def _read(self, name: str) -> ServerRecord | None:
        try:
            record = self._file(name).read()
            if record is not None and record.name != name:  # copied from another folder
                raise RecordCorrupt(self._file(name).path, f"it names server {record.name!r}")
            return record
        except RecordCorrupt as exc:
            raise ToolFailure(
                ErrorCode.JOB_RECORD_CORRUPT,
                f"The record of model server {name!r} is unreadable: {exc.reason}.",
                "delete_model_server with confirm=true removes it (no process is signalled).",
                {"name": name},
            ) from None

    def _identity(self, record: ServerRecord) -> processes.Identity:
        """The record's process as the server of the folder it was read from."""
        expected = _expected(self._dir(record.name))
        return processes.identify(record.pid, record.pid_started, expected)

    # --- plan / deploy ----------------------------------------------------------------

    def plan(self, name: str, model: str, settings: LocalServerSettings) -> ServerPlan:
        path = check_model_dir(model)
        running = self._read(name)
        if running is not None and not self._alive(running):
            running = None
        port = settings.port
        if port is None:  # the running server's own port, else a free one
            port = running.port if running is not None else free_port()
        elif running is None or running.port != port:
            check_port_free(port)  # (a running server of this name holds it itself)
        argv = processes.python_argv(SERVE_MODULE, "serve", str(path), "--host", HOST)
        argv += ["--port", str(port), "--device", settings.device, "--log-level", "info"]
        folder = self._dir(name)
        process = {
            "kind": "Process",
            "endpoint": endpoint_of(port),
            "port": port,
            "state_dir": str(folder),
            "log": str(folder / LOG),
        }
        return ServerPlan(
            name=name, model=str(path), target=self.name, objects=[process], argv=argv
        )

    def _alive(self, record: ServerRecord) -> bool:
        return self._identity(record) is processes.Identity.OURS

    def deploy(
        self,
        plan: ServerPlan,
        settings: LocalServerSettings,
        progress: Progress,
        wait_seconds: float | None,
    ) -> ServerState:
        name, port = plan.name, int(plan.objects[0]["port"])
        own_directory(self._dir(name))
        file = self._file(name)
        with file.lock():  # one deploy or delete of a name at a time
            running = self._read(name)
            if running is not None and self._alive(running):
                if running.model == plan.model and running.port == port:
                    return self.get(name, settings).model_copy(
                        update={"message": "already running; nothing started"}
                    )
                raise ToolFailure(
                    ErrorCode.CONFLICT,
                    f"Model server {name!r} already serves {running.model} on port {running.port}.",
                    "Delete it first, or deploy under another name.",
                    {"name": name, "model": running.model, "port": running.port},
                    next_step=NextStep(
                        tool="delete_model_server",
                        arguments={"name": name, "confirm": True},
                        why="stop the running server",
                    ),
                )
            check_port_free(port)
            record = self._start(plan)
            file.write(record)
        try:
            return self._follow(record, settings, progress, wait_seconds)
        except (KeyboardInterrupt, Cancelled):  # Ctrl-C, a cancelled operation: stop it too
            self._stop(record)
            raise

    def _start(self, plan: ServerPlan) -> ServerRecord:
        folder = self._dir(plan.name)
        cache = own_directory(folder / "hf-cache")
        open_for_append(folder / LOG, truncate=True).close()  # this start's output only
        env = {
            MARKER_ENV: _marker(folder),
            "HF_HUB_CACHE": str(cache),  # /v1/models scans it; it must exist
            "HF_HUB_OFFLINE": "1",  # a local directory needs no hub; never hang on one
        }
        started_at = time.time()
        module = plan.argv.index("-m") + 1  # the plan's own argv: module and arguments
        pid = processes.spawn_module(*plan.argv[module:], log=folder / LOG, env=env)
        return ServerRecord(
            name=plan.name,
            model=plan.model,
            port=int(plan.objects[0]["port"]),
            argv=plan.argv,
            pid=pid,
            pid_started=processes.start_time(pid),
            started_at=started_at,
        )

    def _follow(
        self,
        record: ServerRecord,
        settings: LocalServerSettings,
        progress: Progress,
        wait_seconds: float | None,
    ) -> ServerState:
        """Poll /health until ready (or the process ends, or the wait is over), then
        smoke-test it."""
        endpoint = endpoint_of(record.port)

        def probe() -> str:
            raise_if_cancelled(progress)
            if not self._alive(record):
                return "exited"
            if is_healthy(endpoint):
                return "ready"
            progress.report(
                0,
                None,
                f"loading {Path(record.model).name} ({time.time() - record.started_at:.0f} s)",
            )
            return "starting"

        timeout = STARTUP_TIMEOUT_S if wait_seconds is None else wait_seconds
        outcome = poll_until(probe, lambda s: s != "starting", timeout, POLL_S)
        if outcome == "exited":
            raise self._exited(record)
        if outcome == "starting":
            if wait_seconds is None:  # the whole startup allowance: a hung server
                self._stop(record)
                raise ToolFailure(
                    ErrorCode.LAUNCH_FAILED,
                    f"Model server {record.name!r} was not ready within "
                    f"{STARTUP_TIMEOUT_S:.0f} s; it was stopped.",
                    "Read the log tail in details; a large model on CPU may need a GPU.",
                    {"log_tail": log_tail(self._dir(record.name) / LOG)},
                )
            return self.get(record.name, settings)
        ready_at = time.time()
        progress.report(1, 2, f"ready in {ready_at - record.started_at:.1f} s; smoke request")
        smoke = smoke_test(endpoint, record.model)
        self._file(record.name).update(
            lambda r: None if r is None else r.model_copy(update={"ready_at": ready_at})
        )
        progress.report(2, 2, f"answered {smoke}")
        state = self.get(record.name, settings)
        return state.model_copy(
            update={
                "smoke": smoke,
                "message": f"ready in {ready_at - record.started_at:.1f} s",
            }
        )

    def _exited(self, record: ServerRecord) -> ToolFailure:
        tail = log_tail(self._dir(record.name) / LOG)
        last = next((line for line in reversed(tail) if line.strip()), "no output")
        return ToolFailure(
            ErrorCode.SERVER_EXITED,
            f"Model server {record.name!r} exited before it was ready: {last[:200]}",
            "Read the log tail in details, fix the cause, then deploy again.",
            {"name": record.name, "log_tail": tail},
        )

    # --- get / list -------------------------------------------------------------------

    def get(self, name: str, settings: LocalServerAccess) -> ServerState:
        record = self._read(name)
        if record is None:
            raise ToolFailure(
                ErrorCode.NOT_FOUND,
                f"No local model server named {name!r}.",
                "list_model_servers shows the servers this host runs.",
                {"name": name},
                next_step=NextStep(
                    tool="list_model_servers",
                    arguments={"target": "local"},
                    why="the servers on this host",
                ),
            )
        return self._state(record)

    def _state(self, record: ServerRecord) -> ServerState:
        endpoint = endpoint_of(record.port)
        common: dict[str, Any] = {
            "name": record.name,
            "target": self.name,
            "model": record.model,
            "replicas": 1,
        }
        identity = self._identity(record)
        if identity is not processes.Identity.OURS:
            tail = log_tail(self._dir(record.name) / LOG, 5)
            said = "its process has ended; "
            if identity is processes.Identity.FOREIGN:  # pid and start time: another's
                said = (
                    f"the server is gone: its pid {record.pid} was reused and now belongs "
                    "to another process (not ours, never signalled); "
                )
            return ServerState(
                **common,
                status="failed",
                ready_replicas=0,
                message=said + " | ".join(tail)[-300:],
                next_step=NextStep(
                    tool="delete_model_server",
                    arguments={"name": record.name, "confirm": True},
                    why="remove its record",
                ),
            )
        ready = is_healthy(endpoint)
        return ServerState(
            **common,
            status="ready" if ready else "starting",
            ready_replicas=1 if ready else 0,
            endpoint=endpoint,
            curl=curl_line(endpoint, record.model),
            message=f"pid {record.pid}, log {self._dir(record.name) / LOG}",
        )

    def list(
        self, settings: LocalServerAccess, limit: int | None = None, cursor: str | None = None
    ) -> Page[ServerState]:
        root = servers_dir()
        folders = [  # a stray file is not a server (a link is listed, as refused)
            folder
            for folder in (root.iterdir() if root.is_dir() else ())
            if folder.is_dir() or folder.is_symlink()
        ]
        page, more, last = keyset(folders, lambda f: (f.name,), limit, cursor)
        found = []
        for folder in page:
            try:
                record = self._read(folder.name)
            except ToolFailure as failure:
                found.append(
                    ServerState(
                        name=folder.name, target=self.name, status="failed", message=failure.message
                    )
                )
                continue
            if record is not None:
                found.append(self._state(record))
        return Page(found, more, last)

    # --- delete / scale ---------------------------------------------------------------

    def delete(self, name: str, settings: LocalServerAccess) -> ServerState:
        file = self._file(name)  # a link in the folder's place: refused, not followed
        if not file.path.parent.is_dir():
            self.get(name, settings)  # not_found, with its next step
        with file.lock():
            try:
                record = self._read(name)
            except ToolFailure:  # a damaged record: nothing to identify, nothing signalled
                record = None
            said = "its record removed"
            if record is not None:
                identity = self._identity(record)
                if identity is processes.Identity.OURS:
                    self._stop(record)
                    said = f"process {record.pid} stopped; " + said
                elif identity is processes.Identity.FOREIGN:
                    said = f"pid {record.pid} now belongs to another process (not signalled); "
                    said += "its record removed"
            shutil.rmtree(file.path.parent, ignore_errors=True)
        return ServerState(
            name=name,
            target=self.name,
            status="deleted",
            model=record.model if record else "",
            replicas=0,
            ready_replicas=0,
            message=said,
        )

    def _stop(self, record: ServerRecord) -> None:
        """SIGTERM to the server's process group, SIGKILL after the grace period."""
        expected = _expected(self._dir(record.name))
        processes.stop_group(record.pid, record.pid_started, expected, STOP_GRACE_S)

    def scale(self, name: str, replicas: int, settings: LocalServerSettings) -> ServerState:
        if replicas == 1:  # what it already runs
            return self.get(name, settings)
        return super().scale(name, replicas, settings)
