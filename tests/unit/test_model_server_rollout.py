"""How the Kubernetes model-server target reads a Deployment's rollout: ready counts only
once the controller has seen the current spec, and a passed progress deadline fails."""

from __future__ import annotations

from skills.model_server.kubernetes.target import rollout, waiting_reason
from skills.shared.ownership import MODEL_SERVER_LABEL


def deployment(replicas: int, generation: int, **status) -> dict:
    return {"metadata": {"generation": generation}, "spec": {"replicas": replicas},
            "status": status}  # fmt: skip


def test_ready_replicas_of_the_current_generation_count():
    ready = deployment(2, 3, observedGeneration=3, readyReplicas=2, updatedReplicas=2)
    assert rollout(ready) == (2, 2, None)


def test_an_unobserved_spec_counts_no_replica_ready():
    # Scaled from 2 to 3 (generation 4): the old pods' readiness says nothing yet.
    stale = deployment(3, 4, observedGeneration=3, readyReplicas=2, updatedReplicas=2)
    assert rollout(stale) == (3, 0, None)
    assert rollout(deployment(1, 1)) == (1, 0, None)  # no status at all


def test_old_ready_pods_do_not_count_as_updated():
    mixed = deployment(2, 2, observedGeneration=2, readyReplicas=2, updatedReplicas=1)
    assert rollout(mixed) == (2, 1, None)


def test_a_passed_progress_deadline_is_a_failure():
    condition = {
        "type": "Progressing",
        "status": "False",
        "reason": "ProgressDeadlineExceeded",
        "message": "ReplicaSet timed out",
    }
    stuck = deployment(1, 1, observedGeneration=1, conditions=[condition])
    assert rollout(stuck) == (1, 0, "ReplicaSet timed out")


def pod(name: str, server: str, **status) -> dict:
    return {"metadata": {"name": name, "labels": {MODEL_SERVER_LABEL: server}}, "status": status}


def test_a_waiting_reason_names_the_pod_and_what_it_waits_for():
    full = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    unscheduled = {"type": "PodScheduled", "status": "False", "message": full}
    pulling = {"name": "vllm", "state": {"waiting": {"reason": "ContainerCreating"}}}
    assert waiting_reason([pod("a-1", "a", containerStatuses=[pulling])], "a") is None
    assert waiting_reason([pod("b-1", "b", conditions=[unscheduled])], "a") is None  # not a's
    assert waiting_reason([pod("a-1", "a", conditions=[unscheduled])], "a") == (
        "Pod a-1 is not scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )
    backoff = {"name": "fetch-model", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
    assert waiting_reason([pod("a-1", "a", initContainerStatuses=[backoff])], "a") == (
        "Pod a-1 container fetch-model: ImagePullBackOff"
    )
