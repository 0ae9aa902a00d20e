"""manage_eks_cluster end to end against moto (EKS) and kmock (the Kubernetes API):
describe, scale and its zero gate, auto_fix plan -> apply -> read back -> re-validate,
the NCCL test job as an operation (the test plays the training operator), the seed's
exact CLI call, and bad input as typed errors."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from commands._cli import run_cli
from commands.inspect_eks_cluster import inspect_eks_cluster
from commands.manage_eks_cluster import cli, manage_eks_cluster
from skills.shared.errors import ToolFailure
from tests.integration.test_eks_access import REGION, make_cluster
from tests.services import eks_cluster as seed

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    """The cluster CA files and operation records land here, not in the home directory."""
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))


def exists(kube, key) -> bool:
    try:
        return not kube.emulator.objects[key].deleted
    except KeyError:
        return False


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    seed.seed_healthy(kube_api)
    return kube_api


def test_describe_shows_cluster_node_groups_nodes_and_gpus(moto_server, kube):
    make_cluster("desc-a", {"gpu": ("p4d.24xlarge", 0, 2, 4), "system": ("m5.xlarge", 1, 2, 3)})
    report = manage_eks_cluster(
        action="describe", cluster_name="desc-a", region=REGION, kubeconfig=str(kube.kubeconfig)
    )
    assert report.cluster["name"] == "desc-a" and report.cluster["status"] == "ACTIVE"
    assert report.cluster["version"] == "1.31" and report.cluster["endpoint"].startswith("https://")
    groups = {g.name: g for g in report.nodegroups}
    assert set(groups) == {"gpu", "system"}
    gpu = groups["gpu"]
    assert (gpu.instance_types, gpu.capacity_type, gpu.ami_type) == (
        ["p4d.24xlarge"],
        "ON_DEMAND",
        "AL2_x86_64_GPU",
    )
    assert (gpu.min_size, gpu.desired_size, gpu.max_size) == (0, 2, 4)
    nodes = {n.name: n for n in report.nodes}
    assert nodes["gpu-0"].gpus_allocatable == 8 and nodes["gpu-0"].gpus_in_use == 4
    assert nodes["gpu-0"].efa_allocatable == 4 and nodes["gpu-0"].driver_version == "550.127.08"
    assert nodes["system-0"].gpus_allocatable == 0 and nodes["system-0"].driver_version is None
    assert report.gpus == {"allocatable": 16, "in_use": 4, "free": 12}


def test_a_fleets_describe_and_validate_count_nodes_and_list_the_odd_ones(moto_server, kube):
    """Issue 35 item 1: 2,048 GPU nodes (3 NotReady, 2 short of GPUs) answer under 40 KB:
    counts by kind, the anomalies by name, every GPU still added up."""
    fleet = 2048
    seed.seed_healthy(kube, gpu_nodes=fleet, instance_type="p5.48xlarge")
    objects = kube.emulator.objects
    for i in (7, 900, 2047):
        objects["v1/nodes", None, f"gpu-{i}"] = seed.node(f"gpu-{i}", "p5.48xlarge", ready=False)
    for i in (11, 12):
        objects["v1/nodes", None, f"gpu-{i}"] = seed.node(f"gpu-{i}", "p5.48xlarge", gpus=7)
    make_cluster("fleet", {"gpu": ("p5.48xlarge", 0, fleet, fleet)})
    args = {"cluster_name": "fleet", "region": REGION, "kubeconfig": str(kube.kubeconfig)}

    report = manage_eks_cluster(action="describe", **args)
    assert len(report.model_dump_json()) < 40_000
    assert sorted(n.name for n in report.nodes) == [
        "gpu-11", "gpu-12", "gpu-2047", "gpu-7", "gpu-900"]  # fmt: skip
    counts = {(c.instance_type, c.ready, c.gpus_allocatable): c.count for c in report.node_counts}
    assert counts == {("p5.48xlarge", True, 8): fleet - 5, ("p5.48xlarge", False, 8): 3,
                      ("p5.48xlarge", True, 7): 2, ("m5.xlarge", True, 0): 1}  # fmt: skip
    assert report.gpus["allocatable"] == (fleet - 2) * 8 + 2 * 7
    assert f"{fleet - 2}/{fleet + 1} nodes Ready" in report.summary

    checked = manage_eks_cluster(action="validate", **args)
    assert len(checked.model_dump_json()) < 40_000
    checks = {c.name: c for c in checked.checks}
    # In the order the API server lists nodes: by name.
    assert "not Ready: gpu-2047, gpu-7, gpu-900" in checks["nodes_ready"].evidence[1]
    gpu = checks["gpu_allocatable"]
    assert gpu.status == "failed" and f"{fleet - 2:,} nodes p5.48xlarge: nvidia.com/gpu 8" in (
        gpu.evidence
    )
    assert sum("expected 8" in line for line in gpu.evidence) == 2


def test_describe_with_moto_alone_reports_node_groups_and_an_unreachable_api(moto_server):
    make_cluster("desc-b", {"gpu": ("g5.12xlarge", 1, 1, 2)})
    report = manage_eks_cluster(action="describe", cluster_name="desc-b", region=REGION)
    assert [g.name for g in report.nodegroups] == ["gpu"]
    assert report.nodes is None and "not reachable" in report.summary


def test_scale_updates_sizes_and_zero_needs_confirm(moto_server):
    import boto3

    make_cluster("scale-a", {"gpu": ("p5.48xlarge", 0, 1, 2)})
    report = manage_eks_cluster(
        action="scale",
        cluster_name="scale-a",
        region=REGION,
        nodegroup="gpu",
        desired_size=2,
        max_size=4,
    )
    assert report.changes["before"] == {"min_size": 0, "max_size": 2, "desired_size": 1}
    assert report.changes["after"] == {"min_size": 0, "max_size": 4, "desired_size": 2}
    eks = boto3.client("eks", region_name=REGION)
    scaling = eks.describe_nodegroup(clusterName="scale-a", nodegroupName="gpu")["nodegroup"][
        "scalingConfig"
    ]
    assert scaling == {"minSize": 0, "maxSize": 4, "desiredSize": 2}

    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(
            action="scale", cluster_name="scale-a", region=REGION, nodegroup="gpu", desired_size=0
        )
    assert failure.value.code == "confirmation_required" and "confirm" in failure.value.hint
    scaling = eks.describe_nodegroup(clusterName="scale-a", nodegroupName="gpu")["nodegroup"][
        "scalingConfig"
    ]
    assert scaling["desiredSize"] == 2  # nothing changed without confirm
    manage_eks_cluster(
        action="scale",
        cluster_name="scale-a",
        region=REGION,
        nodegroup="gpu",
        desired_size=0,
        confirm=True,
    )
    scaling = eks.describe_nodegroup(clusterName="scale-a", nodegroupName="gpu")["nodegroup"][
        "scalingConfig"
    ]
    assert scaling["desiredSize"] == 0


@pytest.mark.parametrize(
    ("sizes", "field"),
    [
        ({"desired_size": 5}, "desired_size"),  # above max 2
        ({"min_size": 3, "max_size": 2}, "min_size"),
        ({"max_size": 0, "min_size": 0, "desired_size": 0}, "max_size"),
        ({"desired_size": -1}, "desired_size"),
        ({"desired_size": 100000}, "desired_size"),
        ({}, "desired_size"),
    ],
)
def test_invalid_scaling_numbers_are_typed_errors(moto_server, sizes, field):
    make_cluster("scale-b", {"gpu": ("p5.48xlarge", 0, 1, 2)})
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(
            action="scale",
            cluster_name="scale-b",
            region=REGION,
            nodegroup="gpu",
            confirm=True,
            **sizes,
        )
    assert failure.value.code == "invalid_input" and failure.value.exit_status == 2
    assert field in [p["field"] for p in failure.value.details["problems"]]
    assert failure.value.hint


def test_unknown_node_group_and_unknown_instance_type_are_typed_errors(moto_server, tmp_path):
    make_cluster("scale-c", {"gpu": ("p5.48xlarge", 0, 1, 2)})
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(
            action="scale", cluster_name="scale-c", region=REGION, nodegroup="gpux", desired_size=1
        )
    assert failure.value.code == "not_found" and failure.value.details["nodegroups"] == ["gpu"]
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(
            action="create_config", cluster_name="c1", region=REGION, instance_type="p9.mega"
        )
    assert failure.value.code == "invalid_input" and "p5.48xlarge" in failure.value.hint
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(
            action="nccl_test", instance_type="x1.huge", nccl_output=str(tmp_path / "x")
        )
    assert failure.value.code == "invalid_input"


def test_create_config_reads_the_zones_from_ec2_never_a_guessed_a(moto_server):
    import boto3

    # moto's EC2 offers p4d.24xlarge in eu-west-1 only in eu-west-1c (its offerings data).
    ec2 = boto3.client("ec2", region_name="eu-west-1")
    offered = {
        o["Location"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": ["p4d.24xlarge"]}],
        )["InstanceTypeOfferings"]
    }
    assert offered == {"eu-west-1c"}
    report = manage_eks_cluster(
        action="create_config", cluster_name="c2", region="eu-west-1", instance_type="p4d.24xlarge"
    )
    config = yaml.safe_load(report.config_yaml)
    gpu = config["managedNodeGroups"][1]
    assert gpu["efaEnabled"] and gpu["availabilityZones"] == ["eu-west-1c"]
    zones = config["availabilityZones"]
    available = {z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    assert zones[0] == "eu-west-1c" and len(zones) >= 2 and set(zones) <= available
    assert report.changes["gpu_zones"] == ["eu-west-1c"]
    assert "eu-west-1c" in report.summary and "offers p4d.24xlarge" in report.summary
    # A type EC2 offers nowhere in the region is refused, with where to look.
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(
            action="create_config", cluster_name="c2", region="eu-west-1",
            instance_type="p5.48xlarge",
        )  # fmt: skip
    assert failure.value.code == "invalid_input" and "describe-instance-type-offerings" in (
        failure.value.hint
    )


def test_auto_fix_plans_then_applies_then_revalidates(kube):
    # A cluster with the Training Operator (its CRD, no longer serving v1) keeps it.
    for key in (seed.NVIDIA_DS, seed.OPERATOR):
        del kube.emulator.objects[key]
    kube.emulator.objects[seed.CRD]["spec"]["versions"][0]["served"] = False
    kube.emulator.objects["v1/nodes", None, "gpu-1"] = seed.node("gpu-1", "p4d.24xlarge", gpus=0)
    common = {"kubeconfig": str(kube.kubeconfig)}
    planned = manage_eks_cluster(action="auto_fix", **common)
    objects = {(p.component, p.kind, p.name) for p in planned.plan}
    # The Training Operator is upstream v1.9.4's standalone overlay whole: its six CRDs
    # (every job kind its webhook configuration names), not the PyTorchJob CRD alone.
    crds = {"pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs"}
    assert objects == {
        ("nvidia_device_plugin", "DaemonSet", "nvidia-device-plugin-daemonset"),
        *(("training_operator", "CustomResourceDefinition", f"{c}.kubeflow.org") for c in crds),
        ("training_operator", "Namespace", "kubeflow"),
        ("training_operator", "ServiceAccount", "training-operator"),
        ("training_operator", "ClusterRole", "training-operator"),
        ("training_operator", "ClusterRoleBinding", "training-operator"),
        ("training_operator", "Deployment", "training-operator"),
        ("training_operator", "Secret", "training-operator-webhook-cert"),
        ("training_operator", "Service", "training-operator"),
        ("training_operator", "ValidatingWebhookConfiguration",
         "validator.training-operator.kubeflow.org"),
    }  # fmt: skip
    assert {p.action for p in planned.plan} == {"apply"}
    assert not exists(kube, seed.NVIDIA_DS)  # a plan writes nothing
    assert planned.next_step.tool == "manage_eks_cluster"
    assert planned.next_step.arguments["confirm"] is True
    assert planned.next_step.arguments["action"] == "auto_fix"

    applied = manage_eks_cluster(action="auto_fix", confirm=True, **common)
    assert {p.action for p in applied.plan} == {"applied"}
    ds = kube.emulator.objects[seed.NVIDIA_DS]
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v0.20.0")
    crd = kube.emulator.objects[seed.CRD]
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1"]
    assert (
        kube.emulator.objects[seed.OPERATOR]["spec"]["template"]["spec"]["containers"][0]["image"]
        == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"  # upstream's pin
    )
    # No controllers yet: the CRD is back, the rest waits on them.
    after = applied.changes["after"]
    assert applied.changes["before"]["pytorchjob_crd"] == "failed"
    assert after["pytorchjob_crd"] == "ok"
    assert after["nvidia_device_plugin"] == "failed"
    seed.play_controllers(kube)
    report = manage_eks_cluster(action="validate", **common)
    assert {c.status for c in report.checks} == {"ok"}, report.checks
    again = manage_eks_cluster(action="auto_fix", **common)
    assert again.plan == [] and again.summary.startswith("nothing auto_fix can apply")


def test_auto_fix_deploys_etcd_in_the_namespace(kube):
    del kube.emulator.objects[seed.ETCD]
    common = {"kubeconfig": str(kube.kubeconfig), "rdzv_backend": "etcd", "namespace": "default"}
    report = manage_eks_cluster(action="auto_fix", confirm=True, **common)
    # pytorch/elastic's etcd.yaml: a Service and a bare Pod (upstream.py says why)
    assert {(p.kind, p.namespace) for p in report.plan} == {
        ("Service", "default"),
        ("Pod", "default"),
    }
    assert report.changes["after"]["etcd_service"] == "ok"
    assert kube.emulator.objects[seed.ETCD]["spec"]["ports"][0]["port"] == 2379


def test_the_seed_cli_call_prints_the_plan_then_applies(kube, capsys):
    """The CLI keeps the seed's explicit `--validate_components --auto_fix` (it owns the
    machine): the plan goes to stderr first, then it is applied."""
    del kube.emulator.objects[seed.EFA_DS]
    status = cli(
        ["--kubeconfig", str(kube.kubeconfig), "--validate_components", "--auto_fix", "--json"],
    )
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert "plan: 1 object(s) to apply" in err and "DaemonSet aws-efa-k8s-device-plugin" in err
    assert printed["action"] == "auto_fix"
    assert {p["name"] for p in printed["plan"]} == {"aws-efa-k8s-device-plugin"}
    assert kube.emulator.objects[seed.EFA_DS]["kind"] == "DaemonSet"
    assert status == 1  # the plugin is applied but not ready until its controller runs it
    seed.play_controllers(kube)
    status = cli(["--kubeconfig", str(kube.kubeconfig), "--validate-components"])
    assert status == 0


def test_validate_components_is_gone_from_the_tool(kube):
    """The flag was accepted and never read; the tool has no such input now (the CLI
    still takes the seed's spelling, which names the default action)."""
    with pytest.raises(SystemExit) as usage:
        run_cli(manage_eks_cluster, ["--kubeconfig", str(kube.kubeconfig), "--validate_components"])
    assert usage.value.code == 2


def test_over_mcp_auto_fix_without_confirm_is_a_plan_that_applies_nothing(kube):
    """{"auto_fix": true} alone (no action, no confirm) returns the plan; only confirm=true
    applies it (it used to apply: validate + auto_fix forced confirm)."""
    import anyio
    from mcp import Client

    from mcp_server import build_server

    del kube.emulator.objects[seed.NVIDIA_DS]
    args = {"kubeconfig": str(kube.kubeconfig), "auto_fix": True}

    async def scenario():
        async with Client(build_server()) as client:
            planned = await client.call_tool("manage_eks_cluster", args)
            after_plan = exists(kube, seed.NVIDIA_DS)
            applied = await client.call_tool("manage_eks_cluster", {**args, "confirm": True})
            return planned, after_plan, applied

    planned, after_plan, applied = anyio.run(scenario)
    assert not planned.is_error and not after_plan
    assert [p["action"] for p in planned.structured_content["plan"]] == ["apply"]
    assert planned.structured_content["summary"].endswith("nothing applied")
    assert not applied.is_error and exists(kube, seed.NVIDIA_DS)


def test_a_read_only_server_serves_the_reads_and_not_the_writes(kube, tmp_path):
    import anyio
    from mcp import Client

    from mcp_server import build_server

    saved = tmp_path / "nccl.log"
    saved.write_text(NCCL_LOG)

    async def scenario():
        async with Client(build_server(read_only=True)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            kubeconfig = {"kubeconfig": str(kube.kubeconfig)}
            checked = await client.call_tool("inspect_eks_cluster", kubeconfig)
            described = await client.call_tool(
                "inspect_eks_cluster", {"kubeconfig": str(kube.kubeconfig), "action": "describe"}
            )
            judged = await client.call_tool(
                "inspect_eks_cluster",
                {"action": "nccl_test", "nccl_output": str(saved), "instance_type": "p5.48xlarge"},
            )
            return tools, checked, described, judged

    tools, checked, described, judged = anyio.run(scenario)
    assert "manage_eks_cluster" not in tools
    hints = tools["inspect_eks_cluster"].annotations
    # A read-only tool lists only readOnlyHint (destructiveHint means nothing for it).
    assert hints.read_only_hint is True and not hints.destructive_hint
    assert not checked.is_error and checked.structured_content["action"] == "validate"
    assert checked.structured_content["checks"]
    assert not described.is_error and described.structured_content["action"] == "describe"
    assert not judged.is_error and judged.structured_content["nccl"]["verdict"]


def test_inspect_nccl_test_needs_a_saved_output_and_runs_nothing(kube):
    with pytest.raises(ToolFailure) as failure:
        inspect_eks_cluster(action="nccl_test", kubeconfig=str(kube.kubeconfig))
    assert failure.value.code == "invalid_input" and "manage_eks_cluster" in failure.value.hint


NCCL_LOG = """NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4294967296 step: 2(factor)
#  Rank  0 Group  0 Pid      1 on nccl-test-master-0 device  0 [0x00] NVIDIA H100 80GB HBM3
#  Rank  8 Group  0 Pid      1 on nccl-test-worker-0 device  0 [0x00] NVIDIA H100 80GB HBM3
  4294967296    1073741824     float     sum      -1  21000.0  204.52  383.47      0  20990.0  204.62  383.66      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 300.1
"""  # noqa: E501


def test_nccl_test_needs_enough_ready_nodes_of_the_type(kube):
    common = {"action": "nccl_test", "kubeconfig": str(kube.kubeconfig), "image": "trainer:1"}
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(instance_type="p5.48xlarge", nodes=2, **common)
    assert failure.value.code == "not_enough_gpus"
    assert "p4d.24xlarge" in failure.value.hint and failure.value.details["ready"] == 0
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(instance_type="p4d.24xlarge", nodes=3, **common)
    assert failure.value.details["ready"] == 2
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(
            action="nccl_test",
            kubeconfig=str(kube.kubeconfig),
            nodes=2,
            instance_type="p4d.24xlarge",
        )
    assert failure.value.code == "invalid_input" and "image" in failure.value.message


def test_nccl_test_runs_as_an_operation_on_the_cluster(kube, tmp_path, monkeypatch):
    from commands.get_operation import get_operation

    for i in range(2):  # HyperPod nodes: the label says ml.p5.48xlarge
        kube.emulator.objects["v1/nodes", None, f"gpu-{i}"] = seed.node(
            f"gpu-{i}", "ml.p5.48xlarge"
        )

    started = manage_eks_cluster(
        action="nccl_test",
        kubeconfig=str(kube.kubeconfig),
        nodes=2,
        instance_type="p5.48xlarge",
        image="trainer:1",
        wait_seconds=0,
    )
    assert started.operation["status"] == "running" and started.nccl is None
    assert started.next_step.tool == "get_operation"
    deadline = time.monotonic() + 30
    jobs = []
    while not jobs and time.monotonic() < deadline:
        jobs = [
            k
            for k in kube.emulator.objects
            if k[0] == seed.PYTORCHJOB_RESOURCE and not kube.emulator.objects[k].deleted
        ]
        time.sleep(0.1)
    assert jobs, "the operation created no PyTorchJob"
    (_, namespace, name) = jobs[0]
    job = kube.emulator.objects[jobs[0]]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 1
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    # skills.kube.efa's resources, as the training job's (quantities as strings)
    assert limits == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}  # no huge pages: off
    selector = worker["template"]["spec"]["nodeSelector"]
    assert selector == {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"}
    bench = kube.emulator.objects["v1/configmaps", namespace, name]["data"]["allreduce_bench.py"]
    assert "busbw = algbw * 2(n-1)/n" in bench
    # Play the training operator: the master pod ran and logged; the job succeeded.
    kube.emulator.objects["v1/pods", namespace, f"{name}-master-0"] = {
        "metadata": {"name": f"{name}-master-0", "namespace": namespace}
    }
    kube.set_pod_log(namespace, f"{name}-master-0", NCCL_LOG)
    job.patch({"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}})
    state = get_operation(operation_id=started.operation["operation_id"], wait_seconds=30)
    assert state.status == "succeeded", state.error
    nccl = state.result.model_dump(mode="json")["nccl"]  # get_operation types the result
    assert nccl["verdict"] == "pass" and nccl["transport"] == "efa" and nccl["nodes"] == 2
    assert nccl["peak_busbw_gbps"] == 383.66
    assert not exists(kube, jobs[0]) and not exists(kube, ("v1/configmaps", namespace, name))


def test_through_mcp_validate_answers_and_a_plan_writes_nothing(kube):
    import anyio
    from mcp import Client

    from mcp_server import build_server

    del kube.emulator.objects[seed.NVIDIA_DS]
    args = {"kubeconfig": str(kube.kubeconfig)}

    async def scenario():
        async with Client(build_server()) as client:
            checked = await client.call_tool("manage_eks_cluster", args)
            planned = await client.call_tool("manage_eks_cluster", {**args, "action": "auto_fix"})
            return checked, planned

    checked, planned = anyio.run(scenario)
    assert not checked.is_error and not planned.is_error
    statuses = {c["name"]: c["status"] for c in checked.structured_content["checks"]}
    assert statuses["nvidia_device_plugin"] == "failed"
    assert [p["action"] for p in planned.structured_content["plan"]] == ["apply"]
    assert not exists(kube, seed.NVIDIA_DS)


def test_no_token_in_any_result(moto_server, tmp_path):
    from skills.kube.access import TOKEN_PREFIX

    make_cluster("secret-a", {"gpu": ("p5.48xlarge", 0, 1, 2)})
    common = {"cluster_name": "secret-a", "region": REGION}
    described = manage_eks_cluster(action="describe", **common)  # signs a token, in memory
    written = manage_eks_cluster(action="kubeconfig", kubeconfig=str(tmp_path / "kc"), **common)
    for report in (described, written):
        assert TOKEN_PREFIX not in report.to_json()
    assert TOKEN_PREFIX not in (tmp_path / "kc").read_text()
