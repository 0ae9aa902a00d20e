"""start_codebuild's env: references typed for CodeBuild, secret names never plain."""

from __future__ import annotations

import pytest

from skills.codebuild_pipeline.env_overrides import environment_overrides
from skills.shared.errors import ToolFailure


def test_references_get_their_codebuild_types_and_plain_values_stay_plain():
    assert environment_overrides({"B_TOKEN": "ssm:/ci/b", "A": "1",
                                  "C_KEY": "secretsmanager:arn:aws:secretsmanager:x"}) == [
        {"name": "A", "value": "1", "type": "PLAINTEXT"},
        {"name": "B_TOKEN", "value": "/ci/b", "type": "PARAMETER_STORE"},
        {"name": "C_KEY", "value": "arn:aws:secretsmanager:x", "type": "SECRETS_MANAGER"},
    ]  # fmt: skip


@pytest.mark.parametrize("env", [{"GITHUB_TOKEN": "ghp_plain"}, {"WANDB_API_KEY": "k" * 40},
                                 {"X_TOKEN": "ssm:"}])  # fmt: skip
def test_plain_secret_names_and_empty_references_are_refused(env):
    with pytest.raises(ToolFailure) as caught:
        environment_overrides(env)
    assert caught.value.code == "invalid_input" and "ssm:/" in caught.value.hint
    value = next(iter(env.values()))
    assert value == "ssm:" or value not in str(caught.value.to_dict())
