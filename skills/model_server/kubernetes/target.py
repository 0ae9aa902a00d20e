"""vLLM on Kubernetes: plan renders the Deployment + Service (manifest.py), deploy applies
exactly those objects (server-side apply) through the one Kubernetes client, follows the
rollout to Ready, then smoke-tests the OpenAI endpoint.

How a tool outside the cluster reaches the server (the smoke request and `endpoint`):
  * service_type=LoadBalancer: the Service's load balancer address once the cloud has
    published it (status.loadBalancer.ingress), http://<host>:<port>. It is an internal
    load balancer: this works from inside the VPC (a VPN, a bastion, CI in the VPC).
  * otherwise (ClusterIP): the Kubernetes API server's service proxy,
    <api>/api/v1/namespaces/<ns>/services/<name>:<port>/proxy, through the same
    authenticated client: no port-forward process, nothing exposed. A person uses
    `kubectl get --raw` on the same path (the `curl` line) or a port-forward.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, ClassVar

from skills.catalog.pricing import Billing
from skills.cloud.clients import env_region
from skills.kube import load_balancer, namespaces
from skills.kube.client import UNREAD, KubeJson
from skills.kube.identity import MAKE_IT, S3_SERVICE_ACCOUNT
from skills.kube.objects import kind_path
from skills.kube.pods import why_pod_waits
from skills.model_server.base import ServerPlan, ServerState, ServerTarget, smoke_chat
from skills.model_server.kubernetes.manifest import (
    MODEL_ANNOTATION,
    PROGRESS_DEADLINE_S,
    check_name,
    exposure_warnings,
    render,
)
from skills.model_server.kubernetes.settings import (
    DEFAULT_PORT,
    KubernetesServerAccess,
    KubernetesServerSettings,
)
from skills.shared.confirm import require_confirm
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.ownership import (
    MANAGED_SELECTOR,
    MODEL_SERVER_LABEL,
    require_kube_ours,
    why_not_ours_kube,
)
from skills.shared.paging import Key, Page, keyset_stream
from skills.shared.progress import Progress

DEFAULT_WAIT_S = PROGRESS_DEADLINE_S  # as long as the rollout itself may take
SMOKE_TIMEOUT_S = 60.0


def rollout(deployment: dict[str, Any]) -> tuple[int, int, str | None]:
    """(wanted, ready, failure) of a Deployment as its controller reports it: ready counts
    only once the controller has seen the current spec (observedGeneration)."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))
    generation = (deployment.get("metadata") or {}).get("generation")
    seen = status.get("observedGeneration")
    current = generation is None or (seen is not None and seen >= generation)
    ready = min(int(status.get("readyReplicas") or 0), int(status.get("updatedReplicas") or 0))
    failure = None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == (
            "ProgressDeadlineExceeded"
        ):
            failure = condition.get("message") or "the rollout passed its progress deadline"
    return wanted, ready if current else 0, failure


def waiting_reason(pods: list[dict[str, Any]], name: str) -> str | None:
    """The first thing a server's pod waits for that is not routine, in one line."""
    for pod in pods:
        if ((pod.get("metadata") or {}).get("labels") or {}).get(MODEL_SERVER_LABEL) != name:
            continue  # the selector is the server's optimisation; check it here too
        if reason := why_pod_waits(pod):
            return reason
    return None


