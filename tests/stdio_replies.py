"""Read a stdio MCP server's JSON-RPC replies without losing any to buffering.

`select()` on a buffered pipe misses lines that arrived together: after one `readline()`
the rest sit in Python's buffer, select sees an empty pipe and the caller waits out its
deadline (a loaded CI run failed so). A reader thread hands every line to a queue instead.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time


def read_replies(server: subprocess.Popen, count: int, *, timeout: float) -> list[dict]:
    """Up to `count` JSON lines from the server's stdout, waiting at most `timeout` s in all."""
    assert server.stdout is not None
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        assert server.stdout is not None
        for line in iter(server.stdout.readline, b""):
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    got: list[dict] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and (left := deadline - time.monotonic()) > 0:
        try:
            got.append(json.loads(lines.get(timeout=left)))
        except queue.Empty:
            break
    return got
