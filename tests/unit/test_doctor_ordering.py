"""Which finding the pod doctor names as root, decision by decision: a pod's failure time is
its earliest one (a pod that failed first and kept failing stays first), time before node
rank, node rank (not the pod's name) on a tie, a cause before a symptom, and a generic
Python error only where nothing more specific was seen on that pod."""

from __future__ import annotations

from skills.job_doctor.diagnose import diagnose
from tests.fixtures.pod_doctor import snapshots as builder

JOB = "crash"


def oom_pod(index: int, *times: str) -> dict:
    """A worker OOM-killed at each of `times` (oldest first): the last is its state now,
    the one before it its lastState."""
    last = builder.terminated(137, "OOMKilled", times[-2]) if len(times) > 1 else None
    return builder.pod(
        JOB, "worker", index, phase="Failed", state=builder.terminated(137, "OOMKilled", times[-1]),
        last_state=last, restarts=len(times) - 1,
    )  # fmt: skip


def roots(pods: list[dict], logs: dict[str, str] | None = None) -> list[tuple[str, str | None]]:
    snapshot = builder.snapshot(builder.job(JOB, len(pods)), pods, [], logs or {})
    return [(f.code, f.pod) for f in diagnose(snapshot, per_pod=True).findings]


def test_the_pod_that_failed_first_and_kept_failing_is_root_not_one_that_failed_once_later():
    # worker-1 (node rank 2) was OOM-killed at 12:02 and again at 12:09; worker-0 (rank 1)
    # once, at 12:05. The earliest failure is worker-1's, whatever its later ones.
    found = roots([oom_pod(0, "2026-11-20T12:05:00Z"),
                   oom_pod(1, "2026-11-20T12:02:00Z", "2026-11-20T12:09:00Z")])  # fmt: skip
    assert found == [("host_oom", f"{JOB}-worker-1"), ("host_oom", f"{JOB}-worker-0")]


def test_on_equal_times_the_lower_node_rank_comes_first_not_the_name():
    # worker-9 is node rank 10, worker-10 is 11; "worker-10" sorts first as a string.
    at = "2026-11-20T12:05:00Z"
    found = roots([oom_pod(9, at), oom_pod(10, at)])
    assert [pod for _, pod in found] == [f"{JOB}-worker-9", f"{JOB}-worker-10"]


def test_a_cause_comes_before_an_earlier_symptom():
    # worker-0 timed out (a symptom) at 12:01, seven minutes before worker-1's OOM kill.
    pods = [builder.pod(JOB, "worker", 0, phase="Failed",
                        state=builder.terminated(1, "Error", "2026-11-20T12:01:00Z")),
            oom_pod(1, "2026-11-20T12:08:00Z")]  # fmt: skip
    found = roots(pods, {f"{JOB}-worker-0": builder.watchdog(1)})
    assert found[0] == ("host_oom", f"{JOB}-worker-1")
    assert ("collective_timeout", f"{JOB}-worker-0") in found


def test_a_generic_python_error_is_root_only_on_a_pod_with_nothing_more_specific():
    traceback = builder.child_failed(3, 0, "ip-10-0-1-11", 1, "ValueError: bad shape")
    pods = [builder.pod(JOB, "worker", 0, phase="Failed",
                        state=builder.terminated(1, "Error", "2026-11-20T12:01:00Z")),
            oom_pod(1, "2026-11-20T12:08:00Z")]  # fmt: skip
    found = roots(pods, {f"{JOB}-worker-0": traceback, f"{JOB}-worker-1": traceback})
    # worker-1's own Python error adds nothing to its OOM kill; worker-0's is all it has.
    assert ("python_error", f"{JOB}-worker-1") not in found
    assert ("python_error", f"{JOB}-worker-0") in found
    assert found[0] == ("host_oom", f"{JOB}-worker-1")  # a cause before a generic error
