"""Issue 29 item 3: what pods need to read and write the suite's bucket, made by
manage_eks_cluster action=storage against moto (IAM, S3, EKS, EC2, FSx) and kmock (the
ServiceAccount, the PyTorchJob), and used by the training job: the job's pods name the
ServiceAccount that the Pod Identity association binds to a role reaching that bucket
only. Cleanup removes exactly what storage made.

moto (5.2.5, the newest release) serves neither EKS add-ons nor Pod Identity
associations: tests/services/eks_extras.py answers those EKS API paths as botocore's
service model defines them, in front of moto (`AWS_ENDPOINT_URL_EKS`), and forwards the
rest to moto. The role, its policies and tags are moto's IAM."""

from __future__ import annotations

import json

import boto3
import pytest
import yaml

from commands.deploy_training_job import deploy_training_job
from commands.manage_eks_cluster import manage_eks_cluster
from skills.eks_cluster_manager import pod_identity
from skills.kube.identity import S3_SERVICE_ACCOUNT
from skills.shared.errors import ToolFailure
from tests.integration.test_eks_storage_cleanup import kube_object, make_cluster
from tests.services import eks_cluster as seed
from tests.services.moto import fsx_as_aws_answers

pytestmark = pytest.mark.integration
REGION = "us-east-1"
ACCOUNT = "123456789012"
IMAGE = "localhost:9/fsdp:v1"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    seed.seed_healthy(kube_api, instance_type="p5.48xlarge")
    return kube_api


@pytest.fixture
def aws(moto_server, eks_extras):
    eks_extras.reset()
    with fsx_as_aws_answers():
        yield moto_server


def storage(kube, cluster: str, **arguments):
    return manage_eks_cluster(action="storage", cluster_name=cluster, region=REGION,
                              kubeconfig=str(kube.kubeconfig), **arguments)  # fmt: skip


def job(kube, **arguments):
    args = {"job_name": "s3job", "target": "kubernetes", "kubeconfig": str(kube.kubeconfig),
            "image_uri": IMAGE, "instance_type": "p5.48xlarge", "skip_gate": True,
            "wait_seconds": 0}  # fmt: skip
    return deploy_training_job(**{**args, **arguments})


def pod_specs(manifest: dict) -> list[dict]:
    return [r["template"]["spec"] for r in manifest["spec"]["pytorchReplicaSpecs"].values()]


