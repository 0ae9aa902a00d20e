"""action=storage: the shared storage of a training cluster, as a plan, then (confirm)
applied, resource by resource, each only when it is missing or differs:

1. a security group in the cluster's VPC with the Lustre rules (TCP 988 and 1018-1023,
   from itself, which FSx's own servers need, and from the VPC's CIDR, the clients);
2. an FSx for Lustre file system in one of the cluster's subnets (a named node group's
   first subnet: the GPU nodes' AZ);
3. an S3 bucket for data and checkpoints: default encryption (SSE-S3) on, public
   access blocked;
4. the StorageClass, PersistentVolume and PersistentVolumeClaim that mount the file
   system by static provisioning through the FSx CSI driver (fsx.csi.aws.com).

Everything is tagged/labelled as this suite's (skills.shared.ownership),
which is how a second run finds it ("unchanged") and how cleanup knows it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from skills.catalog.pricing import estimate_storage, fsx_tiers
from skills.cloud.clients import aws_error_code
from skills.eks_cluster_manager.models import ResourceAction, ResourceChange
from skills.eks_cluster_manager.params import Bucket, Nodegroup, within
from skills.kube.access import cluster_not_found, region_of
from skills.shared import ownership
from skills.shared.errors import ErrorCode, ToolFailure

DeploymentType = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]
DEPLOYMENT_TYPES: tuple[DeploymentType, ...] = get_args(DeploymentType)
# MB/s per TiB for the persistent types when none is asked (FSx requires one; the
# tiers are pricing.fsx_tiers: PERSISTENT_1 50/100/200, PERSISTENT_2 125/250/500/1000).
THROUGHPUT = {"PERSISTENT_1": 200, "PERSISTENT_2": 250}
LUSTRE_VERSION = "2.15"  # PERSISTENT_2 needs 2.12 or later
LUSTRE_PORTS = ((988, 988), (1018, 1023))  # Lustre: FSx servers and clients
CSI_DRIVER = "fsx.csi.aws.com"
CSI_WORKLOADS = ("fsx-csi-node", "fsx-csi-controller")  # what the add-on runs
STORAGE_CLASS = "fsdp-eks-fsx"
PERSISTENT_VOLUME = "fsdp-eks-fsx"
DEFAULT_CLAIM = "fsx-claim"
GONE = ("DELETING", "FAILED")  # a file system in these states is not the one to use
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
DONE: dict[str, ResourceAction] = {"create": "created", "update": "updated"}


class StorageSpec(BaseModel):
    """action=storage's parameters, each declared here once: manage_eks_cluster flattens
    this model into its inputs (schema, CLI flags, validation) and gathers them back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fsx_size_gib: Annotated[
        int, Field(description="storage: FSx GiB (1200, 2400, n*2400)."), within(1200, 460800)
    ] = 1200
    fsx_deployment_type: Annotated[DeploymentType, Field(description="storage: FSx type.")] = (
        "SCRATCH_2"
    )
    # MB/s/TiB, persistent only (None: THROUGHPUT's)
    fsx_throughput: Annotated[
        int | None, Field(description="storage: persistent FSx MB/s/TiB (P1 200, P2 250).")
    ] = None
    bucket: Bucket = None  # None: fsdp-eks-<cluster>-<account>
    nodegroup: Nodegroup = None  # its first subnet holds the file system

    def placed(self, cluster: str, namespace: str, claim: str | None) -> ClusterStorage:
        """This spec on one cluster, its claim (checkpoint_pvc) in that namespace."""
        claim = claim or DEFAULT_CLAIM
        return ClusterStorage(**dict(self), cluster=cluster, namespace=namespace, claim=claim)


class ClusterStorage(StorageSpec):
    """The storage spec placed: the cluster it is made for and the claim's namespace and
    name (from the tool's cluster access and checkpoint_pvc)."""

    cluster: str
    namespace: str = "default"
    claim: str = DEFAULT_CLAIM


def throughput_of(spec: StorageSpec) -> int | None:
    """The throughput tier the file system is made (and priced) at; None for scratch. A
    tier the deployment type does not have is the caller's input error."""
    tiers = fsx_tiers(spec.fsx_deployment_type)
    if not tiers:
        if spec.fsx_throughput is not None:
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"{spec.fsx_deployment_type} has no throughput tier to choose.",
                "Leave fsx_throughput unset, or use PERSISTENT_1 or PERSISTENT_2.",
                {"problems": [{"field": "fsx_throughput", "problem": "scratch has no tier"}]},
            )
        return None
    tier = spec.fsx_throughput or THROUGHPUT[spec.fsx_deployment_type]
    if tier not in tiers:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{spec.fsx_deployment_type} has no {tier} MB/s/TiB tier.",
            f"Use one of {', '.join(map(str, tiers))} MB/s/TiB.",
            {"problems": [{"field": "fsx_throughput", "problem": f"one of {list(tiers)}"}]},
        )
    return tier