class KubernetesServerTarget(ServerTarget[KubernetesServerSettings, KubernetesServerAccess]):
    name: ClassVar[str] = "kubernetes"

    def __init__(
        self,
        poll_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.sleep = sleep
        self.kube: KubeJson | None = None  # the last client: `calls` measures a deploy

    def _client(self, settings: KubernetesServerAccess) -> KubeJson:
        self.kube = KubeJson(settings.api_client())
        return self.kube

    # plan / deploy ------------------------------------------------------------------------

    def plan(self, name: str, model: str, settings: KubernetesServerSettings) -> ServerPlan:
        objects = render(name, model, settings)
        container = objects[0]["spec"]["template"]["spec"]["containers"][0]
        if settings.namespace not in namespaces.ALWAYS_THERE:  # created by deploy if missing
            objects.insert(0, namespaces.namespace_object(settings.namespace))
        return ServerPlan(
            name=name,
            model=model,
            target=self.name,
            objects=objects,
            argv=container["command"],
            warnings=exposure_warnings(settings),
        )

    def deploy(
        self,
        plan: ServerPlan,
        settings: KubernetesServerSettings,
        progress: Progress,
        wait_seconds: float | None,
    ) -> ServerState:
        self.require_startable(settings)
        kube = self._client(settings)
        instead = "deploy it under another name"
        found = self._ours(kube, plan.name, settings, instead)  # before any write
        if settings.service_type == "LoadBalancer":
            self._require_load_balancer_controller(kube, settings)
        deployment = next(o for o in plan.objects if o["kind"] == "Deployment")
        _require_s3_identity(kube, deployment)
        for obj in plan.objects:  # exactly the plan, each object checked at its write
            if obj["kind"] == "Namespace":  # created when missing, never applied over
                namespaces.ensure(kube, obj["metadata"]["name"])
                continue
            kube.apply_owned(
                obj,
                f"It is not a model server of this suite's: {instead}.",
                label=MODEL_SERVER_LABEL,
                value=plan.name,
                current=found.get(obj["kind"], UNREAD),
            )
        progress.report(0, None, f"applied Deployment and Service {plan.name}")
        wait = DEFAULT_WAIT_S if wait_seconds is None else wait_seconds
        state = self._follow(kube, plan.name, settings, progress, wait)
        if state.status != "ready":
            return state
        return self._smoke(kube, state, _api_key(kube, settings))

    def require_startable(self, settings: KubernetesServerSettings) -> None:
        """expose=internet only with confirm: the warning is the question asked."""
        if settings.expose == "internet":
            require_confirm(
                settings.confirm,
                " ".join(exposure_warnings(settings)),
                "to serve it on the internet",
                {"expose": "internet", "source_ranges": settings.source_ranges},
            )

    @staticmethod
    def _require_load_balancer_controller(
        kube: KubeJson, settings: KubernetesServerSettings
    ) -> None:
        """Refused before anything is applied: without the controller the Service never
        gets an address and the deploy would wait for it in vain."""
        if load_balancer.controllers(kube.items(kind_path("Deployment"))):
            return
        raise ToolFailure(
            ErrorCode.LOAD_BALANCER_CONTROLLER_MISSING,
            f"service_type=LoadBalancer needs the AWS Load Balancer Controller; the cluster "
            f"has no Deployment {load_balancer.CONTROLLER}.",
            load_balancer.install_hint(settings.cluster_name),
            {"service_type": "LoadBalancer", "missing": load_balancer.CONTROLLER},
        )

    def _follow(
        self,
        kube: KubeJson,
        name: str,
        settings: KubernetesServerSettings,
        progress: Progress,
        wait: float,
    ) -> ServerState:
        deadline = self.clock() + wait
        while True:
            state = self._state(kube, name, settings)
            wanted = state.replicas or 0
            progress.report(state.ready_replicas or 0, wanted or None, state.message)
            if state.status in ("ready", "failed", "stopped"):
                return state
            if self.clock() >= deadline:
                return self._with_waiting_reason(kube, state, settings)
            self.sleep(self.poll_seconds)

    # the endpoint and its smoke test -------------------------------------------------------

    @staticmethod
    def _proxy_path(settings: KubernetesServerAccess, name: str, port: int) -> str:
        return kind_path("Service", settings.namespace, name) + f":{port}/proxy"

    def _endpoint(
        self, kube: KubeJson, service: dict[str, Any] | None, name: str, settings: Any
    ) -> tuple[str | None, str | None]:
        """(base URL, curl line); a LoadBalancer whose address is not published yet has none."""
        if service is None:
            return None, None
        port = _service_port(service)
        if (service.get("spec") or {}).get("type") == "LoadBalancer":
            ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
            if not ingress:
                return None, None
            host = ingress[0].get("hostname") or ingress[0].get("ip")
            base = f"http://{host}:{port}"
            return base, f"curl -s {base}/v1/models"
        path = self._proxy_path(settings, name, port)
        return kube.host.rstrip("/") + path, (
            f"kubectl -n {settings.namespace} get --raw {path}/v1/models"
        )

    @staticmethod
    def _call(
        kube: KubeJson,
        base: str,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> Any:
        """One request to the server: through the API server's proxy when `base` is it
        (the client adds the cluster's credentials), else plain HTTP to the load balancer
        (with the server's API key, when it has one)."""
        host = kube.host.rstrip("/")
        if base.startswith(host + "/"):  # the endpoint _endpoint made: the service proxy
            return kube.json(method, base[len(host) :] + path, body=body)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        with urllib.request.urlopen(request, timeout=SMOKE_TIMEOUT_S) as response:  # noqa: S310
            return json.loads(response.read())

    def _smoke(self, kube: KubeJson, state: ServerState, key: str | None = None) -> ServerState:
        """GET /v1/models (the served name is listed), then one chat completion (with the
        API key `key`, when the server has one)."""
        if state.endpoint is None:
            return state.model_copy(
                update={"message": "Ready; the load balancer has no address yet: no smoke."}
            )
        if key and state.endpoint.startswith(kube.host.rstrip("/") + "/"):
            # The API server's proxy takes its own Authorization header, not the server's.
            return state.model_copy(
                update={
                    "message": "Ready; /v1 needs the API key, which the API server's "
                    "proxy cannot pass: no smoke (a port-forward with the key can)."
                }
            )
        name = state.name
        try:
            models = self._call(kube, state.endpoint, "GET", "/v1/models", key=key)
            ids = [m.get("id") for m in (models or {}).get("data") or []]
            if name not in ids:
                raise ValueError(f"/v1/models lists {ids}, not {name!r}")
            body = smoke_chat(name)
            answer = self._call(kube, state.endpoint, "POST", "/v1/chat/completions", body, key=key)
            text = answer["choices"][0]["message"]["content"]
        except ToolFailure:
            raise
        except Exception as exc:  # urllib, the client's ApiException, a malformed answer
            return state.model_copy(
                update={
                    "status": "failed",
                    "message": f"Ready, but the smoke request failed: {type(exc).__name__}: "
                    f"{str(exc)[:300]}",
                }
            )
        return state.model_copy(
            update={"smoke": str(text)[:200], "message": f"Ready; answered {len(ids)} model(s)."}
        )

    def billing(self, settings: KubernetesServerSettings) -> Billing:
        # One node of instance_type per replica (each pod asks all of its GPUs).
        return Billing(settings.instance_type, settings.replicas, settings.region or env_region())

    # get / list / delete / scale -------------------------------------------------------------

    def _state(self, kube: KubeJson, name: str, settings: KubernetesServerAccess) -> ServerState:
        deployment = kube.get_or_none(kind_path("Deployment", settings.namespace, name))
        if deployment is None:
            raise ToolFailure(
                ErrorCode.NOT_FOUND,
                f"No model server {name!r} in namespace {settings.namespace!r}.",
                "List them with list_model_servers, or deploy it with deploy_model_server.",
                {"name": name, "namespace": settings.namespace},
            )
        require_kube_ours(  # coredns is not a model server to report (nor to scale)
            deployment,
            "Deployment",
            f"{settings.namespace}/{name}",
            "It is not a model server of this suite's: list_model_servers lists those.",
            label=MODEL_SERVER_LABEL,
            value=name,
            namespace=settings.namespace,
        )
        return self._describe(kube, deployment, settings, _service(kube, deployment, settings))

    def _describe(
        self,
        kube: KubeJson,
        deployment: dict[str, Any],
        settings: KubernetesServerAccess,
        service: dict[str, Any] | None,
    ) -> ServerState:
        """The server's state from its Deployment and its Service (None: it has none)."""
        name = deployment["metadata"]["name"]
        wanted, ready, failure = rollout(deployment)
        endpoint, curl = self._endpoint(kube, service, name, settings)
        if curl and curl.startswith("curl ") and _has_api_key(deployment):
            curl = curl.replace("curl ", 'curl -H "Authorization: Bearer $VLLM_API_KEY" ', 1)
        model = ((deployment.get("metadata") or {}).get("annotations") or {}).get(
            MODEL_ANNOTATION, ""
        )
        if failure:
            status, message = "failed", f"Rollout failed: {failure}"
        elif wanted == 0:
            status, message = "stopped", "Scaled to 0 replicas."
        elif ready >= wanted:
            status, message = "ready", f"{ready}/{wanted} replicas ready."
        else:
            status, message = "starting", f"{ready}/{wanted} replicas ready."
        next_step = None
        if status == "starting":
            next_step = NextStep(
                tool="get_model_server",
                arguments={"name": name, **_access(settings)},
                why="Follow the rollout until every replica is ready.",
            )
        return ServerState(
            name=name,
            target=self.name,
            status=status,
            model=model,
            endpoint=endpoint,
            replicas=wanted,
            ready_replicas=ready,
            curl=curl,
            message=message,
            next_step=next_step,
        )

    def _with_waiting_reason(
        self, kube: KubeJson, state: ServerState, settings: KubernetesServerAccess
    ) -> ServerState:
        """A starting server's message says what its pods wait for (an image pull, a
        missing Secret, no node with free GPUs), read from the pods' own statuses."""
        if state.status != "starting":
            return state
        reason = waiting_reason(
            kube.items(
                kind_path("Pod", settings.namespace),
                {"labelSelector": f"{MODEL_SERVER_LABEL}={state.name}"},
            ),
            state.name,
        )
        if reason is None:
            return state
        return state.model_copy(update={"message": f"{state.message} {reason}"})

    @staticmethod
    def _ours(
        kube: KubeJson, name: str, settings: KubernetesServerAccess, instead: str
    ) -> dict[str, dict[str, Any] | None]:
        """The server's Deployment and Service as the cluster has them (None: missing),
        each one this suite's model server `name` in this namespace; one of that name
        that is not (coredns, someone's web) is refused as `not_ours`, untouched."""
        found: dict[str, dict[str, Any] | None] = {}
        for kind, path in (
            ("Deployment", kind_path("Deployment", settings.namespace, name)),
            ("Service", kind_path("Service", settings.namespace, name)),
        ):
            found[kind] = obj = kube.get_or_none(path)
            require_kube_ours(
                obj,
                kind,
                f"{settings.namespace}/{name}",
                f"It is not a model server of this suite's: {instead}, or manage it with "
                "kubectl yourself.",
                label=MODEL_SERVER_LABEL,
                value=name,
                namespace=settings.namespace,
            )
        return found

    def get(self, name: str, settings: KubernetesServerAccess) -> ServerState:
        check_name(name)
        kube = self._client(settings)
        return self._with_waiting_reason(kube, self._state(kube, name, settings), settings)

    def list(
        self, settings: KubernetesServerAccess, limit: int | None = None, cursor: str | None = None
    ) -> Page[ServerState]:
        """Two requests a page (not a GET per server): one LIST of the suite's
        Deployments, read in chunks with only the page kept, and one of the page's own
        Services (`server in (a,b)`), so neither what a page holds nor what it is sent
        of Services grows with the namespace."""
        kube = self._client(settings)
        query = {"labelSelector": f"{MANAGED_SELECTOR},{MODEL_SERVER_LABEL}"}
        chunks = kube.chunks(kind_path("Deployment", settings.namespace), query)
        ours = (d for chunk in chunks for d in _ours_only(chunk))
        page, more, last = keyset_stream(ours, _name_key, limit, cursor, _key_of_name)
        names = ",".join(sorted(d["metadata"]["name"] for d in page))
        mine = {"labelSelector": f"{MANAGED_SELECTOR},{MODEL_SERVER_LABEL} in ({names})"}
        services = {
            s["metadata"]["name"]: s
            for s in _ours_only(
                kube.items(kind_path("Service", settings.namespace), mine) if page else []
            )
        }
        described = [
            self._describe(kube, d, settings, services.get(d["metadata"]["name"])) for d in page
        ]
        return Page(described, more, last)

    def delete(self, name: str, settings: KubernetesServerAccess) -> ServerState:
        """The Deployment (its pods with it) and the Service, once both are known to be
        this suite's; gone already is not an error. The DELETE names the uid it checked,
        so an object replaced in between is not deleted in its place."""
        check_name(name)
        kube = self._client(settings)
        found = self._ours(kube, name, settings, "delete it with kubectl if it should go")
        removed = []
        for kind, path in (
            ("Deployment", kind_path("Deployment", settings.namespace, name)),
            ("Service", kind_path("Service", settings.namespace, name)),
        ):
            obj = found[kind]
            if obj is None:
                continue
            status, _ = kube.request(
                "DELETE",
                path,
                query={"propagationPolicy": "Foreground"},
                body=_preconditions(obj),
                missing_ok=(404,),
            )
            if status < 300:
                removed.append(kind)
        message = f"Deleted {' and '.join(removed)}." if removed else "Nothing to delete."
        return ServerState(name=name, target=self.name, status="deleted", message=message)

    def scale(self, name: str, replicas: int, settings: KubernetesServerSettings) -> ServerState:
        check_name(name)
        if not 0 <= replicas <= 64:
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"replicas={replicas} is outside 0..64.",
                "Pass replicas between 0 and 64.",
                {"problems": [{"field": "replicas", "problem": "out of range"}]},
            )
        kube = self._client(settings)
        deployment = self._ours(
            kube, name, settings, "scale only servers deploy_model_server made"
        )["Deployment"]
        if deployment is None:
            return self._state(kube, name, settings)  # raises NOT_FOUND with its hint
        # The resourceVersion it was checked at: a changed object is a 409, not scaled.
        version = (deployment.get("metadata") or {}).get("resourceVersion")
        body: dict[str, Any] = {"spec": {"replicas": replicas}}
        if version:
            body["metadata"] = {"resourceVersion": version}
        patched = kube.json(
            "PATCH",
            kind_path("Deployment", settings.namespace, name),
            body=body,
            content_type="application/merge-patch+json",
            missing_ok=(404,),
        )
        if patched is None:
            return self._state(kube, name, settings)
        return self._describe(kube, patched, settings, _service(kube, patched, settings))


def _has_api_key(deployment: dict[str, Any]) -> bool:
    """Whether the server's container takes VLLM_API_KEY (api_key_secret)."""
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return any(
        e.get("name") == "VLLM_API_KEY"
        for c in spec.get("containers") or []
        for e in c.get("env") or []
    )


def _api_key(kube: KubeJson, settings: KubernetesServerSettings) -> str | None:
    """The server's API key, read from its Secret for the smoke request only (never
    logged, never in a result); None without api_key_secret or a readable key."""
    if not settings.api_key_secret:
        return None
    secret = kube.get_or_none(kind_path("Secret", settings.namespace, settings.api_key_secret))
    encoded = ((secret or {}).get("data") or {}).get("token")
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded).decode().strip() or None
    except (ValueError, UnicodeDecodeError):
        return None


