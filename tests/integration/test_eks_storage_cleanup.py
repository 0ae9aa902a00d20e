"""manage_eks_cluster action=storage and action=cleanup against moto (EKS, EC2, FSx, S3,
STS) and kmock (the Kubernetes API): the plan lists every write and changes nothing;
confirm applies; the second run is unchanged; cleanup deletes only this suite's
resources, in dependency order, and a second cleanup deletes nothing.

moto's FSx stores file systems but answers without `Lifecycle` and the Lustre
`MountName` that AWS returns; `fsx_as_aws_answers` (tests/services/moto.py) fills them as
AWS does. moto deletes a file system and its security group at once; AWS keeps the file
system DELETING for minutes and refuses the group meanwhile (DependencyViolation): the
same helper plays that with `slow_delete` (test_cleanup_comes_back_for_what_fsx_holds)."""

from __future__ import annotations

import json
import os
import stat
import uuid

import boto3
import kubernetes_validate
import pytest

from commands.manage_eks_cluster import manage_eks_cluster
from skills.eks_cluster_manager import eksctl, ownership, pod_identity, storage
from skills.shared.errors import ToolFailure
from tests.services import eks_cluster as seed
from tests.services.moto import fsx_as_aws_answers

pytestmark = pytest.mark.integration
REGION = "us-east-1"
ACCOUNT = "123456789012"
SUITE = {"created-by": "fsdp-eks"}


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    seed.seed_healthy(kube_api)
    return kube_api


@pytest.fixture
def aws(moto_server, eks_extras):
    eks_extras.reset()  # add-ons and Pod Identity associations (moto has neither)
    with fsx_as_aws_answers():
        yield moto_server


