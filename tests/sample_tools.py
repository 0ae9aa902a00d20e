"""Small tools registered exactly like the real ones, for tests of the contract: an
operation tool that counts slowly (a stand-in for a build or a push), so detaching,
progress, failure and cancellation can be made on purpose. Importable by an
operation's worker process as `tests.sample_tools`."""

from __future__ import annotations

import time
from pathlib import Path

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.progress import Cancelled, Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import tool


class Counted(ToolResult):
    counted: int


@tool(read_only=True, operation=True)
def count_slowly(
    *,
    steps: int = 3,
    step_s: float = 0.1,
    fail_at: int | None = None,
    marker_dir: str | None = None,
    label: str | None = None,
    progress: Progress | None = None,
) -> Counted:
    """Counts to `steps`, one step every `step_s` seconds, reporting each (with `label`,
    which also goes to `<marker_dir>/label`: proof of the value the work was given)."""
    done = 0
    if label is not None and marker_dir:
        Path(marker_dir, "label").write_text(label)
    try:
        for done in range(1, steps + 1):
            time.sleep(step_s)
            if done == fail_at:
                raise ToolFailure(ErrorCode.SERVICE_ERROR, f"failed at {done}", "Count less.")
            progress.report(done, steps, f"counted {done}" + (f" {label}" if label else ""))
    except Cancelled:
        if marker_dir:  # proof that the cancel reached the work itself
            Path(marker_dir, "cancelled-at").write_text(str(done))
        raise
    return Counted(counted=done)


class Verdict(ToolResult):
    verdict: str

    def failure(self) -> ToolFailure | None:
        """A result whose outcome is a failure (as a failed build's is)."""
        if self.verdict == "good":
            return None
        step = NextStep(tool="judge", arguments={"verdict": "good"}, why="judge again")
        return ToolFailure(ErrorCode.SERVICE_ERROR, "judged bad", "Judge again.", None, step)


@tool(read_only=False, operation=True)
def judge(*, verdict: str = "good", progress: Progress | None = None) -> Verdict:
    """Returns its verdict: a result that failed when it is not "good"."""
    return Verdict(verdict=verdict)
