"""manage_eks_cluster's actions, one function each, over the pieces of this package."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from skills.catalog.instances import instance_spec
from skills.eks_cluster_manager import checks as checklist
from skills.eks_cluster_manager import cleanup as sweep
from skills.eks_cluster_manager import fix, nodegroups, pod_identity, storage_kube
from skills.eks_cluster_manager import storage as fsx_storage
from skills.eks_cluster_manager.cleanup import CleanupSpec, Counted
from skills.eks_cluster_manager.models import ClusterReport, NodeInfo, ResourceChange
from skills.eks_cluster_manager.nccl import parse
from skills.eks_cluster_manager.storage import DEFAULT_CLAIM, ClusterStorage, StorageSpec
from skills.kube import dcgm
from skills.kube import quarantine as kq
from skills.kube.access import describe_cluster, write_kubeconfig
from skills.kube.client import KubeJson
from skills.kube.fields import ClusterAccess
from skills.kube.gpu_nodes import NOT_ENDED_SELECTOR
from skills.kube.identity import S3_SERVICE_ACCOUNT
from skills.kube.objects import kind_path
from skills.shared.confirm import require_confirm
from skills.shared.errors import ErrorCode, ToolFailure, needed, needs_field
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress
from skills.shared.reading import read_text


def call_args(access: ClusterAccess, options: checklist.Options | None = None) -> dict[str, Any]:
    """This cluster (and the checks' options) as manage_eks_cluster's arguments."""
    args = access.access_args()
    if options is not None:
        defaults = checklist.Options()
        args.update(
            (k, v) for k, v in dataclasses.asdict(options).items() if v != getattr(defaults, k)
        )
    return args


def _kube(access: ClusterAccess) -> KubeJson:
    return KubeJson(access.api_client())


def _cluster_summary(info: Any) -> dict[str, Any]:
    return {
        "name": info.name,
        "status": info.status,
        "version": info.version,
        "endpoint": info.endpoint,
        "region": info.region,
    }


def describe(access: ClusterAccess, progress: Progress) -> ClusterReport:
    report = ClusterReport(action="describe")
    notes = []
    if access.cluster_name:
        session = access.session()
        info = describe_cluster(access.cluster_name, session)
        report.cluster = _cluster_summary(info)
        progress.report(1, 3, "node groups")
        report.nodegroups = nodegroups.describe_all(session.client("eks"), info.name)
    progress.report(2, 3, "nodes")
    try:
        kube = _kube(access)
        snapshot_nodes = kube.items(kind_path("Node"))
        pods = kube.items(kind_path("Pod"), [("fieldSelector", NOT_ENDED_SELECTOR)])
    except ToolFailure as failure:
        if not access.cluster_name or failure.code != ErrorCode.ENDPOINT_UNREACHABLE:
            raise
        notes.append(f"Kubernetes API not reachable ({failure.message})")
    else:
        snapshot = checklist.Snapshot(
            version={},
            nodes=snapshot_nodes,
            pods=pods,
            daemonsets=[],
            deployments=[],
            crd=None,
        )
        rows = checklist.node_rows(snapshot)
        report.nodes, report.node_counts = checklist.fleet_view(rows)
        total = sum(n.gpus_allocatable for n in rows)
        used = sum(n.gpus_in_use for n in rows)
        report.gpus = {"allocatable": total, "in_use": used, "free": max(total - used, 0)}
        ready = sum(n.ready for n in rows)
        notes.append(f"{ready}/{len(rows)} nodes Ready, GPUs {used}/{total} in use")
        if report.node_counts is not None:
            notes.append(f"nodes listed: the {len(report.nodes)} not Ready or short of GPUs")
        notes += _gpu_health(kube, report.nodes, pods)
        report.api_calls = kube.calls
    if report.nodegroups is not None:
        notes.insert(0, f"{len(report.nodegroups)} node group(s)")
    report.summary = "; ".join(notes)
    progress.report(3, 3, "described")
    return report


def _gpu_health(kube: KubeJson, rows: list[NodeInfo], pods: list[dict[str, Any]]) -> list[str]:
    """The DCGM exporter's trouble lines on each listed node that runs one (at most
    NODES_LISTED reads, from the pods describe listed already), and a summary note."""
    evidence, silent = dcgm.node_evidence(kube, [r.name for r in rows], pods)
    for row in rows:
        row.gpu_health = evidence.get(row.name)
    troubled = sorted(n for n, lines in evidence.items() if lines)
    notes = []
    if evidence:
        where = f": {checklist.named(troubled)}" if troubled else ""
        notes.append(
            f"DCGM exporter read on {len(evidence)} node(s), "
            f"{len(troubled)} with GPUs in trouble{where}"
        )
    if silent:  # one line, however many did not answer
        more = f" (and {len(silent) - 1} more)" if len(silent) > 1 else ""
        notes.append(silent[0] + more)
    return notes


def _statuses(checks: list[Any]) -> dict[str, str]:
    return {c.name: c.status for c in checks}


def _summary(checks: list[Any]) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in ("ok", "warning", "failed")}
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def validate(
    access: ClusterAccess, options: checklist.Options, progress: Progress
) -> ClusterReport:
    kube = _kube(access)
    progress.report(0, 1, "reading the cluster")
    snapshot = checklist.read_snapshot(kube, options, access.identity())
    checks = checklist.run_checks(snapshot, options)
    progress.report(1, 1, "checked")
    report = ClusterReport(
        action="validate", checks=checks, summary=_summary(checks), api_calls=kube.calls
    )
    if fix.components_for(checks):
        report.next_step = NextStep(
            tool="manage_eks_cluster",
            arguments={"action": "auto_fix", **call_args(access, options)},
            why="plan the fixes (confirm=true applies them)",
        )
    return report


def auto_fix(
    access: ClusterAccess, options: checklist.Options, apply: bool, progress: Progress
) -> ClusterReport:
    kube = _kube(access)
    progress.report(0, 3, "reading the cluster")
    before = checklist.run_checks(
        checklist.read_snapshot(kube, options, access.identity()), options
    )
    items, manifests = fix.plan(before, options.namespace)
    report = ClusterReport(
        action="auto_fix", checks=before, plan=items, changes={"before": _statuses(before)}
    )
    if not items:
        report.summary = "nothing auto_fix can apply: " + _summary(before)
        report.api_calls = kube.calls
        return report
    if not apply:
        report.summary = f"plan: {len(items)} object(s) to apply; nothing applied"
        report.next_step = NextStep(
            tool="manage_eks_cluster",
            arguments={"action": "auto_fix", "confirm": True, **call_args(access, options)},
            why="apply this plan",
        )
        report.api_calls = kube.calls
        return report
    report.plan = fix.apply(kube, items, manifests, progress)
    after = checklist.run_checks(checklist.read_snapshot(kube, options, None), options)
    report.checks = after
    report.changes = {"before": _statuses(before), "after": _statuses(after)}
    failed = [p for p in report.plan if p.action == "failed"]
    report.summary = (
        f"applied {len(report.plan) - len(failed)}/{len(report.plan)} object(s); "
        f"after: {_summary(after)}"
    )
    if any(c.status != "ok" for c in after):
        report.next_step = NextStep(
            tool="manage_eks_cluster",
            arguments={"action": "validate", **call_args(access, options)},
            why="check again in a minute (controllers need a moment to start what was applied)",
        )
    report.api_calls = kube.calls
    return report


def scale(access: ClusterAccess, spec: nodegroups.ScaleSpec, confirm: bool) -> ClusterReport:
    cluster = access.need_cluster("scale")
    nodegroup = needed(
        spec.nodegroup, "scale", "nodegroup", "Pass nodegroup (action=describe lists them)."
    )
    session = access.session()
    info = describe_cluster(cluster, session)
    sizes = (spec.min_size, spec.max_size, spec.desired_size)
    group, change = nodegroups.scale(session.client("eks"), info.name, nodegroup, *sizes, confirm)
    after = change["after"]
    summary = (
        f"{nodegroup}: min/desired/max {after['min_size']}/{after['desired_size']}/"
        f"{after['max_size']}" + ("" if change["update"] else " (unchanged)")
    )
    return ClusterReport(
        action="scale",
        cluster=_cluster_summary(info),
        nodegroups=[group],
        changes=change,
        summary=summary,
    )


KUBECONFIG_HINT = (
    "Name the kubeconfig file to write (the CLI's default: $KUBECONFIG, else ~/.kube/config)."
)


def kubeconfig(access: ClusterAccess, confirm: bool = False) -> ClusterReport:
    """Write the cluster's entries into the kubeconfig the caller named (the tool never
    picks the server's own file); `confirm` lets an existing context be re-pointed."""
    if not access.kubeconfig:  # asked first: the file is the caller's to name
        raise needs_field("kubeconfig", "kubeconfig", KUBECONFIG_HINT, what=", the file to write")
    cluster = access.need_cluster("kubeconfig")
    session = access.session()
    info = describe_cluster(cluster, session)
    path = Path(access.kubeconfig).expanduser()
    name, created = write_kubeconfig(info, path, None, access.context, confirm)
    return ClusterReport(
        action="kubeconfig",
        cluster=_cluster_summary(info),
        changes={"kubeconfig": str(path), "context": name, "created": created},
        summary=f"{'wrote' if created else 'updated'} {path}: context {name} (token from STS, "
        "no aws CLI)",
        next_step=NextStep(
            tool="manage_eks_cluster",
            arguments={"action": "validate", "kubeconfig": str(path), "context": name},
            why="check the cluster through the new context",
        ),
        hint=f"kubectl reaches it too: kubectl --context {name} get nodes",
    )


