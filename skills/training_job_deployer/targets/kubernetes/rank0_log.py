"""Rank 0's log followed from its end over a job's polls, with each poll's reads and
memory bounded whatever the log's size (Rank0Log)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from skills.shared.progress import Progress
from skills.training_job_deployer.trainer_log import LogFollower

LOG_TAIL_LINES = 40
# Rank 0's log is read from its end (Rank0Log): each poll at most these lines and bytes,
# and a long log's head once.
LOG_POLL_LINES = 2000
LOG_POLL_BYTES = 4 * 2**20
LOG_HEAD_BYTES = 1 * 2**20


class Rank0Log:
    """Rank 0's log followed from its end, over the polls: each poll reads at most the
    last LOG_POLL_LINES lines (LOG_POLL_BYTES), and only the lines past the last ones
    already parsed go to the follower; the first read of a log longer than that also
    reads its head (the trainer's start line, the first loss) and skips the middle. So a
    poll's requests and memory stay bounded whatever the log's size. A container that
    restarted has a new log: it is followed from its start again."""

    def __init__(self) -> None:
        self.follower = LogFollower()
        self.last: deque[str] = deque(maxlen=3)  # the last complete lines parsed
        self.restarts: int | None = None
        self.recent: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self.reported = -1  # steps last reported: one report per poll that adds steps

    def read(
        self,
        head: Callable[[], str],
        end: Callable[[], str],
        restarts: int,
        progress: Progress | None,
        final: bool,
    ) -> None:
        """One poll's read: `head` gives the log's first LOG_HEAD_BYTES, `end` its last
        LOG_POLL_LINES lines (fewer if they are longer than LOG_POLL_BYTES)."""
        if restarts != self.restarts:
            self.follower, self.restarts = LogFollower(), restarts
            self.last.clear()
        anchor = "".join(self.last)
        if not anchor:
            start = head()
            if len(start.encode()) < LOG_HEAD_BYTES:  # the whole log
                self._take(start, final)
            else:
                complete = start[: start.rfind("\n") + 1]
                self.follower.feed(complete.encode())
                self.follower.skip(at_line_start=True)  # tailLines gives whole lines
                self._take(end(), final)
        else:
            text = end()
            at = text.rfind(anchor)
            if at < 0:  # more lines came than a poll reads: the gap is skipped
                self.follower.skip(at_line_start=True)
                self._take(text, final)
            else:
                self._take(text[at + len(anchor) :], final)
        metrics = self.follower.metrics
        if progress is not None and metrics.steps != self.reported:
            self.reported = metrics.steps
            progress.report(metrics.steps, metrics.max_steps, metrics.progress_message())

    def _take(self, text: str, final: bool) -> None:
        """Parse the complete lines of `text` (the partial last one too when `final`)."""
        cut = len(text) if final else text.rfind("\n") + 1
        complete = text[:cut]
        if not complete:
            return
        self.follower.feed(complete.encode(), None, final)
        lines = complete.splitlines(keepends=True)
        self.recent.extend(line.rstrip("\n") for line in lines)
        self.last.extend(line for line in lines if line.endswith("\n"))

    def tail(self) -> str:
        """The last LOG_TAIL_LINES lines parsed."""
        return "\n".join(self.recent)
