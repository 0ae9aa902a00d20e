"""A node whose GPU fell off the bus, on the Kubernetes stand-in (kmock; the test plays the
Training Operator, tests/services/kubelet.py's scheduler binds the pods): the doctor names
the node first; auto_retry cordons and taints it (read back from the API), the
resubmitted job's manifest keeps its pods off it and the scheduler places them elsewhere;
manage_eks_cluster action=release_node undoes it (confirm). An application XID (13) is the
job's fault: no node is touched. Too few nodes left: the loop stops and says so."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from commands.deploy_training_job import deploy_training_job
from commands.manage_eks_cluster import manage_eks_cluster
from skills.job_orchestration import auto_retry
from skills.kube.quarantine import RECORD_ANNOTATION, TAINT_KEY
from skills.operations import operations
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.targets.kubernetes import target as kubernetes_target
from tests.services.training_operator import RUN_LOG, TrainingOperator, play_attempts

pytestmark = pytest.mark.integration

IMAGE = "localhost:9/fsdp:v1"
LINES = [json.loads(line) for line in RUN_LOG.splitlines()]
STEPS = "".join(json.dumps(e) + "\n" for e in LINES[:3])
WATCHDOG = (
    "[rank0]:[E1123 13:50:01.123456 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600015 milliseconds before timing out.\n"
)
XID79 = (
    "[Thu Nov 20 12:05:00 2026] NVRM: Xid (PCI:0000:a8:00): 79, pid=2211, name=python, GPU "
    "has fallen off the bus.\n[rank8]: RuntimeError: CUDA error: unspecified launch failure\n"
)
XID13 = (
    "[Thu Nov 20 12:05:00 2026] NVRM: Xid (PCI:0000:a8:00): 13, pid=2211, name=python, "
    "Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address\n"
    "[rank8]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
)
AGENT = "detected XID-79 on the instance, review kernel logs for additional information."


@pytest.fixture
def operator(kube_api, tmp_path, monkeypatch) -> TrainingOperator:
    kube_api.reset()
    monkeypatch.setenv(operations.STATE_DIR_ENV, str(tmp_path / "state"))
    # As in test_auto_retry: the stand-in answers within 50 ms, not a cluster's seconds,
    # so it is polled at the local target's cadence (two polls per follow chunk, as 2 s /
    # 4 s). Which node is named, quarantined and avoided does not depend on how often
    # the job is looked at; at 2 s each attempt spent ~2 s asleep (issue 36).
    monkeypatch.setattr(kubernetes_target.KubernetesTarget, "poll_s", 0.25)
    monkeypatch.setattr(auto_retry, "FOLLOW_CHUNK_S", 0.5)
    return TrainingOperator(kube_api)


def node(operator: TrainingOperator, name: str) -> dict:
    return json.loads(operator.core.read_node(name, _preload_content=False).data)


def schedule(operator: TrainingOperator) -> dict[str, str]:
    """The job's pods as the operator creates them, each bound by the stand-in scheduler
    (which honours cordons, taints and node affinity): pod -> node."""
    placed = {}
    for name in operator.create_pods("llama"):
        pod = json.loads(operator.core.read_namespaced_pod(
            name, operator.namespace, _preload_content=False).data)  # fmt: skip
        placed[name] = operator.kubelet.bind(pod)
        operator.core.patch_namespaced_pod(name, operator.namespace,
                                           {"spec": {"nodeName": placed[name]}},
                                           _preload_content=False)  # fmt: skip
    return placed


def gpu_fails_on_worker(operator: TrainingOperator, log: str, agent: bool) -> Callable[[], None]:
    """Attempt 1: worker-0's node loses a GPU (the kernel line in its log; with `agent`,
    the EKS node monitoring agent's condition and event too); rank 0 times out."""

    def attempt() -> None:
        placed = schedule(operator)
        bad = placed["llama-worker-0"]
        if agent:
            status = node(operator, bad)["status"]
            status["conditions"].append({
                "type": "AcceleratedHardwareReady", "status": "False",
                "reason": "NvidiaXID79Error", "message": AGENT,
                "lastTransitionTime": "2026-11-20T12:05:02Z"})  # fmt: skip
            operator.core.patch_node_status(bad, {"status": status}, _preload_content=False)
            event = {"apiVersion": "v1", "kind": "Event",
                     "metadata": {"name": f"{bad}.xid79", "namespace": "default"},
                     "involvedObject": {"kind": "Node", "name": bad},
                     "reason": "NvidiaXID79Error", "message": AGENT, "type": "Warning"}  # fmt: skip
            operator.core.create_namespaced_event("default", event, _preload_content=False)
        operator.run("llama", outcome="Failed", exit_codes={"master-0": 1, "worker-0": 1},
                     rank_logs={"master-0": STEPS + WATCHDOG, "worker-0": log})  # fmt: skip

    return attempt


