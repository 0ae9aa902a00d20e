"""The EKS API calls moto (5.2.5, the newest release) does not serve: add-ons and EKS Pod
Identity associations. A small HTTP service in front of moto answers those paths as the
EKS REST-JSON API documents them (botocore's own service model: the URIs, the member
names, errors as `x-amzn-ErrorType` + `{"message"}`) and forwards every other request to
moto unchanged, so clusters, node groups and tags stay moto's. Clients reach it through
the standard `AWS_ENDPOINT_URL_EKS`, as a user points boto3 at a VPC endpoint.

It keeps state (create 409s on a duplicate, describe/delete 404 on an unknown id, list
filters by namespace and service account) and checks the cluster exists by asking moto;
it checks nothing AWS checks beyond that (that a role's trust policy names
pods.eks.amazonaws.com is the product's test, read from moto's IAM)."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.services._common import serving

ACCOUNT = "123456789012"


@dataclass
class EksExtras:
    endpoint_url: str
    associations: dict[str, dict[str, Any]] = field(default_factory=dict)
    addons: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL_EKS": self.endpoint_url}

    def reset(self) -> None:
        self.associations.clear()
        self.addons.clear()


class _Handler(BaseHTTPRequestHandler):
    state: EksExtras
    upstream: str
    region: str

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ---------------------------------------------------------------------

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: dict[str, Any], error: str | None = None) -> None:
        data = json.dumps(payload, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if error:
            self.send_header("x-amzn-ErrorType", error)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, {"message": message}, code)

    def _forward(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.upstream + self.path, data=body or None, method=self.command
        )
        for key, value in self.headers.items():
            if key.lower() not in ("host", "content-length", "connection"):
                request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, headers, data = response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            status, headers, data = exc.code, exc.headers, exc.read()
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection", "server",
                                   "date"):  # fmt: skip
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _cluster_exists(self, name: str) -> bool:
        request = urllib.request.Request(f"{self.upstream}/clusters/{name}", headers={
            "Authorization": self.headers.get("Authorization", ""),
            "X-Amz-Date": self.headers.get("X-Amz-Date", ""),
        })  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30):
                return True
        except urllib.error.HTTPError:
            return False

    # -- the paths moto lacks ---------------------------------------------------------

    def _handle(self) -> None:
        body = self._body()
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if (
            len(parts) < 3
            or parts[0] != "clusters"
            or parts[2]
            not in (
                "pod-identity-associations",
                "addons",
            )
        ):
            self._forward(body)
            return
        cluster = parts[1]
        if not self._cluster_exists(cluster):
            self._error(404, "ResourceNotFoundException", f"No cluster found for name: {cluster}.")
            return
        query = dict(urllib.parse.parse_qsl(url.query))
        data = json.loads(body) if body else {}
        if parts[2] == "addons":
            self._addons(cluster, parts[3] if len(parts) > 3 else None, data)
        else:
            self._associations(cluster, parts[3] if len(parts) > 3 else None, data, query)

    def _addons(self, cluster: str, name: str | None, data: dict[str, Any]) -> None:
        if self.command == "POST" and name is None:
            key = (cluster, data["addonName"])
            if key in self.state.addons:
                self._error(409, "ResourceInUseException", "Addon already exists.")
                return
            addon = {
                "addonName": data["addonName"], "clusterName": cluster, "status": "CREATING",
                "addonVersion": data.get("addonVersion") or "v1.3.9-eksbuild.3",
                "addonArn": f"arn:aws:eks:{self.region}:{ACCOUNT}:addon/{cluster}/"
                            f"{data['addonName']}/{uuid.uuid4()}",
                "tags": data.get("tags") or {}, "createdAt": time.time(),
                "modifiedAt": time.time(),
            }  # fmt: skip
            self.state.addons[key] = addon
            self._send(200, {"addon": addon})
            return
        addon = self.state.addons.get((cluster, name or ""))
        if addon is None:
            self._error(404, "ResourceNotFoundException", f"No addon: {name} found in cluster")
            return
        if self.command == "GET":
            addon["status"] = "ACTIVE"  # created a call ago: active now
            self._send(200, {"addon": addon})
        elif self.command == "DELETE":
            del self.state.addons[(cluster, name or "")]
            self._send(200, {"addon": {**addon, "status": "DELETING"}})
        else:
            self._error(405, "InvalidRequestException", "unsupported")

    def _associations(
        self, cluster: str, association_id: str | None, data: dict[str, Any], query: dict
    ) -> None:
        mine = {k: v for k, v in self.state.associations.items() if v["clusterName"] == cluster}
        if association_id is None and self.command == "POST":
            for found in mine.values():
                if (found["namespace"], found["serviceAccount"]) == (
                    data["namespace"],
                    data["serviceAccount"],
                ):
                    self._error(409, "ResourceInUseException", "Association already exists.")
                    return
            new_id = "a-" + uuid.uuid4().hex[:17]
            association = {
                "clusterName": cluster, "namespace": data["namespace"],
                "serviceAccount": data["serviceAccount"], "roleArn": data["roleArn"],
                "associationArn": f"arn:aws:eks:{self.region}:{ACCOUNT}:podidentityassociation"
                                  f"/{cluster}/{new_id}",
                "associationId": new_id, "tags": data.get("tags") or {},
                "createdAt": time.time(), "modifiedAt": time.time(),
            }  # fmt: skip
            self.state.associations[new_id] = association
            self._send(200, {"association": association})
            return
        if association_id is None and self.command == "GET":
            listed = [
                {k: a[k] for k in ("clusterName", "namespace", "serviceAccount",
                                   "associationArn", "associationId")}
                for a in mine.values()
                if query.get("namespace") in (None, a["namespace"])
                and query.get("serviceAccount") in (None, a["serviceAccount"])
            ]  # fmt: skip
            self._send(200, {"associations": listed})
            return
        association = mine.get(association_id or "")
        if association is None:
            self._error(404, "ResourceNotFoundException", f"No association {association_id}")
            return
        if self.command == "GET":
            self._send(200, {"association": association})
        elif self.command == "POST":  # update
            association.update(roleArn=data.get("roleArn", association["roleArn"]),
                               modifiedAt=time.time())  # fmt: skip
            self._send(200, {"association": association})
        elif self.command == "DELETE":
            del self.state.associations[association_id or ""]
            self._send(200, {"association": association})
        else:
            self._error(405, "InvalidRequestException", "unsupported")

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle


@contextlib.contextmanager
def eks_extras(upstream: str, region: str = "us-east-1") -> Iterator[EksExtras]:
    state = EksExtras(endpoint_url="")
    handler = type("Handler", (_Handler,), {
        "state": state, "upstream": upstream.rstrip("/"), "region": region,
    })  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    state.endpoint_url = f"http://127.0.0.1:{server.server_address[1]}"
    with serving(server):
        yield state
