"""The pinned component table, a test per row: every manifest is valid Kubernetes (the
offline strict schemas of kubernetes-validate, for Kubernetes 1.30 and 1.33, CRDs
included) and pinned (no :latest; that each is upstream's own manifest with only listed
changes is test_eks_upstream.py). The NCCL job validates against the real PyTorchJob CRD
and its pod template against the core schemas; the eksctl config against eksctl's
ClusterConfig fields (a subset of its schema written from eksctl's documentation) and
holds no credentials."""

from __future__ import annotations

import functools
import re

import jsonschema
import kubernetes_validate
import pytest
import yaml

from commands.manage_eks_cluster import manage_eks_cluster
from skills.eks_cluster_manager import storage_kube
from skills.eks_cluster_manager.components import COMPONENTS, CRD_NAME, pytorchjob_crd
from skills.eks_cluster_manager.nccl_job import manifests as nccl_manifests
from skills.kube.objects import KINDS, object_path
from skills.shared import ownership
from skills.shared.errors import ToolFailure
from skills.shared.secrets import looks_like_secret

# The oldest and the newest Kubernetes versions EKS supports in standard support as these
# manifests were checked (kubernetes-validate ships 1.25-1.37), and the default, 1.36.
K8S_VERSIONS = ("1.30", "1.33", "1.36")


@pytest.mark.parametrize("k8s", K8S_VERSIONS)
@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.key)
def test_every_component_manifest_is_valid_and_pinned(component, k8s):
    objects = component.manifests("jobs")
    assert objects
    custom = _custom_schemas()
    for obj in objects:
        assert obj["kind"] in KINDS and object_path(obj).startswith(("/api/v1", "/apis/"))
        if obj["kind"] in custom:  # a kind of a vendored CRD: that CRD's schema
            jsonschema.validate(obj, custom[obj["kind"]])
            continue
        kubernetes_validate.validate(obj, k8s, strict=True)
        for container in _containers(obj):
            # The image upstream pins (the Training Operator's tag is v1-<sha>, not v1.9.4).
            assert container["image"] == component.image and ":latest" not in container["image"]
    if component.key == "etcd":  # etcd goes where the job runs
        assert {o["metadata"]["namespace"] for o in objects} == {"jobs"}


@functools.cache
def _custom_schemas() -> dict:
    """Kind -> the openAPIV3Schema of its CRD, for the CRDs the components install."""
    crds = [o for c in COMPONENTS if c.key != "etcd" for o in c.manifests()
            if o["kind"] == "CustomResourceDefinition"]  # fmt: skip
    return {c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            for c in crds}  # fmt: skip


def _containers(obj):
    spec = obj.get("spec", {})
    return spec.get("template", {}).get("spec", {}).get("containers", spec.get("containers", []))


def test_the_crd_is_the_v1_9_pytorchjob_crd():
    crd = pytorchjob_crd()
    assert crd["metadata"]["name"] == CRD_NAME
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1"]


def test_the_nccl_job_fits_the_pytorchjob_schema():
    config_map, job = nccl_manifests("nccl-test-abc123", "default", 4, "p4d.24xlarge", "img:1")
    for k8s in K8S_VERSIONS:
        kubernetes_validate.validate(config_map, k8s, strict=True)
        for replica in job["spec"]["pytorchReplicaSpecs"].values():
            kubernetes_validate.validate(pod_template(replica["template"]), k8s, strict=True)
    schema = pytorchjob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.validate(job, schema)
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    assert job["spec"]["nprocPerNode"] == "8"
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    # skills.kube.efa: EFA devices, the p4d row's variables, and no huge pages: with
    # FI_EFA_USE_HUGE_PAGE=0 libfabric takes none (issue 51)
    assert limits == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "4"}
    assert container["resources"]["requests"] == limits
    assert {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"} in container["env"]
    (_, single) = nccl_manifests("nccl-test-abc123", "default", 1, "g5.xlarge", "img:1")
    assert "Worker" not in single["spec"]["pytorchReplicaSpecs"]
    env = single["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert "vpc.amazonaws.com/efa" not in env["resources"]["limits"]  # g5.xlarge has no EFA


def pod_template(template: dict) -> dict:
    """A PyTorchJob replica's pod template as a core PodTemplate (for the core schemas)."""
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "t"},
        "template": template,
    }


def test_the_nccl_jobs_objects_carry_the_suites_label_for_cleanup():
    # A worker killed mid-run leaves them; action=cleanup lists by the suite's label only.
    objects = nccl_manifests("nccl-test-abc123", "default", 2, "p4d.24xlarge", "img:1")
    pods = [r["template"] for r in objects[1]["spec"]["pytorchReplicaSpecs"].values()]
    for labelled in [*objects, *pods]:
        assert ownership.why_not_ours_kube(labelled, "fsdp-eks/nccl-test") is None, labelled


