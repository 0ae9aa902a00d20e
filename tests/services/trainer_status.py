"""A stand-in of Kubeflow Trainer v2.3.0's TrainJob status server (the `TrainJobStatus`
feature gate), on 127.0.0.1 with a CA of its own, for the trainer's progress poster and
the Trainer v2 stand-in (tests/services/trainer_v2.py) to use:

    server = TrainerStatusServer(on_status=write)   # write(namespace, trainjob, trainer_status)
    server.start()
    env = server.pod_env("ns", "job")                # what the controller injects
    server.rotate_token("ns", "job")                 # the kubelet rotating the projected token
    server.stop()

What follows upstream (kubeflow/trainer at tag v2.3.0; file each behaviour comes from):
- pkg/statusserver/utils.go: the one route, POST
  /apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status, and
  the token audience trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status.
- pkg/statusserver/server.go: HTTPS only; a 64 KiB body limit (413); auth before the body
  is read (403 "Forbidden"); a body that does not decode into UpdateTrainJobStatusRequest
  is 422 "Invalid payload"; no trainerStatus is 200 and writes nothing; the status is
  applied server-side (field manager "trainer-status", force), whose validation errors
  come back as 422 with the API server's message, a missing TrainJob as 404, anything
  else as 500; success echoes the decoded request; errors are metav1.Status JSON; every
  other path and method is 404 "Not found" (its "/" handler).
- pkg/statusserver/auth.go: an RFC 7235 bearer credential, a JWT whose signature, issuer,
  expiry and audience are verified (go-oidc there), then its `kubernetes.io.namespace`
  claim must be the TrainJob's namespace.
- pkg/runtime/framework/plugins/trainjobstatus/trainjobstatus.go: the env the controller
  upserts into every trainer container (KUBEFLOW_TRAINER_SERVER_URL, the status URL;
  KUBEFLOW_TRAINER_SERVER_CA_CERT and KUBEFLOW_TRAINER_SERVER_TOKEN, file paths in the
  projected volume), tokens of 3600 s.
- The request body is validated as the API server validates the applied status: the
  vendored v2.3.0 TrainJob CRD's `status.trainerStatus` schema (progressPercentage 0-100,
  estimatedRemainingSeconds >= 0, at most 256 metrics, names and values of 1-64
  characters) and its CEL rule (lastUpdatedTime is required).

Simplified, and why:
- Tokens are issued by this stand-in, not by a kube-apiserver through a projected
  ServiceAccount volume: kmock has no token issuer or OIDC discovery. They are RS256 JWTs
  with the claims such a token has (iss, sub, aud, exp, iat, nbf, kubernetes.io), and
  they are verified as upstream verifies them (signature, issuer, audience, expiry,
  namespace), against this stand-in's own key instead of the cluster's JWKS.
- One token file per TrainJob, not one per pod: the pods share this host, and upstream's
  check binds a token to the TrainJob (audience) and namespace, never to a pod.
- rotate_token revokes the token it replaces. A kubelet's rotated-out token stays valid
  until it expires (an hour); revoking it at once makes a poster that cached its token
  fail visibly, which is what rotation tests need to see.
- The URL is https://127.0.0.1:<port>/..., not the controller Service's DNS name, and the
  files live under a directory of this stand-in, not /var/run/secrets/kubeflow/trainer:
  the pods run on this host.
"""

from __future__ import annotations

import datetime
import functools
import gzip
import http.server
import ipaddress
import json
import re
import shutil
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import jwt
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from tests.services._common import serving

ROOT = Path(__file__).resolve().parents[2]
CRD = (
    ROOT / "skills/training_job_deployer/targets/trainjob/crds"
    / "trainer.kubeflow.org_trainjobs.v2.3.0.yaml.gz"
)  # fmt: skip

# trainjobstatus.go
ENV_URL = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_CA_CERT = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
CA_CERT_FILE = "ca.crt"
TOKEN_FILE = "token"
TOKEN_EXPIRY_S = 3600
# server.go
MAX_BODY = 1 << 16
READ_TIMEOUT_S = 10
DRAIN_MAX = 256 << 10  # net/http's maxPostHandlerReadBytes
FIELD_MANAGER = "trainer-status"
# utils.go
TOKEN_AUDIENCE_PREFIX = "trainer.kubeflow.org"
STATUS_PATH = re.compile(
    r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/(?P<namespace>[^/]+)"
    r"/trainjobs/(?P<name>[^/]+)/status$"
)
# A kube-apiserver's default service-account issuer (--service-account-issuer).
ISSUER = "https://kubernetes.default.svc.cluster.local"
# The CRD's one CEL rule on trainerStatus, implemented below (a new rule upstream must
# be implemented here too: load_trainer_status_schema refuses a CRD with another).
CEL_RULE = "has(self.lastUpdatedTime)"
INT32_MAX = 2**31 - 1
# Go's time.RFC3339 as time.Parse accepts it (fractional seconds allowed).
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")

