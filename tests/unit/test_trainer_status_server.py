"""The stand-in of Kubeflow Trainer v2.3.0's status server (tests/services/trainer_status.py)
answers as upstream's pkg/statusserver does: over HTTPS with its CA, the token's audience,
namespace, expiry and rotation checked, the body validated as the API server validates the
TrainJob CRD's status.trainerStatus. A client here is plain http.client + ssl."""

from __future__ import annotations

import http.client
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from tests.services.trainer_status import (
    ENV_CA_CERT,
    ENV_TOKEN,
    ENV_URL,
    MAX_BODY,
    TokenIssuer,
    TrainerStatusServer,
    make_ca_file,
    token_audience,
)

NS, JOB = "team-a", "llama"
BODY = {
    "trainerStatus": {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 120,
        "metrics": [{"name": "loss", "value": "0.15"}, {"name": "step", "value": "9"}],
        "lastUpdatedTime": "2026-12-06T08:30:00.250+01:00",
    }
}


@pytest.fixture
def server():
    written: list[tuple[str, str, dict]] = []
    srv = TrainerStatusServer(on_status=lambda ns, job, status: written.append((ns, job, status)))
    srv.start()
    srv.written = written  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def env_of(srv: TrainerStatusServer, namespace: str = NS, job: str = JOB) -> dict[str, str]:
    return {e["name"]: e["value"] for e in srv.pod_env(namespace, job)}


def post(
    srv: TrainerStatusServer,
    body: Any = BODY,
    *,
    token: str | None = None,
    path: str | None = None,
    method: str = "POST",
    cafile: str | None = None,
    raw: bytes | None = None,
) -> tuple[int, dict]:
    env = env_of(srv)
    token = token if token is not None else Path(env[ENV_TOKEN]).read_text()
    context = ssl.create_default_context(cafile=cafile or env[ENV_CA_CERT])
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=context, timeout=5)
    try:
        data = raw if raw is not None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        url = path or env[ENV_URL].split(f":{srv.port}", 1)[1]
        conn.request(method, url, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def test_pod_env_names_the_variables_the_trainjobstatus_plugin_injects(server):
    env = env_of(server)
    assert (
        list(env)
        == [ENV_URL, ENV_CA_CERT, ENV_TOKEN]
        == [
            "KUBEFLOW_TRAINER_SERVER_URL",
            "KUBEFLOW_TRAINER_SERVER_CA_CERT",
            "KUBEFLOW_TRAINER_SERVER_TOKEN",
        ]
    )
    assert env[ENV_URL] == (
        f"https://127.0.0.1:{server.port}/apis/trainer.kubeflow.org/v1alpha1"
        f"/namespaces/{NS}/trainjobs/{JOB}/status"
    )
    assert Path(env[ENV_CA_CERT]).name == "ca.crt" and Path(env[ENV_TOKEN]).name == "token"
    assert Path(env[ENV_CA_CERT]).read_text().startswith("-----BEGIN CERTIFICATE-----")


def test_a_valid_post_writes_the_status_as_the_api_server_would_store_it(server):
    code, answer = post(server)
    assert code == 200
    stored = {**BODY["trainerStatus"], "lastUpdatedTime": "2026-12-06T07:30:00Z"}
    assert answer == {"trainerStatus": stored}
    assert server.written == [(NS, JOB, stored)]


def test_a_request_without_trainer_status_is_accepted_and_writes_nothing(server):
    assert post(server, {})[0] == 200
    assert server.written == []


def test_the_token_is_not_accepted_for_another_trainjob(server):
    other = Path(env_of(server, NS, "other-job")[ENV_TOKEN]).read_text()
    assert post(server, token=other) == (
        403,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": "Forbidden", "reason": "Forbidden", "code": 403},
    )  # fmt: skip
    assert server.written == []


@pytest.mark.parametrize(
    ("why", "token"),
    [
        ("another audience", lambda s: s.tokens.issue(NS, JOB, audience="trainer.kubeflow.org")),
        ("the API server's", lambda s: s.tokens.issue(NS, JOB, audience="https://kubernetes")),
        ("expired", lambda s: s.tokens.issue(NS, JOB, expires_in=-60)),
        ("another pod namespace", lambda s: s.tokens.issue(NS, JOB, pod_namespace="other")),
        ("signed by another key", lambda s: TokenIssuer().issue(NS, JOB)),
        ("not a JWT", lambda s: "not-a-token"),
        ("empty", lambda s: ""),
    ],
)  # fmt: skip
def test_a_token_the_authorizer_refuses_is_forbidden(server, why, token):
    assert post(server, token=token(server))[0] == 403, why
    assert server.written == []


def test_a_rotated_token_replaces_the_old_one_in_the_same_file(server):
    env = env_of(server)
    old = Path(env[ENV_TOKEN]).read_text()
    new = server.rotate_token(NS, JOB)
    assert Path(env[ENV_TOKEN]).read_text() == new != old
    assert post(server, token=old)[0] == 403
    assert post(server, token=new)[0] == 200


def test_a_token_rotated_before_the_first_pod_still_comes_with_the_ca(server):
    token = server.rotate_token(NS, "early")
    env = env_of(server, NS, "early")
    assert Path(env[ENV_TOKEN]).read_text() == token
    assert Path(env[ENV_CA_CERT]).read_bytes() == server.ca_file.read_bytes()


def test_a_client_that_trusts_another_ca_cannot_connect(server, tmp_path):
    wrong = make_ca_file(tmp_path / "other-ca.crt")
    with pytest.raises(ssl.SSLCertVerificationError):
        post(server, cafile=str(wrong))


def bad(status: dict) -> dict:
    return {"trainerStatus": {**BODY["trainerStatus"], **status}}


MAX = "is greater than the maximum of"
MIN = "is less than the minimum of"
STATUS = "status.trainerStatus"
RULE = "lastUpdatedTime is required when trainerStatus is present"  # the CRD's CEL message
REFUSED = [
    (bad({"progressPercentage": 101}),
     f"{STATUS}.progressPercentage: Invalid value: 101 {MAX} 100"),
    (bad({"progressPercentage": -1}), f"{STATUS}.progressPercentage: Invalid value: -1 {MIN} 0"),
    (bad({"estimatedRemainingSeconds": -5}),
     f"{STATUS}.estimatedRemainingSeconds: Invalid value: -5 {MIN} 0"),
    (bad({"metrics": [{"name": f"m{i}", "value": "1"} for i in range(257)]}),
     f"{STATUS}.metrics: Invalid value: "),
    (bad({"metrics": [{"name": "loss", "value": "1" * 65}]}),
     f"{STATUS}.metrics[0].value: Invalid value: "),
    (bad({"metrics": [{"name": "loss", "value": ""}]}),
     f"{STATUS}.metrics[0]: Invalid value: 'value' is a required property"),
    (bad({"lastUpdatedTime": None}),
     f'{STATUS}: Invalid value: "object": {RULE}'),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), REFUSED)
