"""The PyTorchJob manifest: every rendered variant validates against the Training
Operator's CRD schema, and each placement decision (replicas, rendezvous, GPU and EFA
resources, /dev/shm, NCCL env, checkpoints) is what a GPU cluster needs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from skills.kube.efa import efa_devices
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.kubernetes import manifest as pm
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.targets.kubernetes.settings import (
    DEFAULT_HOST_PATH,
    KubernetesDeploySettings,
)

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp:v1"
CRD = "/work/shared/reference/kubeflow.org_pytorchjobs.v1.9.yaml"


def render(settings: dict | None = None, **job) -> dict:
    spec = JobSpec(job_name=job.pop("job_name", "llama"), **job)
    settings_ = KubernetesDeploySettings(**(settings or {}))
    return pm.render(RenderInputs(spec, settings_, IMAGE, pm.HF_SECRET))


def container(manifest: dict, kind: str | None = None) -> dict:
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    return replicas[kind or next(iter(replicas))]["template"]["spec"]["containers"][0]


def pod_spec(manifest: dict) -> dict:
    return next(iter(manifest["spec"]["pytorchReplicaSpecs"].values()))["template"]["spec"]


VARIANTS = {
    "single-node": ({}, {"num_nodes": 1, "gpu_per_node": 1}),
    "multi-node": ({"instance_type": "g5.12xlarge"}, {"num_nodes": 4, "gpu_per_node": 4}),
    "elastic": ({"min_nodes": 2, "max_nodes": 8}, {"num_nodes": 4, "gpu_per_node": 8}),
    "etcd": ({"etcd_endpoint": "etcd-client:2379"}, {"num_nodes": 2, "gpu_per_node": 8}),
    "pvc": ({"checkpoint_volume": "pvc:fsx-claim"}, {"num_nodes": 2, "gpu_per_node": 8}),
    "hostpath": ({"checkpoint_volume": "/mnt/nvme/ckpt"}, {"num_nodes": 1, "gpu_per_node": 8}),
    "s3": ({}, {"num_nodes": 2, "gpu_per_node": 8, "checkpoint_dir": "s3://bucket/ckpt"}),
    "p4d": ({"instance_type": "p4d.24xlarge"}, {"num_nodes": 2, "gpu_per_node": 8}),
    "p5": ({"instance_type": "p5.48xlarge"}, {"num_nodes": 4, "gpu_per_node": 8}),
    "hyperpod-ml": ({"instance_type": "ml.p5.48xlarge"}, {"num_nodes": 2, "gpu_per_node": 8}),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_validates_against_the_crd_schema(variant):
    settings, job = VARIANTS[variant]
    manifest = render(settings, **job)
    # Validated by render itself, and again here, independently, with jsonschema.
    jsonschema.validate(manifest, pm.crd_schema())
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "PyTorchJob"
    assert manifest["spec"]["nprocPerNode"] == str(job["gpu_per_node"])
    assert container(manifest)["name"] == "pytorch"  # the operator's required name
    # Each replica's pod template against the core schemas, strict (the CRD's embedded
    # pod schema is looser), for the oldest and newest Kubernetes versions checked.
    for k8s in ("1.30", "1.33"):
        for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
            template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}}
            kubernetes_validate.validate(
                {**template, "template": replica["template"]}, k8s, strict=True
            )
    # The v1.9 webhook: never both spec.nprocPerNode and elasticPolicy.nProcPerNode
    assert "nProcPerNode" not in manifest["spec"].get("elasticPolicy", {})


@pytest.mark.skipif(not Path(CRD).is_file(), reason="no reference CRD on this machine")
def test_the_package_ships_the_same_crd_schema():
    with open(CRD) as handle:
        crd = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (v1,) = (v for v in crd["spec"]["versions"] if v["name"] == "v1")
    assert pm.crd_schema() == v1["schema"]["openAPIV3Schema"]


def test_a_manifest_the_schema_rejects_is_a_typed_error():
    manifest = copy.deepcopy(render())
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    with pytest.raises(ToolFailure) as caught:
        pm.validate(manifest)
    assert caught.value.code == "manifest_invalid"
    assert caught.value.details["problems"][0]["path"].endswith("replicas")


def test_a_field_the_crd_does_not_declare_is_refused_not_silently_dropped():
    # The API server would prune it (or refuse it under kubectl's strict field validation):
    # a misspelt field the template writes must not vanish on the way to the cluster.
    manifest = copy.deepcopy(render())
    manifest["spec"]["runPolicy"]["backofLimit"] = 3
    with pytest.raises(ToolFailure) as caught:
        pm.validate(manifest)
    assert caught.value.details["problems"] == [
        {
            "path": "spec.runPolicy.backofLimit",
            "problem": 'unknown field "spec.runPolicy.backofLimit"',
        }
    ]


@pytest.mark.parametrize(
    ("nodes", "elastic", "layout"),
    [
        (1, False, {"Master": 1}),
        (4, False, {"Master": 1, "Worker": 3}),
        (4, True, {"Worker": 4}),
    ],
)
def test_replica_layout(nodes, elastic, layout):
    assert pm.replica_layout(nodes, elastic) == layout


@pytest.mark.parametrize(
    ("instance_type", "efa"),
    [
        ("p4d.24xlarge", 4),
        ("p5.48xlarge", 32),
        ("ml.p5.48xlarge", 32),
        ("p5en.48xlarge", 16),
        ("g5.48xlarge", 1),
        ("g5.xlarge", 0),
        ("p5.4xlarge", 1),  # the table only says it has EFA: one device
        ("p6-b200.48xlarge", 8),  # as AWS's EFA regression manifests request
        (None, 0),
    ],
)
def test_efa_devices_follow_the_instance_table(instance_type, efa):
    assert efa_devices(instance_type) == efa
    manifest = render({"instance_type": instance_type} if instance_type else {}, num_nodes=2)
    resources = container(manifest)["resources"]
    # EFA pods get FI_EFA_USE_HUGE_PAGE=0, so no huge pages and no memory request beside
    # them (tests/unit/test_kube_efa.py: the other way round when the job turns them on)
    assert resources["limits"] == resources["requests"]
    assert "hugepages-2Mi" not in resources["limits"] and "memory" not in resources["requests"]
    assert int(resources["limits"].get("vpc.amazonaws.com/efa", 0)) == efa
    env = {e["name"]: e.get("value") for e in container(manifest)["env"]}
    assert (env.get("FI_PROVIDER") == "efa") == bool(efa)
    assert (env.get("FI_EFA_USE_HUGE_PAGE") == "0") == bool(efa)


@pytest.mark.parametrize(
    ("instance_type", "rdma"),
    [("p4d.24xlarge", True), ("p5.48xlarge", True), ("p6-b200.48xlarge", True),
     ("g5.48xlarge", False), ("g6.48xlarge", True), ("g6e.48xlarge", True),
     ("p3dn.24xlarge", False)],
)  # fmt: skip
def test_device_rdma_only_where_the_catalogue_says_rdma_read(instance_type, rdma):
    # libfabric aborts when FI_EFA_USE_DEVICE_RDMA=1 meets an EFA device without RDMA read
    # (p3dn starts with "p" but has none: the old p-family rule set it there).
    env = {
        e["name"]: e.get("value")
        for e in container(render({"instance_type": instance_type}, num_nodes=2))["env"]
    }
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) is rdma


def test_gpu_resources_shm_and_scheduling():
    manifest = render({"instance_type": "p5.48xlarge"}, num_nodes=2, gpu_per_node=8)
    assert container(manifest)["resources"]["limits"]["nvidia.com/gpu"] == "8"
    spec = pod_spec(manifest)
    shm = next(v for v in spec["volumes"] if v["name"] == "shm")
    # 8 GiB a process, and 1 GiB (rounded up) for the toy model's async-save staging.
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "65Gi"}
    assert {"name": "shm", "mountPath": "/dev/shm"} in container(manifest)["volumeMounts"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert spec["tolerations"] == [  # EFA node groups carry the aws.amazon.com/efa taint
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
    ]
    env = {e["name"]: e.get("value") for e in container(manifest)["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"  # p-family: GPUDirect RDMA
    assert pm.shm_size(JobSpec(job_name="j", gpu_per_node=1, async_save=False)) == "8Gi"


@pytest.mark.parametrize(
    ("job", "shm"),
    [
        # HSDP (auto, 2 nodes): each node stages a whole copy of the parameters and Adam
        # moments, 12 B x 8.03B = 89.7 GiB, beside NCCL's 8 GiB a process.
        ({"num_nodes": 2}, "154Gi"),
        ({"num_nodes": 2, "sharding_strategy": "full"}, "109Gi"),  # half a copy a node
        ({"num_nodes": 2, "async_save": False}, "64Gi"),
        ({"num_nodes": 2, "shm_size_gib": 32}, "32Gi"),  # as asked (the trainer then pins)
    ],
)
def test_dev_shm_holds_an_async_saves_staged_copy(job, shm):
    gib = job.pop("shm_size_gib", None)
    manifest = render({"instance_type": "p5.48xlarge", "shm_size_gib": gib},
                      model_type="llama_v3_8b", gpu_per_node=8, **job)  # fmt: skip
    volume = next(v for v in pod_spec(manifest)["volumes"] if v["name"] == "shm")
    assert volume["emptyDir"]["sizeLimit"] == shm


def test_hyperpod_nodes_are_selected_by_their_ml_name():
    manifest = render({"instance_type": "ml.p5.48xlarge"}, num_nodes=2)
    assert pod_spec(manifest)["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "ml.p5.48xlarge"
    }


def test_unknown_instance_type_is_a_typed_error_with_a_hint():
    with pytest.raises(ToolFailure) as caught:
        render({"instance_type": "p9.mega"})
    assert caught.value.code == "invalid_input" and "p5.48xlarge" in caught.value.hint


def test_fixed_multi_node_uses_c10d_on_master():
    command = container(render(num_nodes=4, gpu_per_node=8, max_restarts=2))["command"]
    assert command[0] == "torchrun"
    assert "--nnodes=4" in command and "--rdzv_backend=c10d" in command
    assert "--rdzv_endpoint=llama-master-0:23456" in command
    assert "--nproc_per_node=8" in command and "--max_restarts=2" in command


def test_single_node_is_standalone():
    manifest = render(num_nodes=1)
    assert "--standalone" in container(manifest)["command"]
    assert "elasticPolicy" not in manifest["spec"]


def test_elastic_policy_and_workers_only():
    manifest = render({"min_nodes": 2, "max_nodes": 8}, num_nodes=4, max_restarts=3)
    policy = manifest["spec"]["elasticPolicy"]
    assert policy["minReplicas"] == 2 and policy["maxReplicas"] == 8
    assert policy["maxRestarts"] == 3 and policy["rdzvBackend"] == "c10d"
    assert list(manifest["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    # The v1.9 webhook forbids elasticPolicy.nProcPerNode next to spec.nprocPerNode
    # (pkg/webhooks/pytorch/pytorchjob_webhook.go, validateSpec): only the latter.
    assert "nProcPerNode" not in policy and manifest["spec"]["nprocPerNode"].isdigit()
    command = container(manifest)["command"]
    assert "--nnodes=2:8" in command and "--rdzv_endpoint=llama-worker-0:29400" in command


def test_etcd_rendezvous():
    manifest = render({"etcd_endpoint": "etcd-client:2379"}, num_nodes=2)
    policy = manifest["spec"]["elasticPolicy"]
    assert policy["rdzvBackend"] == "etcd-v2"
    assert "nProcPerNode" not in policy  # the webhook's rule, as for elastic
    assert (policy["rdzvHost"], policy["rdzvPort"]) == ("etcd-client", 2379)
    command = container(manifest)["command"]
    assert "--rdzv_backend=etcd-v2" in command
    assert "--rdzv_endpoint=etcd-client:2379" in command


def test_num_nodes_outside_the_elastic_range_is_refused():
    with pytest.raises(ToolFailure) as caught:
        render({"min_nodes": 2, "max_nodes": 3}, num_nodes=4)
    assert caught.value.code == "invalid_input"


@pytest.mark.parametrize(
    ("settings", "job", "volume", "checkpoint_dir"),
    [
        ({}, {}, {"hostPath": {"path": DEFAULT_HOST_PATH, "type": "DirectoryOrCreate"}},
         "/checkpoints/llama"),
        ({"checkpoint_volume": "pvc:fsx-claim"}, {},
         {"persistentVolumeClaim": {"claimName": "fsx-claim"}}, "/checkpoints/llama"),
        ({}, {"checkpoint_dir": "runs/a"}, None, "/checkpoints/runs/a"),
        ({}, {"checkpoint_dir": "s3://bucket/ckpt"}, None, "s3://bucket/ckpt"),
    ],
)  # fmt: skip
def test_checkpoint_placement(settings, job, volume, checkpoint_dir):
    manifest = render(settings, **job)
    command = container(manifest)["command"]
    assert command[command.index("--checkpoint_dir") + 1] == checkpoint_dir
    volumes = {v["name"]: v for v in pod_spec(manifest)["volumes"]}
    if checkpoint_dir.startswith("s3://"):
        assert "checkpoints" not in volumes
    elif volume is not None:
        assert {k: v for k, v in volumes["checkpoints"].items() if k != "name"} == volume
        assert {"name": "checkpoints", "mountPath": "/checkpoints"} in container(manifest)[
            "volumeMounts"
        ]


def test_trainer_flags_are_the_ones_every_target_passes():
    from skills.training_job_deployer.job_spec import trainer_argv

    spec = JobSpec(job_name="llama", max_steps=1000, learning_rate=3e-4, seq_len=2048)
    command = container(render(job_name="llama", max_steps=1000, learning_rate=3e-4,
                               seq_len=2048))["command"]  # fmt: skip
    tail = command[command.index("trainer") + 1 :]
    assert tail == trainer_argv(spec.model_copy(update={"checkpoint_dir": "/checkpoints/llama"}))


def test_the_hf_token_is_a_secret_reference_never_a_value(monkeypatch):
    canary = "hf_" + "Canary" * 6
    monkeypatch.setenv("HF_TOKEN", canary)
    manifest = render()
    assert canary not in yaml.safe_dump(manifest)
    env = {e["name"]: e for e in container(manifest)["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": pm.HF_SECRET,
        "key": "token",
        "optional": True,
    }


def test_values_cannot_change_the_document_structure():
    # A model_type or dataset with YAML syntax stays one string in the argv.
    manifest = render(dataset="x: {y: [z]} # - w", model_type="debug")
    command = container(manifest)["command"]
    assert command[command.index("--dataset") + 1] == "x: {y: [z]} # - w"


def test_characters_beyond_the_bmp_survive_the_template():
    manifest = render(model_name_or_path="org/𐀀-model")
    command = container(manifest)["command"]
    assert command[command.index("--model_name_or_path") + 1] == "org/𐀀-model"
    json.dumps(manifest).encode()  # no lone surrogates


def test_long_job_names_are_refused_before_the_cluster_does():
    with pytest.raises(ToolFailure) as caught:
        render(job_name="a" * 60)
    assert caught.value.code == "invalid_input"


def webhook_problems(job: dict) -> list[str]:
    """The Training Operator v1.9.2 admission webhook's rules (unchanged at v1.9.4), from
    pkg/webhooks/pytorch/pytorchjob_webhook.go (validatePyTorchJob, validateSpec,
    validatePyTorchReplicaSpecs): what a real cluster refuses though the CRD allows it."""
    import re

    problems = []
    if (
        not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", job["metadata"]["name"])
        or len(job["metadata"]["name"]) > 63
    ):
        problems.append("metadata.name: not a DNS-1035 label")
    spec, replicas = job["spec"], job["spec"].get("pytorchReplicaSpecs") or {}
    if "elasticPolicy" in spec:
        if "Worker" not in replicas:
            problems.append("Worker: must be configured if elastic policy is used")
        if "nProcPerNode" in spec["elasticPolicy"] and "nprocPerNode" in spec:
            problems.append("elasticPolicy.nProcPerNode: must not be used with nprocPerNode")
    for role, replica in replicas.items():
        containers = replica["template"]["spec"].get("containers") or []
        if role not in ("Master", "Worker"):
            problems.append(f"{role}: not a replica type")
        if not containers or any(not c.get("image") for c in containers):
            problems.append(f"{role}: containers and their images must be specified")
        if not any(c["name"] == "pytorch" for c in containers):
            problems.append(f"{role}: no container named pytorch")
        if role == "Master" and replica.get("replicas") != 1:
            problems.append("Master.replicas: must be 1")
        if role == "Worker" and replica.get("replicas", 1) < 1:
            problems.append("Worker.replicas: must be at least 1")
    return problems


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_passes_the_operators_admission_webhook(variant):
    settings, job = VARIANTS[variant]
    assert webhook_problems(render(settings, **job)) == []


def test_the_nccl_test_job_passes_the_operators_admission_webhook():
    from skills.eks_cluster_manager.nccl_job import manifests

    for nodes in (1, 4):
        (_, job) = manifests("nccl-test-abc123", "default", nodes, "p5.48xlarge", "img:1")
        assert webhook_problems(job) == []


def test_the_webhook_transcription_refuses_both_nproc_fields():
    # Today's old output (both fields on an elastic job) is what the webhook refused.
    manifest = render({"min_nodes": 1, "max_nodes": 2}, num_nodes=2)
    manifest["spec"]["elasticPolicy"]["nProcPerNode"] = 8
    assert webhook_problems(manifest) == [
        "elasticPolicy.nProcPerNode: must not be used with nprocPerNode"
    ]


@pytest.mark.parametrize(
    ("length", "refused"), [(50, False), (51, False), (52, True)], ids=["under", "at", "over"]
)
def test_the_job_name_limit_keeps_every_pod_name_a_dns_label(length, refused):
    """A pod is <job>-worker-<i>, a DNS label of at most 63 characters; with up to 1024
    workers (index 1023) the job name may have 63 - len("-worker-1023") = 51."""
    name = "j" * length
    if refused:
        with pytest.raises(ToolFailure) as caught:
            render(job_name=name, num_nodes=2)
        assert caught.value.code == "invalid_input" and "at most 51" in caught.value.message
        return
    render(job_name=name, num_nodes=2)
    assert len(f"{name}-worker-1023") <= 63
