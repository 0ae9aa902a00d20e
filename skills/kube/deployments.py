"""Whether a Deployment is ready, read one way by every check that asks (the cluster
checks: Training Operator, Kubeflow Trainer, JobSet; the load balancer controller)."""

from __future__ import annotations

from typing import Any


def deployment_ready(deployment: dict[str, Any]) -> tuple[bool, str]:
    """Whether all the Deployment's replicas (at least one) are ready, and the evidence
    line saying so ('<namespace>/<name>: 1/1 ready')."""
    meta = deployment.get("metadata") or {}
    want = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
    line = f"{meta.get('namespace', '')}/{meta.get('name', '')}: {ready}/{want} ready"
    return ready >= max(want, 1), line
