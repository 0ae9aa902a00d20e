"""Touch only what is ours (issue 30 items 1, 2, 5, 16): every object the suite deletes,
scales or applies over goes through skills.shared.ownership first, and anything without
the suite's marks is refused as `not_ours`, untouched. Against kmock (the Kubernetes API)
and moto (S3, EKS, EC2, FSx), through the tools as a careless caller would call them."""

from __future__ import annotations

import json

import boto3
import pytest

from commands.delete_model_server import delete_model_server
from commands.deploy_model_server import deploy_model_server
from commands.get_model_server import get_model_server
from commands.manage_eks_cluster import manage_eks_cluster
from skills.model_server.kubernetes.settings import KubernetesServerSettings
from skills.model_server.kubernetes.target import KubernetesServerTarget
from skills.shared import ownership
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from tests.services import eks_cluster as seed
from tests.services.moto import fsx_as_aws_answers

pytestmark = pytest.mark.integration
REGION = "us-east-1"
ACCOUNT = "123456789012"
DEPLOYMENTS, SERVICES = "apps/v1/deployments", "v1/services"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    return kube_api


def stored(kube, resource: str, namespace: str | None, name: str) -> dict | None:
    try:
        obj = kube.emulator.objects[resource, namespace, name]
    except KeyError:
        return None
    return None if obj.deleted else json.loads(json.dumps(obj.history.last.raw))


def foreign_workload(kube, namespace: str, name: str, labels: dict[str, str]) -> None:
    """A Deployment and Service someone else made (coredns, a team's web app)."""
    kube.emulator.objects[DEPLOYMENTS, namespace, name] = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "uid": "u-1"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"k8s-app": name}},
                 "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
        "status": {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2},
    }  # fmt: skip
    kube.emulator.objects[SERVICES, namespace, name] = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"ports": [{"port": 53}]},
    }  # fmt: skip


def server_args(kube, namespace: str = "default") -> dict:
    return {"target": "kubernetes", "kubeconfig": str(kube.kubeconfig), "namespace": namespace}


def assert_not_ours(caught: pytest.ExceptionInfo[ToolFailure], kind: str) -> None:
    failure = caught.value
    assert failure.code == "not_ours" and failure.exit_status == 2
    assert failure.details["kind"] == kind and "not this suite's" in failure.message
    assert failure.hint and failure.details["why"]


# -- item 1: delete_model_server --------------------------------------------------------


@pytest.mark.parametrize(
    "labels",
    [
        {"app": "web"},  # no suite label at all
        {ownership.MANAGED_BY_LABEL[0]: "fsdp-eks"},  # the suite's, but not a model server
        {ownership.MANAGED_BY_LABEL[0]: "fsdp-eks", ownership.MODEL_SERVER_LABEL: "other"},
        {ownership.MANAGED_BY_LABEL[0]: "helm", ownership.MODEL_SERVER_LABEL: "web"},
    ],
    ids=["unlabelled", "suite-not-server", "another-servers-label", "other-manager"],
)
def test_delete_model_server_refuses_a_deployment_it_did_not_make(kube, labels):
    foreign_workload(kube, "default", "web", labels)
    with pytest.raises(ToolFailure) as caught:
        delete_model_server(name="web", confirm=True, **server_args(kube))
    assert_not_ours(caught, "Deployment")
    assert stored(kube, DEPLOYMENTS, "default", "web") is not None
    assert stored(kube, SERVICES, "default", "web") is not None


def test_delete_model_server_refuses_when_only_the_service_is_foreign(kube):
    """The suite's Deployment beside someone's Service of the same name: nothing goes."""
    config = server_args(kube)
    settings = KubernetesServerSettings(kubeconfig=str(kube.kubeconfig))
    target = KubernetesServerTarget(poll_seconds=0)
    target.deploy(target.plan("demo", "org/m", settings), settings, CollectingProgress(), 0)
    service = stored(kube, SERVICES, "default", "demo")
    service["metadata"]["labels"] = {"app": "theirs"}
    kube.emulator.objects[SERVICES, "default", "demo"] = service
    with pytest.raises(ToolFailure) as caught:
        delete_model_server(name="demo", confirm=True, **config)
    assert_not_ours(caught, "Service")
    assert stored(kube, DEPLOYMENTS, "default", "demo") is not None

    kube.emulator.objects[SERVICES, "default", "demo"] = {
        **service, "metadata": {**service["metadata"], "labels": ownership.managed_labels(
            **{ownership.MODEL_SERVER_LABEL: "demo"})}}  # fmt: skip
    done = delete_model_server(name="demo", confirm=True, **config)
    assert done.message == "Deleted Deployment and Service."
    assert stored(kube, DEPLOYMENTS, "default", "demo") is None


# -- item 2: deploy_model_server over a foreign Deployment --------------------------------


