"""The Kubernetes target's writes in one namespace: the job (create, suspend, delete),
the suite's objects it needs (a TrainJob's runtime) and the HF_TOKEN Secret, each only
where the object is the suite's own. A JobClient is also a KubeReader (the target's
one client: a poll's reads and a submit's writes share its connection and count)."""

from __future__ import annotations

import base64
from typing import Any

from skills.kube.objects import kind_path, object_path
from skills.shared.ownership import labelled_ours, managed_labels, require_kube_ours
from skills.training_job_deployer.targets.kubernetes.kube_monitor import KubeReader

SECRET_HINT = (
    "Secret {namespace}/{name} holds someone else's value: deploy in another namespace, "
    "or have its owner remove it (kubectl -n {namespace} delete secret {name})."
)


class JobClient(KubeReader):
    """KubeReader's reads, and the writes of the target's jobs and what they need."""

    def ensure_owned(self, obj: dict[str, Any]) -> str:
        """Create the suite's object (a TrainJob's ClusterTrainingRuntime), or update it
        when it is the suite's and its spec or labels differ: 'created', 'updated' or
        'unchanged' (nothing written: a resubmission is idempotent). One of that name
        that is not the suite's is refused as not_ours, untouched."""
        current = self.get_or_none(object_path(obj))
        if current is not None and labelled_ours(current):
            labels = (current.get("metadata") or {}).get("labels") or {}
            wanted = obj["metadata"].get("labels") or {}
            if current.get("spec") == obj.get("spec") and labels.items() >= wanted.items():
                return "unchanged"
        name = obj["metadata"]["name"]
        hint = (
            f"{obj['kind']} {name} is someone else's: have its owner rename or remove it "
            "(the suite installs its own of that name)."
        )
        return self.apply_owned(obj, hint, current=current)

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

    def put_secret(self, name: str, data: dict[str, str]) -> str:
        """Create the Secret, or update it if it is this suite's: 'created' or 'updated'.
        One of that name that is not (another user's, unlabelled) is refused as not_ours
        and keeps its value. Its value never comes back from here."""
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace, "labels": managed_labels()},
            "type": "Opaque",
            "data": encoded,
        }
        return self.apply_owned(body, SECRET_HINT.format(name=name, namespace=self.namespace))

    def require_secret_ours(self, name: str) -> None:
        """Refuse (not_ours) before anything is written when a Secret `name` exists and is
        not this suite's: put_secret would refuse it later, after a replace's delete."""
        require_kube_ours(
            self.get_or_none(kind_path("Secret", self.namespace, name)),
            "Secret",
            f"{self.namespace}/{name}",
            SECRET_HINT.format(name=name, namespace=self.namespace),
            namespace=self.namespace,
        )
