"""Namespaces the suite creates and cleans up (issue 46): the FSDP-on-EKS documents put
their jobs and servers in `llm-training`, which a cluster does not have. A job, a model
server or the storage in a missing namespace creates it (labelled as the suite's; the plan
says so); one that exists is used as it is, never relabelled; `manage_eks_cluster
action=cleanup` deletes only the namespaces the suite created, and only when nothing in
them is left by the run or anyone else's. Against kmock (tests/services/kube.py)."""

from __future__ import annotations

import pytest

from commands.deploy_training_job import deploy_training_job
from skills.eks_cluster_manager import cleanup
from skills.kube import namespaces
from skills.kube.client import KubeJson
from skills.kube.fields import ClusterAccess
from skills.kube.objects import kind_path
from skills.model_server.kubernetes.settings import KubernetesServerSettings
from skills.model_server.kubernetes.target import KubernetesServerTarget
from skills.shared.ownership import MANAGED_BY_LABEL, MODEL_SERVER_LABEL, managed_labels
from skills.shared.progress import CollectingProgress
from tests.services.training_operator import TrainingOperator

pytestmark = pytest.mark.integration

NS = "llm-training"
IMAGE = "localhost:9/fsdp:v1"


@pytest.fixture
def kube(kube_api) -> KubeJson:
    kube_api.reset()
    return KubeJson(ClusterAccess().api_client())


def namespace(kube: KubeJson, name: str = NS) -> dict | None:
    return kube.get_or_none(kind_path("Namespace", name=name))


def put(kube: KubeJson, kind: str, name: str, labels: dict | None = None, **meta) -> None:
    obj = {"apiVersion": "v1", "kind": kind,
           "metadata": {"name": name, "namespace": NS, "labels": labels or {}, **meta}}  # fmt: skip
    if kind == "Deployment":
        obj["apiVersion"] = "apps/v1"
    kube.json("POST", kind_path(kind, NS), body=obj)


def test_a_job_in_a_missing_namespace_creates_it_and_the_plan_says_so(kube, kube_api):
    operator = TrainingOperator(kube_api, namespace=NS)
    operator.add_nodes("p5.48xlarge", 1, efa=32)
    args = {"job_name": "llama", "num_nodes": 1, "image_uri": IMAGE, "namespace": NS,
            "instance_type": "p5.48xlarge", "max_steps": 2, "wait_seconds": 0,
            "skip_gate": True}  # fmt: skip
    planned = deploy_training_job(**args, dry_run=True)
    assert planned.plan.new_namespace is True
    assert ("namespace", f"{NS} (created, labelled fsdp-eks: the cluster lacks it)") in (
        planned.plan.to_display()
    )
    assert namespace(kube) is None  # a dry run writes nothing

    state = deploy_training_job(**args)
    assert state.status == "running", state.message
    created = namespace(kube)
    assert created is not None
    assert created["metadata"]["labels"] == managed_labels(
        **{namespaces.NAMESPACE_LABEL: "created"}
    )
    assert kube.get_or_none(kind_path("PyTorchJob", NS, "llama")) is not None
    # Planned again: the namespace exists now, nothing to create.
    assert (
        deploy_training_job(**{**args, "job_name": "other"}, dry_run=True).plan.new_namespace
        is False
    )


def test_a_model_server_in_a_missing_namespace_creates_it_first(kube):
    config = KubernetesServerSettings(namespace=NS)
    target = KubernetesServerTarget(poll_seconds=0)
    plan = target.plan("demo", "org/m", config)
    assert [o["kind"] for o in plan.objects] == ["Namespace", "Deployment", "Service"]
    assert plan.summary_rows()[0][1].startswith(f"Namespace {NS}, Deployment {NS}/demo")

    state = target.deploy(plan, config, CollectingProgress(), 0)
    assert state.status == "starting"
    assert namespaces.created_by_suite(namespace(kube) or {})
    assert kube.get_or_none(kind_path("Deployment", NS, "demo")) is not None


