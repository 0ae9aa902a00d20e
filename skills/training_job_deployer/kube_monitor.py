"""Reads of a PyTorchJob and what belongs to it, as the Kubernetes API returns them
(camelCase JSON dicts, never the client's models): one GET for the job, one LIST per
kind (pods, events) filtered to the job, whatever its pod count, and one log read for
rank 0. The monitor, the job tools and the pod doctor's `snapshot` share these reads.

Selectors are sent (a real API server filters) and applied again here (some servers
and emulators ignore them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure
from skills.training_job_deployer.pytorchjob_manifest import GROUP, PLURAL, VERSION

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
CONTAINER = "pytorch"


def _json(response: Any) -> Any:
    return json.loads(response.data)


class KubeReader:
    """The API reads and writes of the Kubernetes target; `calls` counts requests."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes import client

        self.namespace = namespace
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.calls = 0

    def _count(self) -> None:
        self.calls += 1

    # discovery and jobs -------------------------------------------------------

    def require_crd(self) -> None:
        """The cluster serves kubeflow.org/v1 pytorchjobs (the Training Operator's CRD)."""
        from kubernetes.client.exceptions import ApiException

        self._count()
        try:
            found = _json(self.custom.get_api_resources(GROUP, VERSION, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise
            found = {"resources": []}
        if not any(r.get("name") == PLURAL for r in found.get("resources") or []):
            raise ToolFailure(
                ErrorCode.TRAINING_OPERATOR_MISSING,
                "The cluster has no PyTorchJob resource (kubeflow.org/v1): the Kubeflow "
                "Training Operator is not installed.",
                "Install it (manage_eks_cluster, or kubectl apply -k "
                '"github.com/kubeflow/training-operator.git/manifests/overlays/standalone'
                '?ref=v1.9.0"), then deploy again.',
            )

    def job(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        self._count()
        try:
            return _json(
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, name, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def jobs(self) -> list[dict[str, Any]]:
        self._count()
        listed = _json(
            self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, _preload_content=False
            )
        )
        return list(listed.get("items") or [])

    def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._count()
        return _json(
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, manifest, _preload_content=False
            )
        )

    def patch_job(self, name: str, patch: dict[str, Any]) -> None:
        self._count()
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, patch, _preload_content=False
        )

    def delete_job(self, name: str) -> bool:
        """Delete the job and (foreground) its pods; False when there was none."""
        from kubernetes.client.exceptions import ApiException

        self._count()
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                propagation_policy="Foreground",
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # what belongs to a job ------------------------------------------------------

    def pods(self, job_name: str) -> list[dict[str, Any]]:
        """The job's pods, one LIST; ordered Master first, then by replica index."""
        self._count()
        listed = _json(
            self.core.list_namespaced_pod(
                self.namespace,
                label_selector=f"{JOB_NAME_LABEL}={job_name}",
                _preload_content=False,
            )
        )
        pods = [
            p
            for p in listed.get("items") or []
            if ((p.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL) == job_name
        ]
        return sorted(pods, key=pod_order)

    def events(self, job_name: str, pod_names: list[str]) -> list[dict[str, Any]]:
        """Events of the job and its pods, one LIST, oldest first."""
        self._count()
        listed = _json(self.core.list_namespaced_event(self.namespace, _preload_content=False))
        names = {job_name, *pod_names}
        found = [
            e
            for e in listed.get("items") or []
            if (e.get("involvedObject") or {}).get("name") in names
        ]
        return sorted(found, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def log(
        self,
        pod: str,
        *,
        tail_lines: int | None = None,
        previous: bool = False,
        since_seconds: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        """A pod's log ('' when it has none yet: a pending pod, no previous container)."""
        from kubernetes.client.exceptions import ApiException

        self._count()
        options: dict[str, Any] = {"container": CONTAINER, "previous": previous}
        if tail_lines is not None:
            options["tail_lines"] = tail_lines
        if since_seconds is not None:
            options["since_seconds"] = since_seconds
        if limit_bytes is not None:
            options["limit_bytes"] = limit_bytes
        try:
            response = self.core.read_namespaced_pod_log(
                pod, self.namespace, _preload_content=False, **options
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # not started yet, or no previous container
                return ""
            raise
        return response.data.decode("utf-8", errors="replace")

    def nodes(self) -> list[dict[str, Any]]:
        self._count()
        return list(_json(self.core.list_node(_preload_content=False)).get("items") or [])

    # secrets ------------------------------------------------------------------------

    def put_secret(self, name: str, data: dict[str, str]) -> str:
        """Create the Secret, or update it if it exists: 'created' or 'updated'. Its value
        never comes back from here."""
        import base64

        from kubernetes.client.exceptions import ApiException

        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "fsdp-eks"}},
            "type": "Opaque",
            "data": encoded,
        }
        self._count()
        try:
            self.core.create_namespaced_secret(self.namespace, body, _preload_content=False)
            return "created"
        except ApiException as exc:
            if exc.status != 409:
                raise
        self._count()
        self.core.patch_namespaced_secret(
            name, self.namespace, {"data": encoded}, _preload_content=False
        )
        return "updated"


def pod_order(pod: dict[str, Any]) -> tuple[int, int, str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    kind = 0 if labels.get(REPLICA_TYPE_LABEL, "").lower() == "master" else 1
    try:
        index = int(labels.get(REPLICA_INDEX_LABEL, "0"))
    except ValueError:
        index = 0
    return kind, index, (pod.get("metadata") or {}).get("name", "")


def pod_name(pod: dict[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def restarts(pods: list[dict[str, Any]]) -> int:
    """Container restarts over all the job's pods."""
    return sum(
        int(c.get("restartCount") or 0)
        for p in pods
        for c in (p.get("status") or {}).get("containerStatuses") or []
    )


def exit_code(pod: dict[str, Any]) -> int | None:
    """The pytorch container's exit code once it terminated (None while it runs)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != CONTAINER:
            continue
        state = status.get("state") or {}
        terminated = state.get("terminated") or (status.get("lastState") or {}).get("terminated")
        if terminated and "exitCode" in terminated:
            return int(terminated["exitCode"])
    return None


@dataclass(frozen=True)
class Condition:
    type: str
    reason: str | None
    message: str | None


def current_condition(job: dict[str, Any]) -> Condition | None:
    """The newest true condition of a PyTorchJob (Created, Running, Restarting,
    Succeeded, Failed, Suspended)."""
    conditions = [
        c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
    ]
    if not conditions:
        return None
    last = conditions[-1]
    for terminal in ("Failed", "Succeeded"):
        for c in conditions:
            if c.get("type") == terminal:
                last = c
    return Condition(str(last.get("type")), last.get("reason"), last.get("message"))


def job_status(job: dict[str, Any]) -> str:
    """The job's status as the local target names them."""
    condition = current_condition(job)
    kind = condition.type if condition else None
    if kind == "Succeeded":
        return "succeeded"
    if kind == "Failed":
        return "failed"
    if ((job.get("spec") or {}).get("runPolicy") or {}).get("suspend") or kind == "Suspended":
        return "cancelled"
    return "running"
