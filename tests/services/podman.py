"""Docker Engine API stand-in: `podman system service` on a private unix socket.

    with podman_service(insecure_registries=[reg.host]) as engine:
        os.environ.update(engine.env)     # DOCKER_HOST=unix:///tmp/fsdp-podman-.../podman.sock
        docker.from_env().images.build(...)

Each service has its own image storage (--root/--runroot/--tmpdir in a temp dir) and its
own registries.conf, handed to podman through CONTAINERS_REGISTRIES_CONF: nothing under
/etc is written, so it needs no root for configuration, leaves nothing behind after a
crash, and parallel sessions cannot see each other's registries. Registries must be known
before the service starts (podman reads registries.conf once), hence `insecure_registries`.

What works through the API here: build (Dockerfiles without RUN), tag, push, inspect,
list, remove. RUN steps, `docker run` and pulls from the internet do not work here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import find_binary, stop_process, wait_until

APT_PACKAGE = "podman"

# Variables that would send the docker SDK elsewhere (TLS, contexts) or to a developer's
# credential helpers (config.json "credsStore": "desktop") instead of this service.
_UNSET = ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT")


def check() -> str:
    """The podman binary, or MissingBinary with the apt hint."""
    return find_binary("podman", apt=APT_PACKAGE)


@dataclass
class PodmanService:
    docker_host: str  # "unix:///.../podman.sock"
    socket: Path
    root: Path  # image storage (--root)
    insecure_registries: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = _UNSET
    api_version: str | None = None  # what the service said at start (GET /version)

    def client(self) -> Any:
        """A docker SDK client for the tests' own calls (stand-in bases, reading labels back),
        at the API version read once at start. A client made without one asks /version
        first, which podman answers by querying dpkg: about 0.5 CPU-s and 2 s each. The
        product's own client still asks (skills.cloud.clients.docker_client); DOCKER_CONFIG
        is read from the environment, as docker.from_env() does."""
        import docker

        return docker.DockerClient(base_url=self.docker_host, version=self.api_version)


def _registries_conf(insecure: Iterable[str]) -> str:
    # Short names resolve to docker.io, as with Docker Engine.
    lines = ['unqualified-search-registries = ["docker.io"]', ""]
    for location in insecure:
        lines += ["[[registry]]", f'location = "{location}"', "insecure = true", ""]
    return "\n".join(lines)


def _ping(docker_host: str, versions: list[str]) -> bool:
    import docker

    # Not 2 s: the SDK's first call is /version, which podman answers after asking dpkg
    # about its packages, 3 s and more on a loaded machine.
    client = docker.DockerClient(base_url=docker_host, timeout=15)
    try:
        versions.append(client.api.api_version)
        return bool(client.ping())
    finally:
        client.close()


def _unmount_below(path: Path) -> None:
    """Undo the mounts podman's overlay driver leaves (as root) so the dir can be removed."""
    if os.geteuid() != 0:
        return  # rootless podman mounts inside its own user namespace
    prefix = str(path.resolve())
    try:
        with open("/proc/self/mounts") as mounts:
            points = [line.split()[1] for line in mounts]
    except OSError:
        return
    points = [p.encode().decode("unicode_escape") for p in points]  # "\040" -> " "
    inside = [p for p in points if p == prefix or p.startswith(prefix + "/")]
    for point in sorted(inside, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


@contextlib.contextmanager
def podman_service(
    *,
    insecure_registries: Iterable[str] = (),
    storage_driver: str | None = None,
    timeout: float = 30.0,
) -> Iterator[PodmanService]:
    """Run `podman system service --time=0` with its own storage until the block exits."""
    binary = check()
    insecure = tuple(insecure_registries)
    tmp = Path(tempfile.mkdtemp(prefix="fsdp-podman-"))  # short: a socket path has <108 bytes
    process: subprocess.Popen[bytes] | None = None
    try:
        (tmp / "docker-config").mkdir()
        registries_conf = tmp / "registries.conf"
        registries_conf.write_text(_registries_conf(insecure))
        sock = tmp / "podman.sock"
        docker_host = f"unix://{sock}"
        log = tmp / "podman.log"
        command = [binary]
        for flag, value in {
            "--root": tmp / "root",
            "--runroot": tmp / "runroot",
            "--tmpdir": tmp / "libpod",
            "--events-backend": "file",
            "--cgroup-manager": "cgroupfs",
        }.items():
            command += [flag, str(value)]
        if storage_driver:
            command += ["--storage-driver", storage_driver]
        command += ["system", "service", "--time=0", docker_host]
        env = dict(os.environ)
        env["CONTAINERS_REGISTRIES_CONF"] = str(registries_conf)
        env["REGISTRY_AUTH_FILE"] = str(tmp / "auth.json")  # logins stay in this service
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        versions: list[str] = []
        wait_until(
            lambda: _ping(docker_host, versions),
            timeout=timeout,
            what="podman system service",
            process=process,
            log=log,
        )
        yield PodmanService(
            docker_host=docker_host,
            socket=sock,
            root=tmp / "root",
            insecure_registries=insecure,
            env={"DOCKER_HOST": docker_host, "DOCKER_CONFIG": str(tmp / "docker-config")},
            api_version=versions[-1],
        )
    finally:
        if process is not None:
            stop_process(process)
        _unmount_below(tmp)
        subprocess.run(["rm", "-rf", "--one-file-system", str(tmp)], check=False)


# --- the podman CLI, for what the Docker API cannot do here (RUN steps, mounting) --------


@dataclass
class PodmanCli:
    """`podman` with this block's own storage (plus read-only image stores) and registries."""

    binary: str
    root: Path  # graphroot
    env: dict[str, str]
    tmpdir: Path

    def __call__(
        self, *args: str, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [self.binary, "--events-backend", "file", "--cgroup-manager", "cgroupfs"]
        command += ["--tmpdir", str(self.tmpdir), *args]
        done = subprocess.run(command, capture_output=True, text=True, env=self.env,
                              timeout=timeout, check=False)  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])} failed ({done.returncode}):\n"
                               f"{done.stdout[-3000:]}{done.stderr[-3000:]}")  # fmt: skip
        return done


