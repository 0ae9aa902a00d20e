"""Credentials go only where they were issued, across redirects too, and a hostile
registry cannot crash the CUDA gate (issue 30 items 3 and 10): every registry request
goes through skills.cloud.registry_http. Real HTTP servers on 127.0.0.1, two ports =
two hosts (tests/services/scripted_registry.py), record the headers they receive; the
ECR token is moto's, through the gate's own ECR lookup."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import time

import pytest

from skills.catalog.cuda import CUDA_LABEL, TORCH_LABEL
from skills.cloud.registry_credentials import RegistryLogin
from skills.ecr_publisher.push import manifest_digest
from skills.kube.gpu_nodes import NodeGpuFacts
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.targets.kubernetes import cuda_gate
from tests.services.scripted_registry import ScriptedRegistry, scripted_registry

pytestmark = pytest.mark.integration

PASSWORD = "REGISTRY-PASSWORD-" + "c4n4ry" * 4
GPU_NODE = NodeGpuFacts(
    name="gpu-1", instance_type="p5.48xlarge", ready=True, gpus_allocatable=8,
    efa_allocatable=0, driver_version="580.65.06", gpu_product=None, compute_capability=None,
)  # fmt: skip


def config_blob(labels: object) -> bytes:
    return json.dumps({"config": {"Labels": labels}}).encode()


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def manifest_for(config: bytes) -> bytes:
    return json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest_of(config), "size": len(config)},
        "layers": [],
    }).encode()  # fmt: skip


GOOD_CONFIG = config_blob({CUDA_LABEL: "12.8", TORCH_LABEL: "2.7.0"})


def serve_image(registry: ScriptedRegistry, config: bytes = GOOD_CONFIG, **options) -> None:
    """repo:v1 on `registry`: its manifest and its config blob."""
    registry.route("/v2/repo/manifests/v1", body=manifest_for(config), **options)
    registry.route(f"/v2/repo/blobs/{digest_of(config)}", body=config, **options)


def secrets_seen(registry: ScriptedRegistry, secret: str) -> list[str]:
    """Any header value that carries `secret`, plain or inside Basic's base64."""
    found = []
    for _, _, headers in registry.requests:
        for value in headers.values():
            decoded = ""
            if value.startswith("Basic "):
                decoded = base64.b64decode(value[6:] + "==").decode("utf-8", "replace")
            if secret in value or secret in decoded:
                found.append(value)
    return found


@pytest.fixture
def registry_password(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))

    def give(host: str) -> None:
        monkeypatch.setenv("REGISTRY_HOST", host)
        monkeypatch.setenv("REGISTRY_USERNAME", "robot")
        monkeypatch.setenv("REGISTRY_PASSWORD", PASSWORD)

    return give


# -- item 3: credentials stay with their host --------------------------------------------


def test_the_gates_label_read_sends_registry_password_to_no_second_host(registry_password):
    """The registry answers the authorized blob read with a 307 to another host (as a
    registry redirects to its blob store): the second host gets the request, not the
    password; the labels are read from its answer."""
    with scripted_registry() as home, scripted_registry() as other:
        registry_password(home.host)
        config_path = f"/v2/repo/blobs/{digest_of(GOOD_CONFIG)}"
        home.route("/v2/repo/manifests/v1", body=manifest_for(GOOD_CONFIG), needs_auth=True)
        home.route(config_path, 307, headers={"Location": other.url(config_path)}, needs_auth=True)
        other.route(config_path, body=GOOD_CONFIG)

        read = cuda_gate.read_image_labels(f"{home.host}/repo:v1")

    assert read.labels == {CUDA_LABEL: "12.8", TORCH_LABEL: "2.7.0"}, read
    assert read.credentials == "environment"
    assert secrets_seen(home, PASSWORD)  # the host it was issued for got it
    assert other.paths() == [config_path] and other.authorizations() == []


