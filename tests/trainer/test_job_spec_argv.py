"""A job option is one edit: every JobSpec trainer flag, rendered by `trainer_argv`,
parses in the trainer's own parser to the value the JobSpec holds.

The JobSpec below sets EVERY field to a non-default value; a field added to JobSpec
that this test does not set fails `test_every_jobspec_field_is_set`, and a trainer
flag the trainer does not accept fails the parse."""

from __future__ import annotations

import json

import pytest

from skills.training_job_deployer.job_spec import JobSpec, trainer_argv, trainer_flags
from trainer.config import flag_table, get_path
from trainer.config_loader import load_config

# Fields of the launcher, not the trainer (torchrun/scheduler/ownership).
LAUNCHER_FIELDS = {
    "job_name", "num_nodes", "gpu_per_node", "max_restarts", "adopt_checkpoint_dir", "env",
    "torchrun_path",
}  # fmt: skip


def every_field(tmp_path) -> dict[str, object]:
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    config = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
              "intermediate_size": 96, "max_position_embeddings": 256}  # fmt: skip
    (hf_dir / "config.json").write_text(json.dumps(config))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\n")
    (tmp_path / "tokenizer.json").write_text("{}")  # the trainer checks it exists
    return {
        "job_name": "every-field",
        "num_nodes": 2,
        "gpu_per_node": 4,
        "model_type": "debug_large",
        "model_name_or_path": str(hf_dir),
        "max_steps": 17,
        "train_batch_size": 3,
        "seq_len": 96,
        "dataset": str(corpus),
        "dataset_config_name": "wikitext-2-raw-v1",
        "tokenizer": str(tmp_path / "tokenizer.json"),
        "train_on": "assistant",
        "learning_rate": 0.0007,
        "min_lr_ratio": 0.25,
        "max_grad_norm": 0.25,
        "grad_accum_steps": 2,
        "sharding_strategy": "hybrid",
        "activation_checkpointing": "selective",
        "reduce_dtype": "bfloat16",
        "cpu_offload": True,
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "checkpoint_freq": 5,
        "keep_last": 3,
        "async_save": True,
        "validation_freq": 4,
        "seed": 42,
        "max_restarts": 3,
        "adopt_checkpoint_dir": True,
        "env": {"NCCL_DEBUG": "INFO"},
        "torchrun_path": "/opt/conda/bin/torchrun",
    }


def test_every_jobspec_field_is_set(tmp_path):
    unset = set(JobSpec.model_fields) - set(every_field(tmp_path))
    assert not unset, f"set these JobSpec fields in every_field(): {sorted(unset)}"


def test_every_jobspec_field_is_a_trainer_flag_or_the_launchers():
    assert set(JobSpec.model_fields) == set(trainer_flags()) | LAUNCHER_FIELDS
    assert not set(trainer_flags()) & LAUNCHER_FIELDS


@pytest.mark.parametrize("spelling", ["fields", "defaults"])
def test_trainer_argv_parses_in_the_trainers_parser_to_the_same_values(tmp_path, spelling):
    fields = every_field(tmp_path)
    spec = JobSpec(**fields) if spelling == "fields" else JobSpec(job_name="defaults")
    cfg = load_config(trainer_argv(spec), environ={})
    table = flag_table()
    for name in trainer_flags():
        assert name in table, f"JobSpec field {name!r} is not a trainer flag"
        value = getattr(spec, name)
        got = get_path(cfg, table[name].path)
        if value is None:  # left to the trainer: its default
            continue
        assert got == value, f"{name}: JobSpec {value!r} -> trainer {got!r}"
        assert type(got) is type(value), f"{name}: {type(value)} -> {type(got)}"


def test_min_lr_ratio_reaches_the_lr_schedule(tmp_path):
    import torch

    from trainer.build import build_lr_scheduler

    spec = JobSpec(job_name="floor", min_lr_ratio=0.0, max_steps=40)
    cfg = load_config(trainer_argv(spec), environ={})
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_lr_scheduler(optimizer, cfg)
    for _ in range(cfg.max_steps):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.0)  # the default floor is 0.1


@pytest.mark.parametrize(
    ("reduce_dtype", "expected"), [(None, "float32"), ("bfloat16", "bfloat16")]
)
def test_reduce_dtype_reaches_fsdps_mixed_precision_policy(reduce_dtype, expected):
    import torch

    from trainer.device import mixed_precision_policy

    spec = JobSpec(job_name="reduce", reduce_dtype=reduce_dtype)
    cfg = load_config(trainer_argv(spec), environ={})
    assert cfg.parallel.reduce_dtype == expected
    policy = mixed_precision_policy("cuda", True, cfg.parallel.reduce_dtype)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, getattr(torch, expected))