def check_size(deployment_type: str, size_gib: int) -> None:
    """FSx for Lustre's valid SSD sizes: 1200, 2400, then steps of 2400 GiB (SCRATCH_1:
    1200, 2400, 3600, then steps of 3600)."""
    step = 3600 if deployment_type == "SCRATCH_1" else 2400
    valid = size_gib in (1200, 2400, 3600 if step == 3600 else 2400) or (
        size_gib > 0 and size_gib % step == 0
    )
    if not valid:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"FSx for Lustre {deployment_type} cannot be {size_gib} GiB.",
            f"Use 1200, 2400 or a multiple of {step} GiB.",
            {"problems": [{"field": "fsx_size_gib", "problem": f"1200, 2400 or n*{step}"}]},
        )


def bucket_name(spec: ClusterStorage, account: str) -> str:
    name = spec.bucket or f"fsdp-eks-{spec.cluster.lower()}-{account}"[:63].rstrip(".-")
    if not _BUCKET_NAME.match(name) or ".." in name:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{name!r} is not a valid S3 bucket name.",
            "3-63 characters: lowercase letters, digits, '.' and '-', starting and ending "
            "with a letter or digit.",
            {"problems": [{"field": "bucket", "problem": "not an S3 bucket name"}]},
        )
    return name


# -- the cluster's network ------------------------------------------------------------


@dataclass(frozen=True)
class Network:
    vpc_id: str
    cidr: str
    subnet_id: str


def describe_cluster_raw(session: Any, eks: Any, cluster: str) -> dict[str, Any]:
    """EKS describe-cluster as the API answers it (VPC config, tags); an unknown name is
    the typed not_found that lists the region's clusters."""
    import botocore.exceptions

    try:
        return eks.describe_cluster(name=cluster)["cluster"]
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "ResourceNotFoundException":
            raise
        raise cluster_not_found(eks, cluster, region_of(session)) from None


def network(eks: Any, ec2: Any, cluster: dict[str, Any], nodegroup: str | None) -> Network:
    config = cluster.get("resourcesVpcConfig") or {}
    subnets = list(config.get("subnetIds") or [])
    if nodegroup:
        group = eks.describe_nodegroup(clusterName=cluster["name"], nodegroupName=nodegroup)
        subnets = list(group["nodegroup"].get("subnets") or []) or subnets
    if not subnets:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"EKS reports no subnets for cluster {cluster['name']}.",
            "Check the cluster's networking (aws eks describe-cluster).",
            {"cluster_name": cluster["name"]},
        )
    subnet = ec2.describe_subnets(SubnetIds=[subnets[0]])["Subnets"][0]
    vpc_id = config.get("vpcId") or subnet["VpcId"]  # EKS names it; moto leaves it out
    cidr = ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]["CidrBlock"]
    return Network(vpc_id=vpc_id, cidr=cidr, subnet_id=subnets[0])


# -- the security group ---------------------------------------------------------------


def group_name(cluster: str) -> str:
    return f"fsdp-eks-fsx-{cluster}"


def find_group(ec2: Any, vpc_id: str, cluster: str) -> dict[str, Any] | None:
    found = ec2.describe_security_groups(
        Filters=[
            {"Name": "vpc-id", "Values": [vpc_id]},
            {"Name": "group-name", "Values": [group_name(cluster)]},
        ]
    )["SecurityGroups"]
    return found[0] if found else None


