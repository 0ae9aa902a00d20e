"""Reads of a PyTorchJob and what belongs to it, as the Kubernetes API returns them
(camelCase JSON dicts, never the client's models): one GET for the job, one LIST per
kind (pods, events) filtered to the job, whatever its pod count, and one log read for
rank 0. The monitor, the job tools and the pod doctor's `snapshot` share these reads.

Selectors are sent (a real API server filters) and applied again here (some servers
and emulators ignore them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skills.kube.client import KubeJson
from skills.shared.errors import ErrorCode, ToolFailure
from skills.training_job_deployer.pytorchjob_manifest import GROUP, PLURAL, VERSION

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
CONTAINER = "pytorch"


JOB_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}"


class KubeReader(KubeJson):
    """The API reads and writes of the Kubernetes target in one namespace (raw JSON:
    skills.kube.client). `calls` counts requests."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        super().__init__(api_client)
        self.namespace = namespace

    def _jobs_path(self, name: str = "") -> str:
        return JOB_PATH.format(namespace=self.namespace) + (f"/{name}" if name else "")

    # discovery and jobs -------------------------------------------------------

    def require_crd(self) -> None:
        """The cluster serves kubeflow.org/v1 pytorchjobs (the Training Operator's CRD)."""
        found = self.json("GET", f"/apis/{GROUP}/{VERSION}", missing_ok=(404,)) or {}
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
        return self.json("GET", self._jobs_path(name), missing_ok=(404,))

    def jobs(self) -> list[dict[str, Any]]:
        return list((self.json("GET", self._jobs_path()) or {}).get("items") or [])

    def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return self.json("POST", self._jobs_path(), body=manifest)

    def patch_job(self, name: str, patch: dict[str, Any]) -> None:
        self.request(
            "PATCH", self._jobs_path(name), body=patch, content_type="application/merge-patch+json"
        )

    def delete_job(self, name: str) -> bool:
        """Delete the job and (foreground) its pods; False when there was none."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}
        status, _ = self.request("DELETE", self._jobs_path(name), body=body, missing_ok=(404,))
        return status != 404

    # what belongs to a job ------------------------------------------------------

    def pods(self, job_name: str) -> list[dict[str, Any]]:
        """The job's pods, one LIST; ordered Master first, then by replica index."""
        listed = self.json(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query={"labelSelector": f"{JOB_NAME_LABEL}={job_name}"},
        )
        pods = [
            p
            for p in listed.get("items") or []
            if ((p.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL) == job_name
        ]
        return sorted(pods, key=pod_order)

    def events(self, job_name: str, pod_names: list[str]) -> list[dict[str, Any]]:
        """Events of the job and its pods, one LIST, oldest first."""
        names = {job_name, *pod_names}
        found = [
            e
            for e in self.namespace_events()
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
        timestamps: bool = False,
        container: str | None = CONTAINER,
    ) -> str:
        """A pod's log ('' when it has none yet: a pending pod, no previous container)."""
        query = {
            "container": container,
            "previous": "true" if previous else None,
            "timestamps": "true" if timestamps else None,
            "tailLines": tail_lines,
            "sinceSeconds": since_seconds,
            "limitBytes": limit_bytes,
        }
        status, data = self.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log",
            query=query,
            missing_ok=(400, 404),  # not started yet, or no previous container
        )
        return "" if status >= 300 else data.decode("utf-8", errors="replace")

    def namespace_events(self) -> list[dict[str, Any]]:
        """Every event in the namespace, one LIST (the caller picks those it wants)."""
        return list(
            (self.json("GET", f"/api/v1/namespaces/{self.namespace}/events") or {}).get("items")
            or []
        )

    def nodes(self) -> list[dict[str, Any]]:
        return list((self.json("GET", "/api/v1/nodes") or {}).get("items") or [])

    def all_pods(self) -> list[dict[str, Any]]:
        return list((self.json("GET", "/api/v1/pods") or {}).get("items") or [])

    # secrets ------------------------------------------------------------------------

    def put_secret(self, name: str, data: dict[str, str]) -> str:
        """Create the Secret, or update it if it exists: 'created' or 'updated'. Its value
        never comes back from here."""
        import base64

        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "fsdp-eks"}},
            "type": "Opaque",
            "data": encoded,
        }
        path = f"/api/v1/namespaces/{self.namespace}/secrets"
        status, _ = self.request("POST", path, body=body, missing_ok=(409,))
        if status != 409:
            return "created"
        self.request(
            "PATCH",
            f"{path}/{name}",
            body={"data": encoded},
            content_type="application/merge-patch+json",
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


def older_than(event: dict[str, Any], job: dict[str, Any] | None) -> bool:
    """An event from before `job` was created: about an earlier job of the same name (a
    resubmission reuses the pod names; the API keeps events for an hour)."""
    from skills.training_job_deployer.pod_doctor import api_time, event_time

    created = api_time(((job or {}).get("metadata") or {}).get("creationTimestamp"))
    when = event_time(event)
    return created is not None and when is not None and when < created


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
