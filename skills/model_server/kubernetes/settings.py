"""The Kubernetes model-server target's settings: how to reach the cluster (every model
server tool takes these: KubernetesServerAccess) and how to run vLLM there (deploy only:
KubernetesServerSettings)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from skills.kube.fields import (
    DNS_NAME,
    ClusterAccess,
)
from skills.model_server.base import ServerSettings
from skills.shared.confirm import Confirm

# vLLM's OpenAI-compatible server image: the newest vLLM release whose transformers loads
# what trainer/export.py writes (tests/trainer/test_export_for_vllm.py, with that
# transformers apart from ours). vLLM 0.34.0 on PyPI (Requires-Dist, read 2026-12-06 with
# `pip install --dry-run --report`): transformers>=5.16.1,<5.23.0, huggingface_hub>=2.0.0,
# torch==2.14.0; pip resolves it to transformers 5.22.2 (VLLM_TRANSFORMERS). vLLM pushes
# vllm/vllm-openai:v<release> for each release (v0.30.0-v0.32.0 are named in public
# manifests); the v0.34.0 tag itself was not seen in the stored corpora. v0.12.0 (Dec 2025)
# needed transformers < 5.
VLLM_IMAGE = "vllm/vllm-openai:v0.34.0"
VLLM_TRANSFORMERS = "5.22.2"
# The init container that copies an s3:// model into the pod (pinned aws CLI v2).
S3_FETCH_IMAGE = "amazon/aws-cli:2.22.0"
DEFAULT_PORT = 8000
IMAGE = r"^[^\s\x00-\x1f-][^\s\x00-\x1f]{0,511}$"


def _cidrs(ranges: list[str] | None) -> list[str] | None:
    """Each a network (10.0.0.0/8, 203.0.113.7/32), written as the API keeps it."""
    if ranges is None:
        return None
    if len(ranges) > 64:
        raise ValueError("at most 64 CIDRs")
    try:
        return [str(ipaddress.ip_network(r, strict=False)) for r in ranges]
    except ValueError as exc:
        raise ValueError(f"not a CIDR: {exc}") from None


class KubernetesServerAccess(ClusterAccess, ServerSettings):
    """vLLM's OpenAI server as a Deployment + Service on a Kubernetes cluster"""

    target: Literal["kubernetes"] = "kubernetes"


class KubernetesServerSettings(KubernetesServerAccess):
    """vLLM's OpenAI server as a Deployment + Service on a Kubernetes cluster"""

    instance_type: Annotated[
        str,
        Field(pattern=r"^[a-z0-9.-]{1,40}$", description="GPU instance type, e.g. g5.12xlarge."),
    ] = "g5.12xlarge"
    replicas: Annotated[int, Field(ge=0, le=64, description="Server replicas (pods).")] = 1
    image: Annotated[str, Field(pattern=IMAGE, description="vLLM OpenAI server image.")] = (
        VLLM_IMAGE
    )
    model_claim: Annotated[
        str | None,
        Field(max_length=253, pattern=DNS_NAME, description="PVC (e.g. FSx) holding model=path."),
    ] = None
    hf_token_secret: Annotated[
        str | None,
        Field(max_length=253, pattern=DNS_NAME, description="Secret (key 'token') with HF token."),
    ] = None
    service_account: Annotated[
        str | None,
        Field(max_length=253, pattern=DNS_NAME, description="Pod service account (S3 access)."),
    ] = None
    s3_fetch_image: Annotated[
        str, Field(pattern=IMAGE, description="Image of the s3:// fetch init container.")
    ] = S3_FETCH_IMAGE
    max_model_len: Annotated[
        int | None, Field(ge=16, le=10_000_000, description="Longest context vLLM serves (tokens).")
    ] = None
    dtype: Annotated[
        Literal["auto", "bfloat16", "float16", "float32"],
        Field(description="Weights dtype vLLM loads."),
    ] = "auto"
    # int | None as the local target's port is (one flat `port` input for both).
    port: Annotated[
        int | None, Field(ge=1024, le=65535, description="Server and Service port (8000).")
    ] = None
    service_type: Annotated[
        Literal["ClusterIP", "LoadBalancer"],
        Field(description="ClusterIP (via API proxy) or internal LoadBalancer."),
    ] = "ClusterIP"
    # The documents reach their endpoint from a laptop; vLLM's API has no auth by
    # default, so a public one is a choice made twice (expose, then confirm).
    expose: Annotated[
        Literal["internal", "internet"],
        Field(description="internet: public LoadBalancer (needs confirm)."),
    ] = "internal"
    confirm: Annotated[Confirm, Field(description="Confirms expose=internet.")] = False
    source_ranges: Annotated[
        list[str] | None,
        Field(description="CIDRs the LoadBalancer admits."),
        AfterValidator(_cidrs),
    ] = None
    api_key_secret: Annotated[
        str | None,
        Field(max_length=253, pattern=DNS_NAME, description="Secret (key 'token'): API key."),
    ] = None

    @model_validator(mode="before")
    @classmethod
    def _internet_is_a_load_balancer(cls, data: Any) -> Any:
        """expose=internet means a LoadBalancer Service: implied when service_type is left
        out; a ClusterIP asked for with it is a contradiction, refused."""
        if isinstance(data, dict) and data.get("expose") == "internet":
            if data.get("service_type", "LoadBalancer") != "LoadBalancer":
                raise ValueError("expose=internet needs service_type=LoadBalancer (or none)")
            data = {**data, "service_type": "LoadBalancer"}
        return data

    @property
    def served_port(self) -> int:
        return self.port or DEFAULT_PORT
