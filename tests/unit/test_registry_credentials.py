"""The one credential policy: a registry host gets only the credentials meant for it."""

from __future__ import annotations

from skills.cloud.registry_credentials import EcrToken, credentials_for, normalize_host

ECR_HOST = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
TOKEN = EcrToken(f"https://{ECR_HOST}", "AWS", "ecr-token-value")
ENV = {"REGISTRY_USERNAME": "me", "REGISTRY_PASSWORD": "registry-password",
       "REGISTRY_HOST": "mirror.example.com, localhost:5000"}  # fmt: skip


def test_the_ecr_token_goes_only_to_the_accounts_ecr_host():
    login = credentials_for(ECR_HOST, TOKEN, {})
    assert login is not None and (login.source, login.password) == ("ecr", "ecr-token-value")
    assert credentials_for(f"https://{ECR_HOST.upper()}/", TOKEN, {}).source == "ecr"
    for host in ("localhost:47123", "999999999999.dkr.ecr.us-east-1.amazonaws.com",
                 f"{ECR_HOST}.evil.example", "evil.example"):  # fmt: skip
        assert credentials_for(host, TOKEN, {}) is None, host


def test_the_mapped_ecr_data_plane_gets_the_token_from_the_users_setting():
    environ = {"FSDP_EKS_ECR_REGISTRY_HOST": "localhost:5001"}
    assert credentials_for("localhost:5001", TOKEN, environ).source == "ecr"
    assert credentials_for("localhost:5002", TOKEN, environ) is None


def test_registry_variables_go_only_to_the_hosts_registry_host_names():
    assert credentials_for("mirror.example.com", None, ENV).source == "environment"
    assert credentials_for("localhost:5000", None, ENV).username == "me"
    assert credentials_for("localhost:47123", None, ENV) is None
    assert credentials_for("docker.io", None, ENV) is None
    no_hosts = {k: v for k, v in ENV.items() if k != "REGISTRY_HOST"}
    assert credentials_for("mirror.example.com", None, no_hosts) is None


def test_the_ecr_token_is_not_offered_to_registry_host_names():
    assert credentials_for("mirror.example.com", TOKEN, ENV).source == "environment"


def test_docker_hub_names_are_one_host_and_passwords_stay_out_of_reprs():
    assert normalize_host("registry-1.docker.io") == normalize_host("index.docker.io")
    assert credentials_for("index.docker.io", None, {**ENV, "REGISTRY_HOST": "docker.io"})
    assert "registry-password" not in repr(credentials_for("mirror.example.com", None, ENV))
    assert "ecr-token-value" not in repr(TOKEN)