def test_a_namespace_someone_made_is_used_as_it_is(kube):
    kube.json("POST", kind_path("Namespace"), body={
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"team": "ml"}},
    })  # fmt: skip
    assert namespaces.ensure(kube, NS) is False
    config = KubernetesServerSettings(namespace=NS)
    target = KubernetesServerTarget(poll_seconds=0)
    target.deploy(target.plan("demo", "org/m", config), config, CollectingProgress(), 0)
    assert namespace(kube)["metadata"]["labels"] == {"team": "ml"}  # not relabelled
    # Nor is it the suite's to delete: cleanup does not list it at all.
    rows = cleanup.kube_rows(kube, cleanup.PARTS, apply=False)
    assert not [r for r in rows if r.kind == "Namespace"]


def test_default_and_the_clusters_namespaces_are_never_asked_for(kube):
    before = kube.calls
    assert namespaces.ensure(kube, "default") is False
    assert namespaces.plan_line(kube, "kube-system") is None
    assert kube.calls == before


def _server(kube: KubeJson, name: str = "demo") -> None:
    put(kube, "Deployment", name, managed_labels(**{MODEL_SERVER_LABEL: name}))


@pytest.mark.parametrize(
    ("extra", "parts", "kept_for"),
    [
        # Only the suite's server, and what Kubernetes puts there itself: deleted with it.
        (None, cleanup.PARTS, None),
        # Someone's ConfigMap: deleting the namespace would delete it, so it stays.
        (("ConfigMap", "team-settings", {}), cleanup.PARTS, "ConfigMap team-settings"),
        # A pod a controller made (ownerReferences) is not someone's: deleted with it.
        (("Pod", "demo-7d9-x", {"ownerReferences": [{"kind": "ReplicaSet", "name": "demo-7d9",
                                                     "apiVersion": "apps/v1", "uid": "u"}]}),
         cleanup.PARTS, None),
        # The suite's server, but this run cleans only the jobs: the server keeps it.
        (None, ("jobs",), "Deployment demo"),
    ],
    ids=["only-ours", "someones-configmap", "controller-pod", "part-not-cleaned"],
)  # fmt: skip
def test_cleanup_deletes_a_namespace_it_made_only_when_nothing_else_lives_there(
    kube, extra, parts, kept_for
):
    namespaces.ensure(kube, NS)
    _server(kube)
    put(kube, "ConfigMap", "kube-root-ca.crt")  # every namespace has it
    put(kube, "ServiceAccount", "default")
    if extra:
        kind, name, meta = extra
        put(kube, kind, name, **meta)

    plan = [r for r in cleanup.kube_rows(kube, parts, apply=False) if r.kind == "Namespace"]
    if kept_for:
        assert [(r.name, r.action) for r in plan] == [(NS, "keep")]
        assert kept_for in plan[0].detail
    else:
        assert [(r.name, r.action) for r in plan] == [(NS, "delete")]

    done = [r for r in cleanup.kube_rows(kube, parts, apply=True) if r.kind == "Namespace"]
    assert [r.action for r in done] == (["keep"] if kept_for else ["deleted"])
    assert (namespace(kube) is None) == (kept_for is None)


def test_a_cleanup_of_the_node_groups_alone_leaves_namespaces_be(kube):
    namespaces.ensure(kube, NS)  # empty: a full cleanup would delete it
    rows = cleanup.kube_rows(kube, ("nodegroups",), apply=True)
    assert not [r for r in rows if r.kind == "Namespace"] and namespace(kube) is not None


def test_the_storage_claim_in_a_missing_namespace_creates_it(kube):
    from skills.eks_cluster_manager import storage_kube as storage

    rows = storage.namespace_row(kube, NS, apply=False)
    assert [(r.kind, r.name, r.action) for r in rows] == [("Namespace", NS, "create")]
    assert namespace(kube) is None
    rows = storage.namespace_row(kube, NS, apply=True)
    assert [(r.kind, r.action) for r in rows] == [("Namespace", "created")]
    assert namespace(kube)["metadata"]["labels"][MANAGED_BY_LABEL[0]] == MANAGED_BY_LABEL[1]
    assert storage.namespace_row(kube, NS, apply=True) == []  # there now: nothing to do
