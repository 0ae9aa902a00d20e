"""The checks of Kubeflow Trainer v2 (TrainJob): its CRDs served, its controller ready,
its admission webhook reachable, JobSet present, the `torch-distributed` runtime there.
Pure functions of the cluster snapshot (checks.py reads it and says when they run), as
the other checks. Names and namespaces are upstream's (Trainer v2.3.0's
manifests/overlays/manager, JobSet v0.12.0's config/default)."""

from __future__ import annotations

from typing import Any

from skills.eks_cluster_manager.cluster_snapshot import Snapshot
from skills.eks_cluster_manager.components import BY_KEY, TRAINER_NAMESPACE
from skills.eks_cluster_manager.models import Check
from skills.kube.deployments import deployment_ready
from skills.kube.engines import JOBSETS, TRAINJOBS

TRAINER_CONTROLLER = "kubeflow-trainer-controller-manager"  # its Deployment and Service
JOBSET_CONTROLLER = "jobset-controller-manager"
RUNTIME = "torch-distributed"
TRAINER_KINDS = ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
TRAINER_GV = f"{TRAINJOBS.group}/{TRAINJOBS.version}"
JOBSET_GV = f"{JOBSETS.group}/{JOBSETS.version}"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # an EndpointSlice's Service
_NAME, _PART_OF = "app.kubernetes.io/name", "app.kubernetes.io/part-of"


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def trainer_controllers(deployments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trainer v2's controller Deployments, by upstream's name or its labels."""
    upstreams = ("trainer", "kubeflow")
    return [
        d
        for d in deployments
        if d["metadata"]["name"] == TRAINER_CONTROLLER
        or (_labels(d).get(_NAME), _labels(d).get(_PART_OF)) == upstreams
    ]


def jobset_controllers(deployments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JobSet's controller Deployments (the release's name, or JobSet's name label that its
    manifests and its Helm chart set)."""
    return [
        d
        for d in deployments
        if d["metadata"]["name"] == JOBSET_CONTROLLER or _labels(d).get(_NAME) == "jobset"
    ]


def trainjob_installed(s: Snapshot) -> bool:
    """Trainer v2 is installed: its TrainJob kind is served or its controller is there."""
    return "trainjobs" in s.served.get(TRAINER_GV, ()) or bool(trainer_controllers(s.deployments))


def check_trainer_crds(s: Snapshot) -> Check:
    served = s.served.get(TRAINER_GV, frozenset())
    missing = [k for k in TRAINER_KINDS if k not in served]
    if not missing:
        return Check(
            name="trainer_crds",
            status="ok",
            evidence=[f"{TRAINER_GV} serves {', '.join(TRAINER_KINDS)}"],
        )
    return Check(
        name="trainer_crds",
        status="failed",
        evidence=[f"{TRAINER_GV} does not serve {', '.join(missing)}"],
        fix=f"Install the Kubeflow Trainer {BY_KEY['kubeflow_trainer'].version} CRDs (auto_fix).",
        component="kubeflow_trainer",
    )


def check_trainer_controller(s: Snapshot) -> Check:
    found = trainer_controllers(s.deployments)
    if not found:
        return Check(
            name="trainer_controller",
            status="failed",
            evidence=[f"no Deployment {TRAINER_CONTROLLER} in any namespace"],
            fix=f"Install Kubeflow Trainer {BY_KEY['kubeflow_trainer'].version} (auto_fix).",
            component="kubeflow_trainer",
        )
    d = found[0]
    ok, line = deployment_ready(d)
    containers = ((d.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers")
    evidence = [line, f"image {(containers or [{}])[0].get('image', '?')}"]
    if ok:
        return Check(name="trainer_controller", status="ok", evidence=evidence)
    namespace = d["metadata"].get("namespace", TRAINER_NAMESPACE)
    return Check(
        name="trainer_controller",
        status="failed",
        evidence=evidence,
        fix=f"`kubectl -n {namespace} describe deploy/{d['metadata']['name']}` and `kubectl -n "
        f"{namespace} logs deploy/{d['metadata']['name']}`: check the image pull, the webhook "
        "certificate Secret kubeflow-trainer-webhook-cert and RBAC; TrainJobs wait until it "
        "is ready.",
    )


def _ready_endpoints(slices: list[dict[str, Any]], namespace: str, service: str) -> int:
    """Ready endpoints of a Service, from its EndpointSlices (no `ready` condition counts
    as ready, as the API documents)."""
    return sum(
        1
        for sl in slices
        if sl["metadata"].get("namespace") == namespace
        and _labels(sl).get(SERVICE_NAME_LABEL) == service
        for e in sl.get("endpoints") or ()
        if (e.get("conditions") or {}).get("ready", True) is not False
    )


def check_trainer_webhook(s: Snapshot) -> Check:
    found = trainer_controllers(s.deployments)
    namespace = found[0]["metadata"].get("namespace") if found else TRAINER_NAMESPACE
    where = f"Service {namespace}/{TRAINER_CONTROLLER}"
    if not found:
        return Check(
            name="trainer_webhook",
            status="failed",
            evidence=[f"no controller: no admission webhook behind {where}"],
            fix=f"Install Kubeflow Trainer {BY_KEY['kubeflow_trainer'].version} (auto_fix).",
            component="kubeflow_trainer",
        )
    ready = _ready_endpoints(s.endpoint_slices, namespace or "", TRAINER_CONTROLLER)
    evidence = [f"{where}: {ready} ready endpoint(s)"]
    if ready:
        return Check(name="trainer_webhook", status="ok", evidence=evidence)
    return Check(
        name="trainer_webhook",
        status="failed",
        evidence=[
            *evidence,
            "the API server refuses TrainJobs and runtimes while its "
            "webhooks (failurePolicy Fail) cannot be reached",
        ],
        fix=f"`kubectl -n {namespace} get endpointslices -l "
        f"{SERVICE_NAME_LABEL}={TRAINER_CONTROLLER}`: the controller's pod must be Ready "
        f"(`kubectl -n {namespace} get pods`); its readiness waits for the webhook certificate.",
    )


def check_jobset(s: Snapshot) -> Check:
    served = "jobsets" in s.served.get(JOBSET_GV, ())
    found = jobset_controllers(s.deployments)
    evidence = [f"{JOBSET_GV} {'serves' if served else 'does not serve'} jobsets"]
    if not served and not found:
        jobset = BY_KEY["jobset"]
        return Check(
            name="jobset",
            status="failed",
            evidence=[*evidence, f"no Deployment {JOBSET_CONTROLLER} in any namespace"],
            fix=f"Install JobSet {jobset.version}, as Trainer's overlay ships it (auto_fix); "
            "TrainJobs run as JobSets.",
            component="jobset",
        )
    ok = served and bool(found)
    for d in found:
        ready, line = deployment_ready(d)
        evidence.append(line)
        ok = ok and ready
    if ok:
        return Check(name="jobset", status="ok", evidence=evidence)
    if not found:
        fix = (
            "JobSet's CRD is served but no JobSet controller runs: install JobSet's "
            "controller (its release manifests) or remove the stale CRD."
        )
    elif not served:
        fix = (
            "A JobSet controller runs but jobset.x-k8s.io/v1alpha2 is not served: apply "
            "the JobSet CRD of that controller's release."
        )
    else:
        d = found[0]["metadata"]
        fix = (
            f"`kubectl -n {d.get('namespace')} logs deploy/{d['name']}`: check the image "
            "pull and its webhook certificate."
        )
    return Check(name="jobset", status="failed", evidence=evidence, fix=fix)


def check_trainer_runtime(s: Snapshot) -> Check:
    if s.runtime is not None:
        return Check(
            name="trainer_runtime", status="ok", evidence=[f"ClusterTrainingRuntime {RUNTIME}"]
        )
    runtimes = BY_KEY["kubeflow_trainer_runtimes"]
    return Check(
        name="trainer_runtime",
        status="failed",
        evidence=[f"no ClusterTrainingRuntime {RUNTIME}"],
        fix=f"Apply Kubeflow Trainer's built-in runtimes {runtimes.version} (auto_fix).",
        component="kubeflow_trainer_runtimes",
    )


def trainer_checks(s: Snapshot) -> list[Check]:
    return [
        check_trainer_crds(s),
        check_trainer_controller(s),
        check_trainer_webhook(s),
        check_jobset(s),
        check_trainer_runtime(s),
    ]