def make_cluster(name: str, tags: dict[str, str] | None = None) -> dict[str, str]:
    """A cluster in a real moto VPC (10.20.0.0/16, two subnets) with two node groups:
    `gpu` (tagged as eksctl tags this suite's) and `byo` (someone else's)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{i}.0/24", AvailabilityZone=f"{REGION}{z}")[
            "Subnet"
        ]["SubnetId"]
        for i, z in ((1, "a"), (2, "b"))
    ]
    eks = boto3.client("eks", region_name=REGION)
    role = f"arn:aws:iam::{ACCOUNT}:role/eks"
    eks.create_cluster(
        name=name,
        roleArn=role,
        resourcesVpcConfig={"subnetIds": subnets},
        version="1.31",
        tags=tags or {},
    )
    for group, group_tags, group_subnets in (
        ("gpu", SUITE, subnets[1:]),
        ("byo", {}, subnets),
    ):
        eks.create_nodegroup(
            clusterName=name,
            nodegroupName=group,
            nodeRole=role,
            subnets=group_subnets,
            instanceTypes=["p4d.24xlarge"],
            scalingConfig={"minSize": 0, "desiredSize": 1, "maxSize": 2},
            tags=group_tags,
        )
    return {"vpc": vpc, "subnet_a": subnets[0], "subnet_b": subnets[1]}


def call(kube, cluster: str, **arguments):
    return manage_eks_cluster(
        cluster_name=cluster, region=REGION, kubeconfig=str(kube.kubeconfig), **arguments
    )


def actions_of(report) -> dict[tuple[str, str], str]:
    return {(r.kind, r.name.split("/")[-1]): r.action for r in report.resources}


def file_systems(cluster: str) -> list[dict]:
    fsx = boto3.client("fsx", region_name=REGION)
    found = fsx.describe_file_systems()["FileSystems"]
    return [fs for fs in found if ownership.ours(fs.get("Tags"), cluster)]


def fsx_group(cluster: str) -> list[dict]:
    ec2 = boto3.client("ec2", region_name=REGION)
    return ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [storage.group_name(cluster)]}]
    )["SecurityGroups"]


def bucket_exists(name: str) -> bool:
    s3 = boto3.client("s3", region_name=REGION)
    return name in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def kube_object(kube, resource: str, namespace: str | None, name: str) -> dict | None:
    try:
        obj = kube.emulator.objects[resource, namespace, name]
    except KeyError:
        return None
    return None if obj.deleted else json.loads(json.dumps(obj.history.last.raw))


def test_storage_plans_applies_and_is_unchanged_the_second_time(aws, kube):
    net = make_cluster("st-a")
    bucket = f"fsdp-eks-st-a-{ACCOUNT}"

    plan = call(kube, "st-a", action="storage")
    # Every write is listed, and nothing was written.
    assert [(r.kind, r.action) for r in plan.resources] == [
        ("SecurityGroup", "create"),
        ("FSx file system", "create"),
        ("S3 bucket", "create"),
        ("IAM role", "create"),
        ("EKS add-on", "create"),
        ("Pod Identity association", "create"),
        ("StorageClass", "create"),
        ("PersistentVolume", "create"),
        ("PersistentVolumeClaim", "create"),
        ("ServiceAccount", "create"),
    ]
    assert "tcp 988 from 10.20.0.0/16 and itself" in plan.resources[0].detail
    assert "tcp 1018-1023" in plan.resources[0].detail
    assert f"1200 GiB SCRATCH_2 in {net['subnet_a']}" == plan.resources[1].detail
    assert plan.summary.startswith("plan: 10 resource(s)")
    assert plan.next_step.arguments["confirm"] is True
    assert plan.next_step.arguments["action"] == "storage"
    # 1200 GiB SCRATCH_2 at $0.140/GiB-month (the dated price table)
    assert plan.cost["usd_per_month"] == 168.0 and "FSx for Lustre SCRATCH_2" in plan.cost["what"]
    assert not file_systems("st-a") and not fsx_group("st-a") and not bucket_exists(bucket)
    assert kube_object(kube, "v1/persistentvolumes", None, storage.PERSISTENT_VOLUME) is None
    assert plan.changes["csi_driver"] == "kube-system/fsx-csi-node"

    applied = call(kube, "st-a", action="storage", confirm=True)
    assert {r.action for r in applied.resources} == {"created"}, applied.resources
    [fs] = file_systems("st-a")
    [group] = fsx_group("st-a")
    assert fs["StorageCapacity"] == 1200 and fs["SubnetIds"] == [net["subnet_a"]]
    # FSx's answer has no security groups (AWS keeps them on the interfaces): read what
    # the create request gave moto's in-process model.
    from moto.fsx.models import fsx_backends

    stored = fsx_backends[ACCOUNT][REGION].file_systems[fs["FileSystemId"]]
    assert stored.security_group_ids == [group["GroupId"]]
    assert fs["LustreConfiguration"]["DeploymentType"] == "SCRATCH_2"
    assert ownership.ours(group["Tags"], "st-a") and group["VpcId"] == net["vpc"]
    rules = {(p["FromPort"], p["ToPort"]): p for p in group["IpPermissions"]}
    assert set(rules) == {(988, 988), (1018, 1023)}
    for rule in rules.values():
        assert rule["IpProtocol"] == "tcp"
        assert [r["CidrIp"] for r in rule["IpRanges"]] == ["10.20.0.0/16"]
        assert [p["GroupId"] for p in rule["UserIdGroupPairs"]] == [group["GroupId"]]
    s3 = boto3.client("s3", region_name=REGION)
    sse = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]
    assert sse["Rules"][0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert all(block.values()) and len(block) == 4
    assert ownership.ours(s3.get_bucket_tagging(Bucket=bucket)["TagSet"], "st-a")

    sc = kube_object(kube, "storage.k8s.io/v1/storageclasses", None, storage.STORAGE_CLASS)
    pv = kube_object(kube, "v1/persistentvolumes", None, storage.PERSISTENT_VOLUME)
    pvc = kube_object(kube, "v1/persistentvolumeclaims", "default", storage.DEFAULT_CLAIM)
    assert sc["provisioner"] == "fsx.csi.aws.com"
    csi = pv["spec"]["csi"]
    assert csi["driver"] == "fsx.csi.aws.com" and csi["volumeHandle"] == fs["FileSystemId"]
    assert csi["volumeAttributes"] == {
        "dnsname": fs["DNSName"],
        "mountname": fs["LustreConfiguration"]["MountName"],
    }
    assert pv["spec"]["capacity"] == {"storage": "1200Gi"}
    assert pvc["spec"]["volumeName"] == storage.PERSISTENT_VOLUME
    assert pvc["spec"]["storageClassName"] == sc["metadata"]["name"]
    for obj in (sc, pv, pvc):
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "fsdp-eks"
    # What was applied is valid Kubernetes (the OpenAPI schema, offline).
    fs_now = file_systems("st-a")[0]
    for obj in storage.kube_objects(storage.ClusterStorage(cluster="st-a"), fs_now):
        kubernetes_validate.validate(obj, "1.31", strict=True)

    for confirm in (False, True):
        again = call(kube, "st-a", action="storage", confirm=confirm)
        assert {r.action for r in again.resources} == {"unchanged"}, again.resources
        assert again.summary.startswith("unchanged") and again.next_step is None
    assert len(file_systems("st-a")) == 1 and len(fsx_group("st-a")) == 1


def test_storage_repairs_what_differs_and_leaves_someone_elses_bucket(aws, kube):
    make_cluster("st-b")
    call(kube, "st-b", action="storage", confirm=True, fsx_deployment_type="PERSISTENT_2")
    [group] = fsx_group("st-b")
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.revoke_security_group_ingress(
        GroupId=group["GroupId"],
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 988, "ToPort": 988,
             "IpRanges": [{"CidrIp": "10.20.0.0/16"}]}
        ],
    )  # fmt: skip
    s3 = boto3.client("s3", region_name=REGION)
    bucket = f"fsdp-eks-st-b-{ACCOUNT}"
    s3.delete_public_access_block(Bucket=bucket)
    objects = kube.emulator.objects
    del objects["v1/persistentvolumeclaims", "default", storage.DEFAULT_CLAIM]

    plan = call(kube, "st-b", action="storage", fsx_deployment_type="PERSISTENT_2")
    assert actions_of(plan) == {
        ("SecurityGroup", group["GroupId"]): "update",
        ("FSx file system", file_systems("st-b")[0]["FileSystemId"]): "unchanged",
        ("S3 bucket", bucket): "update",
        ("IAM role", pod_identity.role_name("st-b", "default")): "unchanged",
        ("EKS add-on", "eks-pod-identity-agent"): "unchanged",
        ("Pod Identity association", "fsdp-eks-s3"): "unchanged",
        ("StorageClass", storage.STORAGE_CLASS): "unchanged",
        ("PersistentVolume", storage.PERSISTENT_VOLUME): "unchanged",
        ("PersistentVolumeClaim", storage.DEFAULT_CLAIM): "create",
        ("ServiceAccount", "fsdp-eks-s3"): "unchanged",
    }
    assert plan.resources[0].detail.endswith("add tcp 988 from 10.20.0.0/16")
    assert plan.resources[2].detail == "turn on public access block"
    call(kube, "st-b", action="storage", confirm=True, fsx_deployment_type="PERSISTENT_2")
    assert {r.action for r in call(kube, "st-b", action="storage").resources} == {"unchanged"}
    lustre = file_systems("st-b")[0]["LustreConfiguration"]
    assert lustre["PerUnitStorageThroughput"] == storage.THROUGHPUT["PERSISTENT_2"]

    # Another size asked of an existing file system: reported, never resized.
    other = call(kube, "st-b", action="storage", fsx_size_gib=2400)
    assert "asked 2400 GiB SCRATCH_2: left as it is" in other.resources[1].detail

    # A bucket this suite did not make is used as it is, never reconfigured.
    s3.create_bucket(Bucket="someone-elses-bucket")
    mine = call(kube, "st-b", action="storage", bucket="someone-elses-bucket", confirm=True)
    row = [r for r in mine.resources if r.kind == "S3 bucket"][0]
    assert row.action == "keep" and "not created by fsdp-eks" in row.detail
    assert "no default encryption and no public access block" in row.detail
    with pytest.raises(s3.exceptions.ClientError):
        s3.get_public_access_block(Bucket="someone-elses-bucket")


def test_storage_without_the_csi_driver_says_how_to_install_it(aws, kube):
    make_cluster("st-c")
    del kube.emulator.objects[seed.FSX_DS]
    plan = call(kube, "st-c", action="storage", nodegroup="gpu")
    assert plan.changes["csi_driver"].startswith("missing")
    assert "--addon-name aws-fsx-csi-driver" in plan.hint
    assert "AmazonFSxFullAccess" in plan.hint
    assert plan.next_step.arguments == {
        "action": "storage", "cluster_name": "st-c", "region": REGION, "nodegroup": "gpu",
        "kubeconfig": str(kube.kubeconfig), "confirm": True,
    }  # fmt: skip
    # nodegroup places the file system in the GPU nodes' subnet (their AZ).
    gpu_subnet = boto3.client("eks", region_name=REGION).describe_nodegroup(
        clusterName="st-c", nodegroupName="gpu"
    )["nodegroup"]["subnets"][0]
    assert plan.resources[1].detail.endswith(f"in {gpu_subnet}")


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"fsx_size_gib": 1300}, "fsx_size_gib"),
        ({"fsx_size_gib": 4800, "fsx_deployment_type": "SCRATCH_1"}, "fsx_size_gib"),
        ({"bucket": "Bad_Bucket"}, "bucket"),
    ],
)
def test_storage_bad_input_is_typed(aws, kube, arguments, field):
    make_cluster(f"st-bad-{field}-{len(arguments)}")
    with pytest.raises(ToolFailure) as failure:
        call(kube, f"st-bad-{field}-{len(arguments)}", action="storage", **arguments)
    assert failure.value.code == "invalid_input"
    assert failure.value.details["problems"][0]["field"] == field


@pytest.mark.parametrize("action", ["storage", "cleanup"])
def test_an_unknown_cluster_is_not_found_with_the_regions_clusters(aws, kube, action):
    make_cluster(f"known-{action}")
    with pytest.raises(ToolFailure) as caught:
        call(kube, "nope", action=action)
    assert caught.value.code == "not_found"
    assert f"known-{action}" in caught.value.details["clusters"]


def test_valid_fsx_sizes():
    for size in (1200, 2400, 4800, 9600):
        storage.check_size("PERSISTENT_2", size)
    for size in (1200, 2400, 3600, 7200):
        storage.check_size("SCRATCH_1", size)
    for kind, size in (("SCRATCH_2", 3600), ("SCRATCH_1", 4800), ("PERSISTENT_1", 0)):
        with pytest.raises(ToolFailure):
            storage.check_size(kind, size)


def test_the_suite_tag_is_the_one_eksctl_puts_on_its_clusters():
    config = eksctl.cluster_config(
        eksctl.ConfigSpec(cluster_name="c", region=REGION, instance_type="p4d.24xlarge", nodes=1)
    )
    assert config["metadata"]["tags"] == dict([ownership.CREATED_BY_TAG])


def seed_workloads(kube) -> None:
    """A job and a model server of this suite's, and objects that are not."""
    ours = {"app.kubernetes.io/managed-by": "fsdp-eks"}
    objects = kube.emulator.objects
    for name, labels in (("train", ours), ("theirs", {})):
        objects["kubeflow.org/v1/pytorchjobs", "default", name] = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
        }
    server = {**ours, "fsdp-eks/model-server": "demo"}
    for resource, kind in (("apps/v1/deployments", "Deployment"), ("v1/services", "Service")):
        objects[resource, "serve", "demo"] = {
            "apiVersion": "apps/v1" if kind == "Deployment" else "v1",
            "kind": kind,
            "metadata": {"name": "demo", "namespace": "serve", "labels": server},
        }
    for name, labels in (("demo-hf-token", server), ("train-hf-token", ours), ("other", {})):
        objects["v1/secrets", "default", name] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
        }


