"""What manage_eks_cluster returns, per action, in one result model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from skills.catalog.pricing import cost_comment, cost_rows
from skills.shared.next_step import NextStep
from skills.shared.results import ToolResult

CheckStatus = Literal["ok", "warning", "failed"]


class Check(BaseModel):
    name: str
    status: CheckStatus
    evidence: list[str] = Field(default_factory=list)
    fix: str | None = None
    # The component auto_fix applies for this check (components.COMPONENTS key).
    component: str | None = None


class NodeGroupInfo(BaseModel):
    name: str
    status: str | None = None
    instance_types: list[str] = Field(default_factory=list)
    capacity_type: str | None = None
    ami_type: str | None = None
    min_size: int | None = None
    max_size: int | None = None
    desired_size: int | None = None


class NodeInfo(BaseModel):
    name: str
    ready: bool
    instance_type: str | None = None
    gpus_allocatable: int = 0
    gpus_in_use: int = 0
    efa_allocatable: int = 0
    driver_version: str | None = None
    # The DCGM exporter's lines about its GPUs in trouble (XID, ECC, row remaps,
    # throttling): [] where it answered with none, None where no exporter was read.
    gpu_health: list[str] | None = None


class NodeCount(BaseModel):
    """Nodes alike (type, readiness, GPUs each, driver), counted: a fleet's describe."""

    instance_type: str | None = None
    ready: bool
    gpus_allocatable: int = 0
    driver_version: str | None = None
    count: int
    gpus_in_use: int = 0


class PlannedObject(BaseModel):
    component: str
    version: str
    kind: str
    name: str
    namespace: str | None = None
    action: Literal["apply", "applied", "failed"] = "apply"
    error: str | None = None


# plan: create/update/unchanged/delete/keep; done: created/updated/deleted/left/failed.
ResourceAction = Literal[
    "create",
    "update",
    "unchanged",
    "delete",
    "keep",
    "created",
    "updated",
    "deleted",
    "left",
    "failed",
]


class ResourceChange(BaseModel):
    """One cloud or Kubernetes resource that storage or cleanup would touch, or did."""

    kind: str  # "FSx file system", "SecurityGroup", "S3 bucket", "StorageClass", ...
    name: str
    action: ResourceAction
    detail: str = ""  # why (a rule added, what is in the way, what was left and why)


class NcclRow(BaseModel):
    size_bytes: int
    busbw_gbps: float
    algbw_gbps: float
    wrong: int = 0


# How NCCL moved the data between GPUs, as its own log lines say.
Transport = Literal["efa", "socket", "nvlink", "unknown"]


