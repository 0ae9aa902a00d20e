"""The model names a job may ask for: every target's dry run renders trainer flags the
trainer's own parser accepts (another document's names and spellings included), or the
job is refused before anything is planned, naming the valid names. The tools' copy of
the names (model_names.py) is pinned to the trainer's presets."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from commands.deploy_training_job import deploy_training_job
from skills.shared.errors import ToolFailure
from skills.training_job_deployer import job_spec, model_names
from skills.training_job_deployer.targets.by_name import TARGETS
from trainer import config, presets
from trainer.config_loader import load_config


def test_the_tools_names_are_the_trainers():
    assert set(model_names.PRESET_SHAPES) == set(presets.PRESETS)


def _settings(target: str, tmp_path: Any) -> dict[str, Any]:
    if target == "kubernetes":  # the engine named: a dry run then asks no cluster (the
        # session's kmock may serve either engine by the time this runs)
        return {"target": target, "image_uri": "registry.example/trainer:1", "engine": "pytorchjob"}
    return {"target": target, "runs_dir": str(tmp_path / "runs")}


def trainer_args(plan: Any) -> list[str]:
    """The trainer's flags in a plan, as each target renders them."""
    if plan.target == "local":
        argv = plan.argv
    elif plan.target == "kubernetes":
        (replica, *_) = plan.manifest["spec"]["pytorchReplicaSpecs"].values()
        argv = replica["template"]["spec"]["containers"][0]["command"]
    else:  # slurm: the srun line's continuation lines, up to the `&`
        script = plan.script.replace("\\\n", " ")
        (line,) = [ln for ln in script.splitlines() if " -m trainer " in ln]
        argv = shlex.split(line.rstrip("& "))
    return argv[argv.index("trainer") + 1 :]


NAMES = [*presets.PRESETS, *presets.ALIASES]


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("model_type", NAMES)
def test_every_targets_dry_run_is_accepted_by_the_trainer(target, model_type, tmp_path):
    result = deploy_training_job(
        job_name="names", model_type=model_type, sharding_strategy="shard",
        max_grad_norm=0.5, dry_run=True, **_settings(target, tmp_path),
    )  # fmt: skip
    args = trainer_args(result.plan)
    cfg = load_config(args, environ={})  # raises ConfigError if the trainer refuses
    preset = presets.preset_name(model_type)
    assert cfg.model_type == preset and args[args.index("--model_type") + 1] == preset
    assert cfg.parallel.sharding_strategy == "full" and cfg.optim.max_grad_norm == 0.5
    # The plan names the model and its size.
    assert result.model is not None and result.model.startswith(f"{preset} (")
    assert "parameters" in result.model
    rows = dict(result.summary_rows())
    assert rows["model"] == result.model


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("model_type", ["gpt_neox", "mistral", "no_such_model"])
def test_a_name_the_trainer_has_no_preset_for_is_refused_before_planning(
    target, model_type, tmp_path
):
    with pytest.raises(ToolFailure) as refused:
        deploy_training_job(
            job_name="names", model_type=model_type, dry_run=True, **_settings(target, tmp_path)
        )
    assert refused.value.code == "invalid_input"
    said = refused.value.message + str(refused.value.details)
    assert "llama_v3_8b" in said and "llama_v3" in said  # the valid names
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    with pytest.raises(config.ConfigError, match="choose one of"):  # the trainer agrees
        load_config(["--model_type", model_type], environ={})


@pytest.mark.parametrize(
    ("spelling", "ours"),
    [("shard", "full"), ("FULL_SHARD", "full"), ("SHARD_GRAD_OP", "shard_grad_op"),
     ("HYBRID_SHARD", "hybrid"), ("NO_SHARD", "no_shard"), ("hybrid", "hybrid")],
)  # fmt: skip
def test_sharding_strategy_takes_the_documents_spellings(spelling, ours):
    assert job_spec.JobSpec(job_name="s", sharding_strategy=spelling).sharding_strategy == ours
    cfg = load_config(["--sharding_strategy", spelling], environ={})
    assert cfg.parallel.sharding_strategy == ours


@pytest.mark.parametrize("target", list(TARGETS))
def test_the_default_toy_model_is_named_loudly_on_a_cluster(target, tmp_path):
    result = deploy_training_job(job_name="toy", dry_run=True, **_settings(target, tmp_path))
    toy = [w for w in result.warnings if "toy" in w]
    if TARGETS[target].on_cluster:
        assert toy and "'debug'" in toy[0] and "parameters" in toy[0]
        assert ("warning", toy[0]) in result.summary_rows()
    else:  # this host: the default is the quick CPU run a newcomer wants
        assert not toy
    sized = deploy_training_job(
        job_name="big", model_type="llama_v3_1b", dry_run=True, **_settings(target, tmp_path)
    )
    assert not [w for w in sized.warnings if "toy" in w]
    assert sized.model == "llama_v3_1b (1.24B parameters)"


def trainer_env(plan: Any) -> dict[str, str]:
    """The plain variables a plan gives the trainer, as each target renders them."""
    if plan.target == "local":
        return dict(plan.env)
    if plan.target == "kubernetes":
        (replica, *_) = plan.manifest["spec"]["pytorchReplicaSpecs"].values()
        env = replica["template"]["spec"]["containers"][0]["env"]
        return {e["name"]: e["value"] for e in env if "value" in e}
    exports = [ln.removeprefix("export ") for ln in plan.script.splitlines()]
    return dict(shlex.split(e)[0].split("=", 1) for e in exports if e.startswith("TRAINER_"))


@pytest.mark.parametrize("target", list(TARGETS))
def test_knobs_without_a_parameter_reach_the_trainer_on_every_target(target, tmp_path):
    knobs = {"TRAINER_WARMUP_STEPS": "3", "TRAINER_WEIGHT_DECAY": "0.01"}
    result = deploy_training_job(
        job_name="knobs", env=knobs, max_grad_norm=0, dry_run=True, **_settings(target, tmp_path)
    )
    plan = result.plan
    cfg = load_config(trainer_args(plan), environ=trainer_env(plan))
    assert (cfg.optim.warmup_steps, cfg.optim.weight_decay) == (3, 0.01)
    assert cfg.optim.max_grad_norm == 0.0
