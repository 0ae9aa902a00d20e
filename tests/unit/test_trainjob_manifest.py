"""The TrainJob (Kubeflow Trainer v2.3.0) and the suite's ClusterTrainingRuntime: every
rendered variant is accepted by the vendored CRDs (schema and CEL rules) and places the
job as the PyTorchJob does (GPUs and EFA per node, /dev/shm, the checkpoint volume, the
S3 ServiceAccount, HF_TOKEN by reference), with what upstream refuses refused at plan
time in upstream's words; the engine reads progress from status.trainerStatus."""

from __future__ import annotations

import pytest

from skills.kube.crd_validation import crd_validator
from skills.kube.efa import GPU_TOLERATIONS
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.kubernetes.manifest import (
    HF_SECRET,
    QUEUE_LABEL,
    shm_gib,
    shm_size,
)
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings
from skills.training_job_deployer.targets.trainjob import manifest as tm
from skills.training_job_deployer.targets.trainjob.engine import TrainJobEngine

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp:v1"


def render(settings: dict | None = None, **job) -> dict:
    spec = JobSpec(job_name=job.pop("job_name", "llama"), **job)
    settings_ = KubernetesDeploySettings(**(settings or {}))
    return tm.render(RenderInputs(spec, settings_, IMAGE, HF_SECRET))


def patch_pod(job: dict) -> dict:
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == tm.PATCH_MANAGER
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    return node["template"]["spec"]["template"]["spec"]