def test_cleanup_deletes_the_suites_stack_in_order_and_twice_deletes_nothing(aws, kube):
    make_cluster("cl-a")
    call(kube, "cl-a", action="storage", confirm=True)
    seed_workloads(kube)
    bucket = f"fsdp-eks-cl-a-{ACCOUNT}"
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_object(Bucket=bucket, Key="checkpoints/step-1/COMPLETE", Body=b"")
    [fs] = file_systems("cl-a")
    [group] = fsx_group("cl-a")

    plan = call(kube, "cl-a", action="cleanup", delete_bucket="if_empty")
    expected = [
        ("PyTorchJob", "default/train"),
        ("Deployment", "serve/demo"),
        ("Service", "serve/demo"),
        ("Secret", "default/demo-hf-token"),
        ("Secret", "default/train-hf-token"),
        ("PersistentVolumeClaim", f"default/{storage.DEFAULT_CLAIM}"),
        ("PersistentVolume", storage.PERSISTENT_VOLUME),
        ("StorageClass", storage.STORAGE_CLASS),
        ("ServiceAccount", "default/fsdp-eks-s3"),
        ("node group", "gpu"),
        ("FSx file system", fs["FileSystemId"]),
        ("SecurityGroup", group["GroupId"]),
        ("Pod Identity association", "default/fsdp-eks-s3"),
        ("IAM role", pod_identity.role_name("cl-a", "default")),
    ]
    deletes = [(r.kind, r.name) for r in plan.resources if r.action == "delete"]
    assert deletes == expected  # the dependency order, and only this suite's
    kept = {(r.kind, r.name): r.detail for r in plan.resources if r.action == "keep"}
    assert kept == {
        ("node group", "byo"): "not created by fsdp-eks",
        ("S3 bucket", bucket): "has objects: delete_bucket=with_objects deletes them too",
    }
    assert plan.summary == f"plan: {len(expected)} resource(s) to delete; nothing deleted"
    assert file_systems("cl-a") and kube_object(kube, "v1/services", "serve", "demo")

    done = call(kube, "cl-a", action="cleanup", delete_bucket="if_empty", confirm=True)
    assert [(r.kind, r.name) for r in done.resources if r.action == "deleted"] == expected
    left = {(r.kind, r.name): r.detail for r in done.resources if r.action in ("left", "keep")}
    assert left == kept  # what stays, with the same why as the plan said
    assert not file_systems("cl-a") and not fsx_group("cl-a") and bucket_exists(bucket)
    eks = boto3.client("eks", region_name=REGION)
    assert eks.list_nodegroups(clusterName="cl-a")["nodegroups"] == ["byo"]
    assert kube_object(kube, "kubeflow.org/v1/pytorchjobs", "default", "train") is None
    assert kube_object(kube, "kubeflow.org/v1/pytorchjobs", "default", "theirs") is not None
    assert kube_object(kube, "v1/secrets", "default", "other") is not None
    assert kube_object(kube, "apps/v1/deployments", "serve", "demo") is None
    assert kube_object(kube, "v1/persistentvolumes", None, storage.PERSISTENT_VOLUME) is None
    # One list per kind (9 kinds) and one of the suite's namespaces (none here), one DELETE
    # per object (9 of them), nothing else.
    assert done.changes["kubernetes_calls"] == 10 + 9
    assert done.changes["aws_calls"] > 0 and done.api_calls == (
        done.changes["aws_calls"] + done.changes["kubernetes_calls"]
    )

    again = call(kube, "cl-a", action="cleanup", delete_bucket="if_empty", confirm=True)
    assert not [r for r in again.resources if r.action in ("deleted", "failed")]

    emptied = call(kube, "cl-a", action="cleanup", delete_bucket="with_objects", confirm=True)
    assert actions_of(emptied)[("S3 bucket", bucket)] == "deleted"
    assert not bucket_exists(bucket)


