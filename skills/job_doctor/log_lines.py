"""The lines of a pod's log the doctor reads: those holding a failure signature's
keyword (a bounded number per keyword, newest first; of a long log, its head and tail
only), and the log signature a line matches."""

from __future__ import annotations

from skills.job_doctor.failure_signatures import Signature, rows_for

HITS_PER_KEYWORD = 64  # occurrences of one keyword looked at per log, newest first
HEAD_BYTES = 256 * 1024  # a long log's head is scanned too (NCCL/EFA init lines)
MAX_SCAN = 8 * 1024 * 1024  # characters of one log scanned: its head and its tail
_LOG_ROWS = rows_for("log")
_KEYWORDS = tuple(dict.fromkeys(k for row in _LOG_ROWS for k in row.keywords))


def candidate_lines(text: str) -> tuple[list[tuple[int, str]], bool]:
    """(offset, line) of every line that holds a keyword: per keyword at most
    HITS_PER_KEYWORD, newest first; of a log over MAX_SCAN, its head and tail only."""
    cut = len(text) > MAX_SCAN
    windows = [(0, len(text))]
    if cut:
        windows = [(0, HEAD_BYTES), (len(text) - (MAX_SCAN - HEAD_BYTES), len(text))]
    starts: dict[int, str] = {}
    for low, high in windows:
        for keyword in _KEYWORDS:
            end, hits = high, 0
            while hits < HITS_PER_KEYWORD:
                at = text.rfind(keyword, low, end)
                if at < 0:
                    break
                start = text.rfind("\n", low, at) + 1 or low
                if start < low:
                    start = low
                hits += start not in starts
                if start not in starts:
                    stop = text.find("\n", at, high)
                    starts[start] = text[start : high if stop < 0 else stop]
                end = start  # the line before this one
                if end <= low:
                    break
    return sorted(starts.items()), cut


def match_log(line: str) -> Signature | None:
    for row in _LOG_ROWS:
        if any(k in line for k in row.keywords) and row.regex and row.regex.search(line):
            return row
    return None
