"""A TrainJob's pods are its JobSet's: their node rank is the pod's completion index (the
annotation the Job controller sets, which PET_NODE_RANK reads), never their generated
name, and the pod doctor and the job tools order and name them by it."""

from __future__ import annotations

import pytest

from skills.kube.pods import exit_code, job_status, pod_info, pod_order

JOB = "llama"


def jobset_pod(name: str, index: int | None, where: str = "annotations") -> dict:
    meta: dict = {
        "name": name,
        "labels": {
            "jobset.sigs.k8s.io/jobset-name": JOB,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
        },
    }
    if index is not None:
        meta.setdefault(where, {})["batch.kubernetes.io/job-completion-index"] = str(index)
    return {"metadata": meta, "spec": {"nodeName": f"ip-{index}"},
            "status": {"containerStatuses": [
                {"name": "node", "state": {"terminated": {"exitCode": 137}}}]}}  # fmt: skip


def test_rank_is_the_completion_index_whatever_the_generated_name_says():
    # Names that sort against their ranks: the random suffix decides nothing.
    pods = [jobset_pod(f"{JOB}-node-0-0-zzzzz", 1), jobset_pod(f"{JOB}-node-0-1-aaaaa", 0)]
    ordered = sorted(pods, key=pod_order)
    assert [pod_info(p, False).rank for p in ordered] == [0, 1]
    assert [pod_info(p, False).replica for p in ordered] == ["node-0", "node-1"]
    assert pod_info(ordered[0], False).node == "ip-0"


@pytest.mark.parametrize("where", ["annotations", "labels"])
def test_the_index_is_read_from_the_annotation_or_the_label(where):
    assert pod_info(jobset_pod("p", 3, where), False).rank == 3


def test_the_trainer_containers_exit_code_is_node_s():
    assert exit_code(jobset_pod("p", 0)) == 137


CONDITIONS = {
    "complete is succeeded": ({"type": "Complete", "status": "True"}, {}, "succeeded"),
    "failed is failed": ({"type": "Failed", "status": "True"}, {}, "failed"),
    "suspended spec is cancelled": ({"type": "Created", "status": "True"}, {"suspend": True},
                                    "cancelled"),
    "created is running": ({"type": "Created", "status": "True"}, {}, "running"),
}  # fmt: skip


@pytest.mark.parametrize(("condition", "spec", "status"), CONDITIONS.values(), ids=CONDITIONS)
def test_a_trainjobs_conditions_read_as_the_tools_statuses(condition, spec, status):
    assert job_status({"spec": spec, "status": {"conditions": [condition]}}) == status