def _storage_conf(root: Path, runroot: Path, image_stores: Iterable[Path]) -> str:
    stores = ", ".join(f'"{p}"' for p in image_stores)
    return "\n".join([
        "[storage]", 'driver = "overlay"', f'graphroot = "{root}"', f'runroot = "{runroot}"',
        "[storage.options]", f"additionalimagestores = [{stores}]", "",
    ])  # fmt: skip


@contextlib.contextmanager
def podman_cli(
    *, image_stores: Iterable[Path] = (), insecure_registries: Iterable[str] = ()
) -> Iterator[PodmanCli]:
    """The podman CLI on private storage in a temp dir, removed after the block.

    `image_stores`: podman stores whose images it may use read-only (additionalimagestores;
    given through CONTAINERS_STORAGE_CONF, as podman ignores them next to --root)."""
    binary = check()
    tmp = Path(tempfile.mkdtemp(prefix="fsdp-podcli-"))
    try:
        (tmp / "libpod").mkdir()
        conf = tmp / "storage.conf"
        conf.write_text(_storage_conf(tmp / "root", tmp / "runroot", image_stores))
        registries_conf = tmp / "registries.conf"
        registries_conf.write_text(_registries_conf(tuple(insecure_registries)))
        env = {k: v for k, v in os.environ.items() if k not in _UNSET}
        env["CONTAINERS_STORAGE_CONF"] = str(conf)
        env["CONTAINERS_REGISTRIES_CONF"] = str(registries_conf)
        env["REGISTRY_AUTH_FILE"] = str(tmp / "auth.json")
        yield PodmanCli(binary=binary, root=tmp / "root", env=env, tmpdir=tmp / "libpod")
    finally:
        _unmount_below(tmp)
        subprocess.run(["rm", "-rf", "--one-file-system", str(tmp)], check=False)
