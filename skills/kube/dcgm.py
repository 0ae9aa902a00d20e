"""The NVIDIA DCGM exporter's GPU health counters, read through the API server, as node
evidence for the pod doctor.

The exporter (a DaemonSet: manage_eks_cluster auto_fix installs upstream's, the GPU
Operator and the helm chart install theirs) serves Prometheus text on :9400/metrics on
each GPU node. It is read through the API server's pod proxy
(/api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics): no port-forward, no network path
to the node beyond the API server's own. Each exporter pod maps to its node by
spec.nodeName; its samples carry `gpu` and `Hostname` (`hostname` on upstream's main).

Bounded: one LIST of exporter pods per selector, then at most one metrics read per
exporter pod on the job's nodes, READS_AT_ONCE at a time, each under READ_TIMEOUT. An
exporter that does not answer (not ready, no pods/proxy permission, a timeout) is a note;
the diagnosis goes on without it.

What counts as trouble (upstream's etc/default-counters.csv at 4.5.3-4.8.2 exports the
first three by default; ECC counters are commented out there, the GPU Operator's list
has them):
* DCGM_FI_DEV_XID_ERRORS: the last XID per GPU (0: none). Its meaning and whose fault it
  is come from skills.job_doctor.node_faults (the one XID table). It stays until the
  exporter restarts, even after the GPU recovers (NVIDIA/dcgm-exporter#500).
* DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: uncorrectable (double-bit) ECC errors since the driver
  loaded.
* DCGM_FI_DEV_ROW_REMAP_FAILURE: 1 when remapping a failed memory row failed.
* DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (DCGM_FI_DEV_CLOCKS_EVENT_REASONS since DCGM 3.2):
  NVML's bitmask; the slowdown bits (thermal, power brake) slow a job, they do not fail
  it, so they are evidence lines no failure signature takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from skills.kube.client import KubeJson
from skills.kube.objects import kind_path
from skills.shared.errors import ToolFailure

# The exporter's pods: upstream's static manifest and helm chart; the GPU Operator's.
SELECTORS = ("app.kubernetes.io/name=dcgm-exporter", "app=nvidia-dcgm-exporter")
PORT = 9400  # upstream's DCGM_EXPORTER_LISTEN
READS_AT_ONCE = 4
READ_TIMEOUT = (3, 5)  # connect, read (seconds)
NOTES_KEPT = 8  # notes of exporters not read, then how many more

XID = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
THROTTLE = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
# NVML's clocks event reasons (nvml.h nvmlClocksEventReason*) that are a slowdown.
SLOWDOWNS = {
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
_COUNTERS = (XID, ECC_DBE, ROW_REMAP_FAILURE)


@dataclass(frozen=True)
class Reading:
    """One GPU's trouble counter, as the exporter served it."""

    metric: str
    gpu: str
    hostname: str
    value: int

    def line(self, node: str) -> str:
        """The evidence line (node_faults' DCGM forms read the metric and its value)."""
        where = f"GPU {self.gpu} of node {node}"
        if self.hostname and self.hostname != node:
            where += f" (Hostname {self.hostname})"
        if self.metric in THROTTLE:
            slow = ", ".join(v for bit, v in SLOWDOWNS.items() if self.value & bit)
            return f"{self.metric} {self.value:#x} on {where}: {slow} (dcgm-exporter)"
        return f"{self.metric} {self.value} on {where} (dcgm-exporter)"


