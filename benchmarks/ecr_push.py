"""push_to_ecr against `podman push` of the same kind of image, in the same run: a ~100 MB
image (FROM scratch + a 96 MB COPY of random bytes) pushed to the local registry (user
AWS, password = moto's ECR token) through podman's Docker API by the tool (repository
ensured in moto, ECR login, stream checks, digest HEAD), and by the podman CLI on the
same storage. Each push gets a freshly built image (new random bytes: no blob reuse)
and its own repository. Services start as the test fixtures start them (or, with
--services-in-env, the test session's are used: benchmarks/_services.py). Prints the
medians and the ratio."""

from __future__ import annotations

import base64
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._services import services  # noqa: E402

QUICK = "--quick" in sys.argv  # one round, 1 MB (the test suite runs it)
ROUNDS = 1 if QUICK else 3
PAYLOAD_MB = 1 if QUICK else 96


def _build(client, work: Path, name: str) -> None:
    context = work / name.replace(":", "_").replace("/", "_")
    context.mkdir()
    (context / "payload.bin").write_bytes(os.urandom(PAYLOAD_MB << 20))
    (context / "Dockerfile").write_text("FROM scratch\nCOPY payload.bin /payload.bin\n")
    out = list(client.api.build(path=str(context), tag=name, decode=True, rm=True))
    assert not [e for e in out if "error" in e or "errorDetail" in e], out[-3:]
    (context / "payload.bin").unlink()


def main() -> None:
    from commands.push_to_ecr import push_to_ecr
    from skills.cloud.clients import docker_client

    run = secrets.token_hex(3)  # repositories of this run (the registry may be shared)
    with services(with_aws=True) as up, tempfile.TemporaryDirectory(prefix="fsdp-bench-") as tmp:
        registry = up.registry
        user, password = registry.username, registry.password
        work = Path(tmp)
        client = docker_client()  # the tool's own client (its API version from /_ping)
        authfile = work / "auth.json"
        auth = base64.b64encode(f"{user}:{password}".encode()).decode()
        authfile.write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
        storage = up.engine_storage
        podman = ["podman", "--root", str(storage / "root"), "--runroot",
                  str(storage / "runroot"), "--tmpdir", str(storage / "libpod"),
                  "--events-backend", "file", "--cgroup-manager", "cgroupfs"]  # fmt: skip

        tool_s, cli_s, api_s = [], [], []
        for round_ in range(ROUNDS):
            image = f"bench-tool-{run}:r{round_}"
            _build(client, work, image)
            started = time.perf_counter()
            result = push_to_ecr(image=image, repository=f"tool{run}-{round_}",
                                 region="us-east-1", registry_host=registry.host)  # fmt: skip
            tool_s.append(time.perf_counter() - started)
            assert result.bytes_pushed >= PAYLOAD_MB << 20, result

            ref = f"{registry.host}/cli{run}-{round_}:r{round_}"
            _build(client, work, ref)
            started = time.perf_counter()
            subprocess.run([*podman, "push", "--tls-verify=false", "--authfile",
                            str(authfile), "--quiet", ref], check=True)  # fmt: skip
            cli_s.append(time.perf_counter() - started)
            assert registry.tags(f"cli{run}-{round_}") == [f"r{round_}"]

            ref = f"{registry.host}/api{run}-{round_}"  # the bare Engine API push the tool makes
            _build(client, work, f"{ref}:r{round_}")
            started = time.perf_counter()
            login = {"username": user, "password": password}
            stream = client.api.push(ref, tag=f"r{round_}", stream=True, decode=True,
                                     auth_config=login)  # fmt: skip
            out = list(stream)
            api_s.append(time.perf_counter() - started)
            assert not [e for e in out if "error" in e], out

    t, c = statistics.median(tool_s), statistics.median(cli_s)
    print(f"push_to_ecr (tool):  median {t:.2f} s  {[round(x, 2) for x in tool_s]}")
    print(f"podman push (CLI):   median {c:.2f} s  {[round(x, 2) for x in cli_s]}")
    a = statistics.median(api_s)
    print(f"Engine API push:     median {a:.2f} s  {[round(x, 2) for x in api_s]}")
    print(f"tool / podman push: {t / c:.2f}; Engine API push / podman push: {a / c:.2f} "
          f"({PAYLOAD_MB} MB image, {ROUNDS} rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
