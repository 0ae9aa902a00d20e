"""A GPU training cluster seeded into kmock, healthy by default, for the cluster checks:
p4d GPU nodes with the NVIDIA and EFA device plugins and the DCGM exporter, the Training
Operator and its PyTorchJob CRD, the FSx CSI driver, a Bound checkpoint PVC and an etcd
Service. Tests break one piece at a time (`seed_healthy(kube); del kube.emulator.objects[...]`).

Also plays the controllers after auto_fix: `play_controllers(kube)` marks what was
applied ready, as the DaemonSet/Deployment controllers and the device plugins would, and
gives the Services in front of ready Deployments their EndpointSlices."""

from __future__ import annotations

from typing import Any

from skills.catalog.instances import instance_spec
from tests.services.kube import KubeService

NVIDIA_DS = ("apps/v1/daemonsets", "kube-system", "nvidia-device-plugin-daemonset")
EFA_DS = ("apps/v1/daemonsets", "kube-system", "aws-efa-k8s-device-plugin")  # the chart's name
DCGM_DS = ("apps/v1/daemonsets", "kube-system", "dcgm-exporter")
FSX_DS = ("apps/v1/daemonsets", "kube-system", "fsx-csi-node")
OPERATOR = ("apps/v1/deployments", "kubeflow", "training-operator")
LB_CONTROLLER = ("apps/v1/deployments", "kube-system", "aws-load-balancer-controller")
CRD = ("apiextensions.k8s.io/v1/customresourcedefinitions", None, "pytorchjobs.kubeflow.org")
PVC = ("v1/persistentvolumeclaims", "default", "ckpt")
ETCD = ("v1/services", "default", "etcd")
PYTORCHJOB_RESOURCE = "kubeflow.org/v1/pytorchjobs"


def node(
    name: str,
    instance_type: str,
    *,
    ready: bool = True,
    gpus: int | None = None,
    efa: int | None = None,
    driver: str | None = "550.127.08",
) -> dict[str, Any]:
    spec = instance_spec(instance_type) if not instance_type.startswith("m5") else None
    allocatable = {"cpu": "96", "memory": "1100Gi"}
    if spec is not None:
        allocatable["nvidia.com/gpu"] = str(spec.gpus if gpus is None else gpus)
        allocatable["vpc.amazonaws.com/efa"] = str((spec.efa_devices or 0) if efa is None else efa)
    labels = {"node.kubernetes.io/instance-type": instance_type}
    if driver and spec is not None:
        labels["nvidia.com/cuda.driver-version.full"] = driver
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def daemonset(name: str, namespace: str, desired: int, ready: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": {"containers": [{"name": name, "image": "x"}]}}},
        "status": {"desiredNumberScheduled": desired, "numberReady": ready},
    }


def plugin_daemonset(component: str, desired: int, ready: int) -> dict[str, Any]:
    """The DaemonSet auto_fix applies for this device plugin (or the DCGM exporter), as its
    controller reports it."""
    from skills.eks_cluster_manager.components import BY_KEY

    (ds,) = [o for o in BY_KEY[component].manifests() if o["kind"] == "DaemonSet"]
    return {**ds, "status": {"desiredNumberScheduled": desired, "numberReady": ready}}


def eksctl_daemonset(component: str, desired: int, ready: int) -> dict[str, Any]:
    """eksctl's own plugin DaemonSet (eksctl v0.230.0 pkg/addons/assets/, read
    2026-12-06): same names as ours, its own selector label, image and tolerations."""
    if component == "nvidia_device_plugin":
        name, label = NVIDIA_DS[2], "nvidia-device-plugin-ds"
        image = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
        tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    else:
        name = label = EFA_DS[2]
        image = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.4"
        tolerations = [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": label}},
            "template": {
                "metadata": {"labels": {"name": label}},
                "spec": {
                    "tolerations": tolerations,
                    "containers": [{"name": name, "image": image}],
                },
            },
        },
        "status": {"desiredNumberScheduled": desired, "numberReady": ready},
    }


