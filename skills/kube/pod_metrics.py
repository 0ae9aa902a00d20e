"""The CPU and memory a job's pods use, from the Kubernetes metrics API
(`metrics.k8s.io/v1beta1` PodMetrics, served by the metrics-server: what `kubectl top
pods` reads).

One discovery read says whether the cluster serves it (an APIResourceList of a few
hundred bytes; a cluster without the metrics-server answers 404), then one LIST of the
job's pods' metrics by the job's pods' label selector, read in chunks (limit/continue,
as every LIST of the suite; the metrics-server answers in one). What comes back is a
summary whose size does not grow with the job: the pods measured, each resource's
total, lowest and highest, and the TOP pods by memory (a 4,096-pod job is the same few
lines as a 2-pod one). Quantities ("250m", "1500n", "123Mi", "1Gi", plain bytes) are read
by the kubernetes client's own parser (kubernetes.utils.quantity)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from skills.kube.client import KubeJson, access_failure
from skills.kube.engines import served_resources
from skills.shared.errors import ToolFailure

GROUP = "metrics.k8s.io"
VERSION = "v1beta1"
# Pods named in the summary, by memory used (the first to run out of memory).
TOP = 3
MIB = 2**20
NOT_SERVED = (
    "pod CPU/memory: the cluster serves no metrics API (metrics.k8s.io); install the "
    "metrics-server (the EKS add-on: `aws eks create-addon --addon-name metrics-server "
    "--cluster-name <cluster>`) to see each pod's use here"
)


def parse_quantity(quantity: str | int | float) -> Decimal:
    """A Kubernetes quantity as a number ("250m" -> 0.25, "1Gi" -> 1073741824): the
    kubernetes client's own parser (its package's first import is heavy: loaded here,
    when a summary is made)."""
    from kubernetes.utils.quantity import parse_quantity as parse

    return parse(quantity)


def pod_usage(metrics: Mapping[str, Any]) -> tuple[float, float]:
    """(CPU cores, memory MiB) of one PodMetrics: its containers' usage summed."""
    cpu = memory = Decimal(0)
    for container in metrics.get("containers") or ():
        usage = container.get("usage") or {}
        cpu += parse_quantity(usage.get("cpu", "0"))
        memory += parse_quantity(usage.get("memory", "0"))
    return float(cpu), float(memory / MIB)


def summary(pods: Iterable[Mapping[str, Any]], top: int = TOP) -> dict[str, Any] | None:
    """The PodMetrics' summary (None: no pod measured): pods, cpu_cores and memory_mib
    (total, min, max), the `top` pods by memory; one pass, `top` pods held."""
    count = 0
    cpu_total = memory_total = 0.0
    cpu_range = [float("inf"), float("-inf")]
    memory_range = [float("inf"), float("-inf")]
    heaviest: list[tuple[float, str, float]] = []  # (memory, name, cpu), a min-heap
    window = None
    for metrics in pods:
        cpu, memory = pod_usage(metrics)
        name = str((metrics.get("metadata") or {}).get("name", ""))
        count += 1
        cpu_total, memory_total = cpu_total + cpu, memory_total + memory
        cpu_range = [min(cpu_range[0], cpu), max(cpu_range[1], cpu)]
        memory_range = [min(memory_range[0], memory), max(memory_range[1], memory)]
        entry = (memory, name, cpu)
        if len(heaviest) < top:
            heapq.heappush(heaviest, entry)
        elif entry > heaviest[0]:
            heapq.heapreplace(heaviest, entry)
        window = window or metrics.get("window")
    if not count:
        return None
    return {
        "pods": count,
        "cpu_cores": _stats(cpu_total, cpu_range, 3),
        "memory_mib": _stats(memory_total, memory_range, 1),
        "top": [
            {"pod": name, "cpu_cores": round(cpu, 3), "memory_mib": round(memory, 1)}
            for memory, name, cpu in sorted(heaviest, reverse=True)
        ],
        **({"window": window} if window else {}),
    }


def _stats(total: float, low_high: list[float], digits: int) -> dict[str, float]:
    return {
        "total": round(total, digits),
        "min": round(low_high[0], digits),
        "max": round(low_high[1], digits),
    }


def job_pod_usage(kube: KubeJson, namespace: str, selector: str) -> dict[str, Any]:
    """The summary of the pods `selector` selects in `namespace` (`{"note": ...}` when
    the cluster serves no metrics API, none of the pods is measured yet, or the API
    refuses: the job's state never fails for it)."""
    from kubernetes.client.exceptions import ApiException

    try:
        if "pods" not in served_resources(kube, GROUP, VERSION):
            return {"note": NOT_SERVED}
        found = summary(_listed(kube, namespace, selector))
    except ToolFailure as exc:  # 401/403 on discovery (skills.kube.engines maps them)
        return _unanswered(exc.message)
    except ApiException as exc:  # 403 (RBAC), 503 (the metrics-server is down)
        failure = access_failure(exc, kube.host)
        return _unanswered(failure.message if failure else f"{exc.status} {exc.reason}")
    except ValueError as exc:  # a quantity that is not one
        return {"note": f"pod CPU/memory: the metrics API sent an unreadable value ({exc})"[:300]}
    if found is None:
        return {
            "note": "pod CPU/memory: no pod of the job measured yet (the metrics-server "
            "reports a pod after its first scrapes, about a minute)"
        }
    return found


def _unanswered(said: str) -> dict[str, str]:
    return {"note": f"pod CPU/memory: the metrics API did not answer ({said})"[:300]}


def _listed(kube: KubeJson, namespace: str, selector: str) -> Iterator[dict[str, Any]]:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/pods"
    for chunk in kube.chunks(path, {"labelSelector": selector}):
        yield from chunk


def usage_text(usage: Mapping[str, Any]) -> str:
    """The summary in one line (or its note)."""
    if "note" in usage:
        return str(usage["note"])
    cpu, memory = usage["cpu_cores"], usage["memory_mib"]
    top = ", ".join(
        f"{p['pod']} {p['cpu_cores']:g} cores {p['memory_mib'] / 1024:.2f} GiB"
        for p in usage["top"]
    )
    return (
        f"{usage['pods']} pod{'' if usage['pods'] == 1 else 's'}: CPU {cpu['total']:g} cores "
        f"(each {cpu['min']:g}-{cpu['max']:g}), "
        f"memory {memory['total'] / 1024:.2f} GiB (each {memory['min'] / 1024:.2f}-"
        f"{memory['max'] / 1024:.2f}); most memory: {top}"
    )
