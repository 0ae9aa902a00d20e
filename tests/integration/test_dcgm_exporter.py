"""The NVIDIA DCGM exporter on the Kubernetes stand-in: manage_eks_cluster validate sees
it (and its absence gives auto_fix as the next step), auto_fix applies the vendored
upstream manifest, and the pod doctor reads the exporter's /metrics through the API
server's pod proxy (kmock's, dialling a real HTTP server of this test that serves the
recorded answer of tests/fixtures/dcgm/recorded.py) and names the node with an XID."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from commands.diagnose_training_job import diagnose_training_job
from commands.manage_eks_cluster import manage_eks_cluster
from skills.eks_cluster_manager.components import BY_KEY
from skills.job_doctor.diagnose import diagnose
from skills.kube import dcgm
from tests.fixtures.dcgm.recorded import RECORDED, with_values
from tests.integration.test_diagnose_training_job import FIXTURES, NS, seed
from tests.services import eks_cluster as cluster_seed

pytestmark = pytest.mark.integration

FAULTY = "ip-10-0-1-12.ec2.internal"  # the gpu_hardware_fault fixture's worker-1 node


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    yield kube_api
    kube_api.reset()


# --- validate and auto_fix ----------------------------------------------------------------


def _gpu_operator_exporter() -> dict:
    """The GPU Operator's exporter (as in github.com/linode/lke-ai-conformance's listing:
    nvidia-dcgm-exporter pods in gpu-operator), labelled app=nvidia-dcgm-exporter."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "nvidia-dcgm-exporter"}},
                "spec": {"containers": [{"name": "nvidia-dcgm-exporter",
                                         "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0"
                                                  "-ubuntu22.04"}]},
            }
        },
        "status": {"desiredNumberScheduled": 2, "numberReady": 2},
    }  # fmt: skip


def _absent(kube) -> None:
    del kube.emulator.objects[cluster_seed.DCGM_DS]


def _operators(kube) -> None:
    _absent(kube)
    key = ("apps/v1/daemonsets", "gpu-operator", "nvidia-dcgm-exporter")
    kube.emulator.objects[key] = _gpu_operator_exporter()


def _unready(kube) -> None:
    kube.emulator.objects[cluster_seed.DCGM_DS].patch({"status": {"numberReady": 0}})


@pytest.mark.parametrize(
    ("change", "status", "auto_fix_next"),
    [
        pytest.param(lambda kube: None, "ok", False, id="ours running is seen"),
        pytest.param(_operators, "ok", False, id="the GPU Operator's exporter is seen"),
        pytest.param(_absent, "warning", True, id="no exporter gives auto_fix as the next step"),
        pytest.param(_unready, "warning", False, id="an exporter with no pod ready says so"),
    ],
)
def test_validate_sees_the_dcgm_exporter(kube, change, status, auto_fix_next):
    cluster_seed.seed_healthy(kube)
    change(kube)
    report = manage_eks_cluster(action="validate", kubeconfig=str(kube.kubeconfig))
    (check,) = [c for c in report.checks if c.name == "dcgm_exporter"]
    assert check.status == status, check
    # Training runs without it: nothing else fails, whatever the exporter's state.
    assert {c.status for c in report.checks if c.name != "dcgm_exporter"} == {"ok"}
    if auto_fix_next:
        assert check.fix and "auto_fix" in check.fix and check.component == "dcgm_exporter"
        assert report.next_step is not None
        assert report.next_step.arguments["action"] == "auto_fix"
    else:
        assert report.next_step is None


def test_auto_fix_applies_the_vendored_exporter_manifest(kube):
    cluster_seed.seed_healthy(kube)
    _absent(kube)
    common = {"kubeconfig": str(kube.kubeconfig)}
    applied = manage_eks_cluster(action="auto_fix", confirm=True, **common)
    assert {(p.component, p.kind, p.name, p.namespace, p.action) for p in applied.plan} == {
        ("dcgm_exporter", "DaemonSet", "dcgm-exporter", "kube-system", "applied"),
        ("dcgm_exporter", "Service", "dcgm-exporter", "kube-system", "applied"),
    }
    ds = kube.emulator.objects[cluster_seed.DCGM_DS]
    (ours,) = [o for o in BY_KEY["dcgm_exporter"].manifests() if o["kind"] == "DaemonSet"]
    assert ds["spec"] == ours["spec"]  # upstream's, with upstream.CHANGES' rows only
    cluster_seed.play_controllers(kube)
    report = manage_eks_cluster(action="validate", **common)
    assert {c.status for c in report.checks} == {"ok"}, report.checks
    again = manage_eks_cluster(action="auto_fix", **common)
    assert again.plan == [] and again.summary.startswith("nothing auto_fix can apply")