def test_an_s3_job_runs_as_the_service_account_storage_binds_to_a_role_for_its_bucket(aws, kube):
    make_cluster("id-a")
    bucket = f"fsdp-eks-id-a-{ACCOUNT}"
    role_a = pod_identity.role_name("id-a", "default")  # the namespace's own role
    iam = boto3.client("iam", region_name=REGION)
    eks = boto3.client("eks", region_name=REGION)

    plan = storage(kube, "id-a")
    rows = {r.kind: r for r in plan.resources}
    assert rows["IAM role"].action == "create" and bucket in rows["IAM role"].detail
    assert rows["EKS add-on"].action == "create"
    assert rows["Pod Identity association"].action == "create"
    assert rows["ServiceAccount"].action == "create"
    assert plan.changes["service_account"] == f"default/{S3_SERVICE_ACCOUNT}"
    # The plan wrote nothing.
    assert role_a not in [r["RoleName"] for r in iam.list_roles()["Roles"]]
    assert not eks.list_pod_identity_associations(clusterName="id-a")["associations"]
    assert kube_object(kube, "v1/serviceaccounts", "default", S3_SERVICE_ACCOUNT) is None

    applied = storage(kube, "id-a", confirm=True)
    assert {r.action for r in applied.resources} == {"created"}, applied.resources
    role = iam.get_role(RoleName=role_a)["Role"]
    trust = role["AssumeRolePolicyDocument"]
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(statement["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    assert statement["Condition"]["StringEquals"] == {
        "aws:RequestTag/eks-cluster-name": "id-a",
        "aws:RequestTag/kubernetes-namespace": "default",
        "aws:RequestTag/kubernetes-service-account": S3_SERVICE_ACCOUNT,
    }
    # The role reaches that bucket and nothing else: one inline policy, no managed ones.
    assert iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"] == [
        pod_identity.POLICY_NAME
    ]
    assert not iam.list_attached_role_policies(RoleName=role["RoleName"])["AttachedPolicies"]
    name = role["RoleName"]
    document = iam.get_role_policy(RoleName=name, PolicyName=pod_identity.POLICY_NAME)
    document = document["PolicyDocument"]
    resources = {s["Resource"] for s in document["Statement"]}
    assert resources == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"}
    assert all(a.startswith("s3:") for s in document["Statement"] for a in s["Action"])
    assert eks.describe_addon(clusterName="id-a", addonName="eks-pod-identity-agent")["addon"]
    (summary,) = eks.list_pod_identity_associations(clusterName="id-a")["associations"]
    association = eks.describe_pod_identity_association(
        clusterName="id-a", associationId=summary["associationId"]
    )["association"]
    assert association["roleArn"] == role["Arn"]
    account = kube_object(kube, "v1/serviceaccounts", "default", S3_SERVICE_ACCOUNT)
    assert account["metadata"]["annotations"]["fsdp-eks/s3-bucket"] == bucket

    # The job that names s3://<bucket>: its dry run says who its pods are, and they are
    # the association's ServiceAccount, in its namespace.
    checkpoints = f"s3://{bucket}/checkpoints/s3job"
    dry = job(kube, checkpoint_dir=checkpoints, dry_run=True)
    for spec in pod_specs(dry.plan.manifest):
        assert spec["serviceAccountName"] == association["serviceAccount"]
    assert association["namespace"] == dry.plan.namespace
    assert dry.plan.service_account == S3_SERVICE_ACCOUNT and bucket in dry.plan.identity
    assert not [w for w in dry.plan.warnings if S3_SERVICE_ACCOUNT in w], dry.plan.warnings
    started = job(kube, checkpoint_dir=checkpoints)
    assert started.status in ("pending", "running"), started
    created = kube_object(kube, "kubeflow.org/v1/pytorchjobs", "default", "s3job")
    assert {s["serviceAccountName"] for s in pod_specs(created)} == {S3_SERVICE_ACCOUNT}

    # A second storage run changes nothing.
    again = storage(kube, "id-a")
    assert {r.action for r in again.resources} == {"unchanged"}, again.resources

    # Cleanup removes the association, the role (policy first) and the ServiceAccount.
    done = manage_eks_cluster(action="cleanup", cluster_name="id-a", region=REGION,
                              kubeconfig=str(kube.kubeconfig), confirm=True)  # fmt: skip
    removed = {(r.kind, r.action) for r in done.resources}
    assert {("IAM role", "deleted"), ("Pod Identity association", "deleted"),
            ("ServiceAccount", "deleted")} <= removed  # fmt: skip
    assert role_a not in [r["RoleName"] for r in iam.list_roles()["Roles"]]
    assert not eks.list_pod_identity_associations(clusterName="id-a")["associations"]
    assert kube_object(kube, "v1/serviceaccounts", "default", S3_SERVICE_ACCOUNT) is None


def test_a_dry_run_warns_when_no_identity_reaches_the_path(aws, kube):
    # No ServiceAccount at all: the dry run says so, and the submit is refused (its pods
    # could never be created), before anything is written.
    dry = job(kube, dataset="s3://someone-elses/data.jsonl", dry_run=True)
    assert any("no ServiceAccount default/fsdp-eks-s3" in w for w in dry.plan.warnings)
    with pytest.raises(ToolFailure) as caught:
        job(kube, dataset="s3://someone-elses/data.jsonl")
    assert caught.value.code == "not_found" and "action=storage" in caught.value.hint
    assert kube_object(kube, "kubeflow.org/v1/pytorchjobs", "default", "s3job") is None

    # The ServiceAccount reaches another bucket: the dry run names the one it reaches.
    make_cluster("id-b")
    storage(kube, "id-b", confirm=True)
    dry = job(kube, dataset="s3://someone-elses/data.jsonl", dry_run=True)
    (warning,) = [w for w in dry.plan.warnings if "reaches" in w]
    assert f"s3://fsdp-eks-id-b-{ACCOUNT} only" in warning and "s3://someone-elses" in warning

    # A job with no s3:// path keeps the namespace's default identity.
    plain = job(kube, dry_run=True)
    assert all("serviceAccountName" not in s for s in pod_specs(plain.plan.manifest))
    assert "default" in plain.plan.identity


def test_a_role_of_that_name_made_by_someone_else_is_never_changed(aws, kube):
    make_cluster("id-c")
    iam = boto3.client("iam", region_name=REGION)
    name = pod_identity.role_name("id-c", "default")
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": []}))  # fmt: skip
    with pytest.raises(ToolFailure) as caught:
        storage(kube, "id-c")
    assert caught.value.code == "conflict" and caught.value.hint
    assert not iam.list_role_policies(RoleName=name)["PolicyNames"]


