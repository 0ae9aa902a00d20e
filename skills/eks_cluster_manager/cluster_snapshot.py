"""What validate reads of a cluster, once, for its checks (checks.read_snapshot reads
it; checks.py and engine_checks.py are pure functions of it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Snapshot:
    version: dict[str, Any]
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    daemonsets: list[dict[str, Any]]
    deployments: list[dict[str, Any]]
    crd: dict[str, Any] | None
    pvc: dict[str, Any] | None = None
    services: list[dict[str, Any]] = field(default_factory=list)
    identity: str | None = None
    # Trainer v2: "group/version" -> the resources served; EndpointSlices of its webhook
    # Service; its torch-distributed ClusterTrainingRuntime (read where it is installed).
    served: dict[str, frozenset[str]] = field(default_factory=dict)
    endpoint_slices: list[dict[str, Any]] = field(default_factory=list)
    runtime: dict[str, Any] | None = None
