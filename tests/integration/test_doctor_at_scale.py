"""The doctor at fleet size (issue 35 item 1): 1,024 pods where one OOM on worker-41
brings every other rank down in a collective timeout. The answer stays under the 40 KB
an agent can hold, names the root cause first and counts the rest; per_pod lists
each pod's finding, bounded and counted."""

from __future__ import annotations

import json

import pytest

from commands.diagnose_training_job import diagnose_training_job
from skills.job_doctor.diagnose import MAX_PER_POD_FINDINGS
from tests.fixtures.pod_doctor import snapshots as fx

PODS = 1024
OOM = 41


def _snapshot() -> dict:
    name = "big"
    pods = [fx.pod(name, "master", 0, phase="Failed",
                   state=fx.terminated(1, "Error", "2026-11-20T12:15:07Z"))]  # fmt: skip
    logs = {f"{name}-master-0": fx.watchdog(0)}
    for i in range(PODS - 1):
        oom = i == OOM
        finished = "2026-11-20T12:05:01Z" if oom else "2026-11-20T12:15:08Z"
        pods.append(fx.pod(name, "worker", i, phase="Failed",
                           state=fx.terminated(1, "Error", finished)))  # fmt: skip
        logs[f"{name}-worker-{i}"] = fx.oom_log(8 * (i + 1)) if oom else fx.watchdog(8 * (i + 1))
    events = [fx.event(f"{name}-worker-{i}", "BackOff", "Back-off restarting failed container")
              for i in range(PODS - 1)]  # fmt: skip
    return fx.snapshot(fx.job(name, PODS - 1), pods, events, logs)


@pytest.fixture(scope="module")
def snapshot_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("doctor") / "big.json"
    path.write_text(json.dumps(_snapshot()))
    return path


def test_a_thousand_pods_give_one_root_and_counted_symptoms_under_40_kb(snapshot_file):
    result = diagnose_training_job(snapshot=str(snapshot_file))
    size = len(result.model_dump_json())
    assert size < 40_000, size
    assert result.root.code == "cuda_oom" and result.root.pod == f"big-worker-{OOM}"
    timeouts = [f for f in result.findings if f.code == "collective_timeout"]
    assert len(timeouts) == 1 and timeouts[0].alike == PODS - 2
    assert f"then collective_timeout on {PODS - 1} pods after the cuda_oom on big-worker-{OOM}" \
        in result.summary  # fmt: skip


def test_per_pod_detail_is_bounded_and_says_what_it_left_out(snapshot_file):
    result = diagnose_training_job(snapshot=str(snapshot_file), per_pod=True)
    assert len(result.findings) == MAX_PER_POD_FINDINGS
    assert result.findings_cut >= PODS - MAX_PER_POD_FINDINGS  # a timeout on every other pod
    assert result.root.pod == f"big-worker-{OOM}"
    assert all(f.alike == 0 for f in result.findings)
