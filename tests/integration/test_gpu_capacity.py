"""Capacity as a rule (issue 21, item 7), on the Kubernetes emulator: describe and
deploy count the same free GPUs for the same pods (requests, a limit where only a limit
is set, ended pods freed, init containers by the scheduler's rule), and more GPUs per
node than the instance type has is refused, dry run included, with a next step that
plans the call with the most it takes."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from commands._cli import run_cli
from commands.deploy_training_job import deploy_training_job
from commands.inspect_eks_cluster import inspect_eks_cluster
from commands.manage_eks_cluster import manage_eks_cluster
from skills.shared.errors import EXIT_BAD_INPUT, ErrorCode, ToolFailure
from tests.integration.test_next_steps import _call, _check, _sent_step
from tests.services.kube import PYTORCHJOB
from tests.services.training_operator import TrainingOperator

pytestmark = pytest.mark.integration

IMAGE = "localhost:9/fsdp:v1"  # unreadable: the tests that submit pass skip_gate=True


@pytest.fixture
def operator(kube_api) -> TrainingOperator:
    kube_api.reset()
    return TrainingOperator(kube_api)


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))


def gpu_pod(kube_api, name, node, *, phase="Running", requests=None, limits=None, init=None):
    """A pod as the API returns it, seeded (kmock plays no scheduler)."""

    def container(cname, req, lim):
        resources = {}
        if req is not None:
            resources["requests"] = {"nvidia.com/gpu": str(req)}
        if lim is not None:
            resources["limits"] = {"nvidia.com/gpu": str(lim)}
        return {"name": cname, "image": "x", "resources": resources}

    spec = {"containers": [container("main", requests, limits)]}
    if node:
        spec["nodeName"] = node
    if init is not None:
        spec["initContainers"] = [container("prepare", init, init)]
    kube_api.emulator.objects["v1/pods", "team", name] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team"},
        "spec": spec,
        "status": {"phase": phase},
    }


def deploy(**kwargs):
    args = {"job_name": "llama", "num_nodes": 2, "gpu_per_node": 8, "image_uri": IMAGE,
            "instance_type": "p5.48xlarge", "max_steps": 6, "wait_seconds": 0}  # fmt: skip
    args.update(kwargs)
    return deploy_training_job(**args)


def test_describe_and_deploy_count_the_same_free_gpus(operator, kube_api):
    first, second = operator.add_nodes("p5.48xlarge", 2, efa=32)
    gpu_pod(kube_api, "limits-only", first, limits=4)  # the pod: 4 held, not 0
    gpu_pod(kube_api, "requests-only", second, requests=2)
    gpu_pod(kube_api, "done", second, phase="Succeeded", limits=8)  # ended: frees its 8
    gpu_pod(kube_api, "crashed", first, phase="Failed", requests=4)
    gpu_pod(kube_api, "starting", second, phase="Pending", requests=1, init=2)  # holds 2
    gpu_pod(kube_api, "unscheduled", None, phase="Pending", requests=8)  # on no node
    # held: first 4, second 2 + 2 = 4; free: 4 + 4 of 16 (counted by hand, not by the code)
    kubeconfig = str(kube_api.kubeconfig)

    for described in (
        inspect_eks_cluster(action="describe", kubeconfig=kubeconfig),
        manage_eks_cluster(action="describe", kubeconfig=kubeconfig),
    ):
        assert described.gpus == {"allocatable": 16, "in_use": 8, "free": 8}
        assert {n.name: n.gpus_in_use for n in described.nodes or ()} == {first: 4, second: 4}

    state = deploy(num_nodes=2, gpu_per_node=8, skip_gate=True)
    asked = [w for w in state.warnings if "GPUs asked" in w]
    assert asked == [
        "16 GPUs asked, 8 free on Ready p5.48xlarge nodes: pods stay Pending until the "
        "autoscaler adds nodes or GPUs free up"
    ]
    free_by_deploy = re.search(r"(\d+) free", asked[0])
    assert free_by_deploy and int(free_by_deploy[1]) == (described.gpus or {})["free"]
    # 8 free in all, but 4 on each node: one pod of 8 fits on neither.
    split = deploy(job_name="split", num_nodes=1, gpu_per_node=8, skip_gate=True)
    assert [w for w in split.warnings if "GPUs" in w and "asked" in w] == [
        "1 pod(s) of 8 GPUs asked; 8 GPUs are free on Ready p5.48xlarge nodes, but only 0 "
        "such pod(s) fit on one node each: the rest stay Pending until the autoscaler adds "
        "nodes or GPUs free up"
    ]

    # Once the limits-only pod ends, its 4 are free again in both views.
    kube_api.emulator.objects["v1/pods", "team", "limits-only"]["status"] = {"phase": "Succeeded"}
    described = inspect_eks_cluster(action="describe", kubeconfig=kubeconfig)
    assert described.gpus == {"allocatable": 16, "in_use": 4, "free": 12}
    state = deploy(job_name="small", num_nodes=1, gpu_per_node=8, skip_gate=True)
    assert not [w for w in state.warnings if "GPUs asked" in w]
    bigger = deploy(job_name="big", num_nodes=2, gpu_per_node=8, skip_gate=True)
    assert any("16 GPUs asked, 12 free" in w for w in bigger.warnings)


def test_a_job_this_suite_started_counts_in_both_views(operator, kube_api):
    """The suite's own pods set limits and requests alike: both views hold them."""
    (node,) = operator.add_nodes("p5.48xlarge", 1, efa=32)
    deploy(job_name="first", num_nodes=1, gpu_per_node=8, skip_gate=True)
    for pod_name in operator.create_pods("first"):  # bound and running, as the API sees it
        operator.core.patch_namespaced_pod(pod_name, "default", {"spec": {"nodeName": node}})
        operator.core.patch_namespaced_pod_status(
            pod_name, "default", {"status": {"phase": "Running"}}
        )
    described = inspect_eks_cluster(action="describe", kubeconfig=str(kube_api.kubeconfig))
    assert described.gpus == {"allocatable": 8, "in_use": 8, "free": 0}
    second = deploy(job_name="second", num_nodes=1, gpu_per_node=8, skip_gate=True)
    assert any("8 GPUs asked, 0 free" in w for w in second.warnings)


