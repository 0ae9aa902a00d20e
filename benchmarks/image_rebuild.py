"""What the layer cache buys a rebuild: build_image after a code-only change (train.py)
against a clean build of the same Dockerfile (its dependency layer changed, so it and
every layer after it are rebuilt), in the same run, through the product's own path
(base check through the mirror + podman's Docker API). The Dockerfile has no RUN
(containers cannot run here): the heavy layer is a COPY of a 96 MB dependency tree,
the stand-in for site-packages. Services are started as the test fixtures start them
(tests/services/podman.py, registry.py), or, with --services-in-env, the test session's
are used (benchmarks/_services.py). Prints the medians and the ratio."""

from __future__ import annotations

import base64
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._services import services  # noqa: E402

QUICK = "--quick" in sys.argv  # one round, 1 MB (the test suite runs it)
ROUNDS = 1 if QUICK else 3
DEPS_MB = 1 if QUICK else 96
LIB_MB = min(8, DEPS_MB)  # the dependency tree: files of this size
BASE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
DOCKERFILE = (
    f"FROM {BASE}\nWORKDIR /app\nCOPY deps/ /opt/deps/\nCOPY train.py /app/train.py\n"
    'CMD ["python", "/app/train.py"]\n'
)


def _push_base(client, host: str, work: Path) -> None:
    base = work / "base"
    base.mkdir()
    (base / "marker").write_text("stand-in base\n")
    (base / "Dockerfile").write_text("FROM scratch\nCOPY marker /marker\n")
    name = f"{host}/{BASE}"
    list(client.api.build(path=str(base), tag=name, decode=True, rm=True))
    repo, tag = name.rsplit(":", 1)
    pushed = list(client.api.push(repo, tag=tag, stream=True, decode=True))
    assert not [e for e in pushed if "error" in e], pushed


def _timed(build_image, project: Path, tag: str, mirror: str) -> float:
    started = time.perf_counter()
    result = build_image(dockerfile=str(project / "Dockerfile"), tag=tag, base_mirror=mirror)
    elapsed = time.perf_counter() - started
    assert result.status == "built", result.attempts
    return elapsed


def main() -> None:
    from commands.build_image import build_image
    from skills.cloud.clients import docker_client

    with (
        tempfile.TemporaryDirectory(prefix="fsdp-bench-") as tmp,
        services(with_aws=False) as up,
    ):
        work = Path(tmp)
        registry = up.registry
        config = work / "docker-config"
        config.mkdir()
        auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
        os.environ["DOCKER_CONFIG"] = str(config)
        _push_base(docker_client(), registry.host, work)

        project = work / "project"
        (project / "deps").mkdir(parents=True)
        for index in range(DEPS_MB // LIB_MB):
            (project / "deps" / f"lib{index}.so").write_bytes(os.urandom(LIB_MB << 20))
        (project / "Dockerfile").write_text(DOCKERFILE)
        (project / "train.py").write_text("print('v0')\n")
        _timed(build_image, project, "warm", registry.host)  # pulls the base once

        clean, code_only = [], []
        for round_ in range(ROUNDS):
            (project / "deps" / "version.txt").write_text(f"{round_}\n")  # deps changed
            clean.append(_timed(build_image, project, f"clean{round_}", registry.host))
            (project / "train.py").write_text(f"print('v{round_}')\n")  # code only
            code_only.append(_timed(build_image, project, f"code{round_}", registry.host))

    c, r = statistics.median(clean), statistics.median(code_only)
    print(f"clean build (deps layer + after):  median {c:.2f} s  {[round(x, 2) for x in clean]}")
    print(f"rebuild after a code-only change:  median {r:.2f} s  "
          f"{[round(x, 2) for x in code_only]}")  # fmt: skip
    print(f"rebuild / clean: {r / c:.2f} (context {DEPS_MB} MB, {ROUNDS} rounds)")


if __name__ == "__main__":
    main()
