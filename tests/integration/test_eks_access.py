"""Reaching EKS without the aws CLI, against moto (EKS, STS) and kmock: the token is a
presigned STS GetCallerIdentity URL signed over x-k8s-aws-id; the API client carries
it and renews it; an unknown cluster lists the region's clusters; the written
kubeconfig keeps other contexts, loads in the kubernetes client and reaches kmock
through its exec plugin (this module, no aws CLI)."""

from __future__ import annotations

import base64
import os
import urllib.parse

import boto3
import pytest
import yaml

from commands.manage_eks_cluster import manage_eks_cluster
from skills.kube.access import (
    TOKEN_PREFIX,
    TokenRefresher,
    ca_pem,
    eks_api_client,
    eks_token,
)
from skills.shared.errors import ToolFailure

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    """The cluster CA files and operation records land here, not in the home directory."""
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))


REGION = "us-east-1"


def make_cluster(name: str, nodegroups: dict[str, tuple[str, int, int, int]] | None = None):
    eks = boto3.client("eks", region_name=REGION)
    role = "arn:aws:iam::123456789012:role/eks"
    vpc = {"subnetIds": ["subnet-1", "subnet-2"]}
    try:
        eks.create_cluster(name=name, roleArn=role, resourcesVpcConfig=vpc, version="1.31")
    except eks.exceptions.ResourceInUseException:
        return eks
    for group, (itype, lo, want, hi) in (nodegroups or {}).items():
        eks.create_nodegroup(
            clusterName=name,
            nodegroupName=group,
            nodeRole=role,
            subnets=vpc["subnetIds"],
            instanceTypes=[itype],
            amiType="AL2_x86_64_GPU",
            capacityType="ON_DEMAND",
            scalingConfig={"minSize": lo, "desiredSize": want, "maxSize": hi},
        )
    return eks


def decode(token: str) -> urllib.parse.ParseResult:
    assert token.startswith(TOKEN_PREFIX)
    body = token[len(TOKEN_PREFIX) :]
    assert "=" not in body  # unpadded base64url, as EKS expects
    return urllib.parse.urlparse(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode())