def test_new_clusters_get_the_pod_identity_agent_from_create_config(moto_server):
    report = manage_eks_cluster(action="create_config", cluster_name="id-d", region=REGION,
                                instance_type="p5.48xlarge", kubernetes_version="1.34")  # fmt: skip
    config = yaml.safe_load(report.config_yaml)
    assert {"name": pod_identity.AGENT_ADDON} in config["addons"]
    assert config["metadata"]["version"] == "1.34"


def association_of(eks, cluster: str, namespace: str) -> dict:
    (summary,) = [a for a in eks.list_pod_identity_associations(clusterName=cluster)[
        "associations"] if a["namespace"] == namespace]  # fmt: skip
    return eks.describe_pod_identity_association(
        clusterName=cluster, associationId=summary["associationId"]
    )["association"]


def reach(iam, role_arn: str) -> tuple[str, set[str]]:
    """(the namespace the role's trust admits, the S3 resources its policy names)."""
    name = role_arn.rsplit("/", 1)[-1]
    (statement,) = iam.get_role(RoleName=name)["Role"]["AssumeRolePolicyDocument"]["Statement"]
    document = iam.get_role_policy(RoleName=name, PolicyName=pod_identity.POLICY_NAME)
    resources = {s["Resource"] for s in document["PolicyDocument"]["Statement"]}
    return statement["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-namespace"], resources


def test_storage_for_a_second_namespace_leaves_the_first_namespaces_access_whole(aws, kube):
    """Issue 45 finding 6: one role per namespace (least privilege, as AWS recommends for
    Pod Identity), so the second namespace's storage neither revokes the first's access
    (one shared role's trust was rewritten to the last namespace) nor widens it."""
    make_cluster("id-e")
    iam = boto3.client("iam", region_name=REGION)
    eks = boto3.client("eks", region_name=REGION)
    first, second = f"fsdp-eks-id-e-{ACCOUNT}", "fsdp-eks-team-b-data"
    storage(kube, "id-e", confirm=True)
    storage(kube, "id-e", namespace="team-b", bucket=second, confirm=True)

    wanted = {"default": first, "team-b": second}
    roles = {}
    for namespace, bucket in wanted.items():
        association = association_of(eks, "id-e", namespace)
        roles[namespace] = association["roleArn"]
        assert reach(iam, association["roleArn"]) == (
            namespace, {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"})  # fmt: skip
    assert roles["default"] != roles["team-b"]
    # The first namespace again: nothing of either changes.
    again = storage(kube, "id-e")
    assert {(r.kind, r.action) for r in again.resources if "IAM" in r.kind} == {
        ("IAM role", "unchanged")}  # fmt: skip
    assert reach(iam, association_of(eks, "id-e", "team-b")["roleArn"])[0] == "team-b"

    # Cleanup removes both namespaces' roles, and the one per-cluster role an older
    # release made (tagged as the suite's); a role of the prefix for another cluster stays.
    from skills.eks_cluster_manager import ownership

    legacy = pod_identity.legacy_role_name("id-e")
    iam.create_role(RoleName=legacy, AssumeRolePolicyDocument=json.dumps(
        pod_identity.trust_policy("id-e", "default")),
        Tags=ownership.tag_list(ownership.aws_tags("id-e", legacy)))  # fmt: skip
    elsewhere = pod_identity.role_name("id-other", "default")
    iam.create_role(RoleName=elsewhere, AssumeRolePolicyDocument=json.dumps(
        pod_identity.trust_policy("id-other", "default")),
        Tags=ownership.tag_list(ownership.aws_tags("id-other", elsewhere)))  # fmt: skip
    done = manage_eks_cluster(action="cleanup", cluster_name="id-e", region=REGION,
                              kubeconfig=str(kube.kubeconfig), confirm=True)  # fmt: skip
    deleted = {r.name for r in done.resources if (r.kind, r.action) == ("IAM role", "deleted")}
    assert deleted == {roles["default"].rsplit("/", 1)[-1], roles["team-b"].rsplit("/", 1)[-1],
                       legacy}  # fmt: skip
    left = {r["RoleName"] for r in iam.list_roles()["Roles"]}
    assert elsewhere in left and not deleted & left
