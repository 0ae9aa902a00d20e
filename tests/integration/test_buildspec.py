"""buildspec.yml run as CodeBuild runs it: each phase's command lines in order, each
through `bash -c` (CodeBuild's own behaviour), with CodeBuild's environment variables,
against the local stack (moto, the registry via FSDP_EKS_ECR_REGISTRY_HOST, podman)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import boto3
import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHA = "0123abcd4567ef890123abcd4567ef890123abcd"
ECR_HOST = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
PHASES = ("install", "pre_build", "build", "post_build")


def _source(tmp_path: Path) -> Path:
    """The project as CodeBuild checks it out from S3/CodePipeline: files, no .git (so
    git-sha comes from CODEBUILD_RESOLVED_SOURCE_VERSION)."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    src = tmp_path / "src"
    src.mkdir()
    archive = tmp_path / "src.tar"
    with tarfile.open(archive, "w") as tar:
        for name in files:
            if (ROOT / name).is_file():
                tar.add(ROOT / name, arcname=name)
    with tarfile.open(archive) as tar:
        tar.extractall(src, filter="data")
    (src / "ci").mkdir()
    (src / "ci" / "model.txt").write_text("weights stand-in\n")
    (src / "ci" / "Dockerfile").write_text("FROM scratch\nCOPY model.txt /model.txt\n")
    return src


def test_buildspec_phases_test_build_push_and_write_image_detail(docker_api, registry, tmp_path):
    spec = yaml.safe_load((ROOT / "buildspec.yml").read_text())
    assert spec["version"] == 0.2 and set(spec["phases"]) == set(PHASES)
    install = " ".join(spec["phases"]["install"]["commands"])
    assert "torch==2.13.0+cpu" in install  # never an unpinned torch, never a CUDA one
    assert spec["reports"]["pytest"]["file-format"] == "JUNITXML"
    assert "imageDetail.json" in spec["artifacts"]["files"]

    src = _source(tmp_path)
    env = {
        **os.environ,
        **{k: str(v) for k, v in spec["env"]["variables"].items()},
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # `python` = this venv
        "CODEBUILD_RESOLVED_SOURCE_VERSION": SHA,
        "CODEBUILD_BUILD_ID": "fsdp-eks:0b5e6f1c-1111-2222-3333-444455556666",
        "CODEBUILD_SRC_DIR": str(src),
        "AWS_REGION": "us-east-1",
        "ECR_REPOSITORY": "ci/trainer",
        "TAG_STRATEGY": "git-sha",
        "TEST_LEVEL": "quick",
        "TEST_PATHS": "tests/unit/test_image_tags.py",  # a tiny subset, not the suite
        "DOCKERFILE": "ci/Dockerfile",
        "FSDP_EKS_ECR_REGISTRY_HOST": registry.host,
        "FSDP_EKS_STATE_DIR": str(tmp_path / "state"),
    }
    # install is the CPU torch, then `pip install -e .[trainer,dev]`: this venv is that.
    for phase in PHASES[1:]:
        for line in spec["phases"][phase]["commands"]:
            done = subprocess.run(["bash", "-c", line], cwd=src, env=env, capture_output=True,
                                  text=True, timeout=300, check=False)  # fmt: skip
            assert done.returncode == 0, (phase, line, done.stdout[-2000:], done.stderr[-2000:])

    tag = SHA[:7]
    assert registry.tags("ci/trainer") == [tag]
    detail = json.loads((src / "imageDetail.json").read_text())
    assert detail["ImageURI"] == f"{ECR_HOST}/ci/trainer:{tag}"
    assert detail["ImageURIWithDigest"] == f"{ECR_HOST}/ci/trainer@{detail['ImageDigest']}"
    status, manifest = registry.get(f"/v2/ci/trainer/manifests/{detail['ImageDigest']}")
    assert status == 200 and manifest["layers"]
    suite = ET.parse(src / "reports" / "junit.xml").getroot()
    assert int(suite.find("testsuite").get("tests")) > 0  # the pre_build tests reported
    repo = boto3.client("ecr").describe_repositories(repositoryNames=["ci/trainer"])
    assert repo["repositories"][0]["imageScanningConfiguration"]["scanOnPush"] is True


def test_the_install_phase_downloads_no_cuda_wheel(tmp_path):
    """Issue 51: PyPI's torch==2.13.0 pulled ~2.7 GB of CUDA wheels into every build. The
    install phase takes the CPU wheel first, the Makefile's torch, from PyTorch's CPU
    index; the project's install then finds torch satisfied: run here (this venv is what
    the torch step leaves) with pip's --dry-run --report, it installs the project alone."""
    spec = yaml.safe_load((ROOT / "buildspec.yml").read_text())
    torch_step, project_step = spec["phases"]["install"]["commands"]
    pin = re.search(r"^TORCH\s*\?=\s*torch==(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert pin is not None
    assert f"'torch=={pin[1]}+cpu' --index-url https://download.pytorch.org/whl/cpu" in torch_step
    assert "torch" not in project_step
    report = tmp_path / "report.json"
    done = subprocess.run(
        ["bash", "-c", f"{project_step} --dry-run --report {report}"],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installs = [i["metadata"]["name"] for i in json.loads(report.read_text())["install"]]
    assert installs == ["fsdp-eks"]
