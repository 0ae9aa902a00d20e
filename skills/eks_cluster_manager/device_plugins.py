"""The device plugin DaemonSets a cluster already runs, whoever installed them (eksctl
installs its own NVIDIA and EFA plugins on a GPU or EFA node group, under the very names
ours use), and what auto_fix may do about them: install ours, upgrade one in place, or
leave it and say which to remove and why. auto_fix never downgrades a plugin.

A plugin is recognised by its own marks, not by a name fragment: its pod selector label
(`name: nvidia-device-plugin-ds` in NVIDIA's static manifest and eksctl's copy of it;
`name: aws-efa-k8s-device-plugin` in eksctl's manifest and the eks-charts chart;
`app.kubernetes.io/name` in the helm charts) or its container image's repository.
Sources, read 2026-12-06: eksctl-io/eksctl v0.230.0 pkg/addons/assets/
nvidia-device-plugin.yaml (image nvcr.io/nvidia/k8s-device-plugin:v0.20.0) and
efa-device-plugin.yaml (image <account>.dkr.ecr.<region>/eks/aws-efa-k8s-device-plugin:
v0.5.4, tolerating only CriticalAddonsOnly and aws.amazon.com/efa)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from skills.catalog.cuda import vtuple
from skills.kube.efa import GPU_TOLERATIONS

# component -> (pod labels, image repository suffix) that mark its plugin
MARKS: dict[str, tuple[dict[str, str], str]] = {
    "nvidia_device_plugin": (
        {"name": "nvidia-device-plugin-ds", "app.kubernetes.io/name": "nvidia-device-plugin"},
        "/k8s-device-plugin",
    ),
    "efa_device_plugin": (
        {
            "name": "aws-efa-k8s-device-plugin",
            "app.kubernetes.io/name": "aws-efa-k8s-device-plugin",
        },
        "/aws-efa-k8s-device-plugin",
    ),
    # Not a device plugin, recognised the same way: upstream's static manifest and helm
    # chart label it app.kubernetes.io/name, the GPU Operator app=nvidia-dcgm-exporter.
    "dcgm_exporter": (
        {"app.kubernetes.io/name": "dcgm-exporter", "app": "nvidia-dcgm-exporter"},
        "/dcgm-exporter",
    ),
}
_TAG = re.compile(r":(v?\d+(?:\.\d+)+)(?:[-@].*)?$")


@dataclass(frozen=True)
class Installed:
    namespace: str
    name: str
    image: str
    version: str | None  # from the image tag; None: not a version tag (a digest, latest)
    tolerated: frozenset[str]  # taint keys its pods tolerate ("*": every taint)

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"


def _pod(ds: dict[str, Any]) -> dict[str, Any]:
    return ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}


def _is(component: str, ds: dict[str, Any]) -> bool:
    labels, image_suffix = MARKS[component]
    template_labels = (((ds.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    own = {**((ds.get("metadata") or {}).get("labels") or {}), **template_labels}
    if any(own.get(k) == v for k, v in labels.items()):
        return True
    images = [c.get("image", "") for c in _pod(ds).get("containers") or []]
    return any(image.split("@")[0].rsplit(":", 1)[0].endswith(image_suffix) for image in images)


def _installed(ds: dict[str, Any], image_suffix: str) -> Installed:
    containers = _pod(ds).get("containers") or []
    image = next(
        (c.get("image", "") for c in containers if image_suffix in c.get("image", "")),
        containers[0].get("image", "") if containers else "",
    )
    m = _TAG.search(image)
    tolerated = set()
    for t in _pod(ds).get("tolerations") or []:
        if t.get("operator") == "Exists" and not t.get("key"):
            tolerated.add("*")
        elif t.get("key"):
            tolerated.add(t["key"])
    meta = ds.get("metadata") or {}
    return Installed(
        meta.get("namespace", ""),
        meta.get("name", ""),
        image,
        m[1] if m else None,
        frozenset(tolerated),
    )


def installed(component: str, daemonsets: list[dict[str, Any]]) -> list[Installed]:
    """Every DaemonSet that is this component's plugin, by its labels or its image."""
    suffix = MARKS[component][1]
    return [_installed(ds, suffix) for ds in daemonsets if _is(component, ds)]


def newer(version: str | None, than: str) -> bool:
    """True when `version` is above `than` ("v0.20.0" > "v0.17.1"); an unreadable version
    counts as newer: auto_fix never replaces what it cannot place."""
    return version is None or vtuple(version) > vtuple(than)


def untolerated_gpu_taints(plugin: Installed) -> list[str]:
    """The taints our GPU node groups carry that this plugin's pods do not tolerate."""
    if "*" in plugin.tolerated:
        return []
    return [t["key"] for t in GPU_TOLERATIONS if t["key"] not in plugin.tolerated]


@dataclass(frozen=True)
class Verdict:
    may_apply: bool  # auto_fix may apply ours (nothing there, or ours replaces it in place)
    notes: list[str]  # one line per plugin found: what it is and what auto_fix does with it
    problem: str | None = None  # why the running plugin(s) cannot serve our GPU nodes


def judge(
    component: str, found: list[Installed], pin: str, ours: tuple[str, str], title: str
) -> Verdict:
    """What auto_fix may do given the plugins found. `ours`: (namespace, name) of the
    DaemonSet auto_fix applies; `pin`: its version."""
    if not found:
        return Verdict(True, [])
    notes, problems, may_apply = [], [], True
    for p in found:
        same = (p.namespace, p.name) == ours
        version = p.version or f"image {p.image}"
        if not same:
            notes.append(
                f"{p.where}: {title} {version}, not at our name {ours[0]}/{ours[1]}: "
                "auto_fix installs no second one beside it"
            )
            may_apply = False
        elif newer(p.version, pin):
            notes.append(f"{p.where}: {title} {version}, newer than our {pin}: adopted as is")
            may_apply = False
        elif older(p, pin):
            notes.append(
                f"{p.where}: {title} {version}, older than our {pin}: "
                "auto_fix upgrades it in place if it fails a check"
            )
        else:
            notes.append(f"{p.where}: {title} {version} (our pin)")
        missing = untolerated_gpu_taints(p) if component == "efa_device_plugin" else []
        if missing and not (same and may_apply):
            problems.append(
                f"{p.where} does not tolerate the taint(s) {', '.join(missing)} our GPU "
                f"node groups carry, so it cannot run on them: remove it (`kubectl -n "
                f"{p.namespace} delete ds {p.name}`) and let auto_fix install {title} {pin}, "
                f"or add those tolerations to it"
            )
    if len(found) > 1:
        where = ", ".join(p.where for p in found)
        problems.append(
            f"{len(found)} {title} DaemonSets ({where}) both advertise the same devices: "
            "keep one; remove the others with `kubectl delete ds`"
        )
    return Verdict(may_apply and len(found) == 1, notes, "; ".join(problems) or None)


def older(plugin: Installed, pin: str) -> bool:
    """A readable version below our pin: applying ours upgrades it."""
    return plugin.version is not None and vtuple(plugin.version) < vtuple(pin)
