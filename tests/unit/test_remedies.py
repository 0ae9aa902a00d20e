"""Remedies: each ladder, the permanent codes, and the crash-loop breaker, as the
auto-retry loop will call them (decide per failed attempt, Attempt per submission)."""

from __future__ import annotations

import pytest

from skills.job_doctor.diagnose import Finding
from skills.job_doctor.failure_signatures import CODES
from skills.job_doctor.remedies import (
    NCCL_SOCKET_IFNAME,
    Attempt,
    Facts,
    breaker,
    decide,
    facts_from_snapshot,
    remedy,
)
from skills.training_job_deployer.job_spec import JobSpec


def finding(code: str, rank: int = 1) -> Finding:
    meaning = CODES[code]
    return Finding(
        code=code,
        pod=f"j-worker-{rank}",
        rank=rank,
        evidence=["log: ..."],
        root_cause=meaning.root_cause,
        remediation=meaning.remediation,
        retryable=meaning.retryable,
    )


def run_loop(code: str, spec: JobSpec, facts: Facts | None = None, attempts: int = 6):
    """The auto-retry loop's decisions when every attempt fails with `code`."""
    history: list[Attempt] = []
    for number in range(1, attempts + 1):
        decision = decide(finding(code), spec, history, facts)
        history.append(Attempt(number=number, finding=finding(code), remedy=decision.remedy))
        if decision.stop:
            return history, decision.stop
        spec = decision.remedy.spec
    return history, None


SPEC = JobSpec(job_name="j", num_nodes=4, gpu_per_node=8, train_batch_size=8, grad_accum_steps=2)


def test_cuda_oom_ladder_keeps_the_global_batch_then_checkpoints_then_offloads():
    history, stop = run_loop("cuda_oom", SPEC)
    steps = [a.remedy.step for a in history if a.remedy]
    assert steps == ["cuda_oom/halve_batch", "cuda_oom/activation_checkpointing",
                     "cuda_oom/cpu_offload"]  # fmt: skip
    first = history[0].remedy
    assert (first.spec.train_batch_size, first.spec.grad_accum_steps) == (4, 4)
    assert first.spec.train_batch_size * first.spec.grad_accum_steps == 8 * 2
    assert first.diff == ["train_batch_size: 8 -> 4", "grad_accum_steps: 2 -> 4"]
    assert history[1].remedy.diff == ["activation_checkpointing: (trainer default) -> full"]
    assert history[2].remedy.spec.cpu_offload is True
    assert history[2].remedy.spec.train_batch_size == 4  # rungs accumulate
    # The 4th attempt fails the same way after the last rung: the breaker stops it.
    assert len(history) == 4 and stop.startswith("crash loop: cuda_oom again")


def test_cuda_oom_with_the_trainers_default_batch_and_an_odd_batch():
    fix = remedy(finding("cuda_oom"), JobSpec(job_name="j"))
    assert (fix.spec.train_batch_size, fix.spec.grad_accum_steps) == (4, 2)
    assert fix.diff[0] == "train_batch_size: (trainer default) -> 4"
    odd = remedy(finding("cuda_oom"), JobSpec(job_name="j", train_batch_size=3))
    assert odd.step == "cuda_oom/activation_checkpointing"  # halving 3 would change the batch
    done = JobSpec(job_name="j", train_batch_size=1, activation_checkpointing="full",
                   cpu_offload=True)  # fmt: skip
    assert remedy(finding("cuda_oom"), done) is None


@pytest.mark.parametrize("code", [c for c, m in CODES.items() if not m.retryable])
def test_permanent_codes_never_get_a_remedy(code):
    assert remedy(finding(code), SPEC, [], Facts(instance_type="p5.48xlarge")) is None
    decision = decide(finding(code), SPEC)
    assert decision.remedy is None and decision.stop.startswith(f"{code} is permanent")


def test_shm_nccl_and_image_remedies_change_settings_once():
    shm = remedy(finding("shm_too_small"), SPEC, [], Facts(shm_size_gib=16))
    assert shm.settings == {"shm_size_gib": 32} and shm.spec == SPEC
    nccl = remedy(finding("nccl_connect"), SPEC)
    assert nccl.settings == {"env": {"NCCL_SOCKET_IFNAME": NCCL_SOCKET_IFNAME}}
    already = Facts(env={"NCCL_SOCKET_IFNAME": "^lo"})
    assert remedy(finding("nccl_connect"), SPEC, [], already) is None
    assert remedy(finding("image_not_found"), SPEC) is None  # the newest tag is not known
    image = remedy(finding("image_not_found"), SPEC, [], Facts(image="r:v2", newest_image="r:v1"))
    assert image.settings == {"image_uri": "r:v1"} and image.diff == ["image_uri: r:v2 -> r:v1"]
    history, stop = run_loop("nccl_connect", SPEC)
    assert len(history) == 2 and "crash loop" in stop