def test_more_gpus_per_node_than_the_instance_has_is_refused_on_dry_run(operator, kube_api):
    operator.add_nodes("g5.12xlarge", 2, gpus=4)
    call = {"instance_type": "ml.g5.12xlarge", "gpu_per_node": 8, "num_nodes": 2}
    with pytest.raises(ToolFailure) as caught:
        deploy(dry_run=True, **call)
    refused = caught.value
    assert refused.code == ErrorCode.NOT_ENOUGH_GPUS
    assert "gpu_per_node=8 but ml.g5.12xlarge has 4 GPU(s)" in refused.message
    assert "gpu_per_node=4 or fewer on ml.g5.12xlarge" in refused.hint
    assert "instance_type=ml.g5.48xlarge (8 x A10G)" in refused.hint
    step = refused.next_step
    assert step is not None and step.tool == "deploy_training_job"
    assert step.arguments["gpu_per_node"] == 4 and step.arguments["dry_run"] is True
    assert step.arguments["instance_type"] == "ml.g5.12xlarge"
    # Following the step as given plans the job.
    planned = deploy_training_job(**step.arguments)
    assert planned.status == "planned" and planned.dry_run

    # The submit is refused the same way, before anything reaches the cluster.
    with pytest.raises(ToolFailure) as caught:
        deploy(skip_gate=True, **call)
    assert caught.value.code == ErrorCode.NOT_ENOUGH_GPUS
    assert not [key for key in kube_api.emulator.objects if key[0] == PYTORCHJOB]


def test_the_refusal_over_the_cli_and_mcp(operator, kube_api):
    kubeconfig = str(kube_api.kubeconfig)
    argv = ["--kubeconfig", kubeconfig, "--instance_type", "g6e.xlarge", "--gpu_per_node", "4",
            "--job_name", "over", "--image_uri", IMAGE, "--dry_run", "--json"]  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = run_cli(deploy_training_job, argv)
    assert status == EXIT_BAD_INPUT
    printed = json.loads(out.getvalue())["error"]
    assert printed["code"] == "not_enough_gpus" and "g6e.12xlarge" in printed["hint"]

    arguments = {"job_name": "over", "dry_run": True, "gpu_per_node": 4,
                 "kubernetes": {"kubeconfig": kubeconfig, "instance_type": "g6e.xlarge",
                                "image_uri": IMAGE}}  # fmt: skip
    result = _call("deploy_training_job", arguments)
    assert result.is_error
    error = json.loads(result.content[0].text)["error"]
    assert error["code"] == "not_enough_gpus" and "gpu_per_node=1 or fewer" in error["hint"]
    step = _sent_step(result)
    assert step is not None
    _check(step, "deploy over-ask")  # a call the tool's schema takes
    followed = _call(step["tool"], step["arguments"])
    assert not followed.is_error, followed.content[0].text
    assert followed.structured_content["status"] == "planned"
