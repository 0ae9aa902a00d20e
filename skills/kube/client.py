"""Requests to the Kubernetes API as raw JSON through a kubernetes ApiClient's REST
client: its host, TLS, proxy and token refresh apply, but none of the generated API
classes (their import alone costs seconds of every CLI call, and custom resources have
no models anyway). Objects come back as the API serves them (camelCase), which is what
skills.kube.gpu_nodes and the pod doctor read. The cluster checks and the Kubernetes
targets all talk to clusters through this one class, and write through its server-side
`apply` (skills.kube.objects says where each object lives); `calls` and `paths` count
what they asked, for the "one list per kind" measures."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from skills.kube.objects import FIELD_MANAGER, object_path
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.ownership import require_kube_ours

REQUEST_TIMEOUT = (5, 30)  # connect, read (seconds)
LIST_CHUNK = 500  # objects a LIST request asks for at most (limit=)
# A LIST of metadata alone (the API server's PartialObjectMetadataList, any kind since
# 1.15; as client-go's metadata client asks it), else the whole objects.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
Query = dict[str, Any] | list[tuple[str, str]] | None
UNREAD: Any = object()  # apply_owned's `current` when the caller has not read the object


class KubeJson:
    def __init__(self, api_client: Any) -> None:
        self.api = api_client
        self.calls = 0
        self.paths: list[str] = []
        self._counting = threading.Lock()  # a list page reads logs from threads

    @property
    def host(self) -> str:
        return self.api.configuration.host

    def request(
        self,
        method: str,
        path: str,
        query: Query = None,
        body: Any = None,
        content_type: str = "application/json",
        missing_ok: tuple[int, ...] = (),
        accept: str = "application/json",
        timeout: tuple[float, float] = REQUEST_TIMEOUT,
        once: bool = False,
    ) -> tuple[int, bytes]:
        """(status, body). A status in `missing_ok` is returned; any other error status
        raises the client's ApiException with the API server's own message (the tools'
        error mapping types it); an unreachable server (or a `timeout`: connect, read
        seconds) is ENDPOINT_UNREACHABLE. `once`: not retried (urllib3 retries a GET that
        timed out 3 times), so `timeout` bounds the wait (a read through a pod proxy)."""
        from kubernetes.client.exceptions import ApiException

        pairs = query.items() if isinstance(query, dict) else (query or [])
        params = [(k, v) for k, v in pairs if v is not None]
        url = self.host.rstrip("/") + path + (f"?{urlencode(params)}" if params else "")
        headers = {"Accept": accept, "User-Agent": "fsdp-eks"}
        if body is not None:
            headers["Content-Type"] = content_type
            if "json" not in content_type and not isinstance(body, (str, bytes)):
                body = json.dumps(body)  # apply-patch+yaml: JSON is YAML, sent as text
        for auth in self.api.configuration.auth_settings().values():  # refreshes a token
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        with self._counting:
            self.calls += 1
            self.paths.append(f"{method} {path}")
        try:
            if once:
                import urllib3

                response = self.api.rest_client.pool_manager.request(
                    method,
                    url,
                    headers=headers,
                    body=body,
                    retries=False,
                    timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
                    preload_content=False,  # read below, as the rest client's
                )
            else:
                response = self.api.rest_client.request(
                    method, url, headers=headers, body=body, _request_timeout=timeout
                )
        except ApiException as exc:  # clients that raise on an error status
            status, data = exc.status or 0, exc.body or b""
        except ToolFailure:  # the token refresh (no credentials)
            raise
        except Exception as exc:  # urllib3: refused, DNS, TLS, timeout
            raise ToolFailure(
                ErrorCode.ENDPOINT_UNREACHABLE,
                f"Cannot reach the Kubernetes API at {self.host}.",
                "Check the cluster endpoint's access (public/private), the network and the "
                "kubeconfig context.",
                {"host": self.host, "error": type(exc).__name__},
            ) from None
        else:
            status = response.status
            read = getattr(response, "read", None)
            data = read() if callable(read) else response.data
        data = data.encode() if isinstance(data, str) else data if isinstance(data, bytes) else b""
        if 200 <= status < 300 or status in missing_ok:
            return status, data
        try:  # the API server's Status message says why
            reason = str(json.loads(data).get("message") or "")
        except (ValueError, AttributeError):
            reason = data[:500].decode("utf-8", "replace")
        raise ApiException(status=status, reason=reason[:500])

    def json(self, method: str, path: str, **options: Any) -> Any:
        """The response's JSON; None for a status the caller allowed as missing."""
        status, data = self.request(method, path, **options)
        return None if status >= 300 else json.loads(data or b"null")

    def get(self, path: str, query: Query = None) -> Any:
        return self.json("GET", path, query=query)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        return self.json("GET", path, missing_ok=(404,))

    def items(self, path: str, query: Query = None) -> list[dict[str, Any]]:
        """A LIST, every page; a kind the server does not serve is an empty list."""
        return [obj for chunk in self.chunks(path, query) for obj in chunk]

    def chunks(
        self, path: str, query: Query = None, *, size: int = LIST_CHUNK, metadata_only: bool = False
    ) -> Iterator[list[dict[str, Any]]]:
        """A LIST read `size` objects a request (`limit` and `continue`): a caller that
        keeps only what it needs holds one chunk at a time, whatever the kind counts.
        `metadata_only`: each object's metadata alone (PartialObjectMetadata; a server
        that cannot sends whole objects). A kind the server does not serve yields nothing."""
        base = list(query.items()) if isinstance(query, dict) else list(query or [])
        accept = METADATA_ONLY if metadata_only else "application/json"
        token = ""
        while True:
            params = [*base, ("limit", str(size))] + ([("continue", token)] if token else [])
            page = self.json("GET", path, query=params, missing_ok=(404,), accept=accept)
            if page is None:
                return
            items = page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            del page
            yield items
            del items  # the next chunk is read without this one held
            if not token:
                return

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (creates or updates; this tool owns the fields it sets)."""
        return self.json(
            "PATCH",
            object_path(obj),
            body=obj,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )

    def apply_owned(
        self,
        obj: dict[str, Any],
        hint: str,
        *,
        label: str | None = None,
        value: str | None = None,
        current: dict[str, Any] | None = UNREAD,
    ) -> str:
        """The one write of an object this suite makes (Secrets, ServiceAccounts, claims,
        a model server's objects): 'created' or 'updated'. An object of that name that is
        not this suite's (skills.shared.ownership: its label, `label`[=`value`], the
        namespace) is refused as `not_ours`, untouched. A missing one is created (POST:
        one made meanwhile is a 409, read and checked again, never applied over); an
        existing one is applied at the resourceVersion it was checked at, so one replaced
        since is a 409 instead of being overwritten. `current`: the object as the caller
        read it just now (None: missing); by default it is read here."""
        from kubernetes.client.exceptions import ApiException

        kind, meta = obj["kind"], obj["metadata"]
        name = "/".join(filter(None, (meta.get("namespace"), meta["name"])))
        path = object_path(obj)
        for _ in range(2):
            if current is UNREAD:
                current = self.get_or_none(path)
            require_kube_ours(
                current, kind, name, hint, label=label, value=value, namespace=meta.get("namespace")
            )
            if current is not None:
                version = (current.get("metadata") or {}).get("resourceVersion")
                body = {**obj, "metadata": {**meta, "resourceVersion": version}}
                self.apply(body if version else obj)
                return "updated"
            collection = path.rsplit("/", 1)[0]
            status, _ = self.request("POST", collection, body=obj, missing_ok=(409,))
            if status != 409:
                return "created"
            current = UNREAD  # made meanwhile: whose it is decides, as above
        raise ApiException(status=409, reason=f"{kind} {name} keeps changing: try again")


def access_failure(exc: Any, host: str) -> ToolFailure | None:
    """401/403 from the API: the caller's identity has no access."""
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return ToolFailure(
            ErrorCode.ACCESS_DENIED,
            f"The Kubernetes API at {host} answered {status} for the caller's identity.",
            "Give the IAM identity access: `aws eks create-access-entry` and "
            "`associate-access-policy` (AmazonEKSClusterAdminPolicy), or the aws-auth ConfigMap.",
            {"host": host, "status": status},
        )
    return None