def test_cleanup_only_a_part_and_the_cluster_through_eksctl(aws, kube, tmp_path, monkeypatch):
    make_cluster("cl-b", tags=SUITE)
    call(kube, "cl-b", action="storage", confirm=True)
    seed_workloads(kube)
    only = call(kube, "cl-b", action="cleanup", only=["nodegroups"], confirm=True)
    assert [(r.kind, r.name, r.action) for r in only.resources] == [
        ("node group", "byo", "keep"),
        ("node group", "gpu", "deleted"),
        ("S3 bucket", f"fsdp-eks-cl-b-{ACCOUNT}", "keep"),  # reported, never without asking
    ]
    assert file_systems("cl-b")  # the rest stays

    # eksctl: a stand-in on PATH that records its argv (the real one is not here).
    record = tmp_path / "eksctl-argv"
    fake = tmp_path / "bin" / "eksctl"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" > {record}\necho deleted cluster\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    plan = call(kube, "cl-b", action="cleanup", delete_cluster=True)
    assert plan.resources[-1].action == "delete"
    assert (
        plan.resources[-1].detail == "`eksctl delete cluster --name cl-b --region us-east-1 --wait`"
    )
    assert not record.exists()
    done = call(kube, "cl-b", action="cleanup", delete_cluster=True, confirm=True)
    assert (done.resources[-1].kind, done.resources[-1].action) == ("EKS cluster", "deleted")
    assert record.read_text().split() == [
        "delete", "cluster", "--name", "cl-b", "--region", "us-east-1", "--wait"
    ]  # fmt: skip


