"""manage_eks_cluster and the training engines, on kmock: validate says which engine is
installed and healthy; auto_fix on a cluster with neither installs Kubeflow Trainer
v2.3.0 with JobSet v0.12.0 and its runtimes (upstream's manifests) and nothing of the
Training Operator; a cluster with the Training Operator v1 gets no Trainer beside it;
Trainer v2's own checks (CRDs, controller, webhook, JobSet, runtime) each fail on their
own breakage with the next step."""

from __future__ import annotations

import pytest

from commands.manage_eks_cluster import manage_eks_cluster
from skills.kube.client import KubeJson
from skills.kube.engines import served_engines
from skills.kube.fields import ClusterAccess
from tests.services import crds
from tests.services import eks_cluster as seed
from tests.services.kube import PYTORCHJOB

pytestmark = pytest.mark.integration
NS = "kubeflow-system"
TRAINER = ("apps/v1/deployments", NS, "kubeflow-trainer-controller-manager")
JOBSET = ("apps/v1/deployments", NS, "jobset-controller-manager")
RUNTIME = ("trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", None, "torch-distributed")
V2_COMPONENTS = {"kubeflow_trainer", "jobset", "kubeflow_trainer_runtimes"}
V2_CHECKS = {"trainer_crds", "trainer_controller", "trainer_webhook", "jobset", "trainer_runtime"}


def _without_v1(kube) -> None:
    for key in (seed.OPERATOR, seed.CRD):
        del kube.emulator.objects[key]
    crds.withdraw(kube.emulator, PYTORCHJOB)


@pytest.fixture
def bare(kube_api):
    """A healthy GPU cluster with no training engine at all."""
    kube_api.reset()
    seed.seed_healthy(kube_api)
    _without_v1(kube_api)
    return kube_api


def _call(kube, **kw):
    return manage_eks_cluster(**{"kubeconfig": str(kube.kubeconfig), **kw})


def _checks(report):
    return {c.name: c for c in report.checks}


def _exists(kube, key) -> bool:
    try:  # kmock's `in` does not parse a string resource; its [] does
        return not kube.emulator.objects[key].deleted
    except KeyError:
        return False


def _install_v2(kube) -> None:
    """Trainer v2 as auto_fix installs it, its controllers then run (they are played)."""
    _call(kube, action="auto_fix", confirm=True)
    seed.play_controllers(kube)


def test_with_neither_engine_validate_names_auto_fix_and_it_installs_trainer_v2_only(bare):
    report = _call(bare, action="validate")
    checks = _checks(report)
    engine = checks["training_engine"]
    assert engine.status == "failed"
    assert "PyTorchJob (Training Operator v1): not installed" in engine.evidence
    assert "TrainJob (Kubeflow Trainer v2): not installed" in engine.evidence
    assert "Kubeflow Trainer v2.3.0 with JobSet v0.12.0" in engine.fix
    assert "training_operator" not in checks and "pytorchjob_crd" not in checks
    assert report.next_step.arguments["action"] == "auto_fix"

    planned = _call(bare, action="auto_fix")
    assert {p.component for p in planned.plan} == V2_COMPONENTS
    assert {p.version for p in planned.plan} == {"v2.3.0", "v0.12.0"}
    assert not _exists(bare, TRAINER)  # a plan writes nothing
    kinds = [(p.kind, p.name) for p in planned.plan]
    assert kinds[0] == ("Namespace", NS)  # first: everything else lives in it
    assert ("ClusterTrainingRuntime", "torch-distributed") in kinds

    applied = _call(bare, action="auto_fix", confirm=True)
    assert {p.action for p in applied.plan} == {"applied"}, applied.plan
    assert _exists(bare, TRAINER) and _exists(bare, JOBSET) and _exists(bare, RUNTIME)
    container = bare.emulator.objects[TRAINER]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0"
    # Nothing of the Training Operator; the API now serves TrainJobs (and JobSets).
    assert not _exists(bare, seed.OPERATOR) and not _exists(bare, seed.CRD)
    client = KubeJson(ClusterAccess(kubeconfig=str(bare.kubeconfig)).api_client())
    assert served_engines(client) == {"trainjob"}
    after = applied.changes["after"]
    assert after["trainer_crds"] == after["trainer_runtime"] == "ok"
    assert after["trainer_controller"] == "failed"  # no controllers ran yet
    assert applied.next_step.arguments["action"] == "validate"

    seed.play_controllers(bare)
    report = _call(bare, action="validate")
    assert {c.name: c.status for c in report.checks if c.status != "ok"} == {}
    # version, nodes, pods, DaemonSets, Deployments, the PyTorchJob CRD; Trainer's and
    # JobSet's discovery, the webhook's EndpointSlices, the runtime
    assert report.api_calls == 10
    assert "TrainJob (Kubeflow Trainer v2): installed, healthy" in _checks(report)[
        "training_engine"].evidence  # fmt: skip
    again = _call(bare, action="auto_fix")
    assert again.plan == [] and again.summary.startswith("nothing auto_fix can apply")