def play(operator: TrainingOperator, attempts: list[Callable[[], None]]):
    """The operator over the attempts (tests/services/training_operator.py play_attempts):
    join() gives each attempt's job as created and where its pods were placed."""
    return play_attempts(operator, list(attempts))


def succeeds(operator: TrainingOperator) -> Callable[[], None]:
    def attempt() -> None:
        schedule(operator)
        operator.run("llama", outcome="Succeeded")

    return attempt


def deploy(**kwargs):
    args = {"job_name": "llama", "num_nodes": 2, "gpu_per_node": 8, "image_uri": IMAGE,
            "instance_type": "p5.48xlarge", "max_steps": 6, "auto_retry": True,
            "skip_gate": True}  # fmt: skip
    return deploy_training_job(**{**args, **kwargs})


def affinity(job: dict) -> list[dict]:
    pods = [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    return [p.get("affinity") for p in pods]


def test_xid79_names_the_node_quarantines_it_and_the_next_job_runs_elsewhere(operator):
    operator.add_nodes("p5.48xlarge", 3, efa=32)
    join = play(operator, [gpu_fails_on_worker(operator, XID79, agent=True), succeeds(operator)])
    result = deploy(max_retries=2)
    jobs, placed = join()
    bad = placed[0]["llama-worker-0"]

    assert result.status == "succeeded" and result.stop_reason is None
    first, second = result.attempts
    assert (first.code, first.pod, first.rank) == ("gpu_hardware_fault", "llama-worker-0", 1)
    assert first.quarantined == [bad] and not second.quarantined
    assert first.remedy.startswith("gpu_hardware_fault/resubmit")
    assert any("NvidiaXID79Error" in e or "Xid" in e for e in first.evidence)

    # Cordoned and tainted, recorded on the node, as the API holds it now.
    held = node(operator, bad)
    assert held["spec"]["unschedulable"] is True
    assert {"key": TAINT_KEY, "value": "gpu_hardware_fault", "effect": "NoSchedule"} in held[
        "spec"]["taints"]  # fmt: skip
    record = json.loads(held["metadata"]["annotations"][RECORD_ANNOTATION])
    assert (record["job"], record["reason"], record["was_cordoned"]) == (
        "llama", "gpu_hardware_fault", False)  # fmt: skip
    others = [n["metadata"]["name"] for n in operator.nodes() if n["metadata"]["name"] != bad]
    assert all(not node(operator, n).get("spec", {}).get("unschedulable") for n in others)

    # The resubmitted job keeps off it: its manifest, and where the scheduler put its pods.
    keep_off = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": [bad]}]}]}}}  # fmt: skip
    assert affinity(jobs[0]) == [None, None] and affinity(jobs[1]) == [keep_off, keep_off]
    assert bad not in placed[1].values() and len(set(placed[1].values())) == 2


def test_release_node_lists_then_undoes_the_quarantine_with_confirm(operator):
    operator.add_nodes("p5.48xlarge", 3, efa=32)
    join = play(operator, [gpu_fails_on_worker(operator, XID79, agent=False),
                           succeeds(operator)])  # fmt: skip
    result = deploy(max_retries=2)
    _, placed = join()
    bad = placed[0]["llama-worker-0"]
    assert result.attempts[0].quarantined == [bad]  # the kernel line alone is enough

    listed = manage_eks_cluster(action="release_node")
    assert [q["node"] for q in listed.changes["quarantined"]] == [bad]
    with pytest.raises(ToolFailure) as refused:
        manage_eks_cluster(action="release_node", node=bad)
    assert refused.value.code == "confirmation_required"
    assert node(operator, bad)["spec"]["unschedulable"] is True  # nothing written unconfirmed

    released = manage_eks_cluster(action="release_node", node=bad, confirm=True)
    assert released.changes["released"]["node"] == bad
    held = node(operator, bad)
    assert not held["spec"].get("unschedulable")
    assert all(t["key"] != TAINT_KEY for t in held["spec"].get("taints") or [])
    assert RECORD_ANNOTATION not in (held["metadata"].get("annotations") or {})
    with pytest.raises(ToolFailure) as again:  # released: no longer ours to release
        manage_eks_cluster(action="release_node", node=bad, confirm=True)
    assert again.value.code == "not_ours"


def test_an_application_xid_is_the_jobs_fault_and_costs_no_node(operator):
    operator.add_nodes("p5.48xlarge", 3, efa=32)
    join = play(operator, [gpu_fails_on_worker(operator, XID13, agent=False)])
    result = deploy(max_retries=2)
    join()
    (only,) = result.attempts
    assert (only.code, only.retryable, only.quarantined) == ("gpu_application_fault", False, [])
    assert result.stop_reason.startswith("gpu_application_fault is permanent")
    for n in operator.nodes():
        assert not n.get("spec", {}).get("unschedulable") and not n.get("spec", {}).get("taints")


def test_too_few_nodes_left_stops_and_says_what_to_add(operator):
    operator.add_nodes("p5.48xlarge", 2, efa=32)  # the job needs both
    join = play(operator, [gpu_fails_on_worker(operator, XID79, agent=True)])
    result = deploy(max_retries=2)
    _, placed = join()
    bad = placed[0]["llama-worker-0"]
    (only,) = result.attempts
    assert only.quarantined == [bad]
    assert result.stop_reason.startswith(f"quarantined {bad}; 1 schedulable p5.48xlarge node(s)")
    assert "add 1 node(s)" in result.stop_reason


def test_the_node_groups_scale_call_when_it_cannot_supply_another_node(operator, moto_server):
    """The quarantined node's EKS node group (moto) is at its max: the call raises max and
    desired by the nodes missing."""
    from skills.kube.access import kube_api_client
    from skills.kube.quarantine import NODEGROUP_LABEL
    from skills.training_job_deployer.targets.kubernetes.job_client import JobClient
    from skills.training_job_deployer.targets.kubernetes.settings import (
        KubernetesDeploySettings,
    )
    from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
    from tests.integration.test_eks_access import REGION, make_cluster

    make_cluster("quarantine-a", {"gpu": ("p5.48xlarge", 1, 2, 2)})
    names = operator.add_nodes("p5.48xlarge", 2, efa=32)
    for name in names:
        operator.core.patch_node(name, {"metadata": {"labels": {NODEGROUP_LABEL: "gpu"}}},
                                 _preload_content=False)  # fmt: skip
    settings = KubernetesDeploySettings(
        cluster_name="quarantine-a", region=REGION, instance_type="p5.48xlarge"
    )
    target = KubernetesTarget(settings)
    with kube_api_client() as api:
        target._client = JobClient(api, "default")  # the stand-in's API, the EKS of moto
        done = target.quarantine([names[0]], "gpu_hardware_fault", "llama", 2)
    assert done.nodes == (names[0],) and "1 schedulable p5.48xlarge node(s) left" in done.short
    assert done.next_step == {
        "tool": "manage_eks_cluster",
        "arguments": {"action": "scale", "cluster_name": "quarantine-a", "nodegroup": "gpu",
                      "desired_size": 3, "max_size": 3, "region": REGION},
        "why": "add 1 p5.48xlarge node(s) to gpu (paid: ask first)",
    }  # fmt: skip


# -- records that match the world (issue 45 findings 7 and 11) ---------------------------

ADMIN = "kubectl"  # the field manager of an admin's kubectl cordon/uncordon/taint


def as_admin(operator: TrainingOperator, name: str, spec: dict) -> None:
    """What an admin's kubectl does to the node (a patch under its own field manager)."""
    operator.core.patch_node(name, {"spec": spec}, field_manager=ADMIN, _preload_content=False)


def admin_lifts(operator: TrainingOperator, name: str) -> None:
    """kubectl uncordon, then kubectl taint <node> fsdp-eks.io/quarantined-."""
    as_admin(operator, name, {"unschedulable": None})
    taints = [t for t in node(operator, name)["spec"].get("taints") or [] if
              t["key"] != TAINT_KEY]  # fmt: skip
    as_admin(operator, name, {"taints": taints or None})


def admin_recordons(operator: TrainingOperator, name: str) -> None:
    """kubectl uncordon then kubectl cordon: the cordon is the admin's now."""
    as_admin(operator, name, {"unschedulable": None})
    as_admin(operator, name, {"unschedulable": True})


def held(operator: TrainingOperator, name: str) -> tuple[bool, bool, dict | None]:
    """(cordoned, our taint on it, the record) as the API holds the node now."""
    spec, meta = node(operator, name)["spec"], node(operator, name)["metadata"]
    raw = (meta.get("annotations") or {}).get(RECORD_ANNOTATION)
    return (bool(spec.get("unschedulable")),
            any(t["key"] == TAINT_KEY for t in spec.get("taints") or []),
            json.loads(raw) if raw else None)  # fmt: skip


def kube_target():
    from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
    from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget

    return KubernetesTarget(KubernetesSettings())


def test_a_quarantine_an_admin_lifted_is_applied_again_on_the_next_fault(operator):
    """Finding 7: the record alone said quarantined; the node was schedulable."""
    bad, _ = operator.add_nodes("p5.48xlarge", 2, efa=32)
    kube_target().quarantine([bad], "gpu_hardware_fault", "llama", 1)
    first = held(operator, bad)[2]
    admin_lifts(operator, bad)
    assert held(operator, bad)[:2] == (False, False) and held(operator, bad)[2] == first

    kube_target().quarantine([bad], "gpu_hardware_fault", "llama-2", 1)
    cordoned, tainted, record = held(operator, bad)
    assert (cordoned, tainted) == (True, True)
    assert (record["job"], record["was_cordoned"]) == ("llama-2", False)
    assert record["uid"] == node(operator, bad)["metadata"]["uid"]
    from skills.kube.quarantine import schedulable

    assert not schedulable(node(operator, bad), "p5.48xlarge")
    # Held as recorded: a third fault keeps the record (idempotent).
    kube_target().quarantine([bad], "gpu_hardware_fault", "llama-3", 1)
    assert held(operator, bad)[2] == record


def test_only_the_taint_removed_is_a_lifted_quarantine_too(operator):
    """A member of the class the finding did not list: the admin removed our taint and
    left the node cordoned; the next fault puts the taint back, the cordon stays ours."""
    bad, _ = operator.add_nodes("p5.48xlarge", 2, efa=32)
    kube_target().quarantine([bad], "gpu_hardware_fault", "llama", 1)
    as_admin(operator, bad, {"taints": None})
    kube_target().quarantine([bad], "gpu_hardware_fault", "llama-2", 1)
    cordoned, tainted, record = held(operator, bad)
    assert (cordoned, tainted, record["job"], record["was_cordoned"]) == (
        True, True, "llama-2", False)  # fmt: skip
    released = manage_eks_cluster(action="release_node", node=bad, confirm=True)
    assert released.changes["cordon"] == "uncordoned" and held(operator, bad) == (
        False, False, None)  # fmt: skip


def test_release_keeps_a_cordon_an_admin_made_after_the_quarantine(operator):
    """Finding 11, the cordon: uncordoned and cordoned again by an admin meanwhile, it is
    the admin's (managedFields say who set spec.unschedulable last): kept, and said."""
    bad, _ = operator.add_nodes("p5.48xlarge", 2, efa=32)
    kube_target().quarantine([bad], "gpu_hardware_fault", "llama", 1)
    admin_recordons(operator, bad)
    with pytest.raises(ToolFailure) as plan:
        manage_eks_cluster(action="release_node", node=bad)
    assert "leaves its cordon (kept: kubectl cordoned it after" in plan.value.message
    released = manage_eks_cluster(action="release_node", node=bad, confirm=True)
    assert released.changes["cordon"] == "kept: kubectl cordoned it after the quarantine"
    assert "cordon: kept" in released.summary
    assert held(operator, bad) == (True, False, None)


def test_release_refuses_a_record_copied_onto_another_node(operator):
    """Finding 11, the record: the annotation (and taint, and cordon) copied from the
    quarantined node onto another does not make that one ours to uncordon."""
    bad, other = operator.add_nodes("p5.48xlarge", 2, efa=32)
    kube_target().quarantine([bad], "gpu_hardware_fault", "llama", 1)
    source = node(operator, bad)
    operator.core.patch_node(other, {
        "metadata": {"annotations": {RECORD_ANNOTATION: source["metadata"]["annotations"][
            RECORD_ANNOTATION]}},
        "spec": {"unschedulable": True, "taints": source["spec"]["taints"]},
    }, field_manager=ADMIN, _preload_content=False)  # fmt: skip
    listed = manage_eks_cluster(action="release_node")
    assert [q["node"] for q in listed.changes["quarantined"]] == [bad]
    with pytest.raises(ToolFailure) as refused:
        manage_eks_cluster(action="release_node", node=other, confirm=True)
    assert refused.value.code == "not_ours" and refused.value.details["copied_record"]
    assert held(operator, other)[:2] == (True, True)  # untouched
    # The same name on a node object made again (a replaced instance): another uid.
    record = json.loads(source["metadata"]["annotations"][RECORD_ANNOTATION])
    forged = {**record, "node": other, "uid": "00000000-0000-0000-0000-000000000000"}
    operator.core.patch_node(other, {"metadata": {"annotations": {
        RECORD_ANNOTATION: json.dumps(forged)}}}, _preload_content=False)  # fmt: skip
    with pytest.raises(ToolFailure) as again:
        manage_eks_cluster(action="release_node", node=other, confirm=True)
    assert again.value.code == "not_ours"


def test_the_quarantine_lifecycle_whole(operator):
    """Quarantine (auto_retry) -> an admin uncordons and untaints -> the GPU fails again
    -> the quarantine is applied again -> the admin re-cordons it to look at it -> release:
    our taint and record go, the admin's cordon stays."""
    operator.add_nodes("p5.48xlarge", 3, efa=32)
    join = play(operator, [gpu_fails_on_worker(operator, XID79, agent=False),
                           succeeds(operator)])  # fmt: skip
    result = deploy(max_retries=2)
    _, placed = join()
    bad = placed[0]["llama-worker-0"]
    assert result.attempts[0].quarantined == [bad] and held(operator, bad)[:2] == (True, True)

    admin_lifts(operator, bad)
    assert held(operator, bad)[:2] == (False, False)

    done = kube_target().quarantine([bad], "gpu_hardware_fault", "llama", 2)  # as auto_retry
    assert done.nodes == (bad,)
    cordoned, tainted, record = held(operator, bad)
    assert (cordoned, tainted, record["was_cordoned"]) == (True, True, False)

    admin_recordons(operator, bad)
    released = manage_eks_cluster(action="release_node", node=bad, confirm=True)
    assert released.changes["released"]["since"] == record["since"]
    assert released.changes["cordon"] == "kept: kubectl cordoned it after the quarantine"
    assert held(operator, bad) == (True, False, None)
    assert manage_eks_cluster(action="release_node").changes["quarantined"] == []


def admin_cordons(operator: TrainingOperator, name: str) -> None:
    """kubectl cordon: the admin takes the node out for maintenance of their own."""
    as_admin(operator, name, {"unschedulable": True})


@pytest.mark.parametrize(
    ("admin_first", "after_release"),
    [(False, (False, False, None)), (True, (True, False, None))],
    ids=["schedulable-before", "admin-cordoned-before"],
)
def test_quarantined_twice_then_released_leaves_the_node_as_the_admin_had_it(
    operator, admin_first, after_release
):
    """The lifecycle with an admin's cordon made before the quarantine, or none: fault ->
    quarantine -> fault again (the node still held: the record stays the first one) ->
    release. The cordon the quarantine made goes; an admin's cordon from before stays."""
    bad, _ = operator.add_nodes("p5.48xlarge", 2, efa=32)
    if admin_first:
        admin_cordons(operator, bad)
    kube_target().quarantine([bad], "gpu_hardware_fault", "llama", 1)
    first = held(operator, bad)
    assert first[:2] == (True, True) and first[2]["was_cordoned"] is admin_first

    kube_target().quarantine([bad], "gpu_hardware_fault", "llama-2", 1)  # the next fault
    assert held(operator, bad) == first  # held as recorded: the first record stays

    released = manage_eks_cluster(action="release_node", node=bad, confirm=True)
    assert released.changes["released"]["job"] == "llama"
    kept = "kept: it was cordoned before the quarantine"
    assert released.changes["cordon"] == (kept if admin_first else "uncordoned")
    assert held(operator, bad) == after_release
    assert manage_eks_cluster(action="release_node").changes["quarantined"] == []