def _preconditions(obj: dict[str, Any]) -> dict[str, Any] | None:
    """DeleteOptions that delete only this very object (its uid), when it has one."""
    uid = (obj.get("metadata") or {}).get("uid")
    if not uid:
        return None
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}


def _service_port(service: dict[str, Any]) -> int:
    """The port the Service serves on (what deploy set; get is not told it)."""
    ports = (service.get("spec") or {}).get("ports") or [{}]
    return int(ports[0].get("port") or DEFAULT_PORT)


def _access(settings: KubernetesServerAccess) -> dict[str, Any]:
    """The settings a follow-up tool call needs to reach the same cluster and namespace."""
    return {"target": "kubernetes", "namespace": settings.namespace, **settings.access_args()}


def _require_s3_identity(kube: KubeJson, deployment: dict[str, Any]) -> None:
    """An s3:// model's fetch runs as the suite's S3 ServiceAccount: without it the pod is
    never created (or its init container gets AccessDenied), so it is refused here."""
    account = deployment["spec"]["template"]["spec"].get("serviceAccountName")
    if account != S3_SERVICE_ACCOUNT:
        return
    namespace = deployment["metadata"]["namespace"]
    if kube.get_or_none(kind_path("ServiceAccount", namespace, account)) is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"The s3:// model is fetched as ServiceAccount {namespace}/{account}, which does "
            "not exist.",
            f"{MAKE_IT}; or pass service_account (one that can read the bucket).",
            {"namespace": namespace, "service_account": account},
        )


def _name_key(deployment: dict[str, Any]) -> Key:
    return (str(deployment["metadata"]["name"]),)


def _key_of_name(name: str) -> Key:
    """A server's key is its name: the page after one needs no lookup (after one deleted
    meanwhile, the list goes on from its name)."""
    return (name,)


def _ours_only(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The suite's model-server objects (filtered here too: the selector is the API
    server's optimisation, not a promise)."""
    return [
        o
        for o in found
        if why_not_ours_kube(o) is None
        and ((o.get("metadata") or {}).get("labels") or {}).get(MODEL_SERVER_LABEL)
    ]


def _service(
    kube: KubeJson, deployment: dict[str, Any], settings: KubernetesServerAccess
) -> dict[str, Any] | None:
    """The Service of one server (a list reads them all in one request instead)."""
    return kube.get_or_none(
        kind_path("Service", settings.namespace, deployment["metadata"]["name"])
    )
