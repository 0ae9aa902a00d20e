from skills.kube.gpu_nodes import node_gpu_facts


def _node(labels=None, allocatable=None, ready="True"):
    return {
        "metadata": {"name": "n1", "labels": labels or {}},
        "status": {
            "allocatable": allocatable or {},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_a_gpu_operator_node_reads_whole():
    facts = node_gpu_facts(_node(
        {"node.kubernetes.io/instance-type": "p5.48xlarge",
         "nvidia.com/cuda.driver-version.full": "550.127.05",
         "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
         "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0"},
        {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32", "cpu": "192"},
    ))  # fmt: skip
    assert facts.instance_type == "p5.48xlarge"
    assert (facts.gpus_allocatable, facts.efa_allocatable) == (8, 32)
    assert (facts.driver_version, facts.compute_capability, facts.ready) == ("550.127.05", 90, True)


def test_deprecated_driver_labels_and_a_bare_node():
    labels = {"nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "104",
              "nvidia.com/cuda.driver.rev": "05"}  # fmt: skip
    facts = node_gpu_facts(_node(labels, ready="False"))
    assert (facts.driver_version, facts.ready, facts.gpus_allocatable) == ("535.104.05", False, 0)
    bare = node_gpu_facts({"metadata": {"name": "x"}})
    assert (bare.instance_type, bare.driver_version, bare.compute_capability) == (None, None, None)