VARIANTS = {
    "single-node": ({}, {"num_nodes": 1, "gpu_per_node": 1}),
    "p5 four nodes": ({"instance_type": "p5.48xlarge"}, {"num_nodes": 4, "gpu_per_node": 8}),
    "pvc": ({"checkpoint_volume": "pvc:fsx-claim"}, {"num_nodes": 2, "gpu_per_node": 8}),
    "s3": ({}, {"num_nodes": 2, "gpu_per_node": 8, "checkpoint_dir": "s3://bucket/ckpt"}),
    "queue": ({"queue": "team-a"}, {"num_nodes": 2, "gpu_per_node": 8}),
    "upstream runtime": ({"runtime": "torch-distributed"}, {"num_nodes": 2, "gpu_per_node": 8}),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_is_accepted_by_the_vendored_crd_and_its_cel_rules(variant):
    settings, job = VARIANTS[variant]
    rendered = render(settings, **job)
    assert crd_validator(tm.TRAINJOB_CRD).problems(rendered) == []
    assert (
        rendered["kind"] == "TrainJob"
        and rendered["spec"]["trainer"]["numNodes"] == (job["num_nodes"])
    )


def test_a_p5_job_asks_every_gpu_and_efa_interface_per_node_and_runs_torchrun_on_pet_env():
    job = render({"instance_type": "p5.48xlarge"}, num_nodes=2, gpu_per_node=8)
    trainer = job["spec"]["trainer"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"
    assert trainer["resourcesPerNode"]["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert trainer["numProcPerNode"] == 8 and trainer["image"] == IMAGE
    # torchrun reads PET_NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT: no rendezvous flags.
    command = trainer["command"]
    assert command[:2] == ["torchrun", "--max_restarts=0"] and command[2:4] == ["-m", "trainer"]
    assert not any(a.startswith(("--nnodes", "--rdzv", "--node_rank", "--master")) for a in command)
    env = {e["name"]: e for e in trainer["env"]}
    assert not any(name.startswith("PET_") for name in env)
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == HF_SECRET
    assert env["FI_PROVIDER"]["value"] == "efa"
    pod = patch_pod(job)
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The PyTorchJob's /dev/shm for the same job (8 GiB a process, and an async save's).
    spec = JobSpec(job_name="llama", num_nodes=2, gpu_per_node=8)
    assert volumes["shm"]["emptyDir"]["sizeLimit"] == shm_size(spec) == f"{shm_gib(spec)}Gi"
    assert shm_gib(spec) >= 64
    assert volumes["checkpoints"]["hostPath"]["path"] == "/mnt/k8s-disks/0/checkpoints"
    assert "tolerations" not in pod  # the suite's runtime has them
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
        "name": tm.RUNTIME,
    }  # fmt: skip


def test_a_queue_is_kueues_label_and_s3_paths_run_as_the_s3_service_account():
    job = render({"queue": "team-a"}, checkpoint_dir="s3://bucket/ckpt")
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert patch_pod(job)["serviceAccountName"] == "fsdp-eks-s3"
    assert "checkpoints" not in {v["name"] for v in patch_pod(job)["volumes"]}


def test_on_upstreams_torch_distributed_the_patch_brings_the_suites_pod_defaults():
    job = render({"runtime": "torch-distributed"})
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert patch_pod(job)["tolerations"] == list(GPU_TOLERATIONS)
    assert TrainJobEngine().companions(job) == []  # upstream's runtime is not ours to write
    assert TrainJobEngine().companions(render())[0]["metadata"]["name"] == tm.RUNTIME


def test_the_suites_runtime_is_accepted_by_its_crd_and_carries_the_pod_defaults():
    runtime = tm.cluster_runtime()
    assert crd_validator(tm.RUNTIME_CRD).problems(runtime) == []
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert node["template"]["metadata"]["labels"] == {tm.ANCESTOR_LABEL: "trainer"}
    pod = node["template"]["spec"]["template"]["spec"]
    assert pod["tolerations"] == list(GPU_TOLERATIONS) and pod["restartPolicy"] == "Never"
    assert runtime["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "fsdp-eks"


def test_a_64_character_name_is_refused_with_the_crds_own_rule_message():
    # JobSpec refuses it at the tool's edge already; the renderer refuses it as the API
    # server would, in the CEL rule's words.
    spec = JobSpec.model_construct(**{**JobSpec(job_name="x").model_dump(), "job_name": "a" * 64})
    with pytest.raises(ToolFailure) as caught:
        tm.render(RenderInputs(spec, KubernetesDeploySettings(), IMAGE, None))
    assert caught.value.code == "manifest_invalid"
    assert "metadata.name must be no more than 63 characters" in caught.value.message


def test_a_name_whose_jobset_pod_names_would_pass_63_characters_is_refused_in_jobsets_words():
    with pytest.raises(ToolFailure) as caught:
        render(job_name="a" * 50, num_nodes=2)
    assert "pod names generated for this JobSet will exceed 63 characters" in (caught.value.message)
    assert caught.value.details["max_length"] == 48
    render(job_name="a" * 48, num_nodes=2)  # the longest that fits


def test_a_reserved_pet_env_is_refused_as_trainers_webhook_words_it():
    job = render()
    job["spec"]["trainer"]["env"].append({"name": "PET_NODE_RANK", "value": "0"})
    with pytest.raises(ToolFailure) as caught:
        tm.validate(job)
    assert "must not have reserved envs" in caught.value.message and "PET_NODE_RANK" in (
        caught.value.message
    )


def test_an_elastic_job_is_refused_with_the_engine_that_runs_it():
    with pytest.raises(ToolFailure) as caught:
        render({"min_nodes": 2, "max_nodes": 4}, num_nodes=2)
    assert "engine=pytorchjob" in caught.value.hint


def test_avoiding_nodes_is_an_affinity_in_the_suites_runtime_patch():
    job = render()
    avoided = tm.avoiding(job, ("node-a", "node-b"))
    term = patch_pod(avoided)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]  # fmt: skip
    assert term["matchFields"][0]["values"] == ["node-a", "node-b"]
    assert "affinity" not in patch_pod(tm.avoiding(avoided, ()))
    assert "affinity" not in patch_pod(job)  # the plan's own manifest is left alone


STATUS = {
    "progressPercentage": 50,
    "estimatedRemainingSeconds": 42,
    "lastUpdatedTime": "2026-12-06T09:00:00Z",
    "metrics": [
        {"name": "step", "value": "3"},
        {"name": "loss", "value": "2.5"},
        {"name": "tokens_per_s", "value": "1234.5"},
        {"name": "mfu", "value": "0.41"},
    ],
}


def test_progress_is_read_from_trainer_status_and_absent_without_it():
    engine = TrainJobEngine()
    job = render(max_steps=6)
    assert engine.progress(job) is None and engine.eta_s(job) is None
    job["status"] = {"trainerStatus": STATUS}
    metrics = engine.progress(job)
    assert metrics is not None
    assert (metrics.steps, metrics.last_loss, metrics.tokens_per_s) == (3, 2.5, 1234.5)
    assert metrics.max_steps == 6 and engine.eta_s(job) == 42
    # Without --max_steps in the command: from the step and the percentage.
    job["spec"]["trainer"]["command"] = ["torchrun", "-m", "trainer"]
    derived = engine.progress(job)
    assert derived is not None and derived.max_steps == 6
    bad = {**STATUS, "metrics": [{"name": "loss", "value": "nan"}, {"name": "step", "value": "x"}]}
    job["status"] = {"trainerStatus": bad}
    unreadable = engine.progress(job)
    assert unreadable is not None and (unreadable.steps, unreadable.last_loss) == (0, None)
