"""THE EFA/NCCL environment (skills.kube.efa): the PyTorchJob, the cluster's NCCL test
job and the Slurm batch script set the same libfabric variables, the same EFA devices,
huge pages and memory request, and the same tolerations, for every instance type of the
catalogue (issue 19: the NCCL check must test the setup of the job it vouches for)."""

from __future__ import annotations

import pytest

from skills.catalog.instances import INSTANCES
from skills.eks_cluster_manager.nccl_job import manifests as nccl_manifests
from skills.kube.efa import GPU_TOLERATIONS, efa_env_for
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.kubernetes import manifest as pm
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
        JobSpec(job_name="agree", num_nodes=2, gpu_per_node=spec.gpus),
        KubernetesDeploySettings(instance_type=spec.name),
        "img:1",
        None,
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
