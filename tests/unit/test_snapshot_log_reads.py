"""Which logs the doctor's live snapshot reads (issue 49 item 3): rank 0's, and those of
pods that failed, restarted or are not ready; a healthy rank's log says what rank 0's
says, and a container that never started has none. Each read's share of the snapshot's
byte budget keeps a 4,096-pod snapshot bounded."""

from __future__ import annotations

import pytest

from skills.training_job_deployer.targets.kubernetes.kube_monitor import (
    SNAPSHOT_LOG_BUDGET,
    SNAPSHOT_LOG_BYTES,
    log_reads,
    log_share,
)
from tests.fixtures.pod_doctor import snapshots as fx


def _not_ready() -> dict:
    pod = fx.pod("j", "worker", 3, state=fx.running())
    pod["status"]["containerStatuses"][0]["ready"] = False
    return pod


CASES = {
    "rank 0 running and ready: its log (steps, the driver's view)": (
        fx.pod("j", "master", 0, state=fx.running()), True, [(None, False)]),
    "a worker running and ready: none": (fx.pod("j", "worker", 1, state=fx.running()), False, []),
    "a worker that failed: its log": (
        fx.pod("j", "worker", 2, phase="Failed", state=fx.terminated(1)), False, [(None, False)]),
    "a worker that exited 1 in a running pod: its log": (
        fx.pod("j", "worker", 2, state=fx.terminated(1)), False, [(None, False)]),
    "a worker that succeeded: none": (
        fx.pod("j", "worker", 2, phase="Succeeded", state=fx.terminated(0, "Completed")),
        False, []),
    "a worker running but not ready: its log": (_not_ready(), False, [(None, False)]),
    "a worker that restarted: its log and its previous container's": (
        fx.pod("j", "worker", 4, state=fx.running(), last_state=fx.terminated(137, "OOMKilled"),
               restarts=1), False, [(None, False), (None, True)]),
    "a worker in CrashLoopBackOff: both logs": (
        fx.pod("j", "worker", 4, state=fx.waiting("CrashLoopBackOff"),
               last_state=fx.terminated(1), restarts=3), False, [(None, False), (None, True)]),
    "a pending pod the kubelet has not reported: none, there is no log": (
        fx.pod("j", "worker", 5, phase="Pending"), False, []),
    "rank 0 still creating its container: none": (
        fx.pod("j", "master", 0, phase="Pending", state=fx.waiting("ContainerCreating")),
        True, []),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_which_logs_a_snapshot_reads(case):
    pod, rank0, reads = CASES[case]
    assert log_reads(pod, rank0) == reads


def test_a_pod_with_sidecars_names_the_trainer_container():
    pod = fx.pod("j", "worker", 1, phase="Failed", state=fx.terminated(1))
    pod["spec"]["containers"].insert(0, {"name": "sidecar", "image": "x"})
    assert log_reads(pod, False) == [("pytorch", False)]


@pytest.mark.parametrize(
    ("reads", "each"),
    [(1, SNAPSHOT_LOG_BYTES[1]), (64, SNAPSHOT_LOG_BYTES[1]),
     (1024, SNAPSHOT_LOG_BUDGET // 1024), (4096, SNAPSHOT_LOG_BYTES[0]),
     (100_000, SNAPSHOT_LOG_BYTES[0])],
)  # fmt: skip
def test_each_log_gets_its_share_of_the_budget_within_a_floor_and_a_ceiling(reads, each):
    assert log_share(reads) == each