def test_cleanup_leaves_a_cluster_it_did_not_make(aws, kube):
    make_cluster("cl-c")  # no created-by tag
    plan = call(kube, "cl-c", action="cleanup", delete_cluster=True)
    row = plan.resources[-1]
    assert (row.kind, row.action) == ("EKS cluster", "keep")
    assert "not created by fsdp-eks" in row.detail


def test_cleanup_comes_back_for_what_fsx_holds(moto_server, kube, tmp_path, monkeypatch):
    """As on AWS: the file system takes minutes to go, its interfaces hold the security
    group and the cluster's VPC; the first cleanup leaves both, saying why; a later one
    deletes them."""
    with fsx_as_aws_answers(slow_delete=True) as fsx:
        make_cluster("cl-d", tags=SUITE)
        call(kube, "cl-d", action="storage", confirm=True)
        [group] = fsx_group("cl-d")
        fake = tmp_path / "bin" / "eksctl"
        fake.parent.mkdir()
        fake.write_text("#!/bin/sh\necho deleted\n")
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")

        first = call(kube, "cl-d", action="cleanup", delete_cluster=True, confirm=True)
        rows = {r.kind: r for r in first.resources}
        assert rows["FSx file system"].action == "deleted"
        assert rows["SecurityGroup"].action == "left"
        assert "still in use" in rows["SecurityGroup"].detail
        assert rows["EKS cluster"].action == "left"
        assert "file system is gone" in rows["EKS cluster"].detail
        assert first.next_step.arguments["confirm"] and first.next_step.arguments["delete_cluster"]
        assert "left" in first.next_step.why
        assert file_systems("cl-d")[0]["Lifecycle"] == "DELETING" and fsx_group("cl-d")

        while_deleting = call(kube, "cl-d", action="cleanup", delete_cluster=True, confirm=True)
        assert actions_of(while_deleting)[("FSx file system", rows["FSx file system"].name)] == (
            "left"
        )  # already deleting: not deleted twice
        fsx.finish_deletions()
        last = call(kube, "cl-d", action="cleanup", delete_cluster=True, confirm=True)
        assert actions_of(last)[("SecurityGroup", group["GroupId"])] == "deleted"
        assert actions_of(last)[("EKS cluster", "cl-d")] == "deleted"
        assert not fsx_group("cl-d")