def seed_healthy(kube: KubeService, gpu_nodes: int = 2, instance_type: str = "p4d.24xlarge"):
    objects = kube.emulator.objects
    for i in range(gpu_nodes):
        objects["v1/nodes", None, f"gpu-{i}"] = node(f"gpu-{i}", instance_type)
    objects["v1/nodes", None, "system-0"] = node("system-0", "m5.xlarge")
    objects["v1/pods", "default", "train-0"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "default"},
        "spec": {
            "nodeName": "gpu-0",
            "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        },
        "status": {"phase": "Running"},
    }
    objects[NVIDIA_DS] = plugin_daemonset("nvidia_device_plugin", gpu_nodes, gpu_nodes)
    objects[EFA_DS] = plugin_daemonset("efa_device_plugin", gpu_nodes, gpu_nodes)
    objects[DCGM_DS] = plugin_daemonset("dcgm_exporter", gpu_nodes, gpu_nodes)
    objects[FSX_DS] = daemonset(FSX_DS[2], "kube-system", gpu_nodes + 1, gpu_nodes + 1)
    objects[OPERATOR] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "training-operator", "namespace": "kubeflow"},
        "spec": {
            "replicas": 1,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "training-operator",
                            "image": "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
                        }
                    ]
                }
            },
        },
        "status": {"readyReplicas": 1, "replicas": 1},
    }
    objects[LB_CONTROLLER] = {  # as its Helm chart installs it
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": LB_CONTROLLER[2], "namespace": "kube-system"},
        "spec": {"replicas": 2},
        "status": {"readyReplicas": 2, "replicas": 2},
    }
    objects[CRD] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD[2]},
        "spec": {
            "group": "kubeflow.org",
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    objects[PVC] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt", "namespace": "default"},
        "spec": {"storageClassName": "fsx-sc", "accessModes": ["ReadWriteMany"]},
        "status": {"phase": "Bound"},
    }
    objects[ETCD] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "etcd", "namespace": "default"},
        "spec": {"ports": [{"name": "client", "port": 2379}]},
    }


def play_controllers(kube: KubeService) -> None:
    """What the controllers would do with applied objects: DaemonSets and Deployments
    become ready; the device plugins advertise each GPU node's GPUs and EFA devices."""
    objects = kube.emulator.objects
    gpu_names = []
    for key in list(objects):
        resource, namespace, name = key
        obj = objects[key]
        if obj.deleted:
            continue
        kind = obj.get("kind")
        if kind == "Node":
            labels = obj.get("metadata", {}).get("labels", {})
            itype = labels.get("node.kubernetes.io/instance-type", "")
            if not itype.startswith("m5"):
                gpu_names.append(key)
        elif kind == "Deployment":
            replicas = obj.get("spec", {}).get("replicas", 1)
            obj.patch({"status": {"readyReplicas": replicas, "replicas": replicas}})
    for key in gpu_names:
        labels = objects[key]["metadata"]["labels"]
        spec = instance_spec(labels["node.kubernetes.io/instance-type"])
        objects[key].patch(
            {
                "status": {
                    "allocatable": {
                        "nvidia.com/gpu": str(spec.gpus),
                        "vpc.amazonaws.com/efa": str(spec.efa_devices or 0),
                    }
                }
            }
        )
    for key in list(objects):
        obj = objects[key]
        if not obj.deleted and obj.get("kind") == "DaemonSet":
            count = len(gpu_names)
            obj.patch({"status": {"desiredNumberScheduled": count, "numberReady": count}})
    play_endpoints(kube)


def play_endpoints(kube: KubeService) -> None:
    """The EndpointSlice controller: each Service whose selector picks a ready Deployment's
    pods gets a slice (labelled kubernetes.io/service-name) with one ready endpoint."""
    objects = kube.emulator.objects
    live = [objects[k] for k in list(objects) if not objects[k].deleted]
    ready = [
        (
            d["metadata"]["namespace"],
            d["spec"].get("template", {}).get("metadata", {}).get("labels", {}),
        )
        for d in live
        if d.get("kind") == "Deployment"
        and d.get("status", {}).get("readyReplicas", 0) >= d["spec"].get("replicas", 1)
    ]
    for service in (o for o in live if o.get("kind") == "Service"):
        meta, selector = service["metadata"], service.get("spec", {}).get("selector")
        if not selector or not any(
            ns == meta.get("namespace") and selector.items() <= labels.items()
            for ns, labels in ready
        ):
            continue
        name = f"{meta['name']}-abcde"
        objects["discovery.k8s.io/v1/endpointslices", meta["namespace"], name] = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": meta["namespace"],
                         "labels": {"kubernetes.io/service-name": meta["name"]}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.10"], "conditions": {"ready": True}}],
        }  # fmt: skip
