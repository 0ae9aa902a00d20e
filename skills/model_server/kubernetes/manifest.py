"""(name, model, settings) -> the Deployment and Service that run vLLM's OpenAI server,
rendered with jinja2 from templates/ and validated offline against the Kubernetes
OpenAPI schema (kubernetes-validate, strict) before anything reaches a cluster.

Where the model comes from decides the pod's shape (model_source):
  s3://bucket/prefix   an init container copies it (`aws s3 sync`) into an emptyDir
                       bounded by the GPUs' memory (weights vLLM can serve fit in it);
                       with model_claim, into a cache directory on the claim instead, so
                       a restarted or second pod syncs only what changed;
  model_claim=<pvc>    the claim (e.g. FSx for Lustre) is mounted read-only, model is
                       the path inside it;
  org/name             vLLM pulls it from the Hugging Face Hub into HF_HOME on a bounded
                       emptyDir, HF_TOKEN from the Secret named by hf_token_secret (only
                       the name is in the manifest).

The pod asks for the node's GPUs and most of its CPUs and memory (Burstable, not the
BestEffort pods evict first); the Deployment's progressDeadlineSeconds covers what its
startup probe allows plus the image pull and model copy, so a slow load is not reported
failed while the probe still waits; a liveness probe restarts a server that hangs."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from skills.catalog.instances import host_resources, instance_spec
from skills.kube.efa import GPU_TOLERATIONS
from skills.kube.gpu_nodes import GPU_RESOURCE, INSTANCE_TYPE_LABELS
from skills.kube.identity import S3_SERVICE_ACCOUNT
from skills.model_server.kubernetes.settings import KubernetesServerSettings
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.ownership import MODEL_SERVER_LABEL, managed_labels
from skills.shared.templates import yaml_templates

HERE = Path(__file__).resolve().parent  # resolved at import: a later chdir must not move it
MODEL_MOUNT = "/models"
S3_MODEL_DIR = f"{MODEL_MOUNT}/model"
SHM_SIZE = "16Gi"  # NCCL between tensor-parallel workers needs more than Docker's 64 MiB
MODEL_ANNOTATION = "fsdp-eks/model"  # the model as the user gave it (get reports it)
PROBE_PERIOD_S = 10
STARTUP_CHECKS = 180  # x 10 s: loading large weights takes minutes before /health answers
# Before the startup probe's first check: pulling the vLLM image (~10 GB) and copying the
# model in. The rollout's deadline is both: a load within the probe's budget is not failed.
PULL_AND_FETCH_S = 20 * 60
PROGRESS_DEADLINE_S = STARTUP_CHECKS * PROBE_PERIOD_S + PULL_AND_FETCH_S
# Of a node's vCPUs and memory, what the server's pod requests: the rest is the kubelet's
# reserve and the node's daemonsets (device plugins, CNI, CSI).
HOST_SHARE = 0.8
CACHE_DIR = ".fsdp-eks-cache"  # on a model claim: s3:// models synced here, by bucket/prefix
# The schema version objects are checked against: the newest EKS standard-support version
# as of this writing (kubernetes-validate ships 1.25-1.37).
K8S_SCHEMA_VERSION = "1.33"
# A Service name is a DNS-1035 label.
SERVER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\x00-\x1f]*)?$")
# An internal load balancer (AWS Load Balancer Controller): reachable from the VPC only;
# vLLM answers without authentication, so nothing here faces the internet by default.
LB_ANNOTATIONS = {
    "service.beta.kubernetes.io/aws-load-balancer-type": "external",
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
}
SCHEME_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-scheme"
# The dry run's (and the confirmation's) warning for expose=internet.
INTERNET_WARNING = (
    "expose=internet: a public load balancer, and vLLM's OpenAI API has no authentication "
    "by default: anyone who finds the address can use the GPUs. Set api_key_secret (a "
    "Secret whose key 'token' vLLM then requires as a Bearer API key) and source_ranges "
    "(your CIDRs: the Service's loadBalancerSourceRanges)."
)


def lb_annotations(settings: KubernetesServerSettings) -> dict[str, str]:
    """The load balancer's annotations: internal, or internet-facing for expose=internet."""
    scheme = "internet-facing" if settings.expose == "internet" else "internal"
    return {**LB_ANNOTATIONS, SCHEME_ANNOTATION: scheme}