def test_storage_waits_for_a_mount_name_and_finishes_on_the_next_run(moto_server, eks_extras,
                                                                     kube):  # fmt: skip
    """moto alone answers with no MountName (as a file system might before FSx fills it
    in): the claim is left with why, and the next run, with the answer complete, makes it."""
    make_cluster("st-d")
    first = call(kube, "st-d", action="storage", confirm=True)
    rows = {r.kind: r for r in first.resources}
    assert rows["FSx file system"].action == "created"
    assert rows["PersistentVolume"].action == "left"
    assert "mount name" in rows["PersistentVolume"].detail
    assert kube_object(kube, "v1/persistentvolumes", None, storage.PERSISTENT_VOLUME) is None
    with fsx_as_aws_answers():
        second = call(kube, "st-d", action="storage", confirm=True)
    assert [r.action for r in second.resources] == [
        "unchanged", "unchanged", "unchanged", "unchanged", "unchanged", "unchanged",
        "created", "created", "created", "unchanged",
    ]  # fmt: skip
    assert len(file_systems("st-d")) == 1


def test_storage_writes_nothing_when_the_kubernetes_api_is_unreachable(aws):
    """moto's cluster endpoint is fake: the API is asked first, so nothing is half made."""
    make_cluster("st-e")
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(action="storage", cluster_name="st-e", region=REGION, confirm=True)
    assert failure.value.code == "endpoint_unreachable"
    assert not file_systems("st-e") and not fsx_group("st-e")
    assert not bucket_exists(f"fsdp-eks-st-e-{ACCOUNT}")


