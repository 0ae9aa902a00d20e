"""start_codebuild's env: references typed for CodeBuild, secret names never plain."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from skills.codebuild_pipeline.env_overrides import environment_overrides
from skills.shared.errors import ToolFailure


def test_references_get_their_codebuild_types_and_plain_values_stay_plain():
    assert environment_overrides({"B_TOKEN": "ssm:/ci/b", "DOCKERFILE": "Dockerfile.gpu",
                                  "C_KEY": "secretsmanager:arn:aws:secretsmanager:x"}) == [
        {"name": "B_TOKEN", "value": "/ci/b", "type": "PARAMETER_STORE"},
        {"name": "C_KEY", "value": "arn:aws:secretsmanager:x", "type": "SECRETS_MANAGER"},
        {"name": "DOCKERFILE", "value": "Dockerfile.gpu", "type": "PLAINTEXT"},
    ]  # fmt: skip


@pytest.mark.parametrize("env", [{"GITHUB_TOKEN": "ghp_plain"}, {"WANDB_API_KEY": "k" * 40},
                                 {"X_TOKEN": "ssm:"}])  # fmt: skip
def test_plain_secret_names_and_empty_references_are_refused(env):
    with pytest.raises(ToolFailure) as caught:
        environment_overrides(env)
    assert caught.value.code == "invalid_input" and "ssm:/" in caught.value.hint
    value = next(iter(env.values()))
    assert value == "ssm:" or value not in str(caught.value.to_dict())


# What a tool argument may change (issue 45): a build's env cannot send the build's
# credentials elsewhere (the ECR token to another registry host, AWS calls to another
# endpoint, TLS through another CA) nor load code (interpreter and loader settings).
@pytest.mark.parametrize("name", [
    "FSDP_EKS_ECR_REGISTRY_HOST", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_ECR", "HTTPS_PROXY",
    "https_proxy", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "PIP_INDEX_URL", "PYTHONPATH",
    "LD_PRELOAD", "BASH_ENV", "FSDP_EKS_BASE_MIRROR", "DOCKER_HOST", "A",
])  # fmt: skip
def test_a_build_env_names_only_the_buildspec_knobs(name):
    with pytest.raises(ToolFailure) as caught:
        environment_overrides({name: "https://attacker.example", "TEST_LEVEL": "full"})
    error = caught.value
    assert error.code == "invalid_input" and name in error.message
    assert "TEST_LEVEL" not in error.message and "attacker" not in str(error.to_dict())
    assert error.details["problems"] == [{"field": f"env.{name}", "problem": "not allowed"}]


@pytest.mark.parametrize("name", ["AWS_SESSION_TOKEN", "AWS_SECRET_ACCESS_KEY", "CODEBUILD_KEY"])
def test_the_platforms_own_names_are_refused_even_as_secret_references(name):
    with pytest.raises(ToolFailure):
        environment_overrides({name: "ssm:/attacker/param"})


# Read from the shipped buildspec itself, not from the allow-list under test.
BUILDSPEC = yaml.safe_load((Path(__file__).parents[2] / "buildspec.yml").read_text())


@pytest.mark.parametrize("name", sorted(BUILDSPEC["env"]["variables"]))
def test_every_variable_the_buildspec_declares_is_accepted(name):
    assert environment_overrides({name: "x"}) == [{"name": name, "value": "x", "type": "PLAINTEXT"}]
