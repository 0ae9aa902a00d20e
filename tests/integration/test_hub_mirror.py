"""Issue 45 item 1, end to end: HF_TOKEN goes only to the hub the user's own environment
names. A local job (a real torchrun, gloo on CPU) inherits HF_ENDPOINT and HF_TOKEN from
the environment the tools run in and fetches a gated model from that mirror (a stand-in
of the hub's HTTP API on loopback); a call whose env names another endpoint is refused,
and that endpoint is never asked."""

from __future__ import annotations

import pytest

from commands.deploy_training_job import deploy_training_job
from skills.shared.errors import ToolFailure
from tests.services.hf_hub import HubRepo, hub_server
from tests.trainer.test_hub import dataset_files, model_files

pytestmark = pytest.mark.integration
TOKEN = "hf_" + "MirrorToken" * 3
GATED = "stand/gated-llama"
JOB = {"model_name_or_path": GATED, "tokenizer": GATED, "dataset": "stand/tiny-c4",
       "dataset_config_name": "en", "seq_len": 32, "train_batch_size": 2, "max_steps": 1,
       "gpu_per_node": 1, "validation_freq": 0}  # fmt: skip


def test_a_local_job_sends_the_token_to_the_users_mirror_and_nowhere_else(tmp_path, monkeypatch):
    repos = {
        GATED: HubRepo("model", model_files(tmp_path), gated=True),
        "stand/tiny-c4": HubRepo("dataset", dataset_files()),
    }
    with hub_server(repos, token=TOKEN) as mirror, hub_server(repos, token=TOKEN) as other:
        for name, value in mirror.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        runs = str(tmp_path / "runs")
        with pytest.raises(ToolFailure) as refused:
            deploy_training_job(job_name="other", runs_dir=runs, env={"HF_ENDPOINT": other.url},
                                **JOB)  # fmt: skip
        assert "HF_ENDPOINT" in refused.value.message and other.url not in refused.value.message
        result = deploy_training_job(job_name="mirror", runs_dir=runs, **JOB)
        assert result.status == "succeeded", result.log_tail
    assert mirror.file_gets(GATED, "model.safetensors") == 1  # the token opened the gate
    assert other.requests == []