# --- cleanup honours the cluster tag: two clusters of this suite's, each with its storage
# (file system, security group, bucket); cleaning one plans, deletes and waits on nothing of
# the other's; a bucket of this suite's made for another cluster under this one's name stays.


def ids(cluster: str) -> set[str]:
    return {fs["FileSystemId"] for fs in file_systems(cluster)} | {
        g["GroupId"] for g in fsx_group(cluster)
    }


def test_cleanup_plans_deletes_and_waits_on_nothing_of_another_clusters(
    aws, kube, tmp_path, monkeypatch
):
    mine, other = (f"tag-{uuid.uuid4().hex[:6]}" for _ in range(2))
    for cluster in (mine, other):
        make_cluster(cluster, tags=SUITE)
        call(kube, cluster, action="storage", confirm=True)
    theirs = ids(other)
    assert len(theirs) == 2 and len(ids(mine)) == 2

    plan = call(kube, mine, action="cleanup", delete_bucket="with_objects", delete_cluster=True)
    named = {r.name.split("/")[-1] for r in plan.resources}
    assert not named & theirs and f"fsdp-eks-{other}-{ACCOUNT}" not in named
    assert ids(mine) <= named

    done = call(kube, mine, action="cleanup", only=["fsx"], delete_bucket="with_objects",
                confirm=True)  # fmt: skip
    assert not file_systems(mine) and ids(other) == theirs
    assert not bucket_exists(f"fsdp-eks-{mine}-{ACCOUNT}")
    assert bucket_exists(f"fsdp-eks-{other}-{ACCOUNT}")
    assert not {r.name for r in done.resources if r.action == "deleted"} & theirs

    # Only the other cluster's file system is left: it does not hold this cluster back.
    eksctl = tmp_path / "bin" / "eksctl"  # a stand-in on PATH (the real one is not here)
    eksctl.parent.mkdir()
    eksctl.write_text("#!/bin/sh\necho deleted\n")
    eksctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{eksctl.parent}{os.pathsep}{os.environ['PATH']}")
    after = call(kube, mine, action="cleanup", only=["fsx"], delete_cluster=True, confirm=True)
    row = after.resources[-1]
    assert (row.kind, row.name, row.action) == ("EKS cluster", mine, "deleted"), row.detail


def test_a_bucket_of_another_clusters_under_this_clusters_name_is_kept(aws, kube):
    mine = f"tag-{uuid.uuid4().hex[:6]}"
    make_cluster(mine, tags=SUITE)
    bucket = f"fsdp-eks-{mine}-{ACCOUNT}"
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=bucket)
    tags = ownership.tag_list(ownership.aws_tags("someone-else", bucket))
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags})
    done = call(kube, mine, action="cleanup", delete_bucket="with_objects", confirm=True)
    (row,) = [r for r in done.resources if r.kind == "S3 bucket"]
    assert row.action == "keep" and "someone-else" in row.detail
    assert bucket_exists(bucket)
