"""diagnose_training_job live against kmock (the test plays the cluster: it seeds the
PyTorchJob, its pods, events and logs) equals the offline diagnosis of the snapshot it
saves, and of the fixture it was seeded from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands.diagnose_training_job import diagnose_training_job
from skills.job_doctor.diagnose import diagnose
from skills.kube.access import kube_api_client
from skills.kube.pods import PREVIOUS
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.targets.kubernetes.kube_monitor import KubeReader, read_snapshot
from tests.fixtures.pod_doctor import snapshots as builder
from tests.services.kube import PYTORCHJOB

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parents[1] / "fixtures" / "pod_doctor"
NS = builder.NS


@pytest.fixture
def cluster(kube_api):
    kube_api.reset()
    yield kube_api
    kube_api.reset()


def seed(kube, snapshot: dict) -> None:
    """Put a snapshot's objects and logs into the emulator, as the operator and kubelet
    would have made them."""
    objects = kube.emulator.objects
    job = snapshot["job"]
    objects[PYTORCHJOB, NS, job["metadata"]["name"]] = job
    for pod in snapshot["pods"]:
        objects["v1/pods", NS, pod["metadata"]["name"]] = pod
    for event in snapshot["events"]:
        # The API keeps a node's events (its agents' XIDs) in "default", not the job's.
        on_node = event["involvedObject"]["kind"] == "Node"
        namespace = "default" if on_node else NS
        event = {**event, "metadata": {**event["metadata"], "namespace": namespace}}
        objects["v1/events", namespace, event["metadata"]["name"]] = event
    for node in snapshot.get("nodes", []):
        objects["v1/nodes", None, node["metadata"]["name"]] = node
    for key, text in snapshot["logs"].items():
        previous = key.endswith(PREVIOUS)
        kube.set_pod_log(NS, key.removesuffix(PREVIOUS), text, previous=previous)


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.mark.parametrize(
    "name",
    [
        "multi_oom_then_timeouts",
        "multi_pending_then_rendezvous",
        "host_oom",
        "preempted",
        "gpu_hardware_fault",
    ],
)
def test_live_diagnosis_equals_the_offline_one_of_the_saved_snapshot(cluster, tmp_path, name):
    fixture = load(name)
    seed(cluster, fixture)
    # Another job's pod and an event about it in the same namespace: kmock ignores label
    # selectors, so the snapshot must filter them out itself.
    other = builder.pod("other-job", "master", 0, state=builder.terminated(139))
    cluster.emulator.objects["v1/pods", NS, "other-job-master-0"] = other
    decoy = builder.event("other-job-master-0", "Failed", 'Error: secret "x" not found')
    cluster.emulator.objects["v1/events", NS, decoy["metadata"]["name"]] = decoy
    job_name = fixture["job"]["metadata"]["name"]

    saved = tmp_path / "snap.json"
    live = diagnose_training_job(job_name=job_name, namespace=NS, save_snapshot=str(saved))
    offline = diagnose_training_job(snapshot=str(saved))

    assert live.findings and live.findings == offline.findings
    assert live.findings == diagnose(fixture).findings
    assert live.saved_snapshot == str(saved.resolve())
    written = json.loads(saved.read_text())
    assert {p["metadata"]["name"] for p in written["pods"]} == {
        p["metadata"]["name"] for p in fixture["pods"]
    }
    assert all("other-job" not in json.dumps(e) for e in written["events"])
    assert written["logs"] == fixture["logs"]
    assert written["nodes"] == fixture.get("nodes", [])  # the pods' nodes, as the API has them


def test_a_node_that_lost_a_gpu_is_named_first_live(cluster):
    """The node's condition and its event (kept in "default") reach the doctor; a node
    the job did not run on is not read into the snapshot."""
    seed(cluster, load("gpu_hardware_fault"))
    stranger = builder.gpu_node("ip-10-0-9-9.ec2.internal")
    cluster.emulator.objects["v1/nodes", None, "ip-10-0-9-9.ec2.internal"] = stranger
    result = diagnose_training_job(job_name="xid79", namespace=NS)
    root = result.root
    assert (root.code, root.node, root.fault) == (
        "gpu_hardware_fault", "ip-10-0-1-12.ec2.internal", "node")  # fmt: skip
    assert any(e.startswith("node ip-10-0-1-12.ec2.internal event") for e in root.evidence)
    assert len(root.consequences) == 3 and result.findings == [root]


def test_the_snapshot_is_a_list_per_object_and_a_log_read_per_container_that_needs_one(cluster):
    # The master restarted: its previous log is read too; the worker runs, ready: its
    # log is not read (it says what rank 0's says).
    fixture = load("host_oom")
    seed(cluster, fixture)
    with kube_api_client() as api:
        snapshot = read_snapshot(KubeReader(api, NS), "host-oom")
    assert set(snapshot["logs"]) == {"host-oom-master-0", "host-oom-master-0/previous"}
    paths = [str(r.url.path) for r in cluster.emulator._requests]  # kmock 0.8: no public list
    assert paths.count(f"/api/v1/namespaces/{NS}/pods") == 1
    # Events by the API server's filter: one LIST for the job, each pod, each node.
    nodes = {p["spec"].get("nodeName") for p in snapshot["pods"]} - {None}
    assert paths.count(f"/api/v1/namespaces/{NS}/events") == 1 + 2 + len(nodes)
    assert sum(p.endswith("/log") for p in paths) == 2  # the master's, now and previous


def _fleet(failed: set[int], not_ready: set[int], pending: set[int], workers: int) -> dict:
    """A job of a master and `workers` workers: those in `failed` exited 1, `not_ready`
    run unready, `pending` never started, the rest run ready; every pod has a log."""
    pods = [builder.pod("fleet", "master", 0, state=builder.running())]
    for i in range(workers):
        if i in failed:
            pod = builder.pod("fleet", "worker", i, phase="Failed", state=builder.terminated(1))
        elif i in pending:
            pod = builder.pod("fleet", "worker", i, phase="Pending")
        else:
            pod = builder.pod("fleet", "worker", i, state=builder.running())
            pod["status"]["containerStatuses"][0]["ready"] = i not in not_ready
        pods.append(pod)
    logs = {p["metadata"]["name"]: builder.watchdog(8 * n) for n, p in enumerate(pods)}
    return builder.snapshot(builder.job("fleet", workers), pods, [], logs)


def test_log_reads_are_concurrent_bounded_and_only_for_the_pods_that_need_one(cluster):
    """48 workers: 20 failed, 4 not ready, 4 never started, 20 healthy; each log read
    takes the stand-in kubelet 50 ms. The snapshot reads rank 0's and the 24 troubled
    pods' logs, SNAPSHOT_LOG_READS at a time (never more, and more than one), each the
    end of the log within its byte share."""
    from urllib.parse import parse_qs

    from skills.training_job_deployer.targets.kubernetes.kube_monitor import (
        SNAPSHOT_LOG_READS,
        log_share,
    )

    failed, not_ready, pending = set(range(0, 40, 2)), {1, 3, 5, 7}, {9, 11, 13, 15}
    seed(cluster, _fleet(failed, not_ready, pending, workers=48))
    cluster.log_latency = 0.05
    with kube_api_client() as api:
        snapshot = read_snapshot(KubeReader(api, NS), "fleet")
    wanted = {"fleet-master-0"} | {f"fleet-worker-{i}" for i in failed | not_ready}
    logs = [r for r in cluster.emulator._requests if str(r.url.path).endswith("/log")]
    assert {str(r.url.path).split("/")[-2] for r in logs} == wanted
    assert len(logs) == len(wanted) and set(snapshot["logs"]) == wanted
    assert 1 < cluster.logs_in_flight_peak <= SNAPSHOT_LOG_READS
    for request in logs:
        query = parse_qs(request.url.query_string)
        assert query["limitBytes"] == [str(log_share(len(wanted)))] and query["tailLines"]


def test_a_canary_token_in_a_live_log_stays_out_of_the_result_and_the_file(cluster, tmp_path):
    fixture = load("cuda_oom")
    fixture["logs"]["oom-worker-0"] += f"[rank9]: OutOfMemoryError: token={builder.CANARY}\n"
    seed(cluster, fixture)
    saved = tmp_path / "snap.json"
    result = diagnose_training_job(job_name="oom", namespace=NS, save_snapshot=str(saved))
    assert result.root.code == "cuda_oom"
    assert builder.CANARY not in result.model_dump_json()
    assert builder.CANARY not in saved.read_text()


def test_a_job_that_is_not_there(cluster):
    with pytest.raises(ToolFailure) as info:
        diagnose_training_job(job_name="nothing-here", namespace=NS)
    assert info.value.code == "job_not_found" and "namespace" in info.value.hint


def test_snapshot_files_that_are_not_snapshots(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"pods": 5}')
    with pytest.raises(ToolFailure) as info:
        diagnose_training_job(snapshot=str(bad))
    assert info.value.code == "snapshot_invalid" and "pods" in info.value.message
    with pytest.raises(ToolFailure) as info:
        diagnose_training_job(snapshot=str(tmp_path / "absent.json"))
    assert info.value.code == "not_found"
    with pytest.raises(ToolFailure) as info:
        diagnose_training_job(snapshot=str(FIXTURES / "cuda_oom.json"), save_snapshot="x.json")
    assert info.value.code == "invalid_input"


def _fixtures() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


@pytest.mark.parametrize("name", _fixtures())
def test_every_old_snapshot_file_reads_as_a_stream_to_the_diagnosis_of_its_json(name):
    """The fixtures are snapshot files as --save_snapshot wrote them before the stream
    reader: each diagnoses as the whole parse of its JSON does."""
    path = FIXTURES / f"{name}.json"
    assert diagnose_training_job(snapshot=str(path)).findings == diagnose(load(name)).findings


def test_a_snapshot_with_its_keys_in_another_order_reads_the_same(tmp_path):
    fixture = load("multi_oom_then_timeouts")
    path = tmp_path / "reordered.json"
    path.write_text(json.dumps({"logs": fixture["logs"], **fixture}))
    assert list(json.loads(path.read_text()))[0] == "logs"  # the logs before the pods
    assert diagnose_training_job(snapshot=str(path)).findings == diagnose(fixture).findings


@pytest.mark.parametrize("layout", ["one entry a line", "indented JSON"])
def test_reading_a_snapshot_file_holds_about_one_log_not_the_file(tmp_path, layout):
    """40 pods with 256 KB logs (10 MB): the diagnosis's peak memory stays under a fifth
    of the file, written as --save_snapshot writes it or as older versions did (a whole
    parse held about 2.5 times the file)."""
    import tracemalloc

    from skills.job_doctor.snapshot_file import snapshot_text

    fixture = load("multi_oom_then_timeouts")
    filler = "2026-11-20T12:00:00.000000Z step 100 loss 2.31 NCCL INFO Channel 00/0\n" * 3600
    pods = [{**fixture["pods"][-1], "metadata": {**fixture["pods"][-1]["metadata"],
             "name": f"extra-{i}"}} for i in range(40)]  # fmt: skip
    snap = {**fixture, "pods": fixture["pods"] + pods,
            "logs": {**fixture["logs"], **{f"extra-{i}": filler for i in range(40)}}}  # fmt: skip
    path = tmp_path / "big.json"
    path.write_text(
        snapshot_text(snap) if layout == "one entry a line" else json.dumps(snap, indent=1)
    )
    size = path.stat().st_size
    assert size > 9 * 2**20
    tracemalloc.start()
    try:
        result = diagnose_training_job(snapshot=str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.findings == diagnose(snap).findings
    assert peak < size / 5, (peak, size)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("[]", "not a JSON object"), ('{"logs": []}', "not a map of texts"),
     ('{"logs": {"p": 5}}', "not text"), ('{"pods": [', "not JSON"),
     (b'{"logs": {"p": "\xff"}}', "not JSON"), ("[" * 70 + "]" * 70, "nested deeper"),
     ("[1]", "not a JSON object"),
     ('{"job": ' + "[" * 70 + "]" * 70 + "}", "nested deeper")],
)  # fmt: skip
def test_a_file_that_is_no_snapshot_is_snapshot_invalid_wherever_it_goes_wrong(
    tmp_path, text, problem
):
    path = tmp_path / "bad.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ToolFailure) as info:
        diagnose_training_job(snapshot=str(path))
    assert info.value.code == "snapshot_invalid" and problem in info.value.message


@pytest.mark.parametrize("path", ["a\x00b", "/tmp/\x00", "snap\n.json"])
def test_a_snapshot_path_with_a_control_character_is_invalid_input_over_mcp(path):
    """The fuzzer's find: a NUL in the path reached open() (ValueError: embedded null
    byte) and came back as internal_error."""
    import anyio
    from mcp import Client

    from mcp_server import build_server

    async def call():
        async with Client(build_server()) as client:
            return await client.call_tool("diagnose_training_job", {"snapshot": path})

    result = anyio.run(call)
    assert result.is_error
    assert json.loads(result.content[0].text)["error"]["code"] == "invalid_input"


@pytest.mark.parametrize("tool", ["list_training_jobs", "list_model_servers"])
def test_a_kubeconfig_path_with_a_nul_is_invalid_input_over_mcp(tool):
    import anyio
    from mcp import Client

    from mcp_server import build_server

    async def call():
        async with Client(build_server()) as client:
            return await client.call_tool(
                tool, {"target": "kubernetes", "kubernetes": {"kubeconfig": "kc\x00"}}
            )

    result = anyio.run(call)
    assert json.loads(result.content[0].text)["error"]["code"] == "invalid_input"