def exposure_warnings(settings: KubernetesServerSettings) -> list[str]:
    """What a plan says about who can reach the server (nothing for an internal one)."""
    if settings.expose != "internet":
        return []
    missing = [
        what
        for what, given in (
            ("api_key_secret", settings.api_key_secret),
            ("source_ranges", settings.source_ranges),
        )
        if not given
    ]
    if not missing:
        ranges = ", ".join(settings.source_ranges or [])
        return [
            f"expose=internet: a public load balancer admitting {ranges} only, /v1 behind "
            f"the API key in Secret {settings.api_key_secret}"
        ]
    return [INTERNET_WARNING + f" (missing: {', '.join(missing)})"]


Source = Literal["s3", "pvc", "hub"]


@dataclass(frozen=True)
class ModelSource:
    kind: Source
    served_path: str  # what vLLM is given: a path in the container or a Hub id
    claim: str | None = None
    fetch_command: tuple[str, ...] = ()
    cached: bool = False  # an s3:// model synced into a cache on the claim


def check_name(name: str) -> None:
    if not SERVER_NAME.match(name):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"name {name!r} is not a Kubernetes Service name.",
            "Use lowercase letters, digits and '-', starting with a letter, at most 63.",
            {"problems": [{"field": "name", "problem": "not a DNS-1035 label"}]},
        )


def model_source(model: str, settings: KubernetesServerSettings) -> ModelSource:
    """Where the pods get the model; a path only this machine has is refused."""
    if model.startswith("s3://"):
        if not S3_URI.match(model) or ".." in model.split("/"):
            raise _bad_model(model, "not an s3://bucket/prefix URI")
        uri = model.rstrip("/") + "/"
        target = S3_MODEL_DIR
        if settings.model_claim:  # cached on the claim, by bucket and prefix
            target = posixpath.join(MODEL_MOUNT, CACHE_DIR, uri.removeprefix("s3://").rstrip("/"))
        command = ("aws", "s3", "sync", "--no-progress", "--only-show-errors", uri, target)
        return ModelSource(
            "s3", target, settings.model_claim, command, cached=settings.model_claim is not None
        )
    if settings.model_claim:
        inner = posixpath.normpath("/" + model.lstrip("/"))
        if ".." in model.split("/"):
            raise _bad_model(model, "with model_claim, model is a path inside the claim")
        return ModelSource(
            "pvc", MODEL_MOUNT + (inner if inner != "/" else ""), settings.model_claim
        )
    if HUB_ID.match(model) and not Path(model).exists():
        return ModelSource("hub", model)
    raise _bad_model(
        model,
        "the cluster cannot read a path on this machine; give s3://..., a Hub id (org/name), "
        "or model_claim with the path inside the claim",
    )


def _bad_model(model: str, why: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"model {model!r}: {why}.",
        "Export the model to S3 (the trainer's export does), put it on a PVC/FSx claim and "
        "pass model_claim, or pass a Hugging Face Hub id.",
        {"problems": [{"field": "model", "problem": why}]},
    )


def gpus_per_replica(instance_type: str) -> int:
    """All GPUs of the instance per replica: vLLM shards the model over them."""
    return instance_spec(instance_type).gpus


def host_requests(instance_type: str) -> dict[str, str]:
    """cpu/memory the server's pod requests: HOST_SHARE of the node (catalogue)."""
    vcpus, memory_gib = host_resources(instance_type)
    return {"cpu": str(int(vcpus * HOST_SHARE)), "memory": f"{int(memory_gib * HOST_SHARE)}Gi"}


def model_dir_limit(instance_type: str) -> str:
    """An emptyDir's bound for downloaded weights: the replica's GPU memory (weights vLLM
    can serve over those GPUs are no larger)."""
    spec = instance_spec(instance_type)
    return f"{spec.gpus * spec.gib_per_gpu}Gi"