def test_g5_nccl_job_sets_no_device_rdma():
    # libfabric aborts with FI_EFA_USE_DEVICE_RDMA=1 on EFA without RDMA read (g5, p3dn).
    (_, job) = nccl_manifests("nccl-test-abc123", "default", 2, "g5.48xlarge", "img:1")
    env = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
    names = {e["name"] for e in env}
    assert "FI_PROVIDER" in names and "FI_EFA_USE_DEVICE_RDMA" not in names


# What eksctl's ClusterConfig (eksctl.io/v1alpha5) accepts, for the fields written here.
_TAINT = {
    "type": "object",
    "required": ["key", "effect"],
    "additionalProperties": False,
    "properties": {
        "key": {"type": "string"},
        "value": {"type": "string"},
        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
    },
}
_MNG = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-zA-Z0-9][a-zA-Z0-9-]*$"},
        "instanceType": {"type": "string"},
        "minSize": {"type": "integer", "minimum": 0},
        "maxSize": {"type": "integer", "minimum": 1},
        "desiredCapacity": {"type": "integer", "minimum": 0},
        "volumeSize": {"type": "integer", "minimum": 1},
        "volumeType": {"enum": ["gp2", "gp3", "io1", "io2"]},
        "privateNetworking": {"type": "boolean"},
        "efaEnabled": {"type": "boolean"},
        "availabilityZones": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "taints": {"type": "array", "items": _TAINT},
        "iam": {
            "type": "object",
            "properties": {
                "withAddonPolicies": {"type": "object", "additionalProperties": {"type": "boolean"}}
            },
        },
        "capacityReservation": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "capacityReservationTarget": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"capacityReservationID": {"type": "string"}},
                }
            },
        },
    },
}
EKSCTL_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "eksctl.io/v1alpha5"},
        "kind": {"const": "ClusterConfig"},
        "metadata": {
            "type": "object",
            "required": ["name", "region"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string"},
                "region": {"type": "string"},
                "version": {"type": "string", "pattern": r"^1\.\d+$"},
                "tags": {"type": "object"},
            },
        },
        "availabilityZones": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 2,  # eksctl refuses fewer
            "uniqueItems": True,
        },
        "iam": {"type": "object", "properties": {"withOIDC": {"type": "boolean"}}},
        "addons": {"type": "array", "items": {"type": "object", "required": ["name"]}},
        "managedNodeGroups": {"type": "array", "items": _MNG},
    },
}