def test_insufficient_gpu_shrinks_only_an_elastic_job_within_what_is_free():
    assert remedy(finding("insufficient_gpu"), SPEC, [], Facts(free_gpus=(8, 8))) is None
    fewer_nodes = remedy(
        finding("insufficient_gpu"), SPEC, [], Facts(elastic=True, free_gpus=(8, 8, 4, 0))
    )
    assert (fewer_nodes.spec.num_nodes, fewer_nodes.spec.gpu_per_node) == (2, 8)
    fewer_gpus = remedy(
        finding("insufficient_gpu"), SPEC, [], Facts(elastic=True, free_gpus=(4, 4, 4, 4))
    )
    assert (fewer_gpus.spec.num_nodes, fewer_gpus.spec.gpu_per_node) == (4, 4)
    below_min = Facts(elastic=True, min_nodes=3, free_gpus=(8, 8, 0, 0))
    assert remedy(finding("insufficient_gpu"), SPEC, [], below_min) is None


def test_insufficient_efa_requests_the_instances_count():
    fix = remedy(finding("insufficient_efa"), SPEC, [], Facts(instance_type="ml.p4d.24xlarge"))
    assert fix.settings == {"efa_per_node": 4}
    assert remedy(finding("insufficient_efa"), SPEC, [], Facts(instance_type="x9.huge")) is None


def test_cuda_mismatch_gives_the_build_image_call():
    fix = remedy(
        finding("cuda_driver_too_old"),
        SPEC,
        [],
        Facts(instance_type="p5.48xlarge", driver_version="535.183.01"),
    )
    assert fix.action == "rebuild_image"
    assert fix.build_image == {
        "dockerfile": "Dockerfile",
        "instance_type": "p5.48xlarge",
        "driver_version": "535.183.01",
    }
    assert "build-image --dockerfile Dockerfile" in fix.description
    assert remedy(finding("cuda_arch_unsupported"), SPEC) is None  # nothing to build against


def test_preemption_is_resubmitted_again_and_again_a_timeout_once():
    history, stop = run_loop("preempted", SPEC, attempts=5)
    assert stop is None and all(a.remedy.action == "resubmit" for a in history)
    assert all(a.remedy.spec == SPEC and a.spec_diff == [] for a in history)
    history, stop = run_loop("collective_timeout", SPEC)
    assert len(history) == 2 and "crash loop" in stop


def test_breaker_counts_only_the_same_finding_after_its_remedy():
    oom = remedy(finding("cuda_oom"), SPEC)
    history = [Attempt(number=1, finding=finding("cuda_oom"), remedy=oom)]
    assert breaker(finding("preempted"), history) is None  # another failure: go on
    assert breaker(finding("cuda_oom"), history) is not None  # nothing new offered
    assert breaker(finding("cuda_oom"), history, oom) is not None  # the same remedy again
    next_rung = remedy(finding("cuda_oom"), SPEC, history)  # the ladder goes on: no loop
    assert breaker(finding("cuda_oom"), history, next_rung) is None
    assert breaker(finding("cuda_oom"), []) is None


def test_facts_from_a_snapshot():
    snapshot = {
        "job": {"spec": {"elasticPolicy": {"minReplicas": 2, "maxReplicas": 4}}},
        "pods": [{"spec": {
            "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}}],
            "containers": [{"image": "r/t:v1", "env": [
                {"name": "NCCL_DEBUG", "value": "INFO"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf"}}}]}],
        }}],
    }  # fmt: skip
    facts = facts_from_snapshot(snapshot, newest_image="r/t:v0")
    assert facts.elastic and facts.min_nodes == 2
    assert (facts.instance_type, facts.image, facts.newest_image) == ("p5.48xlarge", "r/t:v1",
                                                                      "r/t:v0")  # fmt: skip
    assert facts.shm_size_gib == 0.5 and facts.env == {"NCCL_DEBUG": "INFO"}
    assert remedy(finding("shm_too_small"), SPEC, [], facts).settings == {"shm_size_gib": 16}