def vllm_command(name: str, source: ModelSource, settings: KubernetesServerSettings) -> list[str]:
    """The server's argv (never a shell string). --served-model-name is the server's name,
    so clients ask for `model: <name>` whatever the weights are called."""
    command = [
        "vllm",
        "serve",
        source.served_path,
        "--served-model-name",
        name,
        "--host",
        "0.0.0.0",  # noqa: S104 (inside the pod; the Service decides who reaches it)
        "--port",
        str(settings.served_port),
        "--tensor-parallel-size",
        str(gpus_per_replica(settings.instance_type)),
        "--dtype",
        settings.dtype,
    ]
    if settings.max_model_len:
        command += ["--max-model-len", str(settings.max_model_len)]
    return command


def labels(name: str) -> dict[str, str]:
    return managed_labels(**{MODEL_SERVER_LABEL: name})


def render(name: str, model: str, settings: KubernetesServerSettings) -> list[dict[str, Any]]:
    """[Deployment, Service] as the API receives them, each validated against the schema."""
    check_name(name)
    source = model_source(model, settings)
    gpus = gpus_per_replica(settings.instance_type)
    values = {
        "name": name,
        "namespace": settings.namespace,
        "labels": labels(name),
        "selector": {MODEL_SERVER_LABEL: name},
        "port": settings.served_port,
    }
    deployment = (
        yaml_templates(HERE / "templates")
        .get_template("deployment.yaml.j2")
        .render(
            **values,
            annotations={MODEL_ANNOTATION: model},
            replicas=settings.replicas,
            # An s3:// model is fetched as the suite's S3 identity (manage_eks_cluster
            # action=storage binds it to a role for the bucket) unless one is named.
            service_account=settings.service_account
            or (S3_SERVICE_ACCOUNT if source.kind == "s3" else None),
            node_selector={INSTANCE_TYPE_LABELS[0]: instance_spec(settings.instance_type).name},
            tolerations=[GPU_TOLERATIONS[0]],  # the GPU taint; vLLM needs no EFA
            shm_size=SHM_SIZE,
            source=source.kind,
            claim=source.claim,
            fetch_image=settings.s3_fetch_image,
            fetch_command=list(source.fetch_command),
            model_mount=MODEL_MOUNT,
            image=settings.image,
            command=vllm_command(name, source, settings),
            hf_secret=settings.hf_token_secret,
            api_key_secret=settings.api_key_secret,
            limits={GPU_RESOURCE: str(gpus)},  # a quantity, as the API returns it
            requests={GPU_RESOURCE: str(gpus), **host_requests(settings.instance_type)},
            model_dir_limit=model_dir_limit(settings.instance_type),
            cached=source.cached,
            hf_home=f"{MODEL_MOUNT}/hf" if source.kind == "hub" else "/tmp/hf",  # noqa: S108
            probe_period=PROBE_PERIOD_S,
            startup_checks=STARTUP_CHECKS,
            progress_deadline=PROGRESS_DEADLINE_S,
        )
    )
    service = (
        yaml_templates(HERE / "templates")
        .get_template("service.yaml.j2")
        .render(
            **values,
            service_type=settings.service_type,
            lb_annotations=lb_annotations(settings),
            source_ranges=settings.source_ranges,
        )
    )
    objects = [yaml.safe_load(deployment), yaml.safe_load(service)]
    for obj in objects:
        validate(obj)
    return objects


def validate(obj: dict[str, Any]) -> None:
    """`obj` against the Kubernetes OpenAPI schema, offline and strict (unknown fields
    fail): a template bug is caught here, not by the API server mid-deploy."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S_SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(p) for p in exc.path)
        problem = {"path": path, "problem": str(exc.message)[:300]}
        raise ToolFailure(
            ErrorCode.MANIFEST_INVALID,
            f"The rendered {obj.get('kind')} does not match the Kubernetes schema: {problem}",
            "This is a bug in the model-server templates; report it with the details.",
            {"problems": [problem], "kubernetes_version": K8S_SCHEMA_VERSION},
        ) from None