# create_config reads the zones from EC2: these run against moto (its zones and instance
# type offerings). moto 5.2 has no DescribeCapacityReservations (HTTP 500, "not
# implemented"), so a reservation's zone is tested on the decision itself
# (test_a_capacity_reservation_puts_the_gpu_group_in_its_zone) with EC2's documented record.
@pytest.mark.integration
@pytest.mark.parametrize(
    ("instance_type", "nodes", "efa"),
    [("p5.48xlarge", 4, True), ("g5.xlarge", 1, False), ("ml.p4d.24xlarge", 2, True)],
)
def test_create_config_yaml_follows_the_parameters(
    moto_server, tmp_path, instance_type, nodes, efa
):
    import boto3

    out = tmp_path / "cluster.yaml"
    report = manage_eks_cluster(
        action="create_config",
        cluster_name="train",
        region="us-west-2",
        instance_type=instance_type,
        nodes=nodes,
        volume_size=800,
        output=str(out),
    )
    config = yaml.safe_load(out.read_text())
    assert config == yaml.safe_load(report.config_yaml)
    jsonschema.validate(config, EKSCTL_SCHEMA)
    assert config["metadata"]["version"] == "1.36"  # no version given: the newest in support
    system, gpu = config["managedNodeGroups"]
    assert system["name"] == "system" and "taints" not in system
    assert gpu["instanceType"] == instance_type.removeprefix("ml.")
    assert (gpu["desiredCapacity"], gpu["maxSize"], gpu["volumeSize"]) == (nodes, nodes, 800)
    assert gpu.get("efaEnabled", False) is efa
    # The cluster's zones are the region's (EC2's list); an EFA group sits in one of them.
    ec2 = boto3.client("ec2", region_name="us-west-2")
    region_zones = {z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    assert set(config["availabilityZones"]) <= region_zones
    assert ("availabilityZones" in gpu) is efa  # EFA: one AZ (and a placement group)
    if efa:
        assert len(gpu["availabilityZones"]) == 1
        assert gpu["availabilityZones"][0] == config["availabilityZones"][0]
    assert "capacityReservation" not in gpu
    assert {"aws-fsx-csi-driver", "vpc-cni"} <= {a["name"] for a in config["addons"]}
    # The FSx add-on gets the IAM policy the hint for a cluster without it attaches.
    (fsx,) = [a for a in config["addons"] if a["name"] == "aws-fsx-csi-driver"]
    hint = storage_kube.csi_install_hint("train", "us-west-2", "123456789012")
    assert fsx["attachPolicyARNs"] == re.findall(r"--attach-policy-arn (\S+)", hint)
    assert report.changes["command"] == ["eksctl", "create", "cluster", "-f", str(out)]
    for line in report.config_yaml.splitlines():  # no credentials, ever
        assert not looks_like_secret(line.split(":", 1)[-1].strip())
        assert "aws_access_key" not in line.lower() and "secret" not in line.lower()


@pytest.mark.integration
def test_create_config_without_eksctl_returns_the_command(moto_server, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no eksctl here
    report = manage_eks_cluster(
        action="create_config",
        cluster_name="train",
        region="us-west-2",
        instance_type="p5.48xlarge",
        output=str(tmp_path / "c.yaml"),
        confirm=True,
    )
    assert "eksctl is not on PATH" in report.summary and "eksctl create cluster" in report.hint


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"capacity_reservation_id": "not-a-cr"}, "capacity_reservation_id"),
        ({"volume_size": 5}, "volume_size"),
        ({"nodes": 0}, "nodes"),
        ({"cluster_name": "bad name"}, "cluster_name"),
        ({"region": "mars"}, "region"),
        ({"action": "destroy"}, "action"),
    ],
)
def test_bad_input_names_its_field(args, field):
    base = {
        "action": "create_config",
        "cluster_name": "c",
        "region": "us-east-1",
        "instance_type": "p5.48xlarge",
    }
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(**{**base, **args})
    assert failure.value.code == "invalid_input" and failure.value.exit_status == 2
    assert [p["field"] for p in failure.value.details["problems"]] == [field]


@pytest.mark.integration
def test_create_config_prices_each_node_group_at_its_desired_size(moto_server, tmp_path):
    from skills.catalog.instances import instance_spec

    report = manage_eks_cluster(
        action="create_config",
        cluster_name="train",
        region="us-west-2",
        instance_type="p4d.24xlarge",
        nodes=4,
        volume_size=800,
    )
    config = yaml.safe_load(report.config_yaml)
    cost = report.cost
    assert cost is not None and cost["price_table_date"] == "2026-09"
    groups = {g["name"]: g for g in config["managedNodeGroups"]}
    system, gpu = groups["system"], groups["gpu-p4d"]
    # Node groups x instance x desired size, and the EKS control plane ($0.10/h).
    per_hour = (
        system["desiredCapacity"] * 0.192
        + gpu["desiredCapacity"] * instance_spec("p4d.24xlarge").usd_per_hour
        + 0.10
    )
    assert gpu["desiredCapacity"] == 4 and cost["usd_per_hour"] == pytest.approx(per_hour)
    gib = system["desiredCapacity"] * system["volumeSize"] + 4 * 800  # gp3 root volumes
    assert cost["usd_per_month"] == pytest.approx(per_hour * 730 + gib * 0.08, abs=0.02)
    low, high = cost["spot_usd_per_hour_range"]
    assert low < high < cost["usd_per_hour"]
    assert cost["what"] == "cluster train (2 x m5.xlarge + 4 x p4d.24xlarge)"
    # The CLI prints the YAML with the cost as comments: still the same config.
    text = report.plain_text()
    assert text is not None and "# cost: cluster train" in text
    assert yaml.safe_load(text) == config
    assert any(k == "cost" and "/h on-demand" in v for k, v in report.summary_rows())


# --- the zones of a new cluster, decided from EC2's answers (skills/eks_cluster_manager/zones)

US_WEST_2 = ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"]
# One record of DescribeCapacityReservations, with the fields EC2's API reference lists.
RESERVATION = {
    "CapacityReservationId": "cr-0123456789abcdef0",
    "InstanceType": "p5.48xlarge",
    "InstancePlatform": "Linux/UNIX",
    "AvailabilityZone": "us-west-2d",
    "AvailabilityZoneId": "usw2-az4",
    "Tenancy": "default",
    "TotalInstanceCount": 4,
    "AvailableInstanceCount": 4,
    "State": "active",
    "InstanceMatchCriteria": "targeted",
}


