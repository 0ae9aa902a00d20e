"""Issue 48 item 4: a job's curves from its step lines, thinned to a bounded size, the
summary's one-line sparkline, and the chart's library kept off the tools' import path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from skills.training_job_deployer.loss_curve import Thinned, curves_of, sparkline
from skills.training_job_deployer.trainer_log import RunMetrics

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], ""), ([3.0], "▁"), ([4.0, 3.0, 2.0, 1.0], "█▆▃▁"), ([2.0, 2.0], "▁▁"),
     ([float(i // 2) for i in range(64)], "▁▁▁▂▂▂▂▃▃▃▃▃▄▄▄▄▅▅▅▅▆▆▆▆▆▇▇▇▇███")],
    ids=["no values", "one value", "falling", "flat", "two values a character"],
)  # fmt: skip
def test_a_sparkline_draws_low_to_high_in_at_most_its_width(values, expected):
    assert sparkline(values) == expected


def test_a_long_run_is_thinned_uniformly_and_keeps_its_first_and_recent_steps():
    series = Thinned(limit=100)
    for step in range(1, 100_001):
        series.add(step, 1.0 / step)
    steps = [s for s, _ in series.points]
    assert len(steps) <= 100 and steps[0] == 1 and steps[-1] > 98_000
    gaps = {b - a for a, b in zip(steps, steps[1:], strict=False)}
    assert len(gaps) == 1  # evenly spaced


def test_a_restarted_attempt_that_logs_earlier_steps_again_replaces_them():
    first = [{"event": "step", "step": s, "loss": 5.0 - s} for s in (1, 2, 3, 4)]
    again = [{"event": "step", "step": s, "loss": 9.0} for s in (3, 4)]
    curves = curves_of("j", [*first, {"event": "start"}, *again])
    assert curves.loss.points == [(1, 4.0), (2, 3.0), (3, 9.0), (4, 9.0)]


def test_eval_lines_and_the_extra_fields_become_their_own_curves():
    curves = curves_of("j", [
        {"event": "step", "step": 2, "loss": 3.0, "lr": 1e-4, "tokens_per_s": 50.0,
         "gpu_util_mean": None},
        {"event": "eval", "step": 2, "loss": 3.5},
    ])  # fmt: skip
    assert curves.eval_loss.points == [(2, 3.5)]
    assert curves.extra["lr"].points == [(2, 1e-4)] and not curves.extra["gpu_util_mean"].points


def test_the_job_state_carries_the_sparkline_of_its_losses():
    metrics = RunMetrics()
    for step, loss in enumerate([6.0, 5.0, 4.0, 3.5], start=1):
        metrics.add({"event": "step", "step": step, "loss": loss})
    assert metrics.state_fields()["loss_sparkline"] == "█▅▂▁"


def test_the_tools_import_no_plotting_library_until_a_plot_is_asked_for():
    code = (
        "import sys, commands.get_training_job, mcp_server.server\n"
        "print(sorted(m for m in ('matplotlib', 'PIL') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert out.strip() == "[]"