# all_reduce_perf output is a few KiB per run; /dev/zero or a checkpoint is not one.
NCCL_OUTPUT_MAX_BYTES = 8 * 2**20


def judge_nccl_output(nccl_output: str, instance_type: str | None) -> ClusterReport:
    """The busbw verdict on a saved all_reduce_perf output (reads one file, runs nothing)."""
    spec = instance_spec(instance_type) if instance_type else None
    path = Path(nccl_output).expanduser()
    text = read_text(path, what="nccl_output", max_bytes=NCCL_OUTPUT_MAX_BYTES, errors="replace")
    report = parse(text, spec)
    summary = f"{report.verdict}: {report.reason}"
    return ClusterReport(action="nccl_test", nccl=report, summary=summary)


def _counts(rows: list[Any]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.action] = counts.get(row.action, 0) + 1
    return ", ".join(f"{n} {a}" for a, n in counts.items()) or "nothing"


def storage(
    access: ClusterAccess, spec: ClusterStorage, apply: bool, progress: Progress
) -> ClusterReport:
    """FSx for Lustre + security group, the S3 bucket, StorageClass/PV/PVC: the plan, or
    (apply) each missing or differing piece made, in that order."""
    cluster_name = access.need_cluster("storage")
    fsx_storage.check_size(spec.fsx_deployment_type, spec.fsx_size_gib)
    fsx_storage.throughput_of(spec)  # a tier the type lacks: refused before any call
    aws = Counted(access.session())
    region = aws.session.region_name
    progress.report(0, 4, "the cluster's network")
    cluster = fsx_storage.describe_cluster_raw(aws.session, aws("eks"), cluster_name)
    account = aws("sts").get_caller_identity()["Account"]
    bucket = fsx_storage.bucket_name(spec, account)
    net = fsx_storage.network(aws("eks"), aws("ec2"), cluster, spec.nodegroup)
    kube = _kube(access)
    driver = storage_kube.csi_driver(kube)  # first: an unreachable API fails before any write
    current = storage_kube.current_objects(kube, spec)  # and someone else's claim refuses
    progress.report(1, 4, "security group and file system")
    group_row, group_id = fsx_storage.ensure_group(aws("ec2"), spec, net, apply)
    fs_row, fs = fsx_storage.ensure_file_system(aws("fsx"), spec, net, group_id, apply)
    progress.report(2, 4, "bucket and the pods' identity for it")
    bucket_row = fsx_storage.ensure_bucket(aws("s3"), spec, bucket, region, apply)
    role_row, role_arn = pod_identity.ensure_role(
        aws("iam"), cluster_name, spec.namespace, bucket, apply
    )
    agent_row = pod_identity.ensure_agent(aws("eks"), cluster_name, apply)
    association_row = pod_identity.ensure_association(
        aws("eks"), cluster_name, spec.namespace, role_arn, apply
    )
    progress.report(3, 4, "Kubernetes objects")
    rows = [
        group_row,
        fs_row,
        bucket_row,
        role_row,
        agent_row,
        association_row,
        *storage_kube.ensure_objects(kube, spec, fs, apply, current),
        pod_identity.ensure_service_account(kube, spec.namespace, bucket, role_arn, apply),
    ]
    progress.report(4, 4, "done")
    changes: dict[str, Any] = {
        "csi_driver": driver or "missing",
        "claim": f"{spec.namespace}/{spec.claim}",
        "bucket": f"s3://{bucket}",
        # Who pods that name s3://<bucket> are to AWS (jobs and model servers use it).
        "service_account": f"{spec.namespace}/{S3_SERVICE_ACCOUNT}",
        "iam_role": role_arn or pod_identity.role_name(cluster_name, spec.namespace),
        "aws_calls": len(aws.calls),
    }
    report = ClusterReport(action="storage", resources=rows, changes=changes, api_calls=kube.calls)
    writes = [r for r in rows if r.action in ("create", "update")]
    if not apply:
        report.cost = fsx_storage.storage_cost(spec, region)
        report.summary = (
            f"plan: {len(writes)} resource(s) to create or update; nothing changed"
            if writes
            else "unchanged: everything is in place"
        )
        if writes:
            report.next_step = _confirmed(_storage_args(access, spec), "apply this plan")
    else:
        changed = [r for r in rows if r.action in ("created", "updated")]
        report.summary = f"applied: {_counts(rows)}" if changed else "unchanged"
        if rows[1].action in ("created", "unchanged") and fs is not None:
            report.summary += f"; mount it with checkpoint_volume=pvc:{spec.claim}"
    if driver is None:
        hint = storage_kube.csi_install_hint(cluster_name, region, account)
        changes["csi_driver"] = f"missing: the claim mounts once it runs; {hint}"
        # Installing the driver is not a call of this suite: a hint beside the plan's step.
        report.hint = f"Install the FSx CSI driver: {hint}"
    return report