# --- the doctor -------------------------------------------------------------------------------


@contextlib.contextmanager
def exporter_server(texts: dict[str, str]) -> Iterator[str]:
    """A real HTTP server answering GET /<node>/metrics with that node's text."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            node, _, path = self.path.strip("/").partition("/")
            body = texts.get(node, "").encode()
            self.send_response(200 if path == "metrics" and node in texts else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _exporter_pod(node: str) -> dict:
    """A pod of the DaemonSet auto_fix applies, on `node`, as its controller makes it."""
    (ds,) = [o for o in BY_KEY["dcgm_exporter"].manifests() if o["kind"] == "DaemonSet"]
    template = ds["spec"]["template"]
    name = f"dcgm-exporter-{node.split('.')[0]}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system",
                     "labels": template["metadata"]["labels"]},
        "spec": {**template["spec"], "nodeName": node},
        "status": {"phase": "Running"},
    }  # fmt: skip


def _job_without_other_gpu_evidence(kube) -> dict:
    """The gpu_hardware_fault fixture with every other sign of the XID taken out (the node
    agent's condition and event, the driver's line in the log): only the exporter says."""
    fixture = json.loads((FIXTURES / "gpu_hardware_fault.json").read_text())
    fixture["events"] = []
    for node in fixture["nodes"]:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    fixture["logs"] = {
        pod: "\n".join(line for line in text.splitlines() if "NVRM: Xid" not in line)
        for pod, text in fixture["logs"].items()
    }
    seed(kube, fixture)
    return fixture


def _serve(kube, url: str, nodes: list[str], served: set[str]) -> list[str]:
    """An exporter pod on each node; those in `served` answer at url/<node>/metrics."""
    names = []
    for node in nodes:
        pod = _exporter_pod(node)
        name = pod["metadata"]["name"]
        kube.emulator.objects["v1/pods", "kube-system", name] = pod
        if node in served:
            kube.serve_pod_port("kube-system", name, dcgm.PORT, f"{url}/{node}")
        names.append(name)
    return names


def _proxy_reads(kube) -> list[str]:
    paths = [str(r.url.path) for r in kube.emulator._requests]  # kmock 0.8: no public list
    return [p for p in paths if p.endswith("/proxy/metrics")]


@pytest.mark.parametrize(
    ("faulty_text", "root", "node"),
    [
        pytest.param(with_values(DCGM_FI_DEV_XID_ERRORS=79), "gpu_hardware_fault", FAULTY,
                     id="an XID 79 from the exporter names the node"),
        pytest.param(with_values(DCGM_FI_DEV_ROW_REMAP_FAILURE=1), "gpu_hardware_fault", FAULTY,
                     id="a failed row remap from the exporter names the node"),
        pytest.param(with_values(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=2), "gpu_hardware_fault", FAULTY,
                     id="uncorrectable ECC errors from the exporter name the node"),
        pytest.param(with_values(DCGM_FI_DEV_XID_ERRORS=31), None, None,
                     id="an application XID 31 from the exporter is not blamed on the node"),
        pytest.param(RECORDED, None, None, id="healthy exporters blame no node"),
    ],
)  # fmt: skip
def test_the_doctor_names_a_node_from_its_dcgm_exporter(kube, tmp_path, faulty_text, root, node):
    fixture = _job_without_other_gpu_evidence(kube)
    job_nodes = sorted({p["spec"]["nodeName"] for p in fixture["pods"]})
    stranger = "ip-10-0-9-9.ec2.internal"  # runs an exporter, but none of the job's pods
    texts = {n: RECORDED for n in [*job_nodes, stranger]} | {FAULTY: faulty_text}
    with exporter_server(texts) as url:
        _serve(kube, url, [*job_nodes, stranger], set(texts))
        saved = tmp_path / "snapshot.json"
        result = diagnose_training_job(job_name="xid79", namespace=NS, save_snapshot=str(saved))
    # The saved snapshot keeps the exporter's lines: offline, the same diagnosis.
    assert diagnose_training_job(snapshot=str(saved)).findings == result.findings
    # One read per exporter pod on the job's nodes; the stranger's is not read.
    reads = _proxy_reads(kube)
    assert len(reads) == len(job_nodes) and not [r for r in reads if "ip-10-0-9-9" in r]
    node_faults = [f for f in result.findings if f.fault == "node"]
    if root is None:
        assert not node_faults, node_faults
        return
    assert (result.root.code, result.root.node, result.root.fault) == (root, node, "node")
    assert any("(dcgm-exporter)" in e for e in result.root.evidence), result.root.evidence


def test_an_exporter_that_does_not_answer_is_a_note(kube, tmp_path):
    from skills.kube.access import kube_api_client
    from skills.training_job_deployer.targets.kubernetes.kube_monitor import (
        KubeReader,
        read_snapshot,
    )

    fixture = _job_without_other_gpu_evidence(kube)
    job_nodes = sorted({p["spec"]["nodeName"] for p in fixture["pods"]})
    texts = {FAULTY: with_values(DCGM_FI_DEV_XID_ERRORS=79)}
    with exporter_server(texts) as url:
        names = _serve(kube, url, job_nodes, {FAULTY})
        with kube_api_client() as api:
            snapshot = read_snapshot(KubeReader(api, NS), "xid79")
    assert list(snapshot["gpu_metrics"]) == [FAULTY]
    silent = [n for n, node in zip(names, job_nodes, strict=True) if node != FAULTY]
    assert len(snapshot["gpu_notes"]) == len(silent)
    for note, name in zip(snapshot["gpu_notes"], silent, strict=True):
        assert name in note and "did not answer: HTTP 503" in note
    # The diagnosis says so, and still names the node the exporter that answered blames.
    diagnosis = diagnose(snapshot)
    assert diagnosis.gpu_notes == snapshot["gpu_notes"]
    assert (diagnosis.root.code, diagnosis.root.node) == ("gpu_hardware_fault", FAULTY)


def test_describe_shows_each_nodes_gpu_trouble_from_its_exporter(kube):
    cluster_seed.seed_healthy(kube)  # gpu-0, gpu-1 (p4d) and system-0 (m5)
    texts = {"gpu-0": RECORDED, "gpu-1": with_values(DCGM_FI_DEV_XID_ERRORS=79)}
    with exporter_server(texts) as url:
        _serve(kube, url, ["gpu-0", "gpu-1"], set(texts))
        report = manage_eks_cluster(action="describe", kubeconfig=str(kube.kubeconfig))
    health = {n.name: n.gpu_health for n in report.nodes}
    assert health == {
        "gpu-0": [],  # read: no trouble
        "gpu-1": ["DCGM_FI_DEV_XID_ERRORS 79 on GPU 0 of node gpu-1 "
                  "(Hostname lke529760-766837-0a634ab30000) (dcgm-exporter)"],
        "system-0": None,  # no exporter there: not read
    }  # fmt: skip
    assert "DCGM exporter read on 2 node(s), 1 with GPUs in trouble: gpu-1" in report.summary
    assert len(_proxy_reads(kube)) == 2


def test_exporters_are_read_a_few_at_a_time_and_a_slow_one_is_a_note(kube, monkeypatch):
    """Six exporters, each answering in 0.3 s: READS_AT_ONCE in flight at most (more
    than one); one that answers after the read timeout is a note after one read (not
    retried), the others are read."""
    from skills.kube.access import kube_api_client
    from skills.kube.client import KubeJson

    monkeypatch.setattr(dcgm, "READ_TIMEOUT", (2, 1))  # the bound, shortened for the test
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            with lock:
                state["now"] += 1
                state["peak"] = max(state["peak"], state["now"])
            time.sleep(3 if self.path.startswith("/n5/") else 0.3)
            with lock:
                state["now"] -= 1
            body = with_values(DCGM_FI_DEV_XID_ERRORS=79).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    nodes = [f"n{i}" for i in range(6)]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _serve(kube, f"http://127.0.0.1:{server.server_address[1]}", nodes, set(nodes))
        with kube_api_client() as api:
            evidence, notes = dcgm.node_evidence(KubeJson(api), nodes)
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(evidence) == nodes[:5]
    assert all(len(lines) == 1 and "XID_ERRORS 79" in lines[0] for lines in evidence.values())
    assert len(notes) == 1 and "on node n5 did not answer: no answer within 3 s" in notes[0]
    assert len(_proxy_reads(kube)) == len(nodes)  # the slow one too: read once, not retried
    assert 1 < state["peak"] <= dcgm.READS_AT_ONCE
