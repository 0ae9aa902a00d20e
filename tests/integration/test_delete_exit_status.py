"""delete_training_job --confirm exits 0 once the job is deleted, whatever the job's own
last status (a failed or cancelled job is deleted just the same); refused, it exits 2."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from commands._cli import run_cli
from commands.delete_training_job import delete_training_job
from commands.deploy_training_job import deploy_training_job
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
from tests.services.kube import PYTORCHJOB
from tests.services.training_operator import TrainingOperator

pytestmark = pytest.mark.integration


def _cli(*argv: str) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = run_cli(delete_training_job, list(argv))
    return status, json.loads(out.getvalue())


def _exists(name: str) -> bool:
    return KubernetesTarget(KubernetesSettings()).client.job(name) is not None


@pytest.mark.parametrize("condition", ["Failed", "Succeeded", None])
def test_deleting_a_job_exits_0_whatever_its_last_status(kube_api, condition):
    kube_api.reset()
    TrainingOperator(kube_api).add_nodes("p5.48xlarge", 1)
    deploy_training_job(job_name="gone", num_nodes=1, gpu_per_node=8, image_uri="localhost:9/t:1",
                        instance_type="p5.48xlarge", wait_seconds=0, skip_gate=True)  # fmt: skip
    if condition:
        job = kube_api.emulator.objects[PYTORCHJOB, "default", "gone"].raw
        job["status"] = {"conditions": [{"type": condition, "status": "True"}]}
        kube_api.emulator.objects[PYTORCHJOB, "default", "gone"] = job

    refused, error = _cli("--job_name", "gone", "--target", "kubernetes", "--json")
    assert refused == 2 and error["error"]["code"] == "confirmation_required"
    assert _exists("gone")

    status, last = _cli("--job_name", "gone", "--target", "kubernetes", "--confirm", "--json")
    assert status == 0, last
    assert not _exists("gone")
    expected = {"Failed": "failed", "Succeeded": "succeeded", None: "running"}[condition]
    assert last["status"] == expected and last["message"] == f"deleted (was {expected})"