def test_a_redirected_manifest_read_sends_nothing_to_the_second_host(registry_password):
    with scripted_registry() as home, scripted_registry() as other:
        registry_password(home.host)
        path = "/v2/repo/manifests/v1"
        home.route(path, 302, headers={"Location": other.url(path)}, needs_auth=True)
        home.route(f"/v2/repo/blobs/{digest_of(GOOD_CONFIG)}", body=GOOD_CONFIG, needs_auth=True)
        serve_image(other)
        read = cuda_gate.read_image_labels(f"{home.host}/repo:v1")
        assert other.authorizations() == [] and other.paths()[0] == path
        assert not secrets_seen(other, PASSWORD)
    assert read.labels == {CUDA_LABEL: "12.8", TORCH_LABEL: "2.7.0"}, read


def test_a_redirect_on_the_same_host_keeps_the_credentials(registry_password):
    """Not over-cautious: a registry that moves a path on its own host still gets them."""
    with scripted_registry() as home:
        registry_password(home.host)
        serve_image(home, needs_auth=True)
        moved = {"Location": home.url("/v2/repo/manifests/v1")}
        home.route("/v2/repo/manifests/moved", 307, headers=moved, needs_auth=True)
        read = cuda_gate.read_image_labels(f"{home.host}/repo:moved")
    assert read.labels and read.labels[CUDA_LABEL] == "12.8", read
    authorized = [p for m, p, h in home.requests if "Authorization" in h]
    assert "/v2/repo/manifests/v1" in authorized


def test_the_ecr_token_goes_to_no_second_host_after_a_redirect(moto_server, monkeypatch, tmp_path):
    """The gate's ECR read: an image on the account's ECR, read from ECR's data plane
    (FSDP_EKS_ECR_REGISTRY_HOST) with moto's token; the data plane redirects the blob."""
    import boto3

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    data = boto3.client("ecr", region_name="us-east-1").get_authorization_token()
    token = base64.b64decode(data["authorizationData"][0]["authorizationToken"]).decode()
    password = token.partition(":")[2]
    with scripted_registry() as plane, scripted_registry() as other:
        monkeypatch.setenv("FSDP_EKS_ECR_REGISTRY_HOST", plane.host)
        config_path = f"/v2/repo/blobs/{digest_of(GOOD_CONFIG)}"
        plane.route("/v2/repo/manifests/v1", body=manifest_for(GOOD_CONFIG), needs_auth=True)
        plane.route(config_path, 307, headers={"Location": other.url(config_path)},
                    needs_auth=True)  # fmt: skip
        other.route(config_path, body=GOOD_CONFIG)
        read = cuda_gate.read_image_labels("123456789012.dkr.ecr.us-east-1.amazonaws.com/repo:v1")
    assert read.labels and read.credentials == "ecr", read
    assert secrets_seen(plane, password)
    assert other.paths() == [config_path] and other.authorizations() == []
    assert not secrets_seen(other, password)


def test_the_pushs_digest_check_sends_the_ecr_token_to_no_second_host():
    """The reproduction: the push's HEAD of the pushed tag followed a 307 with the token."""
    login = RegistryLogin("AWS", PASSWORD, "ecr")
    digest = "sha256:" + "ab" * 32
    with scripted_registry() as home, scripted_registry() as other:
        path = "/v2/repo/manifests/v1"
        home.route(path, 307, headers={"Location": other.url(path)})
        other.route(path, headers={"Docker-Content-Digest": digest})
        assert manifest_digest(home.host, "repo", "v1", login) == digest
        assert secrets_seen(home, PASSWORD)
        assert other.paths() == [path] and other.authorizations() == []


# -- item 10: a hostile registry is cuda_unverified, fast, never a crash -------------------


def _endless():
    return itertools.repeat(b"{" + b" " * 65535)