def test_deploy_model_server_never_scales_coredns(kube):
    foreign_workload(kube, "kube-system", "coredns", {"k8s-app": "kube-dns"})
    with pytest.raises(ToolFailure) as caught:
        deploy_model_server(
            name="coredns", model="org/m", replicas=0, **server_args(kube, "kube-system")
        )
    assert_not_ours(caught, "Deployment")
    coredns = stored(kube, DEPLOYMENTS, "kube-system", "coredns")
    assert coredns["spec"]["replicas"] == 2


def test_deploy_model_server_never_applies_over_a_foreign_deployment(kube):
    """Without replicas, deploy would force-apply and add the suite's labels (so a later
    cleanup deleted it): refused before any write."""
    foreign_workload(kube, "kube-system", "coredns", {"k8s-app": "kube-dns"})
    settings = KubernetesServerSettings(kubeconfig=str(kube.kubeconfig), namespace="kube-system")
    target = KubernetesServerTarget(poll_seconds=0)
    with pytest.raises(ToolFailure) as caught:  # wait 0: no rollout is followed
        target.deploy(target.plan("coredns", "org/m", settings), settings, CollectingProgress(), 0)
    assert_not_ours(caught, "Deployment")
    coredns = stored(kube, DEPLOYMENTS, "kube-system", "coredns")
    assert coredns["metadata"]["labels"] == {"k8s-app": "kube-dns"}
    assert coredns["spec"]["template"]["spec"]["containers"][0]["image"] == "x"
    service = stored(kube, SERVICES, "kube-system", "coredns")
    assert service["metadata"]["labels"] == {"k8s-app": "kube-dns"}


def test_a_foreign_service_alone_also_refuses_the_deploy(kube):
    kube.emulator.objects[SERVICES, "default", "web"] = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"ports": [{"port": 80}]},
    }  # fmt: skip
    settings = KubernetesServerSettings(kubeconfig=str(kube.kubeconfig))
    target = KubernetesServerTarget(poll_seconds=0)
    with pytest.raises(ToolFailure) as caught:
        target.deploy(target.plan("web", "org/m", settings), settings, CollectingProgress(), 0)
    assert_not_ours(caught, "Service")
    assert stored(kube, DEPLOYMENTS, "default", "web") is None


# -- items 5 and 16: storage and cleanup on moto ------------------------------------------


@pytest.fixture
def aws(moto_server, eks_extras):
    with fsx_as_aws_answers():
        yield moto_server