def _missing_rules(group: dict[str, Any] | None, cidr: str) -> list[dict[str, Any]]:
    """The Lustre ingress rules the group lacks, as IpPermissions to authorize."""
    group_id = (group or {}).get("GroupId")
    have = {(p.get("FromPort"), p.get("ToPort")): p for p in (group or {}).get("IpPermissions", [])}
    missing = []
    for lo, hi in LUSTRE_PORTS:
        rule = have.get((lo, hi)) or {}
        self_ok = any(
            pair.get("GroupId") == group_id for pair in rule.get("UserIdGroupPairs") or ()
        )
        cidr_ok = any(r.get("CidrIp") == cidr for r in rule.get("IpRanges") or ())
        if self_ok and cidr_ok:
            continue
        permission: dict[str, Any] = {"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi}
        if not cidr_ok:
            permission["IpRanges"] = [{"CidrIp": cidr, "Description": "Lustre clients"}]
        if not self_ok:
            permission["UserIdGroupPairs"] = [{"GroupId": group_id or "self"}]
        missing.append(permission)
    return missing


def _rules_text(rules: list[dict[str, Any]]) -> str:
    parts = []
    for rule in rules:
        ports = f"{rule['FromPort']}" + (
            f"-{rule['ToPort']}" if rule["ToPort"] != rule["FromPort"] else ""
        )
        sources = [r["CidrIp"] for r in rule.get("IpRanges", [])]
        sources += ["itself" for _ in rule.get("UserIdGroupPairs", [])]
        parts.append(f"tcp {ports} from {' and '.join(sources)}")
    return "; ".join(parts)


def ensure_group(
    ec2: Any, spec: ClusterStorage, net: Network, apply: bool
) -> tuple[ResourceChange, str | None]:
    group = find_group(ec2, net.vpc_id, spec.cluster)
    rules = _missing_rules(group, net.cidr)
    name = group_name(spec.cluster)
    action: ResourceAction = "create" if group is None else ("update" if rules else "unchanged")
    detail = f"in {net.vpc_id}: " + (f"add {_rules_text(rules)}" if rules else "Lustre rules")
    group_id = group["GroupId"] if group else None
    if apply and action != "unchanged":
        if group_id is None:
            group_id = ec2.create_security_group(
                GroupName=name,
                Description="FSx for Lustre of fsdp-eks cluster " + spec.cluster,
                VpcId=net.vpc_id,
                TagSpecifications=[
                    {
                        "ResourceType": "security-group",
                        "Tags": ownership.tag_list(ownership.aws_tags(spec.cluster, name)),
                    }
                ],
            )["GroupId"]
        for rule in rules:  # "self" is the group, known only now
            for pair in rule.get("UserIdGroupPairs", []):
                pair["GroupId"] = group_id
        ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=rules)
        action = DONE[action]
    row = ResourceChange(kind="SecurityGroup", name=group_id or name, action=action, detail=detail)
    return row, group_id


# -- the file system ------------------------------------------------------------------


def find_file_system(fsx: Any, cluster: str) -> dict[str, Any] | None:
    for page in fsx.get_paginator("describe_file_systems").paginate():
        for fs in page.get("FileSystems", []):
            if (
                fs.get("FileSystemType") == "LUSTRE"
                and fs.get("Lifecycle") not in GONE
                and ownership.ours(fs.get("Tags"), cluster)
            ):
                return fs
    return None


def _fs_text(size: int, deployment: str, tier: int | None = None) -> str:
    return f"{size} GiB {deployment}" + (f" {tier} MB/s/TiB" if tier else "")


def ensure_file_system(
    fsx: Any, spec: ClusterStorage, net: Network, group_id: str | None, apply: bool
) -> tuple[ResourceChange, dict[str, Any] | None]:
    fs = find_file_system(fsx, spec.cluster)
    wanted = _fs_text(spec.fsx_size_gib, spec.fsx_deployment_type, throughput_of(spec))
    if fs is not None:
        lustre = fs.get("LustreConfiguration") or {}
        have = _fs_text(
            fs.get("StorageCapacity", 0),
            lustre.get("DeploymentType", "?"),
            lustre.get("PerUnitStorageThroughput"),
        )
        detail = f"{have}, {fs.get('Lifecycle') or 'state unknown'}"
        if have != wanted:  # never resized or replaced here: it holds data
            detail += f" (asked {wanted}: left as it is; resize with update-file-system)"
        row = ResourceChange(
            kind="FSx file system", name=fs["FileSystemId"], action="unchanged", detail=detail
        )
        return row, fs
    detail = f"{wanted} in {net.subnet_id}"
    if not apply:
        return ResourceChange(
            kind="FSx file system", name=f"fsdp-eks-{spec.cluster}", action="create", detail=detail
        ), None
    lustre: dict[str, Any] = {"DeploymentType": spec.fsx_deployment_type}
    tier = throughput_of(spec)
    if tier is not None:
        lustre["PerUnitStorageThroughput"] = tier
    fs = fsx.create_file_system(
        FileSystemType="LUSTRE",
        FileSystemTypeVersion=LUSTRE_VERSION,
        StorageCapacity=spec.fsx_size_gib,
        StorageType="SSD",
        SubnetIds=[net.subnet_id],
        SecurityGroupIds=[group_id] if group_id else [],
        LustreConfiguration=lustre,
        Tags=ownership.tag_list(ownership.aws_tags(spec.cluster, f"fsdp-eks-{spec.cluster}")),
    )["FileSystem"]
    detail += f", {fs.get('Lifecycle') or 'CREATING'} (AVAILABLE in about 10 minutes)"
    row = ResourceChange(
        kind="FSx file system", name=fs["FileSystemId"], action="created", detail=detail
    )
    return row, fs


