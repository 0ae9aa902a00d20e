"""Issue 48 item 3: the trackers' credentials from the user's environment (MLflow's token,
user and password; the W&B key) reach a Kubernetes job's pods as references to the
suite's Secret, the same way HF_TOKEN does, never as values: not in the plan, the
manifest, the result or the text; the plain settings (the server, the W&B project) are
copied as values. Both engines."""

from __future__ import annotations

import base64
import json

import pytest

from commands.deploy_training_job import deploy_training_job
from skills.training_job_deployer.tracking_env import TRACKING_SECRET
from tests.services.kube import PYTORCHJOB
from tests.services.training_operator import TrainingOperator

pytestmark = pytest.mark.integration

CANARIES = {
    "MLFLOW_TRACKING_TOKEN": "mlflow-token-" + "Canary7" * 3,
    "MLFLOW_TRACKING_USERNAME": "canary-user-4711",
    "MLFLOW_TRACKING_PASSWORD": "canary-password-" + "Zq9" * 4,
    "WANDB_API_KEY": "wandb_v1_" + "c0ffee" * 7,
}
PLAIN = {"MLFLOW_TRACKING_URI": "https://mlflow.example.invalid",
         "WANDB_PROJECT": "llama-runs", "WANDB_ENTITY": "ml-team",
         "WANDB_BASE_URL": "https://wandb.example.invalid"}  # fmt: skip


def deploy(**kwargs):
    args = {"job_name": "llama", "num_nodes": 2, "gpu_per_node": 8,
            "image_uri": "localhost:9/fsdp:v1", "max_steps": 6, "wait_seconds": 0,
            "monitor": False, "skip_gate": True, "target": "kubernetes"}  # fmt: skip
    return deploy_training_job(**{**args, **kwargs})


def trainer_env(manifest: dict) -> list[dict]:
    if manifest["kind"] == "TrainJob":
        return manifest["spec"]["trainer"]["env"]
    master = manifest["spec"]["pytorchReplicaSpecs"]["Master"]
    return master["template"]["spec"]["containers"][0]["env"]


def shown(result) -> str:
    return result.model_dump_json() + json.dumps(result.cli_rows(), default=str)


@pytest.mark.parametrize("engine", ["pytorchjob", "trainjob"])
def test_tracking_credentials_are_secret_references_and_their_values_appear_nowhere(
    engine, monkeypatch
):
    for name, value in {**CANARIES, **PLAIN}.items():
        monkeypatch.setenv(name, value)
    planned = deploy(dry_run=True, engine=engine)
    env = {e["name"]: e for e in trainer_env(planned.plan.manifest)}
    for name in CANARIES:
        assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {
            "name": TRACKING_SECRET, "key": name, "optional": True}}}, env[name]  # fmt: skip
    for name, value in PLAIN.items():
        assert env[name]["value"] == value
    assert planned.plan.tracking_secrets == list(CANARIES)
    text = shown(planned)
    assert f"{TRACKING_SECRET} <- MLFLOW_TRACKING_TOKEN" in text
    for value in CANARIES.values():
        assert value not in text


def test_mlflow_credentials_without_a_server_go_nowhere_and_no_key_no_wandb(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", CANARIES["MLFLOW_TRACKING_TOKEN"])
    monkeypatch.setenv("WANDB_PROJECT", "llama-runs")
    planned = deploy(dry_run=True, engine="pytorchjob")
    names = {e["name"] for e in trainer_env(planned.plan.manifest)}
    assert not names & {*CANARIES, *PLAIN}, names
    assert planned.plan.tracking_secrets == []


def test_submit_fills_the_suites_secret_and_creates_a_job_that_only_references_it(
    kube_api, monkeypatch
):
    kube_api.reset()
    TrainingOperator(kube_api)
    for name, value in {**CANARIES, **PLAIN}.items():
        monkeypatch.setenv(name, value)
    started = deploy(engine="pytorchjob")
    assert started.status == "running"
    secret = kube_api.emulator.objects["v1/secrets", "default", TRACKING_SECRET].raw
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == CANARIES
    assert secret["metadata"]["labels"]  # the suite's: another user's is refused
    created = json.dumps(kube_api.emulator.objects[PYTORCHJOB, "default", "llama"].raw)
    assert TRACKING_SECRET in created and not [v for v in CANARIES.values() if v in created]
    assert not [v for v in CANARIES.values() if v in shown(started)]
