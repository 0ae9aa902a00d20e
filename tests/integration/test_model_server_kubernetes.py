"""The Kubernetes model-server target (vLLM Deployment + Service) against kmock.

kmock runs no controllers, so the test plays them (as tests play the Training Operator):
`DeploymentController` moves the Deployment's status to Ready through the API (the
target's `sleep` between polls is its turn), and for a LoadBalancer Service publishes the
load balancer's address, as the AWS Load Balancer Controller would. No vLLM runs here:
it needs a CUDA GPU and the vllm package, and this host has neither, so unlike the
training jobs' pods (tests/services/kubelet.py runs their containers for real) the
Deployment's `vllm serve` command is not run; the smoke request goes to a STAND-IN
OpenAI-compatible endpoint this test serves on 127.0.0.1 (`StandInOpenAI`), either
straight (the LoadBalancer address) or through the API server's service proxy path,
which kmock answers by forwarding to the stand-in. (The local target's `transformers
serve` path runs for real: test_model_server_local.py.)"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes_validate
import pytest

from skills.model_server.kubernetes.settings import VLLM_IMAGE, KubernetesServerSettings
from skills.model_server.kubernetes.target import KubernetesServerTarget
from skills.shared.errors import ToolFailure
from skills.shared.ownership import MANAGED_BY_LABEL, MODEL_SERVER_LABEL
from skills.shared.progress import CollectingProgress
from tests.services._common import serving

pytestmark = pytest.mark.integration

CANARY = "hf_" + "CanaryToken" * 3
DEPLOYMENTS = "apps/v1/deployments"


class StandInOpenAI:
    """A stand-in for vLLM's OpenAI server: /v1/models lists `served`, chat answers."""

    def __init__(self, served: str) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                stand_in.requests.append(("GET", self.path, None))
                self._answer({"object": "list", "data": [{"id": served, "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.requests.append(("POST", self.path, body))
                message = {"role": "assistant", "content": f"Hello from {body['model']}."}
                self._answer({"object": "chat.completion", "choices": [{"message": message}]})

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
                pass  # quiet

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]


@contextlib.contextmanager
def stand_in_openai(served: str) -> Iterator[StandInOpenAI]:
    """A StandInOpenAI answering until the block ends."""
    stand_in = StandInOpenAI(served)
    with serving(stand_in.server):
        yield stand_in


class DeploymentController:
    """Plays the Deployment controller (and the cloud's load balancer controller) on
    kmock through the API: each turn moves the rollout one step to Ready."""

    def __init__(self, kube, name: str, namespace: str = "default") -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(str(kube.kubeconfig), client_configuration=configuration)
        api = client.ApiClient(configuration)
        self.apps, self.core = client.AppsV1Api(api), client.CoreV1Api(api)
        self.name, self.namespace, self.turns = name, namespace, 0

    def turn(self, _seconds: float = 0) -> None:
        self.turns += 1
        deployment: Any = self.apps.read_namespaced_deployment(self.name, self.namespace)
        wanted = deployment.spec.replicas
        ready = 0 if self.turns == 1 else wanted  # first turn: pods created, not ready yet
        status = {
            "observedGeneration": deployment.metadata.generation,
            "replicas": wanted,
            "updatedReplicas": wanted,
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        self.apps.patch_namespaced_deployment_status(self.name, self.namespace, {"status": status})
        service: Any = self.core.read_namespaced_service(self.name, self.namespace)
        if service.spec.type == "LoadBalancer":
            ingress = {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}
            self.core.patch_namespaced_service_status(
                self.name, self.namespace, {"status": ingress}
            )


def add_load_balancer_controller(kube) -> None:
    """The AWS Load Balancer Controller's Deployment, as its Helm chart installs it."""
    kube.emulator.objects[DEPLOYMENTS, "kube-system", "aws-load-balancer-controller"] = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "aws-load-balancer-controller", "namespace": "kube-system"},
        "spec": {"replicas": 2}, "status": {"readyReplicas": 2},
    }  # fmt: skip


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    return kube_api


@pytest.fixture
def lb_kube(kube):
    add_load_balancer_controller(kube)
    return kube


@pytest.fixture
def stand_in():
    with stand_in_openai("demo") as server:
        yield server


def settings(**kwargs) -> KubernetesServerSettings:
    return KubernetesServerSettings(**kwargs)


def s3_identity(kube, bucket: str) -> None:
    """The ServiceAccount manage_eks_cluster action=storage makes for the bucket (an s3://
    model is fetched as it; tests/integration/test_pod_s3_identity.py makes it for real)."""
    from skills.eks_cluster_manager.pod_identity import service_account

    kube.emulator.objects["v1/serviceaccounts", "default", "fsdp-eks-s3"] = service_account(
        "default", bucket, None
    )


def forward_proxy(kube, stand_in: StandInOpenAI, name: str, port: int) -> None:
    """kmock answers the API server's service proxy path by forwarding to the stand-in,
    as a real API server forwards to the Service's pods."""

    def forward(request) -> Any:
        path = request.url.path.split("/proxy", 1)[1]
        method = str(getattr(request.method, "value", request.method)).upper()
        data = json.dumps(request.data).encode() if method == "POST" else None
        outgoing = urllib.request.Request(
            f"http://127.0.0.1:{stand_in.port}{path}", data=data, method=method
        )
        outgoing.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(outgoing, timeout=10) as response:
            return json.loads(response.read())

    prefix = f"/api/v1/namespaces/default/services/{name}:{port}/proxy"
    _ = kube.emulator[f"get {prefix}/v1/models"] << forward
    _ = kube.emulator[f"post {prefix}/v1/chat/completions"] << forward


def stored(kube, what: str) -> dict:
    """An object as the API serves it."""
    group = "/apis/apps/v1" if what.startswith("deployments") else "/api/v1"
    with urllib.request.urlopen(f"{kube.url}{group}/namespaces/default/{what}") as response:
        return json.loads(response.read())


# --- plan: the objects, the schema, the model sources --------------------------------------


@pytest.mark.parametrize(
    ("model", "options", "source"),
    [
        ("s3://demo-bucket/runs/demo/export", {}, "s3"),
        ("s3://demo-bucket/runs/demo/export", {"model_claim": "fsx-claim"}, "s3-cached"),
        ("exports/demo", {"model_claim": "fsx-claim"}, "pvc"),
        ("meta-llama/Llama-3.1-8B-Instruct", {"hf_token_secret": "hf-token"}, "hub"),
    ],
)
def test_plan_renders_schema_valid_objects_for_each_model_source(model, options, source):
    plan = KubernetesServerTarget().plan(
        "demo", model, settings(replicas=2, max_model_len=4096, dtype="bfloat16", **options)
    )  # instance_type: the default, g5.12xlarge
    deployment, service = plan.objects
    for obj in plan.objects:  # strict: an unknown field fails too
        kubernetes_validate.validate(obj, "1.30", strict=True)
        kubernetes_validate.validate(obj, "1.33", strict=True)
        assert obj["metadata"]["labels"] == {
            MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1],
            MODEL_SERVER_LABEL: "demo",
        }
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    assert deployment["spec"]["replicas"] == 2
    vllm = deployment["spec"]["template"]["spec"]["containers"][0]
    assert vllm["image"] == VLLM_IMAGE and ":latest" not in VLLM_IMAGE
    assert vllm["resources"]["limits"] == {"nvidia.com/gpu": "4"}  # g5.12xlarge: 4 A10G
    # Most of the node's 48 vCPUs / 192 GiB (catalogue): Burstable, not BestEffort.
    assert vllm["resources"]["requests"] == {"nvidia.com/gpu": "4", "cpu": "38",
                                             "memory": "153Gi"}  # fmt: skip
    # The rollout's deadline covers the startup probe's whole budget (and pull + copy).
    startup = vllm["startupProbe"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert deployment["spec"]["progressDeadlineSeconds"] > budget >= 1800
    assert vllm["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    command = vllm["command"]
    assert command[command.index("--tensor-parallel-size") + 1] == "4"
    assert command[command.index("--max-model-len") + 1] == "4096"
    assert command[command.index("--dtype") + 1] == "bfloat16"
    assert vllm["readinessProbe"]["httpGet"]["path"] == "/health"
    assert plan.argv == command
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    # Downloaded weights never fill an unbounded emptyDir: 4 x 22 GiB of GPU memory.
    bounded = {"name": "model", "emptyDir": {"sizeLimit": "88Gi"}}
    if source == "s3":
        (fetch,) = pod["initContainers"]
        assert fetch["command"][:3] == ["aws", "s3", "sync"]
        assert "s3://demo-bucket/runs/demo/export/" in fetch["command"]
        assert volumes["model"] == bounded
        assert command[2] == "/models/model"
    elif source == "s3-cached":  # synced into a cache on the claim: the next pod reuses it
        (fetch,) = pod["initContainers"]
        cache = "/models/.fsdp-eks-cache/demo-bucket/runs/demo/export"
        assert fetch["command"][-2:] == ["s3://demo-bucket/runs/demo/export/", cache]
        assert volumes["model"]["persistentVolumeClaim"] == {
            "claimName": "fsx-claim", "readOnly": False}  # fmt: skip
        assert command[2] == cache
    elif source == "pvc":
        assert volumes["model"]["persistentVolumeClaim"] == {
            "claimName": "fsx-claim", "readOnly": True}  # fmt: skip
        assert command[2] == "/models/exports/demo" and "initContainers" not in pod
    else:  # the Hub download lands in HF_HOME on the bounded emptyDir
        assert command[2] == model and volumes["model"] == bounded
        assert {"name": "HF_HOME", "value": "/models/hf"} in vllm["env"]
        (token,) = [e for e in vllm["env"] if e["name"] == "HF_TOKEN"]
        assert token["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}
    assert service["spec"]["selector"] == {MODEL_SERVER_LABEL: "demo"}


def test_a_local_path_or_a_bad_name_is_a_typed_error(tmp_path):
    target = KubernetesServerTarget()
    export = tmp_path / "export"
    export.mkdir()
    for name, model in (("demo", str(export)), ("demo", "runs/demo/export"),
                        ("Demo_1", "s3://b-1/x"), ("demo", "s3://B/x")):  # fmt: skip
        with pytest.raises(ToolFailure) as caught:
            target.plan(name, model, settings())
        assert caught.value.code == "invalid_input" and caught.value.hint
    with pytest.raises(ToolFailure) as caught:
        target.plan("demo", "s3://b-1/x", settings(instance_type="m5.large"))
    assert caught.value.code == "invalid_input"


# --- deploy: rollout to Ready, smoke request, the token ---------------------------------------


def test_deploy_follows_the_rollout_and_smoke_tests_through_the_load_balancer(
    kube, lb_kube, stand_in
):
    config = settings(replicas=2, port=stand_in.port, service_type="LoadBalancer",
                      hf_token_secret="hf-token")  # fmt: skip
    controller = DeploymentController(kube, "demo")
    target = KubernetesServerTarget(poll_seconds=0, sleep=controller.turn)
    plan = target.plan("demo", "org/tiny-model", config)
    progress = CollectingProgress()
    state = target.deploy(plan, config, progress, wait_seconds=60)

    assert state.status == "ready", state.message
    assert (state.replicas, state.ready_replicas) == (2, 2)
    assert state.endpoint == f"http://127.0.0.1:{stand_in.port}"
    assert state.curl == f"curl -s {state.endpoint}/v1/models"
    assert state.smoke == "Hello from demo."
    methods = [(m, p) for m, p, _ in stand_in.requests]
    assert methods == [("GET", "/v1/models"), ("POST", "/v1/chat/completions")]
    assert stand_in.requests[1][2]["model"] == "demo"
    assert [e.message for e in progress.events][-1] == "2/2 replicas ready."
    # The applied objects are exactly the plan's.
    stored = kube.emulator.objects[DEPLOYMENTS, "default", "demo"]
    assert stored["spec"]["template"] == plan.objects[0]["spec"]["template"]
    # The rollout took two controller turns: the measure for the closing note.
    assert controller.turns == 2
    print(f"rollout-to-ready: {target.kube.calls if target.kube else 0} API calls: "
          f"{target.kube.paths if target.kube else []}")  # fmt: skip


def test_deploy_through_the_api_server_proxy_for_a_cluster_ip_service(kube, stand_in):
    config = settings(port=8000)
    s3_identity(kube, "demo-bucket")
    forward_proxy(kube, stand_in, "demo", 8000)
    controller = DeploymentController(kube, "demo")
    target = KubernetesServerTarget(poll_seconds=0, sleep=controller.turn)
    state = target.deploy(target.plan("demo", "s3://demo-bucket/export", config), config,
                          CollectingProgress(), wait_seconds=60)  # fmt: skip
    assert state.status == "ready", state.message
    proxy = "/api/v1/namespaces/default/services/demo:8000/proxy"
    assert state.endpoint == kube.url + proxy
    assert state.curl == f"kubectl -n default get --raw {proxy}/v1/models"
    assert state.smoke == "Hello from demo."
    assert [p for _, p, _ in stand_in.requests] == ["/v1/models", "/v1/chat/completions"]
    calls = target.kube.calls if target.kube else 0
    print(f"rollout-to-ready + smoke via proxy: {calls} API calls")


def test_a_server_that_does_not_list_its_model_fails_the_smoke_test(kube, lb_kube):
    # the stand-in serves the wrong name
    with stand_in_openai("some-other-model") as stand_in:
        config = settings(port=stand_in.port, service_type="LoadBalancer")
        controller = DeploymentController(kube, "demo")
        target = KubernetesServerTarget(poll_seconds=0, sleep=controller.turn)
        state = target.deploy(
            target.plan("demo", "org/m", config), config, CollectingProgress(), 60
        )
    assert state.status == "failed" and "smoke request failed" in state.message
    assert state.smoke is None and [p for _, p, _ in stand_in.requests] == ["/v1/models"]


def test_a_rollout_past_its_deadline_fails_without_a_smoke_request(kube, lb_kube, stand_in):
    config = settings(port=stand_in.port, service_type="LoadBalancer")
    controller = DeploymentController(kube, "demo")

    def stuck(_seconds: float) -> None:  # the controller gives up: pods never get ready
        condition = {"type": "Progressing", "status": "False",
                     "reason": "ProgressDeadlineExceeded", "message": "demo timed out"}  # fmt: skip
        controller.apps.patch_namespaced_deployment_status(
            "demo", "default", {"status": {"observedGeneration": 1, "conditions": [condition]}}
        )

    target = KubernetesServerTarget(poll_seconds=0, sleep=stuck)
    state = target.deploy(target.plan("demo", "org/m", config), config, CollectingProgress(), 60)
    assert (state.status, state.message) == ("failed", "Rollout failed: demo timed out")
    assert stand_in.requests == []


def test_wait_zero_returns_starting_with_the_next_step(kube):
    config = settings()
    target = KubernetesServerTarget(poll_seconds=0)
    state = target.deploy(target.plan("demo", "org/m", config), config, CollectingProgress(), 0)
    assert state.status == "starting" and state.ready_replicas == 0
    assert state.next_step is not None and state.next_step.tool == "get_model_server"
    assert state.next_step.arguments["name"] == "demo"
    assert state.message == "0/1 replicas ready."  # no pods yet: nothing else to say

    # The kubelet cannot start the container: the Secret is missing. get says so.
    kube.emulator.objects["v1/pods", "default", "demo-7d4b9-x2k"] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "demo-7d4b9-x2k", "namespace": "default",
                     "labels": {MODEL_SERVER_LABEL: "demo"}},
        "status": {"phase": "Pending", "containerStatuses": [{"name": "vllm", "state": {
            "waiting": {"reason": "CreateContainerConfigError",
                        "message": 'secret "hf-token" not found'}}}]},
    }  # fmt: skip
    found = target.get("demo", config)
    assert found.status == "starting"
    assert found.message == (
        "0/1 replicas ready. Pod demo-7d4b9-x2k container vllm: CreateContainerConfigError: "
        'secret "hf-token" not found'
    )


def test_the_hf_token_is_only_a_secret_reference(kube, lb_kube, stand_in, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", CANARY)
    config = settings(port=stand_in.port, service_type="LoadBalancer", hf_token_secret="hf")
    controller = DeploymentController(kube, "demo")
    target = KubernetesServerTarget(poll_seconds=0, sleep=controller.turn)
    plan = target.plan("demo", "org/private-model", config)
    state = target.deploy(plan, config, CollectingProgress(), 60)
    assert state.status == "ready"
    listed = target.list(config).items
    objects = [stored(kube, "deployments/demo"), stored(kube, "services/demo")]
    results = [plan.model_dump(), state.model_dump(), [s.model_dump() for s in listed]]
    seen = json.dumps([*results, *objects])
    assert CANARY not in seen
    assert '"secretKeyRef": {"name": "hf", "key": "token"}' in seen


# --- get, list, scale, delete ------------------------------------------------------------------


def test_get_list_scale_and_an_idempotent_delete(kube):
    config = settings(replicas=1)
    target = KubernetesServerTarget(poll_seconds=0)
    for name in ("alpha", "beta"):
        target.deploy(target.plan(name, "org/m", config), config, CollectingProgress(), 0)
    # Not ours: no model-server label.
    s3_identity(kube, "b-1")
    _ = target.deploy(target.plan("gamma", "s3://b-1/x", config), config, CollectingProgress(), 0)
    assert target.get("gamma", config).model == "s3://b-1/x"  # as given, not the pod's path
    assert target.delete("gamma", config).status == "deleted"
    kube.emulator.objects[DEPLOYMENTS, "default", "other"] = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "other", "namespace": "default", "labels": {"app": "x"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }  # fmt: skip
    assert [s.name for s in target.list(config).items] == ["alpha", "beta"]

    state = target.get("alpha", config)
    assert (state.status, state.replicas, state.model) == ("starting", 1, "org/m")

    scaled = target.scale("alpha", 3, config)
    assert scaled.replicas == 3
    assert kube.emulator.objects[DEPLOYMENTS, "default", "alpha"]["spec"]["replicas"] == 3
    assert target.scale("alpha", 0, config).status == "stopped"

    first = target.delete("alpha", config)
    assert (first.status, first.message) == ("deleted", "Deleted Deployment and Service.")
    again = target.delete("alpha", config)
    assert (again.status, again.message) == ("deleted", "Nothing to delete.")
    assert [s.name for s in target.list(config).items] == ["beta"]
    for call in (lambda: target.get("alpha", config), lambda: target.scale("alpha", 2, config)):
        with pytest.raises(ToolFailure) as caught:
            call()
        assert caught.value.code == "not_found" and caught.value.hint


def test_a_load_balancer_without_its_controller_is_refused_before_anything_is_applied(kube):
    config = settings(service_type="LoadBalancer")
    target = KubernetesServerTarget(poll_seconds=0)
    with pytest.raises(ToolFailure) as caught:
        target.deploy(target.plan("demo", "org/m", config), config, CollectingProgress(), 0)
    failure = caught.value
    assert failure.code == "load_balancer_controller_missing"
    assert "helm install aws-load-balancer-controller eks/aws-load-balancer-controller" in (
        failure.hint
    )
    assert "clusterName=<cluster>" in failure.hint and "ClusterIP" in failure.hint
    assert (DEPLOYMENTS, "default", "demo") not in kube.emulator.objects
    # With the controller installed, the same call applies.
    add_load_balancer_controller(kube)
    state = target.deploy(target.plan("demo", "org/m", config), config, CollectingProgress(), 0)
    assert state.status == "starting"


def test_a_list_page_costs_two_requests_whatever_the_servers(kube):
    """list_model_servers pages (limit, cursor): one LIST of Deployments and one of
    Services a page, never a GET per server, at 3 servers as at 48."""
    from commands.list_model_servers import list_model_servers
    from skills.model_server.kubernetes.manifest import labels
    from skills.shared.paging import after_name

    costs = []
    for total in (3, 48):
        for i in range(total):
            name = f"srv-{i:02d}"
            meta = {"name": name, "namespace": "default", "labels": labels(name)}
            kube.emulator.objects[DEPLOYMENTS, "default", name] = {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}},
                "status": {"readyReplicas": 1, "replicas": 1, "updatedReplicas": 1},
            }  # fmt: skip
            kube.emulator.objects["v1/services", "default", name] = {
                "apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {"type": "ClusterIP", "ports": [{"port": 8000}]},
            }  # fmt: skip
        before = len(kube.emulator._requests)
        page = list_model_servers(target="kubernetes", limit=2, cursor=after_name("srv-00"))
        costs.append(len(kube.emulator._requests) - before)
        assert [s.name for s in page.servers] == ["srv-01", "srv-02"]
        assert page.more == total - 3 and (page.next_cursor is not None) == (total > 3)
        assert all(s.endpoint and s.endpoint.endswith(":8000/proxy") for s in page.servers)
    assert costs == [2, 2]