def cleanup(
    access: ClusterAccess, spec: CleanupSpec, apply: bool, progress: Progress
) -> ClusterReport:
    """What this suite created for the cluster, deleted in dependency order (a plan
    unless `apply`); what stays is reported with why."""
    cluster_name = access.need_cluster("cleanup")
    aws = sweep.Counted(access.session())
    region = aws.session.region_name
    cluster = fsx_storage.describe_cluster_raw(aws.session, aws("eks"), cluster_name)
    rows = []
    kube_calls = 0
    progress.report(0, 4, "jobs, model servers and storage objects")
    try:
        kube = _kube(access)
        rows += sweep.kube_rows(kube, spec.parts, apply)
        kube_calls = kube.calls
    except ToolFailure as failure:
        if failure.code != ErrorCode.ENDPOINT_UNREACHABLE:
            raise
        rows.append(
            ResourceChange(
                kind="Kubernetes objects",
                name=cluster_name,
                action="left" if apply else "keep",
                detail=f"the API is not reachable ({failure.message})",
            )
        )
    progress.report(1, 4, "node groups")
    if "nodegroups" in spec.parts:
        rows += sweep.nodegroup_rows(aws("eks"), cluster_name, apply)
    progress.report(2, 4, "file system and security group")
    if "fsx" in spec.parts:
        rows += sweep.fsx_rows(aws("fsx"), aws("ec2"), cluster_name, apply)
        rows += pod_identity.cleanup_rows(aws("eks"), aws("iam"), cluster_name, apply)
    progress.report(3, 4, "bucket and cluster")
    account = aws("sts").get_caller_identity()["Account"]
    name = fsx_storage.bucket_name(
        fsx_storage.ClusterStorage(cluster=cluster_name, bucket=spec.bucket), account
    )
    rows += sweep.bucket_rows(aws("s3"), name, cluster_name, spec.delete_bucket, apply)
    if spec.delete_cluster:
        # The cluster's VPC goes with it: not while a file system's interfaces are in it.
        fs_left = apply and sweep.file_system_remains(aws("fsx"), cluster_name)
        rows.append(sweep.cluster_row(cluster.get("tags"), cluster_name, region, fs_left, apply))
    progress.report(4, 4, "done")
    report = ClusterReport(
        action="cleanup",
        resources=rows,
        changes={"aws_calls": len(aws.calls), "kubernetes_calls": kube_calls},
        api_calls=kube_calls + len(aws.calls),
    )
    deletes = [r for r in rows if r.action == "delete"]
    if not apply:
        report.summary = (
            f"plan: {len(deletes)} resource(s) to delete; nothing deleted"
            if deletes
            else "nothing to delete"
        )
        if deletes:
            report.next_step = _confirmed(_cleanup_args(access, spec), "delete them")
    else:
        report.summary = f"cleanup: {_counts(rows)}" if rows else "nothing to delete"
        if any(r.action == "left" for r in rows):
            report.next_step = _confirmed(
                _cleanup_args(access, spec),
                "delete what was left (each row's detail says why it stayed)",
            )
    return report


