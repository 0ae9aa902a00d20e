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

    @property
    def path(self) -> str:
        """The group/version's discovery path (its APIResourceList)."""
        return f"/apis/{self.group}/{self.version}"

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


def _served(kube: KubeJson, kind: ServedKind) -> bool:
    """Whether the API server serves `kind` (its group/version lists the plural)."""
    from kubernetes.client.exceptions import ApiException

    try:
        found = kube.json("GET", kind.path, missing_ok=(404,))
    except ApiException as exc:
        raise access_failure(exc, kube.host) or exc from None
    resources = (found or {}).get("resources") or ()
    return any(r.get("name") == kind.plural for r in resources)


def served_engines(kube: KubeJson, *, fresh: bool = False) -> frozenset[Engine]:
    """The engines whose kinds this cluster serves (empty: neither is installed)."""
    if not fresh and kube in _SEEN:
        return _SEEN[kube]
    engines: frozenset[Engine] = frozenset(
        engine for engine, kinds in NEEDS.items() if all(_served(kube, k) for k in kinds)
    )
    _SEEN[kube] = engines
    return engines
