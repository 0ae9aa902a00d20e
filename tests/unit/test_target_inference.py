"""`target` left out: the settings given imply it, inside the flattening (no tool
branches on a target name)."""

from __future__ import annotations

import pytest

from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from skills.shared.errors import ToolFailure
from skills.shared.tooling import spec_of


def built(tool, **args):
    spec = spec_of(tool)
    return spec.call_kwargs(spec.parse({"job_name": "j", **args}))["target"]


def test_the_default_target_stays_local():
    assert built(deploy_training_job).target == "local"
    assert built(deploy_training_job, runs_dir="elsewhere").target == "local"


@pytest.mark.parametrize(
    "args",
    [{"kubeconfig": "/k"}, {"cluster_name": "c"}, {"namespace": "ml"},
     {"instance_type": "p5.48xlarge", "image_uri": "i:1"}],
)  # fmt: skip
def test_kubernetes_settings_imply_the_kubernetes_target(args):
    settings = built(deploy_training_job, **args)
    assert settings.target == "kubernetes"
    assert all(getattr(settings, k) == v for k, v in args.items())


def test_read_only_tools_take_only_the_access_settings():
    assert built(get_training_job, context="prod").target == "kubernetes"
    with pytest.raises(ToolFailure) as caught:
        built(get_training_job, instance_type="p5.48xlarge")
    assert caught.value.code == "invalid_input"


def test_settings_of_two_targets_or_the_wrong_one_are_refused():
    for args in ({"runs_dir": "r", "kubeconfig": "/k"}, {"target": "local", "kubeconfig": "/k"}):
        with pytest.raises(ToolFailure) as caught:
            built(deploy_training_job, **args)
        assert caught.value.code == "invalid_input"
        assert "does not apply" in caught.value.message
