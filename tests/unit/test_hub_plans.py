"""Hub ids in the tools: which JobSpec values name hub repos (one row each), where a
Kubernetes job puts their download (HF_HOME on the checkpoint volume), and what each
target's plan says of them, the token only ever a Secret reference or its source."""

from __future__ import annotations

import pytest
import yaml

from skills.shared.errors import ToolFailure
from skills.training_job_deployer.job_spec import JobSpec, hub_cache, hub_ids, token_source
from skills.training_job_deployer.targets.kubernetes import manifest as pm
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp:v1"
CANARY = "hf_" + "HubCanary" * 4


@pytest.mark.parametrize(
    ("value", "is_hub"),
    [("meta-llama/Llama-3.1-8B", True), ("allenai/c4", True), ("Qwen/Qwen2.5-0.5B", True),
     ("s3://bucket/models/llama", False), ("/data/llama", False), ("./org/name", False),
     ("~/org/name", False), ("llama", False), ("org/name/sub", False),
     ("data/train.jsonl", False), ("data/corpus.txt", False)],
)  # fmt: skip
def test_which_values_are_hub_ids(value, is_hub):
    spec = JobSpec(job_name="j", model_name_or_path=value, dataset=value, tokenizer=value)
    expected = dict.fromkeys(("model_name_or_path", "tokenizer", "dataset"), value)
    assert hub_ids(spec) == (expected if is_hub else {})


def test_an_existing_relative_dir_is_a_path_not_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert hub_ids(JobSpec(job_name="j", model_name_or_path="org/name")) == {}


def render(settings: dict | None = None, **job) -> dict:
    spec = JobSpec(**{"job_name": "llama", **job})
    settings_ = KubernetesDeploySettings(**(settings or {}))
    return pm.render(RenderInputs(spec, settings_, IMAGE, pm.HF_SECRET))


def env_of(manifest: dict) -> dict:
    (replica,) = manifest["spec"]["pytorchReplicaSpecs"].values()
    (container,) = replica["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


def test_a_hub_model_downloads_onto_the_checkpoint_volume_with_the_token_by_reference(
    monkeypatch,
):
    monkeypatch.setenv("HF_TOKEN", CANARY)
    manifest = render(model_name_or_path="meta-llama/Llama-3.1-8B", dataset="allenai/c4")
    env = env_of(manifest)
    assert env["HF_HOME"]["value"] == pm.HUB_CACHE == "/checkpoints/hf-home"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == pm.HF_SECRET
    assert CANARY not in yaml.safe_dump(manifest)
    # A PVC (FSx) is the same mount: the download is shared by every node there.
    on_fsx = render({"checkpoint_volume": "pvc:fsx-claim"}, model_name_or_path="org/model")
    assert env_of(on_fsx)["HF_HOME"]["value"] == "/checkpoints/hf-home"


@pytest.mark.parametrize(
    "job",
    [{"model_name_or_path": "org/model", "checkpoint_dir": "s3://bucket/ckpt"},  # no volume
     {"model_name_or_path": "s3://bucket/model"}, {}],  # no hub id
)  # fmt: skip
def test_no_hub_home_without_a_volume_or_a_hub_id(job):
    assert "HF_HOME" not in env_of(render(**job))


def test_a_jobs_env_cannot_move_the_hub_cache():
    """Issue 45 item 10: HF_HOME is the target's (on the checkpoint volume), never a
    tool argument's; a local or Slurm job inherits the user's own."""
    with pytest.raises(ToolFailure) as caught:
        render(model_name_or_path="org/model", env={"HF_HOME": "/fsx/hf"})
    assert caught.value.code == "invalid_input" and "HF_HOME" in caught.value.message
    assert env_of(render(model_name_or_path="org/model"))["HF_HOME"]["value"] == pm.HUB_CACHE


def test_the_hub_endpoint_goes_in_only_for_a_job_that_names_a_hub_id():
    spec = JobSpec(job_name="llama", model_name_or_path="org/model")
    mirror = "https://mirror.example"
    on = pm.render(RenderInputs(spec, KubernetesDeploySettings(), IMAGE, pm.HF_SECRET, mirror))
    off = pm.render(
        RenderInputs(
            JobSpec(job_name="llama"), KubernetesDeploySettings(), IMAGE, pm.HF_SECRET, mirror
        )
    )
    assert env_of(on)["HF_ENDPOINT"]["value"] == mirror and "HF_ENDPOINT" not in env_of(off)


@pytest.mark.parametrize(
    ("environ", "where"),
    [({}, "~/.cache/huggingface"), ({"HF_HOME": "/fsx/hf"}, "/fsx/hf (HF_HOME)"),
     ({"HF_HOME": "/a", "HF_HUB_CACHE": "/b"}, "/b (HF_HUB_CACHE)")],
)  # fmt: skip
def test_where_a_job_on_this_environment_caches(environ, where):
    assert hub_cache(environ).startswith(where)


def test_token_source_never_holds_the_value():
    assert CANARY not in token_source({"HF_TOKEN": CANARY})
    assert token_source({"HF_TOKEN": CANARY}) == "HF_TOKEN from the submitting environment"
    assert token_source({}) == "no HF_TOKEN set"


def test_a_slurm_plan_says_where_and_never_holds_the_token(tmp_path, monkeypatch):
    from skills.training_job_deployer.targets.slurm.script import PartitionInfo
    from skills.training_job_deployer.targets.slurm.target import (
        SlurmDeploySettings,
        SlurmTarget,
    )

    monkeypatch.setenv("HF_TOKEN", CANARY)
    monkeypatch.setenv("HF_HOME", "/fsx/hf")
    spec = JobSpec(job_name="hub", gpu_per_node=2, model_name_or_path="org/model")
    target = SlurmTarget(SlurmDeploySettings(target="slurm", runs_dir=str(tmp_path / "runs")))
    plan = target.plan_for(spec, PartitionInfo(name="debug", nodes=1, cpus_per_node=2))
    assert plan.hub == [
        "model_name_or_path org/model: fetched once per node at job start into /fsx/hf "
        "(HF_HOME); HF_TOKEN from the submitting environment"
    ]
    assert ("hub", plan.hub[0]) in plan.to_display()
    assert CANARY not in plan.model_dump_json() and CANARY not in plan.script