def test_a_cluster_with_the_training_operator_gets_no_trainer_beside_it(kube_api):
    kube_api.reset()
    seed.seed_healthy(kube_api)
    report = _call(kube_api, action="validate")
    checks = _checks(report)
    assert not V2_CHECKS & checks.keys()
    assert checks["training_engine"].evidence == [
        "PyTorchJob (Training Operator v1): installed, healthy",
        "TrainJob (Kubeflow Trainer v2): not installed",
    ]
    del kube_api.emulator.objects[seed.OPERATOR]  # v1 broken: auto_fix repairs v1
    applied = _call(kube_api, action="auto_fix", confirm=True)
    assert {p.component for p in applied.plan} == {"training_operator"}
    assert not _exists(kube_api, TRAINER) and not _exists(kube_api, JOBSET)
    assert _exists(kube_api, seed.OPERATOR)


def test_a_running_jobset_is_kept_and_not_installed_twice(bare):
    standalone = ("apps/v1/deployments", "jobset-system", "jobset-controller-manager")
    bare.emulator.objects[standalone] = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": standalone[2], "namespace": "jobset-system",
                     "labels": {"app.kubernetes.io/name": "jobset"}},
        "spec": {"replicas": 1}, "status": {"readyReplicas": 1},
    }  # fmt: skip
    planned = _call(bare, action="auto_fix")
    assert {p.component for p in planned.plan} == {"kubeflow_trainer", "kubeflow_trainer_runtimes"}
    assert not [p for p in planned.plan if "jobset" in p.name]


def _not_ready(kube):
    kube.emulator.objects[TRAINER].patch({"status": {"readyReplicas": 0}})
    for key in list(kube.emulator.objects):
        if key[0] == "discovery.k8s.io/v1/endpointslices":
            del kube.emulator.objects[key]


def _no_endpoints(kube):
    for key in list(kube.emulator.objects):
        if key[0] == "discovery.k8s.io/v1/endpointslices" and "trainer" in key[2]:
            kube.emulator.objects[key].patch({"endpoints": [
                {"addresses": ["10.0.0.10"], "conditions": {"ready": False}}]})  # fmt: skip


def _crds_gone(kube):
    crds.withdraw(kube.emulator, "trainer.kubeflow.org/v1alpha1/trainingruntimes")


def _runtime_gone(kube):
    del kube.emulator.objects[RUNTIME]


def _jobset_not_ready(kube):
    kube.emulator.objects[JOBSET].patch({"status": {"readyReplicas": 0}})


BREAKAGES = {
    "a controller not ready is named with how to look": (
        _not_ready, {"trainer_controller", "trainer_webhook"}, "trainer_controller",
        f"{NS}/kubeflow-trainer-controller-manager: 0/1 ready", "logs deploy/", None),
    "a webhook without ready endpoints refuses TrainJobs": (
        _no_endpoints, {"trainer_webhook"}, "trainer_webhook",
        f"Service {NS}/kubeflow-trainer-controller-manager: 0 ready endpoint(s)",
        "get endpointslices", None),
    "a CRD no longer served is reinstalled": (
        _crds_gone, {"trainer_crds"}, "trainer_crds",
        "trainer.kubeflow.org/v1alpha1 does not serve trainingruntimes", "auto_fix",
        "kubeflow_trainer"),
    "a missing torch-distributed runtime is reapplied": (
        _runtime_gone, {"trainer_runtime"}, "trainer_runtime",
        "no ClusterTrainingRuntime torch-distributed", "auto_fix", "kubeflow_trainer_runtimes"),
    "a jobset controller not ready is named": (
        _jobset_not_ready, {"jobset"}, "jobset", f"{NS}/jobset-controller-manager: 0/1 ready",
        "logs deploy/jobset-controller-manager", None),
}  # fmt: skip


@pytest.mark.parametrize(
    ("breakage", "failing", "check", "evidence", "fix", "component"),
    BREAKAGES.values(),
    ids=BREAKAGES.keys(),
)
def test_each_trainer_check_fails_on_its_own_breakage(
    bare, breakage, failing, check, evidence, fix, component
):
    _install_v2(bare)
    breakage(bare)
    report = _call(bare, action="validate")
    checks = _checks(report)
    assert {n for n, c in checks.items() if c.status != "ok"} == failing
    broken = checks[check]
    assert evidence in broken.evidence and fix in broken.fix
    assert broken.component == component
    engine = checks["training_engine"]
    assert engine.status == "ok"  # installed; its health is in its own checks
    assert any(e.startswith("TrainJob (Kubeflow Trainer v2): installed, not healthy (")
               for e in engine.evidence)  # fmt: skip
    plan = _call(bare, action="auto_fix").plan
    assert {p.component for p in plan} == ({component} if component else set())


def test_a_cluster_with_both_engines_checks_both_and_adds_nothing(kube_api):
    kube_api.reset()
    seed.seed_healthy(kube_api)
    _without_v1(kube_api)
    _install_v2(kube_api)
    seed.seed_healthy(kube_api)  # the Training Operator back beside Trainer v2
    kube_api.emulator.resources[PYTORCHJOB] = {"kind": "PyTorchJob", "namespaced": True}
    report = _call(kube_api, action="validate")
    checks = _checks(report)
    assert V2_CHECKS | {"training_operator", "pytorchjob_crd"} <= checks.keys()
    assert checks["training_engine"].evidence == [
        "PyTorchJob (Training Operator v1): installed, healthy",
        "TrainJob (Kubeflow Trainer v2): installed, healthy",
    ]
    assert _call(kube_api, action="auto_fix").plan == []
