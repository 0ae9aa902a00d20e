"""CustomResourceDefinitions on the kmock stand-in, served as an API server serves them:
a CRD written (created, applied, patched) makes each of its served versions' resource
discoverable (`/apis/<group>/<version>` lists its plural, LISTs answer 200), a version
no longer served or a CRD deleted stops that (discovery 404s when nothing else serves the
group/version). kube.py's emulator calls `declared_by` before and after each CRD write
and `redeclare` with both; a test can also `serve` or `withdraw` one directly.

Known limit: kmock also lists, in discovery, any resource an object of it is stored under
(kmock's KubernetesEmulator._get_resources), declared or not."""

from __future__ import annotations

import copy
from typing import Any

CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
ResourceInfo = dict[str, Any]


def is_crd(request: Any) -> bool:
    """Whether the request writes (creates, patches, deletes) a CRD."""
    import kmock

    resource = request.resource
    writes = (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE)
    if resource is None or request.action not in writes:
        return False
    plural = "/".join(filter(None, (resource.group, resource.version, resource.plural)))
    return plural == CRDS and bool(request.name or isinstance(request.data, dict))


def resources_of(crd: dict[str, Any] | None) -> dict[str, ResourceInfo]:
    """The resources a CRD serves: "<group>/<version>/<plural>" -> kmock's ResourceInfo."""
    spec = (crd or {}).get("spec") or {}
    names, group = spec.get("names") or {}, spec.get("group")
    if not group or not names.get("plural"):
        return {}
    kind = names["kind"]
    return {
        f"{group}/{v['name']}/{names['plural']}": {
            "kind": kind,
            "namespaced": spec.get("scope") == "Namespaced",
            "singular": names.get("singular") or kind.lower(),
            "verbs": VERBS,
            "subresources": tuple(v.get("subresources") or {}),  # "status", "scale"
        }
        for v in spec.get("versions") or ()
        if v.get("served")
    }


def declared_by(emulator: Any, request: Any) -> dict[str, ResourceInfo]:
    """What the stored CRD the request names serves now ({} if none)."""
    name = request.name or ((request.data or {}).get("metadata") or {}).get("name")
    key = (request.resource, None, name)
    if key not in emulator.objects or emulator.objects[key].deleted:
        return {}
    return resources_of(emulator.objects[key].raw)


def redeclare(
    emulator: Any, before: dict[str, ResourceInfo], after: dict[str, ResourceInfo]
) -> None:
    for resource in before.keys() - after.keys():
        if resource in emulator.resources:
            del emulator.resources[resource]
    for resource, info in after.items():
        emulator.resources[resource] = info


def serve(emulator: Any, crd: dict[str, Any]) -> None:
    """Store the CRD and serve its resources (as if applied; no request counted)."""
    emulator.objects[CRDS, None, crd["metadata"]["name"]] = copy.deepcopy(crd)
    redeclare(emulator, {}, resources_of(crd))


def withdraw(emulator: Any, resource: str) -> None:
    """Serve `resource` ("<group>/<version>/<plural>") no more, as if its CRD were gone."""
    if resource in emulator.resources:
        del emulator.resources[resource]