def test_token_is_a_presigned_get_caller_identity_url_over_the_cluster_header(moto_server):
    url = decode(eks_token("train-a", boto3.Session(region_name=REGION)))
    query = urllib.parse.parse_qs(url.query)
    assert query["Action"] == ["GetCallerIdentity"] and query["Version"] == ["2011-06-15"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-SignedHeaders"] == ["host;x-k8s-aws-id"]
    assert query["X-Amz-Expires"] == ["60"]
    assert "/sts/aws4_request" in query["X-Amz-Credential"][0]
    # The signature is over the header: a token for another cluster differs.
    other = urllib.parse.parse_qs(
        decode(eks_token("train-b", boto3.Session(region_name=REGION))).query
    )
    assert other["X-Amz-Signature"] != query["X-Amz-Signature"]


def test_api_client_has_endpoint_and_bearer_token_and_renews_it(moto_server):
    make_cluster("access-a")
    endpoint = boto3.client("eks", region_name=REGION).describe_cluster(name="access-a")["cluster"][
        "endpoint"
    ]
    api = eks_api_client("access-a", region=REGION)
    config = api.configuration
    assert config.host == endpoint
    # The CA is held in memory, no file written (issue 45 finding 12: a read-only
    # server's reads wrote it under the state directory).
    assert config.ssl_ca_cert is None
    assert not os.path.exists(os.path.join(os.environ["FSDP_EKS_STATE_DIR"], "eks-ca"))
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    assert ca_pem(base64.b64encode(pem.encode()).decode()) == pem
    with pytest.raises(ValueError):  # moto's: random bytes, not PEM text (system CAs)
        ca_pem(base64.b64encode(b"\x8c\x00").decode())
    header = config.auth_settings()["BearerToken"]["value"]
    assert header.startswith(f"Bearer {TOKEN_PREFIX}")
    assert "x-k8s-aws-id" in urllib.parse.unquote(decode(header.split()[1]).query)

    now = [0.0]
    refresher = TokenRefresher("access-a", boto3.Session(region_name=REGION), clock=lambda: now[0])
    refresher(config)
    first = config.api_key["authorization"]
    now[0] = 9 * 60
    refresher(config)
    assert config.api_key["authorization"] == first and refresher.renewals == 0
    now[0] = 10 * 60 + 1  # before the 15-minute expiry
    refresher(config)
    assert refresher.renewals == 1


def test_unknown_cluster_lists_the_clusters_in_the_region(moto_server):
    make_cluster("known-1")
    with pytest.raises(ToolFailure) as failure:
        eks_api_client("nope", region=REGION)
    error = failure.value
    assert error.code == "not_found" and error.exit_status == 2
    assert "known-1" in error.message and "known-1" in error.details["clusters"]
    assert error.hint
    with pytest.raises(ToolFailure) as failure:  # the same through the tool
        manage_eks_cluster(action="describe", cluster_name="nope", region=REGION)
    assert failure.value.code == "not_found"


def test_no_credentials_is_a_typed_error(moto_server, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ToolFailure) as failure:
        eks_token("c", boto3.Session(region_name=REGION))
    assert failure.value.code == "no_credentials" and "AWS_PROFILE" in failure.value.hint
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(action="validate", cluster_name="c", region=REGION)
    assert failure.value.code == "no_credentials"


def test_kubeconfig_keeps_other_contexts_and_reaches_the_cluster_with_its_exec_token(
    moto_server, kube_api, tmp_path
):
    from kubernetes import client, config

    make_cluster("kc-a")
    path = tmp_path / "kube" / "config"
    path.parent.mkdir()
    path.write_text(kube_api.kubeconfig.read_text())  # an existing config: context "kmock"
    report = manage_eks_cluster(
        action="kubeconfig", cluster_name="kc-a", region=REGION, kubeconfig=str(path)
    )
    context = report.changes["context"]
    assert context.endswith(":cluster/kc-a") and report.changes["created"] is False
    written = yaml.safe_load(path.read_text())
    assert {c["name"] for c in written["contexts"]} == {"kmock", context}
    assert written["current-context"] == context
    user = next(u for u in written["users"] if u["name"] == context)["user"]
    assert user["exec"]["args"][:3] == ["-P", "-m", "skills.kube.access"]  # safe-path mode
    assert "token" not in user and TOKEN_PREFIX not in path.read_text()  # no secret on disk
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    # A second run updates in place: still two contexts.
    manage_eks_cluster(
        action="kubeconfig", cluster_name="kc-a", region=REGION, kubeconfig=str(path)
    )
    assert len(yaml.safe_load(path.read_text())["contexts"]) == 2

    # moto's endpoint is fake: point the cluster entry at kmock, as a proxy would be.
    cluster = next(c for c in written["clusters"] if c["name"] == context)["cluster"]
    cluster.pop("certificate-authority-data", None)
    cluster["server"] = kube_api.url
    path.write_text(yaml.safe_dump(written))
    configuration = client.Configuration()
    config.load_kube_config(str(path), context=context, client_configuration=configuration)
    header = configuration.auth_settings()["BearerToken"]["value"]
    assert header.startswith(f"Bearer {TOKEN_PREFIX}")  # the exec plugin ran and signed one
    kube_api.reset()
    kube_api.emulator.objects["v1/nodes", None, "n1"] = {"metadata": {"name": "n1"}}
    nodes = client.CoreV1Api(client.ApiClient(configuration)).list_node()
    assert [n.metadata.name for n in nodes.items] == ["n1"]
    # The other context still loads and works.
    other = client.Configuration()
    config.load_kube_config(str(path), context="kmock", client_configuration=other)
    assert other.host == kube_api.url


def test_the_kubernetes_target_reaches_an_eks_cluster_by_name(moto_server):
    """deploy_training_job and the job tools take cluster_name: the same EKS access,
    no kubeconfig. (moto's endpoint is fake, so the client is checked, not called.)"""
    from commands.get_training_job import get_training_job
    from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
    from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget

    make_cluster("by-name")
    settings = KubernetesSettings(cluster_name="by-name", region=REGION)
    api = KubernetesTarget(settings).client.api
    endpoint = boto3.client("eks", region_name=REGION).describe_cluster(name="by-name")
    assert api.configuration.host == endpoint["cluster"]["endpoint"]
    assert api.configuration.auth_settings()["BearerToken"]["value"].startswith(
        f"Bearer {TOKEN_PREFIX}"
    )
    with pytest.raises(ToolFailure) as failure:  # the target is implied by cluster_name
        get_training_job(job_name="j", cluster_name="not-there", region=REGION)
    assert failure.value.code == "not_found" and "by-name" in failure.value.message


def test_kubeconfig_writes_only_a_named_file_except_on_the_cli(moto_server, tmp_path, monkeypatch):
    """Over MCP or from Python the file is the caller's to name: the server's own
    $KUBECONFIG / ~/.kube/config is never the default. The CLI (it owns the machine)
    still defaults to $KUBECONFIG, as `aws eks update-kubeconfig` does."""
    from commands.manage_eks_cluster import cli

    make_cluster("kc-named")
    servers = tmp_path / "servers-kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(servers))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(action="kubeconfig", cluster_name="kc-named", region=REGION)
    assert failure.value.code == "invalid_input"
    assert failure.value.details["problems"][0]["field"] == "kubeconfig"
    assert not servers.exists() and not (tmp_path / "home").exists()

    status = cli(["--action", "kubeconfig", "--cluster_name", "kc-named", "--region", REGION])
    assert status == 0
    assert yaml.safe_load(servers.read_text())["current-context"].endswith(":cluster/kc-named")


def test_a_context_alias_that_exists_is_re_pointed_only_with_confirm(moto_server, tmp_path):
    make_cluster("kc-alias")
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "prod", "cluster": {"server": "https://prod.invalid"}}],
                "users": [{"name": "prod", "user": {"token": "x"}}],
                "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "prod"}}],
                "current-context": "prod",
            }
        )
    )
    before = path.read_text()
    common = {"action": "kubeconfig", "cluster_name": "kc-alias", "region": REGION}
    with pytest.raises(ToolFailure) as failure:
        manage_eks_cluster(**common, kubeconfig=str(path), context="prod")
    assert failure.value.code == "confirmation_required"
    assert failure.value.details["points_to"] == {"cluster": "prod", "user": "prod"}
    assert path.read_text() == before  # nothing written, current-context kept

    report = manage_eks_cluster(**common, kubeconfig=str(path), context="prod", confirm=True)
    written = yaml.safe_load(path.read_text())
    prod = next(c for c in written["contexts"] if c["name"] == "prod")["context"]
    assert report.changes["context"] == "prod" and prod["cluster"].endswith(":cluster/kc-alias")
    # The same alias for the same cluster again is an update, not a re-point: no confirm.
    manage_eks_cluster(**common, kubeconfig=str(path), context="prod")
