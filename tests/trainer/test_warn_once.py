"""The side channels' one warning (trainer/warn_once.py): progress posts and experiment
tracking say their first failure on stderr, count the rest, and never raise."""

from __future__ import annotations

import io

import pytest

from trainer.warn_once import REASON_LIMIT, FirstFailures

TAIL = "; training goes on, later failures are counted, not logged"


def test_each_source_says_its_first_failure_once_and_counts_the_others():
    log = io.StringIO()
    warnings = FirstFailures(log)
    for _ in range(3):
        warnings.failed("tracking: mlflow", "logging to http://m", OSError("refused"))
        warnings.failed("trainer status", "posting progress to https://t", TimeoutError("late"))
    assert log.getvalue().splitlines() == [
        f"tracking: mlflow: logging to http://m failed (OSError: refused){TAIL}",
        f"trainer status: posting progress to https://t failed (TimeoutError: late){TAIL}",
    ]
    assert warnings.counts == {"tracking: mlflow": 3, "trainer status": 3}


@pytest.mark.parametrize("length", [REASON_LIMIT - 1, REASON_LIMIT, REASON_LIMIT + 1])
def test_the_reason_is_cut_at_its_limit(length):
    log = io.StringIO()
    prefix = "ValueError: "
    FirstFailures(log).failed("s", "w", ValueError("x" * (length - len(prefix))))
    reason = log.getvalue().split(" failed (", 1)[1].split(")" + TAIL)[0]
    assert len(reason) == min(length, REASON_LIMIT)