def test_a_capacity_reservation_puts_the_gpu_group_in_its_zone():
    from skills.eks_cluster_manager import eksctl, zones

    placement = zones.for_reservation("us-west-2", "p5.48xlarge", RESERVATION, US_WEST_2)
    assert placement.gpu_zones == ("us-west-2d",)  # not a guessed us-west-2a
    assert placement.cluster_zones == ("us-west-2d", "us-west-2a", "us-west-2b")
    assert "cr-0123456789abcdef0 is in us-west-2d" in placement.why
    config = eksctl.cluster_config(
        eksctl.ConfigSpec(
            "train",
            "us-west-2",
            "p5.48xlarge",
            4,
            capacity_reservation_id="cr-0123456789abcdef0",
            cluster_zones=placement.cluster_zones,
            gpu_zones=placement.gpu_zones,
        )  # fmt: skip
    )
    jsonschema.validate(config, EKSCTL_SCHEMA)
    gpu = config["managedNodeGroups"][1]
    assert gpu["availabilityZones"] == ["us-west-2d"] and gpu["efaEnabled"] is True
    assert gpu["capacityReservation"] == {
        "capacityReservationTarget": {"capacityReservationID": "cr-0123456789abcdef0"}
    }
    assert config["availabilityZones"] == ["us-west-2d", "us-west-2a", "us-west-2b"]


@pytest.mark.parametrize(
    ("change", "said"),
    [({"InstanceType": "p4d.24xlarge"}, "holds p4d.24xlarge, not p5.48xlarge"),
     ({"State": "expired"}, "is expired")],
)  # fmt: skip
def test_a_reservation_of_another_type_or_one_that_ended_is_refused(change, said):
    from skills.eks_cluster_manager import zones

    with pytest.raises(ToolFailure) as failure:
        zones.for_reservation("us-west-2", "p5.48xlarge", {**RESERVATION, **change}, US_WEST_2)
    assert failure.value.code == "invalid_input" and said in failure.value.message
    assert failure.value.hint and failure.value.details["field"] == "capacity_reservation_id"


def test_an_unknown_reservation_id_is_not_found_with_a_hint():
    import botocore.exceptions

    from skills.eks_cluster_manager import zones

    # EC2's error for an id it does not have, as botocore raises it.
    for code in ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"):
        exc = botocore.exceptions.ClientError(
            {"Error": {"Code": code, "Message": "The capacity reservation ID does not exist"}},
            "DescribeCapacityReservations",
        )
        assert zones.is_unknown_reservation(exc)
    other = botocore.exceptions.ClientError(
        {"Error": {"Code": "UnauthorizedOperation", "Message": "no"}},
        "DescribeCapacityReservations",
    )
    assert not zones.is_unknown_reservation(other)  # mapped at the edge as access_denied
    failure = zones.unknown_reservation("cr-0123456789abcdef0", "us-west-2")
    assert failure.code == "not_found" and "cr-0123456789abcdef0" in failure.message
    assert "describe-capacity-reservations --region us-west-2" in failure.hint


def test_without_a_reservation_the_gpu_zone_is_one_that_offers_the_type():
    from skills.eks_cluster_manager import zones

    eu_west_1 = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
    only_c = zones.for_offerings("eu-west-1", "p4d.24xlarge", {"eu-west-1c"}, eu_west_1, True)
    assert only_c.gpu_zones == ("eu-west-1c",)
    assert only_c.cluster_zones == ("eu-west-1c", "eu-west-1a", "eu-west-1b")
    # Without EFA the group spans the cluster's zones that offer the type.
    spread = zones.for_offerings("us-west-2", "g5.xlarge", {"us-west-2b", "us-west-2d"},
                                 US_WEST_2, one_zone=False)  # fmt: skip
    assert spread.cluster_zones == ("us-west-2b", "us-west-2d", "us-west-2a")
    assert spread.gpu_zones == ("us-west-2b", "us-west-2d")
    everywhere = zones.for_offerings("us-west-2", "g5.xlarge", set(US_WEST_2), US_WEST_2, False)
    assert everywhere.gpu_zones is None  # the cluster's zones
    with pytest.raises(ToolFailure) as failure:
        zones.for_offerings("eu-west-1", "p5.48xlarge", set(), ["eu-west-1a"], True)
    assert failure.value.code == "invalid_input" and "no available zone" in failure.value.message
    with pytest.raises(ToolFailure) as failure:  # eksctl needs two zones
        zones.for_offerings("xx-east-1", "p5.48xlarge", {"xx-east-1a"}, ["xx-east-1a"], True)
    assert "needs two" in failure.value.message