class NcclReport(BaseModel):
    verdict: Literal["pass", "degraded", "fail", "incomplete"]
    reason: str
    nodes: int | None = None
    gpus: int | None = None
    gpu_name: str | None = None
    instance_type: str | None = None
    transport: Transport = "unknown"
    peak_busbw_gbps: float | None = None
    avg_busbw_gbps: float | None = None
    expected_busbw_gbps: float | None = None
    largest_size_bytes: int | None = None
    rows: list[NcclRow] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class ClusterReport(ToolResult):
    action: str
    cluster: dict[str, Any] | None = Field(
        default=None, description="name, status, version, endpoint, region (EKS)."
    )
    summary: str = ""
    nodegroups: list[NodeGroupInfo] | None = None
    nodes: list[NodeInfo] | None = Field(
        default=None, description="Each node; past 32, only those not Ready or short of GPUs."
    )
    node_counts: list[NodeCount] | None = Field(
        default=None, description="Past 32 nodes: every node, counted by kind."
    )
    gpus: dict[str, int] | None = Field(default=None, description="allocatable, in_use, free.")
    checks: list[Check] | None = None
    plan: list[PlannedObject] | None = None
    nccl: NcclReport | None = None
    operation: dict[str, Any] | None = Field(
        default=None, description="The NCCL test's operation (get_operation follows it)."
    )
    changes: dict[str, Any] | None = Field(
        default=None,
        description="What was written: scaling before/after, checks before/after auto_fix, "
        "the kubeconfig and context, the eksctl config path and command.",
    )
    config_yaml: str | None = None
    resources: list[ResourceChange] | None = Field(
        default=None, description="storage/cleanup: each resource, its action and why."
    )
    api_calls: int | None = Field(default=None, description="Kubernetes API requests made.")
    cost: dict[str, Any] | None = Field(
        default=None, description="create_config, storage: the estimate from the dated price table."
    )
    next_step: NextStep | None = None
    hint: str | None = Field(default=None, description="What to do that is not one call.")

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("action", self.action)]
        if self.cluster:
            rows.append(("cluster", " ".join(str(v) for v in self.cluster.values() if v)))
        if self.summary:
            rows.append(("summary", self.summary))
        for group in self.nodegroups or ():
            sizes = f"{group.min_size}/{group.desired_size}/{group.max_size}"
            rows.append(
                (
                    f"nodegroup {group.name}",
                    f"{','.join(group.instance_types)} {group.capacity_type} "
                    f"min/desired/max {sizes}",
                )
            )
        for node in self.nodes or ():
            rows.append(
                (
                    f"node {node.name}",
                    f"{'Ready' if node.ready else 'NotReady'} {node.instance_type} "
                    f"gpu {node.gpus_in_use}/{node.gpus_allocatable} efa "
                    f"{node.efa_allocatable} driver {node.driver_version or '-'}",
                )
            )
        for kind in self.node_counts or ():
            rows.append(
                (
                    f"{kind.count} nodes",
                    f"{'Ready' if kind.ready else 'NotReady'} {kind.instance_type} gpu "
                    f"{kind.gpus_in_use}/{kind.gpus_allocatable * kind.count} driver "
                    f"{kind.driver_version or '-'}",
                )
            )
        if self.gpus:
            rows.append(("gpus", ", ".join(f"{k} {v}" for k, v in self.gpus.items())))
        for check in self.checks or ():
            line = f"{check.status.upper()}: {'; '.join(check.evidence)}"
            if check.fix and check.status != "ok":
                line += f" -> fix: {check.fix}"
            rows.append((f"check {check.name}", line))
        for item in self.plan or ():
            where = f"{item.namespace}/" if item.namespace else ""
            rows.append(
                (
                    f"{item.action} {item.component}",
                    f"{item.kind} {where}{item.name} ({item.version})",
                )
            )
        for res in self.resources or ():
            rows.append((f"{res.action} {res.kind}", f"{res.name} {res.detail}".strip()))
        if self.nccl:
            n = self.nccl
            rows.append(("nccl", f"{n.verdict}: {n.reason}"))
        if self.operation:
            rows.append(
                (
                    "operation",
                    f"{self.operation.get('operation_id')} {self.operation.get('status')}",
                )
            )
        changes = dict(self.changes or {})
        if self.action == "auto_fix":  # checks before -> after, only those that moved
            before, after = changes.pop("before", {}), changes.pop("after", None)
            if after is not None:
                moved = [
                    f"{k}: {before.get(k)} -> {v}" for k, v in after.items() if before.get(k) != v
                ]
                rows.append(("before -> after", "; ".join(moved) or "no check changed"))
        for key, value in changes.items():
            rows.append((key, " ".join(value) if isinstance(value, list) else value))
        if self.api_calls is not None:
            rows.append(("api_calls", self.api_calls))
        if self.hint:
            rows.append(("hint", self.hint))
        rows += cost_rows(self.cost)
        return rows

    def plain_text(self) -> str | None:
        if self.config_yaml and not (self.changes or {}).get("config_path"):
            return self.config_yaml + cost_comment(self.cost)  # YAML comments: still valid
        return None

    def cli_exit_status(self) -> int:
        failed = any(c.status == "failed" for c in self.checks or ())
        after = (self.changes or {}).get("after") if self.action == "auto_fix" else None
        if isinstance(after, dict):
            failed = any(v == "failed" for v in after.values())
        if self.nccl is not None and self.nccl.verdict in ("fail", "incomplete"):
            failed = True
        if any(r.action == "failed" for r in self.resources or ()):
            failed = True
        return 1 if failed else 0