HOSTILE = {
    "numeric label": {"config": config_blob({CUDA_LABEL: 12.4, TORCH_LABEL: 2})},
    "labels a list": {"config": config_blob([CUDA_LABEL, "12.4"])},
    "config a list": {"config": b"[1, 2, 3]"},
    "config.config a list": {"config": json.dumps({"config": [1]}).encode()},
    "config a string": {"config": b'"12.4"'},
    "config 100k deep": {"config": b"[" * 100_000 + b"]" * 100_000},
    "manifest a list": {"manifest": b"[]"},
    "manifest config a list": {"manifest": json.dumps({"config": ["x"]}).encode()},
    "digest a number": {"manifest": json.dumps({"config": {"digest": 5}}).encode()},
    "digest a path": {"manifest": json.dumps({"config": {"digest": "../../x"}}).encode()},
    "index of numbers": {"manifest": json.dumps({"manifests": [1, 2]}).encode()},
    "index a dict": {"manifest": json.dumps({"manifests": {"a": 1}}).encode()},
    "endless manifest": {"manifest": "endless"},
    "endless config": {"config": "endless"},
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_registry_is_cuda_unverified(case):
    answer = HOSTILE[case]
    with scripted_registry() as hostile:
        config = answer.get("config", GOOD_CONFIG)
        if config == "endless":
            body = manifest_for(b"endless")
            hostile.route("/v2/repo/manifests/v1", body=body)
            hostile.route(f"/v2/repo/blobs/{digest_of(b'endless')}", body=_endless())
        elif answer.get("manifest") == "endless":
            hostile.route("/v2/repo/manifests/v1", body=_endless())
        elif "manifest" in answer:
            hostile.route("/v2/repo/manifests/v1", body=answer["manifest"])
        else:
            serve_image(hostile, config)
        started = time.monotonic()
        with pytest.raises(ToolFailure) as caught:
            cuda_gate.gate(f"{hostile.host}/repo:v1", [GPU_NODE], "p5.48xlarge")
        took = time.monotonic() - started
    failure = caught.value
    assert failure.code == "cuda_unverified", (case, failure.code, failure.message)
    assert failure.hint and "skip_gate" in failure.hint
    assert took < 20, (case, took)  # bounded: an endless body stops at the byte cap


def test_every_registry_request_goes_through_the_one_client():
    """The registry-facing skills open no HTTP connection of their own (urllib keeps
    Authorization across hosts; only skills.cloud.registry_http drops it)."""
    from pathlib import Path

    import skills

    root = Path(skills.__file__).parent
    opened = {
        str(path.relative_to(root))
        for part in ("cloud", "image_builder", "ecr_publisher", "training_job_deployer")
        for path in (root / part).rglob("*.py")
        if any(call in path.read_text() for call in ("urlopen(", "build_opener("))
    }
    assert opened == {"cloud/registry_http.py"}


# -- a slow registry is cut off at the client's deadline (issue 50) -----------------------


def _drip(chunks: int, pause_s: float):
    """A body of `chunks` 64 KB pieces, `pause_s` apart: each read of the client returns."""
    for _ in range(chunks):
        yield b" " * 65536
        time.sleep(pause_s)


@pytest.mark.parametrize(
    ("pause_s", "cut"),
    [(0.05, False), (0.5, True)],
    ids=["well-within-the-deadline", "dripping-past-it"],
)
def test_a_slow_answer_is_cut_at_the_deadline_not_read_to_its_end(monkeypatch, pause_s, cut):
    """12 pieces: 0.6 s in all is read whole; 6 s in all is cut at the 2 s deadline (the
    piece being read then ends it), not read to its end."""
    from skills.cloud import registry_http

    monkeypatch.setattr(registry_http, "DEADLINE_S", 2.0)
    with scripted_registry() as slow:
        slow.route("/v2/repo/manifests/v1", body=_drip(12, pause_s))
        started = time.monotonic()
        if not cut:
            answer = registry_http.request(slow.url("/v2/repo/manifests/v1"))
            assert len(answer.body) == 12 * 65536
            return
        with pytest.raises(registry_http.AnswerTooLarge, match="took more than 2 s"):
            registry_http.request(slow.url("/v2/repo/manifests/v1"))
        took = time.monotonic() - started
    assert 2.0 <= took < 2.0 + 2 * pause_s + 1.0, took