def _storage_args(access: ClusterAccess, spec: ClusterStorage) -> dict[str, Any]:
    """This storage plan as manage_eks_cluster's arguments: the spec's own parameters by
    their names (defaults left out), the cluster and the claim."""
    extra = _given(spec, StorageSpec)
    if spec.namespace != "default":
        extra["namespace"] = spec.namespace
    if spec.claim != DEFAULT_CLAIM:
        extra["checkpoint_pvc"] = spec.claim
    return {"action": "storage", **call_args(access), **extra}


def _cleanup_args(access: ClusterAccess, spec: CleanupSpec) -> dict[str, Any]:
    """This cleanup as manage_eks_cluster's arguments (the spec's defaults left out)."""
    return {"action": "cleanup", **call_args(access), **_given(spec, type(spec))}


def _given(spec: BaseModel, params: type[BaseModel]) -> dict[str, Any]:
    """An action spec's parameters that differ from their defaults, as tool arguments
    (the spec's fields are the tool's parameters, by the same names)."""
    return spec.model_dump(mode="json", include=set(params.model_fields), exclude_defaults=True)


def _confirmed(arguments: dict[str, Any], why: str) -> NextStep:
    """The same manage_eks_cluster call with confirm=true: a plan's next step."""
    return NextStep(tool="manage_eks_cluster", arguments={**arguments, "confirm": True}, why=why)


