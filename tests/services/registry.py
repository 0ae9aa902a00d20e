"""ECR data-plane stand-in: the real distribution registry (Debian `docker-registry`).

    with registry_server(username="AWS", password=pw) as reg:
        reg.host       # "localhost:PORT": tag and log in with this name (not 127.0.0.1)
        reg.tags("smoke")

Listens on 127.0.0.1 only, plain HTTP, htpasswd auth with one user, storage in a temp dir.
Clients that push over HTTP must treat `reg.host` as an insecure registry (see podman.py).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ._common import find_binary, free_port, stop_process, wait_until

APT_PACKAGE = "docker-registry"


def check() -> str:
    """The registry binary, or MissingBinary with the apt hint."""
    return find_binary("docker-registry", "registry", apt=APT_PACKAGE)


@dataclass
class RegistryService:
    host: str  # "localhost:PORT"
    url: str  # "http://127.0.0.1:PORT"
    port: int
    username: str
    password: str
    storage: Path

    def get(self, path: str) -> tuple[int, dict]:
        """GET `self.url + path` with basic auth; (status, JSON body or {})."""
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        request = urllib.request.Request(
            self.url + path,
            headers={
                "Authorization": f"Basic {auth}",
                "Accept": "application/vnd.oci.image.manifest.v1+json, "
                "application/vnd.docker.distribution.manifest.v2+json, application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read()
                return response.status, (json.loads(body) if body else {})
        except urllib.error.HTTPError as exc:
            return exc.code, {}

    def tags(self, repository: str) -> list[str]:
        """Tags of `repository` ([] when it does not exist)."""
        status, body = self.get(f"/v2/{repository}/tags/list")
        return list(body.get("tags") or []) if status == 200 else []

    def tag(self, repository: str, tag: str, new_tag: str) -> None:
        """`repository:new_tag` names the manifest `repository:tag` names (as `crane tag`
        does: its bytes read and put back under the new tag; no blob moves)."""
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        accept = ("application/vnd.oci.image.manifest.v1+json, "
                  "application/vnd.docker.distribution.manifest.v2+json")  # fmt: skip
        url = f"{self.url}/v2/{repository}/manifests/"
        read = urllib.request.Request(url + tag, headers={"Authorization": f"Basic {auth}",
                                                          "Accept": accept})  # fmt: skip
        with urllib.request.urlopen(read, timeout=10) as response:
            manifest, kind = response.read(), response.headers["Content-Type"]
        write = urllib.request.Request(url + new_tag, data=manifest, method="PUT", headers={
            "Authorization": f"Basic {auth}", "Content-Type": kind})  # fmt: skip
        with urllib.request.urlopen(write, timeout=10):
            pass

    def push_labelled_image(self, repository: str, tag: str, labels: dict[str, str]) -> str:
        """An image that is only its config (labels) and manifest, pushed over the
        registry's HTTP API as a build would push it (the CUDA gate reads no layer);
        its reference `host/repository:tag`."""
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()

        def call(method: str, url: str, body: bytes = b"", content_type: str = "") -> dict:
            request = urllib.request.Request(url, data=body or None, method=method)
            request.add_header("Authorization", f"Basic {auth}")
            if content_type:
                request.add_header("Content-Type", content_type)
            with urllib.request.urlopen(request, timeout=10) as response:
                return dict(response.headers)

        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": labels},
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()  # fmt: skip
        digest = "sha256:" + hashlib.sha256(config).hexdigest()
        location = call("POST", f"{self.url}/v2/{repository}/blobs/uploads/")["Location"]
        location = location if location.startswith("http") else self.url + location
        joiner = "&" if "?" in location else "?"
        call("PUT", f"{location}{joiner}digest={digest}", config, "application/octet-stream")
        manifest_type = "application/vnd.docker.distribution.manifest.v2+json"
        config_type = "application/vnd.docker.container.image.v1+json"
        manifest = json.dumps({"schemaVersion": 2, "mediaType": manifest_type, "layers": [],
                               "config": {"mediaType": config_type, "size": len(config),
                                          "digest": digest}}).encode()  # fmt: skip
        call("PUT", f"{self.url}/v2/{repository}/manifests/{tag}", manifest, manifest_type)
        return f"{self.host}/{repository}:{tag}"


def _config(port: int, storage: Path, htpasswd: Path) -> str:
    # JSON is YAML; the registry reads it as its config.yml.
    return json.dumps(
        {
            "version": 0.1,
            "log": {"level": "error", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(storage)},
                "delete": {"enabled": True},
                "maintenance": {"uploadpurging": {"enabled": False}},
            },
            "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)},
            "auth": {"htpasswd": {"realm": "basic-realm", "path": str(htpasswd)}},
        },
        indent=2,
    )


def _answers_v2(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v2/", timeout=1):
            return True
    except urllib.error.HTTPError as exc:  # 401: up, and asking for credentials
        return exc.code == 401


@contextlib.contextmanager
def registry_server(
    *, username: str = "AWS", password: str, timeout: float = 20.0
) -> Iterator[RegistryService]:
    """Run `docker-registry serve` on 127.0.0.1:<free port> until the block exits."""
    import bcrypt

    binary = check()
    with tempfile.TemporaryDirectory(prefix="fsdp-registry-") as tmp:
        root = Path(tmp)
        storage = root / "storage"
        storage.mkdir()
        htpasswd = root / "htpasswd"
        # Cost 4 (bcrypt's minimum): the registry checks the hash on EVERY request, and a push
        # makes dozens; the default cost 12 adds ~0.25 s to each of them.
        digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
        htpasswd.write_text(f"{username}:{digest}\n")
        log = root / "registry.log"

        for attempt in range(3):  # the free port can be taken between probe and bind
            port = free_port()
            config = root / "config.yml"
            config.write_text(_config(port, storage, htpasswd))
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [binary, "serve", str(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            url = f"http://127.0.0.1:{port}"
            try:
                wait_until(
                    lambda url=url: _answers_v2(url),
                    timeout=timeout,
                    what="docker-registry",
                    process=process,
                    log=log,
                )
                break
            except Exception:
                stop_process(process)
                if attempt == 2 or "address already in use" not in log.read_text(errors="replace"):
                    raise
        try:
            yield RegistryService(
                host=f"localhost:{port}",
                url=url,
                port=port,
                username=username,
                password=password,
                storage=storage,
            )
        finally:
            stop_process(process)
