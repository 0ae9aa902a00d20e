"""THE EFA/NCCL environment (skills.kube.efa): the PyTorchJob, the cluster's NCCL test
job and the Slurm batch script set the same libfabric variables, the same EFA devices,
huge pages and memory request, and the same tolerations, for every instance type of the
catalogue (issue 19: the NCCL check must test the setup of the job it vouches for)."""

from __future__ import annotations

import pytest

from skills.catalog.instances import INSTANCES
from skills.eks_cluster_manager.nccl_job import manifests as nccl_manifests
from skills.kube.efa import GPU_TOLERATIONS, efa_env_for, uses_huge_pages
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.kubernetes import manifest as pm
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesDeploySettings
from skills.training_job_deployer.targets.slurm.script import PartitionInfo, batch_env

EFA_VARS = ("FI_PROVIDER", "FI_EFA_USE_HUGE_PAGE", "FI_EFA_FORK_SAFE", "FI_EFA_USE_DEVICE_RDMA")


def _pod(job: dict) -> dict:
    return next(iter(job["spec"]["pytorchReplicaSpecs"].values()))["template"]["spec"]


def _efa_part(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in EFA_VARS}


@pytest.mark.parametrize("spec", INSTANCES, ids=lambda s: s.name)
def test_the_job_the_nccl_test_and_slurm_agree(spec):
    job = pm.render(
        RenderInputs(
            JobSpec(job_name="agree", num_nodes=2, gpu_per_node=spec.gpus),
            KubernetesDeploySettings(instance_type=spec.name),
            "img:1",
            None,
        )
    )
    _, nccl = nccl_manifests("nccl-test-abc123", "default", 2, spec.name, "img:1")
    pods = {"job": _pod(job), "nccl": _pod(nccl)}
    envs = {  # literal values only (NODE_NAME comes from the pod's spec.nodeName)
        who: _efa_part({e["name"]: e["value"] for e in p["containers"][0]["env"] if "value" in e})
        for who, p in pods.items()
    }
    features = f"static,{spec.name}" + (",efa" if spec.efa else "")
    info = PartitionInfo.from_sinfo("p", [("96", f"gpu:{spec.gpus}", features, "2")])
    envs["slurm"] = _efa_part(batch_env(info.efa, info.rdma))
    assert envs["job"] == envs["nccl"] == envs["slurm"] == efa_env_for(spec.name)
    assert ("FI_EFA_USE_DEVICE_RDMA" in envs["job"]) is spec.rdma
    assert ("FI_EFA_USE_HUGE_PAGE" in envs["job"]) is spec.efa
    resources = [p["containers"][0]["resources"] for p in pods.values()]
    assert resources[0] == resources[1]  # GPUs, EFA devices, huge pages, memory request
    assert pods["job"]["tolerations"] == pods["nccl"]["tolerations"] == list(GPU_TOLERATIONS)


# libfabric's FI_EFA_USE_HUGE_PAGE (a fi_param bool; unset: its default, use them).
HUGE_PAGE_SETTINGS = [
    ({}, True),
    ({"FI_EFA_USE_HUGE_PAGE": "0"}, False),
    ({"FI_EFA_USE_HUGE_PAGE": "false"}, False),
    ({"FI_EFA_USE_HUGE_PAGE": "OFF"}, False),
    ({"FI_EFA_USE_HUGE_PAGE": "no"}, False),
    ({"FI_EFA_USE_HUGE_PAGE": "1"}, True),
    ({"FI_EFA_USE_HUGE_PAGE": "on"}, True),
]


@pytest.mark.parametrize(("env", "uses"), HUGE_PAGE_SETTINGS, ids=lambda v: str(v))
def test_libfabric_uses_huge_pages_unless_its_variable_says_off(env, uses):
    assert uses_huge_pages(env) is uses


# The job's own FI_EFA_USE_HUGE_PAGE -> (hugepages-2Mi, memory request) of its pods.
JOB_HUGE_PAGES = [
    (None, None, None),  # the catalogue's 0: libfabric takes none, the pod asks none
    ("1", "5120Mi", "8000Mi"),  # turned on: the pages and the memory request beside them
    ("0", None, None),
]


@pytest.mark.parametrize(("setting", "pages", "memory"), JOB_HUGE_PAGES, ids=str)
def test_a_pod_requests_huge_pages_only_when_its_libfabric_uses_them(setting, pages, memory):
    env = {} if setting is None else {"FI_EFA_USE_HUGE_PAGE": setting}
    job = pm.render(
        RenderInputs(
            JobSpec(job_name="pages", num_nodes=2, gpu_per_node=8, env=env),
            KubernetesDeploySettings(instance_type="p5.48xlarge"),
            "img:1",
            None,
        )
    )
    container = _pod(job)["containers"][0]
    variables = {e["name"]: e.get("value") for e in container["env"]}
    assert uses_huge_pages(variables) is (pages is not None)
    resources = container["resources"]
    assert resources["limits"].get("hugepages-2Mi") == pages
    assert resources["requests"].get("hugepages-2Mi") == pages
    assert resources["requests"].get("memory") == memory
    assert "memory" not in resources["limits"]  # a limit would cap the trainer