def release_node(access: ClusterAccess, node: str | None, confirm: bool) -> ClusterReport:
    """Undo auto_retry's quarantine of a node (skills.kube.quarantine): without `node`, the
    quarantined nodes (a read); with it, a plan until `confirm` releases it."""
    kube = _kube(access)
    if node is None:
        records = kq.quarantined(kube.items(kind_path("Node")))
        shown = [r.model_dump(exclude_none=True) for r in records]
        names = ", ".join(r.node for r in records) or "none"
        return ClusterReport(
            action="release_node",
            summary=f"{len(records)} quarantined node(s): {names}",
            changes={"quarantined": shown},
            api_calls=kube.calls,
        )
    found = kube.get_or_none(kind_path("Node", name=node))
    if found is not None:  # a node that is not ours is refused by release_plan, unconfirmed
        record, cordon = kq.release_plan(found)
        undo = "uncordons it" if cordon == "uncordoned" else f"leaves its cordon ({cordon})"
        require_confirm(
            confirm,
            f"Releasing {node} removes its {kq.TAINT_KEY} taint and {undo}: jobs may land "
            f"there again (quarantined for {record.reason}, job {record.job}).",
            "to release the node",
            {"node": node, "record": record.model_dump(exclude_none=True), "cordon": cordon},
        )
    released = kq.release(kube, node)
    record = released.record
    return ClusterReport(
        action="release_node",
        summary=f"released {node} (quarantined since {record.since} for {record.reason}); "
        f"cordon: {released.cordon}",
        changes={"released": record.model_dump(exclude_none=True), "cordon": released.cordon},
        api_calls=kube.calls,
    )
