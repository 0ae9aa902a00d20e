"""The pod doctor on realistic snapshots: one per finding code, and multi-rank ones where
the first failure hides among later symptoms. Each asserts the root finding's code, pod,
node rank and the remedy the auto-retry loop would apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skills.job_doctor.diagnose import diagnose, pod_info
from skills.job_doctor.failure_signatures import CODES, WATCHED
from skills.job_doctor.log_lines import MAX_SCAN
from skills.job_doctor.remedies import decide, facts_from_snapshot
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.job_spec import JobSpec
from tests.fixtures.pod_doctor import snapshots as builder

FIXTURES = Path(__file__).parents[1] / "fixtures" / "pod_doctor"


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


# fixture -> (root code, pod, node rank, remedy step or None, facts the loop would know)
EXPECTED: dict[str, tuple[str, str, int, str | None, dict]] = {
    "insufficient_gpu": ("insufficient_gpu", "gpu-short-master-0", 0, "insufficient_gpu/shrink",
                         {"elastic": True, "free_gpus": (8, 4)}),
    "insufficient_efa": ("insufficient_efa", "efa-short-master-0", 0,
                         "insufficient_efa/instance_count", {}),
    "image_not_found": ("image_not_found", "no-tag-master-0", 0, "image_not_found/newest_tag",
                        {"newest_image": f"{builder.REGISTRY}/fsdp-eks-trainer:v0.3.0"}),
    "image_platform_mismatch": ("image_platform_mismatch", "arm-node-master-0", 0, None, {}),
    "image_pull_auth": ("image_pull_auth", "no-pull-role-master-0", 0, None, {}),
    "node_disk_full": ("node_disk_full", "small-disk-master-0", 0, None, {}),
    "missing_secret": ("missing_secret", "no-secret-master-0", 0, None, {}),
    "command_not_found": ("command_not_found", "bad-cmd-master-0", 0, None, {}),
    "host_oom": ("host_oom", "host-oom-master-0", 0, None, {}),
    "preempted": ("preempted", "spot-master-0", 0, "preempted/resubmit", {}),
    "evicted_disk": ("evicted_disk", "disk-evict-worker-0", 1, None, {}),
    "segfault": ("segfault", "segv-worker-0", 1, None, {}),
    "shm_too_small": ("shm_too_small", "small-shm-master-0", 0, "shm_too_small/larger_shm", {}),
    "nccl_connect": ("nccl_connect", "nccl-sg-master-0", 0, "nccl_connect/socket_ifname", {}),
    "efa_not_used": ("efa_not_used", "no-efa-master-0", 0, None, {}),
    "collective_timeout": ("collective_timeout", "hang-master-0", 0,
                           "collective_timeout/resubmit", {}),
    "rendezvous_timeout": ("rendezvous_timeout", "rdzv-worker-0", 1,
                           "rendezvous_timeout/resubmit", {}),
    "rendezvous_closed": ("rendezvous_closed", "rdzv-closed-worker-0", 1,
                          "rendezvous_closed/resubmit", {}),
    "cuda_oom": ("cuda_oom", "oom-worker-0", 1, "cuda_oom/halve_batch", {}),
    "cuda_driver_too_old": ("cuda_driver_too_old", "old-driver-master-0", 0,
                            "cuda_driver_too_old/rebuild_image", {}),
    "cuda_arch_unsupported": ("cuda_arch_unsupported", "new-gpu-master-0", 0,
                              "cuda_arch_unsupported/rebuild_image", {}),
    "gated_model_auth": ("gated_model_auth", "gated-master-0", 0, None, {}),
    "nan_loss": ("nan_loss", "diverged-master-0", 0, None, {}),
    "python_error": ("python_error", "bug-master-0", 0, None, {}),
    # Several ranks: the first failure, not the symptoms of the others.
    "multi_oom_then_timeouts": ("cuda_oom", "oom-then-timeouts-worker-1", 2,
                                "cuda_oom/halve_batch", {}),
    "multi_pending_then_rendezvous": ("insufficient_gpu", "pending-then-rdzv-worker-2", 3, None,
                                      {}),
    "multi_preempted_then_nccl": ("preempted", "spot-then-nccl-worker-1", 2,
                                  "preempted/resubmit", {}),
    "gpu_hardware_fault": ("gpu_hardware_fault", "xid79-worker-1", 2,
                           "gpu_hardware_fault/resubmit", {}),
    "gpu_application_fault": ("gpu_application_fault", "xid13-master-0", 0, None, {}),
    "efa_error": ("efa_error", "efa-cq-master-0", 0, "efa_error/resubmit", {}),
}  # fmt: skip

SPEC = JobSpec(job_name="j", num_nodes=2, gpu_per_node=8, train_batch_size=8)


def test_a_fixture_per_code_and_the_fixtures_are_built_from_the_builder(tmp_path):
    assert set(CODES) - set(WATCHED) <= set(EXPECTED)  # the watchdog measures step lines
    builder.write(tmp_path)
    for path in sorted(tmp_path.glob("*.json")):
        assert (FIXTURES / path.name).read_text() == path.read_text(), f"rebuild {path.name}"
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_root_finding_code_rank_and_remedy(name):
    code, pod, rank, step, known = EXPECTED[name]
    snapshot = load(name)
    diagnosis = diagnose(snapshot)
    root = diagnosis.root
    assert root is not None, diagnosis
    assert (root.code, root.pod, root.rank) == (code, pod, rank), diagnosis.codes
    assert root.evidence and root.root_cause and root.remediation
    assert root.retryable == CODES[code].retryable
    assert diagnosis.summary.startswith(f"{code} on {pod}")
    decision = decide(root, SPEC, [], facts_from_snapshot(snapshot, **known))
    assert (decision.remedy.step if decision.remedy else None) == step, decision.stop
    assert (decision.stop is None) == (step is not None)


def test_symptoms_follow_the_cause_in_a_multi_rank_failure():
    diagnosis = diagnose(load("multi_oom_then_timeouts"), per_pod=True)
    assert diagnosis.codes == ["cuda_oom"] + ["collective_timeout"] * 3
    assert [f.rank for f in diagnosis.findings] == [2, 0, 1, 3]
    assert diagnosis.root.process_rank == 17  # the global rank torch's [rankN]: prefix names
    assert [f.role for f in diagnosis.findings] == ["cause"] + ["symptom"] * 3
    # The generic ChildFailedError / exit 1 of the same pods adds nothing.
    assert "python_error" not in diagnosis.codes
    # By default the three timeouts are one finding: the earliest pod's, counting the rest.
    grouped = diagnose(load("multi_oom_then_timeouts"))
    assert grouped.codes == ["cuda_oom", "collective_timeout"]
    symptom = grouped.findings[1]
    assert (symptom.rank, symptom.alike) == (0, 2)
    assert symptom.alike_pods == [diagnosis.findings[2].pod, diagnosis.findings[3].pod]
    assert "then collective_timeout on 3 pods after the cuda_oom on" in grouped.summary


def test_the_earliest_cause_wins_when_two_ranks_fail():
    snapshot = load("multi_oom_then_timeouts")
    # A later OOM on node rank 3 too: node rank 2's, ten minutes earlier, stays first.
    snapshot["logs"]["oom-then-timeouts-worker-2"] += builder.oom_log(25)
    codes = [(f.code, f.rank) for f in diagnose(snapshot).findings]
    assert codes[:2] == [("cuda_oom", 2), ("cuda_oom", 3)]


def stamped(at: str, text: str) -> str:
    return "".join(f"{at} {line}\n" for line in text.splitlines())


def test_log_timestamps_order_findings_when_containers_say_nothing():
    snapshot = load("multi_oom_then_timeouts")
    for pod in snapshot["pods"]:
        pod["status"].pop("containerStatuses")
    logs = snapshot["logs"]
    # As `kubectl logs --timestamps` (and the live snapshot) prefix every line.
    logs["oom-then-timeouts-worker-2"] = stamped("2026-11-20T12:01:00.5Z", builder.oom_log(25))
    logs["oom-then-timeouts-worker-1"] = stamped("2026-11-20T12:09:00Z", builder.oom_log(17))
    assert [(f.code, f.rank) for f in diagnose(snapshot).findings[:2]] == [
        ("cuda_oom", 3),
        ("cuda_oom", 2),
    ]


def test_node_ranks_from_labels_env_and_names():
    master = {"metadata": {"name": "j-master-0", "labels": {
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0"}}}  # fmt: skip
    worker = {"metadata": {"name": "j-worker-2", "labels": {
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "2"}}}  # fmt: skip
    assert pod_info(master, True).rank == 0
    assert pod_info(worker, True).rank == 3 and pod_info(worker, True).replica == "worker-2"
    assert pod_info(worker, False).rank == 2  # Worker-only jobs: worker-0 is node rank 0
    unlabeled = {"metadata": {"name": "j-worker-4"}}
    assert pod_info(unlabeled, True).rank == 5
    env = [{"name": "PET_NODE_RANK", "value": "6"}]
    by_env = {"metadata": {"name": "custom"}, "spec": {"containers": [{"env": env}]}}
    assert pod_info(by_env, True).rank == 6


def test_a_canary_token_in_a_failing_pod_log_never_appears(monkeypatch):
    # A token shaped like one (hf_...) and one that is only known from the environment.
    plain = "canary-env-secret-value-9f8e7d"
    monkeypatch.setenv("HF_TOKEN", plain)
    snapshot = load("gated_model_auth")
    snapshot["logs"]["gated-master-0"] += f"Access to model x is restricted (token {plain})\n"
    snapshot["logs"]["gated-master-0/previous"] = f"401 Client Error: huggingface.co {plain}\n"
    dumped = diagnose(snapshot).model_dump_json()
    assert builder.CANARY not in dumped and plain not in dumped
    assert "***" in dumped  # the lines were kept, the tokens masked
    for name in EXPECTED:
        assert builder.CANARY not in diagnose(load(name)).model_dump_json()


@pytest.mark.parametrize(
    "bad",
    [
        [],
        "text",
        {"pods": "not a list"},
        {"logs": {"p": 5}},
        {"pods": [], "extra_key": 1},
        {"events": [1, 2]},
    ],
)
def test_a_malformed_snapshot_is_a_typed_error(bad):
    with pytest.raises(ToolFailure) as info:
        diagnose(bad)
    assert info.value.code == "snapshot_invalid" and info.value.hint


def test_odd_objects_inside_a_snapshot_do_not_crash_it():
    odd = {
        "job": {"status": {"conditions": "x"}, "metadata": []},
        "pods": [{}, {"metadata": {"name": 5}}, {"metadata": {"name": "p"}, "status": {
            "containerStatuses": [{"state": {"terminated": {"exitCode": "x"}}}, 7],
            "conditions": [None, {"type": "PodScheduled", "status": "False"}]}}],
        "events": [{}, {"involvedObject": []}, {"involvedObject": {"kind": "Pod", "name": "p"},
                                                "reason": 5, "lastTimestamp": "yesterday"}],
        "logs": {"p": "\x00\n" * 10 + "Error " * 10_000, "ghost/previous": "KeyError: 'x'\n"},
    }  # fmt: skip
    diagnosis = diagnose(odd)
    assert diagnosis.pods == 1
    assert [f.pod for f in diagnosis.findings] == ["ghost"]  # a log of a pod no longer listed


def test_a_log_over_the_scan_bound_is_read_head_and_tail():
    snapshot = load("cuda_oom")
    steps = builder.trainer_steps(1, 200)
    noise = steps * (MAX_SCAN // len(steps) + 2)
    log = snapshot["logs"]["oom-worker-0"]
    snapshot["logs"]["oom-worker-0"] = noise + log
    diagnosis = diagnose(snapshot)
    assert diagnosis.root.code == "cuda_oom"
    assert diagnosis.logs_cut == ["oom-worker-0"]
    assert diagnosis.log_chars_scanned <= MAX_SCAN + len(snapshot["logs"]["oom-master-0"])


def test_no_failure_is_no_finding():
    snapshot = load("efa_not_used")
    snapshot["logs"] = {"no-efa-master-0": builder.trainer_steps(1, 30)}
    diagnosis = diagnose(snapshot)
    assert diagnosis.findings == [] and diagnosis.root is None
    assert diagnosis.summary == "no known failure signature in the snapshot"
