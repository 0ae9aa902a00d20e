"""The cluster checklist. Reads are batched into one snapshot (one list per kind: nodes,
pods, DaemonSets, Deployments; one get for the CRD, the PVC, the Services; Trainer v2's
discovery reads), then every check is a pure function of that snapshot: ok / warning /
failed, with evidence and the fix (and the component auto_fix would apply).

The training engine: the Training Operator v1 (PyTorchJob) is installed when its CRD or
its Deployment is there; Kubeflow Trainer v2 (TrainJob) when its kind is served or its
controller is there. Each installed engine's checks run (auto_fix repairs that one); on
a cluster with neither, Trainer v2's checks fail with their components, so auto_fix
installs Trainer v2 with JobSet and its runtimes: never a second engine beside one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skills.catalog.instances import InstanceSpec, instance_spec
from skills.eks_cluster_manager import device_plugins
from skills.eks_cluster_manager import engine_checks as trainer
from skills.eks_cluster_manager.cluster_snapshot import Snapshot
from skills.eks_cluster_manager.components import BY_KEY, CRD_NAME, TRAINING_NAMESPACE
from skills.eks_cluster_manager.models import Check, NodeCount, NodeInfo
from skills.eks_cluster_manager.storage_kube import csi_install_hint
from skills.kube import load_balancer
from skills.kube.client import KubeJson, access_failure
from skills.kube.deployments import deployment_ready
from skills.kube.engines import JOBSETS, TRAINJOBS, served_resources
from skills.kube.gpu_nodes import (
    GPU_RESOURCE,
    NOT_ENDED_SELECTOR,
    NodeGpuFacts,
    gpus_requested_by_node,
    node_gpu_facts,
)
from skills.kube.objects import kind_path
from skills.shared.errors import ToolFailure

FSX_NAMES = ("fsx-csi-node", "fsx-csi-controller")
OPERATOR_NAME = "training-operator"


@dataclass(frozen=True)
class Options:
    namespace: str = "default"
    checkpoint_pvc: str | None = None
    rdzv_backend: str = "c10d"


def read_snapshot(kube: KubeJson, options: Options, identity: str | None = None) -> Snapshot:
    from kubernetes.client.exceptions import ApiException

    try:
        version = kube.get("/version/")
        nodes = kube.items(kind_path("Node"))
    except ApiException as exc:
        raise access_failure(exc, kube.host) or exc from None
    # Pods not ended: those hold GPUs (gpus_requested_by_node skips ended ones again).
    pods = kube.items(kind_path("Pod"), [("fieldSelector", NOT_ENDED_SELECTOR)])
    snapshot = Snapshot(
        version=version,
        nodes=nodes,
        pods=pods,
        daemonsets=kube.items(kind_path("DaemonSet")),
        deployments=kube.items(kind_path("Deployment")),
        crd=kube.get_or_none(kind_path("CustomResourceDefinition", name=CRD_NAME)),
        identity=identity,
    )
    if options.checkpoint_pvc:
        snapshot.pvc = kube.get_or_none(
            kind_path("PersistentVolumeClaim", options.namespace, options.checkpoint_pvc)
        )
    if options.rdzv_backend == "etcd":
        snapshot.services = kube.items(kind_path("Service", options.namespace))
    read_trainer(kube, snapshot)
    return snapshot


def read_trainer(kube: KubeJson, snapshot: Snapshot) -> None:
    """Trainer v2's reads: its group's discovery (one small read); where it is installed or
    no engine is, JobSet's discovery, the webhook Service's EndpointSlices and the runtime."""
    snapshot.served[trainer.TRAINER_GV] = served_resources(kube, TRAINJOBS.group, TRAINJOBS.version)
    if not trainer_checked(snapshot):
        return
    snapshot.served[trainer.JOBSET_GV] = served_resources(kube, JOBSETS.group, JOBSETS.version)
    if not trainer.trainjob_installed(snapshot):
        return
    selector = f"{trainer.SERVICE_NAME_LABEL}={trainer.TRAINER_CONTROLLER}"
    snapshot.endpoint_slices = kube.items(kind_path("EndpointSlice"), [("labelSelector", selector)])
    if "clustertrainingruntimes" in snapshot.served[trainer.TRAINER_GV]:
        path = kind_path("ClusterTrainingRuntime", name=trainer.RUNTIME)
        snapshot.runtime = kube.get_or_none(path)


def pytorchjob_installed(s: Snapshot) -> bool:
    """The Training Operator v1 is installed: its PyTorchJob CRD or its Deployment is there."""
    return s.crd is not None or any(d["metadata"]["name"] == OPERATOR_NAME for d in s.deployments)


def trainer_checked(s: Snapshot) -> bool:
    """Trainer v2's checks run where it is installed, or where no engine is (then they say
    what auto_fix installs)."""
    return trainer.trainjob_installed(s) or not pytorchjob_installed(s)


def check_engines(s: Snapshot, checks: list[Check]) -> Check:
    """Which engines are installed, and whether their checks pass (the checks named)."""
    status = {c.name: c.status for c in checks}
    installed = {"pytorchjob": pytorchjob_installed(s), "trainjob": trainer.trainjob_installed(s)}
    owned = {
        "pytorchjob": ("training_operator", "pytorchjob_crd"),
        "trainjob": (
            "trainer_crds",
            "trainer_controller",
            "trainer_webhook",
            "jobset",
            "trainer_runtime",
        ),
    }
    titles = {
        "pytorchjob": "PyTorchJob (Training Operator v1)",
        "trainjob": "TrainJob (Kubeflow Trainer v2)",
    }
    evidence = []
    for engine, title in titles.items():
        if not installed[engine]:
            evidence.append(f"{title}: not installed")
            continue
        failed = [n for n in owned[engine] if status.get(n) == "failed"]
        health = f"not healthy ({', '.join(failed)} failed)" if failed else "healthy"
        evidence.append(f"{title}: installed, {health}")
    if any(installed.values()):
        return Check(name="training_engine", status="ok", evidence=evidence)
    v2, jobset = BY_KEY["kubeflow_trainer"], BY_KEY["jobset"]
    return Check(
        name="training_engine",
        status="failed",
        evidence=evidence,
        fix=f"Install {v2.title} {v2.version} with {jobset.title} {jobset.version} "
        "and its runtimes (auto_fix), the engine upstream installs today; a cluster with "
        "the Training Operator v1 keeps it.",
    )


def known_instance(name: str | None) -> InstanceSpec | None:
    if not name:
        return None
    try:
        return instance_spec(name)
    except ToolFailure:
        return None


def gpu_nodes(snapshot: Snapshot) -> list[tuple[NodeGpuFacts, InstanceSpec | None]]:
    """Nodes of a GPU instance type, or with GPUs allocatable whatever their type."""
    found = []
    for node in snapshot.nodes:
        facts = node_gpu_facts(node)
        spec = known_instance(facts.instance_type)
        if spec is not None or facts.gpus_allocatable > 0:
            found.append((facts, spec))
    return found


def gpus_in_use(snapshot: Snapshot) -> dict[str, int]:
    """GPUs held per node, counted as deploy counts them (gpus_requested_by_node)."""
    return gpus_requested_by_node(snapshot.pods)


# A fleet's answer stays small: a describe lists each node up to NODES_LISTED, then only
# the anomalies beside counts by kind; evidence names at most NAMES_SHOWN nodes.
NODES_LISTED = 32
NAMES_SHOWN = 20


def named(names: list[str]) -> str:
    """The first NAMES_SHOWN names, and how many more."""
    more = len(names) - NAMES_SHOWN
    return ", ".join(names[:NAMES_SHOWN]) + (f" and {more:,} more" if more > 0 else "")


def short_of_gpus(row: NodeInfo) -> bool:
    spec = known_instance(row.instance_type)
    return spec is not None and row.gpus_allocatable < spec.gpus


def fleet_view(rows: list[NodeInfo]) -> tuple[list[NodeInfo], list[NodeCount] | None]:
    """The nodes as a describe shows them: all of them up to NODES_LISTED; past it the
    anomalies (not Ready, short of their type's GPUs; at most NODES_LISTED) and every
    node counted by kind."""
    if len(rows) <= NODES_LISTED:
        return rows, None
    kinds: dict[tuple[Any, ...], NodeCount] = {}
    for row in rows:
        key = (row.instance_type, row.ready, row.gpus_allocatable, row.driver_version)
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = NodeCount(
                instance_type=row.instance_type,
                ready=row.ready,
                gpus_allocatable=row.gpus_allocatable,
                driver_version=row.driver_version,
                count=0,
            )
        kind.count += 1
        kind.gpus_in_use += row.gpus_in_use
    odd = [r for r in rows if not r.ready or short_of_gpus(r)]
    ordered = sorted(kinds.values(), key=lambda k: -k.count)
    return odd[:NODES_LISTED], ordered[:NODES_LISTED]


def node_rows(snapshot: Snapshot) -> list[NodeInfo]:
    used = gpus_in_use(snapshot)
    rows = []
    for node in snapshot.nodes:
        f = node_gpu_facts(node)
        rows.append(
            NodeInfo(
                name=f.name,
                ready=f.ready,
                instance_type=f.instance_type,
                gpus_allocatable=f.gpus_allocatable,
                gpus_in_use=used.get(f.name, 0),
                efa_allocatable=f.efa_allocatable,
                driver_version=f.driver_version,
            )
        )
    return rows


def _named(objects: list[dict[str, Any]], fragments: tuple[str, ...]) -> list[dict[str, Any]]:
    return [o for o in objects if any(f in o["metadata"]["name"] for f in fragments)]


def _where(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


# --- the checks ---------------------------------------------------------------------------


def check_api(s: Snapshot) -> Check:
    version = s.version.get("gitVersion") or s.version.get("git_version") or "?"
    evidence = [f"server {version}", f"{len(s.nodes)} nodes listed"]
    if s.identity:
        evidence.append(f"as {s.identity}")
    return Check(name="api_access", status="ok", evidence=evidence)


def check_nodes_ready(s: Snapshot) -> Check:
    facts = [node_gpu_facts(n) for n in s.nodes]
    if not facts:
        return Check(
            name="nodes_ready",
            status="failed",
            evidence=["no nodes"],
            fix="Scale a node group up (action=scale, desired_size>=1).",
        )
    bad = [f.name for f in facts if not f.ready]
    if not bad:
        return Check(name="nodes_ready", status="ok", evidence=[f"{len(facts)}/{len(facts)} Ready"])
    return Check(
        name="nodes_ready",
        status="failed" if len(bad) == len(facts) else "warning",
        evidence=[f"{len(facts) - len(bad)}/{len(facts)} Ready", f"not Ready: {named(bad)}"],
        fix="`kubectl describe node NAME` for the kubelet's condition; replace the node "
        "(terminate the instance: the node group starts another).",
    )


def check_gpu_allocatable(s: Snapshot, plugin_ok: bool, may_install: bool = True) -> Check:
    nodes = gpu_nodes(s)
    if not nodes:
        return Check(
            name="gpu_allocatable",
            status="failed",
            evidence=["no GPU nodes"],
            fix="Add a GPU node group (action=create_config) or scale one up.",
        )
    evidence, short, alike = [], [], {}
    for facts, spec in nodes:
        expected = spec.gpus if spec else None
        line = f"{facts.name} ({facts.instance_type}): {GPU_RESOURCE} {facts.gpus_allocatable}"
        if expected is not None and facts.gpus_allocatable != expected:
            short.append(f"{line}, expected {expected}")
        elif len(nodes) <= NODES_LISTED:
            evidence.append(line)
        else:  # a fleet: the nodes as expected are counted, by type
            key = f"{facts.instance_type}: {GPU_RESOURCE} {facts.gpus_allocatable}"
            alike[key] = alike.get(key, 0) + 1
    evidence += [f"{count:,} nodes {key}" for key, count in alike.items()]
    evidence += short[:NAMES_SHOWN]
    if len(short) > NAMES_SHOWN:
        evidence.append(f"and {len(short) - NAMES_SHOWN:,} more nodes short of their GPUs")
    bad = len(short)
    if not bad:
        return Check(name="gpu_allocatable", status="ok", evidence=evidence)
    if not plugin_ok and may_install:
        fix = "Install the NVIDIA device plugin (auto_fix); it advertises the GPUs."
        return Check(
            name="gpu_allocatable",
            status="failed",
            evidence=evidence,
            fix=fix,
            component="nvidia_device_plugin",
        )
    fix = (
        "The device plugin runs but the node advertises fewer GPUs: read its pod's log on "
        "that node (driver/NVML errors, Xid); replace the node if a GPU is lost."
    )
    return Check(name="gpu_allocatable", status="failed", evidence=evidence, fix=fix)


def _daemonset_check(name: str, s: Snapshot, component: str, node_count: int) -> tuple[Check, bool]:
    """The plugin's check, and whether auto_fix may apply ours (device_plugins.judge:
    never over a newer one, never a second one beside another)."""
    pinned = BY_KEY[component]
    title = pinned.title
    found = device_plugins.installed(component, s.daemonsets)
    (ours,) = [o for o in pinned.manifests() if o["kind"] == "DaemonSet"]
    verdict = device_plugins.judge(
        component,
        found,
        pinned.version,
        (ours["metadata"]["namespace"], ours["metadata"]["name"]),
        title,
    )
    if not found:
        check = Check(
            name=name,
            status="failed",
            evidence=[f"no {title} DaemonSet"],
            fix=f"Install the {title} {pinned.version} (auto_fix).",
            component=component,
        )
        return check, True
    evidence, status = [], "ok"
    by_where = {
        f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}": d for d in s.daemonsets
    }
    for plugin in found:
        st = by_where[plugin.where].get("status") or {}
        desired, ready = st.get("desiredNumberScheduled", 0), st.get("numberReady", 0)
        evidence.append(f"{plugin.where}: {ready}/{desired} ready")
        if desired == 0 or ready < desired:
            status = "failed"
        elif desired < node_count and status == "ok":
            status = "warning"
            evidence.append(f"scheduled on {desired} of {node_count} nodes that need it")
    evidence += verdict.notes
    fix = None
    if verdict.problem:
        status = "failed" if status == "failed" else "warning"
        fix = verdict.problem
    elif status != "ok":
        fix = (
            f"`kubectl -n {found[0].namespace} describe ds {found[0].name}`: check its "
            "tolerations and node affinity match the GPU nodes' taints and instance types, "
            "and its pods' logs."
        )
    # Re-applying the same version changes nothing: auto_fix acts only to upgrade.
    may_fix = (
        verdict.may_apply and status != "ok" and device_plugins.older(found[0], pinned.version)
    )
    if may_fix:
        fix = f"Upgrade it to {title} {pinned.version} in place (auto_fix). " + (fix or "")
    return Check(
        name=name,
        status=status,
        evidence=evidence,
        fix=fix,
        component=component if may_fix else None,
    ), verdict.may_apply


def check_nvidia_plugin(s: Snapshot) -> tuple[Check, bool]:
    count = len(gpu_nodes(s))
    return _daemonset_check("nvidia_device_plugin", s, "nvidia_device_plugin", count)


def check_efa_plugin(s: Snapshot) -> Check:
    efa_nodes = [f for f, spec in gpu_nodes(s) if spec is not None and spec.efa]
    if not efa_nodes:
        return Check(
            name="efa_device_plugin", status="ok", evidence=["no EFA-capable nodes: not needed"]
        )
    check, _ = _daemonset_check("efa_device_plugin", s, "efa_device_plugin", len(efa_nodes))
    no_efa = [f.name for f in efa_nodes if f.efa_allocatable == 0]
    if no_efa and check.status == "ok":
        check.status = "warning"
        check.evidence.append(f"vpc.amazonaws.com/efa 0 on {', '.join(no_efa)}")
        check.fix = "Create the node group with EFA interfaces (eksctl efaEnabled: true)."
    return check


def check_dcgm_exporter(s: Snapshot) -> Check:
    """A warning, not a failure: training runs without GPU metrics. Where the exporter
    runs, the pod doctor reads its XID, ECC and row-remap counters as node evidence."""
    name, pinned = "dcgm_exporter", BY_KEY["dcgm_exporter"]
    if not gpu_nodes(s):
        return Check(name=name, status="ok", evidence=["no GPU nodes: not needed"])
    found = device_plugins.installed(name, s.daemonsets)
    if not found:
        return Check(
            name=name,
            status="warning",
            evidence=[
                f"no {pinned.title} DaemonSet: the pod doctor reads no GPU health "
                "counters (XID, ECC, row remaps)"
            ],
            fix=f"Install the {pinned.title} {pinned.version} (auto_fix).",
            component=name,
        )
    evidence, ready_somewhere = [], False
    by_where = {_where(d): d for d in s.daemonsets}
    for exporter in found:
        st = by_where[exporter.where].get("status") or {}
        desired, ready = st.get("desiredNumberScheduled", 0), st.get("numberReady", 0)
        evidence.append(f"{exporter.where}: {ready}/{desired} ready, image {exporter.image}")
        ready_somewhere = ready_somewhere or ready > 0
    if ready_somewhere:
        return Check(name=name, status="ok", evidence=evidence)
    return Check(
        name=name,
        status="warning",
        evidence=evidence,
        fix=f"`kubectl -n {found[0].namespace} describe ds {found[0].name}`: no exporter pod "
        "is ready (tolerations of the GPU nodes' taints, its pods' logs).",
    )


def check_training_operator(s: Snapshot) -> Check:
    found = [d for d in s.deployments if d["metadata"]["name"] == OPERATOR_NAME]
    component = BY_KEY["training_operator"]
    if not found:
        return Check(
            name="training_operator",
            status="failed",
            evidence=[f"no Deployment {OPERATOR_NAME} in any namespace"],
            fix=f"Install the Training Operator {component.version} (auto_fix).",
            component="training_operator",
        )
    d = found[0]
    ready, line = deployment_ready(d)
    image = ((d.get("spec") or {}).get("template", {}).get("spec", {}).get("containers") or [{}])[
        0
    ].get("image", "?")
    evidence = [line, f"image {image}"]
    if ready:
        return Check(name="training_operator", status="ok", evidence=evidence)
    return Check(
        name="training_operator",
        status="failed",
        evidence=evidence,
        fix=f"`kubectl -n {d['metadata'].get('namespace', TRAINING_NAMESPACE)} logs "
        f"deploy/{OPERATOR_NAME}`; check image pulls and RBAC.",
    )


def check_crd(s: Snapshot) -> Check:
    if s.crd is None:
        return Check(
            name="pytorchjob_crd",
            status="failed",
            evidence=[f"no CRD {CRD_NAME}"],
            fix="Install the Training Operator's PyTorchJob CRD (auto_fix).",
            component="training_operator",
        )
    served = [v["name"] for v in (s.crd.get("spec") or {}).get("versions") or () if v.get("served")]
    if "v1" not in served:
        return Check(
            name="pytorchjob_crd",
            status="failed",
            evidence=[f"{CRD_NAME} serves {served or 'nothing'}, not v1"],
            fix="Apply the v1.9 CRD (auto_fix).",
            component="training_operator",
        )
    return Check(name="pytorchjob_crd", status="ok", evidence=[f"{CRD_NAME} v1 served"])


def check_fsx(s: Snapshot) -> Check:
    found = _named(s.daemonsets + s.deployments, FSX_NAMES)
    if not found:
        return Check(
            name="fsx_csi_driver",
            status="failed",
            evidence=["no fsx-csi-node DaemonSet or fsx-csi-controller Deployment"],
            fix="Install the EKS add-on with its IAM role (create_config's eksctl config "
            "does both): " + csi_install_hint("CLUSTER", "REGION", "ACCOUNT"),
        )
    return Check(name="fsx_csi_driver", status="ok", evidence=[_where(o) for o in found])


def check_pvc(s: Snapshot, options: Options) -> Check:
    name = f"{options.namespace}/{options.checkpoint_pvc}"
    if s.pvc is None:
        return Check(
            name="checkpoint_pvc",
            status="failed",
            evidence=[f"no PVC {name}"],
            fix="Create the PVC (FSx for Lustre storage class, ReadWriteMany) "
            "or name an existing one.",
        )
    phase = (s.pvc.get("status") or {}).get("phase", "Unknown")
    spec = s.pvc.get("spec") or {}
    evidence = [
        f"{name}: {phase}",
        f"storageClass {spec.get('storageClassName', '-')}",
        f"access {','.join(spec.get('accessModes') or ['-'])}",
    ]
    if phase == "Bound":
        return Check(name="checkpoint_pvc", status="ok", evidence=evidence)
    return Check(
        name="checkpoint_pvc",
        status="failed",
        evidence=evidence,
        fix=f"`kubectl -n {options.namespace} describe pvc {options.checkpoint_pvc}`: "
        "the events say why (no FSx CSI driver, storage class, subnet/security "
        "group of the file system).",
    )


def check_load_balancer_controller(s: Snapshot) -> Check:
    """A warning, not a failure: training needs no load balancer; a model server with
    service_type=LoadBalancer does (deploy_model_server refuses one without it)."""
    name = "load_balancer_controller"
    found = load_balancer.controllers(s.deployments)
    if not found:
        return Check(
            name=name,
            status="warning",
            evidence=[
                f"no Deployment {load_balancer.CONTROLLER}",
                "a LoadBalancer Service (model server) would get no address",
            ],
            fix=load_balancer.install_hint(None),
        )
    status = "ok" if any(load_balancer.ready(d) for d in found) else "warning"
    evidence = [
        f"{_where(d)}: {(d.get('status') or {}).get('readyReplicas', 0)} ready" for d in found
    ]
    fix = (
        None
        if status == "ok"
        else (
            f"`kubectl -n kube-system logs deploy/{load_balancer.CONTROLLER}`: check its IAM role."
        )
    )
    return Check(name=name, status=status, evidence=evidence, fix=fix)


def check_etcd(s: Snapshot, options: Options) -> Check:
    found = [
        sv
        for sv in s.services
        if sv["metadata"]["name"] == "etcd"
        or any(p.get("port") == 2379 for p in (sv.get("spec") or {}).get("ports") or ())
    ]
    if not found:
        return Check(
            name="etcd_service",
            status="failed",
            evidence=[f"no etcd Service (port 2379) in {options.namespace}"],
            fix="Deploy the etcd service (auto_fix), or use rdzv_backend c10d.",
            component="etcd",
        )
    return Check(
        name="etcd_service", status="ok", evidence=[f"{_where(sv)} port 2379" for sv in found]
    )


def run_checks(s: Snapshot, options: Options) -> list[Check]:
    plugin, may_install = check_nvidia_plugin(s)
    checks = [
        check_api(s),
        check_nodes_ready(s),
        check_gpu_allocatable(s, plugin.status != "failed", may_install),
        plugin,
        check_efa_plugin(s),
        check_dcgm_exporter(s),
    ]
    if pytorchjob_installed(s):
        checks += [check_training_operator(s), check_crd(s)]
    if trainer_checked(s):
        checks += trainer.trainer_checks(s)
    checks += [check_engines(s, checks), check_load_balancer_controller(s)]
    if options.checkpoint_pvc:
        checks += [check_fsx(s), check_pvc(s, options)]
    if options.rdzv_backend == "etcd":
        checks.append(check_etcd(s, options))
    return checks
