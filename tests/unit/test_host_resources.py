"""The instance table's vCPU/memory column covers exactly the instance rows, and a whole
node's pod asks for less than the node has (the kubelet's reserve and daemonsets)."""

import pytest

from skills.catalog.instances import HOST_RESOURCES, INSTANCES, host_resources
from skills.model_server.kubernetes.manifest import host_requests


def test_every_instance_row_has_its_vcpus_and_memory():
    assert set(HOST_RESOURCES) == {i.name for i in INSTANCES}
    assert host_resources("ml.p5.48xlarge") == (192, 2048)


@pytest.mark.parametrize(
    ("instance", "cpu", "memory"),
    [("g5.12xlarge", "38", "153Gi"), ("p5.48xlarge", "153", "1638Gi"),
     ("g5.xlarge", "3", "12Gi"), ("g6e.xlarge", "3", "25Gi")],
)  # fmt: skip
def test_requests_are_a_share_of_the_node(instance, cpu, memory):
    assert host_requests(instance) == {"cpu": cpu, "memory": memory}
