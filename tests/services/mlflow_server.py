"""A real MLflow tracking server on loopback (`mlflow server`, the [dev] extra): a SQLite
backend store and a file artifact root under the test's own directory, a free port.
Tests point MLFLOW_TRACKING_URI at it, as a user points it at the team's server, and
read runs back through MLflow's REST API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.services._common import log_tail, start_listening, wait_until

START_TIMEOUT_S = 120.0  # a cold import of mlflow's server under a loaded machine


class MlflowServer:
    def __init__(self, uri: str) -> None:
        self.uri = uri

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        url = f"{self.uri}/api/2.0/mlflow/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.uri}/api/2.0/mlflow/{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        """The runs of the experiment named `experiment` (REST: get-by-name, runs/search)."""
        exp = self.get("experiments/get-by-name", experiment_name=experiment)["experiment"]
        found = self.post("runs/search", {"experiment_ids": [exp["experiment_id"]]})
        return found.get("runs", [])

    def history(self, run_id: str, key: str) -> list[dict[str, Any]]:
        """Every value logged for metric `key`, in step order."""
        found = self.get("metrics/get-history", run_id=run_id, metric_key=key, max_results=25000)
        return sorted(found.get("metrics", []), key=lambda m: m["step"])


@contextmanager
def mlflow_server(workdir: Path) -> Iterator[MlflowServer]:
    """`mlflow server` for the block; its process group ended after."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "mlflow.log"
    out = log.open("wb")

    def command(port: int) -> list[str]:
        return [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}",
            "--default-artifact-root", (workdir / "artifacts").as_uri(),
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        ]  # fmt: skip

    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    process, port = start_listening(
        command, timeout=START_TIMEOUT_S, stdout=out, stderr=subprocess.STDOUT, env=env,
        start_new_session=True,  # its uvicorn worker in the same group, ended with it
    )  # fmt: skip
    server = MlflowServer(f"http://127.0.0.1:{port}")
    try:
        wait_until(
            lambda: bool(server.get("experiments/search", max_results=1) is not None),
            timeout=START_TIMEOUT_S, what="mlflow server", process=process, log=log,
        )  # fmt: skip
        yield server
    except BaseException:
        print(log_tail(log, 60))
        raise
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # the group this fixture started
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)
        out.close()