def readings(text: str) -> list[Reading]:
    """The trouble in an exporter's /metrics text: every non-zero XID, ECC and row-remap
    counter, and every throttle mask with a slowdown bit. Unparsable text raises
    ValueError (the parser's)."""
    # ~0.2 s to import: only when an exporter answered, never on a tool's start-up path.
    from prometheus_client.parser import text_string_to_metric_families

    found = []
    for family in text_string_to_metric_families(text):
        # By the family's name: the parser names a counter's samples NAME_total.
        metric = family.name
        if metric not in (*_COUNTERS, *THROTTLE):
            continue
        for sample in family.samples:
            value = int(sample.value)
            labels = sample.labels
            host = labels.get("Hostname") or labels.get("hostname") or ""
            slowed = any(value & bit for bit in SLOWDOWNS)
            if (metric in THROTTLE and slowed) or (metric in _COUNTERS and value):
                found.append(Reading(metric, labels.get("gpu", "?"), host, value))
    return found


def _port(pod: Mapping[str, Any]) -> int:
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == "metrics" or port.get("containerPort") == PORT:
                return int(port.get("containerPort") or PORT)
    return PORT


def _running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


_LABELS = [tuple(selector.split("=", 1)) for selector in SELECTORS]


def exporters_on(pods: Iterable[Mapping[str, Any]], nodes: Iterable[str]) -> dict[str, Any]:
    """The running exporter pod of each of `nodes` that has one, among `pods` (labels
    checked here: a server that ignores selectors must not bring in other pods)."""
    wanted, found = set(nodes), {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if any(labels.get(k) == v for k, v in _LABELS) and node in wanted and _running(pod):
            found.setdefault(node, pod)
    return found


def exporter_pods(kube: KubeJson, nodes: Iterable[str]) -> dict[str, Any]:
    """exporters_on the pods of one LIST per selector."""
    listed = [p for s in SELECTORS for p in kube.items(kind_path("Pod"), {"labelSelector": s})]
    return exporters_on(listed, nodes)


def _read(kube: KubeJson, pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    path = f"{kind_path('Pod', meta['namespace'], meta['name'])}:{_port(pod)}/proxy/metrics"
    _, data = kube.request("GET", path, accept="text/plain", timeout=READ_TIMEOUT, once=True)
    return data.decode("utf-8", errors="replace")


def node_evidence(
    kube: KubeJson, nodes: Iterable[str], pods: list[dict[str, Any]] | None = None
) -> tuple[dict[str, list[str]], list[str]]:
    """({node: evidence lines}, notes) for the nodes that run an exporter: the lines of
    every GPU in trouble (none: the node's GPUs look healthy to DCGM); a note per
    exporter that could not be read, and where none could be listed. `pods`: the
    cluster's pods where the caller has listed them already (no LIST here then)."""
    from kubernetes.client.exceptions import ApiException

    try:
        found = exporters_on(pods, nodes) if pods is not None else exporter_pods(kube, nodes)
    except ApiException as exc:
        return {}, [f"dcgm-exporter pods not listed (HTTP {exc.status}): no GPU counters read"]
    if not found:
        return {}, []

    def read(node: str) -> tuple[str, list[str] | str]:
        pod = found[node]
        name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        try:
            return node, [r.line(node) for r in readings(_read(kube, pod))]
        except ApiException as exc:
            why = f"HTTP {exc.status} {exc.reason or ''}".strip()
        except ToolFailure as exc:  # no answer within READ_TIMEOUT, or unreachable
            why = f"no answer within {sum(READ_TIMEOUT)} s ({exc.details.get('error')})"
        except ValueError as exc:  # not Prometheus text
            why = f"unreadable metrics: {exc}"[:200]
        return node, f"dcgm-exporter {name} on node {node} did not answer: {why}"

    evidence, notes = {}, []
    with ThreadPoolExecutor(max_workers=min(READS_AT_ONCE, len(found))) as pool:
        for node, got in pool.map(read, sorted(found)):
            if isinstance(got, str):
                notes.append(got)
            else:
                evidence[node] = got
    if len(notes) > NOTES_KEPT:
        notes[NOTES_KEPT:] = [f"and {len(notes) - NOTES_KEPT} more dcgm-exporters not read"]
    return evidence, notes


__all__ = ["Reading", "exporter_pods", "exporters_on", "node_evidence", "readings"]
