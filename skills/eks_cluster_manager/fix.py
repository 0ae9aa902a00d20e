"""auto_fix: the plan (every object each failed check's component would apply), and
applying it by server-side apply, object by object, in the table's order."""

from __future__ import annotations

from skills.eks_cluster_manager.components import BY_KEY
from skills.eks_cluster_manager.models import Check, PlannedObject
from skills.kube.client import KubeJson
from skills.shared.progress import Progress


def components_for(checks: list[Check]) -> list[str]:
    """The components of failed checks, and of warnings about an optional one (missing
    monitoring: training runs without it, auto_fix still installs it)."""
    wanted = {
        c.component
        for c in checks
        if c.component
        and (c.status == "failed" or (c.status == "warning" and BY_KEY[c.component].optional))
    }
    return [key for key in BY_KEY if key in wanted]


def plan(checks: list[Check], namespace: str) -> tuple[list[PlannedObject], list[dict]]:
    items, manifests = [], []
    for key in components_for(checks):
        component = BY_KEY[key]
        for obj in component.manifests(namespace):
            meta = obj["metadata"]
            items.append(
                PlannedObject(
                    component=key,
                    version=component.version,
                    kind=obj["kind"],
                    name=meta["name"],
                    namespace=meta.get("namespace"),
                )
            )
            manifests.append(obj)
    return items, manifests


def apply(
    kube: KubeJson, items: list[PlannedObject], manifests: list[dict], progress: Progress
) -> list[PlannedObject]:
    """Apply each object; a failure is recorded on its row and the rest go on (a CRD
    that failed still lets the DaemonSets land)."""
    from kubernetes.client.exceptions import ApiException

    done = []
    for i, (item, obj) in enumerate(zip(items, manifests, strict=True)):
        progress.report(i, len(items), f"apply {item.kind} {item.name}")
        try:
            kube.apply(obj)
            done.append(item.model_copy(update={"action": "applied"}))
        except ApiException as exc:
            reason = f"HTTP {exc.status} {exc.reason or ''}".strip()
            done.append(item.model_copy(update={"action": "failed", "error": reason}))
    progress.report(len(items), len(items), "applied")
    return done