def make_cluster(name: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.30.1.0/24")["Subnet"]["SubnetId"]
    boto3.client("eks", region_name=REGION).create_cluster(
        name=name, roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks",
        resourcesVpcConfig={"subnetIds": [subnet]}, version="1.31",
    )  # fmt: skip


def cluster_call(kube, cluster: str, **arguments):
    return manage_eks_cluster(
        cluster_name=cluster, region=REGION, kubeconfig=str(kube.kubeconfig), **arguments
    )


def test_cleanup_of_cluster_a_keeps_cluster_bs_bucket_and_its_objects(aws, kube):
    seed.seed_healthy(kube)
    s3 = boto3.client("s3", region_name=REGION)
    theirs = "fsdp-eks-cluster-b-data"
    s3.create_bucket(Bucket=theirs)
    s3.put_bucket_tagging(
        Bucket=theirs,
        Tagging={"TagSet": ownership.tag_list(ownership.aws_tags("own-b", theirs))},
    )
    s3.put_object(Bucket=theirs, Key="checkpoints/step-9/COMPLETE", Body=b"")
    make_cluster("own-a")
    done = cluster_call(
        kube, "own-a", action="cleanup", bucket=theirs, delete_bucket="with_objects", confirm=True
    )
    [row] = [r for r in done.resources if r.kind == "S3 bucket"]
    assert (row.action, row.detail) == ("keep", "fsdp-eks made it for cluster 'own-b'")
    assert s3.list_objects_v2(Bucket=theirs)["KeyCount"] == 1


@pytest.mark.parametrize("confirm", [False, True], ids=["plan", "apply"])
def test_storage_refuses_to_take_over_a_foreign_claim(aws, kube, confirm):
    seed.seed_healthy(kube)
    cluster = f"own-c-{str(confirm).lower()}"
    make_cluster(cluster)
    kube.emulator.objects["v1/persistentvolumeclaims", "default", "fsx-claim"] = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "fsx-claim", "namespace": "default", "labels": {"team": "x"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip
    with pytest.raises(ToolFailure) as caught:
        cluster_call(kube, cluster, action="storage", confirm=confirm)
    assert_not_ours(caught, "PersistentVolumeClaim")
    assert "checkpoint_pvc=" in caught.value.hint
    # Nothing was made, on AWS either (the check comes before any write).
    made = boto3.client("fsx", region_name=REGION).describe_file_systems()["FileSystems"]
    assert not [fs for fs in made if ownership.ours(fs.get("Tags"), cluster)]
    buckets = boto3.client("s3", region_name=REGION).list_buckets()["Buckets"]
    assert not [b for b in buckets if cluster in b["Name"]]
    claim = stored(kube, "v1/persistentvolumeclaims", "default", "fsx-claim")
    assert claim["metadata"]["labels"] == {"team": "x"}
    # Another claim name is the way out, and plans as usual.
    plan = cluster_call(kube, cluster, action="storage", checkpoint_pvc="data-claim")
    assert ("PersistentVolumeClaim", "default/data-claim", "create") in [
        (r.kind, r.name, r.action) for r in plan.resources
    ]


def test_get_model_server_does_not_report_a_foreign_deployment_as_a_server(kube):
    foreign_workload(kube, "kube-system", "coredns", {"k8s-app": "kube-dns"})
    with pytest.raises(ToolFailure) as caught:
        get_model_server(name="coredns", **server_args(kube, "kube-system"))
    assert_not_ours(caught, "Deployment")


# -- issue 45: one ownership-checked apply for every object the suite writes --------------

FSX = {"FileSystemId": "fs-0123456789abcdef0", "DNSName": "fs.fsx.example", "StorageCapacity": 1200,
       "LustreConfiguration": {"MountName": "abcd"}}  # fmt: skip


def _storage_write(kube_json, spec):
    from skills.eks_cluster_manager import storage as fsx_storage

    # The objects were read missing (current_objects, before the AWS writes); the claim
    # was made by someone else since: the write must not take it over.
    return fsx_storage.ensure_objects(kube_json, spec, FSX, True, [None, None, None])


def _service_account_write(kube_json, spec):
    from skills.eks_cluster_manager import pod_identity

    wanted = pod_identity.service_account(spec.namespace, "b", None)
    return kube_json.apply_owned(wanted, "hint", current=None)


def _model_server_write(kube_json, spec):
    from skills.model_server.kubernetes.manifest import render

    settings = KubernetesServerSettings(namespace=spec.namespace)
    (deployment, _service) = render("web", "Qwen/Qwen2.5-0.5B-Instruct", settings)
    return kube_json.apply_owned(deployment, "hint", label=ownership.MODEL_SERVER_LABEL,
                                 value="web", current=None)  # fmt: skip


@pytest.mark.parametrize(
    ("write", "resource", "name", "kind"),
    [
        (_storage_write, "v1/persistentvolumeclaims", "fsx-claim", "PersistentVolumeClaim"),
        (_service_account_write, "v1/serviceaccounts", "fsdp-eks-s3", "ServiceAccount"),
        (_model_server_write, DEPLOYMENTS, "web", "Deployment"),
    ],
    ids=["a storage claim", "the pods' ServiceAccount", "a model server's Deployment"],
)
def test_an_object_made_by_someone_else_after_the_check_is_not_applied_over(
    kube, write, resource, name, kind
):
    """Each write checks ownership at the write itself: an object that was missing when
    the caller read it, and that someone else has made since, is refused (the create is
    a 409, then it is read and checked), never applied over."""
    from skills.eks_cluster_manager.storage import ClusterStorage
    from skills.kube.access import kube_api_client
    from skills.kube.client import KubeJson

    meta = {"name": name, "namespace": "default", "labels": {"team": "x"}}
    theirs = {"apiVersion": "v1", "kind": kind, "metadata": meta}
    kube.emulator.objects[resource, "default", name] = theirs
    with kube_api_client(kube.kubeconfig) as api, pytest.raises(ToolFailure) as caught:
        write(KubeJson(api), ClusterStorage(cluster="own-d"))
    assert_not_ours(caught, kind)
    assert stored(kube, resource, "default", name)["metadata"]["labels"] == {"team": "x"}


def test_an_nccl_test_whose_random_name_clashes_deletes_nothing_of_the_other_owner(
    kube, monkeypatch
):
    """The NCCL test job deletes what it created, and only that: when its random name is
    already a PyTorchJob of someone else's (409 on create), that job stays, and the
    ConfigMap the run did create is removed."""
    from skills.eks_cluster_manager import nccl_job

    name = "nccl-test-abc123"
    kube.emulator.objects["kubeflow.org/v1/pytorchjobs", "default", name] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "default", "labels": {"team": "theirs"}},
        "spec": {"pytorchReplicaSpecs": {}},
    }
    # The clash is forced through the name's random part, the one input it has.
    monkeypatch.setattr(nccl_job.secrets, "token_hex", lambda _n: "abc123")
    with pytest.raises(ToolFailure):
        nccl_job.run_nccl_test(nodes=1, instance_type="p5.48xlarge", image="img:1")
    theirs = stored(kube, "kubeflow.org/v1/pytorchjobs", "default", name)
    assert theirs is not None and theirs["metadata"]["labels"] == {"team": "theirs"}
    assert stored(kube, "v1/configmaps", "default", name) is None