OnStatus = Callable[[str, str, dict[str, Any]], object]


def token_audience(namespace: str, name: str) -> str:
    """utils.go TokenAudience."""
    return f"{TOKEN_AUDIENCE_PREFIX}/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def status_path(namespace: str, name: str) -> str:
    """utils.go StatusUrl."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


@functools.cache
def load_trainer_status_schema(crd: Path = CRD) -> tuple[dict[str, Any], str]:
    """The vendored CRD's `status.trainerStatus` schema and its CEL rule's message (read
    once a process: the CRD is 6,000 lines of YAML)."""
    doc = yaml.load(gzip.decompress(crd.read_bytes()), Loader=yaml.CSafeLoader)
    version = next(v for v in doc["spec"]["versions"] if v["name"] == "v1alpha1")
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "trainerStatus"
    ]
    rules = schema.get("x-kubernetes-validations", [])
    if [r["rule"] for r in rules] != [CEL_RULE]:
        raise RuntimeError(f"{crd.name}: trainerStatus rules changed: {rules}")
    return schema, rules[0]["message"]


class InvalidPayload(ValueError):
    """The body does not decode into UpdateTrainJobStatusRequest (Go's json.Decode fails)."""


def _int32(value: Any, field: str) -> int:
    # Go decodes a JSON number into *int32 only when it is an integer literal in range.
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT32_MAX:
        raise InvalidPayload(f"{field}: cannot unmarshal {value!r} into int32")
    return value


def _string(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidPayload(f"{field}: cannot unmarshal {value!r} into string")
    return value


def _time(value: Any) -> str | None:
    # metav1.Time: null (or absent) is the zero time, which marshals back as null.
    if value is None:
        return None
    if not isinstance(value, str) or not RFC3339.match(value):
        raise InvalidPayload(f"lastUpdatedTime: {value!r} is not RFC 3339")
    parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    # metav1.Time marshals as UTC, whole seconds.
    return parsed.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def decode_request(body: bytes) -> dict[str, Any] | None:
    """The trainerStatus that server.go's toApplyConfig would apply (None: the request has
    none). As Go's decoder: unknown fields are ignored, wrong types fail; as the apply
    configuration: empty metric names/values are left out (omitempty), and a missing
    lastUpdatedTime is sent as null."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidPayload(str(exc)) from exc
    if request is None:
        return None
    if not isinstance(request, dict):
        raise InvalidPayload("the body is not a JSON object")
    status = request.get("trainerStatus")
    if status is None:
        return None
    if not isinstance(status, dict):
        raise InvalidPayload("trainerStatus is not an object")
    out: dict[str, Any] = {}
    for field in ("progressPercentage", "estimatedRemainingSeconds"):
        if status.get(field) is not None:
            out[field] = _int32(status[field], field)
    metrics = status.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list):
            raise InvalidPayload("metrics is not an array")
        out["metrics"] = []
        for i, metric in enumerate(metrics):
            if not isinstance(metric, dict):
                raise InvalidPayload(f"metrics[{i}] is not an object")
            entry = {}
            for key in ("name", "value"):
                text = _string(metric.get(key, ""), f"metrics[{i}].{key}")
                if text:
                    entry[key] = text
            out["metrics"].append(entry)
    out["lastUpdatedTime"] = _time(status.get("lastUpdatedTime"))
    return out


class TrainerStatusValidator:
    """What the API server says about the applied trainerStatus: the CRD's OpenAPI schema,
    then its CEL rule. Messages in the API server's shape, one per failing field."""

    def __init__(self, crd: Path = CRD) -> None:
        schema, self.rule_message = load_trainer_status_schema(crd)
        self.validator = jsonschema.Draft7Validator(schema)

    def errors(self, trainer_status: dict[str, Any]) -> list[str]:
        # A null the apply carries is "no value" to the API server.
        present = {k: v for k, v in trainer_status.items() if v is not None}
        found = []
        for error in sorted(self.validator.iter_errors(present), key=lambda e: list(e.path)):
            path = ".".join(
                f"[{p}]" if isinstance(p, int) else p
                for p in ("status", "trainerStatus", *error.path)
            ).replace(".[", "[")
            found.append(f"{path}: Invalid value: {error.message}")
        if "lastUpdatedTime" not in present:
            found.append(f'status.trainerStatus: Invalid value: "object": {self.rule_message}')
        return found


def _utc_now() -> int:
    return int(time.time())


class TokenIssuer:
    """Signs and verifies the projected ServiceAccount tokens of the TrainJobs' pods."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_key = self.key.public_key()
        self.revoked: set[str] = set()

    def issue(
        self,
        namespace: str,
        trainjob: str,
        *,
        audience: str | None = None,
        expires_in: int = TOKEN_EXPIRY_S,
        pod_namespace: str | None = None,
    ) -> str:
        """A token as the kubelet would project it into a pod of `trainjob`. The keyword
        arguments make the wrong ones a test needs (another audience, expired, another
        namespace in the kubernetes.io claim)."""
        now = _utc_now()
        ns = pod_namespace or namespace
        claims = {
            "iss": ISSUER,
            "sub": f"system:serviceaccount:{ns}:default",
            "aud": [audience or token_audience(namespace, trainjob)],
            "iat": now,
            "nbf": now,
            "exp": now + expires_in,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {
                "namespace": ns,
                "pod": {"name": f"{trainjob}-node-0-0", "uid": str(uuid.uuid4())},
                "serviceaccount": {"name": "default", "uid": str(uuid.uuid4())},
            },
        }
        return jwt.encode(claims, self.key, algorithm="RS256")

    def authorize(self, auth_header: str, namespace: str, trainjob: str) -> bool:
        """auth.go Authorize: a bearer JWT for this TrainJob's audience, signed by the
        issuer, unexpired, bound to a pod of `namespace`, and not rotated out."""
        parts = auth_header.split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return False
        try:
            claims = jwt.decode(
                parts[1],
                self.public_key,
                algorithms=["RS256"],
                audience=token_audience(namespace, trainjob),
                issuer=ISSUER,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.InvalidTokenError:
            return False
        if claims.get("jti") in self.revoked:
            return False
        bound = claims.get("kubernetes.io") or {}
        return isinstance(bound, dict) and bound.get("namespace") == namespace


def _make_tls(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1/localhost signed by it (the webhook
    certificate upstream reuses); returns (ca.crt, tls.crt, tls.key)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubeflow-trainer stand-in CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [x509.NameAttribute(NameOID.COMMON_NAME, "kubeflow-trainer-controller-manager")]
            )
        )
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / CA_CERT_FILE, directory / "tls.crt", directory / "tls.key")
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths[2].chmod(0o600)
    return paths


def make_ca_file(path: Path) -> Path:
    """Another CA's certificate at `path` (a pod given the wrong CA, in tests)."""
    with tempfile.TemporaryDirectory() as tmp:
        ca, _, _ = _make_tls(Path(tmp))
        shutil.copyfile(ca, path)
    return path


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: TrainerStatusServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (bad CA, timeout) is its problem, not a traceback here.
        self.owner.handshake_failures += 1


class _Handler(http.server.BaseHTTPRequestHandler):
    timeout = READ_TIMEOUT_S
    protocol_version = "HTTP/1.1"
    body_read = False

    @property
    def owner(self) -> TrainerStatusServer:
        assert isinstance(self.server, _Server)
        return self.server.owner

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.owner.handle(self, "POST")

    def do_GET(self) -> None:  # noqa: N802
        self.owner.handle(self, "GET")

    def do_PUT(self) -> None:  # noqa: N802
        self.owner.handle(self, "PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self.owner.handle(self, "PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self.owner.handle(self, "DELETE")

    def reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode() + b"\n"  # Go's Encoder ends with a newline
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _status(message: str, reason: str, code: int) -> dict[str, Any]:
    """server.go badRequest: a metav1.Status."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class TrainerStatusServer:
    """The status server. `on_status(namespace, trainjob, trainer_status)` is the write:
    `trainer_status` is the whole `status.trainerStatus` to set (upstream applies it with
    one field manager, so a field a later post leaves out is removed); raising LookupError
    from it answers 404 "Train job not found" (the TrainJob does not exist), ValueError 422
    with its text (the API server refused it), anything else 500. Calls are serialized.

    `requests` records (method, path, HTTP code) of every request answered."""

    def __init__(self, on_status: OnStatus, *, workdir: Path | None = None) -> None:
        self.on_status = on_status
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="trainer-status-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tokens = TokenIssuer()
        self.validator = TrainerStatusValidator()
        self.requests: list[tuple[str, str, int]] = []
        self.handshake_failures = 0
        self._current: dict[tuple[str, str], str] = {}  # (ns, trainjob) -> jti in the file
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._server: _Server | None = None
        self._serving: Any = None
        self.port = 0
        self.ca_file, self._cert, self._key = _make_tls(self.workdir)

    # --- lifecycle

    def start(self) -> None:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self._cert, self._key)
        # The handshake happens on the request's thread, not on the accepting one: a
        # client that connects and stalls must not block everyone else.
        server.socket = context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
        self.port = server.server_address[1]
        self._server = server
        self._serving = serving(server)
        self._serving.__enter__()

    def stop(self) -> None:
        if self._serving is not None:
            self._serving.__exit__(None, None, None)
            self._serving = self._server = None
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> TrainerStatusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what the controller gives a TrainJob's pods

    def url(self, namespace: str, trainjob: str) -> str:
        return f"https://127.0.0.1:{self.port}{status_path(namespace, trainjob)}"

    def files(self, namespace: str, trainjob: str) -> Path:
        """The TrainJob's projected-volume directory (ca.crt, token)."""
        return self.workdir / "trainjobs" / namespace / trainjob

    def pod_env(self, namespace: str, trainjob: str) -> list[dict[str, str]]:
        """The env trainjobstatus.go upserts into each trainer container, its files made
        (a token issued) on first use."""
        directory = self.files(namespace, trainjob)
        directory.mkdir(parents=True, exist_ok=True)
        if not (directory / CA_CERT_FILE).exists():
            shutil.copyfile(self.ca_file, directory / CA_CERT_FILE)
        if not (directory / TOKEN_FILE).exists():
            self.rotate_token(namespace, trainjob)
        return [
            {"name": ENV_URL, "value": self.url(namespace, trainjob)},
            {"name": ENV_CA_CERT, "value": str(directory / CA_CERT_FILE)},
            {"name": ENV_TOKEN, "value": str(directory / TOKEN_FILE)},
        ]

    def rotate_token(self, namespace: str, trainjob: str) -> str:
        """A new token in the same file, as the kubelet refreshes a projected token; the
        one it replaces is refused from now on. Returns the new token."""
        token = self.tokens.issue(namespace, trainjob)
        jti = jwt.decode(token, options={"verify_signature": False})["jti"]
        directory = self.files(namespace, trainjob)
        directory.mkdir(parents=True, exist_ok=True)
        # Written whole then renamed: a reader never sees half a token (the kubelet's
        # atomic writer swaps a symlinked directory for the same reason).
        tmp = directory / f".{TOKEN_FILE}.{jti}"
        tmp.write_text(token)
        tmp.replace(directory / TOKEN_FILE)
        with self._lock:
            old = self._current.get((namespace, trainjob))
            if old:
                self.tokens.revoked.add(old)
            self._current[(namespace, trainjob)] = jti
        return token

    # --- serving

    def handle(self, request: _Handler, method: str) -> None:
        code, body = self._answer(request, method)
        if not request.body_read:
            # As Go's server does after a handler that left the body unread: drain up
            # to 256 KiB, so a client still sending sees the answer, not a reset.
            length = int(request.headers.get("Content-Length") or 0)
            request.rfile.read(min(length, DRAIN_MAX))
        request.close_connection = True  # one request a connection: simpler, and enough
        with self._lock:
            self.requests.append((method, request.path, code))
        request.reply(code, body)

    def _answer(self, request: _Handler, method: str) -> tuple[int, dict[str, Any]]:
        match = STATUS_PATH.match(request.path)
        if method != "POST" or match is None:
            return 404, _status("Not found", "NotFound", 404)
        length = int(request.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return 413, _status("Payload too large", "RequestEntityTooLarge", 413)
        namespace, name = match["namespace"], match["name"]
        if not self.tokens.authorize(request.headers.get("Authorization", ""), namespace, name):
            return 403, _status("Forbidden", "Forbidden", 403)
        request.body_read = True
        try:
            trainer_status = decode_request(request.rfile.read(length))
        except InvalidPayload:
            return 422, _status("Invalid payload", "Invalid", 422)
        if trainer_status is None:
            return 200, {}
        if errors := self.validator.errors(trainer_status):
            message = f'TrainJob.trainer.kubeflow.org "{name}" is invalid: ' + (
                errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            )
            return 422, _status(message, "Invalid", 422)
        try:
            with self._write_lock:
                self.on_status(namespace, name, json.loads(json.dumps(trainer_status)))
        except LookupError:
            return 404, _status("Train job not found", "NotFound", 404)
        except ValueError as exc:
            return 422, _status(str(exc), "Invalid", 422)
        except Exception:  # noqa: BLE001 (server.go: any other apply error is a 500)
            return 500, _status("Internal error", "InternalError", 500)
        return 200, {"trainerStatus": trainer_status}