def test_a_status_the_crd_refuses_is_unprocessable_with_the_api_servers_message(
    server, body, message
):
    code, answer = post(server, body)
    assert code == 422 and answer["reason"] == "Invalid"
    assert answer["message"].startswith(f'TrainJob.trainer.kubeflow.org "{JOB}" is invalid: ')
    assert message in answer["message"]
    assert server.written == []


def test_256_metrics_are_the_most_a_status_may_hold(server):
    body = bad({"metrics": [{"name": f"m{i}", "value": "1"} for i in range(256)]})
    assert post(server, body)[0] == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        json.dumps(bad({"progressPercentage": 45.5})).encode(),
        json.dumps(bad({"progressPercentage": "45"})).encode(),
        json.dumps(bad({"progressPercentage": 2**31})).encode(),
        json.dumps(bad({"metrics": [{"name": "loss", "value": 0.5}]})).encode(),
        json.dumps(bad({"lastUpdatedTime": "yesterday"})).encode(),
        b"[]",
    ],
)
def test_a_body_that_does_not_decode_is_an_invalid_payload(server, raw):
    assert post(server, raw=raw)[:1] == (422,)
    assert post(server, raw=raw)[1]["message"] == "Invalid payload"


def test_a_body_over_64_kib_is_too_large(server):
    code, answer = post(server, raw=b" " * (MAX_BODY + 1))
    assert (code, answer["reason"]) == (413, "RequestEntityTooLarge")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{JOB}/status"),
        ("POST", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{JOB}"),
        ("POST", "/healthz"),
    ],
)
def test_any_other_route_is_not_found(server, method, path):
    code, answer = post(server, method=method, path=path)
    assert (code, answer["message"]) == (404, "Not found")


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (LookupError("no such TrainJob"), 404, "Train job not found"),
        (ValueError("status.trainerStatus: Forbidden"), 422, "status.trainerStatus: Forbidden"),
        (RuntimeError("etcd is down"), 500, "Internal error"),
    ],
)
def test_a_failed_write_is_answered_as_upstream_maps_the_apply_error(error, code, message):
    def fail(namespace: str, trainjob: str, status: dict) -> None:
        raise error

    with TrainerStatusServer(on_status=fail) as srv:
        answer = post(srv)
    assert (answer[0], answer[1]["message"]) == (code, message)


def test_the_audience_is_upstreams_per_trainjob_audience():
    assert token_audience("ns", "job") == (
        "trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/job/status"
    )


def test_stop_removes_the_files_it_made():
    srv = TrainerStatusServer(on_status=print)
    srv.start()
    directory = Path(env_of(srv)[ENV_TOKEN]).parent
    srv.stop()
    assert not directory.exists() and not srv.workdir.exists()
