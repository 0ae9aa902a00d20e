"""setup_codebuild against a local moto server: first-run and second-run API calls and
wall time, and how many of the second run's calls are writes (should be 0).

    .venv/bin/python benchmarks/codebuild_setup.py
Calls are counted with a botocore `before-call` hook on the session the tool uses.
It is one size, run once: `--quick` (what the test suite runs) is the same run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skills.codebuild_pipeline import apply as apply_module  # noqa: E402
from skills.codebuild_pipeline import plan  # noqa: E402
from tests.services.moto import moto_server  # noqa: E402

READS = ("Get", "Describe", "List", "BatchGet")


def main() -> None:
    calls: list[str] = []
    original = apply_module.aws_session

    def counted_session(*a, **kw):
        session = original(*a, **kw)
        session.events.register("before-call", lambda model, **_: calls.append(model.name))
        return session

    apply_module.aws_session = counted_session
    with moto_server() as aws:
        for name in aws.unset:
            os.environ.pop(name, None)
        os.environ.update(aws.env)
        settings = plan.Settings(project_name="bench", region="us-east-1",
                                 ecr_repository="bench-repo",
                                 source_url="https://github.com/acme/trainer")  # fmt: skip
        for label in ("first", "second"):
            calls.clear()
            start = time.perf_counter()
            result = apply_module.apply(settings, dry_run=False)
            took = time.perf_counter() - start
            writes = [c for c in calls if not c.startswith(READS)]
            print(f"{label} run: {result.status}, {len(calls)} API calls, {len(writes)} writes, "
                  f"{took * 1000:.0f} ms  {writes}")  # fmt: skip


if __name__ == "__main__":
    main()
