"""A dry run with hub ids on each target says where the model is fetched to and where
HF_TOKEN comes from, and never shows the token: Kubernetes against kmock (the manifest
references the job's Secret), local and Slurm from the submitting environment."""

from __future__ import annotations

import contextlib
import io

import pytest

from commands._cli import run_cli
from commands.deploy_training_job import deploy_training_job

pytestmark = pytest.mark.integration

CANARY = "hf_" + "HubDryRun" * 4
HUB = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "dataset": "allenai/c4",
       "dataset_config_name": "en"}  # fmt: skip


def test_kubernetes_dry_run_names_the_volume_and_the_secret(kube_api, monkeypatch):
    kube_api.reset()
    monkeypatch.setenv("HF_TOKEN", CANARY)
    planned = deploy_training_job(job_name="hub", target="kubernetes", image_uri="r.invalid/t:1",
                                  dry_run=True, **HUB)  # fmt: skip
    text = planned.model_dump_json()
    assert CANARY not in text
    plan = planned.plan
    assert plan.hub == [
        "model_name_or_path meta-llama/Llama-3.1-8B: fetched once per node at job start into "
        "/checkpoints/hf-home (HF_HOME, on the checkpoint volume); HF_TOKEN from Secret "
        "fsdp-eks-hf-token",
        "dataset allenai/c4: streamed in the job, never downloaded whole; HF_TOKEN from "
        "Secret fsdp-eks-hf-token",
    ]
    (replica,) = plan.manifest["spec"]["pytorchReplicaSpecs"].values()
    (container,) = replica["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "fsdp-eks-hf-token"
    assert env["HF_HOME"]["value"] == "/checkpoints/hf-home"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        run_cli(deploy_training_job, ["--job_name", "hub", "--target", "kubernetes",
                                      "--image_uri", "r.invalid/t:1", "--model_name_or_path",
                                      HUB["model_name_or_path"], "--dry_run"])  # fmt: skip
    assert "/checkpoints/hf-home" in out.getvalue() and CANARY not in out.getvalue()


def test_kubernetes_dry_run_without_a_token_warns(kube_api, monkeypatch):
    kube_api.reset()
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    planned = deploy_training_job(job_name="hub", target="kubernetes", image_uri="r.invalid/t:1",
                                  dry_run=True, **HUB)  # fmt: skip
    assert any("no HF_TOKEN" in w for w in planned.plan.warnings)


def test_local_dry_run_names_hf_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", CANARY)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    planned = deploy_training_job(job_name="hub", target="local", runs_dir=str(tmp_path / "runs"),
                                  gpu_per_node=1, dry_run=True, **HUB)  # fmt: skip
    assert CANARY not in planned.model_dump_json()
    assert planned.plan.hub[0] == (
        f"model_name_or_path meta-llama/Llama-3.1-8B: fetched once per node at job start into "
        f"{tmp_path / 'hf'} (HF_HOME); HF_TOKEN from the submitting environment"
    )