# -- the bucket -----------------------------------------------------------------------


@dataclass(frozen=True)
class BucketState:
    exists: bool
    not_ours: str | None = None  # why it is not this suite's for the cluster (None: it is)
    encrypted: bool = False
    blocked: bool = False


def bucket_state(s3: Any, name: str, cluster: str) -> BucketState:
    """The bucket as storage and cleanup see it; ours only when its tags name this suite
    and this cluster (another cluster's bucket of the suite is not this cluster's)."""
    import botocore.exceptions

    try:
        s3.head_bucket(Bucket=name)
    except botocore.exceptions.ClientError as exc:
        code = aws_error_code(exc)
        if code in ("404", "NoSuchBucket", "NotFound"):
            return BucketState(exists=False)
        if code in ("403", "AccessDenied"):
            raise ToolFailure(
                ErrorCode.CONFLICT,
                f"S3 bucket {name} exists and this identity cannot use it (another "
                "account's, or no access).",
                "Name another bucket (bucket), or get access to this one.",
                {"bucket": name},
            ) from None
        raise

    tags: list[dict[str, Any]] = []
    try:
        tags = s3.get_bucket_tagging(Bucket=name).get("TagSet", [])
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "NoSuchTagSet":
            raise
    blocked = False
    try:
        config = s3.get_public_access_block(Bucket=name)["PublicAccessBlockConfiguration"]
        blocked = all(config.get(k) for k in _PUBLIC_BLOCK)
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "NoSuchPublicAccessBlockConfiguration":
            raise
    encrypted = True
    try:
        s3.get_bucket_encryption(Bucket=name)
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "ServerSideEncryptionConfigurationNotFoundError":
            raise
        encrypted = False
    return BucketState(
        exists=True,
        not_ours=ownership.why_not_ours_aws(tags, cluster),
        encrypted=encrypted,
        blocked=blocked,
    )


_PUBLIC_BLOCK = (
    "BlockPublicAcls",
    "IgnorePublicAcls",
    "BlockPublicPolicy",
    "RestrictPublicBuckets",
)


def ensure_bucket(
    s3: Any, spec: ClusterStorage, name: str, region: str, apply: bool
) -> ResourceChange:
    state = bucket_state(s3, name, spec.cluster)
    todo = [
        what
        for what, done in (
            ("default encryption", state.encrypted),
            ("public access block", state.blocked),
        )
        if not done
    ]
    if state.exists and state.not_ours:  # someone's bucket: used, never reconfigured
        detail = f"exists, {state.not_ours}: used as it is"
        if todo:
            detail += f" (it has no {' and no '.join(todo)})"
        return ResourceChange(kind="S3 bucket", name=name, action="keep", detail=detail)
    action: ResourceAction = "create" if not state.exists else ("update" if todo else "unchanged")
    detail = (
        "SSE-S3 encryption, public access blocked"
        if action != "update"
        else "turn on " + " and ".join(todo)
    )
    if apply and action != "unchanged":
        if not state.exists:
            extra = (
                {}
                if region == "us-east-1"
                else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            )
            s3.create_bucket(Bucket=name, **extra)
            s3.put_bucket_tagging(
                Bucket=name,
                Tagging={"TagSet": ownership.tag_list(ownership.aws_tags(spec.cluster, name))},
            )
        if not state.encrypted:
            s3.put_bucket_encryption(
                Bucket=name,
                ServerSideEncryptionConfiguration={
                    "Rules": [
                        {
                            "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"},
                            "BucketKeyEnabled": True,
                        }
                    ]
                },
            )
        if not state.blocked:
            s3.put_public_access_block(
                Bucket=name,
                PublicAccessBlockConfiguration=dict.fromkeys(_PUBLIC_BLOCK, True),
            )
        action = DONE[action]
    return ResourceChange(kind="S3 bucket", name=name, action=action, detail=detail)


def storage_cost(spec: StorageSpec, region: str) -> dict[str, Any] | None:
    """The month's price of the file system at the tier it is made with, for the dry run
    (the bucket is billed by what is put in it: nothing up front)."""
    estimate = estimate_storage(
        "fsx_lustre",
        spec.fsx_size_gib,
        region,
        deployment_type=spec.fsx_deployment_type,
        throughput_mbps_per_tib=throughput_of(spec),
    )
    return estimate.model_dump(mode="json")
