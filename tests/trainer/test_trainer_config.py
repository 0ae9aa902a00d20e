"""Flags -> TrainConfig, and bad input -> one JSON error line and exit code 2."""

from __future__ import annotations

import io
import json
import math

import pytest

from trainer.build import lr_factor
from trainer.config import ConfigError, TrainConfig
from trainer.config_loader import parse_args
from trainer.distributed import DistEnv
from trainer.metrics import MetricsEmitter, format_line
from trainer.presets import PRESETS


def test_defaults_fill_the_whole_tree_from_the_preset():
    cfg = parse_args([])
    assert isinstance(cfg, TrainConfig)
    assert cfg.model_type == "debug"
    assert cfg.model.dim == PRESETS["debug"]["dim"]
    assert cfg.parallel.sharding_strategy == "auto"  # hybrid on >1 node, else full
    assert cfg.data.dataset is None


def test_flat_flags_land_in_the_tree_in_either_spelling():
    cfg = parse_args(
        "--max_steps 7 --train-batch-size 3 --seq_len 64 --learning_rate 0.01 --warmup-steps 2"
        " --seed 5 --log_freq 2 --sharding_strategy no_shard --output_dir /tmp/x"
        " --model_type debug_large".split()
    )
    assert (cfg.max_steps, cfg.train_batch_size, cfg.seed) == (7, 3, 5)
    assert (cfg.data.seq_len, cfg.optim.learning_rate, cfg.optim.warmup_steps) == (64, 0.01, 2)
    assert cfg.metrics.log_freq == 2 and cfg.output_dir == "/tmp/x"
    assert cfg.parallel.sharding_strategy == "no_shard"
    assert cfg.model.dim == PRESETS["debug_large"]["dim"]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--bogus", "1"], "unrecognized arguments: --bogus"),
        (["--max", "5"], "unrecognized arguments: --max"),  # no prefix guessing
        (["--max_steps", "ten"], "invalid int value"),
        (["--max_steps", "0"], "max_steps must be >= 1"),
        (["--sharding_strategy", "zero9"], "unknown sharding_strategy 'zero9'"),
        (["--model_type", "no_such_preset"], "no_such_preset"),
        (["--seq_len", "4096"], "exceeds max_seq_len"),
        (["--dataset", "/no/such/file.txt"], "does not exist"),
    ],
)
def test_bad_flags_raise_config_error(argv, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_args(argv)


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigError) as info:
        parse_args(["--max_steps", "0", "--log_freq", "0"])
    assert "max_steps" in str(info.value) and "log_freq" in str(info.value)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--no_such_flag", "3"], "--no_such_flag"),
        (["--sharding_strategy", "bogus"], "sharding_strategy"),
    ],
)
def test_cli_bad_config_prints_one_error_line_and_exits_2(run_trainer, argv, fragment):
    proc, events = run_trainer(argv)
    assert proc.returncode == 2, proc.stderr
    assert events == [
        {
            "event": "error",
            "error_type": "ConfigError",
            "message": events[0]["message"],
            "retryable": False,
        }
    ]
    assert fragment in events[0]["message"]


def test_help_lists_every_flag_with_its_default(capsys):
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    flags = (
        "--model_type --max_steps --train_batch_size --seq_len --learning_rate --warmup_steps"
        " --seed --log_freq --sharding_strategy --output_dir --dataset"
    )
    for flag in flags.split():
        assert flag in out
    assert "(default: 200)" in out


def test_lr_warms_up_linearly_then_decays_by_cosine_to_10_percent():
    factors = [lr_factor(s, warmup_steps=4, max_steps=20) for s in range(20)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in zip(factors[3:], factors[4:], strict=False))
    assert factors[-1] >= 0.1 and math.isclose(lr_factor(20, 4, 20), 0.1)
    assert lr_factor(0, warmup_steps=0, max_steps=5) == 1.0


def test_metrics_lines_are_strict_json_and_only_rank_0_writes():
    assert json.loads(format_line("step", loss=float("nan"), step=3)) == {
        "event": "step",
        "loss": None,
        "step": 3,
    }
    out0, out1 = io.StringIO(), io.StringIO()
    MetricsEmitter(0, out0).emit("start", world_size=2)
    MetricsEmitter(1, out1).emit("start", world_size=2)
    assert out0.getvalue() == '{"event": "start", "world_size": 2}\n'
    assert out1.getvalue() == ""


def test_dist_env_plain_python_is_a_world_of_one():
    env = DistEnv.from_environ({})
    assert (env.rank, env.world_size, env.local_world_size, env.launched) == (0, 1, 1, False)
    env = DistEnv.from_environ(
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    )
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 4, 1, 2)
    assert env.launched
