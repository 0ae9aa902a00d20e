"""Which training engines a cluster serves, from API discovery: the Kubeflow Training
Operator v1's PyTorchJob, and Kubeflow Trainer v2's TrainJob (which runs on JobSet, so
it counts only when JobSet is served too).

Each engine's group/version is asked for its resource list (an APIResourceList of a few
KB; 404 when no CRD serves that group/version): two requests on a cluster without
Trainer v2, three with it. The answer is kept per client (a KubeJson is one tool call's),
so the tools of one call ask once; `fresh=True` asks again (after an install)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Literal

from skills.kube.client import KubeJson, access_failure

Engine = Literal["pytorchjob", "trainjob"]


@dataclass(frozen=True)
class ServedKind:
    group: str
    version: str
    plural: str

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}"


PYTORCHJOBS = ServedKind("kubeflow.org", "v1", "pytorchjobs")
TRAINJOBS = ServedKind("trainer.kubeflow.org", "v1alpha1", "trainjobs")
JOBSETS = ServedKind("jobset.x-k8s.io", "v1alpha2", "jobsets")
# What each engine needs served, in the order asked (the first missing one ends the asking).
NEEDS: dict[Engine, tuple[ServedKind, ...]] = {
    "pytorchjob": (PYTORCHJOBS,),
    "trainjob": (TRAINJOBS, JOBSETS),
}

_SEEN: weakref.WeakKeyDictionary[KubeJson, frozenset[Engine]] = weakref.WeakKeyDictionary()


def served_resources(kube: KubeJson, group: str, version: str) -> frozenset[str]:
    """The resources (plurals; subresources as "plural/sub") the API server serves in a
    group/version: one discovery read, empty when nothing serves it."""
    from kubernetes.client.exceptions import ApiException

    try:
        found = kube.json("GET", f"/apis/{group}/{version}", missing_ok=(404,))
    except ApiException as exc:
        raise access_failure(exc, kube.host) or exc from None
    return frozenset(str(r.get("name")) for r in (found or {}).get("resources") or ())


def _served(kube: KubeJson, kind: ServedKind) -> bool:
    return kind.plural in served_resources(kube, kind.group, kind.version)


def served_engines(kube: KubeJson, *, fresh: bool = False) -> frozenset[Engine]:
    """The engines whose kinds this cluster serves (empty: neither is installed)."""
    if not fresh and kube in _SEEN:
        return _SEEN[kube]
    engines: frozenset[Engine] = frozenset(
        engine for engine, kinds in NEEDS.items() if all(_served(kube, k) for k in kinds)
    )
    _SEEN[kube] = engines
    return engines
